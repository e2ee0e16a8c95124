//! How far the engine's cases reach, made a test: every engine entry point
//! that can change state (a `pub fn` taking `&mut self` in the files of
//! `impl Engine`) is called by a case, every reply of the reference's
//! table of commands is reached by a case named for its command, and
//! every command the table marks logged has a logged case. A new entry point or logged command without one fails here, so
//! the sweeps cannot fall behind the code. All of it is read from the one
//! list of cases, `cases.rs`.

use super::cases::CASES;
use super::sweep_world::{output, world};
use crate::reference::commands::commands;

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

/// Every inner branch the cases are named for (`branches.rs`) is reached
/// by some case, with nothing failing. The record is this thread's, and
/// starts empty: what another test reaches counts for nothing here.
#[test]
fn every_marked_branch_is_reached_by_a_case() {
    super::branches::forget();
    for case in CASES {
        let mut w = world();
        (case.world)(&mut w);
        (case.step)(&mut w, &mut output());
    }
    let missed = super::branches::missed();
    assert!(missed.is_empty(), "branches no case reaches: {missed:?}");
}

/// The text of the cases: the list and the steps (`fn *_step`) they
/// call, but not the worlds they start from, so that a call made only in
/// a set-up reaches nothing.
fn case_text() -> String {
    let files = [
        include_str!("cases.rs"),
        include_str!("cases_more.rs"),
        include_str!("case_worlds.rs"),
        include_str!("sweep_world.rs"),
    ];
    let mut text = String::new();
    for file in files {
        for (at, _) in file.match_indices(": &[Case] = &[") {
            text.push_str(file[at..].split("\n];").next().unwrap_or_default());
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
/// give is what some case reaches: a case named for the
/// command (its name starts with the command's) whose reply starts with
/// that word, or names it as a unique key's state does (`INSERTED 9
/// RESERVED`). A reply added to the table needs a case that gives it.
#[test]
fn every_reply_of_every_command_of_the_reference_is_reached() {
    let mut missing = Vec::new();
    let mut pairs = 0;
    for row in commands() {
        let command = row.name();
        for word in &row.replies {
            pairs += 1;
            let reached = CASES
                .iter()
                .any(|case| case.is_for(command) && case.reaches.split_whitespace().any(|w| w == word));
            if !reached && !CONNECTIONS_REPLIES.contains(&(command, word.as_str())) {
                missing.push(format!("{command}: {word}"));
            }
        }
    }
    assert!(pairs > 40, "the table was not read: {pairs} replies");
    assert!(missing.is_empty(), "replies of the table no sweep case reaches: {missing:#?}");
}

#[test]
fn every_logged_command_of_the_reference_has_a_logged_case() {
    let logged: Vec<String> =
        commands().into_iter().filter(|row| row.logged).map(|row| row.name().to_owned()).collect();
    assert!(logged.iter().any(|c| c == "put") && logged.iter().any(|c| c == "kick"), "{logged:?}");
    let missing: Vec<&String> =
        logged.iter().filter(|c| !CASES.iter().any(|case| case.logged && case.is_for(c))).collect();
    assert!(missing.is_empty(), "logged commands without a logged case (cases.rs): {missing:?}");
}
