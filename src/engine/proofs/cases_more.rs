//! The engine's test cases, continued (see `cases.rs`, whose `CASES`
//! joins these to its own): more states and refusals of each command, the
//! timer, and the connections' coming and going.

use super::case::{answer, case, Case, NO_JOB};
use super::case_worlds::*;
use super::runs;
use super::sweep_world::*;
use crate::engine::*;

/// More states and refusals.
pub(super) const MORE: &[Case] = &[
    case(
        "move-job of a keyed job to a tube with its key: KEY_TAKEN",
        key_taken_elsewhere,
        "KEY_TAKEN",
        |w, out| w.e.move_job(w.keyed, &name("other"), T0).encode(out),
    ),
    case(
        "put with a key that names a delayed job: the ratchet",
        keyed_jobs_not_ready,
        "INSERTED 7 DELAYED 1",
        |w, out| put_keyed_step(w, out, 1, 0, key("d", 0)),
    ),
    case("put with a key that names a buried job", keyed_jobs_not_ready, "INSERTED 8 BURIED", |w, out| {
        put_keyed_step(w, out, 9, 0, key("b", 0))
    }),
    case(
        "put with a key that names a reserved job",
        keyed_jobs_not_ready,
        "INSERTED 9 RESERVED",
        |w, out| put_keyed_step(w, out, 9, 0, key("r", 0)),
    ),
    case(
        "reserve-batch",
        many,
        "RESERVED_BATCH 2\r\nRESERVED 3 5\r\nready\r\nRESERVED 5 5\r\n",
        reserve_batch_step,
    )
    .bounded(runs::reserve_batch),
    case("kick-job of a buried job", plain, "KICKED", |w, out| w.e.kick_job(w.buried, T0).encode(out))
        .logged(),
    case("move-job of a delayed job", plain, "MOVED", |w, out| {
        w.e.move_job(w.delayed, &name("fresh"), T0).encode(out)
    }),
    case("reserve answered DEADLINE_SOON at once", nothing_ready, "DEADLINE_SOON", |w, out| {
        if let Some(reply) = w.e.reserve(w.worker, None, Time::from_secs(59), out) {
            reply.encode(out);
        }
    }),
    case("reserve-with-abort answered ABORTED at once", plain, "ABORTED", |w, out| {
        if let Some(reply) = w.e.reserve_with_abort(w.waiter, None, true, T0, out) {
            reply.encode(out);
        }
    }),
    case("bytes end a blocked reserve-with-abort", typist_blocked, "", |w, _| {
        w.e.client_stirred(w.waiter, false)
    }),
    case("a hang-up ends a blocked reserve", waiter_blocked, "", |w, _| w.e.client_stirred(w.waiter, true)),
    case("a put meets a reserve-with-abort whose bytes arrived", typist_blocked, "INSERTED 7", |w, out| {
        put_step(w, out, 0)
    }),
    case("a hand-off lapses before its reply is sent", handoff_uncollected, "", |w, _| {
        w.now = Time::from_secs(61);
        w.e.catch_up(w.now)
    }),
    case("a hand-off lapses before its thread collects it", job_handed_over, "", |w, _| {
        w.now = Time::from_secs(61);
        w.e.catch_up(w.now)
    }),
    case("a hand-off lapses after its reply was sent", handoff_sent, "", |w, _| {
        w.now = Time::from_secs(61);
        w.e.catch_up(w.now)
    }),
    case(
        "flush-tube of a hand-off whose reply is not sent",
        handoff_uncollected,
        "FLUSHED 1",
        flush_quiet_step,
    )
    .logged(),
    case("the timer ends a pause", jobs_paused, "Some(", |w, out| tick_step(w, out, 11)),
    case("bodies move to new blocks", plain, "", |w, _| {
        w.e.move_bodies(0, usize::MAX, &|_| true);
    }),
    case("put in drain mode", plain, "DRAINING", |w, out| {
        w.e.start_draining();
        put_step(w, out, 0)
    }),
    case("the wakers of ended reserves are taken", handoff_uncollected, "1", |w, out| {
        let mut into: [Option<Arc<dyn Waker>>; 1] = [None];
        let _ = std::io::Write::write_fmt(out, format_args!("{}", w.e.take_woken(&mut into)));
    }),
    case("reserve-with-timeout 5, a job ready", plain, "RESERVED 3 5", |w, out| {
        answer(w.e.reserve(w.worker, Some(5), T0, out), out)
    }),
    case("reserve-with-timeout 5, DEADLINE_SOON", nothing_ready, "DEADLINE_SOON", |w, out| {
        answer(w.e.reserve(w.worker, Some(5), Time::from_secs(59), out), out)
    }),
    case("reserve-batch 5 30, DEADLINE_SOON", nothing_ready, "DEADLINE_SOON", |w, out| {
        answer(w.e.reserve_batch_wait(w.worker, 30, Time::from_secs(59), out), out)
    }),
    case("reserve-batch 5 30, none ready: it waits", plain, "", |w, out| {
        answer(w.e.reserve_batch_wait(w.waiter, 30, T0, out), out)
    }),
    case("reserve-with-abort, a job ready", plain, "RESERVED 3 5", |w, out| {
        answer(w.e.reserve_with_abort(w.worker, None, false, T0, out), out)
    }),
    case("reserve-with-abort, DEADLINE_SOON", nothing_ready, "DEADLINE_SOON", |w, out| {
        answer(w.e.reserve_with_abort(w.worker, None, false, Time::from_secs(59), out), out)
    }),
    case("reserve-with-abort with a timeout of 0, none ready", plain, "TIMED_OUT", |w, out| {
        answer(w.e.reserve_with_abort(w.waiter, Some(0), false, T0, out), out)
    }),
    case("reserve-job of no job", plain, "NOT_FOUND", |w, out| {
        w.e.reserve_job(w.waiter, NO_JOB, T0, out).encode(out)
    }),
    case("delete of no job", plain, "NOT_FOUND", |w, out| w.e.delete(w.producer, NO_JOB, T0).encode(out)),
    case("release of a job another holds", plain, "NOT_FOUND", |w, out| {
        w.e.release(w.waiter, w.reserved, 1, 0, T0).encode(out)
    }),
    case("bury of a job not reserved", plain, "NOT_FOUND", |w, out| {
        w.e.bury(w.worker, w.ready, 1, T0).encode(out)
    }),
    case("touch of a job not reserved", plain, "NOT_FOUND", |w, out| {
        w.e.touch(w.worker, w.ready, T0).encode(out)
    }),
    case("ignore of the last tube watched", plain, "NOT_IGNORED", |w, out| {
        w.e.ignore(w.waiter, &name("quiet")).encode(out)
    }),
    case("peek of no job", plain, "NOT_FOUND", |w, out| w.e.peek(NO_JOB).encode(out)),
    case("peek-ready of an empty tube", plain, "NOT_FOUND", |w, out| w.e.peek_ready(w.waiter).encode(out)),
    case("peek-reserved of a tube with none reserved", plain, "NOT_FOUND", |w, out| {
        w.e.peek_reserved(w.waiter).encode(out)
    }),
    case("peek-delayed of an empty tube", plain, "NOT_FOUND", |w, out| {
        w.e.peek_delayed(w.waiter).encode(out)
    }),
    case("reserve-job of a job held back by its key", a_key_at_its_limit, "NOT_FOUND", |w, out| {
        let held = w.reserved + 1;
        w.e.reserve_job(w.waiter, held, T0, out).encode(out)
    }),
    case("list-jobs-ready after a job not ready", plain, "NOT_FOUND", |w, out| {
        list_step(w, out, State::Ready, Some(w.buried))
    }),
    case("list-jobs-delayed after no job", plain, "NOT_FOUND", |w, out| {
        list_step(w, out, State::Delayed, Some(NO_JOB))
    }),
    case("list-jobs-reserved after a ready job", plain, "NOT_FOUND", |w, out| {
        list_step(w, out, State::Reserved, Some(w.ready))
    }),
    case("list-jobs-buried after a delayed job", plain, "NOT_FOUND", |w, out| {
        list_step(w, out, State::Buried, Some(w.delayed))
    }),
    case("peek-buried of an empty tube", plain, "NOT_FOUND", |w, out| w.e.peek_buried(w.waiter).encode(out)),
    case("kick-job of a ready job", plain, "NOT_FOUND", |w, out| w.e.kick_job(w.ready, T0).encode(out)),
    case("stats-job of no job", plain, "NOT_FOUND", |w, out| w.e.stats_job(NO_JOB, T0).encode(out)),
    case("stats-tube of no tube", plain, "NOT_FOUND", |w, out| {
        w.e.stats_tube(&name("nowhere"), T0).encode(out)
    }),
    case("stats-group of no group", plain, "NOT_FOUND", |w, out| {
        w.e.stats_group(&name("nowhere")).encode(out)
    }),
    case("reserve-job of a job held for a group", a_group, "NOT_FOUND", |w, out| {
        w.e.reserve_job(w.worker, 8, T0, &mut Vec::<u8>::new()).encode(out)
    }),
    case("pause-tube of no tube", plain, "NOT_FOUND", |w, out| {
        w.e.pause_tube(Some(&name("nowhere")), 5, T0).encode(out)
    }),
    case("move-job of a reserved job", plain, "NOT_FOUND", |w, out| {
        w.e.move_job(w.reserved, &name("quiet"), T0).encode(out)
    }),
    case("drain", plain, "DRAINING", |w, out| w.e.drain().encode(out)),
    case("undrain of a draining server", draining, "NOT_DRAINING", |w, out| w.e.undrain().encode(out)),
    case("clear-tube of no tube", plain, "NOT_FOUND", |w, out| on_a_tube_step(w, out, "clear-tube nowhere")),
    case("flush-tube of no tube", plain, "FLUSHED 0", |w, out| on_a_tube_step(w, out, "flush-tube nowhere")),
    case(
        "flush-tube of a tube gone, its key cooling",
        a_tube_gone_with_a_key_cooling,
        "FLUSHED 0",
        |w, out| on_a_tube_step(w, out, "flush-tube gone"),
    )
    .logged(),
    case("flush-buried of no tube", plain, "FLUSHED 0", |w, out| {
        on_a_tube_step(w, out, "flush-buried nowhere")
    }),
    case("flush-buried of a tube with a dead letter", a_dead_letter, "FLUSHED 2", flush_buried_step).logged(),
    case(
        "flush-buried of a keyed job: its key cools down",
        a_keyed_job_buried,
        "FLUSHED 2",
        flush_buried_step,
    )
    .logged(),
    case(
        "flush-buried of a group's last member: its held job let go",
        a_group_member_buried,
        "FLUSHED 2",
        flush_buried_step,
    )
    .logged(),
    case("touch-all of a connection that holds no job", plain, "TOUCHED_ALL 0", |w, out| {
        w.e.touch_all(w.producer, T0).encode(out)
    }),
    case("touch-all of a job handed over and sent", handoff_sent, "TOUCHED_ALL 1", |w, out| {
        w.e.touch_all(w.waiter, Time::from_secs(5)).encode(out)
    }),
    // Logged changes the lists above lack: tags a full record keeps, a
    // held job let go, a cooldown's end, a batch with a reserved job.
    case("put with a retry limit and a key", plain, "INSERTED 7", |w, out| {
        put_tagged_step(w, out, 0, 0, key("new", 30), Some(2), None)
    })
    .logged(),
    case("put with a concurrency key and a retry limit", plain, "INSERTED 7", |w, out| {
        put_tagged_step(w, out, 0, 0, None, Some(2), con("c", 3))
    })
    .logged(),
    case("put with a group and an after-group", plain, "INSERTED 7", |w, out| {
        put_grouped_step(w, out, 0, "g", "h")
    })
    .logged(),
    case("delete of a group's last member: its held job let go", a_group, "DELETED", |w, out| {
        w.e.delete(w.worker, w.reserved, T0).encode(out)
    })
    .logged(),
    case("put into a group it waits for", plain, "INSERTED 7", |w, out| {
        put_grouped_step(w, out, 0, "s", "s")
    })
    .logged(),
    case("put into a group whose let-go job is reserved", a_let_go_job_reserved, "INSERTED 9", |w, out| {
        put_grouped_step(w, out, 0, "g", "")
    })
    .logged(),
    // The second of a cycle that works: job 7 stays ready, job 8 is held.
    case("put closing a cycle of two groups", a_job_waiting_for_an_empty_group, "INSERTED 8", |w, out| {
        put_grouped_step(w, out, 0, "y", "x")
    })
    .logged(),
    case("the timer ends a cooldown", plain, "false", cooldown_end_step).logged(),
    case("delete-batch by the worker, its reserved job among them", many, "DELETED_BATCH 4 2", |w, out| {
        let ids = [w.ready, w.reserved, w.buried, 999, w.ready, w.delayed];
        w.e.delete_batch(w.worker, &mut ids.into_iter(), T0).encode(out)
    })
    .logged(),
    // Buried by its worker on its last try: no dead letter, before a
    // restart or after it (the agreement test restarts from the log).
    case("bury of a job whose tries are spent: no dead letter", a_try_spent, "BURIED", |w, out| {
        w.e.bury(w.worker, w.reserved, 9, T0).encode(out)
    })
    .logged(),
    // A dead letter leaves the buried list, or moves with its mark: the
    // counts of dead letters follow (the agreement test recounts them).
    case("move-job of a dead letter: a dead letter still", a_dead_letter, "MOVED", |w, out| {
        w.e.move_job(w.reserved, &name("fresh"), T0).encode(out)
    })
    .logged(),
    case("kick-job of a dead letter", a_dead_letter, "KICKED", |w, out| {
        w.e.kick_job(w.reserved, T0).encode(out)
    })
    .logged(),
    case("flush-tube of a tube with a dead letter", a_dead_letter, "FLUSHED", flush_step).logged(),
    // A connection that is not the admin socket's (reference §3.0, `admin
    // unless held`): its own jobs, and only those.
    case(
        "delete of a ready job from another listener than the admin socket",
        plain,
        "NOT_PERMITTED",
        |w, out| {
            w.e.restrict(w.worker, crate::protocol::AdminCommands::safe());
            w.e.delete(w.worker, w.ready, T0).encode(out)
        },
    ),
    case(
        "delete of a job it holds, from another listener than the admin socket",
        plain,
        "DELETED",
        |w, out| {
            w.e.restrict(w.worker, crate::protocol::AdminCommands::safe());
            w.e.delete(w.worker, w.reserved, T0).encode(out)
        },
    )
    .logged(),
    case(
        "delete-batch of a job it holds and a buried one, from another listener than the admin socket",
        plain,
        "NOT_PERMITTED",
        |w, out| {
            w.e.restrict(w.worker, crate::protocol::AdminCommands::safe());
            let ids = [w.reserved, w.buried];
            w.e.delete_batch(w.worker, &mut ids.into_iter(), T0).encode(out)
        },
    ),
    case(
        "delete-batch of the jobs it holds, from another listener than the admin socket",
        plain,
        "DELETED_BATCH 1 2",
        |w, out| {
            w.e.restrict(w.worker, crate::protocol::AdminCommands::safe());
            let ids = [w.reserved, NO_JOB, w.reserved];
            w.e.delete_batch(w.worker, &mut ids.into_iter(), T0).encode(out)
        },
    )
    .logged(),
    case(
        "a body that cannot be read from the log buries the job its worker holds",
        plain,
        "BURIED",
        |w, out| w.e.body_lost(w.worker, w.reserved, T0).encode(out),
    )
    .logged(),
    case("a body that cannot be read from the log buries a ready job", plain, "BURIED", |w, out| {
        w.e.body_lost(w.worker, w.ready, T0).encode(out)
    })
    .logged(),
    case("a batch's job whose reply is not sent goes back to ready", plain, "", |w, _| {
        w.e.unsend(w.worker, w.reserved, T0)
    }),
];
