//! The engine's port to persistence: what it tells a write-ahead log, and
//! the one question it asks (is there room?).
//!
//! The engine calls a [`Journal`] after every change that must survive a
//! restart, while it still holds its lock, so records are written in the
//! order the changes happened. Before a change that would need disk space it
//! asks first, and refuses the command with `OUT_OF_MEMORY` when there is
//! none, leaving the job exactly as it was. The engine never sees a file: the
//! binlog module implements this trait, and tests run the engine without one.

use std::fmt;
use std::io;

use super::job::{Job, JobId};
use crate::protocol::TubeName;
use crate::stats::BinlogStats;

/// A write-ahead log of job changes.
pub trait Journal: Send + fmt::Debug {
    /// Claims room for a put's full record and the delete that will one day
    /// follow it. `false`: no room, refuse the put.
    fn reserve_put(&mut self, tube_len: usize, body_len: usize) -> bool;

    /// Claims room for one update record (bury, release, kick, reserve-job).
    fn reserve_update(&mut self) -> bool;

    /// Claims room to rewrite a live job's full record (compaction).
    fn reserve_rewrite(&mut self, tube_len: usize, body_len: usize) -> bool;

    /// Writes a job's full record, put or rewritten, and returns the number
    /// of the file it went to. `job.file` is the file of its previous full
    /// record (0 for a new job).
    fn write_full(&mut self, job: &Job, tube: &TubeName) -> io::Result<u32>;

    /// Writes a job's new state after bury, release, kick or reserve-job.
    fn write_update(&mut self, job: &Job) -> io::Result<()>;

    /// Writes that a job was deleted. Never needs a reservation: its room
    /// was claimed by the put.
    fn write_delete(&mut self, job: &Job) -> io::Result<()>;

    /// Files whose live jobs should be rewritten into the current file so
    /// that they can be deleted, if the log has grown too large for its data.
    fn compaction_targets(&mut self) -> Vec<u32>;

    /// Files whose live jobs should be rewritten now because a claim for
    /// space just failed: emptying the oldest files may free the disk. Empty
    /// if nothing was written since the last time it said so (then nothing
    /// can have changed, and the job table is not scanned again).
    fn files_to_free(&mut self) -> Vec<u32>;

    /// The figures `stats` shows.
    fn stats(&self) -> BinlogStats;
}

/// A job read back from the log at start-up.
#[derive(Debug)]
pub struct RestoredJob {
    pub id: JobId,
    /// Index into the list of tube names given with the jobs.
    pub tube: usize,
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    pub buried: bool,
    /// When a delayed job becomes ready; `None` if it is not delayed.
    pub ready_at: Option<crate::time::Time>,
    pub created: crate::time::Time,
    pub counters: super::Counters,
    pub body: Box<[u8]>,
    /// The file holding its latest full record.
    pub file: u32,
}
