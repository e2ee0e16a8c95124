//! What the server says on stderr: nothing at all, unless the program
//! running it turns this on. An embedded server is silent; the binary turns
//! it on at start-up with its own name as the prefix, at the verbosity its
//! `-V` flags ask for. (The write-ahead log is the binlog, never "the log"
//! in this code.)
//!
//! A line is one of four kinds, each with its syslog priority:
//!
//! - a **problem** (`<3>`, err) the operator must act on (a failed write
//!   or fsync, a thread that cannot start): printed whenever logging is on;
//! - a **warning** (`<4>`): something odd the server worked around (a
//!   damaged binlog file replayed around, a removed or clamped flag):
//!   printed whenever logging is on;
//! - an **event** (`<6>`, info; `-V`): start-up, replay, a connection
//!   opened or refused, drain mode, shutdown;
//! - a **trace** (`<7>`, debug; `-VV`): every command and every reply.
//!
//! Every line starts with what lets an operator filter it: when stderr is
//! the journal, the sd-daemon(3) priority prefix `<N>`, which journald
//! strips and files as the line's priority (so `journalctl -p warning`
//! shows problems and warnings alone); otherwise a UTC timestamp to the
//! millisecond and the priority's word (`error`, `warning`, `info`,
//! `debug`), so that `grep ' error '` finds the problems. Stderr is the
//! journal when `JOURNAL_STREAM` names its own device and inode, as
//! systemd.exec(5) asks a program to check: a service whose stderr was
//! sent elsewhere inherits the variable, and its lines are plain.
//!
//! It holds process-wide settings and nothing else, and never fails: a
//! line that cannot be written is dropped.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;

/// 0: silent. 1: problems and warnings. 2: and events (`-V`). 3: and
/// traces (`-VV`).
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// Lines start with a priority prefix (journal) instead of a timestamp.
static JOURNAL: AtomicBool = AtomicBool::new(false);

/// What each line starts with, before `": "`.
static PREFIX: OnceLock<String> = OnceLock::new();

/// The kinds of line, in the order `-V` flags add them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Problem,
    Warning,
    Event,
    Trace,
}

impl Kind {
    /// The verbosity level from which lines of this kind are written.
    fn level(self) -> u8 {
        match self {
            Kind::Problem | Kind::Warning => 1,
            Kind::Event => 2,
            Kind::Trace => 3,
        }
    }

    /// The syslog priority: sd-daemon(3)'s `<N>` prefix.
    pub fn priority(self) -> u8 {
        match self {
            Kind::Problem => 3,
            Kind::Warning => 4,
            Kind::Event => 6,
            Kind::Trace => 7,
        }
    }

    /// The priority's word, for a plain line.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Problem => "error",
            Kind::Warning => "warning",
            Kind::Event => "info",
            Kind::Trace => "debug",
        }
    }
}

/// Whether stderr is the journal: `JOURNAL_STREAM` (`DEVICE:INODE`, set by
/// systemd) names the very file stderr is, as systemd.exec(5) asks to
/// check; read from `/proc/self/fd/2`, which needs no system call std lacks.
fn stderr_is_the_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(named) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Some((device, inode)) = named.to_str().and_then(|s| s.split_once(':')) else { return false };
    let Ok(stderr) = std::fs::metadata("/proc/self/fd/2") else { return false };
    device.parse() == Ok(stderr.dev()) && inode.parse() == Ok(stderr.ino())
}

/// Turns logging on for the whole process: problems and warnings always,
/// events with `verbosity` 1 (`-V`), traces with 2 (`-VV`). Lines start
/// with a priority prefix if stderr is the journal, with a UTC timestamp
/// and the priority's word otherwise, then `program: `. Called once, by
/// the binary; later calls change the level only.
pub fn enable(program: &str, verbosity: u8) {
    let _ = PREFIX.set(program.to_owned());
    JOURNAL.store(stderr_is_the_journal(), Ordering::Relaxed);
    LEVEL.store(verbosity.saturating_add(1).min(3), Ordering::Relaxed);
}

/// Whether lines of `kind` are written: callers skip building costly ones.
pub fn enabled(kind: Kind) -> bool {
    LEVEL.load(Ordering::Relaxed) >= kind.level()
}

/// Writes one line of `kind`, if that kind is on.
pub fn line(kind: Kind, message: fmt::Arguments<'_>) {
    if enabled(kind) {
        let prefix = PREFIX.get().map_or("beanstalk", String::as_str);
        let start = LineStart { kind, journal: JOURNAL.load(Ordering::Relaxed) };
        // Made whole first, then one write: stderr is unbuffered, and a
        // line written piece by piece could be cut by another process's.
        // Made on the stack, not the heap: a line that says memory ran out
        // must not need memory. A longer line goes out in pieces.
        let mut buf = [0u8; 1024];
        let mut cursor = std::io::Cursor::new(&mut buf[..]);
        let whole = writeln!(cursor, "{start}{prefix}: {message}").is_ok();
        let made = cursor.position() as usize;
        let mut stderr = std::io::stderr().lock();
        let _ = if whole {
            stderr.write_all(&buf[..made])
        } else {
            writeln!(stderr, "{start}{prefix}: {message}")
        };
    }
}

/// What a line starts with: `<N>` for the journal, else the UTC time.
struct LineStart {
    kind: Kind,
    journal: bool,
}

impl fmt::Display for LineStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.journal {
            return write!(f, "<{}>", self.kind.priority());
        }
        let since_epoch =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let millis = since_epoch.as_millis() as u64;
        write!(f, "{} {} ", Utc(millis), self.kind.word())
    }
}

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub struct Utc(pub u64);

impl fmt::Display for Utc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0 / 1000;
        let (days, of_day) = (secs / 86_400, secs % 86_400);
        // Days to a civil date (H. Hinnant's algorithm), from 1970-01-01.
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z % 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            of_day / 3600,
            of_day / 60 % 60,
            of_day % 60,
            self.0 % 1000
        )
    }
}

/// `n` and the noun, agreeing in number: "1 job", "2 jobs".
pub struct Count(pub u64, pub &'static str);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Count(n, noun) = *self;
        write!(f, "{n} {noun}{}", if n == 1 { "" } else { "s" })
    }
}

/// Why the server cannot start, whether or not logging is on: with the
/// error priority under the journal, otherwise plainly, `program:
/// message`, as beanstalkd says it, for the scripts that read it.
pub fn fatal(program: &str, message: fmt::Arguments<'_>) {
    let priority = if stderr_is_the_journal() { "<3>" } else { "" };
    eprintln!("{priority}{program}: {message}");
}

/// A problem the operator must act on.
pub fn problem(message: fmt::Arguments<'_>) {
    line(Kind::Problem, message);
}

/// Something odd the server worked around.
pub fn warning(message: fmt::Arguments<'_>) {
    line(Kind::Warning, message);
}

/// An event `-V` shows.
pub fn event(message: fmt::Arguments<'_>) {
    line(Kind::Event, message);
}

/// A command or reply `-VV` shows.
pub fn trace(message: fmt::Arguments<'_>) {
    line(Kind::Trace, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_are_civil_dates() {
        assert_eq!(Utc(0).to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(Utc(951_782_400_000).to_string(), "2000-02-29T00:00:00.000Z");
        assert_eq!(Utc(1_795_000_000_123).to_string(), "2026-11-18T11:06:40.123Z");
    }

    #[test]
    fn counts_agree_in_number() {
        assert_eq!(Count(0, "job").to_string(), "0 jobs");
        assert_eq!(Count(1, "job").to_string(), "1 job");
        assert_eq!(Count(2, "file").to_string(), "2 files");
    }
}
