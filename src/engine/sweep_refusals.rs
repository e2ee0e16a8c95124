//! The allocation sweep's cases for the replies the first lists did not
//! reach: each command's `NOT_FOUND` (or `NOT_IGNORED`), and the reserve
//! variants' other answers. The reach test (`sweep_reach.rs`) asks that
//! every reply of the table of commands be reached by a case named for
//! its command; these are the cases that make it so.

use super::sweep_world::{
    list_step, name, world, world_with_a_group, world_with_a_key_at_its_limit, Case, World, T0,
};
use super::*;

/// A job id no world holds.
const NO_JOB: JobId = 999;

/// The worker's TTR a second from its end and no job ready.
pub(super) fn world_with_nothing_ready() -> World {
    let mut w = world();
    assert_eq!(w.e.delete(w.producer, w.ready, T0), Reply::Deleted);
    assert_eq!(w.e.delete(w.producer, w.keyed, T0), Reply::Deleted);
    w
}

/// The world in drain mode.
fn world_draining() -> World {
    let mut w = world();
    w.e.start_draining();
    w
}

/// `reply`, if the command answered at once, into `out`.
fn answer(reply: Option<Reply<'_>>, out: &mut Vec<u8>) {
    if let Some(reply) = reply {
        reply.encode(out);
    }
}

pub(super) const REFUSALS: &[Case] = &[
    ("reserve-with-timeout 5, a job ready", world, |w, out| {
        answer(w.e.reserve(w.worker, Some(5), T0, out), out)
    }),
    ("reserve-with-timeout 5, DEADLINE_SOON", world_with_nothing_ready, |w, out| {
        answer(w.e.reserve(w.worker, Some(5), Time::from_secs(59), out), out)
    }),
    ("reserve-with-abort, a job ready", world, |w, out| {
        answer(w.e.reserve_with_abort(w.worker, None, false, T0, out), out)
    }),
    ("reserve-with-abort, DEADLINE_SOON", world_with_nothing_ready, |w, out| {
        answer(w.e.reserve_with_abort(w.worker, None, false, Time::from_secs(59), out), out)
    }),
    ("reserve-with-abort with a timeout of 0, none ready", world, |w, out| {
        answer(w.e.reserve_with_abort(w.waiter, Some(0), false, T0, out), out)
    }),
    ("reserve-job of no job", world, |w, out| w.e.reserve_job(w.waiter, NO_JOB, T0, out).encode(out)),
    ("delete of no job", world, |w, out| w.e.delete(w.producer, NO_JOB, T0).encode(out)),
    ("release of a job another holds", world, |w, out| {
        w.e.release(w.waiter, w.reserved, 1, 0, T0).encode(out)
    }),
    ("bury of a job not reserved", world, |w, out| w.e.bury(w.worker, w.ready, 1, T0).encode(out)),
    ("touch of a job not reserved", world, |w, out| w.e.touch(w.worker, w.ready, T0).encode(out)),
    ("ignore of the last tube watched", world, |w, out| w.e.ignore(w.waiter, &name("quiet")).encode(out)),
    ("peek of no job", world, |w, out| w.e.peek(NO_JOB).encode(out)),
    ("peek-ready of an empty tube", world, |w, out| w.e.peek_ready(w.waiter).encode(out)),
    ("peek-reserved of a tube with none reserved", world, |w, out| w.e.peek_reserved(w.waiter).encode(out)),
    ("peek-delayed of an empty tube", world, |w, out| w.e.peek_delayed(w.waiter).encode(out)),
    ("reserve-job of a job held back by its key", world_with_a_key_at_its_limit, |w, out| {
        let held = w.reserved + 1;
        w.e.reserve_job(w.waiter, held, T0, out).encode(out)
    }),
    ("list-jobs-ready after a job not ready", world, |w, out| {
        list_step(w, out, State::Ready, Some(w.buried))
    }),
    ("list-jobs-delayed after no job", world, |w, out| list_step(w, out, State::Delayed, Some(NO_JOB))),
    ("list-jobs-reserved after a ready job", world, |w, out| {
        list_step(w, out, State::Reserved, Some(w.ready))
    }),
    ("list-jobs-buried after a delayed job", world, |w, out| {
        list_step(w, out, State::Buried, Some(w.delayed))
    }),
    ("peek-buried of an empty tube", world, |w, out| w.e.peek_buried(w.waiter).encode(out)),
    ("kick-job of a ready job", world, |w, out| w.e.kick_job(w.ready, T0).encode(out)),
    ("stats-job of no job", world, |w, out| w.e.stats_job(NO_JOB, T0).encode(out)),
    ("stats-tube of no tube", world, |w, out| w.e.stats_tube(&name("nowhere"), T0).encode(out)),
    ("stats-group of no group", world, |w, out| w.e.stats_group(&name("nowhere")).encode(out)),
    ("reserve-job of a job held for a group", world_with_a_group, |w, out| {
        w.e.reserve_job(w.worker, 8, T0, &mut Vec::<u8>::new()).encode(out)
    }),
    ("pause-tube of no tube", world, |w, out| w.e.pause_tube(Some(&name("nowhere")), 5, T0).encode(out)),
    ("move-job of a reserved job", world, |w, out| w.e.move_job(w.reserved, &name("quiet"), T0).encode(out)),
    ("drain", world, |w, out| w.e.drain().encode(out)),
    ("undrain of a draining server", world_draining, |w, out| w.e.undrain().encode(out)),
    ("clear-tube of no tube", world, |w, out| match w.e.clear_tube(&name("nowhere"), 10, T0) {
        Ok(n) => Reply::Cleared(n as u64).encode(out),
        Err(refusal) => refusal.encode(out),
    }),
    ("flush-tube of no tube", world, |w, out| match w.e.flushable(&name("nowhere")) {
        Some(_) => Reply::InternalError.encode(out),
        None => Reply::NotFound.encode(out),
    }),
];
