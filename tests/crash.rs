//! Crash test: producers and workers hammer `beanstalk -b DIR` while it is
//! SIGKILLed at random moments and restarted on the same directory, several
//! times. At the end every job acknowledged `INSERTED` and not acknowledged
//! `DELETED` must be there exactly once with its body intact, nothing else
//! may exist except jobs whose reply the kill cut off, and no acknowledged id
//! may ever be handed out twice.
//!
//! Seeded: `CRASH_SEED=<u64>` replays a run's choices (the threads' timing
//! is the machine's); the seed is printed and is in every failure message.
mod common;

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::binary::{self, Bin, TempDir};
use common::Rng;

const DEFAULT_SEED: u64 = 0x0b5e_55ed_c0ff_ee01;
const ROUNDS: usize = 8;
const PRODUCERS: usize = 3;
const WORKERS: usize = 2;
/// No socket read may take longer than this (a hang guard).
const IO_TIMEOUT: Duration = common::HANG_GUARD;

fn seed() -> u64 {
    match std::env::var("CRASH_SEED") {
        Ok(s) => s.trim().parse().unwrap_or_else(|_| panic!("CRASH_SEED={s:?} is not a u64")),
        Err(_) => DEFAULT_SEED,
    }
}

// -------------------------------------------------------------------
// Harness
// -------------------------------------------------------------------

/// Starts the binary on binlog directory `dir`; `ctx` says which round, if
/// it fails to start.
fn start(dir: &Path, flags: &[&str], ctx: &str) -> Bin {
    eprintln!("{ctx}: starting");
    let mut args = vec!["-b", binary::arg(dir)];
    args.extend_from_slice(flags);
    binary::spawn(&args)
}

/// A client that reports a dead server as an error instead of panicking.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Conn { reader: BufReader::new(stream.try_clone()?), writer: stream })
    }

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// One reply line without its CRLF.
    fn line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        line.truncate(line.len() - 2);
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    /// `n` bytes of data plus their CRLF.
    fn data(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; n + 2];
        self.reader.read_exact(&mut buf)?;
        if !buf.ends_with(b"\r\n") {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "data without its CRLF"));
        }
        buf.truncate(n);
        Ok(buf)
    }

    fn request(&mut self, bytes: &[u8]) -> io::Result<String> {
        self.send(bytes)?;
        self.line()
    }
}

// -------------------------------------------------------------------
// What the clients were told
// -------------------------------------------------------------------

#[derive(Default)]
struct Ledger {
    /// Acknowledged INSERTED: id -> (body, round).
    inserted: HashMap<u64, (Vec<u8>, usize)>,
    /// Puts whose reply never came: these bodies may or may not exist.
    maybe_put: HashSet<Vec<u8>>,
    /// Acknowledged DELETED.
    deleted: HashSet<u64>,
    /// Deletes whose reply never came.
    maybe_deleted: HashSet<u64>,
    /// Bodies workers were given, to check against what the put sent.
    reserved: Vec<(u64, Vec<u8>)>,
    /// Anything a client thread saw that is wrong.
    errors: Vec<String>,
}

fn producer(addr: SocketAddr, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>, seed: u64, tag: String) {
    let mut rng = Rng::new(seed);
    let Ok(mut conn) = Conn::connect(addr) else { return };
    for n in 0..1_000_000u64 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // A unique body: the tag and counter, then random bytes including
        // CR, LF and NUL.
        let mut body = format!("{tag}-{n}:").into_bytes();
        let extra = rng.below(200) as usize;
        body.extend((0..extra).map(|_| match rng.below(10) {
            0 => b'\r',
            1 => b'\n',
            2 => 0,
            _ => b'a' + rng.below(26) as u8,
        }));
        let delay = u64::from(rng.below(10) == 0);
        let mut msg = format!("put {} {delay} 60 {}\r\n", rng.below(1000), body.len()).into_bytes();
        msg.extend_from_slice(&body);
        msg.extend_from_slice(b"\r\n");
        let reply = conn.request(&msg);
        let mut ledger = ledger.lock().unwrap();
        match reply {
            Ok(line) => match line.strip_prefix("INSERTED ").and_then(|id| id.parse::<u64>().ok()) {
                Some(id) => {
                    let round = tag_round(&tag);
                    if let Some((_, old_round)) = ledger.inserted.insert(id, (body, round)) {
                        ledger
                            .errors
                            .push(format!("id {id} acknowledged in round {old_round} and again in {round}"));
                    }
                }
                None => {
                    ledger.errors.push(format!("{tag}: put got {line:?}"));
                    return;
                }
            },
            Err(_) => {
                ledger.maybe_put.insert(body);
                return;
            }
        }
    }
}

fn tag_round(tag: &str) -> usize {
    tag.split('-').next().unwrap().trim_start_matches('r').parse().unwrap()
}

fn worker(addr: SocketAddr, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>, seed: u64, tag: String) {
    let mut rng = Rng::new(seed);
    let Ok(mut conn) = Conn::connect(addr) else { return };
    for _ in 0..1_000_000u64 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(line) = conn.request(b"reserve-with-timeout 1\r\n") else { return };
        if line == "TIMED_OUT" {
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        let (id, len) = match words.as_slice() {
            ["RESERVED", id, len] => (id.parse::<u64>().unwrap(), len.parse::<usize>().unwrap()),
            _ => {
                ledger.lock().unwrap().errors.push(format!("{tag}: reserve got {line:?}"));
                return;
            }
        };
        let Ok(body) = conn.data(len) else { return };
        ledger.lock().unwrap().reserved.push((id, body));
        // Mostly delete; sometimes release or bury first, so that update
        // records are in the log too.
        let (cmd, want) = match rng.below(20) {
            0 => (format!("release {id} {} 0\r\n", rng.below(100)), "RELEASED"),
            1 => (format!("bury {id} 0\r\n"), "BURIED"),
            _ => (format!("delete {id}\r\n"), "DELETED"),
        };
        let reply = conn.request(cmd.as_bytes());
        let mut ledger = ledger.lock().unwrap();
        match reply {
            Ok(line) if line == want => {
                if want == "DELETED" {
                    ledger.deleted.insert(id);
                }
            }
            Ok(line) => {
                ledger.errors.push(format!("{tag}: {} got {line:?}", cmd.trim_end()));
                return;
            }
            Err(_) => {
                if want == "DELETED" {
                    ledger.maybe_deleted.insert(id);
                }
                return;
            }
        }
    }
}

// -------------------------------------------------------------------
// The test
// -------------------------------------------------------------------

/// Peeks ids `1..end` (pipelined); returns the jobs found.
fn scan(addr: SocketAddr, end: u64) -> HashMap<u64, Vec<u8>> {
    let mut conn = Conn::connect(addr).unwrap();
    let mut found = HashMap::new();
    let mut id = 1;
    while id < end {
        let batch_end = (id + 256).min(end);
        let mut msg = Vec::new();
        for i in id..batch_end {
            msg.extend_from_slice(format!("peek {i}\r\n").as_bytes());
        }
        conn.send(&msg).unwrap();
        for i in id..batch_end {
            let line = conn.line().unwrap();
            if line == "NOT_FOUND" {
                continue;
            }
            let words: Vec<&str> = line.split(' ').collect();
            let ["FOUND", got, len] = words.as_slice() else { panic!("peek {i}: {line:?}") };
            assert_eq!(got.parse::<u64>().unwrap(), i, "peek {i}: {line:?}");
            found.insert(i, conn.data(len.parse().unwrap()).unwrap());
        }
        id = batch_end;
    }
    found
}

fn crash_rounds(flags: &[&str]) {
    let seed = seed();
    // Shown with the output of a failing test.
    println!("CRASH_SEED={seed} flags {flags:?}");
    let ctx = format!("CRASH_SEED={seed} flags {flags:?}");
    let test_start = Instant::now();
    let mut rng = Rng::new(seed ^ flags.len() as u64);
    let dir = TempDir::new("rounds");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut max_acked_before = 0u64;
    for round in 0..ROUNDS {
        let server = start(&dir.path, flags, &format!("{ctx} round {round}"));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for p in 0..PRODUCERS {
            let (ledger, stop, addr) = (Arc::clone(&ledger), Arc::clone(&stop), server.addr);
            let (s, tag) = (rng.next(), format!("r{round}-p{p}"));
            threads.push(thread::spawn(move || producer(addr, ledger, stop, s, tag)));
        }
        for w in 0..WORKERS {
            let (ledger, stop, addr) = (Arc::clone(&ledger), Arc::clone(&stop), server.addr);
            let (s, tag) = (rng.next(), format!("r{round}-w{w}"));
            threads.push(thread::spawn(move || worker(addr, ledger, stop, s, tag)));
        }
        thread::sleep(Duration::from_millis(100 + rng.below(600)));
        // SIGKILL at a random moment, with requests in flight.
        drop(server);
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            t.join().unwrap();
        }
        let ledger = ledger.lock().unwrap();
        assert!(ledger.errors.is_empty(), "{ctx}: round {round}: {:?}", ledger.errors);
        let this_round: Vec<u64> =
            ledger.inserted.iter().filter(|(_, (_, r))| *r == round).map(|(&id, _)| id).collect();
        assert!(!this_round.is_empty(), "{ctx}: round {round} inserted nothing");
        let min = *this_round.iter().min().unwrap();
        assert!(
            min > max_acked_before,
            "{ctx}: round {round} handed out id {min} again (had {max_acked_before})"
        );
        max_acked_before = *this_round.iter().max().unwrap();
    }

    // Final start: check everything.
    let server = start(&dir.path, flags, &format!("{ctx} final"));
    let mut conn = Conn::connect(server.addr).unwrap();
    let line = conn.request(b"put 0 0 60 8\r\nsentinel\r\n").unwrap();
    let sentinel: u64 = line.strip_prefix("INSERTED ").and_then(|s| s.parse().ok()).unwrap();
    let ledger = ledger.lock().unwrap();
    assert!(sentinel > max_acked_before, "{ctx}: id {sentinel} after {max_acked_before}");
    let found = scan(server.addr, sentinel);

    for (id, body) in &ledger.reserved {
        if let Some((put, _)) = ledger.inserted.get(id) {
            assert_eq!(body, put, "{ctx}: job {id} was reserved with another body");
        }
    }
    let mut live = 0;
    for (id, (body, round)) in &ledger.inserted {
        let got = found.get(id);
        if ledger.deleted.contains(id) {
            assert!(got.is_none(), "{ctx}: job {id} (round {round}) was DELETED but is back");
        } else if ledger.maybe_deleted.contains(id) {
            if let Some(got) = got {
                assert_eq!(got, body, "{ctx}: job {id} (round {round}) damaged");
            }
        } else {
            live += 1;
            let got =
                got.unwrap_or_else(|| panic!("{ctx}: job {id} (round {round}) was INSERTED and is lost"));
            assert_eq!(got, body, "{ctx}: job {id} (round {round}) damaged");
        }
    }
    // Anything else must be a put whose reply was cut off, each at most once.
    let mut extra_bodies = HashSet::new();
    for (id, body) in &found {
        if ledger.inserted.contains_key(id) {
            continue;
        }
        assert!(
            ledger.maybe_put.contains(body),
            "{ctx}: job {id} exists but was never acknowledged nor cut off: {:?}",
            String::from_utf8_lossy(body)
        );
        assert!(extra_bodies.insert(body.clone()), "{ctx}: a cut-off put exists twice");
        assert!(!ledger.deleted.contains(id), "{ctx}: job {id} was DELETED but is back");
    }
    let mut bodies = HashSet::new();
    for body in found.values() {
        assert!(bodies.insert(body), "{ctx}: a body is stored twice: {:?}", String::from_utf8_lossy(body));
    }
    // And `stats` agrees exactly: no job outside the ids scanned.
    let line = conn.request(b"stats\r\n").unwrap();
    let n: usize = line.strip_prefix("OK ").unwrap().parse().unwrap();
    let yaml = String::from_utf8(conn.data(n).unwrap()).unwrap();
    let stat = |key: &str| -> usize {
        let prefix = format!("{key}: ");
        yaml.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap().parse().unwrap()
    };
    let total = stat("current-jobs-ready")
        + stat("current-jobs-reserved")
        + stat("current-jobs-delayed")
        + stat("current-jobs-buried");
    assert_eq!(
        total,
        found.len() + 1,
        "{ctx}: stats counts {total} jobs, the scan found {} + sentinel",
        found.len()
    );
    assert!(found.len() >= live, "{ctx}");
    println!(
        "{ctx}: {} acknowledged puts, {} deletes, {} cut-off puts, {} cut-off deletes, {} jobs at the end, {:?}",
        ledger.inserted.len(),
        ledger.deleted.len(),
        ledger.maybe_put.len(),
        ledger.maybe_deleted.len(),
        found.len(),
        test_start.elapsed()
    );
    drop(conn);
    drop(server);
}

#[test]
fn sigkill_loses_nothing_acknowledged_with_fsync_on_every_write() {
    crash_rounds(&["-f", "0", "-s", "65536"]);
}

#[test]
fn sigkill_loses_nothing_acknowledged_without_fsync() {
    crash_rounds(&["-F", "-s", "8192"]);
}

/// Every body left in the log (`--bodies-in-memory 0`), small files that
/// compaction empties by moving bodies forward: every acknowledged body
/// comes back byte for byte, read from where the log keeps it.
#[test]
fn sigkill_loses_no_body_left_in_the_log() {
    crash_rounds(&["-F", "-s", "8192", "--bodies-in-memory", "0"]);
}
