//! The server: binds the listening socket, starts the timer and hang-up
//! threads, and accepts connections, each served by a thread of its own.
//!
//! Everything the threads share lives in one `Shared`: the engine behind
//! its `Mutex`, the clock, the timer's `Condvar`, and the table of open
//! connections (used to enforce the connection cap and to close every socket
//! on shutdown). This module owns threads and sockets; it makes no queue
//! decisions.
//!
//! The accept loop (`accepting.rs`, one for the listening socket and one
//! for `--admin-socket`'s) waits in `poll` on its socket and on a wake-up
//! socket pair of its own; [`Handle::shutdown`] writes to the pair. So
//! stopping never depends on reaching the listener from outside: a UNIX
//! socket file removed or replaced by someone else, or a firewalled
//! address, cannot keep the server from exiting.

mod accepting;
mod handle;
mod recovery;

pub use handle::{Handle, Running};

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::engine::{ClientId, Engine};
use crate::engine_lock::EngineLock;
use crate::hangup::HangupWatcher;
use crate::host::{ConnectionLimit, HostLimits};
use crate::listen::Listener;
use crate::log::Count;
pub use crate::protocol::VERSION;
use crate::shared::{AcceptWake, ProcessInfo, Shared};
use crate::stream::SharedConn;
pub use crate::stream::Stream;
use crate::time::Clock;
use crate::{conn, hangup, sys, timer};

/// Stack size of a connection thread. A connection's deepest path (formatting
/// `stats`) needs well under this; an idle connection touches two pages.
const CONNECTION_STACK: usize = 128 * 1024;

/// A bound server, ready to [`run`](Server::run).
///
/// ```no_run
/// use beanstalk::{Config, Server};
///
/// let server = Server::bind(Config::loopback())?;
/// println!("listening on {}", server.local_addr().unwrap());
/// let running = server.spawn()?;
/// // ... talk to it over TCP ...
/// running.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Server {
    listener: Listener,
    /// `--admin-socket`'s listener, the only one allowed the admin commands.
    admin: Option<Arc<Listener>>,
    shared: Arc<Shared>,
}

impl Server {
    /// Binds the listening socket of `config` and prepares the shared state.
    /// Nothing is served until [`Server::run`] or [`Server::spawn`].
    pub fn bind(config: Config) -> io::Result<Server> {
        Server::with_listener(Listener::bind(&config.listen)?, config)
    }

    /// Serves on an inherited listening socket (systemd socket activation)
    /// instead of binding one; `config.listen` is ignored. `fd` must be owned
    /// by nothing else in the process.
    pub fn bind_inherited(fd: RawFd, config: Config) -> io::Result<Server> {
        Server::with_listener(Listener::inherited(fd)?, config)
    }

    fn with_listener(listener: Listener, config: Config) -> io::Result<Server> {
        let (reader, writer) = UnixStream::pair()?;
        let connection_limit = match config.max_connections {
            Some(given) => ConnectionLimit::given(given),
            None => ConnectionLimit::from_host(&HostLimits::read()),
        };
        let timer = Arc::new(Condvar::new());
        let mut engine = Engine::new(config.max_job_size);
        engine.set_timer(Arc::clone(&timer));
        engine.set_memory_limit(config.max_job_memory);
        engine.set_max_reserves(config.max_reserves);
        engine.set_id_range(config.job_ids);
        engine.set_metering(config.metrics.is_some());
        let metrics = config.metrics.as_deref().map(crate::metrics::bind).transpose()?;
        let admin = config.admin_socket.as_deref().map(accepting::bind_admin).transpose()?.map(Arc::new);
        let socket_files =
            [Some(&listener), admin.as_deref()].into_iter().flatten().filter_map(Listener::socket_file);
        let shared = Arc::new(Shared {
            engine: EngineLock::new(engine),
            clock: Clock::start(),
            timer,
            hangups: HangupWatcher::new()?,
            config,
            connection_limit,
            process: ProcessInfo::new(),
            stopping: AtomicBool::new(false),
            serving: AtomicBool::new(false),
            socket_files: socket_files.cloned().collect(),
            accept_wake: AcceptWake { reader, writer },
            connections: Mutex::new(HashMap::new()),
            all_closed: Condvar::new(),
            durability: OnceLock::new(),
            refused: AtomicU64::new(0),
            replies_unsent: AtomicU64::new(0),
            metrics: Mutex::new(metrics),
            last_evacuation: AtomicU64::new(0),
        });
        Ok(Server { listener, admin, shared })
    }

    /// The TCP address actually bound (useful with port 0); `None` for a
    /// UNIX socket.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr()
    }

    /// How many connections it serves at once, and why (for `-V` logging).
    pub fn connection_limit(&self) -> &ConnectionLimit {
        &self.shared.connection_limit
    }

    /// The listening socket's file descriptor (for `-V` logging).
    pub fn listener_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }

    /// Where it listens, as `-l` would say it: `127.0.0.1:11300`, or
    /// `unix:/run/beanstalk.sock`.
    pub fn listen_address(&self) -> String {
        self.listener.address()
    }

    /// Removes the UNIX socket file this server created, if it is still
    /// there: for a start-up that fails after binding.
    pub fn remove_socket_file(&self) {
        self.handle().remove_socket_files();
    }

    /// Hands the UNIX socket file this server created to `uid` and `gid`,
    /// so that clients running as the user `-u` names can connect once the
    /// server has become that user. Does nothing for TCP, or for a socket
    /// it did not create (an inherited one).
    pub fn give_socket_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        self.admin.iter().try_for_each(|admin| admin.give_to(uid, gid))?;
        self.listener.give_to(uid, gid)
    }

    /// A handle to stop this server (or drain it) once it runs.
    pub fn handle(&self) -> Handle {
        Handle { shared: Arc::clone(&self.shared) }
    }

    /// Serves until [`Handle::shutdown`] is called, then closes every
    /// connection, waits (briefly) for their threads, and returns. A
    /// start-up error (the binlog, a helper thread) is returned at once.
    pub fn run(self) -> io::Result<()> {
        // A failed start-up leaves no socket file behind.
        let helpers = self.start().inspect_err(|_| self.remove_socket_file())?;
        self.serve(helpers);
        Ok(())
    }

    /// Runs the server on a thread of its own, once it has started: a
    /// start-up error (the binlog, a helper thread) is returned here.
    pub fn spawn(self) -> io::Result<Running> {
        let handle = self.handle();
        let addr = self.local_addr();
        // The server's own thread starts it, and says how that went before
        // it serves: if the thread cannot be made, nothing was started.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let thread =
            thread::Builder::new().name("beanstalk-accept".into()).spawn(move || match self.start() {
                Ok(helpers) => {
                    let _ = started_tx.send(Ok(()));
                    self.serve(helpers);
                }
                Err(e) => {
                    self.remove_socket_file();
                    let _ = started_tx.send(Err(e));
                }
            })?;
        match started_rx.recv() {
            Ok(Ok(())) => Ok(Running { handle, addr, thread: Some(thread) }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(io::Error::other("the server's thread ended while starting")),
        }
    }

    /// Opens the binlog if that was not done yet, and starts the timer and
    /// hang-up threads.
    fn start(&self) -> io::Result<Helpers> {
        self.open_binlog().map_err(|e| io::Error::other(e.to_string()))?;
        let shared = &self.shared;
        let timer = {
            let s = Arc::clone(shared);
            let run = move || timer::run(&s.engine, &s.clock, &s.timer, &s.stopping);
            thread::Builder::new().name("beanstalk-timer".into()).spawn(run)?
        };
        let hangup = {
            let s = Arc::clone(shared);
            let run = move || {
                let send_rest = |client, gone| {
                    let conn = s.connections().get(&client).cloned();
                    if let Some(conn) = conn {
                        conn.send_rest(gone);
                    }
                };
                hangup::run(&s.hangups, &s.engine, &s.stopping, &send_rest);
            };
            thread::Builder::new().name("beanstalk-hangup".into()).spawn(run)
        };
        match hangup {
            Ok(hangup) => Ok(Helpers { timer, hangup, metrics: crate::metrics::start(shared) }),
            Err(e) => {
                shared.stopping.store(true, Ordering::SeqCst);
                // Under the engine's lock, so that the timer is either
                // before its check of `stopping` or already waiting.
                drop(shared.engine());
                shared.timer.notify_all();
                let _ = timer.join();
                Err(e)
            }
        }
    }

    /// The accept loops, until shutdown; then the shutdown itself.
    fn serve(self, helpers: Helpers) {
        let shared = &self.shared;
        shared.serving.store(true, Ordering::SeqCst);
        let admin = self.admin.as_ref().and_then(|admin| accepting::spawn_admin(shared, admin));
        accepting::run(shared, &self.listener, self.admin.is_none());
        let _ = admin.map(thread::JoinHandle::join);
        self.finish(helpers);
    }
}

/// Serves a connection accepted from a listener whose connections may run
/// the admin commands (`admin`) or not, on a thread of its own.
fn start_connection(shared: &Arc<Shared>, stream: Stream, admin: bool) {
    if shared.stopping.load(Ordering::SeqCst) {
        return;
    }
    let fd = stream.as_raw_fd();
    let peer = stream.peer();
    let mut connections = shared.connections();
    if connections.len() >= shared.connection_limit.value {
        drop(connections);
        shared.refused.fetch_add(1, Ordering::Relaxed);
        crate::log::event(format_args!("refuse {peer} (fd {fd}): at the connection limit"));
        return; // dropping the stream closes it
    }
    // A connection's `Arc` allocates with no way to fail soft (std has
    // no stable `Arc::try_new`); it is small, and the connection limit
    // (`host.rs`) leaves room for it. The engine's record, the map's
    // room and the thread are claimed, and their failure closes this
    // connection alone.
    let shared_conn = Arc::new(SharedConn::new(stream, shared.hangups.finisher()));
    let connect = |connections: &mut HashMap<ClientId, Arc<SharedConn>>| match connections.try_reserve(1) {
        Ok(()) => shared.engine().connect(shared_conn.clone()),
        Err(_) => None,
    };
    let mut client = connect(&mut connections);
    if client.is_none() {
        // Out of memory: empty the pages a few live jobs pin, and try
        // once more (without the table's lock, which no thread holding
        // the engine's may wait for).
        drop(connections);
        let room = shared.make_room();
        connections = shared.connections();
        client = if room { connect(&mut connections) } else { None };
    }
    let Some(client) = client else {
        drop(connections);
        crate::log::event(format_args!("refuse {peer} (fd {fd}): out of memory"));
        return; // dropping the stream closes it
    };
    shared_conn.set_client(client);
    connections.insert(client, Arc::clone(&shared_conn));
    drop(connections);
    crate::log::event(format_args!("accept {peer} (fd {fd})"));
    let thread_shared = Arc::clone(shared);
    // Not std's spawn: its new thread maps a signal stack and aborts the
    // process if it cannot (see `sys/thread.rs`). Unnamed: a name is one
    // more allocation a connection, and the thread shows under the
    // process's own name.
    let spawned =
        sys::spawn_thread(CONNECTION_STACK, move || conn::serve(thread_shared, shared_conn, client, admin))
            // Its stack needs whole pages: empty those a few live jobs pin,
            // and try once more.
            .or_else(|unrun| {
                if shared.make_room() {
                    sys::spawn_thread(CONNECTION_STACK, unrun)
                } else {
                    Err(unrun)
                }
            });
    if let Err(unrun) = spawned {
        crate::log::problem(format_args!(
            "cannot start a thread for connection {peer} (fd {fd}): out of memory"
        ));
        // The closure holds the stream: dropping it closes the socket.
        drop(unrun);
        shared.engine().disconnect(client, shared.clock.now());
        shared.connection_closed(client);
    }
}

impl Server {
    fn finish(self, helpers: Helpers) {
        let shared = &self.shared;
        // Wake every connection: a blocked read sees EOF, a blocked reserve
        // times out.
        let open: Vec<(ClientId, Arc<SharedConn>)> =
            shared.connections().iter().map(|(&c, s)| (c, Arc::clone(s))).collect();
        {
            let mut engine = shared.engine();
            for (client, _) in &open {
                engine.hang_up(*client);
            }
        }
        for (_, connection) in &open {
            connection.stream.shutdown_read();
        }
        // A client that never reads its replies could hold its thread in a
        // write forever; give up on it after a moment.
        let deadline = Instant::now() + Duration::from_millis(900);
        let mut connections = shared.connections();
        while !connections.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            connections =
                shared.all_closed.wait_timeout(connections, left).map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        drop(connections);
        shared.timer.notify_all();
        shared.hangups.stop();
        let _ = helpers.timer.join();
        let _ = helpers.hangup.join();
        let _ = helpers.metrics.map(thread::JoinHandle::join);
        let jobs = Count(shared.engine().job_count() as u64, "job");
        let open = Count(open.len() as u64, "connection");
        if let Some(durability) = shared.durability.get() {
            durability.sync_all();
            crate::log::event(format_args!("stopped: {open} closed, {jobs} kept in the binlog"));
        } else {
            crate::log::event(format_args!("stopped: {open} closed, {jobs} dropped (no -b)"));
        }
        self.remove_socket_file();
    }
}

/// The helper threads a running server has started.
struct Helpers {
    timer: thread::JoinHandle<()>,
    hangup: thread::JoinHandle<()>,
    /// The `--metrics` endpoint's thread, if it serves.
    metrics: Option<thread::JoinHandle<()>>,
}

#[cfg(test)]
impl Server {
    /// The state a connection thread is given, for the connection code's
    /// unit tests.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}
