//! The engine as the failure sweeps compare it (`sweep.rs`,
//! `log_sweep.rs`): everything a client could learn of it, written out as
//! text, so that "exactly as before" and "exactly as after" are string
//! comparisons.

use std::fmt::Write as _;

use crate::engine::*;

/// Everything a client could ever learn of the engine, and what decides
/// what it will learn next, written out so that two engines can be
/// compared. Leaves out what only says how the engine keeps its data
/// (capacities, hash orders, caches) and the `cmd-*` counters, which count
/// a command however it ends, as beanstalkd's do.
pub(super) fn state(e: &Engine) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:?} total={} timeouts={} clients={} producers={} workers={} waiting={} memory={}",
        e.job_counts,
        e.total_jobs,
        e.job_timeouts,
        e.clients.len(),
        e.producers,
        e.workers,
        e.waiting_clients,
        e.job_memory
    );
    for &t in e.tubes.ids() {
        let tube = e.tubes.get(t);
        let buried: Vec<JobId> = tube.buried.ids(&e.jobs).collect();
        let _ = writeln!(
            s,
            "tube {} ready={:?} delayed={:?} buried={buried:?} reserved={} urgent={} waiting={:?} \
             using={} watching={} pause={:?} total={} deletes={} pauses={} dead letters={}",
            tube.name,
            tube.ready,
            tube.delayed,
            tube.reserved,
            tube.urgent,
            tube.waiting,
            tube.using,
            tube.watching,
            tube.pause,
            tube.total_jobs,
            tube.cmd_delete,
            tube.cmd_pause_tube,
            tube.buried_by_limit
        );
    }
    let _ = writeln!(s, "next event {:?}, reserved {:?}", e.tubes.next_event(), e.reserved);
    let _ = writeln!(s, "keys {:?}, next end {:?}", e.tubes.keys.sorted(), e.tubes.keys.next_end());
    let _ = writeln!(s, "retry limits {:?}", e.tubes.limits.sorted());
    let _ = writeln!(s, "concurrency keys {:?}", e.tubes.con.sorted());
    let _ = writeln!(s, "groups {:?}", e.tubes.groups.sorted());
    for id in 1..e.next_job_id {
        if let Some(job) = e.jobs.get(&id) {
            let _ = writeln!(
                s,
                "job {id} in {} {:?} pri={} delay={} ttr={} deadline={:?} by={:?} {:?} body={:?} tags={:?}",
                e.tubes.get(job.tube).name,
                job.state,
                job.pri,
                job.delay,
                job.ttr,
                job.deadline,
                job.reserved_by,
                job.counters,
                // The bytes, wherever they are: a body left in the log is
                // read back, so that where its record is counts for nothing.
                super::log_sweep::body_of(e, id),
                job.tags
            );
        }
    }
    let mut clients: Vec<_> = e.clients.iter().collect();
    clients.sort_by_key(|(id, _)| id.0);
    for (id, c) in clients {
        let watched: Vec<&str> = c.watched.iter().map(|&t| e.tubes.get(t).name.as_str()).collect();
        let held: Vec<JobId> = c.reserved.ids(&e.jobs).collect();
        let _ = writeln!(
            s,
            "client {} uses {} watches {watched:?} weights {:?} mode {:?} holds {held:?} producer={} worker={} hung_up={} {:?}",
            id.0,
            e.tubes.get(c.used).name,
            c.weights,
            c.reserve_mode,
            c.producer,
            c.worker,
            c.hung_up,
            // A job handed over is the client's either way: delivered to its
            // mailbox (the reserve over), or, where the mailbox had no room,
            // left for its thread to collect. Which one a run took depends
            // on that room alone, so both read the same.
            match c.blocked.as_deref() {
                Some(Blocked::Ended(Outcome::Reserved(..)) | Blocked::Delivered(..)) => None,
                blocked => blocked,
            }
        );
    }
    s
}
