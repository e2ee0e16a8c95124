//! The engine's side of bodies left in the log (`body.rs`): letting a
//! body go from memory once the record that keeps it is written, counting
//! what the log holds, saying where a connection is to read a body, and
//! what becomes of a job whose body cannot be read. It reads no file.

use super::body::{Body, BodyRead, Place};
use super::job::{ClientId, JobId, State};
use super::Engine;
use crate::protocol::Reply;
use crate::time::Time;

/// What the engine counts of bodies left in the log.
#[derive(Debug, Default, Clone, Copy)]
pub struct InLog {
    /// Bytes of the live jobs' bodies the log holds and memory does not.
    pub bytes: u64,
    /// Reads of one that failed (`Engine::body_lost`).
    pub read_failures: u64,
    /// A put's job, its file and its body's place, kept in memory until
    /// the put has handed it to any waiting worker (a copy from memory,
    /// rather than a read back).
    pub(super) put: Option<(JobId, u32, Place)>,
}

impl Engine {
    /// Where the record the log just wrote for job `id` keeps its body,
    /// if the log keeps it ([`super::Journal::body_place`]).
    pub(super) fn body_place(&self, id: JobId) -> Option<Place> {
        self.journal.as_ref()?.body_place(self.jobs.get(&id)?.body.len())
    }

    /// Job `id`'s full record, just written (put, `move-job`, compaction),
    /// keeps its body at `place`: memory lets the bytes go, and counts
    /// only the job's record against `--max-job-memory`.
    pub(super) fn keep_body_in_log(&mut self, id: JobId, place: Place) {
        let Some(job) = self.jobs.get_mut(&id) else { return };
        let freed = job.body.in_memory();
        if let Body::InLog(old) = job.body {
            self.bodies.bytes -= u64::from(old.len);
        }
        job.body = Body::InLog(place);
        self.bodies.bytes += u64::from(place.len);
        self.job_memory -= freed as u64;
    }

    /// What a connection needs to read job `id`'s body from the log once
    /// it has let the lock go; `None` if memory holds it, or the log has
    /// no reader for its file.
    pub fn body_read(&self, id: JobId) -> Option<BodyRead> {
        let job = self.jobs.get(&id)?;
        let Body::InLog(place) = job.body else { return None };
        let file = self.journal.as_ref()?.body_read(job.file)?;
        Some(BodyRead { file, number: job.file, id, place })
    }

    /// Job `id`'s body could not be read back for client `c` (its file
    /// gone, a failed checksum, `EIO`): it is buried, where no worker is
    /// handed it again and the operator finds it, unless another client
    /// holds it (that client's own read will fail). Counted for `stats`
    /// and `--metrics`. `BURIED`, or why not: the connection answers its
    /// client `INTERNAL_ERROR` either way.
    pub fn body_lost(&mut self, c: ClientId, id: JobId, now: Time) -> Reply<'static> {
        self.bodies.read_failures += 1;
        let Some(job) = self.jobs.get(&id) else { return Reply::NotFound };
        let buryable = match job.state {
            State::Ready | State::Delayed => true,
            State::Reserved => job.reserved_by == c,
            State::Buried | State::Held => false,
        };
        if !buryable {
            return Reply::NotFound;
        }
        let buried = self.journaled_change(id, |e| {
            e.end_work(id, super::metering::WorkEnd::Buried, now);
            e.unlink(id);
            if let Some(job) = e.jobs.get_mut(&id) {
                job.counters.buries = job.counters.buries.wrapping_add(1);
            }
            e.make_buried(id, now);
        });
        self.serve_freed(now);
        buried.map_or_else(|refusal| refusal, |()| Reply::Buried)
    }

    /// Job `id`, reserved for client `c` in a reply that is not sent (a
    /// batch with a body that could not be read), goes back to ready as if
    /// never reserved.
    pub fn unsend(&mut self, c: ClientId, id: JobId, now: Time) {
        if self.is_reserved_by(id, c) {
            self.take_back_handoff(id, now);
        }
    }

    /// What `stats` and `--metrics` show of bodies left in the log.
    pub fn bodies_in_log(&self) -> InLog {
        self.bodies
    }
}
