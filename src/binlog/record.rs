//! The on-disk format of the binlog: file header, records, checksums.
//!
//! ```text
//! file    := header record* zero-padding
//! header  := "BSTKLOG\0" u32 version(=7)                       (12 bytes)
//! record  := u32 length u32 crc32c(payload) payload           (length = payload bytes, >= 1)
//! payload := u8 kind, then by kind:
//!   1 Full    id u64, pri u32, delay u32, ttr u32, state u8, created u64,
//!             deadline u64, counters 5 x u32, tube_len u8, tube, body_len u32, body
//!   2 Update  id u64, pri u32, delay u32, state u8, deadline u64, counters 5 x u32
//!   3 Delete  id u64
//!   4 NextId  id u64       (the next id to hand out; opens every file)
//!   5 Imported number u64, length u64, crc32c u32
//!             (beanstalkd's `binlog.<number>` with exactly this length and
//!             checksum was imported into this file: it is never imported
//!             again, see `import.rs`)
//!   6 KeyedFull  a Full record's fields, then cooldown u32, key_len u8, key
//!             (a job put with a unique key, reference §3.1a)
//!   7 Batch   item+, item := u32 length, payload of kind 1 to 6 or 8
//!             (a change of many jobs: its records, under one checksum)
//!   8 TaggedFull  a Full record's fields, then tags u8 (bit 1: a unique
//!             key, bit 2: a retry limit, bit 4: a concurrency key, bit 8:
//!             a group, bit 16: an after-group, bit 32: with bit 8, the
//!             group's run), then for bit 1 cooldown u32, key_len u8,
//!             key; for bit 2 reserves u32; for bit 4 limit u32,
//!             name_len u8, name; for bits 8 and 16 each name_len u8,
//!             name; for bit 32 run u64, the id of the member whose put
//!             began the group's run (a job put with a retry limit, a
//!             concurrency key or a group, reference §3.1b to §3.1d)
//! ```
//!
//! A batch (`kick`, `delete-batch`, a chunk of `clear-tube` or of
//! `flush-tube`) is all or
//! nothing on disk: one length, one checksum, so a write torn anywhere in
//! it fails the whole frame; its items carry no checksum of their own, so
//! none can pass for a record when replay or `check` looks past damage.
//!
//! Kind 6 is written only for jobs with a unique key, so a directory
//! written without keys reads as it always did. A keyed job's delete that
//! starts its key's cooldown is a change of state, not a Delete: its
//! record (full, or update) has `state` 4, *cooling*, with `deadline` the
//! cooldown's end (Unix ns), and an empty body: to replay and compaction
//! it is a live job, until the Delete that ends the cooldown.
//!
//! All integers are little-endian. Times are nanoseconds since the Unix
//! epoch, but for a buried job's `deadline`. `state` is 1 ready, 2
//! delayed, 3 buried (a reserved job is written as ready: that is what it
//! becomes after a restart; a job held for a group, reference §3.1d, is
//! written as delayed with `deadline` 0, no due time: a restart holds it
//! again if its group's run is still under way, as at a delay's end), 5
//! buried by its retry limit, a dead letter (reference §3.1b: the mark is
//! a fact of the burial, logged with it, never inferred at replay; else
//! as 3). `deadline` is when a delayed job becomes ready (Unix time), 0 for a
//! ready job, and for a (5 too) buried job when it was
//! buried, in the writing server's own clock (`time.rs`), unconverted:
//! it is only compared, the engine keeps those times strictly increasing,
//! even across restarts, and they give the order of the buried list after
//! a restart. A `length` of
//! zero marks the end of the data, which is how the preallocated zero tail of
//! a file reads. The format version is 7 ([`VERSION`]), bumped for any
//! record an older build cannot read; a reader refuses a version it does
//! not know, in one line, before it changes anything. Each version added:
//! 2 kind 6 and state 4, 3 kind 7, 4 kind 8, 5 its groups (bits 8 and 16),
//! 6 a group's run (bit 32) and held jobs written as delayed, 7 state 5.
//! Each is read as written, but before version 6 a held job was written
//! as ready, and before version 7 a dead letter as any buried job, so such
//! a record (and a group with no run) reads as those builds meant it
//! (`replay.rs`). `beanstalk-binlog downgrade` writes a version 2
//! directory that every build since version 2 reads.

pub use super::crc32c::crc32c;
use super::kind;
use super::reader::Reader;
use super::tags;
pub use super::tags::{key_len, tags_len, FullTags};
use crate::ids::JobId;
use crate::stats::Counters;

/// First bytes of every binlog file.
pub const MAGIC: &[u8; 8] = b"BSTKLOG\0";
/// The format version written.
pub const VERSION: u32 = 7;
/// The format versions read.
pub const READABLE_VERSIONS: [u32; 7] = [1, 2, 3, 4, 5, 6, 7];
/// The first version that writes a held job as held (`replay.rs`).
pub const HOLDS_VERSION: u32 = 6;
/// The first version that writes a dead letter's mark with its burial
/// (state 5, `replay.rs`).
pub const MARKS_VERSION: u32 = 7;
/// The newest version that builds before batches read (kinds 1 to 5; the
/// builds with unique keys kind 6 too): what `downgrade` writes.
pub const PREVIOUS_VERSION: u32 = 2;

/// [`READABLE_VERSIONS`] as messages name them.
pub const READABLE_VERSIONS_TEXT: &str = "versions 1 to 7";
/// Bytes of the file header.
pub const HEADER_LEN: usize = 12;
/// Bytes of a record's length and checksum.
pub const RECORD_HEADER_LEN: usize = 8;
/// Bytes of an encoded delete record.
pub const DELETE_LEN: usize = RECORD_HEADER_LEN + 1 + 8;
/// Bytes of an encoded update record.
pub const UPDATE_LEN: usize = RECORD_HEADER_LEN + 1 + 8 + 4 + 4 + 1 + 8 + 20;
/// Bytes a batch frame adds to its records: its own header and kind, less
/// the checksum each item goes without (so never more than this).
pub const BATCH_LEN: usize = RECORD_HEADER_LEN + 1;
/// Bytes of a full record without its tube name and body.
pub const FULL_FIXED_LEN: usize = RECORD_HEADER_LEN + 1 + 8 + 4 + 4 + 4 + 1 + 8 + 8 + 20 + 1 + 4;

/// Identifies one of beanstalkd's files by its exact contents: what an
/// `Imported` record stores, so that a file is never imported twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub number: u64,
    pub len: u64,
    pub crc: u32,
}

impl FileStamp {
    /// The stamp of `bytes`, the contents of `binlog.<number>`.
    pub fn of(number: u64, bytes: &[u8]) -> FileStamp {
        FileStamp { number, len: bytes.len() as u64, crc: crc32c(bytes) }
    }
}

/// A job's state as the log stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggedState {
    Ready = 1,
    Delayed = 2,
    Buried = 3,
    /// Deleted, its unique key cooling down until `deadline` (reference
    /// §3.1a): no job after a restart, only the key.
    Cooling = 4,
    /// Buried by its retry limit, and buried still: a dead letter
    /// (reference §3.1b), as [`LoggedState::Buried`] otherwise. Since
    /// [`MARKS_VERSION`].
    BuriedByLimit = 5,
}

/// A job's fields that change over its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobState {
    pub id: JobId,
    pub pri: u32,
    pub delay: u32,
    pub state: LoggedState,
    /// Delayed: when it becomes ready (Unix ns). Buried: when it was
    /// buried, in the server's own clock (only compared, for the buried
    /// list's order). Ready: 0.
    pub deadline: u64,
    pub counters: Counters,
}

/// One decoded record, borrowing the tube name and body from the bytes it
/// was decoded from (replay copies each body once, straight into the job).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// Kinds 1, 6 and 8: `tags` are the put's tags the job keeps (none
    /// in kind 1; a unique key in kind 6; any in kind 8).
    Full {
        job: JobState,
        ttr: u32,
        created: u64,
        tube: &'a [u8],
        body: &'a [u8],
        tags: FullTags<'a>,
    },
    Update(JobState),
    Delete(JobId),
    NextId(JobId),
    Imported(FileStamp),
    /// Kind 7: the records of one change of many jobs, each of them
    /// checked when the batch was decoded.
    Batch(Batch<'a>),
}

mod batch_items;
pub use batch_items::Batch;

/// Starts a batch frame at the end of `out`; returns where it starts, for
/// [`finish_batch`].
pub fn begin_batch(out: &mut Vec<u8>) -> usize {
    begin(out, kind::BATCH)
}

/// Appends one encoded record (as the `encode_*` functions write it) to the
/// batch being built in `out`: its length and payload, without its checksum,
/// which the frame's covers.
pub fn push_batch_item(out: &mut Vec<u8>, record: &[u8]) {
    out.extend_from_slice(&record[..4]);
    out.extend_from_slice(&record[RECORD_HEADER_LEN..]);
}

/// Ends the batch frame that starts at `start`: its length and checksum.
pub fn finish_batch(out: &mut [u8], start: usize) {
    finish(out, start);
}

/// Encodes the file header.
pub fn header() -> [u8; HEADER_LEN] {
    header_of(VERSION)
}

/// Encodes the header of a file of format `version`.
pub fn header_of(version: u32) -> [u8; HEADER_LEN] {
    let mut h = [0; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&version.to_le_bytes());
    h
}

/// Bytes a full record of this tube name and body length takes.
pub fn full_len(tube_len: usize, body_len: usize) -> usize {
    FULL_FIXED_LEN + tube_len + body_len
}

/// Appends a full record.
pub fn encode_full(out: &mut Vec<u8>, job: &JobState, ttr: u32, created: u64, tube: &[u8], body: &[u8]) {
    encode_full_tagged(out, job, ttr, created, tube, body, &FullTags::default());
}

/// Appends a full record of the kind its tags need ([`FullTags::kind`]).
pub fn encode_full_tagged(
    out: &mut Vec<u8>,
    job: &JobState,
    ttr: u32,
    created: u64,
    tube: &[u8],
    body: &[u8],
    tags: &FullTags<'_>,
) {
    let full_kind = tags.kind();
    let start = begin(out, full_kind);
    put_state_head(out, job);
    out.extend_from_slice(&ttr.to_le_bytes());
    out.push(job.state as u8);
    out.extend_from_slice(&created.to_le_bytes());
    out.extend_from_slice(&job.deadline.to_le_bytes());
    put_counters(out, &job.counters);
    // Tube names are at most 200 bytes.
    out.push(tube.len() as u8);
    out.extend_from_slice(tube);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    tags::put(out, full_kind, tags);
    finish(out, start);
}

/// Appends an update record.
pub fn encode_update(out: &mut Vec<u8>, job: &JobState) {
    let start = begin(out, kind::UPDATE);
    put_state_head(out, job);
    out.push(job.state as u8);
    out.extend_from_slice(&job.deadline.to_le_bytes());
    put_counters(out, &job.counters);
    finish(out, start);
}

/// Appends a delete record.
pub fn encode_delete(out: &mut Vec<u8>, id: JobId) {
    let start = begin(out, kind::DELETE);
    out.extend_from_slice(&id.to_le_bytes());
    finish(out, start);
}

/// Appends a next-id record.
pub fn encode_next_id(out: &mut Vec<u8>, id: JobId) {
    let start = begin(out, kind::NEXT_ID);
    out.extend_from_slice(&id.to_le_bytes());
    finish(out, start);
}

/// Appends an imported-file record.
pub fn encode_imported(out: &mut Vec<u8>, stamp: &FileStamp) {
    let start = begin(out, kind::IMPORTED);
    out.extend_from_slice(&stamp.number.to_le_bytes());
    out.extend_from_slice(&stamp.len.to_le_bytes());
    out.extend_from_slice(&stamp.crc.to_le_bytes());
    finish(out, start);
}

pub(super) fn begin(out: &mut Vec<u8>, kind: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER_LEN]);
    out.push(kind);
    start
}

pub(super) fn finish(out: &mut [u8], start: usize) {
    let payload = &out[start + RECORD_HEADER_LEN..];
    let len = payload.len() as u32;
    let crc = crc32c(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn put_state_head(out: &mut Vec<u8>, job: &JobState) {
    out.extend_from_slice(&job.id.to_le_bytes());
    out.extend_from_slice(&job.pri.to_le_bytes());
    out.extend_from_slice(&job.delay.to_le_bytes());
}

fn put_counters(out: &mut Vec<u8>, c: &Counters) {
    for n in [c.reserves, c.timeouts, c.releases, c.buries, c.kicks] {
        out.extend_from_slice(&n.to_le_bytes());
    }
}

pub(super) fn parse_payload(payload: &[u8]) -> Option<Record<'_>> {
    let mut r = Reader { bytes: payload };
    let record = match r.u8()? {
        full_kind @ (kind::FULL | kind::KEYED_FULL | kind::TAGGED_FULL) => {
            let (id, pri, delay, ttr) = (r.u64()?, r.u32()?, r.u32()?, r.u32()?);
            let state = read_state(&mut r)?;
            let (created, deadline, counters) = (r.u64()?, r.u64()?, read_counters(&mut r)?);
            let tube_len = r.u8()? as usize;
            let tube = r.take(tube_len)?;
            let body_len = r.u32()? as usize;
            let body = r.take(body_len)?;
            let job = JobState { id, pri, delay, state, deadline, counters };
            let tags = tags::read(&mut r, full_kind)?;
            Record::Full { job, ttr, created, tube, body, tags }
        }
        kind::UPDATE => {
            let (id, pri, delay, state) = (r.u64()?, r.u32()?, r.u32()?, read_state(&mut r)?);
            let (deadline, counters) = (r.u64()?, read_counters(&mut r)?);
            Record::Update(JobState { id, pri, delay, state, deadline, counters })
        }
        kind::DELETE => Record::Delete(r.u64()?),
        kind::NEXT_ID => Record::NextId(r.u64()?),
        kind::IMPORTED => Record::Imported(FileStamp { number: r.u64()?, len: r.u64()?, crc: r.u32()? }),
        kind::BATCH => Record::Batch(Batch::checked(std::mem::take(&mut r.bytes))?),
        _ => return None,
    };
    // Id 0 is never handed out and u64::MAX would leave no next id: a record
    // naming either was not written by us.
    let id_ok = match &record {
        Record::Full { job, .. } | Record::Update(job) => valid_id(job.id),
        Record::Delete(id) => valid_id(*id),
        Record::NextId(_) | Record::Imported(_) | Record::Batch(_) => true,
    };
    (id_ok && r.bytes.is_empty()).then_some(record)
}

/// A state byte.
fn read_state(r: &mut Reader<'_>) -> Option<LoggedState> {
    match r.u8()? {
        1 => Some(LoggedState::Ready),
        2 => Some(LoggedState::Delayed),
        3 => Some(LoggedState::Buried),
        4 => Some(LoggedState::Cooling),
        5 => Some(LoggedState::BuriedByLimit),
        _ => None,
    }
}

/// A job's five counters.
fn read_counters(r: &mut Reader<'_>) -> Option<Counters> {
    Some(Counters {
        reserves: r.u32()?,
        timeouts: r.u32()?,
        releases: r.u32()?,
        buries: r.u32()?,
        kicks: r.u32()?,
    })
}

fn valid_id(id: JobId) -> bool {
    id != 0 && id != JobId::MAX
}
