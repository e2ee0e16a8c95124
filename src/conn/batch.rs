//! The connection's side of the commands on many jobs (`engine/batch.rs`):
//! `delete-batch`'s ids, read from its line; `reserve-batch`'s replies,
//! written after the head the engine answers; and the commands on a whole
//! tube (`clear-tube`, `flush-tube`), one chunk a lock, so that the other
//! clients are served between chunks.

use super::body::{self, ToRead};
use super::{Conn, State};
use crate::engine::{JobId, BATCH_PIECE};
use crate::protocol::{self, Command, Reply, ReplyRoom, SHORT_REPLY_LEN};

/// Output room made ready before each piece: a piece's bodies and a
/// job more, up to a megabyte's.
const PIECE_ROOM: usize = BATCH_PIECE + (1 << 20);

/// Bytes of replies one `reserve-batch` makes at most (one job at least):
/// what a client that does not read may hold (reference §3.22).
const BATCH_MOST: usize = 16 << 20;

/// Where the `RESERVED <id> <bytes>\r\n<body>\r\n` reply that starts at
/// `at` in `output` ends.
fn reply_end(output: &[u8], at: usize) -> usize {
    let rest = &output[at..];
    let header = rest.windows(2).position(|w| w == b"\r\n").unwrap_or(rest.len());
    let bytes: usize = std::str::from_utf8(&rest[..header])
        .ok()
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0);
    (at + header + 2 + bytes + 2).min(output.len())
}

impl Conn {
    /// `delete-batch`: the ids of the line `[start..end]`, which the parser
    /// took, deleted under one lock.
    pub(super) fn delete_batch(&mut self, start: usize, end: usize) {
        // The engine reads the ids from the line itself, into room it
        // keeps: a delete on a full server needs no memory (reference
        // §3.0, `frees`). Nothing on the stack either: 8 KB there would
        // be touched by the loop's thread, used or not, since a
        // frame that large is probed page by page on entry.
        let input = std::mem::take(&mut self.input);
        let line = input.line(start, end);
        let c = self.client;
        self.ask_engine(|e, now, _| e.delete_batch(c, &mut protocol::batch_ids(line), now));
        self.input = input;
    }

    /// `reserve-batch <count> [<timeout>]`: what is ready (see
    /// [`Conn::batch_from`]); with nothing ready and a timeout, a wait, as
    /// `reserve-with-timeout`'s, for the first job, and the batch is that
    /// job and what else is ready then (tuber's long poll). The wait never
    /// ends `TIMED_OUT`: `RESERVED_BATCH 0`.
    pub(super) fn reserve_batch(&mut self, count: u32, timeout: Option<u32>) {
        let reply_start = self.output.len();
        if self.batch_from(count, None, reply_start) != Some(0) {
            return;
        }
        let Some(timeout) = timeout.filter(|&t| t > 0) else {
            Reply::ReservedBatch(0).encode(&mut self.output);
            return;
        };
        let c = self.client;
        let (mut engine, now) = self.shared.engine_now();
        let Some(reply) = engine.reserve_batch_wait(c, timeout, now, &mut HeadRoom(&mut self.output)) else {
            self.wake_at = engine.wake_time(c);
            drop(engine);
            self.state = State::Waiting { abortable: false, batch: Some(count) };
            return;
        };
        let (first, to_read) = encode_wait_end(reply, &mut self.output);
        let to_read = body::find(to_read, &engine);
        drop(engine);
        self.batch_after_wait(count, first, reply_start, to_read);
    }

    /// A batch's wait is over, its outcome written at `reply_start`: if it
    /// was a job, the batch goes on from it, once its body is read in.
    pub(super) fn batch_after_wait(
        &mut self,
        count: u32,
        first: Option<JobId>,
        reply_start: usize,
        to_read: ToRead,
    ) {
        if first.is_some() && self.read_body(to_read, reply_start) {
            self.batch_from(count, first, reply_start);
        }
    }

    /// A batch of what is ready: `RESERVED_BATCH <n>`, then a `RESERVED`
    /// reply for each job, after `first`'s (reserved, its reply at
    /// `reply_start`) if there is one; `Some(0)` with nothing written, if
    /// nothing was ready, else how many. Reserved and copied a piece at a time, the lock
    /// let go between pieces ([`BATCH_PIECE`] bytes of bodies each), so
    /// that a batch of big jobs holds no other client up for more than a
    /// piece; and no more than [`BATCH_MOST`] bytes of replies in all, so
    /// that a client that does not read holds no more memory than that.
    /// The head, whose count is known only at the end, goes in front of
    /// the replies in room claimed with each piece. A job whose TTR ran
    /// out meanwhile is left out: its reply is never sent.
    fn batch_from(&mut self, count: u32, first: Option<JobId>, reply_start: usize) -> Option<usize> {
        let (mut ids, mut starts, mut keep, mut reads) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let n = count as usize;
        if (ids.try_reserve_exact(n).is_err()
            || starts.try_reserve_exact(n).is_err()
            || keep.try_reserve_exact(n).is_err()
            || reads.try_reserve_exact(n).is_err()
            || self.job_replies.try_reserve(n).is_err())
            // A job reserved after a wait, its reply written, is a batch
            // of one (a few bytes of lists for it).
            && first.is_none()
        {
            Reply::OutOfMemory.encode(&mut self.output);
            return None;
        }
        ids.extend(first);
        starts.extend(first.map(|_| reply_start));
        let mut timeouts_before = None;
        loop {
            let before = ids.len();
            self.prepare_room(PIECE_ROOM);
            let (mut engine, now) = self.shared.engine_now();
            timeouts_before.get_or_insert(engine.timeouts_so_far());
            let head = engine.reserve_batch(self.client, count, now, BATCH_PIECE, &mut self.output, &mut ids);
            if ids.is_empty() {
                // Nothing ready, or no room for one (`OUT_OF_MEMORY`).
                if matches!(head, Reply::ReservedBatch(0)) {
                    return Some(0);
                }
                head.encode(&mut self.output);
                return None;
            }
            for &id in &ids[before..] {
                // Room for each, and for the head, was claimed before its
                // job was reserved.
                starts.push(self.output.len());
                let reply = engine.reserved_reply(id).unwrap_or(Reply::InternalError);
                reads.extend(body::find(body::encode(reply, &mut self.output), &engine));
            }
            drop(engine);
            if let Err(lost) = self.read_bodies(&reads) {
                self.unsend_batch(&ids, lost, reply_start);
                return None;
            }
            reads.clear();
            let done = ids.len() == before || ids.len() == n;
            if done || self.output.len() - reply_start >= BATCH_MOST {
                break;
            }
        }
        if timeouts_before != Some(self.shared.engine().timeouts_so_far()) {
            self.leave_out_lapsed(&mut ids, &starts, &mut keep);
        }
        // The head in front: room for it was claimed with every piece, so
        // this allocates nothing.
        let end = self.output.len();
        Reply::ReservedBatch(ids.len()).encode(&mut self.output);
        let head = self.output.len() - end;
        self.output[reply_start..].rotate_right(head);
        // Each job's reply, where it now ends, for the lapse check before
        // more of it leaves (`Conn::write_out`).
        let mut at = reply_start + head;
        for &id in &ids {
            at = reply_end(&self.output, at);
            self.job_reply_ending(id, at);
        }
        Some(ids.len())
    }

    /// A batch with a body that could not be read (job `lost`, if it was
    /// buried) is
    /// `INTERNAL_ERROR`: its replies from `reply_start` on go, and its
    /// other jobs back to ready, as if never reserved.
    #[cold]
    #[inline(never)]
    fn unsend_batch(&mut self, ids: &[JobId], lost: Option<JobId>, reply_start: usize) {
        self.output.truncate(reply_start);
        Reply::InternalError.encode(&mut self.output);
        let (mut engine, now) = self.shared.engine_now();
        for &id in ids.iter().filter(|&&id| Some(id) != lost) {
            engine.unsend(self.client, id, now);
        }
    }

    /// Room for `bytes` more of output, claimed and its pages touched
    /// before the lock is taken, so that copying a piece under the lock
    /// neither moves the buffer nor faults its pages in (best effort: a
    /// piece claims its own room again under the lock).
    fn prepare_room(&mut self, bytes: usize) {
        let len = self.output.len();
        if self.output.try_reserve(bytes).is_ok() {
            self.output.resize(len + bytes, 0);
            self.output.truncate(len);
        }
    }

    /// After a TTR ran out while the batch was made: takes out the replies
    /// of the jobs this client no longer holds, and the earlier reply of a
    /// job that lapsed and came back to it in a later piece (it is sent
    /// once, as its last reservation). Which to keep is decided under one
    /// lock (a job reaches one worker at a time); the replies are moved
    /// after it is let go. `starts` holds where each reply begins.
    fn leave_out_lapsed(&mut self, ids: &mut Vec<JobId>, starts: &[usize], keep: &mut Vec<bool>) {
        {
            let engine = self.shared.engine();
            keep.extend(ids.iter().map(|&id| engine.holds(self.client, id)));
        }
        for n in 0..ids.len() {
            if keep[n] && ids[n + 1..].contains(&ids[n]) {
                keep[n] = false;
            }
        }
        let (mut to, mut kept) = (starts[0], 0);
        for n in 0..ids.len() {
            let end = starts.get(n + 1).copied().unwrap_or(self.output.len());
            if keep[n] {
                self.output.copy_within(starts[n]..end, to);
                to += end - starts[n];
                ids[kept] = ids[n];
                kept += 1;
            }
        }
        self.output.truncate(to);
        ids.truncate(kept);
    }

    /// A command on a whole tube (`Command::works_in_chunks`: `clear-tube`,
    /// tuber's `flush-tube`): the engine's chunks, the lock let go between
    /// them, until a chunk gives the reply (`Engine::tube_chunk`), which
    /// waits for the log as any reply does.
    pub(super) fn on_a_tube(&mut self, command: Command) {
        let shared = &*self.shared;
        let logged_before = shared.journal_seq();
        let reply_start = self.output.len();
        let started = shared.engine_now().0.start_on_tube(command);
        let reply = match started {
            Err(answer) => answer,
            Ok(mut run) => loop {
                let (mut engine, now) = shared.engine_now();
                if let Some(reply) = engine.tube_chunk(&mut run, now) {
                    break reply;
                }
            },
        };
        reply.encode(&mut self.output);
        self.hold_until_durable(logged_before, shared.journal_seq(), reply_start);
    }
}

/// Writes how a batch's wait ended: its first job's reply (returning the
/// job, and whether its body is left to read, [`body::encode`]), or the
/// ending, `RESERVED_BATCH 0` for `TIMED_OUT`.
pub(super) fn encode_wait_end(reply: Reply<'_>, output: &mut Vec<u8>) -> (Option<JobId>, Option<body::Hole>) {
    let first = reply.reserved_job();
    match reply {
        Reply::TimedOut => (None, body::encode(Reply::ReservedBatch(0), output)),
        reply => (first, body::encode(reply, output)),
    }
}

/// The room a batch's first job claims, once a wait has found it: its
/// reply's, and the head's that will go in front.
pub(super) struct HeadRoom<'a>(pub(super) &'a mut Vec<u8>);

impl ReplyRoom for HeadRoom<'_> {
    fn claim(&mut self, bytes: usize) -> bool {
        self.0.claim(bytes.saturating_add(SHORT_REPLY_LEN))
    }
}
