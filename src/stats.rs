//! The YAML bodies of `stats`, `stats-job`, `stats-tube` and the `list-*`
//! commands, byte for byte as beanstalkd 1.13 writes them (reference §6).
//!
//! This module only formats: the engine fills in the figures, the server
//! adds the process's own (pid, CPU time, uname). Keys come in beanstalkd's
//! fixed order; exactly the strings beanstalkd 1.13 quotes are quoted, with
//! no escaping (tube names and uname fields cannot contain a quote that
//! matters to any client).

use std::fmt::Write;
use std::time::Duration;

use crate::protocol::TubeName;

/// How many times each thing has happened to a job (shown by `stats-job`).
/// Like beanstalkd's, they are 32-bit and wrap. They live here, beside the
/// YAML that prints them; the engine's job record holds one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
}

/// How many times each counted command ran (the `cmd-*` keys).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandCounts {
    pub put: u64,
    pub peek: u64,
    pub peek_ready: u64,
    pub peek_delayed: u64,
    pub peek_buried: u64,
    pub reserve: u64,
    pub reserve_with_timeout: u64,
    pub delete: u64,
    pub release: u64,
    pub use_: u64,
    pub watch: u64,
    pub ignore: u64,
    pub bury: u64,
    pub kick: u64,
    pub touch: u64,
    pub stats: u64,
    pub stats_job: u64,
    pub stats_tube: u64,
    pub list_tubes: u64,
    pub list_tube_used: u64,
    pub list_tubes_watched: u64,
    pub pause_tube: u64,
}

/// Jobs by state, for a tube or for the whole server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    /// Ready jobs with a priority below 1024.
    pub urgent: usize,
    pub ready: usize,
    pub reserved: usize,
    pub delayed: usize,
    pub buried: usize,
    /// Of `buried`, the dead letters: jobs their retry limit buried
    /// (reference §3.1b), shown as `current-jobs-buried-by-retry-limit`
    /// while there is one, so that a server without any answers
    /// beanstalkd's bytes.
    pub buried_by_limit: usize,
}

/// `current-jobs-buried-by-retry-limit`, in `stats` and `stats-tube`
/// while `jobs` counts a dead letter (after beanstalkd's keys, which come
/// first and unchanged).
fn dead_letters_line(y: &mut String, jobs: &JobCounts) {
    if jobs.buried_by_limit > 0 {
        let _ = writeln!(y, "current-jobs-buried-by-retry-limit: {}", jobs.buried_by_limit);
    }
}

/// The figures of `stats-job`.
#[derive(Debug)]
pub struct JobStats<'a> {
    pub id: u64,
    pub tube: &'a TubeName,
    pub state: &'static str,
    pub pri: u32,
    pub age: u64,
    pub delay: u32,
    pub ttr: u32,
    pub time_left: u64,
    /// Binlog file holding the job's latest full record; 0 without `-b`.
    pub file: u64,
    pub counters: Counters,
    /// tuber's fields, shown only for a job put with one of tuber's tags
    /// (reference §3.1a, §3.1c), as tuber shows them.
    pub tuber: Option<TuberFields<'a>>,
    /// Its retry limit, shown only for a job put with `max:` or buried by
    /// `--max-reserves` (reference §3.1b): for any other job, every byte
    /// is beanstalkd's.
    pub max_reserves: Option<u32>,
    /// Buried by its retry limit, and buried still: a dead letter.
    pub buried_by_limit: bool,
}

impl<'a> JobStats<'a> {
    /// The YAML document.
    pub fn to_yaml(&self) -> Option<String> {
        let mut y = yaml_buffer(REPLY_BUFFER_MIN)?;
        let c = &self.counters;
        // Writing into a String cannot fail.
        let _ = write!(
            y,
            "---\nid: {}\ntube: \"{}\"\nstate: {}\npri: {}\nage: {}\ndelay: {}\nttr: {}\n\
             time-left: {}\nfile: {}\nreserves: {}\ntimeouts: {}\nreleases: {}\nburies: {}\n\
             kicks: {}\n",
            self.id,
            self.tube,
            self.state,
            self.pri,
            self.age,
            self.delay,
            self.ttr,
            self.time_left,
            self.file,
            c.reserves,
            c.timeouts,
            c.releases,
            c.buries,
            c.kicks
        );
        if let Some(tuber) = &self.tuber {
            // Names of the tube-name alphabet: no byte to quote or escape.
            let name =
                |name: Option<(&'a [u8], u32)>| name.map_or("".into(), |(n, _)| String::from_utf8_lossy(n));
            let number = |name: Option<(&[u8], u32)>| name.map_or(0, |(_, n)| n);
            let group = |group: Option<&'a [u8]>| name(group.map(|group| (group, 0)));
            let _ = write!(
                y,
                "idempotency-key: {}\nidempotency-ttl: {}\ngroup: {}\nafter-group: {}\nconcurrency-key: {}\n\
                 concurrency-limit: {}\n",
                name(tuber.key),
                number(tuber.key),
                group(tuber.groups.0),
                group(tuber.groups.1),
                name(tuber.con),
                number(tuber.con)
            );
        }
        if let Some(reserves) = self.max_reserves {
            let _ = writeln!(y, "max-reserves: {reserves}");
        }
        if self.buried_by_limit {
            y.push_str("buried-by-retry-limit: true\n");
        }
        Some(y)
    }
}

/// The put tags tuber shows in `stats-job`: the unique key and its
/// cooldown, the concurrency key and its limit, the group and the
/// after-group.
#[derive(Debug, Clone, Copy, Default)]
pub struct TuberFields<'a> {
    pub key: Option<(&'a [u8], u32)>,
    pub con: Option<(&'a [u8], u32)>,
    pub groups: (Option<&'a [u8]>, Option<&'a [u8]>),
}

/// The figures of `stats-tube` (and of a tube's metrics): owned, the name
/// inline, so that a copy allocates nothing.
#[derive(Debug, Clone)]
pub struct TubeStats {
    pub name: TubeName,
    pub jobs: JobCounts,
    pub total_jobs: u64,
    pub using: usize,
    pub watching: usize,
    pub waiting: usize,
    pub cmd_delete: u64,
    pub cmd_pause_tube: u64,
    pub pause: u32,
    pub pause_time_left: u64,
}

impl TubeStats {
    /// The YAML document.
    pub fn to_yaml(&self) -> Option<String> {
        let mut y = yaml_buffer(REPLY_BUFFER_MIN)?;
        let j = &self.jobs;
        let _ = write!(
            y,
            "---\nname: \"{}\"\ncurrent-jobs-urgent: {}\ncurrent-jobs-ready: {}\n\
             current-jobs-reserved: {}\ncurrent-jobs-delayed: {}\ncurrent-jobs-buried: {}\n\
             total-jobs: {}\ncurrent-using: {}\ncurrent-watching: {}\ncurrent-waiting: {}\n\
             cmd-delete: {}\ncmd-pause-tube: {}\npause: {}\npause-time-left: {}\n",
            self.name,
            j.urgent,
            j.ready,
            j.reserved,
            j.delayed,
            j.buried,
            self.total_jobs,
            self.using,
            self.watching,
            self.waiting,
            self.cmd_delete,
            self.cmd_pause_tube,
            self.pause,
            self.pause_time_left
        );
        dead_letters_line(&mut y, j);
        Some(y)
    }
}

/// The engine's part of `stats`.
#[derive(Debug, Clone, Copy)]
pub struct ServerStats {
    pub jobs: JobCounts,
    pub cmds: CommandCounts,
    pub job_timeouts: u64,
    pub total_jobs: u64,
    pub max_job_size: u32,
    pub current_tubes: usize,
    pub current_connections: usize,
    pub producers: usize,
    pub workers: usize,
    pub waiting: usize,
    pub total_connections: u64,
    pub draining: bool,
    /// What memory counts for jobs (`--max-job-memory`'s measure), the
    /// bytes of bodies left in the log (`engine/body.rs`), and the reads
    /// of one that failed: the last two shown while either is not 0, so
    /// that a server keeping every body in memory answers beanstalkd's
    /// bytes.
    pub job_memory: u64,
    pub bodies_in_log: u64,
    pub body_read_failures: u64,
}

/// The binlog's part of `stats`: all zero but `max_size` without `-b`.
#[derive(Debug, Clone, Copy, Default)]
pub struct BinlogStats {
    pub oldest_index: u64,
    pub current_index: u64,
    pub records_migrated: u64,
    pub records_written: u64,
    pub max_size: u64,
    /// For `--metrics` only (`stats` shows beanstalkd's keys alone): bytes
    /// and files on disk, fsyncs, failed writes and fsyncs, and whether
    /// the binlog refuses every change since one failed.
    pub disk_bytes: u64,
    pub files: u64,
    pub fsyncs: u64,
    pub failures: u64,
    pub refusing: bool,
}

/// The process's part of `stats`.
#[derive(Debug, Clone)]
pub struct ProcessStats<'a> {
    pub pid: u32,
    pub version: &'static str,
    pub user_cpu: Duration,
    pub system_cpu: Duration,
    pub uptime_secs: u64,
    pub binlog: BinlogStats,
    /// 16 lowercase hex digits, new for every process.
    pub instance_id: &'a str,
    pub hostname: &'a str,
    /// The kernel version string (uname's `version`, not `release`).
    pub os: &'a str,
    pub platform: &'a str,
}

/// The least a reply body is built in. glibc keeps freed chunks of up to
/// about 1 KiB in a per-thread cache for as long as the thread lives, and a
/// connection thread may then sit idle for hours: a reply buffer above that
/// size goes back to the shared heap when freed, so a connection that ran
/// `stats-job` or `list-tubes` once costs no more at rest than one that
/// never did.
const REPLY_BUFFER_MIN: usize = 1100;

/// More than `stats` can take: 1,300 bytes of keys, 60 numbers of at most
/// 20 digits, and the host's names.
const SERVER_STATS_MOST: usize = 4096;

/// An empty string with room for `most` bytes, which is more than the
/// document written into it can take, so that writing never grows it;
/// `None` if the memory cannot be had.
fn yaml_buffer(most: usize) -> Option<String> {
    let mut y = String::new();
    y.try_reserve_exact(most).ok()?;
    Some(y)
}

impl ServerStats {
    /// The YAML document of `stats`.
    pub fn to_yaml(&self, p: &ProcessStats<'_>) -> Option<String> {
        let mut y = yaml_buffer(SERVER_STATS_MOST)?;
        let (j, c, b) = (&self.jobs, &self.cmds, &p.binlog);
        let _ = write!(
            y,
            "---\ncurrent-jobs-urgent: {}\ncurrent-jobs-ready: {}\ncurrent-jobs-reserved: {}\n\
             current-jobs-delayed: {}\ncurrent-jobs-buried: {}\ncmd-put: {}\ncmd-peek: {}\n\
             cmd-peek-ready: {}\ncmd-peek-delayed: {}\ncmd-peek-buried: {}\ncmd-reserve: {}\n\
             cmd-reserve-with-timeout: {}\ncmd-delete: {}\ncmd-release: {}\ncmd-use: {}\n\
             cmd-watch: {}\ncmd-ignore: {}\ncmd-bury: {}\ncmd-kick: {}\ncmd-touch: {}\n\
             cmd-stats: {}\ncmd-stats-job: {}\ncmd-stats-tube: {}\ncmd-list-tubes: {}\n\
             cmd-list-tube-used: {}\ncmd-list-tubes-watched: {}\ncmd-pause-tube: {}\n\
             job-timeouts: {}\ntotal-jobs: {}\nmax-job-size: {}\ncurrent-tubes: {}\n\
             current-connections: {}\ncurrent-producers: {}\ncurrent-workers: {}\n\
             current-waiting: {}\ntotal-connections: {}\npid: {}\nversion: \"{}\"\n\
             rusage-utime: {}.{:06}\nrusage-stime: {}.{:06}\nuptime: {}\n\
             binlog-oldest-index: {}\nbinlog-current-index: {}\nbinlog-records-migrated: {}\n\
             binlog-records-written: {}\nbinlog-max-size: {}\ndraining: {}\nid: {}\n\
             hostname: \"{}\"\nos: \"{}\"\nplatform: \"{}\"\n",
            j.urgent,
            j.ready,
            j.reserved,
            j.delayed,
            j.buried,
            c.put,
            c.peek,
            c.peek_ready,
            c.peek_delayed,
            c.peek_buried,
            c.reserve,
            c.reserve_with_timeout,
            c.delete,
            c.release,
            c.use_,
            c.watch,
            c.ignore,
            c.bury,
            c.kick,
            c.touch,
            c.stats,
            c.stats_job,
            c.stats_tube,
            c.list_tubes,
            c.list_tube_used,
            c.list_tubes_watched,
            c.pause_tube,
            self.job_timeouts,
            self.total_jobs,
            self.max_job_size,
            self.current_tubes,
            self.current_connections,
            self.producers,
            self.workers,
            self.waiting,
            self.total_connections,
            p.pid,
            p.version,
            p.user_cpu.as_secs(),
            p.user_cpu.subsec_micros(),
            p.system_cpu.as_secs(),
            p.system_cpu.subsec_micros(),
            p.uptime_secs,
            b.oldest_index,
            b.current_index,
            b.records_migrated,
            b.records_written,
            b.max_size,
            self.draining,
            p.instance_id,
            p.hostname,
            p.os,
            p.platform
        );
        dead_letters_line(&mut y, j);
        if self.bodies_in_log > 0 || self.body_read_failures > 0 {
            let _ = write!(
                y,
                "current-jobs-bytes-in-memory: {}\ncurrent-jobs-bytes-in-log: {}\nbody-read-failures: {}\n",
                self.job_memory, self.bodies_in_log, self.body_read_failures
            );
        }
        Some(y)
    }
}

mod lists;
pub use lists::{group_yaml, id_list_yaml, list_yaml};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_yaml_matches_beanstalkd() {
        let tube = TubeName::default_tube();
        let stats = JobStats {
            id: 1,
            tube: &tube,
            state: "ready",
            pri: 0,
            age: 0,
            delay: 0,
            ttr: 10,
            time_left: 0,
            file: 0,
            counters: Counters::default(),
            tuber: None,
            max_reserves: None,
            buried_by_limit: false,
        };
        let yaml = stats.to_yaml().unwrap();
        assert_eq!(yaml.len(), 146);
        assert_eq!(
            yaml,
            "---\nid: 1\ntube: \"default\"\nstate: ready\npri: 0\nage: 0\ndelay: 0\nttr: 10\n\
             time-left: 0\nfile: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\nburies: 0\nkicks: 0\n"
        );
    }

    #[test]
    fn lists_are_yaml_sequences() {
        assert_eq!(list_yaml(["default"].into_iter()).unwrap(), "---\n- default\n");
        assert_eq!(list_yaml(["a", "b"].into_iter()).unwrap(), "---\n- a\n- b\n");
    }
}
