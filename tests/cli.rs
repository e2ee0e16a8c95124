//! The command line, as a user or an init script meets it: the real binary,
//! its flags, its messages and its exit codes.
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

use common::binary::{self, TempDir};

fn beanstalk() -> Command {
    Command::new(binary::binary_path())
}

/// Runs the binary to completion and returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = beanstalk().args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn talk(port: u16, send: &[u8], expect_len: usize) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    s.write_all(send).unwrap();
    let mut buf = vec![0; expect_len];
    s.read_exact(&mut buf).unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

#[test]
fn help_prints_usage_to_stdout_and_exits_0() {
    for flag in ["-h", "--help"] {
        let (code, stdout, stderr) = run(&[flag]);
        assert_eq!((code, stderr.as_str()), (0, ""), "{flag}");
        assert!(stdout.contains("Options:\n -b DIR   write-ahead log directory\n"), "{stdout}");
        assert!(stdout.contains(" -h       show this help (also --help)\n"));
    }
}

#[test]
fn version_prints_to_stdout_and_exits_0() {
    for flag in ["-v", "--version"] {
        let (code, stdout, _) = run(&[flag]);
        assert_eq!(code, 0);
        assert!(stdout.starts_with("beanstalk "), "{stdout}");
    }
}

#[test]
fn bad_flags_exit_5_with_one_clear_line_then_usage() {
    for (args, message) in [
        (&["-x"][..], "unknown flag: -x"),
        (&["-Vx"], "unknown flag: Vx"),
        (&["-p"], "flag requires an argument: -p"),
        (&["-z", "abc"], "invalid size: abc"),
        (&["foo"], "unknown argument: foo"),
    ] {
        let (code, _, stderr) = run(args);
        assert_eq!(code, 5, "{args:?}");
        let first = stderr.lines().next().unwrap();
        assert!(first.ends_with(&format!(": {message}")), "{args:?}: {first}");
        assert!(stderr.contains("Use: "), "{args:?}");
    }
}

#[test]
fn a_port_in_use_exits_111_with_one_line() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (code, _, stderr) = run(&["-l", "127.0.0.1", "-p", &port]);
    assert_eq!(code, 111);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Address already in use"), "{stderr}");
}

/// A start whose address space cannot hold the server's reserve and one
/// connection says so in one line and exits 1, before it binds: no abort
/// at an allocation, no thread that cannot start.
#[test]
fn a_start_short_of_memory_exits_1_with_one_line() {
    use beanstalk::host::{ADDRESS_SPACE_PER_CONNECTION, RESERVED_ADDRESS_SPACE};
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 10000 && exec \"$0\" -l 127.0.0.1 -p 0"])
        .arg(binary::binary_path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("beanstalk: too little memory to serve: RLIMIT_AS 10240000 less "),
        "{stderr}"
    );
    let end = format!(
        " in use leaves less than the {RESERVED_ADDRESS_SPACE} reserved and {ADDRESS_SPACE_PER_CONNECTION} bytes \
         a connection\n"
    );
    assert!(stderr.ends_with(&end), "{stderr}");
}

#[test]
fn removed_flags_warn_and_the_server_still_runs() {
    let server = binary::spawn(&["-c", "-n"]);
    let port = server.port();
    assert_eq!(talk(port, b"put 0 0 1 1\r\nx\r\n", 12), "INSERTED 1\r\n");
}

#[test]
fn z_sets_the_largest_job() {
    let server = binary::spawn(&["-z", "3"]);
    let port = server.port();
    assert_eq!(
        talk(port, b"put 0 0 1 4\r\nabcd\r\nput 0 0 1 3\r\nabc\r\n", 25),
        "JOB_TOO_BIG\r\nINSERTED 1\r\n"
    );
}

#[test]
fn listens_on_a_unix_socket() {
    let dir = TempDir::new("cli-unix");
    let path = dir.path.join("sock");
    let _server = binary::spawn(&["-l", &format!("unix:{}", path.display())]);
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.write_all(b"list-tube-used\r\n").unwrap();
    let mut buf = [0; 15];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"USING default\r\n");
}

#[test]
fn a_regular_file_at_the_socket_path_is_not_replaced() {
    let dir = TempDir::new("cli-file");
    let path = dir.path.join("not-a-socket");
    std::fs::write(&path, "keep me").unwrap();
    let (code, _, stderr) = run(&["-l", &format!("unix:{}", path.display())]);
    assert_eq!(code, 111);
    assert!(stderr.contains("another file already exists in the given path"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
}

/// `--health-check` with `args` against a server that serves: its exit
/// code, stdout and stderr. A loaded machine may keep the check past its
/// own patience ("no answer within 5 s", as a container's runtime would
/// see it too); then it is asked again, until the hang guard.
fn health_check_of_a_serving_server(args: &[&str]) -> (i32, String, String) {
    let deadline = std::time::Instant::now() + common::HANG_GUARD;
    loop {
        let (code, stdout, stderr) = run(args);
        if !(code == 1 && stderr.contains(": no answer within ")) || std::time::Instant::now() >= deadline {
            return (code, stdout, stderr);
        }
    }
}

/// `--health-check` (a container's health check): exit 0 and silence
/// while the server that `-l` and `-p` name serves, exit 1 and one line
/// once it does not; over TCP and a UNIX socket.
#[test]
fn the_health_check_says_whether_the_server_serves() {
    let server = binary::spawn(&[]);
    let port = server.port().to_string();
    let check = ["--health-check", "-l", "127.0.0.1", "-p", &port];
    assert_eq!(health_check_of_a_serving_server(&check), (0, String::new(), String::new()));
    drop(server.terminate());
    let (code, stdout, stderr) = run(&["--health-check", "-l", "127.0.0.1", "-p", &port]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with(&format!("beanstalk: not healthy: 127.0.0.1:{port}: ")), "{stderr}");

    let dir = TempDir::new("cli-health");
    let listen = format!("unix:{}", dir.path.join("sock").display());
    let server = binary::spawn(&["-l", &listen]);
    assert_eq!(health_check_of_a_serving_server(&["-l", &listen, "--health-check"]).0, 0);
    drop(server.terminate());
    assert_eq!(run(&["-l", &listen, "--health-check"]).0, 1);
}

/// A hung server (it accepts, and never answers) is reported as one,
/// not as the socket's `EAGAIN`.
#[test]
fn the_health_check_reports_a_hung_server_as_no_answer() {
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hung.local_addr().unwrap().port().to_string();
    let (code, stdout, stderr) = run(&["--health-check", "-l", "127.0.0.1", "-p", &port]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert_eq!(stderr, format!("beanstalk: not healthy: 127.0.0.1:{port}: no answer within 5 s\n"));
    drop(hung);
}

/// Every flag the parser accepts, found by asking the parser itself.
fn accepted_flags() -> Vec<String> {
    use beanstalk::config::{parse_args, ArgError, LONG_OPTIONS};
    let mut flags: Vec<String> = ('a'..='z')
        .chain('A'..='Z')
        .map(|c| format!("-{c}"))
        .filter(|flag| !matches!(parse_args([flag.as_str()]), Err(ArgError::UnknownFlag(_))))
        .collect();
    flags.extend(LONG_OPTIONS.iter().map(|o| format!("--{o}")));
    flags
}

#[test]
fn every_accepted_flag_is_documented_in_the_help_the_man_page_and_the_readme() {
    let mut flags = accepted_flags();
    // The flags that act instead of serving, beside those that configure it.
    flags.extend(["--health-check", "--help", "--version"].map(str::to_owned));
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table =
        readme.split("\n## Flags\n").nth(1).expect("the README's Flags").split("\n## ").next().unwrap();
    let named: Vec<&str> =
        table.lines().filter_map(|row| row.strip_prefix("| ")?.split(" |").next()).collect();
    for flag in &flags {
        let in_row = |cell: &&str| cell.contains(&format!("`{flag}`")) || cell.contains(&format!("`{flag} "));
        assert!(named.iter().any(in_row), "{flag} has no row in the README's Flags table");
    }
    assert!(flags.len() >= 14, "{flags:?}");
    let (_, help, _) = run(&["-h"]);
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/beanstalk.1")).unwrap();
    for flag in &flags {
        assert!(help.contains(&format!(" {flag}")), "{flag} missing from -h");
        // roff spells a dash \-.
        let roff = flag.replace('-', "\\-");
        let lines: Vec<&str> = man.lines().collect();
        let documented = lines.windows(2).any(|w| w[0] == ".TP" && w[1].contains(&roff));
        assert!(documented, "{flag} has no OPTIONS entry in beanstalk.1");
    }
}
