//! The engine's test cases: one record per case, in one list ([`CASES`]).
//! A case is a command (or the timer, or a connection's coming and going)
//! run as a connection runs it, from a starting world (`case_worlds.rs`,
//! on `sweep_world.rs`'s), with the reply it must reach, whether it writes
//! the log, and the promises of the table of commands (reference §3.0) it
//! proves. Every test of the engine's cases reads this list:
//!
//! - the allocation sweep (`sweep.rs`) runs every case, each allocation
//!   failing in turn, and checks what it reaches;
//! - the log sweep (`log_sweep.rs`) runs every logged case, each write,
//!   fsync and allocation failing in turn;
//! - the agreement test (`agreement.rs`) runs every case on a real log
//!   and checks that a restart from the log rebuilds what memory holds;
//! - the reach test (`sweep_reach.rs`) checks that the cases call every
//!   engine entry point, reach every reply of the table, and log every
//!   command the table marks logged;
//! - the bounded test (`bounded.rs`) runs each case's `bounded` run.
//!
//! A new command adds its records here, and nowhere else in the engine's
//! tests.

use std::io::Write as _;

use super::case::*;
use super::case_worlds::*;
use super::cases_more::MORE;
use super::runs;
use super::sweep_world::*;
use crate::engine::*;
use crate::protocol::ReserveMode;

/// Every case of the engine's tests: each command's cases here, and
/// those of more states and refusals in `cases_more.rs`.
pub(super) const CASES: &[Case] = &join::<{ FIRST.len() + MORE.len() }>(FIRST, MORE);

/// `a` then `b`, as one array: the list is kept in two files.
const fn join<const N: usize>(a: &[Case], b: &[Case]) -> [Case; N] {
    let mut all = [a[0]; N];
    let mut i = 0;
    while i < N {
        all[i] = if i < a.len() { a[i] } else { b[i - a.len()] };
        i += 1;
    }
    all
}

/// Each command's cases: its normal reply, and the states it was first
/// written against.
const FIRST: &[Case] = &[
    case("put", plain, "INSERTED 7", |w, out| put_step(w, out, 0)).logged(),
    case("put with a delay", plain, "INSERTED 7", |w, out| put_step(w, out, 10)).logged(),
    case("put to a blocked worker", producer_for_waiter, "INSERTED 7", |w, out| put_step(w, out, 0)),
    case("put with a new unique key", plain, "INSERTED 7", |w, out| {
        put_keyed_step(w, out, 0, 0, key("new", 30))
    })
    .logged(),
    case("put with a key that names a job: nothing stored", plain, "INSERTED 5 READY", |w, out| {
        put_keyed_step(w, out, 9, 0, key("k", 0))
    })
    .logged(),
    case("put with a key that names a job: the ratchet", plain, "INSERTED 5 READY 1", |w, out| {
        put_keyed_step(w, out, 1, 0, key("k", 0))
    })
    .logged(),
    case("put with a key cooling down", plain, "INSERTED 6 DELETED", |w, out| {
        put_keyed_step(w, out, 0, 0, key("c", 0))
    }),
    case("delete of a keyed job: its key cools down", plain, "DELETED", |w, out| {
        w.e.delete(w.producer, w.keyed, T0).encode(out);
    })
    .logged(),
    case("move-job of a keyed job", plain, "MOVED", |w, out| {
        w.e.move_job(w.keyed, &name("fresh"), T0).encode(out)
    })
    .logged(),
    case("reserve, a job ready", plain, "RESERVED 3 5", |w, out| {
        if let Some(reply) = w.e.reserve(w.worker, None, T0, out) {
            reply.encode(out);
        }
    }),
    case("reserve, none ready: it blocks", plain, "", |w, out| {
        if let Some(reply) = w.e.reserve(w.waiter, None, T0, out) {
            reply.encode(out);
        }
    }),
    case("reserve-with-timeout 0, none ready", plain, "TIMED_OUT", |w, out| {
        if let Some(reply) = w.e.reserve(w.waiter, Some(0), T0, out) {
            reply.encode(out);
        }
    }),
    case("reserve-with-abort, none ready: it blocks", plain, "", |w, out| {
        if let Some(reply) = w.e.reserve_with_abort(w.waiter, None, false, T0, out) {
            reply.encode(out);
        }
    }),
    case("a blocked reserve collects its job", job_handed_over, "RESERVED 7 6", |w, out| {
        if let Some(reply) = w.e.check_wait(w.waiter, Time::from_secs(1), out) {
            reply.encode(out);
        }
    }),
    case(
        "reserve: a blocked one times out when its client hangs up",
        waiter_blocked,
        "TIMED_OUT",
        |w, out| {
            w.e.hang_up(w.waiter);
            if let Some(reply) = w.e.check_wait(w.waiter, T0, out) {
                reply.encode(out);
            }
        },
    ),
    case("reserve-job of a buried job", plain, "RESERVED 1 6", |w, out| {
        let id = w.buried;
        w.e.reserve_job(w.waiter, id, T0, out).encode(out);
    })
    .logged(),
    case("reserve-job of a ready job", plain, "RESERVED 3 5", |w, out| {
        let id = w.ready;
        w.e.reserve_job(w.waiter, id, T0, out).encode(out);
    }),
    case("release", plain, "RELEASED", |w, out| w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out))
        .logged(),
    case("release with a delay", plain, "RELEASED", |w, out| {
        w.e.release(w.worker, w.reserved, 9, 5, T0).encode(out)
    })
    .logged(),
    case("release to a blocked worker", job_for_waiter_held, "RELEASED", |w, out| {
        w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out);
    }),
    case("bury", plain, "BURIED", |w, out| w.e.bury(w.worker, w.reserved, 9, T0).encode(out)).logged(),
    case("kick", plain, "KICKED 1", |w, out| w.e.kick(w.producer, 10, T0).encode(out)).logged(),
    case("kick-job of a delayed job", plain, "KICKED", |w, out| w.e.kick_job(w.delayed, T0).encode(out))
        .logged(),
    case("move-job of a ready job to a new tube", plain, "MOVED", |w, out| {
        w.e.move_job(w.ready, &name("fresh"), T0).encode(out)
    })
    .logged(),
    case("move-job of a buried job to a tube that exists", plain, "MOVED", |w, out| {
        w.e.move_job(w.buried, &name("quiet"), T0).encode(out)
    })
    .logged(),
    case("move-job of a ready job to a blocked worker", plain, "MOVED", |w, out| {
        w.e.move_job(w.ready, &name("quiet"), T0).encode(out)
    }),
    case("delete", plain, "DELETED", |w, out| w.e.delete(w.worker, w.reserved, T0).encode(out))
        .logged()
        .bounded(runs::delete),
    case("delete the last job of a tube", tube_of_one_job, "DELETED", |w, out| {
        w.e.delete(w.producer, w.ready, T0).encode(out);
    }),
    case("touch", plain, "TOUCHED", |w, out| w.e.touch(w.worker, w.reserved, Time::from_secs(5)).encode(out)),
    case("use of a new tube", plain, "USING fresh", |w, out| {
        w.e.use_tube(w.producer, &name("fresh")).encode(out)
    }),
    case("use of a tube that exists", plain, "USING quiet", |w, out| {
        w.e.use_tube(w.producer, &name("quiet")).encode(out)
    }),
    case("watch of a new tube", plain, "WATCHING 3", |w, out| {
        w.e.watch(w.worker, &name("fresh")).encode(out)
    }),
    case("watch of a tube that exists", plain, "WATCHING 3", |w, out| {
        w.e.watch(w.worker, &name("quiet")).encode(out)
    }),
    case("ignore", plain, "WATCHING 1", |w, out| w.e.ignore(w.worker, &name("jobs")).encode(out)),
    case("watch of a new tube with a weight", plain, "WATCHING 3", |w, out| {
        w.e.watch_weighted(w.worker, &name("fresh"), 4).encode(out)
    }),
    case("watch again with a weight", plain, "WATCHING 2", |w, out| {
        w.e.watch_weighted(w.worker, &name("jobs"), 9999).encode(out)
    }),
    case("reserve-mode weighted", plain, "USING weighted", |w, out| {
        w.e.reserve_mode(w.worker, ReserveMode::Weighted).encode(out)
    }),
    case("reserve, weighted: a tube drawn by weight", weighing, "RESERVED", |w, out| {
        w.e.reserve_mode(w.waiter, ReserveMode::Weighted);
        reserve_step(w, out);
    }),
    case("reserve, weighted-fair: a tube drawn by weight and time", weighing, "RESERVED", |w, out| {
        w.e.reserve_mode(w.waiter, ReserveMode::WeightedFair);
        reserve_step(w, out);
    }),
    case("pause-tube", plain, "PAUSED", |w, out| w.e.pause_tube(Some(&name("jobs")), 10, T0).encode(out)),
    case("peek", plain, "FOUND 3 5", |w, out| w.e.peek(w.ready).encode(out)),
    case("peek-ready", plain, "FOUND 3 5", |w, out| w.e.peek_ready(w.producer).encode(out)),
    case("peek-delayed", plain, "FOUND 4 7", |w, out| w.e.peek_delayed(w.producer).encode(out)),
    case("peek-buried", plain, "FOUND 1 6", |w, out| w.e.peek_buried(w.producer).encode(out)),
    case("peek-reserved", plain, "FOUND 2 8", |w, out| w.e.peek_reserved(w.producer).encode(out)),
    case("put with a concurrency key", plain, "INSERTED 7", |w, out| {
        put_tagged_step(w, out, 0, 0, None, None, con("c", 2))
    }),
    case("put with a concurrency key in use", a_key_at_its_limit, "INSERTED 9", |w, out| {
        put_tagged_step(w, out, 0, 0, None, None, con("c", 3))
    }),
    case("reserve, passing over a job held back by its key", a_key_at_its_limit, "RESERVED 3 5", |w, out| {
        if let Some(reply) = w.e.reserve(w.worker, None, T0, out) {
            reply.encode(out);
        }
    }),
    case(
        "delete of a job whose key held a job back from a blocked worker",
        a_waiter_held_back,
        "DELETED",
        |w, out| w.e.delete(w.worker, w.reserved, T0).encode(out),
    ),
    case("put into a group", plain, "INSERTED 7", |w, out| put_grouped_step(w, out, 0, "g", "")),
    case("put naming two new groups", many_groups, "INSERTED 10", |w, out| {
        put_grouped_step(w, out, 0, "x", "y")
    }),
    case("delete-batch of jobs naming five groups", many_groups, "DELETED_BATCH 3 0", |w, out| {
        w.e.delete_batch(w.worker, &mut [7, 8, 9].into_iter(), T0).encode(out)
    }),
    case("put waiting for a group with a member: held", a_group, "INSERTED 9", |w, out| {
        put_grouped_step(w, out, 0, "h", "g")
    })
    .logged(),
    case(
        "the timer: a delay runs out on a job waiting for a group",
        a_delayed_job_for_a_group,
        "Some(",
        |w, out| tick_step(w, out, 6),
    ),
    case(
        "delete of a group's last member: its held job to a blocked worker",
        a_waiter_for_a_group,
        "DELETED",
        |w, out| w.e.delete(w.worker, w.reserved, T0).encode(out),
    ),
    case(
        "stats-group",
        a_group,
        "OK 72\r\n---\nname: \"g\"\nready: 0\nreserved: 1\ndelayed: 0\nburied: 0\nwaiting-jobs: 1\n",
        |w, out| w.e.stats_group(&name("g")).encode(out),
    ),
    case("put with a retry limit", plain, "INSERTED 7", |w, out| {
        put_tagged_step(w, out, 0, 0, None, Some(3), None)
    }),
    case("release of a job whose tries are spent", a_try_spent, "RELEASED", |w, out| {
        w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out)
    })
    .logged(),
    case("release under --max-reserves", plain, "RELEASED", |w, out| {
        w.e.set_max_reserves(1);
        w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out)
    }),
    case("the timer: a TTR runs out on a job whose tries are spent", a_try_spent, "Some(", |w, out| {
        tick_step(w, out, 70)
    }),
    case("a connection closes holding a job whose tries are spent", a_try_spent, "", |w, _| {
        w.e.disconnect(w.worker, T0)
    }),
    case("list-jobs-ready", plain, "OK 12\r\n---\n- 3\n- 5\n", |w, out| {
        list_step(w, out, State::Ready, None)
    })
    .bounded(|| runs::list_jobs(State::Ready)),
    case("list-jobs-ready after a job", plain, "OK 8\r\n---\n- 5\n", |w, out| {
        list_step(w, out, State::Ready, Some(w.ready))
    }),
    case("list-jobs-delayed", plain, "OK 8\r\n---\n- 4\n", |w, out| list_step(w, out, State::Delayed, None))
        .bounded(|| runs::list_jobs(State::Delayed)),
    case("list-jobs-reserved", plain, "OK 8\r\n---\n- 2\n", |w, out| {
        list_step(w, out, State::Reserved, None)
    })
    .bounded(|| runs::list_jobs(State::Reserved)),
    case("list-jobs-buried", plain, "OK 8\r\n---\n- 1\n", |w, out| list_step(w, out, State::Buried, None))
        .bounded(|| runs::list_jobs(State::Buried)),
    case("stats-job", plain, "OK ", |w, out| w.e.stats_job(w.buried, T0).encode(out)),
    case("stats-tube", plain, "OK ", |w, out| w.e.stats_tube(&name("jobs"), T0).encode(out)),
    case("stats", plain, "OK ", |w, out| {
        let stats = w.e.server_stats();
        stats.to_yaml(&process()).map_or(Reply::OutOfMemory, Reply::Ok).encode(out);
    }),
    case("list-tubes", plain, "OK ", |w, out| w.e.list_tubes().encode(out)),
    case("list-tube-used", plain, "USING jobs", |w, out| w.e.list_tube_used(w.producer).encode(out)),
    case("list-tubes-watched", plain, "OK ", |w, out| w.e.list_tubes_watched(w.worker).encode(out)),
    case("a new connection", plain, "true", |w, out| {
        let _ = write!(out, "{:?}", w.e.connect(w.waker.clone()).is_some());
    }),
    case("a connection closes", plain, "", |w, _| w.e.disconnect(w.worker, T0)),
    case("the timer: a TTR and a delay run out", plain, "None", |w, out| tick_step(w, out, 200)),
    case("kick of many buried jobs", many, "KICKED 5", |w, out| w.e.kick(w.producer, 10, T0).encode(out))
        .logged(),
    case("kick of many delayed jobs", many_later_used, "KICKED 2", |w, out| {
        w.e.kick(w.producer, 2, T0).encode(out)
    }),
    case("clear-tube of a tube with a job in every state", many, "CLEARED 8", clear_step).logged().bounded(
        || {
            let (mut e, _) = runs::filled(5 * CLEAR_CHUNK + 1, 1);
            runs::tube_chunks(&mut e, "clear-tube jobs", 5 * CLEAR_CHUNK + 1)
        },
    ),
    case("flush-tube of a tube with a job in every state", many, "FLUSHED 9", flush_step).logged().bounded(
        || {
            let (mut e, c) = runs::filled(5 * CLEAR_CHUNK + 1, 1);
            runs::reserve_all(&mut e, c, false);
            runs::tube_chunks(&mut e, "flush-tube jobs", 5 * CLEAR_CHUNK + 1)
        },
    ),
    case("flush-tube of a tube with keys, one cooling", plain, "FLUSHED 5", flush_step).logged(),
    case("flush-buried of a tube with a job in every state", many, "FLUSHED 5", flush_buried_step)
        .logged()
        .bounded(|| {
            let (mut e, c) = runs::filled(5 * CLEAR_CHUNK + 1, 1);
            runs::reserve_all(&mut e, c, true);
            runs::tube_chunks(&mut e, "flush-buried jobs", 5 * CLEAR_CHUNK + 1)
        }),
    case("touch-all", three_held, "TOUCHED_ALL 3", |w, out| {
        w.e.touch_all(w.worker, Time::from_secs(5)).encode(out)
    }),
    case("delete-batch", many, "DELETED_BATCH 3 3", |w, out| {
        let ids = [w.ready, w.reserved, w.buried, 999, w.ready, w.delayed];
        w.e.delete_batch(w.producer, &mut ids.into_iter(), T0).encode(out)
    })
    .bounded(runs::delete_batch),
    case("delete-batch of a keyed job: its key cools down", plain, "DELETED_BATCH 2 0", |w, out| {
        let ids = [w.keyed, w.ready];
        w.e.delete_batch(w.producer, &mut ids.into_iter(), T0).encode(out)
    }),
];
