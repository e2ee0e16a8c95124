//! Taking over beanstalkd's binlog: its jobs move into our log, and its
//! files are set aside, once, whatever moment a crash strikes.
//!
//! The steps, and why each is safe to interrupt:
//!
//! 1. Read every `binlog.N` ([`super::beanstalkd`]). Nothing is changed.
//! 2. Write the jobs as full records into `DIR/beanstalk.import`, followed
//!    by one `Imported` record per beanstalkd file (its number, length and
//!    checksum), and fsync it. A crash here leaves a temporary file that the
//!    next start removes, and the import starts over.
//! 3. Rename it to `beanstalk.M`, the next log file, and fsync the
//!    directory. This is the moment the import happens: the jobs and the
//!    notes that their files were imported appear together.
//! 4. Rename each `binlog.N` to `binlog.N.imported` (`.imported.2`, ... if
//!    that name is taken): neither server replays such a name, and nothing
//!    deletes it. A crash in this step leaves some `binlog.N` behind; the
//!    next start finds its `Imported` record, so it only moves the file.
//!
//! Ids are kept, so clients see the same jobs. An id this server has
//! already handed out (beanstalkd started on our directory by mistake counts
//! from 1 again) gets a fresh one, and the log says which: a clash with one
//! of our live jobs job by job, ids used before in one line. New ids continue
//! above every id either log ever used.

use std::fs::{self, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::beanstalkd::{self, TheirState};
use super::dir::{TheirFile, IMPORT_TEMP};
use super::record::{self, FileStamp, JobState, LoggedState};
use super::replay::Replayer;
use super::BinlogError;

/// What an import did, for the operator.
#[derive(Debug, Default)]
pub struct Imported {
    pub notes: Vec<String>,
}

/// Imports `theirs` into log file `number` (the next one after ours) and
/// replays it into `replayer`; then sets the files aside.
pub fn run(
    dir: &Path,
    theirs: &[TheirFile],
    replayer: &mut Replayer,
    number: u32,
) -> Result<Imported, BinlogError> {
    let mut out = Imported::default();
    if theirs.is_empty() {
        return Ok(out);
    }
    let fail = |what: &str, e: io::Error| {
        BinlogError::Open(format!(
            "binlog {}: cannot import beanstalkd's binlog: {what}: {e}; its files were left as they were",
            dir.display()
        ))
    };
    let mut to_import = Vec::new();
    for file in theirs {
        let bytes = fs::read(&file.path).map_err(|e| fail(&file.path.display().to_string(), e))?;
        if !replayer.was_imported(&FileStamp::of(file.number, &bytes)) {
            to_import.push((file, bytes));
        }
    }
    if !to_import.is_empty() {
        let log = beanstalkd::read(&to_import);
        out.notes.extend(log.warnings.iter().cloned());
        let temp = dir.join(IMPORT_TEMP);
        let written = write_import(&temp, &log, replayer, &mut out.notes);
        let committed = written.and_then(|count| {
            fs::rename(&temp, super::dir::our_path(dir, number))?;
            super::sync_dir(dir)?;
            Ok(count)
        });
        let count = match committed {
            Ok(count) => count,
            Err(e) => {
                let _ = fs::remove_file(&temp);
                return Err(fail("writing the imported jobs", e));
            }
        };
        replayer.file(number, false).map_err(|e| fail("reading the imported jobs back", e))?;
        let names: Vec<String> = to_import.iter().map(|(f, _)| f.path.display().to_string()).collect();
        out.notes.push(format!(
            "imported {count} jobs from beanstalkd's {} into {} (ids continue at {})",
            names.join(", "),
            super::dir::our_path(dir, number).display(),
            replayer.next_id()
        ));
    }
    for file in theirs {
        let aside =
            set_aside(&file.path).map_err(|e| fail(&format!("moving {} aside", file.path.display()), e))?;
        out.notes.push(format!(
            "{} was imported and is kept as {}; neither server will read it again",
            file.path.display(),
            aside.display()
        ));
    }
    super::sync_dir(dir).map_err(|e| fail("syncing the directory", e))?;
    Ok(out)
}

/// Writes the import file: header, next id, the jobs, then one `Imported`
/// record per file; fsynced. Returns how many jobs it holds.
fn write_import(
    temp: &Path,
    log: &beanstalkd::TheirLog,
    replayer: &Replayer,
    notes: &mut Vec<String>,
) -> io::Result<usize> {
    // Fresh ids start above every id either log used. A job keeps its id
    // unless this server has handed that id out already: a live job of ours
    // has it, or beanstalkd (started here by mistake) counted from 1 again
    // over ids we used. Then it gets a fresh one: ids never go backwards.
    let ours_next = replayer.next_id();
    let mut fresh = ours_next.max(log.max_id.saturating_add(1));
    let mut ids = Vec::with_capacity(log.jobs.len());
    let mut reused = Vec::new();
    for job in &log.jobs {
        if replayer.is_live(job.id) {
            notes.push(format!(
                "beanstalkd's job {} has the id of a live job of ours; imported as job {fresh}",
                job.id
            ));
        } else if job.id < ours_next {
            reused.push((job.id, fresh));
        } else {
            ids.push(job.id);
            continue;
        }
        ids.push(fresh);
        fresh += 1;
    }
    if let (Some(first), Some(last)) = (reused.first(), reused.last()) {
        notes.push(format!(
            "{} of beanstalkd's jobs had ids this server had already used; imported as jobs {} to {} \
             (beanstalkd's job {} is job {}, and so on)",
            reused.len(),
            first.1,
            last.1,
            first.0,
            first.1
        ));
    }
    // Buried jobs keep their order, after every job buried before now.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let buried_from = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
    let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(temp)?;
    let mut out = BufWriter::new(&file);
    let mut bytes = record::header().to_vec();
    record::encode_next_id(&mut bytes, fresh);
    out.write_all(&bytes)?;
    for (rank, (job, &id)) in log.jobs.iter().zip(&ids).enumerate() {
        let (state, deadline) = match job.state {
            TheirState::Ready => (LoggedState::Ready, 0),
            TheirState::Delayed => (LoggedState::Delayed, job.deadline),
            TheirState::Buried => (LoggedState::Buried, buried_from.saturating_add(rank as u64)),
        };
        let logged = JobState { id, pri: job.pri, delay: job.delay, state, deadline, counters: job.counters };
        bytes.clear();
        record::encode_full(
            &mut bytes,
            &logged,
            job.ttr,
            job.created,
            job.tube.as_str().as_bytes(),
            &job.body,
        );
        out.write_all(&bytes)?;
    }
    for stamp in &log.files {
        bytes.clear();
        record::encode_imported(&mut bytes, stamp);
        out.write_all(&bytes)?;
    }
    out.flush()?;
    drop(out);
    file.sync_all()?;
    Ok(log.jobs.len())
}

/// Renames `binlog.N` to the first free name of `binlog.N.imported`,
/// `binlog.N.imported.2`, ...
fn set_aside(path: &Path) -> io::Result<PathBuf> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut to = path.with_file_name(format!("{name}.imported"));
    let mut k = 1;
    while fs::symlink_metadata(&to).is_ok() {
        k += 1;
        to = path.with_file_name(format!("{name}.imported.{k}"));
    }
    fs::rename(path, &to)?;
    Ok(to)
}
