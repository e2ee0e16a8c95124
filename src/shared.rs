//! What every thread of one server shares: the engine behind its `Mutex`,
//! the clock, the timer's `Condvar`, the event loops' homes (how a thread
//! reaches a loop), the count of open connections, the binlog's
//! durability handle, and the process's fixed facts for `stats`. It sits
//! below the server and the loops that use it, and starts no thread and
//! accepts no socket itself.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::binlog::sync::Durability;
use crate::config::Config;
use crate::engine_lock::{EngineGuard, EngineLock};
use crate::home::Home;
use crate::host::ConnectionLimit;
use crate::listen::SocketFile;
use crate::stats::{BinlogStats, ProcessStats};
use crate::sys;
use crate::time::{Clock, Time};

/// The socket pair that wakes the accept loop for shutdown.
pub(crate) struct AcceptWake {
    pub reader: UnixStream,
    pub writer: UnixStream,
}

/// State shared by every thread of one server.
pub(crate) struct Shared {
    pub engine: EngineLock,
    pub clock: Clock,
    /// The timer thread sleeps on this; the engine notifies it.
    pub timer: Arc<Condvar>,
    /// How other threads reach each event loop: one a loop, dealt new
    /// connections in turn.
    pub homes: Vec<Arc<Home>>,
    /// The loop the next connection goes to.
    pub next_home: AtomicUsize,
    pub config: Config,
    /// Most connections served at once: `--max-connections`, or what the
    /// host allows.
    pub connection_limit: ConnectionLimit,
    pub process: ProcessInfo,
    pub stopping: AtomicBool,
    /// Set once start-up is over and the accept loop runs: until then a
    /// SIGTERM ends the process at once (see [`crate::signals`]).
    pub serving: AtomicBool,
    /// The UNIX socket files this server created (the listener's, the
    /// admin socket's), known here from before the signal thread starts:
    /// whoever ends the process, a clean shutdown or a SIGTERM during
    /// start-up, removes them.
    pub socket_files: Vec<SocketFile>,
    /// Written to by `Handle::shutdown`; the accept loop polls it.
    pub accept_wake: AcceptWake,
    /// Connections open now that the cap counts: accepted, not yet closed
    /// by their loop, and not the admin socket's (see [`Shared::capped`]).
    pub open: AtomicUsize,
    /// The binlog's fsync policy and group commit, once it is open.
    pub durability: OnceLock<Arc<Durability>>,
    /// Connections closed at once for the connection limit.
    pub refused: AtomicU64,
    /// Bytes of replies being written to clients now: what clients that do
    /// not read hold of the server's memory (each bounded, reference
    /// §3.22), shown by `--metrics`.
    pub replies_unsent: AtomicU64,
    /// The `--metrics` listener, until its thread takes it.
    pub metrics: Mutex<Option<std::net::TcpListener>>,
    /// When [`Shared::make_room`] last ran, in ms of the server's clock.
    pub last_evacuation: AtomicU64,
}

/// The least time between two passes of [`Shared::make_room`].
const EVACUATION_EVERY_MS: u64 = 1000;

/// Job bodies [`Shared::make_room`] moves under one hold of the engine's
/// lock: each may free a page, a system call (about 1 ms for 256).
const MOVES_A_HOLD: usize = 256;

impl Shared {
    /// Empties the pages that a few live jobs pin (`sys/evacuation.rs`),
    /// when memory has run short for something that needs whole pages (a
    /// connection's buffer, a job's body): true if a job's body moved, so that the need
    /// may try again. At most once a second, since it takes a pass over
    /// every job under the engine's lock; a server whose allocator is not
    /// this crate's (an embedder's) has no page to empty, and does nothing.
    pub fn make_room(&self) -> bool {
        let now = self.clock.now().0 / 1_000_000;
        let last = self.last_evacuation.load(Ordering::Relaxed);
        if now < last.saturating_add(EVACUATION_EVERY_MS) {
            return false;
        }
        // Choosing walks the pages with room, which is cheap; only a pass
        // over the jobs counts against the rate.
        let Some(mut evacuation) = sys::evacuate() else { return false };
        if self.last_evacuation.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return false;
        }
        let started = Instant::now();
        let (mut moved, mut pages, mut longest) = (0, 0, Duration::ZERO);
        // A choice that filled its table may leave more pages to empty: go
        // on at once, a few rounds at most.
        for round in 1.. {
            let mut from = Some(0);
            while let Some(at) = from {
                let hold = Instant::now();
                let (more, next) =
                    self.engine().move_bodies(at, MOVES_A_HOLD, &|body| evacuation.holds(body));
                (moved, from, longest) = (moved + more, next, longest.max(hold.elapsed()));
                // Whoever waits for the lock goes first.
                std::thread::yield_now();
            }
            pages += evacuation.pages();
            let full = evacuation.is_full();
            // The pages not emptied take blocks again before anything else.
            drop(evacuation);
            match sys::evacuate() {
                Some(next) if full && round < 8 => evacuation = next,
                _ => break,
            }
        }
        crate::log::event(format_args!(
            "short of memory: moved {moved} job bodies out of {pages} pages in {} ms, the lock held {} µs at most",
            started.elapsed().as_millis(),
            longest.as_micros()
        ));
        moved > 0
    }

    /// Locks the engine (see [`EngineLock::lock`]).
    pub fn engine(&self) -> EngineGuard<'_> {
        self.engine.lock()
    }

    /// Locks the engine to answer a command, and brings it up to the
    /// present first ([`Engine::catch_up`](crate::engine::Engine::catch_up)): returns the lock and the time
    /// the command is answered at.
    pub fn engine_now(&self) -> (EngineGuard<'_>, Time) {
        let mut engine = self.engine();
        let now = self.clock.now();
        engine.catch_up(now);
        (engine, now)
    }

    /// How many binlog records have been written (0 without a binlog).
    pub fn journal_seq(&self) -> u64 {
        self.durability.get().map_or(0, |d| d.written())
    }

    /// Whether a reply waits for its records' fsync (`-f 0`): then a loop
    /// fsyncs once for all its connections waiting so ([`Shared::after_write`]).
    pub fn syncs_every_write(&self) -> bool {
        self.durability.get().is_some_and(|d| d.mode() == crate::config::Fsync::Every(0))
    }

    /// Called by a connection whose command wrote binlog records up to `seq`,
    /// before its reply leaves: waits for fsync if the policy says so.
    /// False if the records cannot be made durable (an fsync failed): the
    /// caller must then not report success.
    pub fn after_write(&self, seq: u64) -> bool {
        self.durability.get().is_none_or(|durability| durability.after_write(seq))
    }

    /// The process's own figures for `stats`; `binlog` from the engine.
    pub fn process_stats(&self, binlog: Option<BinlogStats>) -> ProcessStats<'_> {
        let (user_cpu, system_cpu) = sys::cpu_times();
        let p = &self.process;
        ProcessStats {
            pid: std::process::id(),
            version: crate::protocol::VERSION,
            user_cpu,
            system_cpu,
            uptime_secs: p.started.elapsed().as_secs(),
            binlog: binlog.unwrap_or(BinlogStats {
                max_size: u64::from(self.config.binlog_file_size),
                ..BinlogStats::default()
            }),
            instance_id: p.kept_id.get().unwrap_or(&p.instance_id),
            hostname: &p.hostname,
            os: &p.os,
            platform: &p.platform,
        }
    }

    /// Whether the connection cap counts a connection that may run the
    /// admin commands (`admin`) or not: every one but the admin socket's.
    /// (Without an admin socket every connection is `admin`, and counted.)
    pub fn capped(&self, admin: bool) -> bool {
        !admin || self.config.admin_socket.is_none()
    }

    /// Called by a loop as it closes a connection.
    pub fn connection_closed(&self, admin: bool) {
        if self.capped(admin) {
            self.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Facts about the process fixed at start-up.
pub(crate) struct ProcessInfo {
    started: Instant,
    /// Random, made at start-up: the `id` of `stats` without `-b`, and the
    /// one a new binlog directory keeps.
    pub instance_id: String,
    /// The `id` kept in the binlog directory, once it is open: it replaces
    /// `instance_id` in `stats` (see `binlog/identity.rs`).
    pub kept_id: OnceLock<String>,
    hostname: String,
    os: String,
    platform: String,
}

impl ProcessInfo {
    pub fn new() -> ProcessInfo {
        let uname = sys::uname_fields();
        ProcessInfo {
            started: Instant::now(),
            instance_id: instance_id(),
            kept_id: OnceLock::new(),
            hostname: uname.hostname,
            os: uname.version,
            platform: uname.machine,
        }
    }
}

/// 8 random bytes as 16 hex digits, from /dev/urandom (or the clock and pid
/// where there is none, e.g. in a bare chroot).
fn instance_id() -> String {
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = (nanos ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
