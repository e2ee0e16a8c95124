//! A hash table that holds nothing but slot numbers: 4 bytes a bucket.
//!
//! A `HashMap<u64, u32>` spends 16 bytes a bucket (key, value, padding)
//! and a control byte, to hold what the caller already has: the key is
//! always in the slot the value names. So this table stores the slot
//! alone, the caller hashes (32 bits), and the caller says whether a slot
//! is the one sought (`is`), or what a slot's hash is (`hash_of`, to move
//! slots back when one is removed). Growing takes every slot and its hash
//! from the caller in the order the caller keeps them, so that it reads
//! memory in order rather than a slot at a time. Linear probing, at most
//! three quarters full, and a removal shifts the slots after it back, so
//! that there are no tombstones and a search stops at the first empty
//! bucket.
//! Where asking `is` costs a trip to memory (a name elsewhere), a table
//! made [`SlotTable::tagged`] keeps a byte of each slot's hash beside it,
//! 5 bytes a bucket, and asks only of the slots whose byte matches.
//!
//! It allocates only in [`SlotTable::make_room`], which claims room before
//! anything changes; `insert` and `remove` never allocate.

/// An empty bucket. Slot numbers are below it.
const EMPTY: u32 = u32::MAX;

/// Slot numbers, found by their hash. See the module documentation.
#[derive(Debug, Default)]
pub struct SlotTable {
    /// A power of two long, or empty.
    buckets: Vec<u32>,
    /// In a tagged table, the top byte of each bucket's slot's hash.
    tags: Vec<u8>,
    tagged: bool,
    len: usize,
}

/// The byte of a hash a tagged table keeps: the top one, which a table
/// under 2^24 buckets does not use to place it.
fn tag(hash: u32) -> u8 {
    (hash >> 24) as u8
}

impl SlotTable {
    /// A table that keeps a byte of each slot's hash (module documentation).
    pub fn tagged() -> SlotTable {
        SlotTable { tagged: true, ..SlotTable::default() }
    }

    /// The bucket where a search for `hash` starts.
    fn home(&self, hash: u32) -> usize {
        hash as usize & (self.buckets.len() - 1)
    }

    fn next(&self, bucket: usize) -> usize {
        (bucket + 1) & (self.buckets.len() - 1)
    }

    /// The slot with hash `hash` for which `is` says yes.
    pub fn find(&self, hash: u32, is: impl Fn(u32) -> bool) -> Option<u32> {
        let at = self.bucket_where(hash, is)?;
        Some(self.buckets[at])
    }

    /// Room for `more` slots beyond those held, so that inserting them
    /// allocates nothing. Growing places again every slot held, which
    /// `held` gives with its hash, and reads only if the table grows. False
    /// if the memory cannot be had; then nothing has changed.
    pub fn make_room(&mut self, more: usize, held: &mut dyn Iterator<Item = (u32, u32)>) -> bool {
        let wanted = self.len.saturating_add(more);
        let fits = |buckets: usize| buckets > 0 && wanted <= buckets / 4 * 3;
        if fits(self.buckets.len()) {
            return true;
        }
        let mut size = self.buckets.len().max(16);
        while !fits(size) {
            let Some(doubled) = size.checked_mul(2) else { return false };
            size = doubled;
        }
        let (mut grown, mut tags) = (Vec::new(), Vec::new());
        if grown.try_reserve_exact(size).is_err() || (self.tagged && tags.try_reserve_exact(size).is_err()) {
            return false;
        }
        grown.resize(size, EMPTY);
        if self.tagged {
            tags.resize(size, 0);
        }
        self.tags = tags;
        self.buckets = grown;
        let mut placed = 0;
        for (slot, hash) in held {
            self.place(hash, slot);
            placed += 1;
        }
        debug_assert_eq!(placed, self.len, "every slot held, and only those");
        true
    }

    fn place(&mut self, hash: u32, slot: u32) {
        let mut at = self.home(hash);
        while self.buckets[at] != EMPTY {
            at = self.next(at);
        }
        self.buckets[at] = slot;
        if let Some(kept) = self.tags.get_mut(at) {
            *kept = tag(hash);
        }
    }

    /// Adds `slot`, whose hash is `hash`, in the room made for it.
    pub fn insert(&mut self, hash: u32, slot: u32) {
        self.place(hash, slot);
        self.len += 1;
    }

    /// Takes `slot`, whose hash is `hash`, out; the slots after it that
    /// searches reach through its bucket move back (`hash_of`).
    pub fn remove(&mut self, hash: u32, slot: u32, hash_of: &dyn Fn(u32) -> u32) {
        let Some(mut hole) = self.bucket_where(hash, |found| found == slot) else { return };
        let mut at = self.next(hole);
        while self.buckets[at] != EMPTY {
            let moved = self.buckets[at];
            // It may move back into the hole if its search starts at or
            // before the hole (going round), so still passes through it.
            let home = self.home(hash_of(moved));
            let mask = self.buckets.len() - 1;
            if at.wrapping_sub(home) & mask >= at.wrapping_sub(hole) & mask {
                self.buckets[hole] = moved;
                if self.tagged {
                    self.tags[hole] = self.tags[at];
                }
                hole = at;
            }
            at = self.next(at);
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
    }

    /// The bucket of the slot with hash `hash` for which `is` says yes.
    fn bucket_where(&self, hash: u32, is: impl Fn(u32) -> bool) -> Option<usize> {
        if self.buckets.is_empty() {
            return None;
        }
        let (mut at, tag) = (self.home(hash), tag(hash));
        loop {
            match self.buckets[at] {
                EMPTY => return None,
                slot if self.tags.get(at).is_none_or(|&kept| kept == tag) && is(slot) => return Some(at),
                _ => at = self.next(at),
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hash that puts many slots in few buckets, so that removals must
    /// shift runs that wrap round the end of the table.
    fn crowded(slot: u32) -> u32 {
        slot % 5 * 7 + 13
    }

    #[test]
    fn every_slot_is_found_after_any_removals_even_in_long_wrapping_runs() {
        for table in [SlotTable::default(), SlotTable::tagged()] {
            insert_and_remove_at_random(table);
        }
    }

    fn insert_and_remove_at_random(mut table: SlotTable) {
        let mut held: Vec<u32> = Vec::new();
        // A fixed pseudo-random walk of inserts and removals.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..4000u32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if seed.is_multiple_of(3) && !held.is_empty() {
                let slot = held.swap_remove(seed as usize / 3 % held.len());
                table.remove(crowded(slot), slot, &crowded);
            } else {
                let mut all = held.iter().map(|&slot| (slot, crowded(slot)));
                assert!(table.make_room(1, &mut all));
                table.insert(crowded(step), step);
                held.push(step);
            }
            assert_eq!(table.len(), held.len());
            if step % 97 == 0 {
                for &slot in &held {
                    assert_eq!(table.find(crowded(slot), |s| s == slot), Some(slot), "step {step}");
                }
            }
        }
        for slot in held.clone() {
            table.remove(crowded(slot), slot, &crowded);
            assert_eq!(table.find(crowded(slot), |s| s == slot), None);
        }
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn room_is_made_before_anything_changes() {
        let mut table = SlotTable::default();
        assert_eq!(table.find(1, |_| true), None);
        assert!(table.make_room(12, &mut std::iter::empty()));
        let buckets = table.buckets.len();
        for slot in 0..12 {
            table.insert(slot, slot);
        }
        assert_eq!(table.buckets.len(), buckets, "no growth within the room made");
        assert!(
            !table.make_room(usize::MAX, &mut (0..12).map(|s| (s, s))),
            "room that cannot be had is refused"
        );
        assert_eq!(table.buckets.len(), buckets);
    }
}
