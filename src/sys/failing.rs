//! For tests only: an allocator that fails the `n`th allocation made by
//! one thread while a test asks it to, the way SQLite tests itself. The
//! allocation-failure sweep (`engine/proofs/sweep.rs`) runs each command
//! with its 1st, 2nd, … allocation failing, until one run needs no
//! failure, and checks that each run ends in the normal reply or
//! `OUT_OF_MEMORY`, with the engine unchanged or fully changed. An
//! allocation made through an infallible API (`Vec::push`, `Box::new`)
//! that fails aborts the test binary: that is how the sweep finds one.
//!
//! Counting is per thread, so the test harness's other threads, running
//! other tests, neither count nor fail.

use std::alloc::{GlobalAlloc, Layout, System};

use crate::countdown::{self, Countdown};

thread_local! {
    /// This thread's allocations, counted down to the one that fails.
    static ALLOCATIONS: Countdown = const { Countdown::new() };
}

/// The lib's test binary's allocator: the system's, but for the
/// allocation [`fail_nth`] picks.
pub struct Failing;

/// True if this allocation must fail; counts it otherwise.
fn must_fail() -> bool {
    ALLOCATIONS.with(Countdown::tick)
}

// SAFETY: every method is System's, or returns null, which is how an
// allocation fails.
unsafe impl GlobalAlloc for Failing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if must_fail() {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if must_fail() {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(block, layout) }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if must_fail() {
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { System.realloc(block, layout, new_size) }
    }
}

/// Runs `f` with this thread's `n`th allocation (counting from 1) failing;
/// returns what `f` returned and whether that allocation came (false: `f`
/// made fewer than `n` allocations, and none failed).
pub fn fail_nth<R>(n: u64, f: impl FnOnce() -> R) -> (R, bool) {
    countdown::fail_nth(&ALLOCATIONS, n, f)
}
