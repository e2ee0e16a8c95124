//! `reserve`, `reserve-with-timeout`, `reserve-with-abort` and
//! `reserve-job`, and the waiting in between. A reserve with nothing ready
//! registers its client in every watched tube's waiting queue
//! ([`Blocked::Waiting`]); whenever a job becomes ready, the tube's longest
//! waiter is handed it: the job is reserved for that client at once and
//! its reply left in its mailbox (`handoff.rs`). Every other ending
//! ([`Blocked::Ended`]) the client's own connection collects with
//! [`Engine::check_wait`]. This file owns the reserves' rules; it never
//! touches a socket.
//!
//! A `reserve-with-abort` waits the same way, and a byte from its client
//! ends the wait with `ABORTED` ([`Engine::client_stirred`]). Both endings
//! happen under the lock, on a wait that is still `Waiting`, so the first
//! one wins and the other finds nothing to end: a job is delivered or the
//! wait aborted, never both (reference §3.3a).

use super::*;

impl Engine {
    /// `reserve` (`timeout` is `None`) or `reserve-with-timeout`.
    ///
    /// Returns the reply when the reserve ends at once. Otherwise the client
    /// is now waiting and `None` is returned: the caller sleeps in the
    /// client's mailbox until [`Engine::wake_time`] or word comes, then
    /// asks [`Engine::check_wait`], unless a job's reply was delivered.
    /// A job is reserved only once `room` has room for its reply.
    pub fn reserve(
        &mut self,
        c: ClientId,
        timeout: Option<u32>,
        now: Time,
        room: &mut dyn ReplyRoom,
    ) -> Option<Reply<'_>> {
        self.count_reserve(timeout);
        self.start_reserve(c, timeout, None, now, room)
    }

    /// The wait of a `reserve-batch <count> <timeout>` (tuber's long poll,
    /// reference §3.22) that found nothing ready: as `reserve-with-timeout`,
    /// but counted as a batch is, a `cmd-reserve` for its job, and its job,
    /// when one comes, is collected by the connection ([`Engine::check_wait`])
    /// to be the first of its batch. `room` claims the job's reply.
    pub fn reserve_batch_wait(
        &mut self,
        c: ClientId,
        timeout: u32,
        now: Time,
        room: &mut dyn ReplyRoom,
    ) -> Option<Reply<'_>> {
        self.start_wait(c, Some(timeout), None, true, now, room)
    }

    /// `reserve-with-abort` (`timeout` is `None`) or
    /// `reserve-with-abort-timeout`: a reserve whose wait any byte from the
    /// client calls off. `input_waiting` says the connection already holds
    /// bytes it has not answered: those end the wait before it starts, with
    /// `ABORTED`, unless a job is there to take. Counted as `reserve` and
    /// `reserve-with-timeout` are, so that `stats` keeps beanstalkd's keys.
    /// Returns as [`Engine::reserve`] does.
    pub fn reserve_with_abort(
        &mut self,
        c: ClientId,
        timeout: Option<u32>,
        input_waiting: bool,
        now: Time,
        room: &mut dyn ReplyRoom,
    ) -> Option<Reply<'_>> {
        self.count_reserve(timeout);
        self.start_reserve(c, timeout, Some(input_waiting), now, room)
    }

    /// Counts a reserve command as beanstalkd does (reference §3.3).
    fn count_reserve(&mut self, timeout: Option<u32>) {
        match timeout {
            None => self.cmds.reserve += 1,
            Some(_) => self.cmds.reserve_with_timeout += 1,
        }
    }

    /// The reserves' shared steps. `abort` is `None` for a plain reserve,
    /// or whether input already waits for an abortable one.
    fn start_reserve(
        &mut self,
        c: ClientId,
        timeout: Option<u32>,
        abort: Option<bool>,
        now: Time,
        room: &mut dyn ReplyRoom,
    ) -> Option<Reply<'_>> {
        self.start_wait(c, timeout, abort, false, now, room)
    }

    /// [`Engine::start_reserve`], for a batch's wait too (`batch`).
    fn start_wait(
        &mut self,
        c: ClientId,
        timeout: Option<u32>,
        abort: Option<bool>,
        batch: bool,
        now: Time,
        room: &mut dyn ReplyRoom,
    ) -> Option<Reply<'_>> {
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
            if batch {
                self.cmds.reserve += 1;
            }
            self.reserve_for(c, id, now);
            return self.reserved_reply(id);
        }
        let client = self.clients.get(&c)?;
        if in_margin || client.hung_up || timeout == Some(0) || abort == Some(true) {
            self.become_worker(c);
            return Some(if in_margin {
                Reply::DeadlineSoon
            } else if abort == Some(true) {
                // The bytes came before any wait: they call it off before
                // it starts.
                Reply::Aborted
            } else {
                Reply::TimedOut
            });
        }
        let seq = self.next_wait_seq;
        let timeout_at = timeout.map(|secs| now.plus_secs(secs));
        let wait = Wait { seq, timeout_at, margin_at, abortable: abort.is_some(), batch };
        // Blocking allocates the wait's record and room to note its wake-up;
        // room in the waiting queues was claimed by `watch`.
        let waits = self.waiting_clients + 1;
        if self.woken.try_reserve(waits.saturating_sub(self.woken.len())).is_err() {
            return Some(Reply::OutOfMemory);
        }
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
    pub(super) fn become_worker(&mut self, c: ClientId) {
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

    /// Client `c`'s socket stirred while it may be blocked in reserve:
    /// bytes arrived, or (`hung_up`) it closed or shut down its sending
    /// side. Bytes end a `reserve-with-abort`'s wait with `ABORTED`, and
    /// stay unread, to be the client's next command; they come before a
    /// hang-up behind them, which then only keeps later reserves from
    /// blocking. A hang-up ends any other wait with `TIMED_OUT`. A wait
    /// already ended (a job handed over first) is left as it is: the job
    /// goes out, then the bytes are read.
    pub fn client_stirred(&mut self, c: ClientId, hung_up: bool) {
        if self.has_abort_input(c) {
            if let Some(client) = self.clients.get_mut(&c) {
                client.hung_up |= hung_up;
            }
            self.finish_wait(c, Outcome::Aborted);
        } else if hung_up {
            self.hang_up(c);
        }
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
            // Its connection took the reply from its mailbox, and asks nothing.
            Blocked::Delivered(..) => return None,
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
            Outcome::Reserved(id, wait) => {
                if wait.batch {
                    self.cmds.reserve += 1;
                }
                self.restart_ttr(c, id, now);
                Some(self.reserved_reply(id).unwrap_or(Reply::InternalError))
            }
            Outcome::DeadlineSoon => Some(Reply::DeadlineSoon),
            Outcome::TimedOut => Some(Reply::TimedOut),
            Outcome::Aborted => Some(Reply::Aborted),
        }
    }

    /// `reserve-job <id>`: reserves a ready, delayed or buried job in any
    /// tube, once `room` has room for its reply.
    pub fn reserve_job(&mut self, c: ClientId, id: JobId, now: Time, room: &mut dyn ReplyRoom) -> Reply<'_> {
        let Some(job) = self.jobs.get(&id) else {
            return Reply::NotFound;
        };
        // tuber's: a job whose concurrency key is at its limit, or that
        // waits for a group with a member, is not to be had (reference
        // §3.1c, §3.1d).
        let waits = matches!(job.state, State::Held | State::Delayed)
            && job.tags.after()
            && self.tubes.groups.waits(id);
        if job.state == State::Reserved || !self.may_reserve(id) || waits {
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

    // The questions a reserve asks.

    /// Whether client `c`'s connection is known to be gone, asking its socket.
    pub(super) fn has_hung_up(&self, c: ClientId) -> bool {
        self.clients.get(&c).is_some_and(|client| client.hung_up || client.waker.has_hung_up())
    }

    /// Whether client `c` waits in a `reserve-with-abort` that bytes from
    /// it, unread in its socket, call off (asking the socket).
    pub(super) fn has_abort_input(&self, c: ClientId) -> bool {
        self.clients.get(&c).is_some_and(|client| {
            matches!(client.blocked.as_deref(), Some(Blocked::Waiting(wait)) if wait.abortable)
                && client.waker.has_input()
        })
    }

    /// The best `(pri, id)` ready job in `c`'s unpaused watched tubes, or,
    /// in a weighted mode, the best of a tube drawn by weight.
    pub(super) fn best_ready_job(&self, c: ClientId) -> Option<JobId> {
        let client = self.clients.get(&c)?;
        if client.reserve_mode != crate::protocol::ReserveMode::Fifo {
            return self.drawn_ready_job(client);
        }
        let tubes = client.watched.iter().map(|&t| self.tubes.get(t));
        let best =
            tubes.filter(|tube| !tube.is_paused()).filter_map(|tube| self.ready_for_reserve(&tube.ready));
        best.min().map(|(_, id)| id)
    }

    pub(super) fn has_ready_job(&self, c: ClientId, include_paused: bool) -> bool {
        self.clients.get(&c).is_some_and(|client| {
            client.watched.iter().map(|&t| self.tubes.get(t)).any(|tube| {
                (include_paused || !tube.is_paused()) && self.ready_for_reserve(&tube.ready).is_some()
            })
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

    pub fn reserved_reply(&self, id: JobId) -> Option<Reply<'_>> {
        self.jobs.get(&id).map(|job| Reply::Reserved(id, job.body.data()))
    }
}
