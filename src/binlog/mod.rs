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
//! A file is let go as soon as it holds no live job's latest full record
//! and none of the older files it *refers to* remains; it leaves the disk
//! once the records that made it unneeded are synced, in the order files
//! were let go, outside the engine's lock ([`sync`]). Nothing a command
//! does under the lock waits for the disk: a file left for a new one is
//! synced by the next fsync too. A file refers to file
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
pub mod kind;
mod tags;
mod crc32c;
pub(crate) mod writing;
pub mod body;
pub(crate) mod batch;
mod reader;
pub mod decode;
pub(crate) mod current;
pub(crate) mod files;
pub mod sync;
pub mod replay;
mod damage;

// Second reading.
pub(crate) mod compaction;
pub mod dir;
pub mod identity;
pub(crate) mod beanstalkd;
pub(crate) mod import;
pub(crate) mod faults;
pub mod inspect;

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Fsync;
use crate::engine::{JobId, Keeping, RestoredJob};
use crate::ids::IdRange;
use crate::protocol::TubeName;
use crate::time::Clock;
use compaction::live_len;
use record::{DELETE_LEN, UPDATE_LEN};
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
    /// The `Arc` the next file goes into, made at start-up: std has no
    /// fallible `Arc::new`, so a new file takes this one's place and the
    /// old one's `Arc` becomes the spare (`start_file`), and no file
    /// switch allocates one.
    spare_writer: Arc<File>,
    /// Encodes one record at a time.
    scratch: Vec<u8>,
    /// The files bodies were last read from, open (`body.rs`): at most
    /// [`body::READERS`], so that a log of many files holds few
    /// descriptors.
    /// (A `RefCell`: the engine asks for a reader through `&self`, under
    /// its lock, the only place the log is ever reached from.)
    readers: std::cell::RefCell<Vec<(u32, Arc<File>)>>,
    /// A body read back from the log to be written again (`body.rs`), and
    /// whose it is: the job, its file and the body's place there.
    moving: Vec<u8>,
    moving_for: Option<(JobId, u32, crate::engine::Place)>,
    /// Which bodies the log keeps for their jobs (`engine/body.rs`).
    keeping: Keeping,
    /// Where the last full record written alone starts in the current
    /// file, and the length of the body it holds
    /// ([`Journal::body_place`](crate::engine::Journal::body_place)).
    last_full_at: Option<(u64, usize)>,
    /// Records of a change of many jobs, gathered to be written at once
    /// while `gathering` (`batch.rs`); how many.
    gathered: Vec<u8>,
    gathering: bool,
    gathered_records: u64,
    /// Files a gathered change let go, collected once it is written.
    collect_after: Vec<u32>,
    /// A write failed: refuse further work rather than lose it silently.
    failed: bool,
    /// Writes that failed (for `--metrics`).
    write_failures: u64,
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
        keeping: Keeping,
    ) -> Result<(Binlog, Recovered), BinlogError> {
        let lock = dir::lock(dir)?;
        let survey = dir::survey(dir)?;
        let open_error = |e: io::Error| BinlogError::Open(format!("binlog {}: {e}", dir.display()));
        let mut replayer = replay::Replayer::new(dir, keeping);
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
        durability.set_dir(dir.to_path_buf());
        let current = match replayed.files.last() {
            Some(&n) => n.checked_add(1).ok_or_else(too_many)?,
            None => 1,
        };
        let claimed = (replayed.jobs.len() * DELETE_LEN) as u64;
        let disk_bytes = files.values().map(|f| f.used).sum();
        // Room for a usual change of many jobs, kept for the server's life, so
        // that a batch of deletes needs no memory on a full server.
        let (mut gathered, mut collect_after) = (Vec::new(), Vec::new());
        if gathered.try_reserve_exact(batch::GATHERED_ROOM).is_err()
            || collect_after.try_reserve_exact(batch::BATCH_ROOM).is_err()
        {
            return Err(open_error(io::Error::new(io::ErrorKind::OutOfMemory, "no memory for its buffers")));
        }
        let mut binlog = Binlog {
            dir: dir.to_path_buf(),
            _lock: lock,
            file_size,
            files,
            unneeded: Vec::new(),
            current,
            // Replaced by the first real file just below.
            writer: Arc::new(File::open("/dev/null").map_err(open_error)?),
            spare_writer: Arc::new(File::open("/dev/null").map_err(open_error)?),
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
            write_failures: 0,
            durability,
            clock,
            scratch: Vec::new(),
            readers: Default::default(),
            moving: Vec::new(),
            moving_for: None,
            keeping,
            last_full_at: None,
            gathered,
            gathering: false,
            gathered_records: 0,
            collect_after,
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
        // What replay found unneeded goes before anyone is served.
        binlog.durability.sync_all();
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
}

/// Makes a directory's entries (files created, removed) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    faults::io_point()?;
    File::open(dir)?.sync_all()
}
