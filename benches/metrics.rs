//! What `--metrics` costs, on loopback, side by side with the real
//! `beanstalkd` where that means something.
//!
//!     cargo bench --bench metrics
//!
//! Three scenarios:
//! - scrape: 200,000 tubes holding a far-delayed job each; a probe client's
//!   put+delete round trip every millisecond for a few seconds without a
//!   scrape, then while a scraper asks `/metrics` back to back: the worst
//!   and the p99 round trip of each (the promise: worst grows by at most
//!   5 ms), and how long a scrape takes.
//! - cycle: put/reserve/delete on 8 connections, ours without and with
//!   `--metrics` (and scraped once a second), and beanstalkd (the promise:
//!   with within 3% of without).
//! - memory: RSS per job of 500,000 jobs of 100 bytes, ours without and
//!   with `--metrics`, and beanstalkd (the promise: within 2%).
//!
//! Set BEANSTALKD to another beanstalkd binary or "" to skip it;
//! METRICS_ONLY to `scrape`, `cycle` or `memory` to run one scenario;
//! METRICS_ROUNDS (default 3) for the cycle's rounds; METRICS_OURS to
//! measure another build of ours. Every server it starts is killed when its
//! scenario ends.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{free_port, median, pipeline, row, start_probe, status_kib, Client, Server, Settings};

fn main() {
    let s = Settings::from_env("METRICS");
    if s.runs("scrape") {
        scrape_cost(&s.ours);
    }
    if s.runs("cycle") {
        cycle(&s.ours, s.theirs.as_deref(), s.rounds);
    }
    if s.runs("memory") {
        memory(&s.ours, s.theirs.as_deref());
    }
}

/// A server of ours with `--metrics` on a free port; that port.
fn start_with_metrics(binary: &str) -> (Server, u16) {
    let port = free_port();
    let server = Server::start_args(binary, &["--metrics", &format!("127.0.0.1:{port}")]);
    (server, port)
}

/// One whole scrape; its size in bytes.
fn scrape(port: u16) -> usize {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    assert!(
        all.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&all[..all.len().min(200)])
    );
    all.len()
}

// -------------------------------------------------------------------------
// Scrape cost
// -------------------------------------------------------------------------

fn scrape_cost(ours: &str) {
    const TUBES: usize = 200_000;
    const PHASE: Duration = Duration::from_secs(4);
    let (server, metrics) = start_with_metrics(ours);
    let mut setup = Client::connect(server.port);
    let _ = pipeline(&mut setup, TUBES, 2, |i| format!("use t{i}\r\nput 0 86400 60 1\r\nx\r\n").into_bytes());
    let quiet = {
        let stop = Arc::new(AtomicBool::new(false));
        let p = start_probe(server.port, &stop);
        thread::sleep(PHASE);
        stop.store(true, Ordering::Relaxed);
        p.join().unwrap()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let p = start_probe(server.port, &stop);
    let began = Instant::now();
    let (mut scrapes, mut bytes) = (0, 0);
    while began.elapsed() < PHASE {
        bytes = scrape(metrics);
        scrapes += 1;
    }
    let scrape_ms = began.elapsed().as_secs_f64() * 1000.0 / f64::from(scrapes);
    stop.store(true, Ordering::Relaxed);
    let busy = p.join().unwrap();
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let p99 = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() * 99 / 100]
    };
    println!("(ours, {TUBES} tubes: a probe's put+delete while scraping back to back, against without)");
    row("probe worst round trip, scraping / not (ms)", max(&busy), Some(max(&quiet)));
    row("probe p99 round trip, scraping / not (ms)", p99(&busy), Some(p99(&quiet)));
    row("probe worst round trip growth (ms, target <= 5)", max(&busy) - max(&quiet), None);
    row(&format!("one scrape of {TUBES} tubes (ms; {bytes} bytes)"), scrape_ms, None);
}

// -------------------------------------------------------------------------
// The 8-connection cycle
// -------------------------------------------------------------------------

/// put/reserve/delete on 8 connections for a fixed count; jobs a second.
/// With `scraped`, a scraper asks `/metrics` on that port once a second.
fn cycle_rate(server: &Server, scraped: Option<u16>) -> f64 {
    const CONNECTIONS: usize = 8;
    const CYCLES_EACH: usize = 5_000;
    let port = server.port;
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = scraped.map(|metrics| {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                scrape(metrics);
                thread::sleep(Duration::from_secs(1));
            }
        })
    });
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
                start.wait();
                for _ in 0..CYCLES_EACH {
                    c.send(b"put 0 0 60 10\r\n0123456789\r\n");
                    c.reply();
                    c.send(b"reserve\r\n");
                    let id = c.reply();
                    c.send(format!("delete {id}\r\n").as_bytes());
                    c.reply();
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    workers.into_iter().for_each(|w| w.join().unwrap());
    let rate = (CONNECTIONS * CYCLES_EACH) as f64 / began.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    if let Some(scraper) = scraper {
        scraper.join().unwrap();
    }
    rate
}

fn cycle(ours: &str, theirs: Option<&str>, rounds: usize) {
    let (mut without, mut with, mut beanstalkd) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternating which goes first: the second of a pair tends to be
        // faster on a busy machine.
        let plain = || cycle_rate(&Server::start(ours), None);
        let metered = || {
            let (server, metrics) = start_with_metrics(ours);
            cycle_rate(&server, Some(metrics))
        };
        if round % 2 == 0 {
            without.push(plain());
            with.push(metered());
        } else {
            with.push(metered());
            without.push(plain());
        }
        if let Some(theirs) = theirs {
            beanstalkd.push(cycle_rate(&Server::start(theirs), None));
        }
    }
    let theirs = (!beanstalkd.is_empty()).then(|| median(beanstalkd));
    let (without, with) = (median(without), median(with));
    row("8-connection cycle, without --metrics (jobs/s)", without, theirs);
    row("8-connection cycle, with --metrics, scraped (jobs/s)", with, theirs);
    println!("(ours with --metrics against ours without; target >= 0.97)");
    row("8-connection cycle, with / without", with, Some(without));
}

// -------------------------------------------------------------------------
// Memory per job
// -------------------------------------------------------------------------

/// RSS per job of `JOBS` jobs of 100 bytes, in bytes.
fn rss_per_job(server: &Server) -> f64 {
    const JOBS: usize = 500_000;
    let mut c = Client::connect(server.port);
    let before = status_kib(server.pid(), "VmRSS:");
    let body = [b'x'; 100];
    let _ = pipeline(&mut c, JOBS, 1, |_| {
        let mut put = b"put 0 0 60 100\r\n".to_vec();
        put.extend_from_slice(&body);
        put.extend_from_slice(b"\r\n");
        put
    });
    let after = status_kib(server.pid(), "VmRSS:");
    (after.saturating_sub(before) * 1024) as f64 / JOBS as f64
}

fn memory(ours: &str, theirs: Option<&str>) {
    let without = rss_per_job(&Server::start(ours));
    let with = rss_per_job(&start_with_metrics(ours).0);
    let beanstalkd = theirs.map(|t| rss_per_job(&Server::start(t)));
    row("RSS per job, without --metrics (bytes)", without, beanstalkd);
    row("RSS per job, with --metrics (bytes)", with, beanstalkd);
    println!("(ours with --metrics against ours without; target <= 1.02)");
    row("RSS per job, with / without", with, Some(without));
}
