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

use super::job::{JobId, State};
use super::table::JobTable;
use super::tube::Tubes;
use crate::protocol::TubeName;
use crate::stats::BinlogStats;
use crate::time::Time;

/// A write-ahead log of job changes.
pub trait Journal: Send + fmt::Debug {
    /// Claims room for a put's full record and the delete that will one day
    /// follow it. `false`: no room, refuse the put.
    fn claim_put(&mut self, tube_len: usize, body_len: usize) -> bool;

    /// Claims room for one update record (bury, release, kick, reserve-job).
    fn claim_update(&mut self) -> bool;

    /// Claims room to rewrite a live job's full record (compaction).
    fn claim_rewrite(&mut self, tube_len: usize, body_len: usize) -> bool;

    /// Writes a job's full record, put or rewritten, and returns the number
    /// of the file it went to. `job.file` is the file of its previous full
    /// record (0 for a new job). (A job record does not hold its own id:
    /// the job table's index does, so every call names it.)
    fn write_full(&mut self, job: &LoggedJob<'_>) -> io::Result<u32>;

    /// Writes a job's new state after bury, release, kick or reserve-job.
    fn write_update(&mut self, job: &LoggedJob<'_>) -> io::Result<()>;

    /// Writes that a job was deleted. Needs no claim of its own: its room
    /// was claimed by the put.
    fn write_delete(&mut self, job: &LoggedJob<'_>) -> io::Result<()>;

    /// The next job that compaction should rewrite into the current file,
    /// as `(file, id)`: job `id`'s full record was written into old file
    /// `file` (it may have moved since). `None` while the log is small
    /// enough for its live data, or while compaction has used up its share
    /// of the writing (a constant times what clients wrote).
    fn next_rewrite(&mut self) -> Option<(u32, JobId)>;

    /// A job whose full record was written into `file`, if any is left: to
    /// empty that file at once (start-up after corruption, a full disk).
    fn written_in(&self, file: u32) -> Option<JobId>;

    /// Job `id`, named by [`Journal::next_rewrite`] or [`Journal::written_in`],
    /// no longer has its full record in `file`: it was deleted or rewritten.
    fn forget_written(&mut self, file: u32, id: JobId);

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
    pub state: RestoredState,
    pub created: Time,
    pub counters: super::Counters,
    pub body: Box<[u8]>,
    /// The file holding its latest full record.
    pub file: u32,
}

/// The state a job comes back in: a reserved job comes back ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoredState {
    Ready,
    /// Becomes ready at `until`.
    Delayed {
        until: Time,
    },
    /// Buried at `at`: buried jobs come back in that order.
    Buried {
        at: Time,
    },
}

/// What the log sees of a job: the fields a record stores, and nothing of
/// where the job sits in the engine's queues. The engine hands one to each
/// write (see `logged_job`); the job record itself stays the engine's.
#[derive(Debug, Clone, Copy)]
pub struct LoggedJob<'a> {
    pub id: JobId,
    pub tube: &'a TubeName,
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    pub state: State,
    pub created: Time,
    /// Delayed: when it becomes ready. Buried: when it was buried.
    /// Otherwise unused.
    pub when: Time,
    pub counters: super::Counters,
    pub body: &'a [u8],
    /// The log file holding its latest full record; 0 for a new job.
    pub file: u32,
}

/// The log's view of job `id`, if it exists.
pub(super) fn logged_job<'a>(jobs: &'a JobTable, tubes: &'a Tubes, id: JobId) -> Option<LoggedJob<'a>> {
    let job = jobs.get(&id)?;
    Some(LoggedJob {
        id,
        tube: &tubes.get(job.tube).name,
        pri: job.pri,
        delay: job.delay,
        ttr: job.ttr,
        state: job.state,
        created: job.created,
        when: if job.state == State::Buried { job.buried_at() } else { job.deadline },
        counters: job.counters,
        body: &job.body,
        file: job.file,
    })
}
