//! The `--metrics` endpoint: a listener of its own, and the thread that
//! accepts scrapers and serves each on a short-lived thread of its own,
//! at most [`MOST_AT_ONCE`] at a time, so that a slow client holds one
//! small buffer and one thread until its deadline and never the next
//! scrape. Without `--metrics` none of this exists.
//!
//! It reads the engine only through [`scrape`] (bounded holds of the lock,
//! copies into room claimed beforehand) and formats outside the lock
//! ([`exposition`]); [`http`] bounds each request in size and time. It
//! never changes queue state.
//!
//! Its larger functions are marked `#[inline(never)]`: inlined into the
//! threads that run them, they took 1 KB more of the static binary.

pub mod exposition;
pub mod http;
pub mod scrape;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::shared::Shared;
use crate::sys;

/// Scrapers served at once; one more is closed at once.
pub const MOST_AT_ONCE: usize = 8;

/// Stack of a scraper's thread: formatting runs on the heap.
const SCRAPER_STACK: usize = 64 * 1024;

/// The bound metrics listener, before its thread starts.
pub struct Endpoint {
    listener: TcpListener,
}

impl Endpoint {
    /// Binds `address` (`HOST:PORT`, `[IPv6]:PORT`), resolving the host
    /// as `-l` does (a static build reads no DNS).
    pub fn bind(address: &str) -> io::Result<Endpoint> {
        let invalid =
            || io::Error::new(io::ErrorKind::InvalidInput, format!("--metrics {address}: not HOST:PORT"));
        let (host, port) = address.rsplit_once(':').ok_or_else(invalid)?;
        let port = port.parse().map_err(|_| invalid())?;
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let listener = crate::listen::bind_tcp(host, port)?;
        listener.set_nonblocking(true)?;
        Ok(Endpoint { listener })
    }

    /// The address bound (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Starts the accepting thread; it ends when the server stops.
    pub(crate) fn spawn(self, shared: Arc<Shared>) -> io::Result<thread::JoinHandle<()>> {
        thread::Builder::new().name("beanstalk-metrics".into()).spawn(move || self.run(&shared))
    }

    #[inline(never)]
    fn run(self, shared: &Arc<Shared>) {
        let busy = Arc::new(AtomicUsize::new(0));
        while !shared.stopping.load(Ordering::SeqCst) {
            // The accept loop's wake-up socket stays readable once shutdown
            // wrote to it, so this wakes too.
            match sys::wait_readable(&self.listener, &shared.accept_wake.reader) {
                Ok((true, false)) => {}
                Ok(_) => continue,
                Err(_) => {
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            let stream = match self.listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // Out of descriptors, say: the listener stays readable, so
                // back off rather than spin until they come back.
                Err(_) => {
                    thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            if busy.fetch_add(1, Ordering::SeqCst) >= MOST_AT_ONCE {
                busy.fetch_sub(1, Ordering::SeqCst);
                continue; // dropping the stream closes it
            }
            let (shared, busy_here) = (Arc::clone(shared), Arc::clone(&busy));
            let spawned = thread::Builder::new().stack_size(SCRAPER_STACK).spawn(move || {
                // A scrape runs on what the queue leaves of the CPU.
                sys::lower_thread_priority();
                serve(stream, &shared);
                busy_here.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                busy.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Starts the endpoint's thread if `--metrics` asked for one; a thread
/// that cannot be made is a problem logged, and the queue serves on.
pub(crate) fn start(shared: &Arc<Shared>) -> Option<thread::JoinHandle<()>> {
    let endpoint = shared.metrics.lock().ok()?.take()?;
    if let Some(addr) = endpoint.local_addr() {
        crate::log::event(format_args!("metrics http://{addr}/metrics"));
    }
    match endpoint.spawn(Arc::clone(shared)) {
        Ok(thread) => Some(thread),
        Err(e) => {
            crate::log::problem(format_args!("metrics: cannot start a thread: {e}"));
            None
        }
    }
}

/// Answers one scraper's one request, then closes.
#[inline(never)]
fn serve(mut stream: TcpStream, shared: &Shared) {
    // Accepted sockets do not inherit the listener's non-blocking mode on
    // Linux, but say so rather than rely on it.
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let mut head = [0u8; http::HEAD_MOST];
    let request = http::read_request(&mut stream, &mut head);
    let http::Request::Metrics { head_only } = request else {
        let (status, body) = http::refusal(request);
        let _ = http::respond(&mut stream, status, "text/plain; charset=utf-8", body.as_bytes(), false);
        http::close_gently(&mut stream, &mut head);
        return;
    };
    let mut body = exposition::Body(Vec::new());
    let written = scrape::collect(shared).is_some_and(|s| exposition::write(&s, &mut body).is_ok());
    let _ = if written {
        http::respond(&mut stream, "200 OK", http::METRICS_TYPE, &body.0, head_only)
    } else {
        http::respond(&mut stream, "503 Service Unavailable", "text/plain", b"out of memory\n", false)
    };
    drop(body);
    http::close_gently(&mut stream, &mut head);
}
