//! `beanstalk-binlog export DIR`: the queue as a stream of protocol
//! commands that rebuilds it on any beanstalkd-compatible server, e.g.
//! `beanstalk-binlog export DIR | nc -N HOST 11300`.
//!
//! The stream: the ready and delayed jobs first, in id order, each `use`d
//! into its tube and `put` with its priority, TTR, and the delay it has
//! left; then the buried jobs, in the order they were buried, each `put`,
//! then `reserve-job` and `bury` with its priority; then `quit`. Ready
//! jobs of one priority keep their order, since the server hands out
//! increasing ids in the order of the puts.
//!
//! Ids are the server's to give: a job's old id cannot be kept. Burying
//! needs the new id in the stream itself, which a stream written ahead of
//! the replies can only predict: it assumes the server gives the puts the
//! ids `first_id`, `first_id + step`, ... (`step` is the target's
//! `--job-id-step`, 1 unless it is a shard; 1 on a fresh server; a server
//! nobody else puts into, and no worker reserves from meanwhile, since a
//! buried job is ready between its put and its bury). The mapping, old id to the k-th put and the id
//! that put gets, goes to stderr; the server's replies (`INSERTED <id>`, in
//! the order of the puts) confirm it. Counters, pauses and the `delay` of
//! a job no longer delayed do not survive an export. A job's retry limit
//! and concurrency key do, as the put's `max:` and `con:` tags (reference
//! §3.1b, §3.1c): a server without them refuses such a put.
//!
//! This module writes the stream for a [`Log`]; it touches no directory.

use std::io::{self, Write};

use super::{Log, State};
use crate::ids::IdRange;

/// What the jobs will need of the server.
#[derive(Debug, Default)]
pub struct Exported {
    pub jobs: usize,
    /// The largest body: the server's `-z` must be at least this.
    pub largest_body: usize,
}

/// Writes the command stream to `out` and the id mapping to `mapping`.
/// `log` must hold every body ([`super::Bodies::All`]). `ids` are the ids
/// the target server will give the puts: from `ids.start`, `ids.step` apart.
pub fn write(
    log: &Log,
    ids: IdRange,
    out: &mut impl Write,
    mapping: &mut impl Write,
) -> io::Result<Exported> {
    let mut done = Exported::default();
    let mut tube_in_use = "default";
    let (buried, others): (Vec<_>, Vec<_>) =
        log.jobs.iter().partition(|job| matches!(job.state, State::Buried { .. }));
    let mut buried = buried;
    buried.sort_by_key(|job| match job.state {
        State::Buried { at } => (at, job.id),
        _ => (0, job.id),
    });
    let (first_id, step) = (ids.start, ids.step);
    if step == 1 {
        writeln!(
            mapping,
            "export of {}: {} jobs; put #k gets id {first_id}+k-1 on a server that gives the puts \
             consecutive ids from {first_id} (a fresh server: from 1)",
            log.dir.display(),
            log.jobs.len()
        )?;
    } else {
        writeln!(
            mapping,
            "export of {}: {} jobs; put #k gets id {first_id}+{step}(k-1) on a server that gives the \
             puts the ids {first_id}, {first_id}+{step}, ... (--job-id-step {step})",
            log.dir.display(),
            log.jobs.len()
        )?;
    }
    for job in others.iter().chain(&buried) {
        let tube = log.tube(job);
        if tube != tube_in_use {
            write!(out, "use {tube}\r\n")?;
            tube_in_use = tube;
        }
        let delay = match job.state {
            State::Delayed { until } => until.saturating_sub(log.now).div_ceil(1_000_000_000),
            _ => 0,
        };
        let delay = u32::try_from(delay).unwrap_or(u32::MAX);
        let body = job.body.as_deref().unwrap_or_default();
        // A retry limit goes with its job (reference §3.1b), for a server
        // that takes it.
        let mut tags = job.limit.map_or(String::new(), |reserves| format!(" max:{reserves}"));
        if let Some((name, limit)) = &job.con {
            tags.push_str(&format!(" con:{name}:{limit}"));
        }
        tags.push_str(&super::group_tags(job));
        write!(out, "put {} {delay} {} {}{tags}\r\n", job.pri, job.ttr, body.len())?;
        out.write_all(body)?;
        out.write_all(b"\r\n")?;
        let new_id = first_id.saturating_add((done.jobs as u64).saturating_mul(step));
        done.jobs += 1;
        done.largest_body = done.largest_body.max(body.len());
        if let State::Buried { .. } = job.state {
            write!(out, "reserve-job {new_id}\r\nbury {new_id} {}\r\n", job.pri)?;
        }
        writeln!(
            mapping,
            "put #{}: old id {} -> new id {new_id} ({tube}, {})",
            done.jobs,
            job.id,
            job.state.name()
        )?;
    }
    write!(out, "quit\r\n")?;
    out.flush()?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::super::{Job, Log};
    use super::*;
    use crate::protocol::TubeName;
    use crate::stats::Counters;

    fn job(id: u64, tube: usize, state: State, body: &[u8]) -> Job {
        Job {
            id,
            tube,
            pri: 7,
            delay: 0,
            ttr: 60,
            state,
            created: 0,
            counters: Counters::default(),
            body_len: body.len(),
            body: Some(body.into()),
            file: 0,
            key: None,
            limit: None,
            con: None,
            groups: (None, None),
        }
    }

    #[test]
    fn buried_jobs_come_last_in_their_order_with_predicted_ids() {
        let tubes = vec![TubeName::default_tube(), TubeName::new(b"mail").unwrap()];
        let log = Log::of(
            tubes,
            vec![
                job(3, 1, State::Buried { at: 20 }, b"b3"),
                job(4, 0, State::Delayed { until: 5_500_000_000 }, b"d4"),
                job(5, 1, State::Buried { at: 10 }, b"b5"),
                job(6, 0, State::Ready, b"r\r\n6"),
            ],
            7,
            1_000_000_000,
        );
        let (mut out, mut mapping) = (Vec::new(), Vec::new());
        let done = write(&log, IdRange { start: 10, step: 1 }, &mut out, &mut mapping).unwrap();
        assert_eq!(done.jobs, 4);
        let expected = "put 7 5 60 2\r\nd4\r\nput 7 0 60 4\r\nr\r\n6\r\nuse mail\r\n\
                        put 7 0 60 2\r\nb5\r\nreserve-job 12\r\nbury 12 7\r\n\
                        put 7 0 60 2\r\nb3\r\nreserve-job 13\r\nbury 13 7\r\nquit\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        let mapping = String::from_utf8(mapping).unwrap();
        assert!(mapping.contains("put #3: old id 5 -> new id 12 (mail, buried)"), "{mapping}");
    }

    #[test]
    fn a_shard_s_ids_are_predicted_a_step_apart() {
        let log = Log::of(
            vec![TubeName::default_tube()],
            vec![job(1, 0, State::Ready, b"r"), job(2, 0, State::Buried { at: 1 }, b"b")],
            3,
            1_000_000_000,
        );
        let (mut out, mut mapping) = (Vec::new(), Vec::new());
        write(&log, IdRange { start: 7, step: 3 }, &mut out, &mut mapping).unwrap();
        let expected = "put 7 0 60 1\r\nr\r\nput 7 0 60 1\r\nb\r\nreserve-job 10\r\nbury 10 7\r\nquit\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        assert!(String::from_utf8(mapping).unwrap().contains("put #2: old id 2 -> new id 10"));
    }
}
