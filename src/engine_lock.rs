//! The engine's lock, held through [`EngineGuard`]: what the holder of the
//! one `Mutex` must do as it lets go, which is to wake the blocked reserves
//! it ended. It knows the engine and nothing else: the connection, the
//! timer and the hang-up watcher all take the lock through it.

use std::sync::{Arc, MutexGuard};

use crate::engine::{Engine, Waker};

/// The engine, locked. The blocked reserves its holder ended are woken
/// once the lock is let go, not while it is held (see
/// [`Engine::take_woken`]): so no woken worker finds the lock still taken,
/// and no wake's system call holds everyone up.
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
        let mut guard = self.guard.take().unwrap_or_else(|| unreachable!("held until dropped"));
        let mut woken: [Option<Arc<dyn Waker>>; WAKES_AFTER_UNLOCK] = Default::default();
        let n = guard.take_woken(&mut woken);
        for waker in woken.iter_mut().take(n).filter_map(Option::take) {
            waker.wake();
        }
        guard
    }
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
        let Some(mut guard) = self.guard.take() else { return };
        let mut woken: [Option<Arc<dyn Waker>>; WAKES_AFTER_UNLOCK] = Default::default();
        let n = guard.take_woken(&mut woken);
        drop(guard);
        for waker in woken.iter_mut().take(n).filter_map(Option::take) {
            waker.wake();
        }
    }
}
