//! What the real binary writes on stderr with `-V`: under the journal
//! (`JOURNAL_STREAM` naming stderr's own device and inode) every line
//! starts with its sd-daemon priority, otherwise (no `JOURNAL_STREAM`, or
//! one naming another file: stderr redirected) with a UTC timestamp and
//! the priority's word; a connection's lines name its peer, `-VV`'s too.
mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{SystemTime, UNIX_EPOCH};

use common::binary::beanstalk;
use common::Client;

/// Where `JOURNAL_STREAM` points.
#[derive(Clone, Copy, PartialEq)]
enum Journal {
    /// At the child's stderr: it is the journal.
    Stderr,
    /// At another file: stderr was redirected, as a unit's
    /// `StandardError=file:` does while the variable is inherited.
    Elsewhere,
    /// Not set.
    Unset,
}

/// Gives `command` a socket for stderr, with `JOURNAL_STREAM` as `journal`
/// says; returns our end.
fn stderr_to_socket(command: &mut Command, journal: Journal) -> UnixStream {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let meta = std::fs::metadata(format!("/proc/self/fd/{}", theirs.as_raw_fd())).unwrap();
    command.stderr(Stdio::from(OwnedFd::from(theirs)));
    match journal {
        Journal::Stderr => command.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino())),
        Journal::Elsewhere => command.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino() + 1)),
        Journal::Unset => command.env_remove("JOURNAL_STREAM"),
    };
    ours
}

/// Starts the binary with `-V -c` (`-c` gives a warning line) and more
/// `args`, `JOURNAL_STREAM` as `journal` says; the lines up to the `bind`
/// line, and the later ones on the channel.
fn start(journal: Journal, args: &[&str]) -> (Child, SocketAddr, Vec<String>, mpsc::Receiver<String>) {
    let mut command = beanstalk();
    command.args(["-V", "-c", "-l", "127.0.0.1", "-p", "0"]).args(args);
    let pipe = stderr_to_socket(&mut command, journal);
    let child = command.spawn().unwrap();
    drop(command);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut first = Vec::new();
    let addr = loop {
        let line = next(&rx);
        let bound = line.split(" bind ").nth(1).map(|rest| rest.split(' ').nth(1).unwrap().parse().unwrap());
        first.push(line);
        if let Some(addr) = bound {
            break addr;
        }
    };
    (child, addr, first, rx)
}

fn next(rx: &mpsc::Receiver<String>) -> String {
    rx.recv_timeout(common::HANG_GUARD).expect("a line on stderr")
}

/// Connects, runs a command, hangs up: the server logs `accept` and
/// `close`. Returns the client's own address, which those lines name.
fn visit(addr: SocketAddr) -> SocketAddr {
    let mut c = Client::connect(addr);
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    c.stream.local_addr().unwrap()
}

/// The lines up to and including the one containing `until`.
fn lines_until(rx: &mpsc::Receiver<String>, until: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let line = next(rx);
        let done = line.contains(until);
        lines.push(line);
        if done {
            return lines;
        }
    }
}

#[test]
fn under_the_journal_every_line_starts_with_its_priority() {
    let (mut child, addr, mut lines, rx) = start(Journal::Stderr, &[]);
    let me = visit(addr);
    lines.extend(lines_until(&rx, "close "));
    let _ = child.kill();
    let _ = child.wait();
    for line in &lines {
        let priority = line.strip_prefix('<').and_then(|rest| rest.split_once(">beanstalk: "));
        assert!(priority.is_some_and(|(p, _)| matches!(p, "3" | "4" | "6" | "7")), "{line}");
    }
    assert!(
        lines.contains(&"<4>beanstalk: -c flag was removed. binlog is always compacted.".to_owned()),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("<6>beanstalk: max-connections ")), "{lines:?}");
    let accept = lines.iter().find(|l| l.contains(": accept ")).unwrap();
    assert!(accept.starts_with(&format!("<6>beanstalk: accept {me} (fd ")), "{accept}");
    let close = lines.last().unwrap();
    assert!(close.starts_with(&format!("<6>beanstalk: close {me} (fd ")), "{close}");
}

#[test]
fn otherwise_every_line_starts_with_the_utc_time_and_its_priority() {
    for journal in [Journal::Unset, Journal::Elsewhere] {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let (mut child, addr, mut lines, rx) = start(journal, &[]);
        let me = visit(addr);
        lines.extend(lines_until(&rx, "close "));
        let _ = child.kill();
        let _ = child.wait();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        for line in &lines {
            // 2026-11-26T09:17:24.350Z info beanstalk: ...
            let (stamp, rest) = line.split_once(' ').unwrap();
            let (word, rest) = rest.split_once(' ').unwrap();
            assert!(["error", "warning", "info", "debug"].contains(&word), "{line}");
            assert!(rest.starts_with("beanstalk: "), "{line}");
            let secs = unix_secs(stamp).unwrap_or_else(|| panic!("no UTC time: {line}"));
            assert!((before..=after).contains(&secs), "{line}: {secs} not in {before}..={after}");
        }
        let accept = format!(" info beanstalk: accept {me} (fd ");
        assert!(lines.iter().any(|l| l.contains(&accept)), "{lines:?}");
        let warning = " warning beanstalk: -c flag was removed. binlog is always compacted.";
        assert!(lines.iter().any(|l| l.ends_with(warning)), "{lines:?}");
    }
}

/// `-VV`: every command and reply, named by the client's address.
#[test]
fn traces_name_the_client() {
    let (mut child, addr, _, rx) = start(Journal::Unset, &["-V"]);
    let me = visit(addr);
    let lines = lines_until(&rx, "close ");
    let _ = child.kill();
    let _ = child.wait();
    let command = format!(" debug beanstalk: <{me} (fd ");
    let line = lines.iter().find(|l| l.contains(&command)).unwrap_or_else(|| panic!("{lines:?}"));
    assert!(line.ends_with(") command list-tube-used"), "{line}");
    let reply = format!(" debug beanstalk: >{me} (fd ");
    let line = lines.iter().find(|l| l.contains(&reply)).unwrap_or_else(|| panic!("{lines:?}"));
    assert!(line.ends_with(") reply USING default"), "{line}");
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` as seconds since the Unix epoch.
fn unix_secs(stamp: &str) -> Option<u64> {
    let b = stamp.as_bytes();
    let shape = b.len() == 24
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[23] == b'Z';
    if !shape {
        return None;
    }
    let n = |from: usize, to: usize| stamp[from..to].parse::<u64>().ok();
    let (year, month, day) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (hour, minute, second) = (n(11, 13)?, n(14, 16)?, n(17, 19)?);
    n(20, 23)?;
    // Days from the epoch to the date (H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

#[test]
fn a_failed_start_is_an_error_under_the_journal_and_plain_elsewhere() {
    use std::io::Read;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    for (journal, start) in [(Journal::Stderr, "<3>beanstalk: "), (Journal::Elsewhere, "beanstalk: ")] {
        let mut command = beanstalk();
        command.args(["-l", "127.0.0.1", "-p", &port]);
        let mut pipe = stderr_to_socket(&mut command, journal);
        let status = command.status().unwrap();
        drop(command);
        assert_eq!(status.code(), Some(111));
        let mut stderr = String::new();
        pipe.read_to_string(&mut stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with(start), "{stderr}");
        assert!(stderr.contains("Address already in use"), "{stderr}");
    }
}
