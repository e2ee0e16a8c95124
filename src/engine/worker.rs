//! What a worker does with a job it holds, kicking, and moving a job to
//! another tube: `delete`, `release`, `bury`, `touch`, tuber's
//! `touch-all`, `kick`, `kick-job`, `move-job`; `batch.rs` has the commands on many jobs at once. Each
//! checks the job's
//! state (reference §3.20), then makes its change through
//! [`Engine::journaled_change`], which claims log room first, logs the change
//! after, and lets compaction run.

use super::journaling::kicked;
use super::*;
use crate::protocol::Name;

impl Engine {
    /// `delete <id>`: any job except one reserved by another client; of
    /// a client that is not the admin socket's, only one it holds
    /// (reference §3.0, `admin unless held`): a ready, delayed or buried
    /// job is `NOT_PERMITTED` for it, counted nowhere and changed not.
    pub fn delete(&mut self, c: ClientId, id: JobId, now: Time) -> Reply<'_> {
        let unheld = self.jobs.get(&id).is_some_and(|job| job.state != State::Reserved);
        if unheld && self.refuses(c, Name::Delete) {
            return Reply::NotPermitted;
        }
        self.cmds.delete += 1;
        let Some(job) = self.jobs.get(&id) else {
            return Reply::NotFound;
        };
        if job.state == State::Reserved && job.reserved_by != c {
            return Reply::NotFound;
        }
        let tube = job.tube;
        self.note_processed(id, now);
        self.end_work(id, metering::WorkEnd::Deleted, now);
        let logged = match self.discard(id, now) {
            Ok(logged) => logged,
            Err(refusal) => return refusal,
        };
        self.give_back_room(tube);
        self.tubes.get_mut(tube).cmd_delete += 1;
        self.tubes.remove_if_unreferenced(tube);
        self.serve_freed(now);
        if !logged {
            return Reply::InternalError;
        }
        self.compact();
        Reply::Deleted
    }

    /// A job of a batch delete leaves, its delete already logged with the
    /// batch's ([`Engine::journaled_batch`]): out of its queue and the
    /// table, its unique key cooling (room claimed by the batch) or
    /// forgotten, what it held given back, counted as its tube's delete.
    pub(super) fn forget_deleted(&mut self, id: JobId, now: Time) {
        self.forget_gone(id, true, now);
    }

    /// [`Engine::forget_deleted`], its key's cooldown started if `cool`,
    /// else its key forgotten at once (`flush-tube`).
    pub(super) fn forget_gone(&mut self, id: JobId, cool: bool, now: Time) {
        let Some((tube, keyed, file, holder)) = self.jobs.get(&id).map(|job| {
            (job.tube, job.tags.keyed(), job.file, (job.state == State::Reserved).then_some(job.reserved_by))
        }) else {
            return;
        };
        self.end_work(id, metering::WorkEnd::Deleted, now);
        self.unlink(id);
        if keyed && !cool {
            self.tubes.keys.forget(id);
        } else if keyed {
            let until = self.tubes.keys.start_cooldown(id, now, &mut positions(&mut self.jobs));
            if let Some(until) = until {
                self.schedule(until);
                self.tubes.keys.set_file(id, file);
            }
        }
        self.forget_record(id);
        self.give_back_room(tube);
        self.tubes.get_mut(tube).cmd_delete += 1;
        self.tubes.remove_if_unreferenced(tube);
        // A `flush-tube` takes reserved jobs too: one not yet sent to the
        // worker it was handed to is withdrawn.
        if let Some(holder) = holder {
            self.withdraw_handoff(holder, id, now);
        }
    }

    /// The one way a job leaves the table, for every command that deletes
    /// one: its unique key starts its cooldown (or is forgotten), the log
    /// is told, and the job leaves its queue and the table. The caller
    /// gives back the tube's room and removes the tube if unreferenced.
    /// `Ok(false)`: the log's write failed, and the job is gone all the
    /// same. `Err`: no memory for the key's cooldown, and nothing changed.
    pub(super) fn discard(&mut self, id: JobId, now: Time) -> Result<bool, Reply<'static>> {
        let keyed = self.jobs.get(&id).is_some_and(|job| job.tags.keyed());
        if keyed && self.tubes.keys.cools(id) && !self.claim_cooling(id) {
            return Err(Reply::OutOfMemory);
        }
        // Out of its queue first: the cooldowns' heap tells the job a
        // slot of its own.
        self.unlink(id);
        let until = if keyed {
            self.tubes.keys.start_cooldown(id, now, &mut positions(&mut self.jobs))
        } else {
            None
        };
        // The delete record's room was claimed by the put: this cannot run
        // out of disk. If the write fails anyway the job is gone all the
        // same.
        let logged = match until {
            Some(until) => {
                self.schedule(until);
                self.journal_cooling(id)
            }
            None => self.journal_delete(id),
        };
        self.forget_record(id);
        Ok(logged)
    }

    /// Job `id` out of the table, with what it holds beside it: its
    /// memory is given back, its retry limit, concurrency key and groups
    /// forgotten (a group may end: see `groups.rs`).
    fn forget_record(&mut self, id: JobId) {
        if let Some(job) = self.jobs.remove(&id) {
            self.release_job_memory(job.body.in_memory());
            self.bodies.bytes -= (job.body.len() - job.body.in_memory()) as u64;
            if job.tags.limited() {
                self.tubes.limits.forget(id);
            }
            if job.tags.con() {
                self.tubes.con.forget(id);
            }
            if job.tags.group() || job.tags.after() {
                self.tubes.groups.forget(id);
            }
        }
    }

    /// `release <id> <pri> <delay>`.
    pub fn release(&mut self, c: ClientId, id: JobId, pri: u32, delay: u32, now: Time) -> Reply<'_> {
        self.cmds.release += 1;
        if !self.is_reserved_by(id, c) {
            return Reply::NotFound;
        }
        // A job whose tries are spent (`retry.rs`) is buried instead, with
        // the priority and delay it had, and the release still says
        // `RELEASED`: beanstalkd answers `BURIED` to a release only when it
        // ran out of memory, and clients raise an error on it (reference
        // §3.1b).
        let spent = self.tries_spent(id);
        let released = self.journaled_change(id, |e| {
            e.end_work(id, if spent { metering::WorkEnd::Buried } else { metering::WorkEnd::Released }, now);
            e.unlink(id);
            if let Some(job) = e.jobs.get_mut(&id) {
                job.counters.releases = job.counters.releases.wrapping_add(1);
                if !spent {
                    job.pri = pri;
                    job.delay = delay;
                }
            }
            if spent {
                e.bury_by_limit(id, now);
            } else if delay > 0 {
                e.make_delayed(id, now.plus_secs(delay));
            } else {
                e.make_ready(id, now);
            }
        });
        // A write that failed after the change leaves it made in memory.
        if spent && !matches!(released, Err(Reply::OutOfMemory)) {
            self.note_buried_by_limit(id, "released");
        }
        self.serve_freed(now);
        released.map_or_else(|refusal| refusal, |()| Reply::Released)
    }

    /// `bury <id> <pri>`.
    ///
    /// Burial order: a tube's buried list is in the order of burying
    /// (reference §2.2), and the log keeps no list. After a restart the
    /// order comes from each buried job's burial time, kept in its
    /// `deadline` field (`Job::buried_at`), which the log stores and
    /// `Engine::restore` sorts by. So every job that joins the back of a
    /// buried list takes a fresh
    /// time from `last_buried_at`, strictly later than every earlier one,
    /// even within one clock tick or after a restart: `Engine::make_buried`
    /// (`moves.rs`) does, for this and `move-job`.
    pub fn bury(&mut self, c: ClientId, id: JobId, pri: u32, now: Time) -> Reply<'_> {
        self.cmds.bury += 1;
        if !self.is_reserved_by(id, c) {
            return Reply::NotFound;
        }
        let buried = self.journaled_change(id, |e| {
            e.end_work(id, metering::WorkEnd::Buried, now);
            e.unlink(id);
            if let Some(job) = e.jobs.get_mut(&id) {
                job.pri = pri;
                job.counters.buries = job.counters.buries.wrapping_add(1);
            }
            e.make_buried(id, now);
        });
        self.serve_freed(now);
        buried.map_or_else(|refusal| refusal, |()| Reply::Buried)
    }

    /// `touch <id>`: a fresh full TTR from now.
    pub fn touch(&mut self, c: ClientId, id: JobId, now: Time) -> Reply<'_> {
        self.cmds.touch += 1;
        if !self.is_reserved_by(id, c) {
            return Reply::NotFound;
        }
        self.restart_ttr(c, id, now);
        Reply::Touched
    }

    /// `touch-all` (tuber's, reference §3.31): a fresh full TTR from now
    /// for every job client `c` holds, each its own TTR, in the order it
    /// reserved them; `TOUCHED_ALL <n>`, the jobs it holds (0 for none).
    /// Each job counts as one `touch`. Nothing moves but each job's place
    /// in the reserved heap, whose size stays: no memory is claimed.
    pub fn touch_all(&mut self, c: ClientId, now: Time) -> Reply<'_> {
        let mut next = self.clients.get(&c).and_then(|client| client.reserved.front());
        let mut touched = 0;
        while let Some(id) = next {
            next = self.jobs.get(&id).map(|job| job.links.next).filter(|&id| id != 0);
            self.restart_ttr(c, id, now);
            touched += 1;
        }
        self.cmds.touch += touched;
        Reply::TouchedAll(touched)
    }

    /// Gives job `id`, reserved by `c`, a full TTR from `now`.
    pub(super) fn restart_ttr(&mut self, c: ClientId, id: JobId, now: Time) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let (slot, deadline) = (job.heap_index as usize, now.plus_secs(job.ttr));
        let old_deadline = std::mem::replace(&mut job.deadline, deadline);
        if let Some(client) = self.clients.get_mut(&c) {
            client.forget_deadline(old_deadline);
            client.note_deadline(deadline);
        }
        // Out and back in: the heap keeps its size, so this allocates nothing.
        self.reserved.remove(slot, &mut positions(&mut self.jobs));
        self.reserved.push(deadline, id, &mut positions(&mut self.jobs));
        self.schedule(deadline);
    }

    /// `kick <bound>`: up to `bound` buried jobs of the used tube, oldest
    /// first; only if it has none, up to `bound` delayed jobs, soonest
    /// first. Logged in one write, all or nothing
    /// ([`Engine::journaled_batch`]).
    pub fn kick(&mut self, c: ClientId, bound: u32, now: Time) -> Reply<'_> {
        self.cmds.kick += 1;
        let Some(t) = self.used_tube(c) else {
            return Reply::InternalError;
        };
        let tube = self.tubes.get(t);
        let count = if tube.buried.is_empty() { tube.delayed.len() } else { tube.buried.len() };
        let Some(mut ids) = self.kept_ids.take(count.min(bound as usize)) else {
            return Reply::OutOfMemory;
        };
        let tube = self.tubes.get(t);
        let chosen = if tube.buried.is_empty() {
            // Jobs held for a group, due at `NEVER`, come last, and stay.
            let chosen = tube.delayed.smallest(bound as usize, &mut ids);
            ids.retain(|id| self.jobs.get(id).is_some_and(|job| job.state == State::Delayed));
            chosen
        } else {
            ids.extend(tube.buried.ids(&self.jobs).take(bound as usize));
            true
        };
        let reply = if !chosen {
            Err(Reply::OutOfMemory)
        } else {
            self.journaled_batch(&ids, &kicked, &mut |e, id| e.kick_one(id, now)).map(|()| ids.len())
        };
        self.kept_ids.put_back(ids);
        reply.map_or_else(|refusal| refusal, |n| Reply::KickedCount(n as u32))
    }

    /// `kick-job <id>`: a buried or delayed job in any tube, one held for
    /// a group too (as tuber's does).
    pub fn kick_job(&mut self, id: JobId, now: Time) -> Reply<'_> {
        match self.jobs.get(&id).map(|job| job.state) {
            Some(State::Buried | State::Delayed | State::Held) => {
                let kicked = self.journaled_change(id, |e| e.kick_one(id, now));
                kicked.map_or_else(|refusal| refusal, |()| Reply::Kicked)
            }
            _ => Reply::NotFound,
        }
    }

    /// `move-job <id> <tube>` (ours, reference §3.21): a ready, delayed or
    /// buried job into tube `to`, created if need be, keeping its id,
    /// priority, delay, TTR, body and counters; see `move_to_tube` for
    /// where it lands. A reserved job is its holder's business: `NOT_FOUND`.
    /// A job's unique key goes with it; if `to` already has that key, the
    /// answer is `KEY_TAKEN` and nothing changes (reference §3.1a).
    pub fn move_job(&mut self, id: JobId, to: &TubeName, now: Time) -> Reply<'_> {
        let Some(job) = self.jobs.get(&id).filter(|job| job.state != State::Reserved) else {
            return Reply::NotFound;
        };
        let from = job.tube;
        let key = if job.tags.keyed() && self.tubes.get(from).name != *to {
            match self.claim_key_in(id, to) {
                Ok(claim) => Some(claim),
                Err(refusal) => return refusal,
            }
        } else {
            None
        };
        let Some(t) = self.tubes.find_or_create(to) else {
            return Reply::OutOfMemory;
        };
        if t == from {
            return Reply::Moved;
        }
        // Room in the new tube's heaps, claimed before anything changes, as
        // `start_put` claims it: no later move of the job allocates.
        let in_tube = self.tubes.get(t).job_count() + self.puts_in_flight + 1;
        let tube = self.tubes.get_mut(t);
        let moved = if tube.ready.try_make_room_for(in_tube) && tube.delayed.try_make_room_for(in_tube) {
            self.journaled_change_to(id, Some(t), |e| {
                if let Some(claim) = key {
                    e.tubes.keys.rename(id, claim);
                }
                e.move_to_tube(id, t, now)
            })
        } else {
            Err(Reply::OutOfMemory)
        };
        // The tube the job left may have nothing left to live for; or the
        // new one, made for a move that was refused.
        self.give_back_room(from);
        self.tubes.remove_if_unreferenced(from);
        self.tubes.remove_if_unreferenced(t);
        moved.map_or_else(|refusal| refusal, |()| Reply::Moved)
    }
}
