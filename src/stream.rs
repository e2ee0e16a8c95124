//! A client's socket, TCP or UNIX, as the rest of the server sees it: read,
//! write, shut down. And [`SharedConn`], the socket with its mailbox and
//! the loop that serves it: what the engine and the event loop share. It
//! knows nothing of the protocol.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::{ClientId, Waker, Withdrawal};
use crate::ids::JobId;
use crate::mailbox::Mailbox;
use crate::sys;
use crate::wakes::Wakes;

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

/// A client's socket, TCP or UNIX, non-blocking once its loop has it.
/// Reads and writes go through `&Stream`, so one shared socket serves the
/// loop and the engine's questions without a second file descriptor.
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

    /// Makes reads and writes return `WouldBlock` rather than wait: the
    /// event loop never waits on one socket.
    pub fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(true),
            Stream::Unix(s) => s.set_nonblocking(true),
        }
    }

    /// Whether a read would find bytes (1) or the end of the stream (0),
    /// without taking any; `WouldBlock` if neither has come.
    pub fn peek_now(&self) -> io::Result<usize> {
        sys::peek_byte(self)
    }

    /// One read that never waits, retried if a signal interrupts it: the
    /// bytes read, 0 at end of file, `WouldBlock` if there are none yet.
    pub fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut stream = self;
        loop {
            match stream.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                read => return read,
            }
        }
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

/// A connection's [`Waker`]: its mailbox, its socket, which the engine may
/// ask (through this, never directly) whether the client is still there,
/// and the event loop that owns it, which a wake reaches. Shared by the
/// loop and the engine: one allocation a connection.
pub(crate) struct SharedConn {
    pub mailbox: Mailbox,
    pub stream: Stream,
    /// How its loop is reached.
    wakes: Arc<Wakes>,
    /// Its place in its loop, once the loop has taken it (see
    /// `event_loop.rs`).
    token: AtomicU64,
    /// The engine's id for this client, once it has one (ids start at 1).
    client: AtomicU64,
}

impl SharedConn {
    pub fn new(stream: Stream, wakes: Arc<Wakes>) -> SharedConn {
        SharedConn {
            mailbox: Mailbox::default(),
            stream,
            wakes,
            token: AtomicU64::new(0),
            client: AtomicU64::new(0),
        }
    }

    /// Notes the engine's id for this client, for the log.
    pub fn set_client(&self, client: ClientId) {
        self.client.store(client.0, Ordering::Relaxed);
    }

    /// Notes where its loop keeps it.
    pub fn set_token(&self, token: u64) {
        self.token.store(token, Ordering::Release);
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
        self.mailbox.wake();
        self.wakes.wake(self.token.load(Ordering::Acquire));
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

    fn send_and_wake(&self) {
        if !self.mailbox.send_early(|bytes| sys::send_now(&self.stream, bytes)) {
            self.wake();
        }
    }

    fn withdraw(&self, id: JobId) -> Withdrawal {
        let withdrawal = self.mailbox.withdraw(id);
        if withdrawal == Withdrawal::Cut {
            // The loop, woken, finds the mailbox cut and ends the
            // connection; until then nothing more can be sent.
            self.stream.shutdown();
            self.wakes.wake(self.token.load(Ordering::Acquire));
        }
        withdrawal
    }
}
