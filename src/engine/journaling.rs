//! The engine's side of the write-ahead log: claiming room before a change,
//! writing the change's record after it, and compaction, which rewrites the
//! oldest log file's live jobs a few at a time so that it can be deleted.
//! The log itself is behind the [`Journal`] trait.

use super::*;

impl Engine {
    /// The one way a logged change is made to job `id` (bury, release, kick,
    /// `reserve-job` of a buried or delayed job): claim room for its update
    /// record first, and if there is none refuse with `OUT_OF_MEMORY`,
    /// leaving the job exactly as it was; then `change` it, log its new
    /// state, and let compaction run. `Err` is the reply to send instead of
    /// the command's own.
    pub(super) fn journaled_change(
        &mut self,
        id: JobId,
        change: impl FnOnce(&mut Engine),
    ) -> Result<(), Reply<'static>> {
        if !self.has_room_for_update() {
            return Err(Reply::OutOfMemory);
        }
        change(self);
        if !self.journal_update(id) {
            return Err(Reply::InternalError);
        }
        self.compact();
        Ok(())
    }

    /// True when an update record can be written (always, without a log).
    pub(super) fn has_room_for_update(&mut self) -> bool {
        self.journal_has_room(|journal| journal.claim_update())
    }

    /// Makes a claim for log space with `claim`; if the disk is full, first
    /// empties the oldest log files by rewriting their live jobs (deletes may
    /// have left a few live jobs pinning many files), then tries once more.
    pub(super) fn journal_has_room(&mut self, mut claim: impl FnMut(&mut Box<dyn Journal>) -> bool) -> bool {
        let Some(journal) = self.journal.as_mut() else { return true };
        if claim(journal) {
            return true;
        }
        let files = journal.files_to_free();
        if files.is_empty() {
            return false;
        }
        self.rewrite_files(&files);
        self.journal.as_mut().is_some_and(claim)
    }

    /// Logs job `id`'s full record and remembers which file it is in.
    /// False if the write failed.
    pub(super) fn journal_full(&mut self, id: JobId) -> bool {
        let Some(journal) = self.journal.as_mut() else { return true };
        let Some(job) = journal::logged_job(&self.jobs, &self.tubes, id) else { return true };
        match journal.write_full(&job) {
            Ok(file) => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.file = file;
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Logs job `id`'s new state. False if the write failed.
    pub(super) fn journal_update(&mut self, id: JobId) -> bool {
        let Some(journal) = self.journal.as_mut() else { return true };
        journal::logged_job(&self.jobs, &self.tubes, id).is_none_or(|job| journal.write_update(&job).is_ok())
    }

    /// Keeps the log's size in proportion to its live data: rewrites the
    /// live jobs of the oldest log file into the current one, a few at a
    /// time, for as long as the log asks (see [`Journal::next_rewrite`]).
    /// Once a file holds no live job it is deleted.
    pub(super) fn compact(&mut self) {
        while let Some((file, id)) = self.journal.as_mut().and_then(|j| j.next_rewrite()) {
            if !self.rewrite_if_still_in(file, id) {
                return;
            }
        }
    }

    /// Rewrites the full record of every live job whose latest full record
    /// is in one of binlog files `files` into the current file, so that
    /// they can go (at start-up for files with unreadable records, and when
    /// the disk is full). Stops early if the disk is full.
    pub fn rewrite_files(&mut self, files: &[u32]) {
        for &file in files {
            while let Some(id) = self.journal.as_ref().and_then(|j| j.written_in(file)) {
                if !self.rewrite_if_still_in(file, id) {
                    return;
                }
            }
        }
    }

    /// Rewrites job `id` if its latest full record is still in `file`;
    /// otherwise tells the log that its note of it is stale. False if the
    /// log has no room or a write failed.
    pub(super) fn rewrite_if_still_in(&mut self, file: u32, id: JobId) -> bool {
        let Some(journal) = self.journal.as_mut() else { return false };
        let Some(job) = self.jobs.get(&id).filter(|job| job.file == file) else {
            journal.forget_written(file, id);
            return true;
        };
        let (tube_len, body_len) = (self.tubes.get(job.tube).name.as_str().len(), job.body.len());
        journal.claim_rewrite(tube_len, body_len) && self.journal_full(id)
    }
}
