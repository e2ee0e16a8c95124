//! Reading a binlog directory offline, for the `beanstalk-binlog` tool
//! (`src/bin/beanstalk-binlog.rs`): our own log and beanstalkd's (versions
//! 7 and 5) read into one [`Log`], the jobs a server started on the
//! directory would serve, plus what each file holds and the damage found.
//!
//! This module owns that model and how it is read; its submodules each
//! turn it into one subcommand's output: [`check`], [`usage`], [`list`]
//! (and `show`), [`export`] and [`v7`] (`to-beanstalkd`).
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
pub mod export;
pub mod list;
mod scan;
pub mod usage;
pub mod v7;

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::beanstalkd::{FileByFile, TheirState};
use super::dir::{self, Format, TheirFile, Theirs};
use super::record::{FileStamp, LoggedState, Record};
use crate::engine::IdMap;
use crate::ids::JobId;
use crate::protocol::TubeName;
use crate::stats::Counters;

/// What kind of file a [`LogFile`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Our log (`beanstalk.N`, or `binlog.N` from an older version of ours).
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
}

impl Log {
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

/// Reads `dir` as a start of the server would; `Err` is one line for the
/// operator (unreadable, not a log directory, a file no server can read).
pub fn open(dir: &Path, bodies: Bodies) -> Result<Log, String> {
    let held_by = holder(dir);
    let mut log = Log {
        dir: dir.to_path_buf(),
        files: Vec::new(),
        tubes: Vec::new(),
        jobs: Vec::new(),
        next_id: 1,
        held_by,
        notes: Vec::new(),
        now: unix_now(),
    };
    let found = survey(dir)?;
    if found.ours.is_empty() && found.theirs.is_empty() {
        return Err(format!(
            "{}: no binlog files (beanstalk.N or binlog.N): not a binlog directory",
            dir.display()
        ));
    }
    let mut reader =
        Reader { log: &mut log, jobs: IdMap::default(), tubes: HashMap::new(), imported: Vec::new(), bodies };
    let newest = found.ours.last().map(|f| f.0);
    for (number, path) in &found.ours {
        reader.our_file(*number, path, Some(*number) == newest)?;
    }
    reader.their_files(&found.theirs)?;
    reader.finish();
    for (name, what) in found.aside {
        let size = fs::symlink_metadata(dir.join(&name)).map_or(0, |m| m.len());
        let file = LogFile::new(name, 0, FileKind::Aside(what), size);
        log.files.push(file);
    }
    Ok(log)
}

/// The log-like files of a directory, by kind.
#[derive(Default)]
struct Found {
    ours: Vec<(u64, PathBuf)>,
    theirs: Vec<TheirFile>,
    aside: Vec<(String, &'static str)>,
}

/// Lists and classifies the directory's files by their first bytes, as the
/// server's start-up does (`dir.rs`), without renaming or removing any.
fn survey(dir: &Path) -> Result<Found, String> {
    let unreadable = |e: std::io::Error| format!("{}: cannot read the directory: {e}", dir.display());
    let mut found = Found::default();
    for entry in fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let path = entry.path();
        if name == dir::IMPORT_TEMP {
            found.aside.push((name, "an import cut short; the next start removes it"));
            continue;
        }
        if name.starts_with(dir::THEIRS) && name.contains(".imported") {
            found.aside.push((name, "imported already; no server reads it: delete it once happy"));
            continue;
        }
        if name.starts_with(dir::OURS) && name.ends_with(".corrupt") {
            found.aside.push((name, "damaged, its readable jobs rewritten; kept for inspection"));
            continue;
        }
        let (number, is_ours) =
            match (dir::number_after(&name, dir::OURS), dir::number_after(&name, dir::THEIRS)) {
                (Some(n), _) => (n, true),
                (_, Some(n)) => (n, false),
                _ => continue,
            };
        let refuse = |why: &str| format!("{}: {why}; no server can start on this directory", path.display());
        let meta = fs::symlink_metadata(&path).map_err(|e| refuse(&e.to_string()))?;
        if !meta.file_type().is_file() {
            return Err(refuse("is not a regular file"));
        }
        match (dir::classify(&path).map_err(|e| refuse(&e.to_string()))?, is_ours) {
            // Ours under beanstalkd's name: an older version of ours, which the
            // next start renames and replays as ours.
            (Format::Ours, _) | (Format::Theirs(Theirs::Empty), true) => found.ours.push((number, path)),
            (Format::Theirs(format), false) => found.theirs.push(TheirFile { number, path, format }),
            (Format::Theirs(_), true) => return Err(refuse("is in beanstalkd's format under our name")),
            (Format::Unknown(why), _) => return Err(refuse(&why)),
        }
    }
    found.ours.sort_unstable_by_key(|f| f.0);
    found.theirs.sort_unstable_by_key(|f| f.number);
    found.aside.sort_unstable();
    Ok(found)
}

/// A job being read, before its tube names are checked.
struct Reader<'a> {
    log: &'a mut Log,
    jobs: IdMap<Job>,
    tubes: HashMap<Vec<u8>, usize>,
    /// beanstalkd's files our log says it imported (see [`stamp_key`]).
    imported: Vec<String>,
    bodies: Bodies,
}

impl Reader<'_> {
    fn keep(&self, id: JobId) -> bool {
        match self.bodies {
            Bodies::None => false,
            Bodies::All => true,
            Bodies::One(wanted) => wanted == id,
        }
    }

    fn tube(&mut self, name: &[u8]) -> usize {
        if let Some(&i) = self.tubes.get(name) {
            return i;
        }
        // A name the checksum passed but the tube rules refuse shows as "?".
        let tube =
            TubeName::new(name).unwrap_or_else(|| TubeName::new(b"?").unwrap_or_else(TubeName::default_tube));
        self.log.tubes.push(tube);
        self.tubes.insert(name.to_vec(), self.log.tubes.len() - 1);
        self.log.tubes.len() - 1
    }

    /// Our file: every record applied, as replay would (`replay.rs`).
    fn our_file(&mut self, number: u64, path: &Path, newest: bool) -> Result<(), String> {
        let bytes = fs::read(path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
        let name = file_name(path);
        let index = self.log.files.len();
        self.log.files.push(LogFile::new(name, number, FileKind::Ours, bytes.len() as u64));
        let mut refers_to = Vec::new();
        let damage = scan::scan(path, &bytes, scan::Mode::AsReplay { newest }, |_, record| {
            self.apply(record, index, &mut refers_to);
        });
        refers_to.sort_unstable();
        refers_to.dedup();
        let file = &mut self.log.files[index];
        file.refers_to = refers_to;
        file.damage = damage;
        Ok(())
    }

    fn apply(&mut self, record: Record<'_>, file: usize, refers_to: &mut Vec<usize>) {
        let id = match &record {
            Record::Full { job, .. } | Record::Update(job) => Some(job.id),
            Record::Delete(id) => Some(*id),
            Record::NextId(_) | Record::Imported(_) => None,
        };
        if let Some(id) = id {
            self.log.next_id = self.log.next_id.max(id.saturating_add(1));
            if let Some(earlier) = self.jobs.get(&id).map(|j| j.file).filter(|&g| g != file) {
                refers_to.push(earlier);
            }
        }
        let state = |s: LoggedState, deadline: u64| match s {
            LoggedState::Ready => State::Ready,
            LoggedState::Delayed => State::Delayed { until: deadline },
            LoggedState::Buried => State::Buried { at: deadline },
        };
        match record {
            Record::Full { job, ttr, created, tube, body } => {
                let tube = self.tube(tube);
                let kept = self.keep(job.id).then(|| Box::from(body));
                let new = Job {
                    id: job.id,
                    tube,
                    pri: job.pri,
                    delay: job.delay,
                    ttr,
                    state: state(job.state, job.deadline),
                    created,
                    counters: job.counters,
                    body_len: body.len(),
                    body: kept,
                    file,
                };
                self.jobs.insert(job.id, new);
            }
            Record::Update(s) => {
                if let Some(job) = self.jobs.get_mut(&s.id) {
                    (job.pri, job.delay, job.counters) = (s.pri, s.delay, s.counters);
                    job.state = state(s.state, s.deadline);
                }
            }
            Record::Delete(id) => {
                self.jobs.remove(&id);
            }
            Record::NextId(id) => self.log.next_id = self.log.next_id.max(id),
            Record::Imported(stamp) => self.imported.push(stamp_key(&stamp)),
        }
    }

    /// beanstalkd's files, one at a time, as an import would read them;
    /// files our log already imported are skipped (the next start only
    /// sets them aside).
    fn their_files(&mut self, theirs: &[TheirFile]) -> Result<(), String> {
        let mut reader = FileByFile::default();
        let mut seen = 0;
        for file in theirs {
            let bytes =
                fs::read(&file.path).map_err(|e| format!("{}: cannot read it: {e}", file.path.display()))?;
            let mut entry = LogFile::new(
                file_name(&file.path),
                file.number,
                FileKind::Theirs(file.format),
                bytes.len() as u64,
            );
            entry.imported = self.imported.contains(&stamp_key(&FileStamp::of(file.number, &bytes)));
            if !entry.imported {
                let torn = reader.file(file, &bytes);
                let new = &reader.warnings()[seen..];
                seen += new.len();
                let last = new.len().saturating_sub(1);
                entry.damage = new
                    .iter()
                    .enumerate()
                    .map(|(i, m)| Damage { message: m.clone(), torn: torn && i == last })
                    .collect();
            }
            self.log.files.push(entry);
        }
        let their_log = reader.finish();
        let by_number: HashMap<u64, usize> = self
            .log
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| matches!(f.kind, FileKind::Theirs(_)))
            .map(|(i, f)| (f.number, i))
            .collect();
        // Ids as an import gives them (`import.rs`): kept, unless ours used them.
        let ours_next = self.log.next_id;
        let mut fresh = ours_next.max(their_log.max_id.saturating_add(1));
        let now = self.log.now;
        let mut renamed = Vec::new();
        for (rank, job) in their_log.jobs.into_iter().enumerate() {
            let mut id = job.id;
            if self.jobs.contains_key(&id) || id < ours_next {
                renamed.push((id, fresh));
                id = fresh;
                fresh += 1;
            }
            let tube = self.tube(job.tube.as_str().as_bytes());
            let state = match job.state {
                TheirState::Ready => State::Ready,
                TheirState::Delayed => State::Delayed { until: job.deadline },
                TheirState::Buried => State::Buried { at: now.saturating_add(rank as u64) },
            };
            let body_len = job.body.len();
            let body = self.keep(id).then_some(job.body);
            let file = by_number.get(&job.file).copied().unwrap_or(0);
            let new = Job {
                id,
                tube,
                pri: job.pri,
                delay: job.delay,
                ttr: job.ttr,
                state,
                created: job.created,
                counters: job.counters,
                body_len,
                body,
                file,
            };
            self.jobs.insert(id, new);
        }
        if let (Some(first), Some(last)) = (renamed.first(), renamed.last()) {
            self.log.notes.push(format!(
                "{} of beanstalkd's jobs have ids our log used: a start imports them as jobs {} to {} \
                 (beanstalkd's job {} as job {}, and so on); shown here under those ids",
                renamed.len(),
                first.1,
                last.1,
                first.0,
                first.1
            ));
        }
        self.log.next_id = fresh;
        Ok(())
    }

    fn finish(self) {
        let mut jobs: Vec<Job> = self.jobs.into_values().collect();
        jobs.sort_unstable_by_key(|j| j.id);
        self.log.jobs = jobs;
    }
}

impl LogFile {
    fn new(name: String, number: u64, kind: FileKind, size: u64) -> LogFile {
        LogFile { name, number, kind, size, refers_to: Vec::new(), imported: false, damage: Vec::new() }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// A stamp as a comparable key (`FileStamp` is not hashable).
fn stamp_key(stamp: &FileStamp) -> String {
    format!("{}/{}/{:08x}", stamp.number, stamp.len, stamp.crc)
}
