//! Signals sent to the real binary: SIGTERM and SIGINT stop it cleanly,
//! SIGUSR1 puts it in drain mode.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;

/// A server child process, killed if a test fails before it exits.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &[&str]) -> Server {
    let mut child = Command::cargo_bin("beanstalk")
        .unwrap()
        .args(["-V", "-l", "127.0.0.1", "-p", "0"])
        .args(extra)
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
    std::thread::spawn(move || lines.for_each(drop));
    Server { child, port }
}

fn signal(server: &Server, name: &str) {
    let status =
        Command::new("sh").args(["-c", &format!("kill -{name} {}", server.child.id())]).status().unwrap();
    assert!(status.success());
}

/// Waits for the child to exit; returns its exit code and how long it took.
fn wait_exit(server: &mut Server, limit: Duration) -> (Option<i32>, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            return (status.code(), start.elapsed());
        }
        assert!(start.elapsed() < limit, "server still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn exchange(s: &mut TcpStream, send: &[u8], len: usize) -> String {
    s.write_all(send).unwrap();
    let mut buf = vec![0; len];
    s.read_exact(&mut buf).unwrap();
    String::from_utf8(buf).unwrap()
}

#[test]
fn sigterm_exits_0_within_a_second_even_with_clients_connected() {
    let mut server = start(&[]);
    let mut idle = connect(server.port);
    let mut waiting = connect(server.port);
    assert_eq!(exchange(&mut idle, b"use t\r\n", 9), "USING t\r\n");
    waiting.write_all(b"reserve\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    signal(&server, "TERM");
    let (code, took) = wait_exit(&mut server, Duration::from_secs(5));
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // The blocked reserve was answered before the connection closed.
    let mut rest = String::new();
    let _ = waiting.read_to_string(&mut rest);
    assert_eq!(rest, "TIMED_OUT\r\n");
}

#[test]
fn sigint_exits_0() {
    let mut server = start(&[]);
    signal(&server, "INT");
    assert_eq!(wait_exit(&mut server, Duration::from_secs(5)).0, Some(0));
}

#[test]
fn sigusr1_drains_puts_but_nothing_else() {
    let server = start(&[]);
    let mut c = connect(server.port);
    assert_eq!(exchange(&mut c, b"put 0 0 1 1\r\na\r\n", 12), "INSERTED 1\r\n");
    signal(&server, "USR1");
    // The signal is handled on another thread: wait until it has taken effect.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = exchange(&mut c, b"put 0 0 1 1\r\nb\r\n", 10);
        if reply == "DRAINING\r\n" {
            break;
        }
        assert_eq!(&reply[..9], "INSERTED ");
        c.read_exact(&mut [0; 2]).unwrap(); // the rest of "INSERTED n\r\n"
        assert!(Instant::now() < deadline, "never drained");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(exchange(&mut c, b"reserve-with-timeout 0\r\n", 14), "RESERVED 1 1\r\n");
    c.write_all(b"stats\r\n").unwrap();
    let mut stats = String::new();
    while !stats.contains("\nplatform: ") {
        let mut chunk = [0; 4096];
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "closed");
        stats.push_str(&String::from_utf8_lossy(&chunk[..n]));
    }
    assert!(stats.contains("\ndraining: true\n"), "{stats}");
}

#[test]
fn sigterm_removes_the_unix_socket_it_created() {
    let dir = std::env::temp_dir().join(format!("beanstalk-signals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sock");
    let child = Command::cargo_bin("beanstalk")
        .unwrap()
        .args(["-l", &format!("unix:{}", path.display())])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server { child, port: 0 };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "socket never appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(&server, "TERM");
    assert_eq!(wait_exit(&mut server, Duration::from_secs(5)).0, Some(0));
    assert!(!path.exists(), "socket file left behind");
    let _ = std::fs::remove_dir_all(&dir);
}
