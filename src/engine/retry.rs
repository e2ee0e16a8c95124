//! The retry limit (reference §3.1b), which no peer has: a job put with
//! `max:<n>`, or any job under `--max-reserves <n>`, that has been
//! reserved n times is buried, not queued again, when its reservation
//! next ends without a delete: a `release` (answered `RELEASED` all the
//! same: reference §3.1b says why), its TTR running out, or its holder
//! hanging up. So a job that keeps failing, or
//! keeps killing its worker, stops at n tries and waits, buried, for a
//! person, with its priority and counters as they were.
//!
//! The limits given by put tags are an index beside the job table, as
//! unique keys are, and only an index: a job without the tag costs
//! nothing (its record's `Tags` say so), and nothing here changes a job.

use super::*;

/// The retry limits of the jobs put with `max:`, by job id.
#[derive(Debug, Default)]
pub struct RetryLimits {
    by_job: IdMap<u32>,
}

impl RetryLimits {
    /// Job `id`'s own limit (0: none, whatever the server's default).
    pub(super) fn get(&self, id: JobId) -> Option<u32> {
        self.by_job.get(&id).copied()
    }

    /// Claims room for one more limit: false if the memory cannot be had.
    pub(super) fn try_make_room(&mut self) -> bool {
        self.by_job.try_reserve(1).is_ok()
    }

    /// Files job `id`'s limit, in room claimed by [`Self::try_make_room`].
    pub(super) fn insert(&mut self, id: JobId, reserves: u32) {
        self.by_job.insert(id, reserves);
    }

    /// Forgets job `id`'s limit: the job is gone.
    pub(super) fn forget(&mut self, id: JobId) {
        self.by_job.remove(&id);
    }

    /// What the limits count against `--max-job-memory`.
    pub(super) fn memory(&self) -> u64 {
        self.by_job.len() as u64 * TAG_ENTRY_MEMORY
    }

    /// Every limit, by id, for a test's picture of the engine.
    #[cfg(test)]
    pub(super) fn sorted(&self) -> Vec<(JobId, u32)> {
        let mut all: Vec<_> = self.by_job.iter().map(|(&id, &n)| (id, n)).collect();
        all.sort_unstable();
        all
    }
}

impl Engine {
    /// Sets the limit of every job put without `max:` (`--max-reserves`;
    /// 0, the default, is none).
    pub fn set_max_reserves(&mut self, reserves: u32) {
        self.max_reserves = reserves;
    }

    /// Job `id`'s retry limit, its own or the server's (0: none).
    pub(super) fn retry_limit(&self, id: JobId) -> u32 {
        match self.jobs.get(&id) {
            Some(job) if job.tags.limited() => self.tubes.limits.get(id).unwrap_or(0),
            Some(_) => self.max_reserves,
            None => 0,
        }
    }

    /// Whether reserved job `id`, whose reservation is ending, has been
    /// reserved as many times as its limit allows.
    pub(super) fn tries_spent(&self, id: JobId) -> bool {
        let limit = self.retry_limit(id);
        limit > 0 && self.jobs.get(&id).is_some_and(|job| job.counters.reserves >= limit)
    }

    /// Buries job `id`, out of its reservation's queues already, whose
    /// tries are spent, after `how` (for the log line); its priority
    /// stays. False, with the job untouched, if the log has no room for
    /// the change: the caller then queues it as it would have without a
    /// limit, and the job is tried once more.
    pub(super) fn bury_spent(&mut self, id: JobId, now: Time, how: &str) -> bool {
        let buried = self.journaled_change(id, |e| e.bury_by_limit(id, now));
        // A write that failed after the change leaves it made in memory.
        let made = !matches!(buried, Err(Reply::OutOfMemory));
        if made {
            self.note_buried_by_limit(id, how);
        }
        made
    }

    /// Files job `id`, out of its queues, whose tries are spent, at the
    /// end of its tube's buried list: one bury more, and marked a dead
    /// letter as it is filed, so that the log records the mark with the
    /// burial (never inferred from a limit that may change) and the
    /// counts of dead letters take it in (`Engine::tally_job`).
    pub(super) fn bury_by_limit(&mut self, id: JobId, now: Time) {
        if let Some(job) = self.jobs.get_mut(&id) {
            job.counters.buries = job.counters.buries.wrapping_add(1);
            job.tags.set_buried_by_limit(true);
        }
        self.make_buried(id, now);
    }

    /// Job `id` was just buried by its retry limit, after `how`, and
    /// marked a dead letter: said wherever an operator looks (a warning,
    /// without `-V`, so that `journalctl -p warning` shows it; the tube's
    /// counter in `/metrics`; `stats-job` and the gauges read the mark).
    /// Allocates nothing but the line.
    pub(super) fn note_buried_by_limit(&mut self, id: JobId, how: &str) {
        let limit = self.retry_limit(id);
        let Some(job) = self.jobs.get(&id) else { return };
        let (t, reserves, own) = (job.tube, job.counters.reserves, job.tags.limited());
        self.count_limit_burial(t);
        if crate::log::enabled(crate::log::Kind::Warning) {
            let source = if own { "its max:" } else { "--max-reserves " };
            crate::log::warning(format_args!(
                "job {id} in tube {} buried by its retry limit ({source}{limit}, reserves {reserves}) when {how}",
                self.tubes.get(t).name
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proofs::tests::{client, engine, put_tagged, reserved_id};
    use super::*;

    /// Puts a job with retry limit `limit` (`None`: no tag).
    fn put_limited(e: &mut Engine, c: ClientId, pri: u32, limit: Option<u32>) -> JobId {
        put_tagged(e, c, pri, 0, 10, Time::ZERO, PutTags::new(None, limit, None).unwrap())
    }

    fn reserve(e: &mut Engine, c: ClientId, now: Time) -> JobId {
        reserved_id(e.reserve(c, None, now, &mut Vec::<u8>::new()))
    }

    fn state_of(e: &Engine, id: JobId) -> (State, u32, Counters) {
        let job = e.jobs.get(&id).unwrap();
        (job.state, job.pri, job.counters)
    }

    #[test]
    fn a_release_after_the_last_try_buries_with_the_priority_kept() {
        let mut e = engine();
        let c = client(&mut e);
        let id = put_limited(&mut e, c, 7, Some(2));
        assert_eq!(reserve(&mut e, c, Time::ZERO), id);
        assert_eq!(e.release(c, id, 3, 0, Time::ZERO), Reply::Released);
        assert_eq!(reserve(&mut e, c, Time::ZERO), id);
        assert_eq!(e.release(c, id, 1, 5, Time::ZERO), Reply::Released);
        let (state, pri, counters) = state_of(&e, id);
        assert_eq!(
            (state, pri, counters.reserves, counters.releases, counters.buries),
            (State::Buried, 3, 2, 2, 1)
        );
        // Kicked, it has its tries spent still: the next release buries it.
        assert_eq!(e.kick_job(id, Time::ZERO), Reply::Kicked);
        assert_eq!(reserve(&mut e, c, Time::ZERO), id);
        assert_eq!(e.release(c, id, 0, 0, Time::ZERO), Reply::Released);
        assert_eq!(state_of(&e, id).0, State::Buried);
    }

    #[test]
    fn a_ttr_or_a_hang_up_after_the_last_try_buries() {
        let mut e = engine();
        let c = client(&mut e);
        let timed = put_limited(&mut e, c, 0, Some(1));
        assert_eq!(reserve(&mut e, c, Time::ZERO), timed);
        e.tick(Time::from_secs(11));
        let (state, _, counters) = state_of(&e, timed);
        assert_eq!((state, counters.timeouts, counters.buries), (State::Buried, 1, 1));
        let held = put_limited(&mut e, c, 0, Some(1));
        let worker = client(&mut e);
        assert_eq!(reserve(&mut e, worker, Time::from_secs(11)), held);
        e.disconnect(worker, Time::from_secs(11));
        assert_eq!(state_of(&e, held).0, State::Buried);
    }

    #[test]
    fn the_servers_default_holds_for_jobs_without_the_tag_and_max_0_is_no_limit() {
        let mut e = engine();
        e.set_max_reserves(1);
        let c = client(&mut e);
        let (plain, unlimited, own) = (
            put_limited(&mut e, c, 0, None),
            put_limited(&mut e, c, 1, Some(0)),
            put_limited(&mut e, c, 2, Some(2)),
        );
        for (id, after_one) in [(plain, State::Buried), (unlimited, State::Ready), (own, State::Ready)] {
            assert_eq!(reserve(&mut e, c, Time::ZERO), id);
            assert_eq!(e.release(c, id, 9, 0, Time::ZERO), Reply::Released, "job {id}");
            assert_eq!(state_of(&e, id).0, after_one, "job {id}");
        }
        for _ in 0..5 {
            assert_eq!(reserve(&mut e, c, Time::ZERO), unlimited);
            assert_eq!(e.release(c, unlimited, 1, 0, Time::ZERO), Reply::Released);
        }
    }

    #[test]
    fn a_dead_letter_is_marked_counted_and_its_work_ends_buried_until_it_leaves_the_buried_list() {
        use super::super::metering::WorkEnd;
        let mut e = engine();
        e.set_metering(true);
        e.set_max_reserves(1);
        let c = client(&mut e);
        let (released, timed, held, plain) = (
            put_limited(&mut e, c, 0, Some(1)),
            put_limited(&mut e, c, 1, None),
            put_limited(&mut e, c, 2, None),
            put_limited(&mut e, c, 3, Some(0)),
        );
        assert_eq!(reserve(&mut e, c, Time::ZERO), released);
        assert_eq!(e.release(c, released, 0, 0, Time::ZERO), Reply::Released);
        assert_eq!(reserve(&mut e, c, Time::ZERO), timed);
        e.tick(Time::from_secs(11));
        let worker = client(&mut e);
        assert_eq!(reserve(&mut e, worker, Time::from_secs(11)), held);
        e.disconnect(worker, Time::from_secs(11));
        assert_eq!(reserve(&mut e, c, Time::from_secs(11)), plain);
        assert_eq!(e.bury(c, plain, 3, Time::from_secs(11)), Reply::Buried);
        let dead = |e: &Engine, id| e.jobs.get(&id).unwrap().tags.buried_by_limit();
        assert_eq!([released, timed, held, plain].map(|id| dead(&e, id)), [true, true, true, false]);
        let mut figures = Vec::with_capacity(1);
        e.tube_figures([0].into_iter(), Time::from_secs(11), &mut figures);
        let times = figures[0].times;
        assert_eq!(times.buried_by_limit, 3);
        let count = |how: WorkEnd| times.working[how as usize].count();
        assert_eq!(
            [WorkEnd::Buried, WorkEnd::TimedOut, WorkEnd::Released].map(count),
            [4, 0, 0],
            "the limit's three burials and the bury"
        );
        // Kicked, a job is no dead letter, until its limit buries it again.
        assert_eq!(e.kick_job(timed, Time::from_secs(11)), Reply::Kicked);
        assert!(!dead(&e, timed));
        assert_eq!(reserve(&mut e, c, Time::from_secs(11)), timed);
        assert_eq!(e.release(c, timed, 0, 0, Time::from_secs(11)), Reply::Released);
        assert!(dead(&e, timed));
    }

    /// A restart files a buried job with the mark its burial was logged
    /// with, whatever its tries and the limit now; a job of a log older
    /// than the mark gets it if its tries are spent, as the builds that
    /// wrote it did. The counts of dead letters take them in.
    #[test]
    fn a_restart_keeps_the_logged_mark_and_infers_only_an_old_log_s() {
        let restored = |id, limit, reserves, by_limit| RestoredJob {
            id,
            tube: 0,
            pri: 0,
            delay: 0,
            ttr: 10,
            state: RestoredState::Buried { at: Time(id), by_limit },
            created: Time::ZERO,
            counters: Counters { reserves, ..Counters::default() },
            body: Body::InMemory(Box::from(&b"x"[..])),
            file: 1,
            key: None,
            limit,
            con: None,
            group: None,
            after: None,
            run: None,
        };
        let mut e = engine();
        e.set_max_reserves(1);
        let jobs = vec![
            restored(1, None, 1, Some(false)),   // its worker buried it on its last try
            restored(2, Some(5), 1, Some(true)), // a limit since raised
            restored(3, None, 1, None),          // an old log's: tries spent
            restored(4, Some(2), 1, None),       // an old log's: a try left
        ];
        e.restore(&[TubeName::default_tube()], jobs, 5, Time::ZERO);
        let dead: Vec<bool> = (1..=4).map(|id| e.jobs.get(&id).unwrap().tags.buried_by_limit()).collect();
        assert_eq!(dead, [false, true, true, false]);
        assert_eq!(e.job_counts.buried_by_limit, 2);
        assert_eq!(e.tubes.get(e.tubes.find(&TubeName::default_tube()).unwrap()).buried_by_limit, 2);
    }

    #[test]
    fn a_deleted_job_leaves_no_limit_behind() {
        let mut e = engine();
        let c = client(&mut e);
        let id = put_limited(&mut e, c, 0, Some(4));
        assert_eq!(e.tubes.limits.sorted(), [(id, 4)]);
        assert_eq!(e.delete(c, id, Time::ZERO), Reply::Deleted);
        assert_eq!(e.tubes.limits.sorted(), []);
    }
}
