//! Compaction: keeping the log in proportion to its live data (see the
//! module documentation of [`super`] for the rule). It decides *whether*
//! to rewrite and *which* job next; the engine does the rewriting, through
//! the `Journal` trait, a few jobs after each command.
//!
//! A simpler log would never compact, and grow without bound while one old
//! job pins its first file; or would stop the world to copy the live jobs.
//! We spend a budget earned by what clients write instead, so compaction's
//! cost stays a fixed share of the clients' own writing.

use super::{record, Binlog, JobId, UPDATE_LEN};

/// Compaction may rewrite this many bytes for each byte clients write.
const REWRITE_PER_CLIENT_BYTE: i64 = 2;

/// Files beyond what the bytes on disk explain that are tolerated before
/// compaction empties the oldest: many small files, each pinned by an update
/// of a long-lived job, are wasteful too.
const SPARE_FILES: u64 = 16;

impl Binlog {
    /// A client's command wrote `len` bytes: compaction may rewrite twice
    /// as much. The credit is capped, so that a burst of rewriting after a
    /// quiet spell stays short.
    pub(super) fn earn_rewrites(&mut self, len: u64) {
        let cap = self.file_size.min(1 << 20) as i64;
        self.rewrite_credit = (self.rewrite_credit + REWRITE_PER_CLIENT_BYTE * len as i64).min(cap);
    }

    /// Whether the log holds more than compaction lets it: twice the live
    /// data plus one file, or many more files than its bytes explain.
    pub(super) fn over_budget(&self) -> bool {
        self.disk_bytes > 2 * self.live_bytes + self.file_size
            || self.files.len() as u64 > SPARE_FILES + 2 * self.disk_bytes / self.file_size
    }

    /// The next job compaction should rewrite: the newest job written into
    /// the oldest file that still holds any, while the log is over budget
    /// and the budget allows.
    pub(super) fn next_to_rewrite(&mut self) -> Option<(u32, JobId)> {
        if self.failed || self.rewrite_credit <= 0 || !self.over_budget() {
            return None;
        }
        let (&file, info) =
            self.files.iter().find(|(&n, info)| n != self.current && !info.written.is_empty())?;
        Some((file, *info.written.last()?))
    }

    pub(super) fn last_written_in(&self, file: u32) -> Option<JobId> {
        self.files.get(&file).filter(|_| file != self.current)?.written.last().copied()
    }

    pub(super) fn forget_written_in(&mut self, file: u32, id: JobId) {
        if let Some(info) = self.files.get_mut(&file) {
            if info.written.last() == Some(&id) {
                info.written.pop();
            }
        }
    }
}

/// What a live job's latest records take in the log, for the compaction
/// budget: its full record and one update.
pub(super) fn live_len(tube_len: usize, body_len: usize) -> u64 {
    (record::full_len(tube_len, body_len) + UPDATE_LEN) as u64
}
