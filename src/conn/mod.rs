//! One client connection: read a line (and a body), ask the engine, write
//! the reply. Runs on the connection's own thread.
//!
//! `framing` turns the bytes into lines; here each line becomes a command,
//! a put's body is read by exact length (bounded by `-z`, reference §1.5),
//! and the reply is encoded. Replies are collected in an output buffer and
//! written when there is no complete command left to answer, so a
//! pipelining client gets many replies per write. The engine lock is held
//! only around engine calls, never across socket I/O.
//!
//! **Who writes the socket.** Only this thread ever writes its client's
//! socket, and only in the order of the commands: each command's reply is
//! appended to the output buffer after the one before. Nothing else (no
//! other connection, not the engine, not the timer) writes it, so a reply
//! can never be overtaken. A `reserve` first sends every earlier reply.
//! The one exception is a job handed to a blocked reserve: its `RESERVED`
//! is left in the connection's mailbox, and the thread that handed it over
//! may send it on the way; this thread, woken, writes what is left of it,
//! or, if it waits in a read, the hang-up watcher does ([`wait`]; the rule
//! that keeps that in order is in `mailbox.rs`).
//!
//! Read in this order: this file (the command loop, `put`, `reserve`),
//! [`wait`] (a blocked reserve), `batch.rs` (commands on many jobs), then
//! [`buffers`] (reading, writing, and letting the buffers go while idle),
//! which a first reading can skip.

pub(crate) mod wait;
pub(crate) mod buffers;
mod batch;
mod listing;
mod put;

pub(crate) use buffers::IDLE_AFTER;

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use crate::engine::{ClientId, Engine, State};
use crate::framing::{Input, Line};
use crate::mailbox::Mailbox;
use crate::protocol::{self, Command, Reply, ReplyRoom, SHORT_REPLY_LEN};
use crate::shared::Shared;
use crate::stream::{SharedConn, Stream};
use crate::time::Time;
use buffers::OUTPUT_HIGH_WATER;
use put::PutLine;

/// Serves one client until it quits or disconnects, then tells the engine.
/// It may run the admin commands if `admin` (reference §3.0).
pub(crate) fn serve(shared: Arc<Shared>, conn: Arc<SharedConn>, client: ClientId, admin: bool) {
    // Without it the connection works the same, but never goes idle, and
    // no blocked reserve waits in a read, which only the timeout ends.
    let reads_time_out = conn.stream.set_idle_timeout(IDLE_AFTER).is_ok();
    // Asked now: once the client has gone its address may not be had.
    let peer = crate::log::enabled(crate::log::Kind::Event).then(|| conn.stream.peer());
    let mut served = Conn::new(&shared, &conn.stream, client, &conn.mailbox);
    served.reads_time_out = reads_time_out;
    served.admin = admin;
    if !admin {
        shared.engine().restrict(client, shared.config.admin_commands);
    }
    let _ = served.run();
    shared.engine().disconnect(client, shared.clock.now());
    if let Some(peer) = peer {
        crate::log::event(format_args!("close {peer} (fd {})", conn.stream.as_raw_fd()));
    }
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
    /// Where this thread sleeps in a blocked reserve, and finds how it
    /// ended; the engine's [`crate::engine::Waker`] for this client.
    mailbox: &'a Mailbox,
    /// Bytes received and not yet answered.
    input: Input,
    /// The client has shut down its sending side.
    eof: bool,
    /// Replies not yet written. Freed, like `input`, when the connection
    /// goes idle.
    output: Vec<u8>,
    /// How much of the front of `output`, a reply delivered to a blocked
    /// reserve, the thread that delivered it has sent already.
    sent_early: usize,
    /// A read gives up after [`IDLE_AFTER`] (the socket's timeout is set),
    /// so a blocked reserve may wait in one (see [`wait`]).
    reads_time_out: bool,
    /// It may run the admin commands: no `--admin-socket`, or accepted
    /// from it.
    admin: bool,
}

impl<'a> Conn<'a> {
    fn new(shared: &'a Shared, stream: &'a Stream, client: ClientId, mailbox: &'a Mailbox) -> Conn<'a> {
        Conn {
            shared,
            stream,
            client,
            mailbox,
            input: Input::default(),
            eof: false,
            output: Vec::new(),
            sent_early: 0,
            reads_time_out: false,
            admin: true,
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
                Line::TooLong(long_put) => {
                    if !self.output.claim(SHORT_REPLY_LEN) {
                        return Ok(Next::Close);
                    }
                    // A tagging client's body is never run: swallowed, or,
                    // when its size is unknown, the connection ends.
                    let swallowed = match long_put {
                        None => true,
                        Some(Some(bytes)) => self.discard(u64::from(bytes) + 2)?,
                        Some(None) => false,
                    };
                    Reply::BadFormat.encode(&mut self.output);
                    if !swallowed {
                        return Ok(Next::Close);
                    }
                }
            }
            if self.output.len() >= OUTPUT_HIGH_WATER {
                self.flush()?;
            }
        }
        Ok(Next::Continue)
    }

    /// Logs the refusal of the admin command on the line from `start` to
    /// `end`, answered `NOT_PERMITTED` (reference §3.0, `admin`): this
    /// connection is not the admin socket's.
    fn log_refusal(&self, start: usize, end: usize) {
        if crate::log::enabled(crate::log::Kind::Event) {
            let line = self.input.line(start, end);
            let name = Lossy(line.split(|&b| b == b' ').next().unwrap_or_default());
            let (peer, fd) = (self.stream.peer(), self.stream.as_raw_fd());
            crate::log::event(format_args!("refuse {name} from {peer} (fd {fd}): admin socket only"));
        }
    }

    fn execute_line(&mut self, start: usize, end: usize) -> io::Result<Next> {
        // Room for any reply but one that carries data, claimed before the
        // command runs: so no reply allocates after its command changed
        // something. A full buffer is written out rather than grown. A
        // connection that cannot have even this much ends, and only it.
        if self.output.capacity() - self.output.len() < SHORT_REPLY_LEN {
            self.flush()?;
        }
        if !self.output.claim(SHORT_REPLY_LEN) {
            return Ok(Next::Close);
        }
        let command = protocol::parse(self.input.line(start, end));
        let verbose = crate::log::enabled(crate::log::Kind::Trace);
        if verbose {
            // `Utf8Chunks` shows the bytes as text without a copy: logging
            // allocates nothing, so `-VV` too runs out of memory cleanly.
            let line = Lossy(self.input.line(start, end));
            let (peer, fd) = (self.stream.peer(), self.stream.as_raw_fd());
            crate::log::trace(format_args!("<{peer} (fd {fd}) command {line}"));
        }
        let reply_from = self.output.len();
        let refusable = command
            .as_ref()
            .is_ok_and(|c| !self.admin && self.shared.config.admin_commands.contains(c.name()));
        let next = match command {
            Err(e) => {
                e.reply().encode(&mut self.output);
                if e == protocol::ParseError::UnsizedTaggedPut {
                    Next::Close
                } else {
                    Next::Continue
                }
            }
            Ok(command) if !self.admin && self.shared.config.admin_commands.refuses(&command) => {
                Reply::NotPermitted.encode(&mut self.output);
                Next::Continue
            }
            Ok(Command::DeleteBatch) => {
                self.delete_batch(start, end);
                Next::Continue
            }
            Ok(command) => self.execute(command)?,
        };
        // Refused above, or by the engine: a job this connection does not
        // hold (such a command writes its reply alone, with no flush).
        let refused = Reply::NotPermitted.word().as_bytes();
        if refusable && self.output.get(reply_from..).is_some_and(|reply| reply.starts_with(refused)) {
            self.log_refusal(start, end);
        }
        if verbose && self.output.len() > reply_from {
            let reply = &self.output[reply_from..];
            let first = reply.split(|&b| b == b'\r').next().unwrap_or_default();
            let (peer, fd) = (self.stream.peer(), self.stream.as_raw_fd());
            crate::log::trace(format_args!(">{peer} (fd {fd}) reply {}", Lossy(first)));
        }
        Ok(next)
    }

    /// One command, one arm: those the connection answers itself here,
    /// and every other one through [`answer`], under the lock.
    fn execute(&mut self, command: Command) -> io::Result<Next> {
        let c = self.client;
        match command {
            command if command.works_in_chunks() => self.on_a_tube(command),
            Command::Put { pri, delay, ttr, bytes, after_size, tags } => {
                return self.put(PutLine { pri, delay, ttr, bytes, after_size, tags })
            }
            Command::Reserve => return self.reserve(None, false),
            Command::ReserveWithTimeout(secs) => return self.reserve(Some(secs), false),
            Command::ReserveWithAbort(timeout) => return self.reserve(timeout, true),
            Command::Quit => return Ok(Next::Close),
            Command::Stats => self.stats(),
            Command::ReserveBatch(count) => return self.reserve_batch(count),
            Command::ListJobsReady(page) => self.list_jobs(State::Ready, page),
            Command::ListJobsDelayed(page) => self.list_jobs(State::Delayed, page),
            Command::ListJobsReserved(page) => self.list_jobs(State::Reserved, page),
            Command::ListJobsBuried(page) => self.list_jobs(State::Buried, page),
            command => self.ask_engine(|e, now, room| answer(e, c, command, now, room)),
        }
        Ok(Next::Continue)
    }

    /// Runs one engine call under the lock and encodes its reply; then, with
    /// the lock released, holds the reply back until the binlog records the
    /// call wrote are as durable as `-f` promises. If they cannot be, the
    /// reply must not claim success: it becomes `INTERNAL_ERROR`.
    ///
    /// The call gets the output buffer as the room its reply needs: a
    /// command whose reply carries a job claims room for it there before
    /// it changes anything (see `protocol::ReplyRoom`). Every shorter reply
    /// fits in the room `execute_line` claimed before the command.
    fn ask_engine<F>(&mut self, call: F)
    where
        F: for<'e> FnOnce(&'e mut Engine, Time, &mut dyn ReplyRoom) -> Reply<'e>,
    {
        let shared = self.shared;
        let (mut engine, now) = shared.engine_now();
        let logged_before = shared.journal_seq();
        let reply_start = self.output.len();
        call(&mut engine, now, &mut self.output).encode(&mut self.output);
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

    /// `stats`: the engine's figures, brought up to the present as for
    /// every command, then the process's, formatted outside the lock.
    fn stats(&mut self) {
        let shared = self.shared;
        let (stats, binlog) = {
            let (mut engine, _) = shared.engine_now();
            (engine.server_stats(), engine.journal_stats())
        };
        let yaml = stats.to_yaml(&shared.process_stats(binlog));
        yaml.map_or(Reply::OutOfMemory, Reply::Ok).encode(&mut self.output);
    }

    /// `reserve` / `reserve-with-timeout`, and with `abortable` their
    /// `reserve-with-abort` forms: answer now, or block until a job is
    /// handed over, the timeout or safety margin arrives, the client hangs
    /// up, or (`abortable`) it sends a byte.
    ///
    /// Every earlier reply leaves first. A client is put in line only once
    /// its socket has taken all it was owed, so a job handed to it waits on
    /// no unread socket (beanstalkd, likewise, reads no command while a
    /// reply is unsent).
    fn reserve(&mut self, timeout: Option<u32>, abortable: bool) -> io::Result<Next> {
        self.flush()?;
        let shared = self.shared;
        let wake_at = {
            let (mut engine, now) = shared.engine_now();
            let c = self.client;
            let answer = if abortable {
                // Bytes pipelined behind the command were sent after it:
                // they call its wait off as surely as bytes sent later.
                let input_waiting = !self.input.is_drained();
                engine.reserve_with_abort(c, timeout, input_waiting, now, &mut self.output)
            } else {
                engine.reserve(c, timeout, now, &mut self.output)
            };
            if let Some(reply) = answer {
                reply.encode(&mut self.output);
                return Ok(Next::Continue);
            }
            engine.wake_time(c)
        };
        // Blocked: sleep until the engine has an outcome for this client.
        Ok(self.wait_for_outcome(abortable, wake_at))
    }
}

/// The engine's answer to a command that is one engine call, made for
/// client `c` under the lock (`Conn::ask_engine`): one arm a command. (One
/// function for them all, rather than a closure each, keeps one copy of
/// the locking and durability code in the binary.)
fn answer<'e>(
    e: &'e mut Engine,
    c: ClientId,
    command: Command,
    now: Time,
    room: &mut dyn ReplyRoom,
) -> Reply<'e> {
    match command {
        Command::Use(name) => e.use_tube(c, &name),
        Command::ReserveJob(id) => e.reserve_job(c, id, now, room),
        Command::Delete(id) => e.delete(c, id, now),
        Command::Release { id, pri, delay } => e.release(c, id, pri, delay, now),
        Command::Bury { id, pri } => e.bury(c, id, pri, now),
        Command::Touch(id) => e.touch(c, id, now),
        Command::Watch(name, None) => e.watch(c, &name),
        Command::Watch(name, Some(weight)) => e.watch_weighted(c, &name, weight),
        Command::ReserveMode(mode) => e.reserve_mode(c, mode),
        Command::Ignore(name) => e.ignore(c, &name),
        Command::Peek(id) => e.peek(id),
        Command::PeekReady => e.peek_ready(c),
        Command::PeekDelayed => e.peek_delayed(c),
        Command::PeekBuried => e.peek_buried(c),
        Command::PeekReserved => e.peek_reserved(c),
        Command::Kick(bound) => e.kick(c, bound, now),
        Command::KickJob(id) => e.kick_job(id, now),
        Command::StatsJob(id) => e.stats_job(id, now),
        Command::StatsTube(name) => e.stats_tube(&name, now),
        Command::StatsGroup(name) => e.stats_group(&name),
        Command::ListTubes => e.list_tubes(),
        Command::ListTubeUsed => e.list_tube_used(c),
        Command::ListTubesWatched => e.list_tubes_watched(c),
        Command::PauseTube { tube, delay } => e.pause_tube(tube.as_ref(), delay, now),
        Command::MoveJob { id, tube } => e.move_job(id, &tube, now),
        Command::Drain => e.drain(),
        Command::Undrain => e.undrain(),
        // The connection's own (`Conn::execute`): they read or wait, or
        // work in chunks (`Command::works_in_chunks`).
        _ => Reply::InternalError,
    }
}

/// Bytes shown as text, as `String::from_utf8_lossy` would, without a copy.
struct Lossy<'a>(&'a [u8]);

impl std::fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}
