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
//! once (a tube seen twice is reported once, by name). It reads the
//! process's figures from `/proc/self`; it formats nothing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::engine::metering::{Overview, TubeFigures};
use crate::ids::TubeId;
use crate::shared::Shared;

/// Tubes whose size is read in one hold of the lock.
pub const SIZES_A_HOLD: usize = 1024;

/// Tubes whose figures are copied in one hold of the lock (a tube's copy
/// is about 900 bytes).
pub const FIGURES_A_HOLD: usize = 32;

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
    /// Bytes of replies being written to clients (`Shared::replies_unsent`).
    pub replies_unsent: u64,
    /// Takings of the engine's lock that found it held and waited.
    pub lock_waits: u64,
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
#[inline(never)]
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
        drop(engine);
        // Whoever waits for the lock goes first.
        std::thread::yield_now();
    }
    // The largest first, ties by id so that scrapes agree; the id twice if
    // a tube was seen twice. (Sorted as `(u64, u64)` pairs, which the
    // engine sorts too: one sort in the binary, not three.)
    let mut order: Vec<(u64, u64)> = Vec::new();
    order.try_reserve_exact(sizes.len()).ok()?;
    order.extend(sizes.iter().map(|&(size, t)| (u64::MAX - size as u64, u64::from(t))));
    drop(sizes);
    order.sort_unstable();
    let keep = order.len().min(shared.config.metrics_max_tubes);
    let left_out = order.len() - keep;
    let mut ids: Vec<(u64, u64)> = Vec::new();
    ids.try_reserve_exact(keep).ok()?;
    ids.extend(order.iter().take(keep).map(|&(_, t)| (t, 0)));
    ids.sort_unstable();
    ids.dedup();
    drop(order);
    let mut tubes: Vec<TubeFigures> = Vec::new();
    tubes.try_reserve_exact(ids.len()).ok()?;
    for chunk in ids.chunks(FIGURES_A_HOLD) {
        let (engine, now) = shared.engine_now();
        engine.tube_figures(chunk.iter().map(|&(t, _)| t as TubeId), now, &mut tubes);
        drop(engine);
        std::thread::yield_now();
    }
    drop_repeated_names(&mut tubes, &mut ids);
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
        replies_unsent: shared.replies_unsent.load(Ordering::Relaxed),
        lock_waits: shared.engine.waits(),
        server_id: stats.instance_id.to_owned(),
    })
}

/// Drops the copies of a tube seen twice, under two ids, because it was
/// removed and made again mid-scrape: a series twice would spoil the
/// whole scrape. By hashes of the names, sorted, and names compared where
/// hashes meet; `room` is spare room of one pair a tube.
fn drop_repeated_names(tubes: &mut Vec<TubeFigures>, room: &mut Vec<(u64, u64)>) {
    room.clear();
    room.extend(tubes.iter().enumerate().map(|(at, t)| (fnv1a(t.stats.name.as_str().as_bytes()), at as u64)));
    room.sort_unstable();
    // The positions of the repeats, gathered at the front of `room` (each
    // write lands at or before the pair just read).
    let mut repeats = 0;
    for i in 1..room.len() {
        let ((hash_a, a), (hash_b, b)) = (room[i - 1], room[i]);
        if hash_a == hash_b && tubes[a as usize].stats.name == tubes[b as usize].stats.name {
            room[repeats] = (b, 0);
            repeats += 1;
        }
    }
    room.truncate(repeats);
    room.sort_unstable();
    let (mut at, mut next) = (0, 0);
    tubes.retain(|_| {
        let repeat = room.get(next).is_some_and(|&(r, _)| r == at);
        next += usize::from(repeat);
        at += 1;
        !repeat
    });
}

/// The FNV-1a hash of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Resident memory and address space from `/proc/self/status`, and open
/// descriptors from `/proc/self/fd`; zeros where they cannot be read.
fn read_proc() -> ProcessFigures {
    let mut figures = ProcessFigures::default();
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            // `VmRSS:     3928 kB`
            let mut words = line.split_ascii_whitespace();
            let (key, kib) = (words.next(), words.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0));
            match key {
                Some("VmRSS:") => figures.resident_bytes = kib * 1024,
                Some("VmSize:") => figures.virtual_bytes = kib * 1024,
                _ => {}
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
        // The listing's own descriptor is among them.
        figures.open_fds = (entries.count() as u64).saturating_sub(1);
    }
    figures
}
