//! `beanstalk-binlog list DIR [--tube T] [--state S]` and `show DIR ID`:
//! the jobs a start would serve, one line each, or one job with its body;
//! and the small formatting helpers (ages, sizes) the other reports share.
//!
//! Text only: this module reads the [`Log`] it is given and never the
//! directory.

use std::io::{self, Write};

use super::{Job, Log, State};

/// Which jobs `list` shows.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub tube: Option<String>,
    /// `ready`, `delayed` or `buried`.
    pub state: Option<String>,
}

/// The states `--state` takes; a reserved job is logged as ready, which is
/// what it becomes after a restart.
pub const STATES: [&str; 3] = ["ready", "delayed", "buried"];

/// One line per job, oldest id first, under a header line.
pub fn list(log: &Log, filter: &Filter, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "{:>10} {:<20} {:<8} {:>10} {:>9} {:>9} {:>6} {:>9} {:>9}",
        "id", "tube", "state", "pri", "delay", "left", "ttr", "bytes", "age"
    )?;
    for job in &log.jobs {
        let tube = log.tube(job);
        // A unique key and a retry limit close its job's line, as the put
        // gave them.
        let mut key = job.key.as_ref().map_or(String::new(), |(key, secs)| match secs {
            0 => format!(" idp:{key}"),
            secs => format!(" idp:{key}:{secs}"),
        });
        if let Some((name, limit)) = &job.con {
            key.push_str(&format!(" con:{name}:{limit}"));
        }
        key.push_str(&super::group_tags(job));
        if let Some(reserves) = job.limit {
            key.push_str(&format!(" max:{reserves}"));
        }
        if filter.tube.as_deref().is_some_and(|t| t != tube)
            || filter.state.as_deref().is_some_and(|s| s != job.state.name())
        {
            continue;
        }
        let left = match job.state {
            State::Delayed { until } => secs_left(log.now, until),
            _ => "-".to_owned(),
        };
        writeln!(
            out,
            "{:>10} {:<20} {:<8} {:>10} {:>9} {:>9} {:>6} {:>9} {:>9}{key}",
            job.id,
            tube,
            job.state.name(),
            job.pri,
            format!("{}s", job.delay),
            left,
            format!("{}s", job.ttr),
            job.body_len,
            age(log.now, job.created)
        )?;
    }
    Ok(())
}

/// One job: its fields as `key: value` lines (the names of `stats-job`),
/// an empty line, then its body exactly as put.
pub fn show(log: &Log, job: &Job, out: &mut impl Write) -> io::Result<()> {
    let c = &job.counters;
    let file = log.files.get(job.file).map_or("?", |f| f.name.as_str());
    writeln!(out, "id: {}", job.id)?;
    writeln!(out, "tube: {}", log.tube(job))?;
    if let Some((key, secs)) = &job.key {
        writeln!(out, "key: {key}")?;
        writeln!(out, "key-cooldown: {secs}")?;
    }
    if let Some((name, limit)) = &job.con {
        writeln!(out, "concurrency-key: {name}")?;
        writeln!(out, "concurrency-limit: {limit}")?;
    }
    if let Some(group) = &job.groups.0 {
        writeln!(out, "group: {group}")?;
    }
    if let Some(after) = &job.groups.1 {
        writeln!(out, "after-group: {after}")?;
    }
    if let Some(reserves) = job.limit {
        writeln!(out, "max-reserves: {reserves}")?;
    }
    writeln!(out, "state: {}", job.state.name())?;
    writeln!(out, "pri: {}", job.pri)?;
    writeln!(out, "age: {}", age(log.now, job.created))?;
    writeln!(out, "delay: {}", job.delay)?;
    writeln!(out, "ttr: {}", job.ttr)?;
    if let State::Delayed { until } = job.state {
        writeln!(out, "time-left: {}", secs_left(log.now, until))?;
    }
    writeln!(out, "file: {file}")?;
    writeln!(out, "reserves: {}", c.reserves)?;
    writeln!(out, "timeouts: {}", c.timeouts)?;
    writeln!(out, "releases: {}", c.releases)?;
    writeln!(out, "buries: {}", c.buries)?;
    writeln!(out, "kicks: {}", c.kicks)?;
    writeln!(out, "bytes: {}", job.body_len)?;
    writeln!(out)?;
    out.write_all(job.body.as_deref().unwrap_or_default())?;
    out.flush()
}

/// Whole seconds from `now` until `until` (Unix ns), rounded up; `0s` if
/// already due.
pub fn secs_left(now: u64, until: u64) -> String {
    format!("{}s", until.saturating_sub(now).div_ceil(1_000_000_000))
}

/// How long ago `then` (Unix ns) was, short: `42s`, `5m3s`, `2h5m`, `3d4h`.
pub fn age(now: u64, then: u64) -> String {
    duration(now.saturating_sub(then) / 1_000_000_000)
}

/// Seconds, short: `42s`, `5m3s`, `2h5m`, `3d4h`.
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    }
}

/// Bytes, short: `512 B`, `4.0 KiB`, `10.0 MiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes_read_short() {
        assert_eq!(duration(42), "42s");
        assert_eq!(duration(303), "5m3s");
        assert_eq!(duration(7500), "2h5m");
        assert_eq!(duration(3 * 86_400 + 4 * 3600 + 59), "3d4h");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(10 << 20), "10.0 MiB");
        assert_eq!(secs_left(0, 1), "1s");
        assert_eq!(secs_left(5, 1), "0s");
    }
}
