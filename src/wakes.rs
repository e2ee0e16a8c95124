//! How another thread reaches an event loop: a list of the tokens of its
//! connections that may have word in their mailboxes, and a bell (an
//! `eventfd` in the loop's epoll set) rung once for any number of them.
//! The engine's waker for a connection (`stream.rs`) rings it; the loop
//! (`event_loop.rs`) takes the tokens. It knows no connection.

use std::cell::Cell;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::sys::EventFd;

thread_local! {
    /// The id of the loop this thread runs, if it runs one: a wake from a
    /// loop to itself needs no bell, as the loop looks at its wakes
    /// before it waits again.
    static SERVING: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// One loop's wakes.
#[derive(Debug)]
pub(crate) struct Wakes {
    id: usize,
    bell: EventFd,
    /// The bell has rung since the loop last looked.
    rung: AtomicBool,
    /// Tokens of connections whose blocked reserve may have ended.
    woken: Mutex<Vec<u64>>,
    /// A token could not be noted, short of memory: the loop looks at
    /// all its connections instead.
    overflowed: AtomicBool,
}

impl Wakes {
    pub fn new(id: usize) -> std::io::Result<Wakes> {
        Ok(Wakes {
            id,
            bell: EventFd::new()?,
            rung: AtomicBool::new(false),
            woken: Mutex::default(),
            overflowed: AtomicBool::new(false),
        })
    }

    fn woken(&self) -> MutexGuard<'_, Vec<u64>> {
        self.woken.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes that this thread runs this loop (its own wakes ring nothing).
    pub fn serve_here(&self) {
        SERVING.set(self.id);
    }

    /// Tells the loop that the connection at `token` may have word in its
    /// mailbox.
    pub fn wake(&self, token: u64) {
        let mut woken = self.woken();
        if woken.try_reserve(1).is_ok() {
            woken.push(token);
        } else {
            self.overflowed.store(true, Ordering::SeqCst);
        }
        drop(woken);
        self.ring();
    }

    /// Whether a wake could not be noted since the loop last asked.
    pub fn overflowed(&self) -> bool {
        self.overflowed.swap(false, Ordering::SeqCst)
    }

    /// Rings the bell, unless it has rung since the loop last looked, or
    /// this thread is the loop.
    pub fn ring(&self) {
        if SERVING.get() != self.id && !self.rung.swap(true, Ordering::SeqCst) {
            self.bell.ring();
        }
    }

    /// Rings the bell whoever asks (shutdown, an fsync ended).
    pub fn ring_always(&self) {
        self.rung.store(true, Ordering::SeqCst);
        self.bell.ring();
    }

    /// The loop heard the bell: it may ring again.
    pub fn heard(&self) {
        self.rung.store(false, Ordering::SeqCst);
        self.bell.clear();
    }

    /// The tokens woken since the loop last took them, swapped with
    /// `into` (empty): the two lists' room goes back and forth, so a warm
    /// loop's wakes allocate nothing.
    pub fn take(&self, into: &mut Vec<u64>) {
        std::mem::swap(&mut *self.woken(), into);
    }

    /// Whether any token waits to be taken.
    pub fn any(&self) -> bool {
        !self.woken().is_empty() || self.overflowed.load(Ordering::SeqCst)
    }
}

impl AsRawFd for Wakes {
    fn as_raw_fd(&self) -> RawFd {
        self.bell.as_raw_fd()
    }
}
