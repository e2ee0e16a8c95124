//! The promise `bounded` of the table of commands (reference §3.0), made
//! a test: every command whose row makes it runs here as its connection
//! runs it, a piece a lock, against more jobs than one piece may touch,
//! and no piece may do more than the bound the reference names: a
//! thousand jobs changed (and a thousand held jobs let go), 256 KiB of
//! bodies copied (a job more), or 16 Ki slots of a queue looked at. The
//! run is a case's `bounded` (`cases.rs`, `cases_more.rs`), written beside
//! the case (on `runs::filled`, and `runs::tube_chunks` for a command on a
//! whole tube) or, if long, in `runs.rs`. A command given the promise
//! without such a case fails, so the promise cannot outrun its check.
//!
//! Work is counted, not timed: the stall a piece causes is measured by
//! `benches/batch.rs`, never asserted by a test.

use super::cases::CASES;
use crate::reference::commands::promising;

#[test]
fn every_bounded_command_holds_the_lock_in_bounded_pieces() {
    let commands = promising("bounded");
    assert!(commands.len() >= 4, "the table was not read: {commands:?}");
    for command in &commands {
        let run = CASES.iter().filter(|case| case.is_for(command)).find_map(|case| case.bounded);
        let Some(run) = run else {
            panic!("{command} promises `bounded` in reference §3.0, and no case of it in cases.rs proves it")
        };
        let pieces = run();
        assert!(
            pieces.work.iter().all(|&w| w <= pieces.most),
            "{command}: pieces {:?} over {}",
            pieces.work,
            pieces.most
        );
        assert!(!pieces.split || pieces.work.len() > 1, "{command} did {:?} in one piece", pieces.work);
    }
}
