//! What the load benchmarks share: starting a server binary on a free
//! loopback port (killed when dropped), a blocking client, a pool of
//! workers blocked in reserve, reading the server's memory, CPU time and
//! thread switches from `/proc`, and printing a row of ours against
//! theirs; `rounds` runs a workload against several servers in turn.
#![allow(dead_code)]

pub mod rounds;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// A server process on 127.0.0.1 and a free port; SIGKILLed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    /// Starts `binary` and waits until it accepts connections.
    pub fn start(binary: &str) -> Server {
        Server::start_with(binary, &[])
    }

    /// [`Server::start`] with more flags (`-b DIR`, `--metrics`, say).
    pub fn start_args(binary: &str, flags: &[&str]) -> Server {
        Server::start_with(binary, flags)
    }

    /// [`Server::start`] with more flags (`-b DIR`, say).
    pub fn start_with(binary: &str, flags: &[&str]) -> Server {
        Server::launch(Command::new(binary), binary, flags)
    }

    /// [`Server::start_with`] under an address-space limit of `kib` KiB
    /// (the shell's `ulimit -v`, which sets `RLIMIT_AS`).
    pub fn start_limited(binary: &str, kib: u64, flags: &[&str]) -> Server {
        let mut sh = Command::new("sh");
        sh.args(["-c", &format!("ulimit -v {kib} && exec \"$0\" \"$@\""), binary]);
        Server::launch(sh, binary, flags)
    }

    fn launch(mut command: Command, binary: &str, flags: &[&str]) -> Server {
        let port = free_port();
        let child = command
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "{binary} did not start");
            thread::sleep(Duration::from_millis(10));
        }
        Server { child, port }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (as far as anyone can tell).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A process's CPU time so far, user and system, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line, the 12th and 13th after it.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = rest.split_whitespace().skip(11).take(2).filter_map(|t| t.parse::<f64>().ok()).sum();
    ticks / 100.0 // USER_HZ, 100 on Linux
}

/// How many times the threads of a process have been put on a CPU so far,
/// after their own sleep or the scheduler's preemption: each is a switch
/// to pay for. From each thread's `schedstat` (its third figure), which is
/// cheap: `status` takes the process's memory map lock, and reading it for
/// 1000 busy threads took seconds.
pub fn context_switches(pid: u32) -> f64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let stats = tasks.filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok());
    stats.filter_map(|stat| stat.split_whitespace().nth(2)?.parse::<f64>().ok()).sum()
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap_or("x 0 kB");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// A blocking client reading whole replies.
pub struct Client {
    pub writer: TcpStream,
    pub reader: BufReader<TcpStream>,
    pub line: String,
    /// The body of the last RESERVED or FOUND, without its CRLF.
    pub body: Vec<u8>,
}

impl Client {
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_nodelay(true).unwrap();
        let writer = stream.try_clone().unwrap();
        Client { writer, reader: BufReader::new(stream), line: String::new(), body: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// Reads one reply (and its body); returns its second word as a number
    /// (the id of INSERTED and RESERVED), or 0.
    pub fn reply(&mut self) -> u64 {
        self.try_reply().unwrap()
    }

    /// [`Client::reply`], with the socket's error for a caller that expects
    /// one (its socket shut at the end of a run).
    pub fn try_reply(&mut self) -> std::io::Result<u64> {
        self.line.clear();
        self.reader.read_line(&mut self.line)?;
        let mut words = self.line.split_whitespace();
        let first = words.next().unwrap_or("");
        let id = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        if first == "RESERVED" || first == "FOUND" {
            let len: usize = words.next().and_then(|w| w.parse().ok()).unwrap();
            self.body.resize(len + 2, 0);
            self.reader.read_exact(&mut self.body)?;
            self.body.truncate(len);
        }
        Ok(id)
    }

    /// One figure of `stats` (`current-waiting`, say); `None` if the
    /// server does not answer `stats` or lacks it.
    pub fn stat(&mut self, name: &str) -> Option<u64> {
        self.send(b"stats\r\n");
        self.line.clear();
        self.reader.read_line(&mut self.line).ok()?;
        let len: usize = self.line.strip_prefix("OK ")?.trim().parse().ok()?;
        let mut body = vec![0; len + 2];
        self.reader.read_exact(&mut body).ok()?;
        let body = String::from_utf8_lossy(&body);
        let value = body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(": "));
        value.and_then(|v| v.trim().parse().ok())
    }
}

/// Sends `count` commands made by `command(i)` in batches of 1000, reading
/// `replies_each` replies a command; returns the id in the first reply.
pub fn pipeline(
    c: &mut Client,
    count: usize,
    replies_each: usize,
    command: impl Fn(usize) -> Vec<u8>,
) -> u64 {
    let mut first = 0;
    let mut sent = 0;
    while sent < count {
        let n = (count - sent).min(1000);
        let bytes: Vec<u8> = (sent..sent + n).flat_map(&command).collect();
        let mut w = c.writer.try_clone().unwrap();
        // Written from another thread so that neither side's buffers fill.
        let t = thread::spawn(move || w.write_all(&bytes).unwrap());
        for i in 0..n * replies_each {
            let id = c.reply();
            if sent == 0 && i == 0 {
                first = id;
            }
        }
        t.join().unwrap();
        sent += n;
    }
    first
}

/// Starts `workers` threads, each blocked in `reserve` on a connection of its
/// own; they pass `ready` once their reserve is sent. Each job a worker gets
/// is given to `on_job` as soon as it arrives (its body is in `Client::body`),
/// and what that returns is kept; then the worker deletes the job and
/// reserves again, with a 2 s timeout that ends the thread when the run is
/// over. Joining a handle gives that worker's values, one a job.
pub fn blocked_workers(
    port: u16,
    workers: usize,
    ready: &Arc<Barrier>,
    on_job: impl Fn(&Client) -> u64 + Clone + Send + 'static,
) -> Vec<thread::JoinHandle<Vec<u64>>> {
    (0..workers)
        .map(|_| {
            let ready = Arc::clone(ready);
            let on_job = on_job.clone();
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    let mut c = Client::connect(port);
                    c.send(b"reserve\r\n");
                    ready.wait();
                    let mut values = Vec::new();
                    loop {
                        let id = c.reply();
                        if id == 0 {
                            return values; // TIMED_OUT: the run is over
                        }
                        values.push(on_job(&c));
                        c.send(format!("delete {id}\r\nreserve-with-timeout 2\r\n").as_bytes());
                        c.reply(); // DELETED
                    }
                })
                .unwrap()
        })
        .collect()
}

/// Prints one row of a side-by-side table: ours, theirs, and the ratio.
pub fn row(name: &str, ours: f64, theirs: Option<f64>) {
    let ratio = theirs.filter(|&t| t > 0.0).map_or("-".to_owned(), |t| format!("{:.2}", ours / t));
    let theirs = theirs.map_or("-".to_owned(), |t| format!("{t:.2}"));
    println!("{name:<52} {ours:>12.2} {theirs:>12} {ratio:>7}");
}

/// The middle of `values` (the upper one of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// What a run of a side-by-side benchmark was asked for, from the
/// environment: `<PREFIX>_OURS` (another build of ours, for before and
/// after), `BEANSTALKD` (theirs; absent or empty for ours alone),
/// `<PREFIX>_ONLY` (one scenario) and `<PREFIX>_ROUNDS` (default 3).
pub struct Settings {
    pub ours: String,
    pub theirs: Option<String>,
    pub rounds: usize,
    only: String,
}

impl Settings {
    /// Reads the settings and prints the table's header.
    pub fn from_env(prefix: &str) -> Settings {
        println!("{:<52} {:>12} {:>12} {:>7}", "scenario", "beanstalk", "beanstalkd", "ratio");
        Settings::read(prefix)
    }

    /// Reads the settings.
    pub fn read(prefix: &str) -> Settings {
        let var = |name: &str| std::env::var(format!("{prefix}_{name}")).ok();
        let theirs = std::env::var("BEANSTALKD").unwrap_or_else(|_| "/usr/bin/beanstalkd".to_owned());
        Settings {
            ours: var("OURS").unwrap_or_else(|| env!("CARGO_BIN_EXE_beanstalk").to_owned()),
            theirs: (!theirs.is_empty() && std::path::Path::new(&theirs).exists()).then_some(theirs),
            rounds: var("ROUNDS").and_then(|s| s.parse().ok()).unwrap_or(3),
            only: var("ONLY").unwrap_or_default(),
        }
    }

    /// Whether `scenario` is to run: all do unless one was named.
    pub fn runs(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only == scenario
    }
}

/// A client that does a put+delete round trip every millisecond until
/// `stop`, and returns how long each took, in ms.
pub fn start_probe(port: u16, stop: &Arc<AtomicBool>) -> thread::JoinHandle<Vec<f64>> {
    let stop = Arc::clone(stop);
    thread::spawn(move || {
        let mut p = Client::connect(port);
        let mut times = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            p.send(b"put 0 0 60 1\r\nx\r\n");
            let id = p.reply();
            p.send(format!("delete {id}\r\n").as_bytes());
            p.reply();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            thread::sleep(Duration::from_millis(1));
        }
        times
    })
}
