//! Time as the engine sees it: whole nanoseconds on a monotonic clock
//! anchored to the Unix epoch.
//!
//! The engine never reads a clock. Every call that depends on time takes a
//! [`Time`] argument, so the server passes the monotonic clock's reading and a
//! test passes whatever it likes. Wall-clock time appears nowhere in the
//! scheduling: a clock step (NTP, a manual change) cannot fire or stall a
//! timer.

use std::time::{Duration, Instant};

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

    /// `self` minus `secs` seconds, or the origin if that would be earlier.
    pub const fn minus_secs(self, secs: u32) -> Time {
        Time(self.0.saturating_sub(secs as u64 * NANOS_PER_SEC))
    }

    /// Whole seconds from `earlier` to `self`, truncated; 0 if `earlier` is
    /// later. This is how every time on the wire is shown (SPEC.md 2.3).
    pub const fn secs_since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0) / NANOS_PER_SEC
    }

    /// The span from `earlier` to `self`, zero if `earlier` is later.
    pub const fn duration_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// The server's clock: monotonic, but reading in nanoseconds since the Unix
/// epoch. It takes the wall-clock time once, at start, and adds the
/// monotonic time elapsed since; so timers never jump with the wall clock,
/// and a time written to the binlog means the same thing after a restart.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    origin_unix_nanos: u64,
}

impl Clock {
    /// A clock that reads the wall-clock time now.
    pub fn start() -> Clock {
        let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Clock {
            origin: Instant::now(),
            origin_unix_nanos: u64::try_from(unix.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// The current time.
    pub fn now(&self) -> Time {
        let elapsed = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Time(self.origin_unix_nanos.saturating_add(elapsed))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::start()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
