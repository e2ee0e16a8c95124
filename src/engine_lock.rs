//! The engine's lock: the one `Mutex` every thread takes to touch the
//! engine, taken through [`EngineLock::lock`] and held as an
//! [`EngineGuard`]. It owns one promise, and nothing else: the blocked
//! reserves its holder ended are woken after it lets go, not while it is
//! held, so that no wake's system call holds everyone up. It knows the
//! engine and nothing else: the event loops, the timer and the metrics
//! take the lock through it.
//!
//! Its takers are few (a loop a CPU, the timer, the log's syncer, a
//! scrape), so std's `Mutex` serves them as it is. In the shape before
//! the event loops, a thousand connection threads took it, and this file
//! held a door, a spin and a step-aside to keep that crowd fair; the
//! crowd is gone, and so is that code (`benches/README.md`, issue 59).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use crate::engine::{Engine, Waker};

/// The engine behind its `Mutex`.
pub struct EngineLock {
    engine: Mutex<Engine>,
    /// Takings that found the lock held and waited for it.
    waits: AtomicU64,
}

impl EngineLock {
    pub fn new(engine: Engine) -> EngineLock {
        EngineLock { engine: Mutex::new(engine), waits: AtomicU64::new(0) }
    }

    /// Takes the lock. Poisoning is ignored: a poisoned lock means a
    /// thread panicked while holding it; the server's release binary
    /// aborts on a panic instead, but a crate that embeds this library
    /// may unwind, and then going on with the engine as it was left beats
    /// a cascade of panics.
    pub fn lock(&self) -> EngineGuard<'_> {
        let guard = match self.engine.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.waits.fetch_add(1, Relaxed);
                self.engine.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
            }
        };
        EngineGuard::new(guard)
    }

    /// How many takings of the lock have found it held and waited for it,
    /// ever (the metrics' `beanstalkd_engine_lock_waits_total`).
    pub fn waits(&self) -> u64 {
        self.waits.load(Relaxed)
    }
}

/// The engine, locked. The blocked reserves its holder ended are woken
/// once the lock is let go, not while it is held (see
/// [`Engine::take_woken`]).
pub struct EngineGuard<'a> {
    guard: Option<MutexGuard<'a, Engine>>,
}

/// Wake-ups carried out of the lock at a time; more are made under it.
const WAKES_AFTER_UNLOCK: usize = 16;

impl<'a> EngineGuard<'a> {
    pub fn new(guard: MutexGuard<'a, Engine>) -> EngineGuard<'a> {
        EngineGuard { guard: Some(guard) }
    }

    /// The lock itself, for a `Condvar` wait, which lets it go and takes it
    /// back at once: what is pending is woken first, under it.
    pub fn into_inner(mut self) -> MutexGuard<'a, Engine> {
        let guard = self.guard.take().unwrap_or_else(|| unreachable!("held until dropped"));
        wake_ended(guard, true).unwrap_or_else(|| unreachable!("kept"))
    }
}

/// Wakes the blocked reserves the holder of `guard` ended: after letting
/// it go, or before, if it is to be `kept`.
fn wake_ended(mut guard: MutexGuard<'_, Engine>, kept: bool) -> Option<MutexGuard<'_, Engine>> {
    if !guard.has_woken() {
        // The common case, and under the lock: no room to make for wakers.
        return kept.then_some(guard);
    }
    let mut woken: [Option<Arc<dyn Waker>>; WAKES_AFTER_UNLOCK] = Default::default();
    let n = guard.take_woken(&mut woken);
    let guard = kept.then_some(guard);
    for waker in woken.iter_mut().take(n).filter_map(Option::take) {
        if kept {
            waker.wake();
        } else {
            waker.send_and_wake();
        }
    }
    guard
}

impl std::ops::Deref for EngineGuard<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        self.guard.as_deref().unwrap_or_else(|| unreachable!("held until dropped"))
    }
}

impl std::ops::DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        self.guard.as_deref_mut().unwrap_or_else(|| unreachable!("held until dropped"))
    }
}

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            wake_ended(guard, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn a_taking_that_finds_the_lock_held_is_counted_as_a_wait() {
        let lock = Arc::new(EngineLock::new(Engine::new(65535)));
        drop(lock.lock());
        assert_eq!(lock.waits(), 0, "a free taking is not counted");
        let held = lock.lock();
        let taker = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || drop(lock.lock()))
        };
        while lock.waits() == 0 {
            thread::yield_now();
        }
        drop(held);
        taker.join().unwrap();
        assert_eq!(lock.waits(), 1);
    }
}
