//! Reading records back: where a record starts and ends in a file's
//! bytes, its checksum, and what its payload says (`record.rs` owns the
//! layout). Replay, the offline reader and the search for records past
//! damage all read through here.

use super::record::{crc32c, parse_payload, Record, RECORD_HEADER_LEN};

/// What [`decode`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A record and the bytes it took.
    Record(Record<'a>, usize),
    /// A zero length: no more records in this file.
    End,
    /// Not enough bytes for the record the header announces.
    Truncated,
    /// The checksum or the contents are wrong.
    Corrupt,
}

/// Splits a record header into the payload length and its checksum.
pub fn parse_header(head: [u8; RECORD_HEADER_LEN]) -> (usize, u32) {
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    (len, u32::from_le_bytes([head[4], head[5], head[6], head[7]]))
}

/// Decodes a payload whose header announced checksum `crc`; `None` if the
/// checksum or the contents are wrong.
pub fn decode_payload(crc: u32, payload: &[u8]) -> Option<Record<'_>> {
    if crc32c(payload) != crc {
        return None;
    }
    parse_payload(payload)
}

/// Decodes the record at the start of `bytes`.
pub fn decode(bytes: &[u8]) -> Decoded<'_> {
    let Some(head) = bytes.get(..RECORD_HEADER_LEN) else {
        return if bytes.iter().all(|&b| b == 0) { Decoded::End } else { Decoded::Truncated };
    };
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len == 0 {
        return Decoded::End;
    }
    let Some(payload) = bytes.get(RECORD_HEADER_LEN..RECORD_HEADER_LEN + len) else {
        return Decoded::Truncated;
    };
    if crc32c(payload) != crc {
        return Decoded::Corrupt;
    }
    match parse_payload(payload) {
        Some(record) => Decoded::Record(record, RECORD_HEADER_LEN + len),
        None => Decoded::Corrupt,
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::*;
    use super::*;
    use crate::ids::JobId;
    use crate::stats::Counters;

    impl JobState {
        /// A ready job of priority 0 that nothing has happened to: the record
        /// tests here and elsewhere in the binlog write when only the id matters.
        pub(crate) fn ready(id: JobId) -> JobState {
            JobState {
                id,
                pri: 0,
                delay: 0,
                state: LoggedState::Ready,
                deadline: 0,
                counters: Counters::default(),
            }
        }
    }

    fn state() -> JobState {
        JobState {
            id: 7,
            pri: 1024,
            delay: 5,
            state: LoggedState::Delayed,
            deadline: 1_700_000_000_000_000_000,
            counters: Counters { reserves: 1, timeouts: 2, releases: 3, buries: 4, kicks: 5 },
        }
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn every_record_round_trips_with_its_advertised_length() {
        let mut out = Vec::new();
        encode_full(&mut out, &state(), 60, 42, b"tube", b"body\r\nwith\0bytes");
        assert_eq!(out.len(), full_len(4, 16));
        let full_end = out.len();
        encode_update(&mut out, &state());
        assert_eq!(out.len() - full_end, UPDATE_LEN);
        encode_delete(&mut out, 7);
        encode_next_id(&mut out, 8);
        let stamp = FileStamp { number: 3, len: 4096, crc: 0xdead_beef };
        encode_imported(&mut out, &stamp);
        out.extend_from_slice(&[0; 32]);

        let mut at = 0;
        let mut records = Vec::new();
        while let Decoded::Record(record, used) = decode(&out[at..]) {
            records.push(record);
            at += used;
        }
        assert_eq!(decode(&out[at..]), Decoded::End);
        assert_eq!(
            records,
            [
                Record::Full {
                    job: state(),
                    ttr: 60,
                    created: 42,
                    tube: b"tube",
                    body: b"body\r\nwith\0bytes",
                    tags: FullTags::default(),
                },
                Record::Update(state()),
                Record::Delete(7),
                Record::NextId(8),
                Record::Imported(stamp),
            ]
        );
        assert_eq!(at, full_end + UPDATE_LEN + DELETE_LEN + DELETE_LEN + RECORD_HEADER_LEN + 21);
    }

    #[test]
    fn a_cut_record_is_truncated_and_a_flipped_bit_is_corrupt() {
        let mut out = Vec::new();
        encode_full(&mut out, &state(), 60, 42, b"t", b"hello");
        for cut in 1..out.len() {
            assert!(matches!(decode(&out[..cut]), Decoded::Truncated), "cut at {cut}");
        }
        every_flipped_bit_is_corrupt(&out);
    }

    /// Kind 8: a retry limit, a concurrency key, a group or an
    /// after-group, with the others and a unique key or without, reads
    /// back as written, and a tags byte this
    /// build does not know is damage.
    #[test]
    fn a_full_record_with_a_retry_limit_or_a_concurrency_key_round_trips() {
        let key = Some((&b"report"[..], 300));
        let con = Some((&b"api"[..], 3));
        for tags in [
            FullTags { key: None, limit: Some(5), con: None, ..FullTags::default() },
            FullTags { key, limit: Some(5), con: None, ..FullTags::default() },
            FullTags { key: None, limit: None, con, ..FullTags::default() },
            FullTags { key, limit: Some(0), con, ..FullTags::default() },
            FullTags { group: Some(b"batch"), ..FullTags::default() },
            FullTags { after: Some(b"batch"), ..FullTags::default() },
            FullTags { key, limit: Some(2), con, group: Some(b"g"), after: Some(b"h"), run: 7 },
        ] {
            let mut out = Vec::new();
            encode_full_tagged(&mut out, &state(), 60, 42, b"tube", b"body", &tags);
            assert_eq!(out[RECORD_HEADER_LEN], 8);
            let expected =
                Record::Full { job: state(), ttr: 60, created: 42, tube: b"tube", body: b"body", tags };
            assert_eq!(decode(&out), Decoded::Record(expected, out.len()));
            assert_eq!(out.len(), full_len(4, 4) + tags_len(&tags));
            every_flipped_bit_is_corrupt(&out);
        }
        // 34: a run without a group; 66: a flag no version has.
        for tags in [0u8, 1, 8, 10, 34, 66] {
            let mut out = Vec::new();
            let limited = FullTags { limit: Some(5), ..FullTags::default() };
            encode_full_tagged(&mut out, &state(), 60, 42, b"t", b"b", &limited);
            let at = out.len() - 5;
            out[at] = tags;
            let start = 0;
            super::super::record::finish(&mut out, start);
            assert_eq!(decode(&out), Decoded::Corrupt, "tags {tags}");
        }
    }

    /// Each single bit flipped in `record`'s payload fails its checksum.
    fn every_flipped_bit_is_corrupt(record: &[u8]) {
        for bit in 0..(record.len() - RECORD_HEADER_LEN) * 8 {
            let mut bad = record.to_vec();
            bad[RECORD_HEADER_LEN + bit / 8] ^= 1 << (bit % 8);
            assert_eq!(decode(&bad), Decoded::Corrupt, "bit {bit}");
        }
    }

    /// Random bytes, and real records with random damage, never make the
    /// decoder panic or claim more bytes than it was given.
    #[test]
    fn decoding_garbage_never_panics() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut valid = Vec::new();
        encode_full(&mut valid, &state(), 60, 42, b"tube", b"body");
        encode_update(&mut valid, &state());
        for round in 0..20_000 {
            let mut bytes = if round % 2 == 0 {
                (0..next() % 200).map(|_| next() as u8).collect::<Vec<u8>>()
            } else {
                valid.clone()
            };
            for _ in 0..1 + next() % 4 {
                if !bytes.is_empty() {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] = next() as u8;
                }
            }
            bytes.truncate((next() % (bytes.len() as u64 + 1)) as usize);
            if let Decoded::Record(_, used) = decode(&bytes) {
                assert!(used <= bytes.len());
            }
        }
    }

    #[test]
    fn the_layout_is_pinned_byte_for_byte() {
        let mut out = Vec::new();
        encode_delete(&mut out, 0x0102);
        let payload = [3, 0x02, 0x01, 0, 0, 0, 0, 0, 0];
        let mut expected = vec![9, 0, 0, 0];
        expected.extend_from_slice(&crc32c(&payload).to_le_bytes());
        expected.extend_from_slice(&payload);
        assert_eq!(out, expected);
        assert_eq!(&header(), b"BSTKLOG\0\x07\0\0\0");
        // A dead letter's burial: state 5, after the id, pri and delay.
        let dead = JobState { state: LoggedState::BuriedByLimit, ..state() };
        let mut out = Vec::new();
        encode_update(&mut out, &dead);
        assert_eq!(out[RECORD_HEADER_LEN + 1 + 8 + 4 + 4], 5);
        assert!(matches!(decode(&out), Decoded::Record(Record::Update(back), _) if back == dead));
    }

    /// A batch frame of a delete, an update and a full record.
    fn batch() -> Vec<u8> {
        let mut one = Vec::new();
        let mut out = Vec::new();
        let start = begin_batch(&mut out);
        encode_delete(&mut one, 3);
        encode_update(&mut one, &state());
        encode_full(&mut one, &state(), 60, 42, b"t", b"body");
        let mut at = 0;
        while let Decoded::Record(_, used) = decode(&one[at..]) {
            push_batch_item(&mut out, &one[at..at + used]);
            at += used;
        }
        finish_batch(&mut out, start);
        out
    }

    #[test]
    fn a_batch_reads_back_its_records_in_order() {
        let out = batch();
        let Decoded::Record(Record::Batch(batch), used) = decode(&out) else { panic!("not a batch") };
        assert_eq!(used, out.len());
        let kinds: Vec<_> = batch
            .records()
            .map(|r| match r {
                Record::Delete(3) => "delete",
                Record::Update(s) if s == state() => "update",
                Record::Full { body: b"body", .. } => "full",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["delete", "update", "full"]);
        // Each item saves its checksum's 4 bytes; the frame adds its own.
        assert_eq!(out.len(), BATCH_LEN + DELETE_LEN + UPDATE_LEN + full_len(1, 4) - 3 * 4);
    }

    /// A batch cut anywhere is truncated, and no byte flip passes: none of
    /// its records can be read on its own.
    #[test]
    fn a_cut_or_damaged_batch_yields_none_of_its_records() {
        let out = batch();
        for cut in 1..out.len() {
            assert!(matches!(decode(&out[..cut]), Decoded::Truncated), "cut at {cut}");
            for at in 1..cut {
                assert!(!matches!(decode(&out[at..cut]), Decoded::Record(..)), "cut at {cut}, read at {at}");
            }
        }
        every_flipped_bit_is_corrupt(&out);
    }

    /// A frame inside a frame is refused before it is parsed: bytes shaped
    /// like frames within frames (a body can be) cannot recurse.
    #[test]
    fn a_frame_holding_a_frame_is_corrupt() {
        let mut inner = batch();
        for _ in 0..3 {
            let mut outer = Vec::new();
            let start = begin_batch(&mut outer);
            push_batch_item(&mut outer, &inner);
            finish_batch(&mut outer, start);
            assert_eq!(decode(&outer), Decoded::Corrupt);
            inner = outer;
        }
    }

    #[test]
    fn records_naming_impossible_ids_are_rejected() {
        for id in [0, u64::MAX] {
            let mut out = Vec::new();
            encode_delete(&mut out, id);
            assert_eq!(decode(&out), Decoded::Corrupt);
        }
    }

    #[test]
    fn every_record_has_a_plausible_shape() {
        let mut out = Vec::new();
        encode_full(&mut out, &state(), 60, 42, b"tube", b"body");
        encode_update(&mut out, &state());
        encode_delete(&mut out, 7);
        encode_imported(&mut out, &FileStamp { number: 1, len: 2, crc: 3 });
        let (key, con) = (Some((&b"key"[..], 9)), Some((&b"c"[..], 2)));
        for tags in [
            FullTags { key, limit: None, con: None, ..FullTags::default() },
            FullTags { key: None, limit: Some(3), con: None, ..FullTags::default() },
            FullTags { key, limit: Some(0), con: None, ..FullTags::default() },
            FullTags { key: None, limit: None, con, ..FullTags::default() },
            FullTags { key, limit: Some(1), con, ..FullTags::default() },
            FullTags { key, group: Some(b"g"), after: Some(b"a"), ..FullTags::default() },
        ] {
            encode_full_tagged(&mut out, &state(), 60, 42, b"tube", b"body", &tags);
        }
        let mut at = 0;
        while let Decoded::Record(_, used) = decode(&out[at..]) {
            assert!(super::super::damage::plausible_payload(&out[at + RECORD_HEADER_LEN..at + used]));
            assert!(!super::super::damage::plausible_payload(&out[at + RECORD_HEADER_LEN..at + used - 1]));
            at += used;
        }
        assert_eq!(at, out.len());
    }

    #[test]
    fn zeros_read_as_the_end() {
        assert_eq!(decode(&[0; 100]), Decoded::End);
        assert_eq!(decode(&[0; 3]), Decoded::End);
        assert_eq!(decode(&[]), Decoded::End);
    }
}
