//! Exactly once under stress: producers, workers, quitters and a kicker
//! run at once against the real binary, over TCP and over a UNIX socket,
//! for a few seconds each. Then every acknowledged put is accounted for,
//! and the record of who held which job is checked:
//!
//! - every job id is held by at most one worker at any moment;
//! - a job put with a TTR of a minute is never taken from its worker, so
//!   every command a worker sends for it succeeds;
//! - each job's body is the one its producer put;
//! - every acknowledged put is deleted once by a worker, or is still in
//!   the server at the end, and nothing else is;
//! - on every connection, pipelined replies come in the order of their
//!   commands.
//!
//! The mix: blocking `reserve`, `reserve-with-timeout 0` and `1`, release
//! (some delayed), bury (kicked back), touch, TTR-1 jobs held past their
//! TTR, a worker that pipelines a 60 KB `peek` before its reserve and reads
//! slowly, clients that hang up while blocked in `reserve`, and one kick of
//! many delayed jobs that holds the engine's lock for a long moment.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::wire::{inserted, Conn, Target};
use common::Rng;

/// How long the producers and workers run at least, per transport...
const RUN_FOR: Duration = Duration::from_secs(3);
/// ...and until this many reservations were made: the work is counted,
/// not timed, so a loaded machine takes longer rather than fails...
const ENOUGH_HOLDS: usize = 1000;
/// ...within a deadline that only a hang passes.
const DEADLINE: Duration = common::HANG_GUARD;
const PRODUCERS: u64 = 3;
const WORKERS: u64 = 4;
/// Delayed jobs in another tube, kicked at once mid-run.
const BIG_KICK: usize = 100_000;

/// One reservation as a worker saw it.
struct Hold {
    id: u64,
    worker: u64,
    body: String,
    /// When the `RESERVED` had been read: the hold began before this.
    got: Instant,
    /// When the last command on the job that succeeded was sent: the hold
    /// lasted at least until then. `None` if none succeeded.
    confirmed_until: Option<Instant>,
}

/// What every thread writes down, checked once they have all stopped.
#[derive(Default)]
struct Ledger {
    /// Acknowledged puts: id → body.
    acked: HashMap<u64, String>,
    holds: Vec<Hold>,
    /// Ids a worker got `DELETED` for.
    deleted: Vec<u64>,
    errors: Vec<String>,
}

type Shared = Arc<Mutex<Ledger>>;

fn error(ledger: &Shared, what: String) {
    ledger.lock().unwrap().errors.push(what);
}

fn id_of(reply: &str) -> u64 {
    reply.split(' ').nth(1).and_then(|n| n.trim_end().parse().ok()).unwrap_or(0)
}

/// The body of a `RESERVED id n\r\nbody\r\n` or `FOUND …` reply.
fn body_of(reply: &str) -> String {
    let start = reply.find("\r\n").map_or(0, |i| i + 2);
    reply[start..].trim_end_matches("\r\n").to_string()
}

/// Puts small jobs (TTR 1 or 60, some delayed a second) in pipelined
/// batches with a `stats-tube` in the middle, until `stop`.
fn producer(
    target: &Target,
    n: u64,
    big: u64,
    ledger: Shared,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<()> {
    let mut conn = target.connect();
    thread::spawn(move || {
        let mut rng = Rng::new(100 + n);
        let (mut seq, mut last_id) = (0u64, 0u64);
        while !stop.load(Ordering::SeqCst) {
            if n == 0 && rng.chance(20) {
                unread_puts(&mut conn, big, &mut seq, &ledger);
                continue;
            }
            // Now and then a pause, so that workers block in reserve and
            // the next put hands its job to one of them.
            if rng.chance(30) {
                thread::sleep(Duration::from_millis(30));
            }
            let batch = 1 + rng.below(5) as usize;
            let mut bodies = Vec::new();
            let mut bytes = Vec::new();
            for i in 0..batch {
                let ttr = if rng.chance(300) { 1 } else { 60 };
                let delay = u32::from(rng.chance(100));
                let body = format!("p{n}-{seq}-ttr{ttr}");
                seq += 1;
                bytes.extend(
                    format!("put {} {delay} {ttr} {}\r\n{body}\r\n", rng.below(3), body.len()).bytes(),
                );
                if i == batch / 2 {
                    bytes.extend(b"stats-tube default\r\n");
                }
                bodies.push(body);
            }
            conn.send(&bytes);
            for (i, body) in bodies.into_iter().enumerate() {
                let reply = conn.reply();
                let id = inserted(&reply);
                if id <= last_id {
                    error(&ledger, format!("producer {n}: INSERTED {id} after {last_id}"));
                }
                last_id = id;
                ledger.lock().unwrap().acked.insert(id, body);
                if i == batch / 2 {
                    let stats = conn.reply();
                    if !stats.starts_with("OK ") || !stats.contains("\nname: \"default\"\n") {
                        error(&ledger, format!("producer {n}: stats-tube answered {stats:?}"));
                    }
                }
            }
            // Slower than the workers, so that they often wait in reserve.
            thread::sleep(Duration::from_millis(10));
        }
    })
}

/// Eight rounds of a 60 KB `peek` and a TTR-1 put, 30 ms apart, with
/// no reply read until the end: a producer whose socket is full must hold
/// up nobody but itself.
fn unread_puts(conn: &mut Conn, big: u64, seq: &mut u64, ledger: &Shared) {
    let mut bodies = Vec::new();
    for _ in 0..8 {
        let body = format!("p0-{seq}-ttr1");
        *seq += 1;
        conn.send(format!("peek {big}\r\nput 0 0 1 {}\r\n{body}\r\n", body.len()));
        bodies.push(body);
        thread::sleep(Duration::from_millis(30));
    }
    for body in bodies {
        let found = conn.reply();
        if !found.starts_with(&format!("FOUND {big} ")) {
            error(ledger, format!("producer 0: peek answered {:?}", &found[..found.len().min(40)]));
        }
        let id = inserted(&conn.reply());
        ledger.lock().unwrap().acked.insert(id, body);
    }
}

/// Reserves, acts on the job, and writes down what it saw, until `stop`
/// (then it stops before its next reserve) or it is given a `stop` job.
/// Worker 0 now and then reads slowly behind a 60 KB `peek` of `big`; the
/// last worker now and then holds a TTR-1 job past its TTR.
fn worker(
    target: &Target,
    n: u64,
    big: u64,
    ledger: Shared,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<()> {
    let mut conn = target.connect();
    thread::spawn(move || {
        let mut rng = Rng::new(200 + n);
        while !stop.load(Ordering::SeqCst) {
            let reserved = if n == 0 && rng.chance(100) {
                slow_peeks_then_reserve(&mut conn, big, &ledger)
            } else {
                match rng.below(3) {
                    0 => conn.cmd("reserve"),
                    1 => {
                        // A pipelined second command: its reply must follow.
                        conn.send("reserve-with-timeout 0\r\nlist-tube-used\r\n");
                        let reply = conn.reply();
                        let used = conn.reply();
                        if used != "USING default\r\n" {
                            error(&ledger, format!("worker {n}: list-tube-used answered {used:?}"));
                        }
                        reply
                    }
                    _ => conn.cmd("reserve-with-timeout 1"),
                }
            };
            if reserved == "TIMED_OUT\r\n" {
                continue;
            }
            if !reserved.starts_with("RESERVED ") {
                error(&ledger, format!("worker {n}: reserve answered {reserved:?}"));
                return;
            }
            let (id, body) = (id_of(&reserved), body_of(&reserved));
            let got = Instant::now();
            if body == "stop" {
                if conn.cmd(&format!("delete {id}")) == "DELETED\r\n" {
                    ledger.lock().unwrap().deleted.push(id);
                }
                return;
            }
            act(&mut conn, n, &mut rng, Hold { id, worker: n, body, got, confirmed_until: None }, &ledger);
        }
    })
}

/// Pipelines five `peek`s of the 60 KB job `big` and a reserve, and reads
/// the replies at about 2 MB/s, so that the server's writes block while a
/// job may be handed over. Returns the reserve's reply.
fn slow_peeks_then_reserve(conn: &mut Conn, big: u64, ledger: &Shared) -> String {
    let header = format!("FOUND {big} 60000\r\n");
    let found = header.len() + 60_000 + 2;
    conn.send(format!("peek {big}\r\n").repeat(5) + "reserve-with-timeout 1\r\n");
    let mut chunk = [0; 2048];
    conn.stream.set_timeout(Some(common::REPLY_TIMEOUT));
    while conn.buf.len() < 5 * found {
        match std::io::Read::read(&mut conn.stream, &mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(k) => conn.buf.extend_from_slice(&chunk[..k]),
        }
        thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..5 {
        let reply = conn.reply();
        if !reply.starts_with(&header) || reply.len() != found || reply.contains("RESERVED") {
            error(ledger, format!("slow worker: peek answered {:?}", &reply[..reply.len().min(40)]));
        }
    }
    conn.reply()
}

/// One worker's commands on one job it holds, in the proportions of a
/// real worker: mostly delete, some release, bury, touch; and for TTR-1
/// jobs, now and then a pause past the TTR.
fn act(conn: &mut Conn, n: u64, rng: &mut Rng, mut hold: Hold, ledger: &Shared) {
    let id = hold.id;
    let long_ttr = hold.body.ends_with("-ttr60");
    let mut deleted = false;
    let mut steps: Vec<(String, &str)> = match rng.below(20) {
        0..=2 => vec![(format!("release {id} 1 {}", rng.below(2)), "RELEASED\r\n")],
        3..=4 => vec![(format!("bury {id} 1"), "BURIED\r\n")],
        5..=6 => vec![(format!("touch {id}"), "TOUCHED\r\n"), (format!("delete {id}"), "DELETED\r\n")],
        7..=9 if !long_ttr && n == WORKERS - 1 => {
            // Past the TTR the job is no longer ours: it is ready again
            // (so this delete may still take it) or another worker's.
            thread::sleep(Duration::from_millis(1300));
            vec![(format!("delete {id}"), "DELETED\r\n")]
        }
        _ => vec![(format!("peek {id}"), "FOUND"), (format!("delete {id}"), "DELETED\r\n")],
    };
    // The steps go pipelined, in one write; their replies must come in order.
    let sent = Instant::now();
    conn.send(steps.iter().map(|(cmd, _)| format!("{cmd}\r\n")).collect::<String>());
    for (cmd, expected) in steps.drain(..) {
        let reply = conn.reply();
        if reply.starts_with(expected) {
            // Only the holder can touch, release or bury; anyone can
            // delete a ready job, so a delete proves the hold only where
            // the TTR cannot have run out.
            if !cmd.starts_with("delete") || long_ttr {
                hold.confirmed_until = Some(sent);
            }
            if expected == "FOUND" && body_of(&reply) != hold.body {
                error(ledger, format!("worker {n}: {cmd} answered {reply:?}, reserved {:?}", hold.body));
            }
            deleted |= expected == "DELETED\r\n";
        } else if reply != "NOT_FOUND\r\n" || long_ttr {
            error(ledger, format!("worker {n}: {cmd} answered {reply:?}"));
        }
    }
    let mut ledger = ledger.lock().unwrap();
    if deleted {
        ledger.deleted.push(id);
    }
    ledger.holds.push(hold);
}

/// Connects, blocks in `reserve`, and hangs up a moment later without
/// reading, over and over, until `stop`.
fn quitter(target: &Target, n: u64, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let connect = {
        let unix = target.unix.clone();
        let addr = target.server.addr;
        move || -> Box<dyn std::io::Write + Send> {
            match &unix {
                Some(path) => Box::new(std::os::unix::net::UnixStream::connect(path).unwrap()),
                None => Box::new(std::net::TcpStream::connect(addr).unwrap()),
            }
        }
    };
    thread::spawn(move || {
        let mut rng = Rng::new(300 + n);
        while !stop.load(Ordering::SeqCst) {
            let mut conn = connect();
            conn.write_all(b"reserve\r\n").unwrap();
            thread::sleep(Duration::from_millis(rng.below(20)));
        }
    })
}

/// Kicks buried jobs back every 50 ms, and once, a second into the run,
/// kicks [`BIG_KICK`] delayed jobs of tube `slow` at once.
fn kicker(target: &Target, ledger: Shared, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let (mut conn, mut slow) = (target.connect(), target.connect());
    thread::spawn(move || {
        let started = Instant::now();
        let mut kicked_slow = false;
        while !stop.load(Ordering::SeqCst) {
            let reply = conn.cmd("kick 1000");
            if !reply.starts_with("KICKED ") {
                error(&ledger, format!("kicker: kick answered {reply:?}"));
            }
            if !kicked_slow && started.elapsed() > Duration::from_secs(1) {
                kicked_slow = true;
                let reply = slow.cmd(&format!("use slow\r\nkick {BIG_KICK}"));
                let kicked = slow.reply();
                if reply != "USING slow\r\n" || kicked != format!("KICKED {BIG_KICK}\r\n") {
                    error(&ledger, format!("kicker: {reply:?} {kicked:?}"));
                }
            }
            thread::sleep(Duration::from_millis(50));
        }
    })
}

/// Every job still in tube `default` once nobody holds any: waits out the
/// delays (and a quitter's reservation, until the server has seen it hang
/// up), kicks the buried, and reserves and deletes until none is left.
fn drain(target: &Target) -> Vec<(u64, String)> {
    let mut conn = target.connect();
    let mut left = Vec::new();
    let deadline = Instant::now() + common::HANG_GUARD;
    loop {
        assert!(conn.cmd("kick 1000000").starts_with("KICKED "));
        loop {
            let reply = conn.cmd("reserve-with-timeout 0");
            if reply == "TIMED_OUT\r\n" {
                break;
            }
            let id = id_of(&reply);
            left.push((id, body_of(&reply)));
            assert_eq!(conn.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
        let stats = common::parse_yaml_map(&conn.cmd("stats-tube default"));
        let states = ["ready", "reserved", "delayed", "buried"];
        let Some(state) = states.iter().find(|state| stats[&format!("current-jobs-{state}")] != "0") else {
            return left;
        };
        assert!(Instant::now() < deadline, "{state} jobs left after the drain");
        thread::sleep(Duration::from_millis(50));
    }
}

fn run(unix: bool) {
    let target = Target::start(unix, &[]);
    let mut setup = target.connect();
    // In a tube of its own, out of reach of the kicker's kicks.
    assert_eq!(setup.cmd("use big"), "USING big\r\n");
    let big = setup.put_delayed(3600, 60, &[b'b'; 60_000]);
    assert_eq!(setup.cmd("use slow"), "USING slow\r\n");
    let batch = b"put 0 3600 60 1\r\nd\r\n".repeat(1000);
    for _ in 0..BIG_KICK / 1000 {
        setup.send(&batch);
        for _ in 0..1000 {
            inserted(&setup.reply());
        }
    }

    let ledger = Shared::default();
    let (stop_producing, stop_working) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|n| producer(&target, n, big, Arc::clone(&ledger), Arc::clone(&stop_producing)))
        .collect();
    let workers: Vec<_> = (0..WORKERS)
        .map(|n| worker(&target, n, big, Arc::clone(&ledger), Arc::clone(&stop_working)))
        .collect();
    let quitters: Vec<_> = (0..2).map(|n| quitter(&target, n, Arc::clone(&stop_producing))).collect();
    let kicker = kicker(&target, Arc::clone(&ledger), Arc::clone(&stop_producing));

    let started = Instant::now();
    thread::sleep(RUN_FOR);
    while ledger.lock().unwrap().holds.len() < ENOUGH_HOLDS {
        assert!(
            started.elapsed() < DEADLINE,
            "fewer than {ENOUGH_HOLDS} reservations in {DEADLINE:?}: a hang"
        );
        thread::sleep(Duration::from_millis(50));
    }
    stop_producing.store(true, Ordering::SeqCst);
    for t in producers.into_iter().chain(quitters).chain([kicker]) {
        t.join().unwrap();
    }
    // Workers blocked in `reserve` stop when given a `stop` job.
    stop_working.store(true, Ordering::SeqCst);
    assert_eq!(setup.cmd("use default"), "USING default\r\n");
    let deadline = Instant::now() + common::HANG_GUARD;
    while workers.iter().any(|w| !w.is_finished()) {
        assert!(Instant::now() < deadline, "a worker did not stop");
        let id = setup.put(60, b"stop");
        ledger.lock().unwrap().acked.insert(id, "stop".into());
        thread::sleep(Duration::from_millis(20));
    }
    for w in workers {
        w.join().unwrap();
    }
    let left = drain(&target);
    check(Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap(), left);
}

fn check(ledger: Ledger, left: Vec<(u64, String)>) {
    let Ledger { acked, mut holds, mut deleted, mut errors } = ledger;
    for hold in &holds {
        if acked.get(&hold.id) != Some(&hold.body) {
            errors.push(format!(
                "job {} reserved with body {:?}, put as {:?}",
                hold.id,
                hold.body,
                acked.get(&hold.id)
            ));
        }
    }
    // At most one holder at a time: each confirmed hold's known span ends
    // before the next hold of the same job began.
    holds.sort_by_key(|h| (h.id, h.got));
    let mut held: Option<(u64, u64, Instant)> = None; // id, worker, until
    for hold in &holds {
        if let Some((id, worker, until)) = held {
            if id == hold.id && until > hold.got {
                errors.push(format!("job {id} held by workers {worker} and {} at once", hold.worker));
            }
        }
        if let Some(until) = hold.confirmed_until {
            if held.is_none_or(|(id, _, before)| id != hold.id || until > before) {
                held = Some((hold.id, hold.worker, until));
            }
        }
    }
    // Every acknowledged put deleted once, or left at the end.
    for (id, body) in &left {
        if acked.get(id) != Some(body) {
            errors.push(format!("job {id} {body:?} left at the end was never put"));
        }
    }
    deleted.extend(left.iter().map(|(id, _)| id));
    deleted.sort_unstable();
    let count = deleted.len();
    deleted.dedup();
    if deleted.len() != count {
        errors.push(format!("{} jobs were deleted twice", count - deleted.len()));
    }
    let lost: Vec<_> = acked.keys().filter(|id| deleted.binary_search(id).is_err()).collect();
    if !lost.is_empty() {
        errors.push(format!(
            "{} acknowledged jobs lost, such as {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }
    assert!(errors.is_empty(), "{} errors, the first: {:#?}", errors.len(), &errors[..errors.len().min(10)]);
    let lapsed = holds.iter().filter(|h| h.confirmed_until.is_none()).count();
    eprintln!("{} puts, {} reservations, {lapsed} of them lost or unproven", acked.len(), holds.len());
    assert!(holds.len() >= ENOUGH_HOLDS, "too little work to prove anything: {} holds", holds.len());
}

#[test]
fn every_job_goes_to_one_worker_at_a_time_over_tcp() {
    run(false);
}

#[test]
fn every_job_goes_to_one_worker_at_a_time_over_a_unix_socket() {
    run(true);
}
