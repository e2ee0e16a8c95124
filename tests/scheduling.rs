//! Time-driven behaviour: delays, TTRs and the safety margin, reserve
//! timeouts, pauses, and who gets a job when several clients wait
//! (reference §1.7, 3.3, 4).
//!
//! Every wait uses the smallest time the protocol allows. Lower bounds are
//! checked with a little slack (a timer must never fire early); upper bounds
//! are left to the reply itself wherever a late timer would change what the
//! client sees, so a slow machine cannot fail these tests. A reply that only
//! holds until a timer fires (a job still delayed, a TTR not yet run out) is
//! asserted only if it came [`before`] that timer by this test's clock;
//! a machine too slow for the window skips the assertion, never fails it.
mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::Client;

/// The slack allowed below a one-second timer, for clock granularity and
/// the time between the server's reading of its clock and ours.
const SLACK: Duration = Duration::from_millis(150);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Whether less than `window` has passed since `since`, taken before the
/// command that started the server's timer, by this test's clock read now,
/// after a reply: then less has passed by the server's too, and the timer
/// at `window` has not fired.
fn before(since: Instant, window: Duration) -> bool {
    since.elapsed() < window
}

/// Asserts that nothing arrives on `c` while the timer at `window` from
/// `since` cannot yet have fired, for at most `most`.
fn quiet_before(c: &mut Client, since: Instant, window: Duration, most: Duration) {
    let left = window.saturating_sub(since.elapsed()).min(most);
    if !left.is_zero() {
        c.expect_silence(left);
    }
}

/// Sends `line` on `c` and reads its reply, while `observer` watches
/// whether the server counts a client waiting in a reserve meanwhile: the
/// reply, and whether one was seen.
fn reply_watching_waits(c: &mut Client, observer: &mut Client, line: &str) -> (String, bool) {
    c.send(format!("{line}\r\n"));
    std::thread::scope(|scope| {
        let reply = scope.spawn(|| c.reply());
        let mut seen = false;
        while !reply.is_finished() {
            seen |= observer.stat("current-waiting") != "0";
            sleep(Duration::from_millis(10));
        }
        (reply.join().unwrap(), seen)
    })
}

/// Says that a test gave up on a window this machine was too slow for.
fn too_slow_for(window: &str) {
    common::skipping(&format!("this machine was too slow for {window}"));
}

/// Asserts that at least `at_least` (less [`SLACK`]) passed since `since`.
fn assert_waited(since: Instant, at_least: Duration) {
    let waited = since.elapsed();
    assert!(waited + SLACK >= at_least, "answered after {waited:?}, expected about {at_least:?}");
}

/// Polls `stats` until `key` reads `value`: the way to know that the server
/// has seen something happen on another connection.
fn await_stat(c: &mut Client, key: &str, value: &str) {
    let deadline = Instant::now() + common::REPLY_TIMEOUT;
    loop {
        let now = c.stat(key);
        if now == value {
            return;
        }
        assert!(Instant::now() < deadline, "stats {key} stayed {now}, expected {value}");
        sleep(Duration::from_millis(10));
    }
}

/// One key of `stats-job <id>`.
fn job_stat(c: &mut Client, id: u64, key: &str) -> String {
    c.yaml_map(&format!("stats-job {id}")).remove(key).unwrap_or_else(|| panic!("no stats-job key {key}"))
}

// -------------------------------------------------------------------
// Delayed jobs (reference §4.3, 3.6)
// -------------------------------------------------------------------

#[test]
fn delayed_put_becomes_ready_after_its_delay_and_goes_to_a_blocked_reserve() {
    let server = common::start();
    let mut producer = server.connect();
    let mut worker = server.connect();
    worker.send("reserve\r\n");
    await_stat(&mut producer, "current-waiting", "1");

    let put_at = Instant::now();
    assert_eq!(producer.cmd("put 0 1 60 5\r\nhello"), "INSERTED 1\r\n");
    let state = job_stat(&mut producer, 1, "state");
    let delayed = producer.cmd("peek-delayed");
    let ready = producer.cmd("peek-ready");
    if before(put_at, secs(1)) {
        assert_eq!(state, "delayed");
        assert_eq!(delayed, "FOUND 1 5\r\nhello\r\n");
        assert_eq!(ready, "NOT_FOUND\r\n");
    }
    quiet_before(&mut worker, put_at, secs(1), Duration::from_millis(300));

    worker.expect("RESERVED 1 5\r\nhello\r\n");
    assert_waited(put_at, secs(1));
    let job = producer.yaml_map("stats-job 1");
    assert_eq!(job["state"], "reserved");
    assert_eq!(job["delay"], "1", "maturing keeps the delay");
    assert_eq!(job["reserves"], "1");
    assert_eq!(job["kicks"], "0");
}

#[test]
fn release_with_delay_keeps_the_job_delayed_until_the_delay_ends() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");

    let released_at = Instant::now();
    assert_eq!(c.cmd("release 1 7 1"), "RELEASED\r\n");
    let job = c.yaml_map("stats-job 1");
    assert_eq!(job["pri"], "7");
    assert_eq!(job["delay"], "1");
    assert_eq!(job["releases"], "1");
    let reserved = c.cmd("reserve-with-timeout 0");
    if before(released_at, secs(1)) {
        assert_eq!(job["state"], "delayed");
        assert_eq!(reserved, "TIMED_OUT\r\n");
    } else if reserved != "TIMED_OUT\r\n" {
        // The delay ran out first: the job was reserved now.
        return too_slow_for("a 1 s delay");
    }

    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    assert_waited(released_at, secs(1));
    let job = c.yaml_map("stats-job 1");
    assert_eq!(job["pri"], "7");
    assert_eq!(job["reserves"], "2");
}

// -------------------------------------------------------------------
// TTR and the safety margin (reference §3.3, 3.8, 4.2)
// -------------------------------------------------------------------

#[test]
fn ttr_expiry_puts_the_job_back_to_ready_and_counts_a_timeout() {
    let server = common::start();
    let mut worker = server.connect();
    let mut observer = server.connect();
    assert_eq!(worker.put(0, 0, 1, "x"), "INSERTED 1\r\n");
    assert_eq!(worker.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    let reserved_at = Instant::now();

    let deadline = reserved_at + common::REPLY_TIMEOUT;
    while job_stat(&mut observer, 1, "state") != "ready" {
        assert!(Instant::now() < deadline, "the TTR never ran out");
        sleep(Duration::from_millis(20));
    }
    assert_waited(reserved_at, secs(1));
    let job = observer.yaml_map("stats-job 1");
    assert_eq!(job["reserves"], "1");
    assert_eq!(job["timeouts"], "1");
    assert_eq!(job["releases"], "0");
    let stats = observer.stats();
    assert_eq!(stats["job-timeouts"], "1");
    assert_eq!(stats["current-jobs-ready"], "1");
    assert_eq!(stats["current-jobs-reserved"], "0");

    // The worker lost it; another client can take it at once.
    assert_eq!(worker.cmd("touch 1"), "NOT_FOUND\r\n");
    assert_eq!(worker.cmd("release 1 0 0"), "NOT_FOUND\r\n");
    assert_eq!(observer.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\nx\r\n");
}

#[test]
fn reserve_while_holding_a_ttr_1_job_with_nothing_ready_is_deadline_soon_at_once() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(100, 0, 1, "a"), "INSERTED 1\r\n");
    let reserving = Instant::now();
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
    // With ttr 1 the margin starts when the job is reserved: a reserve that
    // cannot wait is told so (TIMED_OUT would say the margin had not
    // begun). Only a command that came after the TTR ran out, on a slow
    // machine, gets the job back instead.
    let reply = c.cmd("reserve-with-timeout 0");
    if reply == "RESERVED 1 1\r\na\r\n" && !before(reserving, secs(1)) {
        return too_slow_for("a TTR of 1 s");
    }
    assert_eq!(reply, "DEADLINE_SOON\r\n");
    // Had a plain reserve blocked instead, the job would time out and come
    // back as RESERVED 1: it is told at once too. A reserve that came too
    // late also gets RESERVED 1, but never waits for it.
    let mut observer = server.connect();
    let (reply, waited) = reply_watching_waits(&mut c, &mut observer, "reserve");
    if reply != "DEADLINE_SOON\r\n" {
        assert!(!waited && reply == "RESERVED 1 1\r\na\r\n", "{reply:?} after a wait: {waited}");
        return too_slow_for("a TTR of 1 s");
    }
    // In the margin, a ready job is still handed out normally.
    assert_eq!(c.put(0, 0, 60, "b"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 1\r\nb\r\n");
    let stats = c.stats();
    assert_eq!(stats["cmd-reserve"], "3");
    assert_eq!(stats["cmd-reserve-with-timeout"], "1");
    assert_eq!(stats["current-workers"], "1");
}

#[test]
fn deadline_soon_comes_when_the_only_ready_job_is_in_a_paused_tube() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 1, "a"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(c.cmd("use p"), "USING p\r\n");
    assert_eq!(c.put(0, 0, 60, "b"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("pause-tube p 60"), "PAUSED\r\n");
    assert_eq!(c.cmd("watch p"), "WATCHING 2\r\n");
    // Job 1's TTR runs out a second after its reserve: a reserve that came
    // later, on a slow machine, gets it back at once, without a wait.
    let mut observer = server.connect();
    let (reply, waited) = reply_watching_waits(&mut c, &mut observer, "reserve");
    if reply != "DEADLINE_SOON\r\n" {
        assert!(!waited && reply == "RESERVED 1 1\r\na\r\n", "{reply:?} after a wait: {waited}");
        too_slow_for("a TTR of 1 s");
    }
}

#[test]
fn blocked_reserve_gets_deadline_soon_when_the_margin_begins() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 2, "x"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    let reserved_at = Instant::now();
    // The margin is the last second of the TTR: 1 s from now. A missed
    // margin would let the job time out and come back as RESERVED 1 to
    // the waiting reserve; one that came after the TTR, on a slow machine,
    // gets it back too, but without a wait.
    let mut observer = server.connect();
    let (reply, waited) = reply_watching_waits(&mut c, &mut observer, "reserve");
    if reply != "DEADLINE_SOON\r\n" {
        assert!(!waited && reply == "RESERVED 1 1\r\nx\r\n", "{reply:?} after a wait: {waited}");
        return too_slow_for("a TTR of 2 s");
    }
    assert_waited(reserved_at, secs(1));
    assert_eq!(c.stat("current-waiting"), "0");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
}

#[test]
fn reserve_with_timeout_that_ends_before_the_margin_times_out_first() {
    // reference §3.3: a ttr-3 job reserved at t=0; reserve-with-timeout 1 gives
    // TIMED_OUT at t=1, then reserve-with-timeout 5 gives DEADLINE_SOON at
    // t=2.
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 3, "x"), "INSERTED 1\r\n");
    let reserving = Instant::now();
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    let reserved_at = Instant::now();

    // A slow machine may send a command only once the margin (t=2) or the
    // TTR's end (t=3) has come: then the reply is the one for that time,
    // DEADLINE_SOON or the job again.
    let again = "RESERVED 1 1\r\nx\r\n";
    let reply = c.cmd("reserve-with-timeout 1");
    if [again, "DEADLINE_SOON\r\n"].contains(&reply.as_str()) && !before(reserving, secs(2)) {
        return too_slow_for("a TTR of 3 s");
    }
    assert_eq!(reply, "TIMED_OUT\r\n");
    assert_waited(reserved_at, secs(1));
    // Had it waited past the margin, the job would come back to it at t=3;
    // one that came after t=3 gets it back too, but without a wait.
    let mut observer = server.connect();
    let (reply, waited) = reply_watching_waits(&mut c, &mut observer, "reserve-with-timeout 5");
    if reply == again && !waited {
        return too_slow_for("a TTR of 3 s");
    }
    // Before the 5 s timeout: its reply would have been TIMED_OUT.
    assert_eq!(reply, "DEADLINE_SOON\r\n");
    assert_waited(reserved_at, secs(2));
    let (state, timeouts) = (job_stat(&mut c, 1, "state"), job_stat(&mut c, 1, "timeouts"));
    if before(reserving, secs(3)) {
        assert_eq!((state.as_str(), timeouts.as_str()), ("reserved", "0"));
    }
}

#[test]
fn touch_restarts_the_ttr() {
    let server = common::start();
    let mut worker = server.connect();
    let mut other = server.connect();
    assert_eq!(worker.put(0, 0, 2, "x"), "INSERTED 1\r\n");
    let reserving = Instant::now();
    assert_eq!(worker.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    other.send("reserve\r\n");

    sleep(secs(1));
    let left = job_stat(&mut worker, 1, "time-left");
    let touched_at = Instant::now();
    let touched = worker.cmd("touch 1");
    if touched == "NOT_FOUND\r\n" && !before(reserving, secs(2)) {
        // The TTR ran out before the touch came: `other` has the job.
        return too_slow_for("a TTR of 2 s");
    }
    assert_eq!(touched, "TOUCHED\r\n");
    if before(reserving, secs(2)) {
        assert_eq!(left, "0");
    }
    let left = job_stat(&mut worker, 1, "time-left");
    if before(touched_at, secs(1)) {
        assert_eq!(left, "1");
    }

    // Untouched, the job would have timed out about 1 s from now; touched,
    // it has a fresh 2 s.
    other.expect("RESERVED 1 1\r\nx\r\n");
    assert_waited(touched_at, secs(2));
    let job = other.yaml_map("stats-job 1");
    assert_eq!(job["timeouts"], "1");
    assert_eq!(job["reserves"], "2");
    assert_eq!(other.stat("cmd-touch"), "1");
}

// -------------------------------------------------------------------
// Reserve timeouts (reference §3.3)
// -------------------------------------------------------------------

#[test]
fn reserve_with_timeout_gives_timed_out_when_the_time_is_up() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");

    let started = Instant::now();
    c.send("reserve-with-timeout 1\r\n");
    c.expect("TIMED_OUT\r\n");
    assert_waited(started, secs(1));
    let stats = c.stats();
    assert_eq!(stats["cmd-reserve-with-timeout"], "2");
    assert_eq!(stats["current-waiting"], "0");
    assert_eq!(stats["current-workers"], "1");
}

// -------------------------------------------------------------------
// Pause (reference §3.18, 4.4)
// -------------------------------------------------------------------

#[test]
fn paused_tube_keeps_reserves_away_until_the_pause_ends() {
    let server = common::start();
    let mut admin = server.connect();
    let mut worker = server.connect();
    admin.put_ok("x");
    let paused_at = Instant::now();
    assert_eq!(admin.cmd("pause-tube default 1"), "PAUSED\r\n");
    let tube = admin.yaml_map("stats-tube default");
    assert_eq!(tube["pause-time-left"], "0");
    assert_eq!(tube["cmd-pause-tube"], "1");
    let reply = worker.cmd("reserve-with-timeout 0");
    if !before(paused_at, secs(1)) && reply != "TIMED_OUT\r\n" {
        // The pause ended before the reserve came.
        return too_slow_for("a pause of 1 s");
    }
    assert_eq!(tube["pause"], "1");
    assert_eq!(reply, "TIMED_OUT\r\n");
    assert_eq!(worker.cmd("peek-ready"), "FOUND 1 1\r\nx\r\n");
    assert_eq!(worker.cmd("reserve"), "RESERVED 1 1\r\nx\r\n");
    assert_waited(paused_at, secs(1));

    let tube = admin.yaml_map("stats-tube default");
    assert_eq!(tube["pause"], "0");
    assert_eq!(tube["pause-time-left"], "0");
}

#[test]
fn pause_tube_0_unpauses_at_once() {
    let server = common::start();
    let mut admin = server.connect();
    let mut worker = server.connect();
    admin.put_ok("x");
    assert_eq!(admin.cmd("pause-tube default 60"), "PAUSED\r\n");
    worker.send("reserve\r\n");
    await_stat(&mut admin, "current-waiting", "1");
    worker.expect_silence(Duration::from_millis(200));

    assert_eq!(admin.cmd("pause-tube default 0"), "PAUSED\r\n");
    worker.expect("RESERVED 1 1\r\nx\r\n");
    let tube = admin.yaml_map("stats-tube default");
    assert_eq!(tube["pause"], "0");
    assert_eq!(tube["pause-time-left"], "0");
    assert_eq!(tube["cmd-pause-tube"], "2");
}

// -------------------------------------------------------------------
// Who gets a job (reference §4.1, 4.5)
// -------------------------------------------------------------------

#[test]
fn blocked_waiters_on_one_tube_are_served_in_strict_fifo_order() {
    let server = common::start();
    let mut producer = server.connect();
    // beanstalkd's cursor would serve four waiters A, B, D, C; we promise
    // the longest waiter first.
    let mut waiters: Vec<Client> = (0..4).map(|_| server.connect()).collect();
    for (n, w) in waiters.iter_mut().enumerate() {
        w.send("reserve\r\n");
        await_stat(&mut producer, "current-waiting", &(n + 1).to_string());
    }
    for n in 1..=4 {
        assert_eq!(producer.put_ok(&format!("job{n}")), n);
    }
    for (n, w) in waiters.iter_mut().enumerate() {
        w.expect(format!("RESERVED {} 4\r\njob{}\r\n", n + 1, n + 1));
    }
    assert_eq!(producer.stat("current-waiting"), "0");
}

#[test]
fn a_waiter_that_closed_its_connection_is_never_handed_a_job() {
    let server = common::start();
    let mut producer = server.connect();
    let mut first = server.connect();
    let mut second = server.connect();
    first.send("reserve\r\n");
    await_stat(&mut producer, "current-waiting", "1");
    second.send("reserve\r\n");
    await_stat(&mut producer, "current-waiting", "2");

    drop(first);
    await_stat(&mut producer, "current-waiting", "1");
    assert_eq!(producer.put_ok("a"), 1);
    second.expect("RESERVED 1 1\r\na\r\n");
    assert_eq!(job_stat(&mut producer, 1, "reserves"), "1");

    // With no other waiter, the job just stays ready.
    let mut third = server.connect();
    third.send("reserve\r\n");
    await_stat(&mut producer, "current-waiting", "1");
    drop(third);
    await_stat(&mut producer, "current-waiting", "0");
    assert_eq!(producer.put_ok("b"), 2);
    let job = producer.yaml_map("stats-job 2");
    assert_eq!(job["state"], "ready");
    assert_eq!(job["reserves"], "0");
}

#[test]
fn closing_a_connection_releases_its_jobs_at_once_to_a_blocked_waiter() {
    let server = common::start();
    let mut holder = server.connect();
    let mut waiter = server.connect();
    // The holder reserves job 1 (pri 10) first, then job 2 (pri 1).
    assert_eq!(holder.put(10, 0, 60, "a"), "INSERTED 1\r\n");
    assert_eq!(holder.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(holder.put(1, 0, 60, "b"), "INSERTED 2\r\n");
    assert_eq!(holder.cmd("reserve"), "RESERVED 2 1\r\nb\r\n");
    waiter.send("reserve\r\n");
    await_stat(&mut holder, "current-waiting", "1");

    // Jobs go back one at a time in reservation order, so the waiter gets
    // the first one reserved, long before any TTR runs out.
    drop(holder);
    waiter.expect("RESERVED 1 1\r\na\r\n");
    assert_eq!(waiter.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nb\r\n");
    let job = waiter.yaml_map("stats-job 1");
    assert_eq!(job["reserves"], "2");
    assert_eq!(job["timeouts"], "0");
    assert_eq!(job["releases"], "0");
}

#[test]
fn quit_releases_reserved_jobs_at_once() {
    let server = common::start();
    let mut holder = server.connect();
    let mut waiter = server.connect();
    holder.put_ok("a");
    assert_eq!(holder.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
    waiter.send("reserve\r\n");
    await_stat(&mut holder, "current-waiting", "1");
    holder.send("quit\r\n");
    holder.expect_closed();
    waiter.expect("RESERVED 1 1\r\na\r\n");
}

// -------------------------------------------------------------------
// Half-close (reference §1.7)
// -------------------------------------------------------------------

#[test]
fn half_close_while_blocked_in_reserve_gives_timed_out_then_close() {
    let server = common::start();
    let mut observer = server.connect();
    let mut c = server.connect();
    c.send("reserve\r\n");
    await_stat(&mut observer, "current-waiting", "1");
    c.half_close();
    c.expect("TIMED_OUT\r\n");
    c.expect_closed();
    await_stat(&mut observer, "current-connections", "1");
    assert_eq!(observer.stat("current-waiting"), "0");
}

#[test]
fn half_close_while_starting_to_block_gives_timed_out_then_close() {
    let server = common::start();
    let mut c = server.connect();
    c.send("reserve-with-timeout 100\r\n");
    c.half_close();
    c.expect("TIMED_OUT\r\n");
    c.expect_closed();
}

#[test]
fn half_closed_client_gets_a_ready_job_which_then_goes_back() {
    let server = common::start();
    let mut observer = server.connect();
    observer.put_ok("x");
    let mut c = server.connect();
    c.send("reserve\r\n");
    c.half_close();
    c.expect("RESERVED 1 1\r\nx\r\n");
    c.expect_closed();
    await_stat(&mut observer, "current-connections", "1");
    let job = observer.yaml_map("stats-job 1");
    assert_eq!(job["state"], "ready");
    assert_eq!(job["reserves"], "1");
}

#[test]
fn half_close_with_commands_pending_answers_them_then_closes() {
    let server = common::start();
    let mut c = server.connect();
    c.send("use foo\r\nput 0 0 60 2\r\nhi\r\nlist-tube-used\r\nreserve-with-timeout 0\r\n");
    c.half_close();
    c.expect("USING foo\r\nINSERTED 1\r\nUSING foo\r\nTIMED_OUT\r\n");
    c.expect_closed();
    let mut other = server.connect();
    assert_eq!(other.cmd("peek 1"), "FOUND 1 2\r\nhi\r\n");
}

#[test]
fn half_close_ends_a_blocked_reserve_then_answers_the_commands_behind_it() {
    let server = common::start();
    let mut observer = server.connect();
    let mut c = server.connect();
    c.send("reserve\r\nlist-tube-used\r\n");
    await_stat(&mut observer, "current-waiting", "1");
    c.half_close();
    c.expect("TIMED_OUT\r\nUSING default\r\n");
    c.expect_closed();
}

#[test]
fn commands_pipelined_behind_a_blocked_reserve_wait_for_its_reply() {
    let server = common::start();
    let mut producer = server.connect();
    let mut worker = server.connect();
    worker.send("reserve\r\nuse other\r\n");
    await_stat(&mut producer, "current-waiting", "1");
    worker.expect_silence(Duration::from_millis(200));
    assert_eq!(producer.stat("cmd-use"), "0");
    assert_eq!(producer.put_ok("x"), 1);
    worker.expect("RESERVED 1 1\r\nx\r\nUSING other\r\n");
}
