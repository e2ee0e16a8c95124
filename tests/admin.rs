//! Who may do what (reference §3.0, the promise `admin`; §7.1): with
//! `--admin-socket PATH`, the admin commands run only on connections to
//! that UNIX socket (mode 0600); on the main listener, TCP or UNIX, each
//! is answered `NOT_PERMITTED`, counts nothing, changes nothing, and `-V`
//! logs it. Without the flag nothing changes. Exact bytes, against the
//! real binary.
mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

use common::binary::{spawn, TempDir};

/// Every admin command, as a line the parser takes: the rows of the
/// table of commands (reference §3.0) that promise `admin`, so that a new
/// admin command is refused here with no word in this file.
fn admin_lines() -> Vec<String> {
    let lines: Vec<String> = common::table::rows()
        .iter()
        .filter(|row| row.promises.iter().any(|p| p == "admin"))
        .map(|row| row.example())
        .collect();
    assert!(lines.len() >= 9, "the admin commands of §3.0: {lines:?}");
    lines
}

/// Sends `bytes` over a UNIX socket connection and reads `expected.len()`
/// bytes of replies.
fn unix_exchange(s: &mut UnixStream, bytes: &str, expected: &str) {
    s.write_all(bytes.as_bytes()).unwrap();
    let mut got = vec![0; expected.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expected, "for {bytes:?}");
}

fn unix_client(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    s
}

#[test]
fn admin_commands_are_refused_over_tcp_and_run_on_the_admin_socket() {
    let dir = TempDir::new("admin");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--admin-socket", admin.to_str().unwrap()]);
    let mode = std::fs::metadata(&admin).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the admin socket's mode");
    let mut c = s.client();
    assert_eq!(c.put(0, 0, 60, "job"), "INSERTED 1\r\n");
    let admin_lines = admin_lines();
    for line in &admin_lines {
        assert_eq!(c.cmd(line), "NOT_PERMITTED\r\n", "{line} over TCP");
    }
    // Pipelined: the refusal and the next command, each answered.
    c.send("flush-tube default\r\nput 0 0 60 1\r\nx\r\nkick 1\r\n");
    c.expect("NOT_PERMITTED\r\nINSERTED 2\r\nNOT_PERMITTED\r\n");
    // Nothing was counted or changed.
    let stats = c.stats();
    assert_eq!((stats["cmd-kick"].as_str(), stats["cmd-pause-tube"].as_str()), ("0", "0"));
    assert_eq!((stats["current-jobs-ready"].as_str(), stats["draining"].as_str()), ("2", "false"));
    // The admin socket runs them.
    let mut a = unix_client(&admin);
    unix_exchange(&mut a, "pause-tube default 0\r\n", "PAUSED\r\n");
    unix_exchange(&mut a, "drain\r\nundrain\r\n", "DRAINING\r\nNOT_DRAINING\r\n");
    unix_exchange(&mut a, "flush-tube default\r\n", "FLUSHED 2\r\n");
    // And every other command too, as any connection does.
    unix_exchange(&mut a, "put 0 0 60 1\r\ny\r\n", "INSERTED 3\r\n");
    unix_exchange(&mut a, "reserve\r\nbury 3 0\r\nkick 1\r\n", "RESERVED 3 1\r\ny\r\nBURIED\r\nKICKED 1\r\n");
    let refusals = s.stderr().lines().filter(|line| line.contains(": admin socket only")).count();
    assert_eq!(refusals, admin_lines.len() + 2, "one -V line a refusal:\n{}", s.stderr());
    assert!(s.stderr().contains(" info beanstalk: refuse flush-tube from 127.0.0.1:"), "{}", s.stderr());
    let stderr = s.terminate();
    assert!(!admin.exists(), "the admin socket's file is removed at exit:\n{stderr}");
}

#[test]
fn a_unix_main_listener_is_refused_too_and_without_the_flag_nothing_changes() {
    let dir = TempDir::new("admin-unix");
    let (main, admin) = (dir.path.join("main.sock"), dir.path.join("admin.sock"));
    let listen = format!("unix:{}", main.display());
    let s = spawn(&["-l", &listen, "--admin-socket", admin.to_str().unwrap()]);
    let mut m = unix_client(&main);
    unix_exchange(&mut m, "put 0 0 60 1\r\nx\r\nclear-tube default\r\n", "INSERTED 1\r\nNOT_PERMITTED\r\n");
    unix_exchange(&mut unix_client(&admin), "clear-tube default\r\n", "CLEARED 1\r\n");
    drop(s);
    let plain = spawn(&[]);
    let mut c = plain.client();
    assert_eq!(c.put(0, 0, 60, "x"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("flush-tube default"), "FLUSHED 1\r\n");
    assert_eq!(c.cmd("drain"), "DRAINING\r\n");
}

#[test]
fn a_bad_admin_socket_stops_start_up() {
    let (code, stderr) = common::binary::run_to_exit(&[
        "-l",
        "127.0.0.1",
        "-p",
        "0",
        "--admin-socket",
        "/nonexistent/dir/admin.sock",
    ]);
    assert_eq!(code, Some(111), "{stderr}");
    assert!(stderr.contains("/nonexistent/dir/admin.sock"), "{stderr}");
    let (code, stderr) = common::binary::run_to_exit(&["-l", "127.0.0.1", "-p", "0", "--admin-socket", ""]);
    assert_eq!(code, Some(5), "{stderr}");
}

/// A client library meets the refusal as an error: greenstalk raises
/// `UnknownResponseError`, and its connection goes on.
#[test]
fn greenstalk_raises_on_the_refusal_and_goes_on() {
    if !common::python_has("greenstalk") {
        return;
    }
    let dir = TempDir::new("admin-greenstalk");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--admin-socket", admin.to_str().unwrap()]);
    let script = format!(
        "import greenstalk\n\
         c = greenstalk.Client(('127.0.0.1', {}))\n\
         try:\n    c.kick(1)\nexcept greenstalk.UnknownResponseError as e:\n    print('refused', e.status)\n\
         print(c.put('x'))\n",
        s.port()
    );
    let out = std::process::Command::new("python3").args(["-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "refused b'NOT_PERMITTED'\n1\n", "{}", String::from_utf8_lossy(&out.stderr));
}
