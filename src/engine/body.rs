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

use crate::ids::JobId;
use crate::protocol::Data;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_16_bytes_wherever_it_is() {
        assert_eq!(std::mem::size_of::<Body>(), 16);
    }

    #[test]
    fn only_a_long_body_near_enough_the_file_start_stays_in_the_log() {
        let keeping = Keeping { above: Some(crate::config::DEFAULT_BODIES_IN_MEMORY) };
        let limit = crate::config::DEFAULT_BODIES_IN_MEMORY as usize;
        assert_eq!(keeping.place(12, limit), None);
        assert_eq!(
            keeping.place(12, limit + 1),
            Some(Place { record_at: 12, len: crate::config::DEFAULT_BODIES_IN_MEMORY + 1 })
        );
        assert_eq!(keeping.place(1 << 32, limit + 1), None);
        assert_eq!(Keeping { above: None }.place(12, 1 << 20), None);
        assert_eq!(Keeping { above: Some(0) }.place(12, 1), Some(Place { record_at: 12, len: 1 }));
    }
}
