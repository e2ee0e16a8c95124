//! The binlog directory: who may use it, and what is in it.
//!
//! Before anything is read, `DIR/lock` is locked twice over: with `flock`,
//! which another server in this same process sees, and with an `fcntl` write
//! lock, which is the kind beanstalkd takes. So neither server starts on a
//! directory that the other is using.
//!
//! Then every entry whose name a log file could have is looked at, by its
//! first bytes and never by its name alone:
//!
//! - `beanstalk.N`: our log files, replayed by [`super::replay`].
//! - `binlog.N` in beanstalkd's format (version 7, or 5 from 1.4.x): jobs
//!   to import (`beanstalkd.rs`). A file of zeros only (beanstalkd
//!   died between creating a file and writing its version) holds nothing
//!   and is imported as empty.
//! - Anything else under those names (an unknown header, an unknown
//!   version, a directory, a symbolic link) stops start-up with one line
//!   naming it, and is left untouched: serving an empty queue over data we
//!   cannot read would lose it.
//!
//! This module renames, and never writes or deletes a log file's contents.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::record;
use super::BinlogError;

/// The prefix of our log files' names.
pub const OURS: &str = "beanstalk.";
/// The prefix of beanstalkd's.
pub const THEIRS: &str = "binlog.";
/// Where an import is written before it counts (see `import.rs`).
pub const IMPORT_TEMP: &str = "beanstalk.import";

/// Our files are renumbered from 1 when the highest number passes this, so
/// that counting up from it can never wrap.
const RENUMBER_ABOVE: u32 = 1 << 30;

/// Which of beanstalkd's formats a `binlog.N` file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Theirs {
    /// beanstalkd 1.5 and later.
    V7,
    /// beanstalkd 1.4.x.
    V5,
    /// Zeros only: created, but its version never written.
    Empty,
}

/// One of beanstalkd's files, to be imported.
#[derive(Debug, Clone)]
pub struct TheirFile {
    pub number: u64,
    pub path: PathBuf,
    pub format: Theirs,
}

/// What the directory holds.
#[derive(Debug, Default)]
pub struct Survey {
    /// Our files' numbers, oldest first.
    pub ours: Vec<u32>,
    /// beanstalkd's files, oldest first.
    pub theirs: Vec<TheirFile>,
    /// What was renamed, for the operator.
    pub notes: Vec<String>,
}

/// The path of our file number `n`.
pub fn our_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{OURS}{n}"))
}

/// [`our_path`], or `None` if the memory for it cannot be had: what the
/// server's log uses while it runs, where a failed allocation must not
/// abort.
pub fn try_our_path(dir: &Path, n: u32) -> Option<PathBuf> {
    use std::io::Write;
    let mut name = [0u8; 32];
    let mut cursor = std::io::Cursor::new(&mut name[..]);
    write!(cursor, "{OURS}{n}").ok()?;
    let len = cursor.position() as usize;
    let name = std::str::from_utf8(&name[..len]).ok()?;
    let mut path = std::ffi::OsString::new();
    path.try_reserve(dir.as_os_str().len() + 1 + len).ok()?;
    path.push(dir.as_os_str());
    path.push("/");
    path.push(name);
    Some(PathBuf::from(path))
}

/// Takes `DIR/lock`, creating it with mode 0600, never through a symbolic
/// link. The returned file must stay open for the life of the process: its
/// locks go when it is closed.
pub fn lock(dir: &Path) -> Result<File, BinlogError> {
    let path = dir.join("lock");
    let lock = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(crate::sys::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| match e.kind() {
            // What the operator fixes by making the directory, or giving
            // it to the server's user.
            io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied | io::ErrorKind::NotADirectory => {
                BinlogError::Unusable(dir.to_path_buf(), e)
            }
            _ => BinlogError::Lock(format!("cannot open {}: {e}", path.display())),
        })?;
    let in_use = || {
        BinlogError::Lock(format!(
            "cannot lock the -b directory {}: another server is using it",
            dir.display()
        ))
    };
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(in_use()),
        Err(fs::TryLockError::Error(e)) => {
            return Err(BinlogError::Lock(format!("cannot lock the -b directory {}: {e}", dir.display())))
        }
    }
    match crate::sys::lock_posix(&lock) {
        Ok(()) => Ok(lock),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(in_use()),
        Err(e) => Err(BinlogError::Lock(format!("cannot lock the -b directory {}: {e}", dir.display()))),
    }
}

/// Looks at every log-like entry of `dir`: renumbers ours if their numbers
/// grew too high, and refuses anything it cannot read.
pub fn survey(dir: &Path) -> Result<Survey, BinlogError> {
    let open_error = |e: io::Error| BinlogError::Open(format!("binlog {}: {e}", dir.display()));
    let mut survey = Survey::default();
    let mut ours: Vec<u32> = Vec::new();
    for entry in fs::read_dir(dir).map_err(open_error)? {
        let entry = entry.map_err(open_error)?;
        let Ok(name) = entry.file_name().into_string() else { continue };
        let path = entry.path();
        if name == IMPORT_TEMP {
            // An import that never finished: it does not count (see import.rs).
            fs::remove_file(&path).map_err(|e| refuse(&path, &format!("cannot remove it: {e}")))?;
            continue;
        }
        let (number, is_ours) = match (number_after(&name, OURS), number_after(&name, THEIRS)) {
            (Some(n), _) => (n, true),
            (_, Some(n)) => (n, false),
            _ => continue,
        };
        let kind = fs::symlink_metadata(&path).map_err(|e| refuse(&path, &e.to_string()))?.file_type();
        if !kind.is_file() {
            let what = if kind.is_symlink() {
                "a symbolic link"
            } else if kind.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            };
            return Err(refuse(&path, &format!("is {what}, not a log file")));
        }
        match (classify(&path).map_err(|e| refuse(&path, &e.to_string()))?, is_ours) {
            (Format::Ours, true) | (Format::Theirs(Theirs::Empty), true) => insert_sorted(
                &mut ours,
                u32::try_from(number).map_err(|_| refuse(&path, "its number is too large"))?,
            ),
            (Format::Ours, false) => {
                return Err(refuse(
                    &path,
                    "is in this server's format under beanstalkd's name; rename it beanstalk.N",
                ))
            }
            (Format::Theirs(format), false) => {
                let at = survey.theirs.partition_point(|f| f.number < number);
                survey.theirs.insert(at, TheirFile { number, path, format });
            }
            (Format::Theirs(_), true) => {
                return Err(refuse(&path, "is in beanstalkd's format under our name; rename it binlog.N"))
            }
            (Format::Unknown(why), _) => return Err(refuse(&path, &why)),
        }
    }
    if ours.last().is_some_and(|&n| n > RENUMBER_ABOVE) {
        renumber(dir, &mut ours, &mut survey.notes)?;
    }
    survey.ours = ours;
    if !survey.notes.is_empty() {
        super::sync_dir(dir).map_err(open_error)?;
    }
    Ok(survey)
}

/// Renames our files to 1, 2, 3, ... in order. Each new number is at most
/// the old one and the files go in ascending order, so at every moment
/// (a crash included) the files' order is unchanged.
fn renumber(dir: &Path, ours: &mut [u32], notes: &mut Vec<String>) -> Result<(), BinlogError> {
    for (new, old) in (1..).zip(ours.iter_mut()) {
        if *old == new {
            continue;
        }
        let (from, to) = (our_path(dir, *old), our_path(dir, new));
        fs::rename(&from, &to).map_err(|e| refuse(&from, &format!("cannot renumber it: {e}")))?;
        *old = new;
    }
    notes.push(format!("{}: log files renumbered from 1, their numbers had grown too large", dir.display()));
    Ok(())
}

/// Inserts `n` into the ascending `numbers`, which therefore never need a
/// sort. (A directory holds a handful of log files; this avoids a sort's
/// worth of code in a small binary.)
fn insert_sorted(numbers: &mut Vec<u32>, n: u32) {
    let at = numbers.partition_point(|&m| m < n);
    numbers.insert(at, n);
}

/// `N` from `PREFIXN`, if `N` is a plain decimal number as both servers
/// write it (no sign, no leading zero).
pub fn number_after(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    let plain = digits.bytes().all(|b| b.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
    let n: u64 = digits.parse().ok()?;
    plain.then_some(n)
}

fn refuse(path: &Path, why: &str) -> BinlogError {
    BinlogError::Open(format!(
        "{}: {why}; refusing to start. Move it out of the binlog directory, or restore it, then start again",
        path.display()
    ))
}

/// A file's format, by its first bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Format {
    /// Our header (any version this build reads), or the start of one
    /// followed by zeros: a crash while the file was being made.
    Ours,
    Theirs(Theirs),
    Unknown(String),
}

pub fn classify(path: &Path) -> io::Result<Format> {
    let mut file = File::open(path)?;
    let mut head = [0; record::HEADER_LEN];
    let got = read_up_to(&mut file, &mut head)?;
    let head = &head[..got];
    if head.iter().all(|&b| b == 0) {
        return Ok(if rest_is_zero(&mut file)? {
            Format::Theirs(Theirs::Empty)
        } else {
            Format::Unknown("it starts with zeros but holds data: not a log file".into())
        });
    }
    if head.starts_with(record::MAGIC) && got == record::HEADER_LEN {
        let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        return Ok(if record::READABLE_VERSIONS.contains(&version) {
            Format::Ours
        } else {
            Format::Unknown(format!(
                "beanstalk log format version {version}, which this build cannot read (it reads {}); \
                 run the newer beanstalk that wrote it",
                record::READABLE_VERSIONS_TEXT
            ))
        });
    }
    let header = record::header();
    let common = head.iter().zip(&header).take_while(|(a, b)| a == b).count();
    if common > 0 && head[common..].iter().all(|&b| b == 0) && rest_is_zero(&mut file)? {
        return Ok(Format::Ours);
    }
    let version = head.get(..4).map(|v| i32::from_le_bytes([v[0], v[1], v[2], v[3]]));
    Ok(match version {
        Some(7) => Format::Theirs(Theirs::V7),
        Some(5) => Format::Theirs(Theirs::V5),
        Some(v) => Format::Unknown(format!(
            "neither a beanstalk log nor a beanstalkd binlog (beanstalkd versions 5 and 7 are read; \
             this one starts with {v})"
        )),
        None => Format::Unknown(format!("only {got} bytes: too short to be a log file")),
    })
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub fn read_up_to(file: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

pub fn rest_is_zero(file: &mut impl Read) -> io::Result<bool> {
    let mut chunk = [0; 8192];
    loop {
        let n = read_up_to(file, &mut chunk)?;
        if chunk[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        if n < chunk.len() {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_numbers_are_log_names() {
        assert_eq!(number_after("binlog.7", THEIRS), Some(7));
        assert_eq!(number_after("beanstalk.12", OURS), Some(12));
        for name in ["binlog.007", "binlog.+7", "binlog.7.corrupt", "binlog.", "binlog.x", "lock"] {
            assert_eq!(number_after(name, THEIRS), None, "{name}");
        }
    }
}
