//! The hand-off: a job given to a blocked reserve's client, and the life
//! of a wait around it. A job is reserved for the longest waiter at once
//! ([`Engine::hand_over`]) and its `RESERVED` reply left in the client's
//! mailbox, to be sent once the lock is let go; the reserve is then over,
//! and the waiter's connection goes back to reading without taking the
//! lock.
//!
//! A client with no room for the reply (or no mailbox) takes the old way:
//! its connection is woken to collect the job under the lock. If the job is
//! taken from the client before it was told, by its TTR running out or a
//! `flush-tube` ([`Engine::withdraw_handoff`]), its reply is withdrawn (or
//! never collected) and the client, never told, waits on in its old place
//! ([`Engine::resume_wait`]); a reply already partly sent is never
//! finished, and its connection ends. A job whose reply still finds no
//! room when the connection collects it goes back to ready, as if never
//! reserved ([`Engine::take_back_handoff`]): the client is answered
//! `OUT_OF_MEMORY`, and its connection goes on. The picture of a wait's states is on
//! `Blocked` in `client.rs`. Nothing here touches a socket: a reply is
//! sent by the client's [`Waker`], which is woken after the lock is let go
//! but for the few wakes that do not fit (see [`Engine::take_woken`]).

use super::*;

/// Marks a branch the engine's test cases must reach (`proofs/branches.rs`).
#[cfg(test)]
use super::proofs::branches::reached;
#[cfg(not(test))]
fn reached(_: &str) {}

impl Engine {
    /// Reserves job `id` for blocked client `c` and delivers its reply, or
    /// wakes its connection to collect it.
    pub(super) fn hand_over(&mut self, c: ClientId, id: JobId, now: Time) {
        let Some(wait) = self.stop_waiting(c) else {
            return;
        };
        self.reserve_for(c, id, now);
        // A batch's job is collected, with what else is ready then.
        if wait.batch || !self.deliver(c, id, wait) {
            self.set_outcome(c, Outcome::Reserved(id, wait));
        }
    }

    /// Leaves job `id`'s `RESERVED` reply in client `c`'s mailbox and ends
    /// its reserve, `wait`, kept in case the reply must be withdrawn: its
    /// TTR runs from now, as the reply leaves as soon as the lock is let
    /// go. False, with nothing changed, if the reply finds no room there.
    fn deliver(&mut self, c: ClientId, id: JobId, wait: Wait) -> bool {
        let (Some(client), Some(job)) = (self.clients.get(&c), self.jobs.get(&id)) else {
            return false;
        };
        // A body left in the log is read by the connection itself, off
        // the lock: it collects the job.
        let Some(body) = job.body.bytes() else { return false };
        let reply = Reply::Reserved(id, crate::protocol::Data::Bytes(body));
        let delivered = client.waker.deliver(id, &mut |out| {
            let room = out.claim(data_reply_len(body.len()));
            if room {
                reply.encode(out);
            }
            room
        });
        if !delivered {
            return false;
        }
        let Some(client) = self.clients.get_mut(&c) else {
            return false;
        };
        if let Some(blocked) = client.blocked.as_deref_mut() {
            *blocked = Blocked::Delivered(id, wait);
        }
        // Room for it was claimed when the reserve blocked.
        if self.woken.len() < self.woken.capacity() {
            self.woken.push(Arc::clone(&client.waker));
        } else {
            client.waker.wake();
        }
        true
    }

    /// Job `id`, reserved by `holder`, has just been taken from it by no
    /// command of its own: its TTR ran out, or a `flush-tube` deleted it
    /// (reference §10, "A lapsed hand-off"). If it was handed to `holder`
    /// while blocked and the client has not been told yet (another command
    /// held the lock for longer than the TTR, or its socket is full), the
    /// client never hears of the job: its reserve goes on, in the place in
    /// line it had, rather than receive a job that may by now be someone
    /// else's. A reply already partly sent is never finished: the client's
    /// connection ends. The job's counters keep the reservation: it
    /// happened, as far as the queue is concerned.
    pub(super) fn withdraw_handoff(&mut self, holder: ClientId, id: JobId, now: Time) {
        let Some(client) = self.clients.get_mut(&holder) else {
            return;
        };
        let Some(blocked) = client.blocked.as_deref_mut() else {
            return;
        };
        match *blocked {
            Blocked::Ended(Outcome::Reserved(handed, wait)) if handed == id => {
                reached("a hand-off not yet collected lapses: the wait goes on");
                self.resume_wait(holder, wait, now);
            }
            Blocked::Delivered(handed, wait) if handed == id => {
                if client.waker.withdraw(id) == Withdrawal::Withdrawn {
                    reached("a delivered hand-off not yet sent lapses: withdrawn, the wait goes on");
                    self.resume_wait(holder, wait, now);
                } else {
                    // Told, or told the start and cut off: the reserve is
                    // over, and nothing is left to withdraw.
                    reached("a delivered hand-off lapses after it was sent: the worker keeps it");
                    client.blocked = None;
                }
            }
            _ => {}
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
        } else if self.has_abort_input(c) {
            // Bytes that came while it held the job it never received: the
            // watcher's report of them found no wait to end.
            self.finish_wait(c, Outcome::Aborted);
        } else if let Some(id) = self.best_ready_job(c) {
            self.hand_over(c, id, now);
        }
    }

    /// Ends client `c`'s wait with `outcome` and wakes its connection.
    pub(super) fn finish_wait(&mut self, c: ClientId, outcome: Outcome) {
        self.stop_waiting(c);
        self.set_outcome(c, outcome);
    }

    /// Leaves `outcome` for client `c`'s connection and wakes it: once the
    /// lock is let go, if there is room to note it (see
    /// [`Engine::take_woken`]), else now.
    pub(super) fn set_outcome(&mut self, c: ClientId, outcome: Outcome) {
        if let Some(client) = self.clients.get_mut(&c) {
            if let Some(blocked) = &mut client.blocked {
                **blocked = Blocked::Ended(outcome);
            }
            if self.woken.len() < self.woken.capacity() {
                self.woken.push(Arc::clone(&client.waker));
            } else {
                client.waker.wake();
            }
        }
    }

    /// Whether any wait has ended since the lock was taken: most holds of
    /// the lock end none, and their holder has nobody to wake.
    pub fn has_woken(&self) -> bool {
        !self.woken.is_empty()
    }

    /// Moves the wakers of the waits ended since the lock was taken into
    /// `into`, for the lock's holder to wake once it has let the lock go:
    /// a thread woken under the lock would only find it taken and sleep
    /// again, and the wake's system call would hold up everyone. Returns
    /// how many it moved; any that do not fit are woken now.
    pub fn take_woken(&mut self, into: &mut [Option<Arc<dyn Waker>>]) -> usize {
        let mut moved = 0;
        while let Some(waker) = self.woken.pop() {
            match into.get_mut(moved) {
                Some(slot) => {
                    *slot = Some(waker);
                    moved += 1;
                }
                None => waker.wake(),
            }
        }
        moved
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

    /// A job handed over whose reply cannot be written goes back to ready,
    /// as if it had never been reserved: no client saw it.
    pub(super) fn take_back_handoff(&mut self, id: JobId, now: Time) {
        self.unlink(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.counters.reserves = job.counters.reserves.wrapping_sub(1);
        }
        self.make_ready(id, now);
        self.serve_freed(now);
    }
}
