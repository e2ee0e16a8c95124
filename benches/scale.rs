//! Scale benchmark: what happens as the work grows, side by side with the
//! real `beanstalkd` when it is installed, on loopback.
//!
//!     cargo bench --bench scale
//!
//! Three scenarios, each printing ours, theirs and the ratio (fan-out and
//! the 1000-connection cycle are the `contention` benchmark's):
//! - memory: fill 250k, 500k, 1M and 2M jobs with 100-byte bodies, each in
//!   a fresh server; RSS and peak RSS (VmHWM) per job. After the 500k fill,
//!   every job is deleted and RSS is read again a few seconds later.
//! - many tubes: put/reserve/delete over 4 connections, with a trickle of
//!   delayed jobs falling due, with and without 200,000 idle tubes each
//!   holding one far-delayed job (ours only: beanstalkd scans every tube on
//!   every event and collapses well before 200,000).
//! - give-back stall: 3,000,000 jobs of 64 bytes, then every other one
//!   deleted, then the rest; an idle client's put+delete round trip, every
//!   millisecond throughout and for 5 s after, max and p99. This is where
//!   freed memory goes back to the system, and it must not stall anyone;
//!   and the deletes come as pipelined batches of 1,000, so it is also
//!   where one client's pipeline must not starve another of the lock.
//!
//! Set BEANSTALKD to another beanstalkd binary or "" to skip it; SCALE_ONLY
//! to `memory`, `tubes` or `giveback` to run one scenario; SCALE_ROUNDS (default
//! 3) for the rounds of the timed scenarios; SCALE_OURS to measure another
//! build of ours (an older commit, for before-and-after figures). Every server it starts is
//! killed when its scenario ends.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{median, pipeline, row, start_probe, status_kib, Client, Server, Settings};

fn main() {
    let s = Settings::from_env("SCALE");
    if s.runs("memory") {
        memory(&s.ours, s.theirs.as_deref());
    }
    if s.runs("tubes") {
        many_tubes(&s.ours, s.rounds);
    }
    if s.runs("giveback") {
        give_back_stall(&s.ours, s.theirs.as_deref());
    }
}

// -------------------------------------------------------------------------
// Memory
// -------------------------------------------------------------------------

struct Fill {
    rss_per_job: f64,
    peak_per_job: f64,
    /// After deleting everything: (RSS - start) / (peak RSS - start).
    after_drain: Option<f64>,
}

fn memory(ours: &str, theirs: Option<&str>) {
    for jobs in [250_000, 500_000, 1_000_000, 2_000_000] {
        let drain = jobs == 500_000;
        let a = fill(ours, jobs, drain);
        let b = theirs.map(|t| fill(t, jobs, drain));
        row(&format!("RSS per job at {jobs} jobs (B)"), a.rss_per_job, b.as_ref().map(|b| b.rss_per_job));
        row(
            &format!("peak RSS per job at {jobs} jobs (B)"),
            a.peak_per_job,
            b.as_ref().map(|b| b.peak_per_job),
        );
        if let Some(after) = a.after_drain {
            let theirs = b.and_then(|b| b.after_drain).map(|v| v * 100.0);
            row(&format!("RSS 5 s after deleting all {jobs}, % of peak growth"), after * 100.0, theirs);
        }
    }
}

fn fill(binary: &str, jobs: usize, drain: bool) -> Fill {
    let server = Server::start(binary);
    let mut c = Client::connect(server.port);
    let pid = server.pid();
    let start = status_kib(pid, "VmRSS:");
    let mut put = b"put 0 0 60 100\r\n".to_vec();
    put.extend_from_slice(&[b'x'; 100]);
    put.extend_from_slice(b"\r\n");
    let first = pipeline(&mut c, jobs, 1, |_| put.clone());
    let rss = status_kib(pid, "VmRSS:");
    let peak = status_kib(pid, "VmHWM:");
    let per_job = |kib: u64| (kib.saturating_sub(start) * 1024) as f64 / jobs as f64;
    let mut after_drain = None;
    if drain {
        pipeline(&mut c, jobs, 1, |i| format!("delete {}\r\n", first + i as u64).into_bytes());
        thread::sleep(Duration::from_secs(5));
        let after = status_kib(pid, "VmRSS:");
        after_drain = Some(after.saturating_sub(start) as f64 / rss.saturating_sub(start).max(1) as f64);
    }
    Fill { rss_per_job: per_job(rss), peak_per_job: per_job(peak), after_drain }
}

// -------------------------------------------------------------------------
// Many tubes
// -------------------------------------------------------------------------

fn many_tubes(ours: &str, rounds: usize) {
    const IDLE_TUBES: usize = 200_000;
    let (mut plain, mut crowded) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternating which goes first: the second run of a pair tends to be
        // faster on a busy machine.
        if round % 2 == 0 {
            plain.push(cycle_beside_tubes(ours, 0));
            crowded.push(cycle_beside_tubes(ours, IDLE_TUBES));
        } else {
            crowded.push(cycle_beside_tubes(ours, IDLE_TUBES));
            plain.push(cycle_beside_tubes(ours, 0));
        }
    }
    let rate = |runs: &[Cycle]| median(runs.iter().map(|r| r.rate).collect());
    let p99 = |runs: &[Cycle]| median(runs.iter().map(|r| r.p99_ms).collect());
    println!("(ours with {IDLE_TUBES} idle tubes, against ours without; target >= 0.90 and <= 1.50)");
    row("cycle with idle tubes / without (jobs/s)", rate(&crowded), Some(rate(&plain)));
    row("cycle p99 with idle tubes / without (ms)", p99(&crowded), Some(p99(&plain)));
}

struct Cycle {
    rate: f64,
    p99_ms: f64,
}

/// put/reserve/delete on 4 connections for a fixed count, while a trickle of
/// 1-second-delayed jobs falls due every few milliseconds, beside
/// `idle_tubes` tubes each holding one job delayed by a day.
fn cycle_beside_tubes(binary: &str, idle_tubes: usize) -> Cycle {
    const CONNECTIONS: usize = 4;
    const CYCLES_EACH: usize = 5_000;
    let server = Server::start(binary);
    let port = server.port;
    let mut setup = Client::connect(port);
    let idle = |i| format!("use idle{i}\r\nput 0 86400 60 1\r\nx\r\n").into_bytes();
    pipeline(&mut setup, idle_tubes, 2, idle);
    let stop = Arc::new(AtomicBool::new(false));
    let trickle = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut c = Client::connect(port);
            c.send(b"use trickle\r\n");
            c.reply();
            while !stop.load(Ordering::Relaxed) {
                c.send(b"put 0 1 60 1\r\nx\r\n");
                c.reply();
                thread::sleep(Duration::from_millis(3));
            }
        })
    };
    thread::sleep(Duration::from_millis(1100)); // the trickle is falling due
    let start = Arc::new(Barrier::new(CONNECTIONS + 1));
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let mut c = Client::connect(port);
                c.send(format!("use c{i}\r\nwatch c{i}\r\nignore default\r\n").as_bytes());
                (0..3).for_each(|_| {
                    c.reply();
                });
                let mut latencies = Vec::with_capacity(CYCLES_EACH * 3);
                start.wait();
                for _ in 0..CYCLES_EACH {
                    let t = Instant::now();
                    c.send(b"put 0 0 60 10\r\n0123456789\r\n");
                    c.reply();
                    let t2 = Instant::now();
                    c.send(b"reserve\r\n");
                    let id = c.reply();
                    let t3 = Instant::now();
                    c.send(format!("delete {id}\r\n").as_bytes());
                    c.reply();
                    latencies.extend([t2 - t, t3 - t2, t3.elapsed()]);
                }
                latencies
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let mut latencies: Vec<Duration> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let elapsed = began.elapsed();
    stop.store(true, Ordering::Relaxed);
    trickle.join().unwrap();
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    Cycle {
        rate: (CONNECTIONS * CYCLES_EACH) as f64 / elapsed.as_secs_f64(),
        p99_ms: p99.as_secs_f64() * 1000.0,
    }
}

// -------------------------------------------------------------------------
// Fan-out tail
// -------------------------------------------------------------------------

// -------------------------------------------------------------------------
// Give-back stall
// -------------------------------------------------------------------------

/// Round trips of the probe, in ms: while every other job is deleted, and
/// while the rest are deleted and for 5 s after.
struct Probe {
    half: Vec<f64>,
    rest: Vec<f64>,
    random: Vec<f64>,
}

fn give_back_stall(ours: &str, theirs: Option<&str>) {
    const JOBS: usize = 3_000_000;
    let a = drain_with_probe(ours, JOBS);
    let b = theirs.map(|t| drain_with_probe(t, JOBS));
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let p99 = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() * 99 / 100]
    };
    type Figure = fn(&Probe) -> &[f64];
    let phases: [(&str, Figure); 3] = [
        ("deleting half", |p| &p.half),
        ("deleting the rest", |p| &p.rest),
        ("deleting all in random order", |p| &p.random),
    ];
    for (phase, part) in phases {
        let theirs = |f: &dyn Fn(&[f64]) -> f64| b.as_ref().map(|b| f(part(b)));
        row(&format!("idle put+delete max, {phase} of 3M (ms)"), max(part(&a)), theirs(&max));
        row(&format!("idle put+delete p99, {phase} of 3M (ms)"), p99(part(&a)), theirs(&p99));
    }
}

/// Fills `jobs` jobs of 64 bytes, then deletes the odd ids, then the even
/// ones, while a second client does a put+delete round trip every
/// millisecond.
fn drain_with_probe(binary: &str, jobs: usize) -> Probe {
    let server = Server::start(binary);
    let mut c = Client::connect(server.port);
    let mut put = b"put 0 0 60 64\r\n".to_vec();
    put.extend_from_slice(&[b'x'; 64]);
    put.extend_from_slice(b"\r\n");
    let first = pipeline(&mut c, jobs, 1, |_| put.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let probe = start_probe(server.port, &stop);
    let half = jobs / 2;
    pipeline(&mut c, half, 1, |i| format!("delete {}\r\n", first + 2 * i as u64 + 1).into_bytes());
    stop.store(true, Ordering::Relaxed);
    let half_times = probe.join().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let probe = start_probe(server.port, &stop);
    pipeline(&mut c, half, 1, |i| format!("delete {}\r\n", first + 2 * i as u64).into_bytes());
    thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let rest = probe.join().unwrap();
    // Again, deleting in a random order: freed blocks then merge into
    // holes of every size all over the heap, not in one sweep.
    let first = pipeline(&mut c, jobs, 1, |_| put.clone());
    let mut order: Vec<u64> = (0..jobs as u64).map(|i| first + i).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for i in (1..order.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        order.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let probe = start_probe(server.port, &stop);
    pipeline(&mut c, jobs, 1, |i| format!("delete {}\r\n", order[i]).into_bytes());
    thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    Probe { half: half_times, rest, random: probe.join().unwrap() }
}

// -------------------------------------------------------------------------
// Plumbing
// -------------------------------------------------------------------------
