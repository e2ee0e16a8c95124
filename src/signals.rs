//! Signals, as beanstalkd users expect them (reference §7.3): SIGUSR1 enters
//! drain mode, SIGTERM and SIGINT shut the server down cleanly, SIGPIPE is
//! ignored.
//!
//! The thread starts before the binlog is opened, so that nothing at
//! start-up can outlast a SIGTERM: until the server serves, SIGTERM and
//! SIGINT end the process at once, removing the UNIX socket file it bound.
//! A signal that comes between the bind and this thread's start waits,
//! blocked, and is taken as soon as the thread starts.
//!
//! No code runs in signal-handler context. The signals are blocked in every
//! thread, and one ordinary thread takes them with `sigwait` and calls the
//! server's [`Handle`], exactly like any other caller would.

use std::io;
use std::thread;

use crate::server::Handle;
use crate::sys::{self, SignalSet};

/// The blocked signals, waiting for a server to act on.
pub struct Signals {
    set: SignalSet,
}

impl Signals {
    /// Blocks SIGTERM, SIGINT and SIGUSR1 and ignores SIGPIPE. Call this
    /// before starting any thread, so that every thread inherits the mask
    /// and no signal is delivered anywhere but to [`Signals::spawn`]'s thread.
    pub fn block() -> io::Result<Signals> {
        sys::ignore_sigpipe();
        let set = SignalSet::block(&[sys::SIGTERM, sys::SIGINT, sys::SIGUSR1])?;
        Ok(Signals { set })
    }

    /// Starts the thread that acts on the signals for `server`.
    pub fn spawn(self, server: Handle) -> io::Result<()> {
        let thread = thread::Builder::new().name("beanstalk-signals".into()).stack_size(64 * 1024);
        thread.spawn(move || loop {
            match self.set.wait() {
                Ok(sys::SIGUSR1) => server.drain(),
                Ok(signal) => {
                    let name = if signal == sys::SIGINT { "SIGINT" } else { "SIGTERM" };
                    crate::log::event(format_args!("{name}: shutting down"));
                    if !server.is_serving() {
                        // Start-up (a long replay, a read that waits) has
                        // served nothing and holds nothing a crash would
                        // lose: the binlog is made to survive one. Waiting
                        // for it to end could be waiting forever. Only the
                        // socket file, bound before this thread started,
                        // would outlive it: the server knew it from the
                        // bind, and it goes first.
                        server.remove_socket_files();
                        std::process::exit(0);
                    }
                    server.shutdown();
                    return;
                }
                Err(_) => return,
            }
        })?;
        Ok(())
    }
}
