//! Concurrency keys (tuber's `put ... con:<key>[:<limit>]`, reference
//! §3.1c): at most `limit` jobs of one key reserved at once, server-wide.
//! A ready job whose key is at its limit is *held back*: it stays ready,
//! in its tube's heap, and a reserve passes over it to the best job that
//! is not held back.
//!
//! This file owns the index of keys and the one question the reserve
//! paths ask, [`Engine::ready_for_reserve`]; it changes no job. A key's
//! slots are taken where a job becomes reserved (`Engine::reserve_for`)
//! and given back where it stops being reserved (`Engine::unlink`), so
//! every way out of a reservation (delete, release, bury, a TTR, a
//! hang-up, `flush-tube`) gives its slot back. A slot given back may let
//! a held-back job go to a blocked worker in any tube: the commands that
//! can give one back end with [`Engine::serve_freed`].
//!
//! Passing over held-back jobs is tuber's way, and so is its bound: a
//! best-first walk down the heap from its top, at most [`WALK`] jobs,
//! so that a reserve never costs more than that however many jobs of a
//! busy key wait. A job that is not held back but deeper than that is
//! taken once the jobs above it are reserved or free, as in tuber. While
//! no key is at its limit, the reserve paths look at nothing here.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::heap::Heap;
use super::named::{NameClaim, Named};
use super::*;

/// Jobs a reserve looks at in one tube, at most, past held-back ones.
pub const WALK: usize = 256;

/// One key in use: what its jobs share.
#[derive(Debug)]
struct Key {
    /// The largest limit its jobs were put with while it lived (a
    /// restart finds the largest of those left).
    limit: u32,
    /// Its live jobs, reserved or not: the key lives as long as they do.
    jobs: u32,
    /// Its jobs reserved now.
    reserved: u32,
}

/// Every concurrency key in use, and each keyed job's key.
#[derive(Debug, Default)]
pub struct ConcurrencyKeys {
    keys: Named<Key>,
    /// Each keyed job's key slot and the limit its put gave.
    of_job: IdMap<(u32, u32)>,
    /// How many keys are at their limit: while none is, no job is held back.
    at_limit: usize,
    /// A slot was given back since waiters were last served.
    freed: bool,
    /// The walk's frontier, its room claimed with the first keyed put, so
    /// that a reserve allocates nothing.
    frontier: RefCell<BinaryHeap<Reverse<(u32, JobId, u32)>>>,
}

/// What a put with a key needs, claimed before the job is made.
#[derive(Debug)]
pub struct ConClaim(NameClaim);

impl ConcurrencyKeys {
    /// Claims the room a job of key `name` needs; `None` without it.
    pub(super) fn claim(&mut self, name: &[u8]) -> Option<ConClaim> {
        let room =
            self.of_job.try_reserve(1).is_ok() && self.frontier.borrow_mut().try_reserve(WALK + 2).is_ok();
        if !room {
            return None;
        }
        self.keys.claim(name).map(ConClaim)
    }

    /// Files job `id` under key `name` with its put's `limit`, in room
    /// claimed by [`Self::claim`].
    pub(super) fn insert(&mut self, id: JobId, name: &[u8], limit: u32, claim: ConClaim) {
        let slot = self.keys.insert(name, claim.0, || Key { limit, jobs: 0, reserved: 0 });
        if let Some(key) = self.keys.get_mut(slot) {
            key.jobs += 1;
            if limit > key.limit {
                if key.reserved >= key.limit && key.reserved < limit {
                    self.at_limit -= 1;
                    self.freed = true;
                }
                key.limit = limit;
            }
        }
        self.of_job.insert(id, (slot, limit));
    }

    /// Forgets job `id`, which is gone (and no longer reserved); its key
    /// goes with its last job.
    pub(super) fn forget(&mut self, id: JobId) {
        let Some((slot, _)) = self.of_job.remove(&id) else {
            return;
        };
        let Some(key) = self.keys.get_mut(slot) else {
            return;
        };
        key.jobs -= 1;
        if key.jobs == 0 {
            self.keys.remove(slot);
        }
    }

    /// Whether job `id`'s key is at its limit.
    fn at_limit(&self, id: JobId) -> bool {
        let key = self.of_job.get(&id).and_then(|&(slot, _)| self.keys.get(slot));
        key.is_some_and(|key| key.reserved >= key.limit)
    }

    /// Job `id` was reserved: one of its key's slots is taken.
    pub(super) fn take_slot(&mut self, id: JobId) {
        let slot = self.of_job.get(&id).map(|&(slot, _)| slot);
        if let Some(key) = slot.and_then(|slot| self.keys.get_mut(slot)) {
            key.reserved += 1;
            if key.reserved == key.limit {
                self.at_limit += 1;
            }
        }
    }

    /// Job `id` is no longer reserved: its slot is given back.
    pub(super) fn give_slot_back(&mut self, id: JobId) {
        let slot = self.of_job.get(&id).map(|&(slot, _)| slot);
        if let Some(key) = slot.and_then(|slot| self.keys.get_mut(slot)) {
            if key.reserved == key.limit {
                self.at_limit -= 1;
            }
            key.reserved -= 1;
            self.freed = true;
        }
    }

    /// What the keys and their jobs' entries count against
    /// `--max-job-memory`: each key's name once, and an entry a job.
    pub(super) fn memory(&self) -> u64 {
        self.keys.memory() + self.of_job.len() as u64 * TAG_ENTRY_MEMORY
    }

    /// What a job of key `name` would add to [`Self::memory`].
    pub(super) fn memory_of(&self, name: &[u8]) -> u64 {
        self.keys.memory_of(name) + TAG_ENTRY_MEMORY
    }

    /// Job `id`'s key and the limit its put gave, as the log and
    /// `stats-job` show them.
    pub(super) fn of(&self, id: JobId) -> Option<(&[u8], u32)> {
        let &(slot, limit) = self.of_job.get(&id)?;
        Some((self.keys.name(slot)?, limit))
    }

    /// Every key in use, as `(name, limit, jobs, reserved)`, for a test's
    /// picture of the engine.
    #[cfg(test)]
    pub(super) fn sorted(&self) -> Vec<(Vec<u8>, u32, u32, u32)> {
        let mut all: Vec<_> =
            self.keys.iter().map(|(name, k)| (name.to_vec(), k.limit, k.jobs, k.reserved)).collect();
        all.sort();
        all
    }
}

impl Engine {
    /// Whether job `id` is ready but held back: its key is at its limit.
    fn held_back(&self, id: JobId) -> bool {
        self.jobs.get(&id).is_some_and(|job| job.tags.con()) && self.tubes.con.at_limit(id)
    }

    /// The best `(pri, id)` of a tube's `ready` jobs that a reserve may
    /// take: the heap's top, unless that is held back; then the best of
    /// the [`WALK`] best that is not.
    pub(super) fn ready_for_reserve(&self, ready: &Heap<u32>) -> Option<(u32, JobId)> {
        let top = ready.peek()?;
        if self.tubes.con.at_limit == 0 || !self.held_back(top.1) {
            return Some(top);
        }
        let mut frontier = self.tubes.con.frontier.borrow_mut();
        frontier.clear();
        frontier.push(Reverse((top.0, top.1, 0)));
        for _ in 0..WALK {
            let Reverse((pri, id, slot)) = frontier.pop()?;
            if !self.held_back(id) {
                return Some((pri, id));
            }
            for child in [2 * slot + 1, 2 * slot + 2] {
                if let Some(pri) = ready.key_at(child as usize) {
                    // Room for WALK + 2 was claimed: one out, two in, a step.
                    frontier.push(Reverse((pri, ready.id_at(child as usize), child)));
                }
            }
        }
        None
    }

    /// Whether job `id`, ready, delayed or buried, may be reserved now
    /// (`reserve-job`): not if its key is at its limit.
    pub(super) fn may_reserve(&self, id: JobId) -> bool {
        self.tubes.con.at_limit == 0 || !self.held_back(id)
    }

    /// Where a command that may free jobs ends: jobs held for a group
    /// whose last member went are let go (`groups.rs`), and if a key's
    /// slot was given back, the blocked workers of every tube with a ready
    /// job are served, as a job held back may be theirs now.
    pub(super) fn serve_freed(&mut self, now: Time) {
        self.let_go_of_held(now);
        if !std::mem::take(&mut self.tubes.con.freed) {
            return;
        }
        let mut i = 0;
        while let Some(&t) = self.tubes.ids().get(i) {
            let tube = self.tubes.get(t);
            if !tube.waiting.is_empty() && !tube.ready.is_empty() {
                self.serve_waiters(t, now);
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proofs::tests::{client, engine, name, put_tagged, reserved_id};
    use super::*;
    use crate::protocol::ConKey;

    fn put_con(e: &mut Engine, c: ClientId, pri: u32, key: Option<(&str, u32)>) -> JobId {
        let con = key.map(|(key, limit)| ConKey { name: name(key), limit });
        put_tagged(e, c, pri, 0, 10, Time::ZERO, PutTags::new(None, None, con.as_ref()).unwrap())
    }

    fn reserve(e: &mut Engine, c: ClientId) -> Option<JobId> {
        match e.reserve(c, Some(0), Time::ZERO, &mut Vec::<u8>::new()) {
            Some(Reply::Reserved(id, _)) => Some(id),
            _ => None,
        }
    }

    #[test]
    fn a_key_at_its_limit_holds_its_ready_jobs_back_and_others_pass() {
        let mut e = engine();
        let c = client(&mut e);
        let a = put_con(&mut e, c, 0, Some(("k", 2)));
        let b = put_con(&mut e, c, 0, Some(("k", 2)));
        let held = put_con(&mut e, c, 0, Some(("k", 2)));
        let plain = put_con(&mut e, c, 5, None);
        assert_eq!((reserve(&mut e, c), reserve(&mut e, c)), (Some(a), Some(b)));
        // The key is at its limit: the most urgent ready job is passed over.
        assert_eq!(reserve(&mut e, c), Some(plain));
        assert_eq!(reserve(&mut e, c), None);
        assert_eq!(e.reserve_job(c, held, Time::ZERO, &mut Vec::<u8>::new()), Reply::NotFound);
        // Any way out of a reservation gives the slot back.
        assert_eq!(e.bury(c, a, 0, Time::ZERO), Reply::Buried);
        assert_eq!(reserve(&mut e, c), Some(held));
        assert_eq!(e.release(c, held, 0, 30, Time::ZERO), Reply::Released);
        e.tick(Time::from_secs(11));
        assert_eq!(e.tubes.con.sorted(), [(b"k".to_vec(), 2, 3, 0)]);
    }

    #[test]
    fn a_key_is_one_for_every_tube_and_a_slot_given_back_serves_a_blocked_worker() {
        let mut e = engine();
        let (producer, worker, waiter) = (client(&mut e), client(&mut e), client(&mut e));
        let first = put_con(&mut e, producer, 0, Some(("shared", 1)));
        e.use_tube(producer, &name("other"));
        let second = put_con(&mut e, producer, 0, Some(("shared", 1)));
        e.watch(waiter, &name("other"));
        e.ignore(waiter, &name("default"));
        assert_eq!(reserve(&mut e, worker), Some(first));
        assert_eq!(e.reserve(waiter, None, Time::ZERO, &mut Vec::<u8>::new()), None, "held back: it blocks");
        e.disconnect(worker, Time::ZERO);
        assert_eq!(reserved_id(e.check_wait(waiter, Time::ZERO, &mut Vec::<u8>::new())), second);
    }

    #[test]
    fn a_put_that_raises_a_key_s_limit_serves_a_worker_it_frees() {
        let mut e = engine();
        let (producer, holder, waiter) = (client(&mut e), client(&mut e), client(&mut e));
        let first = put_con(&mut e, producer, 0, Some(("k", 1)));
        let held = put_con(&mut e, producer, 0, Some(("k", 1)));
        assert_eq!(reserve(&mut e, holder), Some(first));
        assert_eq!(e.reserve(waiter, None, Time::ZERO, &mut Vec::<u8>::new()), None);
        e.use_tube(producer, &name("elsewhere"));
        put_con(&mut e, producer, 0, Some(("k", 2)));
        assert_eq!(reserved_id(e.check_wait(waiter, Time::ZERO, &mut Vec::<u8>::new())), held);
    }

    #[test]
    fn the_walk_past_held_back_jobs_is_bounded() {
        let mut e = engine();
        let c = client(&mut e);
        let first = put_con(&mut e, c, 0, Some(("busy", 1)));
        for _ in 0..WALK {
            put_con(&mut e, c, 1, Some(("busy", 1)));
        }
        let deep = put_con(&mut e, c, 2, None);
        assert_eq!(reserve(&mut e, c), Some(first));
        // The job that may go is past the walk's bound: tuber's behaviour.
        assert_eq!(reserve(&mut e, c), None);
        assert_eq!(e.delete(c, first, Time::ZERO), Reply::Deleted);
        assert_ne!(reserve(&mut e, c), Some(deep));
    }
}
