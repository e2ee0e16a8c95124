//! What a server's owner holds once it runs: a [`Handle`], which stops it
//! or puts it in drain mode from any thread (the signal thread, a test),
//! and [`Running`], a server on a thread of its own that stops when
//! dropped. Neither serves anything itself.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use crate::shared::Shared;

/// A handle that can stop a server or put it in drain mode from any thread.
#[derive(Clone)]
pub struct Handle {
    pub(super) shared: Arc<Shared>,
}

impl Handle {
    /// Stops the server: no new connections; open ones are closed after the
    /// command in flight. [`Server::run`](super::Server::run) returns once they are gone.
    pub fn shutdown(&self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the accept loop through its own socket pair: the listener's
        // address may no longer lead to it (socket file removed, replaced).
        let _ = (&self.shared.accept_wake.writer).write_all(&[1]);
    }

    /// Removes the UNIX socket files the server created, those still
    /// there and still its own: at the end of a shutdown, or when a
    /// SIGTERM ends start-up (which may be before the server has a thread
    /// that could do it).
    pub fn remove_socket_files(&self) {
        self.shared.socket_files.iter().for_each(|file| file.remove_if_ours());
    }

    /// Whether start-up is over and the server accepts connections.
    pub fn is_serving(&self) -> bool {
        self.shared.serving.load(Ordering::SeqCst)
    }

    /// Enters drain mode: every later put is refused with `DRAINING`.
    pub fn drain(&self) {
        self.shared.engine().start_draining();
        crate::log::event(format_args!("drain mode: puts are answered DRAINING from now on"));
    }
}

/// A server running on its own thread (from [`Server::spawn`](super::Server::spawn)). Dropping it
/// shuts the server down and waits for it.
pub struct Running {
    pub(super) handle: Handle,
    pub(super) addr: Option<SocketAddr>,
    pub(super) thread: Option<thread::JoinHandle<()>>,
}

impl Running {
    /// The bound TCP address (`None` for a UNIX socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// A handle for shutdown or drain.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Stops the server and waits until it has finished.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.handle.shutdown();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}
