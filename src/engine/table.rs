//! The job table: the one owner of every job record, found by id.
//!
//! It owns the records and nothing else: it knows no state, queue, tube or
//! client, and it never frees memory on the hot path. Heaps and lists hold
//! ids; this table turns an id into its record.
//!
//! Two parts, both sized by the jobs alive now rather than by how many there
//! were at the busiest moment:
//!
//! - **The slab** holds the records in chunks of [`SLAB_CHUNK`] slots. It
//!   grows a chunk at a time, so growing never copies a record, never needs
//!   the old and the new storage at once, and never leaves half of a doubled
//!   table empty (as a hash table does right after it grows). A deleted
//!   job's slot goes on a free list and the next put reuses it.
//! - **The index** maps an id to its slot. Ids are handed out in sequence
//!   and jobs mostly die in roughly the order they were born, so the live
//!   ids sit in one window of the id space: the index is a deque of blocks of
//!   [`INDEX_BLOCK`] slot numbers (4 bytes per id), one block per run of
//!   ids, dropped when its last job goes. Ids that would stretch the window
//!   past [`MAX_INDEX_BLOCKS`] (a job that outlives billions of later ones,
//!   or a restored log with far-apart ids) go to a small hash map instead.
//!
//! [`JobTable::shrink`] gives memory back once most jobs are gone: it moves
//! the records of the slab's last chunks into free slots lower down (only
//! the index refers to a slot, so a move is one index update) and drops the
//! emptied chunks. It is O(jobs) and runs from the timer thread, never from a
//! command.

use std::collections::VecDeque;
use std::ops::Index;

use super::job::Job;
use super::IdMap;
use crate::ids::JobId;

/// Records per slab chunk: 4096 × 112 bytes is under half a megabyte, so the
/// last, partly used chunk is a small share of a big table, and a chunk is
/// still big enough to be its own mapping that the allocator hands straight
/// back to the system when it is freed.
pub const SLAB_CHUNK: usize = 4096;

/// Ids per index block: 16 KiB of slot numbers.
pub const INDEX_BLOCK: usize = 4096;

/// The widest the index's window of blocks may grow (8 MiB of block
/// pointers, four billion ids); ids outside go to the overflow map.
pub const MAX_INDEX_BLOCKS: u64 = 1 << 20;

/// An index entry for an id with no job.
const NO_SLOT: u32 = u32::MAX;

/// Every job, by id. See the module documentation.
#[derive(Debug, Default)]
pub struct JobTable {
    /// The records. Every chunk but the last holds exactly [`SLAB_CHUNK`]
    /// slots; a `None` slot is vacant and listed in `vacant`.
    slab: Vec<Vec<Option<Job>>>,
    /// Vacant slots, the most recently freed last.
    vacant: Vec<u32>,
    /// `index[k]` holds the slots of ids `(first_block + k) * INDEX_BLOCK`
    /// onwards; `None` for a block with no live job. Never starts or ends
    /// with `None`.
    index: VecDeque<Option<IndexBlock>>,
    first_block: u64,
    /// Slots of the ids that fell outside the index's window.
    overflow: IdMap<u32>,
    /// Live jobs.
    len: usize,
}

/// The slot numbers of [`INDEX_BLOCK`] consecutive ids.
#[derive(Debug)]
struct IndexBlock {
    slots: Box<[u32]>,
    /// How many of `slots` are in use; the block goes when this reaches 0.
    live: u32,
}

impl JobTable {
    /// Number of jobs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there is no job.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The job with id `id`, if it exists.
    pub fn get(&self, id: &JobId) -> Option<&Job> {
        let slot = self.slot_of(*id)?;
        self.slab[slot / SLAB_CHUNK][slot % SLAB_CHUNK].as_ref()
    }

    /// The job with id `id`, mutably, if it exists.
    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let slot = self.slot_of(*id)?;
        self.slab[slot / SLAB_CHUNK][slot % SLAB_CHUNK].as_mut()
    }

    /// Adds job `job` under id `id` (replacing any job with that id).
    pub fn insert(&mut self, id: JobId, job: Job) {
        if let Some(slot) = self.slot_of(id) {
            self.slab[slot / SLAB_CHUNK][slot % SLAB_CHUNK] = Some(job);
            return;
        }
        let slot = self.place(job);
        self.set_slot(id, slot);
        self.len += 1;
    }

    /// Takes job `id` out of the table.
    pub fn remove(&mut self, id: &JobId) -> Option<Job> {
        let slot = self.clear_slot(*id)? as usize;
        let job = self.slab[slot / SLAB_CHUNK][slot % SLAB_CHUNK].take();
        self.vacant.push(slot as u32);
        self.len -= 1;
        job
    }

    /// True when most of the slab is vacant, so that [`JobTable::shrink`]
    /// would give back at least half of it (and at least two chunks).
    pub fn wants_shrink(&self) -> bool {
        self.slab.len() >= 2 + 2 * self.len.div_ceil(SLAB_CHUNK)
    }

    /// Packs the records into as few chunks as they need and frees the rest,
    /// with the free list and the index trimmed to fit. O(jobs).
    pub fn shrink(&mut self) {
        let keep = self.len.div_ceil(SLAB_CHUNK);
        if keep < self.slab.len() {
            // Every chunk below `keep` is full-length, so its vacant slots
            // number at least the records living above it. A record does
            // not know its own id: the index says which id each slot holds.
            let limit = (keep * SLAB_CHUNK) as u32;
            let mut holes: Vec<u32> = self.vacant.iter().copied().filter(|&slot| slot < limit).collect();
            let moves: Vec<(JobId, u32)> = self.ids_and_slots().filter(|&(_, slot)| slot >= limit).collect();
            if moves.len() > holes.len() {
                return; // Cannot happen (see above); never lose a job.
            }
            for (id, from) in moves {
                let (from, to) = (from as usize, holes.pop().unwrap_or(NO_SLOT));
                let job = self.slab[from / SLAB_CHUNK][from % SLAB_CHUNK].take();
                self.slab[to as usize / SLAB_CHUNK][to as usize % SLAB_CHUNK] = job;
                self.repoint(id, to);
            }
            self.slab.truncate(keep);
            self.vacant = holes;
        }
        self.slab.shrink_to_fit();
        self.vacant.shrink_to_fit();
        self.index.shrink_to_fit();
        self.overflow.shrink_to_fit();
    }

    /// Every live id with its slot, in no particular order. O(ids in the
    /// index's window).
    fn ids_and_slots(&self) -> impl Iterator<Item = (JobId, u32)> + '_ {
        let blocks = self.index.iter().zip(self.first_block..);
        let dense = blocks.flat_map(|(block, number)| {
            let slots = block.as_ref().map_or(&[][..], |b| &b.slots[..]);
            let ids = (number * INDEX_BLOCK as u64)..;
            ids.zip(slots.iter().copied()).filter(|&(_, slot)| slot != NO_SLOT)
        });
        dense.chain(self.overflow.iter().map(|(&id, &slot)| (id, slot)))
    }

    /// Slots in the slab, vacant or not (for tests and the memory figures).
    pub fn capacity(&self) -> usize {
        self.slab.iter().map(Vec::len).sum()
    }

    /// Stores `job` in a vacant slot, or at the end of the slab, and
    /// returns the slot.
    fn place(&mut self, job: Job) -> u32 {
        if let Some(slot) = self.vacant.pop() {
            let at = slot as usize;
            self.slab[at / SLAB_CHUNK][at % SLAB_CHUNK] = Some(job);
            return slot;
        }
        if self.slab.last().is_none_or(|chunk| chunk.len() == SLAB_CHUNK) {
            // Reserved, not touched: the pages of a new chunk cost memory
            // only as records are written into them.
            self.slab.push(Vec::with_capacity(SLAB_CHUNK));
        }
        let chunks = self.slab.len();
        let last = &mut self.slab[chunks - 1];
        last.push(Some(job));
        ((chunks - 1) * SLAB_CHUNK + last.len() - 1) as u32
    }

    // ---------------------------------------------------------------
    // The index
    // ---------------------------------------------------------------

    /// Where id `id` falls in the index: `(block position, offset)`, if its
    /// block is inside the window.
    fn position(&self, id: JobId) -> Option<(usize, usize)> {
        let block = id / INDEX_BLOCK as u64;
        let k = block.checked_sub(self.first_block)?;
        ((k as usize) < self.index.len()).then_some((k as usize, (id % INDEX_BLOCK as u64) as usize))
    }

    fn slot_of(&self, id: JobId) -> Option<usize> {
        let slot = match self.position(id) {
            Some((k, offset)) => self.index[k].as_ref()?.slots[offset],
            None => *self.overflow.get(&id)?,
        };
        (slot != NO_SLOT).then_some(slot as usize)
    }

    /// Points id `id`, which has no slot yet, at `slot`.
    fn set_slot(&mut self, id: JobId, slot: u32) {
        if !self.widen_to(id / INDEX_BLOCK as u64) {
            self.overflow.insert(id, slot);
            return;
        }
        let Some((k, offset)) = self.position(id) else {
            self.overflow.insert(id, slot);
            return;
        };
        let block = self.index[k].get_or_insert_with(|| IndexBlock {
            slots: vec![NO_SLOT; INDEX_BLOCK].into_boxed_slice(),
            live: 0,
        });
        block.slots[offset] = slot;
        block.live += 1;
    }

    /// Points id `id`, which has a slot, at `slot` instead.
    fn repoint(&mut self, id: JobId, slot: u32) {
        match self.position(id) {
            Some((k, offset)) => {
                if let Some(block) = self.index[k].as_mut() {
                    block.slots[offset] = slot;
                }
            }
            None => {
                self.overflow.insert(id, slot);
            }
        }
    }

    /// Forgets id `id`'s slot and returns it.
    fn clear_slot(&mut self, id: JobId) -> Option<u32> {
        let Some((k, offset)) = self.position(id) else {
            return self.overflow.remove(&id);
        };
        let block = self.index[k].as_mut()?;
        let slot = std::mem::replace(&mut block.slots[offset], NO_SLOT);
        if slot == NO_SLOT {
            return None;
        }
        block.live -= 1;
        if block.live == 0 {
            self.index[k] = None;
            self.trim_window();
        }
        Some(slot)
    }

    /// Makes the window include block `block`, unless that would stretch
    /// it past [`MAX_INDEX_BLOCKS`]. True if `block` is in the window.
    fn widen_to(&mut self, block: u64) -> bool {
        if self.index.is_empty() {
            self.first_block = block;
            self.index.push_back(None);
            return true;
        }
        let end = self.first_block + self.index.len() as u64;
        let (low, high) = (self.first_block.min(block), end.max(block + 1));
        if high - low > MAX_INDEX_BLOCKS {
            return false;
        }
        while self.first_block > block {
            self.index.push_front(None);
            self.first_block -= 1;
        }
        while self.first_block + (self.index.len() as u64) <= block {
            self.index.push_back(None);
        }
        true
    }

    /// Drops empty blocks from both ends of the window.
    fn trim_window(&mut self) {
        while let Some(None) = self.index.front() {
            self.index.pop_front();
            self.first_block += 1;
        }
        while let Some(None) = self.index.back() {
            self.index.pop_back();
        }
    }
}

impl Index<&JobId> for JobTable {
    type Output = Job;

    /// # Panics
    /// If there is no job `id` (tests only use it on jobs they know exist).
    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("job exists")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Counters, State};
    use crate::time::Time;

    fn job(id: JobId) -> Job {
        Job {
            tube: 0,
            pri: 0,
            delay: 0,
            ttr: 1,
            state: State::Ready,
            counters: Counters::default(),
            created: Time::ZERO,
            deadline: Time::ZERO,
            reserved_by: crate::ids::ClientId::default(),
            heap_index: 0,
            links: Default::default(),
            file: 0,
            body: Box::from(&id.to_le_bytes()[..]),
        }
    }

    fn check(table: &JobTable, live: impl Iterator<Item = JobId>) {
        let mut count = 0;
        for id in live {
            assert_eq!(table.get(&id).map(|j| &j.body[..]), Some(&id.to_le_bytes()[..]));
            assert_eq!(&table[&id].body[..], &id.to_le_bytes()[..]);
            count += 1;
        }
        assert_eq!(table.len(), count);
    }

    #[test]
    fn finds_inserts_and_forgets_by_id() {
        let mut table = JobTable::default();
        for id in 1..=10_000 {
            table.insert(id, job(id));
        }
        check(&table, 1..=10_000);
        for id in (1..=10_000).filter(|id| id % 3 != 0) {
            assert_eq!(table.remove(&id).map(|j| j.body), Some(Box::from(&id.to_le_bytes()[..])));
        }
        assert!(table.remove(&1).is_none());
        assert!(table.get(&1).is_none() && table.get(&0).is_none() && table.get(&10_001).is_none());
        check(&table, (1..=10_000).filter(|id| id % 3 == 0));
    }

    #[test]
    fn far_apart_ids_go_to_the_overflow_and_are_still_found() {
        let mut table = JobTable::default();
        let ids = [5, u64::MAX - 1, 1 << 40, 7, (1 << 40) + 1];
        for id in ids {
            table.insert(id, job(id));
        }
        check(&table, ids.into_iter());
        assert!(table.index.len() as u64 <= MAX_INDEX_BLOCKS);
        table.remove(&(1 << 40));
        check(&table, [5, u64::MAX - 1, 7, (1 << 40) + 1].into_iter());
    }

    #[test]
    fn shrink_packs_the_survivors_and_frees_the_rest() {
        let mut table = JobTable::default();
        let n = 20 * SLAB_CHUNK as u64;
        for id in 1..=n {
            table.insert(id, job(id));
        }
        // Keep every hundredth job: most of the slab is now vacant.
        for id in (1..=n).filter(|id| id % 100 != 0) {
            table.remove(&id);
        }
        assert!(table.wants_shrink());
        table.shrink();
        assert_eq!(table.capacity(), SLAB_CHUNK);
        assert!(!table.wants_shrink());
        check(&table, (1..=n).filter(|id| id % 100 == 0));
        // The table keeps working after a shrink.
        table.insert(n + 1, job(n + 1));
        check(&table, (1..=n + 1).filter(|id| id % 100 == 0 || *id == n + 1));
        for id in (1..=n + 1).filter(|id| id % 100 == 0 || *id == n + 1) {
            table.remove(&id);
        }
        table.shrink();
        assert_eq!((table.capacity(), table.index.len()), (0, 0));
    }
}
