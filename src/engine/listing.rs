//! Listing a tube's jobs over the protocol (reference §3.29): the ids of
//! the used tube's jobs in one state, in the order that state serves them,
//! a page at a time after a cursor. It changes nothing.
//!
//! A page is gathered in pieces, the engine's lock let go between them,
//! so that listing a million jobs holds no other client up. The buried
//! list is already in its order: a page is a walk along it, a thousand
//! jobs at most, one piece. The heaps are in no order a walk can follow,
//! so a page of ready, delayed or reserved jobs looks at every slot of
//! the heap, [`LIST_PIECE`] slots a piece, and keeps the `count` smallest
//! past the cursor. Keeping them costs `count` entries, claimed before the
//! first piece: memory does not grow with the tube.
//!
//! What pieces cost: a job moved inside its heap between two pieces (the
//! heap reorders itself on every put, reserve or delete) may be seen twice
//! (it is kept once, at its first sighting, and takes one place on the
//! page) or not at all. A page is exact when its heap fits one piece or does not
//! change while the page is gathered; otherwise it is a true list of jobs
//! that were in that state, in order, that may leave some out. The cursor is a job, not a position: the next page
//! starts after that job's place in the order, wherever the jobs before
//! it went meanwhile.

use std::collections::BinaryHeap;

use super::*;

/// Heap slots one piece of a page looks at: about 20 µs of comparing
/// under the lock (a slot of the reserved heap also reads its job).
pub const LIST_PIECE: usize = 16 * 1024;

/// A page being gathered: what it lists, where it has looked, and the
/// best jobs found so far.
#[derive(Debug)]
pub struct Listing {
    tube: TubeId,
    state: State,
    count: usize,
    /// The cursor's place in the order: only jobs after it are listed.
    after: Option<(u64, JobId)>,
    /// The next heap slot to look at.
    next_slot: usize,
    /// The `count` smallest seen so far, the largest on top.
    found: BinaryHeap<(u64, JobId)>,
}

impl Listing {
    /// Whether `entry` would be among the `count` smallest found so far.
    fn among_best(&self, entry: (u64, JobId)) -> bool {
        self.found.len() < self.count || self.found.peek().is_some_and(|&top| entry < top)
    }

    /// Keeps `entry` among the `count` smallest, unless its job was seen
    /// already (it moved in its heap between two pieces): a job takes one
    /// place on a page, so that a page comes back short only at the end.
    /// The look is a walk of at most `count` entries, made only for an
    /// entry among the best.
    fn keep(&mut self, entry: (u64, JobId)) {
        if self.found.iter().any(|&(_, id)| id == entry.1) {
            return;
        }
        self.found.push(entry);
        if self.found.len() > self.count {
            self.found.pop();
        }
    }

    /// Heap slots looked at so far, for the test of the pieces' bound.
    #[cfg(test)]
    pub(super) fn looked_at(&self) -> usize {
        self.next_slot
    }

    /// The page's ids, in order, each once. (Sorted in place: the room
    /// was claimed.)
    pub fn ids(self) -> Vec<JobId> {
        // A job moved between pieces may have been seen twice, in the same
        // place or, had it left and come back, in two: it keeps its first.
        // Sorted by id, then by place, its sightings lie together; the
        // later ones get id 0, which no job has. Sorts in place allocate
        // nothing, and the ids are collected into the entries' own room.
        let mut found = self.found.into_vec();
        found.sort_unstable_by_key(|&(place, id)| (id, place));
        let mut last = 0;
        for entry in &mut found {
            if entry.1 == last {
                entry.1 = 0;
            } else {
                last = entry.1;
            }
        }
        found.sort_unstable();
        found.into_iter().filter(|&(_, id)| id != 0).map(|(_, id)| id).collect()
    }
}

impl Engine {
    /// Starts a page of `list-jobs-<state>` for client `c`: at most
    /// `count` of its used tube's jobs in `state`, after job `after`.
    /// `NOT_FOUND` when `after` is no longer in that tube and state;
    /// `OUT_OF_MEMORY` without room for the page.
    pub fn list_jobs(
        &self,
        c: ClientId,
        state: State,
        count: usize,
        after: Option<JobId>,
    ) -> Result<Listing, Reply<'static>> {
        let tube = self.used_tube(c).ok_or(Reply::InternalError)?;
        self.list_tube_jobs(tube, state, count, after)
    }

    /// [`Engine::list_jobs`] of tube `tube`.
    pub fn list_tube_jobs(
        &self,
        tube: TubeId,
        state: State,
        count: usize,
        after: Option<JobId>,
    ) -> Result<Listing, Reply<'static>> {
        let after = match after {
            None => None,
            Some(id) => Some(self.place_in_order(tube, state, id).ok_or(Reply::NotFound)?),
        };
        let mut found = BinaryHeap::new();
        found.try_reserve_exact(count + 1).map_err(|_| Reply::OutOfMemory)?;
        Ok(Listing { tube, state, count, after, next_slot: 0, found })
    }

    /// Gathers one piece of `page`; true once the page is whole, or its
    /// tube gone (a caller that does not use it, the page, holds the lock
    /// for no more than a piece).
    pub fn list_jobs_piece(&self, page: &mut Listing) -> bool {
        let Some(tube) = self.tubes.live(page.tube) else { return true };
        match page.state {
            State::Ready => self.look_at(page, &tube.ready, u64::from, |_| true),
            // Held jobs too, due at `NEVER`: last.
            State::Delayed | State::Held => self.look_at(page, &tube.delayed, |due| due.0, |_| true),
            State::Reserved if tube.reserved == 0 => true,
            State::Reserved => {
                let t = page.tube;
                let in_tube = |id| self.jobs.get(&id).is_some_and(|job| job.tube == t);
                self.look_at(page, &self.reserved, |due| due.0, in_tube)
            }
            State::Buried => {
                let mut next = match page.after {
                    Some((_, id)) => self.jobs.get(&id).map_or(0, |job| job.links.next),
                    None => tube.buried.front().unwrap_or(0),
                };
                while next != 0 && page.found.len() < page.count {
                    // The position is the order: the key is how many came before.
                    page.found.push((page.found.len() as u64, next));
                    next = self.jobs.get(&next).map_or(0, |job| job.links.next);
                }
                true
            }
        }
    }

    /// One piece of a heap's slots: those after the cursor and among the
    /// `count` smallest so far are kept.
    fn look_at<K: Ord + Copy>(
        &self,
        page: &mut Listing,
        heap: &Heap<K>,
        order: impl Fn(K) -> u64,
        wanted: impl Fn(JobId) -> bool,
    ) -> bool {
        let end = heap.len().min(page.next_slot + LIST_PIECE);
        for slot in page.next_slot..end {
            let (Some(key), id) = (heap.key_at(slot), heap.id_at(slot)) else {
                break;
            };
            let entry = (order(key), id);
            if page.after.is_none_or(|after| entry > after) && page.among_best(entry) && wanted(id) {
                page.keep(entry);
            }
        }
        page.next_slot = end;
        end >= heap.len()
    }

    /// Where job `id` stands in the order of `state` in `tube`, if it is
    /// there: its heap's key and its id.
    fn place_in_order(&self, tube: TubeId, state: State, id: JobId) -> Option<(u64, JobId)> {
        // A held job is listed with the delayed ones.
        let listed = |job: &Job| if job.state == State::Held { State::Delayed } else { job.state };
        let job = self.jobs.get(&id).filter(|job| job.tube == tube && listed(job) == state)?;
        Some(match state {
            State::Ready => (u64::from(job.pri), id),
            State::Delayed | State::Held | State::Reserved => (job.deadline.0, id),
            State::Buried => (0, id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::proofs::tests::{client, engine, put, reserved_id};
    use super::*;

    /// A whole page, gathered as the connection gathers it.
    fn page(
        e: &Engine,
        c: ClientId,
        state: State,
        count: usize,
        after: Option<JobId>,
    ) -> Result<Vec<JobId>, Reply<'static>> {
        let mut listing = e.list_jobs(c, state, count, after)?;
        while !e.list_jobs_piece(&mut listing) {}
        Ok(listing.ids())
    }

    #[test]
    fn a_heap_larger_than_a_piece_is_listed_in_order_page_by_page() {
        let mut e = engine();
        let c = client(&mut e);
        let n = LIST_PIECE * 2 + 100;
        // Priorities that do not follow the ids: the order is the heap's.
        let mut ids: Vec<(u32, JobId)> = (0..n)
            .map(|i| (i * 7919 % 1000) as u32)
            .map(|pri| (pri, put(&mut e, c, pri, 0, 60, Time::ZERO)))
            .collect();
        ids.sort();
        let want: Vec<JobId> = ids.into_iter().map(|(_, id)| id).collect();
        let (mut listed, mut after): (Vec<JobId>, _) = (Vec::new(), None);
        loop {
            let got = page(&e, c, State::Ready, 1000, after).unwrap();
            listed.extend(&got);
            if got.len() < 1000 {
                break;
            }
            after = got.last().copied();
        }
        assert_eq!(listed, want);
    }

    #[test]
    fn a_job_seen_twice_takes_one_place_and_a_page_is_short_only_at_the_end() {
        let mut e = engine();
        let c = client(&mut e);
        let mut listing = e.list_jobs(c, State::Ready, 3, None).unwrap();
        // Seen in one piece, then again, moved, in the next: one place.
        for entry in [(5, 1), (6, 2), (7, 1), (8, 3), (9, 4)] {
            if listing.among_best(entry) {
                listing.keep(entry);
            }
        }
        assert_eq!(listing.ids(), vec![1, 2, 3]);
    }

    #[test]
    fn each_state_lists_in_the_order_it_serves() {
        let mut e = engine();
        let c = client(&mut e);
        let t = Time::ZERO;
        let late = put(&mut e, c, 0, 20, 60, t);
        let soon = put(&mut e, c, 0, 10, 60, t);
        assert_eq!(page(&e, c, State::Delayed, 10, None), Ok(vec![soon, late]));
        let (long, short) = (put(&mut e, c, 0, 0, 50, t), put(&mut e, c, 1, 0, 5, t));
        assert_eq!(reserved_id(e.reserve(c, None, t, &mut Vec::<u8>::new())), long);
        assert_eq!(reserved_id(e.reserve(c, None, t, &mut Vec::<u8>::new())), short);
        assert_eq!(page(&e, c, State::Reserved, 10, None), Ok(vec![short, long]));
        assert_eq!(e.bury(c, long, 0, t), Reply::Buried);
        assert_eq!(e.bury(c, short, 0, t), Reply::Buried);
        assert_eq!(page(&e, c, State::Buried, 10, None), Ok(vec![long, short]));
        assert_eq!(page(&e, c, State::Buried, 10, Some(long)), Ok(vec![short]));
        assert_eq!(page(&e, c, State::Buried, 1, None), Ok(vec![long]));
    }

    #[test]
    fn a_job_seen_twice_in_two_places_is_listed_once_in_the_first() {
        let found = [(5, 7), (9, 7), (6, 8), (12, 7)].into_iter().collect();
        let page = Listing { tube: 0, state: State::Ready, count: 4, after: None, next_slot: 0, found };
        assert_eq!(page.ids(), [7, 8]);
    }

    #[test]
    fn a_cursor_that_left_its_list_is_not_found() {
        let mut e = engine();
        let c = client(&mut e);
        let id = put(&mut e, c, 0, 0, 60, Time::ZERO);
        assert_eq!(page(&e, c, State::Ready, 10, Some(id)), Ok(vec![]));
        reserved_id(e.reserve(c, None, Time::ZERO, &mut Vec::<u8>::new()));
        assert_eq!(page(&e, c, State::Ready, 10, Some(id)), Err(Reply::NotFound));
        assert_eq!(page(&e, c, State::Ready, 10, Some(999)), Err(Reply::NotFound));
    }

    #[test]
    fn reserved_jobs_of_other_tubes_are_left_out() {
        let mut e = engine();
        let (c, other) = (client(&mut e), client(&mut e));
        let mine = put(&mut e, c, 0, 0, 60, Time::ZERO);
        e.use_tube(other, &super::super::proofs::tests::name("elsewhere"));
        e.watch(other, &super::super::proofs::tests::name("elsewhere"));
        put(&mut e, other, 0, 0, 60, Time::ZERO);
        reserved_id(e.reserve(c, None, Time::ZERO, &mut Vec::<u8>::new()));
        reserved_id(e.reserve(other, None, Time::ZERO, &mut Vec::<u8>::new()));
        assert_eq!(page(&e, c, State::Reserved, 10, None), Ok(vec![mine]));
    }
}
