//! What `beanstalk-binlog` refuses to copy unless told: a directory a
//! server holds (`--live`), a job beanstalkd's `-z` would drop, unique
//! keys (`--drop-keys`) and jobs held for a group (`--drop-holds`),
//! which a copy without them would lose or run early. Each refusal says
//! why and what to pass; the copying is `run`'s.

use std::path::Path;

use beanstalk::binlog::inspect::{self, downgrade, v7, Log};

use super::{args, Failure};

/// beanstalkd's replay drops a job bigger than its `-z` allows and every
/// job after it, then deletes the file: a rollback that would lose the
/// queue is refused, with the `-z` that would keep it.
pub(super) fn too_big_for_beanstalkd(log: &Log, max_job_size: Option<usize>) -> Option<String> {
    let needs = v7::needs(log);
    let z = max_job_size.unwrap_or(v7::DEFAULT_MAX_JOB_SIZE);
    if needs.max_job_size <= z {
        return None;
    }
    let given = match max_job_size {
        Some(size) => format!("-z {size}"),
        None => format!("beanstalkd's default -z ({z})"),
    };
    let job = match needs.job {
        Some((id, len)) => format!("job {id} has a {len}-byte body"),
        None => "the record that keeps ids from going back has a 0-byte body".to_owned(),
    };
    let fix = if needs.max_job_size <= v7::LARGEST_MAX_JOB_SIZE {
        format!("run again with -z {} or more, and start beanstalkd with that -z", needs.max_job_size)
    } else {
        format!(
            "no -z beanstalkd takes (at most {}) keeps it: delete that job first",
            v7::LARGEST_MAX_JOB_SIZE
        )
    };
    Some(format!(
        "{job}, more than {given} allows: beanstalkd's replay would drop it and every job after it, \
         then delete the file; nothing written: {fix}"
    ))
}

/// A copy that cannot carry `log`'s unique keys loses data: refused,
/// unless the operator said to drop them. `why` says why they cannot go.
pub(super) fn keys_lost(log: &Log, drop_keys: bool, why: &str) -> Option<String> {
    let keys = downgrade::keys(log);
    (keys > 0 && !drop_keys).then(|| {
        format!(
            "{keys} unique keys (idp:), of jobs and cooling down, would be dropped ({why}): nothing written; \
             pass --drop-keys to write those jobs without their keys"
        )
    })
}

/// A copy for beanstalkd or an older build, which carries neither keys
/// nor groups, that would drop keys or holds it was not told to: says
/// why on stderr, and true (nothing is to be written).
pub(super) fn refused_copy(log: &Log, args: &args::Args, why: &str) -> bool {
    let keys = keys_lost(log, args.drop_keys, why);
    let holds = holds_lost(log, args.drop_holds, why);
    for refusal in keys.iter().chain(&holds) {
        eprintln!("beanstalk-binlog: {refusal}");
    }
    keys.is_some() || holds.is_some()
}

/// A copy without groups writes the jobs held for one as they are
/// logged, ready or delayed: they would run early. Refused, unless the
/// operator said to drop the holds.
fn holds_lost(log: &Log, drop_holds: bool, why: &str) -> Option<String> {
    let holds = downgrade::holds(log);
    (holds > 0 && !drop_holds).then(|| {
        format!(
            "{holds} jobs held for a group (aft:) would run early, their hold dropped ({why}): nothing \
             written; pass --drop-holds to write them without it"
        )
    })
}

/// `export`, `to-beanstalkd` and `downgrade` copy jobs out: from a queue a server is
/// changing, that copy would hand out jobs twice.
pub(super) fn refuse_held(dir: &str, live: bool, command: &str) -> Result<(), Failure> {
    match inspect::holder(Path::new(dir)) {
        Some(pid) if !live => Err(Failure::Input(format!(
            "{dir} is held by a running server (pid {pid}): {command} would copy a queue that is changing \
             (jobs reserved or deleted meanwhile would be copied as ready); stop the server first, or pass \
             --live to copy it anyway"
        ))),
        _ => Ok(()),
    }
}
