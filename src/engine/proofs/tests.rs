//! The engine's unit tests, with a fake clock: every behaviour here is
//! also pinned over the wire by the integration tests, and against a naive
//! model by `tests/model.rs`.

use crate::engine::*;

pub(in crate::engine) fn engine() -> Engine {
    Engine::new(65535)
}

pub(in crate::engine) fn client(e: &mut Engine) -> ClientId {
    e.connect(Arc::new(Condvar::new())).unwrap()
}

/// A client's mailbox as the engine sees one (the server's is
/// `mailbox.rs`): it takes a job's reply when it has room for it, and
/// gives it back, withdrawn, unless it was `sent`.
#[derive(Debug, Default)]
pub(in crate::engine) struct Mailbox {
    pub(super) reply: std::sync::Mutex<Vec<u8>>,
    /// The reply in it has been sent: it can no longer be withdrawn.
    pub(super) sent: std::sync::atomic::AtomicBool,
}

impl Waker for Mailbox {
    fn wake(&self) {}

    fn has_hung_up(&self) -> bool {
        false
    }

    fn deliver(&self, _: JobId, write: &mut dyn FnMut(&mut Vec<u8>) -> bool) -> bool {
        let mut reply = self.reply.lock().unwrap();
        reply.clear();
        self.sent.store(false, std::sync::atomic::Ordering::SeqCst);
        write(&mut reply)
    }

    fn withdraw(&self, _: JobId) -> client::Withdrawal {
        let mut reply = self.reply.lock().unwrap();
        if reply.is_empty() || self.sent.load(std::sync::atomic::Ordering::SeqCst) {
            return client::Withdrawal::Told;
        }
        reply.clear();
        client::Withdrawal::Withdrawn
    }
}

pub(in crate::engine) fn name(s: &str) -> TubeName {
    TubeName::new(s.as_bytes()).unwrap()
}

pub(in crate::engine) fn put(
    e: &mut Engine,
    c: ClientId,
    pri: u32,
    delay: u32,
    ttr: u32,
    now: Time,
) -> JobId {
    put_tagged(e, c, pri, delay, ttr, now, PutTags::NONE)
}

/// [`put`] with the put's tags `tags`.
pub(in crate::engine) fn put_tagged(
    e: &mut Engine,
    c: ClientId,
    pri: u32,
    delay: u32,
    ttr: u32,
    now: Time,
    tags: PutTags,
) -> JobId {
    e.count_put();
    let ticket = e.start_put(c, 4).unwrap();
    let id = ticket.id();
    let job = NewJob { ticket, pri, delay, ttr, created: now, body: Box::from(&b"body"[..]), tags };
    assert_eq!(e.put(c, job, now), Reply::Inserted(id));
    id
}

pub(in crate::engine) fn reserved_id(reply: Option<Reply>) -> JobId {
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
    assert_eq!(e.delete(c, id, Time::ZERO), Reply::Deleted);
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
    assert_eq!(e.delete(c, first, Time::ZERO), Reply::Deleted);
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
        assert_eq!(e.delete(c, id, Time::ZERO), Reply::Deleted);
    }
    let after = capacities(&e);
    assert!(after.0 <= 256 && after.1 <= 256 && after.2 <= 256, "{after:?}");
}

#[test]
fn a_spent_id_range_refuses_every_put_and_never_gives_an_id_twice() {
    use crate::ids::{IdRange, LAST_JOB_ID};
    for range in [IdRange { start: 1, step: 1 << 63 }, IdRange { start: LAST_JOB_ID - 1, step: 1 }] {
        let mut e = engine();
        e.set_id_range(range);
        let c = client(&mut e);
        let first = put(&mut e, c, 0, 0, 10, Time::ZERO);
        let second = put(&mut e, c, 0, 0, 10, Time::ZERO);
        assert!(second > first, "{range:?}");
        for _ in 0..3 {
            assert!(e.start_put(c, 4).is_none(), "{range:?}: the range is spent");
        }
        assert_eq!(e.job_count(), 2);
        // A restart over the same log finds the range as spent as it was.
        let mut again = engine();
        again.set_id_range(range);
        again.restore(&[], Vec::new(), e.next_id(), Time::ZERO);
        let c = client(&mut again);
        assert!(again.start_put(c, 4).is_none());
    }
}
