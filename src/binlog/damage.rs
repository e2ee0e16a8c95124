//! Telling a torn tail from corruption: what a bad record in one of our
//! files means depends on what follows it. Nothing valid after it is a
//! write a crash cut short, which replay may cut off; a valid record after
//! it means corruption, and every byte is kept. Replay (`replay.rs`) and the
//! offline reader (`inspect/scan.rs`) both search this way.
//!
//! It reads and judges; it must not truncate, rename or otherwise change a
//! file: what to do about damage is replay's decision.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::decode;
use super::kind;
use super::record::{self, RECORD_HEADER_LEN};

/// What a bad record is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Bad {
    /// The file ends inside a record.
    Torn,
    /// A record fails its checksum or cannot be parsed.
    Corrupt,
}

/// Where and how reading one of our files stopped.
pub(super) enum FileEnd {
    /// Every record read; only zeros from `data_end` to `file_len`.
    Clean {
        data_end: u64,
        file_len: u64,
    },
    Bad {
        offset: u64,
        what: Bad,
    },
}

/// A bad record at `offset`: a torn tail if no valid record follows it
/// anywhere in the file (a write cut short, then zeros or the end of the
/// file), corruption otherwise (a damaged record with good ones after it,
/// which must not be thrown away, whatever its length field says).
///
/// Linear in the rest of the file: a candidate at each offset is first
/// checked for a consistent shape in O(1), and the checksums computed for
/// the candidates that pass are paid from a budget of a few times the bytes
/// looked at. A body can be crafted to look like records; if the budget
/// runs out, the answer is "corrupt", which keeps every byte (a torn tail
/// is cut off; a corrupt file is kept aside).
pub(super) fn classify(path: &Path, offset: u64) -> io::Result<FileEnd> {
    // A torn tail is at most one record; far more than that is not one.
    const LIMIT: u64 = 64 << 20;
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset.saturating_add(1)))?;
    let mut rest = Vec::new();
    file.take(LIMIT + 1).read_to_end(&mut rest)?;
    if rest.len() as u64 > LIMIT {
        return Ok(FileEnd::Bad { offset, what: Bad::Corrupt });
    }
    let (what, _) = what_follows(&rest);
    Ok(FileEnd::Bad { offset, what })
}

/// Whether a valid record starts anywhere in `rest` (then the damage
/// before it is corruption) or none does (a torn tail); and how many bytes
/// were checksummed to find out, which is at most a few times `rest.len()`.
fn what_follows(rest: &[u8]) -> (Bad, usize) {
    match next_record(rest, 0) {
        (NextRecord::At(_) | NextRecord::GaveUp, checksummed) => (Bad::Corrupt, checksummed),
        (NextRecord::None, checksummed) => (Bad::Torn, checksummed),
    }
}

/// What a search for a readable record after damage found.
pub(crate) enum NextRecord {
    /// A record with a valid checksum starts here.
    At(usize),
    /// Looking further would cost too much (a body crafted to look like
    /// records): assume one does.
    GaveUp,
    /// None starts anywhere after.
    None,
}

/// The first offset at or after `from` where a record with a valid
/// checksum starts, and how many bytes were checksummed to find it. Each
/// offset is checked for a record's shape in O(1); checksums are paid from
/// a budget of a few times the bytes looked at, so that a crafted body
/// cannot make the search quadratic.
pub(crate) fn next_record(bytes: &[u8], from: usize) -> (NextRecord, usize) {
    let mut budget = 4 * bytes.len().saturating_sub(from) + (1 << 20);
    let mut checksummed = 0;
    for at in from..bytes.len() {
        let Some(head) = bytes.get(at..at + RECORD_HEADER_LEN) else { break };
        let (len, crc) =
            decode::parse_header([head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]]);
        let payload_at = at + RECORD_HEADER_LEN;
        let Some(payload) = bytes.get(payload_at..payload_at.saturating_add(len)) else { continue };
        if len == 0 || !plausible_payload(payload) {
            continue;
        }
        if len > budget {
            return (NextRecord::GaveUp, checksummed);
        }
        budget -= len;
        checksummed += len;
        if decode::decode_payload(crc, payload).is_some() {
            return (NextRecord::At(at), checksummed);
        }
    }
    (NextRecord::None, checksummed)
}

/// Whether a payload has a record's shape: a known kind and the length that
/// kind, and for a full record its own tube and body lengths, imply. O(1);
/// a cheap filter before the checksum when looking for records in damage.
pub(super) fn plausible_payload(payload: &[u8]) -> bool {
    // Offset of a full record's tube length in its payload.
    const TUBE_LEN_AT: usize = record::FULL_FIXED_LEN - record::RECORD_HEADER_LEN - 4 - 1;
    let len = payload.len();
    match payload.first() {
        Some(&full_kind @ (kind::FULL | kind::KEYED_FULL | kind::TAGGED_FULL)) => {
            let Some(&tube_len) = payload.get(TUBE_LEN_AT) else { return false };
            let body_len_at = TUBE_LEN_AT + 1 + usize::from(tube_len);
            let Some(b) = payload.get(body_len_at..body_len_at + 4) else { return false };
            let body_end = body_len_at + 4 + u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            match full_kind {
                kind::FULL => len == body_end,
                kind::KEYED_FULL => {
                    payload.get(body_end + 4).is_some_and(|&key_len| len == body_end + key_len_of(key_len))
                }
                // Tags, then a key (bit 1), a limit (bit 2), a concurrency
                // key (bit 4), a group (bit 8), an after-group (bit 16),
                // each where the one before ends.
                _ => {
                    let Some(&tags) = payload.get(body_end) else { return false };
                    let mut at = body_end + 1;
                    if tags & 1 != 0 {
                        let Some(&key_len) = payload.get(at + 4) else { return false };
                        at += key_len_of(key_len);
                    }
                    at += if tags & 2 != 0 { 4 } else { 0 };
                    if tags & 4 != 0 {
                        let Some(&name_len) = payload.get(at + 4) else { return false };
                        at += 4 + 1 + usize::from(name_len);
                    }
                    for bit in [8, 16] {
                        if tags & bit != 0 {
                            let Some(&name_len) = payload.get(at) else { return false };
                            at += 1 + usize::from(name_len);
                        }
                    }
                    tags & 30 != 0 && tags & !31 == 0 && len == at
                }
            }
        }
        Some(2) => len == record::UPDATE_LEN - record::RECORD_HEADER_LEN,
        Some(3 | 4) => len == record::DELETE_LEN - record::RECORD_HEADER_LEN,
        Some(5) => len == 1 + 8 + 8 + 4,
        // A batch: at least one item's length and kind.
        Some(7) => len > 1 + 4,
        _ => false,
    }
}

/// [`record::key_len`] of a key whose length byte is `len`.
fn key_len_of(len: u8) -> usize {
    record::key_len(usize::from(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::record::JobState;

    #[test]
    fn a_valid_record_after_damage_means_corruption_and_none_a_torn_tail() {
        let mut good = Vec::new();
        record::encode_full(&mut good, &JobState::ready(1), 60, 0, b"t", b"body");
        let mut rest = vec![0xAB; 37];
        rest.extend_from_slice(&good);
        assert_eq!(what_follows(&rest).0, Bad::Corrupt);
        let torn = &good[..good.len() - 3];
        assert_eq!(what_follows(torn).0, Bad::Torn);
        assert_eq!(what_follows(&[0; 4096]).0, Bad::Torn);
    }

    /// A body crafted so that every offset looks like the start of a large
    /// record once cost a checksum of up to 64 KiB per byte: quadratic, and
    /// minutes for a big file. The work is now bounded by the budget.
    #[test]
    fn looking_past_damage_is_linear_even_in_a_crafted_body() {
        // At every offset: a length of 60_000 and a full record's shape
        // (kind 1, a tube length, a body length that adds up), repeated.
        let period = 64;
        let mut unit = vec![0u8; period];
        unit[..4].copy_from_slice(&60_000u32.to_le_bytes());
        unit[8] = 1;
        let rest: Vec<u8> = unit.iter().copied().cycle().take(1 << 20).collect();
        let (what, checksummed) = what_follows(&rest);
        assert_eq!(what, Bad::Torn);
        assert!(
            checksummed <= 4 * rest.len() + (1 << 20),
            "{checksummed} bytes checksummed for {}",
            rest.len()
        );
        // And a shape check that passes everywhere is paid from the budget.
        let mut crafted = Vec::new();
        for _ in 0..2000 {
            let mut payload = vec![1u8; 63 + 4];
            payload[58] = 0;
            payload[59..63].copy_from_slice(&4u32.to_le_bytes());
            let mut rec = (payload.len() as u32).to_le_bytes().to_vec();
            rec.extend_from_slice(&0u32.to_le_bytes());
            rec.extend_from_slice(&payload);
            crafted.extend_from_slice(&rec);
        }
        let (_, checksummed) = what_follows(&crafted);
        assert!(checksummed <= 4 * crafted.len() + (1 << 20));
    }
}
