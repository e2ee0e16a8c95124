//! A scrape's figures as Prometheus's text exposition format (0.0.4):
//! every `stats` and `stats-tube` key as `beanstalkd_<key>` and
//! `beanstalkd_tube_<key>{tube="..."}` (dashes made underscores, counters
//! ending in `_total`, as the existing exporters name them), then what
//! only this endpoint says: each tube's oldest ready job and its wait and
//! work histograms, the binlog's disk, the connections refused, the waits
//! for the engine's lock, the process, and the build.
//!
//! It formats and nothing else, with integers only: seconds are written
//! from microseconds by hand, so no float formatting is linked in. Tube
//! names need no escaping: no legal name holds a quote or a backslash.
//! Writing stops, rather than aborting the process, when memory runs out.

use std::fmt::{self, Write};

use super::scrape::Scrape;
use crate::engine::metering::{Histogram, TubeFigures, WorkEnd, BUCKET_BOUNDS_US};
use crate::protocol::VERSION;

/// A response body that grows only by fallible allocation.
pub struct Body(pub Vec<u8>);

impl Write for Body {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.try_reserve(s.len()).map_err(|_| fmt::Error)?;
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Microseconds as seconds, with six decimals.
struct Seconds(u64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// A metric's name in three parts (prefix, stats key, suffix), so that
/// names are written, never built.
#[derive(Clone, Copy)]
struct Name<'a>(&'a str, &'a str, &'a str);

impl fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)?;
        f.write_str(self.1)?;
        f.write_str(self.2)
    }
}

/// A whole name.
fn named(name: &str) -> Name<'_> {
    Name(name, "", "")
}

/// Writes the `# HELP` and `# TYPE` lines of a family.
fn family(out: &mut Body, name: Name<'_>, kind: &str, help: &str) -> fmt::Result {
    write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n")
}

/// One server-wide sample, with its family's header.
fn single(out: &mut Body, name: Name<'_>, kind: &str, help: &str, value: &dyn fmt::Display) -> fmt::Result {
    family(out, name, kind, help)?;
    writeln!(out, "{name} {value}")
}

/// The whole body of a scrape.
pub fn write(s: &Scrape, out: &mut Body) -> fmt::Result {
    write_server(s, out)?;
    write_tubes(&s.tubes, out)?;
    write_extras(s, out)
}

#[inline(never)]
fn write_server(s: &Scrape, out: &mut Body) -> fmt::Result {
    let (v, p) = (&s.overview.server, &s.process);
    let (j, c) = (&v.jobs, &v.cmds);
    let gauges: [(&str, u64, &str); 15] = [
        ("current_jobs_urgent", j.urgent as u64, "Ready jobs with a priority below 1024."),
        ("current_jobs_ready", j.ready as u64, "Jobs ready to be reserved."),
        ("current_jobs_reserved", j.reserved as u64, "Jobs reserved by a worker."),
        ("current_jobs_delayed", j.delayed as u64, "Jobs waiting for their delay to end."),
        ("current_jobs_buried", j.buried as u64, "Buried jobs."),
        ("current_jobs_buried_by_retry_limit", j.buried_by_limit as u64, DEAD_LETTERS_NOW),
        ("max_job_size", u64::from(v.max_job_size), "Largest job body accepted, in bytes (-z)."),
        ("current_tubes", v.current_tubes as u64, "Tubes that exist."),
        ("current_connections", v.current_connections as u64, "Open connections."),
        ("current_producers", v.producers as u64, "Open connections that have put a job."),
        ("current_workers", v.workers as u64, "Open connections that have reserved a job."),
        ("current_waiting", v.waiting as u64, "Connections blocked in a reserve."),
        ("uptime", p.uptime_secs, "Seconds since the server started."),
        ("current_jobs_bytes_in_memory", v.job_memory, "What --max-job-memory counts of the jobs, in bytes."),
        ("current_jobs_bytes_in_log", v.bodies_in_log, "Bytes of the bodies left in the log (-b)."),
    ];
    for (key, value, help) in gauges {
        single(out, Name("beanstalkd_", key, ""), "gauge", help, &value)?;
    }
    let cmds: [(&str, u64); 22] = [
        ("put", c.put),
        ("peek", c.peek),
        ("peek_ready", c.peek_ready),
        ("peek_delayed", c.peek_delayed),
        ("peek_buried", c.peek_buried),
        ("reserve", c.reserve),
        ("reserve_with_timeout", c.reserve_with_timeout),
        ("delete", c.delete),
        ("release", c.release),
        ("use", c.use_),
        ("watch", c.watch),
        ("ignore", c.ignore),
        ("bury", c.bury),
        ("kick", c.kick),
        ("touch", c.touch),
        ("stats", c.stats),
        ("stats_job", c.stats_job),
        ("stats_tube", c.stats_tube),
        ("list_tubes", c.list_tubes),
        ("list_tube_used", c.list_tube_used),
        ("list_tubes_watched", c.list_tubes_watched),
        ("pause_tube", c.pause_tube),
    ];
    for (command, count) in cmds {
        single(
            out,
            Name("beanstalkd_cmd_", command, "_total"),
            "counter",
            "Commands of this kind run.",
            &count,
        )?;
    }
    let b = s.overview.binlog.unwrap_or_default();
    let counters: [(&str, u64, &str); 6] = [
        ("job_timeouts", v.job_timeouts, "Reservations that ran out of time (TTR)."),
        ("total_jobs", v.total_jobs, "Jobs put since the server started."),
        ("total_connections", v.total_connections, "Connections opened since the server started."),
        ("binlog_records_migrated", b.records_migrated, "Binlog records rewritten by compaction."),
        ("binlog_records_written", b.records_written, "Binlog records written."),
        ("body_read_failures", v.body_read_failures, "Bodies that could not be read back from the log."),
    ];
    for (key, value, help) in counters {
        single(out, Name("beanstalkd_", key, "_total"), "counter", help, &value)?;
    }
    let cpu = |d: std::time::Duration| Seconds(d.as_micros() as u64);
    single(out, named("beanstalkd_rusage_utime_total"), "counter", "User CPU seconds.", &cpu(p.user_cpu))?;
    single(
        out,
        named("beanstalkd_rusage_stime_total"),
        "counter",
        "System CPU seconds.",
        &cpu(p.system_cpu),
    )?;
    let binlog: [(&str, u64, &str); 4] = [
        ("binlog_oldest_index", b.oldest_index, "Number of the oldest binlog file."),
        ("binlog_current_index", b.current_index, "Number of the binlog file being written."),
        ("binlog_max_size", b.max_size, "Size of each binlog file in bytes (-s)."),
        ("draining", u64::from(v.draining), "1 in drain mode (SIGUSR1): puts are refused."),
    ];
    for (key, value, help) in binlog {
        single(out, Name("beanstalkd_", key, ""), "gauge", help, &value)?;
    }
    single(out, named("beanstalkd_pid"), "gauge", "The server's process id.", &p.pid)
}

/// Each per-tube gauge or counter: its key, kind, help and reader.
type TubeSeries = (&'static str, &'static str, &'static str, fn(&TubeFigures) -> u64);

/// What the dead-letter gauges count, beside the counter.
const DEAD_LETTERS_NOW: &str =
    "Buried jobs their retry limit buried: the dead letters there are now, which a restart keeps.";

const TUBE_SERIES: [TubeSeries; 15] = [
    ("current_jobs_urgent", "gauge", "Ready jobs with a priority below 1024.", |t| {
        t.stats.jobs.urgent as u64
    }),
    ("current_jobs_ready", "gauge", "Jobs ready to be reserved.", |t| t.stats.jobs.ready as u64),
    ("current_jobs_reserved", "gauge", "Jobs reserved by a worker.", |t| t.stats.jobs.reserved as u64),
    ("current_jobs_delayed", "gauge", "Jobs waiting for their delay to end.", |t| {
        t.stats.jobs.delayed as u64
    }),
    ("current_jobs_buried", "gauge", "Buried jobs.", |t| t.stats.jobs.buried as u64),
    ("total_jobs_total", "counter", "Jobs put into the tube since it was made.", |t| t.stats.total_jobs),
    ("current_using", "gauge", "Connections using the tube.", |t| t.stats.using as u64),
    ("current_watching", "gauge", "Connections watching the tube.", |t| t.stats.watching as u64),
    ("current_waiting", "gauge", "Connections blocked in a reserve on the tube.", |t| t.stats.waiting as u64),
    ("cmd_delete_total", "counter", "Jobs of the tube deleted.", |t| t.stats.cmd_delete),
    ("cmd_pause_tube_total", "counter", "pause-tube commands on the tube.", |t| t.stats.cmd_pause_tube),
    ("pause", "gauge", "Seconds of the tube's current pause.", |t| u64::from(t.stats.pause)),
    ("pause_time_left", "gauge", "Seconds until the tube's pause ends.", |t| t.stats.pause_time_left),
    (
        "buried_by_retry_limit_total",
        "counter",
        "Jobs of the tube buried by their retry limit (max: or --max-reserves): dead letters.",
        |t| t.times.buried_by_limit,
    ),
    ("current_jobs_buried_by_retry_limit", "gauge", DEAD_LETTERS_NOW, |t| {
        t.stats.jobs.buried_by_limit as u64
    }),
];

#[inline(never)]
fn write_tubes(tubes: &[TubeFigures], out: &mut Body) -> fmt::Result {
    for (key, kind, help, read) in TUBE_SERIES {
        family(out, Name("beanstalkd_tube_", key, ""), kind, help)?;
        for t in tubes {
            writeln!(out, "beanstalkd_tube_{key}{{tube=\"{}\"}} {}", t.stats.name, read(t))?;
        }
    }
    let oldest = "beanstalkd_tube_oldest_ready_seconds";
    family(
        out,
        named(oldest),
        "gauge",
        "How long the tube's oldest ready job has waited; 0 when none is ready.",
    )?;
    for t in tubes {
        writeln!(out, "{oldest}{{tube=\"{}\"}} {}", t.stats.name, Seconds(t.oldest_ready_ns / 1000))?;
    }
    let wait = "beanstalkd_tube_wait_seconds";
    family(out, named(wait), "histogram", "Time from a job becoming ready to its reserve.")?;
    for t in tubes.iter().filter(|t| t.times.waiting.count() > 0) {
        histogram(out, wait, t.stats.name.as_str(), None, &t.times.waiting)?;
    }
    let work = "beanstalkd_tube_work_seconds";
    family(out, named(work), "histogram", "Time from a reserve to its end, by outcome.")?;
    for t in tubes {
        for (how, h) in WorkEnd::ALL.iter().zip(&t.times.working).filter(|(_, h)| h.count() > 0) {
            histogram(out, work, t.stats.name.as_str(), Some(how.label()), h)?;
        }
    }
    Ok(())
}

/// A histogram's labels but `le`.
struct Labels<'a> {
    tube: &'a str,
    outcome: Option<&'a str>,
}

impl fmt::Display for Labels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tube=\"{}\"", self.tube)?;
        match self.outcome {
            Some(outcome) => write!(f, ",outcome=\"{outcome}\""),
            None => Ok(()),
        }
    }
}

/// One histogram's samples: cumulative buckets, `+Inf`, sum and count.
fn histogram(out: &mut Body, name: &str, tube: &str, outcome: Option<&str>, h: &Histogram) -> fmt::Result {
    let labels = Labels { tube, outcome };
    let mut cumulative = 0;
    for (bound, count) in BUCKET_BOUNDS_US.iter().zip(&h.buckets) {
        cumulative += count;
        writeln!(out, "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}", Seconds(*bound))?;
    }
    let count = h.count();
    writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}")?;
    writeln!(out, "{name}_sum{{{labels}}} {}", Seconds(h.sum_us))?;
    writeln!(out, "{name}_count{{{labels}}} {count}")
}

#[inline(never)]
fn write_extras(s: &Scrape, out: &mut Body) -> fmt::Result {
    let b = s.overview.binlog.unwrap_or_default();
    let p = &s.process;
    let extras: [(&str, &str, u64, &str); 12] = [
        ("beanstalkd_binlog_bytes", "gauge", b.disk_bytes, "Bytes of binlog files on disk."),
        ("beanstalkd_binlog_files", "gauge", b.files, "Binlog files on disk."),
        ("beanstalkd_binlog_fsyncs_total", "counter", b.fsyncs, "Binlog fsyncs run."),
        (
            "beanstalkd_binlog_write_failures_total",
            "counter",
            b.failures,
            "Binlog writes and fsyncs that failed.",
        ),
        (
            "beanstalkd_binlog_refusing",
            "gauge",
            u64::from(b.refusing),
            "1 once a failed write makes the binlog refuse every change.",
        ),
        (
            "beanstalkd_connections_refused_total",
            "counter",
            s.refused,
            "Connections closed at once for the connection limit.",
        ),
        (
            "beanstalkd_reply_bytes_unsent",
            "gauge",
            s.replies_unsent,
            "Bytes of replies being written to clients: what clients that do not read hold.",
        ),
        (
            "beanstalkd_engine_lock_waits_total",
            "counter",
            s.lock_waits,
            "Takings of the engine's one lock that found it held and waited: what contention costs.",
        ),
        (
            "beanstalkd_metrics_tubes_left_out",
            "gauge",
            s.left_out as u64,
            "Tubes not reported one by one (--metrics-max-tubes); the largest are kept.",
        ),
        ("process_resident_memory_bytes", "gauge", p.resident_bytes, "Resident memory in bytes."),
        ("process_virtual_memory_bytes", "gauge", p.virtual_bytes, "Address space in bytes."),
        ("process_open_fds", "gauge", p.open_fds, "Open file descriptors."),
    ];
    for (name, kind, value, help) in extras {
        single(out, named(name), kind, help, &value)?;
    }
    family(
        out,
        named("beanstalkd_build_info"),
        "gauge",
        "Always 1: the protocol version and the server's id.",
    )?;
    writeln!(out, "beanstalkd_build_info{{version=\"{VERSION}\",server_id=\"{}\"}} 1", s.server_id)
}
