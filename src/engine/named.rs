//! Client-chosen names, each with a slot and a value: the index that
//! concurrency keys (`concurrency.rs`) and groups (`groups.rs`) share.
//! A name lives in one slot from the first job that names it to the last
//! one's going; a freed slot is reused. Names are hashed with std's keyed
//! SipHash, since clients choose them.
//!
//! Like every table of the engine it allocates only in [`Named::claim`],
//! before anything changes: [`Named::insert`] and [`Named::remove`] never
//! allocate.
//!
//! A name is stored once however many jobs name it, and counts against
//! `--max-job-memory` from its first job to its last one's going
//! ([`Named::memory`]): twice its length (its two copies) and
//! [`NAME_MEMORY_OVERHEAD`].

use std::collections::HashMap;

/// What a name in use costs beyond its two copies' bytes, as
/// `--max-job-memory` counts it: the allocator's header and rounding of
/// each copy, its slot (with a group's or a key's figures), its entry in
/// the index by name and in the lists of free and ended slots. The most
/// measured was 160 bytes (RSS of the release build filled to the cap
/// with a new group and after-group a job, 8- and 200-byte names, at
/// seven points of a doubling of the tables, 6k to 100k jobs; a key's
/// slot is smaller): rounded up.
pub const NAME_MEMORY_OVERHEAD: usize = 192;

/// Names in use, each with a value of type `T`, in numbered slots.
#[derive(Debug)]
pub struct Named<T> {
    by_name: HashMap<Box<[u8]>, u32>,
    slots: Vec<Option<(Box<[u8]>, T)>>,
    free: Vec<u32>,
    /// Bytes of the names in use, each counted once.
    named: usize,
}

impl<T> Default for Named<T> {
    fn default() -> Named<T> {
        Named { by_name: HashMap::new(), slots: Vec::new(), free: Vec::new(), named: 0 }
    }
}

/// A new name twice: for its slot, and for the index by name.
type Copies = (Box<[u8]>, Box<[u8]>);

/// The room one more name needs: the name's copies, if it is new.
#[derive(Debug)]
pub struct NameClaim(Option<Copies>);

impl<T> Named<T> {
    /// Claims room for `new` more names: what one command that inserts
    /// that many claims first, then each name's copies ([`Named::claim`]).
    pub fn make_room(&mut self, new: usize) -> bool {
        self.by_name.try_reserve(new).is_ok()
            && self.slots.try_reserve(new).is_ok()
            && self.free.try_reserve(self.slots.len() + new).is_ok()
    }

    /// Claims the room [`Named::insert`] of `name` needs, one more name;
    /// `None` without it.
    pub fn claim(&mut self, name: &[u8]) -> Option<NameClaim> {
        if !self.make_room(1) {
            return None;
        }
        if self.by_name.contains_key(name) {
            return Some(NameClaim(None));
        }
        let copy = || {
            let mut owned = Vec::new();
            owned.try_reserve_exact(name.len()).ok()?;
            owned.extend_from_slice(name);
            Some(owned.into_boxed_slice())
        };
        Some(NameClaim(Some((copy()?, copy()?))))
    }

    /// `name`'s slot, given a slot holding `new()` if it is new, in the
    /// room `claim` holds.
    pub fn insert(&mut self, name: &[u8], claim: NameClaim, new: impl FnOnce() -> T) -> u32 {
        if let Some(&slot) = self.by_name.get(name) {
            return slot;
        }
        let (owned, indexed) = claim.0.unwrap_or_default();
        let entry = Some((owned, new()));
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = entry;
                slot
            }
            None => {
                self.slots.push(entry);
                (self.slots.len() - 1) as u32
            }
        };
        self.named += name.len();
        self.by_name.insert(indexed, slot);
        slot
    }

    /// The slot of `name`, if it is in use.
    pub fn find(&self, name: &[u8]) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// The name in `slot`, if in use.
    pub fn name(&self, slot: u32) -> Option<&[u8]> {
        self.slots.get(slot as usize)?.as_ref().map(|(name, _)| &name[..])
    }

    /// The value in `slot`, if in use.
    pub fn get(&self, slot: u32) -> Option<&T> {
        self.slots.get(slot as usize)?.as_ref().map(|(_, value)| value)
    }

    /// The value in `slot`, if in use, to change.
    pub fn get_mut(&mut self, slot: u32) -> Option<&mut T> {
        self.slots.get_mut(slot as usize)?.as_mut().map(|(_, value)| value)
    }

    /// Frees `slot` and its name.
    pub fn remove(&mut self, slot: u32) {
        if let Some((name, _)) = self.slots.get_mut(slot as usize).and_then(Option::take) {
            self.named -= name.len();
            self.by_name.remove(&name);
            self.free.push(slot);
        }
    }

    /// What the names in use count against `--max-job-memory`: each once,
    /// twice its length and [`NAME_MEMORY_OVERHEAD`].
    pub fn memory(&self) -> u64 {
        (2 * self.named + self.by_name.len() * NAME_MEMORY_OVERHEAD) as u64
    }

    /// What `name` would add to [`Named::memory`]: nothing if it is in use.
    pub fn memory_of(&self, name: &[u8]) -> u64 {
        match self.by_name.contains_key(name) {
            true => 0,
            false => (2 * name.len() + NAME_MEMORY_OVERHEAD) as u64,
        }
    }

    /// How many slots there are, in use or free.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Every name in use and its value, for a test's picture.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &T)> {
        self.slots.iter().flatten().map(|(name, value)| (&name[..], value))
    }
}
