//! The files the log no longer needs, removed once the records that let
//! them go are synced: queued under the engine's lock (never waiting for
//! the disk), removed oldest first by one thread at a time, outside it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::Durability;
use crate::config::Fsync;

/// A file to remove once the first `seq` records are synced.
#[derive(Debug, Clone, Copy)]
pub(super) struct Removal {
    file: u32,
    /// Kept aside as `beanstalk.N.corrupt`, not removed.
    corrupt: bool,
    seq: u64,
}

impl Durability {
    /// Notes that file `file` may be removed (or kept aside, if `corrupt`)
    /// once every record written so far is synced. Never allocates (room
    /// claimed by [`Durability::claim_file_room`]); false if there is no
    /// room, and the log then keeps the file in its books.
    pub(in crate::binlog) fn queue_removal(&self, file: u32, corrupt: bool) -> bool {
        let mut removals = self.removals();
        if removals.len() == removals.capacity() {
            return false;
        }
        removals.push_back(Removal { file, corrupt, seq: self.written() });
        true
    }

    /// Removes the files queued whose records are synced, oldest first,
    /// stopping at the first that cannot be: a later file must never go
    /// before an earlier one. Then syncs the directory. Called outside the
    /// engine's lock, after a write's reply is settled and after each of
    /// the syncer's fsyncs.
    pub fn remove_unneeded(&self) {
        let Some(dir) = self.dir.get().filter(|_| !self.removals().is_empty()) else { return };
        let _one_at_a_time = self.removing.lock().unwrap_or_else(|e| e.into_inner());
        // After a failed fsync or write, what made a file unneeded may not
        // be on disk: the file stays, for a restart to replay.
        if self.removals_halted.load(Ordering::SeqCst) || (self.mode != Fsync::Never && self.failed()) {
            return;
        }
        let synced = if self.mode == Fsync::Never { u64::MAX } else { self.lock().synced };
        let mut removed = false;
        // The front stays the front while its I/O runs unlocked: only this
        // thread takes from the queue, and others add at its back.
        let front = || self.removals().front().copied().filter(|next| next.seq <= synced);
        while let Some(next) = front() {
            let Some(path) = super::super::dir::try_our_path(dir, next.file) else { break };
            let result = if next.corrupt {
                std::fs::rename(&path, path.with_extension(format!("{}.corrupt", next.file)))
            } else {
                super::super::faults::io_point().and_then(|()| std::fs::remove_file(&path))
            };
            if let Err(e) = result {
                // Kept, and every later one with it, for the next try.
                crate::log::problem(format_args!("binlog: cannot remove {}: {e}", path.display()));
                break;
            }
            self.removals().pop_front();
            removed = true;
        }
        if removed && self.mode != Fsync::Never {
            let _ = super::super::sync_dir(dir);
        }
    }

    /// Files queued for removal and not yet removed.
    pub(in crate::binlog) fn removals_pending(&self) -> usize {
        self.removals().len()
    }

    /// The log has failed: no file is removed any more.
    pub(in crate::binlog) fn halt_removals(&self) {
        self.removals_halted.store(true, Ordering::SeqCst);
    }

    pub(super) fn removals(&self) -> MutexGuard<'_, VecDeque<Removal>> {
        self.removals.lock().unwrap_or_else(|e| e.into_inner())
    }
}
