//! stats, stats-job and stats-tube: exact documents and how every figure
//! moves (reference §3.14-3.16, 6).
mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::Client;

/// reference §6.4, in order.
const STATS_KEYS: [&str; 51] = [
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "cmd-put",
    "cmd-peek",
    "cmd-peek-ready",
    "cmd-peek-delayed",
    "cmd-peek-buried",
    "cmd-reserve",
    "cmd-reserve-with-timeout",
    "cmd-delete",
    "cmd-release",
    "cmd-use",
    "cmd-watch",
    "cmd-ignore",
    "cmd-bury",
    "cmd-kick",
    "cmd-touch",
    "cmd-stats",
    "cmd-stats-job",
    "cmd-stats-tube",
    "cmd-list-tubes",
    "cmd-list-tube-used",
    "cmd-list-tubes-watched",
    "cmd-pause-tube",
    "job-timeouts",
    "total-jobs",
    "max-job-size",
    "current-tubes",
    "current-connections",
    "current-producers",
    "current-workers",
    "current-waiting",
    "total-connections",
    "pid",
    "version",
    "rusage-utime",
    "rusage-stime",
    "uptime",
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
    "binlog-max-size",
    "draining",
    "id",
    "hostname",
    "os",
    "platform",
];

/// reference §6.2, in order.
const JOB_KEYS: [&str; 14] = [
    "id",
    "tube",
    "state",
    "pri",
    "age",
    "delay",
    "ttr",
    "time-left",
    "file",
    "reserves",
    "timeouts",
    "releases",
    "buries",
    "kicks",
];

/// reference §6.3, in order.
const TUBE_KEYS: [&str; 14] = [
    "name",
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "current-using",
    "current-watching",
    "current-waiting",
    "cmd-delete",
    "cmd-pause-tube",
    "pause",
    "pause-time-left",
];

/// Checks the `OK <n>\r\n---\n...\n\r\n` framing, with `n` exact, and returns
/// the `key: value` lines in order.
fn yaml_entries(reply: &str) -> Vec<(String, String)> {
    let (header, rest) = reply.split_once("\r\n").expect("header line");
    let n: usize = header
        .strip_prefix("OK ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an OK reply: {reply:?}"));
    let body = rest.strip_suffix("\r\n").expect("closing CRLF");
    assert_eq!(body.len(), n, "OK count in {reply:?}");
    let lines = body.strip_prefix("---\n").expect("document start");
    let lines = lines.strip_suffix('\n').expect("final newline");
    lines
        .split('\n')
        .map(|line| {
            let (k, v) = line.split_once(": ").expect("key: value");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn keys(entries: &[(String, String)]) -> Vec<&str> {
    entries.iter().map(|(k, _)| k.as_str()).collect()
}

/// Every `cmd-*` counter.
fn cmd_counters(c: &mut Client) -> BTreeMap<String, u64> {
    c.stats()
        .into_iter()
        .filter(|(k, _)| k.starts_with("cmd-"))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect()
}

/// Sends each line (plus CRLF), asserts the exact bytes that come back, and
/// returns the `cmd-*` counters that moved, leaving out this helper's own
/// `stats` calls.
fn counted(c: &mut Client, steps: &[(&str, &str)]) -> BTreeMap<String, u64> {
    let before = cmd_counters(c);
    for (line, reply) in steps {
        c.send(format!("{line}\r\n"));
        c.expect(reply);
    }
    let mut after = cmd_counters(c);
    *after.get_mut("cmd-stats").unwrap() -= 1;
    after
        .into_iter()
        .filter_map(|(k, v)| {
            let moved = v - before[&k];
            (moved != 0).then_some((k, moved))
        })
        .collect()
}

fn moved(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|&(k, n)| (k.to_owned(), n)).collect()
}

/// Polls `stats` until `key` has `value` (the server updates some figures
/// on other threads, e.g. when a connection closes or a reserve blocks).
fn await_stat(c: &mut Client, key: &str, value: &str) {
    let deadline = Instant::now() + common::REPLY_TIMEOUT;
    loop {
        let got = c.stat(key);
        if got == value {
            return;
        }
        assert!(Instant::now() < deadline, "{key} stayed {got}, want {value}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A new connection that the server has certainly accepted.
fn accepted(server: &common::TestServer) -> Client {
    let mut c = server.connect();
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    c
}

fn tube_stat(c: &mut Client, tube: &str, key: &str) -> String {
    let mut map = c.yaml_map(&format!("stats-tube {tube}"));
    map.remove(key).unwrap_or_else(|| panic!("no stats-tube key {key}"))
}

fn job_stat(c: &mut Client, id: u64, key: &str) -> String {
    let mut map = c.yaml_map(&format!("stats-job {id}"));
    map.remove(key).unwrap_or_else(|| panic!("no stats-job key {key}"))
}

// -------------------------------------------------------------------
// stats: the document
// -------------------------------------------------------------------

#[test]
fn stats_has_every_key_in_spec_order_with_an_exact_byte_count() {
    let server = common::start();
    let mut c = server.connect();
    let entries = yaml_entries(&c.cmd("stats"));
    assert_eq!(keys(&entries), STATS_KEYS);
}

#[test]
fn stats_on_a_fresh_server_shows_one_stats_command_and_one_connection() {
    let server = common::start();
    let mut c = server.connect();
    let entries = yaml_entries(&c.cmd("stats"));
    let map: HashMap<_, _> = entries.into_iter().collect();
    for key in &STATS_KEYS[..29] {
        let want = if *key == "cmd-stats" { "1" } else { "0" };
        assert_eq!(map[*key], want, "{key}");
    }
    for (key, want) in [
        ("max-job-size", "65535"),
        ("current-tubes", "1"),
        ("current-connections", "1"),
        ("current-producers", "0"),
        ("current-workers", "0"),
        ("current-waiting", "0"),
        ("total-connections", "1"),
        ("uptime", "0"),
        ("binlog-oldest-index", "0"),
        ("binlog-current-index", "0"),
        ("binlog-records-migrated", "0"),
        ("binlog-records-written", "0"),
        ("binlog-max-size", "10485760"),
    ] {
        assert_eq!(map[key], want, "{key}");
    }
    // The server runs inside this test process.
    assert_eq!(map["pid"], std::process::id().to_string());
}

#[test]
fn stats_quotes_version_hostname_os_and_platform_only() {
    let server = common::start();
    let mut c = server.connect();
    let map = c.stats();
    assert_eq!(map["version"], "\"1.13\"");
    assert_eq!(map["draining"], "false");
    let read = |path: &str| std::fs::read_to_string(path).unwrap().trim_end().to_owned();
    assert_eq!(map["hostname"], format!("\"{}\"", read("/proc/sys/kernel/hostname")));
    // uname's version (`#1 SMP ...`), not its release.
    assert_eq!(map["os"], format!("\"{}\"", read("/proc/sys/kernel/version")));
    assert_eq!(map["platform"], format!("\"{}\"", std::env::consts::ARCH));
    for key in ["rusage-utime", "rusage-stime"] {
        let (secs, micros) = map[key].split_once('.').expect(key);
        assert!(secs.bytes().all(|b| b.is_ascii_digit()), "{key}");
        assert!(micros.len() == 6 && micros.bytes().all(|b| b.is_ascii_digit()), "{key}: {}", map[key]);
    }
}

#[test]
fn stats_id_is_16_lowercase_hex_digits() {
    let a = common::start().connect().stat("id");
    let b = common::start().connect().stat("id");
    for id in [&a, &b] {
        assert_eq!(id.len(), 16, "{id}");
        assert!(id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')), "{id}");
    }
}

// -------------------------------------------------------------------
// stats: cmd-* counting rules
// -------------------------------------------------------------------

#[test]
fn each_successful_command_bumps_only_its_own_counter() {
    let server = common::start();
    let mut c = server.connect();
    let steps = [
        ("put 5 0 60 1\r\nx", "INSERTED 1\r\n", "cmd-put"),
        ("peek 1", "FOUND 1 1\r\nx\r\n", "cmd-peek"),
        ("peek-ready", "FOUND 1 1\r\nx\r\n", "cmd-peek-ready"),
        ("reserve", "RESERVED 1 1\r\nx\r\n", "cmd-reserve"),
        ("touch 1", "TOUCHED\r\n", "cmd-touch"),
        ("release 1 5 0", "RELEASED\r\n", "cmd-release"),
        ("reserve-with-timeout 0", "RESERVED 1 1\r\nx\r\n", "cmd-reserve-with-timeout"),
        ("bury 1 5", "BURIED\r\n", "cmd-bury"),
        ("peek-buried", "FOUND 1 1\r\nx\r\n", "cmd-peek-buried"),
        ("kick 1", "KICKED 1\r\n", "cmd-kick"),
        ("put 5 100 60 1\r\ny", "INSERTED 2\r\n", "cmd-put"),
        ("peek-delayed", "FOUND 2 1\r\ny\r\n", "cmd-peek-delayed"),
        ("delete 2", "DELETED\r\n", "cmd-delete"),
        ("use t", "USING t\r\n", "cmd-use"),
        ("watch t", "WATCHING 2\r\n", "cmd-watch"),
        ("ignore t", "WATCHING 1\r\n", "cmd-ignore"),
        ("list-tube-used", "USING t\r\n", "cmd-list-tube-used"),
        ("list-tubes-watched", "OK 14\r\n---\n- default\n\r\n", "cmd-list-tubes-watched"),
        ("list-tubes", "OK 18\r\n---\n- default\n- t\n\r\n", "cmd-list-tubes"),
        ("pause-tube t 0", "PAUSED\r\n", "cmd-pause-tube"),
    ];
    for (line, reply, key) in steps {
        assert_eq!(counted(&mut c, &[(line, reply)]), moved(&[(key, 1)]), "{line:?}");
    }
    // The document replies, read whole.
    for (line, key) in [("stats-job 1", "cmd-stats-job"), ("stats-tube t", "cmd-stats-tube")] {
        let before = c.stat(key);
        assert!(c.cmd(line).starts_with("OK "), "{line}");
        let after: u64 = c.stat(key).parse().unwrap();
        assert_eq!(after, before.parse::<u64>().unwrap() + 1, "{line}");
    }
    // Every stats so far (two per step, four in the loop above), plus this
    // one: stats counts itself.
    let so_far = 2 * steps.len() + 4 + 1;
    assert_eq!(c.stat("cmd-stats"), so_far.to_string());
}

#[test]
fn commands_rejected_while_parsing_count_nothing() {
    let server = common::start();
    let mut c = server.connect();
    let bad = "BAD_FORMAT\r\n";
    let lines = [
        "put 0 0 1",
        "put 4294967296 0 1 1",
        "put -1 0 1 1",
        "peek x",
        "peek 18446744073709551616",
        "peek-ready ",
        "peek-delayed x",
        "peek-buried ",
        "reserve ",
        "reserve-with-timeout -1",
        "reserve-with-timeout 2147483648",
        "reserve-with-timeout",
        "delete 1 ",
        "release 1 2",
        "use -a",
        "watch ",
        "ignore a*b",
        "bury 1",
        "kick x",
        "touch +1",
        "stats ",
        "stats-job",
        "stats-job x",
        "stats-tube -a",
        "list-tubes ",
        "list-tube-usedx",
        "list-tubes-watched x",
        "pause-tube foo10",
        "pause-tube default*5",
        "stats\0",
    ];
    let mut steps: Vec<(&str, &str)> = lines.iter().map(|l| (*l, bad)).collect();
    // Overlong lines are not commands at all.
    let long_stats = format!("stats{}", " ".repeat(300));
    let long_put = format!("put 0 0 1 1{}", " ".repeat(300));
    steps.push((&long_stats, bad));
    steps.push((&long_put, bad));
    assert_eq!(counted(&mut c, &steps), moved(&[]));
}

#[test]
fn not_found_not_ignored_and_timed_out_are_counted() {
    let server = common::start();
    let mut c = server.connect();
    let nf = "NOT_FOUND\r\n";
    // Holding a ttr-1 job, a reserve gets DEADLINE_SOON at once.
    assert_eq!(c.put(0, 0, 1, "x"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve-job 1"), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(counted(&mut c, &[("reserve", "DEADLINE_SOON\r\n")]), moved(&[("cmd-reserve", 1)]));
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    let steps = [
        ("peek 99", nf),
        ("peek-ready", nf),
        ("peek-delayed", nf),
        ("peek-buried", nf),
        ("delete 99", nf),
        ("release 99 0 0", nf),
        ("bury 99 0", nf),
        ("touch 99", nf),
        ("stats-job 99", nf),
        ("stats-tube nosuch", nf),
        ("pause-tube nosuch 1", nf),
        ("ignore default", "NOT_IGNORED\r\n"),
        ("reserve-with-timeout 0", "TIMED_OUT\r\n"),
        ("kick 5", "KICKED 0\r\n"),
    ];
    let all_one: Vec<(&str, u64)> = [
        "cmd-peek",
        "cmd-peek-ready",
        "cmd-peek-delayed",
        "cmd-peek-buried",
        "cmd-delete",
        "cmd-release",
        "cmd-bury",
        "cmd-touch",
        "cmd-stats-job",
        "cmd-stats-tube",
        "cmd-pause-tube",
        "cmd-ignore",
        "cmd-reserve-with-timeout",
        "cmd-kick",
    ]
    .into_iter()
    .map(|k| (k, 1))
    .collect();
    assert_eq!(counted(&mut c, &steps), moved(&all_one));
}

#[test]
fn delete_of_a_job_reserved_by_another_connection_is_counted() {
    let server = common::start();
    let mut owner = server.connect();
    owner.put_ok("x");
    assert_eq!(owner.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    let mut c = server.connect();
    assert_eq!(counted(&mut c, &[("delete 1", "NOT_FOUND\r\n")]), moved(&[("cmd-delete", 1)]));
}

#[test]
fn put_is_counted_for_job_too_big_expected_crlf_and_trailing_junk() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    // `EXPECTED_CRLF` ends its connection (reference §1.5): another one
    // sends it, and this one counts it.
    let before = cmd_counters(&mut c);
    let mut miscounted = server.connect();
    miscounted.send("put 0 0 1 1\r\nxyz\r\n");
    miscounted.expect("EXPECTED_CRLF\r\n");
    miscounted.expect_closed();
    let mut after = cmd_counters(&mut c);
    *after.get_mut("cmd-stats").unwrap() -= 1;
    let puts_moved = after["cmd-put"] - before["cmd-put"];
    assert_eq!((puts_moved, after["cmd-stats"] - before["cmd-stats"]), (1, 0));
    let steps = [
        ("put 0 0 1 11\r\n01234567890", "JOB_TOO_BIG\r\n"),
        ("put 0 0 1 11 junk\r\n01234567890", "JOB_TOO_BIG\r\n"),
        ("put 0 0 1 1 \r\nx", "BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"),
        ("put 0 0 1 1x\r\nx", "BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n"),
        ("put 0 0 1 1\r\nx", "INSERTED 2\r\n"),
    ];
    assert_eq!(counted(&mut c, &steps), moved(&[("cmd-put", 5)]));
}

#[test]
fn pause_tube_is_counted_before_the_name_check() {
    let server = common::start();
    let mut c = server.connect();
    let long = "a".repeat(201);
    let too_long = format!("pause-tube {long} 1");
    let steps = [
        ("pause-tube -x 1", "BAD_FORMAT\r\n"),
        (too_long.as_str(), "BAD_FORMAT\r\n"),
        ("pause-tube nosuch 1", "NOT_FOUND\r\n"),
        ("pause-tube foo10", "BAD_FORMAT\r\n"),
        ("pause-tubedefault 0", "PAUSED\r\n"),
    ];
    assert_eq!(counted(&mut c, &steps), moved(&[("cmd-pause-tube", 4)]));
}

#[test]
fn reserve_job_kick_job_and_unknown_commands_count_nothing() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    let unknown = "UNKNOWN_COMMAND\r\n";
    let steps = [
        ("reserve-job 1", "RESERVED 1 1\r\nx\r\n"),
        ("reserve-job 99", "NOT_FOUND\r\n"),
        ("kick-job 1", "NOT_FOUND\r\n"),
        ("kick-job 99", "NOT_FOUND\r\n"),
        ("", unknown),
        ("foo", unknown),
        ("PUT 0 0 1 1", unknown),
        ("Stats", unknown),
        ("peek", unknown),
        ("list-tube", unknown),
        ("use\tfoo", unknown),
    ];
    assert_eq!(counted(&mut c, &steps), moved(&[]));
    // kick-job that succeeds is still not cmd-kick.
    assert_eq!(c.cmd("bury 1 0"), "BURIED\r\n");
    assert_eq!(counted(&mut c, &[("kick-job 1", "KICKED\r\n")]), moved(&[]));
}

#[test]
fn quit_counts_nothing() {
    let server = common::start();
    let mut c = server.connect();
    let before = cmd_counters(&mut c);
    let mut q = server.connect();
    q.send("quit\r\n");
    q.expect_closed();
    let mut after = cmd_counters(&mut c);
    *after.get_mut("cmd-stats").unwrap() -= 1;
    assert_eq!(after, before);
}

// -------------------------------------------------------------------
// stats: connections, producers, workers, waiting
// -------------------------------------------------------------------

#[test]
fn current_and_total_connections_count_open_and_accepted_connections() {
    let server = common::start();
    let mut c = server.connect();
    let b = accepted(&server);
    let d = accepted(&server);
    let map = c.stats();
    assert_eq!(map["current-connections"], "3");
    assert_eq!(map["total-connections"], "3");
    drop(b);
    drop(d);
    await_stat(&mut c, "current-connections", "1");
    assert_eq!(c.stat("total-connections"), "3");
}

#[test]
fn producers_are_connections_whose_put_got_past_the_size_and_junk_checks() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    let mut big = server.connect();
    assert_eq!(big.cmd("put 0 0 1 11\r\n01234567890"), "JOB_TOO_BIG\r\n");
    let mut junk = server.connect();
    junk.send("put 0 0 1 1 \r\nx\r\n");
    junk.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(c.stat("current-producers"), "0");
    // A body without its CRLF: `EXPECTED_CRLF`, then the close, which
    // ends whatever the connection was (reference §1.5).
    let mut crlf = server.connect();
    crlf.send("put 0 0 1 1\r\nxyz\r\n");
    crlf.expect("EXPECTED_CRLF\r\n");
    crlf.expect_closed();
    await_stat(&mut c, "current-producers", "0");
    let mut good = server.connect();
    good.put_ok("x");
    good.put_ok("y");
    assert_eq!(c.stat("current-producers"), "1");
    let mut other = server.connect();
    other.put_ok("z");
    assert_eq!(c.stat("current-producers"), "2");
    drop(other);
    await_stat(&mut c, "current-producers", "1");
    drop(good);
    await_stat(&mut c, "current-producers", "0");
}

#[test]
fn workers_are_set_by_any_reserve_and_by_a_successful_reserve_job() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    let mut timed_out = server.connect();
    assert_eq!(timed_out.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(timed_out.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.stat("current-workers"), "1");
    let mut missed = server.connect();
    assert_eq!(missed.cmd("reserve-job 1"), "NOT_FOUND\r\n");
    assert_eq!(missed.cmd("reserve-job 99"), "NOT_FOUND\r\n");
    assert_eq!(c.stat("current-workers"), "1");
    c.put_ok("y");
    let mut taker = server.connect();
    assert_eq!(taker.cmd("reserve-job 2"), "RESERVED 2 1\r\ny\r\n");
    assert_eq!(c.stat("current-workers"), "2");
    let mut deadline = server.connect();
    deadline.put_ok("z");
    assert_eq!(deadline.cmd("put 0 0 1 1\r\nw"), "INSERTED 4\r\n");
    assert_eq!(deadline.cmd("reserve-job 4"), "RESERVED 4 1\r\nw\r\n");
    assert_eq!(deadline.cmd("ignore default"), "NOT_IGNORED\r\n");
    assert_eq!(deadline.cmd("watch empty"), "WATCHING 2\r\n");
    assert_eq!(deadline.cmd("ignore default"), "WATCHING 1\r\n");
    // A reserve that ends in DEADLINE_SOON makes a worker too.
    assert_eq!(deadline.cmd("reserve"), "DEADLINE_SOON\r\n");
    assert_eq!(c.stat("current-workers"), "3");
    drop(timed_out);
    drop(taker);
    await_stat(&mut c, "current-workers", "1");
}

#[test]
fn current_waiting_counts_connections_blocked_in_reserve() {
    let server = common::start();
    let mut c = server.connect();
    let mut w1 = server.connect();
    assert_eq!(w1.cmd("watch other"), "WATCHING 2\r\n");
    w1.send("reserve\r\n");
    let mut w2 = server.connect();
    w2.send("reserve-with-timeout 100\r\n");
    await_stat(&mut c, "current-waiting", "2");
    assert_eq!(tube_stat(&mut c, "default", "current-waiting"), "2");
    // A waiter counts in every tube it watches.
    assert_eq!(tube_stat(&mut c, "other", "current-waiting"), "1");
    c.put_ok("a");
    c.put_ok("b");
    let mut got = vec![w1.reply(), w2.reply()];
    got.sort();
    assert_eq!(got, ["RESERVED 1 1\r\na\r\n", "RESERVED 2 1\r\nb\r\n"]);
    let map = c.stats();
    assert_eq!(map["current-waiting"], "0");
    assert_eq!(map["current-workers"], "2");
    assert_eq!(tube_stat(&mut c, "default", "current-waiting"), "0");
    // Closing a blocked connection stops its wait.
    let mut w3 = server.connect();
    w3.send("reserve\r\n");
    await_stat(&mut c, "current-waiting", "1");
    drop(w3);
    await_stat(&mut c, "current-waiting", "0");
}

// -------------------------------------------------------------------
// stats: jobs
// -------------------------------------------------------------------

#[test]
fn current_jobs_count_each_state_and_urgent_means_ready_with_pri_below_1024() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 60, "a"), "INSERTED 1\r\n");
    assert_eq!(c.put(1023, 0, 60, "b"), "INSERTED 2\r\n");
    assert_eq!(c.put(1024, 0, 60, "c"), "INSERTED 3\r\n");
    assert_eq!(c.put(4294967295, 0, 60, "d"), "INSERTED 4\r\n");
    assert_eq!(c.put(0, 100, 60, "e"), "INSERTED 5\r\n");
    assert_eq!(c.cmd("use t"), "USING t\r\n");
    assert_eq!(c.put(5, 0, 60, "f"), "INSERTED 6\r\n");
    assert_eq!(c.put(5, 0, 60, "g"), "INSERTED 7\r\n");
    assert_eq!(c.cmd("reserve-job 6"), "RESERVED 6 1\r\nf\r\n");
    assert_eq!(c.cmd("reserve-job 7"), "RESERVED 7 1\r\ng\r\n");
    assert_eq!(c.cmd("bury 7 2000"), "BURIED\r\n");
    // A reserved urgent job is not counted as urgent.
    assert_eq!(c.cmd("reserve-job 1"), "RESERVED 1 1\r\na\r\n");
    let map = c.stats();
    let counts: Vec<&str> = STATS_KEYS[..5].iter().map(|k| map[*k].as_str()).collect();
    assert_eq!(counts, ["1", "3", "2", "1", "1"]);
    let default = c.yaml_map("stats-tube default");
    let counts: Vec<&str> = TUBE_KEYS[1..6].iter().map(|k| default[*k].as_str()).collect();
    assert_eq!(counts, ["1", "3", "1", "1", "0"]);
    let t = c.yaml_map("stats-tube t");
    let counts: Vec<&str> = TUBE_KEYS[1..6].iter().map(|k| t[*k].as_str()).collect();
    assert_eq!(counts, ["0", "0", "1", "0", "1"]);
    // Releasing with a low priority makes it urgent again.
    assert_eq!(c.cmd("release 1 1023 0"), "RELEASED\r\n");
    assert_eq!(c.stat("current-jobs-urgent"), "2");
}

#[test]
fn total_jobs_counts_only_accepted_puts_and_never_goes_down() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    assert_eq!(c.cmd("put 0 0 1 11\r\n01234567890"), "JOB_TOO_BIG\r\n");
    let mut miscounted = server.connect();
    miscounted.send("put 0 0 1 1\r\nxyz\r\n");
    miscounted.expect("EXPECTED_CRLF\r\n");
    miscounted.expect_closed();
    c.send("put 0 0 1 1 \r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(c.stat("total-jobs"), "0");
    assert_eq!(c.put_ok("a"), 2);
    assert_eq!(c.put(0, 100, 1, "b"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("use t"), "USING t\r\n");
    assert_eq!(c.put_ok("c"), 4);
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(c.cmd("delete 4"), "DELETED\r\n");
    assert_eq!(c.stat("total-jobs"), "3");
    assert_eq!(tube_stat(&mut c, "default", "total-jobs"), "2");
    assert_eq!(tube_stat(&mut c, "t", "total-jobs"), "1");
}

#[test]
fn job_timeouts_counts_ttr_expiries() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 1, "x"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    // The other worker gets the job when its 1 s TTR runs out.
    let mut other = server.connect();
    assert_eq!(other.cmd(&common::reserve_guarded()), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(c.stat("job-timeouts"), "1");
    let job = c.yaml_map("stats-job 1");
    assert_eq!((job["reserves"].as_str(), job["timeouts"].as_str()), ("2", "1"));
    assert_eq!(job["releases"], "0");
    // Not counted as a delete, release or anything else.
    assert_eq!(c.cmd("release 1 0 0"), "NOT_FOUND\r\n");
}

// -------------------------------------------------------------------
// stats-job
// -------------------------------------------------------------------

#[test]
fn stats_job_matches_the_146_byte_example() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 10, "hello"), "INSERTED 1\r\n");
    assert_eq!(
        c.cmd("stats-job 1"),
        "OK 146\r\n---\nid: 1\ntube: \"default\"\nstate: ready\npri: 0\nage: 0\ndelay: 0\n\
         ttr: 10\ntime-left: 0\nfile: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\nburies: 0\n\
         kicks: 0\n\r\n"
    );
}

#[test]
fn stats_job_keys_come_in_order_and_only_tube_is_quoted() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use my.tube"), "USING my.tube\r\n");
    assert_eq!(c.put(7, 0, 0, "x"), "INSERTED 1\r\n");
    let entries = yaml_entries(&c.cmd("stats-job 01"));
    assert_eq!(keys(&entries), JOB_KEYS);
    let values: Vec<&str> = entries.iter().map(|(_, v)| v.as_str()).collect();
    // ttr 0 is stored as 1.
    assert_eq!(values, ["1", "\"my.tube\"", "ready", "7", "0", "0", "1", "0", "0", "0", "0", "0", "0", "0"]);
}

#[test]
fn stats_job_age_counts_from_the_put_line_not_the_end_of_the_body() {
    let server = common::start();
    let mut c = server.connect();
    let started = std::time::Instant::now();
    c.send("put 0 0 10 1\r\n");
    // Once the server has read the put line (its client counts as a
    // producer from then: by count, not by time, on a loaded machine),
    // await a second of the body's absence by a reserve on another
    // connection that times out.
    let mut clock = server.connect();
    assert!(common::settle(common::HANG_GUARD, || clock.stat("current-producers") == "1"));
    assert_eq!(clock.cmd("reserve-with-timeout 1"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("x"), "INSERTED 1\r\n");
    // 1 at once after the body; more only if this machine stalled the
    // test past another whole second.
    let age: u64 = job_stat(&mut c, 1, "age").parse().unwrap();
    assert!((1..=started.elapsed().as_secs()).contains(&age), "age {age} after {:?}", started.elapsed());
}

#[test]
fn stats_job_time_left_counts_down_for_reserved_and_delayed_jobs() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 5, "r"), "INSERTED 1\r\n");
    assert_eq!(c.put(0, 5, 5, "d"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\nr\r\n");
    let reserved = c.yaml_map("stats-job 1");
    assert_eq!(reserved["state"], "reserved");
    assert_eq!(reserved["time-left"], "4");
    let delayed = c.yaml_map("stats-job 2");
    assert_eq!(delayed["state"], "delayed");
    assert_eq!(delayed["delay"], "5");
    assert_eq!(delayed["time-left"], "4");
    // Buried and ready jobs have none.
    assert_eq!(c.cmd("bury 1 0"), "BURIED\r\n");
    assert_eq!(job_stat(&mut c, 1, "state"), "buried");
    assert_eq!(job_stat(&mut c, 1, "time-left"), "0");
    assert_eq!(c.cmd("kick-job 2"), "KICKED\r\n");
    assert_eq!(job_stat(&mut c, 2, "state"), "ready");
    assert_eq!(job_stat(&mut c, 2, "time-left"), "0");
    assert_eq!(job_stat(&mut c, 2, "delay"), "5");
}

#[test]
fn stats_job_counts_reserves_releases_buries_and_kicks() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    for line in [
        "reserve",
        "release 1 7 0",
        "reserve-with-timeout 0",
        "bury 1 8",
        "kick 1",
        "reserve-job 1",
        "release 1 9 100",
        "kick-job 1",
        "reserve-job 1",
        "bury 1 10",
    ] {
        let reply = c.cmd(line);
        assert!(!reply.starts_with("NOT_FOUND") && !reply.starts_with("BAD"), "{line}: {reply:?}");
    }
    let job = c.yaml_map("stats-job 1");
    let counters: Vec<&str> = JOB_KEYS[9..].iter().map(|k| job[*k].as_str()).collect();
    // reserves, timeouts, releases, buries, kicks
    assert_eq!(counters, ["4", "0", "2", "2", "2"]);
    assert_eq!(job["state"], "buried");
    assert_eq!(job["pri"], "10");
    assert_eq!(job["delay"], "100");
}

#[test]
fn stats_job_and_stats_tube_say_not_found_for_what_does_not_exist() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("stats-job 1"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("stats-job 18446744073709551615"), "NOT_FOUND\r\n");
    c.put_ok("x");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("stats-job 1"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("stats-tube nosuch"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("stats-tube Default"), "NOT_FOUND\r\n");
}

// -------------------------------------------------------------------
// stats-tube
// -------------------------------------------------------------------

#[test]
fn stats_tube_default_on_a_fresh_server_is_exact() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(
        c.cmd("stats-tube default"),
        "OK 267\r\n---\nname: \"default\"\ncurrent-jobs-urgent: 0\ncurrent-jobs-ready: 0\n\
         current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\n\
         total-jobs: 0\ncurrent-using: 1\ncurrent-watching: 1\ncurrent-waiting: 0\n\
         cmd-delete: 0\ncmd-pause-tube: 0\npause: 0\npause-time-left: 0\n\r\n"
    );
}

#[test]
fn stats_tube_keys_come_in_order_with_the_name_quoted() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("watch a(b)"), "WATCHING 2\r\n");
    let entries = yaml_entries(&c.cmd("stats-tube a(b)"));
    assert_eq!(keys(&entries), TUBE_KEYS);
    assert_eq!(entries[0].1, "\"a(b)\"");
}

#[test]
fn stats_tube_counts_users_watchers_and_jobs() {
    let server = common::start();
    let mut c = server.connect();
    let mut u1 = server.connect();
    let mut u2 = server.connect();
    assert_eq!(u1.cmd("use t"), "USING t\r\n");
    assert_eq!(u2.cmd("use t"), "USING t\r\n");
    assert_eq!(u2.cmd("watch t"), "WATCHING 2\r\n");
    assert_eq!(u2.cmd("watch t"), "WATCHING 2\r\n");
    u1.put_ok("a");
    u1.put_ok("b");
    u2.put_ok("c");
    let t = c.yaml_map("stats-tube t");
    let got: Vec<&str> = TUBE_KEYS[1..10].iter().map(|k| t[*k].as_str()).collect();
    assert_eq!(got, ["3", "3", "0", "0", "0", "3", "2", "1", "0"]);
    assert_eq!(tube_stat(&mut c, "default", "current-using"), "1");
    assert_eq!(tube_stat(&mut c, "default", "current-watching"), "3");
    drop(u1);
    drop(u2);
    await_stat(&mut c, "current-connections", "1");
    let t = c.yaml_map("stats-tube t");
    assert_eq!((t["current-using"].as_str(), t["current-watching"].as_str()), ("0", "0"));
    assert_eq!(t["current-jobs-ready"], "3");
}

#[test]
fn stats_tube_cmd_delete_counts_only_successful_deletes_in_that_tube() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("d");
    assert_eq!(c.cmd("use t"), "USING t\r\n");
    c.put_ok("t1");
    c.put_ok("t2");
    let mut other = server.connect();
    assert_eq!(other.cmd("reserve-job 3"), "RESERVED 3 2\r\nt2\r\n");
    assert_eq!(c.cmd("delete 3"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("delete 99"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(c.cmd("delete 2"), "NOT_FOUND\r\n");
    assert_eq!(tube_stat(&mut c, "t", "cmd-delete"), "1");
    assert_eq!(tube_stat(&mut c, "default", "cmd-delete"), "0");
    // Deleting from a tube other than the used one counts there.
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(tube_stat(&mut c, "default", "cmd-delete"), "1");
    assert_eq!(tube_stat(&mut c, "t", "cmd-delete"), "1");
    assert_eq!(c.stat("cmd-delete"), "5");
}

#[test]
fn stats_tube_pause_is_5_and_pause_time_left_4_right_after_pause_tube_5() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use t"), "USING t\r\n");
    assert_eq!(c.cmd("pause-tube -t 5"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("pause-tube nosuch 5"), "NOT_FOUND\r\n");
    assert_eq!(tube_stat(&mut c, "t", "cmd-pause-tube"), "0");
    assert_eq!(c.cmd("pause-tube t 5"), "PAUSED\r\n");
    let t = c.yaml_map("stats-tube t");
    assert_eq!(t["pause"], "5");
    assert_eq!(t["pause-time-left"], "4");
    assert_eq!(t["cmd-pause-tube"], "1");
    assert_eq!(c.cmd("pause-tube t 0"), "PAUSED\r\n");
    let t = c.yaml_map("stats-tube t");
    assert_eq!((t["pause"].as_str(), t["pause-time-left"].as_str()), ("0", "0"));
    assert_eq!(t["cmd-pause-tube"], "2");
    assert_eq!(tube_stat(&mut c, "default", "cmd-pause-tube"), "0");
    assert_eq!(c.stat("cmd-pause-tube"), "4");
}

#[test]
fn stats_tube_pause_goes_back_to_0_when_the_pause_ends() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use t"), "USING t\r\n");
    c.put_ok("x");
    let pausing = Instant::now();
    assert_eq!(c.cmd("pause-tube t 1"), "PAUSED\r\n");
    let t = c.yaml_map("stats-tube t");
    // Paused still, unless a loaded machine took the second to ask.
    if pausing.elapsed() < Duration::from_secs(1) {
        assert_eq!((t["pause"].as_str(), t["pause-time-left"].as_str()), ("1", "0"));
    }
    let mut w = server.connect();
    assert_eq!(w.cmd("watch t"), "WATCHING 2\r\n");
    // Served when the pause ends.
    assert_eq!(w.cmd(&common::reserve_guarded()), "RESERVED 1 1\r\nx\r\n");
    let t = c.yaml_map("stats-tube t");
    assert_eq!((t["pause"].as_str(), t["pause-time-left"].as_str()), ("0", "0"));
}

#[test]
fn stats_tube_figures_start_again_when_a_tube_is_destroyed_and_recreated() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use t"), "USING t\r\n");
    c.put_ok("x");
    assert_eq!(c.cmd("pause-tube t 100"), "PAUSED\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("use default"), "USING default\r\n");
    assert_eq!(c.cmd("stats-tube t"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("watch t"), "WATCHING 2\r\n");
    let t = c.yaml_map("stats-tube t");
    for key in ["total-jobs", "cmd-delete", "cmd-pause-tube", "pause", "pause-time-left"] {
        assert_eq!(t[key], "0", "{key}");
    }
}

#[test]
fn stats_tube_never_creates_a_tube() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("stats-tube ghost"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("stats-tube ghost"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 14\r\n---\n- default\n\r\n");
    assert_eq!(c.stat("current-tubes"), "1");
    assert_eq!(c.cmd("pause-tube ghost 1"), "NOT_FOUND\r\n");
    assert_eq!(c.stat("current-tubes"), "1");
}
