//! A job's body: in memory, or, with `-b`, left in the log that holds it
//! anyway (issue 60, reference §8.4).
//!
//! Every job's latest full record in the log carries its body, and the
//! log keeps that record for as long as the job lives: compaction moves it
//! forward, never drops it. So a body longer than `--bodies-in-memory`'s
//! bound need not be kept twice: once its record is written, memory keeps
//! where it is (the job's `file`, and here the record's offset and the
//! body's length) in the same 16 bytes the bytes' pointer took, and the
//! body is read back when a client asks for it. The read happens with the
//! engine's lock let go, by the connection that asked (`conn/body.rs`,
//! through `binlog/body.rs`, which checks the record's checksum), so a
//! slow disk holds up that client alone. This module owns the choice and
//! the bookkeeping; it must not read a file.

use std::fs::File;
use std::sync::Arc;

use super::job::{ClientId, JobId, State};
use super::Engine;
use crate::protocol::{Data, Reply};
use crate::time::Time;

/// Where a job's body is.
#[derive(Debug)]
pub enum Body {
    /// The bytes, without the trailing CRLF.
    InMemory(Box<[u8]>),
    /// In the job's latest full record, in the log file the job's `file`
    /// names.
    InLog(Place),
}

/// A body's place in the log: its full record's offset in the job's file,
/// and the body's length. 32 bits each, so that `Body` stays 16 bytes; a
/// record further into a file than 4 GiB keeps its body in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub record_at: u32,
    pub len: u32,
}

impl Body {
    /// The body's length in bytes, wherever it is.
    pub fn len(&self) -> usize {
        self.logged().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of it memory holds: what `--max-job-memory` counts.
    pub fn in_memory(&self) -> usize {
        match self {
            Body::InMemory(bytes) => bytes.len(),
            Body::InLog(_) => 0,
        }
    }

    /// The bytes, if memory holds them, to be moved (`relocate.rs`).
    pub(super) fn bytes_mut(&mut self) -> Option<&mut Box<[u8]>> {
        match self {
            Body::InMemory(bytes) => Some(bytes),
            Body::InLog(_) => None,
        }
    }

    /// The bytes, if memory holds them.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Body::InMemory(bytes) => Some(bytes),
            Body::InLog(_) => None,
        }
    }

    /// What a reply carries of it: the bytes, or their length, to be read
    /// from the log once the lock is let go.
    pub fn data(&self) -> Data<'_> {
        match self {
            Body::InMemory(bytes) => Data::Bytes(bytes),
            Body::InLog(place) => Data::ToRead(place.len),
        }
    }

    /// What the log is told of it.
    pub fn logged(&self) -> LoggedBody<'_> {
        match self {
            Body::InMemory(bytes) => LoggedBody::Bytes(bytes),
            Body::InLog(place) => LoggedBody::InLog(*place),
        }
    }
}

/// A body as the log is told it: the bytes, or where the log has them
/// already (a job rewritten forward is read back from there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggedBody<'a> {
    Bytes(&'a [u8]),
    InLog(Place),
}

impl LoggedBody<'_> {
    pub fn len(&self) -> usize {
        match self {
            LoggedBody::Bytes(bytes) => bytes.len(),
            LoggedBody::InLog(place) => place.len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which bodies stay in the log once written: those longer than
/// `above` bytes; `None`, every body in memory (`--bodies-in-memory`, or
/// no `-b`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keeping {
    pub above: Option<u32>,
}

/// The bound by default: a body of this many bytes or fewer stays in
/// memory, where it costs about what a read of it would take in time.
pub const IN_MEMORY_MAX: u32 = 256;

impl Keeping {
    /// A body of `len` bytes whose full record is at `record_at` in its
    /// file: its place, if it is to stay there.
    pub fn place(self, record_at: u64, len: usize) -> Option<Place> {
        let above = self.above?;
        let record_at = u32::try_from(record_at).ok()?;
        let len = u32::try_from(len).ok().filter(|&len| len > above)?;
        Some(Place { record_at, len })
    }
}

/// A body to be read from the log, with no lock held: the file, open (a
/// file compaction lets go meanwhile is read all the same), the record's
/// place, and what the record must say to be this job's.
#[derive(Debug, Clone)]
pub struct BodyRead {
    pub file: Arc<File>,
    /// The log file's number, for the operator's message.
    pub number: u32,
    pub id: JobId,
    pub place: Place,
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound by default, wherever the docs give it: the README's
    /// table and section, the man page's option and its PERSISTENCE, and
    /// `-h` (which is made from the constant).
    #[test]
    fn the_docs_give_the_bound_by_default() {
        let squeeze = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let readme = squeeze(include_str!("../../README.md"));
        let man = squeeze(include_str!("../../beanstalk.1"));
        let n = IN_MEMORY_MAX;
        for said in [
            format!("`all` keeps every body in memory ([Bodies on disk](#bodies-on-disk)) | `{n}` |"),
            format!("`--bodies-in-memory` ({n} bytes by default)"),
        ] {
            assert!(readme.contains(&said), "README: {said}");
        }
        for said in [format!("in memory (default {n})"), format!("({n} bytes by default)")] {
            assert!(man.contains(&said), "man page: {said}");
        }
        assert!(squeeze(&crate::config::usage("beanstalk")).contains(&format!("(default {n}; all")));
    }

    #[test]
    fn a_body_is_16_bytes_wherever_it_is() {
        assert_eq!(std::mem::size_of::<Body>(), 16);
    }

    #[test]
    fn only_a_long_body_near_enough_the_file_start_stays_in_the_log() {
        let keeping = Keeping { above: Some(IN_MEMORY_MAX) };
        let limit = IN_MEMORY_MAX as usize;
        assert_eq!(keeping.place(12, limit), None);
        assert_eq!(keeping.place(12, limit + 1), Some(Place { record_at: 12, len: IN_MEMORY_MAX + 1 }));
        assert_eq!(keeping.place(1 << 32, limit + 1), None);
        assert_eq!(Keeping { above: None }.place(12, 1 << 20), None);
        assert_eq!(Keeping { above: Some(0) }.place(12, 1), Some(Place { record_at: 12, len: 1 }));
    }
}
