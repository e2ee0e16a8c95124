//! `reserve`, `reserve-with-timeout` and `reserve-job`, and the waiting in
//! between. A reserve with nothing ready registers its client in every
//! watched tube's waiting queue ([`Blocked::Waiting`]); whenever a job
//! becomes ready, the tube's longest waiter is handed it: the job is
//! reserved for that client at once and its thread is woken
//! ([`Blocked::Ended`]). The client's own thread then collects the outcome
//! with [`Engine::check_wait`] and writes the reply itself. This file owns
//! the hand-off's rules; it never touches a socket.

use super::*;

impl Engine {
    /// `reserve` (`timeout` is `None`) or `reserve-with-timeout`.
    ///
    /// Returns the reply when the reserve ends at once. Otherwise the client
    /// is now waiting and `None` is returned: the caller sleeps on the client's
    /// `Condvar` until [`Engine::wake_time`], then asks [`Engine::check_wait`].
    /// A job is reserved only once `room` has room for its reply.
    pub fn reserve(
        &mut self,
        c: ClientId,
        timeout: Option<u32>,
        now: Time,
        room: &mut dyn ReplyRoom,
    ) -> Option<Reply<'_>> {
        match timeout {
            None => self.cmds.reserve += 1,
            Some(_) => self.cmds.reserve_with_timeout += 1,
        }
        let margin_at = self.soonest_margin(c);
        let in_margin = margin_at.is_some_and(|m| now >= m);
        // In the margin, a job that is ready counts even in a paused tube.
        if in_margin && !self.has_ready_job(c, true) {
            self.become_worker(c);
            return Some(Reply::DeadlineSoon);
        }
        if let Some(id) = self.best_ready_job(c) {
            if !self.claim_reply_room(id, room) {
                return Some(Reply::OutOfMemory);
            }
            self.become_worker(c);
            self.reserve_for(c, id, now);
            return self.reserved_reply(id);
        }
        let client = self.clients.get(&c)?;
        if in_margin || client.hung_up || timeout == Some(0) {
            self.become_worker(c);
            return Some(if in_margin { Reply::DeadlineSoon } else { Reply::TimedOut });
        }
        let seq = self.next_wait_seq;
        let wait = Wait { seq, timeout_at: timeout.map(|secs| now.plus_secs(secs)), margin_at };
        // The wait's record is the one thing blocking allocates: room in
        // the waiting queues was claimed by `watch`.
        let Ok(blocked) = crate::sys::try_box(Blocked::Waiting(wait)) else {
            return Some(Reply::OutOfMemory);
        };
        self.become_worker(c);
        self.next_wait_seq += 1;
        let client = self.clients.get_mut(&c)?;
        client.blocked = Some(blocked);
        for &t in &client.watched {
            self.tubes.get_mut(t).waiting.insert(seq, c);
        }
        self.waiting_clients += 1;
        None
    }

    /// Counts client `c` in `current-workers` from its first reserve on.
    fn become_worker(&mut self, c: ClientId) {
        if let Some(client) = self.clients.get_mut(&c) {
            if !client.worker {
                client.worker = true;
                self.workers += 1;
            }
        }
    }

    /// Claims room in `room` for the reply that delivers job `id`.
    fn claim_reply_room(&self, id: JobId, room: &mut dyn ReplyRoom) -> bool {
        self.jobs.get(&id).is_some_and(|job| room.claim(data_reply_len(job.body.len())))
    }

    /// When a blocked reserve of `c` must be checked again even if nobody
    /// wakes it: its timeout or the start of its safety margin. `None` means
    /// it may sleep until woken.
    pub fn wake_time(&self, c: ClientId) -> Option<Time> {
        let Blocked::Waiting(wait) = **self.clients.get(&c)?.blocked.as_ref()? else {
            return None;
        };
        match (wait.timeout_at, wait.margin_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Ends a blocked reserve if it is over: a job was handed to the client,
    /// its safety margin began, its timeout passed, or it hung up. `None`
    /// means it is still waiting (or never blocked), and then
    /// [`Engine::wake_time`] or a wake-up is sure to come.
    ///
    /// The engine first catches up with `now` ([`Engine::catch_up`]): a job
    /// handed over whose TTR has run out meanwhile was taken back by that,
    /// and the client is waiting again in its old place. So a `RESERVED`
    /// reply this returns is for a job the client holds, and its TTR
    /// starts now, when the client is told: however long the hand-off
    /// waited for the lock, the worker gets its whole TTR. If `room` has
    /// no room for the reply, the job goes back to the ready queue as if
    /// never handed over, and the reserve ends with `OUT_OF_MEMORY`.
    pub fn check_wait(&mut self, c: ClientId, now: Time, room: &mut dyn ReplyRoom) -> Option<Reply<'_>> {
        self.catch_up(now);
        let blocked = **self.clients.get(&c)?.blocked.as_ref()?;
        let outcome = match blocked {
            Blocked::Ended(outcome) => outcome,
            Blocked::Waiting(wait) if wait.margin_at.is_some_and(|m| now >= m) => Outcome::DeadlineSoon,
            Blocked::Waiting(wait) if wait.timeout_at.is_some_and(|t| now >= t) => Outcome::TimedOut,
            Blocked::Waiting(_) => return None,
        };
        self.stop_waiting(c);
        if let Outcome::Reserved(id, wait) = outcome {
            if !self.is_reserved_by(id, c) || self.jobs.get(&id).is_some_and(|job| job.deadline <= now) {
                // Catching up took back every lapsed hand-off, so this
                // cannot happen; checked all the same, because sending a
                // job to a client that does not hold it is the one thing
                // that must never happen.
                self.resume_wait(c, wait, now);
                return self.check_wait(c, now, room);
            }
        }
        if let Some(client) = self.clients.get_mut(&c) {
            client.blocked = None;
        }
        match outcome {
            Outcome::Reserved(id, _) if !self.claim_reply_room(id, room) => {
                self.take_back_handoff(id, now);
                Some(Reply::OutOfMemory)
            }
            Outcome::Reserved(id, _) => {
                self.restart_ttr(c, id, now);
                Some(self.reserved_reply(id).unwrap_or(Reply::InternalError))
            }
            Outcome::DeadlineSoon => Some(Reply::DeadlineSoon),
            Outcome::TimedOut => Some(Reply::TimedOut),
        }
    }

    /// A job handed over whose reply cannot be written goes back to ready,
    /// as if it had never been reserved: no client saw it.
    fn take_back_handoff(&mut self, id: JobId, now: Time) {
        self.unlink(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.counters.reserves = job.counters.reserves.wrapping_sub(1);
        }
        self.make_ready(id, now);
    }

    /// `reserve-job <id>`: reserves a ready, delayed or buried job in any
    /// tube, once `room` has room for its reply.
    pub fn reserve_job(&mut self, c: ClientId, id: JobId, now: Time, room: &mut dyn ReplyRoom) -> Reply<'_> {
        let Some(job) = self.jobs.get(&id) else {
            return Reply::NotFound;
        };
        if job.state == State::Reserved {
            return Reply::NotFound;
        }
        if !self.clients.contains_key(&c) {
            return Reply::InternalError;
        }
        if !self.claim_reply_room(id, room) {
            return Reply::OutOfMemory;
        }
        let state = job.state;
        let reserve = |e: &mut Engine| {
            e.become_worker(c);
            e.reserve_for(c, id, now);
        };
        // Taken from buried or delayed, it comes back ready after a restart:
        // that is a change the log must hear of. Taken from ready, it is not.
        if state == State::Ready {
            reserve(self);
        } else if let Err(refusal) = self.journaled_change(id, reserve) {
            return refusal;
        }
        self.reserved_reply(id).unwrap_or(Reply::InternalError)
    }

    /// Reserves job `id` for blocked client `c` and wakes its thread to
    /// collect it.
    pub(super) fn hand_over(&mut self, c: ClientId, id: JobId, now: Time) {
        let Some(wait) = self.stop_waiting(c) else {
            return;
        };
        self.reserve_for(c, id, now);
        self.set_outcome(c, Outcome::Reserved(id, wait));
    }

    /// Job `id`, reserved by `holder`, has just run out of TTR. If it was
    /// handed to `holder` while blocked and its thread has not collected it
    /// yet (another command held the lock for longer than the TTR), the
    /// client never heard of the job: its reserve goes on, in the place in
    /// line it had, rather than receive a job that may by now be someone
    /// else's. The job's counters keep the reservation and its timeout:
    /// both happened, as far as the queue is concerned.
    pub(super) fn recall_handoff(&mut self, holder: ClientId, id: JobId, now: Time) {
        let blocked = self.clients.get(&holder).and_then(|client| client.blocked.as_deref());
        let Some(&Blocked::Ended(Outcome::Reserved(handed, wait))) = blocked else {
            return;
        };
        if handed == id {
            self.resume_wait(holder, wait, now);
        }
    }

    /// Puts client `c` back into the waiting queues with `wait`'s place in
    /// line and timeout, or hands it a job at once if one of its tubes has
    /// one (one may have become ready while it was out of line).
    pub(super) fn resume_wait(&mut self, c: ClientId, wait: Wait, now: Time) {
        let margin_at = self.soonest_margin(c);
        let Some(client) = self.clients.get_mut(&c) else {
            return;
        };
        // The ended wait's record is reused: resuming allocates nothing.
        let Some(blocked) = client.blocked.as_deref_mut() else {
            return;
        };
        *blocked = Blocked::Waiting(Wait { margin_at, ..wait });
        for &t in &client.watched {
            self.tubes.get_mut(t).waiting.insert(wait.seq, c);
        }
        self.waiting_clients += 1;
        if client.hung_up || self.has_hung_up(c) {
            self.hang_up(c);
        } else if let Some(id) = self.best_ready_job(c) {
            self.hand_over(c, id, now);
        }
    }

    /// Ends client `c`'s wait with `outcome` and wakes its thread.
    pub(super) fn finish_wait(&mut self, c: ClientId, outcome: Outcome) {
        self.stop_waiting(c);
        self.set_outcome(c, outcome);
    }

    /// Leaves `outcome` for client `c`'s thread and wakes it.
    pub(super) fn set_outcome(&mut self, c: ClientId, outcome: Outcome) {
        if let Some(client) = self.clients.get_mut(&c) {
            if let Some(blocked) = &mut client.blocked {
                **blocked = Blocked::Ended(outcome);
            }
            client.waker.wake();
        }
    }

    /// Takes client `c` out of every waiting queue; returns the wait it
    /// ended, if it was waiting. The reserve is then over, with `TIMED_OUT`
    /// unless the caller leaves another outcome: a blocked client is never
    /// left with neither a wait nor an outcome, which no wake-up would end.
    pub(super) fn stop_waiting(&mut self, c: ClientId) -> Option<Wait> {
        let client = self.clients.get_mut(&c)?;
        let blocked = client.blocked.as_deref_mut()?;
        let Blocked::Waiting(wait) = *blocked else {
            return None;
        };
        *blocked = Blocked::Ended(Outcome::TimedOut);
        for &t in &client.watched {
            self.tubes.get_mut(t).waiting.remove(wait.seq);
        }
        self.waiting_clients -= 1;
        Some(wait)
    }

    // The questions a reserve asks.

    /// Whether client `c`'s connection is known to be gone, asking its socket.
    pub(super) fn has_hung_up(&self, c: ClientId) -> bool {
        self.clients.get(&c).is_some_and(|client| client.hung_up || client.waker.has_hung_up())
    }

    /// The best `(pri, id)` ready job in `c`'s unpaused watched tubes.
    pub(super) fn best_ready_job(&self, c: ClientId) -> Option<JobId> {
        let client = self.clients.get(&c)?;
        let tubes = client.watched.iter().map(|&t| self.tubes.get(t));
        tubes.filter(|tube| !tube.is_paused()).filter_map(|tube| tube.ready.peek()).min().map(|(_, id)| id)
    }

    pub(super) fn has_ready_job(&self, c: ClientId, include_paused: bool) -> bool {
        self.clients.get(&c).is_some_and(|client| {
            client
                .watched
                .iter()
                .map(|&t| self.tubes.get(t))
                .any(|tube| !tube.ready.is_empty() && (include_paused || !tube.is_paused()))
        })
    }

    /// When the soonest-expiring reservation of `c` enters its safety
    /// margin. O(1) while the client's soonest deadline is known; after the
    /// job that had it leaves, one pass over the client's reservations
    /// (beanstalkd makes that pass on every reserve), most often over none.
    pub(super) fn soonest_margin(&mut self, c: ClientId) -> Option<Time> {
        let client = self.clients.get(&c)?;
        let soonest = match client.soonest_deadline {
            Soonest::Known(soonest) => soonest,
            Soonest::Stale => {
                let deadlines = client.reserved.ids(&self.jobs).filter_map(|id| self.jobs.get(&id));
                let soonest = deadlines.map(|job| job.deadline).min();
                if let Some(client) = self.clients.get_mut(&c) {
                    client.soonest_deadline = Soonest::Known(soonest);
                }
                soonest
            }
        };
        soonest.map(|d| d.minus_secs(SAFETY_MARGIN_SECS))
    }

    pub(super) fn reserved_reply(&self, id: JobId) -> Option<Reply<'_>> {
        self.jobs.get(&id).map(|job| Reply::Reserved(id, &job.body))
    }
}
