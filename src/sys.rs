//! The only `unsafe` in the crate: a handful of libc calls that std does not
//! wrap, each behind a small safe function.
//!
//! std already links libc, so declaring the symbols is all it takes; no
//! crate is needed. Everything here is Linux-specific (struct layouts and
//! constants are the Linux ones). Nothing outside this module may use
//! `unsafe`, and nothing in this module holds state or makes decisions,
//! but for one rule of the allocator's: which blocks are mappings of their
//! own (`sys/memory.rs`, with the rest of what concerns memory).

use std::ffi::{c_char, c_int, c_long};
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::time::Duration;

mod memory;
pub use memory::{give_back_free_memory, tune_malloc, Allocator, OWN_MAPPING_AT};

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
    fn sigemptyset(set: *mut SigSet) -> c_int;
    fn sigaddset(set: *mut SigSet, signal: c_int) -> c_int;
    fn pthread_sigmask(how: c_int, set: *const SigSet, old: *mut SigSet) -> c_int;
    fn sigwait(set: *const SigSet, signal: *mut c_int) -> c_int;
    fn signal(signal: c_int, handler: usize) -> usize;
    fn setgroups(count: usize, groups: *const u32) -> c_int;
    fn setgid(gid: u32) -> c_int;
    fn setuid(uid: u32) -> c_int;
    fn getuid() -> u32;
    fn geteuid() -> u32;
    fn getgid() -> u32;
    fn getegid() -> u32;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_int, len: *mut u32) -> c_int;
    fn poll(fds: *mut PollFd, count: std::ffi::c_ulong, timeout_ms: c_int) -> c_int;
    fn clock_gettime(clock: c_int, time: *mut Timespec) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_int, len: u32) -> c_int;
    fn getrlimit64(resource: c_int, limit: *mut Rlimit) -> c_int;
}

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

/// Linux `struct pollfd`.
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

const POLLIN: i16 = 0x001;
const POLLERR: i16 = 0x008;
const POLLHUP: i16 = 0x010;
const POLLNVAL: i16 = 0x020;
const POLLRDHUP: i16 = 0x2000;

/// Polls `fds` for `events`, waiting up to `timeout_ms` (-1: for ever);
/// returns each fd's reported events. EINTR counts as "nothing yet".
fn poll_fds<const N: usize>(fds: [RawFd; N], events: i16, timeout_ms: c_int) -> io::Result<[i16; N]> {
    let mut entries = fds.map(|fd| PollFd { fd, events, revents: 0 });
    // SAFETY: `entries` is a writable array of N pollfds and N is passed as
    // its length, so the kernel reads and writes only inside it. The fds are
    // plain numbers to poll; a closed one is reported as POLLNVAL, not UB.
    let ret = unsafe { poll(entries.as_mut_ptr(), N as std::ffi::c_ulong, timeout_ms) };
    match check(ret) {
        Ok(_) => Ok(entries.map(|e| e.revents)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok([0; N]),
        Err(e) => Err(e),
    }
}

/// True if the peer of connected socket `socket` has hung up: closed, reset,
/// or shut down its sending side. Never blocks (a poll with no timeout);
/// data waiting to be read does not count. If the question cannot be asked,
/// the answer is false: the hang-up watcher remains the backstop.
pub fn peer_hung_up(socket: &impl AsRawFd) -> bool {
    let gone = POLLRDHUP | POLLHUP | POLLERR | POLLNVAL;
    poll_fds([socket.as_raw_fd()], POLLRDHUP, 0).is_ok_and(|[revents]| revents & gone != 0)
}

/// Blocks until `first` or `second` is readable (or has an error or hang-up
/// pending, which a read would report); returns which of them are. May
/// return neither if a signal interrupts the wait.
pub fn wait_readable(first: &impl AsRawFd, second: &impl AsRawFd) -> io::Result<(bool, bool)> {
    let [a, b] = poll_fds([first.as_raw_fd(), second.as_raw_fd()], POLLIN, -1)?;
    Ok((a != 0, b != 0))
}

/// Blocks until `socket` is readable, or has an error or hang-up pending
/// (which a read would report). May return early if a signal interrupts
/// the wait.
pub fn wait_until_readable(socket: &impl AsRawFd) -> io::Result<()> {
    poll_fds([socket.as_raw_fd()], POLLIN, -1).map(|_| ())
}

/// glibc's `struct rlimit64`: the soft and the hard limit (64-bit on every
/// architecture, unlike `struct rlimit`).
#[repr(C)]
struct Rlimit {
    current: u64,
    max: u64,
}

const RLIMIT_DATA: c_int = 2;
const RLIMIT_NPROC: c_int = 6;
const RLIMIT_NOFILE: c_int = 7;
const RLIMIT_AS: c_int = 9;
const RLIM_INFINITY: u64 = u64::MAX;

/// A resource limit [`soft_limit`] can read.
#[derive(Debug, Clone, Copy)]
pub enum Resource {
    /// `RLIMIT_NOFILE`: one more than the highest fd the process may open.
    OpenFiles,
    /// `RLIMIT_NPROC`: processes (and so threads) of the process's real user.
    Processes,
    /// `RLIMIT_AS`: bytes of address space, every mapping counted.
    AddressSpace,
    /// `RLIMIT_DATA`: bytes of the heap and of private writable mappings
    /// (thread stacks and a connection's buffers among them).
    Data,
}

/// The soft limit of `resource` (the one the kernel enforces); `None` if
/// it is unlimited or cannot be read.
pub fn soft_limit(resource: Resource) -> Option<u64> {
    let resource = match resource {
        Resource::OpenFiles => RLIMIT_NOFILE,
        Resource::Processes => RLIMIT_NPROC,
        Resource::AddressSpace => RLIMIT_AS,
        Resource::Data => RLIMIT_DATA,
    };
    let mut limit = Rlimit { current: 0, max: 0 };
    // SAFETY: `limit` is a live, writable struct rlimit; the kernel fills it.
    check(unsafe { getrlimit64(resource, &mut limit) }).ok()?;
    (limit.current != RLIM_INFINITY).then_some(limit.current)
}

/// glibc's `sigset_t`: 1024 bits.
#[repr(C)]
struct SigSet([u64; 16]);

const EPOLL_CLOEXEC: c_int = 0o2000000;
const EPOLL_CTL_ADD: c_int = 1;
const EPOLL_CTL_MOD: c_int = 3;
const EPOLLIN: u32 = 0x001;
const EPOLLRDHUP: u32 = 0x2000;
const EPOLLONESHOT: u32 = 1 << 30;
const RUSAGE_SELF: c_int = 0;
const SIG_BLOCK: c_int = 0;
const SIG_IGN: usize = 1;
const SOL_SOCKET: c_int = 1;
const SO_TYPE: c_int = 3;
const SO_KEEPALIVE: c_int = 9;
const SO_ACCEPTCONN: c_int = 30;
const SO_DOMAIN: c_int = 39;
const SOCK_STREAM: c_int = 1;
const AF_UNIX: c_int = 1;
const AF_INET: c_int = 2;
const AF_INET6: c_int = 10;

/// Signal numbers (the same on every Linux architecture we build for).
pub const SIGINT: i32 = 2;
pub const SIGUSR1: i32 = 10;
pub const SIGPIPE: i32 = 13;
pub const SIGTERM: i32 = 15;

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
        Ok(HangupPoller { epoll: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Watches `fd` for a hang-up, reporting it once under `token`.
    pub fn watch_hangup(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.add(fd, EPOLLRDHUP | EPOLLONESHOT, token)
    }

    /// Arms again a hang-up watch that has fired or was set before (one-shot
    /// watches stay registered, disarmed, after they fire).
    pub fn rearm_hangup(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = EpollEvent { events: EPOLLRDHUP | EPOLLONESHOT, data: token };
        // SAFETY: as in `add`: a valid event that the kernel copies.
        check(unsafe { epoll_ctl(self.epoll.as_raw_fd(), EPOLL_CTL_MOD, fd, &mut event) }).map(drop)
    }

    /// Watches `fd` for readability (used for the poller's own wake-up pipe).
    pub fn watch_readable(&self, fd: RawFd, token: u64) -> io::Result<()> {
        self.add(fd, EPOLLIN, token)
    }

    fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = EpollEvent { events, data: token };
        // SAFETY: `event` is a valid, initialised epoll_event that lives for the
        // call; the kernel copies it. Bad fds are reported through errno.
        check(unsafe { epoll_ctl(self.epoll.as_raw_fd(), EPOLL_CTL_ADD, fd, &mut event) }).map(drop)
    }

    /// Blocks until at least one event, then returns the tokens of up to
    /// `tokens.capacity()` (at least 1) of them.
    pub fn wait(&self, tokens: &mut Vec<u64>) -> io::Result<()> {
        const MAX: usize = 64;
        let mut events = [EpollEvent { events: 0, data: 0 }; MAX];
        // SAFETY: `events` is a writable array of MAX epoll_events, and we pass
        // MAX as its length, so the kernel writes only inside it.
        let n = unsafe { epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), MAX as c_int, -1) };
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

/// A set of signals that every thread of the process blocks, to be taken one
/// at a time with [`SignalSet::wait`] on a thread of our choosing. Nothing
/// runs in signal-handler context at all, so nothing has to be
/// async-signal-safe.
pub struct SignalSet {
    set: SigSet,
}

impl SignalSet {
    /// Blocks `signals` in the calling thread, and so in every thread it
    /// spawns afterwards. Call it before any other thread exists.
    pub fn block(signals: &[i32]) -> io::Result<SignalSet> {
        let mut set = SigSet([0; 16]);
        // SAFETY: `set` is a valid, writable sigset_t for each call; the
        // signal numbers are plain ints that sigaddset validates.
        unsafe {
            sigemptyset(&mut set);
            for &signal in signals {
                check(sigaddset(&mut set, signal))?;
            }
        }
        // SAFETY: `set` is initialised; a null old-set pointer is allowed.
        let ret = unsafe { pthread_sigmask(SIG_BLOCK, &set, std::ptr::null_mut()) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(SignalSet { set })
    }

    /// Waits for one of the blocked signals and returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        let mut signal: c_int = 0;
        // SAFETY: both pointers are valid for the call; `set` is initialised.
        let ret = unsafe { sigwait(&self.set, &mut signal) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(signal)
    }
}

/// Ignores SIGPIPE, so that writing to a closed socket is an error return
/// (EPIPE) instead of the death of the process. (Rust's runtime already does
/// this for binaries; a server must not depend on that.)
pub fn ignore_sigpipe() {
    // SAFETY: installing SIG_IGN runs no code of ours in handler context.
    unsafe { signal(SIGPIPE, SIG_IGN) };
}

/// Sets the supplementary groups, then the group, then the user of the
/// process, and checks that each took effect (so a failure at any step is
/// reported, never half-applied silently).
pub fn become_user(uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    // SAFETY: `groups` is a live slice and its length is passed with it.
    check(unsafe { setgroups(groups.len(), groups.as_ptr()) })?;
    // SAFETY: plain integer arguments.
    check(unsafe { setgid(gid) })?;
    // SAFETY: plain integer argument.
    check(unsafe { setuid(uid) })?;
    // SAFETY: these four calls take no arguments and cannot fail.
    let (ruid, euid, rgid, egid) = unsafe { (getuid(), geteuid(), getgid(), getegid()) };
    if (ruid, euid, rgid, egid) != (uid, uid, gid, gid) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the new user and group did not take effect",
        ));
    }
    Ok(())
}

/// Turns on TCP keepalive (`SO_KEEPALIVE`) for `socket`, as beanstalkd
/// does: after a connection has been silent for a while the kernel probes
/// the peer, and a peer that is gone (host down, no FIN ever sent) turns
/// into a read error instead of a connection held open forever. The kernel
/// settings `net.ipv4.tcp_keepalive_{time,intvl,probes}` say when.
pub fn set_keepalive(socket: &impl AsRawFd) -> io::Result<()> {
    let on: c_int = 1;
    let len = std::mem::size_of::<c_int>() as u32;
    // SAFETY: `on` is a live c_int and `len` is its size; the kernel only
    // reads it. The fd is borrowed from a live socket.
    check(unsafe { setsockopt(socket.as_raw_fd(), SOL_SOCKET, SO_KEEPALIVE, &on, len) }).map(drop)
}

/// Whether `SO_KEEPALIVE` is on for `socket` (the tests read it back).
#[cfg(test)]
pub fn keepalive(socket: &impl AsRawFd) -> io::Result<bool> {
    Ok(socket_option(socket.as_raw_fd(), SO_KEEPALIVE)? != 0)
}

/// Reads an integer `SOL_SOCKET` option of `fd`.
fn socket_option(fd: RawFd, name: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as u32;
    // SAFETY: `value` and `len` are valid for writes and `len` holds the
    // size of `value`; a bad fd is reported through errno.
    check(unsafe { getsockopt(fd, SOL_SOCKET, name, &mut value, &mut len) })?;
    Ok(value)
}

/// A listening socket received from the parent process (systemd socket
/// activation).
pub enum Inherited {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// Takes ownership of `fd`, which must be a listening stream socket, TCP or
/// UNIX, that nothing else in this process owns (an fd inherited through
/// `LISTEN_FDS`).
pub fn inherited_listener(fd: RawFd) -> io::Result<Inherited> {
    let option = |name: c_int| socket_option(fd, name);
    let not_a_listener =
        || io::Error::new(io::ErrorKind::InvalidInput, "inherited fd is not a TCP or UNIX listening socket");
    let is_listener = option(SO_TYPE).ok() == Some(SOCK_STREAM) && option(SO_ACCEPTCONN).ok() == Some(1);
    if !is_listener {
        return Err(not_a_listener());
    }
    match option(SO_DOMAIN)? {
        // SAFETY: the fd is an open listening stream socket of this family,
        // and the caller guarantees nothing else owns it.
        AF_INET | AF_INET6 => Ok(Inherited::Tcp(unsafe { TcpListener::from_raw_fd(fd) })),
        // SAFETY: as above.
        AF_UNIX => Ok(Inherited::Unix(unsafe { UnixListener::from_raw_fd(fd) })),
        _ => Err(not_a_listener()),
    }
}

extern "C" {
    fn posix_fallocate(fd: c_int, offset: i64, len: i64) -> c_int;
}

/// Reserves `len` bytes of disk for `file` from offset 0, so that later
/// writes into that range cannot fail for lack of space.
pub fn preallocate(file: &std::fs::File, len: u64) -> io::Result<()> {
    let len = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain integers; the fd is borrowed from a live File.
    let ret = unsafe { posix_fallocate(file.as_raw_fd(), 0, len) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(ret))
    }
}

/// Linux `struct flock` on 64-bit targets: two shorts, then `l_start` and
/// `l_len` aligned to 8 bytes, then `l_pid` and padding.
#[repr(C)]
struct Flock {
    l_type: i16,
    l_whence: i16,
    l_start: i64,
    l_len: i64,
    l_pid: i32,
    _pad: i32,
}

extern "C" {
    fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
}

const F_SETLK: c_int = 6;
const F_WRLCK: i16 = 1;
const SEEK_SET: i16 = 0;

/// `O_NOFOLLOW`: opening a symbolic link fails instead of following it.
#[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
pub const O_NOFOLLOW: i32 = 0o100000;
/// `O_NOFOLLOW`: opening a symbolic link fails instead of following it.
#[cfg(not(any(target_arch = "aarch64", target_arch = "arm")))]
pub const O_NOFOLLOW: i32 = 0o400000;

/// Takes a POSIX (`fcntl`) write lock on the whole of `file` without
/// waiting, as beanstalkd locks its binlog directory. `WouldBlock` means
/// another process holds it. The lock lasts until the process closes any
/// descriptor of the file, so the caller keeps this one open.
pub fn lock_posix(file: &std::fs::File) -> io::Result<()> {
    let lock = Flock { l_type: F_WRLCK, l_whence: SEEK_SET, l_start: 0, l_len: 0, l_pid: 0, _pad: 0 };
    // SAFETY: F_SETLK takes a pointer to a `struct flock`, which `Flock`
    // lays out as the kernel expects; it lives across the call, and the fd
    // is borrowed from a live File.
    let ret = unsafe { fcntl(file.as_raw_fd(), F_SETLK, &lock as *const Flock) };
    match check(ret) {
        Ok(_) => Ok(()),
        // EACCES or EAGAIN: held by another process.
        Err(e) if matches!(e.raw_os_error(), Some(11 | 13)) => Err(io::ErrorKind::WouldBlock.into()),
        Err(e) => Err(e),
    }
}

const F_GETLK: c_int = 5;
const F_UNLCK: i16 = 2;

/// The process holding a POSIX (`fcntl`) lock on any of `file`, if another
/// process holds one: asks without taking a lock, so that it works on a
/// descriptor opened read-only and never stands in a server's way.
pub fn posix_lock_holder(file: &std::fs::File) -> io::Result<Option<i32>> {
    let mut lock = Flock { l_type: F_WRLCK, l_whence: SEEK_SET, l_start: 0, l_len: 0, l_pid: 0, _pad: 0 };
    // SAFETY: F_GETLK takes a pointer to a `struct flock`, which `Flock`
    // lays out as the kernel expects and which the kernel writes back into;
    // it lives across the call, and the fd is borrowed from a live File.
    let ret = unsafe { fcntl(file.as_raw_fd(), F_GETLK, &mut lock as *mut Flock) };
    check(ret)?;
    Ok((lock.l_type != F_UNLCK).then_some(lock.l_pid))
}
