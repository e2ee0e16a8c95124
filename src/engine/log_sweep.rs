//! The log's failure sweep: the allocation-failure sweep's twin for the
//! disk. Every command that writes the log runs over and over against the
//! same starting state and log directory, first with its 1st write, fsync,
//! file creation, preallocation or removal failing (`binlog/faults.rs`),
//! then its 2nd, and so on, until a run needs no failure. Each run must
//! end in the command's reply, `OUT_OF_MEMORY` (no room claimed: nothing
//! changed) or `INTERNAL_ERROR` (the log failed: the client is not told of
//! success), never a panic; the engine must be as before or as after; and
//! the log, replayed by a fresh server, must hold every change a client was
//! told of and none it was refused.
//!
//! A run is what a connection does: the engine's call, then, with `-f 0`,
//! the fsync that a reply waits for.

use std::sync::Arc as StdArc;

use super::sweep_reach::{clear_step, flush_step};
use super::sweep_world::{
    con, key, name, output, put_grouped_step, put_keyed_step, put_step, put_tagged_step, spend_a_try, state,
    world_from, Step, World, T0,
};
use super::*;
use crate::binlog::{faults, sync::Durability, Binlog};
use crate::config::Fsync;
use crate::ids::IdRange;
use crate::time::Clock;

/// A fresh directory for one run's log, removed afterwards.
struct Dir(std::path::PathBuf);

impl Dir {
    fn new(n: u64) -> Dir {
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let k = COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("beanstalk-log-sweep-{}-{n}-{k}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Small files, so that a few jobs start new ones and let old ones go.
const FILE_SIZE: u32 = 4096;

/// An engine with a log in `dir` (replaying what is there), and the log's
/// durability handle.
fn logged_engine(dir: &Dir) -> (Engine, StdArc<Durability>) {
    let (binlog, recovered) =
        Binlog::open(&dir.0, FILE_SIZE, Fsync::Every(0), Clock::start(), IdRange::default()).unwrap();
    let durability = binlog.durability();
    let mut e = Engine::new(65535);
    e.restore(&recovered.tubes, recovered.jobs, recovered.next_id, T0);
    e.set_journal(Box::new(binlog));
    (e, durability)
}

/// The world of the allocation sweep, logged, with `rounds` more jobs put
/// and deleted first: as `rounds` grows, the command's records fall at
/// every place in a file, the end of one included, so that some runs start
/// a new file and let old ones go.
fn logged_world(dir: &Dir, rounds: usize) -> (World, StdArc<Durability>) {
    let (e, durability) = logged_engine(dir);
    let mut w = world_from(e);
    for _ in 0..rounds {
        let mut out = output();
        put_step(&mut w, &mut out, 0);
        let id = w.e.next_id() - 1;
        assert_eq!(w.e.delete(w.producer, id, T0), Reply::Deleted);
    }
    (w, durability)
}

/// The jobs a server restarted on the log would hold, with everything a
/// restart must bring back: a reserved job comes back ready; its fields,
/// counters and times (a delayed job's due time as the delay left from
/// its creation, since each replay reads Unix times through a clock of its
/// own; a buried job's burial time as logged); and each tube's buried
/// jobs in the order a kick takes them.
fn replayed(e: &Engine) -> Vec<String> {
    let mut jobs = Vec::new();
    for id in 1..e.next_job_id {
        if let Some(job) = e.jobs.get(&id) {
            let state = if job.state == State::Reserved { State::Ready } else { job.state };
            let tube = &e.tubes.get(job.tube).name;
            let key = e.tubes.keys.logged(id).map(|key| (key.key.to_vec(), key.cooldown));
            let when = match state {
                // In ms: each conversion through Unix time may round.
                State::Delayed => {
                    format!("due={}ms", (job.deadline.0.saturating_sub(job.created.0) + 500_000) / 1_000_000)
                }
                State::Buried => format!("buried={}", job.buried_at().0),
                _ => String::new(),
            };
            // Reserves and timeouts are not logged by their own change, so
            // a rewrite may or may not have caught the latest (reference
            // §8.2): the counters every logged change keeps exactly.
            let c = job.counters;
            jobs.push(format!(
                "{id} {tube} {state:?} pri={} delay={} ttr={} {when} releases={} buries={} kicks={} body={:?} key={key:?}",
                job.pri, job.delay, job.ttr, c.releases, c.buries, c.kicks, job.body
            ));
        }
    }
    for &t in e.tubes.ids() {
        let tube = e.tubes.get(t);
        let order: Vec<JobId> = tube.buried.ids(&e.jobs).collect();
        if !order.is_empty() {
            jobs.push(format!("{} buried in order {order:?}", tube.name));
        }
    }
    // Cooling keys, without their ends, which a restart reads through
    // another clock.
    let keys = e.tubes.keys.sorted();
    jobs.extend(keys.iter().map(|k| k.split(" until ").next().unwrap_or(k).to_owned()));
    jobs
}

/// What a case's world needs before its command runs.
type Setup = fn(&mut World);

/// Each logged command: its name, what its world needs first, and the
/// command.
const LOGGED: &[(&str, Setup, Step)] = &[
    ("put", none, |w, out| put_step(w, out, 0)),
    ("put with a delay", none, |w, out| put_step(w, out, 10)),
    ("release", none, |w, out| w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out)),
    ("release with a delay", none, |w, out| w.e.release(w.worker, w.reserved, 9, 5, T0).encode(out)),
    ("bury", none, |w, out| w.e.bury(w.worker, w.reserved, 9, T0).encode(out)),
    ("kick", none, |w, out| w.e.kick(w.producer, 10, T0).encode(out)),
    ("kick-job of a delayed job", none, |w, out| w.e.kick_job(w.delayed, T0).encode(out)),
    ("reserve-job of a buried job", none, |w, out| {
        let id = w.buried;
        w.e.reserve_job(w.waiter, id, T0, out).encode(out);
    }),
    ("delete", none, |w, out| w.e.delete(w.worker, w.reserved, T0).encode(out)),
    ("move-job of a ready job to a new tube", none, |w, out| {
        w.e.move_job(w.ready, &name("fresh"), T0).encode(out)
    }),
    ("move-job of a buried job to a blocked worker's tube", none, |w, out| {
        w.e.move_job(w.buried, &name("quiet"), T0).encode(out)
    }),
    ("kick-job of a buried job", none, |w, out| w.e.kick_job(w.buried, T0).encode(out)),
    ("kick of many buried jobs", many, |w, out| w.e.kick(w.producer, 10, T0).encode(out)),
    ("clear-tube of a tube with a job in every state", many, clear_step),
    ("flush-tube of a tube with a job in every state", many, flush_step),
    ("flush-tube of a tube with keys, one cooling", none, flush_step),
    ("delete-batch", many, |w, out| {
        let ids = [w.ready, w.reserved, w.buried, 999, w.ready, w.delayed];
        w.e.delete_batch(w.worker, &mut ids.into_iter(), T0).encode(out)
    }),
    ("put with a retry limit and a key", none, |w, out| {
        put_tagged_step(w, out, 0, 0, key("new", 30), Some(2), None)
    }),
    ("put with a concurrency key and a retry limit", none, |w, out| {
        put_tagged_step(w, out, 0, 0, None, Some(2), con("c", 3))
    }),
    ("put with a group and an after-group", none, |w, out| put_grouped_step(w, out, 0, "g", "h")),
    ("put waiting for a group with a member: held", grouped, |w, out| put_grouped_step(w, out, 0, "", "g")),
    ("delete of a group's last member: its held job let go", grouped, |w, out| {
        w.e.delete(w.worker, w.reserved, T0).encode(out)
    }),
    ("release of a job whose tries are spent", spend_a_try, |w, out| {
        w.e.release(w.worker, w.reserved, 9, 0, T0).encode(out)
    }),
    ("put with a new unique key", none, |w, out| put_keyed_step(w, out, 0, 0, key("new", 30))),
    ("put with a key that names a job: nothing stored", none, |w, out| {
        put_keyed_step(w, out, 9, 0, key("k", 0))
    }),
    ("put with a key that names a job: the ratchet", none, |w, out| {
        put_keyed_step(w, out, 1, 0, key("k", 0))
    }),
    ("delete of a keyed job: its key cools down", none, |w, out| {
        w.e.delete(w.producer, w.keyed, T0).encode(out)
    }),
    ("move-job of a keyed job", none, |w, out| w.e.move_job(w.keyed, &name("fresh"), T0).encode(out)),
    ("the timer ends a cooldown", none, |w, out| {
        // No client waits on the timer: a record it could not write shows
        // as the log's failure, which a restart reads as the key cooling
        // still, and ends at once.
        let written = |e: &Engine| e.journal_stats().map(|s| s.records_written);
        let before = written(&w.e);
        let next = w.e.tick(Time::from_secs(200));
        if written(&w.e) == before {
            return Reply::InternalError.encode(out);
        }
        let _ = std::io::Write::write_fmt(out, format_args!("{:?}", next.is_some()));
    }),
];

/// A world as it is.
fn none(_: &mut World) {}

/// A member of group `g`, reserved by the worker, and a job held for
/// `g`, as `world_with_a_group` has.
fn grouped(w: &mut World) {
    put_grouped_step(w, &mut output(), 0, "g", "");
    put_grouped_step(w, &mut output(), 0, "", "g");
    let Some(Reply::Reserved(id, _)) = w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()) else {
        panic!("no job to reserve");
    };
    w.reserved = id;
}

/// Four more buried jobs in the producer's tube, as `world_with_many` has.
fn many(w: &mut World) {
    for _ in 0..4 {
        put_step(w, &mut output(), 0);
        let Some(Reply::Reserved(id, _)) = w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()) else {
            panic!("no job to bury");
        };
        assert_eq!(w.e.bury(w.worker, id, 5, T0), Reply::Buried);
    }
}

/// One run: the command, then the fsync its reply waits for; a failed
/// fsync turns the reply into `INTERNAL_ERROR`, as `Conn` does.
fn run(w: &mut World, durability: &Durability, step: Step, mut out: Vec<u8>) -> Vec<u8> {
    let before = durability.written();
    step(w, &mut out);
    let written = durability.written();
    if written > before && !durability.after_write(written) {
        out.clear();
        Reply::InternalError.encode(&mut out);
    }
    out
}

/// How the sweep fails the `n`th operation of a run: the log's I/O, or
/// (with the log attached, so that its records' memory counts too) an
/// allocation.
type Failing = fn(u64, &mut dyn FnMut() -> Vec<u8>) -> (Vec<u8>, bool);

fn fail_io(n: u64, f: &mut dyn FnMut() -> Vec<u8>) -> (Vec<u8>, bool) {
    faults::fail_nth(n, f)
}

fn fail_allocation(n: u64, f: &mut dyn FnMut() -> Vec<u8>) -> (Vec<u8>, bool) {
    crate::sys::failing::fail_nth(n, f)
}

/// Sweeps every logged command, from every place in a file, with `fail`;
/// returns the failure points covered.
fn sweep(fail: Failing, what: &str) -> usize {
    let mut failure_points = 0;
    for &(command, setup, step) in LOGGED {
        for rounds in (0..60).step_by(3) {
            // What a restart finds before the command: the log as the
            // world leaves it (memory counts a reserve the log does not).
            let before_log = {
                let dir = Dir::new(0);
                let (mut w, _) = logged_world(&dir, rounds);
                setup(&mut w);
                drop(w);
                replayed(&logged_engine(&dir).0)
            };
            let (expected_reply, expected_state, expected_log) = {
                let dir = Dir::new(0);
                let (mut w, durability) = logged_world(&dir, rounds);
                setup(&mut w);
                let reply = run(&mut w, &durability, step, output());
                let state = state(&w.e);
                drop(w);
                (reply, state, replayed(&logged_engine(&dir).0))
            };
            for n in 1.. {
                let dir = Dir::new(n);
                let (mut w, durability) = logged_world(&dir, rounds);
                setup(&mut w);
                let before = state(&w.e);
                let mut out = Some(output());
                let (reply, failed) =
                    fail(n, &mut || run(&mut w, &durability, step, out.take().unwrap_or_default()));
                let after = state(&w.e);
                drop(w);
                let log = replayed(&logged_engine(&dir).0);
                if !failed {
                    assert_eq!(reply, expected_reply, "{command}: no failure, another reply");
                    break;
                }
                failure_points += 1;
                let text = String::from_utf8_lossy(&reply).into_owned();
                let context = format!("{command} after {rounds} rounds, {what} {n} failing: {text:?}");
                if reply == expected_reply {
                    assert_eq!(after, expected_state, "{context}: told done, not done");
                    assert_eq!(log, expected_log, "{context}: told done, not in the log");
                } else if text.ends_with("OUT_OF_MEMORY\r\n") {
                    assert_eq!(after, before, "{context}: refused, yet changed");
                    assert_eq!(log, before_log, "{context}: refused, yet logged");
                } else {
                    assert_eq!(text, "INTERNAL_ERROR\r\n", "{context}");
                    assert!(after == before || after == expected_state, "{context}: half done");
                    assert!(log == before_log || log == expected_log, "{context}: half logged");
                }
            }
        }
    }
    failure_points
}

#[test]
fn every_write_and_fsync_of_every_logged_command_may_fail_cleanly() {
    let failure_points = sweep(fail_io, "log operation");
    eprintln!("log failure sweep: {} commands, {failure_points} failure points", LOGGED.len());
    assert!(failure_points >= LOGGED.len(), "a command wrote nothing: is the log attached?");
}

#[test]
fn every_allocation_of_every_logged_command_may_fail_cleanly() {
    let failure_points = sweep(fail_allocation, "allocation");
    eprintln!("logged allocation-failure sweep: {} commands, {failure_points} failure points", LOGGED.len());
    assert!(failure_points > 0);
}
