//! Files: preallocating disk for a log file, and beanstalkd's `fcntl`
//! lock on a binlog directory (taking it, or asking who holds it).

use std::ffi::c_int;
use std::io;
use std::os::fd::AsRawFd;

use super::check;

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

/// `O_NONBLOCK`: opening a FIFO or a device returns at once instead of
/// waiting for the other end (the same value on every Linux architecture).
pub const O_NONBLOCK: i32 = 0o4000;

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
