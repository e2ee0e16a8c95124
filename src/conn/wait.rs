//! A blocked reserve's wait, on the connection's own thread: it sleeps on
//! the connection's `Condvar` until the engine has ended the wait (a job
//! reserved for it, a timeout, the safety margin, a hang-up, a byte that
//! calls off a `reserve-with-abort`), then writes
//! the outcome. Only this thread ever writes the client's socket; the
//! engine only wakes it (see `engine/client.rs` for the wait's states).

use std::os::fd::AsRawFd;

use super::buffers::IDLE_AFTER;
use super::{Conn, Next};
use crate::engine_lock::EngineGuard;
use crate::protocol::{ReplyRoom, SHORT_REPLY_LEN};

impl Conn<'_> {
    /// Sleeps until the engine ends this client's blocked reserve, then
    /// encodes the outcome. The engine's lock is let go while asleep. An
    /// `abortable` wait (`reserve-with-abort`) is watched for data too.
    pub(super) fn wait_for_outcome(&mut self, abortable: bool) -> Next {
        let shared = self.shared;
        self.watch_for_hang_up(abortable);
        // A wait may last hours: past IDLE_AFTER, hold no buffers through it.
        let idle_at = shared.clock.now().plus(IDLE_AFTER);
        let mut idle = false;
        let mut engine = shared.engine();
        loop {
            let now = shared.clock.now();
            // Room for the short replies (the buffer may have gone while
            // idle); a job's reply claims its own. Without that much, the
            // connection ends, and a job handed to it goes back.
            if !self.output.claim(SHORT_REPLY_LEN) {
                return Next::Close;
            }
            if let Some(reply) = engine.check_wait(self.client, now, &mut self.output) {
                reply.encode(&mut self.output);
                return Next::Continue;
            }
            if !idle && now >= idle_at {
                drop(engine);
                self.go_idle();
                idle = true;
                engine = shared.engine();
                continue;
            }
            let wake_at = engine.wake_time(self.client);
            let wake_at = if idle { wake_at } else { Some(wake_at.map_or(idle_at, |at| at.min(idle_at))) };
            engine = match wake_at {
                Some(at) => {
                    // Bounded: a sleep does not count time suspended.
                    let wait = at.duration_since(now).min(crate::time::LONGEST_SLEEP);
                    let guard = engine.into_inner();
                    EngineGuard::new(
                        self.condvar.wait_timeout(guard, wait).map_or_else(|e| e.into_inner().0, |r| r.0),
                    )
                }
                None => EngineGuard::new(
                    self.condvar.wait(engine.into_inner()).unwrap_or_else(|e| e.into_inner()),
                ),
            };
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
