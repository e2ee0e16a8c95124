//! The log's side of the [`Journal`] trait: claiming disk room before a
//! change, encoding each change as a record and appending it, and the
//! bookkeeping each record brings (live jobs per file, the references
//! between files, compaction's budget).

use std::io;

use super::compaction::live_len;
use super::record::{self, JobState, LoggedState, DELETE_LEN, UPDATE_LEN};
use super::Binlog;
use crate::engine::{JobId, Journal, LoggedJob, State};
use crate::stats::BinlogStats;
use crate::time::Clock;

/// The logged view of a job's changing fields; a delayed job's due time as
/// wall-clock time by `clock`.
fn job_state(id: JobId, job: &LoggedJob<'_>, clock: &Clock) -> JobState {
    let (state, deadline) = match job.state {
        State::Delayed => (LoggedState::Delayed, clock.to_unix(job.when)),
        // A buried job's time is when it was buried: it orders the
        // buried list after a restart. It is only ever compared, and the
        // engine keeps it increasing across restarts, so it is stored as
        // is: converting it would let a wall-clock step reorder it.
        State::Buried => (LoggedState::Buried, job.when.0),
        // Reserved comes back ready after a restart.
        State::Ready | State::Reserved => (LoggedState::Ready, 0),
    };
    JobState { id, pri: job.pri, delay: job.delay, state, deadline, counters: job.counters }
}

impl Journal for Binlog {
    fn claim_put(&mut self, tube_len: usize, body_len: usize) -> bool {
        let full = record::full_len(tube_len, body_len) as u64;
        if !self.make_room(full + DELETE_LEN as u64, self.compaction_reserve()) {
            return false;
        }
        self.claimed += DELETE_LEN as u64;
        true
    }

    fn claim_update(&mut self) -> bool {
        self.make_room(UPDATE_LEN as u64, 0)
    }

    fn claim_rewrite(&mut self, tube_len: usize, body_len: usize) -> bool {
        self.make_room(record::full_len(tube_len, body_len) as u64, self.compaction_reserve() / 2)
    }

    fn write_full(&mut self, job: &LoggedJob<'_>) -> io::Result<u32> {
        let (id, tube) = (job.id, job.tube);
        self.scratch.clear();
        // A record is as big as its job's body: memory that cannot be had
        // fails this write (and the command that asked for it), nothing more.
        let len = record::full_len(tube.as_str().len(), job.body.len());
        self.scratch.try_reserve(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        record::encode_full(
            &mut self.scratch,
            &job_state(id, job, &self.clock),
            job.ttr,
            self.clock.to_unix(job.created),
            tube.as_str().as_bytes(),
            job.body,
        );
        let len = self.append()?;
        self.next_id = self.next_id.max(id.saturating_add(1));
        if job.file == 0 {
            self.live_bytes += live_len(tube.as_str().len(), job.body.len());
            self.earn_rewrites(len);
        } else {
            self.records_migrated += 1;
            self.rewrite_credit -= len as i64;
            self.forget_written(job.file, id);
            self.refer_to(job.file);
            self.forget_in(job.file);
        }
        if let Some(info) = self.files.get_mut(&self.current) {
            info.live += 1;
            info.written.push(id);
        }
        Ok(self.current)
    }

    fn write_update(&mut self, job: &LoggedJob<'_>) -> io::Result<()> {
        let id = job.id;
        self.scratch.clear();
        record::encode_update(&mut self.scratch, &job_state(id, job, &self.clock));
        let len = self.append()?;
        self.earn_rewrites(len);
        self.refer_to(job.file);
        Ok(())
    }

    fn write_delete(&mut self, job: &LoggedJob<'_>) -> io::Result<()> {
        let (id, tube) = (job.id, job.tube);
        self.scratch.clear();
        record::encode_delete(&mut self.scratch, id);
        // The put claimed this room.
        self.claimed = self.claimed.saturating_sub(DELETE_LEN as u64);
        let result = self.append();
        self.live_bytes = self.live_bytes.saturating_sub(live_len(tube.as_str().len(), job.body.len()));
        if let Ok(len) = result {
            self.earn_rewrites(len);
            self.refer_to(job.file);
        }
        self.forget_in(job.file);
        result.map(drop)
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
        }
    }
}
