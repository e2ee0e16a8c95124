//! One scrape's figures, copied out of the engine a bounded chunk at a
//! time, so that a scrape never holds the engine's lock for long whatever
//! the number of tubes: the engine-wide figures in one short hold, each
//! tube's size [`SIZES_A_HOLD`] tubes a hold, then the figures of the
//! tubes kept (the largest, up to `--metrics-max-tubes`)
//! [`FIGURES_A_HOLD`] a hold. The room for every copy is claimed before
//! the lock is taken, and nothing allocates under it.
//!
//! Tubes come and go between holds, so a scrape is not one instant's
//! picture: a tube made mid-scrape may be missing, and each tube appears
//! once (duplicates are dropped by name). It reads the process's figures
//! from `/proc/self`; it formats nothing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::engine::metering::{Overview, TubeFigures};
use crate::ids::TubeId;
use crate::shared::Shared;

/// Tubes whose size is read in one hold of the lock.
pub const SIZES_A_HOLD: usize = 4096;

/// Tubes whose figures are copied in one hold of the lock (a tube's copy
/// is about 900 bytes).
pub const FIGURES_A_HOLD: usize = 64;

/// Everything one scrape reports.
pub struct Scrape {
    pub overview: Overview,
    /// Tubes reported one by one, by name.
    pub tubes: Vec<TubeFigures>,
    /// Tubes left out by `--metrics-max-tubes`.
    pub left_out: usize,
    pub process: ProcessFigures,
    /// Connections closed at once for the connection limit.
    pub refused: u64,
    pub server_id: String,
}

/// The process's own figures (from `stats` and `/proc/self`).
#[derive(Debug, Default)]
pub struct ProcessFigures {
    pub pid: u32,
    pub uptime_secs: u64,
    pub user_cpu: Duration,
    pub system_cpu: Duration,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
}

/// Copies what a scrape reports; `None` if the memory for it cannot be had.
pub fn collect(shared: &Shared) -> Option<Scrape> {
    let overview = {
        let (engine, _) = shared.engine_now();
        engine.overview()
    };
    // Each tube's size, a chunk a hold; room for a few more than there are.
    let mut sizes: Vec<(usize, TubeId)> = Vec::new();
    sizes.try_reserve_exact(overview.tubes + overview.tubes / 8 + 64).ok()?;
    let mut from = 0;
    loop {
        let engine = shared.engine();
        from = engine.tube_sizes(from, SIZES_A_HOLD, &mut sizes);
        if from >= engine.tube_count() || sizes.len() == sizes.capacity() {
            break;
        }
    }
    sizes.sort_unstable_by_key(|&(_, t)| t);
    sizes.dedup_by_key(|&mut (_, t)| t);
    let max = shared.config.metrics_max_tubes;
    let mut left_out = 0;
    if sizes.len() > max {
        left_out = sizes.len() - max;
        // The largest first; ties by id, so repeated scrapes keep the same.
        sizes.select_nth_unstable_by(max, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        sizes.truncate(max);
    }
    let ids: Vec<TubeId> = sizes.iter().map(|&(_, t)| t).collect();
    drop(sizes);
    let mut tubes: Vec<TubeFigures> = Vec::new();
    tubes.try_reserve_exact(ids.len()).ok()?;
    for chunk in ids.chunks(FIGURES_A_HOLD) {
        let (engine, now) = shared.engine_now();
        engine.tube_figures(chunk, now, &mut tubes);
    }
    tubes.sort_unstable_by(|a, b| a.stats.name.as_str().cmp(b.stats.name.as_str()));
    tubes.dedup_by(|a, b| a.stats.name == b.stats.name);
    let stats = shared.process_stats(overview.binlog);
    let process = ProcessFigures {
        pid: stats.pid,
        uptime_secs: stats.uptime_secs,
        user_cpu: stats.user_cpu,
        system_cpu: stats.system_cpu,
        ..read_proc()
    };
    Some(Scrape {
        overview,
        tubes,
        left_out,
        process,
        refused: shared.refused.load(Ordering::Relaxed),
        server_id: stats.instance_id.to_owned(),
    })
}

/// Resident memory and address space from `/proc/self/status`, and open
/// descriptors from `/proc/self/fd`; zeros where they cannot be read.
fn read_proc() -> ProcessFigures {
    let mut figures = ProcessFigures::default();
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            let kib =
                |rest: &str| rest.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap_or(0) * 1024;
            if let Some(rest) = line.strip_prefix("VmRSS:") {
                figures.resident_bytes = kib(rest);
            } else if let Some(rest) = line.strip_prefix("VmSize:") {
                figures.virtual_bytes = kib(rest);
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        // The listing's own descriptor is among them.
        figures.open_fds = (entries.count() as u64).saturating_sub(1);
    }
    figures
}
