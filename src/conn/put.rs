//! A `put`, as the connection runs it (reference §3.1, in that order):
//! the checks the line allows before the body, the engine's claim of an
//! id and memory, the body read by length outside the lock (the `Body`
//! state, as many turns of the loop as it takes to arrive), then the
//! engine's filing of the job. A put's body is the one thing a client
//! sizes, so its memory is claimed fallibly, and a refusal swallows the
//! body (the `Skipping` state) rather than read it as commands.
//!
//! Most clients send a put's line and body in one write: then the body is
//! here already, and the claim and the filing are made under one hold of
//! the lock rather than two ([`Conn::put_buffered`]), with the same
//! replies in the same order of checks: a lock taken less often is a lock
//! found taken less often.
//!
//! A body not followed by its CRLF is `EXPECTED_CRLF`, as beanstalkd
//! answers, and then the connection ends: the bytes after a miscounted
//! body have no knowable length, and read as commands they would run
//! whatever the body carried (reference §3.1).

use std::io;

use super::{Conn, Next, State, Step};
use crate::engine::{NewJob, PutTicket};
use crate::protocol::{AfterSize, PutTags, Reply};
use crate::time::Time;

/// A put's command line, parsed: what [`Conn::put`] works from.
pub(super) struct PutLine {
    pub(super) pri: u32,
    pub(super) delay: u32,
    pub(super) ttr: u32,
    pub(super) bytes: u32,
    pub(super) after_size: AfterSize,
    pub(super) tags: PutTags,
}

/// A put whose body is on its way: what the engine claimed for it, and
/// as much of the body as has come.
pub(super) struct Body {
    pri: u32,
    delay: u32,
    ttr: u32,
    tags: PutTags,
    created: Time,
    pub(super) ticket: PutTicket,
    body: Vec<u8>,
    /// Bytes of `body` that have come.
    filled: usize,
}

impl Conn {
    /// `put`: the checks before the body, the body, then the engine
    /// (reference §3.1, in that order).
    pub(super) fn put(&mut self, line: PutLine) -> Next {
        let whole = line.after_size == AfterSize::Nothing
            && line.bytes <= self.shared.config.max_job_size
            && self.input.buffered() >= line.bytes as usize + 2;
        if whole {
            return match self.put_buffered(line) {
                Ok(next) => next,
                Err(line) => self.start_body(line),
            };
        }
        self.start_body(line)
    }

    /// A put whose body is buffered whole: the body taken, then its claim
    /// and its filing under one hold of the lock. The line back, nothing
    /// consumed, if the body's memory cannot be had: [`Conn::start_body`]
    /// then refuses it as it refuses any put short of memory.
    fn put_buffered(&mut self, line: PutLine) -> Result<Next, PutLine> {
        let mut body = Vec::new();
        if body.try_reserve_exact(line.bytes as usize).is_err() {
            return Err(line);
        }
        let PutLine { pri, delay, ttr, bytes, tags, .. } = line;
        let created = self.shared.clock.now();
        // Copied straight from the input: no zeroing first.
        body.extend_from_slice(self.input.take_up_to(bytes as usize));
        let crlf = self.input.take_up_to(2) == b"\r\n";
        let c = self.client;
        self.ask_engine(|e, now, _| {
            e.count_put();
            let Some(ticket) = e.start_put(c, bytes) else {
                return Reply::OutOfMemory;
            };
            if !crlf {
                e.cancel_put(ticket);
                return Reply::ExpectedCrlf;
            }
            e.put(c, NewJob { ticket, pri, delay, ttr, created, body: body.into_boxed_slice(), tags }, now)
        });
        Ok(if crlf { Next::Continue } else { Next::Close })
    }

    /// A put whose body is read once the engine has claimed its id and
    /// memory: the checks, the claim, and the `Body` state (or, refused,
    /// the `Skipping` state).
    fn start_body(&mut self, line: PutLine) -> Next {
        let PutLine { pri, delay, ttr, bytes, after_size, tags } = line;
        let shared = &*self.shared;
        let created = shared.clock.now();
        let started = {
            let (mut engine, _) = shared.engine_now();
            engine.count_put();
            if bytes > shared.config.max_job_size {
                Err(Reply::JobTooBig)
            } else if after_size == AfterSize::Junk {
                // The body is not read: its bytes will be parsed as commands.
                drop(engine);
                Reply::BadFormat.encode(&mut self.output);
                return Next::Continue;
            } else if after_size == AfterSize::RefusedTags {
                // A tuber client's: its body is swallowed, never a command.
                Err(Reply::BadFormat)
            } else if after_size == AfterSize::OutOfMemory {
                Err(Reply::OutOfMemory)
            } else {
                engine.start_put(self.client, bytes).ok_or(Reply::OutOfMemory)
            }
        };
        let ticket = match started {
            Ok(ticket) => ticket,
            Err(refusal) => {
                // Swallow the body unseen, then say why.
                self.skip_then(u64::from(bytes) + 2, refusal);
                return Next::Continue;
            }
        };
        // The body's size is the client's to choose: memory that cannot be
        // had is a refusal, never an abort.
        let mut body = Vec::new();
        // Short of pages for it: empty those a few live jobs pin, then retry.
        let room = |body: &mut Vec<u8>| body.try_reserve_exact(bytes as usize).is_ok();
        let refused = if room(&mut body) || shared.make_room() && room(&mut body) {
            body.resize(bytes as usize, 0);
            match crate::sys::try_box(Body { pri, delay, ttr, tags, created, ticket, body, filled: 0 }) {
                Ok(pending) => {
                    self.state = State::Body(pending);
                    return Next::Continue;
                }
                Err(unboxed) => unboxed.ticket,
            }
        } else {
            ticket
        };
        shared.engine().cancel_put(refused);
        self.skip_then(u64::from(bytes) + 2, Reply::OutOfMemory);
        Next::Continue
    }

    /// The `Body` state: the body from what is buffered, then straight
    /// from the socket into the job's memory; then its CRLF, and the job
    /// is filed.
    pub(super) fn step_body(&mut self, reads: &mut usize) -> io::Result<Step> {
        let State::Body(pending) = &mut self.state else { return Ok(Step::Again) };
        pending.filled += self.input.take(&mut pending.body[pending.filled..]);
        if pending.filled < pending.body.len() {
            if self.eof {
                return Ok(Step::End);
            }
            if !self.readable {
                return Ok(Step::Blocked);
            }
            if *reads == 0 {
                return Ok(Step::Yield);
            }
            *reads -= 1;
            let free = &mut pending.body[pending.filled..];
            let asked = free.len();
            match self.link.stream.read_now(free) {
                Ok(0) => self.hang_up(),
                Ok(n) => {
                    self.heard = true;
                    pending.filled += n;
                    self.readable = n == asked || self.hung_up;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.readable = false,
                Err(e) => return Err(e),
            }
            return Ok(Step::Again);
        }
        if self.input.buffered() < 2 {
            if self.eof {
                return Ok(Step::End);
            }
            return self.read_more(reads);
        }
        let crlf = self.input.take_up_to(2) == b"\r\n";
        let State::Body(pending) = std::mem::replace(&mut self.state, State::Commands) else {
            return Ok(Step::Again);
        };
        let Body { pri, delay, ttr, tags, created, ticket, body, .. } = *pending;
        if !crlf {
            self.shared.engine().cancel_put(ticket);
            Reply::ExpectedCrlf.encode(&mut self.output);
            self.state = State::Closing;
            return Ok(Step::Again);
        }
        let job = NewJob { ticket, pri, delay, ttr, created, body: body.into_boxed_slice(), tags };
        let c = self.client;
        self.ask_engine(|e, now, _| e.put(c, job, now));
        Ok(Step::Again)
    }

    /// Swallows the next `count` bytes unseen, then answers `then`.
    pub(super) fn skip_then(&mut self, count: u64, then: Reply<'static>) {
        self.state = State::Skipping { left: count, then };
    }

    /// The `Skipping` state: the refused body's bytes dropped as they
    /// come, then the refusal answered.
    pub(super) fn step_skipping(&mut self, reads: &mut usize) -> io::Result<Step> {
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
}
