//! The only `unsafe` in the crate: a handful of libc calls that std does not
//! wrap, each behind a small safe function.
//!
//! std already links libc, so declaring the symbols is all it takes; no
//! crate is needed. Everything here is Linux-specific (struct layouts and
//! constants are the Linux ones). Nothing outside this module may use
//! `unsafe`, and nothing in this module holds state or makes decisions,
//! but for one rule of the allocator's: which blocks are mappings of their
//! own (`memory.rs`, with the rest of what concerns memory).
//!
//! One file a subject: this one (clocks, and what `stats` reads of the
//! process), `socket.rs` (polls, epoll, socket options, inherited
//! listeners), `process.rs` (signals, resource limits, changing user),
//! `file.rs` (preallocation, `fcntl` locks), `crc.rs` (the CPU's CRC-32C
//! instruction, detected), `poller.rs` (an event
//! loop's epoll set and wake-up `eventfd`) and `memory.rs` (the
//! allocator, with `pages.rs`, `regions.rs`, `holes.rs`, and
//! `evacuation.rs`, which empties the pages a few live blocks pin).
//! Beside them, and not Rust: `no-unwind-tables.ld`, the static build's
//! linker script, which leaves out the unwind tables of a server that
//! never unwinds (README, "A static binary").

use std::ffi::{c_char, c_int, c_long};
use std::io;
use std::time::Duration;

pub(crate) mod crc;
pub(crate) mod evacuation;
#[cfg(test)]
pub(crate) mod failing;
pub(crate) mod file;
pub(crate) mod holes;
pub(crate) mod memory;
pub(crate) mod pages;
pub(crate) mod poller;
pub(crate) mod process;
pub(crate) mod regions;
pub(crate) mod socket;

pub use evacuation::evacuate;
pub use file::{lock_posix, posix_lock_holder, preallocate, O_NOFOLLOW, O_NONBLOCK};
pub use holes::HOLE_MAPS;
pub use memory::{try_box, tune_malloc, Allocator, OWN_MAPPING_AT};
pub use poller::{Event, EventFd, Poller};
pub use process::{
    become_user, ignore_sigpipe, lower_thread_priority, soft_limit, Resource, SignalSet, SIGINT, SIGTERM,
    SIGUSR1,
};
#[cfg(test)]
pub use socket::{dead_peer, keepalive};
pub use socket::{
    has_unread_bytes, inherited_listener, peek_byte, peer_hung_up, send_now, set_backlog, set_keepalive,
    wait_any_readable, wait_readable, DeadPeer, Inherited,
};

#[repr(C)]
struct Timeval {
    tv_sec: c_long,
    tv_usec: c_long,
}

/// Linux `struct rusage`: two timevals, then fourteen longs we do not read.
#[repr(C)]
struct Rusage {
    ru_utime: Timeval,
    ru_stime: Timeval,
    _rest: [c_long; 14],
}

/// Linux `struct utsname`: six 65-byte strings.
#[repr(C)]
struct Utsname {
    sysname: [c_char; 65],
    nodename: [c_char; 65],
    release: [c_char; 65],
    version: [c_char; 65],
    machine: [c_char; 65],
    domainname: [c_char; 65],
}

extern "C" {
    fn getrusage(who: c_int, usage: *mut Rusage) -> c_int;
    fn uname(buf: *mut Utsname) -> c_int;
    fn clock_gettime(clock: c_int, time: *mut Timespec) -> c_int;
}

const RUSAGE_SELF: c_int = 0;

/// Linux `struct timespec`.
#[repr(C)]
struct Timespec {
    tv_sec: c_long,
    tv_nsec: c_long,
}

const CLOCK_REALTIME: c_int = 0;
const CLOCK_BOOTTIME: c_int = 7;

/// Reads clock `clock` in nanoseconds (0 before its epoch, or if it cannot
/// be read, which Linux never does for these two clocks).
fn read_clock(clock: c_int) -> u64 {
    let mut time = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `time` is a valid, writable timespec for the call; an unknown
    // clock is reported through the return value, and `time` is then unread.
    if unsafe { clock_gettime(clock, &mut time) } != 0 {
        return 0;
    }
    let secs = u64::try_from(time.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(time.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Nanoseconds since boot, counting time spent suspended (`CLOCK_BOOTTIME`):
/// never jumps, never stops.
pub fn boot_time_nanos() -> u64 {
    read_clock(CLOCK_BOOTTIME)
}

/// Nanoseconds since the Unix epoch by the wall clock (`CLOCK_REALTIME`),
/// which steps whenever the clock is set.
pub fn unix_time_nanos() -> u64 {
    read_clock(CLOCK_REALTIME)
}

fn check(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// User and system CPU time used by this process so far.
pub fn cpu_times() -> (Duration, Duration) {
    let mut usage = std::mem::MaybeUninit::<Rusage>::zeroed();
    // SAFETY: `usage` points to writable memory of the right size and layout;
    // getrusage fills it in (it was zeroed, so it is initialised either way).
    let usage = unsafe {
        getrusage(RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let duration = |tv: &Timeval| {
        Duration::from_secs(tv.tv_sec.max(0) as u64) + Duration::from_micros(tv.tv_usec.max(0) as u64)
    };
    (duration(&usage.ru_utime), duration(&usage.ru_stime))
}

/// The kernel's `uname` fields the stats show: node name, version, machine.
pub struct Uname {
    pub hostname: String,
    pub version: String,
    pub machine: String,
}

/// Calls `uname(2)`. Empty strings if it fails (it cannot on Linux).
pub fn uname_fields() -> Uname {
    let mut buf = std::mem::MaybeUninit::<Utsname>::zeroed();
    // SAFETY: `buf` points to a zeroed, writable utsname; uname fills in
    // NUL-terminated strings within each 65-byte field.
    let buf = unsafe {
        uname(buf.as_mut_ptr());
        buf.assume_init()
    };
    let text = |field: &[c_char; 65]| {
        let bytes: Vec<u8> = field.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Uname { hostname: text(&buf.nodename), version: text(&buf.version), machine: text(&buf.machine) }
}
