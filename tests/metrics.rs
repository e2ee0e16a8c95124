//! `--metrics`: the real binary's endpoint, parsed by a real parser
//! (`promtool check metrics`) and scraped by a real Prometheus server;
//! the exact bytes of every refusal at the HTTP edge; and the bounds that
//! keep a slow or huge request from costing more than one small buffer.
//!
//! promtool and prometheus come from Debian's `prometheus` package. A test
//! that needs one and does not find it fails when `CI=true`, and says it
//! skips otherwise.
mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::binary::{self, Bin, TempDir};
use common::Client;

/// How long a test waits for anything it expects (a hang guard).
const PATIENCE: Duration = common::HANG_GUARD;

/// A server with `--metrics` on a free loopback port, and that port's address.
fn start(args: &[&str]) -> (Bin, SocketAddr) {
    let mut all = vec!["--metrics", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let bin = binary::spawn(&all);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let stderr = bin.stderr();
        if let Some(rest) = stderr.split("metrics http://").nth(1) {
            let addr = rest.split('/').next().unwrap().parse().expect("metrics address");
            return (bin, addr);
        }
        assert!(Instant::now() < deadline, "no metrics line: {stderr}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `request` whole, then reads until the server closes. A request
/// head has a second to arrive; one written at once that a loaded machine
/// delayed past it is answered 408, and sent again.
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let too_slow = refusal("408 Request Timeout", "request head too slow\n").into_bytes();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        s.write_all(request).unwrap();
        let response = read_to_close(&mut s);
        if response != too_slow || Instant::now() >= deadline {
            return response;
        }
    }
}

fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("the response, then the close");
    all
}

/// A scrape's body, after checking the head's exact bytes.
fn scrape(addr: SocketAddr) -> String {
    let response = String::from_utf8(exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert_eq!(
        head,
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close",
            body.len()
        )
    );
    body.to_owned()
}

/// The value of the sample named exactly `series` (name and labels).
fn sample(body: &str, series: &str) -> Option<String> {
    body.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ').map(str::to_owned))
}

/// A tool from the `prometheus` package, or `None` to skip (never under CI).
fn tool(name: &str) -> Option<String> {
    let path = format!("/usr/bin/{name}");
    if std::path::Path::new(&path).exists() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{path} is missing: install Debian's prometheus package (.ci/run does)"
    );
    eprintln!("skipped: {path} is missing (install Debian's prometheus package)");
    None
}

fn refusal(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn a_scrape_reports_stats_and_tubes_and_promtool_accepts_it() {
    let dir = TempDir::new("metrics-promtool");
    let (bin, addr) = start(&["-b", dir.path.to_str().unwrap()]);
    let mut c = bin.client();
    assert_eq!(c.cmd("use emails"), "USING emails\r\n");
    for _ in 0..3 {
        c.put_ok("x");
    }
    assert_eq!(c.cmd("watch emails"), "WATCHING 2\r\n");
    let reserved = c.cmd("reserve");
    assert!(reserved.starts_with("RESERVED 1 1\r\n"), "{reserved}");
    assert_eq!(c.cmd("bury 1 0"), "BURIED\r\n");
    let body = scrape(addr);
    for (series, value) in [
        ("beanstalkd_cmd_put_total", "3"),
        ("beanstalkd_current_jobs_ready", "2"),
        ("beanstalkd_current_jobs_buried", "1"),
        ("beanstalkd_current_tubes", "2"),
        ("beanstalkd_total_jobs_total", "3"),
        ("beanstalkd_tube_current_jobs_ready{tube=\"emails\"}", "2"),
        ("beanstalkd_tube_current_jobs_buried{tube=\"emails\"}", "1"),
        ("beanstalkd_tube_total_jobs_total{tube=\"emails\"}", "3"),
        ("beanstalkd_tube_current_watching{tube=\"default\"}", "1"),
        ("beanstalkd_tube_wait_seconds_count{tube=\"emails\"}", "1"),
        ("beanstalkd_tube_work_seconds_count{tube=\"emails\",outcome=\"buried\"}", "1"),
        ("beanstalkd_binlog_files", "1"),
        ("beanstalkd_binlog_refusing", "0"),
        // Three puts and a bury (a reserve is not logged).
        ("beanstalkd_binlog_records_written_total", "4"),
        ("beanstalkd_metrics_tubes_left_out", "0"),
        ("beanstalkd_tube_oldest_ready_seconds{tube=\"default\"}", "0.000000"),
    ] {
        assert_eq!(sample(&body, series).as_deref(), Some(value), "{series} in:\n{body}");
    }
    let id = c.stats()["id"].clone();
    assert!(body.contains(&format!("\nbeanstalkd_build_info{{version=\"1.13\",server_id=\"{id}\"}} 1\n")));
    let waits = sample(&body, "beanstalkd_engine_lock_waits_total");
    assert!(waits.is_some_and(|w| w.parse::<u64>().is_ok()), "the lock's waits in:\n{body}");
    for process in ["process_resident_memory_bytes", "process_virtual_memory_bytes", "process_open_fds"] {
        let value: u64 = sample(&body, process).unwrap().parse().unwrap();
        assert!(value > 0, "{process} {value}");
    }
    let Some(promtool) = tool("promtool") else { return };
    let (code, out) = run_with_input(Command::new(promtool).args(["check", "metrics"]), body.as_bytes());
    assert_eq!(code, Some(0), "promtool check metrics:\n{out}\n{body}");
}

/// Runs `command` with `input` on its stdin; its exit code, and its
/// stdout and stderr.
fn run_with_input(command: &mut Command, input: &[u8]) -> (Option<i32>, String) {
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().unwrap();
    let _ = feeder.join();
    let text =
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[test]
fn only_the_largest_tubes_are_reported_and_the_rest_counted() {
    let (bin, addr) = start(&["--metrics-max-tubes", "2"]);
    let mut c = bin.client();
    for (tube, jobs) in [("one", 1), ("three", 3), ("two", 2)] {
        assert_eq!(c.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
        for _ in 0..jobs {
            c.put_ok("x");
        }
    }
    let body = scrape(addr);
    let reported: Vec<&str> =
        body.lines().filter_map(|l| l.strip_prefix("beanstalkd_tube_current_jobs_ready{tube=\"")).collect();
    assert_eq!(reported, ["three\"} 3", "two\"} 2"]);
    assert_eq!(sample(&body, "beanstalkd_metrics_tubes_left_out").as_deref(), Some("2"));
}

#[test]
fn without_the_flag_there_is_no_endpoint_and_no_thread() {
    let threads = |bin: &Bin| std::fs::read_dir(format!("/proc/{}/task", bin.child.id())).unwrap().count();
    let without = binary::spawn(&[]);
    let (with, _) = start(&[]);
    // A reply says the helper threads have started: they start after the
    // bind line. Each keeps its client, so each has one connection thread.
    let mut clients = Vec::new();
    for bin in [&without, &with] {
        let mut c = bin.client();
        assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
        clients.push(c);
    }
    assert!(!without.stderr().contains("metrics"), "{}", without.stderr());
    assert_eq!(threads(&with), threads(&without) + 1);
}

#[test]
fn other_paths_are_404_and_malformed_requests_400() {
    let (_bin, addr) = start(&[]);
    let not_found = refusal("404 Not Found", "not found: the metrics are at /metrics, the page at /\n");
    assert_eq!(String::from_utf8(exchange(addr, b"GET /index.html HTTP/1.1\r\n\r\n")).unwrap(), not_found);
    assert_eq!(String::from_utf8(exchange(addr, b"GET /metricsx HTTP/1.0\r\n\r\n")).unwrap(), not_found);
    let bad = refusal("400 Bad Request", "bad request\n");
    for request in
        [&b"GET /metrics\r\n\r\n"[..], b"hello\r\n\r\n", b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n"]
    {
        assert_eq!(String::from_utf8(exchange(addr, request)).unwrap(), bad, "{request:?}");
    }
    let post = refusal("405 Method Not Allowed", "only GET and HEAD\n");
    assert_eq!(String::from_utf8(exchange(addr, b"POST /metrics HTTP/1.1\r\n\r\n")).unwrap(), post);
}

#[test]
fn a_request_cut_off_half_way_is_400() {
    let (_bin, addr) = start(&[]);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metr").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        String::from_utf8(read_to_close(&mut s)).unwrap(),
        refusal("400 Bad Request", "bad request\n")
    );
}

#[test]
fn ten_thousand_headers_are_refused_and_the_next_scrape_is_served() {
    let (_bin, addr) = start(&[]);
    let mut request = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for n in 0..10_000 {
        request.extend_from_slice(format!("X-Header-{n}: value\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    let mut s = TcpStream::connect(addr).unwrap();
    // The server answers before reading it all: send on a thread of its own.
    let mut sending = s.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let _ = sending.write_all(&request);
    });
    let response = read_to_close(&mut s);
    let _ = sender.join();
    let too_large = refusal("431 Request Header Fields Too Large", "request head too large\n");
    assert_eq!(String::from_utf8(response).unwrap(), too_large);
    assert!(scrape(addr).contains("beanstalkd_build_info"));
}

#[test]
fn a_slow_client_does_not_hold_up_another_scrape() {
    let (_bin, addr) = start(&[]);
    let mut slow = TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost:").unwrap();
    // While it holds its socket, others are served at once...
    for _ in 0..3 {
        assert!(scrape(addr).contains("beanstalkd_build_info"));
    }
    // ...and it is answered when its time is up, not left open.
    let response = String::from_utf8(read_to_close(&mut slow)).unwrap();
    assert_eq!(response, refusal("408 Request Timeout", "request head too slow\n"));
}

/// 64 clients that connect and send nothing, and 8 that send a byte of
/// their request now and then, all reconnecting as soon as they are
/// closed, cannot keep a scrape out: every scrape is answered.
#[test]
fn idle_and_slow_clients_however_many_never_keep_a_scrape_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (_bin, addr) = start(&[]);
    let stop = Arc::new(AtomicBool::new(false));
    let holders: Vec<_> = (0..72)
        .map(|n| {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                let slow = n >= 64;
                // Bounded: the test stops them, and so does a deadline.
                let until = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                    let Ok(mut s) = TcpStream::connect(addr) else { continue };
                    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                    let mut sent = 0;
                    let mut buf = [0; 64];
                    // Hold the socket until the server closes it.
                    while !stop.load(Ordering::SeqCst) {
                        if slow
                            && sent < 20
                            && s.write_all(&b"GET /metrics HTTP/1.1\r\n"[sent..=sent]).is_ok()
                        {
                            sent += 1;
                        }
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) => {}
                            _ => break,
                        }
                    }
                }
            })
        })
        .collect();
    // Let them take every place, then scrape.
    thread::sleep(Duration::from_millis(500));
    let answered = (0..12).filter(|_| scrape(addr).contains("beanstalkd_build_info")).count();
    stop.store(true, Ordering::SeqCst);
    for holder in holders {
        holder.join().unwrap();
    }
    assert_eq!(answered, 12);
}

/// The age of the oldest ready job survives a restart with `-b`: a job
/// never reserved has been ready since its put (plus its delay), which
/// the log knows, so the queue-age alert stays firing.
#[test]
fn the_oldest_ready_job_keeps_its_age_across_a_restart() {
    let dir = TempDir::new("metrics-age");
    let b = ["-b", binary::arg(&dir.path)];
    let (bin, addr) = start(&b);
    let mut c = bin.client();
    assert_eq!(c.cmd("use aging"), "USING aging\r\n");
    c.put_ok("waiting");
    // A job reserved and released: the log cannot date its return, so
    // after the restart it counts from then, and the older one leads.
    let worked = c.put_ok("worked");
    assert!(c.cmd(&format!("reserve-job {worked}")).starts_with("RESERVED "));
    assert_eq!(c.cmd(&format!("release {worked} 0 0")), "RELEASED\r\n");
    thread::sleep(Duration::from_millis(2100));
    let age = "beanstalkd_tube_oldest_ready_seconds{tube=\"aging\"}";
    let before: f64 = sample(&scrape(addr), age).unwrap().parse().unwrap();
    assert!(before >= 2.0, "{before}");
    bin.terminate();
    let (bin, addr) = start(&b);
    let after: f64 = sample(&scrape(addr), age).unwrap().parse().unwrap();
    assert!(after >= before, "the oldest ready job's age fell from {before} to {after} across the restart");
    // Its age counts on, and a reserve sees the whole wait.
    let mut c = bin.client();
    assert_eq!(c.cmd("watch aging"), "WATCHING 2\r\n");
    assert!(c.cmd("reserve-with-timeout 0").starts_with("RESERVED 1 "));
}

/// What a client that does not read holds is bounded and counted: its
/// `reserve-batch` of 40 jobs of 1 MiB stops at 16 MiB of replies, shown
/// as `beanstalkd_reply_bytes_unsent` while it waits, and 0 once the
/// client reads it all.
#[test]
fn a_client_that_does_not_read_holds_a_bounded_and_counted_amount() {
    let (bin, addr) = start(&["-z", "1048576"]);
    let mut c = bin.client();
    let body = "x".repeat(1 << 20);
    for _ in 0..40 {
        c.put_ok(&body);
    }
    let mut idle = TcpStream::connect(bin.addr).unwrap();
    idle.write_all(b"reserve-batch 1000\r\n").unwrap();
    let unsent = "beanstalkd_reply_bytes_unsent";
    let held = |addr| -> f64 { sample(&scrape(addr), unsent).unwrap().parse().unwrap() };
    let deadline = Instant::now() + PATIENCE;
    let mut seen = held(addr);
    while seen < 8.0 * (1 << 20) as f64 {
        assert!(Instant::now() < deadline, "{unsent} is {seen}");
        thread::sleep(Duration::from_millis(50));
        seen = held(addr);
    }
    // 16 MiB and the job that passed it, with their headers, at most.
    assert!(seen <= (17 << 20) as f64 + 40.0 * 64.0, "{unsent} is {seen}");
    // Read it all: a batch of 16 jobs (their replies pass 16 MiB), and
    // nothing is held any more.
    idle.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        idle.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert_eq!(head, b"RESERVED_BATCH 16\r\n");
    let deadline = Instant::now() + PATIENCE;
    let mut buf = vec![0u8; 1 << 20];
    while held(addr) > 0.0 {
        assert!(Instant::now() < deadline, "{unsent} stays above 0");
        let _ = idle.read(&mut buf);
    }
}

#[test]
fn the_server_stops_with_its_endpoint() {
    // The binary, on SIGTERM...
    let (bin, addr) = start(&[]);
    assert!(scrape(addr).contains("beanstalkd_build_info"));
    let stderr = bin.terminate();
    assert!(stderr.contains(": stopped: 0 connections closed, 0 jobs dropped (no -b)\n"), "{stderr}");
    // ...and a server embedded in a process, when dropped.
    let mut config = beanstalk::Config::loopback();
    config.metrics = Some("127.0.0.1:0".into());
    let running = beanstalk::Server::bind(config).unwrap().spawn().unwrap();
    let (stopped, told) = std::sync::mpsc::channel();
    thread::spawn(move || {
        drop(running);
        let _ = stopped.send(());
    });
    told.recv_timeout(PATIENCE).expect("the embedded server stops");
}

#[test]
fn head_gets_the_head_alone() {
    let (_bin, addr) = start(&[]);
    let response = String::from_utf8(exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n")).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.ends_with("Connection: close\r\n\r\n"), "{response}");
}

/// A dead letter (reference §3.1b) is counted by tube, and its
/// reservation ends `buried`, by a release as by a TTR.
#[test]
fn a_dead_letter_is_counted_by_tube_and_its_work_ends_buried() {
    let (bin, addr) = start(&["--max-reserves", "2"]);
    let mut c = bin.client();
    assert_eq!(c.cmd("use emails"), "USING emails\r\n");
    assert_eq!(c.cmd("watch emails"), "WATCHING 2\r\n");
    assert_eq!(c.put(0, 0, 30, "fails"), "INSERTED 1\r\n");
    for _ in 0..2 {
        assert_eq!(c.cmd("reserve"), "RESERVED 1 5\r\nfails\r\n");
        assert_eq!(c.cmd("release 1 0 0"), "RELEASED\r\n");
    }
    c.send("put 0 0 1 4 max:1\r\nslow\r\n");
    assert_eq!(c.reply(), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 4\r\nslow\r\n");
    let buried = || Client::connect(bin.addr).yaml_map("stats-job 2")["state"] == "buried";
    assert!(common::settle(PATIENCE, buried), "the TTR path buries job 2");
    let body = scrape(addr);
    for (series, value) in [
        ("beanstalkd_tube_buried_by_retry_limit_total{tube=\"emails\"}", Some("2")),
        ("beanstalkd_tube_buried_by_retry_limit_total{tube=\"default\"}", Some("0")),
        ("beanstalkd_tube_work_seconds_count{tube=\"emails\",outcome=\"buried\"}", Some("2")),
        ("beanstalkd_tube_work_seconds_count{tube=\"emails\",outcome=\"released\"}", Some("1")),
        ("beanstalkd_tube_work_seconds_count{tube=\"emails\",outcome=\"timed_out\"}", None),
    ] {
        assert_eq!(sample(&body, series).as_deref(), value, "{series} in:\n{body}");
    }
    let Some(promtool) = tool("promtool") else { return };
    let (code, out) = run_with_input(Command::new(promtool).args(["check", "metrics"]), body.as_bytes());
    assert_eq!(code, Some(0), "promtool check metrics:\n{out}\n{body}");
}

/// The README's first YAML block after the words `after`.
fn readme_block(after: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let rest = &readme[readme.find(after).unwrap_or_else(|| panic!("README: no {after:?}"))..];
    let start = rest.find("```yaml\n").unwrap() + 8;
    rest[start..start + rest[start..].find("```").unwrap()].to_owned()
}

/// The README's alert rules and recording rules, in files of their own.
const ALERT_RULES: &str = include_str!("recipes/prometheus/alerts.yml");
const EXPORTER_NAMES: &str = include_str!("recipes/prometheus/exporter-names.yml");

#[test]
fn the_readmes_scrape_configuration_and_rules_pass_promtool() {
    let Some(promtool) = tool("promtool") else { return };
    let dir = TempDir::new("promtool-readme");
    for (text, file, check) in [
        (readme_block("A Prometheus scrape configuration"), "prometheus.yml", "config"),
        (ALERT_RULES.to_owned(), "alerts.yml", "rules"),
        (EXPORTER_NAMES.to_owned(), "exporter-names.yml", "rules"),
    ] {
        let path = dir.path.join(file);
        std::fs::write(&path, text).unwrap();
        let (code, out) = run_with_input(Command::new(&promtool).args(["check", check]).arg(&path), b"");
        assert_eq!(code, Some(0), "promtool check {check} on the README's {file}:\n{out}");
    }
}

// -------------------------------------------------------------------
// A real Prometheus server
// -------------------------------------------------------------------

/// A Prometheus server on loopback, in a directory of its own; killed
/// (by its own handle) when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(path: &str, target: SocketAddr) -> Prometheus {
        Prometheus::start_with_rules(path, target, None)
    }

    /// [`Prometheus::start`] with recording or alert `rules` loaded.
    fn start_with_rules(path: &str, target: SocketAddr, rules: Option<&str>) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let config = dir.path.join("prometheus.yml");
        let rule_files = match rules {
            Some(rules) => {
                let file = dir.path.join("rules.yml");
                std::fs::write(&file, rules).unwrap();
                format!("rule_files: ['{}']\n", file.display())
            }
            None => String::new(),
        };
        // The README's scrape configuration, at a test's pace.
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rule_files}scrape_configs:\n  \
                 - job_name: beanstalk\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = {
            let free = TcpListener::bind("127.0.0.1:0").unwrap();
            free.local_addr().unwrap().port()
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let child = Command::new(path)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Prometheus { child, addr, _dir: dir }
    }

    /// The value of instant query `query`, once it has one.
    fn query(&self, query: &str) -> Option<f64> {
        let encoded: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let request = format!("GET /api/v1/query?query={encoded} HTTP/1.0\r\nHost: x\r\n\r\n");
        let mut s = TcpStream::connect(self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        s.read_to_string(&mut response).ok()?;
        // {"status":"success","data":{"resultType":"vector","result":[{"metric":{...},"value":[T,"V"]}]}}
        let value = response.split("\"value\":[").nth(1)?;
        value.split('"').nth(1)?.parse().ok()
    }

    /// Asks `query` until `accept` likes its value.
    fn wait_for(&self, query: &str, accept: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = self.query(query);
            if let Some(v) = value.filter(|&v| accept(v)) {
                return v;
            }
            assert!(Instant::now() < deadline, "{query}: last {value:?}");
            thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The queries of the Grafana dashboard for Beanstalkd (grafana/jsonnet-
/// libs' beanstalkd-mixin), built on messagebird's exporter, as it asks
/// them: `$Instance` is the exporter's address (`exported_instance`),
/// `$TubeName` a tube.
const DASHBOARD_QUERIES: [&str; 19] = [
    "rate(cmd_put{exported_instance=\"$Instance\"}[5m])",
    "rate(cmd_reserve{exported_instance=\"$Instance\"}[5m])",
    "rate(cmd_reserve_with_timeout{exported_instance=\"$Instance\"}[5m])",
    "rate(cmd_delete{exported_instance=\"$Instance\"}[5m])",
    "rate(cmd_bury{exported_instance=\"$Instance\"}[5m])",
    "rate(cmd_kick{exported_instance=\"$Instance\"}[5m])",
    "rate(total_jobs{exported_instance=\"$Instance\"}[5m])",
    "current_workers{exported_instance=\"$Instance\"}",
    "current_waiting{exported_instance=\"$Instance\"}",
    "current_tubes",
    "tube_current_jobs_ready{tube=\"$TubeName\"}",
    "tube_current_jobs_reserved{tube=\"$TubeName\"}",
    "tube_current_jobs_buried{tube=\"$TubeName\"}",
    "tube_current_jobs_delayed{tube=\"$TubeName\"}",
    "tube_current_jobs_urgent{tube=\"$TubeName\"}",
    "tube_current_using{tube=\"$TubeName\"}",
    "tube_current_waiting{tube=\"$TubeName\"}",
    "tube_current_watching{tube=\"$TubeName\"}",
    "rate(tube_total_jobs{tube=\"$TubeName\"}[5m])",
];

/// With the README's recording rules (`recipes/prometheus/exporter-names.yml`),
/// every query of the dashboard built for messagebird's exporter has a
/// series.
#[test]
fn the_exporters_dashboard_finds_every_series_through_the_readmes_rules() {
    let Some(path) = tool("prometheus") else { return };
    let (bin, addr) = start(&[]);
    let mut c: Client = bin.client();
    assert_eq!(c.cmd("use emails"), "USING emails\r\n");
    c.put_ok("hello");
    let prometheus = Prometheus::start_with_rules(&path, addr, Some(EXPORTER_NAMES));
    for query in DASHBOARD_QUERIES {
        let query = query.replace("$Instance", &addr.to_string()).replace("$TubeName", "emails");
        prometheus.wait_for(&query, |_| true);
    }
}

#[test]
fn prometheus_sees_the_queue_age_grow_and_counts_every_reserve() {
    let Some(path) = tool("prometheus") else { return };
    let (bin, addr) = start(&[]);
    let mut c: Client = bin.client();
    assert_eq!(c.cmd("use aging"), "USING aging\r\n");
    c.put_ok("nobody works this");
    assert_eq!(c.cmd("use served"), "USING served\r\n");
    assert_eq!(c.cmd("watch served"), "WATCHING 2\r\n");
    assert_eq!(c.cmd("ignore default"), "WATCHING 1\r\n");
    let reserves = 5;
    for _ in 0..reserves {
        let id = c.put_ok("work");
        assert!(c.cmd("reserve").starts_with(&format!("RESERVED {id} 4\r\n")));
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    let prometheus = Prometheus::start(&path, addr);
    let age = "beanstalkd_tube_oldest_ready_seconds{tube=\"aging\"}";
    let first = prometheus.wait_for(age, |v| v > 0.0);
    prometheus.wait_for(age, |v| v >= first + 1.0);
    let count = prometheus.wait_for("beanstalkd_tube_wait_seconds_count{tube=\"served\"}", |_| true);
    assert_eq!(count, f64::from(reserves));
    let deleted = "beanstalkd_tube_work_seconds_count{tube=\"served\",outcome=\"deleted\"}";
    assert_eq!(prometheus.wait_for(deleted, |_| true), f64::from(reserves));
}

/// The README's dead-letter alert fires for a tube born between two
/// scrapes whose first job was buried by its retry limit before the
/// second: its series starts at 1, and `increase()` alone, which needs two
/// samples, never sees it rise. The tube is born, and its job dead, in
/// a few milliseconds; should a scrape fall between (its series' first
/// sample is then 0), the test tries another tube.
#[test]
fn the_readmes_dead_letter_alert_fires_for_a_tube_born_between_two_scrapes() {
    let Some(path) = tool("prometheus") else { return };
    let (bin, addr) = start(&["--max-reserves", "1"]);
    let prometheus = Prometheus::start_with_rules(&path, addr, Some(ALERT_RULES));
    let series = |tube: &str| format!("beanstalkd_tube_buried_by_retry_limit_total{{tube=\"{tube}\"}}");
    prometheus.wait_for(&series("default"), |v| v == 0.0);
    let mut c: Client = bin.client();
    let tube = (1..=5)
        .map(|n| format!("born-{n}"))
        .find(|tube| {
            c.send(format!("use {tube}\r\nwatch {tube}\r\nput 0 0 60 5\r\nfails\r\nreserve\r\n"));
            assert_eq!(c.reply(), format!("USING {tube}\r\n"));
            assert_eq!(c.reply(), "WATCHING 2\r\n");
            let id = c.reply().trim_end().strip_prefix("INSERTED ").unwrap().to_owned();
            assert_eq!(c.reply(), format!("RESERVED {id} 5\r\nfails\r\n"));
            assert_eq!(c.cmd(&format!("release {id} 0 0")), "RELEASED\r\n");
            assert_eq!(c.cmd(&format!("ignore {tube}")), "WATCHING 1\r\n");
            // Scraped at least once since, and never seen at 0.
            prometheus.wait_for(&series(tube), |_| true);
            prometheus.wait_for(&format!("min_over_time({}[1h])", series(tube)), |_| true) == 1.0
        })
        .expect("a tube born and its job buried between two scrapes, in five tries");
    // A few evaluations of the rule after the series began.
    prometheus.wait_for(&format!("count_over_time({}[1h])", series(&tube)), |n| n >= 4.0);
    let firing = |tube: &str| {
        format!("ALERTS{{alertname=\"BeanstalkDeadLetters\",tube=\"{tube}\",alertstate=\"firing\"}}")
    };
    assert_eq!(prometheus.query(&firing(&tube)), Some(1.0), "no alert for {tube}");
    assert_eq!(prometheus.query(&firing("default")), None, "an alert for a tube without dead letters");
}

/// The README's dead-letter alert (in `recipes/prometheus/alerts.yml`)
/// fires once a job of the tube is buried by its retry limit, as
/// Prometheus sees it scrape after scrape.
#[test]
fn the_readmes_dead_letter_alert_fires_for_the_tube() {
    let Some(path) = tool("prometheus") else { return };
    let (bin, addr) = start(&["--max-reserves", "1"]);
    let mut c: Client = bin.client();
    assert_eq!(c.cmd("use emails"), "USING emails\r\n");
    assert_eq!(c.cmd("watch emails"), "WATCHING 2\r\n");
    c.put_ok("fails");
    let prometheus = Prometheus::start_with_rules(&path, addr, Some(ALERT_RULES));
    prometheus.wait_for("beanstalkd_tube_buried_by_retry_limit_total{tube=\"emails\"}", |v| v == 0.0);
    assert!(c.cmd("reserve").starts_with("RESERVED 1 5\r\n"));
    assert_eq!(c.cmd("release 1 0 0"), "RELEASED\r\n");
    let firing = "ALERTS{alertname=\"BeanstalkDeadLetters\",tube=\"emails\",alertstate=\"firing\"}";
    assert_eq!(prometheus.wait_for(firing, |_| true), 1.0);
}
