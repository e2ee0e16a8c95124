//! What the engine measures for `--metrics`, and the copies of its figures
//! a scrape takes: each tube's oldest ready job, and its histograms of time
//! waiting (ready to reserved) and time working (reserved to delete,
//! release, bury or TTR expiry).
//!
//! Off unless the server asks for it ([`Engine::set_metering`], before any
//! job exists): then nothing here runs but one test of a flag. It adds no
//! field a job pays for: a ready job's `deadline` (unused while ready) holds
//! when it became ready, its `links` (unused while ready) thread it into
//! its tube's list of ready jobs in the order they became ready, whose front
//! is the oldest; and the three bytes of padding in the record hold when it
//! was reserved (see [`Stamp`]). The histograms live per tube, allocated at
//! a tube's first measurement, never per job.
//!
//! It must not allocate what it cannot do without: a histogram that cannot
//! be had loses its measurement, and a scrape's copies go into room the
//! caller claimed before taking the lock, never beyond it.

use super::*;
use crate::stats::BinlogStats;

/// Upper bounds of the histograms' buckets, in microseconds: 1 ms to 1 h.
pub const BUCKET_BOUNDS_US: [u64; 13] = [
    1_000,
    5_000,
    10_000,
    50_000,
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    60_000_000,
    300_000_000,
    900_000_000,
    3_600_000_000,
];

/// Counts of spans by bucket (not cumulative; the last counts spans over
/// an hour), and their sum in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Histogram {
    pub buckets: [u64; BUCKET_BOUNDS_US.len() + 1],
    pub sum_us: u64,
}

impl Histogram {
    fn observe(&mut self, span_us: u64) {
        let bucket =
            BUCKET_BOUNDS_US.iter().position(|&bound| span_us <= bound).unwrap_or(BUCKET_BOUNDS_US.len());
        self.buckets[bucket] += 1;
        self.sum_us = self.sum_us.wrapping_add(span_us);
    }

    /// How many spans were observed.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// How a reservation ended: the `outcome` label of the working histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkEnd {
    Deleted,
    /// By `release`, or by the server when the holder disconnected.
    Released,
    Buried,
    TimedOut,
}

impl WorkEnd {
    /// Every outcome, in the order of [`TubeTimes::working`].
    pub const ALL: [WorkEnd; 4] = [WorkEnd::Deleted, WorkEnd::Released, WorkEnd::Buried, WorkEnd::TimedOut];

    /// The label's value.
    pub fn label(self) -> &'static str {
        match self {
            WorkEnd::Deleted => "deleted",
            WorkEnd::Released => "released",
            WorkEnd::Buried => "buried",
            WorkEnd::TimedOut => "timed_out",
        }
    }
}

/// One tube's histograms.
#[derive(Debug, Clone, Copy, Default)]
pub struct TubeTimes {
    pub waiting: Histogram,
    /// By [`WorkEnd::ALL`]'s order.
    pub working: [Histogram; 4],
    /// Jobs buried by their retry limit (`retry.rs`): dead letters.
    pub buried_by_limit: u64,
}

/// When a job was reserved, in 16 ms steps modulo 2^16 (17.5 minutes),
/// kept in the job record's padding (two bytes: the third went to the
/// unique key's flag, `Job::keyed`). A reservation never touched needs it
/// not at all: the deadline less the TTR says when it began. Touched, the
/// deadline says when it was last touched, and this how far before that
/// it began: exact to 16 ms as long as touches did not stretch it past
/// 17.5 minutes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stamp([u8; 2]);

/// Nanoseconds a step of a [`Stamp`].
const STAMP_STEP_NS: u64 = 16_000_000;
/// Steps before a [`Stamp`] wraps.
const STAMP_MODULUS: u64 = 1 << 16;

impl Stamp {
    pub(super) fn at(now: Time) -> Stamp {
        let [a, b, ..] = (now.0 / STAMP_STEP_NS).to_le_bytes();
        Stamp([a, b])
    }

    fn steps(self) -> u64 {
        u64::from(u16::from_le_bytes(self.0))
    }

    /// Microseconds worked by `now`, given that the reservation was last
    /// started or touched `since_touch_us` ago.
    pub(super) fn worked_us(self, now: Time, since_touch_us: u64) -> u64 {
        let step_us = STAMP_STEP_NS / 1000;
        let modular = (now.0 / STAMP_STEP_NS).wrapping_sub(self.steps()) % STAMP_MODULUS;
        let floor = since_touch_us / step_us;
        // The stamp says how far past the floor, modulo 2^16 steps;
        // truncations of the two readings can put it a step "below" it.
        let above = modular.wrapping_sub(floor) % STAMP_MODULUS;
        if above > STAMP_MODULUS - 2 {
            since_touch_us
        } else {
            since_touch_us + above * step_us
        }
    }
}

/// A copy of one tube's figures for a scrape.
#[derive(Debug, Clone)]
pub struct TubeFigures {
    pub stats: crate::stats::TubeStats,
    /// How long its oldest ready job has been ready, in nanoseconds.
    pub oldest_ready_ns: u64,
    pub times: TubeTimes,
}

/// The engine-wide figures of a scrape.
#[derive(Debug, Clone, Copy)]
pub struct Overview {
    pub server: ServerStats,
    pub binlog: Option<BinlogStats>,
    pub tubes: usize,
}

impl Engine {
    /// Turns measuring on (`--metrics`). Call before any job exists: the
    /// lists of ready jobs are kept from then on.
    pub fn set_metering(&mut self, on: bool) {
        // At start-up, with one tube: a process that cannot meter it
        // serves without metering.
        self.metering = on && self.tubes.start_metering();
    }

    /// A job was filed as ready at `now` (from `make_ready`).
    pub(super) fn note_ready(&mut self, id: JobId, now: Time) {
        if !self.metering {
            return;
        }
        let Some(job) = self.jobs.get_mut(&id) else { return };
        job.deadline = now;
        let t = job.tube;
        if let Some(meter) = self.tubes.meter_mut(t) {
            meter.ready_order.push_back(&mut self.jobs, id);
        }
    }

    /// A ready job is leaving its queue (from `unlink`).
    pub(super) fn note_not_ready(&mut self, t: TubeId, id: JobId) {
        if let Some(meter) = self.tubes.meter_mut(t) {
            meter.ready_order.remove(&mut self.jobs, id);
        }
    }

    /// A ready job is being reserved at `now`: its wait ends (from
    /// `reserve_for`, before its deadline is overwritten). Only ready jobs
    /// waited; `reserve-job` may take a delayed or buried one.
    pub(super) fn note_reserved(&mut self, id: JobId, now: Time) {
        if !self.metering {
            return;
        }
        let Some(job) = self.jobs.get(&id) else { return };
        let (t, state, ready_since) = (job.tube, job.state, job.deadline);
        if state == State::Ready {
            let span_us = now.duration_since(ready_since).as_micros() as u64;
            if let Some(times) = self.tube_times(t) {
                times.waiting.observe(span_us);
            }
        }
    }

    /// A reserved job's reservation ends at `now`, by `how`. Call before
    /// the job leaves the reserved state; does nothing for any other.
    pub(super) fn end_work(&mut self, id: JobId, how: WorkEnd, now: Time) {
        if !self.metering {
            return;
        }
        let Some(job) = self.jobs.get(&id).filter(|job| job.state == State::Reserved) else { return };
        let touched = job.deadline.minus_secs(job.ttr);
        let since_touch_us = now.duration_since(touched).as_micros() as u64;
        let (t, span_us) = (job.tube, job.work_started.worked_us(now, since_touch_us));
        if let Some(times) = self.tube_times(t) {
            times.working[how as usize].observe(span_us);
        }
    }

    /// A job of tube `t` was buried by its retry limit.
    pub(super) fn count_limit_burial(&mut self, t: TubeId) {
        if !self.metering {
            return;
        }
        if let Some(times) = self.tube_times(t) {
            times.buried_by_limit += 1;
        }
    }

    /// Tube `t`'s histograms, made at its first measurement; `None` if the
    /// memory cannot be had (the measurement is lost, nothing else).
    fn tube_times(&mut self, t: TubeId) -> Option<&mut TubeTimes> {
        let meter = self.tubes.meter_mut(t)?;
        if meter.times.is_none() {
            meter.times = crate::sys::try_box(TubeTimes::default()).ok();
        }
        meter.times.as_deref_mut()
    }

    /// The engine-wide figures, without counting a `stats` command.
    pub fn overview(&self) -> Overview {
        Overview { server: self.figures(), binlog: self.journal_stats(), tubes: self.tubes.len() }
    }

    /// How many tubes exist.
    pub fn tube_count(&self) -> usize {
        self.tubes.len()
    }

    /// Each tube's job count and id, from position `from` of the tube list
    /// for at most `most` tubes, pushed while `into` has room (it never
    /// grows here). Returns the position to go on from; past the end when
    /// done. Tubes may come and go between calls: a tube may then be seen
    /// twice or not at all.
    pub fn tube_sizes(&self, from: usize, most: usize, into: &mut Vec<(usize, TubeId)>) -> usize {
        let ids = self.tubes.ids();
        let end = ids.len().min(from.saturating_add(most));
        for &t in ids.get(from..end).unwrap_or_default() {
            if into.len() == into.capacity() {
                break;
            }
            into.push((self.tubes.get(t).job_count(), t));
        }
        end.max(from.saturating_add(1))
    }

    /// Copies the figures of the tubes `ids` that still exist at `now` into
    /// `into`, while it has room (it never grows here).
    pub fn tube_figures(&self, ids: impl Iterator<Item = TubeId>, now: Time, into: &mut Vec<TubeFigures>) {
        for t in ids {
            if self.tubes.live(t).is_none() {
                continue;
            }
            if into.len() == into.capacity() {
                return;
            }
            let meter = self.tubes.meter(t);
            let oldest = meter.and_then(|m| m.ready_order.front()).and_then(|id| self.jobs.get(&id));
            into.push(TubeFigures {
                stats: self.tube_stats(t, now),
                oldest_ready_ns: oldest.map_or(0, |job| now.0.saturating_sub(job.deadline.0)),
                times: meter.and_then(|m| m.times.as_deref()).copied().unwrap_or_default(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proofs::tests::{client, engine, put, reserved_id};
    use super::*;

    fn figures(e: &Engine, now: Time) -> TubeFigures {
        let mut into = Vec::with_capacity(1);
        e.tube_figures([0].into_iter(), now, &mut into);
        into.pop().unwrap()
    }

    #[test]
    fn the_oldest_ready_job_and_the_times_are_measured() {
        let mut e = engine();
        e.set_metering(true);
        let c = client(&mut e);
        let ms = |n: u64| Time::from_secs(1000).plus(std::time::Duration::from_millis(n));
        let a = put(&mut e, c, 5, 0, 10, ms(0));
        let b = put(&mut e, c, 1, 0, 10, ms(100));
        // The oldest ready job is `a`, though `b` is served first.
        assert_eq!(figures(&e, ms(300)).oldest_ready_ns, 300_000_000);
        e.catch_up(ms(400));
        assert_eq!(reserved_id(e.reserve(c, None, ms(400), &mut Vec::<u8>::new())), b);
        assert_eq!(figures(&e, ms(400)).oldest_ready_ns, 400_000_000);
        e.catch_up(ms(450));
        assert_eq!(e.delete(c, b, ms(450)), Reply::Deleted);
        assert_eq!(reserved_id(e.reserve(c, None, ms(500), &mut Vec::<u8>::new())), a);
        assert_eq!(figures(&e, ms(500)).oldest_ready_ns, 0);
        // Touched at 2 s, released at 3 s: 2.5 s worked.
        assert_eq!(e.touch(c, a, ms(2000)), Reply::Touched);
        assert_eq!(e.release(c, a, 0, 0, ms(3000)), Reply::Released);
        assert_eq!(figures(&e, ms(3500)).oldest_ready_ns, 500_000_000);
        // Its TTR (10 s) runs out.
        assert_eq!(reserved_id(e.reserve(c, None, ms(4000), &mut Vec::<u8>::new())), a);
        e.tick(ms(14_000));
        let times = figures(&e, ms(14_000)).times;
        assert_eq!(times.waiting.count(), 3);
        assert_eq!(times.waiting.sum_us, 300_000 + 500_000 + 1_000_000);
        let worked = |how: WorkEnd| (times.working[how as usize].count(), times.working[how as usize].sum_us);
        assert_eq!(worked(WorkEnd::Deleted), (1, 50_000));
        // Touched, the start is known to a stamp's 16 ms step.
        let (released, span) = worked(WorkEnd::Released);
        assert!(released == 1 && span.abs_diff(2_500_000) <= 16_000, "{span}");
        assert_eq!(worked(WorkEnd::TimedOut), (1, 10_000_000));
        assert_eq!(worked(WorkEnd::Buried), (0, 0));
    }

    #[test]
    fn nothing_is_measured_unless_asked() {
        let mut e = engine();
        let c = client(&mut e);
        put(&mut e, c, 0, 0, 10, Time::from_secs(1));
        reserved_id(e.reserve(c, None, Time::from_secs(2), &mut Vec::<u8>::new()));
        let f = figures(&e, Time::from_secs(3));
        assert_eq!((f.oldest_ready_ns, f.times.waiting.count()), (0, 0));
        assert!(e.tubes.meter(0).is_none());
    }

    #[test]
    fn buckets_are_upper_bounds() {
        let mut h = Histogram::default();
        for us in [0, 1_000, 1_001, 3_600_000_000, 3_600_000_001] {
            h.observe(us);
        }
        assert_eq!(h.buckets[0], 2);
        assert_eq!(h.buckets[1], 1);
        assert_eq!(h.buckets[12], 1);
        assert_eq!(h.buckets[13], 1);
        assert_eq!(h.count(), 5);
    }

    #[test]
    fn time_worked_survives_touches_and_the_stamps_wrap() {
        let steps = |n: u64| Time(n * STAMP_STEP_NS);
        let reserved = steps(STAMP_MODULUS - 5);
        let stamp = Stamp::at(reserved);
        // No touch: the span since the touch is the whole span.
        assert_eq!(stamp.worked_us(reserved.plus(std::time::Duration::from_millis(15)), 15_000), 15_000);
        // Touched 2 s in: 3 s since the touch, 5 s worked.
        let now = reserved.plus_secs(5);
        assert_eq!(stamp.worked_us(now, 3_000_000), 5_000_000);
        // A reading a millisecond short of the floor is the floor.
        assert_eq!(stamp.worked_us(now, 5_001_500), 5_001_500);
    }
}
