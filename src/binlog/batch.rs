//! A change of many jobs in one write: `kick`, `delete-batch` and each
//! chunk of `clear-tube` and `flush-tube` log all their jobs' records at
//! once, in one batch frame
//! under one checksum (`record.rs`, kind 7), so that either every record
//! replays or none does, whatever byte a crash cuts the write at; and the
//! engine changes memory only once the write has succeeded (claim, log,
//! then change).
//!
//! The records are chosen and booked exactly as one at a time
//! ([`Journal::record`](crate::engine::Journal::record), `writing.rs`),
//! but `append` gathers them here, as the frame's items, instead of
//! writing each; then one write puts the frame in the current file. What the write promises (the offset
//! the next record goes to, the count of records that replies wait on to
//! be durable) moves only after it has succeeded: the fsync thread must
//! never count a record that is not yet in the file. A write that fails
//! fails the log, as any failed write does, and its bytes are zeroed so
//! that no part of the change replays.
//!
//! It must not choose records or keep any book but the write's own.

use std::io;
use std::os::unix::fs::FileExt;

use super::record::{self, BATCH_LEN, DELETE_LEN, UPDATE_LEN};
use super::writing::{full_len, kind, Kind};
use super::{faults, Binlog};
use crate::engine::Change;

/// Changes of a usual batch ([`crate::engine::CLEAR_CHUNK`] updates or
/// deletes) that the gathering buffers have room for from the start.
pub(super) const BATCH_ROOM: usize = 1000;

/// The gathering buffer's room for [`BATCH_ROOM`] updates in a frame.
pub(super) const GATHERED_ROOM: usize = BATCH_ROOM * UPDATE_LEN + BATCH_LEN;

/// Bytes `change`'s record takes, and whether it is a full one (the
/// record `writing.rs` chooses for it).
fn record_len(change: &Change<'_>) -> (u64, bool) {
    match (kind(change), &change.now) {
        (Kind::Full, Some(now)) => {
            // With its unique key's bytes, if it has one.
            let full = full_len(now);
            // A new job's claim covers its delete to come.
            let delete = if change.was.is_none() { DELETE_LEN as u64 } else { 0 };
            (full + delete, true)
        }
        (Kind::Update, _) => (UPDATE_LEN as u64, false),
        // A delete's room was claimed with its job.
        _ => (0, false),
    }
}

impl Binlog {
    /// Claims room in the current file, and the memory to gather them, for
    /// all of `changes`' records, to be written by [`Binlog::record_batch`].
    pub(super) fn claim_batch<'c>(&mut self, changes: &mut dyn Iterator<Item = Change<'c>>) -> bool {
        let (mut bytes, mut fulls, mut new, mut count) = (0u64, 0usize, 0u64, 0usize);
        for change in changes {
            let (len, full) = record_len(&change);
            bytes += len;
            fulls += usize::from(full);
            new += u64::from(change.was.is_none());
            count += 1;
        }
        if count == 0 {
            return true;
        }
        // The frame's own bytes, less the checksum each item goes without
        // (a delete's item comes out of the room its job claimed): exact,
        // so a batch of deletes claims next to nothing on a full disk.
        let bytes = (bytes + BATCH_LEN as u64).saturating_sub(4 * count as u64);
        // A record's own bytes are no more than its room (a delete's was
        // claimed before): the gathering buffer takes the larger of the two.
        let gathered = bytes as usize + count * DELETE_LEN;
        // Each change may let one file go, collected after the write. Both
        // buffers keep their room from one batch to the next, and start
        // with room for a usual one ([`BATCH_ROOM`]): a batch of deletes
        // on a full server needs no new memory.
        if self.gathered.try_reserve_exact(gathered).is_err()
            || self.collect_after.try_reserve(count).is_err()
        {
            return false;
        }
        let listed = |log: &mut Binlog| {
            let current = log.current;
            log.files.get_mut(&current).is_some_and(|info| info.written.try_reserve(fulls).is_ok())
        };
        if !self.make_room(bytes, 0) || !listed(self) {
            return false;
        }
        self.claimed += new * DELETE_LEN as u64;
        true
    }

    /// Records all of `changes` in one write, each job's file into `files`
    /// (as [`Journal::record`](crate::engine::Journal::record) returns it).
    /// `Err`: nothing of it is in the log, and the log refuses every later
    /// change.
    pub(super) fn record_batch<'c>(
        &mut self,
        changes: &mut dyn Iterator<Item = Change<'c>>,
        files: &mut Vec<u32>,
    ) -> io::Result<()> {
        use crate::engine::Journal;
        self.gathered.clear();
        self.gathered_records = 0;
        let frame = record::begin_batch(&mut self.gathered);
        self.gathering = true;
        let mut booked = Ok(());
        for change in changes {
            match self.record(&change) {
                Ok(file) => files.push(file),
                Err(e) => {
                    booked = Err(e);
                    break;
                }
            }
        }
        self.gathering = false;
        record::finish_batch(&mut self.gathered, frame);
        let written = booked.and_then(|()| self.write_gathered());
        self.gathered.clear();
        // A huge batch's room goes back to a usual one's (best effort).
        if self.gathered.capacity() > 2 * GATHERED_ROOM {
            let mut usual = Vec::new();
            if usual.try_reserve_exact(GATHERED_ROOM).is_ok() {
                self.gathered = usual;
            }
        }
        let mut let_go = std::mem::take(&mut self.collect_after);
        if written.is_ok() {
            self.collect_unneeded(&let_go);
        }
        let_go.clear();
        self.collect_after = let_go;
        written
    }

    /// `append` while a batch is gathered: the record joins it as an item.
    pub(super) fn gather(&mut self) -> io::Result<u64> {
        if self.gathered.try_reserve(self.scratch.len()).is_err() {
            return Err(self.out_of_memory());
        }
        let before = self.gathered.len();
        record::push_batch_item(&mut self.gathered, &self.scratch);
        self.gathered_records += 1;
        Ok((self.gathered.len() - before) as u64)
    }

    /// Writes the gathered frame at the end of the current file, then
    /// moves what the write promises. A frame of no records (no change
    /// had one) is not written: a batch holds at least one.
    fn write_gathered(&mut self) -> io::Result<()> {
        let (len, records) = (self.gathered.len() as u64, std::mem::take(&mut self.gathered_records));
        if records == 0 {
            return Ok(());
        }
        let Some(at) = self.files.get(&self.current).map(|info| info.used) else {
            return Err(io::Error::other("no current file"));
        };
        let written = faults::io_point().and_then(|()| self.writer.write_all_at(&self.gathered, at));
        if let Err(e) = written {
            self.failed = true;
            self.durability.halt_removals();
            self.write_failures += 1;
            crate::log::problem(format_args!("binlog: write failed, refusing further changes: {e}"));
            // Whatever part of it reached the file must not replay: a
            // change of many jobs is all or nothing. Best effort; the
            // records' checksums catch what this cannot undo.
            const ZEROS: [u8; 4096] = [0; 4096];
            for offset in (0..len).step_by(ZEROS.len()) {
                let n = (len - offset).min(ZEROS.len() as u64) as usize;
                let _ = self.writer.write_all_at(&ZEROS[..n], at + offset);
            }
            return Err(e);
        }
        if let Some(info) = self.files.get_mut(&self.current) {
            info.used += len;
        }
        self.free = self.free.saturating_sub(len);
        self.disk_bytes += len;
        self.records_written += records;
        self.durability.wrote(records);
        Ok(())
    }
}
