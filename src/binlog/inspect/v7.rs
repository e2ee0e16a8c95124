//! `beanstalk-binlog to-beanstalkd DIR OUT`: the queue written as
//! beanstalkd's own binlog, version 7 (beanstalkd 1.5 to 1.13), so that
//! beanstalkd started with `-b OUT` serves the same jobs: the way back
//! from this server to beanstalkd, with no drain.
//!
//! One file, `OUT/binlog.1`: one full record per live job (see
//! `beanstalkd.rs` for the layout) with its id, tube, priority, delay,
//! TTR, wall-clock delay deadline (so the delay left is kept), creation
//! time, counters and body. Reserved jobs were logged as ready and come
//! back ready. beanstalkd puts buried jobs back in the order of their
//! records, so buried jobs are written last, in the order they were
//! buried; and since its replay buries them once more (counting one more
//! `buries`), their count is written one lower. If ids above the live jobs
//! were used, a record of the highest, deleted at once, makes beanstalkd
//! continue above it: ids never go backwards.
//!
//! beanstalkd's replay drops a record whose body and CRLF exceed its `-z`,
//! and every record after it in the file: it would come up with none of
//! the jobs written after that one, and then delete the file. So the file
//! is only written for a `-z` every record fits ([`needs`]); the tool
//! refuses otherwise.
//!
//! It writes only into `OUT`, which must be empty or missing; the file is
//! written under a name beanstalkd ignores, fsynced, then renamed.

use std::path::Path;

use super::{Job, Log, State};

/// beanstalkd's binlog version this writes.
pub const VERSION: i32 = 7;
/// beanstalkd's default `-z`.
pub const DEFAULT_MAX_JOB_SIZE: usize = 65_535;
/// The largest `-z` beanstalkd takes (a larger one is cut to this).
pub const LARGEST_MAX_JOB_SIZE: usize = 1_073_741_824;

/// beanstalkd's job states as its log stores them.
const DELETED: u8 = 0;
const READY: u8 = 1;
const BURIED: u8 = 3;
const DELAYED: u8 = 4;

/// The fixed part of a version-7 record; times in ns.
#[derive(Debug, Clone, Copy, Default)]
pub struct Jobrec {
    pub id: u64,
    pub pri: u32,
    pub delay: i64,
    pub ttr: i64,
    /// The body's length plus the CRLF.
    pub body_size: i32,
    pub created: i64,
    pub deadline: i64,
    /// reserves, timeouts, releases, buries, kicks.
    pub counters: [u32; 5],
    pub state: u8,
}

/// Appends the 80-byte Jobrec.
pub fn encode_jobrec(out: &mut Vec<u8>, rec: &Jobrec) {
    out.extend_from_slice(&rec.id.to_le_bytes());
    out.extend_from_slice(&rec.pri.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&rec.delay.to_le_bytes());
    out.extend_from_slice(&rec.ttr.to_le_bytes());
    out.extend_from_slice(&rec.body_size.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&rec.created.to_le_bytes());
    out.extend_from_slice(&rec.deadline.to_le_bytes());
    for count in rec.counters {
        out.extend_from_slice(&count.to_le_bytes());
    }
    out.push(rec.state);
    out.extend_from_slice(&[0; 3]);
}

/// Appends a full record: tube name, Jobrec, body and CRLF.
pub fn encode_full(out: &mut Vec<u8>, tube: &[u8], rec: &Jobrec, body: &[u8]) {
    // Tube names are at most 200 bytes.
    out.extend_from_slice(&(tube.len() as i32).to_le_bytes());
    out.extend_from_slice(tube);
    encode_jobrec(out, rec);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

/// Appends a short (update or delete) record.
pub fn encode_short(out: &mut Vec<u8>, rec: &Jobrec) {
    out.extend_from_slice(&0i32.to_le_bytes());
    encode_jobrec(out, rec);
}

/// The Jobrec that makes beanstalkd restore `job` as it is.
fn jobrec(job: &Job) -> Jobrec {
    let c = &job.counters;
    let (state, deadline, buries) = match job.state {
        State::Ready => (READY, 0, c.buries),
        State::Delayed { until } => (DELAYED, until, c.buries),
        State::Buried { .. } => (BURIED, 0, c.buries.saturating_sub(1)),
    };
    let nanos = |secs: u32| i64::from(secs) * 1_000_000_000;
    Jobrec {
        id: job.id,
        pri: job.pri,
        delay: nanos(job.delay),
        ttr: nanos(job.ttr),
        body_size: i32::try_from(job.body_len + 2).unwrap_or(i32::MAX),
        created: i64::try_from(job.created).unwrap_or(i64::MAX),
        deadline: i64::try_from(deadline).unwrap_or(i64::MAX),
        counters: [c.reserves, c.timeouts, c.releases, buries, c.kicks],
        state,
    }
}

/// What was written, for the operator.
#[derive(Debug, Default)]
pub struct Written {
    pub jobs: usize,
    /// Unique keys dropped, of jobs and cooling down: beanstalkd has none.
    pub keys_dropped: usize,
}

/// The smallest `-z` with which beanstalkd replays every record the file
/// for a log holds, and the job that needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    pub max_job_size: usize,
    /// The largest job, id and body size (the lowest id of that size).
    pub job: Option<(u64, usize)>,
}

/// What `-z` beanstalkd must run with to replay `log` whole: a record is
/// kept only if its body and CRLF fit `-z`. The record that keeps ids
/// from going backwards has an empty body, so it needs 2.
pub fn needs(log: &Log) -> Needs {
    let largest = log.jobs.iter().max_by_key(|job| (job.body_len, std::cmp::Reverse(job.id)));
    let job = largest.map(|job| (job.id, job.body_len));
    let max_job_size = job.map_or(2, |(_, len)| len.saturating_add(2).max(2));
    Needs { max_job_size, job }
}

/// Encodes the whole file for `log` (which must hold every body).
pub fn encode(log: &Log) -> Vec<u8> {
    let mut out = VERSION.to_le_bytes().to_vec();
    let (mut buried, others): (Vec<&Job>, Vec<&Job>) =
        log.jobs.iter().partition(|job| matches!(job.state, State::Buried { .. }));
    buried.sort_by_key(|job| match job.state {
        State::Buried { at } => (at, job.id),
        _ => (0, job.id),
    });
    for job in others.into_iter().chain(buried) {
        let body = job.body.as_deref().unwrap_or_default();
        encode_full(&mut out, log.tube(job).as_bytes(), &jobrec(job), body);
    }
    let highest_live = log.jobs.iter().map(|j| j.id).max().unwrap_or(0);
    let highest_used = log.next_id.saturating_sub(1);
    if highest_used > highest_live {
        let rec =
            Jobrec { id: highest_used, ttr: 1_000_000_000, body_size: 2, state: READY, ..Jobrec::default() };
        encode_full(&mut out, b"default", &rec, b"");
        encode_short(&mut out, &Jobrec { state: DELETED, ..rec });
    }
    out
}

/// Writes `OUT/binlog.1` for `log`; `out` must be empty or missing.
pub fn write_dir(log: &Log, out: &Path) -> Result<Written, String> {
    super::write_new_dir(out, "binlog.1", &encode(log), "to-beanstalkd")?;
    let keys_dropped = log.jobs.iter().filter(|job| job.key.is_some()).count() + log.cooling;
    Ok(Written { jobs: log.jobs.len(), keys_dropped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::beanstalkd::{self, TheirState};
    use crate::binlog::dir::{TheirFile, Theirs};
    use crate::protocol::TubeName;
    use crate::stats::Counters;

    fn job(id: u64, tube: usize, state: State, buries: u32, body: &[u8]) -> Job {
        Job {
            id,
            tube,
            pri: 100 + id as u32,
            delay: 30,
            ttr: 60,
            state,
            created: 1_700_000_000_000_000_000,
            counters: Counters { reserves: 1, timeouts: 2, releases: 3, buries, kicks: 5 },
            body_len: body.len(),
            body: Some(body.into()),
            file: 0,
            key: None,
            limit: None,
            con: None,
            groups: (None, None),
        }
    }

    fn read_back(bytes: Vec<u8>) -> beanstalkd::TheirLog {
        let file = TheirFile { number: 1, path: "binlog.1".into(), format: Theirs::V7 };
        beanstalkd::read(&[(&file, bytes)])
    }

    #[test]
    fn what_is_encoded_reads_back_with_beanstalkds_reader() {
        let big: Vec<u8> = (0..65_535u32).map(|i| i as u8).collect();
        let tubes = vec![TubeName::default_tube(), TubeName::new(b"emails").unwrap()];
        let deadline = 1_800_000_000_000_000_000;
        let jobs = vec![
            job(2, 0, State::Ready, 0, b"ready\r\nwith crlf"),
            job(3, 1, State::Buried { at: 9 }, 1, b"buried second"),
            job(4, 0, State::Delayed { until: deadline }, 0, &big),
            job(5, 1, State::Buried { at: 4 }, 2, b"buried first"),
        ];
        let log = Log::of(tubes, jobs, 11, 0);
        let read = read_back(encode(&log));
        assert!(read.warnings.is_empty(), "{:?}", read.warnings);
        assert_eq!(read.max_id, 10, "the highest id used is kept");
        let ids: Vec<u64> = read.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, [2, 4, 5, 3], "buried jobs last, in the order they were buried");
        for got in &read.jobs {
            let want = log.jobs.iter().find(|j| j.id == got.id).unwrap();
            assert_eq!(got.tube.as_str(), log.tube(want));
            assert_eq!((got.pri, got.delay, got.ttr), (want.pri, want.delay, want.ttr));
            assert_eq!(got.created, want.created);
            assert_eq!(&*got.body, want.body.as_deref().unwrap());
            let mut counters = want.counters;
            match want.state {
                State::Ready => assert_eq!(got.state, TheirState::Ready),
                State::Delayed { until } => {
                    assert_eq!((got.state, got.deadline), (TheirState::Delayed, until));
                }
                State::Buried { .. } => {
                    assert_eq!(got.state, TheirState::Buried);
                    // beanstalkd's replay buries once more.
                    counters.buries -= 1;
                }
            }
            assert_eq!(got.counters, counters);
        }
    }

    #[test]
    fn a_record_is_laid_out_as_beanstalkd_writes_it() {
        let rec =
            Jobrec { id: 1, pri: 7, ttr: 3_000_000_000, body_size: 4, state: READY, ..Jobrec::default() };
        let mut out = Vec::new();
        encode_full(&mut out, b"default", &rec, b"hi");
        assert_eq!(out.len(), 4 + 7 + 80 + 4);
        assert_eq!(&out[..4], &7i32.to_le_bytes());
        assert_eq!(&out[11..19], &1u64.to_le_bytes());
        assert_eq!(&out[11 + 24..11 + 32], &3_000_000_000i64.to_le_bytes());
        assert_eq!(out[11 + 76], READY);
        assert_eq!(&out[91..], b"hi\r\n");
    }

    #[test]
    fn an_empty_log_writes_only_the_version() {
        let log = Log::of(Vec::new(), Vec::new(), 1, 0);
        assert_eq!(encode(&log), 7i32.to_le_bytes());
        assert!(read_back(encode(&log)).jobs.is_empty());
        assert_eq!(needs(&log), Needs { max_job_size: 2, job: None });
    }

    #[test]
    fn the_largest_body_and_its_crlf_decide_the_max_job_size_needed() {
        let log = Log::of(
            vec![TubeName::default_tube()],
            vec![
                job(3, 0, State::Ready, 0, b"five!"),
                job(4, 0, State::Ready, 0, &[b'x'; 65_534]),
                job(5, 0, State::Buried { at: 1 }, 1, &[b'y'; 65_534]),
            ],
            6,
            0,
        );
        assert_eq!(needs(&log), Needs { max_job_size: 65_536, job: Some((4, 65_534)) });
    }
}
