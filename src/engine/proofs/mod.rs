//! The engine's proofs: its unit tests, the one list of its test cases,
//! and the tests that run every case. Test builds only; nothing in the
//! engine's own files depends on what is here but their test modules
//! (the helpers of [`tests`]) and the marks of [`branches`].
//!
//! From the ground up, each file using only those above it in this list:
//!
//! - [`tests`]: an engine and a client to test with, and the engine's
//!   unit tests; [`handoff_tests`], the hand-off's.
//! - [`branches`]: the inner branches the cases must reach, marked in the
//!   engine's code, and the record of those reached.
//! - [`sweep_state`]: an engine's whole state as text, to compare.
//! - [`sweep_world`]: the world a case starts from (an engine, its
//!   clients and clock) and the steps several cases share;
//!   [`case_worlds`], the other worlds a case may start from.
//! - [`runs`]: the runs of the promise `bounded`, which a case names.
//! - [`case`]: what a case is.
//! - [`cases_more`] and [`cases`]: the one list of cases, `CASES`.
//! - The tests of the cases, each reading that list: [`sweep`] (every
//!   allocation fails in turn), [`log_sweep`] (every write, fsync and
//!   allocation of a logged case fails in turn), [`agreement`] (a restart
//!   from the log rebuilds what memory holds), [`sweep_reach`] (the cases
//!   reach every entry point, reply and marked branch) and [`bounded`]
//!   (each bounded command's run holds the lock in bounded pieces).

pub(super) mod tests;
mod handoff_tests;
pub(super) mod branches;
mod sweep_state;
mod sweep_world;
mod case_worlds;
mod runs;
mod case;
mod cases_more;
mod cases;
mod sweep;
mod log_sweep;
mod agreement;
mod sweep_reach;
mod bounded;
