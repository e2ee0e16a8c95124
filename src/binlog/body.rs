//! Bodies left in the log (`engine/body.rs`): each is read back from its
//! job's latest full record, which the record's own checksum vouches for.
//!
//! A read checks everything it can before a byte reaches a client: the
//! record's kind (a full record of some kind), its job id and its body's
//! length, and the crc32c of its whole payload, read in three pieces (the
//! fields before the body, the body straight into the caller's buffer, the
//! put's tags after it). So a body moved, cut short,
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
use crate::engine::{BodyRead, JobId, LoggedBody, LoggedJob, Place};

/// The most bytes a full record's tags take after its body: a unique key,
/// a concurrency key and two group names of at most 255 bytes each, their
/// lengths, a cooldown, two limits and a run.
const MOST_TAGS: usize = 1 + 4 + 1 + 255 + 4 + 4 + 1 + 255 + 1 + 255 + 1 + 255 + 8;

/// Reads the body `read` names into `into`, which is exactly as long, and
/// checks its record (see the module docs).
pub fn read(read: &BodyRead, into: &mut [u8]) -> io::Result<()> {
    let mut head = [0; FULL_FIXED_LEN + 255];
    let at = u64::from(read.place.record_at);
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("beanstalk.{} offset {at}: job {}'s record {what}", read.number, read.id),
        )
    };
    faults::io_point()?;
    // The fields before the body, whose length its tube name's gives (the
    // job's tube may have changed since, in a change the log refused):
    // what comes after them in one read, as much as the file has.
    let got = read_up_to(&read.file, &mut head, at, FULL_FIXED_LEN)?;
    let head_len = FULL_FIXED_LEN + usize::from(head[FULL_FIXED_LEN - 5]);
    if got < head_len {
        read_up_to(&read.file, &mut head[got..head_len], at + got as u64, head_len - got)?;
    }
    let head = &head[..head_len];
    let u32_at = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let payload = u32_at(0) as usize;
    let id = JobId::from_le_bytes(head[9..17].try_into().unwrap_or_default());
    let full = matches!(head[RECORD_HEADER_LEN], kind::FULL | kind::KEYED_FULL | kind::TAGGED_FULL);
    if !full || id != read.id {
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

/// Reads into `buf` from `at` on until at least `least` bytes are in,
/// or `buf` is full; how many it read. The end of the file before
/// `least` is an error.
fn read_up_to(file: &File, buf: &mut [u8], at: u64, least: usize) -> io::Result<usize> {
    let mut got = 0;
    while got < least {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl Binlog {
    /// File `n`, open for reading: for a body to be read with no lock
    /// held (`None` if the log keeps no bodies, or has no such file).
    pub(super) fn reader(&self, n: u32) -> Option<Arc<File>> {
        self.files.get(&n)?.reader.clone()
    }

    /// Makes sure `self.moving` holds `was`'s body, if the log holds it
    /// (its full record is to be written again: compaction, `move-job`):
    /// read when the change is claimed, so that a body that cannot be read
    /// refuses the change before anything is changed (claim, then
    /// change), and kept for the write that follows.
    pub(super) fn ready_body(&mut self, was: &LoggedJob<'_>) -> io::Result<()> {
        let LoggedBody::InLog(place) = was.body else { return Ok(()) };
        if self.moving_for == Some((was.id, was.file, place)) {
            return Ok(());
        }
        self.read_back(was, place)
    }

    /// The body of `job` as it was logged last, which its full record in
    /// `job.file` holds at `place` (under its tube's name then), read into
    /// `self.moving`.
    #[inline(never)]
    fn read_back(&mut self, job: &LoggedJob<'_>, place: Place) -> io::Result<()> {
        self.moving_for = None;
        let file = self.reader(job.file).ok_or_else(|| io::Error::other("no reader for its file"))?;
        let request = BodyRead { file, number: job.file, id: job.id, place };
        self.moving.clear();
        self.moving
            .try_reserve_exact(place.len as usize)
            .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        self.moving.resize(place.len as usize, 0);
        read(&request, &mut self.moving)?;
        self.moving_for = Some((job.id, job.file, place));
        Ok(())
    }
}
