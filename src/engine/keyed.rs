//! What a unique key (tuber's `idp:`, reference §3.1a) does to the engine's
//! commands: a put whose key names a job answers with that job and stores
//! nothing, lowering its priority if the put asks for a lower one (the
//! ratchet); a key outlives its job's delete by its cooldown, which ends
//! when the timer reaches it; and keys come back after a restart.
//!
//! The index itself is [`super::unique`]; this file decides, under the
//! engine's lock, and must not keep state of its own. Where a job leaves
//! the table its key's cooldown starts: `Engine::discard` (`worker.rs`).

use super::journal::Picture;
use super::unique::{KeyClaim, UniqueKeys};
use super::*;
use crate::protocol::NamedState;

impl Engine {
    /// A put into tube `t` with key `key`: `Err` with the answer if the key
    /// names a job already (then the put's ticket is given back, with its
    /// id when no other put took one since, so that nothing is stored), or
    /// if the memory a new key needs cannot be had (or would pass
    /// `--max-job-memory`, with the `more` bytes of the put's other
    /// tags); otherwise that memory.
    pub(super) fn check_key(
        &mut self,
        t: TubeId,
        key: &UniqueKey,
        ticket: &PutTicket,
        pri: u32,
        more: u64,
        now: Time,
    ) -> Result<KeyClaim, Reply<'static>> {
        let tube = self.tubes.get(t).name.clone();
        let found = self.tubes.keys.find(&tube, &key.name);
        let key_bytes = key.name.as_str().len() + tube.as_str().len() + super::unique::KEY_MEMORY_OVERHEAD;
        let claim = match found {
            Some(_) => None,
            None if self.over_memory_limit(key_bytes as u64 + more) => None,
            None => self.tubes.keys.claim(&tube, key.name.as_str().as_bytes()),
        };
        if let Some(claim) = claim {
            return Ok(claim);
        }
        self.give_back(ticket);
        Err(match found {
            Some((id, true)) => Reply::Duplicate(id, NamedState::Deleted, None),
            Some((id, false)) => self.ratchet(id, pri, now),
            None => Reply::OutOfMemory,
        })
    }

    /// Job `id`, named again by a put of priority `pri`: its state, and
    /// its priority lowered to `pri` if that is lower (never raised), as
    /// tuber answers (`INSERTED <id> <STATE>[ <pri>]`). A ready job takes
    /// its new place in its heap at once; the others keep it for when they
    /// are next ready. The change is logged like any other.
    fn ratchet(&mut self, id: JobId, pri: u32, now: Time) -> Reply<'static> {
        let Some(job) = self.jobs.get(&id) else {
            return Reply::InternalError;
        };
        let (state, was) = (job.state, job.pri);
        let word = match state {
            State::Ready => NamedState::Ready,
            State::Delayed | State::Held => NamedState::Delayed,
            State::Reserved => NamedState::Reserved,
            State::Buried => NamedState::Buried,
        };
        if pri >= was {
            return Reply::Duplicate(id, word, None);
        }
        let lowered = self.journaled_change(id, |e| {
            // Out of the ready heap and back in: it keeps its size, so
            // this allocates nothing, and the urgent counts follow.
            let ready = state == State::Ready;
            if ready {
                e.unlink(id);
            }
            if let Some(job) = e.jobs.get_mut(&id) {
                job.pri = pri;
            }
            if ready {
                e.make_ready(id, now);
            }
        });
        lowered.map_or_else(|refusal| refusal, |()| Reply::Duplicate(id, word, Some(pri)))
    }

    /// The memory job `id`'s key needs in tube `to` (`move-job`), or the
    /// refusal: `KEY_TAKEN` if `to` has that key already.
    pub(super) fn claim_key_in(&mut self, id: JobId, to: &TubeName) -> Result<KeyClaim, Reply<'static>> {
        let Some(key) = self.tubes.keys.key_of(id).and_then(TubeName::new) else {
            return Err(Reply::InternalError);
        };
        if self.tubes.keys.find(to, &key).is_some() {
            return Err(Reply::KeyTaken);
        }
        self.tubes.keys.claim(to, key.as_str().as_bytes()).ok_or(Reply::OutOfMemory)
    }

    /// Gives restored job `id`, in tube `tube`, its key back.
    pub(super) fn restore_key(&mut self, id: JobId, tube: &TubeName, (key, cooldown): &(Box<[u8]>, u32)) {
        // At start-up, best effort, as `restore` claims room: a key that
        // cannot be kept only lets a later put of it in.
        if let Some(claim) = self.tubes.keys.claim(tube, key) {
            self.tubes.keys.insert(id, claim, *cooldown);
            if let Some(job) = self.jobs.get_mut(&id) {
                job.tags.set_keyed();
            }
        }
    }

    /// Ends every cooldown due at `now`, and tells the log each is over.
    pub(super) fn end_cooldowns(&mut self, now: Time) {
        while let Some(id) = self.tubes.keys.due(now) {
            let tube = self.cooling_tube(id);
            if let (Some(journal), Some(tube)) = (self.journal.as_mut(), &tube) {
                if let Some(ghost) = ghost(&self.tubes.keys, id, tube) {
                    // Its room was claimed with the job's: a failed write
                    // fails the log, which says so, and leaves the key to
                    // come back at a restart, cooled off by then.
                    let _ = journal.record(&Change { was: Some(ghost), now: None });
                }
            }
            self.tubes.keys.end(id, &mut positions(&mut self.jobs));
        }
    }

    /// Claims what job `id`'s delete needs to start its key's cooldown:
    /// room for its end, and log room for its record (`journal_cooling`).
    pub(super) fn claim_cooling(&mut self, id: JobId) -> bool {
        self.tubes.keys.claim_cooldown()
            && self.journal_has_room(&mut |journal, jobs, tubes| {
                let Some(job) = jobs.get(&id) else { return false };
                let picture = Picture::of(job);
                let (was, now) = (
                    picture.logged(id, tubes, job.body.logged()),
                    picture.logged(id, tubes, LoggedBody::Bytes(&[])),
                );
                journal.claim(&Change { was: Some(was), now: Some(now) })
            })
    }

    /// Tells the log that job `id`, still in the table, is deleted and its
    /// key cools down (`start_cooldown` was called): to the log it is the
    /// job without its body, in state cooling, until the cooldown ends.
    /// False if the write failed.
    pub(super) fn journal_cooling(&mut self, id: JobId) -> bool {
        let (Some(journal), Some(job)) = (self.journal.as_mut(), self.jobs.get(&id)) else {
            return true;
        };
        let picture = Picture::of(job);
        let was = Some(picture.logged(id, &self.tubes, job.body.logged()));
        let written = journal
            .record(&Change { was, now: Some(picture.logged(id, &self.tubes, LoggedBody::Bytes(&[]))) });
        if let Ok(file) = written {
            self.tubes.keys.set_file(id, file);
        }
        written.is_ok()
    }

    /// Writes cooling key `id` again, if its record is in log file `file`
    /// (compaction). `None`: no such key, and the log may forget it;
    /// `Some(false)`: no room, or the write failed.
    pub(super) fn rewrite_cooling(&mut self, file: u32, id: JobId) -> Option<bool> {
        let tube = self.cooling_tube(id)?;
        let journal = self.journal.as_mut()?;
        let ghost = ghost(&self.tubes.keys, id, &tube).filter(|ghost| ghost.file == file)?;
        if !journal.claim_rewrite(&ghost) {
            return Some(false);
        }
        let written = journal.rewrite(&ghost);
        if let Ok(file) = written {
            self.tubes.keys.set_file(id, file);
        }
        Some(written.is_ok())
    }

    /// The tube of deleted job `id`'s cooling key, which may be gone.
    fn cooling_tube(&self, id: JobId) -> Option<TubeName> {
        TubeName::new(self.tubes.keys.cooling(id)?.0)
    }
}

/// Deleted job `id` as the log sees it while its key cools down: in tube
/// `tube`, without its body, its key's `until` set (`journal_cooling`).
pub(super) fn ghost<'a>(keys: &'a UniqueKeys, id: JobId, tube: &'a TubeName) -> Option<LoggedJob<'a>> {
    let (_, until, file) = keys.cooling(id)?;
    Some(LoggedJob {
        id,
        tube,
        pri: 0,
        delay: 0,
        ttr: 1,
        state: State::Ready,
        created: Time::ZERO,
        when: until,
        counters: Counters::default(),
        body: LoggedBody::Bytes(&[]),
        file,
        key: keys.logged(id),
        limit: None,
        con: None,
        groups: (None, None),
        run: None,
        dead_letter: false,
    })
}
