//! What the operator's page (`metrics/page.rs`) reads of the engine
//! beyond a scrape's figures: a tube by name, a job as `stats-job` shows
//! it with the first bytes of its body, and the dead letters (reference
//! §3.1b) newest first. It changes nothing and counts nothing (a page is
//! no command); each call does a bounded amount of work under the lock.

use super::*;

/// A job as the page shows it.
pub struct JobView {
    /// Its `stats-job` document.
    pub stats: String,
    /// The first bytes of its body, and how long the body is; none of it
    /// for a body left in the log (`in_log`), which the page does not
    /// read.
    pub body: Vec<u8>,
    pub body_len: usize,
    pub in_log: bool,
    /// When it was buried, for a buried job, to order dead letters.
    pub buried_at: Option<Time>,
}

impl Engine {
    /// The tube named `name`, if it exists.
    pub fn tube_named(&self, name: &TubeName) -> Option<TubeId> {
        self.tubes.find(name)
    }

    /// Job `id` at `now` with up to `body_most` bytes of its body; `None`
    /// if it does not exist or the memory for the copy cannot be had.
    pub fn job_view(&self, id: JobId, now: Time, body_most: usize) -> Option<JobView> {
        let job = self.jobs.get(&id)?;
        let stats = self.job_stats(id, now)?.to_yaml()?;
        let all = job.body.bytes().unwrap_or_default();
        let shown = &all[..all.len().min(body_most)];
        let mut body = Vec::new();
        body.try_reserve_exact(shown.len()).ok()?;
        body.extend_from_slice(shown);
        let buried_at = (job.state == State::Buried).then(|| job.buried_at());
        let in_log = job.body.bytes().is_none();
        Some(JobView { stats, body, body_len: job.body.len(), in_log, buried_at })
    }

    /// When job `id` was buried, if it is buried.
    pub fn buried_at(&self, id: JobId) -> Option<Time> {
        self.jobs.get(&id).filter(|job| job.state == State::Buried).map(|job| job.buried_at())
    }

    /// Tube `t`'s dead letters, newest burial first: the buried list walked
    /// from its back, from before job `before` (or its end), at most
    /// `most_looked` buried jobs, each dead letter pushed while `into` has
    /// room. Returns the job to go on before, if the walk stopped short.
    pub fn dead_letters(
        &self,
        t: TubeId,
        before: Option<JobId>,
        most_looked: usize,
        into: &mut Vec<JobId>,
    ) -> Option<JobId> {
        let tube = self.tubes.live(t)?;
        let mut at = match before {
            Some(id) => {
                self.jobs.get(&id).filter(|job| job.state == State::Buried && job.tube == t)?.links.prev
            }
            None => tube.buried.back()?,
        };
        let mut looked = 0;
        loop {
            let job = self.jobs.get(&at)?;
            if job.tags.buried_by_limit() && into.len() < into.capacity() {
                into.push(at);
            }
            looked += 1;
            if job.links.prev == 0 || into.len() == into.capacity() {
                return None;
            }
            if looked >= most_looked {
                // Looked at: the walk goes on before it.
                return Some(at);
            }
            at = job.links.prev;
        }
    }
}
