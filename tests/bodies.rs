//! Bodies on disk (`-b`, `--bodies-in-memory`, README "Bodies on disk"):
//! a body longer than the bound stays in the log, and every way a client
//! can see it (`reserve`, `peek`, `reserve-job`, `reserve-batch`, a
//! blocked reserve's hand-off) gives it back byte for byte, across
//! `move-job`, compaction and a `kill -9`; a body damaged on disk is never
//! sent (`INTERNAL_ERROR`, the job buried, the operator told); and the
//! memory cap counts what memory holds.
mod common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::binary::{self, Bin, TempDir};
use common::{peek, put_bytes, stat_u64, Rng};

fn spawn(dir: &Path, extra: &[&str]) -> Bin {
    let mut args = vec!["-b", binary::arg(dir)];
    args.extend_from_slice(extra);
    binary::spawn(&args)
}

/// A body of `len` bytes that says whose it is, with CRLFs and every byte
/// value in it.
fn body(n: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(n);
    let mut body = format!("body {n}:").into_bytes();
    body.extend((0..len).map(|_| if rng.chance(20) { b'\n' } else { rng.next() as u8 }));
    body.truncate(len);
    body
}

/// The data of a `RESERVED`/`FOUND` reply, and its id.
fn data(reply: &[u8]) -> (u64, Vec<u8>) {
    let end = reply.windows(2).position(|w| w == b"\r\n").unwrap();
    let head = String::from_utf8_lossy(&reply[..end]).into_owned();
    let id = head.split(' ').nth(1).and_then(|id| id.parse().ok());
    let id = id.unwrap_or_else(|| panic!("not a reply with data: {head:?}"));
    (id, reply[end + 2..reply.len() - 2].to_vec())
}

/// Sends `line` and reads its whole reply, bytes as they came.
fn ask(c: &mut common::Client, line: &str) -> Vec<u8> {
    c.send(format!("{line}\r\n"));
    c.reply_bytes()
}

/// `got` is job `id` with `body`, else says where they differ (a body
/// printed whole would bury the failure).
fn same(got: (u64, Vec<u8>), id: u64, body: &[u8], what: &str) {
    let differ = got.1.iter().zip(body).position(|(a, b)| a != b);
    assert!(
        got.0 == id && got.1 == body,
        "{what}: job {} of {} bytes, not job {id} of {}; first difference at {differ:?}",
        got.0,
        got.1.len(),
        body.len()
    );
}

/// How many log files `dir` holds.
fn binlog_files(dir: &Path) -> usize {
    let files = fs::read_dir(dir).unwrap().filter_map(|e| e.ok()?.file_name().into_string().ok());
    files.filter(|name| name.starts_with("beanstalk.")).count()
}

/// Where `needle` is in the log files of `dir`: file and offset.
fn find_in_log(dir: &Path, needle: &[u8]) -> Option<(std::path::PathBuf, u64)> {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if !path.file_name()?.to_str()?.starts_with("beanstalk.") {
            continue;
        }
        let bytes = fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            return Some((path, at as u64));
        }
    }
    None
}

/// Flips a byte of the log where `body`'s bytes are, under the running
/// server: the page cache it reads from is the file's.
fn damage(dir: &Path, body: &[u8]) {
    let (path, at) = find_in_log(dir, &body[..64]).expect("the body is in the log");
    let file = fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0];
    file.read_exact_at(&mut byte, at + 100).unwrap();
    file.write_all_at(&[byte[0] ^ 0x20], at + 100).unwrap();
}

#[test]
fn long_bodies_stay_in_the_log_and_come_back_byte_for_byte_after_a_kill() {
    let dir = TempDir::new("bodies-back");
    let server = spawn(&dir.path, &["-s", "65536"]);
    let mut c = server.client();
    let lens = [0, 1, 256, 257, 4096, 65535, 300, 10_000];
    let mut put = Vec::new();
    for (n, &len) in lens.iter().cycle().take(40).enumerate() {
        let b = body(n as u64, len);
        put.push((put_bytes(&mut c, 0, 0, 60, &b), b));
    }
    let in_log: usize = put.iter().map(|(_, b)| b.len()).filter(|&len| len > 256).sum();
    assert_eq!(stat_u64(&mut c, "current-jobs-bytes-in-log"), in_log as u64);
    // Every way to see a body, from the log.
    for (id, b) in &put[..8] {
        same((*id, peek(&mut c, *id).unwrap_or_default()), *id, b, "peek");
    }
    same(data(&ask(&mut c, "reserve")), put[0].0, &put[0].1, "reserve");
    same(data(&ask(&mut c, &format!("reserve-job {}", put[4].0))), put[4].0, &put[4].1, "reserve-job");
    assert_eq!(c.cmd("reserve-batch 5"), "RESERVED_BATCH 5\r\n");
    for want in [1, 2, 3, 5, 6] {
        same(data(&c.reply_bytes()), put[want].0, &put[want].1, "reserve-batch");
    }
    drop(c);
    server.kill();
    let server = spawn(&dir.path, &["-s", "65536"]);
    let mut c = server.client();
    assert_eq!(stat_u64(&mut c, "current-jobs-bytes-in-log"), in_log as u64, "after the restart");
    for (id, b) in &put {
        same((*id, peek(&mut c, *id).unwrap_or_default()), *id, b, "peek");
    }
}

#[test]
fn move_job_and_compaction_carry_bodies_forward() {
    let dir = TempDir::new("bodies-moved");
    let flags = ["-s", "16384", "--bodies-in-memory", "0"];
    let server = spawn(&dir.path, &flags);
    let mut c = server.client();
    let mut kept = Vec::new();
    // Many small files, most of whose jobs are deleted: compaction moves
    // the few live ones, bodies and all, so the old files can go.
    for n in 0..400u64 {
        let b = body(n, 1000 + (n as usize % 7) * 100);
        let id = put_bytes(&mut c, 0, 0, 60, &b);
        if n % 10 == 0 {
            kept.push((id, b));
        } else {
            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    }
    for (id, _) in kept.iter().step_by(3) {
        assert_eq!(c.cmd(&format!("move-job {id} elsewhere")), "MOVED\r\n");
    }
    assert!(stat_u64(&mut c, "binlog-records-migrated") > 0, "compaction ran");
    for (id, b) in &kept {
        same((*id, peek(&mut c, *id).unwrap_or_default()), *id, b, "peek");
    }
    drop(c);
    server.kill();
    let server = spawn(&dir.path, &flags);
    let mut c = server.client();
    for (id, b) in &kept {
        same((*id, peek(&mut c, *id).unwrap_or_default()), *id, b, "peek");
    }
}

#[test]
fn a_body_damaged_on_disk_is_never_sent_and_its_job_is_buried() {
    let dir = TempDir::new("bodies-damaged");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let (bad, good) = (body(1, 4096), body(2, 4096));
    let bad_id = put_bytes(&mut c, 0, 0, 60, &bad);
    let good_id = put_bytes(&mut c, 1, 0, 60, &good);
    damage(&dir.path, &bad);
    assert_eq!(c.cmd("reserve"), "INTERNAL_ERROR\r\n");
    assert_eq!(c.yaml_map(&format!("stats-job {bad_id}"))["state"], "buried");
    assert_eq!(c.cmd(&format!("peek {bad_id}")), "INTERNAL_ERROR\r\n");
    same(data(&ask(&mut c, "reserve")), good_id, &good, "the other job");
    assert_eq!(stat_u64(&mut c, "body-read-failures"), 2);
    let log = server.stderr_once(|log| log.contains("its body cannot be read"));
    assert!(log.contains(&format!("job {bad_id}: its body cannot be read from the log")), "{log}");
    assert!(log.contains("fails its checksum"), "{log}");
}

#[test]
fn a_batch_with_a_damaged_body_is_internal_error_and_its_other_jobs_go_back() {
    let dir = TempDir::new("bodies-batch");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let bodies: Vec<Vec<u8>> = (0..3).map(|n| body(n, 2000)).collect();
    let ids: Vec<u64> = bodies.iter().map(|b| put_bytes(&mut c, 0, 0, 60, b)).collect();
    damage(&dir.path, &bodies[1]);
    assert_eq!(c.cmd("reserve-batch 3"), "INTERNAL_ERROR\r\n");
    assert_eq!(c.yaml_map(&format!("stats-job {}", ids[1]))["state"], "buried");
    for id in [ids[0], ids[2]] {
        let stats = c.yaml_map(&format!("stats-job {id}"));
        assert_eq!((stats["state"].as_str(), stats["reserves"].as_str()), ("ready", "0"), "job {id}");
    }
}

#[test]
fn a_blocked_reserve_gets_a_body_from_the_log() {
    let dir = TempDir::new("bodies-waiter");
    let server = spawn(&dir.path, &["--bodies-in-memory", "0"]);
    let (mut holder, mut waiter, mut producer) = (server.client(), server.client(), server.client());
    let b = body(7, 5000);
    let id = put_bytes(&mut producer, 0, 0, 60, &b);
    same(data(&ask(&mut holder, "reserve")), id, &b, "reserve");
    waiter.send(common::reserve_guarded() + "\r\n");
    assert!(common::settle(common::HANG_GUARD, || stat_u64(&mut producer, "current-waiting") == 1));
    // Released, its body long in the log: the waiter is handed it from
    // there.
    assert_eq!(holder.cmd(&format!("release {id} 0 0")), "RELEASED\r\n");
    same(data(&waiter.reply_bytes()), id, &b, "the waiter");
}

#[test]
fn the_memory_cap_counts_what_memory_holds() {
    let dir = TempDir::new("bodies-cap");
    let server = spawn(&dir.path, &["--max-job-memory", "65536"]);
    let mut c = server.client();
    // 100 bodies of 4 KiB: six times the cap, one job's record each in
    // memory.
    for n in 0..100 {
        put_bytes(&mut c, 0, 0, 60, &body(n, 4096));
    }
    assert_eq!(stat_u64(&mut c, "current-jobs-bytes-in-log"), 409_600);
    assert!(stat_u64(&mut c, "current-jobs-bytes-in-memory") <= 100 * 200);
    drop(c);
    let all = TempDir::new("bodies-cap-all");
    let server = spawn(&all.path, &["--max-job-memory", "65536", "--bodies-in-memory", "all"]);
    let mut c = server.client();
    let refused = (0..100).position(|n| {
        let b = body(n, 4096);
        c.send(format!("put 0 0 60 {}\r\n", b.len()));
        c.send([&b[..], b"\r\n"].concat());
        c.reply() == "OUT_OF_MEMORY\r\n"
    });
    assert_eq!(refused, Some(15), "every body in memory: the cap holds 15");
    assert!(!c.cmd("stats").contains("bytes-in-log"), "beanstalkd's keys alone");
}

#[test]
fn a_failed_read_closes_nothing_and_a_client_on_another_connection_goes_on() {
    let dir = TempDir::new("bodies-other");
    let server = spawn(&dir.path, &[]);
    let (mut a, mut b) = (server.client(), server.client());
    let bad = body(3, 3000);
    let id = put_bytes(&mut a, 0, 0, 60, &bad);
    damage(&dir.path, &bad);
    assert_eq!(a.cmd(&format!("peek {id}")), "INTERNAL_ERROR\r\n");
    assert_eq!(b.cmd("list-tube-used"), "USING default\r\n");
    assert_eq!(a.cmd("list-tube-used"), "USING default\r\n");
}

/// A job with a unique key that cools down after its delete is logged
/// again without its body (the key alone lives on): its delete must not
/// read the body back, so one that can no longer be read still goes, and
/// a big one costs no read under the lock.
#[test]
fn a_keyed_job_is_deleted_without_reading_its_body_back() {
    let dir = TempDir::new("bodies-keyed");
    let server = spawn(&dir.path, &[]);
    let mut c = server.client();
    let bad = body(4, 3000);
    c.send(format!("put 0 0 60 {} idp:k:60\r\n", bad.len()));
    c.send([&bad[..], b"\r\n"].concat());
    let id: u64 = c.reply().trim_end().strip_prefix("INSERTED ").unwrap().parse().unwrap();
    damage(&dir.path, &bad);
    assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    let failures = c.stats().remove("body-read-failures");
    assert_eq!(failures.as_deref().unwrap_or("0"), "0", "no read");
    // And in a batch.
    let bad = body(5, 3000);
    c.send(format!("put 0 0 60 {} idp:l:60\r\n", bad.len()));
    c.send([&bad[..], b"\r\n"].concat());
    let id: u64 = c.reply().trim_end().strip_prefix("INSERTED ").unwrap().parse().unwrap();
    damage(&dir.path, &bad);
    assert_eq!(c.cmd(&format!("delete-batch {id}")), "DELETED_BATCH 1 0\r\n");
}

/// A job whose body can no longer be read from the log must not stop
/// compaction: the files after it would then never go, and the log would
/// grow until the disk is full, however few jobs live. (Open: its record
/// cannot be moved, and a file kept pins every later file that refers to
/// it, so skipping the job does not help; the job must go, as a restart
/// would lose it with its corrupt record, which is a decision to make.)
#[test]
#[ignore = "a job whose body fails its check stops compaction: not fixed yet"]
fn a_body_that_cannot_be_read_does_not_stop_compaction() {
    let dir = TempDir::new("bodies-stuck");
    let server = spawn(&dir.path, &["-s", "16384", "--bodies-in-memory", "0"]);
    let mut c = server.client();
    let bad = body(6, 1000);
    let bad_id = put_bytes(&mut c, 0, 0, 60, &bad);
    damage(&dir.path, &bad);
    // One job in ten lives on: compaction moves them forward.
    for n in 0..1000u64 {
        let id = put_bytes(&mut c, 0, 0, 60, &body(100 + n, 1000));
        if n % 10 != 0 {
            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    }
    let files = fs::read_dir(&dir.path).unwrap().filter_map(Result::ok);
    let files = files.filter(|e| e.file_name().to_string_lossy().starts_with("beanstalk.")).count();
    assert!(files <= 40, "{files} log files for 100 KB of live jobs: compaction stopped");
    assert_eq!(c.cmd(&format!("peek {bad_id}")), "INTERNAL_ERROR\r\n");
}

/// A log of many files holds few descriptors: under `ulimit -n 64`, with
/// small files and every body in the log, a hundred files' worth of jobs
/// are put and each read back, and the log goes on taking puts (a
/// descriptor a file ran the server out of them at about 30 files, and
/// the log then refused every change).
#[test]
fn a_log_of_many_files_holds_few_descriptors() {
    let dir = TempDir::new("bodies-fds");
    let args = ["-b", binary::arg(&dir.path), "-s", "16384", "--bodies-in-memory", "0"];
    let server = binary::spawn_with_fd_limit(64, &args);
    let mut c = server.client();
    let kept: Vec<(u64, Vec<u8>)> =
        (0..1500u64).map(|n| body(n, 1000)).map(|b| (put_bytes(&mut c, 0, 0, 60, &b), b)).collect();
    assert!(binlog_files(&dir.path) > 64, "more files than descriptors");
    for (id, b) in &kept {
        same((*id, peek(&mut c, *id).unwrap_or_default()), *id, b, "peek");
    }
    put_bytes(&mut c, 0, 0, 60, &body(9999, 1000));
    assert!(!server.stderr().contains("refusing"), "{}", server.stderr());
}
