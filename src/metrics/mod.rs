//! The `--metrics` endpoint, and the operator's page beside it
//! ([`page`]): a listener of its own, and the thread that
//! accepts scrapers and reads their requests ([`arriving`]: no thread
//! for a connection until its request is whole, so idle or slow clients,
//! however many, keep no scrape out), then answers each whole request on
//! a short-lived thread of its own, at most [`MOST_AT_ONCE`] answering at
//! a time. Without `--metrics` none of this exists.
//!
//! It reads the engine only through [`scrape`] (bounded holds of the lock,
//! copies into room claimed beforehand) and formats outside the lock
//! ([`exposition`]); [`http`] bounds each request in size and time. It
//! never changes queue state.
//!
//! Its larger functions are marked `#[inline(never)]`: inlined into the
//! threads that run them, they took 1 KB more of the static binary.

pub mod arriving;
pub mod exposition;
pub mod http;
pub mod page;
pub mod scrape;

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::shared::Shared;
use crate::sys;
use arriving::Heads;
use http::Request;

/// Requests answered at once; more whole requests wait their turn.
pub const MOST_AT_ONCE: usize = 8;

/// Threads at once, answering or closing after their answer.
const THREADS_MOST: usize = 2 * MOST_AT_ONCE;

/// Stack of a scraper's thread: formatting runs on the heap.
const SCRAPER_STACK: usize = 64 * 1024;

/// Binds `address` (`HOST:PORT`, `[IPv6]:PORT`), resolving the host as
/// `-l` does (a static build reads no DNS): the listener the server holds
/// (`Shared::metrics`) until [`start`] takes it.
pub fn bind(address: &str) -> io::Result<TcpListener> {
    let invalid =
        || io::Error::new(io::ErrorKind::InvalidInput, format!("--metrics {address}: not HOST:PORT"));
    let (host, port) = address.rsplit_once(':').ok_or_else(invalid)?;
    let port = port.parse().map_err(|_| invalid())?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let listener = crate::listen::bind_tcp(host, port)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The metrics listener, once its thread starts.
struct Endpoint {
    listener: TcpListener,
}

impl Endpoint {
    /// The address bound (useful with port 0).
    fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Starts the accepting thread; it ends when the server stops.
    fn spawn(self, shared: Arc<Shared>) -> io::Result<thread::JoinHandle<()>> {
        thread::Builder::new().name("beanstalk-metrics".into()).spawn(move || self.run(&shared))
    }

    #[inline(never)]
    fn run(self, shared: &Arc<Shared>) {
        let mut heads = Heads::default();
        // Whole requests (or what went wrong), waiting for a thread.
        let mut whole: VecDeque<(TcpStream, Request)> = VecDeque::new();
        let (answering, threads) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (mut fds, mut readable) = (Vec::new(), Vec::new());
        while !shared.stopping.load(Ordering::SeqCst) {
            fds.clear();
            // The accept loop's wake-up socket stays readable once shutdown
            // wrote to it, so this wakes too.
            fds.extend([self.listener.as_raw_fd(), shared.accept_wake.reader.as_raw_fd()]);
            heads.fds(&mut fds);
            // Whole requests waiting for a thread: look again soon.
            let timeout = if whole.is_empty() { heads.timeout_ms() } else { 20 };
            if sys::wait_any_readable(&fds, timeout, &mut readable).is_err() {
                thread::sleep(Duration::from_millis(50));
                continue;
            }
            heads.read(readable.get(2..).unwrap_or_default(), &mut whole);
            // Whole requests waiting for a thread are bounded too: past
            // that, the oldest are closed (answered by no one).
            while whole.len() > arriving::ARRIVING_MOST {
                whole.pop_front();
            }
            if readable.first() == Some(&true) {
                self.accept_all(&mut heads);
            }
            while !whole.is_empty()
                && answering.load(Ordering::SeqCst) < MOST_AT_ONCE
                && threads.load(Ordering::SeqCst) < THREADS_MOST
            {
                let Some((stream, request)) = whole.pop_front() else { break };
                answering.fetch_add(1, Ordering::SeqCst);
                threads.fetch_add(1, Ordering::SeqCst);
                let (shared, answering_here, threads_here) =
                    (Arc::clone(shared), Arc::clone(&answering), Arc::clone(&threads));
                let spawned = thread::Builder::new().stack_size(SCRAPER_STACK).spawn(move || {
                    // A scrape runs on what the queue leaves of the CPU.
                    sys::lower_thread_priority();
                    answer(stream, request, &shared, &answering_here);
                    threads_here.fetch_sub(1, Ordering::SeqCst);
                });
                if spawned.is_err() {
                    answering.fetch_sub(1, Ordering::SeqCst);
                    threads.fetch_sub(1, Ordering::SeqCst);
                    break;
                }
            }
        }
    }

    /// Takes every connection waiting on the listener.
    fn accept_all(&self, heads: &mut Heads) {
        for _ in 0..arriving::ARRIVING_MOST {
            match self.listener.accept() {
                Ok((stream, _)) => heads.add(stream),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // WouldBlock: none left. Out of descriptors, say: the
                // listener stays readable, so back off rather than spin.
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        thread::sleep(Duration::from_millis(50));
                    }
                    return;
                }
            }
        }
    }
}

/// Starts the endpoint's thread if `--metrics` asked for one; a thread
/// that cannot be made is a problem logged, and the queue serves on.
pub(crate) fn start(shared: &Arc<Shared>) -> Option<thread::JoinHandle<()>> {
    let endpoint = Endpoint { listener: shared.metrics.lock().ok()?.take()? };
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

/// Answers one whole request (or what went wrong with it), then closes;
/// it stops counting as answering once its answer is written.
#[inline(never)]
fn answer(mut stream: TcpStream, request: Request, shared: &Shared, answering: &AtomicUsize) {
    let done = || answering.fetch_sub(1, Ordering::SeqCst);
    if stream.set_nonblocking(false).is_err() {
        done();
        return;
    }
    let mut head = [0u8; http::HEAD_MOST];
    if let Request::Page { head_only, ask } = &request {
        let _ = match page::write(shared, ask) {
            Some((found, html)) => {
                let status = if found { "200 OK" } else { "404 Not Found" };
                http::respond(&mut stream, status, "text/html; charset=utf-8", html.as_bytes(), *head_only)
            }
            None => http::respond(
                &mut stream,
                "503 Service Unavailable",
                "text/plain",
                b"out of memory\n",
                *head_only,
            ),
        };
        done();
        http::close_gently(&mut stream, &mut head);
        return;
    }
    let Request::Metrics { head_only } = request else {
        let (status, body) = http::refusal(request);
        let _ = http::respond(&mut stream, status, "text/plain; charset=utf-8", body.as_bytes(), false);
        done();
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
    done();
    http::close_gently(&mut stream, &mut head);
}
