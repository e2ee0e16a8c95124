//! A change of many jobs as one record (kind 7 of `record.rs`): its
//! records, each without its checksum, under the frame's one. A write
//! torn anywhere inside fails the frame's checksum, so replay applies
//! all of the change or none of it, and no item can pass for a record of
//! its own when replay or `check` looks past damage for the next one.
//!
//! It builds and reads frames; which records a change takes is
//! `writing.rs`'s, and writing the frame `batch.rs`'s.

use super::record::{begin, finish, parse_payload, Record, RECORD_HEADER_LEN};

/// The items of a batch frame, every one already decoded once: reading
/// them again cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch<'a> {
    items: &'a [u8],
}

impl<'a> Batch<'a> {
    /// The frame whose items are `items`, if every item is a record of
    /// kind 1 to 6 and there is at least one.
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
/// or if the item is not a record of kind 1 to 6.
fn next_item(items: &[u8]) -> Option<(Record<'_>, &[u8])> {
    let len = u32::from_le_bytes(items.get(..4)?.try_into().ok()?) as usize;
    let payload = items.get(4..4usize.checked_add(len)?)?;
    let rest = items.get(4 + len..)?;
    match parse_payload(payload)? {
        Record::Batch(_) => None,
        record => Some((record, rest)),
    }
}

/// Starts a batch frame at the end of `out`; returns where it starts, for
/// [`finish_batch`].
pub fn begin_batch(out: &mut Vec<u8>) -> usize {
    begin(out, 7)
}

/// Appends one encoded record (as the `encode_*` functions write it) to the
/// batch being built in `out`: its length and payload, without its checksum,
/// which the frame's covers.
pub fn push_batch_item(out: &mut Vec<u8>, record: &[u8]) {
    out.extend_from_slice(&record[..4]);
    out.extend_from_slice(&record[RECORD_HEADER_LEN..]);
}

/// Ends the batch frame that starts at `start`: its length and checksum.
pub fn finish_batch(out: &mut [u8], start: usize) {
    finish(out, start);
}
