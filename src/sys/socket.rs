//! Sockets: polling one, two or a list for readability or a hang-up,
//! sending without waiting, socket options, and listening sockets
//! inherited from systemd. The event loops' epoll set is `poller.rs`.

use std::ffi::{c_int, c_ulong};
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixListener;

use super::check;

extern "C" {
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_int, len: *mut u32) -> c_int;
    fn poll(fds: *mut PollFd, count: c_ulong, timeout_ms: c_int) -> c_int;
    fn recv(fd: c_int, buf: *mut u8, len: usize, flags: c_int) -> isize;
    fn send(fd: c_int, buf: *const u8, len: usize, flags: c_int) -> isize;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_int, len: u32) -> c_int;
}

const MSG_PEEK: c_int = 0x2;
const MSG_DONTWAIT: c_int = 0x40;
const MSG_NOSIGNAL: c_int = 0x4000;
const SOL_SOCKET: c_int = 1;
const IPPROTO_TCP: c_int = 6;
const TCP_KEEPIDLE: c_int = 4;
const TCP_KEEPINTVL: c_int = 5;
const TCP_KEEPCNT: c_int = 6;
const TCP_USER_TIMEOUT: c_int = 18;
const SO_TYPE: c_int = 3;
const SO_KEEPALIVE: c_int = 9;
const SO_ACCEPTCONN: c_int = 30;
const SO_DOMAIN: c_int = 39;
const SOCK_STREAM: c_int = 1;
const AF_UNIX: c_int = 1;
const AF_INET: c_int = 2;
const AF_INET6: c_int = 10;

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
    let ret = unsafe { poll(entries.as_mut_ptr(), N as c_ulong, timeout_ms) };
    match check(ret) {
        Ok(_) => Ok(entries.map(|e| e.revents)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok([0; N]),
        Err(e) => Err(e),
    }
}

/// Waits up to `timeout_ms` (-1: for ever) until one of `fds` is readable
/// (or has an error or hang-up pending, which a read would report); sets
/// `readable[i]` for each that is. `poll` on a slice: for a few hundred
/// sockets at most, whose list the caller rebuilds each time. EINTR
/// counts as "nothing yet".
pub fn wait_any_readable(fds: &[RawFd], timeout_ms: i32, readable: &mut Vec<bool>) -> io::Result<()> {
    let mut entries: Vec<PollFd> = Vec::new();
    entries.try_reserve_exact(fds.len()).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    entries.extend(fds.iter().map(|&fd| PollFd { fd, events: POLLIN, revents: 0 }));
    // SAFETY: `entries` is a writable array of `entries.len()` pollfds, and
    // that length is passed, so the kernel reads and writes only inside it.
    // The fds are plain numbers; a closed one is reported, not UB.
    let ret = unsafe { poll(entries.as_mut_ptr(), entries.len() as c_ulong, timeout_ms) };
    readable.clear();
    match check(ret) {
        Ok(_) => readable.extend(entries.iter().map(|e| e.revents != 0)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => readable.resize(fds.len(), false),
        Err(e) => return Err(e),
    }
    Ok(())
}

/// True if the peer of connected socket `socket` has hung up: closed, reset,
/// or shut down its sending side. Never blocks (a poll with no timeout);
/// data waiting to be read does not count. If the question cannot be asked,
/// the answer is false: the event loop, told by epoll, remains the
/// backstop.
pub fn peer_hung_up(socket: &impl AsRawFd) -> bool {
    let gone = POLLRDHUP | POLLHUP | POLLERR | POLLNVAL;
    poll_fds([socket.as_raw_fd()], POLLRDHUP, 0).is_ok_and(|[revents]| revents & gone != 0)
}

/// True if connected socket `socket` holds at least one byte from its peer
/// that nobody has read. Never blocks, and reads nothing (`MSG_PEEK`): the
/// bytes stay for the next read. End of file, an error or an empty socket
/// is false.
pub fn has_unread_bytes(socket: &impl AsRawFd) -> bool {
    let mut byte = 0u8;
    // SAFETY: `byte` is one writable byte and 1 is passed as the length, so
    // the kernel writes only into it; the fd is borrowed from a live socket.
    let n = unsafe { recv(socket.as_raw_fd(), &mut byte, 1, MSG_PEEK | MSG_DONTWAIT) };
    n > 0
}

/// Looks at the next byte of connected socket `socket` without taking it
/// or waiting: 1 if there is one, 0 at the end of the stream, `WouldBlock`
/// if neither has come (or the error the socket has).
pub fn peek_byte(socket: &impl AsRawFd) -> io::Result<usize> {
    let mut byte = 0u8;
    loop {
        // SAFETY: `byte` is one writable byte and 1 is passed as the
        // length, so the kernel writes only into it; the fd is borrowed
        // from a live socket.
        let n = unsafe { recv(socket.as_raw_fd(), &mut byte, 1, MSG_PEEK | MSG_DONTWAIT) };
        match usize::try_from(n) {
            Ok(n) => return Ok(n),
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Sends what of `bytes` connected socket `socket` takes now, without
/// waiting for room: returns how many it took, 0 if it had no room or
/// could not take them (its loop's next write meets the error). Never
/// raises `SIGPIPE`.
pub fn send_now(socket: &impl AsRawFd, bytes: &[u8]) -> usize {
    // SAFETY: `bytes` is readable for its length, which is what is passed;
    // the kernel only reads it. The fd is borrowed from a live socket.
    let n = unsafe { send(socket.as_raw_fd(), bytes.as_ptr(), bytes.len(), MSG_DONTWAIT | MSG_NOSIGNAL) };
    usize::try_from(n).unwrap_or(0)
}

/// Blocks until `first` or `second` is readable (or has an error or hang-up
/// pending, which a read would report); returns which of them are. May
/// return neither if a signal interrupts the wait.
pub fn wait_readable(first: &impl AsRawFd, second: &impl AsRawFd) -> io::Result<(bool, bool)> {
    let [a, b] = poll_fds([first.as_raw_fd(), second.as_raw_fd()], POLLIN, -1)?;
    Ok((a != 0, b != 0))
}

/// Calls `listen` again on an already listening socket to raise its backlog
/// (std listens with 128; beanstalkd with 1024).
pub fn set_backlog(socket: &impl AsRawFd, backlog: i32) -> io::Result<()> {
    // SAFETY: `listen` takes a plain fd and an int; the fd is borrowed from a
    // live socket, so it is open for the duration of the call.
    check(unsafe { listen(socket.as_raw_fd(), backlog) }).map(drop)
}

/// When a TCP connection's peer counts as gone ([`set_keepalive`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadPeer {
    /// Seconds of silence before the first keepalive probe
    /// (`TCP_KEEPIDLE`).
    pub idle_secs: i32,
    /// Seconds between probes (`TCP_KEEPINTVL`).
    pub interval_secs: i32,
    /// Probes unanswered before the connection is dropped
    /// (`TCP_KEEPCNT`).
    pub probes: i32,
    /// Milliseconds sent data may stay unacknowledged, and the silence
    /// that ends probing, before the connection is dropped
    /// (`TCP_USER_TIMEOUT`).
    pub user_timeout_ms: i32,
}

/// Turns on TCP keepalive (`SO_KEEPALIVE`) for `socket`, as beanstalkd
/// does, with `dead`'s timings instead of the kernel's (two hours of
/// silence before the first probe, and some fifteen minutes of
/// retransmissions to a peer that never acknowledges): a peer that is
/// gone (host down, cable pulled, no FIN ever sent) turns into a read
/// error within `dead`'s bound, whether the connection was silent (the
/// probes go unanswered) or had sent something (it stays unacknowledged,
/// `TCP_USER_TIMEOUT`), instead of a connection held open for its
/// reservations' sake.
pub fn set_keepalive(socket: &impl AsRawFd, dead: &DeadPeer) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    set_option(fd, SOL_SOCKET, SO_KEEPALIVE, 1)?;
    set_option(fd, IPPROTO_TCP, TCP_KEEPIDLE, dead.idle_secs)?;
    set_option(fd, IPPROTO_TCP, TCP_KEEPINTVL, dead.interval_secs)?;
    set_option(fd, IPPROTO_TCP, TCP_KEEPCNT, dead.probes)?;
    set_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, dead.user_timeout_ms)
}

/// Sets the integer option `name` at `level` of `fd` to `value`.
fn set_option(fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
    let len = std::mem::size_of::<c_int>() as u32;
    // SAFETY: `value` is a live c_int and `len` is its size; the kernel
    // only reads it. A bad fd, or an option the socket lacks, is reported
    // through errno.
    check(unsafe { setsockopt(fd, level, name, &value, len) }).map(drop)
}

/// Whether `SO_KEEPALIVE` is on for `socket` (the tests read it back).
#[cfg(test)]
pub fn keepalive(socket: &impl AsRawFd) -> io::Result<bool> {
    Ok(socket_option(socket.as_raw_fd(), SO_KEEPALIVE)? != 0)
}

/// The timings [`set_keepalive`] set on `socket`, read back (the tests').
#[cfg(test)]
pub fn dead_peer(socket: &impl AsRawFd) -> io::Result<DeadPeer> {
    let fd = socket.as_raw_fd();
    Ok(DeadPeer {
        idle_secs: option(fd, IPPROTO_TCP, TCP_KEEPIDLE)?,
        interval_secs: option(fd, IPPROTO_TCP, TCP_KEEPINTVL)?,
        probes: option(fd, IPPROTO_TCP, TCP_KEEPCNT)?,
        user_timeout_ms: option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT)?,
    })
}

/// Reads an integer `SOL_SOCKET` option of `fd`.
fn socket_option(fd: RawFd, name: c_int) -> io::Result<c_int> {
    option(fd, SOL_SOCKET, name)
}

/// Reads the integer option `name` at `level` of `fd`.
fn option(fd: RawFd, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as u32;
    // SAFETY: `value` and `len` are valid for writes and `len` holds the
    // size of `value`; a bad fd is reported through errno.
    check(unsafe { getsockopt(fd, level, name, &mut value, &mut len) })?;
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
