//! `beanstalk-binlog check DIR`: every record of every log file read and
//! verified (checksums and framing in ours; framing and contents in
//! beanstalkd's, which has no checksums), every damaged range reported as
//! `FILE:OFFSET: what`, then one summary line.
//!
//! Exit status: 0 clean, 1 damaged (a torn tail included), 2 unreadable or
//! not a log directory. It must not change a byte of the directory, and it
//! does not stop at the first damage: after a damaged range it reads on
//! from the next record that passes its checksum.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use super::read::survey;
use super::scan::{self, Mode};
use super::{holder, Damage};
use crate::binlog::beanstalkd::FileByFile;

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
        let bytes = read(path)?;
        let newest = Some(*number) == newest_ours;
        let found = scan::scan(path, &bytes, Mode::Check { newest }, |_, _| records += 1);
        files += 1;
        for d in found {
            if d.torn && held.is_some() {
                in_flight.push(d);
            } else {
                damage.push(d);
            }
        }
    }
    let mut reader = FileByFile::default();
    let newest_theirs = found.theirs.last().map(|f| f.number);
    let mut seen = 0;
    for file in &found.theirs {
        let bytes = read(&file.path)?;
        let torn = reader.file(file, &bytes);
        files += 1;
        let new = &reader.warnings()[seen..];
        seen += new.len();
        for (i, message) in new.iter().enumerate() {
            let d = Damage { message: message.clone(), torn: torn && i + 1 == new.len() };
            // A server writing beanstalkd's format is beanstalkd itself,
            // when our log has no file.
            let writing = held.is_some() && newest_ours.is_none() && Some(file.number) == newest_theirs;
            if d.torn && writing {
                in_flight.push(d);
            } else {
                damage.push(d);
            }
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

fn read(path: &Path) -> Result<Vec<u8>, String> {
    fs::read(path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))
}
