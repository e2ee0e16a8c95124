//! No client waits seconds behind another: while one client pipelines a
//! long stream of commands (puts among them), a second client's
//! put / reserve / delete round trips stay near what they take with nobody
//! else (lib.rs, "A few event loops, one a CPU": a turn of a loop serves
//! each connection a bounded share).
//!
//! A loaded machine is slow for everyone, so the bound beside the flood is
//! not a time alone: it is the same client's round trips against the same
//! server with nobody else, measured first in the same test (the control),
//! taken generously. One bound is a time: no single round trip, alone or
//! beside the flood, may take a second, which a server that stalls takes
//! and a loaded machine does not; a round trip is cut off there, so a
//! stalled or starved client fails the test in a second, not at the hang
//! guard.
//!
//! The server runs one loop (`--threads 1`), so that the flood and the
//! measured client share every turn of it, on any machine.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The longest any one round trip may take, flood or not.
const NEVER: Duration = Duration::from_secs(1);
/// The round trips measured alone, and then beside the flood.
const ROUNDS: usize = 150;

/// A client that times its round trips and gives up on one at [`NEVER`].
struct Timed {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Timed {
    fn connect(addr: SocketAddr, tube: &str) -> Timed {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut c = Timed { stream, buf: Vec::new() };
        let deadline = Instant::now() + common::HANG_GUARD;
        for (line, reply) in [
            (format!("use {tube}"), format!("USING {tube}\r\n")),
            (format!("watch {tube}"), "WATCHING 2\r\n".into()),
            ("ignore default".into(), "WATCHING 1\r\n".into()),
        ] {
            c.stream.write_all(format!("{line}\r\n").as_bytes()).unwrap();
            assert_eq!(c.line(deadline), reply);
        }
        c
    }

    /// One line of reply, with its CRLF, read by `deadline`; panics past it.
    fn line(&mut self, deadline: Instant) -> String {
        self.fill(deadline, |buf| buf.windows(2).position(|w| w == b"\r\n").map(|at| at + 2))
    }

    /// Reads until `done` finds a whole reply in the buffer, and takes it.
    fn fill(&mut self, deadline: Instant, done: impl Fn(&[u8]) -> Option<usize>) -> String {
        let mut chunk = [0; 4096];
        loop {
            if let Some(n) = done(&self.buf) {
                return String::from_utf8_lossy(&self.buf.drain(..n).collect::<Vec<u8>>()).into_owned();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "a round trip took {NEVER:?} or more: the server stalled, or served others first"
            );
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("the server closed the connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// One put / reserve / delete round trip with exact replies; how long
    /// it took. Panics once it has taken [`NEVER`].
    fn round(&mut self, n: usize) -> Duration {
        let body = format!("round {n}");
        let started = Instant::now();
        let deadline = started + NEVER;
        self.stream.write_all(format!("put 0 0 60 {}\r\n{body}\r\n", body.len()).as_bytes()).unwrap();
        let inserted = self.line(deadline);
        let id: u64 = inserted
            .strip_prefix("INSERTED ")
            .and_then(|id| id.trim_end().parse().ok())
            .unwrap_or_else(|| panic!("{inserted:?}"));
        self.stream.write_all(b"reserve-with-timeout 5\r\n").unwrap();
        let reserved = format!("RESERVED {id} {}\r\n{body}\r\n", body.len());
        let got = self.fill(deadline, |buf| (buf.len() >= reserved.len()).then_some(reserved.len()));
        assert_eq!(got, reserved);
        self.stream.write_all(format!("delete {id}\r\n").as_bytes()).unwrap();
        assert_eq!(self.line(deadline), "DELETED\r\n");
        started.elapsed()
    }

    /// [`ROUNDS`] round trips, 2 ms apart.
    fn rounds(&mut self) -> Vec<Duration> {
        (0..ROUNDS)
            .map(|n| {
                thread::sleep(Duration::from_millis(2));
                self.round(n)
            })
            .collect()
    }
}

/// A client that floods one server for as long as it lives: it pipelines
/// a long stream of puts (of one job: its key names it after the first,
/// so memory stays flat) and of other commands that take the engine's
/// lock, as fast as the server reads them, while a thread of its own reads
/// and drops every reply.
struct Flood {
    stop: Arc<AtomicBool>,
    /// The bytes of replies it has read.
    read: Arc<AtomicUsize>,
    threads: [thread::JoinHandle<()>; 2],
}

impl Flood {
    /// Starts the flood, and returns once its replies flow.
    fn start(addr: SocketAddr) -> Flood {
        // Its replies are a fifth of its bytes: the loop reads it far
        // faster than it is held up writing to it.
        let put = format!("put 0 0 60 200 idp:flood\r\n{}\r\n", "x".repeat(200));
        let stream = (put + "stats-job 1\r\npeek-delayed\r\nlist-tube-used\r\n").leak().as_bytes();
        let stop = Arc::new(AtomicBool::new(false));
        let read = Arc::new(AtomicUsize::new(0));
        let threads = flood(addr, stream, &stop, &read);
        let flood = Flood { stop, read, threads };
        assert!(common::settle(common::HANG_GUARD, || flood.flowed_since(0)), "the flood never got going");
        flood
    }

    fn read(&self) -> usize {
        self.read.load(Ordering::SeqCst)
    }

    /// Whether it has read 64 KiB of replies since it had read `then`.
    fn flowed_since(&self, then: usize) -> bool {
        self.read() > then + 65_536
    }

    /// Ends the flood; returns the bytes of replies it read.
    fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads {
            thread.join().unwrap();
        }
        self.read.load(Ordering::SeqCst)
    }
}

/// A client that writes `stream` over and over until `stop`, as fast as
/// the server reads it, while a thread of its own reads and drops every
/// reply, counting the bytes in `read`.
fn flood(
    addr: SocketAddr,
    stream: &'static [u8],
    stop: &Arc<AtomicBool>,
    read: &Arc<AtomicUsize>,
) -> [thread::JoinHandle<()>; 2] {
    let mut writer = TcpStream::connect(addr).unwrap();
    let mut reader = writer.try_clone().unwrap();
    let writes = {
        let stop = Arc::clone(stop);
        thread::spawn(move || {
            let chunk = stream.repeat(16_384 / stream.len());
            while !stop.load(Ordering::SeqCst) {
                if writer.write_all(&chunk).is_err() {
                    return;
                }
            }
            // The flood is over: the server may close the connection.
            let _ = writer.shutdown(std::net::Shutdown::Write);
        })
    };
    let reads = {
        let read = Arc::clone(read);
        thread::spawn(move || {
            let mut chunk = vec![0; 1 << 16];
            while let Ok(n @ 1..) = reader.read(&mut chunk) {
                read.fetch_add(n, Ordering::SeqCst);
            }
        })
    };
    [writes, reads]
}

/// The sorted samples' value at quantile `q`.
fn at(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q) as usize]
}

fn summary(sorted: &[Duration]) -> String {
    format!("median {:?}, p99 {:?}, max {:?}", at(sorted, 0.5), at(sorted, 0.99), at(sorted, 1.0))
}

#[test]
fn no_client_waits_seconds_behind_one_that_floods() {
    let server = common::start_args(&["--threads", "1"]);
    let mut timed = Timed::connect(server.addr, "timed");
    timed.rounds(); // warm up: the connection's buffers, the tube
    let mut alone = timed.rounds();
    alone.sort();
    eprintln!("alone: {}", summary(&alone));
    let flood = Flood::start(server.addr);
    let before = flood.read();
    let mut beside = timed.rounds();
    let flowed = flood.flowed_since(before);
    let read = flood.stop();
    beside.sort();
    eprintln!("beside the flood: {} ({read} bytes of replies to the flood)", summary(&beside));
    assert!(flowed, "the flood stopped while the round trips were measured: nothing was shown");
    // The median, not the tail: a loaded machine's scheduler alone makes
    // a tail of some hundreds of milliseconds beside a flood that keeps
    // the loop busy, where the median moves by tens.
    let bound = (at(&alone, 0.99) * 20).max(Duration::from_millis(250));
    assert!(
        at(&beside, 0.5) <= bound,
        "beside the flood a round trip's median is {:?}, over {bound:?} (20 times the p99 alone, or 250 ms)",
        at(&beside, 0.5)
    );
}
