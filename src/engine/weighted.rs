//! Weighted reserve, tuber's (reference §3.26): a client's watch weights
//! and reserve mode, each tube's processing time, and the draw among a
//! client's tubes that have a job ready. In the default mode, `fifo`,
//! which is beanstalkd's, `reserve` takes the best `(pri, id)` job of all
//! its tubes and nothing here is asked. The waiting queues are not
//! weighted: a job that becomes ready goes to the tube's longest waiter in
//! every mode, as in tuber.

use std::cell::Cell;

use super::*;
use crate::protocol::ReserveMode;

/// Samples before `weighted-fair` trusts a tube's processing time (tuber's).
const FAIR_MIN_SAMPLES: u32 = 10;

/// The shortest processing time, in seconds, `weighted-fair` divides a
/// weight by, so that a tube of instant jobs does not take every draw
/// (tuber's).
const FAIR_FLOOR_SECS: f64 = 0.01;

/// How much of each new sample a processing time takes (tuber's EWMA).
const EWMA_ALPHA: f64 = 0.1;

/// How long a tube's jobs take from reserve to delete: an exponentially
/// weighted mean, in seconds, and how many deletes it has seen.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessingTime {
    mean_secs: f64,
    samples: u32,
}

impl ProcessingTime {
    fn observe(&mut self, secs: f64) {
        self.mean_secs =
            if self.samples == 0 { secs } else { self.mean_secs + EWMA_ALPHA * (secs - self.mean_secs) };
        self.samples = self.samples.saturating_add(1);
    }
}

/// The random draws of weighted reserves: xorshift64, which is plenty for
/// spreading work and needs no clock (the engine reads none).
#[derive(Debug)]
pub(super) struct Draws(Cell<u64>);

impl Default for Draws {
    fn default() -> Draws {
        Draws(Cell::new(0x9E37_79B9_7F4A_7C15))
    }
}

impl Draws {
    /// A number in [0, 1).
    fn next(&self) -> f64 {
        let mut x = self.0.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Client {
    /// The weight this client watches tube `t` with: 1 unless it said.
    pub(super) fn weight(&self, t: TubeId) -> u16 {
        self.weights.iter().find(|&&(w, _)| w == t).map_or(1, |&(_, weight)| weight)
    }

    /// Claims the room to note a weight for tube `t`: false if it cannot
    /// be had. Nothing to claim for the default weight, or a tube noted.
    pub(super) fn claim_weight(&mut self, t: TubeId, weight: u16) -> bool {
        weight == 1 || self.weights.iter().any(|&(w, _)| w == t) || self.weights.try_reserve(1).is_ok()
    }

    /// Notes `weight` for tube `t`, within the room claimed.
    pub(super) fn set_weight(&mut self, t: TubeId, weight: u16) {
        self.forget_weight(t);
        if weight != 1 {
            self.weights.push((t, weight));
        }
    }

    /// Forgets the weight of tube `t`: it is no longer watched.
    pub(super) fn forget_weight(&mut self, t: TubeId) {
        self.weights.retain(|&(w, _)| w != t);
    }
}

impl Engine {
    /// `reserve-mode <mode>`: how this client's reserves choose among its
    /// tubes from now on. `USING <mode>`.
    pub fn reserve_mode(&mut self, c: ClientId, mode: ReserveMode) -> Reply<'_> {
        match self.clients.get_mut(&c) {
            Some(client) => {
                client.reserve_mode = mode;
                Reply::UsingMode(mode)
            }
            None => Reply::InternalError,
        }
    }

    /// A weighted reserve's job: a tube drawn among `client`'s unpaused
    /// tubes with a job ready, each as likely as its weight (divided, in
    /// `weighted-fair`, by how long its jobs take), and that tube's best.
    pub(super) fn drawn_ready_job(&self, client: &Client) -> Option<JobId> {
        let fair = client.reserve_mode == ReserveMode::WeightedFair;
        let weight = |t: TubeId| {
            let weight = f64::from(client.weight(t));
            let took = self.tubes.get(t).processing;
            if fair && took.samples >= FAIR_MIN_SAMPLES {
                weight / took.mean_secs.max(FAIR_FLOOR_SECS)
            } else {
                weight
            }
        };
        let candidates = || {
            let tubes = client.watched.iter().copied();
            tubes.filter(|&t| {
                !self.tubes.get(t).is_paused() && self.ready_for_reserve(&self.tubes.get(t).ready).is_some()
            })
        };
        let total: f64 = candidates().map(weight).sum();
        let mut left = self.draws.next() * total;
        let mut drawn = None;
        for t in candidates() {
            drawn = Some(t);
            left -= weight(t);
            if left < 0.0 {
                break;
            }
        }
        self.ready_for_reserve(&self.tubes.get(drawn?).ready).map(|(_, id)| id)
    }

    /// Job `id`, reserved, is deleted by its holder at `now`: its tube's
    /// processing time takes the time since it was reserved.
    pub(super) fn note_processed(&mut self, id: JobId, now: Time) {
        let Some(job) = self.jobs.get(&id).filter(|job| job.state == State::Reserved) else {
            return;
        };
        let touched = job.deadline.minus_secs(job.ttr);
        let since_touch_us = now.duration_since(touched).as_micros() as u64;
        let secs = job.work_started.worked_us(now, since_touch_us) as f64 / 1e6;
        let t = job.tube;
        self.tubes.get_mut(t).processing.observe(secs);
    }
}
