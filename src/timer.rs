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
//! system: after many jobs were deleted, and once the server has gone
//! quiet (see [`Quiet`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::engine::Engine;
use crate::sys;
use crate::time::{Clock, Time, LONGEST_SLEEP};

/// Seconds between the engine saying memory can be given back and the
/// timer doing it.
const GIVE_BACK_DELAY_SECS: u32 = 1;

/// Seconds without a connection going idle after which the allocator's
/// free pages are given back.
const QUIET_SECS: u32 = 1;

/// When a connection last went idle: the server is quiet once none has
/// for [`QUIET_SECS`]. Then the timer gives the allocator's free pages back
/// to the system: what the burst that just ended freed inside the heap
/// (replies, bodies, a job table's index block), which the allocator would
/// otherwise keep resident for the next burst. (Connection buffers need no
/// help: they are mappings of their own, see `sys::Allocator`.)
/// Connections record this without a lock and without a system call; only
/// the first one after a give-back wakes the timer.
#[derive(Debug, Default)]
pub(crate) struct Quiet {
    /// The time of the last connection to go idle, in `Time`'s nanoseconds.
    since: AtomicU64,
    /// A connection went idle since the last give-back.
    pending: AtomicBool,
}

impl Quiet {
    /// Notes that a connection has gone idle (its client has been quiet for
    /// a moment) and freed its buffers. True if the timer must be woken to plan a give-back; the
    /// caller notifies it while holding the engine's lock, so that the
    /// wake-up cannot fall between the timer's check and its wait.
    pub fn went_idle(&self, now: Time) -> bool {
        self.since.store(now.0, Ordering::Relaxed);
        !self.pending.load(Ordering::Relaxed) && !self.pending.swap(true, Ordering::AcqRel)
    }

    /// The timer has given the free pages back.
    fn gave_back(&self) {
        self.pending.store(false, Ordering::Release);
    }

    /// When the free pages should be given back, if a give-back is pending.
    pub(crate) fn give_back_at(&self) -> Option<Time> {
        self.pending
            .load(Ordering::Acquire)
            .then(|| Time(self.since.load(Ordering::Relaxed)).plus_secs(QUIET_SECS))
    }
}

/// The timer thread's body: runs `engine`'s time-driven work as it falls
/// due, and gives memory back after a drain and once `quiet` says the
/// server has gone quiet, sleeping on `timer` in between, until `stopping`
/// is set and `timer` notified.
pub(crate) fn run(
    engine_lock: &Mutex<Engine>,
    clock: &Clock,
    timer: &Condvar,
    quiet: &Quiet,
    stopping: &AtomicBool,
) {
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
        if let Some(at) = quiet.give_back_at() {
            if now >= at {
                quiet.gave_back();
                drop(engine);
                sys::release_free_memory();
                engine = lock();
                continue;
            }
            due = Some(due.map_or(at, |d| d.min(at)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_idle_connection_after_a_give_back_wakes_the_timer() {
        let quiet = Quiet::default();
        assert_eq!(quiet.give_back_at(), None, "nothing has happened yet");
        assert!(quiet.went_idle(Time::from_secs(10)));
        assert!(!quiet.went_idle(Time::from_secs(11)));
        // The give-back waits for a quiet second after the last idle.
        assert_eq!(quiet.give_back_at(), Some(Time::from_secs(12)));
        // The timer gives back; the next connection to go idle wakes it.
        quiet.gave_back();
        assert_eq!(quiet.give_back_at(), None);
        assert!(quiet.went_idle(Time::from_secs(20)));
        assert_eq!(quiet.give_back_at(), Some(Time::from_secs(21)));
    }
}
