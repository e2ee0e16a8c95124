//! Switching from beanstalkd: our server started on a directory beanstalkd
//! wrote takes over every job, sets beanstalkd's files aside, and does so
//! exactly once whatever moment a crash strikes; it refuses to start over
//! files it cannot read, and never shares a directory with a running
//! beanstalkd.
//!
//! Fixtures come from two places: the real beanstalkd (Debian's package;
//! 1.12 writes the same version-7 files as 1.13), driven over loopback and
//! SIGKILLed; and files built here byte by byte, for version 5 (beanstalkd
//! 1.4.x, long gone from distributions) and for damage. beanstalkd is
//! `BEANSTALKD=path`, or Debian's; without it, the tests that need it say
//! so and pass, except under `CI=true`, where `.ci/run` installs it and a
//! missing one is a failure.
mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::beanstalkd::Beanstalkd;
use common::binary::{self, Bin, TempDir};
use common::Rng;
use common::{peek, put_bytes, Client};

// -------------------------------------------------------------------
// Harness
// -------------------------------------------------------------------

fn spawn(dir: &Path) -> Bin {
    binary::spawn(&["-b", binary::arg(dir)])
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir).unwrap().filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()
}

/// A job's `stats-job` fields that a restart must not change (not `age`,
/// `time-left` or `file`).
fn lasting_stats(c: &mut Client, id: u64) -> Vec<(String, String)> {
    let mut s: Vec<(String, String)> = c.yaml_map(&format!("stats-job {id}")).into_iter().collect();
    s.retain(|(k, _)| !matches!(k.as_str(), "age" | "time-left" | "file"));
    s.sort();
    s
}

fn expect_job(
    c: &mut Client,
    id: u64,
    tube: &str,
    state: &str,
    [pri, delay, ttr]: [u32; 3],
    counters: [u32; 5],
) {
    let s = c.yaml_map(&format!("stats-job {id}"));
    let want = [
        ("tube", format!("\"{tube}\"")),
        ("state", state.to_owned()),
        ("pri", pri.to_string()),
        ("delay", delay.to_string()),
        ("ttr", ttr.to_string()),
        ("reserves", counters[0].to_string()),
        ("timeouts", counters[1].to_string()),
        ("releases", counters[2].to_string()),
        ("buries", counters[3].to_string()),
        ("kicks", counters[4].to_string()),
    ];
    for (key, value) in want {
        assert_eq!(s[key], value, "job {id}: {key}; stats-job {s:?}");
    }
}

/// Ids in the order `peek-buried` + `kick 1` hands them out of `tube`.
fn buried_order(c: &mut Client, tube: &str) -> Vec<u64> {
    c.cmd(&format!("use {tube}"));
    let mut order = Vec::new();
    loop {
        let reply = c.cmd("peek-buried");
        let Some(rest) = reply.strip_prefix("FOUND ") else { break };
        order.push(rest.split(' ').next().unwrap().parse().unwrap());
        assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
    }
    order
}

fn now_nanos() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

// -------------------------------------------------------------------
// beanstalkd's files, byte by byte (reference §8.4 / beanstalkd's file.c)
// -------------------------------------------------------------------

/// One job record as beanstalkd lays it out. Times in nanoseconds.
#[derive(Clone)]
struct Rec {
    id: u64,
    pri: u32,
    delay: i64,
    ttr: i64,
    body_size: i32,
    created: i64,
    deadline: i64,
    counters: [u32; 5],
    state: u8,
}

impl Rec {
    fn new(id: u64, pri: u32, delay_s: i64, ttr_s: i64, body_len: usize, state: u8) -> Rec {
        let created = now_nanos();
        Rec {
            id,
            pri,
            delay: delay_s * 1_000_000_000,
            ttr: ttr_s * 1_000_000_000,
            body_size: body_len as i32 + 2,
            created,
            deadline: if state == 4 { created + delay_s * 1_000_000_000 } else { 0 },
            counters: [0; 5],
            state,
        }
    }

    /// The 80-byte version-7 Jobrec, or the 77 bytes version 5 stores
    /// (times in microseconds).
    fn bytes(&self, v5: bool) -> Vec<u8> {
        let t = |ns: i64| if v5 { ns / 1000 } else { ns };
        let mut b = vec![0u8; 80];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..12].copy_from_slice(&self.pri.to_le_bytes());
        b[16..24].copy_from_slice(&t(self.delay).to_le_bytes());
        b[24..32].copy_from_slice(&t(self.ttr).to_le_bytes());
        b[32..36].copy_from_slice(&self.body_size.to_le_bytes());
        b[40..48].copy_from_slice(&t(self.created).to_le_bytes());
        b[48..56].copy_from_slice(&t(self.deadline).to_le_bytes());
        for (i, c) in self.counters.iter().enumerate() {
            b[56 + 4 * i..60 + 4 * i].copy_from_slice(&c.to_le_bytes());
        }
        b[76] = self.state;
        b.truncate(if v5 { 77 } else { 80 });
        b
    }
}

/// Builds a beanstalkd binlog file.
struct TheirFile {
    v5: bool,
    bytes: Vec<u8>,
}

impl TheirFile {
    fn new(version: i32) -> TheirFile {
        TheirFile { v5: version == 5, bytes: version.to_le_bytes().to_vec() }
    }

    fn namelen(&mut self, n: usize) {
        if self.v5 {
            self.bytes.extend_from_slice(&(n as u64).to_le_bytes());
        } else {
            self.bytes.extend_from_slice(&(n as i32).to_le_bytes());
        }
    }

    /// A full record: tube, Jobrec, body + CRLF.
    fn full(&mut self, tube: &str, rec: &Rec, body: &[u8]) -> &mut Self {
        self.namelen(tube.len());
        self.bytes.extend_from_slice(tube.as_bytes());
        self.bytes.extend_from_slice(&rec.bytes(self.v5));
        self.bytes.extend_from_slice(body);
        self.bytes.extend_from_slice(b"\r\n");
        self
    }

    /// A short (update or delete) record.
    fn short(&mut self, rec: &Rec) -> &mut Self {
        self.namelen(0);
        self.bytes.extend_from_slice(&rec.bytes(self.v5));
        self
    }

    /// The zero tail beanstalkd preallocates.
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.bytes.resize(self.bytes.len() + n, 0);
        self
    }

    fn write(&self, path: &Path) {
        fs::write(path, &self.bytes).unwrap();
    }
}

// -------------------------------------------------------------------
// The real beanstalkd's files
// -------------------------------------------------------------------

/// Every state beanstalkd logs, across two tubes, with bodies of exactly
/// `-z` and `-z`−1 bytes (beanstalkd itself would drop both on replay).
#[test]
fn every_job_beanstalkd_wrote_is_taken_over_and_ids_continue() {
    let Some(exe) = common::beanstalkd::path() else { return };
    let dir = TempDir::new("migrate-real");
    let big: Vec<u8> = (0..65535u32).map(|i| b'a' + (i % 26) as u8).collect();
    {
        let b = Beanstalkd::start(&exe, &["-b", binary::arg(&dir.path)]);
        let mut c = b.client();
        assert_eq!(put_bytes(&mut c, 5, 0, 10, b"alpha"), 1);
        assert_eq!(put_bytes(&mut c, 7, 100, 20, b"delayed"), 2);
        assert_eq!(put_bytes(&mut c, 100, 0, 60, &big), 3);
        assert_eq!(put_bytes(&mut c, 100, 0, 60, &big[..65534]), 4);
        c.cmd("use emails");
        for body in [b"b1", b"b2", b"b3", b"b4"] {
            put_bytes(&mut c, 1, 0, 30, body);
        }
        c.cmd("watch emails");
        c.cmd("ignore default");
        for id in 5..=8 {
            assert!(c.cmd("reserve").starts_with(&format!("RESERVED {id} ")));
        }
        for id in [7, 5, 8, 6] {
            assert_eq!(c.cmd(&format!("bury {id} 2")), "BURIED\r\n");
        }
        assert_eq!(put_bytes(&mut c, 3, 0, 30, b"released"), 9);
        assert!(c.cmd("reserve-job 9").starts_with("RESERVED 9 "));
        assert_eq!(c.cmd("release 9 4 50"), "RELEASED\r\n");
        assert_eq!(put_bytes(&mut c, 3, 0, 30, b"kicked"), 10);
        assert!(c.cmd("reserve-job 10").starts_with("RESERVED 10 "));
        assert_eq!(c.cmd("bury 10 3"), "BURIED\r\n");
        assert_eq!(c.cmd("kick-job 10"), "KICKED\r\n");
        assert_eq!(put_bytes(&mut c, 3, 0, 30, b"deleted"), 11);
        assert_eq!(c.cmd("delete 11"), "DELETED\r\n");
        c.cmd("use default");
        assert_eq!(put_bytes(&mut c, 0, 0, 40, b"reserved"), 12);
        assert!(c.cmd("reserve-job 12").starts_with("RESERVED 12 "));
        b.kill();
    }
    assert!(names(&dir.path).contains("binlog.1"));

    let server = spawn(&dir.path);
    let mut c = server.client();
    expect_job(&mut c, 1, "default", "ready", [5, 0, 10], [0; 5]);
    expect_job(&mut c, 2, "default", "delayed", [7, 100, 20], [0; 5]);
    let left: u64 = c.yaml_map("stats-job 2")["time-left"].parse().unwrap();
    assert!((90..=100).contains(&left), "the delay keeps its wall-clock deadline: {left}");
    expect_job(&mut c, 3, "default", "ready", [100, 0, 60], [0; 5]);
    expect_job(&mut c, 4, "default", "ready", [100, 0, 60], [0; 5]);
    for id in 5..=8 {
        expect_job(&mut c, id, "emails", "buried", [2, 0, 30], [1, 0, 0, 1, 0]);
    }
    expect_job(&mut c, 9, "emails", "delayed", [4, 50, 30], [1, 0, 1, 0, 0]);
    expect_job(&mut c, 10, "emails", "ready", [3, 0, 30], [1, 0, 0, 1, 1]);
    // Reserved comes back ready, with the counters of its last record.
    expect_job(&mut c, 12, "default", "ready", [0, 0, 40], [0; 5]);
    let bodies: [(u64, &[u8]); 9] = [
        (1, b"alpha"),
        (2, b"delayed"),
        (3, &big),
        (4, &big[..65534]),
        (5, b"b1"),
        (8, b"b4"),
        (9, b"released"),
        (10, b"kicked"),
        (12, b"reserved"),
    ];
    for (id, body) in bodies {
        assert_eq!(peek(&mut c, id).as_deref(), Some(body), "body of job {id}");
    }
    assert_eq!(peek(&mut c, 11), None, "a deleted job stays deleted");
    let stats = c.stats();
    assert_eq!(stats["current-jobs-ready"], "5");
    assert_eq!(stats["current-jobs-delayed"], "2");
    assert_eq!(stats["current-jobs-buried"], "4");
    let before: Vec<_> =
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12].iter().map(|&id| lasting_stats(&mut c, id)).collect();
    let stderr = server.terminate();
    assert!(stderr.contains("imported 11 jobs"), "{stderr}");
    assert!(stderr.contains("binlog.1.imported"), "the log names where the file went: {stderr}");
    let files = names(&dir.path);
    assert!(files.contains("binlog.1.imported") && !files.contains("binlog.1"), "{files:?}");

    // A second start changes nothing and imports nothing.
    let server = spawn(&dir.path);
    let mut c = server.client();
    let after: Vec<_> =
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12].iter().map(|&id| lasting_stats(&mut c, id)).collect();
    assert_eq!(before, after);
    assert_eq!(
        buried_order(&mut c, "emails"),
        [7, 5, 8, 6],
        "buried jobs keep the order they were buried in"
    );
    c.cmd("use default");
    assert_eq!(c.put_ok("next"), 13, "ids continue above beanstalkd's");
    let stderr = server.terminate();
    assert!(!stderr.contains("imported"), "imported twice: {stderr}");
}

/// beanstalkd started on our directory by mistake starts its ids at 1
/// again; nothing of ours is lost, and its jobs come over with fresh ids.
#[test]
fn a_mistaken_run_of_beanstalkd_on_our_directory_loses_nothing() {
    let Some(exe) = common::beanstalkd::path() else { return };
    let dir = TempDir::new("migrate-back");
    let server = spawn(&dir.path);
    let mut c = server.client();
    for body in ["ours-1", "ours-2", "ours-3"] {
        c.put_ok(body);
    }
    // While we run, beanstalkd may not start on the directory.
    let mut refused = Command::new(&exe)
        .args(["-b", binary::arg(&dir.path), "-l", "127.0.0.1", "-p", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = refused.wait().unwrap();
    assert!(!status.success(), "beanstalkd must see our lock: {status}");
    server.terminate();

    let b = Beanstalkd::start(&exe, &["-b", binary::arg(&dir.path)]);
    let mut bc = b.client();
    assert_eq!(put_bytes(&mut bc, 0, 0, 60, b"theirs-1"), 1);
    assert_eq!(put_bytes(&mut bc, 0, 0, 60, b"theirs-2"), 2);
    // And while beanstalkd runs, we may not start: exit 10, as today.
    let mut args = vec!["-l", "127.0.0.1", "-p", "0", "-b"];
    args.push(binary::arg(&dir.path));
    let (code, stderr) = binary::run_to_exit(&args);
    assert_eq!(code, Some(10), "{stderr}");
    b.kill();

    let server = spawn(&dir.path);
    let mut c = server.client();
    for (id, body) in [(1, "ours-1"), (2, "ours-2"), (3, "ours-3"), (4, "theirs-1"), (5, "theirs-2")] {
        assert_eq!(peek(&mut c, id).as_deref(), Some(body.as_bytes()), "job {id}");
    }
    let stderr = server.terminate();
    assert!(
        stderr.contains("beanstalkd's job 1 has the id of a live job of ours; imported as job 4"),
        "{stderr}"
    );
}

// -------------------------------------------------------------------
// Hand-made files: version 5, damage, sizes
// -------------------------------------------------------------------

/// beanstalkd's own `cttest_binlog_v5`: beanstalkd 1.4.6 wrote `use test`,
/// `put 1 2 3 4`/`test`, `put 4 3 2 1`/`x`. Plus an update and a delete.
#[test]
fn version_5_files_from_beanstalkd_1_4_are_read() {
    let dir = TempDir::new("migrate-v5");
    let mut job3 = Rec::new(3, 9, 0, 5, 4, 1);
    let mut file = TheirFile::new(5);
    file.full("test", &Rec::new(1, 1, 2, 3, 4, 4), b"test")
        .full("test", &Rec::new(2, 4, 3, 2, 1, 4), b"x")
        .full("default", &job3, b"gone")
        .full("default", &Rec::new(4, 8, 0, 7, 5, 1), b"later");
    job3.state = 0;
    file.short(&job3);
    let mut buried = Rec::new(4, 6, 0, 7, 5, 3);
    buried.counters = [1, 0, 0, 1, 0];
    file.short(&buried).zeros(4096);
    file.write(&dir.path.join("binlog.1"));

    let server = spawn(&dir.path);
    let mut c = server.client();
    expect_job(&mut c, 1, "test", "delayed", [1, 2, 3], [0; 5]);
    expect_job(&mut c, 2, "test", "delayed", [4, 3, 2], [0; 5]);
    assert_eq!(peek(&mut c, 1).as_deref(), Some(&b"test"[..]));
    assert_eq!(peek(&mut c, 2).as_deref(), Some(&b"x"[..]));
    assert_eq!(peek(&mut c, 3), None);
    expect_job(&mut c, 4, "default", "buried", [6, 0, 7], [1, 0, 0, 1, 0]);
    assert_eq!(c.put_ok("new"), 5);
    server.terminate();
}

/// A damaged record loses only itself: the records after it are found
/// again, where beanstalkd would drop the rest of the file.
#[test]
fn a_damaged_record_in_beanstalkds_file_loses_only_that_record() {
    let dir = TempDir::new("migrate-damage");
    let mut file = TheirFile::new(7);
    file.full("default", &Rec::new(1, 0, 0, 60, 5, 1), b"first");
    let damaged_at = file.bytes.len();
    file.full("default", &Rec::new(2, 0, 0, 60, 7, 1), b"damaged");
    // The name length of job 2's record now reads 1000.
    file.bytes[damaged_at..damaged_at + 4].copy_from_slice(&1000i32.to_le_bytes());
    file.full("default", &Rec::new(3, 0, 0, 60, 5, 1), b"third").zeros(1000);
    file.write(&dir.path.join("binlog.1"));
    let mut second = TheirFile::new(7);
    second.full("other", &Rec::new(4, 0, 0, 60, 6, 1), b"fourth");
    // A record cut short by a crash.
    let rec = Rec::new(5, 0, 0, 60, 5, 1);
    second.namelen(5);
    second.bytes.extend_from_slice(b"other");
    second.bytes.extend_from_slice(&rec.bytes(false)[..40]);
    second.write(&dir.path.join("binlog.2"));

    let server = spawn(&dir.path);
    let mut c = server.client();
    assert_eq!(peek(&mut c, 1).as_deref(), Some(&b"first"[..]));
    assert_eq!(peek(&mut c, 2), None);
    assert_eq!(peek(&mut c, 3).as_deref(), Some(&b"third"[..]));
    assert_eq!(peek(&mut c, 4).as_deref(), Some(&b"fourth"[..]));
    // Job 5's record was never finished, so its id was never handed out.
    assert_eq!(c.put_ok("new"), 5, "ids continue above every id read");
    let stderr = server.terminate();
    let binlog1 = dir.path.join("binlog.1").display().to_string();
    assert!(stderr.contains(&format!("{binlog1}:{damaged_at}: damaged record")), "{stderr}");
    assert!(stderr.contains("binlog.2:") && stderr.contains("cut short"), "{stderr}");
}

// -------------------------------------------------------------------
// Refusing to start
// -------------------------------------------------------------------

fn refuses(what: &str, make: impl FnOnce(&Path) -> PathBuf) {
    let dir = TempDir::new("migrate-refuse");
    let path = make(&dir.path);
    let before = fs::symlink_metadata(&path).ok().filter(|m| m.is_file()).map(|_| fs::read(&path).unwrap());
    let (code, stderr) = binary::run_to_exit(&["-l", "127.0.0.1", "-p", "0", "-b", binary::arg(&dir.path)]);
    assert_eq!(code, Some(1), "{what}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: one line: {stderr}");
    assert!(lines[0].contains(&path.display().to_string()), "{what}: the line names the file: {stderr}");
    assert!(lines[0].contains("refusing to start"), "{what}: {stderr}");
    if let Some(before) = before {
        assert_eq!(fs::read(&path).unwrap(), before, "{what}: the file must be left untouched");
    }
    let own = path.file_name().unwrap().to_string_lossy().into_owned();
    let written: Vec<String> =
        names(&dir.path).into_iter().filter(|n| n.starts_with("beanstalk.") && *n != own).collect();
    assert!(written.is_empty(), "{what}: nothing written: {written:?}");
}

#[test]
fn files_of_neither_format_stop_start_up_and_are_left_untouched() {
    refuses("garbage", |dir| {
        let path = dir.join("binlog.1");
        fs::write(&path, b"this is not a binlog at all\n").unwrap();
        path
    });
    refuses("version 6", |dir| {
        let path = dir.join("binlog.1");
        let mut bytes = 6i32.to_le_bytes().to_vec();
        bytes.resize(4096, 0);
        fs::write(&path, bytes).unwrap();
        path
    });
    refuses("a truncated header", |dir| {
        let path = dir.join("binlog.1");
        fs::write(&path, [7u8, 0]).unwrap();
        path
    });
    refuses("ours, from a newer format version", |dir| {
        let path = dir.join("beanstalk.1");
        let mut bytes = b"BSTKLOG\0".to_vec();
        bytes.extend_from_slice(&99u32.to_le_bytes());
        fs::write(&path, bytes).unwrap();
        path
    });
    refuses("a directory", |dir| {
        let path = dir.join("binlog.3");
        fs::create_dir(&path).unwrap();
        path
    });
    refuses("a dangling symbolic link", |dir| {
        let path = dir.join("beanstalk.2");
        std::os::unix::fs::symlink(dir.join("nowhere"), &path).unwrap();
        path
    });
}

// -------------------------------------------------------------------
// Crashes during an import
// -------------------------------------------------------------------

/// A beanstalkd file of `count` jobs of 1 KiB in two tubes, some buried.
fn many_jobs(path: &Path, count: u64) {
    let mut file = TheirFile::new(7);
    for id in 1..=count {
        let body = format!("{id:01024}");
        let state = if id % 7 == 0 { 3 } else { 1 };
        file.full(
            if id % 2 == 0 { "even" } else { "odd" },
            &Rec::new(id, id as u32, 0, 60, body.len(), state),
            body.as_bytes(),
        );
    }
    file.zeros(4096).write(path);
}

/// Every job 1..=count is there exactly once, with its body.
fn all_once(c: &mut Client, count: u64, what: &str) {
    for id in 1..=count {
        assert_eq!(peek(c, id), Some(format!("{id:01024}").into_bytes()), "{what}: job {id}");
    }
    let stats = c.stats();
    let total: u64 = ["ready", "reserved", "delayed", "buried"]
        .iter()
        .map(|s| stats[&format!("current-jobs-{s}")].parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, count, "{what}: no job doubled");
    assert_eq!(c.put_ok("next"), count + 1, "{what}");
}

/// Rebuilds every state a crash can leave on disk, from the files of one
/// finished import: the temporary file cut at many lengths (crash while
/// writing it), and the committed file with beanstalkd's file not yet set
/// aside (crash after the rename). Each imports exactly once.
#[test]
fn a_crash_at_any_step_of_an_import_imports_exactly_once() {
    const COUNT: u64 = 60;
    let work = TempDir::new("migrate-crash");
    let original = work.path.join("original");
    many_jobs(&original, COUNT);
    let done = TempDir::new("migrate-done");
    fs::copy(&original, done.path.join("binlog.1")).unwrap();
    spawn(&done.path).terminate();
    let committed = fs::read(done.path.join("beanstalk.1")).unwrap();

    let mut cuts: Vec<usize> = (0..committed.len()).step_by(997).collect();
    cuts.extend([0, 1, 12, committed.len() - 1, committed.len()]);
    for cut in cuts {
        let dir = TempDir::new("migrate-crash-temp");
        fs::copy(&original, dir.path.join("binlog.1")).unwrap();
        fs::write(dir.path.join("beanstalk.import"), &committed[..cut]).unwrap();
        let server = spawn(&dir.path);
        all_once(&mut server.client(), COUNT, &format!("temporary file cut at {cut}"));
        server.terminate();
        assert!(!names(&dir.path).contains("beanstalk.import"));
    }

    let dir = TempDir::new("migrate-crash-renamed");
    fs::copy(&original, dir.path.join("binlog.1")).unwrap();
    fs::write(dir.path.join("beanstalk.1"), &committed).unwrap();
    let server = spawn(&dir.path);
    all_once(&mut server.client(), COUNT, "committed, not yet set aside");
    let stderr = server.terminate();
    assert!(!stderr.contains("imported 60 jobs"), "imported twice: {stderr}");
    let files = names(&dir.path);
    assert!(files.contains("binlog.1.imported") && !files.contains("binlog.1"), "{files:?}");
}

/// SIGKILL at random moments while a larger import runs, then start again:
/// every job once. `MIGRATE_SEED` replays a run.
#[test]
fn sigkill_at_random_moments_of_an_import_loses_and_doubles_nothing() {
    const COUNT: u64 = 3000;
    let seed = std::env::var("MIGRATE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED);
    let mut rng = Rng::new(seed);
    let dir = TempDir::new("migrate-kill");
    many_jobs(&dir.path.join("binlog.1"), COUNT);
    for round in 0..8 {
        let mut child = binary::beanstalk()
            .args(["-l", "127.0.0.1", "-p", "0", "-b", binary::arg(&dir.path)])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_micros(rng.below(40_000)));
        let _ = child.kill();
        let _ = child.wait();
        let files = names(&dir.path);
        assert!(
            files.contains("binlog.1") || files.contains("binlog.1.imported"),
            "round {round} (seed {seed}): beanstalkd's file vanished: {files:?}"
        );
    }
    let server = spawn(&dir.path);
    all_once(&mut server.client(), COUNT, &format!("seed {seed}"));
    server.terminate();
}
