//! Commands on many jobs at once: `clear-tube` (beanstalkd's pull request
//! #87), and tuber's `reserve-batch`, `delete-batch` (reference §3.22
//! to 3.24), `flush-tube` (§3.28) and `flush-buried` (§3.32). Each job is treated exactly as its one-job command would
//! treat it, and counted as that command in `stats`; what is logged is
//! logged in one write, all or nothing ([`Engine::journaled_batch`]).
//!
//! A command on a whole tube (`clear-tube`, `flush-tube`, `flush-buried`:
//! [`Command::works_in_chunks`]) works in chunks of [`CLEAR_CHUNK`] jobs,
//! one chunk a call of [`Engine::tube_chunk`], so that the connection lets
//! the lock go between chunks and no other client waits for a whole tube.
//! The connection runs them all alike; which command does what is decided
//! here, in [`Engine::start_on_tube`], [`Engine::tube_chunk`] and
//! [`TubeRun::reply`], an arm each.

use super::journaling::{deleted, gone};
use super::*;
use crate::protocol::{Command, Name, SHORT_REPLY_LEN};

/// Jobs one chunk of a command on a whole tube ([`Engine::tube_chunk`])
/// changes at most; for a flush, jobs and cooldowns ended.
pub const CLEAR_CHUNK: usize = 1000;

/// Bytes of bodies one piece of a `reserve-batch` copies under the lock
/// (a job more at most): about a tenth of a millisecond of copying.
pub const BATCH_PIECE: usize = 256 * 1024;

/// Key slots one call of [`Engine::flush_tube`] looks at, at most.
pub const COOLING_SCAN: usize = 64 * 1024;

/// A command on a whole tube under way: started by
/// [`Engine::start_on_tube`], then a chunk a lock by [`Engine::tube_chunk`]
/// until a chunk gives the reply.
#[derive(Debug)]
pub struct TubeRun {
    command: Command,
    /// Jobs it may change at most: as many as the tube had for it when it
    /// started; it changes no more, however many come meanwhile.
    most: u64,
    /// Jobs changed so far.
    done: u64,
    /// A flush's cooling keys: the key slot to look from (`None`: none
    /// left to look at, or not a flush).
    cooling: Option<usize>,
}

impl TubeRun {
    /// Jobs changed so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// The answer, once the jobs are done: how many were changed.
    fn reply(&self) -> Reply<'static> {
        match self.command {
            Command::ClearTube(_) => Reply::Cleared(self.done),
            Command::FlushTube(_) | Command::FlushBuried(_) => Reply::Flushed(self.done),
            _ => Reply::InternalError,
        }
    }
}

/// A list's room kept from one command on many jobs to the next, claimed
/// at start-up for [`CLEAR_CHUNK`] entries: so that a command that frees
/// memory (reference §3.0, `frees`) needs none of its own on a full
/// server. A longer list is claimed as any memory is, and may be refused.
#[derive(Debug)]
pub(super) struct Kept<T>(Vec<T>);

impl<T> Kept<T> {
    /// Room for [`CLEAR_CHUNK`] entries: at start-up, where a process
    /// without that much memory stops.
    pub(super) fn new() -> Kept<T> {
        Kept(Vec::with_capacity(CLEAR_CHUNK))
    }

    /// An empty list with room for `n`: the kept room if it is enough;
    /// `None` if more cannot be had.
    pub(super) fn take(&mut self, n: usize) -> Option<Vec<T>> {
        let mut list = std::mem::take(&mut self.0);
        list.clear();
        if list.try_reserve_exact(n).is_err() {
            self.0 = list;
            return None;
        }
        Some(list)
    }

    /// Gives the room back. Room grown past a usual list's goes, and a
    /// usual list's is claimed again if memory allows (a shrink in place
    /// could not fail cleanly).
    pub(super) fn put_back(&mut self, mut list: Vec<T>) {
        list.clear();
        if list.capacity() > CLEAR_CHUNK {
            list = Vec::new();
            let _ = list.try_reserve_exact(CLEAR_CHUNK);
        }
        self.0 = list;
    }
}

impl Engine {
    /// Starts `command`, one that [`Command::works_in_chunks`]: how many
    /// jobs it may change, or its answer at once. A tube that does not
    /// exist is answered by the first chunk: `NOT_FOUND` for a clear,
    /// `FLUSHED 0` for a flush (tuber 0.9.1's bytes), which still frees
    /// the keys its name has cooling.
    pub fn start_on_tube(&self, command: Command) -> Result<TubeRun, Reply<'static>> {
        let (most, cooling) = match &command {
            Command::ClearTube(name) => (self.clearable(name), None),
            Command::FlushTube(name) => (self.flushable(name), Some(0)),
            Command::FlushBuried(name) => (self.buried_in(name), None),
            _ => return Err(Reply::InternalError),
        };
        Ok(TubeRun { command, most, done: 0, cooling })
    }

    /// One chunk of `run`, under one hold of the lock, in one write:
    /// `Some` reply once the run is over. A chunk refused after others
    /// were made ends it with the count of those (they are made, and
    /// logged); if the first is refused, its refusal is the answer.
    pub fn tube_chunk(&mut self, run: &mut TubeRun, now: Time) -> Option<Reply<'static>> {
        let TubeRun { command, most, done, cooling } = run;
        let left = most.saturating_sub(*done);
        let chunk = match command {
            Command::ClearTube(name) => self.clear_tube(name, left, now),
            Command::FlushTube(name) => self.flush_tube(name, left, *cooling, now).map(|(n, next)| {
                *cooling = next;
                n
            }),
            Command::FlushBuried(name) => self.flush_buried(name, left, now),
            _ => Err(Reply::InternalError),
        };
        match chunk {
            Ok(n) => {
                run.done += n as u64;
                let jobs_done = n < CLEAR_CHUNK || run.done >= run.most;
                (jobs_done && run.cooling.is_none()).then(|| run.reply())
            }
            Err(_) if run.done > 0 => Some(run.reply()),
            Err(refusal) => Some(refusal),
        }
    }

    /// How many jobs `clear-tube <tube>` may delete: the tube's ready,
    /// delayed and buried jobs as it starts (0 if there is no such tube).
    /// A clear deletes no more, however many come meanwhile.
    fn clearable(&self, name: &TubeName) -> u64 {
        self.tubes.find(name).map_or(0, |t| {
            let tube = self.tubes.get(t);
            (tube.job_count() - tube.reserved) as u64
        })
    }

    /// One chunk of `clear-tube <tube>`: deletes up to `most` (at most
    /// [`CLEAR_CHUNK`]) ready, delayed and buried jobs of the tube, buried
    /// ones first, then delayed, then ready; reserved jobs, and jobs handed
    /// to a blocked worker, stay with their workers. Returns how many it
    /// deleted; `NOT_FOUND` if the tube does not exist (it is never made).
    /// [`Engine::tube_chunk`] calls it until a chunk comes back short.
    fn clear_tube(&mut self, name: &TubeName, most: u64, now: Time) -> Result<usize, Reply<'static>> {
        let Some(t) = self.tubes.find(name) else {
            return Err(Reply::NotFound);
        };
        let tube = self.tubes.get(t);
        let chunk = (most.min(CLEAR_CHUNK as u64) as usize).min(tube.job_count() - tube.reserved);
        let mut ids = self.kept_ids.take(chunk).ok_or(Reply::OutOfMemory)?;
        let tube = self.tubes.get(t);
        // The heaps' last entries first: taking them out moves nothing.
        let (delayed, ready) = (tube.delayed.last_ids(chunk), tube.ready.last_ids(chunk));
        ids.extend(tube.buried.ids(&self.jobs).chain(delayed).chain(ready).take(chunk));
        self.cmds.delete += ids.len() as u64;
        let deleted = self.delete_all(&ids, now).map(|()| ids.len());
        self.kept_ids.put_back(ids);
        // A group whose last member went lets its held jobs go.
        self.serve_freed(now);
        deleted
    }

    /// How many jobs `flush-buried <tube>` may delete: the tube's buried
    /// jobs as it starts (0 if there is no such tube: `FLUSHED 0`,
    /// reference §3.32). It deletes no more, however many are buried
    /// meanwhile.
    fn buried_in(&self, name: &TubeName) -> u64 {
        self.tubes.find(name).map_or(0, |t| self.tubes.get(t).buried.len() as u64)
    }

    /// One chunk of `flush-buried <tube>` (tuber's, reference §3.32), in
    /// one write: deletes up to `most` (at most [`CLEAR_CHUNK`]) of the
    /// tube's buried jobs, oldest first, each as `delete` would (a unique
    /// key with a cooldown starts it); ready, delayed and reserved jobs
    /// stay. Returns how many it deleted: 0 for a tube that does not
    /// exist (it is never made). [`Engine::tube_chunk`] calls it until a
    /// chunk comes back short.
    fn flush_buried(&mut self, name: &TubeName, most: u64, now: Time) -> Result<usize, Reply<'static>> {
        let Some(t) = self.tubes.find(name) else {
            return Ok(0);
        };
        let chunk = (most.min(CLEAR_CHUNK as u64) as usize).min(self.tubes.get(t).buried.len());
        let mut ids = self.kept_ids.take(chunk).ok_or(Reply::OutOfMemory)?;
        ids.extend(self.tubes.get(t).buried.ids(&self.jobs).take(chunk));
        self.cmds.delete += ids.len() as u64;
        let deleted = self.delete_all(&ids, now).map(|()| ids.len());
        self.kept_ids.put_back(ids);
        // A group whose last member went lets its held jobs go.
        self.serve_freed(now);
        deleted
    }

    /// How many jobs `flush-tube <tube>` may delete: every job of the tube
    /// as it starts (0 if there is no such tube: `FLUSHED 0`, reference
    /// §3.28, once its cooling keys are freed).
    fn flushable(&self, name: &TubeName) -> u64 {
        self.tubes.find(name).map_or(0, |t| self.tubes.get(t).job_count() as u64)
    }

    /// One chunk of `flush-tube <tube>` (tuber's, reference §3.28), in one
    /// write: up to `most` jobs of the tube in any state, buried, delayed,
    /// ready, then reserved (whose holders then find them gone, as after
    /// a `delete`), their unique keys freed at once, with no cooldown;
    /// then, in the same chunk if it has room (at most [`CLEAR_CHUNK`]
    /// ids in all), the tube's keys still cooling from earlier deletes,
    /// freed as if their cooldowns had run out, found among
    /// [`COOLING_SCAN`] key slots from slot `cooling_from` (`None`: that
    /// is done). Returns the jobs deleted and the key slot to go on from.
    /// [`Engine::start_on_tube`] asks [`Engine::flushable`] first, then
    /// [`Engine::tube_chunk`] calls this
    /// until no job is left to delete and no slot to look at; the tube may
    /// vanish on the way (its last job gone), and its cooling keys, named
    /// by the tube's name, are still found.
    ///
    /// Nothing indexes reserved jobs by tube, so a chunk that reaches them
    /// passes once over every reserved job of the server.
    pub(super) fn flush_tube(
        &mut self,
        name: &TubeName,
        most: u64,
        cooling_from: Option<usize>,
        now: Time,
    ) -> Result<(usize, Option<usize>), Reply<'static>> {
        let mut ids = self.kept_ids.take(CLEAR_CHUNK).ok_or(Reply::OutOfMemory)?;
        if let Some(t) = self.tubes.find(name) {
            let tube = self.tubes.get(t);
            let chunk = (most.min(CLEAR_CHUNK as u64) as usize).min(tube.job_count());
            let (delayed, ready) = (tube.delayed.last_ids(chunk), tube.ready.last_ids(chunk));
            ids.extend(tube.buried.ids(&self.jobs).chain(delayed).chain(ready).take(chunk));
            if ids.len() < chunk && tube.reserved > 0 {
                let jobs = &self.jobs;
                let in_tube = |id: &JobId| jobs.get(id).is_some_and(|job| job.tube == t);
                ids.extend(self.reserved.iter().map(|(_, id)| id).filter(in_tube).take(chunk - ids.len()));
            }
        }
        let jobs = ids.len();
        let mut next = cooling_from;
        if let (true, Some(from)) = (jobs < CLEAR_CHUNK, cooling_from) {
            let room = CLEAR_CHUNK - jobs;
            next = self.tubes.keys.cooling_in(name.as_str().as_bytes(), from, COOLING_SCAN, room, &mut ids);
        }
        self.cmds.delete += jobs as u64;
        let forget = &mut |e: &mut Engine, id| match e.jobs.get(&id) {
            Some(_) => e.forget_gone(id, false, now),
            None => e.tubes.keys.forget(id),
        };
        let flushed = self.journaled_batch_cooling(&ids, &gone, Some(name), forget);
        self.kept_ids.put_back(ids);
        self.serve_freed(now);
        flushed.map(|()| (jobs, next))
    }

    /// Deletes `ids`, all live and deletable, in one write: each as
    /// `delete` would, a unique key with a cooldown starting it (its
    /// record is the job's, without its body, reference §3.1a), room for
    /// every cooldown claimed first.
    fn delete_all(&mut self, ids: &[JobId], now: Time) -> Result<(), Reply<'static>> {
        let keys = &self.tubes.keys;
        let cooling = ids
            .iter()
            .filter(|&&id| self.jobs.get(&id).is_some_and(|job| job.tags.keyed()) && keys.cools(id));
        let cooling = cooling.count();
        if cooling > 0 && !self.tubes.keys.claim_cooldowns(cooling) {
            return Err(Reply::OutOfMemory);
        }
        self.journaled_batch(ids, &deleted(now), &mut |e, id| e.forget_deleted(id, now))
    }

    /// `delete-batch <id> ...`: each id as `delete` would (reference
    /// §3.5): a job reserved by another client, a job that does not exist,
    /// and an id named twice count as not found. `DELETED_BATCH <deleted>
    /// <not found>`. Of a client that is not the admin socket's, a ready,
    /// delayed or buried job among the ids makes it `NOT_PERMITTED`,
    /// nothing counted or deleted (reference §3.0, `admin unless held`).
    /// The ids come as the line names them, at most
    /// [`crate::protocol::MAX_BATCH`], and are listed in kept room.
    pub fn delete_batch(
        &mut self,
        c: ClientId,
        named: &mut dyn Iterator<Item = JobId>,
        now: Time,
    ) -> Reply<'_> {
        let Some(mut ids) = self.kept_ids.take(crate::protocol::MAX_BATCH) else {
            return Reply::OutOfMemory;
        };
        let deletable = |job: &Job| job.state != State::Reserved || job.reserved_by == c;
        let refused = self.refuses(c, Name::DeleteBatch);
        let mut count = 0;
        for id in named.take(crate::protocol::MAX_BATCH) {
            count += 1;
            // Of a client that is not the admin socket's, a job it does
            // not hold refuses the whole batch, before anything changes.
            if refused && self.jobs.get(&id).is_some_and(|job| job.state != State::Reserved) {
                self.kept_ids.put_back(ids);
                return Reply::NotPermitted;
            }
            // At most a thousand: a scan costs less than a sort's code.
            if self.jobs.get(&id).is_some_and(deletable) && !ids.contains(&id) {
                ids.push(id);
            }
        }
        self.cmds.delete += count as u64;
        let reply = match self.delete_all(&ids, now) {
            Ok(()) => Ok((ids.len(), count - ids.len())),
            Err(refusal) => Err(refusal),
        };
        self.kept_ids.put_back(ids);
        self.serve_freed(now);
        reply.map_or_else(|refusal| refusal, |(deleted, missing)| Reply::DeletedBatch(deleted, missing))
    }

    /// One piece of `reserve-batch <count>`: reserves more ready jobs, each
    /// as `reserve` would pick it and counted as a `reserve`, their ids
    /// pushed onto `ids` (room claimed by the caller), until `ids` holds
    /// `count` or the replies of this piece pass `budget` bytes (one job at
    /// least); never waits. `RESERVED_BATCH <n>` with `n` the ids so far,
    /// whose `RESERVED` replies the caller writes
    /// ([`Engine::reserved_reply`]), one piece under one lock so that no
    /// lock is held for a whole batch of big bodies. Room for every reply,
    /// and for the head, is claimed in `room` before its job is reserved;
    /// a job whose reply has no room stays ready and ends the batch, and
    /// with no job reserved the answer is `OUT_OF_MEMORY`.
    pub fn reserve_batch(
        &mut self,
        c: ClientId,
        count: u32,
        now: Time,
        budget: usize,
        room: &mut dyn ReplyRoom,
        ids: &mut Vec<JobId>,
    ) -> Reply<'_> {
        // A reserve command, whatever it finds (`current-workers`).
        self.become_worker(c);
        // The head line, then each job's reply.
        let mut bytes = SHORT_REPLY_LEN;
        let first = ids.len();
        while ids.len() < count as usize
            && ids.len() < ids.capacity()
            && (ids.len() == first || bytes <= budget)
        {
            let Some(id) = self.best_ready_job(c) else { break };
            let reply = self.jobs.get(&id).map_or(0, |job| data_reply_len(job.body.len()));
            if !room.claim(bytes + reply) {
                if ids.is_empty() {
                    return Reply::OutOfMemory;
                }
                break;
            }
            bytes += reply;
            self.cmds.reserve += 1;
            self.reserve_for(c, id, now);
            ids.push(id);
        }
        Reply::ReservedBatch(ids.len())
    }

    /// How many reservations have run out of TTR so far: a batch whose
    /// pieces saw none has no reply to leave out.
    pub fn timeouts_so_far(&self) -> u64 {
        self.job_timeouts
    }

    /// Whether client `c` holds any job reserved (`--conn-idle-timeout`
    /// closes no such connection).
    pub fn holds_any(&self, c: ClientId) -> bool {
        self.clients.get(&c).is_some_and(|client| !client.reserved.is_empty())
    }

    /// Whether client `c` still holds job `id`: a batch's reply for a job
    /// whose TTR ran out while the rest was copied is not sent.
    pub fn holds(&self, c: ClientId, id: JobId) -> bool {
        self.jobs.get(&id).is_some_and(|job| job.state == State::Reserved && job.reserved_by == c)
    }
}
