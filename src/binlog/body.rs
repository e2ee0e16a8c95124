//! Bodies left in the log (`engine/body.rs`): each is read back from its
//! job's latest full record, which the record's own checksum vouches for.
//!
//! A read checks everything it can before a byte reaches a client: the
//! record's kind (a full record of some kind), its job id, its tube name's
//! length and its body's length, and the crc32c of its whole payload, read
//! in three pieces (the fields before the body, the body straight into the
//! caller's buffer, the put's tags after it). So a body moved, cut short,
//! overwritten or rotted on disk is an error, never a wrong body. It reads
//! files and nothing else: what a failed read means for the job is the
//! connection's to decide (`conn/body.rs`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::crc32c::{crc32c, crc32c_append};
use super::record::{FULL_FIXED_LEN, RECORD_HEADER_LEN};
use super::{faults, kind, Binlog};
use crate::engine::{BodyRead, JobId, LoggedJob, Place};

/// The most bytes a full record's tags take after its body: a unique key,
/// a concurrency key and two group names of at most 255 bytes each, their
/// lengths, a cooldown, two limits and a run.
const MOST_TAGS: usize = 1 + 4 + 1 + 255 + 4 + 4 + 1 + 255 + 1 + 255 + 1 + 255 + 8;

/// Reads the body `read` names into `into`, which is exactly as long, and
/// checks its record (see the module docs).
pub fn read(read: &BodyRead, into: &mut [u8]) -> io::Result<()> {
    let tube_len = usize::from(read.tube_len);
    let head_len = FULL_FIXED_LEN + tube_len;
    let mut head = [0; FULL_FIXED_LEN + 255];
    let head = &mut head[..head_len];
    let at = u64::from(read.place.record_at);
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("beanstalk.{} offset {at}: job {}'s record {what}", read.number, read.id),
        )
    };
    faults::io_point()?;
    read.file.read_exact_at(head, at)?;
    let u32_at = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let payload = u32_at(0) as usize;
    let id = JobId::from_le_bytes(head[9..17].try_into().unwrap_or_default());
    let full = matches!(head[RECORD_HEADER_LEN], kind::FULL | kind::KEYED_FULL | kind::TAGGED_FULL);
    if !full || id != read.id || usize::from(head[FULL_FIXED_LEN - 5]) != tube_len {
        return Err(bad("is not there"));
    }
    if u32_at(head_len - 4) != read.place.len || into.len() != read.place.len as usize {
        return Err(bad("has another body length"));
    }
    let tail_len = (RECORD_HEADER_LEN + payload)
        .checked_sub(head_len + into.len())
        .filter(|&n| n <= MOST_TAGS)
        .ok_or_else(|| bad("has a bad length"))?;
    read.file.read_exact_at(into, at + head_len as u64)?;
    let mut tail = [0; MOST_TAGS];
    let tail = &mut tail[..tail_len];
    read.file.read_exact_at(tail, at + (head_len + into.len()) as u64)?;
    let crc = crc32c_append(crc32c_append(crc32c(&head[RECORD_HEADER_LEN..]), into), tail);
    if crc != u32_at(4) {
        return Err(bad("fails its checksum"));
    }
    Ok(())
}

impl Binlog {
    /// File `n`, open for reading: for a body to be read with no lock
    /// held (`None` if the log keeps no bodies, or has no such file).
    pub(super) fn reader(&self, n: u32) -> Option<Arc<File>> {
        self.files.get(&n)?.reader.clone()
    }

    /// The body of `job` as it was logged last, which its full record in
    /// `job.file` holds at `place` (under its tube's name then), read into
    /// `self.moving`: its record is to be written again (compaction,
    /// `move-job`), and the new one must carry it.
    pub(super) fn read_back(&mut self, job: &LoggedJob<'_>, place: Place) -> io::Result<()> {
        let file = self.reader(job.file).ok_or_else(|| io::Error::other("no reader for its file"))?;
        let tube_len = job.tube.as_str().len() as u8;
        let request = BodyRead { file, number: job.file, id: job.id, place, tube_len };
        self.moving.clear();
        self.moving
            .try_reserve_exact(place.len as usize)
            .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        self.moving.resize(place.len as usize, 0);
        read(&request, &mut self.moving)
    }
}
