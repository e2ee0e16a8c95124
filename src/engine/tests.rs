//! The engine's unit tests, with a fake clock: every behaviour here is
//! also pinned over the wire by the integration tests, and against a naive
//! model by `tests/model.rs`.

use super::*;

fn engine() -> Engine {
    Engine::new(65535)
}

fn client(e: &mut Engine) -> ClientId {
    e.connect(Arc::new(Condvar::new())).unwrap()
}

fn name(s: &str) -> TubeName {
    TubeName::new(s.as_bytes()).unwrap()
}

fn put(e: &mut Engine, c: ClientId, pri: u32, delay: u32, ttr: u32, now: Time) -> JobId {
    e.count_put();
    let ticket = e.start_put(c, 4).unwrap();
    let id = ticket.id();
    let job = NewJob { ticket, pri, delay, ttr, created: now, body: Box::from(&b"body"[..]) };
    assert_eq!(e.put(c, job, now), Reply::Inserted(id));
    id
}

fn reserved_id(reply: Option<Reply>) -> JobId {
    match reply {
        Some(Reply::Reserved(id, _)) => id,
        other => panic!("expected RESERVED, got {other:?}"),
    }
}

#[test]
fn reserve_takes_lowest_priority_then_lowest_id() {
    let mut e = engine();
    let c = client(&mut e);
    let t = Time::ZERO;
    let a = put(&mut e, c, 5, 0, 10, t);
    let b = put(&mut e, c, 1, 0, 10, t);
    let d = put(&mut e, c, 1, 0, 10, t);
    assert_eq!(reserved_id(e.reserve(c, None, t, &mut Vec::<u8>::new())), b);
    assert_eq!(reserved_id(e.reserve(c, None, t, &mut Vec::<u8>::new())), d);
    // Released with the same priority, b goes ahead of newer jobs again.
    assert_eq!(e.release(c, b, 1, 0, t), Reply::Released);
    assert_eq!(reserved_id(e.reserve(c, None, t, &mut Vec::<u8>::new())), b);
    assert_eq!(reserved_id(e.reserve(c, None, t, &mut Vec::<u8>::new())), a);
}

#[test]
fn ttr_expiry_returns_the_job_to_ready() {
    let mut e = engine();
    let c = client(&mut e);
    let id = put(&mut e, c, 0, 0, 2, Time::ZERO);
    reserved_id(e.reserve(c, None, Time::ZERO, &mut Vec::<u8>::new()));
    assert_eq!(e.tick(Time::from_secs(1)), Some(Time::from_secs(2)));
    assert_eq!(e.jobs[&id].state, State::Reserved);
    assert_eq!(e.tick(Time::from_secs(2)), None);
    assert_eq!(e.jobs[&id].state, State::Ready);
    assert_eq!(e.jobs[&id].counters.timeouts, 1);
    assert_eq!(e.job_timeouts, 1);
}

#[test]
fn delayed_jobs_mature_on_tick() {
    let mut e = engine();
    let c = client(&mut e);
    let id = put(&mut e, c, 0, 3, 10, Time::ZERO);
    assert_eq!(e.reserve(c, Some(0), Time::ZERO, &mut Vec::<u8>::new()), Some(Reply::TimedOut));
    assert_eq!(e.next_due(), Some(Time::from_secs(3)));
    e.tick(Time::from_secs(3));
    assert_eq!(reserved_id(e.reserve(c, None, Time::from_secs(3), &mut Vec::<u8>::new())), id);
}

#[test]
fn the_timer_never_visits_idle_tubes() {
    let mut e = engine();
    let c = client(&mut e);
    // A thousand tubes each hold one job due in a day: idle for now.
    for i in 0..1000 {
        e.use_tube(c, &name(&format!("idle{i}")));
        put(&mut e, c, 0, 86_400, 10, Time::ZERO);
    }
    e.use_tube(c, &name("busy"));
    let mut now = Time::ZERO;
    for _ in 0..50 {
        put(&mut e, c, 0, 1, 10, now);
        now = now.plus_secs(1);
        assert_eq!(e.next_due(), Some(now));
        // The tick visits the tubes the timetable names as due: the busy
        // one alone, not the thousand idle ones.
        let due = e.tubes.take_due(now);
        assert_eq!(due.len(), 1);
        e.tubes.return_due(due);
        e.tick(now);
    }
    assert_eq!(e.server_stats().jobs.ready, 50);
    assert_eq!(e.server_stats().jobs.delayed, 1000);
}

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

/// A waiter standing for a connection whose peer may have gone.
#[derive(Debug, Default)]
struct FakeConnection {
    hung_up: std::sync::atomic::AtomicBool,
}

impl Waker for FakeConnection {
    fn wake(&self) {}
    fn has_hung_up(&self) -> bool {
        self.hung_up.load(std::sync::atomic::Ordering::SeqCst)
    }
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
    assert_eq!(e.delete(w2, id), Reply::Deleted);
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

#[test]
fn disconnect_releases_reservations_in_reservation_order() {
    let mut e = engine();
    let (holder, waiter) = (client(&mut e), client(&mut e));
    let a = put(&mut e, holder, 10, 0, 10, Time::ZERO);
    let b = put(&mut e, holder, 1, 0, 10, Time::ZERO);
    assert_eq!(e.reserve_job(holder, a, Time::ZERO, &mut Vec::<u8>::new()).word(), "RESERVED");
    assert_eq!(e.reserve_job(holder, b, Time::ZERO, &mut Vec::<u8>::new()).word(), "RESERVED");
    assert_eq!(e.reserve(waiter, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    e.disconnect(holder, Time::ZERO);
    // The waiter gets the job reserved first, not the more urgent one.
    assert_eq!(reserved_id(e.check_wait(waiter, Time::ZERO, &mut Vec::<u8>::new())), a);
    assert_eq!(e.jobs[&b].state, State::Ready);
}

#[test]
fn deadline_soon_when_holding_a_job_in_its_last_second() {
    let mut e = engine();
    let c = client(&mut e);
    put(&mut e, c, 0, 0, 3, Time::ZERO);
    reserved_id(e.reserve(c, None, Time::ZERO, &mut Vec::<u8>::new()));
    // Blocks until the margin starts at 2 s.
    assert_eq!(e.reserve(c, Some(5), Time::ZERO, &mut Vec::<u8>::new()), None);
    assert_eq!(e.wake_time(c), Some(Time::from_secs(2)));
    assert_eq!(e.check_wait(c, Time::from_secs(1), &mut Vec::<u8>::new()), None);
    assert_eq!(e.check_wait(c, Time::from_secs(2), &mut Vec::<u8>::new()), Some(Reply::DeadlineSoon));
    // Inside the margin, a reserve answers at once.
    assert_eq!(e.reserve(c, None, Time::from_secs(2), &mut Vec::<u8>::new()), Some(Reply::DeadlineSoon));
}

#[test]
fn tubes_vanish_when_unreferenced_but_default_never() {
    let mut e = engine();
    let c = client(&mut e);
    e.use_tube(c, &name("e"));
    let id = put(&mut e, c, 0, 0, 10, Time::ZERO);
    e.use_tube(c, &name("default"));
    assert!(e.tubes.find(&name("e")).is_some());
    assert_eq!(e.delete(c, id), Reply::Deleted);
    assert!(e.tubes.find(&name("e")).is_none());
    e.disconnect(c, Time::ZERO);
    assert!(e.tubes.find(&name("default")).is_some());
}

#[test]
fn kick_takes_buried_before_delayed() {
    let mut e = engine();
    let c = client(&mut e);
    let delayed = put(&mut e, c, 0, 100, 10, Time::ZERO);
    let buried = put(&mut e, c, 0, 0, 10, Time::ZERO);
    reserved_id(e.reserve(c, None, Time::ZERO, &mut Vec::<u8>::new()));
    assert_eq!(e.bury(c, buried, 0, Time::ZERO), Reply::Buried);
    assert_eq!(e.kick(c, 10, Time::ZERO), Reply::KickedCount(1));
    assert_eq!(e.jobs[&delayed].state, State::Delayed);
    assert_eq!(e.kick(c, 10, Time::ZERO), Reply::KickedCount(1));
    assert_eq!(e.jobs[&delayed].state, State::Ready);
}

#[test]
fn the_memory_limit_refuses_puts_until_jobs_are_deleted() {
    let mut e = engine();
    let c = client(&mut e);
    e.set_memory_limit(Some(2 * (4 + JOB_MEMORY_OVERHEAD)));
    let first = put(&mut e, c, 0, 0, 10, Time::ZERO);
    put(&mut e, c, 0, 0, 10, Time::ZERO);
    assert_eq!(e.start_put(c, 4), None);
    assert_eq!(e.delete(c, first), Reply::Deleted);
    let ticket = e.start_put(c, 4).unwrap();
    e.cancel_put(ticket);
    assert_eq!(e.job_memory(), 4 + JOB_MEMORY_OVERHEAD);
}

#[test]
fn paused_tubes_hold_their_jobs_until_the_pause_ends() {
    let mut e = engine();
    let (producer, w) = (client(&mut e), client(&mut e));
    put(&mut e, producer, 0, 0, 10, Time::ZERO);
    assert_eq!(e.pause_tube(Some(&name("default")), 2, Time::ZERO), Reply::Paused);
    assert_eq!(e.reserve(w, None, Time::ZERO, &mut Vec::<u8>::new()), None);
    e.tick(Time::from_secs(2));
    assert_eq!(
        e.check_wait(w, Time::from_secs(2), &mut Vec::<u8>::new()).map(|r| r.word()),
        Some("RESERVED")
    );
}

#[test]
fn moving_jobs_between_heaps_never_allocates() {
    // Room for every heap a job may enter is claimed when it is put, so a
    // release, a delay running out or a TTR running out cannot fail for
    // want of memory: the heaps' storage does not change as jobs move.
    let mut e = engine();
    let c = client(&mut e);
    let ids: Vec<JobId> = (0..1000).map(|_| put(&mut e, c, 0, 0, 60, Time::ZERO)).collect();
    let t = e.clients[&c].used;
    let capacities = |e: &Engine| {
        let tube = e.tubes.get(t);
        (tube.ready.capacity(), tube.delayed.capacity(), e.reserved.capacity())
    };
    let before = capacities(&e);
    assert!(before.0 >= 1000 && before.1 >= 1000 && before.2 >= 1000, "{before:?}");
    for _ in &ids {
        reserved_id(e.reserve(c, Some(0), Time::ZERO, &mut Vec::<u8>::new()));
    }
    for &id in &ids {
        assert_eq!(e.release(c, id, 0, 5, Time::ZERO), Reply::Released);
    }
    e.tick(Time::from_secs(5));
    assert_eq!(e.server_stats().jobs.ready, 1000);
    assert_eq!(capacities(&e), before);
    // Once the jobs are deleted, the room goes too.
    for &id in &ids {
        assert_eq!(e.delete(c, id), Reply::Deleted);
    }
    let after = capacities(&e);
    assert!(after.0 <= 256 && after.1 <= 256 && after.2 <= 256, "{after:?}");
}
