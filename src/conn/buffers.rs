//! A connection's two buffers: filling the input from the socket, writing
//! the output to it, and letting both go while the client is idle. Nothing
//! here knows a command.
//!
//! A simpler server would give each connection two buffers for life. We
//! keep them only while the client is busy: a busy connection keeps its
//! buffers from one command to the next, so the hot path allocates
//! nothing; once its client has been quiet for [`IDLE_AFTER`] (waiting for
//! its next command, or in a blocked reserve) the connection lets go of
//! both at its loop's next sweep, and they come back when bytes arrive. So
//! an idle connection costs its few hundred bytes of state, whatever it
//! did before (a `stats` or `list-tubes` reply can take many kilobytes).

use std::io::{self, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::{Conn, State, Step};
use crate::sys;

/// The output buffer's first allocation. At this size it is a mapping of
/// its own (see `sys::Allocator`): only the pages written take memory,
/// and freeing it, as the connection goes idle, gives them back at once.
pub(super) const OUTPUT_START: usize = sys::OWN_MAPPING_AT;

/// How long a client may be quiet before its connection counts as idle and
/// lets go of its buffers. Going idle and busy again costs about 10 µs
/// (the buffers' pages are unmapped, then mapped and touched anew), so this
/// is long enough that a worker of a large fleet, which may wait a good
/// fraction of a second between jobs, does not pay it for every job; and
/// short enough that a burst of short-lived clients does not hold its
/// buffers for long. The loop sweeps this often, so a buffer is let
/// go between one and two of it after its last use.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Past this much output pending, no more commands are answered until the
/// socket has taken some.
pub(super) const OUTPUT_HIGH_WATER: usize = 64 * 1024;

impl Conn {
    /// Allocates the output buffer if the connection went idle and freed
    /// it, at its full size at once (see [`OUTPUT_START`]).
    fn restore_output(&mut self) {
        if self.output.capacity() == 0 {
            // Without it, replies grow the buffer as they need.
            let _ = self.output.try_reserve(OUTPUT_START);
        }
    }

    /// The loop's sweep: a connection not served since the last one lets
    /// go of both buffers, if nothing is left in them. Each is a mapping
    /// of its own (see `sys::Allocator`), so its pages go back to the
    /// system at once.
    pub(crate) fn sweep(&mut self) {
        if std::mem::take(&mut self.heard) {
            self.quiet_sweeps = 0;
        } else {
            self.quiet_sweeps = self.quiet_sweeps.saturating_add(1);
        }
        if std::mem::take(&mut self.busy) {
            return;
        }
        if !matches!(self.state, State::Commands | State::Waiting { .. }) || self.unsent < self.output.len() {
            return;
        }
        self.input.release_if_drained();
        self.output = Vec::new();
        self.unsent = 0;
        self.link.mailbox.go_idle();
    }

    /// Whether `--conn-idle-timeout`, `limit` seconds, ends this
    /// connection now: it sent nothing for that long (counted in the
    /// loop's sweeps, a second apart), it is between commands with nothing
    /// left to send, and it neither waits in a reserve nor holds a job,
    /// which a worker between long jobs does (beanstalkd never closes an
    /// idle connection; this is for fleets whose clients leak them).
    pub(crate) fn idle_past(&self, limit: u32) -> bool {
        self.quiet_sweeps >= limit
            && matches!(self.state, State::Commands)
            && self.unsent == self.output.len()
            && self.input.is_drained()
            && !self.shared.engine().holds_any(self.client)
    }

    /// Reads more input, if the socket may have some and this turn has
    /// reads left.
    pub(super) fn read_more(&mut self, reads: &mut usize) -> io::Result<Step> {
        if !self.readable {
            return Ok(Step::Blocked);
        }
        if *reads == 0 {
            return Ok(Step::Yield);
        }
        *reads -= 1;
        let filled = match self.input.fill(&self.link.stream) {
            // The buffer needs whole pages: if there are none, empty
            // those a few live jobs pin, and try once more.
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory && self.shared.make_room() => {
                self.input.fill(&self.link.stream)
            }
            filled => filled,
        };
        match filled {
            Ok(0) => self.hang_up(),
            Ok(_) => {
                self.heard = true;
                // Edge-triggered: a short read emptied the socket, and
                // more bytes will be reported when they come (but for the
                // end of file after a hang-up, which is read for).
                self.readable = !self.input.last_read_was_short() || self.hung_up;
                self.restore_output();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                return Ok(Step::Blocked);
            }
            Err(e) => return Err(e),
        }
        Ok(Step::Again)
    }

    /// Notes EOF: the client will send nothing more, so it must not block.
    pub(super) fn hang_up(&mut self) {
        self.eof = true;
        self.readable = false;
        self.shared.engine().hang_up(self.client);
    }

    /// Writes what the socket takes of the pending replies; true once
    /// none are left.
    pub(super) fn write_out(&mut self) -> io::Result<bool> {
        // A reply waiting for the disk does not leave before it is durable.
        let end = self.on_disk.map_or(self.output.len(), |(_, start)| start);
        if !self.job_replies.is_empty() && self.unsent < end && self.writable {
            self.check_job_replies()?;
        }
        while self.unsent < end {
            if !self.writable {
                self.count_unsent(self.output.len() - self.unsent);
                return Ok(false);
            }
            match (&self.link.stream).write(&self.output[self.unsent..end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.unsent += n;
                    // Edge-triggered: a short write filled the socket.
                    self.writable = self.unsent == end;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Err(e) => return Err(e),
            }
        }
        if end < self.output.len() {
            self.count_unsent(self.output.len() - self.unsent);
            return Ok(false);
        }
        self.count_unsent(0);
        self.output.clear();
        self.unsent = 0;
        self.job_replies.clear();
        // A batch of replies past the buffer's size (a large job, a long
        // `list-tubes`) is not kept for the rest of a busy spell. Into a
        // new buffer if one can be had (`shrink_to` would abort where the
        // allocator must move the block and cannot): a busy connection
        // never lets go of the buffer it has.
        if self.output.capacity() > OUTPUT_START {
            let mut smaller = Vec::new();
            if smaller.try_reserve_exact(OUTPUT_START).is_ok() {
                self.output = smaller;
            }
        }
        Ok(true)
    }

    /// Before more of a job's `RESERVED` reply leaves in a later turn than
    /// the one that reserved it: the job must still be this client's. One
    /// whose TTR ran out (or that a `flush-tube` took) while its reply
    /// waited for room is never finished, whoever holds it now: the
    /// connection ends (reference §10). Replies all sent are forgotten.
    fn check_job_replies(&mut self) -> io::Result<()> {
        let unsent = self.unsent;
        self.job_replies.retain(|&(_, end)| end > unsent);
        if self.job_replies_fresh || self.job_replies.is_empty() {
            return Ok(());
        }
        let (engine, _) = self.shared.engine_now();
        if self.job_replies.iter().all(|&(id, _)| engine.holds(self.client, id)) {
            return Ok(());
        }
        drop(engine);
        self.link.stream.shutdown();
        Err(io::Error::new(io::ErrorKind::ConnectionAborted, "a job's reply lapsed before it was sent"))
    }

    /// Counts `bytes` of this connection's replies as waiting for its
    /// client to read them (`Shared::replies_unsent`, for `--metrics`).
    pub(super) fn count_unsent(&mut self, bytes: usize) {
        if bytes != self.counted {
            let all = &self.shared.replies_unsent;
            all.fetch_add(bytes as u64, Relaxed);
            all.fetch_sub(self.counted as u64, Relaxed);
            self.counted = bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    use super::super::{Conn, Served};
    use crate::server::Server;
    use crate::stream::{SharedConn, Stream};
    use crate::wakes::Wakes;
    use crate::Config;

    #[test]
    fn a_connection_quiet_for_a_sweep_lets_go_of_its_buffers_and_gets_them_back() {
        let server = Server::bind(Config::loopback()).unwrap();
        let shared = server.shared();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stream = Stream::Unix(ours);
        stream.set_nonblocking().unwrap();
        let link = Arc::new(SharedConn::new(stream, Arc::new(Wakes::new(0).unwrap())));
        let client = shared.engine().connect(link.clone()).unwrap();
        let mut conn = Conn::new(Arc::clone(shared), link, client, true);

        theirs.write_all(b"list-tubes\r\nstats\r\n").unwrap();
        assert_eq!(conn.serve(), Served::Waits(None), "answered, and waits for more");
        let mut replies = vec![0; 64 * 1024];
        let n = theirs.read(&mut replies).unwrap();
        assert!(replies[..n].starts_with(b"OK "));
        assert!(conn.input.capacity() > 0 && conn.output.capacity() > 0);

        // The sweep after its last command keeps them; the one after a
        // quiet spell lets them go.
        conn.sweep();
        assert!(conn.input.capacity() > 0 && conn.output.capacity() > 0, "busy since the last sweep");
        conn.sweep();
        assert_eq!((conn.input.capacity(), conn.output.capacity()), (0, 0));

        // Bytes again: the buffers come back, and the command is answered.
        theirs.write_all(b"list-tube-used\r\n").unwrap();
        conn.note(true, false, false);
        assert_eq!(conn.serve(), Served::Waits(None));
        let n = theirs.read(&mut replies).unwrap();
        assert_eq!(&replies[..n], b"USING default\r\n");
        assert_eq!(conn.output.capacity(), super::OUTPUT_START, "back at its full size at once");
    }
}
