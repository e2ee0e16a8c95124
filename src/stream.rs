//! A client's socket, TCP or UNIX, as the rest of the server sees it: read,
//! write, shut down the receiving side. And [`SharedConn`], the socket with
//! the `Condvar` its thread sleeps on: what the engine, the connection's
//! thread and the server's list of connections share. It knows nothing of
//! the protocol.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::engine::{ClientId, Waker, Withdrawal};
use crate::hangup::Finisher;
use crate::ids::JobId;
use crate::mailbox::Mailbox;
use crate::sys;

/// A client's address as the log names it: `ADDR:PORT`, or `unix`.
#[derive(Debug, Clone, Copy)]
pub enum Peer {
    Tcp(Option<std::net::SocketAddr>),
    Unix,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(Some(addr)) => write!(f, "{addr}"),
            Peer::Tcp(None) => f.write_str("an unknown address"),
            Peer::Unix => f.write_str("unix"),
        }
    }
}

/// A client's socket, TCP or UNIX. Reads and writes go through `&Stream`, so
/// one shared socket serves the connection thread and the shutdown path
/// without a second file descriptor.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Who is at the other end, for the log.
    pub fn peer(&self) -> Peer {
        match self {
            Stream::Tcp(s) => Peer::Tcp(s.peer_addr().ok()),
            Stream::Unix(_) => Peer::Unix,
        }
    }

    /// Sets how long a read waits for bytes before it gives up and reports
    /// the connection idle (the socket's receive timeout, `SO_RCVTIMEO`).
    pub fn set_idle_timeout(&self, after: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(Some(after)),
            Stream::Unix(s) => s.set_read_timeout(Some(after)),
        }
    }

    /// One read, retried if a signal interrupts it: the bytes read, 0 at
    /// end of file, or `None` if nothing came within the idle timeout.
    pub fn read_or_idle(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut stream = self;
        loop {
            match stream.read(buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The receive timeout reports EAGAIN.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// One read, however long it waits: the bytes read, 0 at end of file.
    pub fn read_waiting(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(n) = self.read_or_idle(buf)? {
                return Ok(n);
            }
            self.wait_readable()?;
        }
    }

    /// Sleeps until a read would not wait (bytes, end of file or an error
    /// have arrived), however long that takes: unlike a read, this wait has
    /// no timeout.
    pub fn wait_readable(&self) -> io::Result<()> {
        sys::wait_until_readable(self)
    }

    /// Closes both sides: a send under way fails, and a thread blocked
    /// reading wakes with EOF.
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

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

/// A connection's [`Waker`]: the mailbox its thread sleeps on while
/// blocked in reserve, and its socket, which the engine may ask (through
/// this, never directly) whether the client is still there, and to which a
/// reply delivered to the mailbox is sent on the way (see `mailbox.rs`).
/// Shared by the connection's thread, the engine and the server's list of
/// connections: one allocation a connection.
pub(crate) struct SharedConn {
    pub mailbox: Mailbox,
    pub stream: Stream,
    /// Who sends what is left of a reply while the thread waits in a read.
    finisher: Finisher,
    /// The engine's id for this client, once it has one (ids start at 1).
    client: AtomicU64,
}

impl SharedConn {
    pub fn new(stream: Stream, finisher: Finisher) -> SharedConn {
        SharedConn { mailbox: Mailbox::default(), stream, finisher, client: AtomicU64::new(0) }
    }

    /// Notes the engine's id for this client, which the watcher's reports
    /// about its socket carry.
    pub fn set_client(&self, client: ClientId) {
        self.client.store(client.0, Ordering::Relaxed);
    }

    /// Sends more of a delivered reply now that its socket has room (the
    /// hang-up watcher's, see `hangup.rs`); `gone`: the client hung up, so
    /// room for the rest is not watched for.
    pub fn send_rest(&self, gone: bool) {
        self.mailbox.send_rest(|bytes| sys::send_now(&self.stream, bytes), || !gone && self.finish());
    }

    /// Asks the watcher to send the rest of a reply once the socket has room.
    fn finish(&self) -> bool {
        let client = ClientId(self.client.load(Ordering::Relaxed));
        client.0 != 0 && self.finisher.finish(self.stream.as_raw_fd(), client).is_ok()
    }
}

/// Shown by its client's id: the engine's `Waker` must be `Debug`, and a
/// derived one would format a mailbox and a socket no one reads (2 KB of
/// the static binary).
impl std::fmt::Debug for SharedConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedConn(client {})", self.client.load(Ordering::Relaxed))
    }
}

impl Waker for SharedConn {
    fn wake(&self) {
        self.mailbox.wake_reaching(|bytes| sys::send_now(&self.stream, bytes), || self.finish());
    }

    fn has_hung_up(&self) -> bool {
        sys::peer_hung_up(&self.stream)
    }

    fn has_input(&self) -> bool {
        sys::has_unread_bytes(&self.stream)
    }

    fn deliver(&self, id: JobId, write: &mut dyn FnMut(&mut Vec<u8>) -> bool) -> bool {
        self.mailbox.deliver(id, write)
    }

    fn withdraw(&self, id: JobId) -> Withdrawal {
        let withdrawal = self.mailbox.withdraw(id);
        if withdrawal == Withdrawal::Cut {
            // Whoever is sending the rest (this connection's thread, the
            // watcher) fails, and the thread, in a read or asleep, ends
            // the connection.
            self.stream.shutdown();
        }
        withdrawal
    }

    fn send_and_wake(&self) {
        self.mailbox.send_and_wake(|bytes| sys::send_now(&self.stream, bytes), || self.finish());
    }
}
