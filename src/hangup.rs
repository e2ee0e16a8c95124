//! The hang-up watcher: notices when a client blocked in `reserve` closes or
//! half-closes its socket, and ends its reserve with `TIMED_OUT`; when a
//! client blocked in `reserve-with-abort` sends a byte, and ends its wait
//! with `ABORTED`; and sends the rest of a job's `RESERVED` that its
//! socket had no room for while the connection's thread waits in a read.
//!
//! A connection thread blocked in reserve sleeps in its mailbox, not on
//! its socket, so it cannot see the client go. Before it sleeps it arms a
//! one-shot watch on its socket here; one thread waits on an epoll set for
//! hang-ups (for data only behind a `reserve-with-abort`, which data calls
//! off: commands pipelined behind any other reserve stay unread, reference
//! §1.1) and tells the engine. It never reads a client's socket: the bytes
//! that abort a wait stay there, to be read as the next command. A watch
//! is registered with a connection's first and only re-armed later (one
//! system call per wait in the mailbox, and one per reply left to finish);
//! closing the socket removes it. A
//! hang-up noticed while the client is not blocked is still right to
//! report: a client that has half-closed must never block. Without this, a
//! worker that vanished while waiting could be handed a job that would then
//! sit reserved by a dead connection.
//!
//! This thread reports a hang-up some time after it happens, and a put that
//! arrives in that window would win the race; so the engine also asks the
//! socket itself (a zero-timeout poll, through the connection's `Waker`)
//! just before each hand-off. This thread is what ends a wait that no job
//! comes to end.
//!
//! A blocked reserve that nothing but a job can end within a second waits
//! in a read of its socket instead (`conn/wait.rs`), sees a hang-up for
//! itself, and arms no watch here. A job
//! handed to it is sent by the thread that handed it over; what its socket
//! has no room for is left to this thread ([`Finisher`]), which sends it as
//! room comes, under the rule of `mailbox.rs`.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::engine::ClientId;
use crate::engine_lock::EngineLock;
use crate::sys::HangupPoller;

/// The token of the watcher's own wake-up socket; client ids start at 1.
const WAKE_TOKEN: u64 = 0;

/// The epoll set and the socket pair used to stop the watcher thread.
pub(crate) struct HangupWatcher {
    poller: Arc<HangupPoller>,
    wake_reader: UnixStream,
    wake_writer: UnixStream,
}

/// How a thread that sent part of a delivered reply leaves the rest to the
/// watcher thread: it arms a one-shot watch for room in the socket.
#[derive(Debug, Clone)]
pub(crate) struct Finisher(Arc<HangupPoller>);

impl Finisher {
    /// Has the watcher send the rest of client `client`'s reply on `fd`
    /// once the socket has room (see [`run`]).
    pub fn finish(&self, fd: RawFd, client: ClientId) -> io::Result<()> {
        self.0.watch_writable(fd, client.0)
    }
}

impl HangupWatcher {
    pub fn new() -> io::Result<HangupWatcher> {
        let poller = HangupPoller::new()?;
        let (wake_reader, wake_writer) = UnixStream::pair()?;
        poller.watch_readable(wake_reader.as_raw_fd(), WAKE_TOKEN)?;
        Ok(HangupWatcher { poller: Arc::new(poller), wake_reader, wake_writer })
    }

    /// Arms the watch on a client's socket as it blocks in reserve, for
    /// data too if its wait is `abortable`.
    pub fn watch(&self, fd: RawFd, client: ClientId, abortable: bool) -> io::Result<()> {
        self.poller.watch_hangup(fd, client.0, abortable)
    }

    /// The handle through which a reply's rest is left to this watcher.
    pub fn finisher(&self) -> Finisher {
        Finisher(Arc::clone(&self.poller))
    }

    /// Wakes the watcher thread so that it sees the server is stopping.
    pub fn stop(&self) {
        let _ = (&self.wake_writer).write_all(&[1]);
    }
}

/// The watcher thread's body: reports each hang-up, and each arrival of
/// data on an abortable wait, to `engine`; has `send_rest` send more of a
/// reply when its client's socket has room (`gone`: it has hung up, so
/// no more room will be watched for); until `stopping` is set and
/// [`HangupWatcher::stop`] wakes it.
pub(crate) fn run(
    watcher: &HangupWatcher,
    engine: &EngineLock,
    stopping: &AtomicBool,
    send_rest: &dyn Fn(ClientId, bool),
) {
    let mut events = Vec::new();
    loop {
        if let Err(e) = watcher.poller.wait(&mut events) {
            crate::log::problem(format_args!("epoll_wait: {e}"));
            return;
        }
        for stirred in &events {
            if stirred.token == WAKE_TOKEN {
                let _ = (&watcher.wake_reader).read(&mut [0; 16]);
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            let client = ClientId(stirred.token);
            if stirred.writable {
                send_rest(client, stirred.gone);
            }
            if stirred.readable || stirred.gone {
                // Through the guard: the wait this ends is woken as it unlocks.
                engine.lock().client_stirred(client, stirred.gone);
            }
        }
    }
}
