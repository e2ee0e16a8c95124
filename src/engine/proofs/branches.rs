//! The engine's inner branches that its test cases must reach: the ones
//! no client's command names, which the reach test (`sweep_reach.rs`)
//! could not ask for by a method's name. A branch is marked in the code
//! with [`reached`], named here in [`BRANCHES`], and reached by some case
//! of `cases.rs` with nothing failing, or the reach test fails. So a
//! branch the sweeps are named for cannot quietly stop being swept.
//!
//! The record is the calling thread's own: the reach test clears it
//! ([`forget`]), runs the cases on its thread and reads it ([`missed`]),
//! so what other tests reach, on their own threads of the same binary,
//! is not counted for the cases.
//!
//! Test builds only: in the server the marks are nothing.

use std::cell::Cell;

/// Every marked branch, by name.
pub(super) const BRANCHES: &[&str] = &[
    "a hand-off not yet collected lapses: the wait goes on",
    "a delivered hand-off not yet sent lapses: withdrawn, the wait goes on",
    "a delivered hand-off lapses after it was sent: the worker keeps it",
];

thread_local! {
    /// Whether each of [`BRANCHES`] has been reached on this thread since
    /// it last [`forget`]s. A constant start and no destructor: reading it
    /// allocates nothing.
    static REACHED: Cell<[bool; BRANCHES.len()]> = const { Cell::new([false; BRANCHES.len()]) };
}

/// Notes that branch `name` was reached, on this thread. A name not in
/// [`BRANCHES`] is a mistake the reach test reports. Allocates nothing:
/// it runs inside the allocation sweep's failing runs.
pub(in crate::engine) fn reached(name: &str) {
    match BRANCHES.iter().position(|branch| *branch == name) {
        Some(at) => REACHED.with(|reached| {
            let mut now = reached.get();
            now[at] = true;
            reached.set(now);
        }),
        None => panic!("branch {name:?} is not in engine/proofs/branches.rs"),
    }
}

/// Forgets what this thread has reached so far.
pub(super) fn forget() {
    REACHED.with(|reached| reached.set([false; BRANCHES.len()]));
}

/// The branches not reached on this thread since it last forgot.
pub(super) fn missed() -> Vec<&'static str> {
    let reached = REACHED.with(Cell::get);
    BRANCHES.iter().zip(reached).filter(|(_, hit)| !hit).map(|(name, _)| *name).collect()
}
