//! The intrusive-position binary heap: a min-heap of job ids that tells each
//! job where it lives, so any job can be removed in O(log n) without a search.
//!
//! This is beanstalkd's `heap.c` trick. Every time an entry moves, the heap
//! calls `set_pos(id, slot)`, and the engine writes `slot` into the job's
//! `heap_index`. Removing a job that sits in the middle of the heap (a delete,
//! a `kick-job`, a `reserve-job`) then starts from that slot instead of
//! scanning for it.
//!
//! The heap owns nothing but `(key, id)` pairs; it never looks at a job. The
//! key is copied in, so comparisons never chase a pointer, and ties on the key
//! are broken by the id: `(pri, id)` for ready jobs, `(due time, id)` for
//! delayed and reserved ones.

use crate::ids::JobId;

/// Below this many entries of storage a heap keeps what it has.
const MIN_CAPACITY: usize = 64;

/// A binary min-heap of `(key, id)` entries ordered by key, then id.
#[derive(Debug)]
pub struct Heap<K> {
    /// The ids are stored packed, 4 bytes smaller an entry; a first reading
    /// can take `PackedId` as `JobId` (see the end of this file).
    entries: Vec<(K, PackedId)>,
}

impl<K: Ord + Copy> Default for Heap<K> {
    fn default() -> Self {
        Heap::new()
    }
}

impl<K: Ord + Copy> Heap<K> {
    /// An empty heap; allocates nothing until the first push.
    pub const fn new() -> Self {
        Heap { entries: Vec::new() }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the heap holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The smallest entry, without removing it.
    pub fn peek(&self) -> Option<(K, JobId)> {
        self.entries.first().map(|&(key, id)| (key, id.get()))
    }

    /// Makes room for `entries` entries in all, so that pushes up to that
    /// many allocate nothing; false if the memory cannot be had. The engine
    /// claims room in every heap a job could enter before it accepts the
    /// job (see `Engine::start_put`), so moving a job between heaps never
    /// allocates, and never fails.
    pub fn try_make_room_for(&mut self, entries: usize) -> bool {
        let missing = entries.saturating_sub(self.entries.len());
        self.entries.capacity() >= entries || self.entries.try_reserve(missing).is_ok()
    }

    /// Entries it can hold without allocating.
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Gives back the room of jobs that are gone: halves the storage once
    /// three quarters of it is more than `entries` entries need, so that a
    /// heap that held a million jobs does not keep their room after they
    /// are deleted. Amortized O(1): a halving follows at least as many
    /// deletes as it copies entries.
    pub fn fit(&mut self, entries: usize) {
        let need = entries.max(self.entries.len()).max(MIN_CAPACITY);
        if self.entries.capacity() > need * 4 {
            let bytes = need * 2 * std::mem::size_of::<(K, PackedId)>();
            if bytes >= crate::sys::OWN_MAPPING_AT {
                // A block this big is a mapping of its own, which the
                // allocator shrinks in place (`sys/memory.rs`): no copy
                // under the lock, and no failure.
                self.entries.shrink_to(need * 2);
            } else {
                // Into a new block, if one can be had: `shrink_to` would
                // abort where the allocator has to move the entries and
                // cannot. At most 64 KiB are copied.
                let mut smaller = Vec::new();
                if smaller.try_reserve_exact(need * 2).is_ok() {
                    smaller.extend_from_slice(&self.entries);
                    self.entries = smaller;
                }
            }
        }
    }

    /// Adds an entry. `set_pos` is told the final slot of every entry that moved,
    /// the new one included.
    pub fn push(&mut self, key: K, id: JobId, set_pos: &mut impl FnMut(JobId, usize)) {
        self.entries.push((key, PackedId::new(id)));
        self.sift_up(self.entries.len() - 1, set_pos);
    }

    /// Removes and returns the smallest entry.
    pub fn pop(&mut self, set_pos: &mut impl FnMut(JobId, usize)) -> Option<(K, JobId)> {
        if self.entries.is_empty() {
            None
        } else {
            Some(self.remove(0, set_pos))
        }
    }

    /// Removes the entry at `slot` (as last reported through `set_pos`).
    ///
    /// # Panics
    /// If `slot` is out of range: the engine's `heap_index` bookkeeping is
    /// broken, which no client input can cause.
    pub fn remove(&mut self, slot: usize, set_pos: &mut impl FnMut(JobId, usize)) -> (K, JobId) {
        let removed = self.entries.swap_remove(slot);
        if slot < self.entries.len() {
            // The old last entry now sits in the hole: it may belong higher
            // or lower than where it landed.
            let slot = self.sift_up(slot, set_pos);
            self.sift_down(slot, set_pos);
        }
        (removed.0, removed.1.get())
    }

    /// The key of the entry at `slot`, if there is one.
    pub fn key_at(&self, slot: usize) -> Option<K> {
        self.entries.get(slot).map(|&(key, _)| key)
    }

    /// The id of the entry at `slot`.
    ///
    /// # Panics
    /// If `slot` is out of range.
    pub fn id_at(&self, slot: usize) -> JobId {
        self.entries[slot].1.get()
    }

    /// The ids of the last `n` entries of the heap's storage (no order):
    /// removing them moves no other entry.
    pub fn last_ids(&self, n: usize) -> impl Iterator<Item = JobId> + '_ {
        self.entries.iter().rev().take(n).map(|&(_, id)| id.get())
    }

    /// Iterates over the entries in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (K, JobId)> + '_ {
        self.entries.iter().map(|&(key, id)| (key, id.get()))
    }

    /// Appends the ids of the `k` smallest entries to `out`, smallest
    /// first, without changing the heap: a best-first walk down from the
    /// root, O(k log k). False, with `out` as it was, if the memory for
    /// the walk cannot be had.
    pub fn smallest(&self, k: usize, out: &mut Vec<JobId>) -> bool {
        use std::cmp::Reverse;
        let k = k.min(self.entries.len());
        let mut frontier = std::collections::BinaryHeap::new();
        // Each step takes one slot out and puts at most two in.
        if k == 0 || frontier.try_reserve(k + 1).is_err() || out.try_reserve(k).is_err() {
            return k == 0;
        }
        frontier.push(Reverse((self.entries[0], 0)));
        let mut taken = 0;
        while let Some(Reverse((entry, slot))) = frontier.pop() {
            out.push(entry.1.get());
            taken += 1;
            if taken == k {
                break;
            }
            for child in [2 * slot + 1, 2 * slot + 2] {
                if let Some(&entry) = self.entries.get(child) {
                    frontier.push(Reverse((entry, child)));
                }
            }
        }
        true
    }

    /// Moves the entry at `slot` up to where it belongs and returns that
    /// slot. The entries it passes each move down one level, into the hole
    /// it leaves; `set_pos` hears of each once, and of the entry once, at
    /// its final slot.
    fn sift_up(&mut self, mut slot: usize, set_pos: &mut impl FnMut(JobId, usize)) -> usize {
        let entry = self.entries[slot];
        while slot > 0 {
            let parent = (slot - 1) / 2;
            if self.entries[parent] <= entry {
                break;
            }
            self.move_to(parent, slot, set_pos);
            slot = parent;
        }
        self.entries[slot] = entry;
        set_pos(entry.1.get(), slot);
        slot
    }

    /// Moves the entry at `slot` down to where it belongs, as
    /// [`Heap::sift_up`] moves one up.
    fn sift_down(&mut self, mut slot: usize, set_pos: &mut impl FnMut(JobId, usize)) {
        let entry = self.entries[slot];
        loop {
            let left = 2 * slot + 1;
            let right = left + 1;
            let mut smallest = left;
            if right < self.entries.len() && self.entries[right] < self.entries[left] {
                smallest = right;
            }
            if left >= self.entries.len() || entry <= self.entries[smallest] {
                break;
            }
            self.move_to(smallest, slot, set_pos);
            slot = smallest;
        }
        self.entries[slot] = entry;
        set_pos(entry.1.get(), slot);
    }

    /// Copies the entry at `from` into slot `to`, and says so.
    fn move_to(&mut self, from: usize, to: usize, set_pos: &mut impl FnMut(JobId, usize)) {
        self.entries[to] = self.entries[from];
        set_pos(self.entries[to].1.get(), to);
    }
}

/// A job id kept as two 32-bit halves, high half first. It orders exactly as
/// the id does, but asks only 4-byte alignment: an entry with a 32-bit key
/// (the ready heap's priority) is 12 bytes instead of 16, 4 bytes saved per
/// ready job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct PackedId([u32; 2]);

impl PackedId {
    fn new(id: JobId) -> PackedId {
        PackedId([(id >> 32) as u32, id as u32])
    }

    fn get(self) -> JobId {
        (u64::from(self.0[0]) << 32) | u64::from(self.0[1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A heap plus the position table the engine would keep in its jobs.
    struct Tracked {
        heap: Heap<u32>,
        pos: HashMap<JobId, usize>,
    }

    impl Tracked {
        fn new() -> Self {
            Tracked { heap: Heap::new(), pos: HashMap::new() }
        }
        fn push(&mut self, key: u32, id: JobId) {
            let pos = &mut self.pos;
            self.heap.push(key, id, &mut |id, slot| {
                pos.insert(id, slot);
            });
        }
        fn pop(&mut self) -> Option<(u32, JobId)> {
            let pos = &mut self.pos;
            let top = self.heap.pop(&mut |id, slot| {
                pos.insert(id, slot);
            });
            if let Some((_, id)) = top {
                self.pos.remove(&id);
            }
            top
        }
        fn remove_id(&mut self, id: JobId) -> (u32, JobId) {
            let slot = self.pos.remove(&id).expect("tracked");
            let pos = &mut self.pos;
            self.heap.remove(slot, &mut |id, slot| {
                pos.insert(id, slot);
            })
        }
        fn check_positions(&self) {
            // The ready heap's entries are 12 bytes: see `PackedId`.
            assert_eq!(std::mem::size_of::<(u32, PackedId)>(), 12);
            assert!(PackedId::new(1 << 32) > PackedId::new(u32::MAX.into()));
            for (slot, (_, id)) in self.heap.iter().enumerate() {
                assert_eq!(self.pos[&id], slot, "position of job {id}");
            }
        }
    }

    #[test]
    fn pops_in_key_then_id_order() {
        let mut h = Tracked::new();
        for (key, id) in [(5, 1), (1, 2), (5, 0), (3, 4), (1, 3)] {
            h.push(key, id);
        }
        let order: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(order, [(1, 2), (1, 3), (3, 4), (5, 0), (5, 1)]);
    }

    #[test]
    fn removes_from_the_middle() {
        let mut h = Tracked::new();
        for id in 0..10 {
            h.push(10 - id as u32, id);
        }
        assert_eq!(h.remove_id(4), (6, 4));
        h.check_positions();
        let keys: Vec<_> = std::iter::from_fn(|| h.pop()).map(|e| e.0).collect();
        assert_eq!(keys, [1, 2, 3, 4, 5, 7, 8, 9, 10]);
    }

    /// A tiny deterministic generator, so the test needs no dependency.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn matches_a_sorted_model_under_random_operations() {
        for seed in 1..=20u64 {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut h = Tracked::new();
            let mut model: Vec<(u32, JobId)> = Vec::new();
            let mut next_id = 0;
            for _ in 0..2_000 {
                match xorshift(&mut rng) % 4 {
                    0 | 1 => {
                        let key = (xorshift(&mut rng) % 50) as u32;
                        h.push(key, next_id);
                        model.push((key, next_id));
                        next_id += 1;
                    }
                    2 => {
                        model.sort();
                        let expected = (!model.is_empty()).then(|| model.remove(0));
                        assert_eq!(h.pop(), expected, "seed {seed}");
                    }
                    _ => {
                        if !model.is_empty() {
                            let i = (xorshift(&mut rng) % model.len() as u64) as usize;
                            let victim = model.swap_remove(i);
                            assert_eq!(h.remove_id(victim.1), victim, "seed {seed}");
                        }
                    }
                }
                assert_eq!(h.heap.len(), model.len());
                model.sort();
                assert_eq!(h.heap.peek(), model.first().copied(), "seed {seed}");
                h.check_positions();
            }
        }
    }

    #[test]
    fn the_k_smallest_come_out_in_order_and_the_heap_is_unchanged() {
        let mut h = Heap::new();
        let mut model = Vec::new();
        for (n, key) in [50u32, 3, 77, 3, 12, 90, 1, 45, 8, 60, 2, 33].iter().enumerate() {
            h.push(*key, n as JobId + 1, &mut |_, _| {});
            model.push((*key, n as JobId + 1));
        }
        model.sort();
        let before: Vec<_> = h.iter().collect();
        for k in 0..=14 {
            let mut out = vec![999];
            assert!(h.smallest(k, &mut out));
            let expected: Vec<JobId> = model.iter().take(k).map(|&(_, id)| id).collect();
            assert_eq!(out[1..], expected[..], "k = {k}");
        }
        assert_eq!(h.iter().collect::<Vec<_>>(), before);
    }
}
