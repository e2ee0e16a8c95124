//! A blocked reserve's wait, on the connection's own thread, in one of two
//! places. A plain `reserve` or `reserve-with-timeout` that no timeout or
//! safety margin can end within [`IDLE_AFTER`] (with room for a late
//! timer) is spent in a read of the socket, as an idle client's is: the
//! job handed over is sent by the thread that handed it over, the worker
//! answers it, and this thread wakes once, to the worker's next command,
//! with the reply waiting for it in the mailbox. Any other wait (a
//! `reserve-with-abort`, commands pipelined behind the reserve, a timeout
//! or margin sooner), or the rest of one that found no job in that time,
//! sleeps in the connection's mailbox until the engine has ended it (a job
//! reserved for it, a timeout, the safety margin, a hang-up, a byte that
//! calls off a `reserve-with-abort`), then writes the outcome.
//!
//! A job handed over arrives as its whole `RESERVED` reply, perhaps partly
//! sent already by the thread that handed it over (or, during a read, by
//! the hang-up watcher): this thread writes the rest without taking the
//! engine's lock (see `mailbox.rs` for who may write the socket, and
//! when). Every other ending is collected from the engine, under the lock
//! (see `engine/client.rs` for the wait's states). One ending waits for a
//! read to give up: a job whose reply found no room in the mailbox (memory
//! is short), which this thread then collects, within a second.

use std::os::fd::AsRawFd;

use super::buffers::IDLE_AFTER;
use super::{Conn, Next};
use crate::mailbox::Woken;
use crate::protocol::{ReplyRoom, SHORT_REPLY_LEN};
use crate::time::Time;

/// How late a read's one-second timeout may fire (the kernel's timer
/// wheel rounds it up by tens of milliseconds): a wait whose timeout or
/// safety margin falls this close after [`IDLE_AFTER`] is not read, so
/// that its reply is not late.
const LATE_TIMER: std::time::Duration = std::time::Duration::from_millis(100);

impl Conn<'_> {
    /// Sleeps until this client's blocked reserve ends, then has its reply
    /// in the output buffer. `wake_at` is when the engine, as the reserve
    /// blocked, said to look again if nothing came before. An `abortable`
    /// wait (`reserve-with-abort`) is watched for data too.
    pub(super) fn wait_for_outcome(&mut self, abortable: bool, mut wake_at: Option<Time>) -> Next {
        let shared = self.shared;
        let mut idle = false;
        if !abortable && self.may_wait_reading(wake_at) {
            match self.wait_reading() {
                Some(next) => return next,
                // A second without a job: the wait goes on without buffers.
                None if self.input.is_drained() && !self.eof => {
                    self.go_idle();
                    idle = true;
                }
                // Bytes came (they wait for the reserve to end), or the
                // client went: the engine has been told, and answers.
                None => {}
            }
        }
        self.watch_for_hang_up(abortable);
        // A wait may last hours: past IDLE_AFTER, hold no buffers through it.
        let idle_at = shared.clock.now().plus(IDLE_AFTER);
        loop {
            let now = shared.clock.now();
            if !idle && now >= idle_at {
                self.go_idle();
                idle = true;
            }
            let look_at = if idle { wake_at } else { Some(wake_at.map_or(idle_at, |at| at.min(idle_at))) };
            // Bounded: a sleep does not count time suspended.
            let sleep = look_at.map(|at| at.duration_since(now).min(crate::time::LONGEST_SLEEP));
            match self.mailbox.sleep(sleep, &mut self.output) {
                Woken::Delivered { sent } => return self.take_delivery(sent),
                Woken::Cut => return Next::Close,
                Woken::Look => {}
            }
            // Room for the short replies (the buffer may have gone while
            // idle); a job's reply claims its own. Without that much, the
            // connection ends, and a job handed to it goes back.
            if !self.output.claim(SHORT_REPLY_LEN) {
                return Next::Close;
            }
            let now = shared.clock.now();
            let mut engine = shared.engine();
            if let Some(reply) = engine.check_wait(self.client, now, &mut self.output) {
                reply.encode(&mut self.output);
                return Next::Continue;
            }
            wake_at = engine.wake_time(self.client);
        }
    }

    /// Whether this wait may be spent in a read: the read gives up after
    /// [`IDLE_AFTER`], and nothing the engine knows of can end the wait
    /// before then but a job, which reaches the client without this thread
    /// (but for the one ending in the module's paragraph). The mailbox has
    /// the last word: a wait already over is not read.
    fn may_wait_reading(&self, wake_at: Option<Time>) -> bool {
        let read_gives_up_by = self.shared.clock.now().plus(IDLE_AFTER).plus(LATE_TIMER);
        self.reads_time_out
            && !self.eof
            && self.input.is_drained()
            && wake_at.is_none_or(|at| at >= read_gives_up_by)
            && self.mailbox.start_reading()
    }

    /// Waits in a read of the socket (the mailbox knows) until the client
    /// sends, goes, or a second passes. A job handed over meanwhile is then
    /// in the mailbox, sent whole or in part: the reserve is over, and what
    /// was read is the client's next command. Otherwise (`None`) the wait
    /// goes on in the mailbox; a hang-up seen here has ended it.
    fn wait_reading(&mut self) -> Option<Next> {
        let read = self.input.fill(self.stream);
        let woken = self.mailbox.stop_reading(&mut self.output);
        // End of file, or a socket that cannot be read: the client is gone
        // or going, and must not block again (reference §1.7).
        if matches!(read, Ok(Some(0)) | Err(_)) {
            self.hang_up();
        }
        match woken {
            Woken::Delivered { sent } => Some(self.take_delivery(sent)),
            Woken::Cut => Some(Next::Close),
            Woken::Look => None,
        }
    }

    /// A job's reply, delivered to this thread's mailbox, is in the output
    /// buffer, its first `sent` bytes sent already. The rest is sent now:
    /// until it all is, the engine may still take the job back, which
    /// shuts the socket down and so ends this send and the connection
    /// (`Mailbox::withdraw`); once it all is, the job is the client's.
    fn take_delivery(&mut self, sent: usize) -> Next {
        self.sent_early = sent;
        if sent == self.output.len() {
            return Next::Continue;
        }
        if self.flush().is_err() {
            return Next::Close;
        }
        self.mailbox.told();
        Next::Continue
    }

    /// Asleep in the mailbox, this thread does not read, so only the
    /// hang-up watcher (see `hangup.rs`) can notice that the client went
    /// away, or, for an `abortable` wait, sent a byte. Armed after the wait
    /// is registered: bytes already in the socket are reported at once.
    fn watch_for_hang_up(&mut self, abortable: bool) {
        let shared = self.shared;
        let fd = self.stream.as_raw_fd();
        if shared.hangups.watch(fd, self.client, abortable).is_err() {
            // A socket we cannot watch is as good as gone.
            shared.engine().hang_up(self.client);
        }
    }
}
