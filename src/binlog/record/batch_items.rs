//! A batch frame's items (a record of kind 7 holds many), read back: each
//! is a record of its own kind, decoded as [`super::parse_payload`] does.

use super::{parse_payload, Record};

/// The items of a batch frame, every one already decoded once: reading
/// them again cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch<'a> {
    items: &'a [u8],
}

impl<'a> Batch<'a> {
    /// The frame whose items are `items`, if every item is a record of
    /// kind 1 to 6 or 8 and there is at least one.
    pub(super) fn checked(items: &'a [u8]) -> Option<Batch<'a>> {
        let mut rest = items;
        while !rest.is_empty() {
            rest = next_item(rest)?.1;
        }
        (!items.is_empty()).then_some(Batch { items })
    }

    /// The batch's records, in the order they were made.
    pub fn records(self) -> impl Iterator<Item = Record<'a>> {
        let mut items = self.items;
        std::iter::from_fn(move || {
            let (record, rest) = next_item(items)?;
            items = rest;
            Some(record)
        })
    }
}

/// The first item of a batch's `items`, and the rest; `None` at their end
/// or if the item is not a record of kind 1 to 6 or 8.
fn next_item(items: &[u8]) -> Option<(Record<'_>, &[u8])> {
    let len = u32::from_le_bytes(items.get(..4)?.try_into().ok()?) as usize;
    let payload = items.get(4..4usize.checked_add(len)?)?;
    let rest = items.get(4 + len..)?;
    // No frame holds a frame: refused before it is parsed, so that bytes
    // shaped like frames within frames cannot recurse.
    if payload.first() == Some(&7) {
        return None;
    }
    Some((parse_payload(payload)?, rest))
}
