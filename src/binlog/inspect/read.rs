//! Reading a directory into a [`Log`]: which files it holds (classified
//! by their first bytes, as the server's start-up does), then our files
//! record by record and beanstalkd's file by file, with the server's rules.
//!
//! It must not change the directory: where start-up would rename, remove
//! or truncate, this only reads, and what start-up would do is in the
//! [`Log`] (kinds of files, damage, notes).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::live_jobs::LiveJobs;
use super::scan;
use super::{holder, unix_now, Bodies, Damage, FileKind, Job, Log, LogFile, State};
use crate::binlog::beanstalkd::{FileByFile, TheirState};
use crate::binlog::dir::{self, Format, TheirFile, Theirs};
use crate::binlog::record::{FileStamp, LoggedState, Record};
use crate::ids::JobId;
use crate::protocol::TubeName;

/// The tube index of a job whose tube name is not a legal one.
const BAD_TUBE: usize = usize::MAX;

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
        cooling: 0,
    };
    let found = survey(dir)?;
    if found.ours.is_empty() && found.theirs.is_empty() {
        return Err(format!(
            "{}: no binlog files (beanstalk.N or binlog.N): not a binlog directory",
            dir.display()
        ));
    }
    let mut reader = Reader {
        log: &mut log,
        jobs: LiveJobs::default(),
        tubes: HashMap::new(),
        imported: Vec::new(),
        bodies,
        cooling: Default::default(),
    };
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
pub(super) struct Found {
    pub(super) ours: Vec<(u64, PathBuf)>,
    pub(super) theirs: Vec<TheirFile>,
    aside: Vec<(String, &'static str)>,
}

/// Lists and classifies the directory's files by their first bytes, as the
/// server's start-up does (`dir.rs`), without renaming or removing any.
pub(super) fn survey(dir: &Path) -> Result<Found, String> {
    let unreadable = |e: std::io::Error| format!("{}: cannot read the directory: {e}", dir.display());
    let mut found = Found::default();
    let held = holder(dir).is_some();
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
        // A running server may delete a file between the listing and this
        // look at it (compaction): it is gone, not unreadable.
        let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        let meta = match fs::symlink_metadata(&path) {
            Err(e) if gone(&e) => continue,
            meta => meta.map_err(|e| refuse(&e.to_string()))?,
        };
        if !meta.file_type().is_file() {
            return Err(refuse("is not a regular file"));
        }
        let mut format = match dir::classify(&path) {
            Err(e) if gone(&e) => continue,
            format => format.map_err(|e| refuse(&e.to_string()))?,
        };
        if matches!(format, Format::Unknown(_)) && held {
            // A file a running server has just made can show its records
            // before its header (the read race `check.rs` describes); the
            // header was written first, so a second look sees it.
            format = match dir::classify(&path) {
                Err(e) if gone(&e) => continue,
                format => format.map_err(|e| refuse(&e.to_string()))?,
            };
        }
        match (format, is_ours) {
            (Format::Ours, true) | (Format::Theirs(Theirs::Empty), true) => found.ours.push((number, path)),
            (Format::Ours, false) => {
                return Err(refuse("is in this server's format under beanstalkd's name"))
            }
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

/// A reading in progress: the live jobs so far, by id.
struct Reader<'a> {
    log: &'a mut Log,
    jobs: LiveJobs,
    tubes: HashMap<Vec<u8>, usize>,
    /// beanstalkd's files our log says it imported (see [`stamp_key`]).
    imported: Vec<String>,
    bodies: Bodies,
    /// Deleted jobs whose key cools down.
    cooling: std::collections::HashSet<JobId>,
}

impl Reader<'_> {
    fn keep(&self, id: JobId) -> bool {
        match self.bodies {
            Bodies::None => false,
            Bodies::All => true,
            Bodies::One(wanted) => wanted == id,
        }
    }

    /// The index of tube `name` in [`Log::tubes`]; [`BAD_TUBE`] for a name
    /// the checksum passed but the tube rules refuse.
    fn tube(&mut self, name: &[u8]) -> usize {
        if let Some(&i) = self.tubes.get(name) {
            return i;
        }
        let i = match TubeName::new(name) {
            Some(tube) => {
                self.log.tubes.push(tube);
                self.log.tubes.len() - 1
            }
            None => BAD_TUBE,
        };
        self.tubes.insert(name.to_vec(), i);
        i
    }

    /// A file's contents; `None` if a running server deleted it since the
    /// directory was listed.
    fn read(&mut self, path: &Path) -> Result<Option<Vec<u8>>, String> {
        match fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.log.held_by.is_some() => {
                self.log
                    .notes
                    .push(format!("{}: deleted by the running server while being read", path.display()));
                Ok(None)
            }
            Err(e) => Err(format!("{}: cannot read it: {e}", path.display())),
        }
    }

    /// Our file: every record applied, as replay would (`replay.rs`).
    fn our_file(&mut self, number: u64, path: &Path, newest: bool) -> Result<(), String> {
        let Some(bytes) = self.read(path)? else { return Ok(()) };
        let name = file_name(path);
        let index = self.log.files.len();
        self.log.files.push(LogFile::of(name, number, FileKind::Ours, &bytes));
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
            Record::NextId(_) | Record::Imported(_) | Record::Batch(_) => None,
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
            // The mark of a dead letter is the server's: the tool shows
            // its retry limit, not the mark.
            LoggedState::Buried | LoggedState::BuriedByLimit => State::Buried { at: deadline },
            LoggedState::Cooling => State::Ready,
        };
        match record {
            // A deleted job's key cooling down is no job.
            Record::Full { job, .. } | Record::Update(job) if job.state == LoggedState::Cooling => {
                self.jobs.remove(&job.id);
                self.cooling.insert(job.id);
            }
            Record::Full { job, ttr, created, tube, body, tags } => {
                let tube = self.tube(tube);
                let kept = self.keep(job.id).then(|| Box::from(body));
                // Names are tube names: text, shown as the put gave them.
                let text = |name: &[u8]| String::from_utf8_lossy(name).into_owned();
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
                    key: tags.key.map(|(name, cooldown)| (text(name), cooldown)),
                    limit: tags.limit,
                    con: tags.con.map(|(name, limit)| (text(name), limit)),
                    groups: (tags.group.map(text), tags.after.map(text)),
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
                self.cooling.remove(&id);
            }
            Record::NextId(id) => self.log.next_id = self.log.next_id.max(id),
            Record::Imported(stamp) => self.imported.push(stamp_key(&stamp)),
            // `scan` hands a batch's records one by one.
            Record::Batch(_) => {}
        }
    }

    /// beanstalkd's files, one at a time, as an import would read them;
    /// files our log already imported are skipped (the next start only
    /// sets them aside).
    fn their_files(&mut self, theirs: &[TheirFile]) -> Result<(), String> {
        let mut reader = FileByFile::default();
        let mut seen = 0;
        for file in theirs {
            let Some(bytes) = self.read(&file.path)? else { continue };
            let mut entry =
                LogFile::of(file_name(&file.path), file.number, FileKind::Theirs(file.format), &bytes);
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
            if self.jobs.get(&id).is_some() || id < ours_next {
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
                key: None,
                limit: None,
                con: None,
                groups: (None, None),
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
        let mut jobs = self.jobs.into_sorted();
        // As replay does, a job whose tube name is unreadable is skipped.
        for job in jobs.iter().filter(|j| j.tube == BAD_TUBE) {
            self.log.notes.push(format!("job {}: unreadable tube name; a start skips it", job.id));
        }
        jobs.retain(|j| j.tube != BAD_TUBE);
        self.log.jobs = jobs;
        self.log.cooling = self.cooling.len();
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// A stamp as a comparable key (`FileStamp` is not hashable).
fn stamp_key(stamp: &FileStamp) -> String {
    format!("{}/{}/{:08x}", stamp.number, stamp.len, stamp.crc)
}
