//! The log and memory agree, made a test: every case of `cases.rs` (every
//! command, from every state the cases start from) runs on an engine with
//! a real binlog under it; then a fresh engine is restored from the log's
//! directory, as a server starting up does (`server/recovery.rs`), at the
//! time the case ended, and it must hold what memory holds: every field of
//! every job (state, tube, priority, delay, TTR, creation, due and burial
//! times, counters, body, unique key, retry limit, concurrency key,
//! groups), each tube's buried jobs in their order (a tube's ready and
//! delayed jobs are ordered by those fields alone), and every unique key,
//! cooling ones included. What a restart does not bring back by design,
//! or not yet, is in one list, [`DIFFERENCES`], each with its reason.
//!
//! The log sweep (`log_sweep.rs`) compares the log after a failing run
//! with the log after a clean one; this compares the log with memory, so
//! a field the journal logs wrong fails here.

use super::case::Case;
use super::cases::CASES;
use super::log_sweep::{restarted_keeping, Dir};
use super::sweep_world::{output, world_from, T0};
use crate::engine::*;

/// One job as memory holds it, or as a restart rebuilds it.
#[derive(Debug, PartialEq)]
struct JobView {
    id: JobId,
    tube: String,
    state: State,
    pri: u32,
    delay: u32,
    ttr: u32,
    /// In whole seconds, rounded: each replay reads Unix times through a
    /// clock of its own, a few microseconds apart; the worlds' times are
    /// whole seconds.
    created: u64,
    /// Delayed: its due time, seconds after its creation.
    due: Option<u64>,
    /// Buried: its burial time, which the log keeps as the engine's own.
    buried_at: Option<Time>,
    counters: crate::stats::Counters,
    body: Vec<u8>,
    key: Option<(Vec<u8>, u32)>,
    limit: Option<u32>,
    con: Option<(Vec<u8>, u32)>,
    groups: (Option<Vec<u8>>, Option<Vec<u8>>),
    /// Buried by its retry limit: the mark its burial was logged with.
    dead_letter: bool,
}

/// What a restart must rebuild of an engine.
#[derive(Debug, PartialEq)]
struct View {
    jobs: Vec<JobView>,
    /// Each tube with buried jobs, and its buried jobs in kick order.
    buried: Vec<(String, Vec<JobId>)>,
    /// Every unique key, live or cooling: tube, key, job, cooldown, end.
    keys: Vec<String>,
    /// The dead letters of the server, and of each tube that has one.
    dead_letters: (usize, Vec<(String, usize)>),
}

/// Whole seconds of `t`, rounded.
fn secs(t: Time) -> u64 {
    (t.0 + 500_000_000) / 1_000_000_000
}

fn view(e: &Engine) -> View {
    let owned = |bytes: Option<&[u8]>| bytes.map(<[u8]>::to_vec);
    let mut jobs = Vec::new();
    for id in 1..e.next_job_id {
        let Some(job) = e.jobs.get(&id) else { continue };
        let tubes = &e.tubes;
        let (group, after) = tubes.groups.of(id);
        jobs.push(JobView {
            id,
            tube: tubes.get(job.tube).name.as_str().to_owned(),
            state: job.state,
            pri: job.pri,
            delay: job.delay,
            ttr: job.ttr,
            created: secs(job.created),
            due: (job.state == State::Delayed)
                .then(|| secs(Time(job.deadline.0.saturating_sub(job.created.0)))),
            buried_at: (job.state == State::Buried).then(|| job.buried_at()),
            counters: job.counters,
            body: super::log_sweep::body_of(e, id),
            key: tubes.keys.logged(id).map(|key| (key.key.to_vec(), key.cooldown)),
            limit: tubes.limits.get(id),
            con: tubes.con.of(id).map(|(name, limit)| (name.to_vec(), limit)),
            groups: (owned(group), owned(after)),
            dead_letter: job.tags.buried_by_limit(),
        });
    }
    let mut buried = Vec::new();
    for &t in e.tubes.ids() {
        let tube = e.tubes.get(t);
        let order: Vec<JobId> = tube.buried.ids(&e.jobs).collect();
        if !order.is_empty() {
            buried.push((tube.name.as_str().to_owned(), order));
        }
    }
    buried.sort();
    let mut keys = e.tubes.keys.sorted();
    // Its last line is bookkeeping (the heap of ends, the name table).
    keys.pop();
    // The counts kept as jobs move are the marks there are.
    let mut marked: Vec<(String, usize)> = Vec::new();
    for job in jobs.iter().filter(|job| job.dead_letter) {
        assert_eq!(job.state, State::Buried, "job {}: a dead letter is buried", job.id);
        match marked.iter_mut().find(|(tube, _)| *tube == job.tube) {
            Some((_, n)) => *n += 1,
            None => marked.push((job.tube.clone(), 1)),
        }
    }
    marked.sort();
    let mut by_tube: Vec<(String, usize)> = e
        .tubes
        .ids()
        .iter()
        .map(|&t| e.tubes.get(t))
        .filter(|tube| tube.buried_by_limit > 0)
        .map(|tube| (tube.name.as_str().to_owned(), tube.buried_by_limit))
        .collect();
    by_tube.sort();
    assert_eq!(by_tube, marked, "the dead letters each tube counts, against the jobs marked");
    assert_eq!(e.job_counts.buried_by_limit, jobs.iter().filter(|job| job.dead_letter).count());
    View { jobs, buried, keys, dead_letters: (e.job_counts.buried_by_limit, by_tube) }
}

/// A way a restart differs from memory: what, why, and how the comparison
/// allows for it (on both views alike). `cases`: only in the cases named
/// (empty: in all).
struct Difference {
    what: &'static str,
    why: &'static str,
    cases: &'static [&'static str],
    allow: fn(&mut View),
}

/// Every way a restart may differ from memory. A difference not here
/// fails the test; one here that a change makes unneeded is for the
/// change to take out.
const DIFFERENCES: &[Difference] = &[
    Difference {
        what: "a reserved job comes back ready",
        why: "a reservation is not logged (reference §8.2): its worker is gone after a restart",
        cases: &[],
        allow: |v| {
            v.jobs.iter_mut().filter(|j| j.state == State::Reserved).for_each(|j| j.state = State::Ready)
        },
    },
    Difference {
        what: "a job's reserves and timeouts",
        why: "a reserve and a TTR running out are not logged by themselves (§8.2): a restart finds the \
              counts of the job's last record, which compaction may or may not have rewritten since",
        cases: &[],
        allow: |v| {
            for j in &mut v.jobs {
                (j.counters.reserves, j.counters.timeouts) = (0, 0);
            }
        },
    },
];

/// [`DIFFERENCES`] that apply to `case`, applied to `view`.
fn allowed(case: &Case, mut view: View) -> View {
    for d in DIFFERENCES.iter().filter(|d| d.cases.is_empty() || d.cases.contains(&case.name)) {
        let _ = (d.what, d.why);
        (d.allow)(&mut view);
    }
    view
}

/// The parts of `memory` and `log` that differ, a line each.
fn differing(memory: &View, log: &View) -> String {
    let mut lines = Vec::new();
    let ids: std::collections::BTreeSet<JobId> = memory.jobs.iter().chain(&log.jobs).map(|j| j.id).collect();
    for id in ids {
        let find = |v: &View| v.jobs.iter().find(|j| j.id == id).map(|j| format!("{j:?}"));
        let (m, l) = (find(memory), find(log));
        if m != l {
            lines.push(format!("  memory  {m:?}\n  restart {l:?}"));
        }
    }
    if (&memory.buried, &memory.keys, &memory.dead_letters) != (&log.buried, &log.keys, &log.dead_letters) {
        lines.push(format!(
            "  memory  {:?} {:?} {:?}\n  restart {:?} {:?} {:?}",
            memory.buried, memory.keys, memory.dead_letters, log.buried, log.keys, log.dead_letters
        ));
    }
    lines.join("\n")
}

#[test]
fn a_restart_from_the_log_rebuilds_what_memory_holds_after_every_case() {
    agree(Keeping { above: None });
}

/// The same with every body left in the log (`engine/body.rs`): memory's
/// bodies, read back from where the log keeps them, and a restart's agree.
#[test]
fn a_restart_agrees_with_memory_with_every_body_in_the_log() {
    agree(Keeping { above: Some(0) });
}

fn agree(keeping: Keeping) {
    let mut disagreements = Vec::new();
    for case in CASES {
        let dir = Dir::new(0);
        let mut w = world_from(restarted_keeping(&dir, T0, keeping).0);
        (case.world)(&mut w);
        (case.step)(&mut w, &mut output());
        let memory = allowed(case, view(&w.e));
        let now = w.now;
        drop(w);
        let log = allowed(case, view(&restarted_keeping(&dir, now, keeping).0));
        if log != memory {
            disagreements.push(format!("{}:\n{}", case.name, differing(&memory, &log)));
        }
    }
    assert!(
        disagreements.is_empty(),
        "a restart from the log does not rebuild memory in {} of {} cases:\n{}",
        disagreements.len(),
        CASES.len(),
        disagreements.join("\n")
    );
}
