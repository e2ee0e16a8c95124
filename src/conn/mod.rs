//! One client connection, as a state machine its event loop drives: read
//! a line (and a body), ask the engine, queue the reply, write what the
//! socket takes. [`Conn::serve`] does as much as it can without waiting,
//! and says what it waits for; the loop (`event_loop.rs`) calls it again
//! when that comes.
//!
//! A connection is in one of these states ([`State`]):
//!
//! ```text
//!             ┌───────────────── a put's line ───────────────┐
//!             │                                              ▼
//!      ┌──────────┐ ◄──── body and CRLF in, job filed ─ ┌─────────┐
//!      │ Commands │                                     │  Body   │
//!      └──────────┘ ◄──── the refused body swallowed ─┐ └─────────┘
//!       │   ▲    │                                    │
//!       │   │    └── a refused put's line ──► Skipping┘
//!       │   │
//!       │   │                                            reserve,
//!       │   └─ an outcome; a job's reply all sent ── Waiting ◄── nothing
//!       │                                                         ready
//!       │
//!       └── quit, end of input, a fatal refusal ──► Closing (the replies
//!                                                   go out, then it ends)
//! ```
//!
//! `framing` turns the bytes into lines; here each line becomes a command,
//! a put's body is read by exact length (bounded by `-z`, reference §1.5),
//! and the reply is encoded. Replies are collected in an output buffer and
//! written when there is no complete command left to answer, so a
//! pipelining client gets many replies per write. The engine lock is held
//! only around engine calls, never across socket I/O.
//!
//! **Who writes the socket.** Only this connection's loop, and only in the
//! order of the commands: each command's reply is appended to the output
//! buffer after the one before, and a job handed to a blocked reserve
//! (left in the mailbox, `mailbox.rs`) is sent only once every earlier
//! reply has gone. Nothing else writes it, so a reply can never be
//! overtaken.
//!
//! Read in this order: this file (the states, the command loop, `reserve`),
//! `put.rs` (a put's body), [`wait`] (a blocked reserve), `batch.rs`
//! (commands on many jobs), then [`buffers`] (reading, writing, and letting
//! the buffers go while idle), which a first reading can skip.

pub(crate) mod wait;
pub(crate) mod buffers;
mod batch;
mod listing;
mod put;

pub(crate) use buffers::IDLE_AFTER;

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use crate::engine::{ClientId, Engine, JobId, State as JobState};
use crate::framing::{Input, Line};
use crate::protocol::{self, Command, Reply, ReplyRoom, SHORT_REPLY_LEN};
use crate::shared::Shared;
use crate::stream::SharedConn;
use crate::time::Time;
use buffers::OUTPUT_HIGH_WATER;
use put::{Body, PutLine};

/// Reads of its socket a connection makes in one turn of its loop, at
/// most: then the others are served, and it comes back. A read takes up
/// to 4 KiB (dozens of pipelined commands), so a client that floods holds
/// its loop for a few hundred microseconds a turn.
const READS_A_TURN: usize = 4;

/// What a turn of [`Conn::serve`] left the connection waiting for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// Nothing: it has more to do, and goes to the back of the line.
    More,
    /// Its socket, or a wake, or (`Some`) the time given: a blocked
    /// reserve's timeout or safety margin.
    Waits(Option<Time>),
    /// The disk: its last reply waits until the log's first `seq` records
    /// are fsynced (`-f 0`), which its loop does once for every connection
    /// waiting so at the end of its turn, then calls
    /// [`Conn::synced`].
    Disk(u64),
    /// It has ended: the loop closes it.
    Closed,
}

/// Where a connection is (the picture in the module's docs).
enum State {
    /// Reading command lines and answering them.
    Commands,
    /// Reading a put's body by length.
    Body(Box<Body>),
    /// Swallowing a refused put's body, `left` bytes more, then answering
    /// `then`.
    Skipping { left: u64, then: Reply<'static> },
    /// Blocked in reserve (`abortable` for `reserve-with-abort`), until
    /// an outcome, or a job's reply left in the mailbox has all been sent.
    Waiting { abortable: bool },
    /// Sending what is left of the replies, then ending.
    Closing,
}

/// What one step of a state did.
enum Step {
    /// It moved on: step again.
    Again,
    /// It waits for its socket, a wake or a timer.
    Blocked,
    /// It used up its reads for this turn.
    Yield,
    /// The connection ends now, unsent replies and all.
    End,
    /// Its last reply waits for the disk (`Served::Disk`).
    Disk(u64),
}

/// What to do after a command.
#[derive(PartialEq, Eq)]
enum Next {
    Continue,
    Close,
}

/// One client's connection, owned by its loop.
pub(crate) struct Conn {
    shared: Arc<Shared>,
    /// Its socket and mailbox, which the engine shares as its waker.
    link: Arc<SharedConn>,
    client: ClientId,
    state: State,
    /// Bytes received and not yet answered.
    input: Input,
    /// Replies not yet written, from `unsent` on. Freed, like `input`,
    /// when the connection goes idle.
    output: Vec<u8>,
    unsent: usize,
    /// What this connection counts in `Shared::replies_unsent`.
    counted: usize,
    /// The `RESERVED` replies in `output` not yet all sent: each job, and
    /// where its reply ends. Before more of one leaves in a later turn,
    /// the job must still be this client's (reference §10, a lapsed
    /// reply is never finished).
    job_replies: Vec<(JobId, usize)>,
    /// A reply was added to `job_replies` in this turn: the job was
    /// reserved a moment ago, and its first write needs no check.
    job_replies_fresh: bool,
    /// Waiting for the disk (`-f 0`): the log's first `.0` records must be
    /// fsynced before the reply from `.1` on in `output` may leave, and
    /// no further command is answered until they are.
    on_disk: Option<(u64, usize)>,
    /// The client has shut down its sending side.
    eof: bool,
    /// The socket may have bytes to read, or room to write: edge-triggered,
    /// it is reported once and stays so until a read or write says not.
    readable: bool,
    writable: bool,
    /// Since the last turn, bytes came (`stirred`), or the peer hung up
    /// (`gone`): what a blocked reserve listens for.
    stirred: bool,
    gone: bool,
    /// The peer has hung up, as an event said: a short read no longer
    /// means the socket is empty, since the end of file that follows the
    /// last bytes raises no event of its own.
    hung_up: bool,
    /// Another thread woke it: its mailbox may have word.
    woken: bool,
    /// Its blocked reserve's timer: when it is set for, and whether it
    /// has fired.
    timer_at: Option<Time>,
    timer_fired: bool,
    /// When a blocked reserve is next to be looked at by the clock.
    wake_at: Option<Time>,
    /// In the loop's line of connections to serve.
    queued: bool,
    /// Served since the loop's last sweep: keeps its buffers.
    busy: bool,
    /// Bytes came since the loop's last sweep; and how many sweeps in a
    /// row have found none (`--conn-idle-timeout`).
    heard: bool,
    quiet_sweeps: u32,
    /// It may run the admin commands: no `--admin-socket`, or accepted
    /// from it.
    admin: bool,
}

impl Conn {
    pub(crate) fn new(shared: Arc<Shared>, link: Arc<SharedConn>, client: ClientId, admin: bool) -> Conn {
        Conn {
            shared,
            link,
            client,
            state: State::Commands,
            input: Input::default(),
            output: Vec::new(),
            unsent: 0,
            counted: 0,
            job_replies: Vec::new(),
            job_replies_fresh: false,
            on_disk: None,
            eof: false,
            readable: true,
            writable: true,
            stirred: false,
            gone: false,
            hung_up: false,
            woken: false,
            timer_at: None,
            timer_fired: false,
            wake_at: None,
            queued: false,
            busy: true,
            heard: true,
            quiet_sweeps: 0,
            admin,
        }
    }

    /// Notes what an event said of the socket.
    pub(crate) fn note(&mut self, readable: bool, writable: bool, gone: bool) {
        // A hang-up is read as the end of the input (or an error).
        self.readable |= readable || gone;
        self.writable |= writable || gone;
        self.stirred |= readable;
        self.gone |= gone;
        self.hung_up |= gone;
    }

    /// Notes a wake from another thread.
    pub(crate) fn woken(&mut self) {
        self.woken = true;
    }

    /// Notes that the timer set for `at` has fired.
    pub(crate) fn timer_due(&mut self, at: Time) {
        if self.timer_at == Some(at) {
            self.timer_at = None;
            self.timer_fired = true;
        }
    }

    /// Marks it as in the loop's line; false if it already was.
    pub(crate) fn enqueue(&mut self) -> bool {
        !std::mem::replace(&mut self.queued, true)
    }

    /// The server stops: the command in flight is answered, then the
    /// connection sees the end of its input; a blocked reserve ends.
    pub(crate) fn end_of_input(&mut self) {
        self.shared.engine().hang_up(self.client);
        self.link.stream.shutdown_read();
        self.readable = true;
        self.gone = true;
        self.hung_up = true;
    }

    /// Notes that the reply just encoded carries job `id`, reserved for
    /// this client.
    fn job_reply(&mut self, id: JobId) {
        self.job_reply_ending(id, self.output.len());
    }

    /// [`Conn::job_reply`] for a reply that ends at `end` in the output.
    fn job_reply_ending(&mut self, id: JobId, end: usize) {
        self.job_replies.push((id, end));
        self.job_replies_fresh = true;
    }

    /// Whether it may run the admin commands (the connection cap counts
    /// it unless it came through the admin socket).
    pub(crate) fn admin(&self) -> bool {
        self.admin
    }

    /// Ends the connection: a put's body half read gives back what it
    /// claimed, and the engine forgets the client (its jobs go back). The
    /// socket closes as the last reference to it goes.
    pub(crate) fn close(mut self) {
        let now = self.shared.clock.now();
        let mut engine = self.shared.engine();
        if let State::Body(body) = std::mem::replace(&mut self.state, State::Closing) {
            engine.cancel_put(body.ticket);
        }
        engine.disconnect(self.client, now);
        drop(engine);
        self.count_unsent(0);
        if crate::log::enabled(crate::log::Kind::Event) {
            let (peer, fd) = (self.link.stream.peer(), self.link.stream.as_raw_fd());
            crate::log::event(format_args!("close {peer} (fd {fd})"));
        }
    }

    /// Serves the connection as far as it goes without waiting.
    pub(crate) fn serve(&mut self) -> Served {
        self.queued = false;
        self.busy = true;
        let mut reads = READS_A_TURN;
        loop {
            let step = match self.state {
                State::Commands => self.step_commands(&mut reads),
                State::Body(_) => self.step_body(&mut reads),
                State::Skipping { .. } => self.step_skipping(&mut reads),
                State::Waiting { abortable } => self.step_waiting(abortable),
                State::Closing => self.step_closing(),
            };
            let served = match step {
                Ok(Step::Again) => continue,
                Ok(Step::Blocked) => Served::Waits(self.new_timer()),
                Ok(Step::Yield) => Served::More,
                Ok(Step::Disk(seq)) => Served::Disk(seq),
                Ok(Step::End) | Err(_) => return Served::Closed,
            };
            // What is answered goes out before the connection waits.
            let written = self.write_out();
            self.job_replies_fresh = false;
            return match written {
                Ok(_) => served,
                Err(_) => Served::Closed,
            };
        }
    }

    /// A timer to set for the blocked reserve, if it needs one it has not.
    fn new_timer(&mut self) -> Option<Time> {
        let at = self.wake_at.filter(|_| matches!(self.state, State::Waiting { .. }))?;
        if self.timer_at.is_some_and(|set| set <= at) {
            return None;
        }
        self.timer_at = Some(at);
        Some(at)
    }

    /// Answers every complete command in the input buffer, reading more as
    /// it needs, until the state changes or the socket has no more.
    fn step_commands(&mut self, reads: &mut usize) -> io::Result<Step> {
        if let Some((seq, _)) = self.on_disk {
            return Ok(Step::Disk(seq));
        }
        // A client that does not read holds up only itself: past the
        // high-water mark, nothing more is answered until the socket takes
        // what is pending.
        if self.output.len() - self.unsent >= OUTPUT_HIGH_WATER && !self.write_out()? {
            return Ok(Step::Blocked);
        }
        if let Some(line) = self.input.next_line() {
            self.answer_line(line);
            return Ok(Step::Again);
        }
        if self.eof {
            self.state = State::Closing;
            return Ok(Step::Again);
        }
        self.read_more(reads)
    }

    /// Sends what is left, then ends.
    fn step_closing(&mut self) -> io::Result<Step> {
        if let Some((seq, _)) = self.on_disk {
            return Ok(Step::Disk(seq));
        }
        Ok(if self.write_out()? { Step::End } else { Step::Blocked })
    }

    /// Answers one line the framing found.
    fn answer_line(&mut self, line: Line) {
        match line {
            Line::Complete(start, end) => {
                if self.execute_line(start, end) == Next::Close {
                    self.state = State::Closing;
                }
            }
            Line::TooLong(long_put) => {
                if !self.output.claim(SHORT_REPLY_LEN) {
                    self.state = State::Closing;
                    return;
                }
                // A tagging client's body is never run: swallowed, or,
                // when its size is unknown, the connection ends.
                match long_put {
                    None => Reply::BadFormat.encode(&mut self.output),
                    Some(Some(bytes)) => self.skip_then(u64::from(bytes) + 2, Reply::BadFormat),
                    Some(None) => {
                        Reply::BadFormat.encode(&mut self.output);
                        self.state = State::Closing;
                    }
                }
            }
        }
    }

    /// Swallows the next `count` bytes unseen, then answers `then`.
    fn skip_then(&mut self, count: u64, then: Reply<'static>) {
        self.state = State::Skipping { left: count, then };
    }

    fn step_skipping(&mut self, reads: &mut usize) -> io::Result<Step> {
        let State::Skipping { left, then } = &mut self.state else { return Ok(Step::Again) };
        *left -= self.input.skip(*left);
        if *left == 0 {
            let then = std::mem::replace(then, Reply::BadFormat);
            then.encode(&mut self.output);
            self.state = State::Commands;
            return Ok(Step::Again);
        }
        if self.eof {
            return Ok(Step::End);
        }
        self.read_more(reads)
    }

    /// Logs the refusal of the admin command on the line from `start` to
    /// `end`, answered `NOT_PERMITTED` (reference §3.0, `admin`): this
    /// connection is not the admin socket's.
    fn log_refusal(&self, start: usize, end: usize) {
        if crate::log::enabled(crate::log::Kind::Event) {
            let line = self.input.line(start, end);
            let name = Lossy(line.split(|&b| b == b' ').next().unwrap_or_default());
            let (peer, fd) = (self.link.stream.peer(), self.link.stream.as_raw_fd());
            crate::log::event(format_args!("refuse {name} from {peer} (fd {fd}): admin socket only"));
        }
    }

    fn execute_line(&mut self, start: usize, end: usize) -> Next {
        // Room for any reply but one that carries data, claimed before the
        // command runs: so no reply allocates after its command changed
        // something. A connection that cannot have even this much ends,
        // and only it.
        if !self.output.claim(SHORT_REPLY_LEN) {
            return Next::Close;
        }
        let command = protocol::parse(self.input.line(start, end));
        let verbose = crate::log::enabled(crate::log::Kind::Trace);
        if verbose {
            // `Utf8Chunks` shows the bytes as text without a copy: logging
            // allocates nothing, so `-VV` too runs out of memory cleanly.
            let line = Lossy(self.input.line(start, end));
            let (peer, fd) = (self.link.stream.peer(), self.link.stream.as_raw_fd());
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
            Ok(command) => self.execute(command),
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
            let (peer, fd) = (self.link.stream.peer(), self.link.stream.as_raw_fd());
            crate::log::trace(format_args!(">{peer} (fd {fd}) reply {}", Lossy(first)));
        }
        next
    }

    /// One command, one arm: those the connection answers itself here,
    /// and every other one through [`answer`], under the lock.
    fn execute(&mut self, command: Command) -> Next {
        let c = self.client;
        match command {
            command if command.works_in_chunks() => self.on_a_tube(command),
            Command::Put { pri, delay, ttr, bytes, after_size, tags } => {
                return self.put(PutLine { pri, delay, ttr, bytes, after_size, tags })
            }
            Command::Reserve => self.reserve(None, false),
            Command::ReserveWithTimeout(secs) => self.reserve(Some(secs), false),
            Command::ReserveWithAbort(timeout) => self.reserve(timeout, true),
            Command::Quit => return Next::Close,
            Command::Stats => self.stats(),
            Command::ReserveBatch(count) => self.reserve_batch(count),
            Command::ListJobsReady(page) => self.list_jobs(JobState::Ready, page),
            Command::ListJobsDelayed(page) => self.list_jobs(JobState::Delayed, page),
            Command::ListJobsReserved(page) => self.list_jobs(JobState::Reserved, page),
            Command::ListJobsBuried(page) => self.list_jobs(JobState::Buried, page),
            command => self.ask_engine(|e, now, room| answer(e, c, command, now, room)),
        }
        Next::Continue
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
        let shared = &*self.shared;
        let (mut engine, now) = shared.engine_now();
        let logged_before = shared.journal_seq();
        let reply_start = self.output.len();
        let reply = call(&mut engine, now, &mut self.output);
        let job = reply.reserved_job();
        reply.encode(&mut self.output);
        let logged = shared.journal_seq();
        drop(engine);
        if let Some(id) = job {
            self.job_reply(id);
        }
        self.hold_until_durable(logged_before, logged, reply_start);
    }

    /// The reply from `reply_start` on waits in the output buffer until the
    /// binlog records written while it was made (`logged_before` to
    /// `logged`, counted under the lock) are as durable as `-f` promises;
    /// if they cannot be, it must not claim success.
    /// Under `-f 0` the wait is a state of the connection, not of its
    /// loop's thread: it answers nothing more, and its loop fsyncs once for
    /// every connection so waiting at the end of its turn (group commit),
    /// serving the others meanwhile.
    fn hold_until_durable(&mut self, logged_before: u64, logged: u64, reply_start: usize) {
        if logged <= logged_before {
            return;
        }
        if self.shared.syncs_every_write() {
            self.on_disk = Some((logged, reply_start));
        } else if !self.shared.after_write(logged) {
            self.fail_reply(reply_start);
        }
    }

    /// The log's records its last reply waited for are durable (`ok`), or
    /// cannot be made so: then the reply must not claim success, and is
    /// `INTERNAL_ERROR`.
    pub(crate) fn synced(&mut self, ok: bool) {
        if let Some((_, reply_start)) = self.on_disk.take() {
            if !ok {
                self.fail_reply(reply_start);
            }
        }
    }

    /// The reply from `reply_start` on claimed a success the log cannot
    /// keep: it becomes `INTERNAL_ERROR`.
    fn fail_reply(&mut self, reply_start: usize) {
        self.output.truncate(reply_start);
        Reply::InternalError.encode(&mut self.output);
    }

    /// `stats`: the engine's figures, brought up to the present as for
    /// every command, then the process's, formatted outside the lock.
    fn stats(&mut self) {
        let shared = &*self.shared;
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
    /// up, or (`abortable`) it sends a byte ([`wait`]).
    ///
    /// Every earlier reply is offered to the socket first, so that a job
    /// handed over seldom waits behind them (beanstalkd, likewise, reads
    /// no command while a reply is unsent); whatever the socket did not
    /// take still leaves before the job's reply.
    fn reserve(&mut self, timeout: Option<u32>, abortable: bool) {
        // An error here is met again by the next write, which ends the
        // connection.
        let _ = self.write_out();
        let shared = &*self.shared;
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
            let job = reply.reserved_job();
            reply.encode(&mut self.output);
            drop(engine);
            if let Some(id) = job {
                self.job_reply(id);
            }
            return;
        }
        self.wake_at = engine.wake_time(c);
        drop(engine);
        self.state = State::Waiting { abortable };
        // Bytes may wait in the socket already, unread: they call off an
        // abortable wait as soon as the wait begins.
        self.stirred = abortable && self.readable;
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
        Command::TouchAll => e.touch_all(c, now),
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
