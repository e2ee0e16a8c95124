//! Persistence (`-b DIR`): a write-ahead log of every job change that must
//! survive a restart, replayed at start-up.
//!
//! Layout on disk (see [`record`] for the bytes):
//!
//! - `DIR/lock`: held with an exclusive lock while the server runs, so two
//!   servers never share a directory.
//! - `DIR/binlog.N`: the log, N counting up from 1. Every start begins a new
//!   file after the highest existing one. A file is preallocated to `-s`
//!   bytes (rounded up to 4096) when it is created, so running out of disk
//!   shows up as a refused command, never as a failed write in the middle of
//!   one; it is cut to its used length when the next file starts.
//! - `DIR/binlog.N.corrupt`: a file in which replay found unreadable
//!   records, kept for inspection after its readable jobs were rewritten.
//!
//! What is logged: a full record (tube, parameters, body) when a job is put
//! or rewritten; an update record when it is buried, released, kicked or
//! taken by `reserve-job` from buried or delayed; a delete record when it is
//! deleted. A reserved job is logged as ready, which is what it becomes
//! after a restart. Every file opens with the next id to hand out, so ids
//! never go backwards, even after every old file is gone.
//!
//! Disk space is claimed before a change is made ([`Journal::reserve_put`]
//! and friends): a put claims room for its full record *and* its eventual
//! delete, so a delete can always be logged, even on a full disk. When the
//! current file cannot take a claim, the next file is created; if that
//! fails, the command is refused with `OUT_OF_MEMORY` and nothing changes.
//!
//! A file is deleted as soon as it holds no live job's latest full record
//! and none of the older files it *refers to* remains. A file refers to file
//! G when it holds a record that supersedes something in G: a delete or an
//! update of a job whose latest full record is in G, or a job's full record
//! rewritten out of G. Deleting such a file while G stayed would let replay
//! resurrect, or roll back, that job. In the common case this deletes files
//! oldest first; it also lets a few long-lived jobs in an old file not pin
//! every file after it. When the log grows to more than twice its live data
//! plus one file, the engine rewrites the live jobs of the oldest files into
//! the current one (compaction), and they go.

pub mod record;
pub mod replay;
pub mod sync;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Fsync;
use crate::engine::{Job, JobId, Journal, RestoredJob, State};
use crate::protocol::TubeName;
use crate::stats::BinlogStats;
use record::{JobState, LoggedState, DELETE_LEN, HEADER_LEN, UPDATE_LEN};
use sync::Durability;

/// Preallocation granularity, as beanstalkd rounds `-s`.
const BLOCK: u64 = 4096;

/// Why the binlog could not be opened; each has its own exit status.
#[derive(Debug)]
pub enum BinlogError {
    /// The directory cannot be locked (missing, unwritable, or in use by
    /// another server): exit 10.
    Lock(String),
    /// Replay or creating the first file failed: exit 1.
    Open(String),
}

impl BinlogError {
    /// beanstalkd's exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            BinlogError::Lock(_) => 10,
            BinlogError::Open(_) => 1,
        }
    }
}

impl fmt::Display for BinlogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BinlogError::Lock(m) | BinlogError::Open(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BinlogError {}

/// What [`Binlog::open`] hands back besides the log itself.
#[derive(Debug)]
pub struct Recovered {
    /// The tube names the jobs refer to by index.
    pub tubes: Vec<TubeName>,
    pub jobs: Vec<RestoredJob>,
    pub next_id: JobId,
    /// Files whose live jobs must be rewritten at once (see
    /// [`crate::engine::Engine::rewrite_files`]).
    pub corrupt: Vec<u32>,
    pub warnings: Vec<String>,
}

/// One binlog file still on disk.
#[derive(Debug, Default)]
struct FileInfo {
    /// Live jobs whose latest full record is in this file.
    live: usize,
    /// Bytes used.
    used: u64,
    /// Replay found unreadable records in it: renamed, not deleted, and
    /// only once it is the oldest file (its unreadable records may refer to
    /// anything older).
    corrupt: bool,
    /// Older files this file's records supersede something in.
    refers_to: BTreeSet<u32>,
}

/// The write-ahead log. The engine owns it (as a [`Journal`]) and calls it
/// under its lock.
pub struct Binlog {
    dir: PathBuf,
    /// Held for the life of the process; its lock is the directory lock.
    _lock: File,
    /// Nominal size of a new file (`-s`, rounded up to 4096).
    file_size: u64,
    files: BTreeMap<u32, FileInfo>,
    current: u32,
    writer: Arc<File>,
    /// Preallocated bytes left in the current file.
    free: u64,
    /// Bytes of `free` set aside for the deletes of live jobs.
    claimed: u64,
    /// `records_written` when [`Journal::files_to_free`] last answered.
    freed_at: Option<u64>,
    /// Full-record bytes of live jobs, for the compaction ratio.
    live_bytes: u64,
    /// No compaction is considered before this many bytes are written.
    compaction_after: u64,
    bytes_written: u64,
    next_id: JobId,
    records_written: u64,
    records_migrated: u64,
    max_size_shown: u64,
    /// A write failed: refuse further work rather than lose it silently.
    failed: bool,
    durability: Arc<Durability>,
    scratch: Vec<u8>,
}

impl fmt::Debug for Binlog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Binlog").field("dir", &self.dir).field("current", &self.current).finish()
    }
}

impl Binlog {
    /// Locks `dir`, replays it, and starts a new file.
    pub fn open(dir: &Path, file_size: u32, fsync: Fsync) -> Result<(Binlog, Recovered), BinlogError> {
        let lock = lock_dir(dir)?;
        let open_error = |e: io::Error| BinlogError::Open(format!("binlog {}: {e}", dir.display()));
        let replayed = replay::replay(dir).map_err(open_error)?;
        let mut files = BTreeMap::new();
        for &n in &replayed.files {
            let used = std::fs::metadata(replay::file_path(dir, n)).map(|m| m.len()).unwrap_or(0);
            let refers_to = replayed.refers_to.get(&n).cloned().unwrap_or_default();
            files.insert(
                n,
                FileInfo { used, corrupt: replayed.corrupt.contains(&n), refers_to, ..FileInfo::default() },
            );
        }
        let mut live_bytes = 0;
        for job in &replayed.jobs {
            if let Some(info) = files.get_mut(&job.file) {
                info.live += 1;
            }
            live_bytes += record::full_len(0, job.body.len()) as u64;
        }
        let max_size_shown = u64::from(file_size);
        let file_size = u64::from(file_size).div_ceil(BLOCK) * BLOCK;
        let durability = Arc::new(Durability::new(fsync));
        let current = replayed.files.last().map_or(1, |&n| n + 1);
        let claimed = (replayed.jobs.len() * DELETE_LEN) as u64;
        let mut binlog = Binlog {
            dir: dir.to_path_buf(),
            _lock: lock,
            file_size,
            files,
            current,
            // Replaced by the first real file just below.
            writer: Arc::new(File::open("/dev/null").map_err(open_error)?),
            free: 0,
            claimed,
            freed_at: None,
            live_bytes,
            compaction_after: file_size,
            bytes_written: 0,
            next_id: replayed.next_id,
            records_written: 0,
            records_migrated: 0,
            max_size_shown,
            failed: false,
            durability,
            scratch: Vec::new(),
        };
        if let Err(e) = binlog.start_file(current, 0) {
            // On a full disk, a file just big enough for the deletes the live
            // jobs may need still lets them be served and deleted.
            binlog.file_size = BLOCK;
            binlog.start_file(current, 0).map_err(|_| open_error(e))?;
            binlog.file_size = file_size;
        }
        binlog.delete_unneeded_files();
        let recovered = Recovered {
            tubes: replayed.tubes,
            jobs: replayed.jobs,
            next_id: replayed.next_id,
            corrupt: replayed.corrupt,
            warnings: replayed.warnings,
        };
        Ok((binlog, recovered))
    }

    /// The durability handle connection threads use after their writes.
    pub fn durability(&self) -> Arc<Durability> {
        Arc::clone(&self.durability)
    }

    /// Creates file `n`, big enough for the claimed deletes plus `need`,
    /// writes its header and the next id, and makes it current. On failure
    /// nothing has changed: a half-made file is removed again.
    fn start_file(&mut self, n: u32, need: u64) -> io::Result<()> {
        let syncing = self.durability.mode() != Fsync::Never;
        let leaving = self.files.get(&self.current).map(|old| old.used);
        if leaving.is_some() && syncing {
            // Everything in the file we leave is made durable first.
            self.writer.sync_data()?;
        }
        let opening = HEADER_LEN as u64 + DELETE_LEN as u64;
        let size = self.file_size.max((self.claimed + need + opening).div_ceil(BLOCK) * BLOCK);
        let path = replay::file_path(&self.dir, n);
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        let mut opening_bytes = record::header().to_vec();
        record::encode_next_id(&mut opening_bytes, self.next_id);
        let made = crate::sys::preallocate(&file, size)
            .and_then(|()| file.write_all_at(&opening_bytes, 0))
            .and_then(
                |()| if syncing { file.sync_data().and_then(|()| sync_dir(&self.dir)) } else { Ok(()) },
            );
        if let Err(e) = made {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        if let Some(used) = leaving {
            // Give back the preallocated space the old file did not use.
            let _ = self.writer.set_len(used);
        }
        self.writer = Arc::new(file);
        self.durability.set_file(Arc::clone(&self.writer));
        self.files.insert(n, FileInfo { used: opening_bytes.len() as u64, ..FileInfo::default() });
        self.current = n;
        self.free = size - opening_bytes.len() as u64;
        Ok(())
    }

    /// Makes sure `need` unclaimed bytes are free in the current file,
    /// starting a new file if necessary.
    fn make_room(&mut self, need: u64) -> bool {
        if self.failed || self.durability.failed() {
            return false;
        }
        if self.free.saturating_sub(self.claimed) >= need {
            return true;
        }
        match self.start_file(self.current + 1, need) {
            Ok(()) => {
                self.delete_unneeded_files();
                true
            }
            Err(e) => {
                eprintln!("beanstalk: binlog: cannot start a new file: {e}");
                false
            }
        }
    }

    /// Appends the encoded record in `scratch` to the current file.
    fn append(&mut self) -> io::Result<()> {
        let len = self.scratch.len() as u64;
        let info = self.files.entry(self.current).or_default();
        let at = info.used;
        let written = self.writer.write_all_at(&self.scratch, at);
        if self.scratch.capacity() > 1 << 20 {
            // Do not keep a huge body's worth of buffer for the process's life.
            self.scratch = Vec::new();
        }
        if let Err(e) = written {
            self.failed = true;
            eprintln!("beanstalk: binlog: write failed, refusing further changes: {e}");
            return Err(e);
        }
        info.used += len;
        self.free = self.free.saturating_sub(len);
        self.bytes_written += len;
        self.records_written += 1;
        self.durability.wrote_one();
        Ok(())
    }

    /// The current file now supersedes something in `file`.
    fn refer_to(&mut self, file: u32) {
        if file != 0 && file != self.current {
            if let Some(info) = self.files.get_mut(&self.current) {
                info.refers_to.insert(file);
            }
        }
    }

    /// One live job fewer has its latest full record in `file`.
    fn forget_in(&mut self, file: u32) {
        if let Some(info) = self.files.get_mut(&file) {
            info.live = info.live.saturating_sub(1);
        }
        self.delete_unneeded_files();
    }

    /// Whether file `n` may be deleted now (see the module docs).
    fn is_unneeded(&self, n: u32, info: &FileInfo) -> bool {
        let oldest = self.files.keys().next() == Some(&n);
        n != self.current
            && info.live == 0
            && (!info.corrupt || oldest)
            && info.refers_to.iter().all(|g| !self.files.contains_key(g))
    }

    /// Deletes every file no live job and no remaining record needs.
    ///
    /// A file may only go once the records that made it unneeded (deletes,
    /// rewritten full records, in the current file) are on disk: so unless
    /// the user chose `-F`, the current file is fsynced before the first
    /// unlink and the directory after the last.
    fn delete_unneeded_files(&mut self) {
        let syncing = self.durability.mode() != Fsync::Never;
        let mut synced = false;
        loop {
            let unneeded = self.files.iter().find(|(&n, info)| self.is_unneeded(n, info));
            let Some((n, corrupt)) = unneeded.map(|(&n, info)| (n, info.corrupt)) else { break };
            if syncing && !synced {
                if let Err(e) = self.writer.sync_data() {
                    eprintln!("beanstalk: binlog: fsync failed, refusing further changes: {e}");
                    self.failed = true;
                    return;
                }
                synced = true;
            }
            let path = replay::file_path(&self.dir, n);
            let result = if corrupt {
                std::fs::rename(&path, path.with_extension(format!("{n}.corrupt")))
            } else {
                std::fs::remove_file(&path)
            };
            if let Err(e) = result {
                // Keep it in the chain: dropping it from our books while it
                // stays on disk would let a restart replay stale records.
                eprintln!("beanstalk: binlog: cannot remove {}: {e}", path.display());
                break;
            }
            self.files.remove(&n);
        }
        if synced {
            let _ = sync_dir(&self.dir);
        }
    }
}

/// Makes a directory's entries (files created, removed) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Takes `DIR/lock`, creating it with mode 0600.
fn lock_dir(dir: &Path) -> Result<File, BinlogError> {
    let path = dir.join("lock");
    let lock = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| BinlogError::Lock(format!("cannot open {}: {e}", path.display())))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(BinlogError::Lock(format!(
            "failed to lock wal dir {}: another server is using it",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(BinlogError::Lock(format!("failed to lock wal dir {}: {e}", dir.display())))
        }
    }
}

/// The logged view of a job's changing fields.
fn job_state(job: &Job) -> JobState {
    let (state, deadline) = match job.state {
        State::Delayed => (LoggedState::Delayed, job.deadline.0),
        State::Buried => (LoggedState::Buried, 0),
        // Reserved comes back ready after a restart.
        State::Ready | State::Reserved => (LoggedState::Ready, 0),
    };
    JobState { id: job.id, pri: job.pri, delay: job.delay, state, deadline, counters: job.counters }
}

impl Journal for Binlog {
    fn reserve_put(&mut self, tube_len: usize, body_len: usize) -> bool {
        let full = record::full_len(tube_len, body_len) as u64;
        if !self.make_room(full + DELETE_LEN as u64) {
            return false;
        }
        self.claimed += DELETE_LEN as u64;
        true
    }

    fn reserve_update(&mut self) -> bool {
        self.make_room(UPDATE_LEN as u64)
    }

    fn reserve_rewrite(&mut self, tube_len: usize, body_len: usize) -> bool {
        self.make_room(record::full_len(tube_len, body_len) as u64)
    }

    fn write_full(&mut self, job: &Job, tube: &TubeName) -> io::Result<u32> {
        self.scratch.clear();
        record::encode_full(
            &mut self.scratch,
            &job_state(job),
            job.ttr,
            job.created.0,
            tube.as_str().as_bytes(),
            &job.body,
        );
        self.append()?;
        self.next_id = self.next_id.max(job.id.saturating_add(1));
        if job.file == 0 {
            self.live_bytes += record::full_len(0, job.body.len()) as u64;
        } else {
            self.records_migrated += 1;
            self.refer_to(job.file);
            self.forget_in(job.file);
        }
        if let Some(info) = self.files.get_mut(&self.current) {
            info.live += 1;
        }
        Ok(self.current)
    }

    fn write_update(&mut self, job: &Job) -> io::Result<()> {
        self.scratch.clear();
        record::encode_update(&mut self.scratch, &job_state(job));
        self.append()?;
        self.refer_to(job.file);
        Ok(())
    }

    fn write_delete(&mut self, job: &Job) -> io::Result<()> {
        self.scratch.clear();
        record::encode_delete(&mut self.scratch, job.id);
        // The put claimed this room.
        self.claimed = self.claimed.saturating_sub(DELETE_LEN as u64);
        let result = self.append();
        self.live_bytes = self.live_bytes.saturating_sub(record::full_len(0, job.body.len()) as u64);
        if result.is_ok() {
            self.refer_to(job.file);
        }
        self.forget_in(job.file);
        result
    }

    fn compaction_targets(&mut self) -> Vec<u32> {
        if self.bytes_written < self.compaction_after || self.files.len() < 2 {
            return Vec::new();
        }
        let limit = 2 * self.live_bytes + self.file_size;
        let mut on_disk: u64 = self.files.values().map(|f| f.used).sum();
        // The oldest files, as many as it takes to get back under the limit
        // (at most a few, to bound the work done under the engine lock).
        let mut targets = Vec::new();
        for (&n, info) in &self.files {
            if on_disk <= limit || n == self.current || targets.len() == 4 {
                break;
            }
            on_disk -= info.used;
            targets.push(n);
        }
        // Looked at again after half a file's worth of writes: the rewrites
        // themselves fill the current file, so a slower pace would let the
        // number of files creep up.
        self.compaction_after = self.bytes_written + self.file_size / 2;
        targets
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
