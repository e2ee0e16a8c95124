//! Binlog benchmark: put+delete throughput under each fsync setting, and
//! recovery time, for `beanstalk` and (when installed) `beanstalkd`, in one
//! run, on loopback, each in its own temporary directory.
//!
//!     cargo bench --bench binlog
//!
//! BEANSTALKD selects another beanstalkd binary ("" skips it); LOAD_SCALE
//! scales the recovery job count (default 1.0 = 1,000,000 jobs); BENCH_DIR
//! puts the temporary directories somewhere else (default: the system temp
//! dir). Throughput runs are bounded in time, recovery in count; every server
//! started is killed by its own handle.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

fn main() {
    let scale: f64 = std::env::var("LOAD_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let ours = env!("CARGO_BIN_EXE_beanstalk").to_owned();
    let theirs = std::env::var("BEANSTALKD").unwrap_or_else(|_| "/usr/bin/beanstalkd".to_owned());
    let mut servers = vec![("beanstalk", ours)];
    if !theirs.is_empty() && Path::new(&theirs).exists() {
        servers.push(("beanstalkd", theirs));
    }
    let base = std::env::var("BENCH_DIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());

    println!(
        "{:<52} {:>12} {:>12} {:>7}",
        "workload",
        servers[0].0,
        servers.get(1).map_or("-", |s| s.0),
        "ratio"
    );
    for (label, flags) in [
        ("-F (never fsync)", &["-F"][..]),
        ("-f 50", &["-f", "50"]),
        ("-f 0 (fsync every write)", &["-f", "0"]),
    ] {
        let results: Vec<f64> = servers
            .iter()
            .map(|(name, binary)| {
                let dir = TempDir::new(&base, name);
                let server = Server::start(binary, &dir.0, flags);
                put_delete(server.port, 4, Duration::from_secs(3))
            })
            .collect();
        report(&format!("put+delete, 4 connections, {label} (ops/s)"), &results, false);
    }
    let jobs = ((1_000_000.0 * scale) as usize).max(1000);
    let results: Vec<f64> = servers
        .iter()
        .map(|(name, binary)| {
            let dir = TempDir::new(&base, name);
            let mut server = Server::start(binary, &dir.0, &["-F"]);
            fill(server.port, jobs);
            server.kill();
            let began = Instant::now();
            let server = Server::start(binary, &dir.0, &["-F"]);
            let took = began.elapsed().as_secs_f64();
            assert_eq!(current_jobs(server.port), jobs, "{name} lost jobs");
            took
        })
        .collect();
    report(&format!("recovery of {jobs} jobs, 10-byte bodies (s, lower is better)"), &results, true);

    // Deleting many jobs spread over many small files: each delete must cost
    // O(1), whatever the number of files (µs per delete, at two sizes).
    for count in [((20_000.0 * scale) as usize).max(1000), ((100_000.0 * scale) as usize).max(1000)] {
        let results: Vec<f64> = servers
            .iter()
            .map(|(name, binary)| {
                let dir = TempDir::new(&base, name);
                let server = Server::start(binary, &dir.0, &["-F", "-s", "4096"]);
                fill(server.port, count);
                let began = Instant::now();
                delete_all(server.port, count);
                began.elapsed().as_secs_f64() * 1e6 / count as f64
            })
            .collect();
        report(&format!("delete {count} jobs, -s 4096 (µs/delete, lower is better)"), &results, true);
    }

    // Long tube names, empty bodies, many live jobs: the mix that once made
    // compaction rewrite hundreds of records per command.
    let results: Vec<f64> = servers
        .iter()
        .map(|(name, binary)| {
            let dir = TempDir::new(&base, name);
            let server = Server::start(binary, &dir.0, &["-F", "-s", "1048576"]);
            let tube = "t".repeat(200);
            fill_tube(server.port, &tube, 10_000);
            put_delete_in(server.port, &tube, b"", 1, Duration::from_secs(2))
        })
        .collect();
    report("put+delete, 10k live jobs, 200-byte tube name (ops/s)", &results, false);
}

fn report(name: &str, results: &[f64], seconds: bool) {
    let ratio = match results {
        [a, b] if *b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_owned(),
    };
    let fmt = |v: f64| if seconds { format!("{v:.2}") } else { format!("{v:.0}") };
    let theirs = results.get(1).map_or("-".to_owned(), |&v| fmt(v));
    println!("{:<52} {:>12} {:>12} {:>7}", name, fmt(results[0]), theirs, ratio);
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(base: &Path, name: &str) -> TempDir {
        let dir = base.join(format!("beanstalk-bench-{name}-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts a server and waits until it answers (so replay is done).
    fn start(binary: &str, dir: &Path, flags: &[&str]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(binary)
            .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-b"])
            .arg(dir)
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
                let mut reply = [0; 15];
                if s.write_all(b"list-tube-used\r\n").is_ok() && s.read_exact(&mut reply).is_ok() {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "{binary} did not start");
            thread::sleep(Duration::from_millis(2));
        }
        Server { child, port }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Each connection loops put then delete until `run` has passed.
fn put_delete(port: u16, connections: usize, run: Duration) -> f64 {
    put_delete_in(port, "default", b"0123456789", connections, run)
}

/// Each connection uses `tube` and loops put of `body` then delete, until
/// `run` has passed.
fn put_delete_in(port: u16, tube: &str, body: &[u8], connections: usize, run: Duration) -> f64 {
    let mut put = format!("put 0 0 60 {}\r\n", body.len()).into_bytes();
    put.extend_from_slice(body);
    put.extend_from_slice(b"\r\n");
    let (put, use_tube) = (Arc::new(put), Arc::new(format!("use {tube}\r\n")));
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..connections)
        .map(|_| {
            let (stop, ops) = (Arc::clone(&stop), Arc::clone(&ops));
            let (put, use_tube) = (Arc::clone(&put), Arc::clone(&use_tube));
            thread::spawn(move || {
                let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                stream.set_nodelay(true).unwrap();
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                writer.write_all(use_tube.as_bytes()).unwrap();
                reader.read_line(&mut line).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    writer.write_all(&put).unwrap();
                    line.clear();
                    reader.read_line(&mut line).unwrap();
                    let id = line.trim().strip_prefix("INSERTED ").expect("INSERTED").to_owned();
                    writer.write_all(format!("delete {id}\r\n").as_bytes()).unwrap();
                    line.clear();
                    reader.read_line(&mut line).unwrap();
                    ops.fetch_add(2, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let began = Instant::now();
    thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    threads.into_iter().for_each(|t| t.join().unwrap());
    ops.load(Ordering::Relaxed) as f64 / began.elapsed().as_secs_f64()
}

/// Deletes jobs 1..=count, pipelined in batches.
fn delete_all(port: u16, count: usize) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    let mut next = 1;
    while next <= count {
        let last = (next + 999).min(count);
        let batch: String = (next..=last).map(|id| format!("delete {id}\r\n")).collect();
        let mut writer = stream.try_clone().unwrap();
        let w = thread::spawn(move || writer.write_all(batch.as_bytes()).unwrap());
        for _ in next..=last {
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert_eq!(line, "DELETED\r\n");
        }
        w.join().unwrap();
        next = last + 1;
    }
}

/// Puts `jobs` empty jobs into `tube`.
fn fill_tube(port: u16, tube: &str, jobs: usize) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream.try_clone().unwrap();
    let mut line = String::new();
    writer.write_all(format!("use {tube}\r\n").as_bytes()).unwrap();
    reader.read_line(&mut line).unwrap();
    for _ in 0..jobs.div_ceil(1000) {
        writer.write_all(&b"put 0 0 60 0\r\n\r\n".repeat(1000)).unwrap();
        for _ in 0..1000 {
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert!(line.starts_with("INSERTED"), "{line}");
        }
    }
}

/// Puts `jobs` jobs, pipelined in batches.
fn fill(port: u16, jobs: usize) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let batch = b"put 0 0 60 10\r\n0123456789\r\n".repeat(1000);
    let mut line = String::new();
    let mut sent = 0;
    while sent < jobs {
        let n = (jobs - sent).min(1000);
        let mut writer = stream.try_clone().unwrap();
        let bytes = batch[..n * 27].to_vec();
        let w = thread::spawn(move || writer.write_all(&bytes).unwrap());
        for _ in 0..n {
            line.clear();
            reader.read_line(&mut line).unwrap();
            assert!(line.starts_with("INSERTED"), "{line}");
        }
        w.join().unwrap();
        sent += n;
    }
}

fn current_jobs(port: u16) -> usize {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let len: usize = line.trim().strip_prefix("OK ").unwrap().parse().unwrap();
    let mut body = vec![0; len + 2];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("current-jobs-") && !l.starts_with("current-jobs-urgent"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<usize>().unwrap())
        .sum()
}
