//! A connection's two buffers: filling the input from the socket, writing
//! the output to it, and letting both go while the client is idle. Nothing
//! here knows a command.
//!
//! A simpler server would give each connection two buffers for life. We
//! keep them only while the client is busy: a busy connection keeps its
//! buffers from one command to the next, so the hot path allocates
//! nothing; once its client has been quiet for [`IDLE_AFTER`] (waiting for
//! its next command, or in a blocked reserve) the connection lets go of
//! both, and they come back when bytes arrive. So an idle connection costs
//! its thread and nothing more, whatever it did before (a `stats` or
//! `list-tubes` reply can take many kilobytes): 10 KiB instead of the
//! 128 KiB of address space and the pages its replies touched.

use std::io::{self, Write};
use std::time::Duration;

use super::Conn;
use crate::sys;

/// The output buffer's first allocation. At this size it is a mapping of
/// its own (see `sys::Allocator`): only the pages written take memory,
/// and freeing it, as the connection goes idle, gives them back at once.
/// (Grown from a few bytes, it would also leave a chunk of every size on
/// the way in the thread's malloc cache, kept as long as the thread lives.)
pub(super) const OUTPUT_START: usize = sys::OWN_MAPPING_AT;

/// How long a client may be quiet before its connection counts as idle and
/// lets go of its buffers. Going idle and busy again costs about 10 µs
/// (the buffers' pages are unmapped, then mapped and touched anew), so this
/// is long enough that a worker of a large fleet, which may wait a good
/// fraction of a second between jobs, does not pay it for every job; and
/// short enough that a burst of short-lived clients does not hold its
/// buffers for long.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Output is flushed early once this much is pending.
pub(super) const OUTPUT_HIGH_WATER: usize = 64 * 1024;

impl Conn<'_> {
    /// Allocates the output buffer if the connection went idle and freed
    /// it, at its full size at once (see [`OUTPUT_START`]).
    pub(super) fn restore_output(&mut self) {
        if self.output.capacity() == 0 {
            // Without it, replies grow the buffer as they need.
            let _ = self.output.try_reserve(OUTPUT_START);
        }
    }

    /// The client has been quiet for [`IDLE_AFTER`]: frees both buffers if
    /// nothing is left in them. Each is a mapping of its own (see
    /// `sys::Allocator`), so its pages go back to the system at once.
    pub(super) fn go_idle(&mut self) {
        self.input.release_if_drained();
        if self.output.is_empty() {
            self.output = Vec::new();
        }
        self.mailbox.go_idle();
    }

    /// Reads more input. Returns false at EOF (the client half-closed). A
    /// client quiet for [`IDLE_AFTER`] with nothing left to answer makes the
    /// connection idle: it lets go of its buffers, then sleeps until the
    /// client sends again.
    pub(super) fn fill(&mut self) -> io::Result<bool> {
        loop {
            let filled = match self.input.fill(self.stream) {
                // The buffer needs whole pages: if there are none, empty
                // those a few live jobs pin, and try once more.
                Err(e) if e.kind() == io::ErrorKind::OutOfMemory && self.shared.make_room() => {
                    self.input.fill(self.stream)
                }
                filled => filled,
            };
            match filled? {
                Some(0) => {
                    self.hang_up();
                    return Ok(false);
                }
                Some(_) => {
                    self.restore_output();
                    return Ok(true);
                }
                None => {
                    self.go_idle();
                    self.stream.wait_readable()?;
                }
            }
        }
    }

    /// Notes EOF: the client will send nothing more, so it must not block.
    pub(super) fn hang_up(&mut self) {
        self.eof = true;
        self.shared.engine().hang_up(self.client);
    }

    /// Fills `dst` from buffered input, then from the socket. Returns false
    /// if the connection ends first.
    pub(super) fn read_exact(&mut self, dst: &mut [u8]) -> io::Result<bool> {
        let mut filled = self.input.take(dst);
        while filled < dst.len() {
            if self.eof {
                return Ok(false);
            }
            match self.stream.read_waiting(&mut dst[filled..])? {
                0 => self.hang_up(),
                n => filled += n,
            }
        }
        Ok(true)
    }

    /// Reads and drops `count` bytes. Returns false if the connection ends
    /// first.
    pub(super) fn discard(&mut self, mut count: u64) -> io::Result<bool> {
        loop {
            count -= self.input.skip(count);
            if count == 0 {
                return Ok(true);
            }
            if self.eof || !self.fill()? {
                return Ok(false);
            }
        }
    }

    pub(super) fn flush(&mut self) -> io::Result<()> {
        if !self.output.is_empty() {
            // The front of a delivered reply may have been sent already
            // (see `mailbox.rs`).
            let unsent = &self.output[std::mem::take(&mut self.sent_early)..];
            // Counted while it waits for the client to read it.
            let counted = &self.shared.replies_unsent;
            counted.fetch_add(unsent.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let result = self.stream.write_all(unsent);
            counted.fetch_sub(unsent.len() as u64, std::sync::atomic::Ordering::Relaxed);
            self.output.clear();
            // A batch of replies past the buffer's size (a large job, a long
            // `list-tubes`) is not kept for the rest of a busy spell.
            // Into a new buffer if one can be had (`shrink_to` would abort
            // where the allocator must move the block and cannot): a busy
            // connection never lets go of the buffer it has.
            if self.output.capacity() > OUTPUT_START {
                let mut smaller = Vec::new();
                if smaller.try_reserve_exact(OUTPUT_START).is_ok() {
                    self.output = smaller;
                }
            }
            result?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::{Conn, Next};
    use crate::mailbox::Mailbox;
    use crate::protocol::TubeName;
    use crate::server::Server;
    use crate::stream::Stream;
    use crate::Config;

    #[test]
    fn buffers_are_freed_once_large_replies_have_gone_out() {
        let server = Server::bind(Config::loopback()).unwrap();
        let shared = server.shared();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stream = Stream::Unix(ours);
        let mailbox = Arc::new(Mailbox::default());
        let waker: Arc<dyn crate::engine::Waker> = mailbox.clone();
        let client = shared.engine().connect(waker).unwrap();
        // 300 tubes with long names make `list-tubes` about 20 KB.
        for i in 0..300 {
            let name = TubeName::new(format!("a-tube-with-a-name-long-enough-to-matter-{i:03}").as_bytes());
            shared.engine().watch(client, &name.unwrap());
        }
        let mut conn = Conn::new(shared, &stream, client, &mailbox);

        theirs.write_all(b"list-tubes\r\nstats\r\n").unwrap();
        assert!(conn.fill().unwrap());
        assert!(conn.answer_buffered().unwrap() == Next::Continue);
        assert!(conn.output.capacity() > 16 * 1024, "{}", conn.output.capacity());
        conn.flush().unwrap();
        let mut replies = vec![0; conn.output.capacity()];
        let n = theirs.read(&mut replies).unwrap();
        assert!(replies[..n].starts_with(b"OK "));

        // The client goes quiet: buffers are kept for IDLE_AFTER (here cut
        // to 10 ms), then let go of.
        stream.set_idle_timeout(Duration::from_millis(10)).unwrap();
        assert_eq!(conn.input.fill(&stream).unwrap(), None, "nothing came: idle");
        conn.go_idle();
        assert_eq!((conn.input.capacity(), conn.output.capacity()), (0, 0));
    }

    #[test]
    fn an_idle_connection_sleeps_until_its_client_sends_again() {
        let server = Server::bind(Config::loopback()).unwrap();
        let shared = server.shared();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stream = Stream::Unix(ours);
        stream.set_idle_timeout(Duration::from_millis(10)).unwrap();
        let mailbox = Arc::new(Mailbox::default());
        let waker: Arc<dyn crate::engine::Waker> = mailbox.clone();
        let client = shared.engine().connect(waker).unwrap();
        let mut conn = Conn::new(shared, &stream, client, &mailbox);

        // The client sends its command 20 idle timeouts late. The
        // connection went idle on the way, and no timeout ended the wait.
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            theirs.write_all(b"stats\r\n").unwrap();
            theirs
        });
        assert!(conn.fill().unwrap());
        assert_eq!(
            conn.output.capacity(),
            super::super::buffers::OUTPUT_START,
            "buffers back once bytes came"
        );
        assert!(conn.answer_buffered().unwrap() == Next::Continue);
        assert!(conn.output.starts_with(b"OK "));
        drop(late.join().unwrap());

        // A body that stalls past the idle timeout is waited for.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stream = Stream::Unix(ours);
        stream.set_idle_timeout(Duration::from_millis(10)).unwrap();
        let mut conn = Conn::new(shared, &stream, client, &mailbox);
        let slow = std::thread::spawn(move || {
            theirs.write_all(b"put 0 0 60 5\r\nhe").unwrap();
            std::thread::sleep(Duration::from_millis(100));
            theirs.write_all(b"llo\r\n").unwrap();
            let mut reply = [0; 12];
            theirs.read_exact(&mut reply).unwrap();
            reply
        });
        assert!(conn.fill().unwrap());
        assert!(conn.answer_buffered().unwrap() == Next::Continue);
        conn.flush().unwrap();
        assert_eq!(&slow.join().unwrap(), b"INSERTED 1\r\n");
    }
}
