//! Contention benchmark: where thread per connection meets the engine's one
//! lock, side by side with the real `beanstalkd` when it is installed, on
//! loopback. Rounds of ours and theirs alternate; each row is the median.
//!
//!     cargo bench --bench contention
//!
//! - fan-out: 1000 workers blocked in reserve, one producer putting one job
//!   at a time, each after the last one's INSERTED; put -> RESERVED latency
//!   (p50, p99), jobs/s, and the server's CPU time (user + system, from
//!   `/proc/<pid>/stat`) and its threads' switches (voluntary and not,
//!   from `/proc/<pid>/task/*/status`) a job.
//! - cycle at 1000 connections: 1000 clients each loop put, reserve,
//!   delete on a tube of its own, all at once; commands/s, the p99, p999
//!   and longest of one command's round trip (the far tail: a thread
//!   passed over by others), and the server's CPU time a command.
//!
//! The third contention figure, a probe's round trip behind another
//! client's pipelined delete burst, is `scale`'s give-back scenario
//! (`SCALE_ONLY=giveback cargo bench --bench scale`), which needs 3M jobs.
//!
//! Set BEANSTALKD to another beanstalkd binary or "" to skip it;
//! CONTENTION_ONLY to `fanout` or `cycle` for one scenario; CONTENTION_ROUNDS
//! (default 3); CONTENTION_OURS to measure another build of ours. Every
//! server it starts is killed when its round ends.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{blocked_workers, cpu_seconds, median, row, Client, Server, Settings};

fn main() {
    let settings = Settings::from_env("CONTENTION");
    let (ours, theirs, rounds) = (&settings.ours, settings.theirs.as_deref(), settings.rounds);
    if settings.runs("fanout") {
        let (a, b) = alternate(ours, theirs, rounds, |binary| fan_out(binary, 1000, 20_000));
        let figures: [Figure<5>; 5] = [
            ("fan-out 1000 workers: jobs/s", |f| f[0]),
            ("fan-out 1000 workers: p50 put->RESERVED (us)", |f| f[1] * 1e3),
            ("fan-out 1000 workers: p99 put->RESERVED (us)", |f| f[2] * 1e3),
            ("fan-out 1000 workers: server CPU a job (us)", |f| f[3]),
            ("fan-out 1000 workers: server thread switches a job", |f| f[4]),
        ];
        rows(&figures, &a, &b);
    }
    if settings.runs("cycle") {
        let (a, b) = alternate(ours, theirs, rounds, |binary| cycle(binary, 1000, 100));
        let figures: [Figure<5>; 5] = [
            ("cycle, 1000 connections: commands/s", |f| f[0]),
            ("cycle, 1000 connections: p99 round trip (ms)", |f| f[1]),
            ("cycle, 1000 connections: p999 round trip (ms)", |f| f[2]),
            ("cycle, 1000 connections: longest round trip (ms)", |f| f[3]),
            ("cycle, 1000 connections: server CPU a command (us)", |f| f[4]),
        ];
        rows(&figures, &a, &b);
    }
}

/// A row's name, and how to read it from one run's `N` figures.
type Figure<const N: usize> = (&'static str, fn(&[f64; N]) -> f64);

/// `rounds` runs of `measure` on ours and theirs, interleaved so that a
/// noisy minute hurts both.
fn alternate<T>(
    ours: &str,
    theirs: Option<&str>,
    rounds: usize,
    measure: impl Fn(&str) -> T,
) -> (Vec<T>, Vec<T>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let theirs_first = round % 2 == 1;
        if let (true, Some(theirs)) = (theirs_first, theirs) {
            b.push(measure(theirs));
        }
        a.push(measure(ours));
        if let (false, Some(theirs)) = (theirs_first, theirs) {
            b.push(measure(theirs));
        }
    }
    (a, b)
}

/// Prints each figure's median over the rounds, ours against theirs.
fn rows<const N: usize>(figures: &[Figure<N>], a: &[[f64; N]], b: &[[f64; N]]) {
    for (name, figure) in figures {
        let theirs = (!b.is_empty()).then(|| median(b.iter().map(figure).collect()));
        row(name, median(a.iter().map(figure).collect()), theirs);
    }
}

/// The `q`th percentile of sorted nanoseconds, in ms.
fn percentile_ms(sorted: &[u64], q: usize) -> f64 {
    per_mille_ms(sorted, q * 10)
}

/// The `q`-th per mille of `sorted` nanoseconds, in ms.
fn per_mille_ms(sorted: &[u64], q: usize) -> f64 {
    sorted[(sorted.len() * q / 1000).min(sorted.len() - 1)] as f64 / 1e6
}

/// How many times the threads of a process have been switched out so far,
/// by their own sleep or by the scheduler: each is a wake-up to pay for.
fn context_switches(pid: u32) -> f64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let status = tasks.filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok());
    let counts = status.flat_map(|status| {
        // voluntary_ctxt_switches and nonvoluntary_ctxt_switches
        let switches = status.lines().filter(|l| l.contains("ctxt_switches:"));
        switches.filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()).collect::<Vec<_>>()
    });
    counts.sum()
}

/// `workers` clients block in reserve; one producer puts `jobs` jobs, each
/// after the previous one's INSERTED, whose bodies carry the moment the put
/// was sent; each worker notes when the job reached it, deletes it and
/// reserves again. Returns jobs/s, p50 and p99 in ms, CPU a job in µs, and
/// the server's thread switches a job.
fn fan_out(binary: &str, workers: usize, jobs: usize) -> [f64; 5] {
    let server = Server::start(binary);
    let port = server.port;
    let origin = Instant::now();
    let ready = Arc::new(Barrier::new(workers + 1));
    let handles = blocked_workers(port, workers, &ready, move |c| {
        let arrived = origin.elapsed().as_nanos() as u64;
        let sent: u64 = std::str::from_utf8(&c.body).unwrap().trim().parse().unwrap();
        arrived.saturating_sub(sent)
    });
    ready.wait();
    thread::sleep(Duration::from_millis(500)); // let every reserve block
    let mut producer = Client::connect(port);
    let cpu_before = cpu_seconds(server.pid());
    let switches_before = context_switches(server.pid());
    let began = Instant::now();
    for _ in 0..jobs {
        let sent = format!("{:020}", origin.elapsed().as_nanos() as u64);
        producer.send(format!("put 0 0 60 20\r\n{sent}\r\n").as_bytes());
        producer.reply();
    }
    let elapsed = began.elapsed();
    // The last jobs' deletes: give them a moment before reading the CPU.
    thread::sleep(Duration::from_millis(100));
    let cpu = cpu_seconds(server.pid()) - cpu_before;
    let switches = context_switches(server.pid()) - switches_before;
    let mut latencies: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(latencies.len(), jobs);
    latencies.sort_unstable();
    [
        jobs as f64 / elapsed.as_secs_f64(),
        percentile_ms(&latencies, 50),
        percentile_ms(&latencies, 99),
        cpu / jobs as f64 * 1e6,
        switches / jobs as f64,
    ]
}

/// `connections` clients each loop put, reserve, delete `cycles` times on a
/// tube of its own, all at once. Returns commands/s, the p99, p999 and
/// longest of one command's round trip in ms, and the server's CPU time a
/// command in µs.
fn cycle(binary: &str, connections: usize, cycles: usize) -> [f64; 5] {
    let server = Server::start(binary);
    let port = server.port;
    let start = Arc::new(Barrier::new(connections + 1));
    let threads: Vec<_> = (0..connections)
        .map(|i| {
            let start = Arc::clone(&start);
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut c = Client::connect(port);
                    c.send(format!("use t{i}\r\nwatch t{i}\r\nignore default\r\n").as_bytes());
                    (0..3).for_each(|_| {
                        c.reply();
                    });
                    start.wait();
                    let mut times = Vec::with_capacity(cycles * 3);
                    let mut timed = |c: &mut Client, command: &[u8]| {
                        let t = Instant::now();
                        c.send(command);
                        let id = c.reply();
                        times.push(t.elapsed().as_nanos() as u64);
                        id
                    };
                    for _ in 0..cycles {
                        timed(&mut c, b"put 0 0 60 10\r\n0123456789\r\n");
                        let id = timed(&mut c, b"reserve\r\n");
                        timed(&mut c, format!("delete {id}\r\n").as_bytes());
                    }
                    times
                })
                .unwrap()
        })
        .collect();
    start.wait();
    let cpu_before = cpu_seconds(server.pid());
    let began = Instant::now();
    let mut times: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let elapsed = began.elapsed();
    let cpu = cpu_seconds(server.pid()) - cpu_before;
    times.sort_unstable();
    let commands = times.len() as f64;
    [
        commands / elapsed.as_secs_f64(),
        percentile_ms(&times, 99),
        per_mille_ms(&times, 999),
        per_mille_ms(&times, 1000),
        cpu / commands * 1e6,
    ]
}
