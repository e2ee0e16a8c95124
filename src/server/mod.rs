//! The server: binds the listening socket, starts the timer thread and
//! the event loops (one a CPU, `--threads`), and accepts connections,
//! dealing each to the next loop in turn, which serves it until it closes
//! (`event_loop.rs`).
//!
//! Everything the threads share lives in one `Shared`: the engine behind
//! its `Mutex`, the clock, the timer's `Condvar`, the loops' homes, and
//! the count of open connections (the connection cap). This module owns
//! threads and sockets; it makes no queue decisions.
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

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;

use crate::config::Config;
use crate::engine::Engine;
use crate::engine_lock::EngineLock;
use crate::home::{Arrival, Home};
use crate::host::{ConnectionLimit, HostLimits};
use crate::listen::{Listener, SocketFile};
use crate::log::Count;
pub use crate::protocol::VERSION;
use crate::shared::{AcceptWake, ProcessInfo, Shared};
use crate::stream::SharedConn;
pub use crate::stream::Stream;
use crate::time::Clock;
use crate::{event_loop, timer};

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
        let listener = Listener::bind(&config.listen)?;
        // A start-up that fails past here (the admin socket, the metrics
        // port) leaves no socket file of ours behind.
        let file = listener.socket_file().cloned();
        Server::with_listener(listener, config)
            .inspect_err(|_| file.iter().for_each(SocketFile::remove_if_ours))
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
        let admin = config.admin_socket.as_deref().map(Listener::bind_private).transpose()?.map(Arc::new);
        let socket_files =
            [Some(&listener), admin.as_deref()].into_iter().flatten().filter_map(Listener::socket_file);
        let loops = config.threads.unwrap_or_else(crate::host::cpus_online);
        let homes = (0..loops).map(|id| Home::new(id).map(Arc::new)).collect::<io::Result<_>>()?;
        let shared = Arc::new(Shared {
            engine: EngineLock::new(engine),
            clock: Clock::start(),
            timer,
            homes,
            next_home: AtomicUsize::new(0),
            config,
            connection_limit,
            process: ProcessInfo::new(),
            stopping: AtomicBool::new(false),
            serving: AtomicBool::new(false),
            socket_files: socket_files.cloned().collect(),
            accept_wake: AcceptWake { reader, writer },
            open: AtomicUsize::new(0),
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

    /// Opens the binlog if that was not done yet, and starts the timer
    /// thread and the event loops.
    fn start(&self) -> io::Result<Helpers> {
        self.open_binlog().map_err(|e| io::Error::other(e.to_string()))?;
        let shared = &self.shared;
        let timer = {
            let s = Arc::clone(shared);
            let run = move || timer::run(&s.engine, &s.clock, &s.timer, &s.stopping);
            thread::Builder::new().name("beanstalk-timer".into()).spawn(run)?
        };
        let mut helpers = Helpers { timer, loops: Vec::new(), metrics: None };
        for home in &shared.homes {
            let (s, h) = (Arc::clone(shared), Arc::clone(home));
            match thread::Builder::new().name("beanstalk-loop".into()).spawn(move || event_loop::run(s, h)) {
                Ok(thread) => helpers.loops.push(thread),
                Err(e) => {
                    helpers.stop(shared);
                    return Err(e);
                }
            }
        }
        helpers.metrics = crate::metrics::start(shared);
        Ok(helpers)
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
/// the admin commands (`admin`) or not: the engine takes it as a client,
/// and the next loop in turn serves it.
fn start_connection(shared: &Arc<Shared>, stream: Stream, admin: bool) {
    if shared.stopping.load(Ordering::SeqCst) {
        return;
    }
    let fd = stream.as_raw_fd();
    let peer = stream.peer();
    // The admin socket's connections are the operator's, and the cap does
    // not count them: else clients elsewhere, idle at the cap, would
    // lock the operator out.
    let capped = shared.capped(admin);
    if capped && shared.open.load(Ordering::SeqCst) >= shared.connection_limit.value {
        shared.refused.fetch_add(1, Ordering::Relaxed);
        crate::log::event(format_args!("refuse {peer} (fd {fd}): at the connection limit"));
        return; // dropping the stream closes it
    }
    if let Err(e) = stream.set_nonblocking() {
        crate::log::problem(format_args!("refuse {peer} (fd {fd}): {e}"));
        return;
    }
    let next = shared.next_home.fetch_add(1, Ordering::Relaxed);
    let home = Arc::clone(&shared.homes[next % shared.homes.len()]);
    // A connection's `Arc` allocates with no way to fail soft (std has
    // no stable `Arc::try_new`); it is small, and the connection limit
    // (`host.rs`) leaves room for it. The engine's record is claimed, and
    // its failure closes this connection alone.
    let conn = Arc::new(SharedConn::new(stream, Arc::clone(&home.wakes)));
    let mut client = shared.engine().connect(conn.clone());
    if client.is_none() && shared.make_room() {
        // Out of memory: the pages a few live jobs pinned were emptied.
        client = shared.engine().connect(conn.clone());
    }
    let Some(client) = client else {
        crate::log::event(format_args!("refuse {peer} (fd {fd}): out of memory"));
        return; // dropping the stream closes it
    };
    conn.set_client(client);
    if !admin {
        // What a connection off the admin socket may not do to jobs it
        // does not hold (reference §3.0).
        shared.engine().restrict(client, shared.config.admin_commands);
    }
    if capped {
        shared.open.fetch_add(1, Ordering::SeqCst);
    }
    crate::log::event(format_args!("accept {peer} (fd {fd})"));
    if let Err(unnoted) = home.arrive(Arrival { conn, client, admin }) {
        crate::log::event(format_args!("close {peer} (fd {fd}): out of memory"));
        shared.engine().disconnect(client, shared.clock.now());
        shared.connection_closed(admin);
        drop(unnoted); // dropping the stream closes it
    }
}

impl Server {
    fn finish(self, helpers: Helpers) {
        let shared = &self.shared;
        let open = Count(shared.open.load(Ordering::SeqCst) as u64, "connection");
        helpers.stop(shared);
        let jobs = Count(shared.engine().job_count() as u64, "job");
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
    /// The event loops, one a home.
    loops: Vec<thread::JoinHandle<()>>,
    /// The `--metrics` endpoint's thread, if it serves.
    metrics: Option<thread::JoinHandle<()>>,
}

impl Helpers {
    /// Stops them and waits for them: the loops first, which close every
    /// connection (the command in flight answered, a client that does not
    /// read cut after a moment), then the timer and the metrics.
    fn stop(self, shared: &Shared) {
        shared.stopping.store(true, Ordering::SeqCst);
        shared.homes.iter().for_each(|home| home.wakes.ring_always());
        self.loops.into_iter().for_each(|thread| drop(thread.join()));
        // Under the engine's lock, so that the timer is either before its
        // check of `stopping` or already waiting.
        drop(shared.engine());
        shared.timer.notify_all();
        let _ = self.timer.join();
        let _ = self.metrics.map(thread::JoinHandle::join);
    }
}

#[cfg(test)]
impl Server {
    /// The state the loops are given, for the connection code's unit
    /// tests.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}
