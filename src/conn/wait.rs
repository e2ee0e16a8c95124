//! A blocked reserve's wait, on the connection's own thread: it sleeps in
//! the connection's mailbox until the engine has ended the wait (a job
//! reserved for it, a timeout, the safety margin, a hang-up, a byte that
//! calls off a `reserve-with-abort`), then writes the outcome.
//!
//! A job handed over arrives as its whole `RESERVED` reply, perhaps partly
//! sent already by the thread that handed it over: this thread writes the
//! rest without taking the engine's lock (see `mailbox.rs` for who may
//! write the socket, and when). Every other ending is collected from the
//! engine, under the lock (see `engine/client.rs` for the wait's states).

use std::os::fd::AsRawFd;

use super::buffers::IDLE_AFTER;
use super::{Conn, Next};
use crate::mailbox::Woken;
use crate::protocol::{ReplyRoom, SHORT_REPLY_LEN};
use crate::time::Time;

impl Conn<'_> {
    /// Sleeps until this client's blocked reserve ends, then has its reply
    /// in the output buffer. `wake_at` is when the engine, as the reserve
    /// blocked, said to look again if nothing came before. An `abortable`
    /// wait (`reserve-with-abort`) is watched for data too.
    pub(super) fn wait_for_outcome(&mut self, abortable: bool, mut wake_at: Option<Time>) -> Next {
        let shared = self.shared;
        self.watch_for_hang_up(abortable);
        // A wait may last hours: past IDLE_AFTER, hold no buffers through it.
        let idle_at = shared.clock.now().plus(IDLE_AFTER);
        let mut idle = false;
        loop {
            let now = shared.clock.now();
            if !idle && now >= idle_at {
                self.go_idle();
                idle = true;
            }
            let look_at = if idle { wake_at } else { Some(wake_at.map_or(idle_at, |at| at.min(idle_at))) };
            // Bounded: a sleep does not count time suspended.
            let sleep = look_at.map(|at| at.duration_since(now).min(crate::time::LONGEST_SLEEP));
            if let Woken::Delivered { sent } = self.mailbox.sleep(sleep, &mut self.output) {
                self.sent_early = sent;
                return Next::Continue;
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

    /// This thread does not read while it waits, so only the hang-up
    /// watcher (see `hangup.rs`) can notice that the client went away, or,
    /// for an `abortable` wait, sent a byte. Armed after the wait is
    /// registered: bytes already in the socket are reported at once.
    fn watch_for_hang_up(&mut self, abortable: bool) {
        let shared = self.shared;
        let fd = self.stream.as_raw_fd();
        let watching = shared.hangups.watch(fd, self.client, self.hangup_registered, abortable);
        self.hangup_registered |= watching.is_ok();
        if watching.is_err() {
            // A socket we cannot watch is as good as gone.
            shared.engine().hang_up(self.client);
        }
    }
}
