//! Replies: every reply the server sends, and its exact bytes. No state;
//! held to the same lints as the parser.
#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects, clippy::unwrap_used, clippy::expect_used)]

use crate::ids::JobId;

use super::TubeName;

/// Every reply the server sends (reference §1.6). Bodies are borrowed, so a
/// reply can be encoded straight out of the engine while its lock is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    Inserted(JobId),
    /// `INSERTED <id> <STATE>[ <pri>]`: a put whose unique key already
    /// names job `id` (tuber's reply, reference §3.1a): the job's state
    /// (`DELETED` while its key cools down), and the priority it was
    /// lowered to, if the put lowered it.
    Duplicate(JobId, NamedState, Option<u32>),
    /// `BURIED <id>`: a put whose job was buried instead of queued.
    BuriedJob(JobId),
    Buried,
    Reserved(JobId, Data<'a>),
    Found(JobId, Data<'a>),
    /// `OK <bytes>` and a YAML document.
    Ok(String),
    Using(&'a TubeName),
    /// `USING <mode>`, the answer to `reserve-mode` (tuber's).
    UsingMode(super::ReserveMode),
    Watching(usize),
    /// `KICKED <count>`, the answer to `kick`.
    KickedCount(u32),
    /// Plain `KICKED`, the answer to `kick-job`.
    Kicked,
    Deleted,
    Released,
    Touched,
    Paused,
    /// `MOVED`, the answer to `move-job`.
    Moved,
    /// `RESERVED_BATCH <count>`: the head of `reserve-batch`'s answer, a
    /// `RESERVED` reply for each job following it.
    ReservedBatch(usize),
    /// `DELETED_BATCH <deleted> <not found>`, the answer to `delete-batch`.
    DeletedBatch(usize, usize),
    /// `CLEARED <count>`, the answer to `clear-tube`.
    Cleared(u64),
    /// `FLUSHED <count>`, the answer to `flush-tube` and `flush-buried`
    /// (tuber's).
    Flushed(u64),
    /// `TOUCHED_ALL <count>`, the answer to `touch-all` (tuber's): the
    /// jobs its client holds, each touched.
    TouchedAll(u64),
    /// `KEY_TAKEN`: `move-job` of a job whose unique key the tube it would
    /// move to holds already (reference §3.1a).
    KeyTaken,
    NotFound,
    NotIgnored,
    DeadlineSoon,
    TimedOut,
    /// A `reserve-with-abort` called off by a byte from its client.
    Aborted,
    Draining,
    /// `NOT_DRAINING`, the answer to `undrain` (tuber's, reference §3.25).
    NotDraining,
    ExpectedCrlf,
    JobTooBig,
    BadFormat,
    UnknownCommand,
    OutOfMemory,
    InternalError,
    /// `NOT_PERMITTED`: an admin command on a listener that may not run
    /// it (`--admin-socket`, reference §3.0).
    NotPermitted,
}

/// A job's body in a reply: its bytes, or (`-b`, a body left in the log,
/// `engine/body.rs`) its length, written as that many zeros that the
/// connection fills in from the log once the engine's lock is let go
/// (`conn/body.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data<'a> {
    Bytes(&'a [u8]),
    ToRead(u32),
}

impl Data<'_> {
    pub fn len(&self) -> usize {
        match self {
            Data::Bytes(bytes) => bytes.len(),
            Data::ToRead(len) => *len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Reply<'_> {
    /// The job whose body this reply leaves to be read from the log, and
    /// the body's length.
    pub fn body_to_read(&self) -> Option<(JobId, usize)> {
        match self {
            Reply::Reserved(id, Data::ToRead(len)) | Reply::Found(id, Data::ToRead(len)) => {
                Some((*id, *len as usize))
            }
            _ => None,
        }
    }

    /// The job a `RESERVED` reply hands its client, if it is one.
    pub fn reserved_job(&self) -> Option<JobId> {
        match self {
            Reply::Reserved(id, _) => Some(*id),
            _ => None,
        }
    }

    /// Appends the reply's exact bytes to `out`: the header line, and for
    /// replies with data the data and its CRLF, so it all leaves in one write.
    pub fn encode(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        // The replies of the hot path are put together by hand (`line`):
        // `write!` takes a few hundred instructions to format one number.
        match self {
            Reply::Inserted(id) => line(out, "INSERTED", &[*id]),
            Reply::BuriedJob(id) => line(out, "BURIED", &[*id]),
            Reply::Reserved(id, body) => write_data(out, "RESERVED", Some(*id), *body),
            Reply::Found(id, body) => write_data(out, "FOUND", Some(*id), *body),
            Reply::Ok(yaml) => write_data(out, "OK", None, Data::Bytes(yaml.as_bytes())),
            Reply::Watching(n) => line(out, "WATCHING", &[*n as u64]),
            Reply::KickedCount(n) => line(out, "KICKED", &[u64::from(*n)]),
            Reply::ReservedBatch(n) => line(out, "RESERVED_BATCH", &[*n as u64]),
            Reply::DeletedBatch(deleted, not_found) => {
                line(out, "DELETED_BATCH", &[*deleted as u64, *not_found as u64])
            }
            Reply::Cleared(n) => line(out, "CLEARED", &[*n]),
            Reply::Flushed(n) => line(out, "FLUSHED", &[*n]),
            Reply::TouchedAll(n) => line(out, "TOUCHED_ALL", &[*n]),
            // Writing into a Vec cannot fail.
            Reply::Duplicate(id, state, None) => drop(write!(out, "INSERTED {id} {}\r\n", state.word())),
            Reply::Duplicate(id, state, Some(pri)) => {
                drop(write!(out, "INSERTED {id} {} {pri}\r\n", state.word()))
            }
            Reply::Using(tube) => drop(write!(out, "USING {tube}\r\n")),
            Reply::UsingMode(mode) => drop(write!(out, "USING {}\r\n", mode.name())),
            other => line(out, other.word(), &[]),
        }
    }

    /// The first word of the reply, as `-VV` logs it.
    pub fn word(&self) -> &'static str {
        match self {
            Reply::Inserted(_) | Reply::Duplicate(..) => "INSERTED",
            Reply::BuriedJob(_) | Reply::Buried => "BURIED",
            Reply::Reserved(..) => "RESERVED",
            Reply::Found(..) => "FOUND",
            Reply::Ok(_) => "OK",
            Reply::Using(_) | Reply::UsingMode(_) => "USING",
            Reply::Watching(_) => "WATCHING",
            Reply::KickedCount(_) | Reply::Kicked => "KICKED",
            Reply::Deleted => "DELETED",
            Reply::Released => "RELEASED",
            Reply::Touched => "TOUCHED",
            Reply::Paused => "PAUSED",
            Reply::Moved => "MOVED",
            Reply::ReservedBatch(_) => "RESERVED_BATCH",
            Reply::DeletedBatch(..) => "DELETED_BATCH",
            Reply::Cleared(_) => "CLEARED",
            Reply::Flushed(_) => "FLUSHED",
            Reply::TouchedAll(_) => "TOUCHED_ALL",
            Reply::KeyTaken => "KEY_TAKEN",
            Reply::NotFound => "NOT_FOUND",
            Reply::NotIgnored => "NOT_IGNORED",
            Reply::DeadlineSoon => "DEADLINE_SOON",
            Reply::TimedOut => "TIMED_OUT",
            Reply::Aborted => "ABORTED",
            Reply::Draining => "DRAINING",
            Reply::NotDraining => "NOT_DRAINING",
            Reply::ExpectedCrlf => "EXPECTED_CRLF",
            Reply::JobTooBig => "JOB_TOO_BIG",
            Reply::BadFormat => "BAD_FORMAT",
            Reply::UnknownCommand => "UNKNOWN_COMMAND",
            Reply::OutOfMemory => "OUT_OF_MEMORY",
            Reply::InternalError => "INTERNAL_ERROR",
            Reply::NotPermitted => "NOT_PERMITTED",
        }
    }
}

/// The state a put's unique key finds its job in (reference §3.1a). An
/// enum rather than the word, so that a [`Reply`] stays 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedState {
    Ready,
    Reserved,
    Delayed,
    Buried,
    /// The job is deleted; its key cools down.
    Deleted,
}

impl NamedState {
    /// The word tuber answers.
    pub fn word(self) -> &'static str {
        match self {
            NamedState::Ready => "READY",
            NamedState::Reserved => "RESERVED",
            NamedState::Delayed => "DELAYED",
            NamedState::Buried => "BURIED",
            NamedState::Deleted => "DELETED",
        }
    }
}

/// Where a reply is written, and the room it needs claimed before the
/// command that makes it changes anything (claim, then change): a
/// `reserve` claims room for the job's body before it reserves the job, so
/// a job is never reserved for a reply that cannot be written.
pub trait ReplyRoom {
    /// Makes sure `bytes` more bytes can be written without allocating;
    /// false if that memory cannot be had.
    fn claim(&mut self, bytes: usize) -> bool;
}

impl ReplyRoom for Vec<u8> {
    fn claim(&mut self, bytes: usize) -> bool {
        self.try_reserve(bytes).is_ok()
    }
}

/// The most bytes a reply carrying `data` bytes of data takes: the data,
/// its CRLF, and the longest header line (`RESERVED <20 digits> <10
/// digits>\r\n` is 42 bytes).
pub fn data_reply_len(data: usize) -> usize {
    data.saturating_add(64)
}

/// The most bytes any reply without data takes (`USING` and a 200-byte
/// name is the longest). The connection claims this much before each
/// command, so that such a reply never allocates.
pub const SHORT_REPLY_LEN: usize = 256;

fn write_data(out: &mut Vec<u8>, word: &str, id: Option<JobId>, data: Data<'_>) {
    // The data's size is a client's doing (a job's body): if room for it
    // cannot be had, that client is told so, and the server goes on.
    if !out.claim(data_reply_len(data.len())) {
        out.extend_from_slice(b"OUT_OF_MEMORY\r\n");
        return;
    }
    match id {
        Some(id) => line(out, word, &[id, data.len() as u64]),
        None => line(out, word, &[data.len() as u64]),
    }
    match data {
        Data::Bytes(bytes) => out.extend_from_slice(bytes),
        Data::ToRead(len) => out.resize(out.len().saturating_add(len as usize), 0),
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends a reply line: `word`, each of `numbers` after a space, CRLF.
fn line(out: &mut Vec<u8>, word: &str, numbers: &[u64]) {
    out.extend_from_slice(word.as_bytes());
    for &n in numbers {
        out.push(b' ');
        push_decimal(out, n);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal: its digits are made from the last, into a
/// buffer as long as the longest u64.
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    for slot in digits.iter_mut().rev() {
        // `n % 10` is a digit: the cast and the add cannot overflow.
        *slot = b'0'.wrapping_add((n % 10) as u8);
        n /= 10;
        start = start.wrapping_sub(1);
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn name(s: &str) -> TubeName {
        TubeName::new(s.as_bytes()).unwrap()
    }

    fn encoded(reply: Reply) -> String {
        let mut out = Vec::new();
        reply.encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replies_encode_exactly() {
        assert_eq!(encoded(Reply::Inserted(7)), "INSERTED 7\r\n");
        assert_eq!(encoded(Reply::Duplicate(7, NamedState::Ready, None)), "INSERTED 7 READY\r\n");
        assert_eq!(encoded(Reply::Duplicate(7, NamedState::Buried, Some(50))), "INSERTED 7 BURIED 50\r\n");
        assert_eq!(encoded(Reply::Duplicate(7, NamedState::Deleted, None)), "INSERTED 7 DELETED\r\n");
        assert_eq!(std::mem::size_of::<Reply<'_>>(), 32, "every reply is passed by value");
        assert_eq!(encoded(Reply::Reserved(3, Data::Bytes(b"a\r\nb"))), "RESERVED 3 4\r\na\r\nb\r\n");
        assert_eq!(encoded(Reply::Found(3, Data::Bytes(b""))), "FOUND 3 0\r\n\r\n");
        assert_eq!(encoded(Reply::Ok("---\n- default\n".into())), "OK 14\r\n---\n- default\n\r\n");
        assert_eq!(encoded(Reply::Using(&name("x"))), "USING x\r\n");
        assert_eq!(encoded(Reply::KickedCount(0)), "KICKED 0\r\n");
        assert_eq!(encoded(Reply::Kicked), "KICKED\r\n");
        assert_eq!(encoded(Reply::NotFound), "NOT_FOUND\r\n");
        assert_eq!(encoded(Reply::DeadlineSoon), "DEADLINE_SOON\r\n");
        assert_eq!(encoded(Reply::Aborted), "ABORTED\r\n");
        assert_eq!(encoded(Reply::DeletedBatch(12, 0)), "DELETED_BATCH 12 0\r\n");
        assert_eq!(encoded(Reply::BuriedJob(u64::MAX)), "BURIED 18446744073709551615\r\n");
        assert_eq!(encoded(Reply::Cleared(10)), "CLEARED 10\r\n");
        assert_eq!(encoded(Reply::TouchedAll(0)), "TOUCHED_ALL 0\r\n");
        assert_eq!(encoded(Reply::TouchedAll(600)), "TOUCHED_ALL 600\r\n");
    }

    #[test]
    fn numbers_are_written_as_display_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 4096, 1 << 32, u64::MAX / 10, u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
