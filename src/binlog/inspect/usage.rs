//! `beanstalk-binlog usage DIR` (alias `pins`): why the directory is this
//! big. For each file its size, its live records (jobs whose latest full
//! record it holds), whether it can be deleted, and if not, what keeps it:
//! the jobs that pin it, the older files it must outlive, the newer files
//! waiting for it; then one line saying what would free the most space.
//!
//! The rules are each server's own. Our log (see the binlog module docs): a
//! file goes once no live job's latest full record is in it and every older
//! file it refers to (holds deletes or updates of their jobs) is gone.
//! beanstalkd: files go oldest first, each once no live job's latest full
//! record is in it. Either way the file being written stays. This module
//! only reads the [`Log`] it is given.

use std::io::{self, Write};

use super::list::{age, duration, size};
use super::{FileKind, Log, State};

/// How many pinning jobs are listed per file, unless all are asked for.
const SHOWN: usize = 10;

/// Writes the report.
pub fn report(log: &Log, all: bool, out: &mut impl Write) -> io::Result<()> {
    let n = log.files.len();
    let mut live = vec![0usize; n];
    for job in &log.jobs {
        if let Some(count) = live.get_mut(job.file) {
            *count += 1;
        }
    }
    let writing = log.writing();
    let graph = Graph::of(log);
    let goes = deletable(log, &graph, &live, writing);
    let total: u64 = log.files.iter().map(|f| f.size).sum();
    let bodies: u64 = log.jobs.iter().map(|j| j.body_len as u64).sum();
    writeln!(
        out,
        "{}: {n} files, {}; {} live jobs ({} of bodies)",
        log.dir.display(),
        size(total),
        log.jobs.len(),
        size(bodies)
    )?;
    for (i, file) in log.files.iter().enumerate() {
        let verdict = match file.kind {
            FileKind::Aside(what) => format!("set aside: {what}"),
            FileKind::Theirs(_) if file.imported => {
                "imported already: the next start of beanstalk sets it aside".to_owned()
            }
            _ if Some(i) == writing => "kept: the running server is writing it".to_owned(),
            FileKind::Ours if file.damage.iter().any(|d| !d.torn) => {
                "damaged: a start rewrites its readable jobs and keeps it aside as .corrupt".to_owned()
            }
            _ if goes[i] => {
                "can be deleted: nothing needs it (the next start of its server deletes it)".to_owned()
            }
            _ if live[i] > 0 => format!("kept: pinned by {} job{}", live[i], plural(live[i])),
            _ => {
                let waits: Vec<&str> = graph.blockers[i]
                    .iter()
                    .filter(|&&b| !goes[b])
                    .map(|&b| log.files[b].name.as_str())
                    .collect();
                match file.kind {
                    FileKind::Ours => format!(
                        "kept: waits for {} (it holds deletes or updates of jobs there)",
                        waits.join(", ")
                    ),
                    _ => format!(
                        "kept: waits for {} (beanstalkd deletes files oldest first)",
                        waits.join(", ")
                    ),
                }
            }
        };
        writeln!(out, "{:<24} {:>10} {:>7} live  {verdict}", file.name, size(file.size), live[i])?;
        if file.used < file.size && !matches!(file.kind, FileKind::Aside(_)) {
            let cut = if file.kind == FileKind::Ours && Some(i) != writing {
                "; a start cuts them off"
            } else {
                ""
            };
            writeln!(out, "    {} used; the rest is preallocated zeros{cut}", size(file.used))?;
        }
        if goes[i] || matches!(file.kind, FileKind::Aside(_)) || file.imported {
            continue;
        }
        let pins = log.jobs.iter().filter(|j| j.file == i);
        for job in pins.take(if all { usize::MAX } else { SHOWN }) {
            // A job held for its group is logged as delayed with no due
            // time (reference §3.1d): it is ready when its group is done.
            let (state, when) = match (job.state, &job.groups.1) {
                (State::Delayed { until: 0 }, Some(group)) => {
                    (format!("held for its group {group}"), String::new())
                }
                (State::Delayed { until: 0 }, None) => ("held for its group".to_owned(), String::new()),
                (State::Delayed { until }, _) => (
                    job.state.name().to_owned(),
                    format!(", ready in {}", duration(until.saturating_sub(log.now).div_ceil(1_000_000_000))),
                ),
                _ => (job.state.name().to_owned(), String::new()),
            };
            writeln!(
                out,
                "    job {} in {}: {state}, {} old{when}",
                job.id,
                log.tube(job),
                age(log.now, job.created)
            )?;
        }
        if !all && live[i] > SHOWN {
            writeln!(out, "    ... and {} more (--all lists them)", live[i] - SHOWN)?;
        }
        let waiting: Vec<&str> =
            graph.waiting[i].iter().filter(|&&g| !goes[g]).map(|&g| log.files[g].name.as_str()).collect();
        if !waiting.is_empty() {
            writeln!(
                out,
                "    newer files that refer to it, and can only go after it: {}",
                waiting.join(", ")
            )?;
        }
    }
    writeln!(out, "{}", best(log, &graph, &live, &goes, writing))
}

/// The files a start of their server would delete, by its rules, as
/// things stand (`live[i]` jobs pin file `i`).
fn deletable(log: &Log, graph: &Graph, live: &[usize], writing: Option<usize>) -> Vec<bool> {
    let mut goes = vec![false; log.files.len()];
    // Every file a file waits for is older, so one pass in order suffices.
    for (i, file) in log.files.iter().enumerate() {
        let is_log = matches!(file.kind, FileKind::Ours | FileKind::Theirs(_)) && !file.imported;
        // Our damaged file is set aside (renamed), never deleted.
        let damaged = file.kind == FileKind::Ours && file.damage.iter().any(|d| !d.torn);
        goes[i] = is_log
            && !damaged
            && live[i] == 0
            && Some(i) != writing
            && graph.blockers[i].iter().all(|&b| goes[b]);
    }
    goes
}

/// Which files wait for which, worked out once: file `i` may only be
/// deleted after every file of `blockers[i]`; `waiting[i]` is the reverse.
/// Linear in the files and links, so a directory of 24,000 files (a case
/// reported against beanstalkd) is no slower to report on than its reading.
struct Graph {
    blockers: Vec<Vec<usize>>,
    waiting: Vec<Vec<usize>>,
}

impl Graph {
    fn of(log: &Log) -> Graph {
        let n = log.files.len();
        let mut blockers = vec![Vec::new(); n];
        let mut previous_theirs = None;
        for (i, file) in log.files.iter().enumerate() {
            match file.kind {
                FileKind::Ours => blockers[i] = file.refers_to.clone(),
                // beanstalkd deletes oldest first: each file waits for the one before.
                FileKind::Theirs(_) if !file.imported => {
                    blockers[i].extend(previous_theirs);
                    previous_theirs = Some(i);
                }
                _ => {}
            }
        }
        let mut waiting = vec![Vec::new(); n];
        for (i, older) in blockers.iter().enumerate() {
            for &b in older {
                waiting[b].push(i);
            }
        }
        Graph { blockers, waiting }
    }
}

/// The one line saying what would free the most space: the jobs of one
/// file (deleted, or done by workers), or the files set aside.
fn best(log: &Log, graph: &Graph, live: &[usize], goes: &[bool], writing: Option<usize>) -> String {
    let mut best: Option<(u64, usize, Vec<usize>)> = None;
    for candidate in (0..log.files.len()).filter(|&i| live[i] > 0 && Some(i) != writing) {
        // Only a file whose own jobs are all that keeps it can free anything.
        if !graph.blockers[candidate].iter().all(|&b| goes[b]) {
            continue;
        }
        let mut without = live.to_vec();
        without[candidate] = 0;
        let after = deletable(log, graph, &without, writing);
        let freed: Vec<usize> = (0..log.files.len()).filter(|&i| after[i] && !goes[i]).collect();
        let bytes = freed.iter().map(|&i| log.files[i].size).sum();
        if best.as_ref().is_none_or(|b| bytes > b.0) {
            best = Some((bytes, candidate, freed));
        }
    }
    let aside: Vec<usize> = (0..log.files.len())
        .filter(|&i| matches!(log.files[i].kind, FileKind::Aside(_)) || log.files[i].imported)
        .collect();
    let aside_bytes: u64 = aside.iter().map(|&i| log.files[i].size).sum();
    let now: u64 = (0..log.files.len()).filter(|&i| goes[i]).map(|i| log.files[i].size).sum();
    // A few files by name; many as the first, the last and how many.
    let names = |files: &[usize]| match files {
        [first, _, _, _, .., last] => {
            format!("{} files ({} to {})", files.len(), log.files[*first].name, log.files[*last].name)
        }
        _ => files.iter().map(|&i| log.files[i].name.as_str()).collect::<Vec<_>>().join(", "),
    };
    let mut line = match best {
        Some((bytes, file, freed)) if bytes > 0 && bytes >= aside_bytes => {
            let jobs: Vec<String> =
                log.jobs.iter().filter(|j| j.file == file).take(SHOWN).map(|j| j.id.to_string()).collect();
            let more = if live[file] > SHOWN { ", ..." } else { "" };
            let pinning = if live[file] == 1 {
                format!("job {}, which pins {}, is", jobs.join(""), log.files[file].name)
            } else {
                format!(
                    "the {} jobs pinning {} ({}{more}) are",
                    live[file],
                    log.files[file].name,
                    jobs.join(", ")
                )
            };
            format!("most space: once {pinning} deleted or done, {} could go: {}", names(&freed), size(bytes))
        }
        _ if aside_bytes > 0 => {
            format!(
                "most space: removing the files set aside ({}) by hand frees {}",
                names(&aside),
                size(aside_bytes)
            )
        }
        _ => {
            "most space: nothing to free; every file holds the only record of a live job, or is being written"
                .to_owned()
        }
    };
    if now > 0 {
        line.push_str(&format!("; and {} can be deleted already (the next start does it)", size(now)));
    }
    line
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
