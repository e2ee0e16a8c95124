//! The timer thread: runs the engine's time-driven work (TTRs running out,
//! delayed jobs maturing, pauses ending) when it falls due.
//!
//! It sleeps on one `Condvar` until the engine's next deadline (at most
//! [`LONGEST_SLEEP`] at a time, so that a suspend of the host cannot delay
//! it for long), or forever when nothing is due, so an idle server uses no
//! CPU. The engine notifies
//! the `Condvar` when a new deadline comes earlier than the one the thread
//! sleeps towards. Blocked reserves time themselves out on their own
//! threads; this thread only moves jobs.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use crate::server::Shared;
use crate::time::LONGEST_SLEEP;

/// Starts the timer thread; it returns when the server stops.
pub(crate) fn spawn(shared: Arc<Shared>) -> io::Result<thread::JoinHandle<()>> {
    thread::Builder::new().name("beanstalk-timer".into()).spawn(move || run(&shared))
}

fn run(shared: &Shared) {
    let mut engine = shared.engine();
    while !shared.stopping.load(Ordering::SeqCst) {
        let now = shared.clock.now();
        engine = match engine.tick(now) {
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
