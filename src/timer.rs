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

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use crate::server::Shared;
use crate::sys;
use crate::time::{Time, LONGEST_SLEEP};

/// Seconds between the engine saying memory can be given back and the
/// timer doing it.
const GIVE_BACK_DELAY_SECS: u32 = 1;

/// Starts the timer thread; it returns when the server stops.
pub(crate) fn spawn(shared: Arc<Shared>) -> io::Result<thread::JoinHandle<()>> {
    thread::Builder::new().name("beanstalk-timer".into()).spawn(move || run(&shared))
}

fn run(shared: &Shared) {
    let mut engine = shared.engine();
    // When the memory of deleted jobs will be given back: a moment after the
    // engine first says it pays, so that a drain under way can finish first
    // and the work is done once, not at every step of the way down.
    let mut give_back_at: Option<Time> = None;
    while !shared.stopping.load(Ordering::SeqCst) {
        let now = shared.clock.now();
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
                engine = shared.engine();
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
                shared.timer.wait_timeout(engine, sleep).map_or_else(|e| e.into_inner().0, |r| r.0)
            }
            None => shared.timer.wait(engine).unwrap_or_else(|e| e.into_inner()),
        };
    }
}
