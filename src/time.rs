//! Time as the engine sees it, and the server's clock.
//!
//! The engine never reads a clock. Every call that depends on time takes a
//! [`Time`] argument, so the server passes its [`Clock`]'s reading and a
//! test passes whatever it likes. This module owns the two rules that make
//! those readings safe; it makes no queue decisions.
//!
//! **Ordering and durations use one clock that never jumps and never stops:**
//! `CLOCK_BOOTTIME`, which, unlike `CLOCK_MONOTONIC` (std's `Instant`), keeps
//! counting while the host is suspended. A TTR of 60 s therefore means 60 s
//! of real time even if the laptop slept in between, and a clock step (NTP
//! correcting a wrong boot-time clock, an operator running `date -s`) can
//! neither fire nor stall a timer.
//!
//! **The wall clock is consulted only to cross a restart.** A [`Time`] is
//! the boot-time clock shifted once, at start, to read like Unix time, so
//! figures such as a job's `age` look natural. But the binlog must store
//! times that mean the same thing to the next process, whose boot-time
//! clock may be another machine's or start again from zero. So each time
//! written ([`Clock::to_unix`]) or read ([`Clock::from_unix`]) is converted
//! with the wall clock's *current* offset from the server's clock, read
//! afresh at that moment. A wall clock step during the run then changes only
//! how later records are written (correctly: a job due in 10 s is written as
//! "10 s after the wall clock's now"), never the order or the due time of
//! anything in memory. What cannot be helped: the wall clock must be right
//! when records are written and when they are read back at start-up.

use std::time::Duration;

use crate::sys;

/// Nanoseconds since the Unix epoch, as the server's [`Clock`] counts them
/// (tests may count from anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub u64);

const NANOS_PER_SEC: u64 = 1_000_000_000;

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);

    /// `secs` whole seconds after the origin; handy in tests.
    pub const fn from_secs(secs: u64) -> Time {
        Time(secs.saturating_mul(NANOS_PER_SEC))
    }

    /// `self` plus `secs` seconds; saturates instead of overflowing.
    pub const fn plus_secs(self, secs: u32) -> Time {
        Time(self.0.saturating_add(secs as u64 * NANOS_PER_SEC))
    }

    /// `self` plus `span`; saturates instead of overflowing.
    pub fn plus(self, span: Duration) -> Time {
        Time(self.0.saturating_add(u64::try_from(span.as_nanos()).unwrap_or(u64::MAX)))
    }

    /// `self` minus `secs` seconds, or the origin if that would be earlier.
    pub const fn minus_secs(self, secs: u32) -> Time {
        Time(self.0.saturating_sub(secs as u64 * NANOS_PER_SEC))
    }

    /// Whole seconds from `earlier` to `self`, truncated; 0 if `earlier` is
    /// later. This is how every time on the wire is shown (reference §2.3).
    pub const fn secs_since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0) / NANOS_PER_SEC
    }

    /// The span from `earlier` to `self`, zero if `earlier` is later.
    pub const fn duration_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// The longest a thread sleeps towards a deadline before looking at the
/// clock again. Sleeps (`Condvar::wait_timeout`) are measured by
/// `CLOCK_MONOTONIC`, which stops while the host is suspended, so a thread
/// asleep across a suspend wakes late by what was left of its sleep; this
/// bounds that lateness at a cost of one spare wake-up a minute.
pub const LONGEST_SLEEP: Duration = Duration::from_secs(60);

/// One reading of the two clocks the server uses, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readings {
    /// `CLOCK_BOOTTIME`, in nanoseconds: counts suspend, never jumps.
    pub boot: u64,
    /// `CLOCK_REALTIME`, in nanoseconds since the Unix epoch: may step.
    pub unix: u64,
}

impl Readings {
    /// Reads both clocks now.
    pub fn now() -> Readings {
        Readings { boot: sys::boot_time_nanos(), unix: sys::unix_time_nanos() }
    }
}

/// The server's clock: the boot-time clock, shifted at start to read in
/// nanoseconds since the Unix epoch; plus the conversions to and from the
/// wall clock that the binlog needs (see the module docs for the rules).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Both clocks as read at start.
    origin: Readings,
}

impl Clock {
    /// A clock anchored to the wall-clock time now.
    pub fn start() -> Clock {
        Clock::anchored_at(Readings::now())
    }

    /// A clock that reads `origin.unix` when the boot-time clock reads
    /// `origin.boot` (tests inject readings here and in the `_at` methods).
    pub fn anchored_at(origin: Readings) -> Clock {
        Clock { origin }
    }

    /// The current time.
    pub fn now(&self) -> Time {
        self.at_boot_time(sys::boot_time_nanos())
    }

    /// The time when the boot-time clock reads `boot`.
    pub fn at_boot_time(&self, boot: u64) -> Time {
        Time(self.origin.unix.saturating_add(boot.saturating_sub(self.origin.boot)))
    }

    /// `t` as Unix time by the wall clock as it is set now, for the binlog.
    pub fn to_unix(&self, t: Time) -> u64 {
        self.to_unix_at(t, Readings::now())
    }

    /// `unix` (a wall-clock time from the binlog) as a [`Time`] of this
    /// clock, by the wall clock as it is set now.
    pub fn from_unix(&self, unix: u64) -> Time {
        self.from_unix_at(unix, Readings::now())
    }

    /// [`Clock::to_unix`] with the clocks reading `now`.
    pub fn to_unix_at(&self, t: Time, now: Readings) -> u64 {
        clamp(i128::from(t.0) + self.wall_offset(now))
    }

    /// [`Clock::from_unix`] with the clocks reading `now`.
    pub fn from_unix_at(&self, unix: u64, now: Readings) -> Time {
        Time(clamp(i128::from(unix) - self.wall_offset(now)))
    }

    /// How far the wall clock is ahead of this clock at `now`: zero until
    /// the wall clock is stepped (or drifts, or the host was suspended,
    /// which the wall clock counts and this clock counts too).
    fn wall_offset(&self, now: Readings) -> i128 {
        i128::from(now.unix) - i128::from(self.at_boot_time(now.boot).0)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::start()
    }
}

/// `n` as a `u64`, saturating at both ends.
fn clamp(n: i128) -> u64 {
    u64::try_from(n.max(0)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: u64 = 3600 * NANOS_PER_SEC;

    /// A clock started at boot-time 100 s, when the wall clock read 1.7e9 s.
    fn clock() -> Clock {
        Clock::anchored_at(Readings { boot: 100 * NANOS_PER_SEC, unix: 1_700_000_000 * NANOS_PER_SEC })
    }

    #[test]
    fn seconds_on_the_wire_are_truncated() {
        let t = Time::from_secs(10);
        assert_eq!(Time(t.0 + 999_999_999).secs_since(t), 0);
        assert_eq!(Time(t.0 + 1_000_000_000).secs_since(t), 1);
        assert_eq!(t.secs_since(Time::from_secs(11)), 0);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Time(u64::MAX).plus_secs(u32::MAX), Time(u64::MAX));
        assert_eq!(Time::from_secs(1).minus_secs(5), Time::ZERO);
        assert_eq!(clamp(-5), 0);
        assert_eq!(clamp(i128::from(u64::MAX) + 1), u64::MAX);
    }

    #[test]
    fn time_follows_the_boot_clock_and_ignores_wall_clock_steps() {
        let c = clock();
        let start = c.at_boot_time(100 * NANOS_PER_SEC);
        assert_eq!(start, Time::from_secs(1_700_000_000));
        // Ten seconds later, whatever the wall clock was set to meanwhile.
        assert_eq!(c.at_boot_time(110 * NANOS_PER_SEC), start.plus_secs(10));
    }

    #[test]
    fn time_spent_suspended_counts() {
        // The boot-time clock counts the two hours the host slept; a TTR
        // of a minute taken before the suspend is long over after it.
        let c = clock();
        let reserved_at = c.at_boot_time(100 * NANOS_PER_SEC);
        let deadline = reserved_at.plus_secs(60);
        let after_resume = c.at_boot_time(100 * NANOS_PER_SEC + 2 * HOUR);
        assert!(after_resume > deadline);
    }

    #[test]
    fn a_delay_is_saved_relative_to_the_wall_clock_even_after_it_was_stepped() {
        let c = clock();
        // One hour into the run, NTP steps the wall clock back by 40 minutes
        // (it was wrong at boot). A job is then delayed by 10 s.
        let boot_now = 100 * NANOS_PER_SEC + HOUR;
        let wall_now = 1_700_000_000 * NANOS_PER_SEC + HOUR - 40 * 60 * NANOS_PER_SEC;
        let now = Readings { boot: boot_now, unix: wall_now };
        let due = c.at_boot_time(boot_now).plus_secs(10);
        // Saved as 10 s after the corrected wall clock, not 40 min later.
        assert_eq!(c.to_unix_at(due, now), wall_now + 10 * NANOS_PER_SEC);
        // A new process started at that moment on another boot reads it
        // back as due in 10 s.
        let next = Clock::anchored_at(Readings { boot: 5 * NANOS_PER_SEC, unix: wall_now });
        let next_now = next.at_boot_time(5 * NANOS_PER_SEC);
        let restored = next.from_unix_at(
            wall_now + 10 * NANOS_PER_SEC,
            Readings { boot: 5 * NANOS_PER_SEC, unix: wall_now },
        );
        assert_eq!(restored, next_now.plus_secs(10));
    }

    #[test]
    fn wall_clock_conversion_round_trips_when_nothing_steps() {
        let c = clock();
        let now = Readings { boot: 200 * NANOS_PER_SEC, unix: 1_700_000_100 * NANOS_PER_SEC };
        let t = Time::from_secs(1_700_000_150);
        assert_eq!(c.to_unix_at(t, now), t.0);
        assert_eq!(c.from_unix_at(c.to_unix_at(t, now), now), t);
    }

    #[test]
    fn the_live_clock_reads_close_to_the_wall_clock() {
        let c = Clock::start();
        let wall = sys::unix_time_nanos();
        let now = c.now();
        assert!(now.0.abs_diff(wall) < HOUR / 60, "clock {now:?}, wall {wall}");
        assert!(c.now() >= now);
    }
}
