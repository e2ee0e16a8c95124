//! The runs of the promise `bounded` (reference §3.0): a command run as
//! its connection runs it, a piece a lock, against more jobs than one
//! piece may touch, counting each piece's work ([`Pieces`]). A case names
//! its run (`Case::bounded`, `case.rs`), written beside the case (on
//! [`filled`], and [`tube_chunks`] for a command on a whole tube) or, if
//! long, here; the bounded test (`bounded.rs`) runs them.

use super::tests::{client, engine, put_tagged};
use crate::engine::groups::LET_GO_PIECE;
use crate::engine::listing::LIST_PIECE;
use crate::engine::*;
use crate::protocol::{TubeName, MAX_BATCH};

/// What each piece of one run did, and the most a piece may do.
pub(super) struct Pieces {
    pub(super) work: Vec<usize>,
    pub(super) most: usize,
    /// Whether the run must take more than one piece (it was given more
    /// work than a piece may do), or is bounded by its own line.
    pub(super) split: bool,
}

pub(super) fn name(s: &str) -> TubeName {
    TubeName::new(s.as_bytes()).unwrap()
}

/// An engine whose client uses and watches tube `jobs`, holding `n` ready
/// jobs of `body` bytes each.
pub(super) fn filled(n: usize, body: usize) -> (Engine, ClientId) {
    let mut e = engine();
    let c = client(&mut e);
    e.use_tube(c, &name("jobs"));
    e.watch(c, &name("jobs"));
    e.ignore(c, &name("default"));
    for _ in 0..n {
        e.count_put();
        let ticket = e.start_put(c, body as u32).unwrap();
        let id = ticket.id();
        let job = NewJob {
            ticket,
            pri: (id % 7) as u32,
            delay: 0,
            ttr: 600,
            created: Time::ZERO,
            body: vec![b'x'; body].into_boxed_slice(),
            tags: PutTags::NONE,
        };
        assert_eq!(e.put(c, job, Time::ZERO), Reply::Inserted(id));
    }
    (e, c)
}

/// Reserves every ready job for `c`; buries them if `bury`.
pub(super) fn reserve_all(e: &mut Engine, c: ClientId, bury: bool) {
    while let Some(Reply::Reserved(id, _)) = e.reserve(c, Some(0), Time::ZERO, &mut Vec::<u8>::new()) {
        if bury {
            assert_eq!(e.bury(c, id, 0, Time::ZERO), Reply::Buried);
        }
    }
}

pub(super) fn reserve_batch() -> Pieces {
    const BODY: usize = 10 * 1024;
    let (mut e, c) = filled(200, BODY);
    let (mut ids, mut out, mut work) = (Vec::with_capacity(200), Vec::new(), Vec::new());
    loop {
        let before = ids.len();
        e.reserve_batch(c, 200, Time::ZERO, BATCH_PIECE, &mut out, &mut ids);
        if ids.len() == before {
            break;
        }
        work.push((ids.len() - before) * BODY);
    }
    assert_eq!(ids.len(), 200);
    Pieces { work, most: BATCH_PIECE + BODY, split: true }
}

pub(super) fn delete_batch() -> Pieces {
    let (mut e, c) = filled(3 * MAX_BATCH, 1);
    let before = e.jobs.len();
    e.delete_batch(c, &mut (1..=MAX_BATCH as JobId), Time::ZERO);
    Pieces { work: vec![before - e.jobs.len()], most: MAX_BATCH, split: false }
}

/// A `delete` of a group's last member, a thousand held jobs and more
/// waiting for it: the jobs let go under each hold of the lock, the
/// delete's and then each tick's.
pub(super) fn delete() -> Pieces {
    let (mut e, c) = filled(0, 1);
    let tags = |group: Option<&'static [u8]>, after| PutTags::NONE.with_groups(group, after).unwrap();
    let member = put_tagged(&mut e, c, 0, 0, 600, Time::ZERO, tags(Some(b"g"), None));
    for _ in 0..3 * LET_GO_PIECE + 1 {
        put_tagged(&mut e, c, 0, 0, 600, Time::ZERO, tags(None, Some(b"g")));
    }
    assert!(matches!(e.reserve_job(c, member, Time::ZERO, &mut Vec::<u8>::new()), Reply::Reserved(..)));
    assert_eq!(e.delete(c, member, Time::ZERO), Reply::Deleted);
    let mut work = vec![e.job_counts.ready];
    while e.next_due().is_some_and(|due| due <= Time::ZERO) {
        let before = e.job_counts.ready;
        e.tick(Time::ZERO);
        work.push(e.job_counts.ready - before);
    }
    assert_eq!(e.job_counts.ready, 3 * LET_GO_PIECE + 1);
    Pieces { work, most: LET_GO_PIECE, split: true }
}

/// A command on a whole tube, its `line` as a client sends it, run on
/// `e` as the connection runs it, a chunk a lock: the jobs each chunk
/// changed, `jobs` in all.
pub(super) fn tube_chunks(e: &mut Engine, line: &str, jobs: usize) -> Pieces {
    let command = crate::protocol::parse(line.as_bytes()).expect("a command's line");
    let mut run = e.start_on_tube(command).expect("the tube");
    let mut work = Vec::new();
    loop {
        let before = run.done();
        let reply = e.tube_chunk(&mut run, Time::ZERO);
        work.push((run.done() - before) as usize);
        if reply.is_some() {
            break;
        }
    }
    assert_eq!(work.iter().sum::<usize>(), jobs, "{line}");
    Pieces { work, most: CLEAR_CHUNK, split: true }
}

/// A whole page of `list-jobs-<state>` over a tube of three pieces'
/// worth of jobs in that state: the slots each piece looked at (for the
/// buried list, which is walked, the jobs listed).
pub(super) fn list_jobs(state: State) -> Pieces {
    let (mut e, c) = filled(3 * LIST_PIECE + 1, 1);
    match state {
        State::Ready => {}
        State::Reserved => reserve_all(&mut e, c, false),
        State::Buried => reserve_all(&mut e, c, true),
        State::Delayed | State::Held => {
            reserve_all(&mut e, c, false);
            for id in 1..=(3 * LIST_PIECE + 1) as JobId {
                assert_eq!(e.release(c, id, 0, 100, Time::ZERO), Reply::Released);
            }
        }
    }
    let mut listing = e.list_jobs(c, state, MAX_BATCH, None).unwrap();
    let (mut work, mut seen) = (Vec::new(), 0);
    loop {
        let done = e.list_jobs_piece(&mut listing);
        work.push(listing.looked_at() - seen);
        seen = listing.looked_at();
        if done {
            break;
        }
    }
    let listed = listing.ids().len();
    assert_eq!(listed, MAX_BATCH);
    if state == State::Buried {
        return Pieces { work: vec![listed], most: MAX_BATCH, split: false };
    }
    Pieces { work, most: LIST_PIECE, split: true }
}

/// A bounded command's run, as its connection makes it: a case's proof
/// of the promise (`Case::bounded` in `cases.rs`).
pub(super) type Run = fn() -> Pieces;
