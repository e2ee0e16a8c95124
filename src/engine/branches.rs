//! The engine's inner branches that its test cases must reach: the ones
//! no client's command names, which the reach test (`sweep_reach.rs`)
//! could not ask for by a method's name. A branch is marked in the code
//! with [`reached`], named here in [`BRANCHES`], and reached by some case
//! of `cases.rs` with nothing failing, or the reach test fails. So a
//! branch the sweeps are named for cannot quietly stop being swept.
//!
//! Test builds only: in the server the marks are nothing.

use std::sync::atomic::{AtomicBool, Ordering};

/// Every marked branch, by name.
pub(super) const BRANCHES: &[&str] = &[
    "a hand-off not yet collected lapses: the wait goes on",
    "a delivered hand-off not yet sent lapses: withdrawn, the wait goes on",
    "a delivered hand-off lapses after it was sent: the worker keeps it",
];

/// Whether each of [`BRANCHES`] has been reached, in this test binary.
static REACHED: [AtomicBool; BRANCHES.len()] = [const { AtomicBool::new(false) }; BRANCHES.len()];

/// Notes that branch `name` was reached. A name not in [`BRANCHES`] is
/// a mistake the reach test reports. Allocates nothing: it runs inside
/// the allocation sweep's failing runs.
pub(super) fn reached(name: &str) {
    match BRANCHES.iter().position(|branch| *branch == name) {
        Some(at) => REACHED[at].store(true, Ordering::Relaxed),
        None => panic!("branch {name:?} is not in engine/branches.rs"),
    }
}

/// The branches not reached so far.
pub(super) fn missed() -> Vec<&'static str> {
    BRANCHES
        .iter()
        .zip(&REACHED)
        .filter(|(_, hit)| !hit.load(Ordering::Relaxed))
        .map(|(name, _)| *name)
        .collect()
}
