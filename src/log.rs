//! What the server says on stderr: nothing at all, unless the program
//! running it turns this on. An embedded server is silent; the binary turns
//! it on at start-up with its own name as the prefix, at the verbosity its
//! `-V` flags ask for. (The write-ahead log is the binlog, never "the log"
//! in this code.)
//!
//! A line is one of three kinds:
//!
//! - a **problem** the operator must hear of (a failed fsync, a damaged
//!   log file replayed around): printed whenever logging is on;
//! - an **event** (`-V`): start-up, replay, a connection opened or
//!   refused, drain mode, shutdown;
//! - a **trace** (`-VV`): every command and every reply.
//!
//! It holds process-wide settings and nothing else, and never fails: a
//! line that cannot be written is dropped.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// 0: silent. 1: problems. 2: and events (`-V`). 3: and traces (`-VV`).
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// What each line starts with, before `": "`.
static PREFIX: OnceLock<String> = OnceLock::new();

/// The kinds of line, in the order `-V` flags add them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Problem = 1,
    Event = 2,
    Trace = 3,
}

/// Turns logging on for the whole process: problems always, events with
/// `verbosity` 1 (`-V`), traces with 2 (`-VV`). Lines start with
/// `program: `. Called once, by the binary; later calls change the level
/// only.
pub fn enable(program: &str, verbosity: u8) {
    let _ = PREFIX.set(program.to_owned());
    LEVEL.store(verbosity.saturating_add(1).min(Kind::Trace as u8), Ordering::Relaxed);
}

/// Whether lines of `kind` are written: callers skip building costly ones.
pub fn enabled(kind: Kind) -> bool {
    LEVEL.load(Ordering::Relaxed) >= kind as u8
}

/// Writes one line of `kind`, if that kind is on.
pub fn line(kind: Kind, message: fmt::Arguments<'_>) {
    if enabled(kind) {
        let prefix = PREFIX.get().map_or("beanstalk", String::as_str);
        // Made whole first, then one write: stderr is unbuffered, and a
        // line written piece by piece could be cut by another process's.
        // Made on the stack, not the heap: a line that says memory ran out
        // must not need memory. A longer line goes out in pieces.
        let mut buf = [0u8; 1024];
        let mut cursor = std::io::Cursor::new(&mut buf[..]);
        let whole = writeln!(cursor, "{prefix}: {message}").is_ok();
        let made = cursor.position() as usize;
        let mut stderr = std::io::stderr().lock();
        let _ = if whole { stderr.write_all(&buf[..made]) } else { writeln!(stderr, "{prefix}: {message}") };
    }
}

/// A problem the operator must hear of.
pub fn problem(message: fmt::Arguments<'_>) {
    line(Kind::Problem, message);
}

/// An event `-V` shows.
pub fn event(message: fmt::Arguments<'_>) {
    line(Kind::Event, message);
}

/// A command or reply `-VV` shows.
pub fn trace(message: fmt::Arguments<'_>) {
    line(Kind::Trace, message);
}
