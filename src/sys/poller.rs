//! An event loop's epoll set and its wake-up `eventfd`: the two kernel
//! objects std does not wrap that the loops (`event_loop.rs`) wait on.
//!
//! Sockets are registered once, edge-triggered, for reading, writing and
//! a hang-up at once: the kernel reports each readiness when it begins,
//! and the loop keeps reading or writing until the socket says it would
//! wait, so no registration is ever changed (one `epoll_ctl` a
//! connection, at its accept). Nothing here knows a connection.

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::check;

/// Linux `struct epoll_event`; packed on x86-64 only, as in the kernel ABI.
#[cfg_attr(target_arch = "x86_64", repr(C, packed))]
#[cfg_attr(not(target_arch = "x86_64"), repr(C))]
#[derive(Clone, Copy)]
struct EpollEvent {
    events: u32,
    data: u64,
}

extern "C" {
    fn epoll_create1(flags: c_int) -> c_int;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut EpollEvent) -> c_int;
    fn epoll_wait(epfd: c_int, events: *mut EpollEvent, max: c_int, timeout_ms: c_int) -> c_int;
    fn eventfd(initval: u32, flags: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut u8, len: usize) -> isize;
    fn write(fd: c_int, buf: *const u8, len: usize) -> isize;
}

const EPOLL_CLOEXEC: c_int = 0o2000000;
const EPOLL_CTL_ADD: c_int = 1;
const EPOLLIN: u32 = 0x001;
const EPOLLOUT: u32 = 0x004;
const EPOLLERR: u32 = 0x008;
const EPOLLHUP: u32 = 0x010;
const EPOLLRDHUP: u32 = 0x2000;
const EPOLLET: u32 = 1 << 31;
const EFD_CLOEXEC: c_int = 0o2000000;
const EFD_NONBLOCK: c_int = 0o4000;

/// Events one wait returns at most: the rest wait for the next.
pub const EVENTS_A_WAIT: usize = 256;

/// What one event reports of its file descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The token it was registered with.
    pub token: u64,
    /// Bytes (or an end of file) wait to be read.
    pub readable: bool,
    /// It has room to send.
    pub writable: bool,
    /// The peer hung up, or the socket has an error.
    pub gone: bool,
}

/// An epoll set.
#[derive(Debug)]
pub struct Poller {
    epoll: OwnedFd,
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: no pointers; on success the kernel hands us a new fd that
        // nothing else owns, so OwnedFd may take it.
        let fd = check(unsafe { epoll_create1(EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just returned by epoll_create1 and is owned by no one.
        Ok(Poller { epoll: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Watches `fd` for reading, writing and a hang-up, edge-triggered,
    /// reporting under `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.control(EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, token)
    }

    /// Watches `fd` for reading only, level-triggered (a wake-up fd).
    pub fn add_readable(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.control(EPOLL_CTL_ADD, fd, EPOLLIN, token)
    }

    fn control(&self, op: c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = EpollEvent { events, data: token };
        // SAFETY: `event` is a valid, initialised epoll_event that lives for the
        // call; the kernel copies it. Bad fds are reported through errno.
        check(unsafe { epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut event) }).map(drop)
    }

    /// Waits up to `timeout_ms` (-1: for ever) for events, and puts up to
    /// [`EVENTS_A_WAIT`] of them in `into`. A signal ends the wait early
    /// with none.
    pub fn wait(&self, into: &mut Vec<Event>, timeout_ms: i32) -> io::Result<()> {
        let mut events = [EpollEvent { events: 0, data: 0 }; EVENTS_A_WAIT];
        // SAFETY: `events` is a writable array of EVENTS_A_WAIT epoll_events,
        // and that length is passed, so the kernel writes only inside it.
        let n = unsafe {
            epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), EVENTS_A_WAIT as c_int, timeout_ms)
        };
        into.clear();
        let n = match check(n) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        into.extend(events[..n].iter().map(|e| {
            let bits = e.events;
            Event {
                token: e.data,
                readable: bits & EPOLLIN != 0,
                writable: bits & EPOLLOUT != 0,
                gone: bits & (EPOLLRDHUP | EPOLLHUP | EPOLLERR) != 0,
            }
        }));
        Ok(())
    }
}

/// A counter the kernel makes readable while it is not zero: how one
/// thread wakes a loop asleep in its epoll set.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: no pointers; on success the fd is new and owned by no one.
        let fd = check(unsafe { eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) })?;
        // SAFETY: `fd` was just returned by eventfd and is owned by no one.
        Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Makes it readable (adds one).
    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: `one` is 8 readable bytes, the size an eventfd write
        // takes; a full counter (never, at 2^64 - 2) reports EAGAIN.
        unsafe { write(self.fd.as_raw_fd(), one.as_ptr(), one.len()) };
    }

    /// Makes it unreadable again (reads the count, if any).
    pub fn clear(&self) {
        let mut count = [0u8; 8];
        // SAFETY: `count` is 8 writable bytes, the size an eventfd read
        // needs; an empty counter reports EAGAIN and writes nothing.
        unsafe { read(self.fd.as_raw_fd(), count.as_mut_ptr(), count.len()) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
