//! Which log files are on disk, what each holds, and when one may go (see
//! the module documentation of [`super`] for the rule): a file is deleted
//! once it holds no live job's latest full record and none of the older
//! files it refers to remains. Each file counts the older files it waits
//! on, so a change costs O(1) bookkeeping however many files there are.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{replay, sync_dir, Binlog, Fsync, JobId};

/// The files replay found, with the references between them: each file's
/// `refers_to` as replay read it, and the counts and back links made from
/// those. Live jobs are counted in by the caller.
pub(super) fn replayed(dir: &Path, replayed: &replay::Replayed) -> BTreeMap<u32, FileInfo> {
    let mut files: BTreeMap<u32, FileInfo> = BTreeMap::new();
    for &n in &replayed.files {
        let used = std::fs::metadata(replay::file_path(dir, n)).map(|m| m.len()).unwrap_or(0);
        let refers_to = replayed.refers_to.get(&n).cloned().unwrap_or_default();
        files.insert(
            n,
            FileInfo { used, corrupt: replayed.corrupt.contains(&n), refers_to, ..FileInfo::default() },
        );
    }
    let links: Vec<(u32, u32)> =
        files.iter().flat_map(|(&f, info)| info.refers_to.iter().map(move |&g| (f, g))).collect();
    for (f, g) in links {
        if let Some(older) = files.get_mut(&g) {
            older.referred_by.push(f);
            if let Some(info) = files.get_mut(&f) {
                info.waiting_on += 1;
            }
        }
    }
    files
}

/// One log file still on disk.
#[derive(Debug, Default)]
pub(super) struct FileInfo {
    /// Live jobs whose latest full record is in this file.
    pub live: usize,
    /// Bytes used.
    pub used: u64,
    /// Replay found unreadable records in it: renamed, not deleted, and
    /// only once it is the oldest file (its unreadable records may refer to
    /// anything older).
    pub corrupt: bool,
    /// Older files this file's records supersede something in.
    pub refers_to: BTreeSet<u32>,
    /// How many files of `refers_to` are still on disk: it may go only at 0.
    pub waiting_on: usize,
    /// Newer files whose `refers_to` names this one.
    pub referred_by: Vec<u32>,
    /// Jobs whose full record was written here, oldest first: compaction's
    /// work list for this file. Some have since been deleted or rewritten
    /// elsewhere; an entry is checked against the job when compaction
    /// reaches it. (Taking it out at every delete would mean a search; left
    /// in, it costs 8 bytes until then.)
    pub written: Vec<JobId>,
}

impl Binlog {
    /// The current file now supersedes something in `file`.
    pub(super) fn refer_to(&mut self, file: u32) {
        if file == 0 || file == self.current || !self.files.contains_key(&file) {
            return;
        }
        let Some(info) = self.files.get_mut(&self.current) else { return };
        if info.refers_to.insert(file) {
            info.waiting_on += 1;
            if let Some(older) = self.files.get_mut(&file) {
                older.referred_by.push(self.current);
            }
        }
    }

    /// One live job fewer has its latest full record in `file`.
    pub(super) fn forget_in(&mut self, file: u32) {
        let Some(info) = self.files.get_mut(&file) else { return };
        info.live = info.live.saturating_sub(1);
        if info.live == 0 {
            self.collect_unneeded(vec![file]);
        }
    }

    /// Whether file `n` may be deleted now (see the module docs).
    fn is_unneeded(&self, n: u32) -> bool {
        let Some(info) = self.files.get(&n) else { return false };
        let oldest = self.files.keys().next() == Some(&n);
        n != self.current && info.live == 0 && info.waiting_on == 0 && (!info.corrupt || oldest)
    }

    /// Deletes those of `candidates` that nothing needs any more, and the
    /// files that this in turn frees: the files that referred to one
    /// deleted, and a corrupt file that becomes the oldest.
    ///
    /// A file may only go once the records that made it unneeded (deletes,
    /// rewritten full records, in the current file) are on disk: so unless
    /// the user chose `-F`, the current file is fsynced before the first
    /// unlink and the directory after the last.
    pub(super) fn collect_unneeded(&mut self, candidates: Vec<u32>) {
        let syncing = self.durability.mode() != Fsync::Never;
        let mut synced = false;
        let mut work = candidates;
        while let Some(n) = work.pop() {
            if !self.is_unneeded(n) {
                continue;
            }
            if syncing && !synced {
                if let Err(e) = self.writer.sync_data() {
                    crate::log::problem(format_args!("binlog: fsync failed, refusing further changes: {e}"));
                    self.failed = true;
                    return;
                }
                synced = true;
            }
            let path = replay::file_path(&self.dir, n);
            let corrupt = self.files.get(&n).is_some_and(|info| info.corrupt);
            let result = if corrupt {
                std::fs::rename(&path, path.with_extension(format!("{n}.corrupt")))
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = result {
                // Keep it in the chain: dropping it from our books while it
                // stays on disk would let a restart replay stale records.
                crate::log::problem(format_args!("binlog: cannot remove {}: {e}", path.display()));
                break;
            }
            let Some(info) = self.files.remove(&n) else { continue };
            self.disk_bytes = self.disk_bytes.saturating_sub(info.used);
            for newer in info.referred_by {
                if let Some(f) = self.files.get_mut(&newer) {
                    f.waiting_on = f.waiting_on.saturating_sub(1);
                    if f.waiting_on == 0 {
                        work.push(newer);
                    }
                }
            }
            if let Some((&oldest, info)) = self.files.first_key_value() {
                if info.corrupt {
                    work.push(oldest);
                }
            }
        }
        if synced {
            let _ = sync_dir(&self.dir);
        }
    }
}
