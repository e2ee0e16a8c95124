//! Shared helpers for the integration tests: start a server on an ephemeral
//! loopback port, talk raw bytes to it, and assert the exact bytes back.
#![allow(dead_code)]

pub mod beanstalkd;
pub mod binary;
pub mod helper;
/// The table of commands (reference §3.0), read by the lib's own reader.
#[path = "../../src/reference/commands.rs"]
pub mod table;
pub mod wire;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use beanstalk::config::{parse_args, Action, Listen};
use beanstalk::{Config, Running, Server};

/// How long a test waits for something that must happen (a reply, a
/// start, an exit, a state it polls for) before it calls it a hang. Only a
/// guard against hanging for ever: a loaded machine (other builds, CPU
/// burners, a load of 4.5) can take many seconds over what takes
/// milliseconds when idle, and a test must not fail for that. No test
/// asserts an upper bound on a time or a rate.
pub const HANG_GUARD: Duration = Duration::from_secs(300);

/// How long any single expected reply may take before a test fails.
pub const REPLY_TIMEOUT: Duration = HANG_GUARD;

/// A `reserve-with-timeout` for a job that must come (a delay or a TTR
/// running out, a job let go): the server's own timeout is the hang guard.
pub fn reserve_guarded() -> String {
    format!("reserve-with-timeout {}", HANG_GUARD.as_secs())
}

/// A server running in this process on 127.0.0.1 and a free port. Stops
/// when dropped.
pub struct TestServer {
    pub running: Running,
    pub addr: SocketAddr,
}

/// A server with the default configuration.
pub fn start() -> TestServer {
    start_with(Config::loopback())
}

/// A server configured by beanstalkd-style flags (`-z 10`, ...); it always
/// listens on 127.0.0.1 and a free port whatever `-l`/`-p` say.
pub fn start_args(args: &[&str]) -> TestServer {
    let Ok(Action::Run(beanstalk::config::CommandLine { mut config, .. })) = parse_args(args.iter().copied())
    else {
        panic!("bad test flags {args:?}");
    };
    config.listen = Listen::Tcp { host: "127.0.0.1".into(), port: 0 };
    start_with(config)
}

pub fn start_with(config: Config) -> TestServer {
    let server = Server::bind(config).expect("bind");
    let running = server.spawn().expect("spawn");
    let addr = running.local_addr().expect("tcp address");
    TestServer { running, addr }
}

impl TestServer {
    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }
}

/// One raw client connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        Client { stream, buf: Vec::new() }
    }

    /// Sends raw bytes.
    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.stream.write_all(bytes.as_ref()).expect("send");
    }

    /// Sends `line` plus CRLF and returns the whole reply (header line with
    /// its CRLF, plus data and its CRLF for OK/FOUND/RESERVED).
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n"));
        self.reply()
    }

    /// Reads one whole reply, as [`Client::cmd`] returns it.
    pub fn reply(&mut self) -> String {
        String::from_utf8_lossy(&self.reply_bytes()).into_owned()
    }

    pub fn reply_bytes(&mut self) -> Vec<u8> {
        let line_end = self.fill_until(|buf| find(buf, b"\r\n").map(|i| i + 2));
        let header = String::from_utf8_lossy(&self.buf[..line_end - 2]).into_owned();
        let words: Vec<&str> = header.split(' ').collect();
        let data_len = match words.as_slice() {
            ["OK", n] | ["FOUND", _, n] | ["RESERVED", _, n] => Some(n.parse::<usize>().unwrap()),
            _ => None,
        };
        let total = line_end + data_len.map_or(0, |n| n + 2);
        self.fill_until(|buf| (buf.len() >= total).then_some(total));
        self.buf.drain(..total).collect()
    }

    /// Reads exactly `expected.len()` bytes and asserts they are `expected`.
    pub fn expect(&mut self, expected: impl AsRef<[u8]>) {
        let expected = expected.as_ref();
        let n = expected.len();
        self.fill_until(|buf| (buf.len() >= n).then_some(n));
        let got: Vec<u8> = self.buf.drain(..n).collect();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected),
            "unexpected reply bytes"
        );
    }

    /// Asserts that nothing arrives for `wait`.
    pub fn expect_silence(&mut self, wait: Duration) {
        assert!(self.buf.is_empty(), "unexpected bytes: {:?}", String::from_utf8_lossy(&self.buf));
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut byte = [0; 64];
        match self.stream.read(&mut byte) {
            Ok(0) => panic!("connection closed while expecting silence"),
            Ok(n) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&byte[..n])),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read error: {e}"),
        }
    }

    /// Asserts that the server closes the connection (EOF) with no more bytes.
    pub fn expect_closed(&mut self) {
        assert!(self.buf.is_empty(), "unexpected bytes: {:?}", String::from_utf8_lossy(&self.buf));
        self.stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        let mut byte = [0; 64];
        match self.stream.read(&mut byte) {
            Ok(0) => {}
            Ok(n) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&byte[..n])),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) => panic!("expected EOF, got {e}"),
        }
    }

    /// Shuts down the sending side (a half-close).
    pub fn half_close(&mut self) {
        self.stream.shutdown(Shutdown::Write).unwrap();
    }

    /// `put` with a body; returns the reply line.
    pub fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &str) -> String {
        self.send(format!("put {pri} {delay} {ttr} {}\r\n{body}\r\n", body.len()));
        self.reply()
    }

    /// `put` that must succeed; returns the new id.
    pub fn put_ok(&mut self, body: &str) -> u64 {
        let reply = self.put(0, 0, 60, body);
        reply
            .strip_prefix("INSERTED ")
            .and_then(|r| r.trim_end().parse().ok())
            .unwrap_or_else(|| panic!("put failed: {reply:?}"))
    }

    /// The YAML map of `stats`, `stats-job N` or `stats-tube T`.
    pub fn yaml_map(&mut self, command: &str) -> HashMap<String, String> {
        let reply = self.cmd(command);
        assert!(reply.starts_with("OK "), "{command}: {reply:?}");
        parse_yaml_map(&reply)
    }

    pub fn stats(&mut self) -> HashMap<String, String> {
        self.yaml_map("stats")
    }

    /// One key of `stats`.
    pub fn stat(&mut self, key: &str) -> String {
        self.stats().remove(key).unwrap_or_else(|| panic!("no stats key {key}"))
    }

    fn fill_until(&mut self, mut done: impl FnMut(&[u8]) -> Option<usize>) -> usize {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(n) = done(&self.buf) {
                return n;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no complete reply within {REPLY_TIMEOUT:?}; have {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            self.stream.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("connection closed; have {:?}", String::from_utf8_lossy(&self.buf)),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => panic!("read error: {e}"),
            }
        }
    }
}

/// `put` with any body bytes, which must succeed; returns the id.
pub fn put_bytes(c: &mut Client, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
    let mut msg = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
    msg.extend_from_slice(body);
    msg.extend_from_slice(b"\r\n");
    c.send(msg);
    let reply = c.reply();
    reply
        .strip_prefix("INSERTED ")
        .and_then(|r| r.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("put failed: {reply:?}"))
}

/// The body of job `id`, or `None` if it does not exist.
pub fn peek(c: &mut Client, id: u64) -> Option<Vec<u8>> {
    c.send(format!("peek {id}\r\n"));
    let reply = c.reply_bytes();
    if reply == b"NOT_FOUND\r\n" {
        return None;
    }
    let header_end = reply.windows(2).position(|w| w == b"\r\n").unwrap();
    let header = String::from_utf8_lossy(&reply[..header_end]).into_owned();
    assert!(header.starts_with(&format!("FOUND {id} ")), "peek {id}: {header:?}");
    Some(reply[header_end + 2..reply.len() - 2].to_vec())
}

/// One `stats` key as a number.
pub fn stat_u64(c: &mut Client, key: &str) -> u64 {
    let v = c.stat(key);
    v.parse().unwrap_or_else(|_| panic!("stats {key}: {v:?}"))
}

/// Polls `f` until it holds or `deadline` passes; returns whether it held.
pub fn settle(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + deadline;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether this is CI (`CI=true`, as CI services set it), where a test
/// that cannot find what it needs fails instead of skipping.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Whether python3 can import `modules` ("a, b"); says why not when it
/// cannot, and fails under `CI=true`, whose `.ci/run` installs them.
pub fn python_has(modules: &str) -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(!under_ci(), "CI must install python3 with {modules} (.ci/run: pip install)");
        skipping(&format!("python3 with {modules} is not installed (pip install)"));
    }
    found
}

/// Says a test is skipped on the process's own stderr: the harness
/// captures `eprintln!` and shows it only for a test that fails.
pub fn skipping(why: &str) {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {why}");
}

/// Threads of this test process (the in-process server's included).
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

/// Open file descriptors of this test process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Thread and fd counts once things are quiet: the lowest seen over 200 ms.
pub fn baseline() -> (usize, usize) {
    let (mut threads, mut fds) = (usize::MAX, usize::MAX);
    for _ in 0..20 {
        threads = threads.min(thread_count());
        fds = fds.min(fd_count());
        std::thread::sleep(Duration::from_millis(10));
    }
    (threads, fds)
}

/// xorshift64: the one small seeded generator of every test, so tests
/// need no crate.
pub struct Rng(pub u64);

impl Rng {
    /// A generator whose state is spread from `seed` (splitmix64), so that
    /// nearby seeds give unrelated streams.
    pub fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        Rng(z.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n` (n > 0; the modulo bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Parses `OK n\r\n---\nkey: value\n...\r\n` into a map (quotes kept).
pub fn parse_yaml_map(reply: &str) -> HashMap<String, String> {
    reply
        .lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.trim_end_matches('\r').to_owned()))
        .collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
