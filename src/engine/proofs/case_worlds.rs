//! The starting worlds of the engine's test cases (`cases.rs`), each a
//! change to [`world_from`](super::sweep_world::world_from)'s world, so
//! that every sweep can build it on an engine of its own: the allocation
//! sweep's, unlogged, and the log's and the agreement test's, with a real
//! binlog under it. And the steps too long to write inside a case.

use std::sync::atomic::{AtomicBool, Ordering};

use super::sweep_world::{
    con, key, name, put, put_grouped_step, put_keyed, put_keyed_step, put_step, put_tagged_step, World, T0,
};
use crate::engine::*;

/// What a case's world needs before its step runs.
pub(super) type Setup = fn(&mut World);

/// The world as [`world_from`](super::sweep_world::world_from) makes it.
pub(super) fn plain(_: &mut World) {}

/// The waiter blocked in a reserve.
pub(super) fn waiter_blocked(w: &mut World) {
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
}

/// The waiter blocked, and the producer using its tube.
pub(super) fn producer_for_waiter(w: &mut World) {
    waiter_blocked(w);
    w.e.use_tube(w.producer, &name("quiet"));
}

/// A job handed to the blocked waiter, not yet collected: a waiter
/// without a mailbox, so that its thread collects the job under the
/// lock, as when a mailbox has no room for it.
pub(super) fn job_handed_over(w: &mut World) {
    job_handed_to(w, Arc::new(Condvar::new()));
}

/// A job handed to a waiter on `quiet` that `waker` stands for.
fn job_handed_to(w: &mut World, waker: Arc<dyn Waker>) {
    w.waiter = w.e.connect(waker).unwrap();
    w.e.watch(w.waiter, &name("quiet"));
    w.e.ignore(w.waiter, &name("default"));
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
    w.e.use_tube(w.producer, &name("quiet"));
    put(&mut w.e, w.producer, 0, 0, b"handed");
}

/// A job handed to the blocked waiter and never collected.
pub(super) fn handoff_uncollected(w: &mut World) {
    waiter_blocked(w);
    w.e.use_tube(w.producer, &name("quiet"));
    put_step(w, &mut Vec::new(), 0);
}

/// A job handed to a blocked waiter whose mailbox has sent its reply.
pub(super) fn handoff_sent(w: &mut World) {
    let mailbox = Arc::new(super::tests::Mailbox::default());
    job_handed_to(w, mailbox.clone());
    mailbox.sent.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Tube `gone` gone with its last job, whose key `g` cools down still.
pub(super) fn a_tube_gone_with_a_key_cooling(w: &mut World) {
    w.e.use_tube(w.producer, &name("gone"));
    let id = put_keyed(&mut w.e, w.producer, 0, 0, b"gone", key("g", 60));
    assert_eq!(w.e.delete(w.producer, id, T0), Reply::Deleted);
    w.e.use_tube(w.producer, &name("jobs"));
    assert!(w.e.tubes.find(&name("gone")).is_none());
}

/// The job the waiter was handed, not yet sent, flushed with its tube.
pub(super) fn flush_quiet_step(w: &mut World, out: &mut Vec<u8>) {
    on_a_tube_step(w, out, "flush-tube quiet");
}

/// The worker holding a job of the waiter's tube, and the waiter blocked.
pub(super) fn job_for_waiter_held(w: &mut World) {
    w.e.watch(w.worker, &name("quiet"));
    w.e.use_tube(w.producer, &name("quiet"));
    let id = put(&mut w.e, w.producer, 0, 0, b"for the waiter");
    assert!(
        matches!(w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()), Some(Reply::Reserved(r, _)) if r == id)
    );
    w.reserved = id;
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
}

/// The waiter watching `quiet` (weight 1) and `jobs` (weight 3), both
/// with a job ready, and `jobs` with processing times.
pub(super) fn weighing(w: &mut World) {
    w.e.use_tube(w.producer, &name("quiet"));
    put(&mut w.e, w.producer, 0, 0, b"quiet job");
    w.e.watch_weighted(w.waiter, &name("jobs"), 3);
    for _ in 0..10 {
        let id = put(&mut w.e, w.producer, 0, 0, b"timed");
        assert!(matches!(w.e.reserve_job(w.worker, id, T0, &mut Vec::<u8>::new()), Reply::Reserved(..)));
        assert_eq!(w.e.delete(w.worker, id, Time::from_secs(2)), Reply::Deleted);
    }
}

/// A tube `other` whose only job is ready, as `w.ready`.
pub(super) fn tube_of_one_job(w: &mut World) {
    w.e.use_tube(w.producer, &name("other"));
    w.ready = put(&mut w.e, w.producer, 0, 0, b"alone");
    w.e.use_tube(w.producer, &name("jobs"));
}

/// A client whose socket holds unread bytes once `typed` is set: the
/// waker the server gives a connection, as far as the engine can tell.
#[derive(Debug, Default)]
struct Typist {
    typed: AtomicBool,
}

impl Waker for Typist {
    fn wake(&self) {}
    fn has_hung_up(&self) -> bool {
        false
    }
    fn has_input(&self) -> bool {
        self.typed.load(Ordering::SeqCst)
    }
}

/// The waiter replaced by a client blocked in a `reserve-with-abort` on
/// `quiet` whose bytes have arrived, and the producer using `quiet`.
pub(super) fn typist_blocked(w: &mut World) {
    let typist = Arc::new(Typist::default());
    let c = w.e.connect(typist.clone()).unwrap();
    w.e.watch(c, &name("quiet"));
    w.e.ignore(c, &name("default"));
    assert_eq!(w.e.reserve_with_abort(c, None, false, T0, &mut Vec::<u8>::new()), None);
    typist.typed.store(true, Ordering::SeqCst);
    w.waiter = c;
    w.e.use_tube(w.producer, &name("quiet"));
}

/// Tube `other` holds a job with the world's keyed job's key, `k`.
pub(super) fn key_taken_elsewhere(w: &mut World) {
    w.e.use_tube(w.producer, &name("other"));
    put_keyed_step(w, &mut Vec::new(), 0, 0, key("k", 0));
    w.e.use_tube(w.producer, &name("jobs"));
}

/// Keyed jobs that are not ready: `d` delayed, `b` buried, `r` reserved
/// by the worker.
pub(super) fn keyed_jobs_not_ready(w: &mut World) {
    w.e.use_tube(w.producer, &name("keyed"));
    put_keyed_step(w, &mut Vec::new(), 5, 30, key("d", 0));
    w.e.watch(w.worker, &name("keyed"));
    for k in ["b", "r"] {
        put_keyed_step(w, &mut Vec::new(), 0, 0, key(k, 0));
        let Some(Reply::Reserved(id, _)) = w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()) else {
            panic!("no keyed job to reserve");
        };
        if k == "b" {
            assert_eq!(w.e.bury(w.worker, id, 5, T0), Reply::Buried);
        }
    }
}

/// Tube `jobs` paused for 10 seconds.
pub(super) fn jobs_paused(w: &mut World) {
    assert_eq!(w.e.pause_tube(Some(&name("jobs")), 10, T0), Reply::Paused);
}

/// Four more buried jobs in `jobs` behind the world's one, and three
/// delayed jobs in `later`, a tube of nothing else.
pub(super) fn many(w: &mut World) {
    for _ in 0..4 {
        put_step(w, &mut Vec::new(), 0);
        let Some(Reply::Reserved(id, _)) = w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()) else {
            panic!("no job to bury");
        };
        assert_eq!(w.e.bury(w.worker, id, 5, T0), Reply::Buried);
    }
    w.e.use_tube(w.producer, &name("later"));
    for _ in 0..3 {
        put_step(w, &mut Vec::new(), 30);
    }
    w.e.use_tube(w.producer, &name("jobs"));
}

/// [`many`], the producer using `later`.
pub(super) fn many_later_used(w: &mut World) {
    many(w);
    w.e.use_tube(w.producer, &name("later"));
}

/// The worker's TTR a second from its end and no job ready.
pub(super) fn nothing_ready(w: &mut World) {
    assert_eq!(w.e.delete(w.producer, w.ready, T0), Reply::Deleted);
    assert_eq!(w.e.delete(w.producer, w.keyed, T0), Reply::Deleted);
}

/// The server in drain mode.
pub(super) fn draining(w: &mut World) {
    w.e.start_draining();
}

/// A job put with retry limit 1 (`max:1`) and reserved by the worker,
/// which becomes the world's `reserved`: the next end of its reservation
/// buries it.
pub(super) fn a_try_spent(w: &mut World) {
    put_tagged_step(w, &mut Vec::new(), 0, 0, None, Some(1), None);
    reserve_the_best(w);
}

/// [`a_try_spent`], released: its retry limit buried it, a dead letter of
/// tube `jobs`, still the world's `reserved`.
pub(super) fn a_dead_letter(w: &mut World) {
    a_try_spent(w);
    let _ = w.e.release(w.worker, w.reserved, 0, 0, T0);
}

/// Two jobs of concurrency key `c` (limit 1) in tube `jobs`, the first,
/// the most urgent of the tube, reserved by the worker: the second is
/// held back.
pub(super) fn a_key_at_its_limit(w: &mut World) {
    put_tagged_step(w, &mut Vec::new(), 0, 0, None, None, con("c", 1));
    put_tagged_step(w, &mut Vec::new(), 0, 0, None, None, con("c", 1));
    reserve_the_best(w);
}

/// The worker holding the best ready job, as `w.reserved`.
fn reserve_the_best(w: &mut World) {
    match w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()) {
        Some(Reply::Reserved(id, _)) => w.reserved = id,
        other => panic!("{other:?}"),
    }
}

/// Every ready job the worker may take reserved, and the waiter, made to
/// watch `jobs` only, blocked: the job it waits for is held.
fn block_the_waiter_on_jobs(w: &mut World) {
    while let Some(Reply::Reserved(..)) = w.e.reserve(w.worker, Some(0), T0, &mut Vec::<u8>::new()) {}
    w.e.watch(w.waiter, &name("jobs"));
    w.e.ignore(w.waiter, &name("quiet"));
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
}

/// [`a_key_at_its_limit`], the waiter blocked on `jobs`, where every
/// ready job but the held-back one is reserved.
pub(super) fn a_waiter_held_back(w: &mut World) {
    a_key_at_its_limit(w);
    block_the_waiter_on_jobs(w);
}

/// A member of group `g` (job 7, the most urgent of tube `jobs`),
/// reserved by the worker, and a job waiting for `g` (job 8), held.
pub(super) fn a_group(w: &mut World) {
    put_grouped_step(w, &mut Vec::new(), 0, "g", "");
    put_grouped_step(w, &mut Vec::new(), 0, "", "g");
    reserve_the_best(w);
}

/// Jobs 7 to 9 naming five groups: `z`, then `a` waiting for `b`, then
/// `c` waiting for `d`, as many names as slots.
pub(super) fn many_groups(w: &mut World) {
    put_grouped_step(w, &mut Vec::new(), 0, "z", "");
    put_grouped_step(w, &mut Vec::new(), 0, "a", "b");
    put_grouped_step(w, &mut Vec::new(), 0, "c", "d");
}

/// [`a_group`] with its member deleted, and the job held for `g`, let go,
/// reserved by the worker.
pub(super) fn a_let_go_job_reserved(w: &mut World) {
    a_group(w);
    assert_eq!(w.e.delete(w.worker, w.reserved, T0), Reply::Deleted);
    reserve_the_best(w);
}

/// Job 7, of group `x` and waiting for `y`, which has no member: ready.
pub(super) fn a_job_waiting_for_an_empty_group(w: &mut World) {
    put_grouped_step(w, &mut Vec::new(), 0, "x", "y");
}

/// [`a_group`] and a job waiting for `g` delayed 5 seconds.
pub(super) fn a_delayed_job_for_a_group(w: &mut World) {
    a_group(w);
    put_grouped_step(w, &mut Vec::new(), 5, "", "g");
}

/// [`a_group`], every other ready job reserved, and the waiter blocked on
/// `jobs`: the held job is the one it waits for.
pub(super) fn a_waiter_for_a_group(w: &mut World) {
    a_group(w);
    block_the_waiter_on_jobs(w);
}

/// The worker holding three jobs: the world's reserved one, then the
/// two best ready ones of `jobs`, reserved in that order.
pub(super) fn three_held(w: &mut World) {
    let first = w.reserved;
    reserve_the_best(w);
    reserve_the_best(w);
    w.reserved = first;
}

/// The world's keyed job (key `k`, a cooldown of 60 s) reserved by the
/// worker and buried behind the world's buried job.
pub(super) fn a_keyed_job_buried(w: &mut World) {
    assert!(matches!(w.e.reserve_job(w.worker, w.keyed, T0, &mut Vec::<u8>::new()), Reply::Reserved(..)));
    assert_eq!(w.e.bury(w.worker, w.keyed, 5, T0), Reply::Buried);
}

/// [`a_group`], its member buried by the worker: the job held for `g`
/// waits for a buried member.
pub(super) fn a_group_member_buried(w: &mut World) {
    a_group(w);
    assert_eq!(w.e.bury(w.worker, w.reserved, 0, T0), Reply::Buried);
}

/// `flush-buried jobs` as the connection runs it: chunks to the end.
pub(super) fn flush_buried_step(w: &mut World, out: &mut Vec<u8>) {
    on_a_tube_step(w, out, "flush-buried jobs");
}

/// `reserve` by the waiter, as a connection makes it.
pub(super) fn reserve_step(w: &mut World, out: &mut Vec<u8>) {
    if let Some(reply) = w.e.reserve(w.waiter, None, T0, out) {
        reply.encode(out);
    }
}

/// The timer's run at `secs`, the world's clock moved on to it; its
/// outcome written out.
pub(super) fn tick_step(w: &mut World, out: &mut Vec<u8>, secs: u64) {
    w.now = Time::from_secs(secs);
    let _ = std::io::Write::write_fmt(out, format_args!("{:?}", w.e.tick(w.now)));
}

/// `reserve-batch` as the connection runs it.
pub(super) fn reserve_batch_step(w: &mut World, out: &mut Vec<u8>) {
    let mut ids = Vec::new();
    if ids.try_reserve_exact(5).is_err() {
        return Reply::OutOfMemory.encode(out);
    }
    let head = w.e.reserve_batch(w.worker, 5, T0, usize::MAX, out, &mut ids);
    head.encode(out);
    for &id in &ids {
        w.e.reserved_reply(id).unwrap_or(Reply::InternalError).encode(out);
    }
}

/// `clear-tube jobs` as the connection runs it: chunks to the end.
pub(super) fn clear_step(w: &mut World, out: &mut Vec<u8>) {
    on_a_tube_step(w, out, "clear-tube jobs");
}

/// `flush-tube jobs` as the connection runs it: chunks to the end, then
/// the cooling keys.
pub(super) fn flush_step(w: &mut World, out: &mut Vec<u8>) {
    on_a_tube_step(w, out, "flush-tube jobs");
}

/// A command on a whole tube (`Command::works_in_chunks`), its `line` as
/// a client sends it, run as the connection runs it: started, then chunks
/// until one gives the reply. Every such command's cases use it.
pub(super) fn on_a_tube_step(w: &mut World, out: &mut Vec<u8>, line: &str) {
    let command = crate::protocol::parse(line.as_bytes()).expect("a command's line");
    assert!(command.works_in_chunks(), "{line}");
    let reply = match w.e.start_on_tube(command) {
        Err(answer) => answer,
        Ok(mut run) => loop {
            if let Some(reply) = w.e.tube_chunk(&mut run, T0) {
                break reply;
            }
        },
    };
    reply.encode(out);
}

/// The timer at 200 s ends the cooldown of key `c`. No client waits on
/// the timer: with a log, a record it could not write shows as the log's
/// failure (which a restart reads as the key cooling still, and ends at
/// once), written as `INTERNAL_ERROR`.
pub(super) fn cooldown_end_step(w: &mut World, out: &mut Vec<u8>) {
    let written = |e: &Engine| e.journal_stats().map(|s| s.records_written);
    let before = written(&w.e);
    w.now = Time::from_secs(200);
    let next = w.e.tick(w.now);
    if before.is_some() && written(&w.e) == before {
        return Reply::InternalError.encode(out);
    }
    let _ = std::io::Write::write_fmt(out, format_args!("{:?}", next.is_some()));
}
