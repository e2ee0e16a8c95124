//! How far the failure sweeps reach, made a test: every engine entry point
//! that can change state (a `pub fn` taking `&mut self` in the files of
//! `impl Engine`) is called by a case of the allocation sweep, and every
//! command the reference's table marks logged has a case in the log
//! sweep. A new entry point or logged command without one fails here, so
//! the sweeps cannot fall behind the code.
//!
//! Also the cases the first table lacked: the paths only a hang-up, a
//! byte from a `reserve-with-abort`'s client, the timer or a lapsed
//! hand-off take.

use std::sync::atomic::{AtomicBool, Ordering};

use super::sweep_refusals::world_with_nothing_ready;
use super::sweep_world::{key, name, put_keyed_step, put_step, world, Case, World, T0};
use super::*;

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

/// The world with the waiter replaced by a client blocked in a
/// `reserve-with-abort` on `quiet` whose bytes have arrived, and the
/// producer using `quiet`.
fn world_with_typist_blocked() -> World {
    let mut w = world();
    let typist = Arc::new(Typist::default());
    let c = w.e.connect(typist.clone()).unwrap();
    w.e.watch(c, &name("quiet"));
    w.e.ignore(c, &name("default"));
    assert_eq!(w.e.reserve_with_abort(c, None, false, T0, &mut Vec::<u8>::new()), None);
    typist.typed.store(true, Ordering::SeqCst);
    w.waiter = c;
    w.e.use_tube(w.producer, &name("quiet"));
    w
}

fn world_with_waiter_blocked() -> World {
    let mut w = world();
    assert_eq!(w.e.reserve(w.waiter, None, T0, &mut Vec::<u8>::new()), None);
    w
}

/// A job handed to the blocked waiter and never collected.
fn world_with_handoff_uncollected() -> World {
    let mut w = world_with_waiter_blocked();
    w.e.use_tube(w.producer, &name("quiet"));
    put_step(&mut w, &mut Vec::new(), 0);
    w
}

/// Tube `other` holds a job with the world's keyed job's key, `k`.
fn world_with_key_taken_elsewhere() -> World {
    let mut w = world();
    w.e.use_tube(w.producer, &name("other"));
    put_keyed_step(&mut w, &mut Vec::new(), 0, 0, key("k", 0));
    w.e.use_tube(w.producer, &name("jobs"));
    w
}

/// Keyed jobs that are not ready: `d` delayed, `b` buried, `r` reserved
/// by the worker.
fn world_with_keyed_jobs_not_ready() -> World {
    let mut w = world();
    w.e.use_tube(w.producer, &name("keyed"));
    put_keyed_step(&mut w, &mut Vec::new(), 5, 30, key("d", 0));
    w.e.watch(w.worker, &name("keyed"));
    for k in ["b", "r"] {
        put_keyed_step(&mut w, &mut Vec::new(), 0, 0, key(k, 0));
        let Some(Reply::Reserved(id, _)) = w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()) else {
            panic!("no keyed job to reserve");
        };
        if k == "b" {
            assert_eq!(w.e.bury(w.worker, id, 5, T0), Reply::Buried);
        }
    }
    w
}

fn world_with_jobs_paused() -> World {
    let mut w = world();
    assert_eq!(w.e.pause_tube(Some(&name("jobs")), 10, T0), Reply::Paused);
    w
}

/// Four more buried jobs in `jobs` behind the world's one, and three
/// delayed jobs in `later`, a tube of nothing else.
pub(super) fn world_with_many() -> World {
    let mut w = world();
    for _ in 0..4 {
        put_step(&mut w, &mut Vec::new(), 0);
        let Some(Reply::Reserved(id, _)) = w.e.reserve(w.worker, None, T0, &mut Vec::<u8>::new()) else {
            panic!("no job to bury");
        };
        assert_eq!(w.e.bury(w.worker, id, 5, T0), Reply::Buried);
    }
    w.e.use_tube(w.producer, &name("later"));
    for _ in 0..3 {
        put_step(&mut w, &mut Vec::new(), 30);
    }
    w.e.use_tube(w.producer, &name("jobs"));
    w
}

fn world_with_many_later_used() -> World {
    let mut w = world_with_many();
    w.e.use_tube(w.producer, &name("later"));
    w
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
    let most = w.e.clearable(&name("jobs"));
    match w.e.clear_tube(&name("jobs"), most, T0) {
        Ok(n) => Reply::Cleared(n as u64).encode(out),
        Err(refusal) => refusal.encode(out),
    }
}

/// `flush-tube jobs` as the connection runs it: chunks to the end, then
/// the cooling keys.
pub(super) fn flush_step(w: &mut World, out: &mut Vec<u8>) {
    let Some(most) = w.e.flushable(&name("jobs")) else {
        return Reply::NotFound.encode(out);
    };
    match w.e.flush_tube(&name("jobs"), most, Some(0), T0) {
        // One chunk: the world's few jobs and keys.
        Ok((n, None)) => Reply::Flushed(n as u64).encode(out),
        Ok((_, Some(_))) => panic!("more than one chunk"),
        Err(refusal) => refusal.encode(out),
    }
}

pub(super) const MORE_COMMANDS: &[Case] = &[
    ("kick of many buried jobs", world_with_many, |w, out| w.e.kick(w.producer, 10, T0).encode(out)),
    ("kick of many delayed jobs", world_with_many_later_used, |w, out| {
        w.e.kick(w.producer, 2, T0).encode(out)
    }),
    ("clear-tube of a tube with a job in every state", world_with_many, clear_step),
    ("flush-tube of a tube with a job in every state", world_with_many, flush_step),
    ("flush-tube of a tube with keys, one cooling", world, flush_step),
    ("delete-batch", world_with_many, |w, out| {
        let ids = [w.ready, w.reserved, w.buried, 999, w.ready, w.delayed];
        w.e.delete_batch(w.producer, &mut ids.into_iter(), T0).encode(out)
    }),
    ("delete-batch of a keyed job: its key cools down", world, |w, out| {
        let ids = [w.keyed, w.ready];
        w.e.delete_batch(w.producer, &mut ids.into_iter(), T0).encode(out)
    }),
    (
        "move-job of a keyed job to a tube with its key: KEY_TAKEN",
        world_with_key_taken_elsewhere,
        |w, out| w.e.move_job(w.keyed, &name("other"), T0).encode(out),
    ),
    ("put with a key that names a delayed job: the ratchet", world_with_keyed_jobs_not_ready, |w, out| {
        put_keyed_step(w, out, 1, 0, key("d", 0))
    }),
    ("put with a key that names a buried job", world_with_keyed_jobs_not_ready, |w, out| {
        put_keyed_step(w, out, 9, 0, key("b", 0))
    }),
    ("put with a key that names a reserved job", world_with_keyed_jobs_not_ready, |w, out| {
        put_keyed_step(w, out, 9, 0, key("r", 0))
    }),
    ("reserve-batch", world_with_many, reserve_batch_step),
    ("kick-job of a buried job", world, |w, out| w.e.kick_job(w.buried, T0).encode(out)),
    ("move-job of a delayed job", world, |w, out| w.e.move_job(w.delayed, &name("fresh"), T0).encode(out)),
    ("reserve answered DEADLINE_SOON at once", world_with_nothing_ready, |w, out| {
        if let Some(reply) = w.e.reserve(w.worker, None, Time::from_secs(59), out) {
            reply.encode(out);
        }
    }),
    ("reserve-with-abort answered ABORTED at once", world, |w, out| {
        if let Some(reply) = w.e.reserve_with_abort(w.waiter, None, true, T0, out) {
            reply.encode(out);
        }
    }),
    ("bytes end a blocked reserve-with-abort", world_with_typist_blocked, |w, _| {
        w.e.client_stirred(w.waiter, false)
    }),
    ("a hang-up ends a blocked reserve", world_with_waiter_blocked, |w, _| {
        w.e.client_stirred(w.waiter, true)
    }),
    ("a put meets a reserve-with-abort whose bytes arrived", world_with_typist_blocked, |w, out| {
        put_step(w, out, 0)
    }),
    ("a hand-off lapses before collection", world_with_handoff_uncollected, |w, _| {
        w.e.catch_up(Time::from_secs(61))
    }),
    ("the timer ends a pause", world_with_jobs_paused, |w, out| {
        let _ = std::io::Write::write_fmt(out, format_args!("{:?}", w.e.tick(Time::from_secs(11))));
    }),
    ("bodies move to new blocks", world, |w, _| {
        w.e.move_bodies(0, usize::MAX, &|_| true);
    }),
    ("put in drain mode", world, |w, out| {
        w.e.start_draining();
        put_step(w, out, 0)
    }),
    ("the wakers of ended reserves are taken", world_with_handoff_uncollected, |w, out| {
        let mut into: [Option<Arc<dyn Waker>>; 1] = [None];
        let _ = std::io::Write::write_fmt(out, format_args!("{}", w.e.take_woken(&mut into)));
    }),
];

/// Entry points no client reaches: start-up's, before any client, and the
/// log's own (its sweep runs them).
const NOT_A_CLIENT_S: &[&str] = &[
    "set_id_range",
    "set_timer",
    "set_memory_limit",
    "set_max_reserves",
    "set_metering",
    "set_journal",
    "restore",
    "rewrite_files",
];

/// Every `pub fn` taking `&mut self` in `source`.
fn mutating_entry_points(source: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for (at, _) in source.match_indices("    pub fn ") {
        let rest = &source[at + "    pub fn ".len()..];
        let name = &rest[..rest.find(['(', '<']).unwrap_or(0)];
        let signature = &rest[..rest.find(')').unwrap_or(0)];
        if signature.contains("&mut self") {
            found.push(name);
        }
    }
    found
}

#[test]
fn every_entry_point_that_changes_the_engine_has_a_sweep_case() {
    // Every file of the engine, in its folders too, that adds to `impl
    // Engine`, read as the tree holds it: a new file is scanned without a
    // word here.
    let mut folders = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine")];
    let mut engine: Vec<String> = Vec::new();
    while let Some(folder) = folders.pop() {
        for path in std::fs::read_dir(folder).unwrap().map(|entry| entry.unwrap().path()) {
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                engine.push(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    engine.retain(|source| source.contains("impl Engine {"));
    let cases = case_text();
    let mut entry_points: Vec<&str> =
        engine.iter().flat_map(|source| mutating_entry_points(source)).collect();
    entry_points.retain(|name| !NOT_A_CLIENT_S.contains(name));
    assert!(entry_points.len() > 30, "the scan found only {entry_points:?}");
    let missing: Vec<&&str> =
        entry_points.iter().filter(|name| !cases.contains(&format!("w.e.{name}("))).collect();
    assert!(missing.is_empty(), "entry points no allocation-sweep case calls: {missing:?}");
    eprintln!("allocation sweep reaches {} entry points", entry_points.len());
}

/// The text of the sweep's cases: the two lists of cases and the steps
/// (`fn *_step`) they call, but not the worlds they start from, so that a
/// call made only in a set-up reaches nothing.
fn case_text() -> String {
    let files = [
        include_str!("sweep.rs"),
        include_str!("sweep_reach.rs"),
        include_str!("sweep_refusals.rs"),
        include_str!("sweep_world.rs"),
    ];
    let mut text = String::new();
    for file in files {
        for list in [
            "const COMMANDS: &[Case] = &[",
            "const MORE_COMMANDS: &[Case] = &[",
            "const REFUSALS: &[Case] = &[",
        ] {
            if let Some(at) = file.find(list) {
                text.push_str(file[at..].split("\n];").next().unwrap_or_default());
            }
        }
        for (at, _) in file.match_indices("fn ") {
            let name = file[at + 3..].split('(').next().unwrap_or_default();
            if name.ends_with("_step") {
                text.push_str(file[at..].split("\n}\n").next().unwrap_or_default());
            }
        }
    }
    text
}

/// Replies of the table of commands that no engine call gives, with why:
/// the connection gives them, before or after the engine.
const CONNECTIONS_REPLIES: &[(&str, &str)] = &[
    ("put", "JOB_TOO_BIG"),   // the body's size, checked as it is read
    ("put", "EXPECTED_CRLF"), // the body's end, read by the connection
];

/// Every reply each command of the table of commands (reference §3.0) can
/// give is what some case reaches (`REACHES`): a case named for the
/// command (its name starts with the command's) whose reply starts with
/// that word, or names it as a unique key's state does (`INSERTED 9
/// RESERVED`). A reply added to the table needs a case that gives it.
#[test]
fn every_reply_of_every_command_of_the_reference_is_reached() {
    let reference = include_str!("../reference.md");
    let table = reference.split("| command | replies | logged | promises | § |").nth(1).unwrap_or_default();
    let mut missing = Vec::new();
    let mut pairs = 0;
    for row in table.lines().skip(2).take_while(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let command = cells[0].trim_start_matches("| `").split([' ', '`']).next().unwrap_or_default();
        let words = cells[1].split(|c: char| !(c.is_ascii_uppercase() || c == '_')).filter(|w| w.len() > 1);
        for word in words {
            pairs += 1;
            let named = |case: &str| {
                case.strip_prefix(command)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ',', ':']))
            };
            let reached = super::sweep_reaches::REACHES
                .iter()
                .any(|(case, reply)| named(case) && reply.split_whitespace().any(|w| w == word));
            if !reached && !CONNECTIONS_REPLIES.contains(&(command, word)) {
                missing.push(format!("{command}: {word}"));
            }
        }
    }
    assert!(pairs > 40, "the table was not read: {pairs} replies");
    assert!(missing.is_empty(), "replies of the table no sweep case reaches: {missing:#?}");
}

#[test]
fn every_logged_command_of_the_reference_has_a_log_sweep_case() {
    let reference = include_str!("../reference.md");
    let log_sweep = include_str!("log_sweep.rs");
    let mut logged = Vec::new();
    let table = reference.split("| command | replies | logged | promises | § |").nth(1).unwrap_or_default();
    for row in table.lines().skip(2).take_while(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let command = cells[0].trim_start_matches("| `").split([' ', '`']).next().unwrap_or_default();
        if cells.get(2).is_some_and(|logged| *logged != "no") {
            logged.push(command);
        }
    }
    assert!(logged.contains(&"put") && logged.contains(&"kick"), "the table was not read: {logged:?}");
    let missing: Vec<&&str> = logged.iter().filter(|c| !log_sweep.contains(&format!("(\"{c}"))).collect();
    assert!(missing.is_empty(), "logged commands without a log-sweep case: {missing:?}");
}
