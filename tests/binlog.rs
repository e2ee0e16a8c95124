//! The binlog (`-b DIR`) with the real binary: every job state and command
//! survives a restart, files rotate, are deleted and compacted, the
//! directory is locked, and damaged files are recovered from.
//!
//! Each test works in a directory of its own under the system temporary
//! directory, removed at the end. Servers are started on 127.0.0.1 and a free
//! port (`-p 0 -V`, the port read from the `bind` line on stderr), and only
//! the processes started here are ever killed.
mod common;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::binary::{self, Bin, TempDir};
use common::Client;
use common::{peek, put_bytes, stat_u64};

// -------------------------------------------------------------------
// Harness
// -------------------------------------------------------------------

/// Starts the binary on binlog directory `dir` with `extra` flags.
fn spawn(dir: &Path, extra: &[&str]) -> Bin {
    let mut args = vec!["-b", binary::arg(dir)];
    args.extend_from_slice(extra);
    binary::spawn(&args)
}

/// Runs the binary on `dir` until it exits by itself; exit code and stderr.
fn run_to_exit(args: &[&str], dir: &Path) -> (Option<i32>, String) {
    let mut all = vec!["-l", "127.0.0.1", "-p", "0"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-b", binary::arg(dir)]);
    binary::run_to_exit(&all)
}

/// The numbers of the `beanstalk.N` files in `dir`.
fn binlog_files(dir: &Path) -> BTreeSet<u32> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| name.strip_prefix("beanstalk.")?.parse().ok())
        .collect()
}

/// The files of `dir` once `done` holds of them, or after 5 s: a file let
/// go is removed after the next fsync (`-f`), a moment after the reply.
fn files_once(dir: &Path, done: impl Fn(&BTreeSet<u32>) -> bool) -> BTreeSet<u32> {
    common::settle(common::HANG_GUARD, || done(&binlog_files(dir)));
    binlog_files(dir)
}

fn file_names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir).unwrap().filter_map(|e| e.ok()?.file_name().into_string().ok()).collect()
}

fn stats_job(c: &mut Client, id: u64) -> HashMap<String, String> {
    c.yaml_map(&format!("stats-job {id}"))
}

/// A body of `len` bytes that differs with `seed`.
fn filler(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + ((seed as usize * 7 + i * 13) % 26) as u8).collect()
}

/// Record boundaries of a binlog file, as record.rs documents the format:
/// a 12-byte header, then `u32 length, u32 crc, payload[length]` until a
/// zero length. Returns `(start, end)` of each record.
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    assert_eq!(&bytes[..8], b"BSTKLOG\0", "not a binlog file");
    let mut out = Vec::new();
    let mut at = 12;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        out.push((at, at + 8 + len));
        at += 8 + len;
    }
    out
}

// -------------------------------------------------------------------
// Every state and command, across restarts
// -------------------------------------------------------------------

/// What a job must look like after a restart.
struct Expect {
    id: u64,
    tube: &'static str,
    state: &'static str,
    pri: u32,
    delay: u32,
    ttr: u32,
    /// reserves, timeouts, releases, buries, kicks
    counters: [u32; 5],
    body: Vec<u8>,
}

fn check_jobs(c: &mut Client, expected: &[Expect], when: &str) {
    for e in expected {
        let s = stats_job(c, e.id);
        let want = [
            ("tube", format!("\"{}\"", e.tube)),
            ("state", e.state.to_owned()),
            ("pri", e.pri.to_string()),
            ("delay", e.delay.to_string()),
            ("ttr", e.ttr.to_string()),
            ("reserves", e.counters[0].to_string()),
            ("timeouts", e.counters[1].to_string()),
            ("releases", e.counters[2].to_string()),
            ("buries", e.counters[3].to_string()),
            ("kicks", e.counters[4].to_string()),
        ];
        for (key, value) in want {
            assert_eq!(s[key], value, "{when}: job {} key {key}; stats-job {s:?}", e.id);
        }
        if e.state == "delayed" {
            let left: u32 = s["time-left"].parse().unwrap();
            assert!(left <= e.delay && left + 20 >= e.delay, "{when}: job {} time-left {left}", e.id);
        }
        assert_eq!(peek(c, e.id).as_deref(), Some(&e.body[..]), "{when}: body of job {}", e.id);
    }
}

#[test]
fn every_job_state_and_command_survives_restarts() {
    let dir = TempDir::new("states");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("use t-1"), "USING t-1\r\n");
    let body_a = b"a\r\nb\0c\r\n\0\xff end".to_vec();
    let a = put_bytes(&mut c, 5, 0, 7, &body_a);
    let b = put_bytes(&mut c, 6, 100, 8, b"delayed");
    let c1 = put_bytes(&mut c, 0, 0, 60, b"buried-1");
    let c2 = put_bytes(&mut c, 0, 0, 60, b"buried-2");
    let f = put_bytes(&mut c, 9, 0, 60, b"reserved");
    let g = put_bytes(&mut c, 9, 0, 60, b"released-0");
    let h = put_bytes(&mut c, 9, 0, 60, b"released-100");
    let j = put_bytes(&mut c, 9, 0, 60, b"kick-job-buried");
    let k = put_bytes(&mut c, 9, 100, 60, b"kick-job-delayed");
    let l = put_bytes(&mut c, 9, 0, 60, b"reserve-job-buried");
    let m = put_bytes(&mut c, 9, 100, 60, b"reserve-job-delayed");
    let n = put_bytes(&mut c, 9, 0, 60, b"deleted");
    assert_eq!(c.cmd("use kt"), "USING kt\r\n");
    let i = put_bytes(&mut c, 1, 0, 60, b"kicked");
    assert_eq!(c.cmd("use gone"), "USING gone\r\n");
    let z = put_bytes(&mut c, 1, 0, 60, b"in a tube that goes");
    assert_eq!(c.cmd(&format!("delete {z}")), "DELETED\r\n");

    let ok = |c: &mut Client, cmd: String, want: &str| assert_eq!(c.cmd(&cmd), want, "{cmd}");
    for id in [c1, c2] {
        assert!(c.cmd(&format!("reserve-job {id}")).starts_with("RESERVED"));
        ok(&mut c, format!("bury {id} {}", 10 + id), "BURIED\r\n");
    }
    // f: released once (logged), then reserved again (not logged).
    assert!(c.cmd(&format!("reserve-job {f}")).starts_with("RESERVED"));
    ok(&mut c, format!("release {f} 20 0"), "RELEASED\r\n");
    assert!(c.cmd(&format!("reserve-job {f}")).starts_with("RESERVED"));
    assert!(c.cmd(&format!("reserve-job {g}")).starts_with("RESERVED"));
    ok(&mut c, format!("release {g} 3 0"), "RELEASED\r\n");
    assert!(c.cmd(&format!("reserve-job {h}")).starts_with("RESERVED"));
    ok(&mut c, format!("release {h} 4 100"), "RELEASED\r\n");
    assert!(c.cmd(&format!("reserve-job {i}")).starts_with("RESERVED"));
    ok(&mut c, format!("bury {i} 2"), "BURIED\r\n");
    assert_eq!(c.cmd("use kt"), "USING kt\r\n");
    ok(&mut c, "kick 1".into(), "KICKED 1\r\n");
    assert!(c.cmd(&format!("reserve-job {j}")).starts_with("RESERVED"));
    ok(&mut c, format!("bury {j} 7"), "BURIED\r\n");
    ok(&mut c, format!("kick-job {j}"), "KICKED\r\n");
    ok(&mut c, format!("kick-job {k}"), "KICKED\r\n");
    assert!(c.cmd(&format!("reserve-job {l}")).starts_with("RESERVED"));
    ok(&mut c, format!("bury {l} 8"), "BURIED\r\n");
    assert!(c.cmd(&format!("reserve-job {l}")).starts_with("RESERVED"));
    assert!(c.cmd(&format!("reserve-job {m}")).starts_with("RESERVED"));
    ok(&mut c, format!("delete {n}"), "DELETED\r\n");

    let expected = vec![
        Expect {
            id: a,
            tube: "t-1",
            state: "ready",
            pri: 5,
            delay: 0,
            ttr: 7,
            counters: [0; 5],
            body: body_a,
        },
        Expect {
            id: b,
            tube: "t-1",
            state: "delayed",
            pri: 6,
            delay: 100,
            ttr: 8,
            counters: [0; 5],
            body: b"delayed".to_vec(),
        },
        Expect {
            id: c1,
            tube: "t-1",
            state: "buried",
            pri: 10 + c1 as u32,
            delay: 0,
            ttr: 60,
            counters: [1, 0, 0, 1, 0],
            body: b"buried-1".to_vec(),
        },
        Expect {
            id: c2,
            tube: "t-1",
            state: "buried",
            pri: 10 + c2 as u32,
            delay: 0,
            ttr: 60,
            counters: [1, 0, 0, 1, 0],
            body: b"buried-2".to_vec(),
        },
        // Reserved at the crash: ready, counters as of the release.
        Expect {
            id: f,
            tube: "t-1",
            state: "ready",
            pri: 20,
            delay: 0,
            ttr: 60,
            counters: [1, 0, 1, 0, 0],
            body: b"reserved".to_vec(),
        },
        Expect {
            id: g,
            tube: "t-1",
            state: "ready",
            pri: 3,
            delay: 0,
            ttr: 60,
            counters: [1, 0, 1, 0, 0],
            body: b"released-0".to_vec(),
        },
        Expect {
            id: h,
            tube: "t-1",
            state: "delayed",
            pri: 4,
            delay: 100,
            ttr: 60,
            counters: [1, 0, 1, 0, 0],
            body: b"released-100".to_vec(),
        },
        Expect {
            id: i,
            tube: "kt",
            state: "ready",
            pri: 2,
            delay: 0,
            ttr: 60,
            counters: [1, 0, 0, 1, 1],
            body: b"kicked".to_vec(),
        },
        Expect {
            id: j,
            tube: "t-1",
            state: "ready",
            pri: 7,
            delay: 0,
            ttr: 60,
            counters: [1, 0, 0, 1, 1],
            body: b"kick-job-buried".to_vec(),
        },
        Expect {
            id: k,
            tube: "t-1",
            state: "ready",
            pri: 9,
            delay: 100,
            ttr: 60,
            counters: [0, 0, 0, 0, 1],
            body: b"kick-job-delayed".to_vec(),
        },
        // Taken by reserve-job from buried, then a crash: ready, not buried.
        Expect {
            id: l,
            tube: "t-1",
            state: "ready",
            pri: 8,
            delay: 0,
            ttr: 60,
            counters: [2, 0, 0, 1, 0],
            body: b"reserve-job-buried".to_vec(),
        },
        Expect {
            id: m,
            tube: "t-1",
            state: "ready",
            pri: 9,
            delay: 100,
            ttr: 60,
            counters: [1, 0, 0, 0, 0],
            body: b"reserve-job-delayed".to_vec(),
        },
    ];
    let age_before: u64 = stats_job(&mut c, a)["age"].parse().unwrap();
    drop(c);
    server.kill();

    // First restart: after a crash.
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    check_jobs(&mut c, &expected, "after SIGKILL");
    assert_eq!(peek(&mut c, n), None, "deleted job came back");
    assert_eq!(peek(&mut c, z), None, "deleted job came back");
    let tubes = c.cmd("list-tubes");
    for t in ["default", "t-1", "kt"] {
        assert!(tubes.contains(&format!("- {t}\n")), "tube {t} not recreated: {tubes:?}");
    }
    let age_after: u64 = stats_job(&mut c, a)["age"].parse().unwrap();
    assert!(age_after >= age_before, "age went back from {age_before} to {age_after}");
    assert_eq!(c.stat("current-jobs-ready"), "8");
    assert_eq!(c.stat("current-jobs-delayed"), "2");
    assert_eq!(c.stat("current-jobs-buried"), "2");
    assert_eq!(c.stat("current-jobs-reserved"), "0");
    drop(c);
    server.terminate();

    // Second restart, after a clean stop: nothing drifts (buries included).
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    check_jobs(&mut c, &expected, "after SIGTERM");
    assert_eq!(c.cmd("use t-1"), "USING t-1\r\n");
    assert_eq!(c.cmd("peek-delayed"), format!("FOUND {b} 7\r\ndelayed\r\n"));
    // Buried order is kept: c1 was buried first.
    assert_eq!(c.cmd("peek-buried"), format!("FOUND {c1} 8\r\nburied-1\r\n"));
    assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
    assert_eq!(c.cmd("peek-buried"), format!("FOUND {c2} 8\r\nburied-2\r\n"));
    // Ids continue after the highest one ever handed out.
    let next = put_bytes(&mut c, 0, 0, 10, b"after");
    assert_eq!(next, z + 1, "ids must continue after a restart");
    drop(c);
    server.kill();
}

/// reference §8.2: tubes are recreated only for jobs that survive.
#[test]
fn tubes_are_recreated_only_for_jobs_that_survive() {
    let dir = TempDir::new("tubes");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("use gone"), "USING gone\r\n");
    let id = put_bytes(&mut c, 0, 0, 60, b"z");
    assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    assert_eq!(c.cmd("use kept"), "USING kept\r\n");
    put_bytes(&mut c, 0, 0, 60, b"k");
    assert_eq!(c.cmd("use default"), "USING default\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 21\r\n---\n- default\n- kept\n\r\n");
    drop(c);
    server.kill();
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    assert_eq!(
        c.cmd("list-tubes"),
        "OK 21\r\n---\n- default\n- kept\n\r\n",
        "tube \"gone\" has no surviving job and must not be recreated"
    );
    drop(c);
    server.kill();
}

/// `move-job` is logged: after a restart each moved job is in its new
/// tube, in its state, with its fields; a buried one keeps its place at
/// the end of its new tube's buried queue; the tube it left is gone.
#[test]
fn moved_jobs_stay_moved_after_a_restart() {
    let dir = TempDir::new("move-job");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("use old"), "USING old\r\n");
    let ready = put_bytes(&mut c, 3, 0, 40, b"ready");
    let delayed = put_bytes(&mut c, 4, 100, 50, b"delayed");
    let buried = put_bytes(&mut c, 5, 0, 60, b"buried");
    assert_eq!(c.cmd("use new"), "USING new\r\n");
    let there = put_bytes(&mut c, 6, 0, 70, b"there");
    for id in [there, buried] {
        assert!(c.cmd(&format!("reserve-job {id}")).starts_with("RESERVED"));
        assert_eq!(c.cmd(&format!("bury {id} 0")), "BURIED\r\n");
    }
    assert_eq!(c.cmd("use default"), "USING default\r\n");
    for id in [ready, delayed, buried] {
        assert_eq!(c.cmd(&format!("move-job {id} new")), "MOVED\r\n");
    }
    let before: Vec<_> = [ready, delayed, buried].iter().map(|&id| stats_job(&mut c, id)).collect();
    drop(c);
    server.kill();

    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("list-tubes"), "OK 20\r\n---\n- default\n- new\n\r\n");
    for (want, id) in before.iter().zip([ready, delayed, buried]) {
        let got = stats_job(&mut c, id);
        for key in ["tube", "state", "pri", "delay", "ttr", "reserves", "releases", "buries", "kicks"] {
            assert_eq!(want[key], got[key], "job {id}: {key}");
        }
    }
    let left: u64 = stats_job(&mut c, delayed)["time-left"].parse().unwrap();
    assert!((95..=100).contains(&left), "time-left {left}");
    assert_eq!(c.cmd("use new"), "USING new\r\n");
    assert_eq!(c.cmd("peek-buried"), format!("FOUND {there} 5\r\nthere\r\n"));
    assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
    assert_eq!(c.cmd("peek-buried"), format!("FOUND {buried} 6\r\nburied\r\n"));
    assert_eq!(c.cmd(&format!("delete {there}")), "DELETED\r\n");
    assert_eq!(c.cmd("peek-ready"), format!("FOUND {ready} 5\r\nready\r\n"));
    drop(c);
    server.kill();
}

#[test]
fn delayed_jobs_keep_their_wall_clock_deadline() {
    let dir = TempDir::new("deadline");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let soon = put_bytes(&mut c, 0, 1, 60, b"soon");
    let putting_later = Instant::now();
    let later = put_bytes(&mut c, 0, 3, 60, b"later");
    drop(c);
    server.kill();
    thread::sleep(Duration::from_millis(1300));
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let s = stats_job(&mut c, soon);
    assert_eq!(s["state"], "ready", "deadline passed while down: {s:?}");
    let s = stats_job(&mut c, later);
    // A machine slow to restart may pass `later`'s deadline too; by this
    // test's clock, which started first, it cannot have passed before 3 s.
    if putting_later.elapsed() < Duration::from_secs(3) {
        assert_eq!(s["state"], "delayed", "{s:?}");
    }
    let left: u64 = s["time-left"].parse().unwrap();
    assert!(left <= 1, "the time spent down must count: time-left {left}");
    assert_eq!(c.cmd(&common::reserve_guarded()), format!("RESERVED {soon} 4\r\nsoon\r\n"));
    assert_eq!(c.cmd(&common::reserve_guarded()), format!("RESERVED {later} 5\r\nlater\r\n"));
    drop(c);
    server.kill();
}

#[test]
fn ids_never_go_backwards_even_after_every_file_is_gone() {
    let dir = TempDir::new("ids");
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    let ids: Vec<u64> = (0..60).map(|n| put_bytes(&mut c, 0, 0, 60, &filler(n, 200))).collect();
    assert_eq!(ids, (1..=60).collect::<Vec<_>>());
    assert!(stat_u64(&mut c, "binlog-current-index") >= 3, "60 x 200 bytes fill several 4 KiB files");
    for id in &ids {
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    drop(c);
    server.kill();

    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    let files = binlog_files(&dir.path);
    assert_eq!(files.len(), 1, "files with no live job must be deleted at start: {files:?}");
    assert_eq!(c.stat("binlog-oldest-index"), c.stat("binlog-current-index"));
    assert_eq!(put_bytes(&mut c, 0, 0, 60, b"x"), 61);
    assert_eq!(c.cmd("delete 61"), "DELETED\r\n");
    drop(c);
    server.terminate();
    // Two restarts without any job at all.
    spawn(&dir.path, &["-s", "4096"]).terminate();
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    assert_eq!(binlog_files(&dir.path).len(), 1);
    assert_eq!(put_bytes(&mut c, 0, 0, 60, b"y"), 62);
    drop(c);
    server.kill();
}

// -------------------------------------------------------------------
// Files: rotation, deletion, compaction, stats
// -------------------------------------------------------------------

#[test]
fn files_rotate_and_are_deleted_once_their_jobs_are_gone() {
    let dir = TempDir::new("rotate");
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    assert_eq!(c.stat("binlog-max-size"), "4096");
    assert_eq!(c.stat("binlog-oldest-index"), "1");
    assert_eq!(c.stat("binlog-current-index"), "1");
    assert_eq!(c.stat("binlog-records-written"), "0");
    let mut in_file: Vec<(u64, u64)> = Vec::new();
    for n in 0..10 {
        let id = put_bytes(&mut c, 0, 0, 60, &filler(n, 1000));
        let file: u64 = stats_job(&mut c, id)["file"].parse().unwrap();
        assert_eq!(file, stat_u64(&mut c, "binlog-current-index"), "a put goes to the current file");
        in_file.push((id, file));
    }
    assert_eq!(c.stat("binlog-records-written"), "10");
    let current = stat_u64(&mut c, "binlog-current-index");
    assert!(current >= 3, "10 KB in 4 KiB files must rotate: current {current}");
    let files = binlog_files(&dir.path);
    assert_eq!(files, (1..=current as u32).collect(), "all files are still needed");
    for n in &files {
        let len = fs::metadata(dir.path.join(format!("beanstalk.{n}"))).unwrap().len();
        assert!(len <= 8192 && len > 1000, "beanstalk.{n} is {len} bytes");
    }

    // Delete the jobs of file 1: it goes, and the oldest index moves.
    for &(id, _) in in_file.iter().filter(|(_, f)| *f == 1) {
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    assert_eq!(c.stat("binlog-oldest-index"), "2");
    assert!(!files_once(&dir.path, |f| !f.contains(&1)).contains(&1), "beanstalk.1 must be deleted");
    // A middle file whose jobs are all gone goes even while an older file
    // lives: none of its records refers to an older file.
    for &(id, _) in in_file.iter().filter(|(_, f)| *f == 3) {
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    assert!(
        !files_once(&dir.path, |f| !f.contains(&3)).contains(&3),
        "beanstalk.3 holds nothing anyone needs"
    );
    for &(id, _) in in_file.iter().filter(|(_, f)| *f == 2) {
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    let oldest = stat_u64(&mut c, "binlog-oldest-index");
    let current = stat_u64(&mut c, "binlog-current-index");
    assert!(oldest >= 4, "beanstalk.2 and beanstalk.3 must both go: oldest {oldest}");
    let expected: BTreeSet<u32> = (oldest as u32..=current as u32).collect();
    assert_eq!(files_once(&dir.path, |f| *f == expected), expected);
    let survivors: Vec<(u64, u64)> = in_file.iter().copied().filter(|(_, f)| *f >= 4).collect();
    drop(c);
    server.kill();

    // After a restart the survivors are there and a new file is current.
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    assert_eq!(stat_u64(&mut c, "binlog-current-index"), current + 1);
    assert_eq!(c.stat("binlog-records-written"), "0");
    for &(id, file) in &survivors {
        assert_eq!(peek(&mut c, id), Some(filler(id - 1, 1000)), "job {id}");
        assert_eq!(stats_job(&mut c, id)["file"], file.to_string(), "job {id}'s record did not move");
    }
    drop(c);
    server.kill();
}

#[test]
fn file_size_is_rounded_up_and_shown() {
    let dir = TempDir::new("size");
    let server = spawn(&dir.path, &["-s", "5000"]);
    let mut c = server.client();
    assert_eq!(c.stat("binlog-max-size"), "5000");
    put_bytes(&mut c, 0, 0, 60, b"x");
    let len = fs::metadata(dir.path.join("beanstalk.1")).unwrap().len();
    assert_eq!(len, 8192, "preallocated to -s rounded up to 4096");
    drop(c);
    server.kill();
}

#[test]
fn records_written_counts_each_logged_change() {
    let dir = TempDir::new("written");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let written = |c: &mut Client| stat_u64(c, "binlog-records-written");
    assert_eq!(written(&mut c), 0);
    let id = put_bytes(&mut c, 0, 0, 60, b"job");
    let other = put_bytes(&mut c, 0, 5, 60, b"other");
    assert_eq!(written(&mut c), 2);
    let steps: [(String, &str, u64); 14] = [
        (format!("reserve-job {id}"), "RESERVED", 0),
        (format!("touch {id}"), "TOUCHED", 0),
        (format!("release {id} 1 0"), "RELEASED", 1),
        (format!("reserve-job {id}"), "RESERVED", 0),
        (format!("release {id} 1 9"), "RELEASED", 1),
        (format!("reserve-job {id}"), "RESERVED", 1),
        (format!("bury {id} 2"), "BURIED", 1),
        ("kick 5".to_owned(), "KICKED 1", 1),
        (format!("reserve-job {id}"), "RESERVED", 0),
        (format!("bury {id} 2"), "BURIED", 1),
        (format!("kick-job {id}"), "KICKED", 1),
        (format!("kick-job {other}"), "KICKED", 1),
        ("pause-tube default 1".to_owned(), "PAUSED", 0),
        (format!("delete {id}"), "DELETED", 1),
    ];
    let mut expect = 2;
    for (cmd, reply, records) in steps {
        let got = c.cmd(&cmd);
        assert!(got.starts_with(reply), "{cmd}: {got:?}");
        expect += records;
        assert_eq!(written(&mut c), expect, "after {cmd}");
    }
    assert_eq!(c.stat("binlog-records-migrated"), "0");
    drop(c);
    server.kill();
}

#[test]
fn compaction_moves_a_long_lived_job_and_keeps_disk_use_bounded() {
    let dir = TempDir::new("compact");
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    let long_body = filler(99, 100);
    let long = put_bytes(&mut c, 0, 0, 60, &long_body);
    let mut max_files = 0;
    for n in 0..300 {
        let id = put_bytes(&mut c, 0, 0, 60, &filler(n, 1000));
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
        let files = files_once(&dir.path, |f| f.len() <= 5);
        max_files = max_files.max(files.len());
        assert!(files.len() <= 5, "after {n} put/delete cycles the log has {} files: {files:?}", files.len());
        let bytes: u64 = files
            .iter()
            .map(|f| fs::metadata(dir.path.join(format!("beanstalk.{f}"))).map_or(0, |m| m.len()))
            .sum();
        assert!(bytes <= 5 * 8192, "the log holds {bytes} bytes for ~1 KB of live data");
    }
    let migrated = stat_u64(&mut c, "binlog-records-migrated");
    assert!(migrated > 0, "the long-lived job was never migrated");
    let current = stat_u64(&mut c, "binlog-current-index");
    let oldest = stat_u64(&mut c, "binlog-oldest-index");
    assert!(current > 30, "300 KB through 4 KiB files: current index {current}");
    let file: u64 = stats_job(&mut c, long)["file"].parse().unwrap();
    assert!(file >= oldest && file <= current && file > 1, "job file {file}, files {oldest}..={current}");
    assert_eq!(oldest, file, "the long-lived job's file is what keeps the oldest file");
    assert!(binlog_files(&dir.path).contains(&(file as u32)));
    drop(c);
    server.kill();

    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    assert_eq!(peek(&mut c, long), Some(long_body), "the migrated job after a restart");
    assert_eq!(c.stat("current-jobs-ready"), "1");
    assert_eq!(put_bytes(&mut c, 0, 0, 60, b"n"), 302);
    drop(c);
    server.kill();
}

#[test]
fn compaction_keeps_each_migrated_jobs_state() {
    let dir = TempDir::new("compact-states");
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    let mut holder = server.client();
    let ready = put_bytes(&mut c, 1, 0, 11, b"ready\r\n\0");
    let buried = put_bytes(&mut c, 2, 0, 12, b"buried");
    assert!(c.cmd(&format!("reserve-job {buried}")).starts_with("RESERVED"));
    assert_eq!(c.cmd(&format!("bury {buried} 5")), "BURIED\r\n");
    let delayed = put_bytes(&mut c, 3, 100, 13, b"delayed");
    let reserved = put_bytes(&mut c, 4, 0, 14, b"reserved");
    assert!(holder.cmd(&format!("reserve-job {reserved}")).starts_with("RESERVED"));
    for n in 0..200 {
        let id = put_bytes(&mut c, 0, 0, 60, &filler(n, 1000));
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    let oldest = stat_u64(&mut c, "binlog-oldest-index");
    let current = stat_u64(&mut c, "binlog-current-index");
    assert!(oldest > 1, "compaction must have emptied beanstalk.1");
    for id in [ready, buried, delayed, reserved] {
        let file: u64 = stats_job(&mut c, id)["file"].parse().unwrap();
        assert!(file >= oldest && file <= current, "job {id} in file {file}, files {oldest}..={current}");
    }
    assert!(stat_u64(&mut c, "binlog-records-migrated") >= 4);
    drop((c, holder));
    server.kill();

    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    let expected = [
        Expect {
            id: ready,
            tube: "default",
            state: "ready",
            pri: 1,
            delay: 0,
            ttr: 11,
            counters: [0; 5],
            body: b"ready\r\n\0".to_vec(),
        },
        Expect {
            id: buried,
            tube: "default",
            state: "buried",
            pri: 5,
            delay: 0,
            ttr: 12,
            counters: [1, 0, 0, 1, 0],
            body: b"buried".to_vec(),
        },
        Expect {
            id: delayed,
            tube: "default",
            state: "delayed",
            pri: 3,
            delay: 100,
            ttr: 13,
            counters: [0; 5],
            body: b"delayed".to_vec(),
        },
        // Reserved when it was rewritten: logged as ready with that reserve.
        Expect {
            id: reserved,
            tube: "default",
            state: "ready",
            pri: 4,
            delay: 0,
            ttr: 14,
            counters: [1, 0, 0, 0, 0],
            body: b"reserved".to_vec(),
        },
    ];
    check_jobs(&mut c, &expected, "after compaction and a crash");
    assert_eq!(c.stat("current-jobs-ready"), "2");
    drop(c);
    server.kill();
}

// -------------------------------------------------------------------
// Directory lock and start-up failures
// -------------------------------------------------------------------

#[test]
fn a_second_server_on_the_same_dir_exits_10() {
    let dir = TempDir::new("lock");
    let first = spawn(&dir.path, &[]);
    let mut c = first.client();
    put_bytes(&mut c, 0, 0, 60, b"mine");
    let (code, stderr) = run_to_exit(&[], &dir.path);
    assert_eq!(code, Some(10), "stderr: {stderr:?}");
    // Named by its flag, as every other message names it.
    let want = format!("cannot lock the -b directory {}: another server is using it\n", dir.path.display());
    assert!(stderr.ends_with(&want) && stderr.lines().count() == 1, "one line on stderr: {stderr:?}");
    // The first server is unharmed, and so are its files.
    assert_eq!(peek(&mut c, 1), Some(b"mine".to_vec()));
    assert_eq!(binlog_files(&dir.path), BTreeSet::from([1]));
    let lock = fs::metadata(dir.path.join("lock")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(lock.permissions().mode() & 0o777, 0o600);
    drop(c);
    first.kill();
    // Once it is gone, the lock is free.
    let again = spawn(&dir.path, &[]);
    assert_eq!(peek(&mut again.client(), 1), Some(b"mine".to_vec()));
    again.kill();
}

#[test]
fn a_missing_binlog_dir_exits_10() {
    let dir = TempDir::new("missing");
    let missing = dir.path.join("no-such-dir");
    let (code, stderr) = run_to_exit(&[], &missing);
    assert_eq!(code, Some(10), "stderr: {stderr:?}");
    assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr:?}");
    assert!(!missing.exists());
}

#[test]
fn jobs_bigger_than_a_later_max_job_size_are_still_replayed() {
    let dir = TempDir::new("bigjob");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let sizes = [1usize, 1000, 100, 99, 98, 101, 1];
    let ids: Vec<u64> = sizes
        .iter()
        .enumerate()
        .map(|(n, &len)| put_bytes(&mut c, 0, 0, 60, &filler(n as u64, len)))
        .collect();
    drop(c);
    server.kill();
    for round in 0..2 {
        let server = spawn(&dir.path, &["-z", "100"]);
        let mut c = server.client();
        for (n, (&id, &len)) in ids.iter().zip(&sizes).enumerate() {
            assert_eq!(
                peek(&mut c, id),
                Some(filler(n as u64, len)),
                "round {round}: job {id} of {len} bytes"
            );
        }
        assert_eq!(c.stat("current-jobs-ready"), sizes.len().to_string());
        let reply = c.cmd(&format!("put 0 0 60 101\r\n{}", String::from_utf8(filler(0, 101)).unwrap()));
        assert_eq!(reply, "JOB_TOO_BIG\r\n", "the new -z applies to new puts");
        assert_eq!(put_bytes(&mut c, 0, 0, 60, b"ok"), ids.last().unwrap() + 1 + round);
        assert_eq!(c.cmd(&format!("delete {}", ids.last().unwrap() + 1 + round)), "DELETED\r\n");
        drop(c);
        server.terminate();
    }
    // The big one can be reserved whole under the small -z.
    let server = spawn(&dir.path, &["-z", "100"]);
    let mut c = server.client();
    assert_eq!(
        c.cmd(&format!("reserve-job {}", ids[1])).len(),
        format!("RESERVED {} 1000\r\n", ids[1]).len() + 1002
    );
    drop(c);
    server.kill();
}

// -------------------------------------------------------------------
// Damaged files
// -------------------------------------------------------------------

/// Three jobs, then a fourth whose record is the last in beanstalk.1; SIGKILL.
/// Returns the file's bytes and the bodies.
fn torn_tail_fixture(dir: &Path) -> (Vec<u8>, Vec<Vec<u8>>) {
    let server = spawn(dir, &["-s", "4096", "-f", "0"]);
    let mut c = server.client();
    let bodies: Vec<Vec<u8>> = vec![
        b"first\r\n\0".to_vec(),
        filler(2, 40),
        b"third".to_vec(),
        b"the last record: \r\n\0\x01\x02 torn somewhere".to_vec(),
    ];
    for (n, body) in bodies.iter().enumerate() {
        assert_eq!(put_bytes(&mut c, n as u32, 0, 60, body), n as u64 + 1);
    }
    drop(c);
    server.kill();
    assert_eq!(binlog_files(dir), BTreeSet::from([1]));
    (fs::read(dir.join("beanstalk.1")).unwrap(), bodies)
}

/// Replaces everything in `dir` by `beanstalk.1` with `bytes`.
fn reset_dir(dir: &Path, bytes: &[u8]) {
    for name in file_names(dir) {
        fs::remove_file(dir.join(name)).unwrap();
    }
    fs::write(dir.join("beanstalk.1"), bytes).unwrap();
}

/// Starts on the damaged dir and checks: jobs 1-3 intact, job 4 absent or
/// intact, a warning naming the file if `warn`. Returns the server.
fn check_torn(dir: &Path, bodies: &[Vec<u8>], warn: bool, what: &str) -> Bin {
    let server = spawn(dir, &["-s", "4096", "-f", "0"]);
    let mut c = server.client();
    for (n, body) in bodies[..3].iter().enumerate() {
        assert_eq!(peek(&mut c, n as u64 + 1).as_ref(), Some(body), "{what}: job {}", n + 1);
    }
    if let Some(body) = peek(&mut c, 4) {
        // ("new" is what an earlier restart of the same files put as 4.)
        assert!(body == bodies[3] || body == b"new", "{what}: the torn job came back damaged: {body:?}");
    }
    let id = put_bytes(&mut c, 0, 0, 60, b"new");
    assert!(id >= 4, "{what}: id {id} reused");
    if id == 4 {
        assert_eq!(peek(&mut c, 4), Some(b"new".to_vec()));
    }
    drop(c);
    if warn {
        // The warning is printed before the bind line, which spawn waited for.
        let stderr = server.stderr();
        assert!(stderr.contains("beanstalk.1"), "{what}: no warning naming the file; stderr:\n{stderr}");
    }
    server
}

#[test]
fn a_torn_last_record_is_truncated_at_every_offset() {
    let fixture = TempDir::new("torn-fixture");
    let (pristine, bodies) = torn_tail_fixture(&fixture.path);
    let recs = records(&pristine);
    assert_eq!(recs.len(), 5, "next-id record and four puts");
    let (start, end) = *recs.last().unwrap();
    let work = TempDir::new("torn");

    for cut in start..end {
        let what = format!("file cut at {cut} (last record {start}..{end})");
        reset_dir(&work.path, &pristine[..cut]);
        check_torn(&work.path, &bodies, cut > start, &what).kill();

        let what = format!("zeros from {cut} (last record {start}..{end})");
        let mut bytes = pristine.clone();
        bytes[cut..end].fill(0);
        reset_dir(&work.path, &bytes);
        check_torn(&work.path, &bodies, cut > start, &what).kill();

        let what = format!("garbage then zeros from {cut} (last record {start}..{end})");
        let mut bytes = pristine.clone();
        let garbage_end = (cut + 8).min(end);
        bytes[cut..garbage_end].fill(0xa5);
        bytes[garbage_end..end].fill(0);
        reset_dir(&work.path, &bytes);
        check_torn(&work.path, &bodies, true, &what).kill();
    }

    // Recovery is stable: a second restart finds nothing wrong.
    for cut in [start + 3, (start + end) / 2, end - 1] {
        for garbage in [false, true] {
            let what = format!("restart twice, cut at {cut}, garbage {garbage}");
            let mut bytes = pristine.clone();
            if garbage {
                bytes[cut..(cut + 8).min(end)].fill(0x5a);
                bytes[(cut + 8).min(end)..end].fill(0);
            } else {
                bytes.truncate(cut);
            }
            reset_dir(&work.path, &bytes);
            check_torn(&work.path, &bodies, true, &what).kill();
            let server = check_torn(&work.path, &bodies, false, &what);
            let stderr = server.kill();
            assert!(!stderr.contains("beanstalk."), "{what}: second restart still complains:\n{stderr}");
            let names = file_names(&work.path);
            // A newest file ending inside its last record is a torn write,
            // to be truncated away, not corruption to be kept aside.
            assert!(names.iter().all(|n| !n.ends_with(".corrupt") || garbage), "{what}: {names:?}");
        }
    }
}

/// Puts the torn-tail fixture's beanstalk.1 plus a newest `beanstalk.2` holding
/// `newest` in `work`, restarts twice, and checks that nothing is lost and
/// that the second restart has nothing to complain about.
fn check_newest_file_without_header(newest: &[u8], what: &str) {
    let fixture = TempDir::new("newfile-fixture");
    let (pristine, bodies) = torn_tail_fixture(&fixture.path);
    let work = TempDir::new("newfile");
    reset_dir(&work.path, &pristine);
    fs::write(work.path.join("beanstalk.2"), newest).unwrap();
    let server = spawn(&work.path, &["-s", "4096"]);
    let mut c = server.client();
    for (n, body) in bodies.iter().enumerate() {
        assert_eq!(peek(&mut c, n as u64 + 1).as_ref(), Some(body), "{what}: job {}", n + 1);
    }
    assert_eq!(put_bytes(&mut c, 0, 0, 60, b"new"), 5, "{what}");
    drop(c);
    server.kill();
    let server = spawn(&work.path, &["-s", "4096"]);
    let mut c = server.client();
    assert_eq!(peek(&mut c, 5), Some(b"new".to_vec()), "{what}");
    assert_eq!(c.stat("current-jobs-ready"), "5", "{what}");
    drop(c);
    let stderr = server.kill();
    assert!(
        !stderr.contains("beanstalk.2"),
        "{what}: the second restart complains about beanstalk.2:\n{stderr}"
    );
    let names = file_names(&work.path);
    assert!(!names.iter().any(|n| n.ends_with(".corrupt")), "{what}: {names:?}");
}

/// The server creates a new file, preallocates it, then writes its header.
/// Killed between those steps, the newest file is empty or all zeros; a torn
/// header write leaves part of the header, then zeros.
#[test]
fn a_crash_while_creating_a_new_file_does_not_prevent_restart() {
    check_newest_file_without_header(&[0; 4096], "all zeros");
}

#[test]
fn an_empty_newest_file_is_not_corruption_on_the_next_restart() {
    check_newest_file_without_header(&[], "empty");
}

#[test]
fn a_torn_header_write_is_not_corruption() {
    let fixture = TempDir::new("header");
    let (pristine, _) = torn_tail_fixture(&fixture.path);
    let (_, next_id_end) = records(&pristine)[0];
    for cut in [1, 5, 11, 12, 20, next_id_end - 1, next_id_end] {
        let mut newest = pristine[..cut].to_vec();
        newest.resize(4096, 0);
        check_newest_file_without_header(&newest, &format!("header written up to byte {cut}, then zeros"));
    }
}

#[test]
fn corruption_inside_an_older_file_is_reported_and_the_readable_jobs_kept() {
    let fixture = TempDir::new("corrupt");
    let dir = &fixture.path;
    let server = spawn(dir, &["-s", "4096", "-f", "0"]);
    let mut c = server.client();
    let mut jobs: Vec<(u64, Vec<u8>, u64)> = Vec::new();
    for n in 0..14 {
        let body = filler(n, 300);
        let id = put_bytes(&mut c, 0, 0, 60, &body);
        let file: u64 = stats_job(&mut c, id)["file"].parse().unwrap();
        jobs.push((id, body, file));
    }
    assert!(jobs.iter().any(|j| j.2 == 2), "beanstalk.2 must exist");
    drop(c);
    server.kill();

    let path = dir.join("beanstalk.1");
    let mut bytes = fs::read(&path).unwrap();
    let recs = records(&bytes);
    assert!(recs.len() >= 6, "next-id record and several puts: {recs:?}");
    // Record 3 is job 3's put: flip a byte of its body.
    let (start, end) = recs[3];
    let flip = end - 20;
    bytes[flip] ^= 0x40;
    fs::write(&path, &bytes).unwrap();

    let server = spawn(dir, &["-s", "4096"]);
    let stderr = server.stderr();
    assert!(
        stderr.contains("beanstalk.1")
            && (stderr.contains(&start.to_string()) || stderr.contains(&flip.to_string())),
        "corruption must be reported with the file and offset {start}; stderr:\n{stderr}"
    );
    let mut c = server.client();
    for (id, body, file) in &jobs {
        match peek(&mut c, *id) {
            Some(got) => assert_eq!(&got, body, "job {id} came back damaged"),
            None => assert!(*file == 1 && *id >= 3, "job {id} in beanstalk.{file} was lost"),
        }
    }
    let next = put_bytes(&mut c, 0, 0, 60, b"next");
    assert!(next > jobs.last().unwrap().0, "id {next} reused");
    drop(c);
    server.terminate();
    let names = file_names(dir);
    assert!(names.contains("beanstalk.1.corrupt"), "beanstalk.1.corrupt must be kept: {names:?}");
    assert!(!names.contains("beanstalk.1"), "{names:?}");

    // The next start is clean, with the same jobs.
    let server = spawn(dir, &["-s", "4096"]);
    let mut c = server.client();
    for (id, body, file) in &jobs {
        if *file != 1 || *id < 3 {
            assert_eq!(peek(&mut c, *id).as_ref(), Some(body), "job {id} after the second restart");
        }
    }
    assert_eq!(peek(&mut c, next), Some(b"next".to_vec()));
    drop(c);
    let stderr = server.kill();
    assert!(!stderr.contains("corrupt record"), "the second restart complains again:\n{stderr}");
    assert!(file_names(dir).contains("beanstalk.1.corrupt"));
}

/// Fills beanstalk.1, beanstalk.2 and beanstalk.3 with 300-byte jobs (-s 4096);
/// returns (id, body, file) of each.
fn three_files(dir: &Path) -> Vec<(u64, Vec<u8>, u64)> {
    let server = spawn(dir, &["-s", "4096", "-f", "0"]);
    let mut c = server.client();
    let mut jobs = Vec::new();
    for n in 0..40 {
        let body = filler(n, 300);
        let id = put_bytes(&mut c, 0, 0, 60, &body);
        let file: u64 = stats_job(&mut c, id)["file"].parse().unwrap();
        jobs.push((id, body, file));
        if file == 3 {
            break;
        }
    }
    assert_eq!(jobs.last().unwrap().2, 3, "three files");
    drop(c);
    server.kill();
    jobs
}

#[test]
fn corruption_inside_a_middle_file_is_reported_and_the_file_kept_aside() {
    let fixture = TempDir::new("corrupt-middle");
    let dir = &fixture.path;
    let jobs = three_files(dir);
    let path = dir.join("beanstalk.2");
    let mut bytes = fs::read(&path).unwrap();
    let recs = records(&bytes);
    let (start, end) = recs[2];
    bytes[end - 10] ^= 0x01;
    fs::write(&path, &bytes).unwrap();

    let server = spawn(dir, &["-s", "4096"]);
    let stderr = server.stderr();
    let reported =
        stderr.lines().any(|line| line.contains("beanstalk.2") && line.contains(&start.to_string()));
    assert!(reported, "corruption must be reported with the file and offset {start}; stderr:\n{stderr}");
    let mut c = server.client();
    let first_in_2 = jobs.iter().find(|j| j.2 == 2).unwrap().0;
    for (id, body, file) in &jobs {
        match peek(&mut c, *id) {
            Some(got) => assert_eq!(&got, body, "job {id} came back damaged"),
            None => assert!(*file == 2 && *id > first_in_2, "job {id} in beanstalk.{file} was lost"),
        }
    }
    drop(c);
    server.terminate();

    // A second restart: the same jobs.
    let server = spawn(dir, &["-s", "4096"]);
    let mut c = server.client();
    for (id, body, file) in &jobs {
        if *file != 2 || *id <= first_in_2 {
            assert_eq!(peek(&mut c, *id).as_ref(), Some(body), "job {id} after the second restart");
        }
    }
    // Once beanstalk.1 is no longer needed, beanstalk.2 is the oldest and is
    // kept aside as beanstalk.2.corrupt, never deleted.
    for (id, _, file) in &jobs {
        if *file == 1 {
            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    }
    common::settle(common::HANG_GUARD, || file_names(dir).contains("beanstalk.2.corrupt"));
    let names = file_names(dir);
    assert!(!names.contains("beanstalk.1") && !names.contains("beanstalk.2"), "{names:?}");
    assert!(names.contains("beanstalk.2.corrupt"), "beanstalk.2.corrupt must be kept: {names:?}");
    drop(c);
    server.kill();
    let server = spawn(dir, &["-s", "4096"]);
    let stderr = server.stderr();
    // (The replay line names the directory, whose name says "corrupt".)
    let complaints = stderr.lines().filter(|l| l.contains("corrupt") && !l.contains(" replayed "));
    assert_eq!(complaints.count(), 0, "a restart after the rename still complains:\n{stderr}");
    let mut c = server.client();
    for (id, body, file) in &jobs {
        if *file == 3 {
            assert_eq!(peek(&mut c, *id).as_ref(), Some(body), "job {id} after the third restart");
        }
    }
    drop(c);
    server.kill();
}

#[test]
fn corruption_before_the_end_of_the_newest_file_keeps_the_records_before_it() {
    // Not a torn write: the records after the damaged one are intact.
    let fixture = TempDir::new("corrupt-newest");
    let dir = &fixture.path;
    let server = spawn(dir, &["-f", "0"]);
    let mut c = server.client();
    let bodies: Vec<Vec<u8>> = (0..6).map(|n| filler(n, 50)).collect();
    for body in &bodies {
        put_bytes(&mut c, 0, 0, 60, body);
    }
    drop(c);
    server.kill();
    let path = dir.join("beanstalk.1");
    let mut bytes = fs::read(&path).unwrap();
    let (start, end) = records(&bytes)[3];
    bytes[end - 5] ^= 0x80;
    fs::write(&path, &bytes).unwrap();

    let server = spawn(dir, &[]);
    let stderr = server.stderr();
    let reported =
        stderr.lines().any(|line| line.contains("beanstalk.1") && line.contains(&start.to_string()));
    assert!(reported, "corruption must be reported with the file and offset {start}; stderr:\n{stderr}");
    let mut c = server.client();
    for (n, body) in bodies.iter().enumerate() {
        let got = peek(&mut c, n as u64 + 1);
        if n < 2 {
            assert_eq!(got.as_ref(), Some(body), "job {} before the damage", n + 1);
        } else if let Some(got) = got {
            assert_eq!(&got, body, "job {} came back damaged", n + 1);
        }
    }
    assert!(put_bytes(&mut c, 0, 0, 60, b"x") >= 3);
    drop(c);
    server.kill();
    assert!(file_names(dir).contains("beanstalk.1.corrupt"), "{:?}", file_names(dir));
}

#[test]
fn a_job_bigger_than_a_file_gets_a_file_of_its_own() {
    let dir = TempDir::new("huge");
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    let small = put_bytes(&mut c, 0, 0, 60, b"small");
    let huge_body = filler(5, 20_000);
    let huge = put_bytes(&mut c, 0, 0, 60, &huge_body);
    assert!(stat_u64(&mut c, "binlog-current-index") >= 2);
    drop(c);
    server.kill();
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    assert_eq!(peek(&mut c, small), Some(b"small".to_vec()));
    assert_eq!(peek(&mut c, huge), Some(huge_body));
    drop(c);
    server.kill();
}

// -------------------------------------------------------------------
// fsync modes
// -------------------------------------------------------------------

#[test]
fn every_fsync_mode_keeps_jobs_across_a_crash() {
    for flags in [&["-F"][..], &["-f0"], &["-f", "0"], &["-f", "20"], &[]] {
        let dir = TempDir::new("fsync");
        let server = spawn(&dir.path, flags);
        let mut c = server.client();
        let a = put_bytes(&mut c, 1, 0, 60, b"ready");
        let b = put_bytes(&mut c, 2, 0, 60, b"buried");
        assert!(c.cmd(&format!("reserve-job {b}")).starts_with("RESERVED"));
        assert_eq!(c.cmd(&format!("bury {b} 3")), "BURIED\r\n");
        let d = put_bytes(&mut c, 2, 0, 60, b"deleted");
        assert_eq!(c.cmd(&format!("delete {d}")), "DELETED\r\n");
        drop(c);
        server.kill();
        let server = spawn(&dir.path, flags);
        let mut c = server.client();
        assert_eq!(peek(&mut c, a), Some(b"ready".to_vec()), "{flags:?}");
        assert_eq!(stats_job(&mut c, b)["state"], "buried", "{flags:?}");
        assert_eq!(peek(&mut c, d), None, "{flags:?}");
        drop(c);
        server.kill();
    }
}

/// A small tmpfs to fill up; unmounted (and its mount point removed) on drop.
struct FullDisk {
    dir: TempDir,
}

impl FullDisk {
    /// `None` where mounting is not allowed (not root, no tmpfs).
    fn mount(kib: u32) -> Option<FullDisk> {
        let dir = TempDir::new("full");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir.path)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(FullDisk { dir })
    }
}

impl Drop for FullDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir.path).status();
    }
}

#[test]
fn a_full_disk_refuses_new_work_keeps_old_jobs_deletable_and_recovers() {
    let Some(disk) = FullDisk::mount(64) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let server = spawn(&disk.dir.path, &["-s", "16384"]);
    let mut c = server.client();
    let body = vec![b'x'; 1000];
    let mut ids = Vec::new();
    let mut refused = 0;
    for _ in 0..80 {
        c.send(format!("put 0 0 60 {}\r\n", body.len()));
        c.send(&body);
        c.send("\r\n");
        match c.reply().as_str() {
            "OUT_OF_MEMORY\r\n" => refused += 1,
            reply => ids.push(reply.trim().strip_prefix("INSERTED ").expect(reply).parse::<u64>().unwrap()),
        }
    }
    assert!(refused > 0 && ids.len() > 10, "{} inserted, {refused} refused", ids.len());
    // Existing jobs stay workable: the put claimed room for its delete, and
    // a bury fits in what is left.
    assert!(c.cmd("reserve").starts_with(&format!("RESERVED {} ", ids[0])));
    assert_eq!(c.cmd(&format!("bury {} 0", ids[0])), "BURIED\r\n");
    for id in &ids[1..] {
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    // The files those jobs filled go, although the buried job still pins the
    // oldest one, and new work is accepted again.
    assert!(c.put(0, 0, 60, "after").starts_with("INSERTED "));
    let stderr = server.kill();
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let server = spawn(&disk.dir.path, &["-s", "16384"]);
    let mut c = server.client();
    assert_eq!(c.stat("current-jobs-buried"), "1");
    assert_eq!(c.stat("current-jobs-ready"), "1");
}

/// Scenario 4 of issue 23: 1 KB jobs fill a 2 MiB disk; once all but one
/// job in 50 are deleted, puts succeed again.
#[test]
fn a_full_disk_recovers_once_deletes_leave_little_live_data() {
    let Some(disk) = FullDisk::mount(2048) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let server = spawn(&disk.dir.path, &["-s", "262144"]);
    let mut c = server.client();
    let body = [b'x'; 1000];
    let mut ids = Vec::new();
    let refusal = loop {
        assert!(ids.len() < 10_000, "2 MiB took {} jobs of 1 KB", ids.len());
        let reply = put_body(&mut c, &body);
        match reply.strip_prefix("INSERTED ") {
            Some(id) => ids.push(id.trim_end().parse::<u64>().unwrap()),
            None => break reply,
        }
    };
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    assert!(ids.len() > 1000, "only {} jobs before the disk filled", ids.len());
    for (n, id) in ids.iter().enumerate() {
        if n % 50 != 0 {
            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    }
    for n in 0..200 {
        assert!(put_body(&mut c, &body).starts_with("INSERTED "), "put {n} after the deletes refused");
    }
    // Every job kept is whole.
    for id in ids.iter().step_by(50) {
        assert!(c.cmd(&format!("peek {id}")).starts_with(&format!("FOUND {id} 1000\r\n")));
    }
}

fn put_body(c: &mut common::Client, body: &[u8]) -> String {
    c.send(format!("put 0 0 600 {}\r\n", body.len()));
    c.send(body);
    c.send(b"\r\n");
    c.reply()
}

// -------------------------------------------------------------------
// Bounds: compaction's work, disk use across restarts, file numbers
// -------------------------------------------------------------------

/// Bytes of our log files in `dir`.
fn log_bytes(dir: &Path) -> u64 {
    binlog_files(dir)
        .iter()
        .map(|f| fs::metadata(dir.join(format!("beanstalk.{f}"))).map_or(0, |m| m.len()))
        .sum()
}

/// Sends `count` puts of `body` in one batch and reads their ids.
fn put_batch(c: &mut Client, count: usize, body: &[u8]) -> Vec<u64> {
    let mut msg = Vec::new();
    for _ in 0..count {
        msg.extend_from_slice(format!("put 0 0 60 {}\r\n", body.len()).as_bytes());
        msg.extend_from_slice(body);
        msg.extend_from_slice(b"\r\n");
    }
    c.send(msg);
    (0..count).map(|_| c.reply().strip_prefix("INSERTED ").unwrap().trim_end().parse().unwrap()).collect()
}

/// Compaction's rewriting stays within twice what clients write, and the
/// log stays within twice its live data plus a few files, for every mix of
/// tube-name length, body size, `-s` and number of live jobs. (One mix is
/// the hostile review's: 200-byte tube names and empty bodies, where the old
/// trigger could never be met and each put+delete pair migrated hundreds of
/// records.)
#[test]
fn compaction_work_is_bounded_by_what_clients_write() {
    // (tube name length, body bytes, -s, live jobs, put+delete pairs)
    let mixes: [(usize, usize, usize, usize, usize); 6] = [
        (200, 0, 1 << 20, 10_000, 200),
        (200, 0, 1 << 20, 10_000, 6_000),
        (1, 0, 4096, 300, 3_000),
        (200, 2000, 4096, 20, 1_500),
        (1, 2000, 65536, 2_000, 2_000),
        (100, 100, 1 << 20, 0, 12_000),
    ];
    for (tube_len, body_len, size, live, pairs) in mixes {
        let what = format!("tube {tube_len} B, body {body_len} B, -s {size}, {live} live, {pairs} pairs");
        let dir = TempDir::new("compact-bound");
        let server = spawn(&dir.path, &["-F", "-s", &size.to_string()]);
        let mut c = server.client();
        c.cmd(&format!("use {}", "t".repeat(tube_len)));
        let body = filler(1, body_len);
        for chunk in 0..live.div_ceil(500) {
            put_batch(&mut c, 500.min(live - chunk * 500), &body);
        }
        let mut max_bytes = 0;
        for round in 0..pairs.div_ceil(200) {
            let ids = put_batch(&mut c, 200.min(pairs - round * 200), &body);
            let deletes: String = ids.iter().map(|id| format!("delete {id}\r\n")).collect();
            c.send(deletes);
            for _ in &ids {
                assert_eq!(c.reply(), "DELETED\r\n");
            }
            max_bytes = max_bytes.max(log_bytes(&dir.path));
        }
        let written = stat_u64(&mut c, "binlog-records-written");
        let migrated = stat_u64(&mut c, "binlog-records-migrated");
        let by_clients = written - migrated;
        assert!(
            migrated <= 2 * by_clients + 1,
            "{what}: {migrated} records migrated for {by_clients} written by clients"
        );
        let full = 71 + tube_len as u64 + body_len as u64;
        let bound = 2 * live as u64 * (full + 50) + 4 * size as u64 + 64 * 1024;
        assert!(max_bytes <= bound, "{what}: the log grew to {max_bytes} bytes (bound {bound})");
        eprintln!(
            "{what}: {by_clients} client records, {migrated} migrated, at most {max_bytes} bytes on disk"
        );
        drop(c);
        server.kill();
    }
}

/// A server that crashes and restarts over and over keeps no more on disk
/// than one long run would: each start cuts the previous run's preallocated
/// file to what it used, and files nothing needs go.
#[test]
fn disk_use_does_not_grow_with_restarts() {
    let dir = TempDir::new("restarts");
    let size = 1 << 20;
    let server = spawn(&dir.path, &["-s", &size.to_string()]);
    let mut c = server.client();
    let ids: Vec<u64> = (0..4).map(|n| put_bytes(&mut c, 0, 0, 60, &filler(n, 100))).collect();
    drop(c);
    server.kill();
    for round in 0..50 {
        let server = spawn(&dir.path, &["-s", &size.to_string()]);
        if round % 2 == 0 {
            server.kill();
        } else {
            server.terminate();
        }
        let files = binlog_files(&dir.path);
        assert!(files.len() <= 3, "after {round} restarts: {files:?}");
        let bytes = log_bytes(&dir.path);
        assert!(bytes <= size + 8192, "after {round} restarts the log holds {bytes} bytes");
    }
    let server = spawn(&dir.path, &["-s", &size.to_string()]);
    let mut c = server.client();
    for (n, id) in ids.into_iter().enumerate() {
        assert_eq!(peek(&mut c, id), Some(filler(n as u64, 100)));
    }
    drop(c);
    server.kill();
}

/// Log files whose numbers are near the top of the range (stray files
/// copied in, say) are renumbered at start-up, so counting up can never
/// wrap to "not logged".
#[test]
fn file_numbers_never_wrap() {
    let dir = TempDir::new("wrap");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let keep = put_bytes(&mut c, 0, 0, 60, b"keep");
    let gone = put_bytes(&mut c, 0, 0, 60, b"gone");
    drop(c);
    server.terminate();
    let files = binlog_files(&dir.path);
    let newest = *files.iter().next_back().unwrap();
    for f in files {
        let from = dir.path.join(format!("beanstalk.{f}"));
        let n = if f == newest { u32::MAX } else { u32::MAX - 1 };
        fs::rename(from, dir.path.join(format!("beanstalk.{n}"))).unwrap();
    }

    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd(&format!("delete {gone}")), "DELETED\r\n");
    let files = binlog_files(&dir.path);
    assert!(files.iter().all(|&f| f < 100), "renumbered from 1: {files:?}");
    drop(c);
    let stderr = server.terminate();
    assert!(stderr.contains("renumbered"), "{stderr}");

    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    assert_eq!(peek(&mut c, keep), Some(b"keep".to_vec()));
    assert_eq!(peek(&mut c, gone), None, "an acknowledged delete stays done");
    drop(c);
    server.kill();
}

/// Buried jobs come back in the order they were buried, not in id order,
/// even after compaction rewrote them into other files.
#[test]
fn buried_order_survives_restarts_and_compaction() {
    let dir = TempDir::new("buried-order");
    let server = spawn(&dir.path, &["-s", "4096"]);
    let mut c = server.client();
    let ids: Vec<u64> = (1..=4).map(|n| put_bytes(&mut c, 0, 0, 60, &filler(n, 10))).collect();
    let order = [ids[2], ids[0], ids[3], ids[1]];
    for id in order {
        assert!(c.cmd(&format!("reserve-job {id}")).starts_with("RESERVED"));
        assert_eq!(c.cmd(&format!("bury {id} 0")), "BURIED\r\n");
    }
    // Churn until the buried jobs' file has been compacted away.
    for n in 0..200 {
        let id = put_bytes(&mut c, 0, 0, 60, &filler(n, 500));
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    assert!(stat_u64(&mut c, "binlog-records-migrated") >= 4, "the buried jobs were rewritten");
    drop(c);
    server.kill();
    let peek_order = |c: &mut Client| {
        let mut seen = Vec::new();
        while let Some(rest) = c.cmd("peek-buried").strip_prefix("FOUND ").map(str::to_owned) {
            seen.push(rest.split(' ').next().unwrap().parse::<u64>().unwrap());
            assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
        }
        seen
    };
    let server = spawn(&dir.path, &["-s", "4096"]);
    assert_eq!(peek_order(&mut server.client()), order);
    server.kill();
}

/// Every live job keeps room claimed for its delete. Once those claims
/// outgrow `-s`, a file sized to the claims alone took one record before
/// the next file was needed: a million live jobs made a hundred thousand
/// files, and start-up slowed to a crawl opening them. Files now hold a
/// file's worth of records however many jobs are live.
#[test]
fn files_hold_a_file_size_of_records_however_many_jobs_are_live() {
    let dir = TempDir::new("claims");
    let server = spawn(&dir.path, &["-F", "-s", "4096"]);
    let mut c = server.client();
    // 3,000 live jobs claim 51 KB of deletes, a dozen times -s.
    for _ in 0..6 {
        put_batch(&mut c, 500, b"0123456789");
    }
    let written = log_bytes(&dir.path);
    let files = binlog_files(&dir.path).len() as u64;
    assert!(files <= 4 + 2 * written / 4096, "{files} files for {written} bytes of log");
    drop(c);
    server.kill();
}

/// Nothing at start-up waits on a FIFO: a `server-id` or a binlog file
/// that is not a regular file is refused at once, in one line.
#[test]
fn start_up_never_waits_on_a_fifo() {
    for (name, says) in
        [("server-id", "server-id: not a regular file;"), ("beanstalk.1", "is not a regular file")]
    {
        let dir = TempDir::new("fifo");
        let fifo = Command::new("mkfifo").arg(dir.path.join(name)).status().unwrap();
        assert!(fifo.success());
        let (code, stderr) = run_to_exit(&[], &dir.path);
        assert_eq!(code, Some(1), "stderr: {stderr:?}");
        assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr:?}");
        assert!(stderr.contains(says), "{stderr}");
    }
}
