//! Running it as a service: `-u`, systemd socket activation, the connection
//! cap.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin;

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
    let out = Command::new(cargo_bin("beanstalk"))
        .args(["-l", "127.0.0.1", "-p", "0", "-u", "no-such-user-here"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(33));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.ends_with(": getpwnam(\"no-such-user-here\"): no such user\n"), "{stderr}");
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
        .args(["-c", ACTIVATOR, cargo_bin("beanstalk").to_str().unwrap(), kind])
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
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
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
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
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
    let deadline = Instant::now() + Duration::from_secs(10);
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
    let binary = cargo_bin("beanstalk");
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -n 24 && exec \"$0\" -V -l 127.0.0.1 -p 0"])
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
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
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
