//! An event loop: one I/O thread, its epoll set, and the connections it
//! owns. The server starts one a CPU (`--threads`); the accept loop deals
//! each new connection to the next loop in turn ([`Home::arrive`]), and
//! the connection lives on that loop until it closes. This is beanstalkd's
//! own design, one loop a core instead of one in all.
//!
//! A turn of the loop: wait in `epoll_wait` for sockets that became
//! readable or writable (edge-triggered: each readiness is reported once,
//! and the connection reads or writes until the socket would wait), for
//! the loop's bell (another thread handed over a connection, or ended a
//! blocked reserve of one of ours), or for the soonest timer (a
//! `reserve-with-timeout` ending, a safety margin beginning). Then serve
//! each connection that has something to do, a bounded share at a time
//! ([`Conn::serve`]): one that has more is served again after the others,
//! so a client that floods holds up only itself. Once a second, the
//! connections quiet since the last look let go of their buffers.
//!
//! What a connection does is `conn`'s; this file only decides when. It
//! never touches the engine but to tell it a connection closed, and never
//! reads or writes a socket itself.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::conn::{Conn, Served, IDLE_AFTER};
use crate::home::{Arrival, Home};
use crate::shared::Shared;
use crate::sys::{Event, Poller};
use crate::time::Time;

mod slots;
use slots::Slots;

/// The bell's token; a connection's is its slot and generation (see
/// [`Slots`]), never this.
const BELL: u64 = u64::MAX;

/// How long a shutdown waits for the connections to finish the command
/// in flight and send its reply; a client that does not read is then cut.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(900);

/// One loop's own state, on its own thread.
struct Loop {
    shared: Arc<Shared>,
    home: Arc<Home>,
    poller: Poller,
    conns: Slots,
    /// Connections with something to do, in the order they are served.
    ready: VecDeque<u64>,
    /// When a blocked reserve must be looked at again, soonest first.
    timers: BinaryHeap<Reverse<(Time, u64)>>,
    /// When connections quiet since the last look next let go of their
    /// buffers.
    next_sweep: Time,
    /// When a shutdown cuts the connections still open.
    cut_at: Option<Time>,
    /// Connections whose last reply waits for the log's first `seq`
    /// records to be fsynced (`-f 0`), in the order they asked.
    on_disk: Vec<(u64, u64)>,
    /// The tokens woken, and the connections handed over, taken from
    /// [`Home`] (swapped, so neither side allocates once warm).
    woken: Vec<u64>,
    arrived: Vec<Arrival>,
}

/// Runs the loop of `home` until the server stops and its connections
/// have closed.
pub(crate) fn run(shared: Arc<Shared>, home: Arc<Home>) {
    home.wakes.serve_here();
    let poller = match Poller::new().and_then(|p| p.add_readable(home.wakes.as_raw_fd(), BELL).map(|()| p)) {
        Ok(poller) => poller,
        Err(e) => {
            crate::log::problem(format_args!("an event loop cannot make its epoll set: {e}"));
            return;
        }
    };
    let next_sweep = shared.clock.now().plus(IDLE_AFTER);
    let mut lp = Loop {
        shared,
        home,
        poller,
        conns: Slots::default(),
        ready: VecDeque::new(),
        timers: BinaryHeap::new(),
        next_sweep,
        cut_at: None,
        on_disk: Vec::new(),
        woken: Vec::new(),
        arrived: Vec::new(),
    };
    lp.run();
}

impl Loop {
    fn run(&mut self) {
        let mut events = Vec::with_capacity(crate::sys::poller::EVENTS_A_WAIT);
        loop {
            let timeout = self.timeout();
            if let Err(e) = self.poller.wait(&mut events, timeout) {
                crate::log::problem(format_args!("epoll_wait: {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
            for event in &events {
                self.note(*event);
            }
            self.take_deliveries();
            let now = self.shared.clock.now();
            self.expire_timers(now);
            self.serve_ready();
            if now >= self.next_sweep {
                self.sweep();
            }
            if self.shared.stopping.load(Ordering::SeqCst) && self.stop(now) {
                return;
            }
        }
    }

    /// How long to wait for events: not at all with connections ready,
    /// else until the next timer or sweep.
    fn timeout(&self) -> i32 {
        // A loop that woke one of its own connections rang no bell.
        if !self.ready.is_empty() || self.home.has_mail() {
            return 0;
        }
        let now = self.shared.clock.now();
        let mut until = self.next_sweep;
        if let Some(Reverse((at, _))) = self.timers.peek() {
            until = until.min(*at);
        }
        if let Some(cut) = self.cut_at {
            until = until.min(cut);
        }
        // Rounded up: a wake a millisecond early would find nothing due.
        let ms = until.duration_since(now).as_micros().div_ceil(1000);
        i32::try_from(ms).unwrap_or(i32::MAX)
    }

    /// Notes what an event says of its connection, and puts it in line.
    fn note(&mut self, event: Event) {
        if event.token == BELL {
            self.home.wakes.heard();
            return;
        }
        if let Some(conn) = self.conns.get(event.token) {
            conn.note(event.readable, event.writable, event.gone);
            if conn.enqueue() {
                self.ready.push_back(event.token);
            }
        }
    }

    /// Room, claimed before a connection is taken, for one more connection
    /// in each of the loop's lists, so that serving never allocates: a
    /// connection is in the ready line and the `-f 0` list at most once,
    /// and has at most one timer but for those a sooner one replaced
    /// (each push of a timer claims its own room).
    fn claim_one_more(&mut self) -> bool {
        let more = self.conns.live() + 1;
        self.conns.claim_one_more()
            && self.ready.try_reserve(more.saturating_sub(self.ready.len())).is_ok()
            && self.on_disk.try_reserve(more.saturating_sub(self.on_disk.len())).is_ok()
            && self.timers.try_reserve(more.saturating_sub(self.timers.len())).is_ok()
    }

    /// Takes the connections other threads woke or handed over.
    fn take_deliveries(&mut self) {
        self.home.wakes.take(&mut self.woken);
        for token in self.woken.drain(..) {
            if let Some(conn) = self.conns.get(token) {
                conn.woken();
                if conn.enqueue() {
                    self.ready.push_back(token);
                }
            }
        }
        if self.home.wakes.overflowed() {
            // A wake could not be noted: look at every connection.
            for index in 0..self.conns.slot_count() {
                let Some(token) = self.conns.token(index) else { continue };
                if let Some(conn) = self.conns.get(token) {
                    conn.woken();
                    if conn.enqueue() {
                        self.ready.push_back(token);
                    }
                }
            }
        }
        self.home.take_arrivals(&mut self.arrived);
        let mut arrived = std::mem::take(&mut self.arrived);
        for Arrival { conn, client, admin } in arrived.drain(..) {
            let fd = conn.stream.as_raw_fd();
            let shared = Arc::clone(&self.shared);
            // Short of pages: empty those a few live jobs pin, and try
            // once more.
            let claimed = self.claim_one_more() || self.shared.make_room() && self.claim_one_more();
            if !claimed {
                // Short of memory for its place: closed, as a connection
                // refused at accept is, and only it.
                crate::log::event(format_args!("refuse {} (fd {fd}): out of memory", conn.stream.peer()));
                Conn::new(shared, conn, client, admin).close();
                self.shared.connection_closed(admin);
                continue;
            }
            let token = self.conns.insert(|token| {
                conn.set_token(token);
                Conn::new(shared, conn, client, admin)
            });
            if let Err(e) = self.poller.add(fd, token) {
                crate::log::problem(format_args!("epoll_ctl (fd {fd}): {e}"));
                self.close(token);
                continue;
            }
            // Bytes may have come before it was watched: look now.
            self.ready.push_back(token);
            if let Some(conn) = self.conns.get(token) {
                conn.enqueue();
            }
        }
        self.arrived = arrived;
    }

    /// Puts in line the connections whose timer is due.
    fn expire_timers(&mut self, now: Time) {
        while let Some(&Reverse((at, token))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            if let Some(conn) = self.conns.get(token) {
                conn.timer_due(at);
                if conn.enqueue() {
                    self.ready.push_back(token);
                }
            }
        }
    }

    /// Serves each connection in line once; those with more to do go to
    /// the back of the line.
    fn serve_ready(&mut self) {
        self.take_synced();
        let asked = self.on_disk.len();
        for _ in 0..self.ready.len() {
            let Some(token) = self.ready.pop_front() else { break };
            let Some(conn) = self.conns.get(token) else { continue };
            match conn.serve() {
                Served::More => {
                    conn.enqueue();
                    self.ready.push_back(token);
                }
                // A timer a sooner one replaced stays in the heap until due.
                Served::Waits(Some(_)) if self.timers.try_reserve(1).is_err() => self.close(token),
                Served::Waits(Some(at)) => self.timers.push(Reverse((at, token))),
                Served::Waits(None) => {}
                Served::Disk(seq) => self.on_disk.push((seq, token)),
                Served::Closed => self.close(token),
            }
        }
        // `-f 0`: the syncer fsyncs once for every reply of this turn, and
        // of the other loops', that waits for one (group commit); it rings
        // the bell when done, and these connections go on.
        let newest = self.on_disk[asked..].iter().map(|&(seq, _)| seq).max();
        if let (Some(durability), Some(seq)) = (self.shared.durability.get(), newest) {
            durability.ask_sync(seq);
        }
    }

    /// Lets go on the connections whose replies waited for an fsync that
    /// has ended (or failed: their replies become `INTERNAL_ERROR`).
    fn take_synced(&mut self) {
        let Some(durability) = self.shared.durability.get() else { return };
        if self.on_disk.is_empty() {
            return;
        }
        let (synced, ok) = (durability.synced(), !durability.failed());
        let mut waiting = std::mem::take(&mut self.on_disk);
        waiting.retain(|&(seq, token)| {
            if seq > synced && ok {
                return true;
            }
            if let Some(conn) = self.conns.get(token) {
                conn.synced(ok);
                if conn.enqueue() {
                    self.ready.push_back(token);
                }
            }
            false
        });
        self.on_disk = waiting;
    }

    /// Lets go of the buffers of the connections quiet since the last
    /// sweep.
    fn sweep(&mut self) {
        let idle_limit = self.shared.config.conn_idle_timeout;
        for index in 0..self.conns.slot_count() {
            let Some(token) = self.conns.token(index) else { continue };
            let Some(conn) = self.conns.get(token) else { continue };
            conn.sweep();
            if idle_limit.is_some_and(|limit| conn.idle_past(limit)) {
                crate::log::event(format_args!("close an idle connection (--conn-idle-timeout)"));
                self.close(token);
            }
        }
        self.next_sweep = self.shared.clock.now().plus(IDLE_AFTER);
    }

    /// Ends the connection at `token`: the engine forgets its client (its
    /// jobs go back), and its socket closes with the last reference.
    fn close(&mut self, token: u64) {
        if let Some(conn) = self.conns.remove(token) {
            let admin = conn.admin();
            conn.close();
            self.shared.connection_closed(admin);
        }
    }

    /// A shutdown: the first time, every blocked reserve ends and every
    /// connection sees the end of its input after the command in flight;
    /// after [`SHUTDOWN_GRACE`], the rest are cut. True once none is left.
    fn stop(&mut self, now: Time) -> bool {
        if self.cut_at.is_none() {
            for index in 0..self.conns.slot_count() {
                let Some(token) = self.conns.token(index) else { continue };
                if let Some(conn) = self.conns.get(token) {
                    conn.end_of_input();
                    if conn.enqueue() {
                        self.ready.push_back(token);
                    }
                }
            }
            self.cut_at = Some(now.plus(SHUTDOWN_GRACE));
        }
        if self.cut_at.is_some_and(|cut_at| now >= cut_at) {
            for index in 0..self.conns.slot_count() {
                if let Some(token) = self.conns.token(index) {
                    self.close(token);
                }
            }
        }
        self.conns.live() == 0
    }
}
