//! The log's side of the [`Journal`] trait: claiming disk room before a
//! change, choosing the record a change takes (full, update or delete,
//! from the job before and after it), appending it, and the bookkeeping
//! each record brings (live jobs per file, the references between files,
//! compaction's budget).

use std::io;

use super::compaction::live_len;
use super::record::{self, JobState, LoggedState, DELETE_LEN, UPDATE_LEN};
use super::Binlog;
use crate::engine::{Change, JobId, Journal, LoggedBody, LoggedJob, Place, State};
use crate::stats::BinlogStats;
use crate::time::Clock;

/// The logged view of a job's changing fields; a delayed job's due time as
/// wall-clock time by `clock`.
fn job_state(id: JobId, job: &LoggedJob<'_>, clock: &Clock) -> JobState {
    let cooling = job.key.and_then(|key| key.until);
    let (state, deadline) = match job.state {
        // Deleted, its key cooling down (`Engine::discard`).
        _ if cooling.is_some() => (LoggedState::Cooling, cooling.map_or(0, |until| clock.to_unix(until))),
        State::Delayed => (LoggedState::Delayed, clock.to_unix(job.when)),
        // A buried job's time is when it was buried: it orders the
        // buried list after a restart. It is only ever compared, and the
        // engine keeps it increasing across restarts, so it is stored as
        // is: converting it would let a wall-clock step reorder it. Its
        // retry limit's burial is a state of its own: the mark is what
        // the burial was, which no later limit can tell.
        State::Buried if job.dead_letter => (LoggedState::BuriedByLimit, job.when.0),
        State::Buried => (LoggedState::Buried, job.when.0),
        // A job held for a group (reference §3.1d) is delayed with no due
        // time: after a restart it is held again if the group's run it
        // waits for is still under way, as at the end of a delay.
        State::Held => (LoggedState::Delayed, 0),
        // Reserved comes back ready after a restart, and is never held.
        State::Ready | State::Reserved => (LoggedState::Ready, 0),
    };
    JobState { id, pri: job.pri, delay: job.delay, state, deadline, counters: job.counters }
}

/// Which record a change takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A new job, or one whose tube changed: only a full record holds the
    /// tube (and the TTR, creation time and body, which never change).
    Full,
    /// An existing job's other fields: state, priority, delay, counters.
    Update,
    Delete,
}

/// The record `change` takes. Fields an update record lacks are compared
/// whatever the engine lets change today, so that a command that one day
/// changes one of them is logged right without a word here.
pub(super) fn kind(change: &Change<'_>) -> Kind {
    match (&change.was, &change.now) {
        (_, None) => Kind::Delete,
        (None, Some(_)) => Kind::Full,
        (Some(was), Some(now)) => {
            let same = was.tube == now.tube
                && was.ttr == now.ttr
                && was.created == now.created
                && was.body.len() == now.body.len();
            if same {
                Kind::Update
            } else {
                Kind::Full
            }
        }
    }
}

impl Journal for Binlog {
    fn claim(&mut self, change: &Change<'_>) -> bool {
        match (kind(change), &change.was, &change.now) {
            (Kind::Full, None, Some(job)) => {
                // A new job: its full record, and its delete to come; and
                // it must leave compaction its reserve (`compaction_reserve`).
                if !self.make_room(full_len(job) + DELETE_LEN as u64, self.compaction_reserve()) {
                    return false;
                }
                self.claimed += DELETE_LEN as u64;
                true
            }
            // A change to a job already logged may use the reserve: existing
            // jobs stay workable on a full disk. A body the log holds, and
            // the new record carries, is read back first: one that cannot be
            // read refuses the change.
            (Kind::Full, Some(was), Some(job)) => {
                self.ready_body(was, job).is_ok() && self.make_room(full_len(job), 0)
            }
            (Kind::Update, ..) => self.make_room(UPDATE_LEN as u64, 0),
            // The job's claim when it was new covered its delete.
            _ => true,
        }
    }

    fn record(&mut self, change: &Change<'_>) -> io::Result<u32> {
        self.last_full_at = None;
        match (kind(change), &change.was, &change.now) {
            (Kind::Full, was, Some(now)) => {
                let len = self.append_full(now, was.as_ref().unwrap_or(now))?;
                self.earn_rewrites(len);
                self.live_bytes += live_len(now.tube.as_str().len(), now.body.len());
                if let Some(was) = was {
                    // Its full record moves here: the old one is stale.
                    self.live_bytes = self.live_bytes.saturating_sub(live_bytes(was));
                    self.leave_file(was);
                }
                Ok(self.current)
            }
            (Kind::Update, Some(was), Some(now)) => {
                self.scratch.clear();
                record::encode_update(&mut self.scratch, &job_state(now.id, now, &self.clock));
                let len = self.append()?;
                self.earn_rewrites(len);
                self.refer_to(was.file);
                Ok(was.file)
            }
            (_, Some(was), _) => {
                self.scratch.clear();
                record::encode_delete(&mut self.scratch, was.id);
                // Its claim as a new job covered this room.
                self.claimed = self.claimed.saturating_sub(DELETE_LEN as u64);
                let result = self.append();
                self.live_bytes = self.live_bytes.saturating_sub(live_bytes(was));
                if let Ok(len) = result {
                    self.earn_rewrites(len);
                    self.refer_to(was.file);
                }
                self.forget_in(was.file);
                result.map(|_| 0)
            }
            // Neither before nor after: nothing to say.
            _ => Ok(0),
        }
    }

    fn claim_all<'c>(&mut self, changes: &mut dyn Iterator<Item = Change<'c>>) -> bool {
        self.claim_batch(changes)
    }

    fn record_all<'c>(
        &mut self,
        changes: &mut dyn Iterator<Item = Change<'c>>,
        files: &mut Vec<u32>,
    ) -> io::Result<()> {
        self.record_batch(changes, files)
    }

    fn claim_rewrite(&mut self, job: &LoggedJob<'_>) -> bool {
        self.ready_body(job, job).is_ok() && self.make_room(full_len(job), self.compaction_reserve() / 2)
    }

    fn rewrite(&mut self, job: &LoggedJob<'_>) -> io::Result<u32> {
        self.last_full_at = None;
        let len = self.append_full(job, job)?;
        // Compaction's own writing spends its budget, and earns none.
        self.records_migrated += 1;
        self.rewrite_credit -= len as i64;
        self.leave_file(job);
        Ok(self.current)
    }

    fn body_place(&self, len: usize) -> Option<Place> {
        let (at, written) = self.last_full_at?;
        self.keeping.place(at, len).filter(|_| written == len)
    }

    fn body_read(&self, file: u32) -> Option<std::sync::Arc<std::fs::File>> {
        self.reader(file)
    }

    fn next_rewrite(&mut self) -> Option<(u32, JobId)> {
        self.next_to_rewrite()
    }

    fn written_in(&self, file: u32) -> Option<JobId> {
        self.last_written_in(file)
    }

    fn forget_written(&mut self, file: u32, id: JobId) {
        self.forget_written_in(file, id);
    }

    fn files_to_free(&mut self) -> Vec<u32> {
        if self.failed || self.freed_at == Some(self.records_written) {
            return Vec::new();
        }
        self.freed_at = Some(self.records_written);
        self.files.keys().copied().filter(|&n| n != self.current).take(4).collect()
    }

    fn stats(&self) -> BinlogStats {
        BinlogStats {
            oldest_index: u64::from(self.files.keys().next().copied().unwrap_or(self.current)),
            current_index: u64::from(self.current),
            records_migrated: self.records_migrated,
            records_written: self.records_written,
            max_size: self.max_size_shown,
            disk_bytes: self.disk_bytes,
            files: self.files.len() as u64,
            fsyncs: self.durability.fsyncs(),
            failures: self.write_failures + self.durability.failures(),
            refusing: self.failed || self.durability.failed(),
        }
    }
}

/// Bytes of `job`'s full record.
pub(super) fn full_len(job: &LoggedJob<'_>) -> u64 {
    let tags = record::tags_len(&full_tags(job));
    (record::full_len(job.tube.as_str().len(), job.body.len()) + tags) as u64
}

/// The put's tags `job`'s full record keeps.
fn full_tags<'a>(job: &LoggedJob<'a>) -> record::FullTags<'a> {
    let (group, after) = job.groups;
    record::FullTags {
        key: job.key.map(|key| (key.key, key.cooldown)),
        limit: job.limit,
        con: job.con,
        group,
        after,
        run: job.run.filter(|_| group.is_some()).unwrap_or(0),
    }
}

/// What `job`'s latest records count for in the compaction budget.
fn live_bytes(job: &LoggedJob<'_>) -> u64 {
    live_len(job.tube.as_str().len(), job.body.len())
}

impl Binlog {
    /// Appends `job`'s full record to the current file, which now holds its
    /// latest full record. Returns the record's length. A body the log
    /// holds already is read back from `was`, the job as last logged
    /// (`body.rs`); where the new record put it is then
    /// [`Journal::body_place`]'s answer.
    fn append_full(&mut self, job: &LoggedJob<'_>, was: &LoggedJob<'_>) -> io::Result<u64> {
        self.last_full_at = None;
        self.ready_body(was, job)?;
        self.scratch.clear();
        // A record is as big as its job's body: memory that cannot be had
        // fails this write (and the command that asked for it), nothing more.
        let len = full_len(job) as usize;
        self.scratch.try_reserve(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let body = match job.body {
            LoggedBody::Bytes(bytes) => bytes,
            LoggedBody::InLog(_) => &self.moving,
        };
        record::encode_full_tagged(
            &mut self.scratch,
            &job_state(job.id, job, &self.clock),
            job.ttr,
            self.clock.to_unix(job.created),
            job.tube.as_str().as_bytes(),
            body,
            &full_tags(job),
        );
        self.moving_for = None;
        if self.moving.capacity() > 1 << 20 {
            self.moving = Vec::new();
        }
        let at =
            self.files.get(&self.current).map(|info| (info.used, job.body.len())).filter(|_| !self.gathering);
        // Room in compaction's work list first: the record must not be
        // written unless the log can account for it.
        let listed =
            self.files.get_mut(&self.current).is_some_and(|info| info.written.try_reserve(1).is_ok());
        if !listed {
            return Err(self.out_of_memory());
        }
        let len = self.append()?;
        self.last_full_at = at;
        self.next_id = self.next_id.max(job.id.saturating_add(1));
        if let Some(info) = self.files.get_mut(&self.current) {
            info.live += 1;
            info.written.push(job.id);
        }
        Ok(len)
    }

    /// `job`'s latest full record was in `job.file`, and is now in the
    /// current file: that file has one live job fewer, and the current file
    /// supersedes something in it.
    fn leave_file(&mut self, job: &LoggedJob<'_>) {
        if job.file == 0 {
            return;
        }
        self.forget_written(job.file, job.id);
        self.refer_to(job.file);
        self.forget_in(job.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::TubeName;
    use crate::stats::Counters;
    use crate::time::Time;

    fn job<'a>(tube: &'a TubeName, state: State) -> LoggedJob<'a> {
        LoggedJob {
            id: 1,
            tube,
            pri: 0,
            delay: 0,
            ttr: 60,
            state,
            created: Time::ZERO,
            when: Time::ZERO,
            counters: Counters::default(),
            body: LoggedBody::Bytes(b"body"),
            file: 1,
            key: None,
            limit: None,
            con: None,
            groups: (None, None),
            run: None,
            dead_letter: false,
        }
    }

    /// The log, not the command, chooses the record: only a new job, or a
    /// field that only a full record holds, takes a full one.
    #[test]
    fn a_change_takes_the_record_its_fields_need() {
        let (a, b) = (TubeName::new(b"a").unwrap(), TubeName::new(b"b").unwrap());
        let kind_of = |was: Option<LoggedJob<'_>>, now: Option<LoggedJob<'_>>| kind(&Change { was, now });
        assert_eq!(kind_of(None, Some(job(&a, State::Ready))), Kind::Full, "put");
        assert_eq!(kind_of(Some(job(&a, State::Ready)), None), Kind::Delete);
        let buried = Some(job(&a, State::Buried));
        assert_eq!(kind_of(Some(job(&a, State::Reserved)), buried), Kind::Update, "bury");
        assert_eq!(kind_of(Some(job(&a, State::Ready)), Some(job(&b, State::Ready))), Kind::Full, "move-job");
        let longer = LoggedJob { ttr: 61, ..job(&a, State::Ready) };
        assert_eq!(kind_of(Some(job(&a, State::Ready)), Some(longer)), Kind::Full, "a TTR changed");
    }
}
