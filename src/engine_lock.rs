//! The engine's lock: the one `Mutex` every thread takes to touch the
//! engine, taken through [`EngineLock::lock`] and held as an
//! [`EngineGuard`]. It owns two promises about that lock, and one rule,
//! and nothing else: the blocked reserves its holder ended are woken after
//! it lets go, and no thread waits for it long behind another thread's
//! stream of commands; and a crowd is let in to wait for it a few at a
//! time, in the order it came. It knows the engine and nothing else: the
//! connection, the timer and the hang-up watcher all take the lock
//! through it.
//!
//! Why the second promise needs code: std's `Mutex` is not fair. A thread
//! that answers a pipeline lets go and takes the lock back within
//! nanoseconds, while the thread its unlock woke is still being scheduled;
//! that thread finds the lock taken and sleeps again, for as long as the
//! pipeline lasts. So a thread about to take the lock first asks whether
//! someone has been waiting for it longer than [`FAIR_AFTER`]; if so it
//! steps aside until a waiter has had a turn, or for 5 ms at most
//! ([`LONGEST_STEP_ASIDE`]: a waiter that gave up never hangs it). Under
//! ordinary contention no wait is that long and nobody steps aside, so
//! the price is paid only when it buys something: about one hand-over a
//! millisecond to a starved thread.
//!
//! The rule for a thread that finds the lock taken: it waits its turn at
//! the [`door`], which lets at most [`door::ADMITTED`] threads wait for
//! the lock and parks the rest in the order they came; let in, it spins,
//! trying again, for up to [`SPIN`], since the lock is held for a
//! microsecond or two and a holder on a CPU lets go well within it; then
//! it sleeps on the lock. A thread that finds the lock free takes it,
//! door or no door, so a taking that would not wait pays for none of it.
//! (With one CPU there is no holder running beside the spinner, so it
//! does not spin.) Against the rule before it (a crowd yielded its CPU
//! a few times, then slept on the lock), the 1000-connection cycle's p99
//! fell to a third and its rounds no longer take four times as long, at
//! about beanstalkd's commands/s; the figures, and every design tried, are
//! in `benches/README.md` (issue 53), with where the tail left waits: a
//! parked taker's wait for a CPU once it is let in, behind the crowd a
//! preempted holder piled up. The door's one wake-up is made under
//! the lock, in a crowd only: the taker that got the lock lets the next
//! ticket in before it works.
//!
//! One thread is not seen here: the timer, woken from its `Condvar`
//! wait, takes the lock back inside the wait, not through
//! [`EngineLock::lock`], so it passes neither the door nor the count of
//! waiters. It comes at most once a tick, and a late tick only delays
//! what falls due.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use crate::engine::{Engine, Waker};

mod door;
use door::Door;

/// No waiter served for this long while some wait makes the next taker
/// that has already had a turn step aside.
/// It bounds how long one client waits behind another's pipeline (the
/// issue's promise is 5 ms for a round trip of two commands).
pub const FAIR_AFTER: Duration = Duration::from_micros(500);

/// The longest a taker steps aside: if no waiter turns up by then (it gave
/// up, or was never really there), it takes the lock anyway. Never a hang.
const LONGEST_STEP_ASIDE: Duration = Duration::from_millis(5);

/// The longest a taker let in by the door spins for the lock before it
/// sleeps on it: a holder on a CPU lets go well within it. Shorter spins
/// left a longer tail (`benches/README.md`): a holder that had been
/// preempted outlasted them, and the sleepers they made were the tail.
const SPIN: Duration = Duration::from_micros(100);

/// The engine behind its `Mutex`, and the bookkeeping of who waits for it.
pub struct EngineLock {
    engine: Mutex<Engine>,
    turns: Turns,
    door: Door,
    /// Whether there is a second CPU for a holder to run on while a taker
    /// spins.
    spins: bool,
}

/// Who waits for the lock and since when. Touched only on the slow path: a
/// taker that finds the lock free reads one counter and nothing else.
struct Turns {
    /// Threads waiting to take the lock now: parked at the door, spinning,
    /// or asleep on the lock.
    waiting: AtomicUsize,
    /// Since when no waiter has been served, in ns since `epoch`: the
    /// moment the first of those waiting began, or the last moment one was
    /// served. (Not the oldest wait: behind the door, waits are longer.)
    since_ns: AtomicU64,
    /// Waiters served so far: a taker stepping aside waits for it to move.
    served: AtomicU64,
    /// Takers stepping aside now, so a served waiter knows to tell them.
    aside: AtomicUsize,
    /// Times a taker has stepped aside, ever, whether or not it then had
    /// to wait (for tests and profiles).
    steps_aside: AtomicU64,
    /// Where takers step aside.
    gate: Mutex<()>,
    turn: Condvar,
    epoch: Instant,
}

impl EngineLock {
    pub fn new(engine: Engine) -> EngineLock {
        EngineLock {
            engine: Mutex::new(engine),
            turns: Turns {
                waiting: AtomicUsize::new(0),
                since_ns: AtomicU64::new(0),
                served: AtomicU64::new(0),
                aside: AtomicUsize::new(0),
                steps_aside: AtomicU64::new(0),
                gate: Mutex::new(()),
                turn: Condvar::new(),
                epoch: Instant::now(),
            },
            door: Door::new(),
            spins: crate::host::has_a_second_cpu(),
        }
    }

    /// Takes the lock, after any thread that has waited too long for it.
    /// Poisoning is ignored: a poisoned lock means a thread panicked while
    /// holding it; the server's release binary aborts on a panic instead,
    /// but a crate that embeds this library may unwind, and then going on
    /// with the engine as it was left beats a cascade of panics.
    pub fn lock(&self) -> EngineGuard<'_> {
        let turns = &self.turns;
        if turns.waiting.load(SeqCst) > 0 {
            turns.wait_for_the_starved();
        }
        match self.try_lock() {
            Some(guard) => EngineGuard::new(guard),
            None => self.wait_for_lock(),
        }
    }

    fn try_lock(&self) -> Option<MutexGuard<'_, Engine>> {
        match self.engine.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// How many takings of the lock have found it held and waited for it,
    /// ever (the metrics' `beanstalkd_engine_lock_waits_total`). Counted
    /// on the slow path only: a taking that finds the lock free pays
    /// nothing for it.
    pub fn waits(&self) -> u64 {
        self.turns.served.load(SeqCst)
    }

    /// The slow path: waits its turn at the door, then spins for the lock,
    /// then sleeps on it, counted among its waiters throughout. Once it
    /// has the lock it waits no more, so it leaves the door at once: the
    /// holder of a guard never holds a ticket.
    fn wait_for_lock(&self) -> EngineGuard<'_> {
        self.turns.begin_wait();
        let ticket = self.door.enter();
        let guard = self
            .try_lock()
            .or_else(|| self.spin())
            .unwrap_or_else(|| self.engine.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        self.door.leave(ticket);
        self.turns.end_wait();
        EngineGuard::new(guard)
    }

    /// Tries the lock again and again for up to [`SPIN`].
    fn spin(&self) -> Option<MutexGuard<'_, Engine>> {
        if !self.spins {
            return None;
        }
        let started = Instant::now();
        while started.elapsed() < SPIN {
            std::hint::spin_loop();
            if let Some(guard) = self.try_lock() {
                return Some(guard);
            }
        }
        None
    }
}

impl Turns {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Whether no waiter has been served for longer than [`FAIR_AFTER`].
    fn starving(&self) -> bool {
        let since = self.since_ns.load(SeqCst);
        self.now_ns().saturating_sub(since) > FAIR_AFTER.as_nanos() as u64
    }

    fn begin_wait(&self) {
        // Before counting itself: so a taker that sees it waiting never
        // reads the start of a wait that is over.
        if self.waiting.load(SeqCst) == 0 {
            self.since_ns.store(self.now_ns(), SeqCst);
        }
        self.waiting.fetch_add(1, SeqCst);
    }

    fn end_wait(&self) {
        self.since_ns.store(self.now_ns(), SeqCst);
        self.waiting.fetch_sub(1, SeqCst);
        self.served.fetch_add(1, SeqCst);
        // Read after `served` moved, as `step_aside` counts itself before
        // it reads `served`: one of the two sees the other.
        if self.aside.load(SeqCst) > 0 {
            let _gate = self.gate.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            self.turn.notify_all();
        }
    }

    /// Steps aside if this thread has already had the lock while a waiter
    /// that is still waiting waited longer than [`FAIR_AFTER`]: that is
    /// a pipeline starving it. A thread that comes once while many wait
    /// (a thousand busy connections on two cores, where a woken waiter
    /// waits for a CPU, not for the lock) goes ahead: stepping aside would
    /// give the CPU to any of them and make everyone later.
    fn wait_for_the_starved(&self) {
        thread_local! {
            /// `served` when this thread last came for the lock while
            /// others waited. The thread's, not the lock's: a process with
            /// two servers (tests) shares it, which costs at most a turn.
            static SERVED_AT_LAST_TURN: Cell<u64> = const { Cell::new(u64::MAX) };
        }
        let served = self.served.load(SeqCst);
        let again = SERVED_AT_LAST_TURN.with(|last| last.replace(served)) == served;
        if again && self.starving() {
            self.step_aside(served);
            SERVED_AT_LAST_TURN.with(|last| last.set(self.served.load(SeqCst)));
        }
    }

    /// Sleeps until a waiter has been served, or no one waits any more, or
    /// [`LONGEST_STEP_ASIDE`] has passed.
    fn step_aside(&self, served: u64) {
        let gate = self.gate.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.steps_aside.fetch_add(1, SeqCst);
        self.aside.fetch_add(1, SeqCst);
        let still_waiting = |_: &mut ()| self.served.load(SeqCst) == served && self.waiting.load(SeqCst) > 0;
        let gate = self.turn.wait_timeout_while(gate, LONGEST_STEP_ASIDE, still_waiting);
        self.aside.fetch_sub(1, SeqCst);
        drop(gate);
    }
}

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
        // A reply delivered to a blocked reserve is sent on the way; under
        // the lock (`kept`) only to a worker whose thread waits in a read,
        // which nothing else would reach (see `mailbox.rs`).
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

    /// Long enough for any machine; a lock that never comes hangs past it.
    const HANG_GUARD: Duration = Duration::from_secs(300);

    fn lock() -> Arc<EngineLock> {
        Arc::new(EngineLock::new(Engine::new(65535)))
    }

    impl EngineLock {
        fn door_tickets_out(&self) -> u64 {
            self.door.tickets_out()
        }
    }

    /// Stands for a thread blocked taking the lock since `since_ns`.
    fn pretend_waiting_since(lock: &EngineLock, since_ns: u64) {
        lock.turns.begin_wait();
        lock.turns.since_ns.store(since_ns, SeqCst);
    }

    /// A lock with one (pretended) waiter that has waited past FAIR_AFTER.
    fn lock_with_a_starved_waiter() -> Arc<EngineLock> {
        let lock = lock();
        thread::sleep(FAIR_AFTER * 2);
        pretend_waiting_since(&lock, 0);
        lock
    }

    #[test]
    fn a_free_lock_with_no_one_waiting_is_taken_at_once() {
        let lock = lock();
        drop(lock.lock());
        drop(lock.lock());
        assert_eq!(lock.turns.steps_aside.load(SeqCst), 0);
    }

    #[test]
    fn a_taker_steps_aside_for_a_starved_waiter_until_it_is_served() {
        let lock = lock_with_a_starved_waiter();
        let taker = {
            let lock = Arc::clone(&lock);
            // The first time, it goes ahead; the second, it is a pipeline.
            thread::spawn(move || (0..2).for_each(|_| drop(lock.lock())))
        };
        // The taker is aside (or, on a slow day, has given up waiting).
        while lock.turns.steps_aside.load(SeqCst) == 0 {
            thread::yield_now();
        }
        lock.turns.end_wait();
        taker.join().unwrap();
        assert_eq!(lock.turns.steps_aside.load(SeqCst), 1);
        assert_eq!(lock.turns.waiting.load(SeqCst), 0);
        assert_eq!(lock.turns.aside.load(SeqCst), 0);
    }

    #[test]
    fn a_taking_that_finds_the_lock_held_is_counted_as_a_wait() {
        let lock = lock();
        let held = lock.lock();
        let taker = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || drop(lock.lock()))
        };
        while lock.turns.waiting.load(SeqCst) == 0 {
            thread::yield_now();
        }
        assert_eq!(lock.waits(), 0, "counted once served");
        drop(held);
        taker.join().unwrap();
        drop(lock.lock());
        assert_eq!(lock.waits(), 1, "the free taking is not counted");
    }

    #[test]
    fn a_taker_that_finds_the_lock_held_holds_a_ticket_until_it_has_the_lock() {
        let lock = lock();
        let held = lock.lock();
        let (tell, tickets_when_held) = std::sync::mpsc::channel();
        let taker = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                let _engine = lock.lock();
                tell.send(lock.door_tickets_out()).unwrap();
            })
        };
        // It took a ticket, and spins or sleeps on the lock, counted waiting.
        while lock.door_tickets_out() == 0 {
            thread::yield_now();
        }
        assert_eq!(lock.turns.waiting.load(SeqCst), 1);
        drop(held);
        assert_eq!(tickets_when_held.recv_timeout(HANG_GUARD), Ok(0), "a guard holds no ticket");
        taker.join().unwrap();
        assert_eq!(lock.waits(), 1);
    }

    #[test]
    fn a_taker_that_finds_the_lock_free_takes_no_ticket() {
        let lock = lock();
        drop(lock.lock());
        assert_eq!(lock.door.tickets_given(), 0);
    }

    /// A smoke test: whether these takers make a crowd depends on how the
    /// threads are scheduled; that the lock still excludes does not.
    #[test]
    fn a_crowd_of_takers_each_gets_every_turn_it_asks_for() {
        let lock = lock();
        let turns = Arc::new(AtomicUsize::new(0));
        let takers: Vec<_> = (0..4 * door::ADMITTED as usize)
            .map(|_| {
                let (lock, turns) = (Arc::clone(&lock), Arc::clone(&turns));
                thread::spawn(move || {
                    for _ in 0..200 {
                        let _engine = lock.lock();
                        // Not atomic as a whole: only the lock makes it add up.
                        turns.store(turns.load(SeqCst) + 1, SeqCst);
                    }
                })
            })
            .collect();
        let (done, finished) = std::sync::mpsc::channel();
        thread::spawn(move || done.send(takers.into_iter().all(|taker| taker.join().is_ok())));
        assert_eq!(finished.recv_timeout(HANG_GUARD), Ok(true), "every taker had its turns");
        assert_eq!(turns.load(SeqCst), 4 * door::ADMITTED as usize * 200);
        assert_eq!(lock.door_tickets_out(), 0);
        assert_eq!(lock.turns.waiting.load(SeqCst), 0);
    }

    #[test]
    fn a_short_wait_makes_no_one_step_aside() {
        let lock = lock();
        // A wait that began "now" as far as any taker can tell.
        pretend_waiting_since(&lock, u64::MAX);
        drop(lock.lock());
        lock.turns.end_wait();
        assert_eq!(lock.turns.steps_aside.load(SeqCst), 0);
    }

    #[test]
    fn a_step_aside_ends_even_if_the_waiter_never_comes() {
        let lock = lock_with_a_starved_waiter();
        drop(lock.lock());
        drop(lock.lock());
        assert_eq!(lock.turns.steps_aside.load(SeqCst), 1);
    }

    #[test]
    fn a_thread_that_comes_once_while_others_wait_goes_ahead() {
        let lock = lock_with_a_starved_waiter();
        drop(lock.lock());
        assert_eq!(lock.turns.steps_aside.load(SeqCst), 0);
        // Another waiter was served since: a turn has passed.
        lock.turns.end_wait();
        pretend_waiting_since(&lock, 0);
        drop(lock.lock());
        assert_eq!(lock.turns.steps_aside.load(SeqCst), 0);
    }

    #[test]
    fn every_waiter_gets_the_lock_behind_a_thread_that_never_stops_taking_it() {
        let lock = lock();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let streamer = {
            let (lock, stop) = (Arc::clone(&lock), Arc::clone(&stop));
            thread::spawn(move || {
                while !stop.load(SeqCst) {
                    drop(lock.lock());
                }
            })
        };
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let lock = Arc::clone(&lock);
                thread::spawn(move || (0..50).for_each(|_| drop(lock.lock())))
            })
            .collect();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        stop.store(true, SeqCst);
        streamer.join().unwrap();
        assert_eq!(lock.turns.waiting.load(SeqCst), 0);
    }
}
