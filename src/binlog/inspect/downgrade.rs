//! `downgrade`: a directory's jobs as a log of format version 2, which
//! every build since version 2 reads, so that a rollback to a build
//! before version 3 (the batch frame, `record.rs`) keeps every job.
//!
//! What it writes is one file, `beanstalk.1`: a `NextId` record, so that
//! ids never go back, then a full record (kind 1) of each job, buried
//! ones keeping their burial times and so their order. Unique keys, and
//! keys cooling down, have no place in it (the builds before keys took
//! their records for damage): the caller refuses a log that has any
//! unless told to drop them. Retry limits, concurrency keys (version 4)
//! and groups (version 5) are dropped, the jobs kept, and the caller
//! says how many; a job held for a group would run early without it, so
//! the caller refuses those too unless told to drop the holds
//! ([`holds`]). It writes nothing into the
//! directory read.

use std::collections::HashSet;
use std::path::Path;

use super::{Log, State};
use crate::binlog::record::{self, JobState, LoggedState, PREVIOUS_VERSION};

/// Encodes the file for `log` (which must hold every body).
pub fn encode(log: &Log) -> Vec<u8> {
    let mut out = record::header_of(PREVIOUS_VERSION).to_vec();
    record::encode_next_id(&mut out, log.next_id);
    for job in &log.jobs {
        let (state, deadline) = match job.state {
            State::Ready => (LoggedState::Ready, 0),
            State::Delayed { until } => (LoggedState::Delayed, until),
            State::Buried { at } => (LoggedState::Buried, at),
        };
        let logged =
            JobState { id: job.id, pri: job.pri, delay: job.delay, state, deadline, counters: job.counters };
        let body = job.body.as_deref().unwrap_or_default();
        record::encode_full(&mut out, &logged, job.ttr, job.created, log.tube(job).as_bytes(), body);
    }
    out
}

/// The retry limits `log` holds: what a downgrade, or a copy for
/// beanstalkd, drops (the jobs are kept, without them).
pub fn limits(log: &Log) -> usize {
    log.jobs.iter().filter(|job| job.limit.is_some()).count()
}

/// The concurrency keys `log`'s jobs hold: likewise dropped.
pub fn con_keys(log: &Log) -> usize {
    log.jobs.iter().filter(|job| job.con.is_some()).count()
}

/// The jobs of `log` in a group or waiting for one: their `grp:` and
/// `aft:` are likewise dropped.
pub fn groups(log: &Log) -> usize {
    log.jobs.iter().filter(|job| job.groups != (None, None)).count()
}

/// The jobs of `log` that a server reading it holds, or holds once their
/// delay ends: each waits (`aft:`) for a group that a live job of `log`
/// is a member of (`grp:`), itself included, as a restart counts it. A
/// buried one is not: a kick makes it ready, held or not. A copy without
/// groups writes them as they are logged, ready or delayed, and they run
/// early: what a downgrade, or a copy for beanstalkd, would drop.
pub fn holds(log: &Log) -> usize {
    let members: HashSet<&str> = log.jobs.iter().filter_map(|job| job.groups.0.as_deref()).collect();
    let held = |job: &&super::Job| {
        !matches!(job.state, State::Buried { .. })
            && job.groups.1.as_deref().is_some_and(|after| members.contains(after))
    };
    log.jobs.iter().filter(held).count()
}

/// The unique keys `log` holds, of jobs and cooling down: what a
/// downgrade would drop.
pub fn keys(log: &Log) -> usize {
    log.jobs.iter().filter(|job| job.key.is_some()).count() + log.cooling
}

/// Writes `OUT/beanstalk.1` for `log`; `out` must be empty or missing.
/// The server's id (`server-id`) goes with it, so `stats` shows the same.
pub fn write_dir(log: &Log, out: &Path) -> Result<usize, String> {
    super::write_new_dir(out, "beanstalk.1", &encode(log), "downgrade")?;
    if let Ok(id) = std::fs::read(log.dir.join("server-id")) {
        std::fs::write(out.join("server-id"), id)
            .map_err(|e| format!("{}: server-id: {e}", out.display()))?;
    }
    Ok(log.jobs.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binlog::decode::{decode, Decoded};
    use crate::binlog::inspect::Job;
    use crate::binlog::record::Record;
    use crate::protocol::TubeName;

    #[test]
    fn a_downgraded_log_is_version_2_with_plain_records_only() {
        let job = |id, state| Job {
            id,
            tube: 0,
            pri: 7,
            delay: 0,
            ttr: 60,
            state,
            created: 1,
            counters: Default::default(),
            body_len: 2,
            body: Some(b"hi"[..].into()),
            file: 0,
            key: None,
            limit: Some(3),
            con: Some(("api".into(), 2)),
            groups: (None, None),
        };
        let jobs = vec![job(3, State::Ready), job(5, State::Buried { at: 42 })];
        let log = Log::of(vec![TubeName::default_tube()], jobs, 9, 0);
        let bytes = encode(&log);
        assert_eq!(&bytes[..12], b"BSTKLOG\0\x02\0\0\0");
        let (mut at, mut seen) = (12, Vec::new());
        while let Decoded::Record(record, used) = decode(&bytes[at..]) {
            seen.push(match record {
                Record::NextId(id) => format!("next {id}"),
                Record::Full { job, tags: record::FullTags { key: None, .. }, .. } => {
                    format!("{} {:?} {}", job.id, job.state, job.deadline)
                }
                other => panic!("{other:?} in a version 2 file"),
            });
            at += used;
        }
        assert_eq!(at, bytes.len());
        assert_eq!(seen, ["next 9", "3 Ready 0", "5 Buried 42"]);
    }
}
