//! The world the engine's test cases start from, and the way a connection
//! runs a command in it: an engine with a job in every state and three
//! clients ([`World`]), the steps a case is made of ([`put_step`] and the
//! like), and the connection's output buffer as a command finds it. The
//! cases are `cases.rs` (their worlds `case_worlds.rs`); the tests that
//! run them (`sweep.rs`, `log_sweep.rs`, `agreement.rs`, `sweep_reach.rs`,
//! `bounded.rs`) build on this file and on nothing of each other's.

use crate::engine::*;
use crate::protocol::{ConKey, SHORT_REPLY_LEN};
use crate::stats::ProcessStats;

/// An engine with a job in every state and three clients: a producer
/// using `jobs`, a worker watching `jobs` and `default` and holding a
/// reserved job, and a waiter watching only `quiet`.
pub(super) struct World {
    pub(super) e: Engine,
    pub(super) producer: ClientId,
    pub(super) worker: ClientId,
    pub(super) waiter: ClientId,
    pub(super) ready: JobId,
    pub(super) delayed: JobId,
    pub(super) buried: JobId,
    pub(super) reserved: JobId,
    /// A ready job with unique key `k`, whose key cools down for 60 s.
    pub(super) keyed: JobId,
    /// For a new connection: the server makes it before the engine's part.
    pub(super) waker: Arc<Condvar>,
    /// The latest time a step has run at, [`T0`] but for the timer's
    /// steps: when a restart from the log must find the world.
    pub(super) now: Time,
}

pub(super) fn name(s: &str) -> TubeName {
    TubeName::new(s.as_bytes()).unwrap()
}

pub(super) const T0: Time = Time::ZERO;

pub(super) fn put(e: &mut Engine, c: ClientId, pri: u32, delay: u32, body: &[u8]) -> JobId {
    put_keyed(e, c, pri, delay, body, None)
}

pub(super) fn put_keyed(
    e: &mut Engine,
    c: ClientId,
    pri: u32,
    delay: u32,
    body: &[u8],
    key: Option<UniqueKey>,
) -> JobId {
    e.count_put();
    let ticket = e.start_put(c, body.len() as u32).unwrap();
    let id = ticket.id();
    let job = new_job(ticket, pri, delay, Box::from(body), PutTags::new(key.as_ref(), None, None).unwrap());
    assert_eq!(e.put(c, job, T0), Reply::Inserted(id));
    id
}

/// A job of the worlds: TTR 60, made at [`T0`].
fn new_job(ticket: PutTicket, pri: u32, delay: u32, body: Box<[u8]>, tags: PutTags) -> NewJob {
    NewJob { ticket, pri, delay, ttr: 60, created: T0, body, tags }
}

/// Unique key `name` with a cooldown of `cooldown` seconds.
pub(super) fn key(name_: &str, cooldown: u32) -> Option<UniqueKey> {
    Some(UniqueKey { name: name(name_), cooldown })
}

thread_local! {
    /// Whether [`world`] measures for `--metrics` (the second sweep).
    pub(super) static METERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(super) fn world() -> World {
    let mut e = Engine::new(65535);
    e.set_metering(METERED.with(|m| m.get()));
    world_from(e)
}

/// [`world`]'s clients and jobs, in the engine `e`.
pub(super) fn world_from(mut e: Engine) -> World {
    // Each with a mailbox, as a connection has: a job handed to a blocked
    // reserve is delivered there (the engine's fast way), or, when the
    // mailbox finds no room, collected by the thread (the old way).
    let connect = |e: &mut Engine| e.connect(Arc::new(super::tests::Mailbox::default())).unwrap();
    let (producer, worker, waiter) = (connect(&mut e), connect(&mut e), connect(&mut e));
    e.use_tube(producer, &name("jobs"));
    e.watch(worker, &name("jobs"));
    e.watch(waiter, &name("quiet"));
    e.ignore(waiter, &name("default"));
    let buried = put(&mut e, producer, 1, 0, b"buried");
    assert!(matches!(e.reserve(worker, None, T0, &mut Vec::<u8>::new()), Some(Reply::Reserved(..))));
    assert_eq!(e.bury(worker, buried, 1, T0), Reply::Buried);
    let reserved = put(&mut e, producer, 2, 0, b"reserved");
    assert!(matches!(e.reserve(worker, None, T0, &mut Vec::<u8>::new()), Some(Reply::Reserved(..))));
    let ready = put(&mut e, producer, 3, 0, b"ready");
    let delayed = put(&mut e, producer, 4, 100, b"delayed");
    let keyed = put_keyed(&mut e, producer, 5, 0, b"keyed", key("k", 60));
    let cooling = put_keyed(&mut e, producer, 5, 0, b"cooling", key("c", 60));
    assert_eq!(e.delete(producer, cooling, T0), Reply::Deleted);
    World {
        e,
        producer,
        worker,
        waiter,
        ready,
        delayed,
        buried,
        reserved,
        keyed,
        waker: Arc::new(Condvar::new()),
        now: T0,
    }
}

pub(super) use super::sweep_state::state;

/// One command, as a connection runs it: the engine's call, and the reply
/// encoded into `out`.
pub(super) type Step = fn(&mut World, &mut Vec<u8>);

pub(super) fn process() -> ProcessStats<'static> {
    ProcessStats {
        pid: 1,
        version: "1.13",
        user_cpu: std::time::Duration::ZERO,
        system_cpu: std::time::Duration::ZERO,
        uptime_secs: 0,
        binlog: Default::default(),
        instance_id: "0123456789abcdef",
        hostname: "host",
        os: "os",
        platform: "x86_64",
    }
}

/// Concurrency key `name` with limit `limit`.
pub(super) fn con(name_: &str, limit: u32) -> Option<ConKey> {
    Some(ConKey { name: name(name_), limit })
}

/// `list-jobs-<state> <count> [<after>]` for the producer, the way
/// `Conn::list_jobs` runs it: the page started, its pieces, its text.
pub(super) fn list_step(w: &mut World, out: &mut Vec<u8>, state: State, after: Option<JobId>) {
    let mut listing = match w.e.list_jobs(w.producer, state, 1000, after) {
        Ok(listing) => listing,
        Err(refusal) => return refusal.encode(out),
    };
    while !w.e.list_jobs_piece(&mut listing) {}
    crate::stats::id_list_yaml(&listing.ids()).map_or(Reply::OutOfMemory, Reply::Ok).encode(out);
}

/// `put`, the way `Conn::put` makes it: a ticket, the body's memory, the job.
pub(super) fn put_step(w: &mut World, out: &mut Vec<u8>, delay: u32) {
    put_keyed_step(w, out, 0, delay, None);
}

/// [`put_step`] with priority `pri` and unique key `key`.
pub(super) fn put_keyed_step(w: &mut World, out: &mut Vec<u8>, pri: u32, delay: u32, key: Option<UniqueKey>) {
    put_tagged_step(w, out, pri, delay, key, None, None);
}

/// [`put_keyed_step`] with retry limit `limit` too.
pub(super) fn put_tagged_step(
    w: &mut World,
    out: &mut Vec<u8>,
    pri: u32,
    delay: u32,
    key: Option<UniqueKey>,
    limit: Option<u32>,
    con: Option<ConKey>,
) {
    put_with_tags_step(w, out, pri, delay, PutTags::new(key.as_ref(), limit, con.as_ref()));
}

/// [`put_step`] of a job in group `group` and waiting for `after` (each
/// none if empty).
pub(super) fn put_grouped_step(
    w: &mut World,
    out: &mut Vec<u8>,
    delay: u32,
    group: &'static str,
    after: &'static str,
) {
    let named = |name: &'static str| Some(name.as_bytes()).filter(|name| !name.is_empty());
    put_with_tags_step(w, out, 0, delay, PutTags::NONE.with_groups(named(group), named(after)));
}

/// [`put_step`] with priority `pri` and tags `tags`.
fn put_with_tags_step(w: &mut World, out: &mut Vec<u8>, pri: u32, delay: u32, tags: Option<PutTags>) {
    // The tags' names are claimed as the parser claims them, first.
    let Some(tags) = tags else {
        return Reply::OutOfMemory.encode(out);
    };
    w.e.count_put();
    let Some(ticket) = w.e.start_put(w.producer, 4) else {
        return Reply::OutOfMemory.encode(out);
    };
    let mut body = Vec::new();
    if body.try_reserve_exact(4).is_err() {
        w.e.cancel_put(ticket);
        return Reply::OutOfMemory.encode(out);
    }
    body.extend_from_slice(b"body");
    let job = new_job(ticket, pri, delay, body.into_boxed_slice(), tags);
    w.e.put(w.producer, job, T0).encode(out);
}

/// A connection's output buffer as it stands when a command starts.
pub(super) fn output() -> Vec<u8> {
    let mut out = Vec::new();
    out.try_reserve(SHORT_REPLY_LEN).unwrap();
    out
}
