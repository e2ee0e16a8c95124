//! The engine's unit tests of blocked reserves and the hand-off: who is
//! served first, what a hang-up or a byte does to a wait, and the rules
//! that keep a job with one worker when a hand-off waits for the lock.

use super::tests::{client, engine, name, put, reserved_id};
use crate::engine::*;

#[test]
fn blocked_waiters_are_served_oldest_first() {
    let mut e = engine();
    let producer = client(&mut e);
    let waiters: Vec<ClientId> = (0..3).map(|_| client(&mut e)).collect();
    for &w in &waiters {
        assert_eq!(e.reserve(w, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    }
    assert_eq!(e.waiting_clients, 3);
    let jobs: Vec<JobId> = (0..3).map(|_| put(&mut e, producer, 0, 0, 10, Time::ZERO)).collect();
    for (&w, &job) in waiters.iter().zip(&jobs) {
        assert_eq!(reserved_id(e.check_wait(w, Time::ZERO, &mut Vec::<u8>::new())), job);
    }
    assert_eq!(e.waiting_clients, 0);
}

#[test]
fn a_hung_up_waiter_gets_timed_out_and_no_job() {
    let mut e = engine();
    let (producer, w) = (client(&mut e), client(&mut e));
    assert_eq!(e.reserve(w, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    e.hang_up(w);
    assert_eq!(e.check_wait(w, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::TimedOut));
    let id = put(&mut e, producer, 0, 0, 10, Time::ZERO);
    assert_eq!(e.jobs[&id].state, State::Ready);
    assert_eq!(e.reserve(w, None, Time::ZERO, &mut Vec::<u8>::new()).map(|r| r.word()), Some("RESERVED"));
}

/// A waiter standing for a connection whose peer may have gone, or sent
/// bytes not yet read.
#[derive(Debug, Default)]
struct FakeConnection {
    hung_up: std::sync::atomic::AtomicBool,
    input: std::sync::atomic::AtomicBool,
}

impl Waker for FakeConnection {
    fn wake(&self) {}
    fn has_hung_up(&self) -> bool {
        self.hung_up.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn has_input(&self) -> bool {
        self.input.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn a_byte_ends_an_abortable_wait_and_only_that_kind() {
    let mut e = engine();
    let socket = Arc::new(FakeConnection::default());
    let (w, plain) = (e.connect(socket.clone()).unwrap(), e.connect(socket.clone()).unwrap());
    assert_eq!(e.reserve_with_abort(w, None, false, Time::ZERO, &mut Vec::<u8>::new()), None);
    assert_eq!(e.reserve(plain, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    // A report with no byte behind it (a stale one) ends nothing.
    e.client_stirred(w, false);
    assert_eq!(e.check_wait(w, Time::ZERO, &mut Vec::<u8>::new()), None);
    socket.input.store(true, std::sync::atomic::Ordering::SeqCst);
    e.client_stirred(w, false);
    e.client_stirred(plain, false);
    assert_eq!(e.check_wait(w, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::Aborted));
    assert_eq!(e.check_wait(plain, Time::ZERO, &mut Vec::<u8>::new()), None, "a plain reserve reads no byte");
    assert_eq!(e.waiting_clients, 1);
    // Counted as the reserves they stand in for.
    assert_eq!(
        e.reserve_with_abort(w, Some(0), false, Time::ZERO, &mut Vec::<u8>::new()),
        Some(Reply::TimedOut)
    );
    assert_eq!((e.cmds.reserve, e.cmds.reserve_with_timeout), (2, 1));
}

#[test]
fn bytes_already_buffered_abort_at_once_unless_a_job_is_ready() {
    let mut e = engine();
    let c = client(&mut e);
    assert_eq!(e.reserve_with_abort(c, None, true, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::Aborted));
    assert_eq!(e.waiting_clients, 0);
    let id = put(&mut e, c, 0, 0, 10, Time::ZERO);
    assert_eq!(reserved_id(e.reserve_with_abort(c, None, true, Time::ZERO, &mut Vec::<u8>::new())), id);
    // A half-closed client with bytes left: those first.
    e.hang_up(c);
    assert_eq!(e.reserve_with_abort(c, None, true, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::Aborted));
    assert_eq!(
        e.reserve_with_abort(c, None, false, Time::ZERO, &mut Vec::<u8>::new()),
        Some(Reply::TimedOut)
    );
}

#[test]
fn a_job_is_delivered_or_the_wait_aborted_never_both() {
    let mut e = engine();
    let producer = client(&mut e);
    let early = Arc::new(FakeConnection::default());
    let late = Arc::new(FakeConnection::default());
    let (w1, w2) = (e.connect(early.clone()).unwrap(), e.connect(late.clone()).unwrap());
    assert_eq!(e.reserve_with_abort(w1, None, false, Time::ZERO, &mut Vec::<u8>::new()), None);
    assert_eq!(e.reserve_with_abort(w2, None, false, Time::ZERO, &mut Vec::<u8>::new()), None);
    // w1's byte arrived but is not reported yet: the job passes it over.
    early.input.store(true, std::sync::atomic::Ordering::SeqCst);
    let id = put(&mut e, producer, 0, 0, 10, Time::ZERO);
    assert_eq!(e.check_wait(w1, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::Aborted));
    // w2's byte comes after its hand-off: the job is delivered, the
    // report of the byte finds no wait to end.
    late.input.store(true, std::sync::atomic::Ordering::SeqCst);
    e.client_stirred(w2, false);
    assert_eq!(reserved_id(e.check_wait(w2, Time::ZERO, &mut Vec::<u8>::new())), id);
    assert_eq!(e.jobs[&id].counters.reserves, 1);
    // A half-close behind the byte still aborts, then no reserve blocks.
    assert_eq!(e.reserve_with_abort(w1, None, false, Time::ZERO, &mut Vec::<u8>::new()), None);
    e.client_stirred(w1, true);
    assert_eq!(e.check_wait(w1, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::Aborted));
    early.input.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        e.reserve_with_abort(w1, None, false, Time::ZERO, &mut Vec::<u8>::new()),
        Some(Reply::TimedOut)
    );
}

#[test]
fn a_lapsed_hand_off_to_an_abortable_waiter_that_sent_meanwhile_aborts() {
    let mut e = engine();
    let producer = client(&mut e);
    let socket = Arc::new(FakeConnection::default());
    let w = e.connect(socket.clone()).unwrap();
    assert_eq!(e.reserve_with_abort(w, None, false, Time::ZERO, &mut Vec::<u8>::new()), None);
    let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
    // The byte is reported while the hand-off waits to be collected, and
    // the TTR runs out before it is: the byte must still end the wait.
    socket.input.store(true, std::sync::atomic::Ordering::SeqCst);
    e.client_stirred(w, false);
    e.tick(Time::from_secs(2));
    assert_eq!(e.check_wait(w, Time::from_secs(2), &mut Vec::<u8>::new()), Some(Reply::Aborted));
    assert_eq!(e.jobs[&id].state, State::Ready);
}

#[test]
fn a_handed_job_whose_ttr_ran_out_before_collection_goes_back_to_the_same_waiter() {
    let mut e = engine();
    let (producer, w1, w2) = (client(&mut e), client(&mut e), client(&mut e));
    assert_eq!(e.reserve(w1, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    assert_eq!(e.reserve(w2, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    // Handed to w1, whose thread does not run before the TTR is over
    // (another command held the lock); then the timer runs.
    let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
    e.tick(Time::from_secs(2));
    // w1 never saw the first reservation; it kept its place at the head
    // of the line and holds a fresh one. w2 is still waiting.
    assert_eq!(e.jobs[&id].reserved_by, w1);
    assert_eq!(e.jobs[&id].deadline, Time::from_secs(3));
    assert_eq!(e.jobs[&id].counters.reserves, 2);
    assert_eq!(e.jobs[&id].counters.timeouts, 1);
    assert_eq!(e.check_wait(w2, Time::from_secs(2), &mut Vec::<u8>::new()), None);
    assert_eq!(e.wake_time(w2), None);
    assert_eq!(reserved_id(e.check_wait(w1, Time::from_secs(2), &mut Vec::<u8>::new())), id);
    assert_eq!(e.waiting_clients, 1);
}

#[test]
fn a_hand_off_collected_after_its_ttr_ran_out_reaches_one_worker_only() {
    // Scenario: the lock was held past the job's TTR (a big kick), and w1's
    // thread gets it before the timer does. Collecting first catches up:
    // the lapsed reservation is taken back and w1, first in line, is given
    // a fresh one. w2 never hears of the job, and nothing is left for the
    // timer to hand out a second time.
    let mut e = engine();
    let (producer, w1, w2) = (client(&mut e), client(&mut e), client(&mut e));
    assert_eq!(e.reserve(w1, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    assert_eq!(e.reserve(w2, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
    let late = Time::from_secs(2);
    assert_eq!(reserved_id(e.check_wait(w1, late, &mut Vec::<u8>::new())), id);
    assert_eq!(e.jobs[&id].deadline, Time::from_secs(3), "a fresh reservation");
    assert_eq!(e.jobs[&id].counters.timeouts, 1);
    e.tick(late);
    assert_eq!(e.check_wait(w2, late, &mut Vec::<u8>::new()), None, "w2 still waits");
    assert_eq!(e.jobs[&id].reserved_by, w1);
}

#[test]
fn a_lapsed_hand_off_is_never_delivered_once_the_job_is_someone_elses() {
    let mut e = engine();
    let (producer, w1, w2) = (client(&mut e), client(&mut e), client(&mut e));
    assert_eq!(e.reserve(w1, Some(60), Time::ZERO, &mut Vec::<u8>::new()), None);
    assert_eq!(e.reserve(w2, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
    // w1 half-closes while its hand-off waits to be collected; then the
    // TTR runs out: the job goes to w2, who deletes it.
    e.hang_up(w1);
    e.tick(Time::from_secs(2));
    assert_eq!(reserved_id(e.check_wait(w2, Time::from_secs(2), &mut Vec::<u8>::new())), id);
    assert_eq!(e.delete(w2, id, Time::ZERO), Reply::Deleted);
    // w1 finally collects: not the job, and not a sleep without end.
    assert_eq!(e.check_wait(w1, Time::from_secs(2), &mut Vec::<u8>::new()), Some(Reply::TimedOut));
    assert_eq!(e.waiting_clients, 0);
}

#[test]
fn a_resumed_wait_keeps_its_timeout() {
    let mut e = engine();
    let (producer, w) = (client(&mut e), client(&mut e));
    assert_eq!(e.reserve(w, Some(5), Time::ZERO, &mut Vec::<u8>::new()), None);
    let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
    // The tube is paused before w collects; the job then lapses and
    // cannot be handed back, so w waits on until its own timeout.
    assert_eq!(e.pause_tube(Some(&name("default")), 10, Time::ZERO), Reply::Paused);
    e.tick(Time::from_secs(2));
    assert_eq!(e.jobs[&id].state, State::Ready);
    assert_eq!(e.check_wait(w, Time::from_secs(2), &mut Vec::<u8>::new()), None);
    assert_eq!(e.wake_time(w), Some(Time::from_secs(5)));
    assert_eq!(e.check_wait(w, Time::from_secs(5), &mut Vec::<u8>::new()), Some(Reply::TimedOut));
}

#[test]
fn a_blocked_client_with_nothing_to_wait_for_is_timed_out_not_left_asleep() {
    let mut e = engine();
    let c = client(&mut e);
    assert_eq!(e.reserve(c, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    // Its wait vanishes by some path that forgot to leave an outcome.
    e.stop_waiting(c);
    assert_eq!(e.check_wait(c, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::TimedOut));
    // A client that is not blocked has nothing to collect.
    assert_eq!(e.check_wait(c, Time::ZERO, &mut Vec::<u8>::new()), None);
}

#[test]
fn a_waiter_whose_connection_is_gone_is_passed_over() {
    let mut e = engine();
    let producer = client(&mut e);
    let gone = Arc::new(FakeConnection::default());
    let w1 = e.connect(gone.clone()).unwrap();
    let w2 = client(&mut e);
    assert_eq!(e.reserve(w1, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    assert_eq!(e.reserve(w2, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    // The hang-up has arrived on the socket but was not reported yet.
    gone.hung_up.store(true, std::sync::atomic::Ordering::SeqCst);
    let id = put(&mut e, producer, 0, 0, 10, Time::ZERO);
    assert_eq!(reserved_id(e.check_wait(w2, Time::ZERO, &mut Vec::<u8>::new())), id);
    assert_eq!(e.jobs[&id].counters.reserves, 1);
    assert_eq!(e.check_wait(w1, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::TimedOut));
    // And it never blocks again.
    assert_eq!(e.reserve(w1, None, Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::TimedOut));
}

/// Issue 24's rule: a worker's TTR counts from the moment its own loop
/// collects the job, however long the hand-off waited for the lock. Here
/// another command held the lock for 0.85 s of a 1 s TTR.
#[test]
fn a_handed_over_job_s_ttr_starts_when_its_worker_collects_it() {
    let mut e = engine();
    let (producer, worker) = (client(&mut e), client(&mut e));
    assert_eq!(e.reserve(worker, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
    let collected = Time(850_000_000);
    assert_eq!(reserved_id(e.check_wait(worker, collected, &mut Vec::<u8>::new())), id);
    assert_eq!(e.jobs[&id].deadline, collected.plus_secs(1));
    // At 1 s, counted from the hand-off, the job would have gone back.
    e.tick(Time::from_secs(1));
    assert_eq!((e.jobs[&id].state, e.jobs[&id].counters.timeouts), (State::Reserved, 0));
    e.tick(collected.plus_secs(1));
    assert_eq!((e.jobs[&id].state, e.jobs[&id].counters.timeouts), (State::Ready, 1));
}

#[test]
fn a_job_handed_to_a_mailbox_is_delivered_whole_and_the_reserve_is_over() {
    let mut e = engine();
    let producer = client(&mut e);
    let mailbox = Arc::new(super::tests::Mailbox::default());
    let w = e.connect(mailbox.clone()).unwrap();
    assert_eq!(e.reserve(w, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    let id = put(&mut e, producer, 0, 0, 10, Time::from_secs(3));
    // Reserved for it at once, its TTR running from the hand-off.
    assert_eq!(e.jobs[&id].state, State::Reserved);
    assert_eq!(e.jobs[&id].deadline, Time::from_secs(13));
    assert_eq!(e.waiting_clients, 0);
    // Nothing is left for the thread to collect under the lock.
    assert_eq!(e.check_wait(w, Time::from_secs(3), &mut Vec::<u8>::new()), None);
    assert_eq!(e.wake_time(w), None);
    assert_eq!(*mailbox.reply.lock().unwrap(), format!("RESERVED {id} 4\r\nbody\r\n").as_bytes());
    // Its TTR running out once the reply has left is an ordinary
    // timeout: the worker was told.
    mailbox.sent.store(true, std::sync::atomic::Ordering::SeqCst);
    e.catch_up(Time::from_secs(14));
    assert_eq!(e.jobs[&id].state, State::Ready);
    assert_eq!(e.jobs[&id].counters.timeouts, 1);
}

#[test]
fn a_delivered_reply_not_yet_sent_when_its_ttr_runs_out_is_withdrawn_and_the_wait_goes_on() {
    let mut e = engine();
    let producer = client(&mut e);
    let mailbox = Arc::new(super::tests::Mailbox::default());
    let (w, other) = (e.connect(mailbox.clone()).unwrap(), client(&mut e));
    assert_eq!(e.reserve(w, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    let id = put(&mut e, producer, 0, 0, 10, Time::ZERO);
    assert_eq!(e.reserve(other, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    // Its socket full, the worker has been sent nothing when the TTR ends:
    // the reply is withdrawn, the worker waits on in its place (first), and
    // the job, ready again, is handed to it anew, not to the other waiter.
    e.catch_up(Time::from_secs(10));
    assert_eq!(e.jobs[&id].counters.timeouts, 1);
    assert_eq!((e.jobs[&id].state, e.jobs[&id].reserved_by), (State::Reserved, w));
    assert_eq!(e.jobs[&id].deadline, Time::from_secs(20));
    assert_eq!(*mailbox.reply.lock().unwrap(), format!("RESERVED {id} 4\r\nbody\r\n").as_bytes());
    assert_eq!(e.waiting_clients, 1, "the other waiter still waits");
}
