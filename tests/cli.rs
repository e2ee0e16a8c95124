//! The command line, as a user or an init script meets it: the real binary,
//! its flags, its messages and its exit codes.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;

fn beanstalk() -> Command {
    Command::cargo_bin("beanstalk").unwrap()
}

/// Runs the binary to completion and returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = beanstalk().args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// A child server that is killed when dropped.
struct Child_(Child);
impl Drop for Child_ {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary with `-V` on a port the OS picks and returns it with
/// the port it bound (read from its `bind` log line).
fn spawn(args: &[&str]) -> (Child_, u16) {
    let mut child = beanstalk()
        .args(["-V", "-l", "127.0.0.1", "-p", "0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let port = loop {
        let line = lines.next().expect("bind line").unwrap();
        if let Some(addr) = line.split(" bind ").nth(1) {
            break addr.rsplit(':').next().unwrap().parse().unwrap();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (Child_(child), port)
}

fn talk(port: u16, send: &[u8], expect_len: usize) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(send).unwrap();
    let mut buf = vec![0; expect_len];
    s.read_exact(&mut buf).unwrap();
    String::from_utf8_lossy(&buf).into_owned()
}

#[test]
fn help_prints_usage_to_stderr_and_exits_0() {
    let (code, stdout, stderr) = run(&["-h"]);
    assert_eq!(code, 0);
    assert_eq!(stdout, "");
    assert!(stderr.contains("Options:\n -b DIR   write-ahead log directory\n"), "{stderr}");
    assert!(stderr.contains(" -h       show this help\n"));
}

#[test]
fn version_prints_to_stdout_and_exits_0() {
    let (code, stdout, _) = run(&["-v"]);
    assert_eq!(code, 0);
    assert!(stdout.starts_with("beanstalk "), "{stdout}");
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

#[test]
fn removed_flags_warn_and_the_server_still_runs() {
    let (_server, port) = spawn(&["-c", "-n"]);
    assert_eq!(talk(port, b"put 0 0 1 1\r\nx\r\n", 12), "INSERTED 1\r\n");
}

#[test]
fn z_sets_the_largest_job() {
    let (_server, port) = spawn(&["-z", "3"]);
    assert_eq!(
        talk(port, b"put 0 0 1 4\r\nabcd\r\nput 0 0 1 3\r\nabc\r\n", 25),
        "JOB_TOO_BIG\r\nINSERTED 1\r\n"
    );
}

#[test]
fn listens_on_a_unix_socket() {
    let dir = std::env::temp_dir().join(format!("beanstalk-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let listen = format!("unix:{}", path.display());
    let _server = Child_(beanstalk().args(["-l", &listen]).stderr(Stdio::null()).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("connect: {e}"),
        }
    };
    s.write_all(b"list-tube-used\r\n").unwrap();
    let mut buf = [0; 15];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"USING default\r\n");
    drop(s);
    drop(_server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_regular_file_at_the_socket_path_is_not_replaced() {
    let dir = std::env::temp_dir().join(format!("beanstalk-cli-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("not-a-socket");
    std::fs::write(&path, "keep me").unwrap();
    let (code, _, stderr) = run(&["-l", &format!("unix:{}", path.display())]);
    assert_eq!(code, 111);
    assert!(stderr.contains("another file already exists in the given path"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    let _ = std::fs::remove_dir_all(&dir);
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
fn every_accepted_flag_is_documented_in_the_help_and_the_man_page() {
    let flags = accepted_flags();
    assert!(flags.len() >= 14, "{flags:?}");
    let (_, _, help) = run(&["-h"]);
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
