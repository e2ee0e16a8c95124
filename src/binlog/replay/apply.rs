//! One record of our log applied to the jobs replayed so far (the
//! module above reads the files and hands each record here): a full
//! record makes or rewrites a job, an update changes its state, a delete
//! ends it; each notes the older file it supersedes something in. It
//! reads no file, and keeps a body's place, not its bytes, where the log
//! keeps the body (`engine/body.rs`).

use super::{Pending, ReplayState};
use crate::binlog::record::{self, LoggedState, Record};
use crate::engine::{Body, JobId, Keeping};

/// Where a record was read: its file, the file's format version, and its
/// offset, if it came alone (not in a batch's frame), for a body the log
/// keeps (`keeping`) to be read from there.
pub(super) struct Where {
    pub(super) file: u32,
    pub(super) version: u32,
    pub(super) at: Option<u64>,
    pub(super) keeping: Keeping,
}

/// Applies one record; `Err(id)` if it makes a second live job of `id`.
pub(super) fn apply(record: Record<'_>, from: Where, state: ReplayState<'_>) -> Result<(), JobId> {
    let Where { file, version, .. } = from;
    let (jobs, tubes, refers_to, next_id, imported) = state;
    let mut saw = |id: JobId| *next_id = (*next_id).max(id.saturating_add(1));
    // A record about a job whose latest full record is in another file
    // supersedes something there.
    let id = match &record {
        Record::Full { job, .. } | Record::Update(job) => Some(job.id),
        Record::Delete(id) => Some(*id),
        Record::NextId(_) | Record::Imported(_) | Record::Batch(_) => None,
    };
    if let Some(earlier) = id.and_then(|id| jobs.get(&id)).map(|p| p.file).filter(|&g| g != file) {
        refers_to.insert(earlier);
    }
    match record {
        Record::Full { job, ttr, created, tube, body, tags } => {
            saw(job.id);
            // A full record of a live job rewrites that job (compaction, a
            // move, a damaged file's rescue): the same TTR and body, which
            // never change (its creation time may move by the rounding of
            // a restart's clock). Anything else is a second job under one
            // id, which ids that never wrap cannot make: the log is not
            // ours to guess at.
            // A job whose key starts cooling is logged without its body.
            let cooling = job.state == LoggedState::Cooling;
            let other_body =
                |live: &Body| live.len() != body.len() || live.bytes().is_some_and(|b| b != body);
            if !cooling && jobs.get(&job.id).is_some_and(|live| live.ttr != ttr || other_body(&live.body)) {
                return Err(job.id);
            }
            let tube = tubes.intern(tube);
            let key = tags.key.map(|(name, cooldown)| (Box::from(name), cooldown));
            let (limit, con) = (tags.limit, tags.con.map(|(name, limit)| (Box::from(name), limit)));
            let (group, after) = (tags.group.map(Box::from), tags.after.map(Box::from));
            let place = from.at.and_then(|at| from.keeping.place(at, body.len()));
            let body = place.map_or_else(|| Body::InMemory(Box::from(body)), Body::InLog);
            let run = Some(tags.run).filter(|&run| run != 0);
            let before_marks = version < record::MARKS_VERSION;
            let mut p = Pending {
                job,
                ttr,
                created,
                tube,
                body,
                file,
                key,
                limit,
                con,
                group,
                after,
                run,
                before_marks,
            };
            if version < record::HOLDS_VERSION {
                p.read_as_before_holds();
            }
            jobs.insert(job.id, p);
        }
        Record::Update(state) => {
            saw(state.id);
            if let Some(p) = jobs.get_mut(&state.id) {
                p.job = state;
                p.before_marks = version < record::MARKS_VERSION;
                if version < record::HOLDS_VERSION {
                    p.read_as_before_holds();
                }
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
        // Opened by `replay_file`: no batch holds another.
        Record::Batch(_) => {}
    }
    Ok(())
}
