//! One client connection: read a line (and a body), ask the engine, write
//! the reply. Runs on the connection's own thread.
//!
//! `framing` turns the bytes into lines; here each line becomes a command,
//! a put's body is read by exact length (bounded by `-z`, reference §1.5),
//! and the reply is encoded. Replies are collected in an
//! output buffer and written when there is no complete command left to
//! answer, so a pipelining client gets many replies per write. The engine
//! lock is held only around engine calls, never across socket I/O.
//!
//! A busy connection keeps its buffers from one command to the next, so the
//! hot path allocates nothing. Once its client has been quiet for
//! [`IDLE_AFTER`] (waiting for its next command, or in a blocked reserve)
//! the connection is idle: it lets go of both buffers, which come back when
//! bytes arrive, so an idle connection costs its thread and nothing more,
//! whatever it did before (a `stats` or `list-tubes` reply can take many
//! kilobytes). It then sleeps in `poll`, which has no timeout, until its
//! client sends again.

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar};
use std::time::Duration;

use crate::engine::{ClientId, Engine, NewJob};
use crate::framing::{Input, Line};
use crate::protocol::{self, Command, Reply};
use crate::shared::Shared;
use crate::stream::{ConnWaiter, Stream};
use crate::sys;
use crate::time::Time;

/// The output buffer's first allocation. At this size it is a mapping of
/// its own (see `sys::Allocator`): only the pages written take memory,
/// and freeing it, as the connection goes idle, gives them back at once.
/// (Grown from a few bytes, it would also leave a chunk of every size on
/// the way in the thread's malloc cache, kept as long as the thread lives.)
const OUTPUT_START: usize = sys::OWN_MAPPING_AT;

/// How long a client may be quiet before its connection counts as idle and
/// lets go of its buffers. Going idle and busy again costs about 10 µs
/// (the buffers' pages are unmapped, then mapped and touched anew), so this
/// is long enough that a worker of a large fleet, which may wait a good
/// fraction of a second between jobs, does not pay it for every job; and
/// short enough that a burst of short-lived clients does not hold its
/// buffers for long.
pub(crate) const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Output is flushed early once this much is pending.
const OUTPUT_HIGH_WATER: usize = 64 * 1024;

/// Serves one client until it quits or disconnects, then tells the engine.
pub(crate) fn serve(shared: Arc<Shared>, waker: Arc<ConnWaiter>, client: ClientId) {
    // Without it the connection works the same, but never goes idle.
    let _ = waker.stream.set_idle_timeout(IDLE_AFTER);
    let _ = Conn::new(&shared, &waker.stream, client, &waker.condvar).run();
    shared.engine().disconnect(client, shared.clock.now());
    shared.log(1, format_args!("close {}", waker.stream.as_raw_fd()));
    shared.connection_closed(client);
}

/// What to do after a command.
#[derive(PartialEq, Eq)]
enum Next {
    Continue,
    Close,
}

struct Conn<'a> {
    shared: &'a Shared,
    stream: &'a Stream,
    client: ClientId,
    waker: &'a Condvar,
    /// Bytes received and not yet answered.
    input: Input,
    /// The client has shut down its sending side.
    eof: bool,
    /// Replies not yet written. Freed, like `input`, when the connection
    /// goes idle.
    output: Vec<u8>,
    /// The hang-up watcher knows this socket (see `hangup.rs`).
    hangup_registered: bool,
}

impl<'a> Conn<'a> {
    fn new(shared: &'a Shared, stream: &'a Stream, client: ClientId, waker: &'a Condvar) -> Conn<'a> {
        Conn {
            shared,
            stream,
            client,
            waker,
            input: Input::default(),
            eof: false,
            output: Vec::new(),
            hangup_registered: false,
        }
    }

    fn run(&mut self) -> io::Result<()> {
        loop {
            if self.answer_buffered()? == Next::Close {
                return self.flush();
            }
            self.flush()?;
            if self.eof || !self.fill()? {
                return Ok(());
            }
        }
    }

    /// Answers every complete command in the input buffer, leaving the
    /// replies in the output buffer (flushed early only past the high-water
    /// mark).
    fn answer_buffered(&mut self) -> io::Result<Next> {
        while let Some(line) = self.input.next_line() {
            match line {
                Line::Complete(start, end) => {
                    if self.execute_line(start, end)? == Next::Close {
                        return Ok(Next::Close);
                    }
                }
                Line::TooLong => Reply::BadFormat.encode(&mut self.output),
            }
            if self.output.len() >= OUTPUT_HIGH_WATER {
                self.flush()?;
            }
        }
        Ok(Next::Continue)
    }

    /// Allocates the output buffer if the connection went idle and freed
    /// it, at its full size at once (see [`OUTPUT_START`]).
    fn reserve_output(&mut self) {
        if self.output.capacity() == 0 {
            // Without it, replies grow the buffer as they need.
            let _ = self.output.try_reserve(OUTPUT_START);
        }
    }

    /// The client has been quiet for [`IDLE_AFTER`]: frees both buffers if
    /// nothing is left in them. Each is a mapping of its own (see
    /// `sys::Allocator`), so its pages go back to the system at once.
    fn go_idle(&mut self) {
        self.input.release_if_drained();
        if self.output.is_empty() {
            self.output = Vec::new();
        }
    }

    // ---------------------------------------------------------------
    // Framing
    // ---------------------------------------------------------------

    /// Reads more input. Returns false at EOF (the client half-closed). A
    /// client quiet for [`IDLE_AFTER`] with nothing left to answer makes the
    /// connection idle: it lets go of its buffers, then sleeps until the
    /// client sends again.
    fn fill(&mut self) -> io::Result<bool> {
        loop {
            match self.input.fill(self.stream)? {
                Some(0) => {
                    self.hang_up();
                    return Ok(false);
                }
                Some(_) => {
                    self.reserve_output();
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
    fn hang_up(&mut self) {
        self.eof = true;
        self.shared.engine().hang_up(self.client);
    }

    /// Fills `dst` from buffered input, then from the socket. Returns false
    /// if the connection ends first.
    fn read_exact(&mut self, dst: &mut [u8]) -> io::Result<bool> {
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
    fn discard(&mut self, mut count: u64) -> io::Result<bool> {
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

    fn flush(&mut self) -> io::Result<()> {
        if !self.output.is_empty() {
            let result = self.stream.write_all(&self.output);
            self.output.clear();
            // A batch of replies past the buffer's size (a large job, a long
            // `list-tubes`) is not kept for the rest of a busy spell.
            if self.output.capacity() > OUTPUT_START {
                self.output.shrink_to(OUTPUT_START);
            }
            result?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------
    // Commands
    // ---------------------------------------------------------------

    fn execute_line(&mut self, start: usize, end: usize) -> io::Result<Next> {
        let command = protocol::parse(self.input.line(start, end));
        let verbose = self.shared.config.verbosity >= 2;
        if verbose {
            let line = String::from_utf8_lossy(self.input.line(start, end)).into_owned();
            self.shared.log(2, format_args!("<{} command {line}", self.stream.as_raw_fd()));
        }
        let reply_from = self.output.len();
        let next = match command {
            Err(e) => {
                e.reply().encode(&mut self.output);
                Next::Continue
            }
            Ok(command) => self.execute(command)?,
        };
        if verbose && self.output.len() > reply_from {
            let reply = &self.output[reply_from..];
            let first = reply.split(|&b| b == b'\r').next().unwrap_or_default();
            let first = String::from_utf8_lossy(first).into_owned();
            self.shared.log(2, format_args!(">{} reply {first}", self.stream.as_raw_fd()));
        }
        Ok(next)
    }

    /// One command, one arm: most are a single engine call.
    fn execute(&mut self, command: Command) -> io::Result<Next> {
        let c = self.client;
        match command {
            Command::Put { pri, delay, ttr, bytes, junk_after_size } => {
                return self.put(pri, delay, ttr, bytes, junk_after_size)
            }
            Command::Reserve => return self.reserve(None),
            Command::ReserveWithTimeout(secs) => return self.reserve(Some(secs)),
            Command::Quit => return Ok(Next::Close),
            Command::Stats => self.stats(),
            Command::Use(name) => self.ask_engine(|e, _| e.use_tube(c, &name)),
            Command::ReserveJob(id) => self.ask_engine(|e, now| e.reserve_job(c, id, now)),
            Command::Delete(id) => self.ask_engine(|e, _| e.delete(c, id)),
            Command::Release { id, pri, delay } => {
                self.ask_engine(|e, now| e.release(c, id, pri, delay, now))
            }
            Command::Bury { id, pri } => self.ask_engine(|e, now| e.bury(c, id, pri, now)),
            Command::Touch(id) => self.ask_engine(|e, now| e.touch(c, id, now)),
            Command::Watch(name) => self.ask_engine(|e, _| e.watch(c, &name)),
            Command::Ignore(name) => self.ask_engine(|e, _| e.ignore(c, &name)),
            Command::Peek(id) => self.ask_engine(|e, _| e.peek(id)),
            Command::PeekReady => self.ask_engine(|e, _| e.peek_ready(c)),
            Command::PeekDelayed => self.ask_engine(|e, _| e.peek_delayed(c)),
            Command::PeekBuried => self.ask_engine(|e, _| e.peek_buried(c)),
            Command::Kick(bound) => self.ask_engine(|e, now| e.kick(c, bound, now)),
            Command::KickJob(id) => self.ask_engine(|e, now| e.kick_job(id, now)),
            Command::StatsJob(id) => self.ask_engine(|e, now| e.stats_job(id, now)),
            Command::StatsTube(name) => self.ask_engine(|e, now| e.stats_tube(&name, now)),
            Command::ListTubes => self.ask_engine(|e, _| e.list_tubes()),
            Command::ListTubeUsed => self.ask_engine(|e, _| e.list_tube_used(c)),
            Command::ListTubesWatched => self.ask_engine(|e, _| e.list_tubes_watched(c)),
            Command::PauseTube { tube, delay } => {
                self.ask_engine(|e, now| e.pause_tube(tube.as_ref(), delay, now))
            }
        }
        Ok(Next::Continue)
    }

    /// Runs one engine call under the lock and encodes its reply; then, with
    /// the lock released, holds the reply back until the binlog records the
    /// call wrote are as durable as `-f` promises. If they cannot be, the
    /// reply must not claim success: it becomes `INTERNAL_ERROR`.
    fn ask_engine<F>(&mut self, call: F)
    where
        F: for<'e> FnOnce(&'e mut Engine, Time) -> Reply<'e>,
    {
        let shared = self.shared;
        let (mut engine, now) = shared.engine_now();
        let logged_before = shared.journal_seq();
        let reply_start = self.output.len();
        call(&mut engine, now).encode(&mut self.output);
        let logged = shared.journal_seq();
        drop(engine);
        self.hold_until_durable(logged_before, logged, reply_start);
    }

    /// The reply from `reply_start` on waits in the output buffer until the
    /// binlog records written while it was made (`logged_before` to
    /// `logged`, counted under the lock) are as durable as `-f` promises;
    /// if they cannot be, it must not claim success.
    fn hold_until_durable(&mut self, logged_before: u64, logged: u64, reply_start: usize) {
        if logged > logged_before && !self.shared.after_write(logged) {
            self.output.truncate(reply_start);
            Reply::InternalError.encode(&mut self.output);
        }
    }

    /// `stats`: the engine's figures, then the process's, formatted outside
    /// the lock.
    fn stats(&mut self) {
        let shared = self.shared;
        let (stats, binlog) = {
            let mut engine = shared.engine();
            (engine.server_stats(), engine.journal_stats())
        };
        Reply::Ok(stats.to_yaml(&shared.process_stats(binlog))).encode(&mut self.output);
    }

    /// `put`: the checks before the body, the body, then the engine
    /// (reference §3.1, in that order).
    fn put(&mut self, pri: u32, delay: u32, ttr: u32, bytes: u32, junk: bool) -> io::Result<Next> {
        let shared = self.shared;
        let created = shared.clock.now();
        let started = {
            let (mut engine, _) = shared.engine_now();
            engine.count_put();
            if bytes > shared.config.max_job_size {
                Err(Reply::JobTooBig)
            } else if junk {
                // The body is not read: its bytes will be parsed as commands.
                drop(engine);
                Reply::BadFormat.encode(&mut self.output);
                return Ok(Next::Continue);
            } else {
                engine.start_put(self.client, bytes).ok_or(Reply::OutOfMemory)
            }
        };
        let ticket = match started {
            Ok(ticket) => ticket,
            Err(refusal) => {
                // Swallow the body unseen, then say why.
                if !self.discard(u64::from(bytes) + 2)? {
                    return Ok(Next::Close);
                }
                refusal.encode(&mut self.output);
                return Ok(Next::Continue);
            }
        };
        // The body's size is the client's to choose: memory that cannot be
        // had is a refusal, never an abort.
        let mut body = Vec::new();
        if body.try_reserve_exact(bytes as usize).is_err() {
            shared.engine().cancel_put(ticket);
            if !self.discard(u64::from(bytes) + 2)? {
                return Ok(Next::Close);
            }
            Reply::OutOfMemory.encode(&mut self.output);
            return Ok(Next::Continue);
        }
        body.resize(bytes as usize, 0);
        let mut crlf = [0; 2];
        let arrived = self.read_exact(&mut body).and_then(|ok| Ok(ok && self.read_exact(&mut crlf)?));
        if !matches!(arrived, Ok(true)) || &crlf != b"\r\n" {
            shared.engine().cancel_put(ticket);
            if arrived? {
                Reply::ExpectedCrlf.encode(&mut self.output);
                return Ok(Next::Continue);
            }
            return Ok(Next::Close);
        }
        let job = NewJob { ticket, pri, delay, ttr, created, body: body.into_boxed_slice() };
        let c = self.client;
        self.ask_engine(|e, now| e.put(c, job, now));
        Ok(Next::Continue)
    }

    /// `reserve` / `reserve-with-timeout`: answer now, or block until a job is
    /// handed over, the timeout or safety margin arrives, or the client hangs
    /// up.
    ///
    /// Every earlier reply leaves first. A client is put in line only once
    /// its socket has taken all it was owed, so a job handed to it waits on
    /// no unread socket (beanstalkd, likewise, reads no command while a
    /// reply is unsent).
    fn reserve(&mut self, timeout: Option<u32>) -> io::Result<Next> {
        self.flush()?;
        let shared = self.shared;
        {
            let (mut engine, now) = shared.engine_now();
            if let Some(reply) = engine.reserve(self.client, timeout, now) {
                reply.encode(&mut self.output);
                return Ok(Next::Continue);
            }
        }
        // Blocked. The hang-up watcher must learn to look at this socket.
        let fd = self.stream.as_raw_fd();
        let watching = shared.hangups.watch(fd, self.client, self.hangup_registered);
        self.hangup_registered |= watching.is_ok();
        if watching.is_err() {
            // A socket we cannot watch is as good as gone.
            shared.engine().hang_up(self.client);
        }
        // A wait may last hours: past IDLE_AFTER, hold no buffers through it.
        let idle_at = shared.clock.now().plus(IDLE_AFTER);
        let mut idle = false;
        let mut engine = shared.engine();
        loop {
            let now = shared.clock.now();
            if let Some(reply) = engine.check_wait(self.client, now) {
                self.reserve_output();
                reply.encode(&mut self.output);
                return Ok(Next::Continue);
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
                    self.waker.wait_timeout(engine, wait).map_or_else(|e| e.into_inner().0, |r| r.0)
                }
                None => self.waker.wait(engine).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Condvar};
    use std::time::Duration;

    use super::{Conn, Next};
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
        let waker = Arc::new(Condvar::new());
        let waiter: Arc<dyn crate::engine::Waiter> = waker.clone();
        let client = shared.engine().connect(waiter);
        // 300 tubes with long names make `list-tubes` about 20 KB.
        for i in 0..300 {
            let name = TubeName::new(format!("a-tube-with-a-name-long-enough-to-matter-{i:03}").as_bytes());
            shared.engine().watch(client, &name.unwrap());
        }
        let mut conn = Conn::new(shared, &stream, client, &waker);

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
        let waker = Arc::new(Condvar::new());
        let waiter: Arc<dyn crate::engine::Waiter> = waker.clone();
        let client = shared.engine().connect(waiter);
        let mut conn = Conn::new(shared, &stream, client, &waker);

        // The client sends its command 20 idle timeouts late. The
        // connection went idle on the way, and no timeout ended the wait.
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            theirs.write_all(b"stats\r\n").unwrap();
            theirs
        });
        assert!(conn.fill().unwrap());
        assert_eq!(conn.output.capacity(), super::OUTPUT_START, "buffers back once bytes came");
        assert!(conn.answer_buffered().unwrap() == Next::Continue);
        assert!(conn.output.starts_with(b"OK "));
        drop(late.join().unwrap());

        // A body that stalls past the idle timeout is waited for.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stream = Stream::Unix(ours);
        stream.set_idle_timeout(Duration::from_millis(10)).unwrap();
        let mut conn = Conn::new(shared, &stream, client, &waker);
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
