//! A `put`, as the connection runs it (reference §3.1, in that order):
//! the checks the line allows before the body, the engine's claim of an
//! id and memory, the body read by length outside the lock, then the
//! engine's filing of the job. A put's body is the one thing a client
//! sizes, so its memory is claimed fallibly, and a refusal swallows the
//! body rather than read it as commands. A body not followed by CRLF was
//! miscounted, so where the next command starts cannot be known:
//! `EXPECTED_CRLF`, then the connection ends.
//!
//! Most clients send a put's line and body in one write: then the body is
//! here already, and the claim and the filing are made under one hold of
//! the lock rather than two ([`Conn::put_buffered`]), with the same
//! replies in the same order of checks: a lock taken less often is a lock
//! found taken less often.

use std::io;

use super::{Conn, Next};
use crate::engine::NewJob;
use crate::protocol::{AfterSize, PutTags, Reply};

/// A put's command line, parsed: what [`Conn::put`] works from.
pub(super) struct PutLine {
    pub(super) pri: u32,
    pub(super) delay: u32,
    pub(super) ttr: u32,
    pub(super) bytes: u32,
    pub(super) after_size: AfterSize,
    pub(super) tags: PutTags,
}

impl Conn<'_> {
    /// `put`: the checks before the body, the body, then the engine
    /// (reference §3.1, in that order).
    pub(super) fn put(&mut self, line: PutLine) -> io::Result<Next> {
        let whole = line.after_size == AfterSize::Nothing
            && line.bytes <= self.shared.config.max_job_size
            && self.input.buffered() >= line.bytes as usize + 2;
        if whole {
            return match self.put_buffered(line) {
                Ok(next) => Ok(next),
                Err(line) => self.put_read(line),
            };
        }
        self.put_read(line)
    }

    /// A put whose body is buffered whole: the body taken, then its claim
    /// and its filing under one hold of the lock. The line back, nothing
    /// consumed, if the body's memory cannot be had: [`Conn::put_read`]
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
        let mut next = Next::Continue;
        self.ask_engine(|e, now, _| {
            e.count_put();
            let Some(ticket) = e.start_put(c, bytes) else {
                return Reply::OutOfMemory;
            };
            if !crlf {
                e.cancel_put(ticket);
                // What follows a miscounted body has no knowable start:
                // never run as commands (reference §1.5).
                next = Next::Close;
                return Reply::ExpectedCrlf;
            }
            e.put(c, NewJob { ticket, pri, delay, ttr, created, body: body.into_boxed_slice(), tags }, now)
        });
        Ok(next)
    }

    /// A put whose body is read once the engine has claimed its id and
    /// memory.
    fn put_read(&mut self, line: PutLine) -> io::Result<Next> {
        let PutLine { pri, delay, ttr, bytes, after_size, tags } = line;
        let shared = self.shared;
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
                return Ok(Next::Continue);
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
        // Short of pages for it: empty those a few live jobs pin, then retry.
        let room = |body: &mut Vec<u8>| body.try_reserve_exact(bytes as usize).is_ok();
        if !(room(&mut body) || shared.make_room() && room(&mut body)) {
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
                // The reply, then the end, as in `put_buffered`.
                Reply::ExpectedCrlf.encode(&mut self.output);
            }
            return Ok(Next::Close);
        }
        let job = NewJob { ticket, pri, delay, ttr, created, body: body.into_boxed_slice(), tags };
        let c = self.client;
        self.ask_engine(|e, now, _| e.put(c, job, now));
        Ok(Next::Continue)
    }
}
