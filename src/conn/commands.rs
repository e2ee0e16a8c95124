//! A command line, answered: parsed, passed the admin gate, then one arm
//! a command ([`Conn::execute`]), most of them one engine call under the
//! lock ([`Conn::ask_engine`], through [`answer`]), the reply held until
//! the log is as durable as `-f` says. `reserve` is here too, up to the
//! point where it blocks; the wait itself is [`super::wait`].

use std::os::fd::AsRawFd;

use super::put::PutLine;
use super::{body, Conn, Next, State};
use crate::engine::{ClientId, Engine, State as JobState};
use crate::framing::Line;
use crate::protocol::{self, Command, Reply, ReplyRoom, SHORT_REPLY_LEN};
use crate::time::Time;

impl Conn {
    /// Answers one line the framing found.
    pub(super) fn answer_line(&mut self, line: Line) {
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

    /// Logs the refusal of the admin command on the line from `start` to
    /// `end`, answered `NOT_PERMITTED` (reference §3.0, `admin`): this
    /// connection is not the admin socket's.
    pub(super) fn log_refusal(&self, start: usize, end: usize) {
        if crate::log::enabled(crate::log::Kind::Event) {
            let line = self.input.line(start, end);
            let name = Lossy(line.split(|&b| b == b' ').next().unwrap_or_default());
            let (peer, fd) = (self.link.stream.peer(), self.link.stream.as_raw_fd());
            crate::log::event(format_args!("refuse {name} from {peer} (fd {fd}): admin socket only"));
        }
    }

    pub(super) fn execute_line(&mut self, start: usize, end: usize) -> Next {
        // Room for any reply but one that carries data, claimed before the
        // command runs: so no reply allocates after its command changed
        // something. A connection that cannot have even this much ends,
        // and only it. So does a reserve's note of the job it hands over
        // (`job_replies`), claimed here for the reply to come.
        if !self.output.claim(SHORT_REPLY_LEN) || self.job_replies.try_reserve(1).is_err() {
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
            Command::ReserveBatch(count, timeout) => self.reserve_batch(count, timeout),
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
    pub(super) fn ask_engine<F>(&mut self, call: F)
    where
        F: for<'e> FnOnce(&'e mut Engine, Time, &mut dyn ReplyRoom) -> Reply<'e>,
    {
        let shared = &*self.shared;
        let (mut engine, now) = shared.engine_now();
        let logged_before = shared.journal_seq();
        let reply_start = self.output.len();
        let reply = call(&mut engine, now, &mut self.output);
        let job = reply.reserved_job();
        let to_read = body::encode(reply, &mut self.output);
        let to_read = body::find(to_read, &engine);
        let logged = shared.journal_seq();
        drop(engine);
        if !self.read_body(to_read, reply_start) {
            return;
        }
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
    pub(super) fn hold_until_durable(&mut self, logged_before: u64, logged: u64, reply_start: usize) {
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
    /// up, or (`abortable`) it sends a byte ([`super::wait`]).
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
        let reply_start = self.output.len();
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
            let to_read = body::encode(reply, &mut self.output);
            let to_read = body::find(to_read, &engine);
            drop(engine);
            if let Some(id) = job.filter(|_| self.read_body(to_read, reply_start)) {
                self.job_reply(id);
            }
            return;
        }
        self.wake_at = engine.wake_time(c);
        drop(engine);
        self.state = State::Waiting { abortable, batch: None };
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
pub(super) struct Lossy<'a>(pub(super) &'a [u8]);

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
