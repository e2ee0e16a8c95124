//! Persistence (`-b DIR`): a write-ahead log of every job change that must
//! survive a restart, replayed at start-up.
//!
//! Layout on disk (see [`record`] for the bytes):
//!
//! - `DIR/lock`: locked while the server runs, with both `flock` and
//!   beanstalkd's `fcntl` lock, so two servers never share a directory
//!   ([`dir`]).
//! - `DIR/beanstalk.N`: the log, N counting up from 1. Every start begins a
//!   new file after the highest existing one. A file is preallocated to `-s`
//!   bytes (rounded up to 4096), plus the room claimed for the deletes of
//!   the live jobs, when it is created, so running out of disk
//!   shows up as a refused command, never as a failed write in the middle of
//!   one; it is cut to its used length when the next file starts, or at the
//!   next start-up after a crash. beanstalkd's files are called
//!   `binlog.N`: ours are named so that neither server ever replays or
//!   deletes the other's.
//! - `DIR/beanstalk.N.corrupt`: a file in which replay found unreadable
//!   records, kept for inspection after its readable jobs were rewritten.
//! - `DIR/binlog.N`: beanstalkd's log. Its jobs are imported at start-up and
//!   the file is kept as `binlog.N.imported` (`import.rs`).
//!
//! What is logged: a full record (tube, parameters, body) when a job is put
//! or rewritten; an update record when it is buried, released, kicked or
//! taken by `reserve-job` from buried or delayed; a delete record when it is
//! deleted. A reserved job is logged as ready, which is what it becomes
//! after a restart. Every file opens with the next id to hand out, so ids
//! never go backwards, even after every old file is gone.
//!
//! Disk space is claimed before a change is made ([`Journal::claim_put`]
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
//! resurrect, or roll back, that job. Each file counts how many of the files
//! it refers to remain, so a change costs O(1) bookkeeping, however many
//! files there are.
//!
//! Compaction keeps the log in proportion to its live data. While the log
//! holds more than twice its live records plus one file, the live jobs of
//! the oldest file are rewritten into the current one, a few after each
//! command, until the oldest file is empty and goes. Its pace is bounded by
//! what clients write: every byte a client's command writes earns two bytes
//! of rewriting, and nothing else does. So compaction never writes more than
//! about twice what clients wrote, whatever the tube names, bodies, `-s` or
//! number of live jobs; and that is enough to keep up, since between two
//! rewrites of a job the whole log has been written again, at least half of
//! it by clients.

mod beanstalkd;
pub mod dir;
mod import;
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
use crate::engine::{JobId, Journal, LoggedJob, RestoredJob, State};
use crate::protocol::TubeName;
use crate::stats::BinlogStats;
use crate::time::Clock;
use record::{JobState, LoggedState, DELETE_LEN, HEADER_LEN, UPDATE_LEN};
use sync::Durability;

/// Preallocation granularity, as beanstalkd rounds `-s`.
const BLOCK: u64 = 4096;

/// Compaction may rewrite this many bytes for each byte clients write.
const REWRITE_PER_CLIENT_BYTE: i64 = 2;

/// Files beyond what the bytes on disk explain that are tolerated before
/// compaction empties the oldest: many small files, each pinned by an update
/// of a long-lived job, are wasteful too.
const SPARE_FILES: u64 = 16;

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

/// One log file still on disk.
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
    /// How many files of `refers_to` are still on disk: it may go only at 0.
    waiting_on: usize,
    /// Newer files whose `refers_to` names this one.
    referred_by: Vec<u32>,
    /// Jobs whose full record was written here, oldest first. Some have
    /// since been deleted or rewritten elsewhere: an entry is checked
    /// against the job when compaction reaches it.
    written: Vec<JobId>,
}

/// The write-ahead log. The engine owns it (as a [`Journal`]) and calls it
/// under its lock.
pub struct Binlog {
    dir: PathBuf,
    /// Held for the life of the process; its locks are the directory lock.
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
    /// What the live jobs' latest records take: a full record and an update
    /// each.
    live_bytes: u64,
    /// Bytes used in all files.
    disk_bytes: u64,
    /// Bytes compaction may still rewrite (see the module docs).
    rewrite_credit: i64,
    next_id: JobId,
    records_written: u64,
    records_migrated: u64,
    max_size_shown: u64,
    /// A write failed: refuse further work rather than lose it silently.
    failed: bool,
    durability: Arc<Durability>,
    /// Converts the times in records to and from the wall clock, so that
    /// they mean the same to the next process (see `time.rs`).
    clock: Clock,
    scratch: Vec<u8>,
}

impl fmt::Debug for Binlog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Binlog").field("dir", &self.dir).field("current", &self.current).finish()
    }
}

impl Drop for Binlog {
    fn drop(&mut self) {
        self.durability.stop();
    }
}

impl Binlog {
    /// Locks `dir`, replays our files, imports beanstalkd's, and starts a
    /// new file. Times are stored as wall-clock time, converted by `clock`.
    pub fn open(
        dir: &Path,
        file_size: u32,
        fsync: Fsync,
        clock: Clock,
    ) -> Result<(Binlog, Recovered), BinlogError> {
        let lock = dir::lock(dir)?;
        let survey = dir::survey(dir)?;
        let open_error = |e: io::Error| BinlogError::Open(format!("binlog {}: {e}", dir.display()));
        let mut replayer = replay::Replayer::new(dir);
        let newest = survey.ours.last().copied();
        for &n in &survey.ours {
            replayer.file(n, Some(n) == newest).map_err(open_error)?;
        }
        let too_many = || BinlogError::Open(format!("binlog {}: file numbers exhausted", dir.display()));
        let import_number = newest.map_or(Some(1), |n| n.checked_add(1)).ok_or_else(too_many)?;
        let imported = import::run(dir, &survey.theirs, &mut replayer, import_number)?;
        let replayed = replayer.finish(&clock);
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
        let mut live_bytes = 0;
        for job in &replayed.jobs {
            if let Some(info) = files.get_mut(&job.file) {
                info.live += 1;
                info.written.push(job.id);
            }
            let tube_len = replayed.tubes.get(job.tube).map_or(0, |t| t.as_str().len());
            live_bytes += live_len(tube_len, job.body.len());
        }
        let max_size_shown = u64::from(file_size);
        let file_size = u64::from(file_size).div_ceil(BLOCK) * BLOCK;
        let durability = Arc::new(Durability::new(fsync));
        let current = match replayed.files.last() {
            Some(&n) => n.checked_add(1).ok_or_else(too_many)?,
            None => 1,
        };
        let claimed = (replayed.jobs.len() * DELETE_LEN) as u64;
        let disk_bytes = files.values().map(|f| f.used).sum();
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
            disk_bytes,
            rewrite_credit: 0,
            next_id: replayed.next_id,
            records_written: 0,
            records_migrated: 0,
            max_size_shown,
            failed: false,
            durability,
            clock,
            scratch: Vec::new(),
        };
        if let Err(e) = binlog.start_file(current, 0) {
            // On a full disk, a file just big enough for the deletes the live
            // jobs may need still lets them be served and deleted.
            binlog.file_size = BLOCK;
            binlog.start_file(current, 0).map_err(|_| open_error(e))?;
            binlog.file_size = file_size;
        }
        let all: Vec<u32> = binlog.files.keys().copied().collect();
        binlog.collect_unneeded(all);
        Durability::start_syncer(&binlog.durability).map_err(open_error)?;
        let mut warnings = survey.notes;
        warnings.extend(imported.notes);
        warnings.extend(replayed.warnings);
        let recovered = Recovered {
            tubes: replayed.tubes,
            jobs: replayed.jobs,
            next_id: replayed.next_id,
            corrupt: replayed.corrupt,
            warnings,
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
        // `-s` bytes, unless the claimed deletes would leave less than half
        // of that for records: then room for the claims and a whole file's
        // worth beyond them. Sized to the claims alone, a file would take one
        // record before the next was needed, and with many live jobs (whose
        // claims outgrow `-s`) every write would start a file.
        let fitted = (self.claimed + need + opening).div_ceil(BLOCK) * BLOCK;
        let mut size = self.file_size.max(fitted);
        if size - self.claimed - opening < self.file_size / 2 {
            size = (self.claimed + need.max(self.file_size) + opening).div_ceil(BLOCK) * BLOCK;
        }
        let path = replay::file_path(&self.dir, n);
        // `create_new` never follows a symbolic link out of the directory.
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
        let previous = std::mem::replace(&mut self.current, n);
        self.writer = Arc::new(file);
        self.durability.set_file(Arc::clone(&self.writer));
        self.files.insert(n, FileInfo { used: opening_bytes.len() as u64, ..FileInfo::default() });
        self.disk_bytes += opening_bytes.len() as u64;
        self.free = size - opening_bytes.len() as u64;
        self.collect_unneeded([previous]);
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
        let Some(next) = self.current.checked_add(1) else {
            eprintln!("beanstalk: binlog: file numbers exhausted; restart to renumber them");
            return false;
        };
        match self.start_file(next, need) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("beanstalk: binlog: cannot start a new file: {e}");
                false
            }
        }
    }

    /// Appends the encoded record in `scratch` to the current file.
    fn append(&mut self) -> io::Result<u64> {
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
        self.disk_bytes += len;
        self.records_written += 1;
        self.durability.wrote_one();
        Ok(len)
    }

    /// A client's command wrote `len` bytes: compaction may rewrite twice
    /// as much. The credit is capped, so that a burst of rewriting after a
    /// quiet spell stays short.
    fn earn_rewrites(&mut self, len: u64) {
        let cap = self.file_size.min(1 << 20) as i64;
        self.rewrite_credit = (self.rewrite_credit + REWRITE_PER_CLIENT_BYTE * len as i64).min(cap);
    }

    /// The current file now supersedes something in `file`.
    fn refer_to(&mut self, file: u32) {
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
    fn forget_in(&mut self, file: u32) {
        let Some(info) = self.files.get_mut(&file) else { return };
        info.live = info.live.saturating_sub(1);
        if info.live == 0 {
            self.collect_unneeded([file]);
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
    fn collect_unneeded(&mut self, candidates: impl IntoIterator<Item = u32>) {
        let syncing = self.durability.mode() != Fsync::Never;
        let mut synced = false;
        let mut work: Vec<u32> = candidates.into_iter().collect();
        while let Some(n) = work.pop() {
            if !self.is_unneeded(n) {
                continue;
            }
            if syncing && !synced {
                if let Err(e) = self.writer.sync_data() {
                    eprintln!("beanstalk: binlog: fsync failed, refusing further changes: {e}");
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
                eprintln!("beanstalk: binlog: cannot remove {}: {e}", path.display());
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

    /// Whether the log holds more than compaction lets it: twice the live
    /// data plus one file, or many more files than its bytes explain.
    fn over_budget(&self) -> bool {
        self.disk_bytes > 2 * self.live_bytes + self.file_size
            || self.files.len() as u64 > SPARE_FILES + 2 * self.disk_bytes / self.file_size
    }
}

/// What a live job's latest records take in the log, for the compaction
/// budget: its full record and one update.
fn live_len(tube_len: usize, body_len: usize) -> u64 {
    (record::full_len(tube_len, body_len) + UPDATE_LEN) as u64
}

/// Makes a directory's entries (files created, removed) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The logged view of a job's changing fields; a delayed job's due time as
/// wall-clock time by `clock`.
fn job_state(id: JobId, job: &LoggedJob<'_>, clock: &Clock) -> JobState {
    let (state, deadline) = match job.state {
        State::Delayed => (LoggedState::Delayed, clock.to_unix(job.deadline)),
        // A buried job's deadline is when it was buried: it orders the
        // buried list after a restart. It is only ever compared, and the
        // engine keeps it increasing across restarts, so it is stored as
        // is: converting it would let a wall-clock step reorder it.
        State::Buried => (LoggedState::Buried, job.deadline.0),
        // Reserved comes back ready after a restart.
        State::Ready | State::Reserved => (LoggedState::Ready, 0),
    };
    JobState { id, pri: job.pri, delay: job.delay, state, deadline, counters: job.counters }
}

impl Journal for Binlog {
    fn claim_put(&mut self, tube_len: usize, body_len: usize) -> bool {
        let full = record::full_len(tube_len, body_len) as u64;
        if !self.make_room(full + DELETE_LEN as u64) {
            return false;
        }
        self.claimed += DELETE_LEN as u64;
        true
    }

    fn claim_update(&mut self) -> bool {
        self.make_room(UPDATE_LEN as u64)
    }

    fn claim_rewrite(&mut self, tube_len: usize, body_len: usize) -> bool {
        self.make_room(record::full_len(tube_len, body_len) as u64)
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
        if self.failed || self.rewrite_credit <= 0 || !self.over_budget() {
            return None;
        }
        let (&file, info) =
            self.files.iter().find(|(&n, info)| n != self.current && !info.written.is_empty())?;
        Some((file, *info.written.last()?))
    }

    fn written_in(&self, file: u32) -> Option<JobId> {
        self.files.get(&file).filter(|_| file != self.current)?.written.last().copied()
    }

    fn forget_written(&mut self, file: u32, id: JobId) {
        if let Some(info) = self.files.get_mut(&file) {
            if info.written.last() == Some(&id) {
                info.written.pop();
            }
        }
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
