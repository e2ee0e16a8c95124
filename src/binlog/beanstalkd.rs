//! Reading beanstalkd's own binlog, so that switching servers loses no job.
//!
//! beanstalkd writes C structs as they lie in memory (little-endian on the
//! machines it runs on). A file is an `int32` version, then records, then
//! the zeros the file was preallocated with:
//!
//! ```text
//! version 7 (beanstalkd 1.5 and later)
//!   record := i32 namelen, name[namelen], Jobrec (80 bytes), body[body_size] if namelen > 0
//! version 5 (beanstalkd 1.4.x)
//!   record := u64 namelen, name[namelen], Jobrec (its first 77 bytes), body[body_size] if namelen > 0
//!
//! Jobrec: @0 u64 id  @8 u32 pri  @16 i64 delay  @24 i64 ttr  @32 i32 body_size (body + CRLF)
//!         @40 i64 created_at  @48 i64 deadline_at (Unix epoch)
//!         @56 u32 reserves, timeouts, releases, buries, kicks  @76 u8 state
//! times:  nanoseconds in version 7, microseconds in version 5
//! state:  0 deleted, 1 ready, 2 reserved, 3 buried, 4 delayed
//! ```
//!
//! A record with a name is a job's full record (put, or moved by
//! beanstalkd's compaction); without one it is an update of a job seen
//! before. The files are read oldest first with beanstalkd's own rules: a
//! job's last record wins, a reserved job comes back ready, an update for a
//! job whose full record is gone is ignored, and a record with id 0 is the
//! zero tail.
//!
//! Where beanstalkd gives up, this reader does not. beanstalkd drops any job
//! bigger than the current `-z` (its limit is off by two, so it drops jobs
//! of exactly `-z` bytes too) and stops reading the file there; here every
//! job is kept, whatever its size. A damaged record costs only itself: it is
//! reported with its file and offset, and reading resumes at the next byte
//! where a record that makes sense begins. The format has no checksums, so
//! "makes sense" is strict: a full record needs a legal tube name, a known
//! state and a body that ends in CRLF; an update needs a job already seen,
//! with the same body size.
//!
//! This module only reads; [`super::import`] decides what happens to the
//! jobs and the files.

use std::collections::HashMap;
use std::path::Path;

use super::dir::{TheirFile, Theirs};
use super::record::FileStamp;
use crate::ids::JobId;
use crate::protocol::TubeName;
use crate::stats::Counters;

/// A job as beanstalkd's records left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TheirJob {
    pub id: JobId,
    pub tube: TubeName,
    pub pri: u32,
    /// Seconds.
    pub delay: u32,
    /// Seconds, at least 1.
    pub ttr: u32,
    pub state: TheirState,
    /// Unix nanoseconds.
    pub created: u64,
    /// When a delayed job becomes ready, in Unix nanoseconds.
    pub deadline: u64,
    pub counters: Counters,
    /// Without the trailing CRLF.
    pub body: Box<[u8]>,
    /// Which record came last: buried jobs keep this order.
    pub order: u64,
    /// The number of the file holding its latest full record: the file it
    /// keeps beanstalkd from deleting.
    pub file: u64,
}

/// The states a job can come back in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TheirState {
    Ready,
    Buried,
    Delayed,
}

/// What a set of beanstalkd files holds.
#[derive(Debug, Default)]
pub struct TheirLog {
    /// Live jobs, in the order of their last record.
    pub jobs: Vec<TheirJob>,
    /// The highest id any record names (0 if none).
    pub max_id: JobId,
    /// Per file, its number, length and checksum: what an import records so
    /// that the same file is never imported twice.
    pub files: Vec<FileStamp>,
    /// Damage found, for the operator.
    pub warnings: Vec<String>,
}

/// The fixed part of a record, decoded.
#[derive(Debug, Clone, Copy)]
struct Jobrec {
    id: JobId,
    pri: u32,
    delay: i64,
    ttr: i64,
    body_size: i32,
    created: i64,
    deadline: i64,
    counters: Counters,
    state: u8,
}

/// What was found at one offset.
enum Found<'a> {
    Record {
        name: Option<&'a [u8]>,
        rec: Jobrec,
        body: Option<&'a [u8]>,
        next: usize,
    },
    /// Zeros from here to the end of the file.
    End,
    /// The file ends inside a record.
    Torn,
    /// Not a record.
    Bad(String),
}

/// The byte layout of one version.
#[derive(Clone, Copy)]
struct Layout {
    namelen_size: usize,
    jobrec_size: usize,
    /// Multiply stored times by this to get nanoseconds.
    to_nanos: i64,
}

const V7: Layout = Layout { namelen_size: 4, jobrec_size: 80, to_nanos: 1 };
const V5: Layout = Layout { namelen_size: 8, jobrec_size: 77, to_nanos: 1000 };
/// beanstalkd's longest tube name.
const MAX_NAME: u64 = 200;

/// Reads `files` (oldest first, each with its contents) with beanstalkd's
/// rules.
pub fn read(files: &[(&TheirFile, Vec<u8>)]) -> TheirLog {
    let mut reader = Reader::default();
    for (file, bytes) in files {
        reader.log.files.push(FileStamp::of(file.number, bytes));
        let layout = match file.format {
            Theirs::V7 => V7,
            Theirs::V5 => V5,
            Theirs::Empty => continue,
        };
        reader.file = file.number;
        reader.read_file(&file.path, bytes, layout);
    }
    reader.finish()
}

/// Reads beanstalkd's files one at a time, oldest first, with the rules of
/// [`read`], so that only one file's bytes are in memory at once (what the
/// offline tool, `beanstalk-binlog`, needs for a directory of many files).
#[derive(Default)]
pub struct FileByFile {
    reader: Reader,
}

impl FileByFile {
    /// Reads one file (`bytes` is its contents); returns whether it ends in
    /// a record cut short (a torn tail). Its damage is added to the
    /// warnings.
    pub fn file(&mut self, file: &TheirFile, bytes: &[u8]) -> bool {
        self.reader.file = file.number;
        self.reader.log.files.push(FileStamp::of(file.number, bytes));
        let layout = match file.format {
            Theirs::V7 => V7,
            Theirs::V5 => V5,
            Theirs::Empty => return false,
        };
        self.reader.read_file(&file.path, bytes, layout)
    }

    /// The warnings so far.
    pub fn warnings(&self) -> &[String] {
        &self.reader.log.warnings
    }

    /// The live jobs, in the order of their last record. Sorted rather than
    /// placed by record number, so memory follows the live jobs only.
    pub fn finish(self) -> TheirLog {
        let Reader { jobs, mut log, .. } = self.reader;
        log.jobs = jobs.into_values().collect();
        log.jobs.sort_unstable_by_key(|job| job.order);
        log
    }
}

#[derive(Default)]
struct Reader {
    jobs: HashMap<JobId, TheirJob>,
    next_order: u64,
    log: TheirLog,
    /// The number of the file being read.
    file: u64,
}

impl Reader {
    /// Returns whether the file ends in a torn record.
    fn read_file(&mut self, path: &Path, bytes: &[u8], layout: Layout) -> bool {
        // Everything past this offset is zero: the preallocated tail.
        let data_end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let mut at = 4;
        while at < bytes.len() {
            match self.find(bytes, at, data_end, layout) {
                Found::Record { name, rec, body, next } => {
                    self.apply(name, rec, body);
                    at = next;
                }
                Found::End => return false,
                Found::Torn => {
                    self.log.warnings.push(format!(
                        "{}:{at}: the last record is cut short (a write interrupted by a crash); it is lost",
                        path.display()
                    ));
                    return true;
                }
                Found::Bad(why) => {
                    let resumed = (at + 1..data_end).find(|&p| self.makes_sense(bytes, p, data_end, layout));
                    let then = match resumed {
                        Some(p) => format!("reading resumes at offset {p}"),
                        None => "nothing readable follows it".into(),
                    };
                    self.log.warnings.push(format!(
                        "{}:{at}: damaged record ({why}); it is skipped and {then}",
                        path.display()
                    ));
                    match resumed {
                        Some(p) => at = p,
                        None => return false,
                    }
                }
            }
        }
        false
    }

    /// Decodes the record at `at`.
    fn find<'a>(&self, bytes: &'a [u8], at: usize, data_end: usize, layout: Layout) -> Found<'a> {
        if at >= data_end {
            return Found::End;
        }
        let Some(len_bytes) = bytes.get(at..at + layout.namelen_size) else { return Found::Torn };
        let namelen = if layout.namelen_size == 4 {
            i64::from(i32::from_le_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]))
        } else {
            // A u64 above i64::MAX reads as negative: out of range all the same.
            i64::from_le_bytes(array(len_bytes))
        };
        if namelen < 0 || namelen as u64 > MAX_NAME {
            return Found::Bad(format!("tube name length {namelen}"));
        }
        let name_at = at + layout.namelen_size;
        let rec_at = name_at + namelen as usize;
        let Some(name) = bytes.get(name_at..rec_at) else { return Found::Torn };
        let Some(raw) = bytes.get(rec_at..rec_at + layout.jobrec_size) else { return Found::Torn };
        let rec = decode_jobrec(raw);
        if rec.id == 0 {
            return if namelen == 0 {
                Found::Bad("data after the zero record".into())
            } else {
                Found::Bad("job id 0".into())
            };
        }
        if rec.state > 4 {
            return Found::Bad(format!("job {} has unknown state {}", rec.id, rec.state));
        }
        let body_at = rec_at + layout.jobrec_size;
        if namelen == 0 {
            return Found::Record { name: None, rec, body: None, next: body_at };
        }
        if TubeName::new(name).is_none() {
            return Found::Bad(format!("job {} has an illegal tube name", rec.id));
        }
        if rec.body_size < 2 {
            return Found::Bad(format!("job {} has body size {}", rec.id, rec.body_size));
        }
        let Some(body) = bytes.get(body_at..body_at + rec.body_size as usize) else { return Found::Torn };
        if !body.ends_with(b"\r\n") {
            return Found::Bad(format!("job {}'s body does not end in CRLF", rec.id));
        }
        Found::Record { name: Some(name), rec, body: Some(body), next: body_at + body.len() }
    }

    /// Whether a record that can be trusted starts at `at`: used to find
    /// where to resume after damage.
    fn makes_sense(&self, bytes: &[u8], at: usize, data_end: usize, layout: Layout) -> bool {
        match self.find(bytes, at, data_end, layout) {
            Found::Record { name: Some(_), .. } => true,
            Found::Record { name: None, rec, .. } => self
                .jobs
                .get(&rec.id)
                .is_some_and(|job| i64::from(rec.body_size) == job.body.len() as i64 + 2),
            _ => false,
        }
    }

    /// One record, by beanstalkd's rules.
    fn apply(&mut self, name: Option<&[u8]>, rec: Jobrec, body: Option<&[u8]>) {
        self.log.max_id = self.log.max_id.max(rec.id);
        let state = match rec.state {
            1 | 2 => TheirState::Ready,
            3 => TheirState::Buried,
            4 => TheirState::Delayed,
            _ => {
                self.jobs.remove(&rec.id);
                return;
            }
        };
        let order = self.next_order;
        self.next_order += 1;
        let secs = |t: i64| u32::try_from(t.max(0) / 1_000_000_000).unwrap_or(u32::MAX);
        let nanos = |t: i64| t.max(0).unsigned_abs();
        let (tube, body, file) = match (name, body, self.jobs.remove(&rec.id)) {
            (Some(name), Some(body), _) => match TubeName::new(name) {
                Some(tube) => (tube, Box::from(&body[..body.len() - 2]), self.file),
                None => return,
            },
            // An update of a job whose full record is gone: ignored.
            (None, _, None) => return,
            (None, _, Some(job)) => (job.tube, job.body, job.file),
            (Some(_), None, _) => return,
        };
        let job = TheirJob {
            file,
            id: rec.id,
            tube,
            pri: rec.pri,
            delay: secs(rec.delay),
            ttr: secs(rec.ttr).max(1),
            state,
            created: nanos(rec.created),
            deadline: nanos(rec.deadline),
            counters: rec.counters,
            body,
            order,
        };
        self.jobs.insert(rec.id, job);
    }

    fn finish(mut self) -> TheirLog {
        // Each record had its own order number: place each job at its last
        // record's, then close the gaps.
        let mut in_order: Vec<Option<TheirJob>> = Vec::new();
        in_order.resize_with(self.next_order as usize, || None);
        for job in self.jobs.into_values() {
            let at = job.order as usize;
            if let Some(slot) = in_order.get_mut(at) {
                *slot = Some(job);
            }
        }
        self.log.jobs = in_order.into_iter().flatten().collect();
        self.log
    }
}

/// Decodes a Jobrec of either version; times come out in nanoseconds.
fn decode_jobrec(raw: &[u8]) -> Jobrec {
    let u32_at = |at: usize| u32::from_le_bytes(array(&raw[at..at + 4]));
    let i64_at = |at: usize| i64::from_le_bytes(array(&raw[at..at + 8]));
    let to_nanos = if raw.len() == V7.jobrec_size { V7.to_nanos } else { V5.to_nanos };
    let nanos = |at: usize| i64_at(at).saturating_mul(to_nanos);
    Jobrec {
        id: u64::from_le_bytes(array(&raw[0..8])),
        pri: u32_at(8),
        delay: nanos(16),
        ttr: nanos(24),
        body_size: u32_at(32) as i32,
        created: nanos(40),
        deadline: nanos(48),
        counters: Counters {
            reserves: u32_at(56),
            timeouts: u32_at(60),
            releases: u32_at(64),
            buries: u32_at(68),
            kicks: u32_at(72),
        },
        state: raw[76],
    }
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[..N]);
    out
}
