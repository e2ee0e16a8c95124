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
//! Which of the two a bad record is, `damage.rs` decides.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{self, BufReader};
use std::path::Path;

use super::damage::{classify, Bad, FileEnd};
pub(crate) use super::damage::{next_record, NextRecord};
use super::decode;
use super::dir::{read_up_to, rest_is_zero};
use super::record::FileStamp;
use super::record::{self, JobState, LoggedState, Record, HEADER_LEN, RECORD_HEADER_LEN};
use crate::engine::{Body, IdMap, JobId, Keeping, RestoredJob, RestoredState};
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
    /// Its bytes, or where its full record keeps them (`engine/body.rs`):
    /// a queue bigger than memory replays in the memory it is served in.
    body: Body,
    file: u32,
    /// Its unique key and the key's cooldown. In state cooling, the job
    /// was deleted and only its key lives, until `job.deadline`.
    key: Option<(Box<[u8]>, u32)>,
    /// Its retry limit (`max:`).
    limit: Option<u32>,
    /// Its concurrency key and its put's limit (`con:`).
    con: Option<(Box<[u8]>, u32)>,
    /// Its group (`grp:`) and the group it waits for (`aft:`).
    group: Option<Box<[u8]>>,
    after: Option<Box<[u8]>>,
    /// Its group's run, as its full record keeps it (reference §3.1d).
    run: Option<JobId>,
    /// Its last record is of a version before [`record::MARKS_VERSION`]:
    /// whether its retry limit buried it is not logged.
    before_marks: bool,
}

impl Pending {
    /// Before format version 6 a job held for a group was written as
    /// ready: a ready job of an old file that waits for a group is read as
    /// held (delayed with no due time), and held again at the restart if
    /// its group has a member, as those builds did.
    fn read_as_before_holds(&mut self) {
        if self.after.is_some() && self.job.state == LoggedState::Ready {
            (self.job.state, self.job.deadline) = (LoggedState::Delayed, 0);
        }
    }
}

mod tubes;
use tubes::Tubes;
mod apply;
use apply::{apply, Where};

/// Replays our log files into one state, oldest file first; see the
/// module docs.
pub struct Replayer<'d> {
    dir: &'d Path,
    keeping: Keeping,
    jobs: IdMap<Pending>,
    tubes: Tubes,
    out: Replayed,
}

impl<'d> Replayer<'d> {
    pub fn new(dir: &'d Path, keeping: Keeping) -> Replayer<'d> {
        Replayer {
            dir,
            keeping,
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
        let path = super::dir::our_path(self.dir, n);
        let refs = self.out.refers_to.entry(n).or_default();
        let state = (&mut self.jobs, &mut self.tubes, refs, &mut self.out.next_id, &mut self.out.imported);
        self.out.files.push(n);
        match replay_file(&path, (n, self.keeping), state)? {
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
                    // No due time: held for a group (`record.rs`).
                    LoggedState::Delayed if p.job.deadline == 0 => RestoredState::Held,
                    LoggedState::Delayed => RestoredState::Delayed { until: clock.from_unix(p.job.deadline) },
                    // A log older than the mark leaves it to the engine's
                    // inference, as the builds that wrote it did.
                    LoggedState::Buried => RestoredState::Buried {
                        at: Time(p.job.deadline),
                        by_limit: (!p.before_marks).then_some(false),
                    },
                    LoggedState::BuriedByLimit => {
                        RestoredState::Buried { at: Time(p.job.deadline), by_limit: Some(true) }
                    }
                    LoggedState::Cooling => RestoredState::Cooling { until: clock.from_unix(p.job.deadline) },
                },
                created: clock.from_unix(p.created),
                counters: p.job.counters,
                body: p.body,
                file: p.file,
                key: p.key,
                limit: p.limit,
                con: p.con,
                group: p.group,
                after: p.after,
                run: p.run,
            });
        }
        out
    }
}

/// What replaying one file changes.
type ReplayState<'a> =
    (&'a mut IdMap<Pending>, &'a mut Tubes, &'a mut BTreeSet<u32>, &'a mut JobId, &'a mut Vec<FileStamp>);

fn replay_file(path: &Path, (n, keeping): (u32, Keeping), state: ReplayState<'_>) -> io::Result<FileEnd> {
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
        let (len, crc) = decode::parse_header(head);
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
        let Some(record) = decode::decode_payload(crc, &payload) else {
            return classify(path, offset);
        };
        // A batch's records, all of them, as if each came alone: its one
        // checksum made it all or nothing.
        let applied = match record {
            Record::Batch(batch) => batch.records().try_for_each(|record| {
                apply(
                    record,
                    Where { file: n, version, at: None, keeping },
                    (&mut *jobs, &mut *tubes, &mut *refers_to, &mut *next_id, &mut *imported),
                )
            }),
            record => apply(
                record,
                Where { file: n, version, at: Some(offset), keeping },
                (&mut *jobs, &mut *tubes, &mut *refers_to, &mut *next_id, &mut *imported),
            ),
        };
        if let Err(id) = applied {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: job {id} at offset {offset} is a second live job with that id", path.display()),
            ));
        }
        offset = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of full records of job 1, one per `(ttr, body)`.
    fn replay_fulls(name: &str, fulls: &[(u32, &[u8])]) -> io::Result<()> {
        let dir = std::env::temp_dir().join(format!("beanstalk-replay-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut bytes = record::header().to_vec();
        let job = JobState {
            id: 1,
            pri: 0,
            delay: 0,
            state: LoggedState::Ready,
            deadline: 0,
            counters: Default::default(),
        };
        for (ttr, body) in fulls {
            record::encode_full(&mut bytes, &job, *ttr, 7, b"default", body);
        }
        std::fs::write(super::super::dir::our_path(&dir, 1), bytes)?;
        let result = Replayer::new(&dir, Keeping { above: None }).file(1, true);
        std::fs::remove_dir_all(&dir)?;
        result
    }

    /// Before format version 6 a held job was written as ready: a ready
    /// job of an old file that waits for a group is read as held, and
    /// since version 6 only a delayed one with no due time is; a member's
    /// run is read back as written.
    #[test]
    fn holds_are_read_as_each_version_wrote_them() {
        let dir = std::env::temp_dir().join(format!("beanstalk-replay-holds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let job = |id, state, deadline| JobState {
            id,
            pri: 0,
            delay: 0,
            state,
            deadline,
            counters: Default::default(),
        };
        let after = record::FullTags { after: Some(b"g"), ..Default::default() };
        let member = record::FullTags { group: Some(b"g"), run: 3, ..Default::default() };
        let full = |out: &mut Vec<u8>, job: &JobState, tags: &record::FullTags<'_>| {
            record::encode_full_tagged(out, job, 60, 7, b"default", b"b", tags)
        };
        let mut old = record::header_of(5).to_vec();
        full(&mut old, &job(1, LoggedState::Ready, 0), &after);
        full(&mut old, &job(2, LoggedState::Ready, 0), &record::FullTags::default());
        let mut new = record::header().to_vec();
        full(&mut new, &job(3, LoggedState::Ready, 0), &member);
        full(&mut new, &job(4, LoggedState::Ready, 0), &after);
        full(&mut new, &job(5, LoggedState::Delayed, 0), &after);
        std::fs::write(super::super::dir::our_path(&dir, 1), old).unwrap();
        std::fs::write(super::super::dir::our_path(&dir, 2), new).unwrap();
        let mut replayer = Replayer::new(&dir, Keeping { above: None });
        replayer.file(1, false).unwrap();
        replayer.file(2, true).unwrap();
        let mut jobs = replayer.finish(&Clock::default()).jobs;
        std::fs::remove_dir_all(&dir).unwrap();
        jobs.sort_by_key(|j| j.id);
        let states: Vec<_> = jobs.iter().map(|j| (j.id, j.state, j.run)).collect();
        assert_eq!(
            states,
            [
                (1, RestoredState::Held, None),
                (2, RestoredState::Ready, None),
                (3, RestoredState::Ready, Some(3)),
                (4, RestoredState::Ready, None),
                (5, RestoredState::Held, None),
            ]
        );
    }

    /// Since format version 7 a burial says whether its retry limit made
    /// it (state 5): read as written, a plain burial as none. Before, the
    /// mark was not logged, and the engine infers it (`None`), as those
    /// builds did, until a record of version 7 says what the burial was.
    #[test]
    fn dead_letters_are_read_as_each_version_wrote_them() {
        let dir = std::env::temp_dir().join(format!("beanstalk-replay-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let job =
            |id, state| JobState { id, pri: 0, delay: 0, state, deadline: 9, counters: Default::default() };
        let mut old = record::header_of(6).to_vec();
        for id in [1, 2] {
            record::encode_full(&mut old, &job(id, LoggedState::Buried), 60, 7, b"default", b"b");
        }
        let mut new = record::header().to_vec();
        record::encode_update(&mut new, &job(2, LoggedState::Buried));
        record::encode_full(&mut new, &job(3, LoggedState::Buried), 60, 7, b"default", b"b");
        record::encode_full(&mut new, &job(4, LoggedState::BuriedByLimit), 60, 7, b"default", b"b");
        std::fs::write(super::super::dir::our_path(&dir, 1), old).unwrap();
        std::fs::write(super::super::dir::our_path(&dir, 2), new).unwrap();
        let mut replayer = Replayer::new(&dir, Keeping { above: None });
        replayer.file(1, false).unwrap();
        replayer.file(2, true).unwrap();
        let mut jobs = replayer.finish(&Clock::default()).jobs;
        std::fs::remove_dir_all(&dir).unwrap();
        jobs.sort_by_key(|j| j.id);
        let at = Time(9);
        let states: Vec<_> = jobs.iter().map(|j| (j.id, j.state)).collect();
        assert_eq!(
            states,
            [
                (1, RestoredState::Buried { at, by_limit: None }),
                (2, RestoredState::Buried { at, by_limit: Some(false) }),
                (3, RestoredState::Buried { at, by_limit: Some(false) }),
                (4, RestoredState::Buried { at, by_limit: Some(true) }),
            ]
        );
    }

    #[test]
    fn one_id_as_two_live_jobs_is_refused_and_a_rewrite_is_not() {
        assert!(replay_fulls("rewrite", &[(7, b"a"), (7, b"a")]).is_ok());
        for (name, second) in [("body", (7, &b"b"[..])), ("ttr", (8, &b"a"[..]))] {
            let refused = replay_fulls(name, &[(7, b"a"), second]).unwrap_err();
            assert!(refused.to_string().contains(": job 1 at offset "), "{refused}");
            assert!(refused.to_string().ends_with(" is a second live job with that id"), "{refused}");
        }
    }
}
