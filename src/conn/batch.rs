//! The connection's side of the commands on many jobs (`engine/batch.rs`):
//! `delete-batch`'s ids, read from its line; `reserve-batch`'s replies,
//! written after the head the engine answers; and `clear-tube`, one chunk
//! a lock, so that the other clients are served between chunks.

use std::io;

use super::{Conn, Next};
use crate::engine::JobId;
use crate::protocol::{self, Reply, TubeName};

impl Conn<'_> {
    /// `delete-batch`: the ids of the line `[start..end]`, which the parser
    /// took, deleted under one lock.
    pub(super) fn delete_batch(&mut self, start: usize, end: usize) {
        // Claimed, as the engine claims what it needs, before anything
        // changes. Not on the stack: 8 KB there would be touched by every
        // connection's thread, used or not, since a frame that large is
        // probed page by page on entry (an idle connection cost 16.6 KiB
        // instead of 8.6).
        let line = self.input.line(start, end);
        let mut ids: Vec<JobId> = Vec::new();
        if ids.try_reserve_exact(protocol::batch_ids(line).count()).is_err() {
            Reply::OutOfMemory.encode(&mut self.output);
            return;
        }
        ids.extend(protocol::batch_ids(line));
        let c = self.client;
        self.ask_engine(|e, now, _| e.delete_batch(c, &ids, now));
    }

    /// `reserve-batch <count>`: `RESERVED_BATCH <n>`, then a `RESERVED`
    /// reply for each job, all made under one lock.
    pub(super) fn reserve_batch(&mut self, count: u32) -> io::Result<Next> {
        let mut ids = Vec::new();
        if ids.try_reserve_exact(count as usize).is_err() {
            Reply::OutOfMemory.encode(&mut self.output);
            return Ok(Next::Continue);
        }
        let (mut engine, now) = self.shared.engine_now();
        let head = engine.reserve_batch(self.client, count, now, &mut self.output, &mut ids);
        head.encode(&mut self.output);
        for &id in &ids {
            // Room for each was claimed before its job was reserved.
            engine.reserved_reply(id).unwrap_or(Reply::InternalError).encode(&mut self.output);
        }
        Ok(Next::Continue)
    }

    /// `clear-tube <tube>`: the engine's chunks, the lock let go between
    /// them, until one comes back short. `CLEARED <n>` says how many jobs
    /// went: if a chunk is refused after others went, those are the answer
    /// (they are gone, and logged); if the first is, its refusal is.
    pub(super) fn clear_tube(&mut self, name: &TubeName) {
        let shared = self.shared;
        let logged_before = shared.journal_seq();
        let reply_start = self.output.len();
        let mut cleared: u64 = 0;
        let most = {
            let (engine, _) = shared.engine_now();
            engine.clearable(name)
        };
        let reply = loop {
            let chunk = {
                let (mut engine, now) = shared.engine_now();
                engine.clear_tube(name, most.saturating_sub(cleared), now)
            };
            match chunk {
                Ok(n) => {
                    cleared += n as u64;
                    if n < crate::engine::CLEAR_CHUNK || cleared >= most {
                        break Reply::Cleared(cleared);
                    }
                }
                Err(_) if cleared > 0 => break Reply::Cleared(cleared),
                Err(refusal) => break refusal,
            }
        };
        reply.encode(&mut self.output);
        self.hold_until_durable(logged_before, shared.journal_seq(), reply_start);
    }
}
