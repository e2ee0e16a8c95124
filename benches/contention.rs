//! Contention benchmark: where thread per connection meets the engine's one
//! lock, as a crowd of clients meets it in production, against the real
//! `beanstalkd` and the no-engine responder (`../shared/tools/limit-server`,
//! the ceiling of thread per connection on this machine) in alternating
//! rounds, on loopback. Every workload runs for a fixed time with every
//! client busy throughout, as `../shared/tools/loadgen` runs it: a fixed
//! count a client would let the fast finish and leave, and the starved
//! ones then run alone, which hides a steady crowd's tail.
//!
//!     cargo bench --bench contention
//!     CONTENTION_ONLY=cycle CONTENTION_ROUNDS=5 cargo bench --bench contention
//!
//! - cycle: 1000 connections, each on a tube of its own, loop put,
//!   reserve, delete for 3 s after a 0.5 s warm-up (`loadgen cycle --conns
//!   1000 --duration 3`, though loadgen's share one tube: against our server
//!   its tubes of their own read a p99 1.6 times loadgen's, 1.04 to 3.5 over
//!   9 paired rounds, and one shared tube 0.7); the latency is one
//!   command's round trip.
//! - fan-out: 1000 workers blocked in `reserve`, one producer keeping 32
//!   jobs put and not yet reserved (`loadgen fanout --workers 1000 --window
//!   32`), then one at a time (`--window 1`); the latency is put ->
//!   `RESERVED`, the unit a job. The responder sits this one out: its
//!   `reserve` answers at once.
//!
//! Each reports, as medians of the rounds: commands (jobs) a second; the
//! p50, p99, p999 and longest latency (the far tail: a thread passed over
//! by the others); the server's CPU time a command (user + system, from
//! `/proc/<pid>/stat`) over the measured window; its threads' switches a
//! command over the whole round (from `/proc/<pid>/task/*/schedstat`, read
//! while they are idle: reading 1000 busy threads' counts held the bench's
//! thread for seconds, a crowd's CPU slices apart); and each
//! round's wall time, from the server up to every client done (a round
//! that should take 4 s and takes 20 is a finding: each round's is listed),
//! and how much of it came before the warm-up (every client connected, and
//! for the fan-out, waiting) and after the clients were told to stop (a
//! starved client finishing its command; the fan-out's drain of up to 3 s).
//! Ours against each other server is the ratio of the medians and the
//! range of the rounds' own ratios, the shared machine's noise.
//!
//! The third contention figure, a probe's round trip behind another
//! client's pipelined delete burst, is `scale`'s give-back scenario
//! (`SCALE_ONLY=giveback cargo bench --bench scale`), which needs 3M jobs.
//!
//! Environment: BEANSTALKD, another beanstalkd binary or "" to skip it;
//! LIMIT_SERVER, the responder's binary or "" to skip it (without it, the
//! responder is built from `../shared/tools/limit-server` into
//! `target/tools`, or skipped with a note); CONTENTION_ONLY, `cycle` or
//! `fanout`; CONTENTION_ROUNDS (default 3); CONTENTION_OURS, another build of
//! ours; CONTENTION_SECONDS, the measured window (default 3);
//! CONTENTION_CONNS, the connections of the cycle and the workers of the
//! fan-out (default 1000). Every server it starts is killed when its round
//! ends.

mod common;

use std::io::Write;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use common::rounds::{alternate, limit_server, Table};
use common::{context_switches, cpu_seconds, Client, Server, Settings};

/// Every client runs this long before the measured window opens.
const WARM_UP: Duration = Duration::from_millis(500);
/// How long a reply may take before the bench gives up on the server: a
/// hang guard, not a figure.
const HANG_GUARD: Duration = Duration::from_secs(120);
/// A job's body, loadgen's default size; a fan-out job's starts with the
/// moment its put was sent, 20 digits of nanoseconds.
const BODY: usize = 64;

/// One round's figures, in the order of [`row_names`].
type Figures = [f64; 10];
/// Where the round's wall time is in [`Figures`].
const WALL: usize = 7;

fn main() {
    let settings = Settings::read("CONTENTION");
    let number = |name: &str, default: f64| {
        let value = std::env::var(format!("CONTENTION_{name}")).ok();
        value.and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let seconds = number("SECONDS", 3.0);
    let (duration, conns) = (Duration::from_secs_f64(seconds), number("CONNS", 1000.0) as usize);
    let mut servers = vec![("beanstalk", settings.ours.clone())];
    servers.extend(settings.theirs.clone().map(|theirs| ("beanstalkd", theirs)));
    let rounds = settings.rounds;
    if settings.runs("cycle") {
        let mut servers = servers.clone();
        servers.extend(limit_server().map(|responder| ("responder", responder)));
        let title = format!("cycle, {conns} connections, {seconds} s");
        let names = row_names("command", "round trip");
        report(&title, &servers, rounds, &names, |binary| cycle(binary, conns, duration));
    }
    if settings.runs("fanout") {
        println!("\n(the responder sits the fan-out out: its reserve answers at once)");
        for window in [32, 1] {
            let title = format!("fan-out, {conns} workers, {window} in flight, {seconds} s");
            let names = row_names("job", "put -> RESERVED");
            report(&title, &servers, rounds, &names, |binary| fan_out(binary, conns, window, duration));
        }
    }
}

/// The rows of a table, in the order of [`Figures`].
fn row_names(unit: &str, latency: &str) -> [String; 10] {
    [
        format!("{unit}s/s"),
        format!("p50 {latency} (ms)"),
        format!("p99 {latency} (ms)"),
        format!("p999 {latency} (ms)"),
        format!("longest {latency} (ms)"),
        format!("server CPU a {unit} (us)"),
        format!("server thread switches a {unit}, whole round"),
        "round wall time (s)".to_owned(),
        "  of which before the warm-up: all connected (s)".to_owned(),
        "  of which after the stop: all done (s)".to_owned(),
    ]
}

/// Runs `measure` against each server in alternating rounds and prints
/// the table.
fn report(
    title: &str,
    servers: &[(&str, String)],
    rounds: usize,
    names: &[String; 10],
    measure: impl Fn(&str) -> Figures,
) {
    let binaries: Vec<&str> = servers.iter().map(|(_, binary)| binary.as_str()).collect();
    let each = alternate(&binaries, rounds, measure);
    let servers: Vec<&str> = servers.iter().map(|(name, _)| *name).collect();
    let table = Table { servers: &servers };
    table.header(&format!("{title}, rounds: {rounds}"));
    for (k, name) in names.iter().enumerate() {
        let column: Vec<Vec<f64>> = each.iter().map(|rounds| rounds.iter().map(|f| f[k]).collect()).collect();
        table.row(name, &column);
        if k >= WALL {
            table.each_round(&format!("each round, {}", name.trim()), &column);
        }
    }
}

/// What a timed round's clients read and count: how many are ready, the
/// gate they wait at until all are, whether the measured window is open,
/// whether to stop, and the commands (or jobs) done. The gate is not a
/// `Barrier`: its release hands one mutex from each woken thread to the
/// next, and once the first ones load the server each hand-off waits
/// behind the crowd: the bench's own thread came out up to 19 s late.
#[derive(Default)]
struct Run {
    ready: AtomicUsize,
    gate: RwLock<()>,
    measuring: AtomicBool,
    stop: AtomicBool,
    done: AtomicU64,
}

/// What the measured window counted, of the clients and of the server,
/// and when every client was ready and when they were told to stop.
struct Window {
    ready: Instant,
    done: f64,
    secs: f64,
    cpu: f64,
    stopped: Instant,
}

impl Run {
    /// Waits until `clients` are ready.
    fn all_ready(&self, clients: usize) {
        while self.ready.load(Relaxed) < clients {
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits out the warm-up, holds the window open for `duration`, then
    /// tells every client to stop.
    fn window(&self, pid: u32, duration: Duration) -> Window {
        let ready = Instant::now();
        thread::sleep(WARM_UP);
        let (cpu, done, began) = (cpu_seconds(pid), self.done.load(Relaxed), Instant::now());
        self.measuring.store(true, Relaxed);
        thread::sleep(duration);
        self.measuring.store(false, Relaxed);
        let (done, secs) = ((self.done.load(Relaxed) - done) as f64, began.elapsed().as_secs_f64());
        let cpu = cpu_seconds(pid) - cpu;
        self.stop.store(true, Relaxed);
        Window { ready, done, secs, cpu, stopped: Instant::now() }
    }
}

/// A round's figures from the latencies its clients saw in the window, in
/// ns; the round `began` when its server was up and `ended` when every
/// client was done. `switches` is the server's a command over the round.
fn figures(mut latencies: Vec<u64>, w: &Window, began: Instant, ended: Instant, switches: f64) -> Figures {
    latencies.sort_unstable();
    let last = latencies.len().saturating_sub(1);
    let ms = |per_mille: usize| {
        let at = (latencies.len() * per_mille / 1000).min(last);
        latencies.get(at).map_or(f64::NAN, |&ns| ns as f64 / 1e6)
    };
    [
        w.done / w.secs,
        ms(500),
        ms(990),
        ms(999),
        ms(1000),
        w.cpu / w.done * 1e6,
        switches,
        (ended - began).as_secs_f64(),
        (w.ready - began).as_secs_f64(),
        (ended - w.stopped).as_secs_f64(),
    ]
}

/// A client whose replies time out only after [`HANG_GUARD`].
fn connect(port: u16) -> Client {
    let c = Client::connect(port);
    c.writer.set_read_timeout(Some(HANG_GUARD)).unwrap();
    c
}

/// A client's thread: a crowd of 1000 needs small stacks.
fn client_thread<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::Builder::new().stack_size(64 * 1024).spawn(body).unwrap()
}

/// A put of a [`BODY`]-byte job, and where its body starts.
fn put_command() -> (Vec<u8>, usize) {
    let head = format!("put 0 0 60 {BODY}\r\n");
    (format!("{head}{}\r\n", "x".repeat(BODY)).into_bytes(), head.len())
}

/// `connections` clients, each on a tube of its own, loop put, reserve,
/// delete until told to stop, all busy for the whole window. Each
/// command's round trip in the window is a latency.
fn cycle(binary: &str, connections: usize, duration: Duration) -> Figures {
    let server = Server::start(binary);
    let (port, pid, began) = (server.port, server.pid(), Instant::now());
    let switched = context_switches(pid);
    let run = Arc::new(Run::default());
    let closed = run.gate.write().unwrap();
    let clients: Vec<_> = (0..connections)
        .map(|i| {
            let run = Arc::clone(&run);
            client_thread(move || {
                let mut c = connect(port);
                c.send(format!("use t{i}\r\nwatch t{i}\r\nignore default\r\n").as_bytes());
                (0..3).for_each(|_| {
                    c.reply();
                });
                run.ready.fetch_add(1, Relaxed);
                drop(run.gate.read().unwrap());
                let put = put_command().0;
                let mut latencies = Vec::new();
                while !run.stop.load(Relaxed) {
                    let measuring = run.measuring.load(Relaxed);
                    let mut timed = |c: &mut Client, command: &[u8]| {
                        let sent = Instant::now();
                        c.send(command);
                        let id = c.reply();
                        if measuring {
                            latencies.push(sent.elapsed().as_nanos() as u64);
                        }
                        id
                    };
                    timed(&mut c, &put);
                    let id = timed(&mut c, b"reserve\r\n");
                    timed(&mut c, format!("delete {id}\r\n").as_bytes());
                    run.done.fetch_add(3, Relaxed);
                }
                (latencies, c)
            })
        })
        .collect();
    run.all_ready(connections);
    drop(closed);
    let window = run.window(pid, duration);
    // Each client's connection stays open until the server's switches are
    // read: an idle thread's count reads fast, an exited one's is gone.
    let (latencies, connections): (Vec<Vec<u64>>, Vec<Client>) =
        clients.into_iter().map(|c| c.join().unwrap()).unzip();
    let ended = Instant::now();
    let switches = (context_switches(pid) - switched) / run.done.load(Relaxed) as f64;
    drop(connections);
    figures(latencies.concat(), &window, began, ended, switches)
}

/// The fan-out's jobs put and not yet reserved, which the producer keeps
/// at its window: it waits on `freed` (or 2 ms, for a wake-up missed) when
/// the window is full, and a worker that takes a job from a full window
/// wakes it.
struct InFlight {
    jobs: AtomicUsize,
    gate: Mutex<()>,
    freed: Condvar,
}

/// `workers` clients block in reserve; one producer keeps `window` jobs
/// put and not yet reserved, each body starting with the moment its put
/// was sent. A worker notes when its job arrived, deletes it and reserves
/// again; the latency is put -> `RESERVED`.
fn fan_out(binary: &str, workers: usize, window: usize, duration: Duration) -> Figures {
    let server = Server::start(binary);
    let (port, pid, began) = (server.port, server.pid(), Instant::now());
    let switched = context_switches(pid);
    let run = Arc::new(Run::default());
    let in_flight =
        Arc::new(InFlight { jobs: AtomicUsize::new(0), gate: Mutex::new(()), freed: Condvar::new() });
    let sockets = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..workers)
        .map(|_| {
            let (run, in_flight) = (Arc::clone(&run), Arc::clone(&in_flight));
            let sockets = Arc::clone(&sockets);
            client_thread(move || {
                let mut c = connect(port);
                sockets.lock().unwrap().push(c.writer.try_clone().unwrap());
                c.send(b"reserve\r\n");
                run.ready.fetch_add(1, Relaxed);
                let mut latencies = Vec::new();
                loop {
                    // The bench shuts the socket when the round is over: a
                    // reply of nothing, or an error, but only then.
                    let id =
                        c.try_reply()
                            .unwrap_or_else(|e| if run.stop.load(Relaxed) { 0 } else { panic!("{e}") });
                    if id == 0 {
                        return latencies;
                    }
                    let arrived = began.elapsed().as_nanos() as u64;
                    if in_flight.jobs.fetch_sub(1, Relaxed) >= window {
                        in_flight.freed.notify_one();
                    }
                    run.done.fetch_add(1, Relaxed);
                    if run.measuring.load(Relaxed) {
                        let sent = std::str::from_utf8(&c.body[..20]).unwrap().parse::<u64>().unwrap();
                        latencies.push(arrived.saturating_sub(sent));
                    }
                    // A write fails once the socket is shut: the round is over.
                    if c.writer.write_all(format!("delete {id}\r\n").as_bytes()).is_err() {
                        return latencies;
                    }
                    let _ = c.try_reply(); // DELETED, or the round is over
                    if run.stop.load(Relaxed) || c.writer.write_all(b"reserve\r\n").is_err() {
                        return latencies;
                    }
                }
            })
        })
        .collect();
    run.all_ready(workers);
    // Every reserve is sent: wait until the server has them all waiting.
    let mut producer = connect(port);
    let settled = Instant::now() + Duration::from_secs(30);
    while producer.stat("current-waiting").is_some_and(|w| w < workers as u64) && Instant::now() < settled {
        thread::sleep(Duration::from_millis(20));
    }
    let putting = {
        let (run, in_flight) = (Arc::clone(&run), Arc::clone(&in_flight));
        thread::spawn(move || {
            let (mut put, body) = put_command();
            while !run.stop.load(Relaxed) {
                if in_flight.jobs.load(Relaxed) >= window {
                    let gate = in_flight.gate.lock().unwrap();
                    if in_flight.jobs.load(Relaxed) >= window {
                        let _ = in_flight.freed.wait_timeout(gate, Duration::from_millis(2)).unwrap();
                    }
                    continue;
                }
                in_flight.jobs.fetch_add(1, Relaxed);
                let now = format!("{:020}", began.elapsed().as_nanos());
                put[body..body + 20].copy_from_slice(now.as_bytes());
                producer.send(&put);
                producer.reply();
            }
        })
    };
    let measured = run.window(pid, duration);
    putting.join().unwrap();
    // The jobs still in flight reach their workers (or 3 s pass); then
    // every worker's reserve ends with its socket.
    let drained = Instant::now() + Duration::from_secs(3);
    while in_flight.jobs.load(Relaxed) > 0 && Instant::now() < drained {
        thread::sleep(Duration::from_millis(5));
    }
    // Read while the workers wait, idle, and before their threads exit.
    let switches = (context_switches(pid) - switched) / run.done.load(Relaxed) as f64;
    sockets.lock().unwrap().iter().for_each(|s| {
        let _ = s.shutdown(Shutdown::Both);
    });
    let latencies = clients.into_iter().flat_map(|c| c.join().unwrap()).collect();
    figures(latencies, &measured, began, Instant::now(), switches)
}
