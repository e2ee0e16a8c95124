//! The process: signals taken on a thread of our own, resource limits,
//! and giving up root for another user.

use std::ffi::c_int;
use std::io;

use super::check;

extern "C" {
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
    fn getrlimit64(resource: c_int, limit: *mut Rlimit) -> c_int;
    fn setpriority(which: c_int, who: u32, priority: c_int) -> c_int;
}

/// glibc's `struct rlimit64`: the soft and the hard limit (64-bit on every
/// architecture, unlike `struct rlimit`).
#[repr(C)]
struct Rlimit {
    current: u64,
    max: u64,
}

/// A resource limit [`soft_limit`] can read; its value is the number
/// Linux gives it (the same on every architecture we build for).
#[derive(Debug, Clone, Copy)]
#[repr(i32)]
pub enum Resource {
    /// `RLIMIT_NOFILE`: one more than the highest fd the process may open.
    OpenFiles = 7,
    /// `RLIMIT_AS`: bytes of address space, every mapping counted.
    AddressSpace = 9,
    /// `RLIMIT_DATA`: bytes of the heap and of private writable mappings
    /// (a connection's buffers among them).
    Data = 2,
}

/// The soft limit of `resource` (the one the kernel enforces); `None` if
/// it is unlimited or cannot be read.
pub fn soft_limit(resource: Resource) -> Option<u64> {
    const RLIM_INFINITY: u64 = u64::MAX;
    let mut limit = Rlimit { current: 0, max: 0 };
    // SAFETY: `limit` is a live, writable struct rlimit; the kernel fills it.
    check(unsafe { getrlimit64(resource as c_int, &mut limit) }).ok()?;
    (limit.current != RLIM_INFINITY).then_some(limit.current)
}

/// glibc's `sigset_t`: 1024 bits.
#[repr(C)]
struct SigSet([u64; 16]);

const SIG_BLOCK: c_int = 0;
const SIG_IGN: usize = 1;

/// Signal numbers (the same on every Linux architecture we build for).
pub const SIGINT: i32 = 2;
pub const SIGUSR1: i32 = 10;
const SIGPIPE: i32 = 13;
pub const SIGTERM: i32 = 15;

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
/// Gives the calling thread the least scheduling priority (nice 19), so
/// that it runs on what the queue's threads leave of the CPU. On Linux a
/// nice value belongs to a thread, and `setpriority(PRIO_PROCESS, 0, ..)`
/// changes the caller's alone. Best effort: a failure changes nothing.
pub fn lower_thread_priority() {
    const PRIO_PROCESS: c_int = 0;
    // SAFETY: setpriority takes plain integers and touches no memory.
    unsafe {
        setpriority(PRIO_PROCESS, 0, 19);
    }
}
