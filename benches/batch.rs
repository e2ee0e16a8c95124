//! Commands on many jobs against the one-job commands a client would loop
//! over, ours against beanstalkd's loops in the same run, with a probe
//! client's worst round trip while each runs.
//!
//!     cargo bench --bench batch
//!
//! - `clear`: a tube of `BATCH_JOBS` (default 1,000,000) 100-byte jobs,
//!   with `-b`: our `clear-tube`, against a client's `peek-ready` then
//!   `delete <id>` loop (the next `peek-ready` in the same write as each
//!   delete), which is all beanstalkd offers.
//! - `delete`: `delete-batch` of 1000 ids, against 1000 pipelined
//!   `delete`s (ids deleted a second).
//! - `reserve`: `reserve-batch 100`, against 100 pipelined `reserve`s
//!   (jobs reserved a second).
//! - `big`: 1000 jobs of 1 MB (`-z 1048576`) taken by `reserve-batch
//!   1000` (again until all are taken: a batch stops at 16 MiB), by our
//!   1000 pipelined reserves, and by beanstalkd's, with a put+delete probe
//!   beside each: the stall a batch of big bodies causes others.
//!
//! `BATCH_ONLY` runs one scenario, `BEANSTALKD=` skips beanstalkd,
//! `BATCH_OURS` names another build of ours. Loopback only; every server
//! is killed when its scenario ends.

mod common;

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{row, Client, Server, Settings};

fn main() {
    let settings = Settings::from_env("BATCH");
    let jobs: usize = std::env::var("BATCH_JOBS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    if settings.runs("clear") {
        clear(&settings, jobs);
    }
    if settings.runs("delete") {
        delete(&settings);
    }
    if settings.runs("reserve") {
        reserve(&settings);
    }
    if settings.runs("big") {
        big(&settings);
    }
}

/// Bytes of each job of the `big` scenario.
const BIG: usize = 1 << 20;

/// 1000 jobs of 1 MB taken by `reserve-batch` (`batch`) or 1000
/// pipelined reserves, with a put+delete probe beside: `(seconds, the
/// probe's worst ms)`, the worst of `rounds`.
fn big_round(binary: &str, batch: bool) -> (f64, f64) {
    let z = BIG.to_string();
    let server = Server::start_with(binary, &["-z", &z]);
    let mut c = Client::connect(server.port);
    let one = [format!("put 0 0 600 {BIG}\r\n").into_bytes(), vec![b'x'; BIG], b"\r\n".to_vec()].concat();
    for _ in 0..1000 {
        c.send(&one);
        c.reply();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let probe = common::start_probe(server.port, &stop);
    thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    let mut taken = 0;
    while taken < 1000 {
        if batch {
            c.send(b"reserve-batch 1000\r\n");
            c.line.clear();
            c.reader.read_line(&mut c.line).unwrap();
            let n: usize = c.line.trim_end().rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap();
            assert!(n > 0, "{}", c.line);
            for _ in 0..n {
                c.reply();
            }
            taken += n;
        } else {
            c.send("reserve\r\n".repeat(1000).as_bytes());
            for _ in 0..1000 {
                c.reply();
            }
            taken += 1000;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let times = probe.join().unwrap();
    (secs, times.iter().copied().fold(0.0, f64::max))
}

fn big(settings: &Settings) {
    let worst = |binary: &str, batch: bool| {
        let runs: Vec<(f64, f64)> = (0..settings.rounds).map(|_| big_round(binary, batch)).collect();
        (common::median(runs.iter().map(|r| r.0).collect()), runs.iter().map(|r| r.1).fold(0.0, f64::max))
    };
    let batch = worst(&settings.ours, true);
    let single = worst(&settings.ours, false);
    let theirs = settings.theirs.as_ref().map(|b| worst(b, false));
    row("1000 jobs of 1 MB: reserve-batch vs their reserves (s)", batch.0, theirs.map(|t| t.0));
    row("1000 jobs of 1 MB: our reserves vs theirs (s)", single.0, theirs.map(|t| t.0));
    row("  probe worst put+delete, reserve-batch (ms)", batch.1, theirs.map(|t| t.1));
    row("  probe worst put+delete, our reserves (ms)", single.1, theirs.map(|t| t.1));
}

/// A client that sends `list-tube-used` every millisecond until stopped;
/// its worst round trip, in ms.
struct Probe {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<f64>,
}

impl Probe {
    fn start(port: u16) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut c = Client::connect(port);
            let mut worst = Duration::ZERO;
            while !flag.load(Ordering::Relaxed) {
                let sent = Instant::now();
                c.send(b"list-tube-used\r\n");
                c.reply();
                worst = worst.max(sent.elapsed());
                thread::sleep(Duration::from_millis(1));
            }
            worst.as_secs_f64() * 1000.0
        });
        Probe { stop, thread }
    }

    fn worst_ms(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Puts `n` 100-byte jobs into `tube`, pipelined 1000 at a time.
fn fill(c: &mut Client, tube: &str, n: usize) {
    c.send(format!("use {tube}\r\n").as_bytes());
    c.reply();
    let one = format!("put 0 0 600 100\r\n{}\r\n", "x".repeat(100));
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        c.send(one.repeat(chunk.len()).as_bytes());
        for _ in chunk {
            c.reply();
        }
    }
}

/// Runs `work` against a fresh server of `binary` with `flags`, a probe
/// beside it; `(seconds, the probe's worst ms)`.
fn timed(
    binary: &str,
    flags: &[&str],
    prepare: impl Fn(&mut Client),
    work: impl Fn(&mut Client),
) -> (f64, f64) {
    let server = Server::start_with(binary, flags);
    let mut c = Client::connect(server.port);
    prepare(&mut c);
    let probe = Probe::start(server.port);
    thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    work(&mut c);
    let secs = start.elapsed().as_secs_f64();
    (secs, probe.worst_ms())
}

/// beanstalkd's way: peek-ready, then delete the job and peek again in one
/// write, until nothing is ready.
fn peek_delete_loop(c: &mut Client) {
    c.send(b"peek-ready\r\n");
    loop {
        let id = c.reply();
        if id == 0 {
            return;
        }
        c.send(format!("delete {id}\r\npeek-ready\r\n").as_bytes());
        c.reply();
    }
}

fn clear(settings: &Settings, jobs: usize) {
    let dir = |who: &str| {
        let path = std::env::temp_dir().join(format!("beanstalk-bench-clear-{who}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        path
    };
    let prepare = |c: &mut Client| fill(c, "bulk", jobs);
    let ours_dir = dir("ours");
    let flags = ["-b", ours_dir.to_str().unwrap()];
    let (clear_s, clear_worst) = timed(&settings.ours, &flags, prepare, |c| {
        c.send(b"clear-tube bulk\r\n");
        c.line.clear();
        c.reader.read_line(&mut c.line).unwrap();
        assert_eq!(c.line, format!("CLEARED {jobs}\r\n"));
    });
    let _ = std::fs::remove_dir_all(&ours_dir);
    let ours_dir = dir("ours-loop");
    let flags = ["-b", ours_dir.to_str().unwrap()];
    let (loop_s, loop_worst) = timed(&settings.ours, &flags, prepare, |c| {
        c.send(b"watch bulk\r\nuse bulk\r\n");
        c.reply();
        c.reply();
        peek_delete_loop(c);
    });
    let _ = std::fs::remove_dir_all(&ours_dir);
    let theirs = settings.theirs.as_ref().map(|binary| {
        let their_dir = dir("theirs");
        let flags = ["-b", their_dir.to_str().unwrap()];
        let measured = timed(binary, &flags, prepare, peek_delete_loop);
        let _ = std::fs::remove_dir_all(&their_dir);
        measured
    });
    let label = format!("clear {jobs} jobs with -b");
    row(&format!("{label}: clear-tube vs their loop (s)"), clear_s, theirs.map(|t| t.0));
    row(&format!("{label}: our loop vs their loop (s)"), loop_s, theirs.map(|t| t.0));
    row("  probe worst round trip, clear-tube (ms)", clear_worst, theirs.map(|t| t.1));
    row("  probe worst round trip, our loop (ms)", loop_worst, theirs.map(|t| t.1));
}

/// Deletes 100,000 jobs 1000 at a time: with `delete-batch` (`batch`) or
/// pipelined deletes.
fn delete_all(c: &mut Client, batch: bool) {
    for first in (1..=100_000u64).step_by(1000) {
        if batch {
            let ids: String = (first..first + 1000).map(|id| format!(" {id}")).collect();
            c.send(format!("delete-batch{ids}\r\n").as_bytes());
            c.reply();
        } else {
            let lines: String = (first..first + 1000).map(|id| format!("delete {id}\r\n")).collect();
            c.send(lines.as_bytes());
            for _ in 0..1000 {
                c.reply();
            }
        }
    }
}

fn delete(settings: &Settings) {
    let names = [
        "delete-batch 1000 vs their 1000 pipelined deletes (ids/s)",
        "our 1000 pipelined deletes vs theirs (ids/s)",
    ];
    batch_against_pipeline(settings, names, "delete-batch", delete_all);
}

/// Reserves 100,000 jobs 100 at a time: `reserve-batch 100` or 100
/// pipelined reserves.
fn reserve_all(c: &mut Client, batch: bool) {
    for _ in 0..1000 {
        if batch {
            c.send(b"reserve-batch 100\r\n");
            c.line.clear();
            c.reader.read_line(&mut c.line).unwrap();
            assert_eq!(c.line, "RESERVED_BATCH 100\r\n");
        } else {
            c.send("reserve\r\n".repeat(100).as_bytes());
        }
        for _ in 0..100 {
            c.reply();
        }
    }
}

fn reserve(settings: &Settings) {
    let names = [
        "reserve-batch 100 vs their 100 pipelined reserves (jobs/s)",
        "our 100 pipelined reserves vs theirs (jobs/s)",
    ];
    batch_against_pipeline(settings, names, "reserve-batch", reserve_all);
}

/// 100,000 jobs through `work` with the batch command (`true`) and the
/// one-job command pipelined (`false`), ours and theirs, medians of the
/// rounds: the rates and the probe's worst round trip, as rows.
fn batch_against_pipeline(settings: &Settings, names: [&str; 2], command: &str, work: fn(&mut Client, bool)) {
    let median = |batch: bool, binary: &str| {
        let runs: Vec<(f64, f64)> = (0..settings.rounds)
            .map(|_| timed(binary, &[], |c| fill(c, "default", 100_000), |c| work(c, batch)))
            .collect();
        let rate = common::median(runs.iter().map(|r| 100_000.0 / r.0).collect());
        (rate, runs.iter().map(|r| r.1).fold(0.0, f64::max))
    };
    let batch = median(true, &settings.ours);
    let single = median(false, &settings.ours);
    let theirs = settings.theirs.as_ref().map(|b| median(false, b));
    row(names[0], batch.0, theirs.map(|t| t.0));
    row(names[1], single.0, theirs.map(|t| t.0));
    row(&format!("  probe worst round trip, {command} (ms)"), batch.1, theirs.map(|t| t.1));
}
