//! Reading a binlog directory offline, for the `beanstalk-binlog` tool
//! (`src/bin/beanstalk-binlog.rs`): our own log and beanstalkd's (versions
//! 7 and 5) read into one [`Log`], the jobs a server started on the
//! directory would serve, plus what each file holds and the damage found.
//!
//! This module owns that model; `read` fills it from a directory (with
//! `scan` for our files' records, and `live_jobs` holding the jobs while
//! it reads), and the other submodules each turn it into one subcommand's
//! output: [`check`], [`usage`], [`list`] (and `show`), [`export`],
//! [`v7`] (`to-beanstalkd`) and [`downgrade`]; the last two write a new
//! directory elsewhere ([`write_new_dir`]).
//!
//! It must never change the directory it reads: no file is created,
//! written, renamed, truncated or locked there (the server's replay cuts
//! torn tails and renames files; this reading does neither, and describes
//! what the server would do instead). It reads with the server's rules, so
//! what it shows is what the next start would serve: a job's last record
//! wins, a damaged record in our log ends its file, beanstalkd's files are
//! read as an import would read them. A directory a running server holds
//! may be read: [`holder`] says so, and the newest file's tail may then be
//! a write in flight rather than damage. Nothing here is linked into the
//! server binary: the server never calls it.

pub mod check;
pub mod downgrade;
pub mod export;
pub mod list;
mod live_jobs;
mod read;
mod scan;
pub mod usage;
pub mod v7;

use std::fs::{self, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::dir::Theirs;
use crate::ids::JobId;
use crate::protocol::TubeName;
use crate::stats::Counters;

pub use read::open;

/// What kind of file a [`LogFile`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Our log (`beanstalk.N`).
    Ours,
    /// beanstalkd's log.
    Theirs(Theirs),
    /// Not read by any server: `binlog.N.imported`, `beanstalk.N.corrupt`,
    /// an unfinished import. The text says what it is.
    Aside(&'static str),
}

/// One file of the directory.
#[derive(Debug)]
pub struct LogFile {
    pub name: String,
    pub number: u64,
    pub kind: FileKind,
    /// Bytes on disk.
    pub size: u64,
    /// Bytes up to the last that is not zero: the rest is the zero tail a
    /// file is preallocated with (a start of our server cuts it off).
    pub used: u64,
    /// Older files (indices into [`Log::files`]) whose records this file's
    /// records supersede: it may only be deleted after them (our log only;
    /// see the binlog module docs).
    pub refers_to: Vec<usize>,
    /// beanstalkd's file whose jobs our log holds already: the next start
    /// only sets it aside.
    pub imported: bool,
    /// Damage found while reading it, each as `FILE:OFFSET: what`.
    pub damage: Vec<Damage>,
}

impl LogFile {
    /// A log file of `size` bytes, all of them used.
    pub(super) fn new(name: String, number: u64, kind: FileKind, size: u64) -> LogFile {
        let (refers_to, damage) = (Vec::new(), Vec::new());
        LogFile { name, number, kind, size, used: size, refers_to, imported: false, damage }
    }

    /// A log file of these contents.
    pub(super) fn of(name: String, number: u64, kind: FileKind, bytes: &[u8]) -> LogFile {
        let mut file = LogFile::new(name, number, kind, bytes.len() as u64);
        file.used = bytes.iter().rposition(|&b| b != 0).map_or(0, |last| last as u64 + 1);
        file
    }
}

/// Damage found in a file.
#[derive(Debug, Clone)]
pub struct Damage {
    /// `FILE:OFFSET: what`.
    pub message: String,
    /// A record cut short at the end of the file (a crash in mid-write),
    /// rather than damage with data after it.
    pub torn: bool,
}

/// A job's state as a start of the server would restore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Ready,
    /// Ready at this Unix time (ns).
    Delayed {
        until: u64,
    },
    /// Buried; jobs come back in the order of `at`, then id.
    Buried {
        at: u64,
    },
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Delayed { .. } => "delayed",
            State::Buried { .. } => "buried",
        }
    }
}

/// A live job.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: JobId,
    /// Index into [`Log::tubes`].
    pub tube: usize,
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    pub state: State,
    /// Unix ns.
    pub created: u64,
    pub counters: Counters,
    pub body_len: usize,
    /// Kept only as [`Bodies`] asked.
    pub body: Option<Box<[u8]>>,
    /// Index into [`Log::files`] of the file holding its latest full record.
    pub file: usize,
    /// Its unique key and the key's cooldown in seconds (`idp:`).
    pub key: Option<(String, u32)>,
    /// Its retry limit (`max:`).
    pub limit: Option<u32>,
    /// Its concurrency key and its put's limit (`con:`).
    pub con: Option<(String, u32)>,
    /// Its group (`grp:`) and the group it waits for (`aft:`).
    pub groups: (Option<String>, Option<String>),
}

/// A job's `grp:` and `aft:` tags as its put gave them, each after a
/// space; empty without them.
pub fn group_tags(job: &Job) -> String {
    let (group, after) = &job.groups;
    let group = group.as_ref().map_or(String::new(), |name| format!(" grp:{name}"));
    group + &after.as_ref().map_or(String::new(), |name| format!(" aft:{name}"))
}

/// Which bodies to keep in memory while reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bodies {
    None,
    All,
    One(JobId),
}

/// What a directory holds.
#[derive(Debug)]
pub struct Log {
    pub dir: PathBuf,
    /// Ours oldest first, then beanstalkd's oldest first, then files aside.
    pub files: Vec<LogFile>,
    pub tubes: Vec<TubeName>,
    /// Ascending ids.
    pub jobs: Vec<Job>,
    /// The id the next put would get.
    pub next_id: JobId,
    /// The process holding the directory's lock, if a server runs on it.
    pub held_by: Option<i32>,
    /// For the operator: what a start would do differently from this view.
    pub notes: Vec<String>,
    /// When it was read (Unix ns): ages and time left are counted from it.
    pub now: u64,
    /// Unique keys cooling down after their job's delete.
    pub cooling: usize,
}

impl Log {
    /// A log of `jobs` in `tubes` read at `now`, from no files: the tests'.
    #[cfg(test)]
    pub fn of(tubes: Vec<TubeName>, jobs: Vec<Job>, next_id: JobId, now: u64) -> Log {
        let (dir, files, held_by, notes, cooling) = ("d".into(), Vec::new(), None, Vec::new(), 0);
        Log { dir, files, tubes, jobs, next_id, held_by, notes, now, cooling }
    }

    pub fn tube(&self, job: &Job) -> &str {
        self.tubes.get(job.tube).map_or("?", TubeName::as_str)
    }

    /// The newest file a server is writing, if one holds the directory.
    pub fn writing(&self) -> Option<usize> {
        self.held_by?;
        let is_log = |f: &LogFile| !matches!(f.kind, FileKind::Aside(_));
        let ours = self.files.iter().rposition(|f| f.kind == FileKind::Ours);
        ours.or_else(|| self.files.iter().rposition(is_log))
    }
}

/// The process that holds `DIR/lock`, if any: both servers hold a POSIX
/// lock on it while they run. Asked without taking a lock; a missing lock
/// file means no server.
pub fn holder(dir: &Path) -> Option<i32> {
    let lock =
        OpenOptions::new().read(true).custom_flags(crate::sys::O_NOFOLLOW).open(dir.join("lock")).ok()?;
    crate::sys::posix_lock_holder(&lock).ok().flatten()
}

/// Unix time now, in ns.
pub fn unix_now() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(now.as_nanos()).unwrap_or(u64::MAX)
}

/// Writes `bytes` as `out/name`, `out` empty or missing (it is made), for
/// `command`: through a temporary file, synced, renamed, and the directory
/// synced, so that a crash leaves the file whole or absent.
pub fn write_new_dir(out: &Path, name: &str, bytes: &[u8], command: &str) -> Result<(), String> {
    let fail = |what: &str, e: io::Error| format!("{}: {what}: {e}", out.display());
    match fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(format!(
                    "{}: not empty; {command} writes only into an empty or new directory",
                    out.display()
                ));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir(out).map_err(|e| fail("cannot create it", e))?
        }
        Err(e) => return Err(fail("cannot read it", e)),
    }
    let temp = out.join(format!("{command}.partial"));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| fail("cannot create a file in it", e))?;
    let mut writer = BufWriter::new(&file);
    writer.write_all(bytes).and_then(|()| writer.flush()).map_err(|e| fail("cannot write", e))?;
    drop(writer);
    file.sync_all().map_err(|e| fail("cannot sync", e))?;
    fs::rename(&temp, out.join(name)).map_err(|e| fail(&format!("cannot rename the new file {name}"), e))?;
    fs::File::open(out).and_then(|d| d.sync_all()).map_err(|e| fail("cannot sync the directory", e))?;
    Ok(())
}
