//! Load benchmark: the same client workloads against `beanstalk` and, when
//! it is installed, the real `beanstalkd`, in one run, on loopback.
//!
//!     cargo bench --bench load
//!
//! Set BEANSTALKD to another beanstalkd binary, or to "" to skip it,
//! BEANSTALK to another build of ours (the static `minimal` one, say),
//! LOAD_SCALE to scale every workload (default 1.0), and LIMIT_SERVER to
//! the engine-less responder of `../shared/tools/limit-server` to run the
//! cycle against it too: the ceiling of thread per connection on this
//! machine, and our fraction of it. LOAD_ROUNDS (default 1) runs each
//! workload that many times a server, alternating which goes first, and
//! shows the medians, their ratio, and the range of the rounds' ratios: a
//! shared machine's noise, to read a small difference against (the static
//! build against the release one, say). LOAD_ONLY runs only the workloads
//! whose names contain it (`LOAD_ONLY=pipelined`). Each workload is bounded in
//! count; every server it starts is killed when it ends.

mod common;

use std::io::{BufRead, Read, Write};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::rounds::ratio_of_rounds;
use common::{blocked_workers, cpu_seconds, median, status_kib, Client, Server};

fn main() {
    // `cargo bench` passes --bench; a filter argument could follow.
    let scale: f64 = std::env::var("LOAD_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let n = move |count: usize| ((count as f64 * scale) as usize).max(1);
    let ours = std::env::var("BEANSTALK").unwrap_or_else(|_| env!("CARGO_BIN_EXE_beanstalk").to_owned());
    let theirs = std::env::var("BEANSTALKD").unwrap_or_else(|_| "/usr/bin/beanstalkd".to_owned());
    let mut servers = vec![("beanstalk", ours)];
    if !theirs.is_empty() && std::path::Path::new(&theirs).exists() {
        servers.push(("beanstalkd", theirs));
    }

    let limit = std::env::var("LIMIT_SERVER").ok().filter(|s| !s.is_empty());
    let rounds: usize = std::env::var("LOAD_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let only = std::env::var("LOAD_ONLY").unwrap_or_default();

    type Workload = Box<dyn Fn(u16) -> Measure>;
    let workloads: Vec<(&str, Workload)> = vec![
        ("put+reserve+delete, 8 connections (jobs/s)", Box::new(move |port| cycle(port, 8, n(20_000)))),
        ("pipelined puts, 1 connection (puts/s)", Box::new(move |port| pipelined_puts(port, n(200_000)))),
        (
            "pipelined puts: server CPU a put (us, lower is better)",
            Box::new(move |port| {
                pipelined_puts(port, n(1_000_000));
                Measure::CpuPerOperation(n(1_000_000))
            }),
        ),
        ("fan-out to 1000 blocked workers (jobs/s)", Box::new(move |port| fan_out(port, 1000, n(20_000)))),
        (
            "memory per job, 100-byte bodies (bytes/job, lower is better)",
            Box::new(move |port| memory_per_job(port, n(200_000))),
        ),
        (
            "RSS per idle connection, 1000 used ones (KiB, lower is better)",
            Box::new(move |port| idle_connections(port, n(1000))),
        ),
    ];

    println!(
        "{:<62} {:>14} {:>14} {:>7}",
        "workload",
        servers[0].0,
        servers.get(1).map_or("-", |s| s.0),
        "ratio"
    );
    for (name, workload) in workloads.iter().filter(|(name, _)| name.contains(only.as_str())) {
        // Each round runs both servers, the first one first in even rounds
        // and second in odd ones, so neither always meets the machine as
        // the other left it.
        let mut rounds_of: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..servers.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let server = Server::start(&servers[i].1);
                let measure = workload(server.port);
                rounds_of[i].push(measure.value(server.pid()));
            }
        }
        let results: Vec<f64> = rounds_of.iter().map(|r| median(r.clone())).collect();
        let ratio = match rounds_of.as_slice() {
            [ours, theirs] => ratio_of_rounds(ours, theirs),
            _ => "-".to_owned(),
        };
        let theirs = results.get(1).map_or("-".to_owned(), |&v| figure(v));
        println!("{:<62} {:>14} {:>14} {:>7}", name, figure(results[0]), theirs, ratio);
        if let (Some(limit), true) = (&limit, name.starts_with("put+reserve+delete")) {
            let server = Server::start(limit);
            let ceiling = workload(server.port).value(server.pid());
            let ratio = format!("{:.2}", results[0] / ceiling);
            println!(
                "{:<62} {:>14} {:>14} {:>7}",
                "  the same, limit-server (no engine)",
                figure(results[0]),
                figure(ceiling),
                ratio
            );
        }
    }
}

/// A figure as the table shows it: small ones with two decimals.
fn figure(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// What a workload measured: a rate, or a memory figure read from the
/// server process before it is stopped.
enum Measure {
    Rate(f64),
    BytesPerJob {
        before_kib: u64,
        jobs: usize,
    },
    /// Measured by the workload itself.
    Value(f64),
    /// The server's CPU time (user and system, since it started: a few
    /// milliseconds of it are its start) over this many operations, in
    /// µs. A steadier figure than a rate on a shared machine, where the
    /// rate also waits for the client's CPU: enough operations for a
    /// second of CPU, at `/proc`'s 10 ms ticks.
    CpuPerOperation(usize),
}

impl Measure {
    fn value(&self, pid: u32) -> f64 {
        match self {
            Measure::Rate(r) => *r,
            Measure::BytesPerJob { before_kib, jobs } => {
                (rss_kib(pid).saturating_sub(*before_kib) * 1024) as f64 / *jobs as f64
            }
            Measure::Value(v) => *v,
            Measure::CpuPerOperation(operations) => cpu_seconds(pid) / *operations as f64 * 1e6,
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// Each connection loops put, reserve, delete.
fn cycle(port: u16, connections: usize, jobs_each: usize) -> Measure {
    let start = Arc::new(Barrier::new(connections + 1));
    let threads: Vec<_> = (0..connections)
        .map(|i| {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let mut c = Client::connect(port);
                let tube = format!("use t{i}\r\nwatch t{i}\r\nignore default\r\n");
                c.send(tube.as_bytes());
                (0..3).for_each(|_| {
                    c.reply();
                });
                start.wait();
                for _ in 0..jobs_each {
                    put_reserve_delete(&mut c, b"put 0 0 60 10\r\n0123456789\r\n");
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    threads.into_iter().for_each(|t| t.join().unwrap());
    Measure::Rate((connections * jobs_each) as f64 / began.elapsed().as_secs_f64())
}

/// Sends `put`, then reserves and deletes the job it made (the connection
/// watches only the tube it uses).
fn put_reserve_delete(c: &mut Client, put: &[u8]) {
    c.send(put);
    c.reply();
    c.send(b"reserve\r\n");
    let id = c.reply();
    c.send(format!("delete {id}\r\n").as_bytes());
    c.reply();
}

/// One connection writes puts in batches of 1000 and reads the replies.
fn pipelined_puts(port: u16, puts: usize) -> Measure {
    let mut c = Client::connect(port);
    let batch: Vec<u8> = b"put 0 0 60 10\r\n0123456789\r\n".repeat(1000);
    let began = Instant::now();
    let mut sent = 0;
    while sent < puts {
        let n = (puts - sent).min(1000);
        let bytes = &batch[..n * 27];
        let mut writer = c.writer.try_clone().unwrap();
        let bytes = bytes.to_vec();
        // Write on another thread so neither side's buffers can deadlock.
        let w = thread::spawn(move || writer.write_all(&bytes).unwrap());
        (0..n).for_each(|_| {
            c.reply();
        });
        w.join().unwrap();
        sent += n;
    }
    Measure::Rate(puts as f64 / began.elapsed().as_secs_f64())
}

/// Workers block in reserve; one producer puts jobs; each worker deletes
/// what it gets and reserves again. Measures delivery rate.
fn fan_out(port: u16, workers: usize, jobs: usize) -> Measure {
    let ready = Arc::new(Barrier::new(workers + 1));
    let handles = blocked_workers(port, workers, &ready, |_| 1);
    ready.wait();
    thread::sleep(Duration::from_millis(300)); // let every reserve block
    let mut producer = Client::connect(port);
    let began = Instant::now();
    let writer = {
        let mut w = producer.writer.try_clone().unwrap();
        thread::spawn(move || {
            for _ in 0..jobs {
                w.write_all(b"put 0 0 60 10\r\n0123456789\r\n").unwrap();
            }
        })
    };
    (0..jobs).for_each(|_| {
        producer.reply();
    });
    writer.join().unwrap();
    // Wait until every job has been deleted.
    let mut stats = Client::connect(port);
    loop {
        stats.send(b"stats-tube default\r\n");
        stats.line.clear();
        stats.reader.read_line(&mut stats.line).unwrap();
        let len: usize = stats.line.split_whitespace().nth(1).unwrap().parse().unwrap();
        let mut body = vec![0; len + 2];
        stats.reader.read_exact(&mut body).unwrap();
        let body = String::from_utf8_lossy(&body);
        let count = |key: &str| {
            body.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0)
        };
        if count("current-jobs-ready:") + count("current-jobs-reserved:") == 0 {
            break;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let rate = jobs as f64 / began.elapsed().as_secs_f64();
    let delivered: usize = handles.into_iter().map(|h| h.join().unwrap().len()).sum();
    assert_eq!(delivered, jobs);
    Measure::Rate(rate)
}

/// Puts `jobs` jobs with 100-byte bodies; memory is read before the server
/// stops.
/// Reads an `OK <bytes>` reply and its body.
fn ok_body(c: &mut Client) -> String {
    c.line.clear();
    c.reader.read_line(&mut c.line).unwrap();
    let len: usize = c.line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = vec![0; len + 2];
    c.reader.read_exact(&mut body).unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

/// The server's pid, from `stats`.
fn server_pid(c: &mut Client) -> u32 {
    c.send(b"stats\r\n");
    ok_body(c).lines().find_map(|l| l.strip_prefix("pid: ")).and_then(|v| v.parse().ok()).unwrap()
}

/// What an idle connection costs: `connections` clients each run `stats`,
/// `list-tubes` and a put/reserve/delete, then go quiet; RSS is read 3 s
/// later (our server frees a quiet connection's buffers after a second,
/// and gives free pages back a second after that).
fn idle_connections(port: u16, connections: usize) -> Measure {
    let mut first = Client::connect(port);
    let pid = server_pid(&mut first);
    drop(first);
    thread::sleep(Duration::from_millis(300));
    let before_kib = rss_kib(pid);
    let clients: Vec<Client> = (0..connections)
        .map(|_| {
            let mut c = Client::connect(port);
            server_pid(&mut c);
            c.send(b"list-tubes\r\n");
            ok_body(&mut c);
            put_reserve_delete(&mut c, b"put 0 0 60 5\r\nhello\r\n");
            c
        })
        .collect();
    thread::sleep(Duration::from_secs(4));
    let per_connection = rss_kib(pid).saturating_sub(before_kib) as f64 / clients.len() as f64;
    Measure::Value(per_connection)
}

fn memory_per_job(port: u16, jobs: usize) -> Measure {
    let mut c = Client::connect(port);
    let pid = server_pid(&mut c);
    let before_kib = rss_kib(pid);
    let body = [b'x'; 100];
    let mut put = b"put 0 0 60 100\r\n".to_vec();
    put.extend_from_slice(&body);
    put.extend_from_slice(b"\r\n");
    let batch = put.repeat(1000);
    let mut sent = 0;
    while sent < jobs {
        let n = (jobs - sent).min(1000);
        let bytes = batch[..n * put.len()].to_vec();
        let mut w = c.writer.try_clone().unwrap();
        let t = thread::spawn(move || w.write_all(&bytes).unwrap());
        (0..n).for_each(|_| {
            c.reply();
        });
        t.join().unwrap();
        sent += n;
    }
    Measure::BytesPerJob { before_kib, jobs }
}
