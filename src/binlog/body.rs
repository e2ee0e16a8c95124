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

/// The most files the log keeps open for reading bodies: a log of a
/// thousand files holds this many descriptors, not a thousand (the
/// host's budget counts them, `host::RESERVED_FDS`). A read holds its
/// file's `Arc` until it is done, so a file let go meanwhile, or closed
/// here, is still read whole.
pub const READERS: usize = 8;

// The host's budget of descriptors leaves room for them beside its other
// 16 (`host::RESERVED_FDS`).
const _: () = assert!(crate::host::RESERVED_FDS >= 16 + READERS as u64);

impl Binlog {
    /// File `n`, open for reading: for a body to be read with no lock
    /// held. Opened by its name, which stays while it holds a live job's
    /// latest record, and kept among the last [`READERS`] files read.
    /// `None` if the log has no such file, or it cannot be opened now (no
    /// descriptor, no memory): a client's read is then refused, the job
    /// kept.
    pub(super) fn reader(&self, n: u32) -> Option<Arc<File>> {
        if !self.files.contains_key(&n) {
            return None;
        }
        let mut readers = self.readers.borrow_mut();
        if let Some(at) = readers.iter().position(|(m, _)| *m == n) {
            let hit = readers.remove(at);
            readers.push(hit);
        } else {
            let file = File::open(super::dir::try_our_path(&self.dir, n)?).ok()?;
            if readers.try_reserve(1).is_err() {
                return None;
            }
            if readers.len() >= READERS {
                readers.remove(0);
            }
            readers.push((n, Arc::new(file)));
        }
        readers.last().map(|(_, file)| Arc::clone(file))
    }

    /// Makes sure `self.moving` holds `was`'s body, if the log holds it
    /// and its new full record `now` carries it (compaction, `move-job`;
    /// not a deleted job's key left cooling down, logged without it):
    /// read when the change is claimed, so that a body that cannot be read
    /// refuses the change before anything is changed (claim, then
    /// change), and kept for the write that follows.
    pub(super) fn ready_body(&mut self, was: &LoggedJob<'_>, now: &LoggedJob<'_>) -> io::Result<()> {
        let (LoggedBody::InLog(place), LoggedBody::InLog(_)) = (was.body, now.body) else { return Ok(()) };
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

#[cfg(test)]
mod tests {
    use super::super::record::{self, JobState};
    use super::super::replay::Replayer;
    use super::*;
    use crate::engine::{Body, Keeping};
    use crate::time::Clock;

    fn body(id: JobId) -> Vec<u8> {
        (0..300u32).map(|n| (n as u8).wrapping_mul(id as u8 + 1)).collect()
    }

    /// A file: its header, then a full record of each job in `ids`.
    fn file_of(ids: &[JobId]) -> Vec<u8> {
        let mut bytes = record::header().to_vec();
        for &id in ids {
            record::encode_full(&mut bytes, &JobState::ready(id), 60, 7, b"default", &body(id));
        }
        bytes
    }

    /// Replays `files` (numbered from 1) with every body left in the log;
    /// each job replayed, with its body read back from where replay left
    /// it (or `Err` if that read fails).
    fn replay(dir: &std::path::Path, files: &[Vec<u8>]) -> Vec<(JobId, io::Result<Vec<u8>>)> {
        let mut replayer = Replayer::new(dir, Keeping { above: Some(0) });
        for (n, bytes) in files.iter().enumerate() {
            let number = n as u32 + 1;
            std::fs::write(super::super::dir::our_path(dir, number), bytes).unwrap();
            replayer.file(number, number as usize == files.len()).unwrap();
        }
        let mut jobs: Vec<_> = replayer
            .finish(&Clock::default())
            .jobs
            .into_iter()
            .map(|j| {
                let Body::InLog(place) = j.body else { panic!("job {}'s body is not in the log", j.id) };
                let file = Arc::new(File::open(super::super::dir::our_path(dir, j.file)).unwrap());
                let mut bytes = vec![0; place.len as usize];
                let got =
                    read(&BodyRead { file, number: j.file, id: j.id, place }, &mut bytes).map(|()| bytes);
                (j.id, got)
            })
            .collect();
        jobs.sort_by_key(|(id, _)| *id);
        jobs
    }

    /// A crash cuts the write of a record that carries a body at any byte
    /// (the rest of the file is the zeros it was preallocated with): the
    /// job before it comes back whole, read from the log, and the cut one
    /// is not there, or, whole, is whole. So does a job whose record a
    /// compaction was moving forward when the cut came: from its old
    /// record.
    #[test]
    fn a_record_with_a_body_cut_at_any_byte_replays_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("beanstalk-body-torn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (whole, before) = (file_of(&[1, 2]), file_of(&[1]).len());
        let moved = file_of(&[1]);
        for cut in before..=whole.len() {
            let mut torn = whole[..cut].to_vec();
            torn.resize(whole.len(), 0);
            let jobs = replay(&dir, std::slice::from_ref(&torn));
            assert_eq!(jobs[0].0, 1, "cut at {cut}");
            assert_eq!(jobs[0].1.as_ref().ok(), Some(&body(1)), "cut at {cut}: job 1");
            if cut == whole.len() {
                assert_eq!(jobs[1].1.as_ref().ok(), Some(&body(2)), "job 2 whole");
            } else {
                assert_eq!(jobs.len(), 1, "cut at {cut}: job 2 is not there");
            }
            // Job 1 being moved into a second file, cut as far.
            let mut second = record::header().to_vec();
            let header = second.len();
            second.extend_from_slice(&moved[header..]);
            let cut2 = header + (cut - before) * (second.len() - header) / (whole.len() - before);
            let mut torn2 = second[..cut2].to_vec();
            torn2.resize(second.len(), 0);
            let jobs = replay(&dir, &[moved.clone(), torn2]);
            assert_eq!(jobs.len(), 1, "moved, cut at {cut2}");
            assert_eq!(jobs[0].1.as_ref().ok(), Some(&body(1)), "moved, cut at {cut2}: job 1");
            for n in [1, 2] {
                let _ = std::fs::remove_file(super::super::dir::our_path(&dir, n));
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A byte of a body changed on disk after replay placed it (rot, a
    /// stray write): the read fails, whichever byte it was.
    #[test]
    fn a_body_changed_on_disk_fails_its_read_at_every_byte() {
        let dir = std::env::temp_dir().join(format!("beanstalk-body-rot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bytes = file_of(&[1]);
        let path = super::super::dir::our_path(&dir, 1);
        let mut replayer = Replayer::new(&dir, Keeping { above: Some(0) });
        std::fs::write(&path, &bytes).unwrap();
        replayer.file(1, true).unwrap();
        let restored = replayer.finish(&Clock::default()).jobs.pop().unwrap();
        let Body::InLog(place) = restored.body else { panic!("in the log") };
        for at in place.record_at as usize..bytes.len() {
            let mut rotten = bytes.clone();
            rotten[at] ^= 0x40;
            std::fs::write(&path, &rotten).unwrap();
            let file = Arc::new(File::open(&path).unwrap());
            let mut got = vec![0; place.len as usize];
            let read = read(&BodyRead { file, number: 1, id: 1, place }, &mut got);
            assert!(read.is_err(), "a byte changed at {at} went unseen");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
