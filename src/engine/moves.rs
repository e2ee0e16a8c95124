//! Moving a job between queues: out of whichever its state puts it in
//! ([`Engine::unlink`]), into ready, delayed or reserved, and serving the
//! waiting clients whenever a job becomes ready. Every command that moves a
//! job goes through here, so the queues, the per-state counts and the heap
//! positions stay in step.

use super::*;

impl Engine {
    /// Takes a job out of whichever queue its state puts it in. Its state is
    /// stale until the caller files it somewhere else (or drops it).
    pub(super) fn unlink(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let (t, slot, state) = (job.tube, job.heap_index as usize, job.state);
        let (pri, owner, deadline, tags) = (job.pri, job.reserved_by, job.deadline, job.tags);
        self.tally_job(id, state, pri, tags, false);
        let tube = self.tubes.get_mut(t);
        match state {
            State::Ready => {
                tube.ready.remove(slot, &mut positions(&mut self.jobs));
                tube.urgent -= usize::from(pri < URGENT_PRIORITY);
                self.note_not_ready(t, id);
            }
            State::Delayed => {
                tube.delayed.remove(slot, &mut positions(&mut self.jobs));
                self.tubes.reschedule(t);
            }
            State::Held => {
                tube.delayed.remove(slot, &mut positions(&mut self.jobs));
                self.unhold(id);
            }
            State::Buried => {
                tube.buried.remove(&mut self.jobs, id);
                // Out of the buried list, it is no dead letter any more.
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.tags.set_buried_by_limit(false);
                }
            }
            State::Reserved => {
                tube.reserved -= 1;
                if tags.con() {
                    self.tubes.con.give_slot_back(id);
                }
                self.reserved.remove(slot, &mut positions(&mut self.jobs));
                if let Some(client) = self.clients.get_mut(&owner) {
                    client.reserved.remove(&mut self.jobs, id);
                    client.forget_deadline(deadline);
                }
            }
        }
    }

    /// Files an unlinked job as ready, then serves its tube's waiters.
    pub(super) fn make_ready(&mut self, id: JobId, now: Time) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = State::Ready;
        let (t, pri, tags) = (job.tube, job.pri, job.tags);
        self.tally_job(id, State::Ready, pri, tags, true);
        let tube = self.tubes.get_mut(t);
        tube.ready.push(pri, id, &mut positions(&mut self.jobs));
        tube.urgent += usize::from(pri < URGENT_PRIORITY);
        self.note_ready(id, now);
        self.serve_waiters(t, now);
    }

    /// Files an unlinked job as delayed until `until`.
    pub(super) fn make_delayed(&mut self, id: JobId, until: Time) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = State::Delayed;
        job.deadline = until;
        let (t, pri, tags) = (job.tube, job.pri, job.tags);
        self.tally_job(id, State::Delayed, pri, tags, true);
        self.tubes.get_mut(t).delayed.push(until, id, &mut positions(&mut self.jobs));
        self.tubes.reschedule(t);
        self.schedule(until);
    }

    /// Files an unlinked job at the end of its tube's buried list, with a
    /// burial time strictly after every earlier one, even within one clock
    /// tick (the burial order's rule, on `Engine::bury`).
    pub(super) fn make_buried(&mut self, id: JobId, now: Time) {
        self.last_buried_at = now.max(Time(self.last_buried_at.0.saturating_add(1)));
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = State::Buried;
        job.set_buried_at(self.last_buried_at);
        let (t, pri, tags) = (job.tube, job.pri, job.tags);
        self.tally_job(id, State::Buried, pri, tags, true);
        self.tubes.get_mut(t).buried.push_back(&mut self.jobs, id);
    }

    /// Moves a ready, delayed or buried job into tube `to`, in the same
    /// state, keeping the rules on `Job::tube`: out of its old tube's queue,
    /// then its tube changed, then filed in `to`'s. A ready job is ready
    /// there (and `to`'s waiters are served), a delayed job is due when it
    /// was, and a buried job joins the end of `to`'s buried list, as if
    /// buried now. `to`'s heaps must have room (claimed by the caller).
    pub(super) fn move_to_tube(&mut self, id: JobId, to: TubeId, now: Time) {
        let Some(job) = self.jobs.get(&id).filter(|job| job.state != State::Reserved) else {
            // A reserved job is in its holder's list too: callers refuse it.
            return;
        };
        let (state, due, dead) = (job.state, job.deadline, job.tags.buried_by_limit());
        self.unlink(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.tube = to;
            // A dead letter moved to another tube is one still.
            job.tags.set_buried_by_limit(dead);
        }
        match state {
            State::Ready => self.make_ready(id, now),
            State::Delayed => self.make_delayed(id, due),
            // Held for a run that has ended, it is let go here rather than
            // behind the jobs held for the run now under way.
            State::Held => self.make_ready_or_held(id, now),
            State::Buried | State::Reserved => self.make_buried(id, now),
        }
    }

    /// Takes a ready, delayed or buried job out of its queue and reserves it
    /// for client `c`.
    pub(super) fn reserve_for(&mut self, c: ClientId, id: JobId, now: Time) {
        self.note_reserved(id, now);
        self.unlink(id);
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let deadline = now.plus_secs(job.ttr);
        job.state = State::Reserved;
        job.reserved_by = c;
        job.deadline = deadline;
        // For `--metrics` and `weighted-fair`: how long its work took.
        job.work_started = super::metering::Stamp::at(now);
        job.counters.reserves = job.counters.reserves.wrapping_add(1);
        let (t, pri, tags) = (job.tube, job.pri, job.tags);
        if tags.con() {
            self.tubes.con.take_slot(id);
        }
        self.tally_job(id, State::Reserved, pri, tags, true);
        self.tubes.get_mut(t).reserved += 1;
        self.reserved.push(deadline, id, &mut positions(&mut self.jobs));
        if let Some(client) = self.clients.get_mut(&c) {
            client.reserved.push_back(&mut self.jobs, id);
            client.note_deadline(deadline);
        }
        self.schedule(deadline);
    }

    /// Makes a buried or delayed job ready, counting the kick.
    pub(super) fn kick_one(&mut self, id: JobId, now: Time) {
        self.unlink(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.counters.kicks = job.counters.kicks.wrapping_add(1);
        }
        self.make_ready(id, now);
    }

    /// Hands ready jobs of tube `t` to its longest waiters while both last.
    ///
    /// A waiter blocks only when none of its watched tubes has a job for it,
    /// so whenever a job becomes ready in `t`, `t`'s waiters are the only
    /// ones that can newly be served, and `t`'s best job is their best job.
    /// A waiter whose connection is already gone is passed over (its reserve
    /// ends with `TIMED_OUT`, as its loop would have ended it on the hang-up), so
    /// the job goes to the longest waiter still connected; so is a
    /// `reserve-with-abort` whose client's bytes have arrived (`ABORTED`).
    pub(super) fn serve_waiters(&mut self, t: TubeId, now: Time) {
        loop {
            let tube = self.tubes.get(t);
            if tube.is_paused() {
                return;
            }
            let (Some((_, id)), Some((seq, c))) = (self.ready_for_reserve(&tube.ready), tube.waiting.first())
            else {
                return;
            };
            if self.has_hung_up(c) {
                self.hang_up(c);
            } else if self.has_abort_input(c) {
                // Its client has already called the wait off: the byte
                // came first, so the job goes to the next waiter.
                self.finish_wait(c, Outcome::Aborted);
            } else {
                self.hand_over(c, id, now);
            }
            // Both paths took `c` out of line; this only guards the loop's
            // progress should the queue and the client ever disagree.
            self.tubes.get_mut(t).waiting.remove(seq);
        }
    }

    /// A job of tube `t` is gone: the heaps keep room for the jobs that
    /// are left (see `Heap::fit`), and give back the rest in halvings.
    pub(super) fn give_back_room(&mut self, t: TubeId) {
        let coming = self.puts_in_flight;
        let tube = self.tubes.get_mut(t);
        let in_tube = tube.job_count() + coming;
        tube.ready.fit(in_tube);
        tube.delayed.fit(in_tube);
        self.reserved.fit(self.jobs.len() + coming);
    }
}
