//! For tests only: the log's writes, fsyncs and file operations fail on
//! request, the `n`th of one thread's, the way the allocation-failure sweep
//! fails allocations (`engine/log_sweep.rs` runs every logged command with
//! each of its operations failing in turn). In the server's build
//! [`io_point`] is `Ok(())` and nothing else is here.

use std::io;

#[cfg(test)]
thread_local! {
    /// Operations left before the one that fails; 0 when not armed.
    static COUNTDOWN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static FAILED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Called before each write, fsync, file creation, preallocation or
/// removal the log makes: an error here is that operation's error.
pub(super) fn io_point() -> io::Result<()> {
    #[cfg(test)]
    {
        let fail = COUNTDOWN.with(|countdown| match countdown.get() {
            0 => false,
            1 => {
                countdown.set(0);
                FAILED.with(|failed| failed.set(true));
                true
            }
            n => {
                countdown.set(n - 1);
                false
            }
        });
        if fail {
            return Err(io::Error::other("injected failure"));
        }
    }
    Ok(())
}

/// Runs `f` with this thread's `n`th log operation (from 1) failing;
/// returns what `f` returned and whether that operation came.
#[cfg(test)]
pub(crate) fn fail_nth<R>(n: u64, f: impl FnOnce() -> R) -> (R, bool) {
    FAILED.with(|failed| failed.set(false));
    COUNTDOWN.with(|countdown| countdown.set(n));
    let result = f();
    COUNTDOWN.with(|countdown| countdown.set(0));
    (result, FAILED.with(|failed| failed.get()))
}
