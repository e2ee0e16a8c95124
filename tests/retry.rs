//! The retry limit (reference §3.1b), which no peer has: `put ...
//! max:<n>` and `--max-reserves <n>`. A job reserved n times is buried,
//! its priority kept, when its reservation next ends without a delete:
//! a `release` (answered `RELEASED` all the same, so that no client takes
//! it for an error), its TTR, or its holder's hang-up. Over
//! TCP against the real binary, and across a SIGKILL and compaction.

mod common;

use common::binary::{binlog_tool as tool, spawn, TempDir};
use common::{settle, Client};

/// One key of `stats-job <id>`.
fn stat_job(c: &mut Client, id: u64, key: &str) -> String {
    c.yaml_map(&format!("stats-job {id}")).remove(key).unwrap_or_else(|| panic!("no key {key}"))
}

/// `put` with `tags` after the size, TTR `ttr` and body `body`; the reply.
fn put(c: &mut Client, pri: u32, ttr: u32, tags: &str, body: &str) -> String {
    c.send(format!("put {pri} 0 {ttr} {} {tags}\r\n{body}\r\n", body.len()));
    c.reply()
}

#[test]
fn a_release_after_the_last_try_is_buried_and_stats_job_shows_the_limit() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 7, 30, "max:2", "job"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 3\r\njob\r\n");
    assert_eq!(c.cmd("release 1 5 0"), "RELEASED\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 3\r\njob\r\n");
    // The second try was the last: buried, with the priority it had, and
    // answered as any release is.
    assert_eq!(c.cmd("release 1 1 30"), "RELEASED\r\n");
    let yaml = "---\nid: 1\ntube: \"default\"\nstate: buried\npri: 5\nage: 0\ndelay: 0\nttr: 30\n\
                time-left: 0\nfile: 0\nreserves: 2\ntimeouts: 0\nreleases: 2\nburies: 1\nkicks: 0\n\
                max-reserves: 2\nburied-by-retry-limit: true\n";
    assert_eq!(c.cmd("stats-job 1"), format!("OK {}\r\n{yaml}\r\n", yaml.len()));
    assert_eq!(c.cmd("peek-buried"), "FOUND 1 3\r\njob\r\n");
    // Kicked, it is tried once more (no dead letter meanwhile), and
    // buried again.
    assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
    assert!(c.cmd("stats-job 1").ends_with("kicks: 1\nmax-reserves: 2\n\r\n"));
    assert_eq!(c.cmd("reserve"), "RESERVED 1 3\r\njob\r\n");
    assert_eq!(c.cmd("release 1 5 0"), "RELEASED\r\n");
    assert_eq!(stat_job(&mut c, 1, "state"), "buried");
    // A job without the tag shows beanstalkd's keys and nothing more.
    assert_eq!(c.put(0, 0, 30, "x"), "INSERTED 2\r\n");
    assert!(!c.cmd("stats-job 2").contains("max-reserves"));
    assert_eq!(c.stat("current-jobs-buried"), "1");
}

#[test]
fn a_ttr_running_out_after_the_last_try_buries_the_job() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 1, "max:2", "slow"), "INSERTED 1\r\n");
    for timeouts in 1..=2 {
        assert_eq!(c.cmd("reserve"), "RESERVED 1 4\r\nslow\r\n");
        let timed_out = || stat_job(&mut Client::connect(s.addr), 1, "timeouts") == timeouts.to_string();
        assert!(settle(common::HANG_GUARD, timed_out), "timeout {timeouts}");
    }
    let mut other = s.client();
    assert_eq!(stat_job(&mut other, 1, "state"), "buried");
    assert_eq!(stat_job(&mut other, 1, "buries"), "1");
    assert_eq!(other.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

#[test]
fn a_holder_hanging_up_after_the_last_try_buries_the_job() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 30, "max:1", "crash"), "INSERTED 1\r\n");
    let mut worker = s.client();
    assert_eq!(worker.cmd("reserve"), "RESERVED 1 5\r\ncrash\r\n");
    drop(worker);
    assert!(settle(common::HANG_GUARD, || stat_job(&mut c, 1, "state") == "buried"));
}

#[test]
fn max_reserves_sets_every_untagged_jobs_limit_and_max_0_lifts_it() {
    let s = spawn(&["--max-reserves", "1"]);
    let mut c = s.client();
    assert_eq!(c.put(0, 0, 30, "plain"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 1, 30, "max:0", "free"), "INSERTED 2\r\n");
    assert_eq!(put(&mut c, 2, 30, "idp:k max:2", "own"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 5\r\nplain\r\n");
    assert_eq!(c.cmd("release 1 0 0"), "RELEASED\r\n");
    assert_eq!(stat_job(&mut c, 1, "state"), "buried");
    for _ in 0..3 {
        assert_eq!(c.cmd("reserve"), "RESERVED 2 4\r\nfree\r\n");
        assert_eq!(c.cmd("release 2 1 0"), "RELEASED\r\n");
    }
    // Buried by the server's limit: named, and marked.
    assert!(c.cmd("stats-job 1").ends_with("kicks: 0\nmax-reserves: 1\nburied-by-retry-limit: true\n\r\n"));
    assert!(c.cmd("stats-job 2").ends_with("max-reserves: 0\n\r\n"));
    // A job no limit touched shows beanstalkd's bytes.
    assert_eq!(c.put(0, 0, 30, "fresh"), "INSERTED 4\r\n");
    assert!(
        c.cmd("stats-job 4").ends_with("buries: 0\nkicks: 0\n\r\n"),
        "the server's default is not the job's tag"
    );
}

/// The warning for each burial by the limit (a dead letter, which
/// `journalctl -p warning` shows), after each of the three ends of a
/// reservation; none for a worker's own `bury`.
#[test]
fn each_burial_by_the_limit_is_one_log_line_naming_the_limit() {
    let s = spawn(&["--max-reserves", "1"]);
    let mut c = s.client();
    assert_eq!(c.cmd("use emails"), "USING emails\r\n");
    assert_eq!(c.cmd("watch emails"), "WATCHING 2\r\n");
    assert_eq!(c.put(0, 0, 30, "fails"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, 1, "max:1", "slow"), "INSERTED 2\r\n");
    assert_eq!(c.put(0, 0, 30, "crash"), "INSERTED 3\r\n");
    assert_eq!(put(&mut c, 0, 30, "max:5", "own"), "INSERTED 4\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 5\r\nfails\r\n");
    assert_eq!(c.cmd("release 1 0 0"), "RELEASED\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 4\r\nslow\r\n");
    assert!(settle(common::HANG_GUARD, || stat_job(&mut Client::connect(s.addr), 2, "state") == "buried"));
    let mut worker = s.client();
    assert_eq!(worker.cmd("watch emails"), "WATCHING 2\r\n");
    assert_eq!(worker.cmd("reserve"), "RESERVED 3 5\r\ncrash\r\n");
    drop(worker);
    assert!(settle(common::HANG_GUARD, || stat_job(&mut c, 3, "state") == "buried"));
    assert_eq!(c.cmd("reserve"), "RESERVED 4 3\r\nown\r\n");
    assert_eq!(c.cmd("bury 4 0"), "BURIED\r\n");
    let warnings = || -> Vec<String> {
        let log = s.stderr();
        let lines = log.lines().filter_map(|line| line.split(" warning beanstalk: ").nth(1));
        lines.filter(|l| l.contains("retry limit")).map(str::to_owned).collect()
    };
    // A line may come a moment after the burial it tells of is seen.
    s.stderr_once(|log| log.matches("retry limit").count() >= 3);
    let lines = warnings();
    assert_eq!(
        lines,
        [
            "job 1 in tube emails buried by its retry limit (--max-reserves 1, reserves 1) when released",
            "job 2 in tube emails buried by its retry limit (its max:1, reserves 1) when its TTR ran out",
            "job 3 in tube emails buried by its retry limit (--max-reserves 1, reserves 1) when its worker hung up",
        ]
    );
    assert!(!c.cmd("stats-job 4").contains("buried-by"), "a worker's own bury is no dead letter");
}

#[test]
fn malformed_limits_are_refused_with_their_body_swallowed() {
    let s = spawn(&[]);
    let mut c = s.client();
    for tag in ["max:", "max:x", "max:-1", "max:4294967296", "max:1:2", "max:3 grp:-g"] {
        // The body is a command: it must not run.
        assert_eq!(put(&mut c, 0, 30, tag, "delete 1"), "BAD_FORMAT\r\n", "{tag}");
    }
    assert_eq!(put(&mut c, 0, 30, "max:+4", "x"), "INSERTED 1\r\n");
    assert!(c.cmd("stats-job 1").ends_with("max-reserves: 4\n\r\n"));
}

#[test]
fn limits_survive_sigkill_restart_and_compaction() {
    let dir = TempDir::new("retry");
    let args = ["-b", dir.path.to_str().unwrap(), "-s", "4096"];
    let s = spawn(&args);
    let mut c = s.client();
    assert_eq!(put(&mut c, 9, 30, "max:2", "kept"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 9, 30, "max:1 idp:key", "both"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 4\r\nkept\r\n");
    assert_eq!(c.cmd("release 1 9 0"), "RELEASED\r\n");
    // Enough churn through small files that compaction rewrites both jobs
    // out of the file they were put in.
    let body = "b".repeat(500);
    for _ in 0..200 {
        let id = c.put_ok(&body);
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    let first_gone = || !dir.path.join("beanstalk.1").exists();
    assert!(settle(common::HANG_GUARD, first_gone), "compaction removed the first file");
    s.kill();
    let s = spawn(&args);
    let mut c = s.client();
    assert!(c
        .cmd("stats-job 1")
        .ends_with("reserves: 1\ntimeouts: 0\nreleases: 1\nburies: 0\nkicks: 0\nmax-reserves: 2\n\r\n"));
    assert!(c.cmd("stats-job 2").ends_with("max-reserves: 1\n\r\n"));
    // The second try is job 1's last, the first job 2's.
    assert_eq!(c.cmd("reserve"), "RESERVED 1 4\r\nkept\r\n");
    assert_eq!(c.cmd("release 1 9 0"), "RELEASED\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 4\r\nboth\r\n");
    s.kill();
    // A job buried by its limit stays buried, its limit kept.
    let s = spawn(&args);
    let mut c = s.client();
    assert_eq!(stat_job(&mut c, 1, "state"), "buried");
    assert_eq!(stat_job(&mut c, 2, "state"), "ready");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 4\r\nboth\r\n");
    assert_eq!(c.cmd("release 2 9 0"), "RELEASED\r\n");
    assert_eq!(stat_job(&mut c, 2, "state"), "buried");
    // The dead-letter mark is logged with the burial: a restart keeps it.
    s.kill();
    let s = spawn(&args);
    let mut c = s.client();
    for id in [1, 2] {
        assert_eq!(stat_job(&mut c, id, "buried-by-retry-limit"), "true");
    }
}

#[test]
fn the_binlog_tool_shows_limits_exports_them_and_says_what_a_downgrade_drops() {
    let dir = TempDir::new("retry-tool");
    let path = dir.path.to_str().unwrap();
    let s = spawn(&["-b", path]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 30, "max:3", "a"), "INSERTED 1\r\n");
    s.terminate();
    let (code, list, _) = tool(&["list", path]);
    assert!(code == 0 && list.lines().nth(1).is_some_and(|line| line.ends_with(" max:3")), "{list}");
    let (_, show, _) = tool(&["show", path, "1"]);
    assert!(show.contains("\nmax-reserves: 3\n"), "{show}");
    let (code, export, _) = tool(&["export", path]);
    assert!(code == 0 && export.starts_with("put 0 0 30 1 max:3\r\na\r\n"), "{export}");
    let out = TempDir::new("retry-tool-out");
    let target = out.path.join("older");
    let (code, _, said) = tool(&["downgrade", path, target.to_str().unwrap()]);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("dropped 1 retry limits (max:), the jobs kept (format version 2 has none)"),
        "{said}"
    );
    let older = spawn(&["-b", target.to_str().unwrap()]);
    let mut c = older.client();
    assert!(!c.cmd("stats-job 1").contains("max-reserves"));
}

/// `GET /metrics` from the `--metrics` listener the server's `-V` line
/// names: the value of each series in `series`, in its order.
fn metrics(s: &common::binary::Bin, series: &[&str]) -> Vec<Option<String>> {
    use std::io::{Read, Write};
    let stderr = s.stderr();
    let addr = stderr.split("metrics http://").nth(1).and_then(|rest| rest.split('/').next());
    let mut http = std::net::TcpStream::connect(addr.expect("the metrics line")).unwrap();
    http.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    http.read_to_string(&mut response).unwrap();
    let sample = |name: &str| {
        response.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ').map(str::to_owned))
    };
    series.iter().map(|name| sample(name)).collect()
}

/// What `reply` (a `stats`, `stats-job` or `stats-tube` reply) says
/// after its line that starts `key:`: every byte of its end.
fn after(reply: &str, key: &str) -> String {
    let at = reply.find(&format!("\n{key}: ")).unwrap_or_else(|| panic!("no {key} in {reply:?}"));
    let rest = &reply[at + 1..];
    rest[rest.find('\n').unwrap() + 1..].to_owned()
}

/// A dead letter's mark is what its burial was (reference §3.1b): a job
/// its worker buried on its last try is none, a job its limit buried is
/// one, whatever the tries and whatever a later limit says, before and
/// after a SIGKILL restart and a restart with another `--max-reserves`.
/// How many there are now is a gauge beside the counter, which a restart
/// keeps where the counter starts again at 0.
#[test]
fn dead_letters_tell_the_truth_across_restarts() {
    let dir = TempDir::new("retry-dead");
    let path = dir.path.to_str().unwrap();
    let args = |limit: &'static str| ["-b", path, "--max-reserves", limit, "--metrics", "127.0.0.1:0"];
    let s = spawn(&args("1"));
    let mut c = s.client();
    // Job 1 buried by --max-reserves 1 at its release, job 2 by its worker
    // on its last try, job 3 by its own max:1 when its TTR ran out.
    assert_eq!(c.put(0, 0, 30, "one"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 3\r\none\r\n");
    assert_eq!(c.cmd("release 1 0 0"), "RELEASED\r\n");
    assert_eq!(c.put(0, 0, 30, "two"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 3\r\ntwo\r\n");
    assert_eq!(c.cmd("bury 2 0"), "BURIED\r\n");
    assert_eq!(put(&mut c, 0, 1, "max:1", "three"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 3 5\r\nthree\r\n");
    let buried = || stat_job(&mut Client::connect(s.addr), 3, "state") == "buried";
    assert!(settle(common::HANG_GUARD, buried), "its TTR buries job 3");
    let series = [
        "beanstalkd_current_jobs_buried_by_retry_limit",
        "beanstalkd_tube_current_jobs_buried_by_retry_limit{tube=\"default\"}",
        "beanstalkd_tube_buried_by_retry_limit_total{tube=\"default\"}",
    ];
    let some = |n: &str| Some(n.to_owned());
    let dead = |limit: &str| format!("max-reserves: {limit}\nburied-by-retry-limit: true\n\r\n");
    // Before any restart; after a SIGKILL, the same limit; after another,
    // a limit of 5, which would have tried jobs 1 and 2 four times more.
    let mut s = s;
    for (restart, limit) in [(0, "1"), (1, "1"), (2, "5")] {
        let mut c = s.client();
        let job = |c: &mut Client, id: u64| after(&c.cmd(&format!("stats-job {id}")), "kicks");
        assert_eq!(job(&mut c, 1), dead(limit), "restart {restart}: job 1, buried by --max-reserves");
        assert_eq!(job(&mut c, 2), "\r\n", "restart {restart}: job 2, buried by its worker");
        assert_eq!(job(&mut c, 3), dead("1"), "restart {restart}: job 3, buried by its max:1");
        let gauge = "current-jobs-buried-by-retry-limit: 2\n\r\n";
        assert_eq!(after(&c.cmd("stats"), "platform"), gauge, "restart {restart}: stats");
        assert_eq!(after(&c.cmd("stats-tube default"), "pause-time-left"), gauge, "restart {restart}");
        let counted = if restart == 0 { "2" } else { "0" };
        assert_eq!(metrics(&s, &series), [some("2"), some("2"), some(counted)], "restart {restart}");
        s.kill();
        s = spawn(&args(if restart == 0 { "1" } else { "5" }));
    }
    // Out of the buried list, a job is no dead letter: the gauges follow,
    // and with none left the key is gone, beanstalkd's bytes again.
    let mut c = s.client();
    assert_eq!(c.cmd("kick-job 1"), "KICKED\r\n");
    let one = "current-jobs-buried-by-retry-limit: 1\n\r\n";
    assert_eq!(after(&c.cmd("stats-tube default"), "pause-time-left"), one);
    assert_eq!(c.cmd("delete 3"), "DELETED\r\n");
    assert_eq!(after(&c.cmd("stats-tube default"), "pause-time-left"), "\r\n");
    assert_eq!(after(&c.cmd("stats"), "platform"), "\r\n");
    assert_eq!(metrics(&s, &series), [some("0"), some("0"), some("0")]);
}
