//! Persistence (`-b DIR`): a write-ahead log of every job change that must
//! survive a restart, replayed at start-up.
//!
//! Layout on disk (see [`record`] for the bytes):
//!
//! - `DIR/lock`: locked while the server runs, with both `flock` and
//!   beanstalkd's `fcntl` lock, so two servers never share a directory
//!   ([`dir`]).
//! - `DIR/beanstalk.N`: the log, N counting up from 1. Every start begins a
//!   new file after the highest existing one; when that number has passed
//!   2^30 (`dir.rs`'s `RENUMBER_ABOVE`), the files are first renamed 1, 2,
//!   3, ... in their order, so the numbers never run out. A file is preallocated to `-s`
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
//! - `DIR/server-id`: the `id` that `stats` reports, kept across restarts
//!   ([`identity`]).
//!
//! What is logged: each change a command makes to a job (which commands
//! do, the table of commands in reference §3.0 says), as the job's new
//! state, which the log turns into a record itself (`writing.rs`): a full
//! record (tube, parameters, body) for a new job, one whose tube changed,
//! or one rewritten by compaction; an update record for any other change;
//! a delete record when it is deleted. A reserved job is logged as ready,
//! which is what it becomes after a restart. Every file opens with the next id to hand out, so ids
//! never go backwards, even after every old file is gone.
//!
//! Disk space is claimed before a change is made
//! ([`Journal::claim`](crate::engine::Journal::claim)): a put claims room
//! for its full record *and* its eventual delete, so a delete can always
//! be logged, even on a full disk. When the current file cannot take a
//! claim, the next file is created; if that fails, the command is refused with `OUT_OF_MEMORY` and nothing changes.
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

pub mod record;
pub(crate) mod writing;
pub(crate) mod files;
pub mod sync;
pub mod replay;

// Second reading.
pub(crate) mod compaction;
pub mod dir;
pub mod identity;
pub(crate) mod beanstalkd;
pub(crate) mod import;
pub(crate) mod faults;
pub mod inspect;

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Fsync;
use crate::engine::{JobId, RestoredJob};
use crate::ids::IdRange;
use crate::protocol::TubeName;
use crate::time::Clock;
use compaction::live_len;
use files::FileInfo;
use record::{DELETE_LEN, HEADER_LEN, UPDATE_LEN};
use sync::Durability;

/// Preallocation granularity, as beanstalkd rounds `-s`.
const BLOCK: u64 = 4096;

/// Why the binlog could not be opened; each has its own exit status.
#[derive(Debug)]
pub enum BinlogError {
    /// The directory is missing, or not writable by the server's user:
    /// exit 10, as for any lock failure.
    Unusable(PathBuf, io::Error),
    /// The directory cannot be locked (in use by another server): exit 10.
    Lock(String),
    /// Replay or creating the first file failed: exit 1.
    Open(String),
}

impl BinlogError {
    /// beanstalkd's exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            BinlogError::Unusable(..) | BinlogError::Lock(_) => 10,
            BinlogError::Open(_) => 1,
        }
    }
}

impl fmt::Display for BinlogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BinlogError::Unusable(dir, e) => write!(
                f,
                "cannot use -b {}: {e}; it must be an existing directory that the user the server runs as can write",
                dir.display()
            ),
            BinlogError::Lock(m) | BinlogError::Open(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BinlogError {}

/// What [`Binlog::open`] hands back besides the log itself.
#[derive(Debug)]
pub struct Recovered {
    /// How many of our log files were replayed.
    pub files: usize,
    /// The tube names the jobs refer to by index.
    pub tubes: Vec<TubeName>,
    pub jobs: Vec<RestoredJob>,
    pub next_id: JobId,
    /// Files whose live jobs must be rewritten at once (see
    /// [`crate::engine::Engine::rewrite_files`]).
    pub corrupt: Vec<u32>,
    pub warnings: Vec<String>,
}

/// The write-ahead log. The engine owns it (as a [`crate::engine::Journal`]) and calls it
/// under its lock.
pub struct Binlog {
    // The directory and the file being written.
    dir: PathBuf,
    /// Held for the life of the process; its locks are the directory lock.
    _lock: File,
    /// Nominal size of a new file (`-s`, rounded up to 4096).
    file_size: u64,
    current: u32,
    writer: Arc<File>,
    /// Encodes one record at a time.
    scratch: Vec<u8>,
    /// A write failed: refuse further work rather than lose it silently.
    failed: bool,
    durability: Arc<Durability>,
    /// Converts the times in records to and from the wall clock, so that
    /// they mean the same to the next process (see `time.rs`).
    clock: Clock,
    next_id: JobId,

    // Disk room (see "Disk space is claimed" above).
    /// Preallocated bytes left in the current file.
    free: u64,
    /// Bytes of `free` set aside for the deletes of live jobs.
    claimed: u64,

    // When a file may go (`files.rs`).
    files: files::Files,
    /// Room for `collect_unneeded`'s work list: a file each, claimed as
    /// files are made.
    unneeded: Vec<u32>,
    /// `records_written` when `Journal::files_to_free` last answered.
    freed_at: Option<u64>,

    // Compaction's budget (`compaction.rs`).
    /// What the live jobs' latest records take: a full record and an update
    /// each.
    live_bytes: u64,
    /// Bytes used in all files.
    disk_bytes: u64,
    /// Bytes compaction may still rewrite.
    rewrite_credit: i64,

    // What `stats` shows.
    records_written: u64,
    records_migrated: u64,
    max_size_shown: u64,
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
    /// A directory holding a job whose id `ids` would not hand out is
    /// refused before a file is started: a pool routes by id, and would
    /// send that job's commands to another server.
    pub fn open(
        dir: &Path,
        file_size: u32,
        fsync: Fsync,
        clock: Clock,
        ids: IdRange,
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
        if let Some(job) = replayed.jobs.iter().find(|job| !ids.contains(job.id)) {
            return Err(BinlogError::Open(format!(
                "binlog {}: it holds job {}, which {} would never give out; start with the \
                 --job-id-start and --job-id-step it was written with, or move its jobs to such a \
                 server with beanstalk-binlog export",
                dir.display(),
                job.id,
                ids.flags()
            )));
        }
        let mut files = files::replayed(dir, &replayed);
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
            unneeded: Vec::new(),
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
        let _ = binlog.unneeded.try_reserve(binlog.files.len() + 1);
        binlog.collect_unneeded(&all);
        Durability::start_syncer(&binlog.durability).map_err(open_error)?;
        let mut warnings = survey.notes;
        warnings.extend(imported.notes);
        warnings.extend(replayed.warnings);
        let recovered = Recovered {
            files: replayed.files.len(),
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
        /// `errno` for a full disk.
        const ENOSPC: i32 = 28;
        let syncing = self.durability.mode() != Fsync::Never;
        let leaving = self.files.get(&self.current).map(|old| old.used);
        if leaving.is_some() && syncing {
            // Everything in the file we leave is made durable first.
            faults::io_point()?;
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
        // Claim, then change: the memory a new file's books need, first.
        let files = self.files.len() + 1;
        let mut opening_bytes = Vec::new();
        let claimed = self.files.try_make_room()
            && self.unneeded.try_reserve(files.saturating_sub(self.unneeded.len())).is_ok()
            && opening_bytes.try_reserve(opening as usize + 32).is_ok();
        let Some(path) = replay::try_file_path(&self.dir, n).filter(|_| claimed) else {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        };
        opening_bytes.extend_from_slice(&record::header());
        record::encode_next_id(&mut opening_bytes, self.next_id);
        // `create_new` never follows a symbolic link out of the directory.
        faults::io_point()?;
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        // A disk too full for a whole file may still take what this write
        // needs: a smaller file, rather than no change at all.
        let preallocated =
            faults::io_point().and_then(|()| crate::sys::preallocate(&file, size)).or_else(|e| {
                if e.raw_os_error() == Some(ENOSPC) && fitted < size {
                    size = fitted;
                    crate::sys::preallocate(&file, size)
                } else {
                    Err(e)
                }
            });
        let made = preallocated
            .and_then(|()| faults::io_point())
            .and_then(|()| file.write_all_at(&opening_bytes, 0))
            .and_then(|()| {
                if syncing {
                    faults::io_point().and_then(|()| file.sync_data()).and_then(|()| sync_dir(&self.dir))
                } else {
                    Ok(())
                }
            });
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
        self.collect_unneeded(&[previous]);
        Ok(())
    }

    /// Room kept free at the end of the current file for work that must
    /// go on when the disk is full. A put leaves all of it; a rewrite by
    /// compaction may use half; a change to a job already logged (a
    /// release, a bury: existing jobs stay workable) may use it all. When
    /// no new file can be made, compaction still has room to rewrite an old
    /// file's few live jobs, that file goes, and its space lets new files
    /// be made again: a full disk recovers once deletes leave little live
    /// data.
    pub(super) fn compaction_reserve(&self) -> u64 {
        self.file_size / 8
    }

    /// Makes sure `need` unclaimed bytes are free in the current file, and
    /// `keep` more besides, starting a new file if necessary.
    fn make_room(&mut self, need: u64, keep: u64) -> bool {
        if self.failed || self.durability.failed() {
            return false;
        }
        let reserve = keep;
        if self.free.saturating_sub(self.claimed) >= need + reserve {
            return true;
        }
        let Some(next) = self.current.checked_add(1) else {
            crate::log::problem(format_args!("binlog: file numbers exhausted; restart to renumber them"));
            return false;
        };
        match self.start_file(next, need + reserve) {
            Ok(()) => true,
            Err(e) => {
                crate::log::problem(format_args!("binlog: cannot start a new file: {e}"));
                false
            }
        }
    }

    /// Appends the encoded record in `scratch` to the current file.
    fn append(&mut self) -> io::Result<u64> {
        let len = self.scratch.len() as u64;
        let Some(info) = self.files.get_mut(&self.current) else {
            return Err(io::Error::other("no current file"));
        };
        let at = info.used;
        let written = faults::io_point().and_then(|()| self.writer.write_all_at(&self.scratch, at));
        if self.scratch.capacity() > 1 << 20 {
            // Do not keep a huge body's worth of buffer for the process's life.
            self.scratch = Vec::new();
        }
        if let Err(e) = written {
            self.failed = true;
            crate::log::problem(format_args!("binlog: write failed, refusing further changes: {e}"));
            return Err(e);
        }
        info.used += len;
        self.free = self.free.saturating_sub(len);
        self.disk_bytes += len;
        self.records_written += 1;
        self.durability.wrote_one();
        Ok(len)
    }
}

/// Makes a directory's entries (files created, removed) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    faults::io_point()?;
    File::open(dir)?.sync_all()
}
