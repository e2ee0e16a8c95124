//! Bounded flood tests: connection churn, slow clients, a thousand blocked
//! reserves that vanish at once, and the connection cap. Each checks that a
//! well-behaved client keeps being served and that connections, threads
//! and file descriptors come back to baseline.
//!
//! The server runs inside this test process, so its threads and sockets are
//! counted in /proc/self/task and /proc/self/fd. The tests take a lock so
//! that they run one at a time and each sees only its own server.
//!
//! No test bounds a latency or a rate: a loaded machine may be slow. A
//! stall shows instead as a flood that cannot end: each flood goes on
//! until the well-behaved client has made its rounds beside it, and a
//! client held up behind the flood would keep it going until the hang
//! guard.
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::{baseline, fd_count, settle, stat_u64, thread_count, Client};

/// Waiting for connections, threads and fds to come back to baseline.
const SETTLE_DEADLINE: Duration = common::HANG_GUARD;
const CONNECT_TIMEOUT: Duration = common::HANG_GUARD;
/// The round trips the sentinel makes while a flood goes on.
const ROUNDS_DURING: usize = 10;

/// Waits until `rounds` reaches `count`: within the hang guard, or the
/// sentinel was held up behind the flood.
fn until_rounds(rounds: &AtomicUsize, count: usize) {
    let reached = settle(common::HANG_GUARD, || rounds.load(Ordering::SeqCst) >= count);
    assert!(reached, "the sentinel made only {} of {count} rounds: held up", rounds.load(Ordering::SeqCst));
}

// -------------------------------------------------------------------
// Helpers
// -------------------------------------------------------------------

static SERIAL: Mutex<()> = Mutex::new(());

/// One flood test at a time: thread and fd counts are per process.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The soft limit on open files.
fn fd_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

/// How many connections of `wanted` can be held open at once here: each
/// costs two fds in this process (client and server side). Never raises a
/// limit; says so when it scales down.
fn scaled(wanted: usize, what: &str) -> usize {
    let limit = fd_limit();
    let room = limit.saturating_sub(fd_count() + 200) / 2;
    if room < wanted {
        println!("{what}: fd limit {limit} is low; using {room} connections instead of {wanted}");
        room.max(10)
    } else {
        wanted
    }
}

/// Asserts that threads and fds come back to the baseline, and prints the
/// figures and how long it took.
fn assert_back_to_baseline(what: &str, threads_before: usize, fds_before: usize) {
    let t = Instant::now();
    let threads_ok = settle(SETTLE_DEADLINE, || thread_count() <= threads_before);
    let fds_ok = settle(SETTLE_DEADLINE, || fd_count() <= fds_before);
    println!(
        "{what}: after: threads {} (baseline {threads_before}), fds {} (baseline {fds_before}), settled in {:?}",
        thread_count(),
        fd_count(),
        t.elapsed()
    );
    assert!(threads_ok, "{what}: threads {} > baseline {threads_before}", thread_count());
    assert!(fds_ok, "{what}: fds {} > baseline {fds_before}", fd_count());
}

/// Polls `stats` until `key` has `value`; panics with the last value seen.
fn settle_stat(c: &mut Client, key: &str, value: u64, what: &str) -> Duration {
    let t = Instant::now();
    let mut last = u64::MAX;
    let ok = settle(SETTLE_DEADLINE, || {
        last = stat_u64(c, key);
        last == value
    });
    assert!(ok, "{what}: {key} stayed at {last}, expected {value}");
    t.elapsed()
}

/// A client that owns tube `tube`: uses and watches only it.
fn sentinel(server: &common::TestServer, tube: &str) -> Client {
    let mut c = server.connect();
    assert_eq!(c.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
    assert_eq!(c.cmd(&format!("watch {tube}")), "WATCHING 2\r\n");
    assert_eq!(c.cmd("ignore default"), "WATCHING 1\r\n");
    c
}

/// One put / reserve / delete round trip with exact replies; its duration.
fn round(c: &mut Client, n: usize) -> Duration {
    let body = format!("round {n}");
    let t = Instant::now();
    let id = c.put_ok(&body);
    assert_eq!(c.cmd("reserve-with-timeout 5"), format!("RESERVED {id} {}\r\n{body}\r\n", body.len()));
    assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    t.elapsed()
}

/// Runs rounds on `c` until `stop`, 5 ms apart, counting them in `rounds`;
/// returns the durations.
fn background_rounds(
    mut c: Client,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicUsize>,
) -> thread::JoinHandle<(Client, Vec<Duration>)> {
    thread::spawn(move || {
        let mut samples = Vec::new();
        let cap = Instant::now() + common::HANG_GUARD;
        while !stop.load(Ordering::SeqCst) && Instant::now() < cap {
            samples.push(round(&mut c, samples.len()));
            rounds.fetch_add(1, Ordering::SeqCst);
            thread::sleep(Duration::from_millis(5));
        }
        (c, samples)
    })
}

/// "n=.., median .., p99 .., max ..".
fn summary(samples: &[Duration]) -> String {
    let mut s = samples.to_vec();
    s.sort();
    if s.is_empty() {
        return "no samples".into();
    }
    let at = |q: f64| s[((s.len() - 1) as f64 * q) as usize];
    format!("n={}, median {:?}, p99 {:?}, max {:?}", s.len(), at(0.5), at(0.99), s[s.len() - 1])
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
}

// -------------------------------------------------------------------
// (a) Connection churn
// -------------------------------------------------------------------

#[test]
fn connection_churn_does_not_starve_other_clients_or_leak() {
    let _serial = serial();
    let wanted: usize =
        std::env::var("FLOOD_CONNECTIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let server = common::start();
    let addr = server.addr;
    let mut s = sentinel(&server, "churn.sentinel");
    let before: Vec<Duration> = (0..20).map(|n| round(&mut s, n)).collect();
    let total_before = stat_u64(&mut s, "total-connections");
    let (threads_before, fds_before) = baseline();

    let stop = Arc::new(AtomicBool::new(false));
    let sentinel_rounds = Arc::new(AtomicUsize::new(0));
    let rounds = background_rounds(s, Arc::clone(&stop), Arc::clone(&sentinel_rounds));
    let started = Instant::now();
    // The churn stops after `wanted` connections, or early after 12 s; but
    // not before 1000 connections, nor before the sentinel has made its
    // rounds beside it (a sentinel held up keeps it going to the hang guard).
    let time_cap = started + Duration::from_secs(12);
    let opened_by_all = Arc::new(AtomicUsize::new(0));
    let churners: Vec<_> = (0..2)
        .map(|w| {
            let (sentinel_rounds, opened_by_all) = (Arc::clone(&sentinel_rounds), Arc::clone(&opened_by_all));
            thread::spawn(move || {
                let (mut opened, mut failed) = (0usize, 0usize);
                for i in 0.. {
                    let enough = opened_by_all.load(Ordering::SeqCst) >= 1000
                        && sentinel_rounds.load(Ordering::SeqCst) >= ROUNDS_DURING;
                    if (enough && (i >= wanted / 2 || Instant::now() >= time_cap))
                        || started.elapsed() >= common::HANG_GUARD
                    {
                        break;
                    }
                    let Ok(mut c) = connect(addr) else {
                        failed += 1;
                        continue;
                    };
                    opened += 1;
                    opened_by_all.fetch_add(1, Ordering::SeqCst);
                    // Some say nothing; some leave a partial command or body
                    // behind; some send a command and never read the reply.
                    let partial: &[u8] = match (i + w) % 8 {
                        0..=3 => b"",
                        4 => b"put 0 0 1",
                        5 => b"put 0 0 10 100\r\nabc",
                        6 => b"stats",
                        _ => b"list-tube-used\r\n",
                    };
                    if !partial.is_empty() {
                        let _ = c.write_all(partial);
                    }
                    if i % 16 == 15 {
                        let _ = c.shutdown(Shutdown::Write);
                    }
                    drop(c);
                }
                (opened, failed)
            })
        })
        .collect();
    let (mut opened, mut failed) = (0, 0);
    for c in churners {
        let (o, f) = c.join().expect("churner");
        opened += o;
        failed += f;
    }
    let churn_time = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let (mut s, during) = rounds.join().expect("sentinel rounds");
    println!(
        "churn: {opened} connections opened and dropped ({failed} connects failed) in {churn_time:?}; \
         threads now {}",
        thread_count()
    );
    println!("churn: sentinel round trip before: {}", summary(&before));
    println!("churn: sentinel round trip during: {}", summary(&during));
    assert_eq!(failed, 0, "connects failed");
    assert!(opened >= 1000, "only {opened} connections before the hang guard");
    let made = during.len();
    assert!(made >= ROUNDS_DURING, "the sentinel made only {made} rounds during the churn: held up");

    // Every churned connection is accepted (some may still sit in the
    // listen queue when the churn ends), and every one is gone.
    let wait = settle_stat(&mut s, "total-connections", total_before + opened as u64, "churn");
    println!("churn: total-connections reached {} after {wait:?}", total_before + opened as u64);
    let wait = settle_stat(&mut s, "current-connections", 1, "churn");
    println!("churn: current-connections back to 1 after {wait:?}");
    assert_eq!(stat_u64(&mut s, "current-waiting"), 0);
    round(&mut s, 0);
    assert_back_to_baseline("churn", threads_before, fds_before);
}

// -------------------------------------------------------------------
// (b) Slow clients
// -------------------------------------------------------------------

/// Sends `bytes` one at a time, 50 ms apart. Before the last byte it checks
/// that no reply has come for the partial command.
fn dribble(c: &mut Client, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        if i + 1 == bytes.len() {
            c.expect_silence(Duration::from_millis(50));
        } else {
            thread::sleep(Duration::from_millis(50));
        }
        c.send([*b]);
    }
}

#[test]
fn slow_clients_get_correct_replies_and_do_not_delay_others() {
    let _serial = serial();
    const SLOW: usize = 8;
    let server = common::start();
    let mut s = sentinel(&server, "slow.sentinel");
    let before: Vec<Duration> = (0..20).map(|n| round(&mut s, n)).collect();
    let (threads_before, fds_before) = baseline();

    let stop = Arc::new(AtomicBool::new(false));
    let sentinel_rounds = Arc::new(AtomicUsize::new(0));
    let rounds = background_rounds(s, Arc::clone(&stop), Arc::clone(&sentinel_rounds));
    let slow: Vec<_> = (0..SLOW)
        .map(|k| {
            let mut c = server.connect();
            let sentinel_rounds = Arc::clone(&sentinel_rounds);
            thread::spawn(move || {
                let t = Instant::now();
                let tube = format!("slow{k}");
                dribble(&mut c, format!("use {tube}\r\n").as_bytes());
                c.expect(format!("USING {tube}\r\n"));
                // The body holds a CRLF of its own.
                let body = format!("slow\r\nbody{k}");
                dribble(&mut c, format!("put {k} 0 60 {}\r\n{body}\r\n", body.len()).as_bytes());
                let reply = c.reply();
                let id: u64 = reply
                    .strip_prefix("INSERTED ")
                    .and_then(|r| r.trim_end().parse().ok())
                    .unwrap_or_else(|| panic!("slow put: {reply:?}"));
                dribble(&mut c, format!("peek {id}\r\n").as_bytes());
                c.expect(format!("FOUND {id} {}\r\n{body}\r\n", body.len()));
                // The sentinel makes its rounds while every slow client
                // holds a command half sent.
                let delete = format!("delete {id}\r\n");
                let (most, last) = delete.as_bytes().split_at(delete.len() - 1);
                dribble(&mut c, most);
                until_rounds(&sentinel_rounds, 2 * ROUNDS_DURING);
                dribble(&mut c, last);
                c.expect("DELETED\r\n");
                t.elapsed()
            })
        })
        .collect();
    let slow_times: Vec<Duration> = slow.into_iter().map(|h| h.join().expect("slow client")).collect();
    stop.store(true, Ordering::SeqCst);
    let (mut s, during) = rounds.join().expect("sentinel rounds");
    println!("slow: {SLOW} dribbling clients took {}", summary(&slow_times));
    println!("slow: sentinel round trip before: {}", summary(&before));
    println!("slow: sentinel round trip during: {}", summary(&during));
    assert!(during.len() >= 2 * ROUNDS_DURING, "the sentinel made only {} rounds", during.len());
    settle_stat(&mut s, "current-connections", 1, "slow");
    round(&mut s, 0);
    assert_back_to_baseline("slow", threads_before, fds_before);
}

// -------------------------------------------------------------------
// (c) A thousand blocked reserves that vanish at once
// -------------------------------------------------------------------

#[test]
fn a_thousand_blocked_reserves_that_vanish_leave_no_waiter_behind() {
    let _serial = serial();
    let n = scaled(1000, "waiters");
    let server = common::start();
    let addr = server.addr;
    let mut c = server.connect();
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    let (threads_before, fds_before) = baseline();

    let t = Instant::now();
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let mut w = connect(addr).unwrap_or_else(|e| panic!("waiter {i}: connect: {e}"));
        // Some pipeline a command behind the reserve; it must stay unread.
        let bytes: &[u8] = if i % 10 == 0 { b"reserve\r\nlist-tubes\r\n" } else { b"reserve\r\n" };
        w.write_all(bytes).unwrap_or_else(|e| panic!("waiter {i}: {e}"));
        waiters.push(w);
    }
    let wait = settle_stat(&mut c, "current-waiting", n as u64, "waiters");
    println!(
        "waiters: {n} blocked in reserve after {:?} (+{wait:?} to show in stats); threads {}, fds {}",
        t.elapsed(),
        thread_count(),
        fd_count()
    );
    assert_eq!(stat_u64(&mut c, "current-connections"), n as u64 + 1);
    let latency: Vec<Duration> = (0..10)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
            t.elapsed()
        })
        .collect();
    println!("waiters: control round trip with {n} waiting: {}", summary(&latency));

    // All vanish at once.
    drop(waiters);
    let t = Instant::now();
    settle_stat(&mut c, "current-waiting", 0, "after the waiters vanished");
    settle_stat(&mut c, "current-connections", 1, "after the waiters vanished");
    println!("waiters: current-waiting and current-connections settled {:?} after the drop", t.elapsed());

    // A put now goes to nobody: it is ready, never reserved.
    let id = c.put_ok("after the flood");
    for _ in 0..2 {
        let job = c.yaml_map(&format!("stats-job {id}"));
        assert_eq!(job["state"], "ready", "{job:?}");
        assert_eq!(job["reserves"], "0", "{job:?}");
        thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(stat_u64(&mut c, "current-jobs-reserved"), 0);
    let mut worker = server.connect();
    assert_eq!(worker.cmd("reserve-with-timeout 2"), format!("RESERVED {id} 15\r\nafter the flood\r\n"));
    assert_eq!(worker.cmd(&format!("delete {id}")), "DELETED\r\n");
    drop(worker);
    settle_stat(&mut c, "current-connections", 1, "waiters");
    assert_back_to_baseline("waiters", threads_before, fds_before);
}

// -------------------------------------------------------------------
// (d) The connection cap
// -------------------------------------------------------------------

/// What became of a connection opened while the server may be at its cap.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Served,
    Closed,
    Stuck,
}

fn probe(stream: &mut TcpStream) -> Fate {
    // A refused connection may already be closed: the write may fail.
    let _ = stream.write_all(b"list-tube-used\r\n");
    stream.set_read_timeout(Some(common::REPLY_TIMEOUT)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return if got.is_empty() { Fate::Closed } else { Fate::Stuck },
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got == b"USING default\r\n" {
                    return Fate::Served;
                }
                if got.len() >= 15 {
                    panic!("unexpected reply {:?}", String::from_utf8_lossy(&got));
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return Fate::Closed;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return Fate::Stuck,
            Err(e) => panic!("probe: {e}"),
        }
    }
}

/// Opens `n` connections and sorts them by fate: (served, closed, stuck).
fn open_and_probe(addr: SocketAddr, n: usize) -> (Vec<TcpStream>, usize, usize, usize) {
    let mut streams: Vec<TcpStream> =
        (0..n).map(|i| connect(addr).unwrap_or_else(|e| panic!("connection {i}: connect: {e}"))).collect();
    let (mut served, mut closed, mut stuck) = (0, 0, 0);
    for s in &mut streams {
        match probe(s) {
            Fate::Served => served += 1,
            Fate::Closed => closed += 1,
            Fate::Stuck => stuck += 1,
        }
    }
    (streams, served, closed, stuck)
}

#[test]
fn the_connection_cap_holds_under_a_flood_and_existing_clients_are_unaffected() {
    let _serial = serial();
    const CAP: usize = 50;
    let flood = scaled(200, "cap");
    let server = common::start_args(&["--max-connections", "50"]);
    let addr = server.addr;
    let mut s = sentinel(&server, "cap.sentinel");
    let before: Vec<Duration> = (0..20).map(|n| round(&mut s, n)).collect();
    let (threads_before, fds_before) = baseline();

    // Watch current-connections from the sentinel while the flood arrives.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let (mut peak, mut samples, mut rounds) = (0, 0, Vec::new());
            let cap = Instant::now() + common::HANG_GUARD;
            while !stop.load(Ordering::SeqCst) && Instant::now() < cap {
                peak = peak.max(stat_u64(&mut s, "current-connections"));
                samples += 1;
                rounds.push(round(&mut s, samples));
                thread::sleep(Duration::from_millis(2));
            }
            (s, peak, samples, rounds)
        })
    };
    let t = Instant::now();
    let (streams, served, closed, stuck) = open_and_probe(addr, flood);
    let flood_time = t.elapsed();
    stop.store(true, Ordering::SeqCst);
    let (mut s, peak, samples, during) = watcher.join().expect("watcher");
    let now = stat_u64(&mut s, "current-connections");
    println!(
        "cap: {flood} connections in {flood_time:?}: {served} served, {closed} closed by the server, \
         {stuck} neither; current-connections peak {peak} over {samples} samples, now {now}"
    );
    println!("cap: sentinel round trip before: {}", summary(&before));
    println!("cap: sentinel round trip during: {}", summary(&during));
    assert_eq!(stuck, 0, "connections neither served nor closed");
    assert_eq!(served, CAP - 1, "the sentinel holds one of the {CAP} places");
    assert_eq!(closed, flood - served);
    assert!(peak <= CAP as u64 && now <= CAP as u64, "current-connections went over the cap: {peak}, {now}");
    assert_eq!(now, CAP as u64);
    round(&mut s, 0);

    // Once they go, the places are free again: exactly CAP - 1 more fit.
    drop(streams);
    settle_stat(&mut s, "current-connections", 1, "cap");
    let (streams, served, closed, stuck) = open_and_probe(addr, CAP);
    println!(
        "cap: after the flood left, {CAP} new connections: {served} served, {closed} closed, {stuck} neither"
    );
    assert_eq!((served, closed, stuck), (CAP - 1, 1, 0));
    drop(streams);
    settle_stat(&mut s, "current-connections", 1, "cap");
    round(&mut s, 0);
    assert_back_to_baseline("cap", threads_before, fds_before);
}
