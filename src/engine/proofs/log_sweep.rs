//! The log's failure sweep: the allocation-failure sweep's twin for the
//! disk. Every case of `cases.rs` that writes the log runs over and over against the
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

use super::case::Case;
use super::cases::CASES;
use super::sweep_world::{output, put_step, state, world_from, Step, World, T0};
use crate::binlog::{faults, sync::Durability, Binlog};
use crate::config::Fsync;
use crate::engine::*;
use crate::ids::IdRange;
use crate::time::Clock;

/// A fresh directory for one run's log, removed afterwards.
pub(super) struct Dir(pub(super) std::path::PathBuf);

impl Dir {
    pub(super) fn new(n: u64) -> Dir {
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

/// An engine with a log in `dir`, restored from what is there as a server
/// starting at `now` restores it (`server/recovery.rs`), its log keeping
/// the bodies `keeping` says (`engine/body.rs`), and the log's durability
/// handle.
pub(super) fn restarted_keeping(dir: &Dir, now: Time, keeping: Keeping) -> (Engine, StdArc<Durability>) {
    let (binlog, recovered) =
        Binlog::open(&dir.0, FILE_SIZE, Fsync::Every(0), Clock::start(), IdRange::default(), keeping)
            .unwrap();
    let durability = binlog.durability();
    let mut e = Engine::new(65535);
    e.restore(&recovered.tubes, recovered.jobs, recovered.next_id, now);
    e.set_journal(Box::new(binlog));
    e.rewrite_files(&recovered.corrupt);
    (e, durability)
}

/// The world of the allocation sweep, logged, with `rounds` more jobs put
/// and deleted first: as `rounds` grows, the command's records fall at
/// every place in a file, the end of one included, so that some runs start
/// a new file and let old ones go.
fn logged_world(dir: &Dir, rounds: usize, keeping: Keeping) -> (World, StdArc<Durability>) {
    let (e, durability) = restarted_keeping(dir, T0, keeping);
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
                // In whole seconds, rounded, as the worlds' times are: each
                // conversion through Unix time reads the two clocks anew,
                // and a thread preempted between the readings (a loaded
                // machine) is off by as long as it waited.
                State::Delayed => {
                    format!(
                        "due={}s",
                        (job.deadline.0.saturating_sub(job.created.0) + 500_000_000) / 1_000_000_000
                    )
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
                job.pri, job.delay, job.ttr, c.releases, c.buries, c.kicks, body_of(e, id)
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

/// Job `id`'s body, read back from the log if it was left there: every
/// comparison sees the bytes, wherever they are.
pub(super) fn body_of(e: &Engine, id: JobId) -> Vec<u8> {
    let Some(job) = e.jobs.get(&id) else { return Vec::new() };
    if let Some(bytes) = job.body.bytes() {
        return bytes.to_vec();
    }
    let mut bytes = vec![0; job.body.len()];
    let read = e.body_read(id).expect("a reader for a body in the log");
    crate::binlog::body::read(&read, &mut bytes).unwrap_or_else(|e| panic!("job {id}'s body: {e}"));
    bytes
}

/// The cases that write the log.
fn logged_cases() -> impl Iterator<Item = &'static Case> {
    CASES.iter().filter(|case| case.logged)
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

/// Sweeps every logged command, from every place in a file, with `fail`,
/// the log keeping bodies as `keeping` says; returns the failure points
/// covered.
fn sweep(fail: Failing, what: &str, keeping: Keeping) -> usize {
    let mut failure_points = 0;
    for case in logged_cases() {
        let (command, setup, step) = (case.name, case.world, case.step);
        for rounds in (0..60).step_by(3) {
            // What a restart finds before the command: the log as the
            // world leaves it (memory counts a reserve the log does not).
            let before_log = {
                let dir = Dir::new(0);
                let (mut w, _) = logged_world(&dir, rounds, keeping);
                setup(&mut w);
                drop(w);
                replayed(&restarted_keeping(&dir, T0, keeping).0)
            };
            let (expected_reply, expected_state, expected_log) = {
                let dir = Dir::new(0);
                let (mut w, durability) = logged_world(&dir, rounds, keeping);
                setup(&mut w);
                let reply = run(&mut w, &durability, step, output());
                let state = state(&w.e);
                drop(w);
                (reply, state, replayed(&restarted_keeping(&dir, T0, keeping).0))
            };
            for n in 1.. {
                let dir = Dir::new(n);
                let (mut w, durability) = logged_world(&dir, rounds, keeping);
                setup(&mut w);
                let before = state(&w.e);
                let mut out = Some(output());
                let (reply, failed) =
                    fail(n, &mut || run(&mut w, &durability, step, out.take().unwrap_or_default()));
                let after = state(&w.e);
                drop(w);
                let log = replayed(&restarted_keeping(&dir, T0, keeping).0);
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
                    assert!(
                        after == before || after == expected_state,
                        "{context}: half done\n{after:#?}\n{expected_state:#?}"
                    );
                    assert!(log == before_log || log == expected_log, "{context}: half logged");
                }
            }
        }
    }
    failure_points
}

#[test]
fn every_write_and_fsync_of_every_logged_command_may_fail_cleanly() {
    let failure_points = sweep(fail_io, "log operation", Keeping { above: None });
    let cases = logged_cases().count();
    eprintln!("log failure sweep: {cases} cases, {failure_points} failure points");
    assert!(failure_points >= cases, "a command wrote nothing: is the log attached?");
}

/// The same with every body left in the log (`engine/body.rs`): a write
/// that fails where a body is moved forward, or its place recorded, loses
/// no body a client was told of.
#[test]
fn every_write_and_fsync_may_fail_cleanly_with_every_body_in_the_log() {
    let failure_points = sweep(fail_io, "log operation", Keeping { above: Some(0) });
    assert!(failure_points >= logged_cases().count(), "a command wrote nothing: is the log attached?");
}

#[test]
fn every_allocation_of_every_logged_command_may_fail_cleanly() {
    let failure_points = sweep(fail_allocation, "allocation", Keeping { above: None });
    eprintln!(
        "logged allocation-failure sweep: {} cases, {failure_points} failure points",
        logged_cases().count()
    );
    assert!(failure_points > 0);
}
