//! `beanstalk-binlog check DIR`: every record of every log file read and
//! verified (checksums and framing in ours; framing and contents in
//! beanstalkd's, which has no checksums), every damaged range reported as
//! `FILE:OFFSET: what`, then one summary line.
//!
//! Exit status: 0 clean, 1 damaged (a torn tail included), 2 unreadable or
//! not a log directory. It must not change a byte of the directory, and it
//! does not stop at the first damage: after a damaged range it reads on
//! from the next record that passes its checksum.
//!
//! **A directory a running server holds.** Its newest file is being
//! appended to while it is read, into preallocated zeros, and a read can
//! see a record's later bytes before its first ones: the read copied the
//! page holding the record's start before the write reached it, and the
//! next page after. That looks like zeros, or a record cut short, with
//! good records after it. But the server appends one record at a time, so
//! a record that shows another after it was complete before the read
//! ended: a second reading sees it whole. So damage in the newest file of
//! a held directory counts only if a second reading finds it again; a
//! cut-short last record is reported as a possible write in flight; and a
//! file the server deleted meanwhile (compaction) is skipped.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use super::read::survey;
use super::scan::{self, Mode};
use super::{holder, Damage};
use crate::binlog::beanstalkd::FileByFile;
use crate::binlog::dir::TheirFile;

/// The directory is clean.
pub const CLEAN: u8 = 0;
/// Damage (or a torn tail) was found.
pub const DAMAGED: u8 = 1;
/// The directory cannot be read, or is not a binlog directory.
pub const UNREADABLE: u8 = 2;

/// Checks `dir`, writing the report to `out`; returns the exit status.
/// `Err` is one line for stderr (exit [`UNREADABLE`]).
pub fn run(dir: &Path, out: &mut impl Write) -> Result<u8, String> {
    let found = survey(dir)?;
    if found.ours.is_empty() && found.theirs.is_empty() {
        return Err(format!(
            "{}: no binlog files (beanstalk.N or binlog.N): not a binlog directory",
            dir.display()
        ));
    }
    let held = holder(dir);
    let write_error = |e: io::Error| format!("writing the report: {e}");
    let mut damage: Vec<Damage> = Vec::new();
    let mut in_flight = Vec::new();
    let (mut files, mut records) = (0, 0u64);
    let newest_ours = found.ours.last().map(|f| f.0);
    for (number, path) in &found.ours {
        let Some(bytes) = read(path, held)? else { continue };
        let newest = Some(*number) == newest_ours;
        let mode = Mode::Check { newest };
        let mut found = scan::scan(path, &bytes, mode, |_, _| records += 1);
        drop(bytes);
        files += 1;
        if newest && held.is_some() && found.iter().any(|d| !d.torn) {
            let again = match read(path, held)? {
                Some(bytes) => scan::scan(path, &bytes, mode, |_, _| {}),
                None => Vec::new(),
            };
            found = found_again(found, &again);
        }
        for d in found {
            if d.torn && held.is_some() {
                in_flight.push(d);
            } else {
                damage.push(d);
            }
        }
    }
    // A server writing beanstalkd's format is beanstalkd itself, when our
    // log has no file: then its newest file is being written.
    let writing = held.is_some() && newest_ours.is_none();
    let (mut theirs, their_files) = check_theirs(&found.theirs, held)?;
    if writing && theirs.iter().any(|d| !d.damage.torn && d.in_newest) {
        let (again, _) = check_theirs(&found.theirs, held)?;
        let again: Vec<Damage> = again.into_iter().map(|d| d.damage).collect();
        let (newest, older): (Vec<_>, Vec<_>) = theirs.into_iter().partition(|d| d.in_newest);
        let newest: Vec<Damage> = newest.into_iter().map(|d| d.damage).collect();
        let confirmed =
            found_again(newest, &again).into_iter().map(|damage| TheirDamage { damage, in_newest: true });
        theirs = older.into_iter().chain(confirmed).collect();
    }
    files += their_files;
    for d in theirs {
        if d.damage.torn && d.in_newest && writing {
            in_flight.push(d.damage);
        } else {
            damage.push(d.damage);
        }
    }
    for d in &damage {
        writeln!(out, "{}", d.message).map_err(write_error)?;
    }
    for d in &in_flight {
        writeln!(
            out,
            "{} (a server holds the directory: this may be a write in flight, not damage)",
            d.message
        )
        .map_err(write_error)?;
    }
    let counted =
        if found.ours.is_empty() { String::new() } else { format!(", {records} records in our log") };
    let torn = damage.iter().filter(|d| d.torn).count();
    let summary = match (damage.len() - torn, torn) {
        (0, 0) => "clean".to_owned(),
        (0, _) => "a torn tail, nothing else damaged".to_owned(),
        (n, 0) => format!("{n} damaged"),
        (n, _) => format!("{n} damaged, and a torn tail"),
    };
    writeln!(out, "{}: {files} files{counted}: {summary}", dir.display()).map_err(write_error)?;
    Ok(if damage.is_empty() { CLEAN } else { DAMAGED })
}

/// A file's contents; `None` if it is gone and a server holds the
/// directory (compaction deleted it since the directory was listed).
fn read(path: &Path, held: Option<i32>) -> Result<Option<Vec<u8>>, String> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound && held.is_some() => Ok(None),
        Err(e) => Err(format!("{}: cannot read it: {e}", path.display())),
    }
}

/// The damage of a first reading that a second reading, `again`, found
/// too, and the cut-short tail (see the module documentation): what a
/// second reading no longer finds was a write in flight.
fn found_again(first: Vec<Damage>, again: &[Damage]) -> Vec<Damage> {
    first.into_iter().filter(|d| d.torn || again.iter().any(|a| a.message == d.message)).collect()
}

/// Damage in one of beanstalkd's files.
struct TheirDamage {
    damage: Damage,
    /// In the newest file.
    in_newest: bool,
}

/// Reads beanstalkd's files, oldest first: their damage, and how many
/// files were read.
fn check_theirs(theirs: &[TheirFile], held: Option<i32>) -> Result<(Vec<TheirDamage>, usize), String> {
    let mut reader = FileByFile::default();
    let newest = theirs.last().map(|f| f.number);
    let (mut damage, mut files, mut seen) = (Vec::new(), 0, 0);
    for file in theirs {
        let Some(bytes) = read(&file.path, held)? else { continue };
        let torn = reader.file(file, &bytes);
        files += 1;
        let new = &reader.warnings()[seen..];
        seen += new.len();
        for (i, message) in new.iter().enumerate() {
            let torn = torn && i + 1 == new.len();
            let in_newest = Some(file.number) == newest;
            damage.push(TheirDamage { damage: Damage { message: message.clone(), torn }, in_newest });
        }
    }
    Ok((damage, files))
}
