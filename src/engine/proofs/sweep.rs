//! The allocation-failure sweep, in the way SQLite tests itself: every
//! case of `cases.rs` runs over and over against the same starting state, first with
//! its 1st allocation failing, then its 2nd, and so on, until a run needs
//! no failure. Each run must end in the command's normal reply or
//! `OUT_OF_MEMORY`, never an abort (an infallible allocation that fails
//! aborts this test binary, see `sys/failing.rs`), and the engine must be
//! either exactly as before (the refusal) or exactly as after a run with
//! no failure; and a run with no failure must reach what its case says.
//! That is "claim, then change", checked for every allocation of every
//! command rather than for the cases a review thought of.
//!
//! A run is what a connection does for the command: the engine call and
//! the reply's encoding, into an output buffer holding the room a
//! connection claims before each command (`protocol::SHORT_REPLY_LEN`).

use super::cases::CASES;
use super::sweep_world::*;
use crate::sys::failing::fail_nth;

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
    for case in CASES {
        let (command, step, expect) = (case.name, case.step, case.reaches);
        let start = || {
            let mut w = world();
            (case.world)(&mut w);
            w
        };
        let (expected_reply, expected_state) = {
            let mut w = start();
            let mut out = output();
            step(&mut w, &mut out);
            (out, state(&w.e))
        };
        let reached = String::from_utf8_lossy(&expected_reply);
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
    eprintln!("allocation-failure sweep: {} cases, {failure_points} failure points", CASES.len());
    assert!(failure_points > 0, "no allocation failed: is the failing allocator in place?");
}
