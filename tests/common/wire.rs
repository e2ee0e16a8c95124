//! A raw connection to the spawned binary over TCP or a UNIX socket, with
//! a read-ahead buffer that splits the stream into whole replies (a line,
//! and its data block for `RESERVED`, `FOUND` and `OK`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::binary::{self, Bin, TempDir};

/// A socket to the server, TCP or UNIX, read and written as bytes.
pub trait Duplex: Read + Write + Send {
    fn set_timeout(&self, timeout: Option<Duration>);
}

impl Duplex for TcpStream {
    fn set_timeout(&self, timeout: Option<Duration>) {
        self.set_read_timeout(timeout).unwrap();
    }
}

impl Duplex for UnixStream {
    fn set_timeout(&self, timeout: Option<Duration>) {
        self.set_read_timeout(timeout).unwrap();
    }
}

/// A server and how to reach it.
pub struct Target {
    pub server: Bin,
    pub unix: Option<PathBuf>,
    _dir: TempDir,
}

impl Target {
    pub fn start(unix: bool, args: &[&str]) -> Target {
        let dir = TempDir::new("delivery");
        let path = dir.path.join("beanstalk.sock");
        let listen = format!("unix:{}", path.display());
        let mut all: Vec<&str> = args.to_vec();
        if unix {
            all.extend(["-l", &listen]);
        }
        let server = binary::spawn(&all);
        Target { server, unix: unix.then_some(path), _dir: dir }
    }

    pub fn connect(&self) -> Conn {
        let stream: Box<dyn Duplex> = match &self.unix {
            Some(path) => Box::new(UnixStream::connect(path).unwrap()),
            None => Box::new(TcpStream::connect(self.server.addr).unwrap()),
        };
        Conn { stream, buf: Vec::new() }
    }
}

/// One raw connection with a read-ahead buffer.
pub struct Conn {
    pub stream: Box<dyn Duplex>,
    pub buf: Vec<u8>,
}

impl Conn {
    pub fn send(&mut self, bytes: impl AsRef<[u8]>) {
        self.stream.write_all(bytes.as_ref()).unwrap();
    }

    /// Reads until `n` bytes are buffered, or `limit` passes; false then.
    pub fn fill(&mut self, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut chunk = vec![0; 1 << 16];
        while self.buf.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            self.stream.set_timeout(Some(left));
            match self.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(_) => {}
            }
        }
        true
    }

    /// One reply line (and its data block, for `RESERVED`, `FOUND`, `OK`),
    /// or `None` if none is complete within `limit`.
    pub fn reply_within(&mut self, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                let words: Vec<&str> = line.split(' ').collect();
                let data = match words.as_slice() {
                    ["RESERVED", _, n] | ["FOUND", _, n] | ["OK", n] => n.parse::<usize>().unwrap() + 2,
                    _ => 0,
                };
                let total = end + 2 + data;
                let left = deadline.saturating_duration_since(Instant::now());
                if !self.fill(total, left) {
                    return None;
                }
                let reply: Vec<u8> = self.buf.drain(..total).collect();
                return Some(String::from_utf8_lossy(&reply).into_owned());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let have = self.buf.len();
            if !self.fill(have + 1, left) {
                return None;
            }
        }
    }

    pub fn reply(&mut self) -> String {
        self.reply_within(super::REPLY_TIMEOUT).expect("a reply before the hang guard")
    }

    pub fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n"));
        self.reply()
    }

    pub fn put(&mut self, ttr: u32, body: &[u8]) -> u64 {
        self.put_delayed(0, ttr, body)
    }

    /// A job no worker can reserve for an hour, to `peek` at.
    pub fn put_delayed(&mut self, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        self.send(format!("put 0 {delay} {ttr} {}\r\n", body.len()));
        self.send([body, b"\r\n"].concat());
        inserted(&self.reply())
    }
}

pub fn inserted(reply: &str) -> u64 {
    reply
        .strip_prefix("INSERTED ")
        .and_then(|r| r.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("{reply:?}"))
}
