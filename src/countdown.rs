//! For tests only: "the `n`th event of this thread fails", the one
//! mechanism both failure sweeps count with. `sys/failing.rs` counts
//! allocations, `binlog/faults.rs` the log's writes, fsyncs and file
//! operations; each keeps a [`Countdown`] in a thread-local of its own, so
//! the two never count each other's events, and the test harness's other
//! threads neither count nor fail.
//!
//! It counts and answers; it must not decide what fails or how (that is
//! the caller's: a null block, an `io::Error`). The global allocator
//! consults it, so it must never allocate: two `Cell`s, no destructor, and
//! a `const` constructor for a `const` thread-local.

use std::cell::Cell;
use std::thread::LocalKey;

/// Events left before the one that fails, and whether it has failed.
pub(crate) struct Countdown {
    /// Events left before the one that fails; 0 when not armed.
    left: Cell<u64>,
    /// Whether the armed event has failed yet.
    failed: Cell<bool>,
}

impl Countdown {
    /// Not armed: nothing fails.
    pub(crate) const fn new() -> Countdown {
        Countdown { left: Cell::new(0), failed: Cell::new(false) }
    }

    /// Arms the countdown: the `n`th event from now (counting from 1)
    /// fails; 0 disarms it.
    pub(crate) fn arm(&self, n: u64) {
        self.failed.set(false);
        self.left.set(n);
    }

    /// Counts one event: true if it is the one that must fail, which
    /// disarms the countdown.
    pub(crate) fn tick(&self) -> bool {
        match self.left.get() {
            0 => false,
            1 => {
                self.left.set(0);
                self.failed.set(true);
                true
            }
            n => {
                self.left.set(n - 1);
                false
            }
        }
    }

    /// Disarms the countdown; returns whether the armed event came.
    pub(crate) fn disarm(&self) -> bool {
        self.left.set(0);
        self.failed.get()
    }
}

/// Runs `f` with this thread's `n`th event counted by `countdown` (from 1)
/// failing; returns what `f` returned and whether that event came (false:
/// `f` had fewer than `n` events, and none failed).
pub(crate) fn fail_nth<R>(
    countdown: &'static LocalKey<Countdown>,
    n: u64,
    f: impl FnOnce() -> R,
) -> (R, bool) {
    countdown.with(|countdown| countdown.arm(n));
    let result = f();
    (result, countdown.with(Countdown::disarm))
}
