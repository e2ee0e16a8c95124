//! A seeded, bounded protocol fuzz test over loopback (reference §1 and 9).
//!
//! Several fuzzing connections send valid command streams and mutations of
//! them (random bytes, truncated commands, overlong lines, lone CR/LF, NULs,
//! out-of-range numbers, bodies shorter or longer than announced, sockets
//! dropped or half-closed mid-command and mid-body) while a sentinel client
//! runs put/reserve/delete on a tube of its own and checks every reply
//! exactly. At the end the server must still serve a fresh connection, and
//! its connections, threads and file descriptors must be back to baseline.
//!
//! `FUZZ_SEED` (decimal or 0x-hex) picks the inputs; `FUZZ_ITERATIONS` is the
//! number of fuzz sessions (connections). Session `i` is generated from
//! `(seed, i)` alone, except that valid commands name the ids the session
//! has already been given, so a failure names the seed and the session, and
//! the bytes of a session that made the server misbehave are written to a
//! file.
//!
//! The fuzzers never name an id they were not given (or one of 0, >= 2^40,
//! or out of range), and mutations never create digits, so they cannot
//! delete or steal the sentinel's job: the sentinel's replies are exact.
mod common;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{baseline, fd_count, settle, thread_count, Rng};

const DEFAULT_SEED: u64 = 0x5eed_b0a7_f00d_cafe;
/// Fuzz sessions (connections) when `FUZZ_ITERATIONS` is not set.
const DEFAULT_ITERATIONS: usize = 500;
/// Connections fuzzing at the same time.
const FUZZERS: usize = 4;
/// The fuzz phase stops after this even if sessions are left (slow CI),
/// once the sentinel has made [`SENTINEL_ROUNDS`] beside it.
const FUZZ_TIME_CAP: Duration = Duration::from_secs(12);
/// The rounds the sentinel makes while the fuzzers run: the fuzz goes on
/// until it has (a sentinel held up keeps it going to the hang guard).
const SENTINEL_ROUNDS: usize = 20;
/// A session stops generating input after this.
const SESSION_TIME_CAP: Duration = Duration::from_secs(3);
/// After a half-close the server must close the connection (a hang guard).
const CLOSE_DEADLINE: Duration = common::HANG_GUARD;
/// Waiting for connections, threads and fds to come back to baseline.
const SETTLE_DEADLINE: Duration = common::HANG_GUARD;
/// Tubes the fuzzers use; the sentinel's tube is not among them.
const TUBES: &[&str] = &["default", "fz.a", "fz.b", "fz-c", "fz_(d)", "fz$e"];
const SENTINEL_TUBE: &str = "sentinel.only;Q";

// -------------------------------------------------------------------
// A small deterministic RNG
// -------------------------------------------------------------------

/// Draws for the fuzzer, on top of the shared xorshift generator.
impl Rng {
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// True with probability `percent / 100`.
    fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A reference to one of `items`.
    fn pick_ref<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Log-uniform in `lo..=hi` (lo >= 1): small sizes often, large ones
    /// sometimes.
    fn log_size(&mut self, lo: usize, hi: usize) -> usize {
        let (llo, lhi) = ((lo as f64).ln(), (hi as f64).ln());
        let frac = self.below(1 << 20) as f64 / f64::from(1u32 << 20);
        ((llo + (lhi - llo) * frac).exp() as usize).clamp(lo, hi)
    }

    /// A byte that is not an ASCII digit, so that a mutation can never turn
    /// one id into another.
    fn non_digit(&mut self) -> u8 {
        loop {
            let b = self.next() as u8;
            if !b.is_ascii_digit() {
                return b;
            }
        }
    }
}

fn env_seed() -> u64 {
    match std::env::var("FUZZ_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("FUZZ_SEED={s:?} is not a number"))
        }
        Err(_) => DEFAULT_SEED,
    }
}

fn env_iterations() -> usize {
    std::env::var("FUZZ_ITERATIONS")
        .ok()
        .map(|s| s.trim().parse().unwrap_or_else(|_| panic!("FUZZ_ITERATIONS={s:?} is not a number")))
        .unwrap_or(DEFAULT_ITERATIONS)
}

// -------------------------------------------------------------------
// Input generation
// -------------------------------------------------------------------

/// An id argument: one this session was given, or one no live job can have.
fn id_arg(rng: &mut Rng, own: &[u64]) -> String {
    if !own.is_empty() && rng.percent(70) {
        return rng.pick_ref(own).to_string();
    }
    match rng.below(4) {
        0 => "0".into(),
        1 => "18446744073709551615".into(),
        2 => (1u64 << 40).wrapping_add(rng.below(1 << 40)).to_string(),
        _ => "99999999999999".into(),
    }
}

fn tube(rng: &mut Rng) -> &'static str {
    TUBES[rng.below(TUBES.len() as u64) as usize]
}

/// A job body: usually short text, sometimes binary with CRLFs and NULs,
/// now and then near the 65535-byte limit. It never contains digits.
fn body(rng: &mut Rng) -> Vec<u8> {
    let len = if rng.percent(90) { rng.range(0, 64) } else { rng.log_size(64, 65535) };
    let binary = rng.percent(30);
    (0..len)
        .map(|_| {
            if binary {
                match rng.below(10) {
                    0 => b'\r',
                    1 => b'\n',
                    2 => 0,
                    _ => rng.non_digit(),
                }
            } else {
                b'a' + rng.below(26) as u8
            }
        })
        .collect()
}

fn put_with_body(rng: &mut Rng, data: &[u8]) -> Vec<u8> {
    let pri = *rng.pick_ref(&[0u64, 1, 1023, 1024, 65536, 4294967295]);
    let delay = if rng.percent(85) { 0 } else { rng.range(1, 2) };
    let ttr = *rng.pick_ref(&[0u64, 1, 2, 60, 120]);
    let mut out = format!("put {pri} {delay} {ttr} {}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// One valid command (with its body for `put`), CRLF included.
fn valid_command(rng: &mut Rng, own: &[u64]) -> Vec<u8> {
    let line = match rng.below(34) {
        0..=7 => {
            let data = body(rng);
            return put_with_body(rng, &data);
        }
        8 | 9 => format!("use {}", tube(rng)),
        10 | 11 => format!("watch {}", tube(rng)),
        12 => format!("ignore {}", tube(rng)),
        13..=15 => "reserve-with-timeout 0".into(),
        16 => {
            if rng.percent(20) {
                "reserve".into()
            } else {
                "reserve-with-timeout 1".into()
            }
        }
        17 | 18 => format!("delete {}", id_arg(rng, own)),
        19 => format!("release {} {} {}", id_arg(rng, own), rng.below(2000), rng.below(2)),
        20 => format!("bury {} {}", id_arg(rng, own), rng.below(2000)),
        21 => format!("touch {}", id_arg(rng, own)),
        22 => format!("kick-job {}", id_arg(rng, own)),
        23 => format!("reserve-job {}", id_arg(rng, own)),
        24 => format!("peek {}", id_arg(rng, own)),
        25 => format!("stats-job {}", id_arg(rng, own)),
        26 => rng.pick_ref(&["peek-ready", "peek-delayed", "peek-buried"]).to_string(),
        27 => format!("kick {}", rng.pick_ref(&["0", "1", "5", "100", "-1", "4294967298"])),
        28 => "stats".into(),
        29 => format!("stats-tube {}", tube(rng)),
        30 => rng.pick_ref(&["list-tubes", "list-tube-used", "list-tubes-watched"]).to_string(),
        31 => format!("pause-tube {} {}", tube(rng), rng.below(2)),
        32 => {
            if rng.percent(25) {
                "quit".into()
            } else {
                "list-tubes".into()
            }
        }
        _ => format!("pause-tube{} 0", tube(rng)),
    };
    let mut out = line.into_bytes();
    out.extend_from_slice(b"\r\n");
    out
}

/// Commands whose numbers are out of range, and other edge cases of reference
/// §1.4, 1.5 and 9.
fn out_of_range(rng: &mut Rng) -> Vec<u8> {
    let junk_body = |n: usize| {
        let mut b = vec![b'z'; n];
        b.extend_from_slice(b"\r\n");
        b
    };
    match rng.below(20) {
        0 => [b"put 4294967296 0 1 1\r\n".to_vec(), junk_body(1)].concat(),
        1 => [b"put 0 4294967296 1 1\r\n".to_vec(), junk_body(1)].concat(),
        2 => [b"put 0 0 4294967296 1\r\n".to_vec(), junk_body(1)].concat(),
        3 => b"put 0 0 1 4294967296\r\n".to_vec(),
        // JOB_TOO_BIG after discarding exactly 65538 bytes.
        4 => [b"put 0 0 1 65536\r\n".to_vec(), junk_body(65536)].concat(),
        // JOB_TOO_BIG for a body of 4 GiB: the rest of the session is
        // swallowed.
        5 => b"put 0 0 1 4294967295\r\nzzzz".to_vec(),
        6 => b"put -1 0 1 1\r\nz\r\n".to_vec(),
        7 => b"put 0 0 1 +1\r\nz\r\n".to_vec(),
        8 => b"peek 18446744073709551616\r\n".to_vec(),
        9 => b"peek 999999999999999999999999999999\r\n".to_vec(),
        10 => b"reserve-with-timeout 2147483648\r\n".to_vec(),
        11 => b"reserve-with-timeout 4294967296\r\n".to_vec(),
        12 => b"reserve-with-timeout -1\r\n".to_vec(),
        13 => b"release 18446744073709551616 0 0\r\n".to_vec(),
        14 => b"delete 18446744073709551616\r\n".to_vec(),
        15 => b"reserve-job 18446744073709551616\r\n".to_vec(),
        16 => b"kick 18446744073709551616\r\n".to_vec(),
        17 => format!("pause-tube {} 4294967296\r\n", tube(rng)).into_bytes(),
        18 => format!("bury 18446744073709551616 {}\r\n", rng.below(10)).into_bytes(),
        _ => format!("use {}\r\n", "x".repeat(rng.range(201, 230))).into_bytes(),
    }
}

/// A valid command with one mutation that never creates a digit or a CRLF
/// inside a number.
fn mutated_command(rng: &mut Rng, own: &[u64]) -> Vec<u8> {
    let mut cmd = valid_command(rng, own);
    let len = cmd.len();
    match rng.below(9) {
        0 => {
            let at = rng.below(len as u64) as usize;
            cmd[at] = rng.non_digit();
        }
        1 => cmd.insert(rng.below(len as u64) as usize, 0),
        2 => cmd.insert(rng.below(len as u64) as usize, b'\r'),
        3 => cmd.insert(rng.below(len as u64) as usize, b'\n'),
        4 => {
            // Truncated; the '~' keeps digits from running into what follows.
            cmd.truncate(rng.below(len as u64) as usize);
            cmd.push(b'~');
        }
        5 => {
            // Extra spaces or a trailing space.
            if let Some(sp) = cmd.iter().position(|&b| b == b' ') {
                cmd.insert(sp, b' ');
            } else {
                cmd.insert(len - 2, b' ');
            }
        }
        6 => cmd.make_ascii_uppercase(),
        7 => {
            // A put whose body is shorter than announced: the server reads
            // into whatever follows.
            let data = body(rng);
            let announced = data.len() + rng.range(1, 40);
            cmd = format!("put 0 0 10 {announced}\r\n").into_bytes();
            cmd.extend_from_slice(&data);
            cmd.extend_from_slice(b"\r\n");
        }
        _ => {
            // A put whose body is longer than announced: EXPECTED_CRLF, then
            // the server closes the connection (reference §1.5).
            let data = body(rng);
            let announced = data.len().saturating_sub(rng.range(1, 40));
            cmd = format!("put 0 0 10 {announced}\r\n").into_bytes();
            cmd.extend_from_slice(&data);
            cmd.extend_from_slice(b"\r\n");
        }
    }
    cmd
}

/// A line of 1 KB to 1 MB, usually ended by CRLF.
fn overlong_line(rng: &mut Rng) -> Vec<u8> {
    let len = rng.log_size(1024, 1 << 20);
    let mut line = Vec::with_capacity(len + 2);
    match rng.below(3) {
        0 => {
            line.extend_from_slice(b"use ");
            line.resize(len, b'a');
        }
        1 => {
            line.extend_from_slice(b"put 0 0 1 ");
            line.resize(len, b'9');
        }
        _ => line.extend((0..len).map(|_| b' ' + rng.below(95) as u8)),
    }
    if rng.percent(75) {
        line.extend_from_slice(b"\r\n");
    }
    line
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = rng.log_size(1, 4096);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// One piece of a fuzz stream.
fn action(rng: &mut Rng, own: &[u64]) -> Vec<u8> {
    match rng.below(100) {
        0..=44 => valid_command(rng, own),
        45..=64 => mutated_command(rng, own),
        65..=71 => random_bytes(rng),
        72..=75 => overlong_line(rng),
        76..=81 => rng.pick_ref(&[&b"\r"[..], b"\n", b"\n\r", b"\r\r\n", b"\r\n", b"\0\r\n"]).to_vec(),
        82..=89 => out_of_range(rng),
        _ => {
            // A pipelined burst of valid commands.
            let n = rng.range(2, 20);
            (0..n).flat_map(|_| valid_command(rng, own)).collect()
        }
    }
}

// -------------------------------------------------------------------
// A fuzz session: one connection
// -------------------------------------------------------------------

/// What the reader of a session saw.
#[derive(Default)]
struct Received {
    bytes: usize,
    /// The server closed the connection (EOF or reset).
    closed: bool,
}

/// Reads everything the server sends until it closes or `stop` is set;
/// notes the ids of `INSERTED` replies.
fn reader(stream: Arc<TcpStream>, stop: Arc<AtomicBool>, own: Arc<Mutex<Vec<u64>>>) -> Received {
    let mut got = Received::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    loop {
        match (&*stream).read(&mut chunk) {
            Ok(0) => {
                got.closed = true;
                return got;
            }
            Ok(n) => {
                got.bytes += n;
                pending.extend_from_slice(&chunk[..n]);
                while let Some(at) = pending.windows(2).position(|w| w == b"\r\n") {
                    tally(&pending[..at]);
                    if let Some(id) = pending[..at].strip_prefix(b"INSERTED ") {
                        if let Some(id) = std::str::from_utf8(id).ok().and_then(|s| s.parse().ok()) {
                            own.lock().unwrap().push(id);
                        }
                    }
                    pending.drain(..at + 2);
                }
                if pending.len() > 256 {
                    // Inside a job body or YAML; nothing to learn there.
                    let keep = pending.len() - 1;
                    pending.drain(..keep);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if stop.load(Ordering::SeqCst) {
                    return got;
                }
            }
            Err(_) => {
                got.closed = true;
                return got;
            }
        }
    }
}

/// Replies seen by all fuzz sessions, by first word (a sanity check that
/// the fuzzer reaches the paths it means to).
static REPLIES: Mutex<BTreeMap<&'static str, usize>> = Mutex::new(BTreeMap::new());

const REPLY_WORDS: &[&str] = &[
    "INSERTED",
    "BURIED",
    "RESERVED",
    "FOUND",
    "OK",
    "USING",
    "WATCHING",
    "KICKED",
    "DELETED",
    "RELEASED",
    "TOUCHED",
    "PAUSED",
    "NOT_FOUND",
    "NOT_IGNORED",
    "DEADLINE_SOON",
    "TIMED_OUT",
    "DRAINING",
    "EXPECTED_CRLF",
    "JOB_TOO_BIG",
    "BAD_FORMAT",
    "UNKNOWN_COMMAND",
    "OUT_OF_MEMORY",
    "INTERNAL_ERROR",
];

fn tally(line: &[u8]) {
    let word = line.split(|&b| b == b' ').next().unwrap_or_default();
    if let Some(w) = REPLY_WORDS.iter().find(|w| w.as_bytes() == word) {
        *REPLIES.lock().unwrap().entry(w).or_default() += 1;
    }
}

/// How a session ends.
#[derive(Debug, Clone, Copy)]
enum End {
    Close,
    HalfClose,
}

/// Runs fuzz session `index`; returns an error message (with the path of a
/// dump of the bytes sent) if the server misbehaved.
fn session(addr: SocketAddr, seed: u64, index: usize) -> Result<(), String> {
    let mut rng = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let stream = TcpStream::connect_timeout(&addr, common::HANG_GUARD)
        .map_err(|e| format!("session {index}: connect: {e}"))?;
    stream.set_nodelay(rng.percent(50)).unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let stream = Arc::new(stream);
    let stop = Arc::new(AtomicBool::new(false));
    let own = Arc::new(Mutex::new(Vec::new()));
    let read_thread = {
        let (stream, stop, own) = (Arc::clone(&stream), Arc::clone(&stop), Arc::clone(&own));
        thread::spawn(move || reader(stream, stop, own))
    };

    let started = Instant::now();
    let mut sent: Vec<u8> = Vec::new();
    let actions = rng.range(1, 24);
    let mut write_ok = true;
    for _ in 0..actions {
        if started.elapsed() > SESSION_TIME_CAP {
            break;
        }
        let ids = own.lock().unwrap().clone();
        let bytes = action(&mut rng, &ids);
        let was_put = bytes.starts_with(b"put ");
        write_ok = write_in_pieces(&stream, &bytes, &mut rng);
        sent.extend_from_slice(&bytes);
        if !write_ok {
            break; // the server quit on us, or is not reading (blocked reserve)
        }
        if was_put && rng.percent(50) {
            // Give the INSERTED reply a moment, so later commands can name it.
            let deadline = Instant::now() + Duration::from_millis(50);
            while own.lock().unwrap().len() == ids.len() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(1));
            }
        }
    }
    if write_ok {
        // End mid-command or mid-body now and then.
        let tail: Vec<u8> = match rng.below(10) {
            0..=2 => {
                let ids = own.lock().unwrap().clone();
                let mut cmd = valid_command(&mut rng, &ids);
                cmd.truncate(rng.below(cmd.len() as u64) as usize);
                cmd
            }
            3..=4 => {
                let data = vec![b'q'; rng.range(10, 3000)];
                let mut put = put_with_body(&mut rng, &data);
                put.truncate(put.len() - rng.range(3, data.len() + 1));
                put
            }
            _ => Vec::new(),
        };
        if write_in_pieces(&stream, &tail, &mut rng) {
            sent.extend_from_slice(&tail);
        }
    }
    let end = if rng.percent(50) { End::Close } else { End::HalfClose };
    let result = match end {
        End::Close => {
            stop.store(true, Ordering::SeqCst);
            if rng.percent(50) {
                let _ = stream.shutdown(Shutdown::Both);
            }
            drop(stream);
            read_thread.join().expect("reader thread");
            Ok(())
        }
        End::HalfClose => {
            let _ = stream.shutdown(Shutdown::Write);
            let deadline = Instant::now() + CLOSE_DEADLINE;
            while !read_thread.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Ordering::SeqCst);
            let got = read_thread.join().expect("reader thread");
            drop(stream);
            if got.closed {
                Ok(())
            } else {
                let path = std::env::temp_dir().join(format!("beanstalk-fuzz-{seed:#x}-session-{index}.bin"));
                let saved = std::fs::write(&path, &sent)
                    .map_or_else(|e| format!("(not saved: {e})"), |()| String::new());
                Err(format!(
                    "session {index}: the server did not close a half-closed connection within {CLOSE_DEADLINE:?} \
                     ({} bytes received); the {} bytes sent are in {} {saved}",
                    got.bytes,
                    sent.len(),
                    path.display()
                ))
            }
        }
    };
    result
}

/// Writes `bytes` whole or in random pieces; false if the write failed
/// (closed by the server, or not read within the write timeout).
fn write_in_pieces(stream: &TcpStream, bytes: &[u8], rng: &mut Rng) -> bool {
    let mut w = stream;
    if bytes.len() > 4096 || rng.percent(60) {
        return w.write_all(bytes).is_ok();
    }
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = rng.range(1, 64).min(rest.len());
        if w.write_all(&rest[..n]).is_err() {
            return false;
        }
        rest = &rest[n..];
        if rng.percent(5) {
            thread::sleep(Duration::from_millis(1));
        }
    }
    true
}

// -------------------------------------------------------------------
// The sentinel
// -------------------------------------------------------------------

#[derive(Default, Debug)]
struct SentinelReport {
    rounds: usize,
    replies: u32,
    max_reply: Duration,
    total: Duration,
}

/// put / reserve / delete on a tube of its own until `stop`, checking every
/// reply byte for byte, and counting its rounds in `rounds`. How long a
/// reply takes is noted, never bounded: a loaded machine may be slow.
fn sentinel(mut c: common::Client, stop: Arc<AtomicBool>, rounds: Arc<AtomicUsize>) -> SentinelReport {
    let mut report = SentinelReport::default();
    let timed = |c: &mut common::Client, bytes: &[u8], report: &mut SentinelReport| -> Vec<u8> {
        let t = Instant::now();
        c.send(bytes);
        let reply = c.reply_bytes();
        let took = t.elapsed();
        report.max_reply = report.max_reply.max(took);
        report.total += took;
        report.replies += 1;
        reply
    };
    assert_eq!(
        timed(&mut c, format!("use {SENTINEL_TUBE}\r\n").as_bytes(), &mut report),
        format!("USING {SENTINEL_TUBE}\r\n").as_bytes()
    );
    assert_eq!(
        timed(&mut c, format!("watch {SENTINEL_TUBE}\r\n").as_bytes(), &mut report),
        b"WATCHING 2\r\n"
    );
    assert_eq!(timed(&mut c, b"ignore default\r\n", &mut report), b"WATCHING 1\r\n");
    let mut last_id = 0;
    let round_cap = Instant::now() + common::HANG_GUARD;
    while !stop.load(Ordering::SeqCst) && Instant::now() < round_cap {
        let round = report.rounds;
        let mut data = format!("sentinel round {round} ").into_bytes();
        data.extend_from_slice(b"\r\n\0 \xff");
        data.resize(data.len() + round % 300, b'x');
        let mut put = format!("put {} 0 60 {}\r\n", round % 7, data.len()).into_bytes();
        put.extend_from_slice(&data);
        put.extend_from_slice(b"\r\n");
        let reply = timed(&mut c, &put, &mut report);
        let text = String::from_utf8_lossy(&reply).into_owned();
        let id: u64 = text
            .strip_prefix("INSERTED ")
            .and_then(|r| r.strip_suffix("\r\n"))
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("sentinel round {round}: put got {text:?}"));
        assert!(id > last_id, "sentinel round {round}: id {id} after {last_id}");
        last_id = id;

        let mut expected = format!("RESERVED {id} {}\r\n", data.len()).into_bytes();
        expected.extend_from_slice(&data);
        expected.extend_from_slice(b"\r\n");
        let reply = timed(&mut c, b"reserve-with-timeout 5\r\n", &mut report);
        assert_eq!(
            String::from_utf8_lossy(&reply),
            String::from_utf8_lossy(&expected),
            "sentinel round {round}: reserve"
        );

        if round % 10 == 9 {
            let reply = timed(&mut c, format!("stats-job {id}\r\n").as_bytes(), &mut report);
            let map = common::parse_yaml_map(&String::from_utf8_lossy(&reply));
            assert_eq!(
                map.get("state").map(String::as_str),
                Some("reserved"),
                "sentinel round {round}: {map:?}"
            );
            assert_eq!(
                map.get("tube").map(String::as_str),
                Some(&*format!("\"{SENTINEL_TUBE}\"")),
                "{map:?}"
            );
        }
        let reply = timed(&mut c, format!("delete {id}\r\n").as_bytes(), &mut report);
        assert_eq!(reply, b"DELETED\r\n", "sentinel round {round}: delete");

        if round % 25 == 24 {
            let yaml = format!("---\n- {SENTINEL_TUBE}\n");
            let reply = timed(&mut c, b"list-tubes-watched\r\n", &mut report);
            assert_eq!(String::from_utf8_lossy(&reply), format!("OK {}\r\n{yaml}\r\n", yaml.len()));
        }
        report.rounds += 1;
        rounds.store(report.rounds, Ordering::SeqCst);
        thread::sleep(Duration::from_millis(2));
    }
    report
}

// -------------------------------------------------------------------
// Process figures
// -------------------------------------------------------------------

// -------------------------------------------------------------------
// The test
// -------------------------------------------------------------------

#[test]
fn fuzzed_input_never_disturbs_a_well_behaved_client_and_leaks_nothing() {
    let seed = env_seed();
    let iterations = env_iterations();
    println!("fuzz: FUZZ_SEED={seed:#x} FUZZ_ITERATIONS={iterations} (set these to reproduce)");
    let began = Instant::now();

    let server = common::start();
    let addr = server.addr;
    // Let the server's own threads start before taking the baseline.
    let mut probe = server.connect();
    assert_eq!(probe.cmd("list-tube-used"), "USING default\r\n");
    drop(probe);
    assert!(settle(SETTLE_DEADLINE, || {
        let mut c = server.connect();
        c.stat("current-connections") == "1"
    }));
    let (threads_before, fds_before) = baseline();

    let stop_sentinel = Arc::new(AtomicBool::new(false));
    let sentinel_rounds = Arc::new(AtomicUsize::new(0));
    let sentinel_thread = {
        let c = server.connect();
        let (stop, rounds) = (Arc::clone(&stop_sentinel), Arc::clone(&sentinel_rounds));
        thread::spawn(move || sentinel(c, stop, rounds))
    };

    let next = Arc::new(AtomicUsize::new(0));
    let peak_threads = Arc::new(AtomicUsize::new(0));
    let fuzz_deadline = Instant::now() + FUZZ_TIME_CAP;
    let workers: Vec<_> = (0..FUZZERS)
        .map(|_| {
            let next = Arc::clone(&next);
            let peak = Arc::clone(&peak_threads);
            let sentinel_rounds = Arc::clone(&sentinel_rounds);
            thread::spawn(move || -> Result<usize, String> {
                let mut done = 0;
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let beside = sentinel_rounds.load(Ordering::SeqCst) >= SENTINEL_ROUNDS;
                    let over = index >= iterations || Instant::now() >= fuzz_deadline;
                    if (beside && over) || began.elapsed() >= common::HANG_GUARD {
                        return Ok(done);
                    }
                    session(addr, seed, index).map_err(|e| format!("FUZZ_SEED={seed:#x}: {e}"))?;
                    peak.fetch_max(thread_count(), Ordering::SeqCst);
                    done += 1;
                }
            })
        })
        .collect();
    let mut sessions = 0;
    let mut failures = Vec::new();
    for w in workers {
        match w.join() {
            Ok(Ok(n)) => sessions += n,
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push(format!("FUZZ_SEED={seed:#x}: a fuzz worker panicked")),
        }
    }
    let fuzz_time = began.elapsed();
    stop_sentinel.store(true, Ordering::SeqCst);
    let report = match sentinel_thread.join() {
        Ok(r) => r,
        Err(_) => panic!("FUZZ_SEED={seed:#x}: the sentinel failed (see its panic above)"),
    };
    println!(
        "fuzz: {sessions} sessions in {fuzz_time:?}; sentinel: {} rounds, max reply {:?}, mean {:?}; \
         threads {threads_before} before, {} at peak",
        report.rounds,
        report.max_reply,
        report.total / report.replies.max(1),
        peak_threads.load(Ordering::SeqCst),
    );
    println!("fuzz: replies seen: {:?}", REPLIES.lock().unwrap());
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(REPLIES.lock().unwrap().get("INTERNAL_ERROR"), None, "FUZZ_SEED={seed:#x}");
    let rounds = report.rounds;
    assert!(
        rounds >= SENTINEL_ROUNDS,
        "FUZZ_SEED={seed:#x}: the sentinel made only {rounds} rounds: held up"
    );

    // A fresh connection is served, stats parse, nothing is left over.
    let mut fresh = server.connect();
    assert_eq!(fresh.cmd("list-tube-used"), "USING default\r\n");
    let stats = fresh.stats();
    for key in
        ["current-connections", "current-waiting", "total-connections", "current-jobs-reserved", "uptime"]
    {
        let value = stats.get(key).unwrap_or_else(|| panic!("no stats key {key}"));
        assert!(value.parse::<u64>().is_ok(), "{key}: {value:?}");
    }
    assert!(stats["total-connections"].parse::<usize>().unwrap() >= sessions + 2);
    let mut last = Vec::new();
    let quiet = settle(SETTLE_DEADLINE, || {
        let s = fresh.stats();
        last = ["current-connections", "current-waiting", "current-jobs-reserved"]
            .map(|k| (k, s[k].clone()))
            .to_vec();
        s["current-connections"] == "1" && s["current-waiting"] == "0" && s["current-jobs-reserved"] == "0"
    });
    assert!(quiet, "FUZZ_SEED={seed:#x}: connections left over: {last:?}");
    assert_eq!(fresh.cmd("use fresh"), "USING fresh\r\n");
    let id = fresh.put_ok("still here");
    assert_eq!(fresh.cmd(&format!("reserve-job {id}")), format!("RESERVED {id} 10\r\nstill here\r\n"));
    assert_eq!(fresh.cmd(&format!("delete {id}")), "DELETED\r\n");
    drop(fresh);

    let threads_ok = settle(SETTLE_DEADLINE, || thread_count() <= threads_before);
    let fds_ok = settle(SETTLE_DEADLINE, || fd_count() <= fds_before);
    println!(
        "fuzz: after: threads {} (baseline {threads_before}), fds {} (baseline {fds_before}); total {:?}",
        thread_count(),
        fd_count(),
        began.elapsed()
    );
    assert!(threads_ok, "FUZZ_SEED={seed:#x}: threads {} > baseline {threads_before}", thread_count());
    assert!(fds_ok, "FUZZ_SEED={seed:#x}: fds {} > baseline {fds_before}", fd_count());
    drop(server);
}
