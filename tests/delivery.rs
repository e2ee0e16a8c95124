//! Exactly once, in order: every reply leaves in the order of its
//! commands, each job is held by one worker at a time, and no client's
//! unread socket holds up another client's job. Each test plays one
//! scenario that an earlier design (a put's thread writing `RESERVED`
//! straight to a blocked worker's socket) got wrong, against the real
//! binary, over TCP and over a UNIX socket.

mod common;

use std::io::{ErrorKind, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::wire::{inserted, Conn, Target};

/// Scenario 1. A worker pipelines five `peek`s of a 60 KB job and a
/// `reserve`, and reads slowly, so that its socket is full while the last
/// `FOUND` is still being written. A job put meanwhile must reach it whole
/// and after every `FOUND`, never inside one: the reserve starts only once
/// the replies before it have left.
fn a_reserve_behind_an_unread_reply_waits_its_turn(unix: bool) {
    let body = vec![b'm'; 60_000];
    let target = Target::start(unix, &[]);
    let mut producer = target.connect();
    let m = producer.put_delayed(3600, 60, &body);
    let mut worker = target.connect();
    worker.send(format!("peek {m}\r\n").repeat(5) + "reserve\r\n");
    let found = [format!("FOUND {m} {}\r\n", body.len()).as_bytes(), &body, b"\r\n"].concat();
    let expected_len = 5 * found.len() + "RESERVED 2 3\r\nabc\r\n".len();
    let slow_reader = thread::spawn(move || {
        // About 1 MB/s: the 300 KB of FOUNDs take a third of a second.
        let mut received = Vec::new();
        let mut chunk = [0; 2048];
        worker.stream.set_timeout(Some(common::HANG_GUARD));
        while received.len() < expected_len {
            match worker.stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
            thread::sleep(Duration::from_millis(2));
        }
        received
    });
    thread::sleep(Duration::from_millis(100));
    let job = producer.put(60, b"abc");
    let received = slow_reader.join().unwrap();
    let expected = [found.repeat(5), format!("RESERVED {job} 3\r\nabc\r\n").into_bytes()].concat();
    assert!(received == expected, "the replies are not in order, whole");
}

#[test]
fn a_reserve_behind_an_unread_reply_waits_its_turn_over_tcp() {
    a_reserve_behind_an_unread_reply_waits_its_turn(false);
}

#[test]
fn a_reserve_behind_an_unread_reply_waits_its_turn_over_a_unix_socket() {
    a_reserve_behind_an_unread_reply_waits_its_turn(true);
}

/// A worker that reserves (with `reserve-with-timeout 3`) and deletes
/// until it times out once `stop` is set. Returns the ids it was given,
/// and the replies to its deletes that were not `DELETED`.
fn worker(mut conn: Conn, stop: Arc<AtomicBool>) -> thread::JoinHandle<(Vec<u64>, Vec<String>)> {
    thread::spawn(move || {
        let (mut got, mut refused) = (Vec::new(), Vec::new());
        loop {
            let reply = conn.cmd("reserve-with-timeout 3");
            if reply == "TIMED_OUT\r\n" {
                if stop.load(Ordering::SeqCst) {
                    return (got, refused);
                }
                continue;
            }
            let id: u64 =
                reply.split(' ').nth(1).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{reply:?}"));
            got.push(id);
            let deleted = conn.cmd(&format!("delete {id}"));
            if deleted != "DELETED\r\n" {
                refused.push(deleted);
            }
        }
    })
}

/// Asserts that no job went to two workers, or twice to one.
fn assert_each_job_once(results: Vec<(Vec<u64>, Vec<String>)>, expected: usize) {
    let mut all: Vec<u64> = Vec::new();
    for (got, refused) in results {
        assert!(refused.is_empty(), "deletes refused: {refused:?}");
        all.extend(got);
    }
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a job was delivered twice");
    assert_eq!(count, expected, "jobs lost");
}

/// Scenario 2. A producer that stops reading its replies (every round a
/// 50 KB `peek` and a TTR-1 `put`) holds up only itself: two blocked
/// workers get each of its jobs once, and no TTR runs out on a job whose
/// `RESERVED` was stuck behind the producer's socket.
fn a_producer_that_does_not_read_holds_up_no_worker(unix: bool) {
    let target = Target::start(unix, &[]);
    let mut setup = target.connect();
    let m = setup.put_delayed(3600, 60, &vec![b'p'; 50_000]);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2).map(|_| worker(target.connect(), Arc::clone(&stop))).collect();
    let mut producer = target.connect();
    let rounds = 20;
    for _ in 0..rounds {
        producer.send(format!("peek {m}\r\nput 0 0 1 1\r\nx\r\n"));
        thread::sleep(Duration::from_millis(100));
    }
    // Now the producer reads all it was owed, in order.
    let mut puts = 0;
    for _ in 0..rounds {
        assert!(producer.reply().starts_with(&format!("FOUND {m} ")));
        inserted(&producer.reply());
        puts += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let results = workers.into_iter().map(|w| w.join().unwrap()).collect();
    assert_each_job_once(results, puts);
}

#[test]
fn a_producer_that_does_not_read_holds_up_no_worker_over_tcp() {
    a_producer_that_does_not_read_holds_up_no_worker(false);
}

#[test]
fn a_producer_that_does_not_read_holds_up_no_worker_over_a_unix_socket() {
    a_producer_that_does_not_read_holds_up_no_worker(true);
}

/// Puts `count` jobs delayed for an hour into tube `tube`, pipelined.
fn put_delayed(conn: &mut Conn, tube: &str, count: usize) {
    assert_eq!(conn.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
    let batch: Vec<u8> = b"put 0 3600 60 1\r\nd\r\n".repeat(1000);
    for _ in 0..count / 1000 {
        conn.send(&batch);
        for _ in 0..1000 {
            inserted(&conn.reply());
        }
    }
}

/// Scenario 3. W1 then W2 block in reserve. One write carries a TTR-1 put
/// (handed to W1) and a kick long enough to hold the engine's lock past
/// that TTR. When the lock is free, W1's thread and the timer race for the
/// lapsed hand-off: whoever wins, the job goes to one worker only.
#[test]
fn a_hand_off_that_lapsed_under_a_long_lock_goes_to_one_worker() {
    let target = Target::start(false, &[]);
    let mut producer = target.connect();
    // A kick that takes over 1.5 s on this machine and build: double the
    // count until one does.
    let mut count = 50_000;
    let mut round = 0;
    loop {
        let tube = format!("slow-{round}");
        put_delayed(&mut producer, &tube, count);
        let started = Instant::now();
        assert_eq!(producer.cmd(&format!("kick {count}")), format!("KICKED {count}\r\n"));
        if started.elapsed() > Duration::from_millis(1500) {
            break;
        }
        round += 1;
        count *= 2;
        if count > 4_000_000 {
            // A fast build kicks four million jobs in under 1.5 s: the
            // lock is never held long enough for the race this plays.
            eprintln!("skipped: no kick of up to 4,000,000 jobs took 1.5 s");
            return;
        }
    }
    let mut observer = target.connect();
    for round in 0..2 {
        let slow = format!("slow-again-{round}");
        put_delayed(&mut producer, &slow, count);
        assert_eq!(producer.cmd("use default"), "USING default\r\n");
        one_round(&target, &mut producer, &mut observer, &slow, count);
    }
}

/// `count` new connections, each blocked in `reserve` before the next
/// one sends its own (so they wait in that order), as `observer` sees.
fn block_in_reserve(target: &Target, observer: &mut Conn, count: usize) -> Vec<Conn> {
    (1..=count)
        .map(|n| {
            let mut w = target.connect();
            w.send("reserve\r\n");
            let waiting = || observer.cmd("stats").contains(&format!("current-waiting: {n}\n"));
            assert!(common::settle(common::HANG_GUARD, waiting));
            w
        })
        .collect()
}

/// The body of the job that [`one_round`] puts, once the round's job is
/// gone, for each worker still waiting, so that its wait ends.
const ROUND_OVER: &str = "over";

/// One round of the scenario above: `slow` holds `count` delayed jobs.
fn one_round(target: &Target, producer: &mut Conn, observer: &mut Conn, slow: &str, count: usize) {
    let waiters = block_in_reserve(target, observer, 2);
    // Each worker notes when a job arrives and deletes it at once. A
    // worker the job never reaches is sent ROUND_OVER, not timed out: on
    // a loaded machine the job may come to it many seconds late.
    let readers: Vec<_> = waiters
        .into_iter()
        .map(|mut w| {
            thread::spawn(move || {
                let got = w.reply();
                let at = Instant::now();
                let id = got.split(' ').nth(1).unwrap_or("0").to_string();
                let deleted = w.cmd(&format!("delete {id}"));
                (!got.ends_with(&format!("\r\n{ROUND_OVER}\r\n"))).then_some((got, at, deleted))
            })
        })
        .collect();
    producer.send(format!("put 0 0 1 1\r\nx\r\nuse {slow}\r\nkick {count}\r\n"));
    let id = inserted(&producer.reply());
    assert_eq!(producer.reply(), format!("USING {slow}\r\n"));
    assert_eq!(producer.reply(), format!("KICKED {count}\r\n"));
    // The job is gone once a worker that holds it has deleted it; no
    // worker can be sent it after that.
    let gone = || observer.cmd(&format!("peek {id}")) == "NOT_FOUND\r\n";
    assert!(common::settle(common::HANG_GUARD, gone), "job {id} was never deleted");
    let stats = observer.cmd("stats");
    let still_waiting = stats.split("\ncurrent-waiting: ").nth(1).and_then(|rest| rest.split('\n').next());
    for _ in 0..still_waiting.and_then(|n| n.parse().ok()).expect("current-waiting") {
        observer.put(60, ROUND_OVER.as_bytes());
    }
    let got: Vec<_> = readers.into_iter().filter_map(|r| r.join().unwrap()).collect();
    let reserved = format!("RESERVED {id} 1\r\nx\r\n");
    assert!(got.iter().all(|(reply, _, _)| *reply == reserved), "{got:?}");
    match got.as_slice() {
        [(_, _, deleted)] => assert_eq!(deleted, "DELETED\r\n"),
        // Two holders one after the other are right only if the first
        // got the job before the kick and held it past its TTR: then the
        // second got it only after the kick, over a second later. Both at
        // once is the double delivery.
        [(_, a, first), (_, b, second)] => {
            let gap = if a > b { *a - *b } else { *b - *a };
            assert!(gap >= Duration::from_secs(1), "two workers got the job {gap:?} apart");
            let deleted = [first, second].iter().filter(|d| d.as_str() == "DELETED\r\n").count();
            assert_eq!(deleted, 1, "{got:?}");
        }
        _ => panic!("no worker got the job"),
    }
}

/// Issue 24's first defect. W1 then W2 block in reserve. One write carries
/// a TTR-1 put (handed to W1) and a kick that holds the engine's lock for
/// most of that second. If W1's thread collects the job only once the lock
/// is free, its TTR starts then: W1 holds it a full second from its
/// `RESERVED`, and W2 never sees it. (Counted from the hand-off, the TTR
/// ran out a moment after W1 was told, and W2 got the job while W1 still
/// believed it held it.)
///
/// W1's thread may also win the lock before the kick does. Then its TTR
/// rightly started before the kick, and a kick that runs long on a busy
/// machine may end it; that round shows nothing and another is played,
/// on a fresh server, until W1 is told after the kick.
#[test]
fn a_worker_s_ttr_starts_when_it_is_told_not_when_the_lock_was_busy() {
    let Some(count) = a_kick_that_takes(0.5..=0.9) else {
        eprintln!("skipped: no kick of up to 4,000,000 jobs took 0.5 to 0.9 s here");
        return;
    };
    for _ in 0..6 {
        if w1_holds_a_job_told_after_a_long_kick(count) {
            return;
        }
    }
    eprintln!("skipped: in 6 rounds W1 always collected its job before the kick");
}

/// How many delayed jobs one `kick` moves in `took` seconds on this
/// machine and build, if some count up to four million does.
fn a_kick_that_takes(took: std::ops::RangeInclusive<f64>) -> Option<usize> {
    let target = Target::start(false, &[]);
    let mut producer = target.connect();
    let mut count = 50_000;
    for round in 0..6 {
        let tube = format!("calibrate-{round}");
        put_delayed(&mut producer, &tube, count);
        let started = Instant::now();
        assert_eq!(producer.cmd(&format!("kick {count}")), format!("KICKED {count}\r\n"));
        let seconds = started.elapsed().as_secs_f64();
        if took.contains(&seconds) {
            return Some(count);
        }
        // Aim at the middle; round to whole thousands, as put_delayed puts.
        let aim = (took.start() + took.end()) / 2.0;
        count = ((count as f64 * aim / seconds.max(0.01)) as usize).clamp(1000, 4_000_000) / 1000 * 1000;
    }
    None
}

/// One round of the test above on a fresh server. Returns whether it
/// played the case that matters: W1 told only after the kick.
fn w1_holds_a_job_told_after_a_long_kick(count: usize) -> bool {
    let target = Target::start(false, &[]);
    let mut producer = target.connect();
    put_delayed(&mut producer, "slow", count);
    assert_eq!(producer.cmd("use default"), "USING default\r\n");
    let mut observer = target.connect();
    let mut workers = block_in_reserve(&target, &mut observer, 2);
    let (mut w1, mut w2) = (workers.remove(0), workers.remove(0));
    producer.send(format!("put 0 0 1 1\r\nx\r\nuse slow\r\nkick {count}\r\n"));
    let kick = thread::spawn(move || {
        let id = inserted(&producer.reply());
        assert_eq!(producer.reply(), "USING slow\r\n");
        assert_eq!(producer.reply(), format!("KICKED {count}\r\n"));
        (id, Instant::now())
    });
    let reserved = w1.reply();
    let told = Instant::now();
    let id: u64 = reserved.split(' ').nth(1).and_then(|n| n.parse().ok()).expect("RESERVED");
    assert_eq!(reserved, format!("RESERVED {id} 1\r\nx\r\n"));
    // Well inside the second W1 was promised, past the one the hand-off saw.
    thread::sleep(Duration::from_millis(600));
    let deleted = w1.cmd(&format!("delete {id}"));
    let answered = told.elapsed();
    let (put, kicked) = kick.join().unwrap();
    assert_eq!(put, id);
    // Told before the kick ended (by far more than a scheduler's hiccup):
    // the TTR started before the kick, and the delete may come too late.
    // So may a delete that a loaded machine sent or answered only after
    // W1's second: that round shows nothing either.
    let told_before_the_kick_ended = kicked.saturating_duration_since(told) > Duration::from_millis(200);
    if told_before_the_kick_ended || answered >= Duration::from_secs(1) {
        assert!(
            deleted == "DELETED\r\n" || answered >= Duration::from_secs(1),
            "{deleted:?} after {answered:?}"
        );
        return false;
    }
    assert_eq!(deleted, "DELETED\r\n");
    assert_eq!(w2.reply_within(Duration::from_millis(1500)), None, "W2 got the job W1 held");
    true
}

/// No wake is lost: rounds of workers blocked in `reserve`, some of which
/// hang up while blocked, woken all at once by producers putting from
/// several connections together (so wakes are carried out of the lock by
/// several threads, the fair lock's step-asides among them). Every job
/// reaches a worker that stayed, once, within the round's deadline.
#[test]
fn every_blocked_worker_is_woken_when_many_puts_land_at_once() {
    let target = Target::start(false, &[]);
    let mut observer = target.connect();
    const WORKERS: usize = 12;
    const QUITTERS: usize = 4;
    for round in 0..40 {
        let mut workers: Vec<_> = (0..WORKERS + QUITTERS).map(|_| target.connect()).collect();
        for w in &mut workers {
            w.send("reserve\r\n");
        }
        let all = WORKERS + QUITTERS;
        let waiting = || observer.cmd("stats").contains(&format!("current-waiting: {all}\n"));
        assert!(common::settle(common::HANG_GUARD, waiting), "round {round}: workers not waiting");
        // Some hang up while blocked: a job must never be stuck with them.
        workers.truncate(WORKERS);
        let producers: Vec<_> = (0..4)
            .map(|_| {
                let mut p = target.connect();
                thread::spawn(move || (0..WORKERS / 4).map(|_| p.put(60, b"j")).collect::<Vec<u64>>())
            })
            .collect();
        let mut put: Vec<u64> = producers.into_iter().flat_map(|p| p.join().unwrap()).collect();
        let readers: Vec<_> = workers
            .into_iter()
            .map(|mut w| thread::spawn(move || w.reply_within(common::REPLY_TIMEOUT)))
            .collect();
        let mut got: Vec<u64> = readers
            .into_iter()
            .map(|r| {
                let reply =
                    r.join().unwrap().unwrap_or_else(|| panic!("round {round}: a worker was never woken"));
                reply.split(' ').nth(1).and_then(|id| id.parse().ok()).expect("RESERVED")
            })
            .collect();
        put.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, put, "round {round}: each job to one worker");
        // The round's workers close; their jobs go back and are deleted.
        let settled = || observer.cmd("stats").contains("current-jobs-ready: 12\n");
        assert!(common::settle(common::HANG_GUARD, settled), "round {round}: jobs not released");
        for id in put {
            assert_eq!(observer.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    }
}

/// Waits until the server counts `count` clients blocked in a reserve.
fn until_waiting(observer: &mut common::Client, count: u64) {
    let waiting = || common::stat_u64(observer, "current-waiting") == count;
    assert!(common::settle(common::HANG_GUARD, waiting), "never {count} waiting");
}

/// A job handed to a worker whose socket has no room for it: the thread
/// that put it sends what fits and goes on (its producer gets `INSERTED`,
/// another worker gets the next job); the rest is written, whole and in
/// order, when the worker reads: by the hang-up watcher while the worker's
/// thread waits in a read of its socket (`reserve`), by that thread when it
/// sleeps in its mailbox (`reserve-with-abort`, see `conn/wait.rs`).
fn a_delivery_to_a_worker_whose_socket_is_full_arrives_whole(reserve: &str) {
    let server = common::start_args(&["-z", "8000000"]);
    let mut observer = server.connect();
    let mut slow = server.connect();
    slow.send(format!("{reserve}\r\n"));
    until_waiting(&mut observer, 1);
    let mut quick = server.connect();
    quick.send("reserve\r\n");
    until_waiting(&mut observer, 2);
    let mut producer = server.connect();
    // Far more than a loopback socket's buffers hold.
    let big: Vec<u8> = (0..6_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let id = common::put_bytes(&mut producer, 0, 0, 60, &big);
    assert_eq!(producer.put(0, 0, 60, "small"), format!("INSERTED {}\r\n", id + 1));
    quick.expect(format!("RESERVED {} 5\r\nsmall\r\n", id + 1));
    assert_eq!(quick.cmd(&format!("delete {}", id + 1)), "DELETED\r\n");
    // Only now does the slow worker read.
    let reply = slow.reply_bytes();
    let header = format!("RESERVED {id} {}\r\n", big.len());
    assert_eq!(&reply[..header.len()], header.as_bytes());
    assert!(reply[header.len()..reply.len() - 2] == big[..], "the body arrived whole and in order");
    assert_eq!(&reply[reply.len() - 2..], b"\r\n");
    assert_eq!(slow.cmd(&format!("delete {id}")), "DELETED\r\n");
    assert_eq!(observer.stat("current-jobs-reserved"), "0");
}

#[test]
fn a_delivery_to_a_worker_whose_socket_is_full_is_finished_while_its_thread_reads() {
    a_delivery_to_a_worker_whose_socket_is_full_arrives_whole("reserve");
}

#[test]
fn a_delivery_to_a_worker_whose_socket_is_full_is_finished_by_its_own_thread() {
    a_delivery_to_a_worker_whose_socket_is_full_arrives_whole("reserve-with-abort");
}

/// A reserve that nothing but a job can end within a second waits in a
/// read of its socket: it sees its client's half-close itself, and answers
/// `TIMED_OUT`. One that waited longer goes on in its mailbox: a job put
/// then still reaches it, and a hang-up then is still seen, by the watcher.
#[test]
fn a_wait_in_a_read_sees_a_half_close_and_one_past_a_second_still_gets_its_job() {
    let server = common::start();
    let mut observer = server.connect();
    let mut c = server.connect();
    c.send("reserve\r\n");
    until_waiting(&mut observer, 1);
    c.half_close();
    c.expect("TIMED_OUT\r\n");
    c.expect_closed();
    until_waiting(&mut observer, 0);

    let mut w = server.connect();
    w.send("reserve\r\n");
    until_waiting(&mut observer, 1);
    thread::sleep(Duration::from_millis(1300)); // past the read's second
    let id = observer.put_ok("late");
    w.expect(format!("RESERVED {id} 4\r\nlate\r\n"));
    assert_eq!(w.cmd(&format!("delete {id}")), "DELETED\r\n");
    w.send("reserve\r\n");
    until_waiting(&mut observer, 1);
    thread::sleep(Duration::from_millis(1300));
    drop(w);
    until_waiting(&mut observer, 0);
    // The wait ends as the watcher reports the hang-up; the connection, as
    // its thread then finds out and leaves.
    let closed = || common::stat_u64(&mut observer, "current-connections") == 1;
    assert!(common::settle(common::HANG_GUARD, closed), "the worker's connection never ended");
}

/// A delivery racing the worker's hang-up: whichever comes first, the job
/// is never lost. It is either delivered into a socket about to close (and
/// back to ready when the connection ends) or never handed over; either
/// way another worker gets it.
#[test]
fn a_delivery_racing_a_hang_up_loses_no_job() {
    let server = common::start();
    let mut observer = server.connect();
    let mut producer = server.connect();
    let mut other = server.connect();
    for round in 1..=50u64 {
        let mut leaving = server.connect();
        leaving.send("reserve\r\n");
        until_waiting(&mut observer, 1);
        producer.send(format!("put 0 0 60 5\r\njob{:02}\r\n", round % 100));
        drop(leaving);
        assert_eq!(producer.reply(), format!("INSERTED {round}\r\n"));
        let job = format!("RESERVED {round} 5\r\njob{:02}\r\n", round % 100);
        assert_eq!(other.cmd(&common::reserve_guarded()), job);
        assert_eq!(other.cmd(&format!("delete {round}")), "DELETED\r\n");
        until_waiting(&mut observer, 0);
    }
    assert_eq!(observer.stat("current-jobs-ready"), "0");
}

/// A job handed to a worker whose socket has no room for it is taken
/// from the worker before its reply has left: its TTR runs out, or another
/// client flushes its tube (reference §10, "A lapsed hand-off"; §3.28). The
/// first worker is never sent the rest of a job it no longer holds: its
/// connection ends instead, and what it reads is the start of the reply,
/// then the end of the stream. After a lapse, the next worker gets the job.
///
/// Each wait here ends on whichever comes first, the right event or the
/// wrong one, and fails at once on the wrong one, never at the hang
/// guard: the next worker waits for the job or for it to go back to the
/// first worker; the first worker reads until the cut, or until it has
/// the whole job, or until the server has it waiting in line again.
fn a_delivery_taken_back_is_never_finished(reserve: &str, flushed: bool) {
    let server = common::start_args(&["-z", "8000000"]);
    let mut observer = server.connect();
    let mut stuck = server.connect();
    stuck.send(format!("{reserve}\r\n"));
    until_waiting(&mut observer, 1);
    let mut producer = server.connect();
    // Far more than a loopback socket's buffers hold.
    let big: Vec<u8> = (0..6_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let ttr = if flushed { 3600 } else { 1 };
    let id = common::put_bytes(&mut producer, 0, 0, ttr, &big);
    let header = format!("RESERVED {id} {}\r\n", big.len());
    let whole = header.len() + big.len() + 2;
    // The stuck worker reads nothing meanwhile.
    let mut next = server.connect();
    if flushed {
        assert_eq!(next.cmd("flush-tube default"), "FLUSHED 1\r\n");
    } else {
        let reply = the_next_worker_s_job(&mut next, &mut observer, id);
        assert_eq!(reply.len(), whole);
        assert!(reply.starts_with(&header));
        assert_eq!(next.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    // Now the stuck worker reads: never the whole reply.
    let received = read_to_the_cut(&mut stuck, whole, &mut observer);
    assert!(received.starts_with(header.as_bytes()), "it was sent the start of the reply");
    assert_eq!(observer.stat("current-jobs-reserved"), "0");
    let closed = || observer.stat("current-connections") == "3";
    assert!(common::settle(common::HANG_GUARD, closed), "the stuck worker's connection did not end");
}

/// Job `id`'s reply to `next`, once the job's TTR has taken it from the
/// worker it was handed to. Fails at once if the job is reserved again
/// meanwhile by anyone else: it went back to the worker that was cut off.
fn the_next_worker_s_job(next: &mut common::Client, observer: &mut common::Client, id: u64) -> String {
    let started = Instant::now();
    loop {
        let reply = next.cmd("reserve-with-timeout 0");
        if reply != "TIMED_OUT\r\n" {
            return reply;
        }
        let reserves = observer.yaml_map(&format!("stats-job {id}"))["reserves"].clone();
        assert_eq!(reserves, "1", "job {id} was reserved again, not by the next worker");
        assert!(started.elapsed() < common::HANG_GUARD, "job {id}'s TTR never ran out");
        thread::sleep(Duration::from_millis(20));
    }
}

/// What `stuck` reads until the server ends its stream (the cut). Fails
/// at once if it reads `whole` bytes (the whole reply of a job it no
/// longer holds) or if, while nothing arrives, the server counts a client
/// waiting in line (it was put back in line with part of a reply sent,
/// never cut).
fn read_to_the_cut(stuck: &mut common::Client, whole: usize, observer: &mut common::Client) -> Vec<u8> {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut chunk = vec![0; 1 << 16];
    stuck.stream.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    loop {
        match stuck.stream.read(&mut chunk) {
            Ok(0) => return received,
            Ok(n) => {
                received.extend_from_slice(&chunk[..n]);
                assert!(received.len() < whole, "a worker was sent the whole of a job it no longer holds");
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                let waiting = observer.stat("current-waiting");
                assert_eq!(
                    waiting,
                    "0",
                    "after {} bytes, the worker was put back in line, not cut",
                    received.len()
                );
                assert!(started.elapsed() < common::HANG_GUARD, "never cut, after {} bytes", received.len());
            }
            Err(e) => panic!("{e} after {} bytes", received.len()),
        }
    }
}

#[test]
fn a_lapsed_delivery_is_never_finished_while_its_thread_reads() {
    a_delivery_taken_back_is_never_finished("reserve", false);
}

#[test]
fn a_lapsed_delivery_is_never_finished_by_its_own_thread() {
    a_delivery_taken_back_is_never_finished("reserve-with-abort", false);
}

#[test]
fn a_flushed_delivery_is_never_finished() {
    a_delivery_taken_back_is_never_finished("reserve", true);
}

/// Issue 62 §5: a job's reply that lapses is never finished, whoever
/// writes it, and however the worker came by the job. A worker reserves
/// jobs that are ready at once (`reserve`, or `reserve-batch 3`) and
/// reads nothing, so their replies wait for room; their TTR runs out, and
/// a second worker reserves and deletes them. The first is never sent the
/// rest: what it reads is the start of the replies, then the end of the
/// stream.
fn a_reply_reserved_at_once_is_never_finished_once_it_lapses(batch: bool) {
    let server = common::start_args(&["-z", "8000000"]);
    let mut observer = server.connect();
    let mut producer = server.connect();
    let (count, size) = if batch { (3, 3_000_000u32) } else { (1, 6_000_000) };
    let body: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    let ids: Vec<u64> = (0..count).map(|_| common::put_bytes(&mut producer, 0, 0, 1, &body)).collect();
    let mut stuck = server.connect();
    stuck.send(if batch { "reserve-batch 3\r\n" } else { "reserve\r\n" });
    let whole =
        ids.iter().map(|id| format!("RESERVED {id} {size}\r\n").len() + body.len() + 2).sum::<usize>()
            + if batch { "RESERVED_BATCH 3\r\n".len() } else { 0 };
    let reserved = || observer.stat("current-jobs-reserved") == count.to_string();
    assert!(common::settle(Duration::from_secs(10), reserved), "the stuck worker reserved nothing");
    // The second worker gets each job once its TTR has run out.
    let mut next = server.connect();
    let started = Instant::now();
    let mut taken = 0;
    while taken < count {
        assert!(started.elapsed() < Duration::from_secs(30), "the jobs never came back");
        let reply = next.cmd("reserve-with-timeout 5");
        let id: u64 = reply.split(' ').nth(1).and_then(|n| n.parse().ok()).expect("RESERVED");
        assert!(ids.contains(&id), "{}", &reply[..40.min(reply.len())]);
        assert_eq!(next.cmd(&format!("delete {id}")), "DELETED\r\n");
        taken += 1;
    }
    // Now the stuck worker reads: never the whole of it. It fails as soon
    // as the whole has come, not when a wait for the end gives up.
    stuck.stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (mut received, mut chunk) = (0, vec![0; 1 << 16]);
    loop {
        match stuck.stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => received += n,
            Err(e) => panic!("{e} after {received} bytes: the connection did not end"),
        }
        assert!(received < whole, "a worker was sent the whole of jobs it no longer held");
    }
    let closed = || observer.stat("current-connections") == "3";
    assert!(common::settle(Duration::from_secs(10), closed), "the stuck worker's connection did not end");
}

#[test]
fn a_reserved_reply_that_lapses_unsent_is_never_finished() {
    a_reply_reserved_at_once_is_never_finished_once_it_lapses(false);
}

#[test]
fn a_reserve_batch_whose_jobs_lapse_unsent_is_never_finished() {
    a_reply_reserved_at_once_is_never_finished_once_it_lapses(true);
}
