//! For tests only: the log's writes, fsyncs and file operations fail on
//! request, the `n`th of one thread's, the way the allocation-failure sweep
//! fails allocations (`engine/proofs/log_sweep.rs` runs every logged
//! command with each of its operations failing in turn). In the server's build
//! [`io_point`] is `Ok(())` and nothing else is here.

use std::io;

#[cfg(test)]
use crate::countdown::{self, Countdown};

#[cfg(test)]
thread_local! {
    /// This thread's log operations, counted down to the one that fails.
    static OPERATIONS: Countdown = const { Countdown::new() };
}

/// Called before each write, fsync, file creation, preallocation or
/// removal the log makes: an error here is that operation's error.
pub(super) fn io_point() -> io::Result<()> {
    #[cfg(test)]
    if OPERATIONS.with(Countdown::tick) {
        return Err(io::Error::other("injected failure"));
    }
    Ok(())
}

/// Runs `f` with this thread's `n`th log operation (from 1) failing;
/// returns what `f` returned and whether that operation came.
#[cfg(test)]
pub(crate) fn fail_nth<R>(n: u64, f: impl FnOnce() -> R) -> (R, bool) {
    countdown::fail_nth(&OPERATIONS, n, f)
}
