//! The only `unsafe` in the crate: a handful of libc calls that std does not
//! wrap, each behind a small safe function.
//!
//! std already links libc, so declaring the symbols is all it takes; no
//! crate is needed. Everything here is Linux-specific (struct layouts and
//! constants are the Linux ones). Nothing outside this module may use
//! `unsafe`, and nothing in this module holds state or makes decisions.

use std::ffi::{c_char, c_int, c_long};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Linux `struct epoll_event`; packed on x86-64 only, as in the kernel ABI.
#[cfg_attr(target_arch = "x86_64", repr(C, packed))]
#[cfg_attr(not(target_arch = "x86_64"), repr(C))]
#[derive(Clone, Copy)]
struct EpollEvent {
    events: u32,
    data: u64,
}

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
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    fn epoll_create1(flags: c_int) -> c_int;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut EpollEvent) -> c_int;
    fn epoll_wait(epfd: c_int, events: *mut EpollEvent, max: c_int, timeout_ms: c_int) -> c_int;
    fn getrusage(who: c_int, usage: *mut Rusage) -> c_int;
    fn uname(buf: *mut Utsname) -> c_int;
}

const EPOLL_CLOEXEC: c_int = 0o2000000;
const EPOLL_CTL_ADD: c_int = 1;
const EPOLL_CTL_DEL: c_int = 2;
const EPOLLIN: u32 = 0x001;
const EPOLLRDHUP: u32 = 0x2000;
const EPOLLONESHOT: u32 = 1 << 30;
const RUSAGE_SELF: c_int = 0;

fn check(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Calls `listen` again on an already listening socket to raise its backlog
/// (std listens with 128; beanstalkd with 1024).
pub fn set_backlog(socket: &impl AsRawFd, backlog: i32) -> io::Result<()> {
    // SAFETY: `listen` takes a plain fd and an int; the fd is borrowed from a
    // live socket, so it is open for the duration of the call.
    check(unsafe { listen(socket.as_raw_fd(), backlog) }).map(drop)
}

/// An epoll instance that reports when a registered socket's peer hangs up
/// (closes, or shuts down its sending side), and when a wake-up fd becomes
/// readable. Data arriving on a registered socket is not reported.
pub struct HangupPoller {
    epoll: OwnedFd,
}

impl HangupPoller {
    /// A new epoll instance.
    pub fn new() -> io::Result<HangupPoller> {
        // SAFETY: no pointers; on success the kernel hands us a new fd that
        // nothing else owns, so OwnedFd may take it.
        let fd = check(unsafe { epoll_create1(EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just returned by epoll_create1 and is owned by no one.
        Ok(HangupPoller {
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watches `fd` for a hang-up, reporting it once under `token`.
    pub fn watch_hangup(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.add(fd, EPOLLRDHUP | EPOLLONESHOT, token)
    }

    /// Watches `fd` for readability (used for the poller's own wake-up pipe).
    pub fn watch_readable(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.add(fd, EPOLLIN, token)
    }

    fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = EpollEvent {
            events,
            data: token,
        };
        // SAFETY: `event` is a valid, initialised epoll_event that lives for the
        // call; the kernel copies it. Bad fds are reported through errno.
        check(unsafe { epoll_ctl(self.epoll.as_raw_fd(), EPOLL_CTL_ADD, fd, &mut event) }).map(drop)
    }

    /// Stops watching `fd`. Errors (already gone) are ignored.
    pub fn forget(&self, fd: RawFd) {
        let mut event = EpollEvent { events: 0, data: 0 };
        // SAFETY: as in `add`; a non-null event pointer keeps old kernels happy.
        unsafe { epoll_ctl(self.epoll.as_raw_fd(), EPOLL_CTL_DEL, fd, &mut event) };
    }

    /// Blocks until at least one event, then returns the tokens of up to
    /// `tokens.capacity()` (at least 1) of them.
    pub fn wait(&self, tokens: &mut Vec<u64>) -> io::Result<()> {
        const MAX: usize = 64;
        let mut events = [EpollEvent { events: 0, data: 0 }; MAX];
        // SAFETY: `events` is a writable array of MAX epoll_events, and we pass
        // MAX as its length, so the kernel writes only inside it.
        let n = unsafe {
            epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                MAX as c_int,
                -1,
            )
        };
        let n = match check(n) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        tokens.clear();
        tokens.extend(events[..n].iter().map(|e| e.data));
        Ok(())
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
        Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64)
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
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Uname {
        hostname: text(&buf.nodename),
        version: text(&buf.version),
        machine: text(&buf.machine),
    }
}
