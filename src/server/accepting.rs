//! The accept loop of one listening socket, until shutdown: the main
//! listener's on the server's own thread, and the admin socket's
//! (`--admin-socket`) on a thread of its own, each handing what it accepts
//! to `start_connection` with what that listener allows. Both wait in
//! `poll` beside the server's wake-up socket, which shutdown makes readable
//! and nobody reads, so one byte stops every loop.
//!
//! The admin socket is a UNIX socket that is mode 0600 from the moment
//! its path exists (`Listener::bind_private`): only its owner (the user
//! the server runs as, after `-u`) and root may connect, unless the
//! operator opens it further, or puts it in a directory that says who
//! may reach it. Its connections are the operator's: the connection cap
//! does not count them, so no number of clients elsewhere locks the
//! operator out (`start_connection`).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::listen::Listener;
use crate::shared::Shared;
use crate::sys;

/// Accepts on `listener` until shutdown; its connections may run the
/// admin commands if `admin` (or if no admin socket is configured).
pub(super) fn run(shared: &Arc<Shared>, listener: &Listener, admin: bool) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match sys::wait_readable(listener, &shared.accept_wake.reader) {
            // Woken for shutdown (or by a signal): the loop condition decides.
            Ok((_, true) | (false, false)) => continue,
            Ok((true, false)) => {}
            Err(e) => {
                crate::log::problem(format_args!("poll: {e}"));
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        }
        match listener.accept() {
            Ok(stream) => super::start_connection(shared, stream, admin),
            // The connection went before we took it; wait again.
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) => {
                // Out of fds or memory: say so and back off, rather than
                // spinning on an error that will not clear by itself.
                crate::log::problem(format_args!("accept: {e}"));
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Starts the admin socket's accept loop on a thread of its own.
pub(super) fn spawn_admin(shared: &Arc<Shared>, listener: &Arc<Listener>) -> Option<thread::JoinHandle<()>> {
    let (s, l) = (Arc::clone(shared), Arc::clone(listener));
    let spawned = thread::Builder::new().name("beanstalk-admin".into()).spawn(move || run(&s, &l, true));
    match spawned {
        Ok(thread) => {
            crate::log::event(format_args!(
                "admin socket {} {}: the admin commands run here only",
                listener.as_raw_fd(),
                listener.address()
            ));
            Some(thread)
        }
        Err(e) => {
            crate::log::problem(format_args!("cannot start the admin socket's thread: {e}"));
            None
        }
    }
}
