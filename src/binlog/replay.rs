//! Reading our log back at start-up: every file in order, every record
//! applied, so that each job ends in its last logged state.
//!
//! A record that fails its checksum ends the file it is in. If only zeros
//! follow it in the newest file, it is a torn write from a crash (the record
//! was being written when the process or the machine died, so it was never
//! acknowledged by a `-f0` server): the file is truncated there, with a
//! warning. Anything else is corruption: the file and offset are reported,
//! every record before it is kept, the readable jobs are rewritten into the
//! new file at start-up, and the file itself is kept on disk (renamed
//! `beanstalk.N.corrupt` when it becomes the oldest file). A file's zero
//! tail, preallocated by a run that then crashed, is cut off, so a server
//! that restarts over and over does not leave a full-size file each time.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::dir::{read_up_to, rest_is_zero};
use super::record::FileStamp;
use super::record::{self, JobState, LoggedState, Record, HEADER_LEN, RECORD_HEADER_LEN};
use crate::engine::{IdMap, JobId, RestoredJob, RestoredState};
use crate::protocol::TubeName;
use crate::time::{Clock, Time};

/// Largest payload a record can have: a 1 GiB body plus the fixed fields.
const MAX_PAYLOAD: usize = (1 << 30) + 1024;

/// What replaying a directory produced.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Tube names, which the jobs refer to by index.
    pub tubes: Vec<TubeName>,
    pub jobs: Vec<RestoredJob>,
    /// One more than the largest id any record mentions.
    pub next_id: JobId,
    /// File numbers found, oldest first.
    pub files: Vec<u32>,
    /// Files with unreadable records: their live jobs must be rewritten.
    pub corrupt: Vec<u32>,
    /// For each file, the older files its records supersede something in
    /// (see the binlog module docs on deleting files).
    pub refers_to: HashMap<u32, BTreeSet<u32>>,
    /// beanstalkd files already imported (see `import.rs`); a handful at
    /// most.
    pub imported: Vec<FileStamp>,
    /// Messages for the operator.
    pub warnings: Vec<String>,
}

/// A job as the records seen so far describe it.
struct Pending {
    job: JobState,
    ttr: u32,
    created: u64,
    /// Index into [`Tubes::names`].
    tube: usize,
    body: Box<[u8]>,
    file: u32,
}

/// Tube names seen so far, each stored once.
#[derive(Default)]
struct Tubes {
    names: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, usize>,
}

impl Tubes {
    fn intern(&mut self, name: &[u8]) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_vec());
        self.index.insert(name.to_vec(), self.names.len() - 1);
        self.names.len() - 1
    }
}

/// Replays our log files into one state, oldest file first; see the
/// module docs.
pub struct Replayer<'d> {
    dir: &'d Path,
    jobs: IdMap<Pending>,
    tubes: Tubes,
    out: Replayed,
}

impl<'d> Replayer<'d> {
    pub fn new(dir: &'d Path) -> Replayer<'d> {
        Replayer {
            dir,
            jobs: IdMap::default(),
            tubes: Tubes::default(),
            out: Replayed { next_id: 1, ..Replayed::default() },
        }
    }

    /// Whether job `id` is live in what was replayed so far.
    pub fn is_live(&self, id: JobId) -> bool {
        self.jobs.contains_key(&id)
    }

    /// One more than the largest id any record replayed so far mentions.
    pub fn next_id(&self) -> JobId {
        self.out.next_id
    }

    /// Whether beanstalkd's file with this stamp was imported already.
    pub fn was_imported(&self, stamp: &FileStamp) -> bool {
        self.out.imported.contains(stamp)
    }

    /// Replays file `n`, newer than every file replayed before it. A torn
    /// tail is cut off only in the `newest` file, the one a crash
    /// interrupted; elsewhere damage is corruption. The zeros a file was
    /// preallocated with are given back to the disk.
    pub fn file(&mut self, n: u32, newest: bool) -> io::Result<()> {
        let path = file_path(self.dir, n);
        let refs = self.out.refers_to.entry(n).or_default();
        let state = (&mut self.jobs, &mut self.tubes, refs, &mut self.out.next_id, &mut self.out.imported);
        self.out.files.push(n);
        match replay_file(&path, n, state)? {
            FileEnd::Clean { data_end, file_len } => {
                if data_end < file_len {
                    std::fs::OpenOptions::new().write(true).open(&path)?.set_len(data_end)?;
                }
            }
            FileEnd::Bad { offset, what } if newest && what == Bad::Torn => {
                self.out.warnings.push(format!(
                    "{}: torn record at offset {offset} (a write cut short by a crash); truncated there",
                    path.display()
                ));
                std::fs::OpenOptions::new().write(true).open(&path)?.set_len(offset)?;
            }
            FileEnd::Bad { offset, what } => {
                self.out.warnings.push(format!(
                    "{}: {} record at offset {offset}; the records before it are kept, the rest of the \
                     file cannot be read and is kept as {}.corrupt",
                    path.display(),
                    if what == Bad::Torn { "truncated" } else { "corrupt" },
                    path.display()
                ));
                self.out.corrupt.push(n);
            }
        }
        Ok(())
    }

    /// The jobs as the last record of each left them. Logged wall-clock
    /// times are read back as `clock`'s.
    pub fn finish(self, clock: &Clock) -> Replayed {
        let (jobs, tubes, mut out) = (self.jobs, self.tubes, self.out);
        // Names were checked when the jobs were put; a name that fails now was
        // damaged on disk in a way the checksum missed, and its jobs are skipped.
        let valid: Vec<Option<usize>> = tubes
            .names
            .iter()
            .map(|name| {
                let tube = TubeName::new(name)?;
                out.tubes.push(tube);
                Some(out.tubes.len() - 1)
            })
            .collect();
        out.jobs.reserve(jobs.len());
        for (id, p) in jobs {
            let Some(tube) = valid.get(p.tube).copied().flatten() else {
                out.warnings.push(format!("job {id}: unreadable tube name; job skipped"));
                continue;
            };
            out.jobs.push(RestoredJob {
                id,
                tube,
                pri: p.job.pri,
                delay: p.job.delay,
                ttr: p.ttr,
                state: match p.job.state {
                    LoggedState::Ready => RestoredState::Ready,
                    LoggedState::Delayed => RestoredState::Delayed { until: clock.from_unix(p.job.deadline) },
                    LoggedState::Buried => RestoredState::Buried { at: Time(p.job.deadline) },
                },
                created: clock.from_unix(p.created),
                counters: p.job.counters,
                body: p.body,
                file: p.file,
            });
        }
        out
    }
}

/// The path of our file number `n`.
pub fn file_path(dir: &Path, n: u32) -> PathBuf {
    super::dir::our_path(dir, n)
}

/// [`file_path`], or `None` if its memory cannot be had.
pub fn try_file_path(dir: &Path, n: u32) -> Option<PathBuf> {
    super::dir::try_our_path(dir, n)
}

#[derive(Debug, PartialEq, Eq)]
enum Bad {
    /// The file ends inside a record.
    Torn,
    /// A record fails its checksum or cannot be parsed.
    Corrupt,
}

enum FileEnd {
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

/// What replaying one file changes.
type ReplayState<'a> =
    (&'a mut IdMap<Pending>, &'a mut Tubes, &'a mut BTreeSet<u32>, &'a mut JobId, &'a mut Vec<FileStamp>);

fn replay_file(path: &Path, n: u32, state: ReplayState<'_>) -> io::Result<FileEnd> {
    let (jobs, tubes, refers_to, next_id, imported) = state;
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut file = BufReader::with_capacity(1 << 20, file);
    let mut header = [0; HEADER_LEN];
    let got = read_up_to(&mut file, &mut header)?;
    if header.iter().all(|&b| b == 0) && rest_is_zero(&mut file)? {
        // Created, but the process died before its header was written.
        return Ok(FileEnd::Clean { data_end: 0, file_len });
    }
    if header[..8] != *record::MAGIC || got < HEADER_LEN {
        // A header written only in part (the start of one, then zeros or the
        // end of the file) is a crash while the file was being made.
        let expected = record::header();
        let written = header.iter().zip(&expected).take_while(|(a, b)| a == b).count();
        let torn = header[written..got].iter().all(|&b| b == 0) && rest_is_zero(&mut file)?;
        return Ok(FileEnd::Bad { offset: 0, what: if torn { Bad::Torn } else { Bad::Corrupt } });
    }
    let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    if !record::READABLE_VERSIONS.contains(&version) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: binlog format version {version} is not supported (this build reads {})",
                path.display(),
                record::READABLE_VERSIONS_TEXT
            ),
        ));
    }
    let mut offset = HEADER_LEN as u64;
    let mut payload = Vec::new();
    loop {
        let mut head = [0; RECORD_HEADER_LEN];
        let got = read_up_to(&mut file, &mut head)?;
        if got < RECORD_HEADER_LEN {
            // The file ends inside a record header: nothing can follow it.
            let zeros = head[..got].iter().all(|&b| b == 0);
            let clean = FileEnd::Clean { data_end: offset, file_len };
            return Ok(if zeros { clean } else { FileEnd::Bad { offset, what: Bad::Torn } });
        }
        let (len, crc) = record::parse_header(head);
        if len == 0 && crc == 0 {
            // The zero tail of a preallocated file, or garbage after it?
            let clean = rest_is_zero(&mut file)?;
            let end = FileEnd::Clean { data_end: offset, file_len };
            return Ok(if clean { end } else { FileEnd::Bad { offset, what: Bad::Corrupt } });
        }
        // A length past the end of the file allocates nothing: the record is
        // bad, and `classify` decides whether it is a torn tail.
        let end = offset.saturating_add(RECORD_HEADER_LEN as u64).saturating_add(len as u64);
        if len == 0 || len > MAX_PAYLOAD || end > file_len {
            return classify(path, offset);
        }
        payload.resize(len, 0);
        if read_up_to(&mut file, &mut payload)? < len {
            return classify(path, offset);
        }
        let Some(record) = record::decode_payload(crc, &payload) else {
            return classify(path, offset);
        };
        apply(record, n, (&mut *jobs, &mut *tubes, &mut *refers_to, &mut *next_id, &mut *imported));
        offset = end;
    }
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
fn classify(path: &Path, offset: u64) -> io::Result<FileEnd> {
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
            record::parse_header([head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]]);
        let payload_at = at + RECORD_HEADER_LEN;
        let Some(payload) = bytes.get(payload_at..payload_at.saturating_add(len)) else { continue };
        if len == 0 || !record::plausible_payload(payload) {
            continue;
        }
        if len > budget {
            return (NextRecord::GaveUp, checksummed);
        }
        budget -= len;
        checksummed += len;
        if record::decode_payload(crc, payload).is_some() {
            return (NextRecord::At(at), checksummed);
        }
    }
    (NextRecord::None, checksummed)
}

fn apply(record: Record<'_>, file: u32, state: ReplayState<'_>) {
    let (jobs, tubes, refers_to, next_id, imported) = state;
    let mut saw = |id: JobId| *next_id = (*next_id).max(id.saturating_add(1));
    // A record about a job whose latest full record is in another file
    // supersedes something there.
    let id = match &record {
        Record::Full { job, .. } | Record::Update(job) => Some(job.id),
        Record::Delete(id) => Some(*id),
        Record::NextId(_) | Record::Imported(_) => None,
    };
    if let Some(earlier) = id.and_then(|id| jobs.get(&id)).map(|p| p.file).filter(|&g| g != file) {
        refers_to.insert(earlier);
    }
    match record {
        Record::Full { job, ttr, created, tube, body } => {
            saw(job.id);
            let tube = tubes.intern(tube);
            jobs.insert(job.id, Pending { job, ttr, created, tube, body: Box::from(body), file });
        }
        Record::Update(state) => {
            saw(state.id);
            if let Some(p) = jobs.get_mut(&state.id) {
                p.job = state;
            }
        }
        Record::Delete(id) => {
            saw(id);
            jobs.remove(&id);
        }
        Record::NextId(id) => *next_id = (*next_id).max(id),
        Record::Imported(stamp) => {
            imported.push(stamp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Counters;

    fn state(id: JobId) -> JobState {
        JobState {
            id,
            pri: 0,
            delay: 0,
            state: LoggedState::Ready,
            deadline: 0,
            counters: Counters::default(),
        }
    }

    #[test]
    fn a_valid_record_after_damage_means_corruption_and_none_a_torn_tail() {
        let mut good = Vec::new();
        record::encode_full(&mut good, &state(1), 60, 0, b"t", b"body");
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
