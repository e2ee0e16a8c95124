//! `beanstalk-binlog`, the offline tool for a binlog directory: beanstalkd's
//! log taken over by our server and handed back to beanstalkd with every
//! job intact; an export piped into a fresh server; `check` on damage and
//! on a torn tail; `usage` naming the jobs that pin a file; and the
//! safety rules (read-only, refusing a directory a server holds).
//!
//! Uses the real beanstalkd (`BEANSTALKD=path`, or Debian's 1.12, which
//! writes the same version-7 files as 1.13) where a test needs it; without
//! it those tests say so and pass, except under `CI=true`, where a missing
//! one is a failure.
mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::beanstalkd::Beanstalkd;
use common::binary::{self, Bin, TempDir};
use common::{peek, put_bytes, Client};

// -------------------------------------------------------------------
// Harness
// -------------------------------------------------------------------

/// Runs the tool; its exit code, stdout and stderr.
fn tool(args: &[&str]) -> (i32, Vec<u8>, String) {
    let output = Command::new(binary::binlog_tool_path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run beanstalk-binlog");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code().expect("exited, not killed"), output.stdout, stderr)
}

/// Runs the tool, which must succeed; its stdout as text.
fn tool_ok(args: &[&str]) -> String {
    let (code, stdout, stderr) = tool(args);
    assert_eq!(code, 0, "beanstalk-binlog {args:?}: {stderr}");
    String::from_utf8(stdout).unwrap()
}

fn spawn(dir: &Path) -> Bin {
    binary::spawn(&["-b", binary::arg(dir)])
}

/// A job's `stats-job` fields, string values unquoted (beanstalkd 1.12
/// does not quote them; 1.13 and we do).
fn job_stats(c: &mut Client, id: u64) -> BTreeMap<String, String> {
    c.yaml_map(&format!("stats-job {id}"))
        .into_iter()
        .map(|(k, v)| (k, v.trim_matches('"').to_owned()))
        .collect()
}

/// Every field of `stats-job` but the ones a restart or a move changes by
/// nature (`file`), with the times (`age`, `time-left`) within a few
/// seconds.
fn assert_same_job(id: u64, want: &BTreeMap<String, String>, got: &BTreeMap<String, String>) {
    for (key, value) in want {
        match key.as_str() {
            "file" => {}
            "age" | "time-left" => {
                let (a, b): (i64, i64) = (value.parse().unwrap(), got[key].parse().unwrap());
                assert!((a - b).abs() <= 5, "job {id}: {key} {a} then {b}");
            }
            _ => assert_eq!(Some(value), got.get(key), "job {id}: {key}; want {want:?}, got {got:?}"),
        }
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

fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| (e.file_name().into_string().unwrap(), fs::read(e.path()).unwrap()))
        .collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    position(haystack, needle).expect("needle in file")
}

fn position(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// -------------------------------------------------------------------
// Round trip: beanstalkd -> beanstalk -> beanstalkd
// -------------------------------------------------------------------

/// beanstalkd writes every state, a 65,535-byte body and two tubes; our
/// server imports it and takes more changes; `to-beanstalkd` hands it back,
/// and beanstalkd serves exactly what our server served.
#[test]
fn to_beanstalkd_gives_beanstalkd_back_every_job_with_every_field() {
    let Some(exe) = common::beanstalkd::path() else { return };
    let dir = TempDir::new("tool-round-trip");
    let big: Vec<u8> = (0..65_535u32).map(|i| b'a' + (i % 26) as u8).collect();
    {
        let b = Beanstalkd::start(&exe, &["-b", binary::arg(&dir.path)]);
        let mut c = b.client();
        assert_eq!(put_bytes(&mut c, 5, 0, 10, b"alpha"), 1);
        assert_eq!(put_bytes(&mut c, 7, 100, 20, b"delayed"), 2);
        assert_eq!(put_bytes(&mut c, 100, 0, 60, &big), 3);
        c.cmd("use emails");
        for body in [b"b4", b"b5", b"b6"] {
            put_bytes(&mut c, 1, 0, 30, body);
        }
        c.cmd("watch emails");
        c.cmd("ignore default");
        for id in 4..=6 {
            assert!(c.cmd("reserve").starts_with(&format!("RESERVED {id} ")));
        }
        for id in [6, 4, 5] {
            assert_eq!(c.cmd(&format!("bury {id} 2")), "BURIED\r\n");
        }
        c.cmd("use default");
        assert_eq!(put_bytes(&mut c, 0, 0, 40, b"reserved\r\n\0bytes"), 7);
        assert!(c.cmd("reserve-job 7").starts_with("RESERVED 7 "));
        // SIGKILL, with job 7 still reserved.
    }

    let server = spawn(&dir.path);
    let mut c = server.client();
    c.cmd("use emails");
    assert_eq!(put_bytes(&mut c, 9, 0, 15, b"ours"), 8);
    assert!(c.cmd("reserve-job 8").starts_with("RESERVED 8 "));
    assert_eq!(c.cmd("bury 8 4"), "BURIED\r\n");
    assert!(c.cmd("reserve-job 1").starts_with("RESERVED 1 "));
    assert_eq!(c.cmd("release 1 3 500"), "RELEASED\r\n");
    assert_eq!(c.cmd("delete 5"), "DELETED\r\n");
    assert_eq!(c.cmd("kick-job 6"), "KICKED\r\n");
    server.terminate();

    // What our server serves from this log, restarted.
    let server = spawn(&dir.path);
    let mut c = server.client();
    let ids = [1, 2, 3, 4, 6, 7, 8];
    let want: Vec<_> = ids.iter().map(|&id| job_stats(&mut c, id)).collect();
    let bodies: Vec<_> = ids.iter().map(|&id| peek(&mut c, id).unwrap()).collect();
    assert_eq!(want[5]["state"], "ready", "reserved comes back ready");
    server.terminate();

    let out = TempDir::new("tool-round-trip-out");
    let target = out.path.join("beanstalkd");
    // beanstalkd's default -z would drop the 65,535-byte job and every job
    // after it: refused, nothing written, the flag named.
    let (code, _, stderr) = tool(&["to-beanstalkd", binary::arg(&dir.path), binary::arg(&target)]);
    assert_eq!((code, stderr.lines().count()), (1, 1), "{stderr}");
    assert!(
        stderr.contains("job 3 has a 65535-byte body") && stderr.contains("-z 65537 or more"),
        "{stderr}"
    );
    assert!(!target.exists(), "nothing is written when refused");
    let (code, _, stderr) =
        tool(&["to-beanstalkd", binary::arg(&dir.path), binary::arg(&target), "-z", "65537"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("wrote 7 jobs") && stderr.contains("start beanstalkd with -z 65537"), "{stderr}");

    let b = Beanstalkd::start(&exe, &["-b", binary::arg(&target), "-z", "65537"]);
    let mut c = b.client();
    for (i, &id) in ids.iter().enumerate() {
        assert_same_job(id, &want[i], &job_stats(&mut c, id));
        assert_eq!(peek(&mut c, id).as_deref(), Some(&bodies[i][..]), "body of job {id}");
    }
    assert_eq!(peek(&mut c, 5), None, "a deleted job stays deleted");
    assert_eq!(buried_order(&mut c, "emails"), [4, 8], "buried jobs keep their order");
    c.cmd("use default");
    assert_eq!(put_bytes(&mut c, 0, 0, 1, b"next"), 9, "ids continue where ours did");
}

/// The rollback as a user meets it: a 100 KB job among small ones. Without
/// the `-z` it needs, or with one too small, nothing is written (beanstalkd
/// would come up empty and delete the file); with it, beanstalkd started
/// with that `-z` serves every job.
#[test]
fn to_beanstalkd_refuses_a_queue_beanstalkds_max_job_size_would_drop() {
    let Some(exe) = common::beanstalkd::path() else { return };
    let dir = TempDir::new("tool-big-job");
    let big: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    {
        let server = binary::spawn(&["-b", binary::arg(&dir.path), "-z", "200000"]);
        let mut c = server.client();
        assert_eq!(c.put_ok("small"), 1);
        assert_eq!(put_bytes(&mut c, 0, 0, 60, &big), 2);
        assert_eq!(c.put_ok("after"), 3);
        server.terminate();
    }
    let out = TempDir::new("tool-big-job-out");
    let target = out.path.join("beanstalkd");
    let dir_arg = binary::arg(&dir.path);
    let target_arg = binary::arg(&target);
    let refusals = [
        (vec![], "more than beanstalkd's default -z (65535) allows"),
        (vec!["-z", "100001"], "more than -z 100001 allows"),
    ];
    for (z, said) in refusals {
        let args: Vec<&str> = ["to-beanstalkd", dir_arg, target_arg].into_iter().chain(z).collect();
        let (code, stdout, stderr) = tool(&args);
        assert_eq!((code, stdout.len(), stderr.lines().count()), (1, 0, 1), "{args:?}: {stderr}");
        assert_eq!(
            stderr,
            format!(
                "beanstalk-binlog: job 2 has a 100000-byte body, {said}: beanstalkd's replay would drop it \
                 and every job after it, then delete the file; nothing written: run again with -z 100002 or \
                 more, and start beanstalkd with that -z\n"
            )
        );
        assert!(!target.exists(), "{args:?}: nothing is written");
    }
    let (code, _, stderr) = tool(&["to-beanstalkd", dir_arg, target_arg, "-z", "100002"]);
    assert_eq!(code, 0, "{stderr}");
    let b = Beanstalkd::start(&exe, &["-b", target_arg, "-z", "100002"]);
    let mut c = b.client();
    assert_eq!(peek(&mut c, 1).as_deref(), Some(&b"small"[..]));
    assert_eq!(peek(&mut c, 2).as_deref(), Some(&big[..]));
    assert_eq!(peek(&mut c, 3).as_deref(), Some(&b"after"[..]));
    assert_eq!(c.stat("current-jobs-ready"), "3");
    assert!(target.join("binlog.1").exists(), "beanstalkd keeps the file it replayed");
}

/// A rollback that meets every refusal says them all in one run (keys,
/// holds and the `-z` beanstalkd needs), so one more run with every flag
/// named writes it, and says the `-z` to start beanstalkd with.
#[test]
fn to_beanstalkd_names_every_refusal_in_one_run() {
    let dir = TempDir::new("tool-every-refusal");
    let big: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    {
        let server = binary::spawn(&["-b", binary::arg(&dir.path), "-z", "200000"]);
        let mut c = server.client();
        c.send("put 0 0 60 5 idp:once\r\nkeyed\r\nput 0 0 60 6 grp:g\r\nmember\r\n");
        assert_eq!(c.reply(), "INSERTED 1\r\n");
        assert_eq!(c.reply(), "INSERTED 2\r\n");
        c.send("put 0 0 60 4 aft:g\r\nheld\r\n");
        assert_eq!(c.reply(), "INSERTED 3\r\n");
        assert_eq!(put_bytes(&mut c, 0, 0, 60, &big), 4);
        server.terminate();
    }
    let out = TempDir::new("tool-every-refusal-out");
    let target = out.path.join("beanstalkd");
    let (dir_arg, target_arg) = (binary::arg(&dir.path), binary::arg(&target));
    let (code, stdout, stderr) = tool(&["to-beanstalkd", dir_arg, target_arg]);
    assert_eq!((code, stdout.len()), (1, 0), "{stderr}");
    assert_eq!(
        stderr,
        "beanstalk-binlog: 1 unique keys (idp:), of jobs and cooling down, would be dropped (beanstalkd has \
         none): nothing written; pass --drop-keys to write those jobs without their keys\n\
         beanstalk-binlog: 1 jobs held for a group (aft:) would run early, their hold dropped (beanstalkd has \
         none): nothing written; pass --drop-holds to write them without it\n\
         beanstalk-binlog: job 4 has a 100000-byte body, more than beanstalkd's default -z (65535) allows: \
         beanstalkd's replay would drop it and every job after it, then delete the file; nothing written: \
         run again with -z 100002 or more, and start beanstalkd with that -z\n"
    );
    assert!(!target.exists(), "nothing is written");
    let all = ["to-beanstalkd", dir_arg, target_arg, "--drop-keys", "--drop-holds", "-z", "100002"];
    let (code, _, stderr) = tool(&all);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("wrote 4 jobs") && stderr.contains("start beanstalkd with -z 100002"),
        "{stderr}"
    );
}

// -------------------------------------------------------------------
// export
// -------------------------------------------------------------------

/// An exported job as the fresh server must show it: old id, tube,
/// state, pri, ttr, body.
type Expected = (u64, &'static str, &'static str, u32, u32, &'static [u8]);

/// The server the export is piped into: a fresh beanstalkd, or our own.
enum Fresh {
    Theirs(Beanstalkd),
    Ours(Bin),
}

impl Fresh {
    fn client(&self) -> Client {
        match self {
            Fresh::Theirs(b) => b.client(),
            Fresh::Ours(s) => s.client(),
        }
    }
}

#[test]
fn export_piped_into_a_fresh_server_rebuilds_the_same_queue() {
    let dir = TempDir::new("tool-export");
    let odd: &[u8] = b"line\r\nwith\0nul";
    {
        let server = spawn(&dir.path);
        let mut c = server.client();
        assert_eq!(put_bytes(&mut c, 5, 0, 10, b"r1"), 1);
        assert_eq!(put_bytes(&mut c, 5, 0, 11, b"r2"), 2);
        assert_eq!(put_bytes(&mut c, 1, 0, 12, odd), 3);
        assert_eq!(put_bytes(&mut c, 2, 300, 13, b"d4"), 4);
        c.cmd("use work");
        for body in [b"b5", b"b6", b"b7"] {
            put_bytes(&mut c, 8, 0, 14, body);
        }
        for id in [7, 5] {
            assert!(c.cmd(&format!("reserve-job {id}")).starts_with("RESERVED"));
            assert_eq!(c.cmd(&format!("bury {id} 3")), "BURIED\r\n");
        }
        assert_eq!(put_bytes(&mut c, 0, 0, 15, b"gone"), 8);
        assert_eq!(c.cmd("delete 8"), "DELETED\r\n");
        server.terminate();
    }
    let (code, stream, mapping) = tool(&["export", binary::arg(&dir.path)]);
    assert_eq!(code, 0, "{mapping}");

    let fresh = match common::beanstalkd::path() {
        Some(exe) => Fresh::Theirs(Beanstalkd::start(&exe, &[])),
        None => Fresh::Ours(binary::spawn(&[])),
    };
    let mut pipe = fresh.client();
    pipe.stream.write_all(&stream).unwrap();
    let mut replies = String::new();
    pipe.stream.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    pipe.stream.read_to_string(&mut replies).unwrap();
    for line in replies.lines() {
        let ok = ["INSERTED ", "USING ", "RESERVED ", "BURIED", "b5", "b7"];
        assert!(ok.iter().any(|p| line.starts_with(p)), "unexpected reply {line:?} in {replies}");
    }

    // "put #k: old id N -> new id M (tube, state)"
    let new_id: HashMap<u64, u64> = mapping
        .lines()
        .filter_map(|l| l.split_once("old id ")?.1.split_once(" (")?.0.split_once(" -> new id "))
        .map(|(old, new)| (old.parse().unwrap(), new.parse().unwrap()))
        .collect();
    assert_eq!(new_id.len(), 7, "{mapping}");
    let mut c = fresh.client();
    let expect: [Expected; 7] = [
        (1, "default", "ready", 5, 10, b"r1"),
        (2, "default", "ready", 5, 11, b"r2"),
        (3, "default", "ready", 1, 12, odd),
        (4, "default", "delayed", 2, 13, b"d4"),
        (5, "work", "buried", 3, 14, b"b5"),
        (6, "work", "ready", 8, 14, b"b6"),
        (7, "work", "buried", 3, 14, b"b7"),
    ];
    for (old, tube, state, pri, ttr, body) in expect {
        let id = new_id[&old];
        let s = job_stats(&mut c, id);
        assert_eq!((s["tube"].as_str(), s["state"].as_str()), (tube, state), "old job {old}: {s:?}");
        assert_eq!((s["pri"].parse::<u32>().unwrap(), s["ttr"].parse::<u32>().unwrap()), (pri, ttr));
        assert_eq!(peek(&mut c, id).as_deref(), Some(body), "old job {old}");
    }
    let left: u64 = job_stats(&mut c, new_id[&4])["time-left"].parse().unwrap();
    assert!((290..=300).contains(&left), "the delay left is kept: {left}");
    assert_eq!(buried_order(&mut c, "work"), [new_id[&7], new_id[&5]], "the buried order is kept");
    // Ready jobs come out in the same order: by priority, then as put.
    c.cmd("watch default");
    c.cmd("ignore work");
    for old in [3, 1, 2] {
        let reply = c.cmd("reserve-with-timeout 0");
        assert!(reply.starts_with(&format!("RESERVED {} ", new_id[&old])), "old job {old}: {reply}");
    }
}

// -------------------------------------------------------------------
// check
// -------------------------------------------------------------------

/// Our log with three jobs whose bodies are easy to find.
fn three_jobs(dir: &Path) -> PathBuf {
    let server = spawn(dir);
    let mut c = server.client();
    for body in ["job-one", "job-two", "job-three"] {
        c.put_ok(body);
    }
    server.terminate();
    dir.join("beanstalk.1")
}

#[test]
fn check_reports_damage_and_a_torn_tail_and_changes_nothing() {
    let dir = TempDir::new("tool-check");
    let file = three_jobs(&dir.path);
    let dir_arg = binary::arg(&dir.path);
    let out = tool_ok(&["check", dir_arg]);
    assert!(out.trim_end().ends_with("clean"), "{out}");

    let clean = fs::read(&file).unwrap();
    let mut damaged = clean.clone();
    let two = find(&damaged, b"job-two");
    damaged[two + 2] ^= 0x20;
    fs::write(&file, &damaged).unwrap();
    let before = snapshot(&dir.path);
    let (code, stdout, stderr) = tool(&["check", dir_arg]);
    let stdout = String::from_utf8(stdout).unwrap();
    assert_eq!(code, 1, "{stdout}{stderr}");
    let line = stdout.lines().next().unwrap();
    let offset: usize = line
        .strip_prefix(&format!("{}:", file.display()))
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("FILE:OFFSET: what, got {line:?}"));
    assert!(offset < two && two - offset < 100, "the damaged record starts at {offset}");
    assert!(line.contains("fails its checksum") && line.contains("records resume"), "{line}");
    assert!(stdout.contains("1 damaged"), "{stdout}");
    let (code, usage, stderr) = tool(&["usage", dir_arg]);
    assert_eq!(code, 0, "{stderr}");
    assert!(String::from_utf8(usage).unwrap().contains("damaged: a start rewrites its readable jobs"));
    assert!(stderr.contains(&format!("{}:{offset}: damaged", file.display())), "{stderr}");
    assert_eq!(snapshot(&dir.path), before, "check and usage never change a byte");

    let mut torn = clean.clone();
    torn.truncate(find(&torn, b"job-three") + 4);
    fs::write(&file, &torn).unwrap();
    let (code, stdout, _) = tool(&["check", dir_arg]);
    let stdout = String::from_utf8(stdout).unwrap();
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("torn tail") && stdout.contains(&format!("{}:", file.display())), "{stdout}");
    assert_eq!(fs::read(&file).unwrap(), torn, "a torn tail is reported, not cut");
    // The other commands read what a start would: the two whole jobs.
    let list = tool_ok(&["list", dir_arg]);
    assert_eq!(list.lines().count(), 3, "{list}");

    let empty = TempDir::new("tool-check-empty");
    let (code, _, stderr) = tool(&["check", binary::arg(&empty.path)]);
    assert_eq!((code, stderr.lines().count()), (2, 1), "{stderr}");
    assert!(stderr.contains("not a binlog directory"), "{stderr}");
    fs::write(empty.path.join("binlog.1"), b"not a log at all").unwrap();
    let (code, _, stderr) = tool(&["check", binary::arg(&empty.path)]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = tool(&["check", "/nonexistent/beanstalk"]);
    assert_eq!((code, stderr.lines().count()), (2, 1), "{stderr}");
}

/// `check` on a directory a busy server is writing. Records land in the
/// newest file's preallocated zeros while it is read, so a read can see a
/// record's later bytes before its first ones (big files make the read
/// long enough to see it often); and compaction deletes files between the
/// listing and the reading (small files make that often). None of that is
/// damage: a hundred runs of each report none. Damage that stays is still
/// reported.
#[test]
fn check_on_a_busy_live_directory_reports_no_damage_that_is_not_there() {
    for file_size in ["2097152", "65536"] {
        let dir = TempDir::new("tool-busy");
        let dir_arg = binary::arg(&dir.path);
        let server = binary::spawn(&["-b", dir_arg, "-s", file_size, "-F"]);
        let busy = Busy::start(|| server.client());
        for run in 0..100 {
            let (code, stdout, stderr) = tool(&["check", dir_arg]);
            let stdout = String::from_utf8(stdout).unwrap();
            let alarms: Vec<&str> = stdout.lines().filter(|l| l.contains(": damaged")).collect();
            assert!(
                code == 0 && alarms.is_empty(),
                "-s {file_size}, run {run}: exit {code}\n{stdout}{stderr}"
            );
        }
        busy.stop();

        // A byte changed in a record written before `check` started stays
        // changed: a second reading finds it too, and it is reported.
        let mut c = server.client();
        put_bytes(&mut c, 0, 0, 60, b"the-marker-body");
        // A record after it, so that the change is not a torn tail.
        put_bytes(&mut c, 0, 0, 60, b"after");
        // In the file that holds it: with 64 KiB files, the put after it
        // may have begun a new one.
        let (path, at) = fs::read_dir(&dir.path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|path| {
                path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("beanstalk."))
            })
            .find_map(|path| {
                let at = position(&fs::read(&path).ok()?, b"the-marker-body")?;
                Some((path, at))
            })
            .expect("the marker's record in a file");
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, b"T", at as u64).unwrap();
        let (code, stdout, _) = tool(&["check", dir_arg]);
        let stdout = String::from_utf8(stdout).unwrap();
        assert_eq!(code, 1, "{stdout}");
        assert!(stdout.contains("fails its checksum"), "{stdout}");
    }
}

/// The same on a directory beanstalkd is writing: its files, too, are
/// preallocated and appended to one record at a time.
#[test]
fn check_on_beanstalkds_busy_live_directory_reports_no_damage() {
    let Some(exe) = common::beanstalkd::path() else { return };
    let dir = TempDir::new("tool-busy-theirs");
    let dir_arg = binary::arg(&dir.path);
    let b = Beanstalkd::start(&exe, &["-b", dir_arg, "-s", "2097152"]);
    let busy = Busy::start(|| b.client());
    for run in 0..100 {
        let (code, stdout, stderr) = tool(&["check", dir_arg]);
        let stdout = String::from_utf8(stdout).unwrap();
        let alarms: Vec<&str> =
            stdout.lines().filter(|l| !l.contains("a server holds the directory")).collect();
        assert!(code == 0 && alarms.len() == 1, "run {run}: exit {code}\n{stdout}{stderr}");
    }
    busy.stop();
}

/// Two clients putting bodies of up to two pages (so records straddle
/// pages) and deleting at random, keeping about 40 jobs, until stopped.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    writers: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(connect: impl Fn() -> Client) -> Busy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let writers = (0..2u64)
            .map(|w| {
                let (mut c, stop) = (connect(), std::sync::Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut rng = common::Rng::new(26 + w);
                    let mut kept = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let body = vec![b'x'; 1 + rng.below(8000) as usize];
                        kept.push(put_bytes(&mut c, 0, 0, 60, &body));
                        if kept.len() > 20 {
                            let id = kept.swap_remove(rng.below(kept.len() as u64) as usize);
                            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
                        }
                    }
                })
            })
            .collect();
        Busy { stop, writers }
    }

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in self.writers {
            w.join().unwrap();
        }
    }
}

#[test]
fn check_finds_damage_in_beanstalkds_log() {
    let Some(exe) = common::beanstalkd::path() else { return };
    let dir = TempDir::new("tool-check-theirs");
    {
        let b = Beanstalkd::start(&exe, &["-b", binary::arg(&dir.path)]);
        let mut c = b.client();
        for body in [b"first", b"other", b"third"] {
            put_bytes(&mut c, 0, 0, 60, body);
        }
    }
    let file = dir.path.join("binlog.1");
    assert!(tool_ok(&["check", binary::arg(&dir.path)]).contains("clean"));
    let mut bytes = fs::read(&file).unwrap();
    // The second record's tube name length now reads 1000.
    let second = find(&bytes, b"first") + 7;
    bytes[second..second + 4].copy_from_slice(&1000i32.to_le_bytes());
    fs::write(&file, &bytes).unwrap();
    let (code, stdout, _) = tool(&["check", binary::arg(&dir.path)]);
    let stdout = String::from_utf8(stdout).unwrap();
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.starts_with(&format!("{}:{second}: damaged record", file.display())), "{stdout}");
}

// -------------------------------------------------------------------
// usage
// -------------------------------------------------------------------

/// A long-delayed and a buried job, then traffic that fills newer files:
/// `usage` names both jobs as what keeps their file.
fn assert_pins(report: &str, file: &str, delayed: u64, buried: u64, tube: &str) {
    let block: Vec<&str> = report
        .lines()
        .skip_while(|l| !l.starts_with(file))
        .take_while(|l| l.starts_with(' ') || l.starts_with(file))
        .collect();
    let block = block.join("\n");
    assert!(block.contains("kept: pinned by 2 jobs"), "{report}");
    assert!(block.contains(&format!("job {delayed} in {tube}: delayed")), "{report}");
    assert!(block.contains(&format!("job {buried} in {tube}: buried")), "{report}");
    let last = report.lines().last().unwrap();
    assert!(last.starts_with("most space: once the 2 jobs pinning") && last.contains(file), "{report}");
}

#[test]
fn usage_names_the_jobs_that_pin_beanstalkds_oldest_file() {
    let Some(exe) = common::beanstalkd::path() else { return };
    let dir = TempDir::new("tool-usage-theirs");
    {
        let b = Beanstalkd::start(&exe, &["-b", binary::arg(&dir.path), "-s", "8192"]);
        let mut c = b.client();
        assert_eq!(put_bytes(&mut c, 0, 1_000_000, 60, b"long-delayed"), 1);
        assert_eq!(put_bytes(&mut c, 0, 0, 60, b"to-bury"), 2);
        assert!(c.cmd("reserve-job 2").starts_with("RESERVED"));
        assert_eq!(c.cmd("bury 2 0"), "BURIED\r\n");
        // Traffic until the next file starts (a third would let
        // beanstalkd's compaction move the two jobs).
        let body = vec![b'x'; 1000];
        while c.stat("binlog-current-index") == "1" {
            let id = put_bytes(&mut c, 0, 0, 60, &body);
            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
        // Reading while beanstalkd runs is allowed, and said.
        let (code, stdout, stderr) = tool(&["usage", binary::arg(&dir.path)]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("held by a running server"), "{stderr}");
        assert!(String::from_utf8(stdout).unwrap().contains("kept: the running server is writing it"));
    }
    let report = tool_ok(&["pins", binary::arg(&dir.path)]);
    assert_pins(&report, "binlog.1 ", 1, 2, "default");
    assert!(report.contains("waits for binlog.1"), "{report}");
}

/// A job held for its group is logged as delayed with no due time:
/// `usage` says it is held for its group, never "ready in 0s", and a
/// job delayed before its hold is delayed still.
#[test]
fn usage_calls_a_job_held_for_its_group_held() {
    let dir = TempDir::new("tool-usage-held");
    {
        let server = spawn(&dir.path);
        let mut c = server.client();
        c.send("put 0 0 60 6 grp:g\r\nmember\r\nput 0 0 60 4 aft:g\r\nheld\r\n");
        assert_eq!(c.reply(), "INSERTED 1\r\n");
        assert_eq!(c.reply(), "INSERTED 2\r\n");
        c.send("put 0 5000 60 4 aft:g\r\nlate\r\n");
        assert_eq!(c.reply(), "INSERTED 3\r\n");
        server.terminate();
    }
    let report = tool_ok(&["usage", binary::arg(&dir.path)]);
    let line =
        |id: u64| report.lines().find(|l| l.starts_with(&format!("    job {id} "))).unwrap_or_default();
    assert!(line(1).starts_with("    job 1 in default: ready, "), "{report}");
    assert!(line(2).starts_with("    job 2 in default: held for its group g, "), "{report}");
    assert!(!line(2).contains("ready in"), "{report}");
    assert!(
        line(3).starts_with("    job 3 in default: delayed, ") && line(3).ends_with(", ready in 1h23m"),
        "{report}"
    );
}

#[test]
fn usage_names_the_jobs_that_pin_a_file_of_ours() {
    let dir = TempDir::new("tool-usage-ours");
    let server = binary::spawn(&["-b", binary::arg(&dir.path), "-s", "65536"]);
    let mut c = server.client();
    c.cmd("use slow");
    // Big enough that compaction, which keeps the log within twice the
    // live data plus a file, leaves them where they are.
    let big = vec![b'p'; 20_000];
    assert_eq!(put_bytes(&mut c, 0, 1_000_000, 60, &big), 1);
    assert_eq!(put_bytes(&mut c, 0, 0, 60, &big), 2);
    assert!(c.cmd("reserve-job 2").starts_with("RESERVED"));
    assert_eq!(c.cmd("bury 2 0"), "BURIED\r\n");
    // Traffic until the next file starts; then a job put before it is
    // deleted, so the new file refers to the first and may only go after it.
    // (Much more traffic, and compaction would rewrite the two jobs forward.)
    assert_eq!(put_bytes(&mut c, 0, 0, 60, b"keeper"), 3);
    let body = vec![b'x'; 1000];
    while c.stat("binlog-current-index") == "1" {
        let id = put_bytes(&mut c, 0, 0, 60, &body);
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    assert_eq!(c.cmd("delete 3"), "DELETED\r\n");
    server.terminate();
    let report = tool_ok(&["usage", binary::arg(&dir.path)]);
    assert_pins(&report, "beanstalk.1 ", 1, 2, "slow");
    assert!(
        report.contains("newer files that refer to it, and can only go after it: beanstalk.2"),
        "{report}"
    );
    assert!(report.contains("kept: waits for beanstalk.1"), "{report}");
}

// -------------------------------------------------------------------
// Safety and the command line
// -------------------------------------------------------------------

#[test]
fn a_directory_a_server_holds_is_read_but_not_copied_without_live() {
    let dir = TempDir::new("tool-held");
    let server = spawn(&dir.path);
    server.client().put_ok("held");
    let dir_arg = binary::arg(&dir.path);
    let (code, stdout, stderr) = tool(&["list", dir_arg]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("held by a running server"), "{stderr}");
    assert!(String::from_utf8(stdout).unwrap().contains(" default "));
    let out = TempDir::new("tool-held-out");
    let target = out.path.join("new");
    for args in [vec!["export", dir_arg], vec!["to-beanstalkd", dir_arg, binary::arg(&target)]] {
        let (code, stdout, stderr) = tool(&args);
        assert_eq!((code, stdout.len()), (2, 0), "{args:?}: {stderr}");
        assert!(stderr.contains("running server") && stderr.contains("--live"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    assert!(!target.exists());
    let (code, stdout, _) = tool(&["export", dir_arg, "--live"]);
    assert_eq!(code, 0);
    assert!(String::from_utf8(stdout).unwrap().starts_with("put 0 0 60 4\r\nheld\r\n"));
    server.terminate();

    fs::create_dir(&target).unwrap();
    fs::write(target.join("something"), b"x").unwrap();
    let (code, _, stderr) = tool(&["to-beanstalkd", dir_arg, binary::arg(&target)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not empty"), "{stderr}");
}

/// A copy without groups (`downgrade`, `to-beanstalkd`) would write a
/// job held for a group as it is logged, ready or delayed: it would run
/// before its group's members are done. Refused, nothing written, with
/// how many, unless told `--drop-holds`; then it says how many run early.
#[test]
fn a_copy_without_groups_refuses_to_drop_holds_unless_told_and_says_how_many_run_early() {
    let dir = TempDir::new("tool-holds");
    let server = spawn(&dir.path);
    let mut c = server.client();
    let mut put = |tags: &str, delay: u32, body: &str| {
        c.send(format!("put 0 {delay} 60 {} {tags}\r\n{body}\r\n", body.len()));
        c.reply()
    };
    assert_eq!(put("grp:g", 0, "member"), "INSERTED 1\r\n");
    assert_eq!(put("aft:g", 0, "held"), "INSERTED 2\r\n");
    // Held when its delay ends.
    assert_eq!(put("aft:g", 100, "later"), "INSERTED 3\r\n");
    // Nobody is in h: not held, and nothing to drop.
    assert_eq!(put("aft:h", 0, "free"), "INSERTED 4\r\n");
    assert_eq!(put("aft:g", 0, "buried"), "INSERTED 5\r\n");
    // Kicked out of its hold and buried: a kick makes it ready, with its
    // group or without.
    assert_eq!(c.cmd("kick-job 5"), "KICKED\r\n");
    assert!(c.cmd("reserve-job 5").starts_with("RESERVED 5 "));
    assert_eq!(c.cmd("bury 5 0"), "BURIED\r\n");
    assert_eq!(
        c.cmd("stats-group g").lines().find(|l| l.starts_with("waiting-jobs")),
        Some("waiting-jobs: 1")
    );
    server.terminate();

    let path = binary::arg(&dir.path);
    let out = TempDir::new("tool-holds-out");
    for (command, why) in
        [("downgrade", "format version 2 has none"), ("to-beanstalkd", "beanstalkd has none")]
    {
        let target = out.path.join(command);
        let args = [command, path, binary::arg(&target)];
        let (code, stdout, stderr) = tool(&args);
        assert_eq!((code, stdout.len()), (1, 0), "{command}: {stderr}");
        assert_eq!(
            stderr,
            format!(
                "beanstalk-binlog: 2 jobs held for a group (aft:) would run early, their hold dropped ({why}): \
                 nothing written; pass --drop-holds to write them without it\n"
            ),
            "{command}"
        );
        assert!(!target.exists(), "{command} wrote something");
        let (code, _, stderr) = tool(&[command, path, binary::arg(&target), "--drop-holds"]);
        assert_eq!(code, 0, "{command}: {stderr}");
        let said =
            "beanstalk-binlog: 2 jobs held for a group (aft:) written without their hold, as asked: they \
                    will run early, before their group's members are done\n";
        assert!(stderr.ends_with(said), "{command}: {stderr}");
    }
    // export carries the groups: nothing to refuse, and no flag to take.
    let (code, _, stderr) = tool(&["export", path, "--drop-holds"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("export does not take --drop-holds"), "{stderr}");
    assert!(tool_ok(&["export", path]).contains("put 0 0 60 4 aft:g\r\nheld\r\n"));
    // The older build's copy: the held job is ready, before its member.
    let older = spawn(&out.path.join("downgrade"));
    let mut c = older.client();
    assert!(c.cmd("stats-job 2").contains("\nstate: ready\n"));
    assert_eq!(c.cmd("stats-group g"), "NOT_FOUND\r\n");
}

/// Each command's options, as the tool takes them, are on its line of
/// `--help` and of the man page's synopsis: `export`'s `--drop-keys`,
/// the copies' `--drop-holds`.
#[test]
fn help_and_the_man_page_name_every_option_of_each_command() {
    let (code, stdout, _) = tool(&["--help"]);
    assert_eq!(code, 0);
    let help = String::from_utf8(stdout).unwrap();
    let man = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/beanstalk.1")).unwrap();
    let man = man.replace("\\-", "-");
    let commands: [(&str, &[&str]); 5] = [
        ("usage", &["--all"]),
        ("list", &["--tube", "--state"]),
        ("export", &["--first-id", "--id-step", "--live", "--drop-keys"]),
        ("to-beanstalkd", &["-z", "--live", "--drop-keys", "--drop-holds"]),
        ("downgrade", &["--live", "--drop-keys", "--drop-holds"]),
    ];
    for (command, options) in commands {
        let line = help.lines().find(|line| line.starts_with(&format!("  {command} DIR"))).unwrap();
        let synopsis = man.lines().find(|line| line.starts_with(&format!(".BI {command} "))).unwrap();
        for option in options {
            assert!(line.contains(&format!("[{option}")), "--help's {command} lacks {option}: {line}");
            assert!(synopsis.contains(&format!("{option} ")), "the man page's {command} lacks {option}");
        }
        // And the tool takes each.
        let (code, _, stderr) = tool(&[command, "/nonexistent", options[0]]);
        assert!(!stderr.contains("does not take"), "{command} {}: {stderr} ({code})", options[0]);
    }
}

#[test]
fn help_bad_commands_and_missing_jobs_get_clear_answers() {
    let (code, stdout, _) = tool(&["--help"]);
    assert_eq!(code, 0);
    assert!(String::from_utf8(stdout).unwrap().starts_with("Usage: beanstalk-binlog"));
    for flag in ["--version", "-v"] {
        let (code, stdout, _) = tool(&[flag]);
        let want = format!("beanstalk-binlog {} (beanstalkd 1.13 protocol)\n", env!("CARGO_PKG_VERSION"));
        assert_eq!((code, String::from_utf8(stdout).unwrap()), (0, want), "{flag}");
    }
    let dir = TempDir::new("tool-cli");
    three_jobs(&dir.path);
    let dir_arg = binary::arg(&dir.path);
    for args in [
        vec![],
        vec!["frobnicate", dir_arg],
        vec!["list"],
        vec!["list", dir_arg, "--state", "reserved"],
        vec!["list", dir_arg, "--tube"],
        vec!["show", dir_arg, "x"],
        vec!["check", dir_arg, "--live"],
    ] {
        let (code, _, stderr) = tool(&args);
        assert_eq!((code, stderr.lines().count()), (2, 1), "{args:?}: {stderr}");
    }
    // Every command leaves the directory as it was, byte for byte.
    let before = snapshot(&dir.path);
    let out = TempDir::new("tool-cli-out");
    let target = out.path.join("new");
    for args in [
        vec!["check", dir_arg],
        vec!["usage", dir_arg, "--all"],
        vec!["list", dir_arg, "--state", "ready"],
        vec!["export", dir_arg],
        vec!["to-beanstalkd", dir_arg, binary::arg(&target)],
    ] {
        assert_eq!(tool(&args).0, 0, "{args:?}");
    }
    assert_eq!(snapshot(&dir.path), before, "read-only");
    let (code, _, stderr) = tool(&["show", dir_arg, "99"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("job 99 is not in"), "{stderr}");
    let (code, stdout, _) = tool(&["show", dir_arg, "2"]);
    assert_eq!(code, 0);
    let stdout = String::from_utf8(stdout).unwrap();
    assert!(stdout.contains("state: ready\n") && stdout.ends_with("\n\njob-two"), "{stdout}");
}

/// beanstalkd 1.4's version-5 files (`cttest_binlog_v5` in beanstalkd's own
/// tests: `use test`, `put 1 2 3 4`/`test`, `put 4 3 2 1`/`x`), built byte by
/// byte: 64-bit name lengths, 77-byte records, times in microseconds.
#[test]
fn beanstalkd_1_4_version_5_files_are_read_too() {
    let dir = TempDir::new("tool-v5");
    let now_us =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let mut file = 5i32.to_le_bytes().to_vec();
    for (id, pri, delay, ttr, body) in [(1u64, 1u32, 2i64, 3i64, &b"test"[..]), (2, 4, 3, 2, b"x")] {
        file.extend_from_slice(&4u64.to_le_bytes());
        file.extend_from_slice(b"test");
        let mut rec = vec![0u8; 77];
        rec[0..8].copy_from_slice(&id.to_le_bytes());
        rec[8..12].copy_from_slice(&pri.to_le_bytes());
        rec[16..24].copy_from_slice(&(delay * 1_000_000).to_le_bytes());
        rec[24..32].copy_from_slice(&(ttr * 1_000_000).to_le_bytes());
        rec[32..36].copy_from_slice(&(body.len() as i32 + 2).to_le_bytes());
        rec[40..48].copy_from_slice(&now_us.to_le_bytes());
        rec[48..56].copy_from_slice(&(now_us + delay * 1_000_000).to_le_bytes());
        rec[76] = 4;
        file.extend_from_slice(&rec);
        file.extend_from_slice(body);
        file.extend_from_slice(b"\r\n");
    }
    file.resize(file.len() + 4096, 0);
    fs::write(dir.path.join("binlog.1"), &file).unwrap();
    let dir_arg = binary::arg(&dir.path);
    assert!(tool_ok(&["check", dir_arg]).contains("clean"));
    let list = tool_ok(&["list", dir_arg]);
    let rows: Vec<Vec<&str>> = list.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 2, "{list}");
    assert_eq!(rows[0][..7], ["1", "test", "delayed", "1", "2s", rows[0][5], "3s"], "{list}");
    assert_eq!(rows[1][..7], ["2", "test", "delayed", "4", "3s", rows[1][5], "2s"], "{list}");
    assert!(tool_ok(&["show", dir_arg, "1"]).ends_with("\n\ntest"));
}
