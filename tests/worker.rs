//! reserve, delete, release, bury, touch, kick: what a worker sees.
mod common;

use std::time::{Duration, Instant};

use common::{Client, TestServer};

/// Long enough to notice a reply that should not come.
const QUIET: Duration = Duration::from_millis(200);

/// Jobs in every state of reference §3.20, all in `default`:
/// 1 ready, 2 delayed, 3 buried, 4 reserved by `me`, 5 reserved by `other`;
/// job 99 does not exist.
struct States {
    me: Client,
    other: Client,
}

const READY: u64 = 1;
const DELAYED: u64 = 2;
const BURIED: u64 = 3;
const MINE: u64 = 4;
const OTHERS: u64 = 5;
const MISSING: u64 = 99;

fn states(server: &TestServer) -> States {
    let mut me = server.connect();
    let mut other = server.connect();
    assert_eq!(me.put(0, 0, 100, "ready"), "INSERTED 1\r\n");
    assert_eq!(me.put(0, 100, 100, "delayed"), "INSERTED 2\r\n");
    assert_eq!(me.put(0, 0, 100, "buried"), "INSERTED 3\r\n");
    assert_eq!(me.put(0, 0, 100, "mine"), "INSERTED 4\r\n");
    assert_eq!(me.put(0, 0, 100, "others"), "INSERTED 5\r\n");
    assert_eq!(me.cmd("reserve-job 3"), "RESERVED 3 6\r\nburied\r\n");
    assert_eq!(me.cmd("bury 3 0"), "BURIED\r\n");
    assert_eq!(me.cmd("reserve-job 4"), "RESERVED 4 4\r\nmine\r\n");
    assert_eq!(other.cmd("reserve-job 5"), "RESERVED 5 6\r\nothers\r\n");
    States { me, other }
}

fn state(c: &mut Client, id: u64) -> String {
    c.yaml_map(&format!("stats-job {id}"))["state"].clone()
}

// ---------------------------------------------------------------------
// reserve
// ---------------------------------------------------------------------

#[test]
fn reserve_returns_a_ready_job_with_its_body() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("hello");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 5\r\nhello\r\n");
    let job = c.yaml_map("stats-job 1");
    assert_eq!(job["state"], "reserved");
    assert_eq!(job["reserves"], "1");
}

#[test]
fn reserve_with_extra_bytes_is_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("reserve "), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("reservex"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("reserve-with-timeout"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("reserve-with-timeout "), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("reserve-with-timeout -1"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 2147483648"), "BAD_FORMAT\r\n");
}

#[test]
fn reserve_with_timeout_zero_times_out_at_once_when_nothing_is_ready() {
    let server = common::start();
    let mut c = server.connect();
    c.put(0, 100, 60, "delayed");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0 junk"), "TIMED_OUT\r\n");
}

#[test]
fn reserve_with_timeout_zero_returns_a_ready_job() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\nx\r\n");
}

#[test]
fn reserve_with_timeout_one_times_out_after_a_second() {
    let server = common::start();
    let mut c = server.connect();
    let started = Instant::now();
    assert_eq!(c.cmd("reserve-with-timeout 1"), "TIMED_OUT\r\n");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(950), "{waited:?}");
}

#[test]
fn blocked_reserve_is_served_by_a_put_from_another_connection() {
    let server = common::start();
    let mut worker = server.connect();
    let mut producer = server.connect();
    worker.send("reserve\r\n");
    worker.expect_silence(QUIET);
    assert_eq!(producer.put(0, 0, 60, "job"), "INSERTED 1\r\n");
    worker.expect("RESERVED 1 3\r\njob\r\n");
}

#[test]
fn commands_sent_during_a_blocked_reserve_run_after_it() {
    let server = common::start();
    let mut worker = server.connect();
    let mut producer = server.connect();
    worker.send("reserve\r\nlist-tube-used\r\n");
    worker.expect_silence(QUIET);
    producer.put_ok("job");
    worker.expect("RESERVED 1 3\r\njob\r\nUSING default\r\n");
}

#[test]
fn reserve_while_holding_a_ttr_one_job_is_deadline_soon() {
    let server = common::start();
    let mut c = server.connect();
    c.put(0, 0, 1, "x");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(c.cmd("reserve"), "DEADLINE_SOON\r\n");
}

// ---------------------------------------------------------------------
// Ordering
// ---------------------------------------------------------------------

#[test]
fn reserve_takes_smallest_priority_then_smallest_id() {
    let server = common::start();
    let mut c = server.connect();
    c.put(5, 0, 60, "a");
    c.put(1, 0, 60, "b");
    c.put(5, 0, 60, "c");
    c.put(1, 0, 60, "d");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 1\r\nb\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 4 1\r\nd\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 3 1\r\nc\r\n");
}

#[test]
fn released_job_goes_ahead_of_newer_jobs_with_the_same_priority() {
    let server = common::start();
    let mut c = server.connect();
    c.put(7, 0, 60, "old");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 3\r\nold\r\n");
    c.put(7, 0, 60, "new");
    assert_eq!(c.cmd("release 1 7 0"), "RELEASED\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 3\r\nold\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 3\r\nnew\r\n");
}

#[test]
fn release_with_a_new_priority_reorders_the_job() {
    let server = common::start();
    let mut c = server.connect();
    c.put(1, 0, 60, "a");
    c.put(5, 0, 60, "b");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(c.cmd("release 1 9 0"), "RELEASED\r\n");
    assert_eq!(c.yaml_map("stats-job 1")["pri"], "9");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 1\r\nb\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
}

// ---------------------------------------------------------------------
// The state table of reference §3.20, one command per test
// ---------------------------------------------------------------------

#[test]
fn delete_follows_the_state_table() {
    let server = common::start();
    let States { mut me, mut other } = states(&server);
    assert_eq!(me.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(me.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(me.cmd("delete 3"), "DELETED\r\n");
    assert_eq!(me.cmd("delete 4"), "DELETED\r\n");
    assert_eq!(me.cmd("delete 5"), "NOT_FOUND\r\n");
    assert_eq!(me.cmd("delete 99"), "NOT_FOUND\r\n");
    for id in [READY, DELAYED, BURIED, MINE] {
        assert_eq!(me.cmd(&format!("peek {id}")), "NOT_FOUND\r\n");
    }
    assert_eq!(state(&mut other, OTHERS), "reserved");
    assert_eq!(me.cmd("delete 4"), "NOT_FOUND\r\n");
    assert_eq!(other.cmd("delete 5"), "DELETED\r\n");
}

#[test]
fn release_follows_the_state_table() {
    let server = common::start();
    let States { mut me, mut other } = states(&server);
    for id in [READY, DELAYED, BURIED, OTHERS, MISSING] {
        assert_eq!(me.cmd(&format!("release {id} 0 0")), "NOT_FOUND\r\n");
    }
    assert_eq!(me.cmd("release 4 0 0"), "RELEASED\r\n");
    assert_eq!(state(&mut me, MINE), "ready");
    assert_eq!(state(&mut me, DELAYED), "delayed");
    assert_eq!(state(&mut me, BURIED), "buried");
    assert_eq!(state(&mut other, OTHERS), "reserved");
    assert_eq!(me.yaml_map("stats-job 4")["releases"], "1");
    assert_eq!(me.yaml_map("stats-job 5")["releases"], "0");
}

#[test]
fn bury_follows_the_state_table() {
    let server = common::start();
    let States { mut me, mut other } = states(&server);
    for id in [READY, DELAYED, BURIED, OTHERS, MISSING] {
        assert_eq!(me.cmd(&format!("bury {id} 0")), "NOT_FOUND\r\n");
    }
    assert_eq!(me.cmd("bury 4 0"), "BURIED\r\n");
    assert_eq!(state(&mut me, MINE), "buried");
    assert_eq!(state(&mut me, READY), "ready");
    assert_eq!(state(&mut me, DELAYED), "delayed");
    assert_eq!(state(&mut other, OTHERS), "reserved");
    assert_eq!(me.yaml_map("stats-job 3")["buries"], "1");
}

#[test]
fn touch_follows_the_state_table() {
    let server = common::start();
    let States { mut me, mut other } = states(&server);
    for id in [READY, DELAYED, BURIED, OTHERS, MISSING] {
        assert_eq!(me.cmd(&format!("touch {id}")), "NOT_FOUND\r\n");
    }
    assert_eq!(me.cmd("touch 4"), "TOUCHED\r\n");
    assert_eq!(other.cmd("touch 5"), "TOUCHED\r\n");
    assert_eq!(state(&mut me, MINE), "reserved");
}

#[test]
fn kick_job_follows_the_state_table() {
    let server = common::start();
    let States { mut me, mut other } = states(&server);
    for id in [READY, MINE, OTHERS, MISSING] {
        assert_eq!(me.cmd(&format!("kick-job {id}")), "NOT_FOUND\r\n");
    }
    assert_eq!(me.cmd("kick-job 2"), "KICKED\r\n");
    assert_eq!(me.cmd("kick-job 3"), "KICKED\r\n");
    assert_eq!(state(&mut me, DELAYED), "ready");
    assert_eq!(state(&mut me, BURIED), "ready");
    assert_eq!(me.yaml_map("stats-job 2")["kicks"], "1");
    assert_eq!(me.yaml_map("stats-job 3")["kicks"], "1");
    assert_eq!(state(&mut other, OTHERS), "reserved");
    assert_eq!(state(&mut me, MINE), "reserved");
}

#[test]
fn reserve_job_follows_the_state_table() {
    let server = common::start();
    let States { mut me, mut other } = states(&server);
    assert_eq!(other.cmd("reserve-job 1"), "RESERVED 1 5\r\nready\r\n");
    assert_eq!(other.cmd("reserve-job 2"), "RESERVED 2 7\r\ndelayed\r\n");
    assert_eq!(other.cmd("reserve-job 3"), "RESERVED 3 6\r\nburied\r\n");
    // Reserved by me, reserved by another, missing.
    assert_eq!(other.cmd("reserve-job 5"), "NOT_FOUND\r\n");
    assert_eq!(other.cmd("reserve-job 4"), "NOT_FOUND\r\n");
    assert_eq!(other.cmd("reserve-job 99"), "NOT_FOUND\r\n");
    for id in [READY, DELAYED, BURIED] {
        assert_eq!(state(&mut me, id), "reserved");
        assert_eq!(me.cmd(&format!("delete {id}")), "NOT_FOUND\r\n");
        assert_eq!(other.cmd(&format!("release {id} 0 0")), "RELEASED\r\n");
    }
}

#[test]
fn peek_and_stats_job_find_every_state() {
    let server = common::start();
    // Keep `other` connected: its reservation ends when it closes.
    let States { mut me, other: _other } = states(&server);
    assert_eq!(me.cmd("peek 1"), "FOUND 1 5\r\nready\r\n");
    assert_eq!(me.cmd("peek 2"), "FOUND 2 7\r\ndelayed\r\n");
    assert_eq!(me.cmd("peek 3"), "FOUND 3 6\r\nburied\r\n");
    assert_eq!(me.cmd("peek 4"), "FOUND 4 4\r\nmine\r\n");
    assert_eq!(me.cmd("peek 5"), "FOUND 5 6\r\nothers\r\n");
    assert_eq!(me.cmd("peek 99"), "NOT_FOUND\r\n");
    let states: Vec<String> = (1..=5).map(|id| state(&mut me, id)).collect();
    assert_eq!(states, ["ready", "delayed", "buried", "reserved", "reserved"]);
    assert_eq!(me.cmd("stats-job 99"), "NOT_FOUND\r\n");
}

#[test]
fn reserve_job_takes_a_job_from_an_unwatched_tube() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use elsewhere");
    c.put_ok("x");
    c.cmd("use default");
    assert_eq!(c.cmd("reserve-job 1"), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(c.cmd("reserve-job 1"), "NOT_FOUND\r\n");
}

// ---------------------------------------------------------------------
// release, bury, touch details
// ---------------------------------------------------------------------

#[test]
fn release_with_delay_makes_job_delayed() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    c.cmd("reserve");
    assert_eq!(c.cmd("release 1 3 100"), "RELEASED\r\n");
    let job = c.yaml_map("stats-job 1");
    assert_eq!(job["state"], "delayed");
    assert_eq!(job["delay"], "100");
    assert_eq!(job["pri"], "3");
    assert_eq!(c.cmd("peek-delayed"), "FOUND 1 1\r\nx\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

#[test]
fn release_with_delay_one_becomes_ready_a_second_later() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    c.cmd("reserve");
    assert_eq!(c.cmd("release 1 0 1"), "RELEASED\r\n");
    assert_eq!(c.cmd(&common::reserve_guarded()), "RESERVED 1 1\r\nx\r\n");
}

#[test]
fn release_serves_a_blocked_waiter() {
    let server = common::start();
    let mut a = server.connect();
    let mut b = server.connect();
    a.put_ok("x");
    a.cmd("reserve");
    b.send("reserve\r\n");
    b.expect_silence(QUIET);
    assert_eq!(a.cmd("release 1 0 0"), "RELEASED\r\n");
    b.expect("RESERVED 1 1\r\nx\r\n");
}

#[test]
fn bury_sets_the_priority_and_appends_to_the_buried_list() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("a");
    c.put_ok("b");
    c.cmd("reserve-job 2");
    c.cmd("reserve-job 1");
    assert_eq!(c.cmd("bury 2 42"), "BURIED\r\n");
    assert_eq!(c.cmd("bury 1 0"), "BURIED\r\n");
    assert_eq!(c.yaml_map("stats-job 2")["pri"], "42");
    assert_eq!(c.cmd("peek-buried"), "FOUND 2 1\r\nb\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

#[test]
fn job_commands_with_bad_arguments_are_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "delete 1 ",
        "delete +1",
        "release 1 2",
        "release 1x 2 3",
        "release 12 3",
        "release 1 2 3 4",
        "bury 1",
        "bury 1 2 3",
        "touch x",
        "kick-job ",
        "reserve-job ",
        "release 1 4294967296 0",
    ] {
        assert_eq!(c.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    for line in ["delete", "release", "bury", "touch", "kick-job"] {
        assert_eq!(c.cmd(line), "UNKNOWN_COMMAND\r\n", "{line:?}");
    }
}

#[test]
fn touch_restarts_the_full_ttr() {
    let server = common::start();
    let mut c = server.connect();
    c.put(0, 0, 100, "x");
    c.cmd("reserve");
    assert_eq!(c.cmd("touch 1"), "TOUCHED\r\n");
    let left: u32 = c.yaml_map("stats-job 1")["time-left"].parse().unwrap();
    assert!((98..=100).contains(&left), "{left}");
}

/// The `time-left` of job `id`, as `c` reads it.
fn time_left(c: &mut Client, id: u64) -> u32 {
    c.yaml_map(&format!("stats-job {id}"))["time-left"].parse().unwrap()
}

/// tuber's `touch-all` (reference §3.31): every job the connection holds
/// gets a full TTR of its own from now, and the count says how many it
/// still holds: a job whose TTR ran out is not among them.
#[test]
fn touch_all_gives_each_held_job_its_own_fresh_ttr_and_counts_them() {
    let server = common::start();
    let (mut worker, mut other) = (server.connect(), server.connect());
    assert_eq!(worker.put(0, 0, 1, "lapses"), "INSERTED 1\r\n");
    assert_eq!(worker.put(0, 0, 3, "short"), "INSERTED 2\r\n");
    assert_eq!(worker.put(0, 0, 100, "long"), "INSERTED 3\r\n");
    assert_eq!(worker.put(0, 0, 100, "theirs"), "INSERTED 4\r\n");
    worker.send("reserve-batch 3\r\n");
    worker.expect("RESERVED_BATCH 3\r\nRESERVED 1 6\r\nlapses\r\nRESERVED 2 5\r\nshort\r\n");
    worker.expect("RESERVED 3 4\r\nlong\r\n");
    assert_eq!(other.cmd("reserve"), "RESERVED 4 6\r\ntheirs\r\n");
    // Job 1's TTR runs out; the others run down.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(time_left(&mut worker, 3) <= 98);
    assert_eq!(worker.cmd("touch-all"), "TOUCHED_ALL 2\r\n");
    assert_eq!(state(&mut worker, 1), "ready");
    // Each its own TTR, none levelled onto another's.
    assert!((2..=3).contains(&time_left(&mut worker, 2)));
    assert!((99..=100).contains(&time_left(&mut worker, 3)));
    // Another's job is not touched.
    assert!(time_left(&mut worker, 4) <= 98);
    assert_eq!(worker.stat("cmd-touch"), "2");
    // A job let go is no longer counted; none held is 0, counted nowhere.
    assert_eq!(worker.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(worker.cmd("touch-all"), "TOUCHED_ALL 1\r\n");
    assert_eq!(worker.cmd("release 3 0 0"), "RELEASED\r\n");
    assert_eq!(worker.cmd("touch-all"), "TOUCHED_ALL 0\r\n");
    assert_eq!(server.connect().cmd("touch-all"), "TOUCHED_ALL 0\r\n");
    assert_eq!(worker.stat("cmd-touch"), "3");
    // The whole line only, as in tuber.
    for line in ["touch-all ", "touch-all 1", "touch-allx"] {
        assert_eq!(worker.cmd(line), "UNKNOWN_COMMAND\r\n", "{line:?}");
    }
}

// ---------------------------------------------------------------------
// kick
// ---------------------------------------------------------------------

/// Buries job `id`, which must be ready or delayed, through `c`.
fn bury(c: &mut Client, id: u64) {
    assert!(c.cmd(&format!("reserve-job {id}")).starts_with("RESERVED "));
    assert_eq!(c.cmd(&format!("bury {id} 0")), "BURIED\r\n");
}

#[test]
fn kick_takes_buried_jobs_first_and_only_then_delayed_ones() {
    let server = common::start();
    let mut c = server.connect();
    c.put(0, 100, 60, "delayed");
    c.put_ok("buried");
    bury(&mut c, 2);
    assert_eq!(c.cmd("kick 10"), "KICKED 1\r\n");
    assert_eq!(state(&mut c, 2), "ready");
    assert_eq!(state(&mut c, 1), "delayed");
    assert_eq!(c.cmd("kick 10"), "KICKED 1\r\n");
    assert_eq!(state(&mut c, 1), "ready");
    assert_eq!(c.cmd("kick 10"), "KICKED 0\r\n");
}

#[test]
fn kick_stops_at_the_bound_oldest_buried_first() {
    let server = common::start();
    let mut c = server.connect();
    for body in ["a", "b", "c"] {
        c.put_ok(body);
    }
    bury(&mut c, 3);
    bury(&mut c, 1);
    bury(&mut c, 2);
    assert_eq!(c.cmd("kick 2"), "KICKED 2\r\n");
    assert_eq!(state(&mut c, 3), "ready");
    assert_eq!(state(&mut c, 1), "ready");
    assert_eq!(c.cmd("peek-buried"), "FOUND 2 1\r\nb\r\n");
    assert_eq!(c.yaml_map("stats-job 3")["kicks"], "1");
}

#[test]
fn kick_of_delayed_jobs_takes_the_soonest_first() {
    let server = common::start();
    let mut c = server.connect();
    c.put(0, 300, 60, "a");
    c.put(0, 100, 60, "b");
    c.put(0, 200, 60, "c");
    assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
    assert_eq!(state(&mut c, 2), "ready");
    assert_eq!(c.cmd("peek-delayed"), "FOUND 3 1\r\nc\r\n");
}

#[test]
fn kick_minus_one_kicks_everything() {
    let server = common::start();
    let mut c = server.connect();
    for _ in 0..4 {
        c.put_ok("x");
    }
    for id in 1..=4 {
        bury(&mut c, id);
    }
    assert_eq!(c.cmd("kick -1"), "KICKED 4\r\n");
    assert_eq!(c.cmd("peek-buried"), "NOT_FOUND\r\n");
}

#[test]
fn kick_bound_parses_like_strtoul() {
    let server = common::start();
    let mut c = server.connect();
    for _ in 0..3 {
        c.put(0, 100, 60, "x");
    }
    assert_eq!(c.cmd("kick 4294967296"), "KICKED 0\r\n");
    assert_eq!(c.cmd("kick 1x"), "KICKED 1\r\n");
    assert_eq!(c.cmd("kick \t+1"), "KICKED 1\r\n");
    assert_eq!(c.cmd("kick x"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("kick "), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("kick 18446744073709551616"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("kick"), "UNKNOWN_COMMAND\r\n");
    assert_eq!(c.cmd("kick 0"), "KICKED 0\r\n");
}

#[test]
fn kick_works_on_the_used_tube_only() {
    let server = common::start();
    let mut c = server.connect();
    c.put(0, 100, 60, "x");
    c.cmd("use other");
    assert_eq!(c.cmd("kick 10"), "KICKED 0\r\n");
    c.cmd("use default");
    assert_eq!(c.cmd("kick 10"), "KICKED 1\r\n");
}

#[test]
fn kick_job_works_in_any_tube() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use other");
    c.put(0, 100, 60, "x");
    c.cmd("use default");
    assert_eq!(c.cmd("kick-job 1"), "KICKED\r\n");
    assert_eq!(c.cmd("kick-job 1"), "NOT_FOUND\r\n");
}

#[test]
fn kicked_job_serves_a_blocked_waiter() {
    let server = common::start();
    let mut producer = server.connect();
    let mut worker = server.connect();
    producer.put(0, 100, 60, "x");
    worker.send("reserve\r\n");
    worker.expect_silence(QUIET);
    assert_eq!(producer.cmd("kick 1"), "KICKED 1\r\n");
    worker.expect("RESERVED 1 1\r\nx\r\n");
}

// ---------------------------------------------------------------------
// Closing
// ---------------------------------------------------------------------

#[test]
fn closed_connections_reserved_jobs_go_back_to_ready_at_once() {
    let server = common::start();
    let mut producer = server.connect();
    let mut worker = server.connect();
    producer.put(0, 0, 100, "a");
    producer.put(0, 0, 100, "b");
    worker.cmd("reserve");
    worker.cmd("reserve");
    let mut waiter = server.connect();
    waiter.send("reserve\r\n");
    waiter.expect_silence(QUIET);
    drop(worker);
    waiter.expect("RESERVED 1 1\r\na\r\n");
    assert_eq!(state(&mut producer, 2), "ready");
    let job = producer.yaml_map("stats-job 2");
    assert_eq!(job["reserves"], "1");
    assert_eq!(job["releases"], "0");
    assert_eq!(job["timeouts"], "0");
}

#[test]
fn quit_closes_the_connection_and_ignores_pipelined_commands() {
    let server = common::start();
    let mut c = server.connect();
    c.send("list-tube-used\r\nquit\r\nput 0 0 60 1\r\nx\r\nlist-tube-used\r\n");
    c.expect("USING default\r\n");
    c.expect_closed();
    let mut other = server.connect();
    assert_eq!(other.stat("total-jobs"), "0");
    assert_eq!(other.cmd("peek 1"), "NOT_FOUND\r\n");
}

#[test]
fn quit_is_a_bare_prefix() {
    let server = common::start();
    let mut c = server.connect();
    c.send("quit now\r\n");
    c.expect_closed();
    let mut c = server.connect();
    c.send("quitx\r\n");
    c.expect_closed();
}

#[test]
fn quit_releases_reserved_jobs_at_once() {
    let server = common::start();
    let mut producer = server.connect();
    let mut worker = server.connect();
    producer.put_ok("x");
    assert_eq!(worker.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    worker.send("quit\r\n");
    worker.expect_closed();
    assert_eq!(producer.cmd(&common::reserve_guarded()), "RESERVED 1 1\r\nx\r\n");
}

#[test]
fn kick_hands_each_job_to_a_waiter_as_it_is_kicked() {
    let server = common::start();
    let mut c = server.connect();
    let mut waiter = server.connect();
    c.put(10, 0, 60, "c");
    c.put(1, 0, 60, "d");
    bury(&mut c, 1);
    bury(&mut c, 2);
    waiter.send("reserve\r\n");
    waiter.expect_silence(QUIET);
    assert_eq!(c.cmd("kick 2"), "KICKED 2\r\n");
    // The first job kicked goes out, not the best (pri, id) of the batch.
    waiter.expect("RESERVED 1 1\r\nc\r\n");
    assert_eq!(state(&mut c, 2), "ready");
}

#[test]
fn closing_hands_the_earliest_reserved_job_to_a_waiter() {
    let server = common::start();
    let mut producer = server.connect();
    let mut holder = server.connect();
    producer.put(10, 0, 60, "a");
    producer.put(1, 0, 60, "b");
    assert_eq!(holder.cmd("reserve-job 1"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(holder.cmd("reserve-job 2"), "RESERVED 2 1\r\nb\r\n");
    let mut waiter = server.connect();
    waiter.send("reserve\r\n");
    waiter.expect_silence(QUIET);
    drop(holder);
    waiter.expect("RESERVED 1 1\r\na\r\n");
}

#[test]
fn reserving_makes_a_worker_even_when_it_times_out_but_failed_reserve_job_does_not() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("reserve-job 1"), "NOT_FOUND\r\n");
    assert_eq!(c.stat("current-workers"), "0");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.stat("current-workers"), "1");
    let mut d = server.connect();
    d.put_ok("x");
    assert_eq!(d.cmd("reserve-job 1"), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(d.stat("current-workers"), "2");
}

#[test]
fn a_command_sent_while_blocked_in_reserve_waits_for_the_reserve() {
    let server = common::start();
    let mut worker = server.connect();
    let mut producer = server.connect();
    worker.send("reserve\r\n");
    worker.expect_silence(QUIET);
    worker.send("list-tube-used\r\n");
    worker.expect_silence(QUIET);
    producer.put_ok("job");
    worker.expect("RESERVED 1 3\r\njob\r\nUSING default\r\n");
}

// ---------------------------------------------------------------------
// A waiter that hung up while the server was not looking
// ---------------------------------------------------------------------

/// Waits until every thread of process `pid` has stopped (SIGSTOP).
fn wait_until_stopped(pid: u32) {
    let all_stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
        tasks.flatten().all(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the parenthesised command name.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('T') || state.starts_with('t')
        })
    };
    assert!(common::settle(common::HANG_GUARD, all_stopped), "server never stopped");
}

/// One round on tube `tube`: W1 then W2 block in reserve; the server is
/// stopped; a job is put and W1 goes away (with a FIN, or with an RST when
/// `reset`: closing with unread input resets the connection); the server
/// continues. Returns what W2 receives and the job's `reserves`.
fn put_while_the_first_waiter_is_gone(
    server: &common::binary::Bin,
    tube: &str,
    reset: bool,
) -> (String, String) {
    let mut observer = server.client();
    let mut producer = server.client();
    assert_eq!(producer.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
    let waiting_before = common::stat_u64(&mut observer, "current-waiting");
    let mut waiters = Vec::new();
    for n in 1..=2u64 {
        let mut w = server.client();
        w.send(format!("watch {tube}\r\nignore default\r\n"));
        if !(reset && n == 1) {
            w.expect("WATCHING 2\r\nWATCHING 1\r\n");
        }
        w.send("reserve\r\n");
        let waiting = || common::stat_u64(&mut observer, "current-waiting") == waiting_before + n;
        assert!(common::settle(common::HANG_GUARD, waiting), "waiter {n} never blocked");
        waiters.push(w);
    }
    let mut w2 = waiters.pop().unwrap();
    let w1 = waiters.pop().unwrap();
    server.signal("STOP");
    wait_until_stopped(server.child.id());
    producer.send("put 0 0 100 1\r\nx\r\n");
    let w1_port = w1.stream.local_addr().unwrap().port();
    drop(w1);
    // The hang-up must be queued at the server's socket before the server
    // runs again (the kernel handles it while the process is stopped, but
    // on a loaded machine maybe not within the sender's own system call).
    let queued = || server_side_is_closing(server.port(), w1_port);
    assert!(common::settle(common::HANG_GUARD, queued), "the kernel never saw W1 go");
    server.signal("CONT");
    let inserted = producer.reply();
    let id: u64 = inserted.trim_end().strip_prefix("INSERTED ").unwrap().parse().unwrap();
    let got = w2.reply();
    let reserves = observer.yaml_map(&format!("stats-job {id}"))["reserves"].clone();
    assert_eq!(w2.cmd(&format!("delete {id}")), "DELETED\r\n");
    (got.replace(&format!("RESERVED {id} "), "RESERVED <id> "), reserves)
}

/// Whether the server's end of the connection from local port `client`
/// has received its peer's FIN or RST: in `/proc/net/tcp` it is no longer
/// ESTABLISHED (state 01), or is gone.
fn server_side_is_closing(server: u16, client: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let (local, remote) = (format!(":{server:04X}"), format!(":{client:04X}"));
    !table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() > 3 && fields[1].ends_with(&local) && fields[2].ends_with(&remote) && fields[3] == "01"
    })
}

#[test]
fn a_waiter_whose_close_is_already_queued_is_passed_over() {
    let server = common::binary::spawn(&[]);
    for round in 0..3 {
        for reset in [false, true] {
            let tube = format!("gone-{round}-{reset}");
            let (got, reserves) = put_while_the_first_waiter_is_gone(&server, &tube, reset);
            assert_eq!(got, "RESERVED <id> 1\r\nx\r\n", "round {round}, reset {reset}");
            assert_eq!(
                reserves, "1",
                "round {round}, reset {reset}: the job went to the closed waiter first"
            );
        }
    }
    let mut observer = server.client();
    assert_eq!(observer.stat("current-waiting"), "0");
}

#[test]
fn a_reserve_blocked_past_the_idle_timeout_still_gets_its_job() {
    // A connection blocked for over a second lets go of its buffers; the
    // job handed over afterwards must still arrive whole.
    let server = common::start();
    let mut worker = server.connect();
    worker.send("reserve\r\n");
    std::thread::sleep(Duration::from_millis(1300));
    let mut producer = server.connect();
    assert_eq!(producer.put(0, 0, 60, "late job"), "INSERTED 1\r\n");
    worker.expect("RESERVED 1 8\r\nlate job\r\n");
    assert_eq!(worker.cmd("delete 1"), "DELETED\r\n");
}

// ---------------------------------------------------------------------
// move-job (ours, reference §3.21)
// ---------------------------------------------------------------------

#[test]
fn move_job_moves_ready_delayed_and_buried_jobs_and_refuses_reserved_or_missing() {
    let server = common::start();
    let States { mut me, mut other } = states(&server);
    for id in [READY, DELAYED, BURIED] {
        assert_eq!(me.cmd(&format!("move-job {id} elsewhere")), "MOVED\r\n", "job {id}");
    }
    for id in [MINE, OTHERS, MISSING] {
        assert_eq!(me.cmd(&format!("move-job {id} elsewhere")), "NOT_FOUND\r\n", "job {id}");
    }
    assert_eq!(other.cmd(&format!("move-job {OTHERS} elsewhere")), "NOT_FOUND\r\n", "reserved by me");
    for (id, want) in [(READY, "ready"), (DELAYED, "delayed"), (BURIED, "buried")] {
        let job = me.yaml_map(&format!("stats-job {id}"));
        assert_eq!((job["tube"].as_str(), job["state"].as_str()), ("\"elsewhere\"", want), "job {id}");
    }
    let tube = me.yaml_map("stats-tube elsewhere");
    let counts =
        ["current-jobs-ready", "current-jobs-delayed", "current-jobs-buried"].map(|k| tube[k].as_str());
    assert_eq!(counts, ["1", "1", "1"]);
    assert_eq!(me.cmd("peek-ready"), "NOT_FOUND\r\n", "default has no ready job left");
    assert_eq!(me.cmd("move-job 1 bad*name"), "BAD_FORMAT\r\n");
    assert_eq!(me.cmd("move-job 1 -bad"), "BAD_FORMAT\r\n");
    assert_eq!(me.cmd("move-job 1"), "BAD_FORMAT\r\n");
    assert_eq!(me.cmd("move-job 1  elsewhere"), "BAD_FORMAT\r\n");
    assert_eq!(me.cmd("move-job 1 elsewhere"), "MOVED\r\n", "to its own tube: nothing changes");
}

#[test]
fn move_job_keeps_the_id_priority_delay_ttr_body_and_counters() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(7, 0, 30, "hello"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 5\r\nhello\r\n");
    assert_eq!(c.cmd("release 1 5 100"), "RELEASED\r\n");
    let before = c.yaml_map("stats-job 1");
    assert_eq!(c.cmd("move-job 1 other"), "MOVED\r\n");
    let after = c.yaml_map("stats-job 1");
    for key in ["id", "state", "pri", "delay", "ttr", "reserves", "timeouts", "releases", "buries", "kicks"] {
        assert_eq!(before[key], after[key], "{key}");
    }
    let left: u64 = after["time-left"].parse().unwrap();
    assert!((98..=100).contains(&left), "a delayed job stays due when it was: time-left {left}");
    assert_eq!(after["tube"], "\"other\"");
    assert_eq!(c.cmd("peek 1"), "FOUND 1 5\r\nhello\r\n");
    assert_eq!(c.cmd("use other"), "USING other\r\n");
    assert_eq!(c.cmd("peek-delayed"), "FOUND 1 5\r\nhello\r\n");
}

#[test]
fn a_worker_waiting_on_the_new_tube_gets_a_moved_job_at_once() {
    let server = common::start();
    let mut worker = server.connect();
    assert_eq!(worker.cmd("watch other"), "WATCHING 2\r\n");
    assert_eq!(worker.cmd("ignore default"), "WATCHING 1\r\n");
    // Only the move can end this wait with a job; on a loaded machine it
    // may take a while to arrive, never a timeout.
    worker.send(format!("reserve-with-timeout {}\r\n", common::HANG_GUARD.as_secs()));
    let mut admin = server.connect();
    assert_eq!(admin.put(0, 0, 60, "hello"), "INSERTED 1\r\n");
    worker.expect_silence(QUIET);
    assert_eq!(admin.cmd("move-job 1 other"), "MOVED\r\n");
    assert_eq!(worker.reply(), "RESERVED 1 5\r\nhello\r\n");
}

#[test]
fn a_moved_buried_job_joins_the_end_of_its_new_tubes_buried_queue() {
    let server = common::start();
    let mut c = server.connect();
    for (id, tube) in [(1, "a"), (2, "b"), (3, "b")] {
        assert_eq!(c.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
        assert_eq!(c.put(0, 0, 60, &format!("job{id}")), format!("INSERTED {id}\r\n"));
    }
    // Buried in the order 1, 2, 3: job 1 (in `a`) first.
    for id in 1..=3 {
        assert!(c.cmd(&format!("reserve-job {id}")).starts_with("RESERVED"));
        assert_eq!(c.cmd(&format!("bury {id} 0")), "BURIED\r\n");
    }
    assert_eq!(c.cmd("move-job 1 b"), "MOVED\r\n");
    assert_eq!(c.cmd("use b"), "USING b\r\n");
    for id in [2, 3, 1] {
        assert_eq!(c.cmd("peek-buried"), format!("FOUND {id} 4\r\njob{id}\r\n"));
        assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
    }
}

#[test]
fn the_tube_a_moved_job_leaves_goes_when_nothing_else_holds_it() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use a"), "USING a\r\n");
    assert_eq!(c.put(0, 0, 60, "x"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("use default"), "USING default\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 18\r\n---\n- default\n- a\n\r\n");
    assert_eq!(c.cmd("move-job 1 b"), "MOVED\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 18\r\n---\n- default\n- b\n\r\n");
    assert_eq!(c.cmd("move-job 2 c"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 18\r\n---\n- default\n- b\n\r\n", "a refused move makes no tube");
}

/// tuber's `peek-reserved` (reference §3.27): the used tube's reserved job
/// with the lowest id, whoever holds it.
#[test]
fn peek_reserved_shows_the_used_tube_s_lowest_reserved_job_whoever_holds_it() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("peek-reserved"), "NOT_FOUND\r\n");
    for (tube, body) in [("a", "A1"), ("a", "A2"), ("b", "B1")] {
        assert_eq!(c.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
        c.put_ok(body);
    }
    let mut other = server.connect();
    assert_eq!(other.cmd("watch a"), "WATCHING 2\r\n");
    assert_eq!(other.cmd("watch b"), "WATCHING 3\r\n");
    // Reserved out of id order: the lowest id shows, not the first held.
    assert_eq!(other.cmd("reserve-job 3"), "RESERVED 3 2\r\nB1\r\n");
    assert_eq!(other.cmd("reserve-job 2"), "RESERVED 2 2\r\nA2\r\n");
    // `c` uses b.
    assert_eq!(c.cmd("peek-reserved"), "FOUND 3 2\r\nB1\r\n");
    assert_eq!(c.cmd("use a"), "USING a\r\n");
    assert_eq!(c.cmd("peek-reserved"), "FOUND 2 2\r\nA2\r\n");
    assert_eq!(other.cmd("reserve-job 1"), "RESERVED 1 2\r\nA1\r\n");
    assert_eq!(c.cmd("peek-reserved"), "FOUND 1 2\r\nA1\r\n");
    assert_eq!(other.cmd("release 1 0 0"), "RELEASED\r\n");
    assert_eq!(other.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(c.cmd("peek-reserved"), "NOT_FOUND\r\n");
    for not_it in ["peek-reserved ", "peek-reservedx"] {
        assert_eq!(c.cmd(not_it), "UNKNOWN_COMMAND\r\n", "{not_it}");
    }
}
