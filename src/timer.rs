//! The timer thread: runs the engine's time-driven work (TTRs running out,
//! delayed jobs maturing, pauses ending) when it falls due.
//!
//! It sleeps on one `Condvar` until the engine's next deadline (at most
//! [`LONGEST_SLEEP`] at a time, so that a suspend of the host cannot delay
//! it for long), or forever when nothing is due, so an idle server uses no
//! CPU. The engine notifies
//! the `Condvar` when a new deadline comes earlier than the one the thread
//! sleeps towards. Blocked reserves time themselves out on their own
//! threads; this thread only moves jobs, and gives memory back to the
//! system after many jobs were deleted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use crate::engine::Engine;
use crate::sys;
use crate::time::{Clock, Time, LONGEST_SLEEP};

/// Seconds between the engine saying memory can be given back and the
/// timer doing it.
const GIVE_BACK_DELAY_SECS: u32 = 1;

/// The timer thread's body: runs `engine`'s time-driven work as it falls
/// due, and gives memory back after a drain, sleeping on `timer` in
/// between, until `stopping` is set and `timer` notified.
pub(crate) fn run(engine_lock: &Mutex<Engine>, clock: &Clock, timer: &Condvar, stopping: &AtomicBool) {
    // A poisoned lock exists only in tests (release builds abort on panic).
    let lock = || engine_lock.lock().unwrap_or_else(|e| e.into_inner());
    let mut engine = lock();
    // When the memory of deleted jobs will be given back: a moment after the
    // engine first says it pays, so that a drain under way can finish first
    // and the work is done once, not at every step of the way down.
    let mut give_back_at: Option<Time> = None;
    while !stopping.load(Ordering::SeqCst) {
        let now = clock.now();
        let mut due = engine.tick(now);
        if engine.wants_give_back() {
            let at = *give_back_at.get_or_insert(now.plus_secs(GIVE_BACK_DELAY_SECS));
            if now >= at {
                give_back_at = None;
                engine.give_back_memory();
                // Walking the allocator's arenas takes a while: not under
                // the engine's lock.
                drop(engine);
                sys::release_free_memory();
                engine = lock();
                continue;
            }
            due = Some(due.map_or(at, |d| d.min(at)));
        } else {
            give_back_at = None;
        }
        engine = match due {
            Some(due) => {
                // Bounded, so that a suspend cannot make a due time late by
                // more than LONGEST_SLEEP (see `time.rs`).
                let sleep = due.duration_since(now).min(LONGEST_SLEEP);
                timer.wait_timeout(engine, sleep).map_or_else(|e| e.into_inner().0, |r| r.0)
            }
            None => timer.wait(engine).unwrap_or_else(|e| e.into_inner()),
        };
    }
}
