//! One client connection: read a line (and a body), ask the engine, write
//! the reply. Runs on the connection's own thread.
//!
//! Framing lives here (SPEC.md 1.2, 1.5): a line ends at the first CRLF; a
//! line longer than 224 bytes gets one `BAD_FORMAT` once its CRLF arrives
//! and is otherwise discarded without being stored, so a client cannot make
//! the server buffer more than a few kilobytes of command text; a put's body
//! is read by exact length, bounded by `-z`. Replies are collected in an
//! output buffer and written when there is no complete command left to
//! answer, so a pipelining client gets many replies per write. The engine
//! lock is held only around engine calls, never across socket I/O.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar};

use crate::engine::{ClientId, Delivery, NewJob, Waiter};
use crate::protocol::{self, Command, Reply, MAX_LINE};
use crate::server::{Shared, Stream};
use crate::sys;

/// Size of the input buffer: dozens of pipelined commands fit in one read,
/// while a connection that has gone quiet keeps only 4 KiB.
const INPUT_BUFFER: usize = 4 * 1024;

/// Output is flushed early once this much is pending.
const OUTPUT_HIGH_WATER: usize = 64 * 1024;

/// A connection's [`Waiter`]: the `Condvar` its thread sleeps on while
/// blocked in reserve, and its socket, which the engine may ask (through
/// this, never directly) whether the client is still there.
#[derive(Debug)]
pub(crate) struct ConnWaiter {
    condvar: Condvar,
    stream: Arc<Stream>,
}

impl ConnWaiter {
    pub fn new(stream: Arc<Stream>) -> ConnWaiter {
        ConnWaiter { condvar: Condvar::new(), stream }
    }
}

impl Waiter for ConnWaiter {
    fn wake(&self) {
        self.condvar.notify_one();
    }

    fn has_hung_up(&self) -> bool {
        sys::peer_hung_up(&*self.stream)
    }

    /// Never blocks: a client that does not read its replies must not stall
    /// the thread that handed it a job. What the socket does not take now,
    /// the client's own thread writes.
    fn deliver(&self, reply: &[u8]) -> usize {
        sys::send_without_blocking(&*self.stream, reply)
    }
}

/// Serves one client until it quits or disconnects, then tells the engine.
pub(crate) fn serve(shared: Arc<Shared>, stream: Arc<Stream>, client: ClientId, waker: Arc<ConnWaiter>) {
    let mut conn = Conn {
        shared: &shared,
        stream: &stream,
        client,
        waker: &waker.condvar,
        input: Vec::new(),
        start: 0,
        end: 0,
        discarding: false,
        eof: false,
        output: Vec::new(),
        hangup_registered: false,
    };
    let _ = conn.run();
    shared.engine().disconnect(client, shared.clock.now());
    shared.log(1, format_args!("close {}", stream.as_raw_fd()));
    shared.connection_closed(client);
}

/// A line found in the input buffer.
enum Line {
    /// A complete line: `input[start..end]`, CRLF excluded.
    Complete(usize, usize),
    /// A line longer than the protocol allows has ended.
    TooLong,
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
    /// Bytes received and not yet consumed: `input[start..end]`. Allocated
    /// when the first byte arrives, so an idle connection costs only its
    /// thread.
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// Inside a line that is already too long: drop bytes until its CRLF.
    discarding: bool,
    /// The client has shut down its sending side.
    eof: bool,
    /// Replies not yet written.
    output: Vec<u8>,
    /// The hang-up watcher knows this socket (see `hangup.rs`).
    hangup_registered: bool,
}

impl Conn<'_> {
    fn run(&mut self) -> io::Result<()> {
        loop {
            match self.next_line() {
                Some(Line::Complete(start, end)) => {
                    if self.execute_line(start, end)? == Next::Close {
                        return self.flush();
                    }
                }
                Some(Line::TooLong) => Reply::BadFormat.encode(&mut self.output),
                None => {
                    self.flush()?;
                    if self.eof || !self.fill()? {
                        return Ok(());
                    }
                    continue;
                }
            }
            if self.output.len() >= OUTPUT_HIGH_WATER {
                self.flush()?;
            }
        }
    }

    // ---------------------------------------------------------------
    // Framing
    // ---------------------------------------------------------------

    /// Finds the next line in the buffer; `None` when more input is needed.
    fn next_line(&mut self) -> Option<Line> {
        let pending = &self.input[self.start..self.end];
        let Some(at) = find_crlf(pending) else {
            if self.discarding || pending.len() >= MAX_LINE {
                // Too long already. Keep only a trailing CR, which may be the
                // first half of the CRLF that ends this line.
                self.discarding = true;
                let keep = usize::from(pending.last() == Some(&b'\r'));
                self.start = self.end - keep;
            }
            return None;
        };
        let (line_start, line_end) = (self.start, self.start + at);
        self.start = line_end + 2;
        if std::mem::take(&mut self.discarding) || at > MAX_LINE - 2 {
            return Some(Line::TooLong);
        }
        Some(Line::Complete(line_start, line_end))
    }

    /// Reads more input. Returns false at EOF (the client half-closed).
    fn fill(&mut self) -> io::Result<bool> {
        if self.input.is_empty() {
            return self.first_fill();
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.input.len() {
            self.input.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let n = read_some(self.stream, &mut self.input[self.end..])?;
        if n == 0 {
            self.hang_up();
            return Ok(false);
        }
        self.end += n;
        Ok(true)
    }

    /// The first read of a connection goes to the stack: the input buffer is
    /// allocated only once bytes arrive, so an idle connection costs only its
    /// thread.
    fn first_fill(&mut self) -> io::Result<bool> {
        let mut first = [0; 512];
        let n = read_some(self.stream, &mut first)?;
        if n == 0 {
            self.hang_up();
            return Ok(false);
        }
        self.input = vec![0; INPUT_BUFFER];
        self.input[..n].copy_from_slice(&first[..n]);
        (self.start, self.end) = (0, n);
        Ok(true)
    }

    /// Notes EOF: the client will send nothing more, so it must not block.
    fn hang_up(&mut self) {
        self.eof = true;
        self.shared.engine().hang_up(self.client);
    }

    /// Fills `dst` from buffered input, then from the socket. Returns false
    /// if the connection ends first.
    fn read_exact(&mut self, dst: &mut [u8]) -> io::Result<bool> {
        let buffered = (self.end - self.start).min(dst.len());
        dst[..buffered].copy_from_slice(&self.input[self.start..self.start + buffered]);
        self.start += buffered;
        if buffered == dst.len() {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        match self.stream.read_exact(&mut dst[buffered..]) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                self.hang_up();
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads and drops `count` bytes. Returns false if the connection ends
    /// first.
    fn discard(&mut self, mut count: u64) -> io::Result<bool> {
        loop {
            let buffered = (self.end - self.start) as u64;
            let take = buffered.min(count);
            self.start += take as usize;
            count -= take;
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
            result?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------
    // Commands
    // ---------------------------------------------------------------

    fn execute_line(&mut self, start: usize, end: usize) -> io::Result<Next> {
        let command = protocol::parse(&self.input[start..end]);
        let verbose = self.shared.config.verbosity >= 2;
        if verbose {
            let line = String::from_utf8_lossy(&self.input[start..end]).into_owned();
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

    fn execute(&mut self, command: Command) -> io::Result<Next> {
        let c = self.client;
        let shared = self.shared;
        let now = shared.clock.now();
        let out = &mut self.output;
        match command {
            Command::Put { pri, delay, ttr, bytes, junk_after_size } => {
                return self.put(pri, delay, ttr, bytes, junk_after_size)
            }
            Command::Reserve => return self.reserve(None),
            Command::ReserveWithTimeout(secs) => return self.reserve(Some(secs)),
            Command::Quit => return Ok(Next::Close),
            Command::Stats => {
                let (stats, binlog) = {
                    let mut engine = shared.engine();
                    (engine.server_stats(), engine.journal_stats())
                };
                Reply::Ok(stats.to_yaml(&shared.process_stats(binlog))).encode(out);
            }
            other => {
                let mut engine = shared.engine();
                let logged_before = shared.journal_seq();
                let reply_start = out.len();
                let reply = match &other {
                    Command::Use(name) => engine.use_tube(c, name),
                    Command::ReserveJob(id) => engine.reserve_job(c, *id, now),
                    Command::Delete(id) => engine.delete(c, *id),
                    Command::Release { id, pri, delay } => engine.release(c, *id, *pri, *delay, now),
                    Command::Bury { id, pri } => engine.bury(c, *id, *pri, now),
                    Command::Touch(id) => engine.touch(c, *id, now),
                    Command::Watch(name) => engine.watch(c, name),
                    Command::Ignore(name) => engine.ignore(c, name),
                    Command::Peek(id) => engine.peek(*id),
                    Command::PeekReady => engine.peek_ready(c),
                    Command::PeekDelayed => engine.peek_delayed(c),
                    Command::PeekBuried => engine.peek_buried(c),
                    Command::Kick(bound) => engine.kick(c, *bound, now),
                    Command::KickJob(id) => engine.kick_job(*id, now),
                    Command::StatsJob(id) => engine.stats_job(*id, now),
                    Command::StatsTube(name) => engine.stats_tube(name, now),
                    Command::ListTubes => engine.list_tubes(),
                    Command::ListTubeUsed => engine.list_tube_used(c),
                    Command::ListTubesWatched => engine.list_tubes_watched(c),
                    Command::PauseTube { tube, delay } => engine.pause_tube(tube.as_ref(), *delay, now),
                    Command::Put { .. }
                    | Command::Reserve
                    | Command::ReserveWithTimeout(_)
                    | Command::Stats
                    | Command::Quit => Reply::InternalError,
                };
                reply.encode(out);
                let logged = shared.journal_seq();
                drop(engine);
                // The reply waits in the output buffer until its records are as
                // durable as promised; if they cannot be, it must not say so.
                if logged > logged_before && !shared.after_write(logged) {
                    out.truncate(reply_start);
                    Reply::InternalError.encode(out);
                }
            }
        }
        Ok(Next::Continue)
    }

    /// `put`: the checks before the body, the body, then the engine
    /// (SPEC.md 3.1, in that order).
    fn put(&mut self, pri: u32, delay: u32, ttr: u32, bytes: u32, junk: bool) -> io::Result<Next> {
        let shared = self.shared;
        let created = shared.clock.now();
        let started = {
            let mut engine = shared.engine();
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
        let id = match started {
            Ok(id) => id,
            Err(refusal) => {
                // Swallow the body unseen, then say why.
                if !self.discard(u64::from(bytes) + 2)? {
                    return Ok(Next::Close);
                }
                refusal.encode(&mut self.output);
                return Ok(Next::Continue);
            }
        };
        let mut body = vec![0; bytes as usize];
        let mut crlf = [0; 2];
        let arrived = self.read_exact(&mut body).and_then(|ok| Ok(ok && self.read_exact(&mut crlf)?));
        if !matches!(arrived, Ok(true)) || &crlf != b"\r\n" {
            shared.engine().cancel_put(bytes);
            if arrived? {
                Reply::ExpectedCrlf.encode(&mut self.output);
                return Ok(Next::Continue);
            }
            return Ok(Next::Close);
        }
        let job = NewJob { id, pri, delay, ttr, created, body: body.into_boxed_slice() };
        let now = shared.clock.now();
        let mut engine = shared.engine();
        let logged_before = shared.journal_seq();
        let reply_start = self.output.len();
        // A producer with more commands already waiting is better served if
        // the workers' own threads write their replies, in parallel with its
        // next put; a lone put's job reaches its worker soonest if this
        // thread writes the reply itself.
        if self.start == self.end {
            engine.start_deliveries();
        }
        engine.put(self.client, job, now).encode(&mut self.output);
        let deliveries = engine.take_deliveries();
        let logged = shared.journal_seq();
        drop(engine);
        if logged > logged_before && !shared.after_write(logged) {
            self.output.truncate(reply_start);
            Reply::InternalError.encode(&mut self.output);
        }
        if !deliveries.is_empty() {
            // The producer's own reply first: it is waiting for it, and its
            // next put should not wait for the workers' replies to be written.
            // The deliveries must happen even if that write fails: their
            // workers wait for them.
            let flushed = self.flush();
            deliver(shared, deliveries);
            flushed?;
        }
        Ok(Next::Continue)
    }

    /// `reserve` / `reserve-with-timeout`: answer now, or block until a job is
    /// handed over, the timeout or safety margin arrives, or the client hangs
    /// up.
    fn reserve(&mut self, timeout: Option<u32>) -> io::Result<Next> {
        let shared = self.shared;
        {
            let mut engine = shared.engine();
            if let Some(reply) = engine.reserve(self.client, timeout, shared.clock.now()) {
                reply.encode(&mut self.output);
                return Ok(Next::Continue);
            }
        }
        // Blocked. Earlier replies must reach the client before we sleep, and
        // the hang-up watcher must learn to look at this socket.
        let flushed = self.flush();
        let fd = self.stream.as_raw_fd();
        let watching = shared.hangups.watch(fd, self.client, self.hangup_registered);
        self.hangup_registered |= watching.is_ok();
        if flushed.is_err() || watching.is_err() {
            // A socket we cannot write to or watch is as good as gone.
            shared.engine().hang_up(self.client);
        }
        let mut engine = shared.engine();
        loop {
            if let Some(rest) = engine.check_delivered(self.client) {
                // The thread that handed us the job wrote its reply.
                self.output.extend_from_slice(&rest);
                break;
            }
            let now = shared.clock.now();
            if let Some(reply) = engine.check_wait(self.client, now) {
                reply.encode(&mut self.output);
                break;
            }
            engine = match engine.wake_time(self.client) {
                Some(at) => {
                    // Bounded: a sleep does not count time suspended.
                    let wait = at.duration_since(now).min(crate::time::LONGEST_SLEEP);
                    self.waker.wait_timeout(engine, wait).map_or_else(|e| e.into_inner().0, |r| r.0)
                }
                None => self.waker.wait(engine).unwrap_or_else(|e| e.into_inner()),
            };
        }
        drop(engine);
        flushed?;
        Ok(Next::Continue)
    }
}

/// Writes the replies of jobs just handed to blocked workers straight to
/// their sockets, outside the lock, then lets their threads go on. The reply
/// leaves now rather than after a sleeping thread wakes: with many blocked
/// workers, that wake-up was most of a put's tail latency.
fn deliver(shared: &Shared, deliveries: Vec<Delivery>) {
    if deliveries.is_empty() {
        return;
    }
    let written: Vec<usize> = deliveries.iter().map(|d| d.waiter.deliver(&d.reply)).collect();
    let mut engine = shared.engine();
    for (delivery, written) in deliveries.into_iter().zip(written) {
        engine.delivered(delivery, written);
    }
}

/// One `read`, retried if a signal interrupts it; 0 means EOF.
fn read_some(mut stream: &Stream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

/// Position of the first CRLF in `bytes`.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(lf) = bytes[from..].iter().position(|&b| b == b'\n') {
        let at = from + lf;
        if at > 0 && bytes[at - 1] == b'\r' {
            return Some(at - 1);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::find_crlf;

    #[test]
    fn a_line_ends_at_the_first_crlf_only() {
        assert_eq!(find_crlf(b"stats\r\n"), Some(5));
        assert_eq!(find_crlf(b"a\nb\r\n"), Some(3));
        assert_eq!(find_crlf(b"a\rb\r\n"), Some(3));
        assert_eq!(find_crlf(b"\r\n"), Some(0));
        assert_eq!(find_crlf(b"abc\r"), None);
        assert_eq!(find_crlf(b"\n"), None);
    }
}
