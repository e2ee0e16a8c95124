//! The default connection limit, from what the host lets this process hold.
//!
//! Every connection costs one file descriptor, and while it is busy two
//! memory maps (its buffers) and their address space; it has no thread
//! (the event loops serve it). The kernel caps each of these: the fd limit
//! (`RLIMIT_NOFILE`), the maps of one process (`vm.max_map_count`), the
//! address space and data (`RLIMIT_AS`, `RLIMIT_DATA`). Past any of them
//! `accept` or a buffer starts failing; below them the server refuses a
//! connection cleanly, closing it at once. So the default for
//! `--max-connections` is the smallest of those caps, less what the server
//! itself uses.
//!
//! This module reads limits and computes; it changes no limit and logs
//! nothing. The numbers come through `sys` (rlimits) and `/proc`; and
//! how many CPUs the host has online, for the event loops, from `/sys`. The one
//! setting it makes is the allocator's, for the memory a connection costs:
//! [`tune_malloc`]; and the binary's [`Allocator`] is here.

use crate::sys;

/// How many CPUs this host has online, as Linux lists them in `/sys`
/// (`0-1`, `0,2-3`): the event loops' count unless `--threads` says.
/// Unreadable, it says 1. (It counts the host's CPUs, not those this
/// process may run on; std's `available_parallelism`, which knows both,
/// cost the static binary 13.9 KB.)
pub fn cpus_online() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online").map_or(1, |online| count_cpus(&online))
}

/// The CPUs in a list like `0-3,6`; at least 1.
fn count_cpus(online: &str) -> usize {
    let range = |part: &str| -> Option<usize> {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        Some(last.trim().parse::<usize>().ok()?.checked_sub(first.trim().parse().ok()?)? + 1)
    };
    online.trim().split(',').filter_map(range).sum::<usize>().max(1)
}

/// The binary's global allocator: small blocks in pages of their own size,
/// given back as each page empties; big blocks (a busy connection's
/// buffers among them) as mappings of their own, so that an idle
/// connection, having freed its buffers, costs its thread and nothing
/// more; `malloc` in between. See `sys::Allocator`.
pub use crate::sys::Allocator;

/// Makes every thread allocate from one malloc arena, and freed memory
/// merge and go back at once. Call it first in `main`, before any thread
/// exists; see `sys::tune_malloc` for the why.
pub fn tune_malloc() {
    sys::tune_malloc();
}

/// Descriptors the server uses besides its connections: stdin, stdout and
/// stderr (3), the listener (1), the accept loop's wake-up pair and each
/// event loop's epoll set and `eventfd` (3 and more), the binlog's lock, current file, directory and a file
/// being opened or rewritten (4), the files bodies are read from
/// (`binlog::body::READERS`, which it checks), and one to accept a connection past the
/// limit so as to close it (1); then some room to spare.
pub const RESERVED_FDS: u64 = 24;

/// Memory maps each connection adds while it is busy: its input and
/// output buffers, which are mappings of their own (see
/// `sys::Allocator`; the kernel often merges them with a neighbour, but
/// need not). An idle connection has none: its loop lets them go.
pub const MAPS_PER_CONNECTION: u64 = 2;

/// Memory maps the process uses besides connections' buffers: the binary,
/// the heap and one heap per malloc arena, the signal stacks, and the
/// holes the allocator may cut in its regions (`sys::HOLE_MAPS`, 4,096);
/// with room to spare.
pub const RESERVED_MAPS: u64 = 512 + crate::sys::HOLE_MAPS;

/// Address space each connection adds while it is busy: its input and
/// output buffers, which are mappings of at least `sys::OWN_MAPPING_AT`
/// bytes each. (It has no thread: its event loop serves it.)
pub const ADDRESS_SPACE_PER_CONNECTION: u64 = 2 * crate::sys::OWN_MAPPING_AT as u64;

/// Address space (and data) kept free for everything that is not a
/// connection: jobs, the job table, replies being built.
pub const RESERVED_ADDRESS_SPACE: u64 = 8 << 20;

/// The limit used when none of the caps above can be read (no `/proc`,
/// every rlimit unlimited), as it was before the limit came from the host.
pub const FALLBACK: usize = 10_000;

/// The caps that bound the number of connections; `None` where there is no
/// cap, or it could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostLimits {
    /// `RLIMIT_NOFILE`, the soft limit (the one the kernel enforces).
    pub open_files: Option<u64>,
    /// `/proc/sys/vm/max_map_count`.
    pub max_map_count: Option<u64>,
    /// `RLIMIT_AS` and the address space in use when it was read
    /// (`VmSize`).
    pub address_space: Option<(u64, u64)>,
    /// `RLIMIT_DATA` and the data in use when it was read (`VmData`).
    pub data: Option<(u64, u64)>,
}

impl HostLimits {
    /// Reads the limits of this process and host.
    pub fn read() -> HostLimits {
        let proc_number = |path: &str| std::fs::read_to_string(path).ok()?.trim().parse().ok();
        HostLimits {
            open_files: sys::soft_limit(sys::Resource::OpenFiles),
            max_map_count: proc_number("/proc/sys/vm/max_map_count"),
            address_space: sys::soft_limit(sys::Resource::AddressSpace)
                .map(|limit| (limit, in_use("VmSize"))),
            data: sys::soft_limit(sys::Resource::Data).map(|limit| (limit, in_use("VmData"))),
        }
    }
}

impl HostLimits {
    /// Why this process cannot serve, if its address space (`RLIMIT_AS`)
    /// or data (`RLIMIT_DATA`) leaves less than [`RESERVED_ADDRESS_SPACE`]
    /// and one connection's room ([`ADDRESS_SPACE_PER_CONNECTION`])
    /// besides what is in use: a start there would fail at its first
    /// thread or job, or abort at an allocation.
    pub fn too_little_memory(&self) -> Option<String> {
        let needed = RESERVED_ADDRESS_SPACE + ADDRESS_SPACE_PER_CONNECTION;
        [(self.address_space, "RLIMIT_AS"), (self.data, "RLIMIT_DATA")].into_iter().find_map(
            |(limit, name)| {
                let (bytes, used) = limit?;
                (bytes.saturating_sub(used) < needed).then(|| {
                    format!(
                        "too little memory to serve: {name} {bytes} less {used} in use leaves less than the \
                     {RESERVED_ADDRESS_SPACE} reserved and {ADDRESS_SPACE_PER_CONNECTION} bytes a connection"
                    )
                })
            },
        )
    }
}

/// How many connections to serve at once, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimit {
    pub value: usize,
    /// The cap that decided it, for the `-V` log: `RLIMIT_NOFILE 64 less 24
    /// reserved`, or `--max-connections`.
    pub reason: String,
}

impl ConnectionLimit {
    /// A limit given on the command line.
    pub fn given(value: usize) -> ConnectionLimit {
        ConnectionLimit { value, reason: "--max-connections".to_owned() }
    }

    /// The most connections `limits` allow: the smallest cap, at least 1
    /// (a server that refuses everyone is no use; with the fd limit that
    /// low, the kernel refuses first anyway).
    pub fn from_host(limits: &HostLimits) -> ConnectionLimit {
        let mut caps: Vec<(u64, String)> = Vec::new();
        let mut less = |limit: Option<u64>, name: &str, reserved: u64| {
            if let Some(n) = limit {
                caps.push((n.saturating_sub(reserved), format!("{name} {n} less {reserved} reserved")));
            }
        };
        less(limits.open_files, "RLIMIT_NOFILE", RESERVED_FDS);
        if let Some(maps) = limits.max_map_count {
            let value = maps.saturating_sub(RESERVED_MAPS) / MAPS_PER_CONNECTION;
            let reason = format!(
                "vm.max_map_count {maps} less {RESERVED_MAPS} reserved, {MAPS_PER_CONNECTION} maps a connection"
            );
            caps.push((value, reason));
        }
        for (limit, name) in [(limits.address_space, "RLIMIT_AS"), (limits.data, "RLIMIT_DATA")] {
            if let Some((bytes, used)) = limit {
                let free = bytes.saturating_sub(used).saturating_sub(RESERVED_ADDRESS_SPACE);
                let value = free / ADDRESS_SPACE_PER_CONNECTION;
                let reason = format!(
                    "{name} {bytes} less {used} in use and {RESERVED_ADDRESS_SPACE} reserved, \
                     {ADDRESS_SPACE_PER_CONNECTION} bytes a connection"
                );
                caps.push((value, reason));
            }
        }
        // The first of equal caps wins, so the fd limit is named when it ties.
        match caps.into_iter().min_by_key(|(value, _)| *value) {
            Some((value, reason)) => {
                ConnectionLimit { value: usize::try_from(value).unwrap_or(usize::MAX).max(1), reason }
            }
            None => ConnectionLimit { value: FALLBACK, reason: "no host limit could be read".to_owned() },
        }
    }
}

/// Bytes of `field` (`VmSize`, `VmData`) in `/proc/self/status`; 0 if it
/// cannot be read.
fn in_use(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with(field)).unwrap_or_default();
    let kib: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).unwrap_or(0);
    kib * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpus_online_are_counted_from_their_list() {
        for (online, count) in [("0\n", 1), ("3", 1), ("0-1\n", 2), ("0,2-3", 3), ("0,2", 2), ("", 1)] {
            assert_eq!(count_cpus(online), count, "{online:?}");
        }
    }

    #[test]
    fn the_smallest_cap_less_its_reserve_wins_and_says_so() {
        let host = HostLimits {
            open_files: Some(2048),
            max_map_count: Some(65_530),
            address_space: None,
            data: None,
        };
        let limit = ConnectionLimit::from_host(&host);
        assert_eq!(
            limit,
            ConnectionLimit { value: 2024, reason: "RLIMIT_NOFILE 2048 less 24 reserved".into() }
        );

        let limit = ConnectionLimit::from_host(&HostLimits { open_files: Some(1 << 20), ..host });
        assert_eq!(limit.value, (65_530 - 512 - 4096) / 2);
        assert_eq!(limit.reason, "vm.max_map_count 65530 less 4608 reserved, 2 maps a connection");
    }

    #[test]
    fn the_address_space_counts_what_is_in_use_and_each_connection() {
        // 128 MiB, 20 MiB of it in use: 100 MiB left for connections.
        let host = HostLimits { address_space: Some((128 << 20, 20 << 20)), ..HostLimits::default() };
        let limit = ConnectionLimit::from_host(&host);
        assert_eq!(limit.value, (100 << 20) / ADDRESS_SPACE_PER_CONNECTION as usize);
        assert!(limit.reason.starts_with("RLIMIT_AS 134217728 less 20971520 in use"), "{}", limit.reason);
        let host = HostLimits { data: Some((64 << 20, 4 << 20)), ..host };
        assert!(ConnectionLimit::from_host(&host).reason.starts_with("RLIMIT_DATA"));
    }

    #[test]
    fn no_readable_limit_falls_back_and_a_tiny_one_still_serves_one() {
        assert_eq!(ConnectionLimit::from_host(&HostLimits::default()).value, FALLBACK);
        let tiny = HostLimits { open_files: Some(10), ..HostLimits::default() };
        assert_eq!(ConnectionLimit::from_host(&tiny).value, 1);
    }

    #[test]
    fn this_host_is_read() {
        // Every Linux process has an fd limit; it caps the default.
        let limits = HostLimits::read();
        let files = limits.open_files.expect("RLIMIT_NOFILE");
        assert!(
            ConnectionLimit::from_host(&limits).value as u64 <= files.saturating_sub(RESERVED_FDS).max(1)
        );
    }
}
