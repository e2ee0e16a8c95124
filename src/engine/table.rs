//! The job table: the one owner of every job record, found by id.
//!
//! It owns the records and nothing else: it knows no state, queue, tube or
//! client. Heaps and lists hold
//! ids; this table turns an id into its record.
//!
//! **A first reading can take it as a `HashMap<JobId, Job>`**: its API is
//! that of a map (`get`, `get_mut`, `insert`, `remove`, `len`), and that is
//! what the design began with. A simpler server would use the map. We keep
//! a slab because, measured in one run (`SCALE_ONLY=memory cargo bench
//! --bench scale`, 100-byte bodies, against this table; `HashMap` with
//! the crate's `IdHasher` or with SipHash, which cost the same), before
//! the page allocator (`sys::pages`) took the drain's remainder from 1.3%
//! to under 1% (the README has today's figure):
//!
//! | | this table | `HashMap<JobId, Job>` |
//! |---|---|---|
//! | RSS a job, 250k to 2M jobs | 232 B | 254 to 361 B, by where the count falls between two doublings |
//! | peak RSS a job while growing | 232 B | up to 469 B: the old and new tables side by side |
//! | RSS left 5 s after deleting 500k jobs | 1.3% of the growth (under 1% since, with `sys::pages`: README) | 66%: a map never shrinks |
//! | pipelined puts, one connection | 1 | 0.65 |
//!
//! (beanstalkd: 299 B a job, 81% left after the drain.)
//!
//! Two parts, both sized by the jobs alive now rather than by how many there
//! were at the busiest moment:
//!
//! - **The slab** holds the records in chunks of [`SLAB_CHUNK`] slots. A
//!   chunk is allocated when every other is full, and freed the moment its
//!   last job goes (but for one, kept empty, so that a queue that empties
//!   and fills again does not map and unmap a chunk for every job), so
//!   memory follows the jobs alive now with no pass over the table: growing
//!   never copies a record, never needs the old and the new storage at
//!   once, and never leaves half of a doubled table empty (as a hash table
//!   does). A deleted job's slot goes on its chunk's list of holes for the
//!   next put.
//! - **The index** maps an id to its slot. Ids are handed out in sequence
//!   and jobs mostly die in roughly the order they were born, so the live
//!   ids sit in one window of the id space: the index is a deque of blocks of
//!   [`INDEX_BLOCK`] slot numbers (4 bytes per id), one block per run of
//!   ids, dropped when its last job goes (one is kept as `spare_block`, for
//!   the next run). Ids that would stretch the window past
//!   [`MAX_INDEX_BLOCKS`] (a job that outlives billions of later ones, or a
//!   restored log with far-apart ids) go to a small hash map instead.
//!
//! Every operation is O(1) (amortised), so no command and no timer waits
//! on the table; only moving bodies when memory runs short walks it, a
//! bounded stretch at a time (`bodies_from`).

use std::collections::VecDeque;

use super::job::Job;
use super::IdMap;
use crate::ids::JobId;

/// Records per slab chunk: 4096 × 104 bytes is under half a megabyte, so the
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
    /// The records, a chunk per [`SLAB_CHUNK`] slots; a freed chunk has
    /// no storage and is listed in `freed` for reuse.
    slab: Vec<Chunk>,
    /// Chunks that may have room, the one to fill next last. May name a
    /// chunk that has since filled up or been freed: `chunk_with_room`
    /// skips those.
    with_room: Vec<u32>,
    /// Chunks given back, whose numbers the next new chunk reuses.
    freed: Vec<u32>,
    /// One chunk that emptied and was kept rather than freed, until a job
    /// goes into it: so that a queue that empties and fills again (one
    /// job at a time, as a worker pool waiting for work sees it) does not
    /// map and unmap a chunk, under the engine's lock, for every job.
    kept_empty: Option<u32>,
    /// `index[k]` holds the slots of ids `(first_block + k) * INDEX_BLOCK`
    /// onwards; `None` for a block with no live job. Never starts or ends
    /// with `None`.
    index: VecDeque<Option<IndexBlock>>,
    first_block: u64,
    /// Slots of the ids that fell outside the index's window.
    overflow: IdMap<u32>,
    /// Live jobs.
    len: usize,
    /// An index block for the next id to need one, so that inserting it
    /// allocates nothing: allocated by `try_make_room`, or the last block
    /// that emptied (`clear_slot`), all of whose slots are `NO_SLOT`.
    spare_block: Option<Box<[u32]>>,
}

/// [`SLAB_CHUNK`] record slots. Slots are filled in order up to the
/// records' length; below it, a vacant slot is `None` and listed in
/// `holes`.
#[derive(Debug, Default)]
struct Chunk {
    records: Vec<Option<Job>>,
    holes: Vec<u16>,
    live: u32,
    /// Listed in `with_room`.
    listed: bool,
}

impl Chunk {
    fn has_room(&self) -> bool {
        self.records.capacity() > 0 && (!self.holes.is_empty() || self.records.len() < SLAB_CHUNK)
    }
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
        self.slab[slot / SLAB_CHUNK].records[slot % SLAB_CHUNK].as_ref()
    }

    /// The job with id `id`, mutably, if it exists.
    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let slot = self.slot_of(*id)?;
        self.slab[slot / SLAB_CHUNK].records[slot % SLAB_CHUNK].as_mut()
    }

    /// Adds job `job` under id `id` (replacing any job with that id).
    pub fn insert(&mut self, id: JobId, job: Job) {
        if let Some(slot) = self.slot_of(id) {
            self.slab[slot / SLAB_CHUNK].records[slot % SLAB_CHUNK] = Some(job);
            return;
        }
        let slot = self.place(job);
        self.set_slot(id, slot);
        self.len += 1;
    }

    /// Takes job `id` out of the table. If it was its chunk's last job, the
    /// chunk is kept empty for the next put, or freed if another empty
    /// chunk is kept already.
    pub fn remove(&mut self, id: &JobId) -> Option<Job> {
        let slot = self.clear_slot(*id)? as usize;
        let (c, at) = (slot / SLAB_CHUNK, slot % SLAB_CHUNK);
        let chunk = &mut self.slab[c];
        let job = chunk.records[at].take();
        chunk.live -= 1;
        self.len -= 1;
        if chunk.live == 0 && self.kept_empty.is_some() {
            *chunk = Chunk::default();
            self.freed.push(c as u32);
        } else {
            if chunk.live == 0 {
                self.kept_empty = Some(c as u32);
            }
            chunk.holes.push(at as u16);
            // The list's room was claimed with the chunks, but a freed
            // chunk's stale entry may still take a place in it: without
            // room, the chunk stays unlisted until a later delete, which
            // costs its holes a while and never aborts.
            if !chunk.listed && self.with_room.try_reserve(1).is_ok() {
                chunk.listed = true;
                self.with_room.push(c as u32);
            }
        }
        job
    }

    /// Each job's body in memory from slab slot `from` on, with its slot (`Engine::move_bodies`).
    pub fn bodies_from(&mut self, from: usize) -> impl Iterator<Item = (usize, &mut Box<[u8]>)> {
        let first = from / SLAB_CHUNK;
        self.slab.iter_mut().enumerate().skip(first).flat_map(move |(c, chunk)| {
            let records =
                chunk.records.iter_mut().enumerate().skip(if c == first { from % SLAB_CHUNK } else { 0 });
            records.filter_map(move |(at, job)| Some((c * SLAB_CHUNK + at, job.as_mut()?.body.bytes_mut()?)))
        })
    }

    /// Slots in the slab's allocated chunks, vacant or not (for tests and
    /// the memory figures).
    pub fn capacity(&self) -> usize {
        self.slab.iter().map(|chunk| chunk.records.capacity()).sum()
    }

    /// Makes sure that inserting a job with id `id` allocates nothing big:
    /// the slab chunk and the index block it needs are allocated now, and
    /// false is returned if they cannot be. A put asks this before it
    /// accepts a body, so that running out of memory is a refusal
    /// (`OUT_OF_MEMORY`), never an abort with every job lost.
    pub fn try_make_room(&mut self, id: JobId) -> bool {
        if self.chunk_with_room().is_none() {
            return false;
        }
        let block = id / INDEX_BLOCK as u64;
        let (low, high) = match self.index.len() as u64 {
            0 => (block, block + 1),
            blocks => (self.first_block.min(block), (self.first_block + blocks).max(block + 1)),
        };
        if high - low > MAX_INDEX_BLOCKS {
            return self.overflow.try_reserve(1).is_ok();
        }
        let widening = (high - low) as usize - self.index.len();
        if self.index.try_reserve(widening).is_err() {
            return false;
        }
        let has_block = self.position(id).is_some_and(|(k, _)| self.index[k].is_some());
        if !has_block && self.spare_block.is_none() {
            let mut slots = Vec::new();
            if slots.try_reserve_exact(INDEX_BLOCK).is_err() {
                return false;
            }
            slots.resize(INDEX_BLOCK, NO_SLOT);
            self.spare_block = Some(slots.into_boxed_slice());
        }
        true
    }

    /// A chunk with a vacant slot, allocating one if none has (`None` if
    /// that allocation fails).
    fn chunk_with_room(&mut self) -> Option<usize> {
        while let Some(&c) = self.with_room.last() {
            let chunk = &mut self.slab[c as usize];
            if chunk.has_room() {
                return Some(c as usize);
            }
            chunk.listed = false;
            self.with_room.pop();
        }
        // Reserved, not touched: the pages of a new chunk cost memory only
        // as records are written into them.
        // With it, room for all its holes, and in the lists of chunks for
        // one more: so that a delete, which fills these lists, allocates
        // nothing.
        let mut records = Vec::new();
        records.try_reserve_exact(SLAB_CHUNK).ok()?;
        let mut holes = Vec::new();
        holes.try_reserve_exact(SLAB_CHUNK).ok()?;
        let chunks = self.slab.len() + 1;
        self.with_room.try_reserve(chunks.saturating_sub(self.with_room.len())).ok()?;
        self.freed.try_reserve(chunks.saturating_sub(self.freed.len())).ok()?;
        let c = match self.freed.pop() {
            Some(c) => c as usize,
            None => {
                self.slab.try_reserve(1).ok()?;
                self.slab.push(Chunk::default());
                self.slab.len() - 1
            }
        };
        self.slab[c] = Chunk { records, holes, live: 0, listed: true };
        self.with_room.push(c as u32);
        Some(c)
    }

    /// Stores `job` in a vacant slot and returns the slot.
    fn place(&mut self, job: Job) -> u32 {
        // The put path claims its room in advance (`try_make_room`); out
        // of memory anywhere else is as fatal as any failed allocation.
        let Some(c) = self.chunk_with_room() else {
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<[Option<Job>; SLAB_CHUNK]>());
        };
        // A job in the kept chunk: it is no longer empty.
        self.kept_empty = self.kept_empty.filter(|&kept| kept != c as u32);
        let chunk = &mut self.slab[c];
        chunk.live += 1;
        let at = match chunk.holes.pop() {
            Some(at) => {
                chunk.records[at as usize] = Some(job);
                at as usize
            }
            None => {
                chunk.records.push(Some(job));
                chunk.records.len() - 1
            }
        };
        (c * SLAB_CHUNK + at) as u32
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
        let spare = &mut self.spare_block;
        let block = self.index[k].get_or_insert_with(|| IndexBlock {
            // Claimed by `try_make_room` for a put; a restore at start-up
            // allocates it here.
            slots: spare.take().unwrap_or_else(|| vec![NO_SLOT; INDEX_BLOCK].into_boxed_slice()),
            live: 0,
        });
        block.slots[offset] = slot;
        block.live += 1;
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
            // Every slot is NO_SLOT again: it is the next block's spare.
            let block = self.index[k].take();
            if self.spare_block.is_none() {
                self.spare_block = block.map(|block| block.slots);
            }
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

#[cfg(test)]
mod tests {
    use std::ops::Index;

    use super::*;

    impl Index<&JobId> for JobTable {
        type Output = Job;

        /// # Panics
        /// If there is no job `id` (tests only use it on jobs they know exist).
        fn index(&self, id: &JobId) -> &Job {
            self.get(id).expect("job exists")
        }
    }
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
            tags: Default::default(),
            file: 0,
            work_started: Default::default(),
            body: super::super::body::Body::InMemory(Box::from(&id.to_le_bytes()[..])),
        }
    }

    fn check(table: &JobTable, live: impl Iterator<Item = JobId>) {
        let mut count = 0;
        for id in live {
            assert_eq!(table.get(&id).and_then(|j| j.body.bytes()), Some(&id.to_le_bytes()[..]));
            assert_eq!(table[&id].body.bytes(), Some(&id.to_le_bytes()[..]));
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
            let body = table.remove(&id).and_then(|j| j.body.bytes().map(<[u8]>::to_vec));
            assert_eq!(body.as_deref(), Some(&id.to_le_bytes()[..]));
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
    fn a_chunk_is_freed_with_its_last_job_and_its_room_reused() {
        let mut table = JobTable::default();
        let n = 20 * SLAB_CHUNK as u64;
        for id in 1..=n {
            table.insert(id, job(id));
        }
        assert_eq!(table.capacity(), 20 * SLAB_CHUNK);
        // Keep every hundredth job of the first half: the second half's
        // chunks are freed as their last jobs go, but for one kept empty;
        // the first half's stay.
        for id in (1..=n).filter(|id| *id > n / 2 || id % 100 != 0) {
            table.remove(&id);
        }
        assert_eq!(table.capacity(), 11 * SLAB_CHUNK);
        check(&table, (1..=n).filter(|id| *id <= n / 2 && id % 100 == 0));
        // New jobs fill the holes before any chunk is allocated again.
        let survivors = table.len() as u64;
        for id in n + 1..=n + 11 * SLAB_CHUNK as u64 - survivors {
            table.insert(id, job(id));
        }
        assert_eq!(table.capacity(), 11 * SLAB_CHUNK);
        table.insert(2 * n, job(2 * n));
        assert_eq!(table.capacity(), 12 * SLAB_CHUNK);
        // Emptied, it holds one empty chunk and one spare index block.
        let live: Vec<JobId> = (1..=2 * n).filter(|id| table.get(id).is_some()).collect();
        for id in live {
            table.remove(&id);
        }
        assert_eq!((table.capacity(), table.index.len(), table.len()), (SLAB_CHUNK, 0, 0));
        assert!(table.spare_block.is_some());
    }

    #[test]
    fn a_queue_that_empties_and_fills_again_keeps_its_chunk() {
        let mut table = JobTable::default();
        for id in 1..=3 * INDEX_BLOCK as u64 {
            assert!(table.try_make_room(id));
            table.insert(id, job(id));
            table.remove(&id);
            assert_eq!((table.capacity(), table.len()), (SLAB_CHUNK, 0));
        }
    }
}
