//! Which log files are on disk, what each holds, and when one may go (see
//! the module documentation of [`super`] for the rule): a file is deleted
//! once it holds no live job's latest full record and none of the older
//! files it refers to remains. Each file counts the older files it waits
//! on, so a change costs O(1) bookkeeping however many files there are.

use std::io;
use std::path::Path;

use super::{replay, Binlog, JobId};

/// The log's files by number, oldest first: a `BTreeMap<u32, FileInfo>` in
/// all but one thing, that room for a new file is claimed before it is made
/// ([`Files::try_make_room`]), so starting a file allocates nothing that
/// could abort. A log has tens of files, at most thousands: a sorted list
/// searched by halves.
#[derive(Debug, Default)]
pub(super) struct Files(Vec<(u32, FileInfo)>);

impl Files {
    fn find(&self, n: u32) -> Result<usize, usize> {
        self.0.binary_search_by_key(&n, |&(k, _)| k)
    }

    pub fn get(&self, n: &u32) -> Option<&FileInfo> {
        self.find(*n).ok().map(|at| &self.0[at].1)
    }

    pub fn get_mut(&mut self, n: &u32) -> Option<&mut FileInfo> {
        self.find(*n).ok().map(|at| &mut self.0[at].1)
    }

    pub fn contains_key(&self, n: &u32) -> bool {
        self.find(*n).is_ok()
    }

    /// False if room for one more file cannot be had.
    pub fn try_make_room(&mut self) -> bool {
        self.0.try_reserve(1).is_ok()
    }

    /// Adds file `n` (within the room claimed, for a new file).
    pub fn insert(&mut self, n: u32, info: FileInfo) {
        match self.find(n) {
            Ok(at) => self.0[at].1 = info,
            Err(at) => self.0.insert(at, (n, info)),
        }
    }

    pub fn remove(&mut self, n: &u32) -> Option<FileInfo> {
        self.find(*n).ok().map(|at| self.0.remove(at).1)
    }

    pub fn first_key_value(&self) -> Option<(&u32, &FileInfo)> {
        self.0.first().map(|(n, info)| (n, info))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&u32, &FileInfo)> {
        self.0.iter().map(|(n, info)| (n, info))
    }

    pub fn keys(&self) -> impl Iterator<Item = &u32> {
        self.0.iter().map(|(n, _)| n)
    }

    pub fn values(&self) -> impl Iterator<Item = &FileInfo> {
        self.0.iter().map(|(_, info)| info)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// The files replay found, with the references between them: each file's
/// `refers_to` as replay read it, and the counts and back links made from
/// those. Live jobs are counted in by the caller.
pub(super) fn replayed(dir: &Path, replayed: &replay::Replayed) -> Files {
    let mut files = Files::default();
    for &n in &replayed.files {
        let used = std::fs::metadata(super::dir::our_path(dir, n)).map(|m| m.len()).unwrap_or(0);
        let refers_to =
            replayed.refers_to.get(&n).map(|set| set.iter().copied().collect()).unwrap_or_default();
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
    pub refers_to: Vec<u32>,
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
    /// The current file now supersedes something in `file`. If the
    /// memory to note it cannot be had, the log fails, as for a failed
    /// write: a file deleted without that note could let a restart replay
    /// what the current file superseded.
    pub(super) fn refer_to(&mut self, file: u32) {
        if file == 0 || file == self.current || !self.files.contains_key(&file) {
            return;
        }
        let current = self.current;
        let Some(info) = self.files.get_mut(&current) else { return };
        if info.refers_to.contains(&file) {
            return;
        }
        let room = info.refers_to.try_reserve(1).is_ok()
            && self.files.get_mut(&file).is_some_and(|older| older.referred_by.try_reserve(1).is_ok());
        if !room {
            self.out_of_memory();
            return;
        }
        if let Some(info) = self.files.get_mut(&current) {
            info.refers_to.push(file);
            info.waiting_on += 1;
        }
        if let Some(older) = self.files.get_mut(&file) {
            older.referred_by.push(current);
        }
    }

    /// The log cannot have the memory its books need: like a failed write,
    /// it refuses every later change rather than lose one.
    pub(super) fn out_of_memory(&mut self) -> io::Error {
        if !self.failed {
            crate::log::problem(format_args!("binlog: out of memory, refusing further changes"));
        }
        self.failed = true;
        self.durability.halt_removals();
        io::Error::from(io::ErrorKind::OutOfMemory)
    }

    pub(super) fn forget_in(&mut self, file: u32) {
        let Some(info) = self.files.get_mut(&file) else { return };
        info.live = info.live.saturating_sub(1);
        if info.live == 0 {
            self.collect_unneeded(&[file]);
        }
    }

    /// Whether file `n` may be deleted now (see the module docs).
    fn is_unneeded(&self, n: u32) -> bool {
        let Some(info) = self.files.get(&n) else { return false };
        let oldest = self.files.keys().next() == Some(&n);
        n != self.current && info.live == 0 && info.waiting_on == 0 && (!info.corrupt || oldest)
    }

    /// Lets go of those of `candidates` that nothing needs any more, and
    /// of the files that this in turn frees: the files that referred to one
    /// let go, and a corrupt file that becomes the oldest. Each leaves the
    /// books now, and is queued to be removed from the disk (kept aside as
    /// `.corrupt`, if corrupt) once the records that made it unneeded
    /// (deletes, rewritten full records) are synced: by the durability
    /// thread or the connection, outside the engine's lock, in this order
    /// (`sync.rs`), so no command waits for an fsync or an unlink here.
    pub(super) fn collect_unneeded(&mut self, candidates: &[u32]) {
        if self.gathering {
            // A change of many jobs is not written yet: nothing it makes
            // unneeded may go before it is (`batch.rs` collects after).
            for &n in candidates {
                push_within_room(&mut self.collect_after, n);
            }
            return;
        }
        // The work list's room was claimed with the files (`start_file`);
        // a file it has no room for stays, to be collected another time.
        let mut work = std::mem::take(&mut self.unneeded);
        work.clear();
        for &n in candidates {
            push_within_room(&mut work, n);
        }
        while let Some(n) = work.pop() {
            if !self.is_unneeded(n) {
                continue;
            }
            let corrupt = self.files.get(&n).is_some_and(|info| info.corrupt);
            if !self.durability.queue_removal(n, corrupt) {
                break;
            }
            let Some(info) = self.files.remove(&n) else { continue };
            self.disk_bytes = self.disk_bytes.saturating_sub(info.used);
            for newer in info.referred_by {
                if let Some(f) = self.files.get_mut(&newer) {
                    f.waiting_on = f.waiting_on.saturating_sub(1);
                    if f.waiting_on == 0 {
                        push_within_room(&mut work, newer);
                    }
                }
            }
            if let Some((&oldest, info)) = self.files.first_key_value() {
                if info.corrupt {
                    push_within_room(&mut work, oldest);
                }
            }
        }
        self.unneeded = work;
    }
}

/// Adds `n` to `work` if there is room: never allocates.
fn push_within_room(work: &mut Vec<u32>, n: u32) {
    if work.len() < work.capacity() {
        work.push(n);
    }
}
