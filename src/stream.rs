//! A client's socket, TCP or UNIX, as the rest of the server sees it: read,
//! write, shut down the receiving side. It knows nothing of the protocol.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// A client's socket, TCP or UNIX. Reads and writes go through `&Stream`, so
/// one `Arc<Stream>` serves the connection thread and the shutdown path
/// without a second file descriptor.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Closes the receiving side: a thread blocked reading wakes with EOF,
    /// while a reply still being written can go out.
    pub fn shutdown_read(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Read),
            Stream::Unix(s) => s.shutdown(Shutdown::Read),
        };
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
