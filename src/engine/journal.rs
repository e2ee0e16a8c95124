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

pub use super::body::LoggedBody;
use super::job::{Job, JobId, State, TubeId};
use super::tube::Tubes;
pub use super::unique::LoggedKey;
use crate::protocol::TubeName;
use crate::stats::BinlogStats;
use crate::time::Time;

/// A write-ahead log of job changes.
///
/// A command that changes a job says only what the job was and what it is
/// now, as a [`Change`]: first to [`Journal::claim`] room, then to
/// [`Journal::record`] it once made. Which record that takes, and the
/// log's bookkeeping (its live bytes, which files hold what), the log works
/// out from the two pictures, so a new command needs no record kind and no
/// knowledge of the log's files. Compaction's rewrites are the log's own
/// business, asked for by [`Journal::next_rewrite`] and done through
/// [`Journal::rewrite`].
pub trait Journal: Send + fmt::Debug {
    /// Claims room for `change`'s record, before the change is made (a
    /// new job's claim covers its delete to come). `false`: no room;
    /// refuse the command and change nothing.
    fn claim(&mut self, change: &Change<'_>) -> bool;

    /// Records `change`, now made: the job's state is now `change.now`
    /// (`None`: deleted). Returns the file that holds the job's latest
    /// full record, which the engine keeps in the job (`LoggedJob::file`)
    /// for the next change. A delete needs no claim: its new job's claim
    /// covered it.
    fn record(&mut self, change: &Change<'_>) -> io::Result<u32>;

    /// Claims room for all of `changes`' records, to be written together
    /// by [`Journal::record_all`]: a change of many jobs (`kick`,
    /// `clear-tube`, `delete-batch`), of any kind. `false`: no room;
    /// change nothing. The changes come one by one, so that a command
    /// that frees memory needs none to list them.
    fn claim_all<'c>(&mut self, changes: &mut dyn Iterator<Item = Change<'c>>) -> bool;
    /// Records all of `changes` in one write, *before* the engine makes
    /// them: either every record is in the log, or (`Err`) none is, and the
    /// log refuses every later change; a write cut short by a crash
    /// replays none of them. Pushes each job's file into `files`, in
    /// order, as [`Journal::record`] returns it; room for them is the
    /// caller's to claim.
    fn record_all<'c>(
        &mut self,
        changes: &mut dyn Iterator<Item = Change<'c>>,
        files: &mut Vec<u32>,
    ) -> io::Result<()>;
    /// Claims room to rewrite a live job's full record (compaction).
    fn claim_rewrite(&mut self, job: &LoggedJob<'_>) -> bool;

    /// Writes an unchanged job's full record again, into the current file,
    /// so that its old file can go (compaction, a full disk, corruption).
    /// Returns the file it went to.
    fn rewrite(&mut self, job: &LoggedJob<'_>) -> io::Result<u32>;

    /// Where the full record the last [`Journal::record`] or
    /// [`Journal::rewrite`] wrote keeps its body of `len` bytes, if the
    /// log keeps that body for the job (`body.rs`): the job's memory may
    /// then let the bytes go. `None` for any other record, a record
    /// written in a batch's frame, or a body memory keeps.
    fn body_place(&self, len: usize) -> Option<super::body::Place>;

    /// Log file `file`, open for reading a body left there with no lock
    /// held; `None` if the log keeps no bodies.
    fn body_read(&self, file: u32) -> Option<std::sync::Arc<std::fs::File>>;

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
    /// Its body, or where its latest full record keeps it (`body.rs`).
    pub body: super::body::Body,
    /// The file holding its latest full record.
    pub file: u32,
    /// Its unique key, if it has one, and the key's cooldown in seconds.
    pub key: Option<(Box<[u8]>, u32)>,
    /// Its retry limit, if it was put with one.
    pub limit: Option<u32>,
    /// Its concurrency key and the limit its put gave, if it has one.
    pub con: Option<(Box<[u8]>, u32)>,
    /// Its group (`grp:`), if it has one.
    pub group: Option<Box<[u8]>>,
    /// The group it waits for (`aft:`), if any.
    pub after: Option<Box<[u8]>>,
    /// A member's group's run, as its full record keeps it; `None` in a
    /// log older than runs (reference §3.1d).
    pub run: Option<JobId>,
}

/// The state a job comes back in: a reserved job comes back ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoredState {
    Ready,
    /// Becomes ready at `until`.
    Delayed {
        until: Time,
    },
    /// Held for a group (reference §3.1d): delayed with no due time. Held
    /// again if the group's run it waits for is still under way, else
    /// ready.
    Held,
    /// Buried at `at`: buried jobs come back in that order. `by_limit`:
    /// whether its retry limit buried it (a dead letter, reference
    /// §3.1b), as logged with the burial; `None` in a log older than the
    /// mark (format version 6 and before), where it is inferred as the
    /// builds that wrote it did: a buried job whose tries are spent.
    Buried {
        at: Time,
        by_limit: Option<bool>,
    },
    /// Deleted, its unique key cooling down until `until` (reference
    /// §3.1a): only the key comes back. To the log it is a live job, until
    /// the cooldown ends.
    Cooling {
        until: Time,
    },
}

/// One change to one job, as the log is told it: the job before and after
/// (reference §8.2 says which commands make one).
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    /// `None`: a new job (put).
    pub was: Option<LoggedJob<'a>>,
    /// `None`: the job is gone (delete).
    pub now: Option<LoggedJob<'a>>,
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
    /// Its body, or where the log holds it already (`body.rs`).
    pub body: LoggedBody<'a>,
    /// The log file holding its latest full record; 0 for a new job.
    pub file: u32,
    /// Its unique key: a full record with one is a record of its own kind.
    pub key: Option<LoggedKey<'a>>,
    /// Its retry limit (`max:`), which its full record keeps too.
    pub limit: Option<u32>,
    /// Its concurrency key and the limit its put gave (`con:`), likewise.
    pub con: Option<(&'a [u8], u32)>,
    /// Its group (`grp:`) and the group it waits for (`aft:`), likewise.
    pub groups: (Option<&'a [u8]>, Option<&'a [u8]>),
    /// A member's group's run: the id of the member that began it, which
    /// its full record keeps too (a restart works out holds from it,
    /// reference §3.1d).
    pub run: Option<JobId>,
    /// Buried by its retry limit, and buried still: a dead letter
    /// (reference §3.1b), which its records say with its burial.
    pub dead_letter: bool,
}

/// The fields of a job that its log records hold, but for its body: taken
/// before a change, and kept (it owns nothing) while the change is made, so
/// that the log can be told what the job was ([`Change::was`]). The body
/// never changes, and the tube it names still exists when the change is
/// recorded: a tube a job leaves is removed, if unreferenced, only after.
#[derive(Debug, Clone, Copy)]
pub(super) struct Picture {
    tube: TubeId,
    pri: u32,
    delay: u32,
    ttr: u32,
    state: State,
    created: Time,
    when: Time,
    counters: super::Counters,
    file: u32,
    tags: super::job::Tags,
}

impl Picture {
    pub(super) fn of(job: &Job) -> Picture {
        Picture {
            tube: job.tube,
            pri: job.pri,
            delay: job.delay,
            ttr: job.ttr,
            state: job.state,
            created: job.created,
            when: if job.state == State::Buried { job.buried_at() } else { job.deadline },
            counters: job.counters,
            file: job.file,
            tags: job.tags,
        }
    }

    /// This picture as the log sees it, for job `id` with body `body`.
    pub(super) fn logged<'a>(&self, id: JobId, tubes: &'a Tubes, body: LoggedBody<'a>) -> LoggedJob<'a> {
        LoggedJob {
            id,
            tube: &tubes.get(self.tube).name,
            pri: self.pri,
            delay: self.delay,
            ttr: self.ttr,
            state: self.state,
            created: self.created,
            when: self.when,
            counters: self.counters,
            body,
            file: self.file,
            key: if self.tags.keyed() { tubes.keys.logged(id) } else { None },
            limit: if self.tags.limited() { tubes.limits.get(id) } else { None },
            con: if self.tags.con() { tubes.con.of(id) } else { None },
            groups: if self.tags.group() || self.tags.after() { tubes.groups.of(id) } else { (None, None) },
            run: if self.tags.group() { tubes.groups.run_of(id) } else { None },
            dead_letter: self.state == State::Buried && self.tags.buried_by_limit(),
        }
    }
}
