//! The timer thread: runs the engine's time-driven work (TTRs running out,
//! delayed jobs maturing, pauses ending) when it falls due.
//!
//! It sleeps on one `Condvar` until the engine's next deadline (at most
//! [`LONGEST_SLEEP`] at a time, so that a suspend of the host cannot delay
//! it for long), or forever when nothing is due, so an idle server uses no
//! CPU. The engine notifies the `Condvar` when a new deadline comes earlier
//! than the one the thread sleeps towards. Blocked reserves time
//! themselves out on their own threads, and every command first catches
//! the engine up with the clock itself (`Engine::catch_up`): this thread
//! is what moves jobs when no command comes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Condvar;

use crate::engine_lock::{EngineGuard, EngineLock};
use crate::time::{Clock, LONGEST_SLEEP};

/// The timer thread's body: runs `engine`'s time-driven work as it falls
/// due, sleeping on `timer` in between, until `stopping` is set and
/// `timer` notified.
pub(crate) fn run(engine_lock: &EngineLock, clock: &Clock, timer: &Condvar, stopping: &AtomicBool) {
    let mut engine = engine_lock.lock();
    while !stopping.load(Ordering::SeqCst) {
        let now = clock.now();
        let due = engine.tick(now);
        // The reserves the tick ended are woken as the wait lets the lock go.
        let guard = engine.into_inner();
        engine = EngineGuard::new(match due {
            Some(due) => {
                // Bounded, so that a suspend cannot make a due time late by
                // more than LONGEST_SLEEP (see `time.rs`).
                let sleep = due.duration_since(now).min(LONGEST_SLEEP);
                timer.wait_timeout(guard, sleep).map_or_else(|e| e.into_inner().0, |r| r.0)
            }
            None => timer.wait(guard).unwrap_or_else(|e| e.into_inner()),
        });
    }
}
