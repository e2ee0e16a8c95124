//! The door in front of the engine's lock: where a crowd waits for it in
//! the order it came. It owns the tickets and the parked threads, and
//! nothing else: it knows neither the engine nor the lock behind it.
//!
//! Why a door: std's `Mutex` is not fair. A thread asleep on it that is
//! woken, and finds it taken again by a thread that never slept, sleeps
//! again behind every other sleeper. With a thousand busy connections on
//! two cores, that is how one client came to wait 800 ms while its
//! neighbours were served in 3. So only [`ADMITTED`] threads at a time may
//! wait on the lock itself; a thread that comes to wait when that many
//! already do parks here, and the door lets the parked in strictly in
//! ticket order, one each time an admitted thread takes the lock. (The
//! timer, which takes the lock back inside a `Condvar` wait, passes no
//! door.)
//!
//! The door is only for waiting: a thread that finds the lock free takes
//! it without a ticket (see [`super::EngineLock::lock`]). In a crowd the
//! admitted are always taken, so a ticket there costs a thread's sleep
//! and wake: a door every taker passed through cut the crowd's
//! commands/s by a third. Only the takers that would wait pay it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};

/// How many threads may wait on the lock at once; the rest wait at the
/// door. Fewer cost more sleeps at the door than they saved; more read no
/// better within the machine's noise at the p99, and let the sleepers on
/// the lock starve at the p999 (the figures: `benches/README.md`).
pub const ADMITTED: u64 = 32;

/// Where parked threads wait, by ticket: a ticket's slot is its number
/// modulo this. More parked threads than slots only share a slot, and
/// each wake-up in it wakes them all, to look at their tickets again.
const SLOTS: usize = 1024;

pub struct Door {
    /// The next ticket to give out.
    next: AtomicU64,
    /// Tickets below this are let in.
    let_in: AtomicU64,
    /// Threads parked here now (so a thread leaving knows whether to look).
    parked: AtomicUsize,
    /// Where parked threads sleep, by ticket.
    slots: Box<[(Mutex<()>, Condvar)]>,
}

/// A ticket let in: its holder may wait on the lock, and must
/// [`Door::leave`] once it has the lock: a thread holding the lock holds
/// no ticket.
#[must_use]
pub struct Ticket(());

impl Door {
    pub fn new() -> Door {
        Door {
            next: AtomicU64::new(0),
            let_in: AtomicU64::new(ADMITTED),
            parked: AtomicUsize::new(0),
            slots: (0..SLOTS).map(|_| (Mutex::new(()), Condvar::new())).collect(),
        }
    }

    /// Takes a ticket, and sleeps until it is let in.
    pub fn enter(&self) -> Ticket {
        let ticket = self.next.fetch_add(1, SeqCst);
        if ticket < self.let_in.load(SeqCst) {
            return Ticket(());
        }
        // Counted before it looks again, and the count read by a thread
        // leaving after it lets the next in: either the leaver sees this
        // thread and wakes its slot, or this thread sees the door move.
        self.parked.fetch_add(1, SeqCst);
        let (lock, woken) = &self.slots[ticket as usize % SLOTS];
        let mut slot = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while ticket >= self.let_in.load(SeqCst) {
            slot = woken.wait(slot).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        drop(slot);
        self.parked.fetch_sub(1, SeqCst);
        Ticket(())
    }

    /// Lets the next ticket in, and wakes its slot if anyone is parked.
    pub fn leave(&self, _done: Ticket) {
        let next = self.let_in.fetch_add(1, SeqCst);
        if self.parked.load(SeqCst) > 0 {
            let (lock, woken) = &self.slots[next as usize % SLOTS];
            // Taken, so a thread between its look and its sleep is asleep
            // (a window too narrow for a test to hit: this is its proof).
            drop(lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
            woken.notify_all();
        }
    }

    /// Tickets given out, ever (for tests).
    #[cfg(test)]
    pub fn tickets_given(&self) -> u64 {
        self.next.load(SeqCst)
    }

    /// Tickets given out and not yet given back (for tests).
    #[cfg(test)]
    pub fn tickets_out(&self) -> u64 {
        self.next.load(SeqCst) + ADMITTED - self.let_in.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    /// Long enough for any machine; a door that never opens hangs past it.
    const HANG_GUARD: Duration = Duration::from_secs(300);

    #[test]
    fn the_first_admitted_go_in_at_once() {
        let door = Door::new();
        let tickets: Vec<_> = (0..ADMITTED).map(|_| door.enter()).collect();
        assert_eq!(door.parked.load(SeqCst), 0);
        tickets.into_iter().for_each(|ticket| door.leave(ticket));
    }

    #[test]
    fn past_the_admitted_each_waits_and_goes_in_in_the_order_it_came() {
        let door = Arc::new(Door::new());
        let mut inside: Vec<_> = (0..ADMITTED).map(|_| door.enter()).collect();
        let (went_in, order) = mpsc::channel();
        let parked: Vec<_> = (0..3usize)
            .map(|n| {
                let (its_door, went_in) = (Arc::clone(&door), went_in.clone());
                let waiter = thread::spawn(move || {
                    // Kept, not given back: each goes in only for a ticket left.
                    let ticket = its_door.enter();
                    went_in.send(n).unwrap();
                    ticket
                });
                // Parked before the next comes, so tickets follow `n`.
                let started = std::time::Instant::now();
                while door.parked.load(SeqCst) < n + 1 {
                    assert!(started.elapsed() < HANG_GUARD, "{ADMITTED} inside, and a taker never parked");
                    thread::yield_now();
                }
                waiter
            })
            .collect();
        thread::sleep(Duration::from_millis(20));
        assert!(order.try_recv().is_err(), "no one goes in while {ADMITTED} are inside");
        for n in 0..3 {
            door.leave(inside.pop().unwrap());
            assert_eq!(order.recv_timeout(HANG_GUARD), Ok(n), "let in by ticket");
        }
        inside.extend(parked.into_iter().map(|waiter| waiter.join().unwrap()));
        inside.into_iter().for_each(|ticket| door.leave(ticket));
        assert_eq!(door.parked.load(SeqCst), 0);
    }

    #[test]
    fn a_crowd_through_the_door_never_has_more_inside_than_admitted() {
        let door = Arc::new(Door::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let crowd: Vec<_> = (0..4 * ADMITTED)
            .map(|_| {
                let (door, inside, most) = (Arc::clone(&door), Arc::clone(&inside), Arc::clone(&most));
                thread::spawn(move || {
                    for _ in 0..50 {
                        let ticket = door.enter();
                        most.fetch_max(inside.fetch_add(1, SeqCst) + 1, SeqCst);
                        thread::yield_now();
                        inside.fetch_sub(1, SeqCst);
                        door.leave(ticket);
                    }
                })
            })
            .collect();
        let (done, finished) = mpsc::channel();
        thread::spawn(move || done.send(crowd.into_iter().all(|taker| taker.join().is_ok())));
        assert_eq!(finished.recv_timeout(HANG_GUARD), Ok(true), "every taker went in and out");
        assert!(most.load(SeqCst) <= ADMITTED as usize, "{} inside at once", most.load(SeqCst));
        assert_eq!(door.parked.load(SeqCst), 0);
    }
}
