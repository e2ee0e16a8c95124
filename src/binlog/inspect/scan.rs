//! Walking one of our log files record by record, from bytes already read,
//! and saying precisely where and how it is damaged.
//!
//! Two modes. [`Mode::AsReplay`] follows the server's replay (`replay.rs`):
//! the first bad record ends the file; in the newest file, a bad record
//! with nothing valid after it is a torn tail. [`Mode::Check`] goes on past
//! damage to the next record that passes its checksum, so that every
//! damaged range of the file is reported.
//!
//! This module decodes with [`crate::binlog::record`] and hands each record
//! to its caller; it keeps no state, reads no file and writes nothing.

use std::path::Path;

use super::Damage;
use crate::binlog::decode;
use crate::binlog::record::{self, Record, HEADER_LEN, RECORD_HEADER_LEN};
use crate::binlog::replay::{self, NextRecord};

/// Largest payload a record can have, as replay allows.
const MAX_PAYLOAD: usize = (1 << 30) + 1024;

/// How far to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Stop at the first bad record, as replay does. `newest`: the file a
    /// crash may have cut short.
    AsReplay { newest: bool },
    /// Report every damaged range; `newest` as above.
    Check { newest: bool },
}

/// Hands every readable record of `bytes` (the contents of `path`) to
/// `visit` with its offset, a batch's records one by one with the batch's
/// offset; returns the damage found.
pub fn scan(path: &Path, bytes: &[u8], mode: Mode, mut visit: impl FnMut(u64, Record<'_>)) -> Vec<Damage> {
    let (Mode::AsReplay { newest } | Mode::Check { newest }) = mode;
    let mut damage = Vec::new();
    let at_offset = |offset: usize, what: String, torn: bool| Damage {
        message: format!("{}:{offset}: {what}", path.display()),
        torn,
    };
    let header = &bytes[..bytes.len().min(HEADER_LEN)];
    if header.iter().all(|&b| b == 0) && is_zero(bytes) {
        // Created, but never written: nothing in it.
        return damage;
    }
    if bytes.len() < HEADER_LEN || !bytes.starts_with(record::MAGIC) {
        let torn = is_zero(&bytes[header.len()..]);
        let what = if torn {
            "the file header was cut short (a crash while the file was being made)"
        } else {
            "the file header is damaged"
        };
        damage.push(at_offset(0, what.into(), torn));
        return damage;
    }
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let bad = match next(bytes, at) {
            Step::Record(Record::Batch(batch), len) => {
                // A change of many jobs: its records, each as if alone.
                batch.records().for_each(|rec| visit(at as u64, rec));
                at += len;
                continue;
            }
            Step::Record(rec, len) => {
                visit(at as u64, rec);
                at += len;
                continue;
            }
            Step::End => return damage,
            Step::Bad(what) => what,
        };
        let resume = resume_after(bytes, at);
        let (message, torn) = match (resume, mode) {
            (Resume::Never, _) if newest => (
                format!(
                    "torn tail: {bad} at the end of the newest file (a write cut short by a crash, so \
                     never acknowledged); the next start truncates it"
                ),
                true,
            ),
            (Resume::Never, Mode::Check { .. }) => (
                format!(
                    "damaged: {bad}; nothing readable follows it, and as this is not the newest file \
                     it cannot be a write cut short by a crash"
                ),
                false,
            ),
            (Resume::At(p), Mode::Check { .. }) => {
                (format!("damaged: {bad}; {} bytes unreadable, records resume at offset {p}", p - at), false)
            }
            (Resume::GaveUp, Mode::Check { .. }) => {
                (format!("damaged: {bad}; where records resume could not be found"), false)
            }
            (_, Mode::AsReplay { .. }) => (
                format!(
                    "damaged: {bad}; a start keeps the records before it, cannot read the rest of the \
                     file, and keeps the file as {}.corrupt",
                    path.display()
                ),
                false,
            ),
        };
        damage.push(at_offset(at, message, torn));
        match (resume, mode) {
            (Resume::At(p), Mode::Check { .. }) => at = p,
            _ => return damage,
        }
    }
    damage
}

enum Step<'a> {
    Record(Record<'a>, usize),
    /// Zeros to the end of the file.
    End,
    /// Why the bytes at this offset are not a record.
    Bad(String),
}

/// The record at `at`, read with replay's rules.
fn next(bytes: &[u8], at: usize) -> Step<'_> {
    let rest = &bytes[at..];
    let Some(head) = rest.get(..RECORD_HEADER_LEN) else {
        return if is_zero(rest) { Step::End } else { Step::Bad("a record header cut short".into()) };
    };
    let (len, crc) =
        decode::parse_header([head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]]);
    if len == 0 && crc == 0 {
        return if is_zero(rest) {
            Step::End
        } else {
            Step::Bad("data after the zeros that end the records".into())
        };
    }
    if len == 0 || len > MAX_PAYLOAD {
        return Step::Bad(format!("a record length of {len}"));
    }
    let Some(payload) = rest.get(RECORD_HEADER_LEN..RECORD_HEADER_LEN + len) else {
        return Step::Bad(format!("a record of {len} bytes that runs past the end of the file"));
    };
    match decode::decode_payload(crc, payload) {
        Some(rec) => Step::Record(rec, RECORD_HEADER_LEN + len),
        None if record::crc32c(payload) != crc => Step::Bad("a record that fails its checksum".into()),
        None => Step::Bad("a record with a good checksum but impossible contents".into()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// A valid record starts here.
    At(usize),
    /// None does: a torn tail, if at the end of the newest file.
    Never,
    /// Looking cost too much (a body crafted to look like records).
    GaveUp,
}

/// Where the next valid record after the bad one at `bad` starts, searched
/// as replay searches (`replay::next_record`).
fn resume_after(bytes: &[u8], bad: usize) -> Resume {
    match replay::next_record(bytes, bad + 1).0 {
        NextRecord::At(at) => Resume::At(at),
        NextRecord::GaveUp => Resume::GaveUp,
        NextRecord::None => Resume::Never,
    }
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::record::JobState;

    fn file(jobs: &[u64]) -> Vec<u8> {
        let mut out = record::header().to_vec();
        for &id in jobs {
            record::encode_full(&mut out, &JobState::ready(id), 60, 0, b"default", b"body");
        }
        out
    }

    fn ids(bytes: &[u8], mode: Mode) -> (Vec<u64>, Vec<Damage>) {
        let mut seen = Vec::new();
        let damage = scan(Path::new("f"), bytes, mode, |_, r| {
            if let Record::Full { job, .. } = r {
                seen.push(job.id);
            }
        });
        (seen, damage)
    }

    #[test]
    fn a_clean_file_with_a_zero_tail_has_no_damage() {
        let mut bytes = file(&[1, 2, 3]);
        bytes.resize(bytes.len() + 4096, 0);
        assert_eq!(ids(&bytes, Mode::Check { newest: true }).0, [1, 2, 3]);
        assert!(ids(&bytes, Mode::Check { newest: true }).1.is_empty());
    }

    #[test]
    fn check_reports_each_damaged_range_and_reads_on() {
        let mut bytes = file(&[1, 2, 3]);
        let second = record::HEADER_LEN + record::full_len(7, 4);
        bytes[second + 20] ^= 0xff;
        let (seen, damage) = ids(&bytes, Mode::Check { newest: true });
        assert_eq!(seen, [1, 3]);
        assert_eq!(damage.len(), 1);
        assert!(damage[0].message.starts_with(&format!("f:{second}: damaged: a record that fails")));
        assert!(!damage[0].torn);
        let (seen, damage) = ids(&bytes, Mode::AsReplay { newest: true });
        assert_eq!((seen, damage.len()), (vec![1], 1));
    }

    #[test]
    fn a_record_cut_short_at_the_end_is_a_torn_tail_only_in_the_newest_file() {
        let mut bytes = file(&[1, 2]);
        bytes.truncate(bytes.len() - 3);
        let (seen, damage) = ids(&bytes, Mode::Check { newest: true });
        assert_eq!((seen, damage[0].torn), (vec![1], true));
        assert!(damage[0].message.contains("torn tail"), "{}", damage[0].message);
        assert!(!ids(&bytes, Mode::Check { newest: false }).1[0].torn);
    }
}
