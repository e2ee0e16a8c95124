//! The engine's side of the write-ahead log: claiming room before a change,
//! writing the change's record after it, and compaction, which rewrites the
//! oldest log file's live jobs a few at a time so that it can be deleted.
//! The log itself is behind the [`Journal`] trait.

use super::journal::Picture;
use super::*;

impl Engine {
    /// The one way a logged change is made to an existing job `id` (bury,
    /// release, kick, `reserve-job` of a buried or delayed job): claim room
    /// for its record first, and if there is none refuse with
    /// `OUT_OF_MEMORY`, leaving the job exactly as it was; then `change` it,
    /// log what it now is, and let compaction run. `Err` is the reply to
    /// send instead of the command's own.
    ///
    /// The log is told the job before and after, and works out the rest;
    /// `change` may do anything to the job but drop it.
    pub(super) fn journaled_change(
        &mut self,
        id: JobId,
        change: impl FnOnce(&mut Engine),
    ) -> Result<(), Reply<'static>> {
        self.journaled_change_to(id, None, change)
    }

    /// [`Engine::journaled_change`] for a change that also moves the job
    /// into tube `to` (`move-job`), so that the claim is made for the
    /// record the new tube's name takes. `change` must leave the tube it
    /// takes the job out of in place: the log is told the old tube's name,
    /// so remove it, if unreferenced, after this returns.
    pub(super) fn journaled_change_to(
        &mut self,
        id: JobId,
        to: Option<TubeId>,
        change: impl FnOnce(&mut Engine),
    ) -> Result<(), Reply<'static>> {
        let was = self.claim_change(id, to)?;
        change(self);
        if !self.journal_record(id, Some(was)) {
            return Err(Reply::InternalError);
        }
        self.compact();
        Ok(())
    }

    /// The one way a logged change of many jobs is made (`kick`,
    /// `clear-tube`, `delete-batch`, or any new one): claim log room for
    /// every job's record, write them all in one frame
    /// ([`Journal::record_all`]), and only then make each job's change in
    /// memory. So the log and memory agree whatever fails: a claim that
    /// fails is `OUT_OF_MEMORY` and a write that fails `INTERNAL_ERROR`,
    /// with no job changed either way; and a crash that cuts the write
    /// replays none of it. `after` pictures a job, as the log sees it, as
    /// its change will leave it (`None`: deleted) before the change is
    /// made, given its position in `ids` (a change that depends on the
    /// order, as a new place in a list does); `change` then makes it. The
    /// ids are of live jobs, each once.
    /// The list of files comes from room kept for it (`Kept`, in `batch.rs`), so a
    /// batch of a usual size needs no new memory.
    pub(super) fn journaled_batch(
        &mut self,
        ids: &[JobId],
        after: &After,
        change: &mut dyn FnMut(&mut Engine, JobId),
    ) -> Result<(), Reply<'static>> {
        self.journaled_batch_cooling(ids, after, None, change)
    }

    /// [`Engine::journaled_batch`], where ids that name no job may be keys
    /// of tube `cooling` cooling down, whose cooldowns the batch ends
    /// (`flush-tube`).
    pub(super) fn journaled_batch_cooling(
        &mut self,
        ids: &[JobId],
        after: &After,
        cooling: Option<&TubeName>,
        change: &mut dyn FnMut(&mut Engine, JobId),
    ) -> Result<(), Reply<'static>> {
        let mut files = Vec::new();
        if self.journal.is_some() {
            files = self.kept_files.take(ids.len()).ok_or(Reply::OutOfMemory)?;
            let logged = self.log_batch_twice(ids, after, cooling, &mut files);
            if let Err(refusal) = logged {
                self.kept_files.put_back(files);
                return Err(refusal);
            }
        }
        for (n, &id) in ids.iter().enumerate() {
            // The file first: a deleted job's cooling key takes it with it.
            if let (Some(job), Some(&file)) = (self.jobs.get_mut(&id), files.get(n)) {
                job.file = file;
            }
            change(self, id);
        }
        self.kept_files.put_back(files);
        self.compact();
        Ok(())
    }

    /// Claims room for the changes of `ids`, once more after freeing old
    /// files if the disk was full, and records them, their files into
    /// `files`.
    fn log_batch_twice(
        &mut self,
        ids: &[JobId],
        after: &After,
        cooling: Option<&TubeName>,
        files: &mut Vec<u32>,
    ) -> Result<(), Reply<'static>> {
        let mut claimed = self.log_batch(ids, after, cooling, None)?;
        if !claimed {
            let full = self.journal.as_mut().map(|j| j.files_to_free()).unwrap_or_default();
            if !full.is_empty() {
                self.rewrite_files(&full);
                claimed = self.log_batch(ids, after, cooling, None)?;
            }
        }
        if !claimed {
            return Err(Reply::OutOfMemory);
        }
        self.log_batch(ids, after, cooling, Some(files)).map(|_| ())
    }

    /// [`Engine::journaled_batch`]'s log calls: claims room for the
    /// changes of `ids` (`files` is `None`; `Ok(false)`: no room), or
    /// records them, their files into `files`. The changes are made one
    /// by one as the log reads them: no list of them is kept.
    fn log_batch(
        &mut self,
        ids: &[JobId],
        after: &After,
        cooling: Option<&TubeName>,
        files: Option<&mut Vec<u32>>,
    ) -> Result<bool, Reply<'static>> {
        let Engine { journal, jobs, tubes, .. } = self;
        let Some(journal) = journal.as_mut() else { return Ok(true) };
        // An id that names no job may be a key of tube `cooling` still
        // cooling down (`flush-tube`): its change is its cooldown's end.
        let ghost = |id: JobId| cooling.and_then(|tube| super::keyed::ghost(&tubes.keys, id, tube));
        if ids.iter().any(|&id| jobs.get(&id).is_none() && ghost(id).is_none()) {
            return Err(Reply::InternalError);
        }
        let mut changes = ids.iter().enumerate().filter_map(|(n, &id)| match jobs.get(&id) {
            Some(job) => {
                let was = Picture::of(job).logged(id, tubes, job.body.logged());
                Some(Change { was: Some(was), now: after(n, was) })
            }
            None => Some(Change { was: Some(ghost(id)?), now: None }),
        });
        match files {
            None => Ok(journal.claim_all(&mut changes)),
            Some(files) => {
                journal.record_all(&mut changes, files).map(|()| true).map_err(|_| Reply::InternalError)
            }
        }
    }

    /// Claims log room for a change to job `id` that leaves it in tube
    /// `to` (`None`: its own), and pictures the job as it is before it.
    /// (Apart from the generic [`Engine::journaled_change_to`], so that
    /// each command's instance of that stays small.)
    fn claim_change(&mut self, id: JobId, to: Option<TubeId>) -> Result<Picture, Reply<'static>> {
        let Some(was) = self.jobs.get(&id).map(Picture::of) else {
            return Err(Reply::NotFound);
        };
        let claimed = self.journal_has_room(&mut |journal, jobs, tubes| {
            let Some(body) = jobs.get(&id).map(|job| job.body.logged()) else { return false };
            let was = was.logged(id, tubes, body);
            let now = to.map_or(was, |to| was_in_tube(&was, tubes, to));
            journal.claim(&Change { was: Some(was), now: Some(now) })
        });
        if claimed {
            Ok(was)
        } else {
            Err(Reply::OutOfMemory)
        }
    }

    /// Makes a claim for log space with `claim`; if the disk is full, first
    /// empties the oldest log files by rewriting their live jobs (deletes may
    /// have left a few live jobs pinning many files), then tries once more.
    /// (`claim` is a `dyn`: one copy of this for every kind of claim.)
    pub(super) fn journal_has_room(
        &mut self,
        claim: &mut dyn FnMut(&mut dyn Journal, &JobTable, &Tubes) -> bool,
    ) -> bool {
        let Engine { journal, jobs, tubes, .. } = self;
        let Some(journal) = journal.as_mut() else { return true };
        if claim(journal.as_mut(), jobs, tubes) {
            return true;
        }
        let files = journal.files_to_free();
        if files.is_empty() {
            return false;
        }
        self.rewrite_files(&files);
        let Engine { journal, jobs, tubes, .. } = self;
        journal.as_mut().is_some_and(|journal| claim(journal.as_mut(), jobs, tubes))
    }

    /// Tells the log that job `id` was `was` (`None`: it is new) and is now
    /// what the table holds, and keeps the file of its latest full record.
    /// False if the write failed.
    pub(super) fn journal_record(&mut self, id: JobId, was: Option<Picture>) -> bool {
        self.tell_journal(id, was, true)
    }

    /// Tells the log that job `id`, still in the table, is deleted. False
    /// if the write failed.
    pub(super) fn journal_delete(&mut self, id: JobId) -> bool {
        let was = self.jobs.get(&id).map(Picture::of);
        self.tell_journal(id, was, false)
    }

    /// [`Engine::journal_record`] (`exists`) and [`Engine::journal_delete`].
    fn tell_journal(&mut self, id: JobId, was: Option<Picture>, exists: bool) -> bool {
        let Some(journal) = self.journal.as_mut() else { return true };
        let Some(job) = self.jobs.get(&id) else { return true };
        let now = Picture::of(job);
        let change = Change {
            was: was.map(|was| was.logged(id, &self.tubes, job.body.logged())),
            now: exists.then(|| now.logged(id, &self.tubes, job.body.logged())),
        };
        match journal.record(&change) {
            Ok(file) => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.file = file;
                }
                match self.body_place(id) {
                    // A new job's body stays until its put is done.
                    Some(place) if exists && was.is_none() => self.bodies.put = Some((id, file, place)),
                    Some(place) if exists => self.keep_body_in_log(id, place),
                    _ => {}
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Keeps the log's size in proportion to its live data: rewrites the
    /// live jobs of the oldest log file into the current one, a few at a
    /// time, for as long as the log asks (see [`Journal::next_rewrite`]).
    /// Once a file holds no live job it is deleted.
    pub(super) fn compact(&mut self) {
        while let Some((file, id)) = self.journal.as_mut().and_then(|j| j.next_rewrite()) {
            if !self.rewrite_if_still_in(file, id) {
                return;
            }
        }
    }

    /// Rewrites the full record of every live job whose latest full record
    /// is in one of binlog files `files` into the current file, so that
    /// they can go (at start-up for files with unreadable records, and when
    /// the disk is full). Stops early if the disk is full.
    pub fn rewrite_files(&mut self, files: &[u32]) {
        for &file in files {
            while let Some(id) = self.journal.as_ref().and_then(|j| j.written_in(file)) {
                if !self.rewrite_if_still_in(file, id) {
                    return;
                }
            }
        }
    }

    /// Rewrites job `id` if its latest full record is still in `file`;
    /// otherwise tells the log that its note of it is stale. False if the
    /// log has no room or a write failed.
    pub(super) fn rewrite_if_still_in(&mut self, file: u32, id: JobId) -> bool {
        let Some(journal) = self.journal.as_mut() else { return false };
        let Some(job) = self.jobs.get(&id).filter(|job| job.file == file) else {
            // A deleted job's key cooling down is live in the log too
            // (`Engine::journal_cooling`).
            if let Some(rewritten) = self.rewrite_cooling(file, id) {
                return rewritten;
            }
            if let Some(journal) = self.journal.as_mut() {
                journal.forget_written(file, id);
            }
            return true;
        };
        let logged = Picture::of(job).logged(id, &self.tubes, job.body.logged());
        if !journal.claim_rewrite(&logged) {
            return false;
        }
        match journal.rewrite(&logged) {
            Ok(file) => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.file = file;
                }
                if let Some(place) = self.body_place(id) {
                    self.keep_body_in_log(id, place);
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// What a change of many jobs makes of each job ([`Engine::journaled_batch`]),
/// as the log sees it: the job after the change from its position in the
/// batch (0 for the first id) and the job before it, `None` if it is gone.
/// Any change the log can record is one of these, so a new command on many
/// jobs needs nothing new here or in the log.
pub(super) type After = dyn for<'a> Fn(usize, LoggedJob<'a>) -> Option<LoggedJob<'a>>;

/// `kick`: ready, one kick more, a dead letter no more.
pub(super) fn kicked(_: usize, was: LoggedJob<'_>) -> Option<LoggedJob<'_>> {
    let mut counters = was.counters;
    counters.kicks = counters.kicks.wrapping_add(1);
    Some(LoggedJob { state: State::Ready, counters, dead_letter: false, ..was })
}

/// A delete at `now`: gone, but for a unique key with a cooldown, which
/// is logged as the job without its body, cooling until then (reference
/// §3.1a).
pub(super) fn deleted(now: Time) -> impl for<'a> Fn(usize, LoggedJob<'a>) -> Option<LoggedJob<'a>> {
    move |_, was| {
        let key = was.key.filter(|key| key.cooldown > 0)?;
        let until = Some(super::unique::cooldown_end(now, key.cooldown));
        Some(LoggedJob { key: Some(LoggedKey { until, ..key }), body: LoggedBody::Bytes(&[]), ..was })
    }
}

/// A delete for good: gone, a unique key with it (`flush-tube`).
pub(super) fn gone(_: usize, _: LoggedJob<'_>) -> Option<LoggedJob<'_>> {
    None
}

/// `was` as it will be in tube `tube`: what a change is claimed for.
fn was_in_tube<'a>(was: &LoggedJob<'a>, tubes: &'a Tubes, tube: TubeId) -> LoggedJob<'a> {
    LoggedJob { tube: &tubes.get(tube).name, ..*was }
}
