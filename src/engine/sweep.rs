//! The allocation-failure sweep, in the way SQLite tests itself: every
//! command runs over and over against the same starting state, first with
//! its 1st allocation failing, then its 2nd, and so on, until a run needs
//! no failure. Each run must end in the command's normal reply or
//! `OUT_OF_MEMORY`, never an abort (an infallible allocation that fails
//! aborts this test binary, see `sys/failing.rs`), and the engine must be
//! either exactly as before (the refusal) or exactly as after a run with
//! no failure. That is "claim, then change", checked for every allocation
//! of every command rather than for the cases a review thought of.
//!
//! A run is what a connection does for the command: the engine call and
//! the reply's encoding, into an output buffer holding the room a
//! connection claims before each command (`protocol::SHORT_REPLY_LEN`).

use std::io::Write as _;

use super::sweep_reaches::REACHES;
use super::sweep_world::*;
use super::*;
use crate::protocol::ReserveMode;
use crate::sys::failing::fail_nth;

/// The world with the waiter blocked in a reserve.
fn world_with_waiter_blocked() -> World {
    let mut w = world();
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
    w
}

/// The world with the waiter blocked, and the producer using its tube.
fn world_with_producer_for_waiter() -> World {
    let mut w = world_with_waiter_blocked();
    w.e.use_tube(w.producer, &name("quiet"));
    w
}

/// The world with a job handed to the blocked waiter, not yet collected:
/// a waiter without a mailbox, so that its thread collects the job under
/// the lock, as when a mailbox has no room for it.
fn world_with_job_handed_over() -> World {
    let mut w = world();
    w.waiter = w.e.connect(Arc::new(Condvar::new())).unwrap();
    w.e.watch(w.waiter, &name("quiet"));
    w.e.ignore(w.waiter, &name("default"));
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
    w.e.use_tube(w.producer, &name("quiet"));
    put(&mut w.e, w.producer, 0, 0, b"handed");
    w
}

/// The world with the worker holding a job of the waiter's tube, and the
/// waiter blocked.
fn world_with_job_for_waiter_held() -> World {
    let mut w = world();
    w.e.watch(w.worker, &name("quiet"));
    w.e.use_tube(w.producer, &name("quiet"));
    let id = put(&mut w.e, w.producer, 0, 0, b"for the waiter");
    assert!(
        matches!(w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()), Some(Reply::Reserved(r, _)) if r == id)
    );
    w.reserved = id;
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
    w
}

/// The world with the waiter watching `quiet` (weight 1) and `jobs`
/// (weight 3), both with a job ready, and `jobs` with processing times.
fn world_weighing() -> World {
    let mut w = world();
    w.e.use_tube(w.producer, &name("quiet"));
    put(&mut w.e, w.producer, 0, 0, b"quiet job");
    w.e.watch_weighted(w.waiter, &name("jobs"), 3);
    for _ in 0..10 {
        let id = put(&mut w.e, w.producer, 0, 0, b"timed");
        assert!(matches!(w.e.reserve_job(w.worker, id, T0, &mut Vec::<u8>::new()), Reply::Reserved(..)));
        assert_eq!(w.e.delete(w.worker, id, Time::from_secs(2)), Reply::Deleted);
    }
    w
}

/// `reserve` by the waiter, as a connection makes it.
fn reserve_step(w: &mut World, out: &mut Vec<u8>) {
    if let Some(reply) = w.e.reserve(w.waiter, None, T0, out) {
        reply.encode(out);
    }
}

/// The world with a tube `other` whose only job is ready.
fn world_with_tube_of_one_job() -> World {
    let mut w = world();
    w.e.use_tube(w.producer, &name("other"));
    w.ready = put(&mut w.e, w.producer, 0, 0, b"alone");
    w.e.use_tube(w.producer, &name("jobs"));
    w
}

const COMMANDS: &[Case] = &[
    ("put", world, |w, out| put_step(w, out, 0)),
    ("put with a delay", world, |w, out| put_step(w, out, 10)),
    ("put to a blocked worker", world_with_producer_for_waiter, |w, out| put_step(w, out, 0)),
    ("put with a new unique key", world, |w, out| put_keyed_step(w, out, 0, 0, key("new", 30))),
    ("put with a key that names a job: nothing stored", world, |w, out| {
        put_keyed_step(w, out, 9, 0, key("k", 0))
    }),
    ("put with a key that names a job: the ratchet", world, |w, out| {
        put_keyed_step(w, out, 1, 0, key("k", 0))
    }),
    ("put with a key cooling down", world, |w, out| put_keyed_step(w, out, 0, 0, key("c", 0))),
    ("delete of a keyed job: its key cools down", world, |w, out| {
        w.e.delete(w.producer, w.keyed, T0).encode(out);
    }),
    ("move-job of a keyed job", world, |w, out| w.e.move_job(w.keyed, &name("fresh"), T0).encode(out)),
    ("reserve, a job ready", world, |w, out| {
        if let Some(reply) = w.e.reserve(w.worker, None, T0, out) {
            reply.encode(out);
        }
    }),
    ("reserve, none ready: it blocks", world, |w, out| {
        if let Some(reply) = w.e.reserve(w.waiter, None, T0, out) {
            reply.encode(out);
        }
    }),
    ("reserve-with-timeout 0, none ready", world, |w, out| {
        if let Some(reply) = w.e.reserve(w.waiter, Some(0), T0, out) {
            reply.encode(out);
        }
    }),
    ("reserve-with-abort, none ready: it blocks", world, |w, out| {
        if let Some(reply) = w.e.reserve_with_abort(w.waiter, None, false, T0, out) {
            reply.encode(out);
        }
    }),
    ("a blocked reserve collects its job", world_with_job_handed_over, |w, out| {
        if let Some(reply) = w.e.check_wait(w.waiter, Time::from_secs(1), out) {
            reply.encode(out);
        }
    }),
    ("reserve: a blocked one times out when its client hangs up", world_with_waiter_blocked, |w, out| {
        w.e.hang_up(w.waiter);
        if let Some(reply) = w.e.check_wait(w.waiter, T0, out) {
            reply.encode(out);
        }
    }),
    ("reserve-job of a buried job", world, |w, out| {
        let id = w.buried;
        w.e.reserve_job(w.waiter, id, T0, out).encode(out);
    }),
    ("reserve-job of a ready job", world, |w, out| {
        let id = w.ready;
        w.e.reserve_job(w.waiter, id, T0, out).encode(out);
    }),
    ("release", world, |w, out| w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out)),
    ("release with a delay", world, |w, out| w.e.release(w.worker, w.reserved, 9, 5, T0).encode(out)),
    ("release to a blocked worker", world_with_job_for_waiter_held, |w, out| {
        w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out);
    }),
    ("bury", world, |w, out| w.e.bury(w.worker, w.reserved, 9, T0).encode(out)),
    ("kick", world, |w, out| w.e.kick(w.producer, 10, T0).encode(out)),
    ("kick-job of a delayed job", world, |w, out| w.e.kick_job(w.delayed, T0).encode(out)),
    ("move-job of a ready job to a new tube", world, |w, out| {
        w.e.move_job(w.ready, &name("fresh"), T0).encode(out)
    }),
    ("move-job of a buried job to a tube that exists", world, |w, out| {
        w.e.move_job(w.buried, &name("quiet"), T0).encode(out)
    }),
    ("move-job of a ready job to a blocked worker", world, |w, out| {
        w.e.move_job(w.ready, &name("quiet"), T0).encode(out)
    }),
    ("delete", world, |w, out| w.e.delete(w.worker, w.reserved, T0).encode(out)),
    ("delete the last job of a tube", world_with_tube_of_one_job, |w, out| {
        w.e.delete(w.producer, w.ready, T0).encode(out);
    }),
    ("touch", world, |w, out| w.e.touch(w.worker, w.reserved, Time::from_secs(5)).encode(out)),
    ("use of a new tube", world, |w, out| w.e.use_tube(w.producer, &name("fresh")).encode(out)),
    ("use of a tube that exists", world, |w, out| w.e.use_tube(w.producer, &name("quiet")).encode(out)),
    ("watch of a new tube", world, |w, out| w.e.watch(w.worker, &name("fresh")).encode(out)),
    ("watch of a tube that exists", world, |w, out| w.e.watch(w.worker, &name("quiet")).encode(out)),
    ("ignore", world, |w, out| w.e.ignore(w.worker, &name("jobs")).encode(out)),
    ("watch of a new tube with a weight", world, |w, out| {
        w.e.watch_weighted(w.worker, &name("fresh"), 4).encode(out)
    }),
    ("watch again with a weight", world, |w, out| {
        w.e.watch_weighted(w.worker, &name("jobs"), 9999).encode(out)
    }),
    ("reserve-mode weighted", world, |w, out| w.e.reserve_mode(w.worker, ReserveMode::Weighted).encode(out)),
    ("reserve, weighted: a tube drawn by weight", world_weighing, |w, out| {
        w.e.reserve_mode(w.waiter, ReserveMode::Weighted);
        reserve_step(w, out);
    }),
    ("reserve, weighted-fair: a tube drawn by weight and time", world_weighing, |w, out| {
        w.e.reserve_mode(w.waiter, ReserveMode::WeightedFair);
        reserve_step(w, out);
    }),
    ("pause-tube", world, |w, out| w.e.pause_tube(Some(&name("jobs")), 10, T0).encode(out)),
    ("peek", world, |w, out| w.e.peek(w.ready).encode(out)),
    ("peek-ready", world, |w, out| w.e.peek_ready(w.producer).encode(out)),
    ("peek-delayed", world, |w, out| w.e.peek_delayed(w.producer).encode(out)),
    ("peek-buried", world, |w, out| w.e.peek_buried(w.producer).encode(out)),
    ("peek-reserved", world, |w, out| w.e.peek_reserved(w.producer).encode(out)),
    ("put with a concurrency key", world, |w, out| put_tagged_step(w, out, 0, 0, None, None, con("c", 2))),
    ("put with a concurrency key in use", world_with_a_key_at_its_limit, |w, out| {
        put_tagged_step(w, out, 0, 0, None, None, con("c", 3))
    }),
    ("reserve, passing over a job held back by its key", world_with_a_key_at_its_limit, |w, out| {
        if let Some(reply) = w.e.reserve(w.worker, None, T0, out) {
            reply.encode(out);
        }
    }),
    (
        "delete of a job whose key held a job back from a blocked worker",
        world_with_a_waiter_held_back,
        |w, out| w.e.delete(w.worker, w.reserved, T0).encode(out),
    ),
    ("put into a group", world, |w, out| put_grouped_step(w, out, 0, "g", "")),
    ("put naming two new groups", world_with_many_groups, |w, out| put_grouped_step(w, out, 0, "x", "y")),
    ("delete-batch of jobs naming five groups", world_with_many_groups, |w, out| {
        w.e.delete_batch(w.worker, &mut [7, 8, 9].into_iter(), T0).encode(out)
    }),
    ("put waiting for a group with a member: held", world_with_a_group, |w, out| {
        put_grouped_step(w, out, 0, "h", "g")
    }),
    (
        "the timer: a delay runs out on a job waiting for a group",
        world_with_a_delayed_job_for_a_group,
        |w, out| {
            let _ = write!(out, "{:?}", w.e.tick(Time::from_secs(6)));
        },
    ),
    (
        "delete of a group's last member: its held job to a blocked worker",
        world_with_a_waiter_for_a_group,
        |w, out| w.e.delete(w.worker, w.reserved, T0).encode(out),
    ),
    ("stats-group", world_with_a_group, |w, out| w.e.stats_group(&name("g")).encode(out)),
    ("put with a retry limit", world, |w, out| put_tagged_step(w, out, 0, 0, None, Some(3), None)),
    ("release of a job whose tries are spent", world_with_a_try_spent, |w, out| {
        w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out)
    }),
    ("release under --max-reserves", world, |w, out| {
        w.e.set_max_reserves(1);
        w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out)
    }),
    ("the timer: a TTR runs out on a job whose tries are spent", world_with_a_try_spent, |w, out| {
        let _ = write!(out, "{:?}", w.e.tick(Time::from_secs(70)));
    }),
    ("a connection closes holding a job whose tries are spent", world_with_a_try_spent, |w, _| {
        w.e.disconnect(w.worker, T0)
    }),
    ("list-jobs-ready", world, |w, out| list_step(w, out, State::Ready, None)),
    ("list-jobs-ready after a job", world, |w, out| list_step(w, out, State::Ready, Some(w.ready))),
    ("list-jobs-delayed", world, |w, out| list_step(w, out, State::Delayed, None)),
    ("list-jobs-reserved", world, |w, out| list_step(w, out, State::Reserved, None)),
    ("list-jobs-buried", world, |w, out| list_step(w, out, State::Buried, None)),
    ("stats-job", world, |w, out| w.e.stats_job(w.buried, T0).encode(out)),
    ("stats-tube", world, |w, out| w.e.stats_tube(&name("jobs"), T0).encode(out)),
    ("stats", world, |w, out| {
        let stats = w.e.server_stats();
        stats.to_yaml(&process()).map_or(Reply::OutOfMemory, Reply::Ok).encode(out);
    }),
    ("list-tubes", world, |w, out| w.e.list_tubes().encode(out)),
    ("list-tube-used", world, |w, out| w.e.list_tube_used(w.producer).encode(out)),
    ("list-tubes-watched", world, |w, out| w.e.list_tubes_watched(w.worker).encode(out)),
    ("a new connection", world, |w, out| {
        let _ = write!(out, "{:?}", w.e.connect(w.waker.clone()).is_some());
    }),
    ("a connection closes", world, |w, _| w.e.disconnect(w.worker, T0)),
    ("the timer: a TTR and a delay run out", world, |w, out| {
        let _ = write!(out, "{:?}", w.e.tick(Time::from_secs(200)));
    }),
];

#[test]
fn every_allocation_of_every_command_may_fail_cleanly() {
    sweep();
}

/// The same with `--metrics`: a tube's meter is claimed with the tube, and
/// a histogram that cannot be had loses a measurement, nothing else.
#[test]
fn every_allocation_may_fail_cleanly_with_metering_too() {
    METERED.with(|m| m.set(true));
    sweep();
}

fn sweep() {
    let mut failure_points = 0;
    let cases =
        COMMANDS.iter().chain(super::sweep_reach::MORE_COMMANDS).chain(super::sweep_refusals::REFUSALS);
    for &(command, start, step) in cases {
        let (expected_reply, expected_state) = {
            let mut w = start();
            let mut out = output();
            step(&mut w, &mut out);
            (out, state(&w.e))
        };
        let reached = String::from_utf8_lossy(&expected_reply);
        let Some(&(_, expect)) = REACHES.iter().find(|(case, _)| *case == command) else {
            panic!("{command}: not in REACHES, which says what each case reaches: {reached:?}")
        };
        assert!(
            if expect.is_empty() { reached.is_empty() } else { reached.starts_with(expect) },
            "{command}: reaches {reached:?}, not {expect:?}"
        );
        for n in 1.. {
            let mut w = start();
            let before = state(&w.e);
            let mut out = output();
            let ((), failed) = fail_nth(n, || step(&mut w, &mut out));
            let after = state(&w.e);
            if !failed {
                assert_eq!(out, expected_reply, "{command}: no failure, another reply");
                break;
            }
            failure_points += 1;
            let refused = out.ends_with(b"OUT_OF_MEMORY\r\n") || out == b"false";
            if refused {
                assert_eq!(after, before, "{command}, allocation {n} failing: refused, yet changed");
            } else {
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&expected_reply),
                    "{command}, allocation {n} failing"
                );
                assert_eq!(after, expected_state, "{command}, allocation {n} failing: half done");
            }
            // And the engine is whole: the same command, now with memory,
            // succeeds (a put's id may have been used up by the refusal).
            if refused {
                let mut out = output();
                step(&mut w, &mut out);
                let again = String::from_utf8_lossy(&out);
                assert!(!again.contains("OUT_OF_MEMORY") && again != "false", "{command}: retried, {again}");
            }
        }
    }
    let commands =
        COMMANDS.len() + super::sweep_reach::MORE_COMMANDS.len() + super::sweep_refusals::REFUSALS.len();
    eprintln!("allocation-failure sweep: {commands} commands, {failure_points} failure points");
    assert!(failure_points > 0, "no allocation failed: is the failing allocator in place?");
}
