//! Running it as a service: `-u`, systemd socket activation, the connection
//! cap.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::binary::binary_path;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

#[test]
fn u_drops_to_the_user_uid_gid_and_groups_after_binding() {
    if !is_root() {
        eprintln!("skipped: -u needs root");
        return;
    }
    // Port 0 is chosen by the kernel; the bind happens before the drop.
    let server = common::binary::spawn(&["-u", "nobody"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let field = |name: &str| status.lines().find(|l| l.starts_with(name)).unwrap().to_owned();
    assert_eq!(field("Uid:").split_whitespace().skip(1).collect::<Vec<_>>(), ["65534"; 4]);
    assert_eq!(field("Gid:").split_whitespace().skip(1).collect::<Vec<_>>(), ["65534"; 4]);
    assert_eq!(field("Groups:").split_whitespace().skip(1).collect::<Vec<_>>(), ["65534"]);
    // And it still serves.
    assert_eq!(server.client().cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn u_with_an_unknown_user_exits_33() {
    let out = Command::new(binary_path())
        .args(["-l", "127.0.0.1", "-p", "0", "-u", "no-such-user-here"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(33));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.ends_with(": -u no-such-user-here: no such user in /etc/passwd\n"), "{stderr}");
}

/// A parent that binds a listening socket, puts it on fd 3, sets
/// LISTEN_PID/LISTEN_FDS for the child's own pid, and execs the server.
const ACTIVATOR: &str = r#"
import os, socket, sys
kind = sys.argv[2]
if kind == "tcp":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); where = str(s.getsockname()[1])
else:
    s = socket.socket(socket.AF_UNIX); where = sys.argv[3]; s.bind(where)
s.listen(16)
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
print(where, flush=True)
os.environ["LISTEN_PID"] = str(os.getpid())
os.environ["LISTEN_FDS"] = "1"
os.execv(sys.argv[1], [sys.argv[1], "-p", "11300"])
"#;

fn activated(kind: &str, extra: &[&str]) -> (std::process::Child, String, std::process::ChildStderr) {
    let mut child = Command::new("python3")
        .args(["-c", ACTIVATOR, binary_path().to_str().unwrap(), kind])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let stderr = child.stderr.take().unwrap();
    (child, line.trim().to_owned(), stderr)
}

fn ask(stream: &mut (impl Read + Write), send: &[u8], len: usize) -> String {
    stream.write_all(send).unwrap();
    let mut buf = vec![0; len];
    stream.read_exact(&mut buf).unwrap();
    String::from_utf8(buf).unwrap()
}

#[test]
fn socket_activation_serves_on_an_inherited_tcp_socket() {
    let (mut child, port, stderr) = activated("tcp", &[]);
    let mut s = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    assert_eq!(ask(&mut s, b"list-tube-used\r\n", 15), "USING default\r\n");
    let _ = child.kill();
    let _ = child.wait();
    let mut warnings = String::new();
    BufReader::new(stderr).read_to_string(&mut warnings).unwrap();
    assert!(warnings.contains("inherited listen fd; ignoring option: -p 11300"), "{warnings}");
}

#[test]
fn socket_activation_serves_on_an_inherited_unix_socket() {
    let dir = std::env::temp_dir().join(format!("beanstalk-activation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let (mut child, _, _stderr) = activated("unix", &[path.to_str().unwrap()]);
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    assert_eq!(ask(&mut s, b"put 0 0 1 1\r\nx\r\n", 12), "INSERTED 1\r\n");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn connections_past_the_cap_are_closed_and_existing_ones_keep_working() {
    let server = common::start_args(&["--max-connections", "2"]);
    let mut a = server.connect();
    let mut b = server.connect();
    assert_eq!(a.cmd("use a"), "USING a\r\n");
    assert_eq!(b.cmd("use b"), "USING b\r\n");
    let mut refused = server.connect();
    refused.expect_closed();
    assert_eq!(a.cmd("list-tube-used"), "USING a\r\n");
    drop(b);
    // Once a slot frees, new connections are served again.
    let deadline = Instant::now() + common::HANG_GUARD;
    loop {
        let mut c = TcpStream::connect(server.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.write_all(b"list-tube-used\r\n").unwrap();
        let mut buf = [0; 15];
        if c.read_exact(&mut buf).is_ok() {
            assert_eq!(&buf, b"USING default\r\n");
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn running_out_of_file_descriptors_is_logged_and_survived() {
    // A descriptor limit far below the connections about to be opened.
    let binary = binary_path();
    let mut child = Command::new("sh")
        // An explicit limit wins over the one the fd limit would give.
        .args(["-c", "ulimit -n 24 && exec \"$0\" -V -l 127.0.0.1 -p 0 --max-connections 100"])
        .arg(&binary)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines.next().expect("bind line").unwrap();
        if let Some(addr) = line.split(" bind ").nth(1) {
            break addr.rsplit(':').next().unwrap().parse().unwrap();
        }
    };
    let log = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
        s
    };
    let mut first = connect();
    assert_eq!(ask(&mut first, b"put 0 0 60 1\r\nx\r\n", 12), "INSERTED 1\r\n");
    let flood: Vec<TcpStream> = (0..40).map(|_| connect()).collect();
    std::thread::sleep(Duration::from_millis(300));
    // The server is alive and the connection it already had still works.
    assert_eq!(ask(&mut first, b"peek 1\r\n", 14), "FOUND 1 1\r\nx\r\n");
    drop(flood);
    // Once descriptors are free again, new connections are served.
    let mut late = connect();
    assert_eq!(ask(&mut late, b"reserve-with-timeout 5\r\n", 17), "RESERVED 1 1\r\nx\r\n");
    let _ = child.kill();
    let _ = child.wait();
    let log = log.join().unwrap();
    assert!(log.iter().any(|l| l.contains("accept: Too many open files")), "{log:?}");
}

/// Starts the binary as a host with small limits would: `sh -c 'ulimit -n
/// 64 && exec beanstalk -V ...'`, where `exec_with_limits` is the part before
/// the binary's name. Returns the child, the port it bound, the
/// `max-connections` line it logged, and the rest of its log (read on a
/// thread, collected when the child is gone).
fn start_limited(
    exec_with_limits: &str,
    args: &[&str],
) -> (std::process::Child, u16, String, std::thread::JoinHandle<Vec<String>>) {
    let script = format!("{exec_with_limits} \"$0\" -V -l 127.0.0.1 -p 0 \"$@\"");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .arg(binary_path())
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut port = None;
    let limit_line = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("the server exited before logging its connection limit");
        };
        if let Some(addr) = line.split(" bind ").nth(1) {
            port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
        }
        if let Some(at) = line.find("max-connections ") {
            break line[at..].to_owned();
        }
    };
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    (child, port.expect("bind line before the limit"), limit_line, rest)
}

#[test]
fn the_default_connection_limit_fits_the_fd_limit_and_says_so() {
    let (mut child, _, line, _) = start_limited("ulimit -n 64 && exec", &[]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(line, "max-connections 40 (RLIMIT_NOFILE 64 less 24 reserved)");
}

#[test]
fn an_explicit_connection_limit_wins_over_the_hosts() {
    let (mut child, _, line, _) = start_limited("ulimit -n 64 && exec", &["--max-connections", "500"]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(line, "max-connections 500 (--max-connections)");
}

/// A connection has no thread (the event loops serve them all), so a low
/// process limit neither caps the connections nor stops the server: the
/// fd limit does.
#[test]
fn the_default_connection_limit_is_not_the_process_limit() {
    // dash has no `ulimit -u`; python sets RLIMIT_NPROC the same way.
    // Only root can be sure of starting a few threads under a limit of 40
    // (root is not held to it; anyone else counts every process they run).
    if !is_root() {
        eprintln!("skipped: a low RLIMIT_NPROC may stop a non-root server from starting threads");
        return;
    }
    let limits = "exec python3 -c 'import os, resource, sys; \
                  resource.setrlimit(resource.RLIMIT_NPROC, (40, 40)); \
                  os.execv(sys.argv[1], sys.argv[1:])'";
    let (mut child, _, line, _) = start_limited(limits, &[]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("max-connections ") && line.contains("(RLIMIT_NOFILE "), "{line}");
}

#[test]
fn past_the_hosts_limit_connections_are_closed_cleanly_never_failing_accept() {
    // 40 connections fit under 64 descriptors; 12 more are closed at once,
    // and accept never runs out of descriptors.
    let (mut child, port, line, log) = start_limited("ulimit -n 64 && exec", &[]);
    assert_eq!(line, "max-connections 40 (RLIMIT_NOFILE 64 less 24 reserved)");
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
        s
    };
    let mut served: Vec<TcpStream> = (0..40).map(|_| connect()).collect();
    for s in &mut served {
        assert_eq!(ask(s, b"list-tube-used\r\n", 15), "USING default\r\n");
    }
    for _ in 0..12 {
        let mut refused = connect();
        let _ = refused.write_all(b"list-tube-used\r\n");
        let mut buf = [0; 16];
        // Closed without a reply: EOF, or a reset if our bytes arrived first.
        assert!(matches!(refused.read(&mut buf), Ok(0) | Err(_)));
    }
    assert_eq!(ask(&mut served[39], b"list-tube-used\r\n", 15), "USING default\r\n");
    let _ = child.kill();
    let _ = child.wait();
    let log = log.join().unwrap();
    assert_eq!(log.iter().filter(|l| l.contains("at the connection limit")).count(), 12, "{log:?}");
    assert!(!log.iter().any(|l| l.contains("accept:")), "{log:?}");
}

/// `-V` says what an operator wants to know: the replay at start, drain
/// mode, the signal that stops the server and what it kept.
#[test]
fn v_reports_replay_drain_and_shutdown() {
    let dir = common::binary::TempDir::new("events");
    let b = common::binary::arg(&dir.path);
    let server = common::binary::spawn(&["-b", b]);
    let mut c = server.client();
    let buried = common::put_bytes(&mut c, 0, 0, 60, b"a");
    common::put_bytes(&mut c, 0, 3600, 60, b"b");
    common::put_bytes(&mut c, 0, 0, 60, b"c");
    assert!(c.cmd(&format!("reserve-job {buried}")).starts_with("RESERVED"));
    assert_eq!(c.cmd(&format!("bury {buried} 0")), "BURIED\r\n");
    drop(c);
    let stderr = server.terminate();
    assert!(stderr.contains(": SIGTERM: shutting down\n"), "{stderr}");
    assert!(stderr.contains(" 3 jobs kept in the binlog\n"), "{stderr}");

    let server = common::binary::spawn(&["-b", b]);
    let stderr = server.stderr();
    let replay = stderr.lines().find(|l| l.contains(" replayed ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(replay.ends_with(": 1 ready job, 1 delayed job and 1 buried job"), "{replay}");
    server.signal("USR1");
    let deadline = Instant::now() + common::HANG_GUARD;
    while !server.stderr().contains(": drain mode: ") {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
    let stderr = server.terminate();
    assert!(stderr.contains(": SIGTERM: shutting down\n"), "{stderr}");
}

/// A `-b` directory that does not exist gets one line that says what to do,
/// naming the user the server runs as.
#[test]
fn a_missing_binlog_directory_says_what_to_do() {
    let (code, stderr) = common::binary::run_to_exit(&["-l", "127.0.0.1", "-p", "0", "-b", "/no/such/dir"]);
    assert_eq!(code, Some(10), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot use -b /no/such/dir: "), "{stderr}");
    assert!(stderr.contains("it must be an existing directory that the user the server runs as can write"));
    assert!(stderr.contains("(here: ") && stderr.contains("uid "), "{stderr}");
}

/// With `-u`, the UNIX socket the server creates is the user's, so that
/// clients running as that user can connect.
#[test]
fn u_hands_its_unix_socket_to_the_user() {
    if !is_root() {
        eprintln!("skipped: -u needs root");
        return;
    }
    let dir = common::binary::TempDir::new("u-socket");
    let path = dir.path.join("x.sock");
    let listen = format!("unix:{}", path.display());
    let _server = common::binary::spawn(&["-u", "nobody", "-l", &listen]);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    // A client running as nobody connects and is served.
    if !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("connecting as nobody skipped: no /usr/bin/python3");
        return;
    }
    let python = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
                  s.sendall(b'list-tube-used\\r\\n'); print(s.recv(64).decode(), end='')";
    let client = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", python])
        .arg(&path)
        .output();
    match client {
        Ok(out) if out.status.success() => {
            assert_eq!(String::from_utf8_lossy(&out.stdout), "USING default\r\n")
        }
        Ok(out) => panic!("as nobody: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("connecting as nobody skipped: setpriv or /usr/bin/python3 missing ({e})"),
    }
}

/// The README's systemd units (`tests/recipes/systemd/`) pass
/// `systemd-analyze verify` with no warning (an unknown or misspelt option
/// is one), with `ExecStart` pointing at this build.
#[test]
fn the_readmes_systemd_units_verify() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(version.status.success());
    let units = [
        ("beanstalk.service", include_str!("recipes/systemd/beanstalk.service")),
        ("beanstalk.socket", include_str!("recipes/systemd/beanstalk.socket")),
    ];
    let dir = common::binary::TempDir::new("units");
    let binary = binary_path();
    for (name, unit) in units {
        let unit = unit.replace("/usr/local/bin/beanstalk", binary.to_str().unwrap());
        std::fs::write(dir.path.join(name), unit).unwrap();
    }
    for name in ["beanstalk.service", "beanstalk.socket"] {
        let out = Command::new("systemd-analyze").arg("verify").arg(dir.path.join(name)).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
        // Only complaints about this machine (no such user, no systemd as
        // init) are tolerated; anything about the unit itself fails.
        let about_the_unit: Vec<&str> = said.lines().filter(|l| l.contains(name)).collect();
        assert!(out.status.success() && about_the_unit.is_empty(), "{name}:\n{said}");
    }
}

/// `-VV` logs every command and every reply, a job handed to a worker
/// blocked in reserve included.
#[test]
fn vv_logs_a_handed_over_job_on_both_sides() {
    let server = common::binary::spawn(&["-V"]);
    let mut worker = server.client();
    worker.send("reserve\r\n");
    let mut producer = server.client();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(producer.put(0, 0, 60, "x"), "INSERTED 1\r\n");
    assert_eq!(worker.reply(), "RESERVED 1 1\r\nx\r\n");
    let stderr = server.terminate();
    let replies: Vec<&str> = stderr.lines().filter(|l| l.contains(" reply ")).collect();
    assert!(replies.iter().any(|l| l.ends_with(" reply INSERTED 1")), "{stderr}");
    assert!(replies.iter().any(|l| l.ends_with(" reply RESERVED 1 1")), "{stderr}");
}

/// tuber's `drain` and `undrain` (reference §3.25): drain mode from a
/// client, as SIGUSR1 starts it, and its end; whole lines only.
#[test]
fn drain_and_undrain_start_and_end_drain_mode_from_a_client() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("drain"), "DRAINING\r\n");
    assert_eq!(c.cmd("drain"), "DRAINING\r\n");
    assert_eq!(c.put(0, 0, 60, "late"), "DRAINING\r\n");
    assert_eq!(c.stat("draining"), "true");
    assert_eq!(c.cmd("undrain"), "NOT_DRAINING\r\n");
    assert_eq!(c.cmd("undrain"), "NOT_DRAINING\r\n");
    assert_eq!(c.stat("draining"), "false");
    // The refused put used id 1 up (reference §3.1, step 7).
    assert_eq!(c.put(0, 0, 60, "on time"), "INSERTED 2\r\n");
    for line in ["drain ", "drainx", "undrain now"] {
        assert_eq!(c.cmd(line), "UNKNOWN_COMMAND\r\n", "{line}");
    }
}

/// `--conn-idle-timeout` (tuber's, issue 61): a connection that sends
/// nothing for that long is closed, but never one blocked in a reserve,
/// nor one that holds a reserved job; one that keeps talking stays.
#[test]
fn an_idle_connection_is_closed_but_never_a_waiting_or_working_one() {
    let server = common::binary::spawn(&["--conn-idle-timeout", "1"]);
    let mut idle = server.client();
    let mut working = server.client();
    assert_eq!(working.cmd("put 0 0 600 1\r\nx"), "INSERTED 1\r\n");
    assert_eq!(working.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    let mut waiting = server.client();
    waiting.send("reserve-with-timeout 30\r\n");
    let mut talking = server.client();
    let started = Instant::now();
    // The idle one ends within a few seconds; the talker is kept talking.
    idle.stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut byte = [0; 1];
    let ended = loop {
        match idle.stream.read(&mut byte) {
            Ok(0) => break started.elapsed(),
            Ok(_) => panic!("the idle connection was sent a byte"),
            Err(_) => {}
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the idle connection was never closed");
        assert_eq!(talking.cmd("list-tube-used"), "USING default\r\n");
    };
    assert!(ended >= Duration::from_millis(900), "closed after {ended:?}, before its second");
    // Past that, the waiting and the working ones are still served (and
    // the talker, quiet since, is not).
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(working.cmd("put 0 0 60 1\r\ny"), "INSERTED 2\r\n");
    assert_eq!(waiting.reply(), "RESERVED 2 1\r\ny\r\n");
    assert_eq!(working.cmd("delete 1"), "DELETED\r\n");
}

/// Issue 61: the README's migration under the shipped unit moves
/// beanstalkd's directory to the one the unit may write and passes to
/// `-b`, owned by the unit's user: the pair meet.
#[test]
fn the_readmes_migration_under_the_unit_uses_the_units_directory_and_user() {
    let unit = include_str!("recipes/systemd/beanstalk.service");
    let value = |key: &str| {
        unit.lines()
            .find_map(|line| line.strip_prefix(key))
            .unwrap_or_else(|| panic!("the unit has no {key}"))
    };
    let state = format!("/var/lib/{}", value("StateDirectory=").trim());
    let user = value("User=").trim();
    let exec = value("ExecStart=");
    assert!(exec.contains(&format!("-b {state}")), "the unit's -b is not its StateDirectory: {exec}");
    let readme = include_str!("../README.md");
    let block = readme
        .split("<!-- unit-migration")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("the README's migration under the unit");
    assert!(block.contains(&format!("mv /var/lib/beanstalkd {state} ")), "{block}");
    assert!(block.contains(&format!("chown -R {user}: {state}\n")), "{block}");
}
