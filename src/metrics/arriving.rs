//! Requests on their way in: the endpoint's accepting thread reads every
//! connection's request head itself, a few bytes as they come, so that a
//! connection costs no thread, and holds no place of the few that answer,
//! until its request is whole. An idle client or a slow one costs a
//! socket and, once it sends, a buffer; however many there are, a scrape
//! whose request has arrived is answered. Past [`ARRIVING_MOST`]
//! connections the oldest is closed, and each has [`http::HEAD_DEADLINE`]
//! to send its head.
//!
//! It reads and buffers; it answers nothing (a whole head, or what went
//! wrong with it, goes to a thread that answers it).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use super::http::{self, Request, HEAD_DEADLINE, HEAD_MOST};

/// Connections whose heads are read at once, at most: an 8 KiB buffer each
/// once it sends (2 MiB in all), and a socket.
pub const ARRIVING_MOST: usize = 256;

/// One connection whose head is not whole yet.
struct Arriving {
    stream: TcpStream,
    since: Instant,
    /// Empty (not allocated) until its first byte.
    head: Vec<u8>,
}

/// The connections whose heads are being read, oldest first.
#[derive(Default)]
pub struct Heads {
    arriving: VecDeque<Arriving>,
}

impl Heads {
    /// Reads `stream`'s head from now on; the oldest connection is closed
    /// if [`ARRIVING_MOST`] are being read already.
    pub fn add(&mut self, stream: TcpStream) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        if self.arriving.len() >= ARRIVING_MOST {
            self.arriving.pop_front();
        }
        if self.arriving.try_reserve(1).is_ok() {
            self.arriving.push_back(Arriving { stream, since: Instant::now(), head: Vec::new() });
        }
    }

    /// Each connection's socket, in order, after `out`'s first entries.
    pub fn fds(&self, out: &mut Vec<RawFd>) {
        out.extend(self.arriving.iter().map(|a| a.stream.as_raw_fd()));
    }

    /// Milliseconds until the oldest connection's time is up (`-1`: none).
    pub fn timeout_ms(&self) -> i32 {
        let Some(oldest) = self.arriving.front() else { return -1 };
        let left = (oldest.since + HEAD_DEADLINE).saturating_duration_since(Instant::now());
        left.as_millis().min(i32::MAX as u128) as i32 + 1
    }

    /// Reads what arrived on the connections `readable` marks (in the
    /// order of [`Heads::fds`]), and takes out each whose head is whole,
    /// or whose request went wrong or whose time is up, with what it
    /// asks, into `done`.
    pub fn read(&mut self, readable: &[bool], done: &mut VecDeque<(TcpStream, Request)>) {
        // Newest first, so that taking one out moves none still to visit.
        for i in (0..self.arriving.len()).rev() {
            let Some(arriving) = self.arriving.get_mut(i) else { continue };
            let ready = readable.get(i).copied().unwrap_or(false);
            let outcome = if ready { read_some(arriving) } else { None };
            let late = arriving.since.elapsed() >= HEAD_DEADLINE;
            let Some(request) = outcome.or(late.then_some(Request::TimedOut)) else { continue };
            if let Some(arriving) = self.arriving.remove(i) {
                if done.try_reserve(1).is_ok() {
                    done.push_back((arriving.stream, request));
                }
            }
        }
    }
}

/// Reads what `arriving` has sent: `Some` once its head is whole (what it
/// asks) or it went wrong; `None` while more is to come.
fn read_some(arriving: &mut Arriving) -> Option<Request> {
    if arriving.head.capacity() == 0 && arriving.head.try_reserve_exact(HEAD_MOST).is_err() {
        return Some(Request::Malformed);
    }
    let mut chunk = [0u8; 1024];
    loop {
        let room = (HEAD_MOST - arriving.head.len()).min(chunk.len());
        if room == 0 {
            return Some(Request::TooLarge);
        }
        match arriving.stream.read(&mut chunk[..room]) {
            Ok(0) => return Some(Request::Malformed),
            Ok(n) => {
                let from = arriving.head.len().saturating_sub(3);
                arriving.head.extend_from_slice(&chunk[..n]);
                if let Some(end) = http::head_end(&arriving.head[from..]) {
                    return Some(http::parse(&arriving.head[..from + end]));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(_) => return Some(Request::Malformed),
        }
    }
}
