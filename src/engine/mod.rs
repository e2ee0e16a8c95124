//! The engine: every job, tube and client's queue state, and the only code
//! that changes it. One method per command.
//!
//! The engine is plain data behind the server's one `Mutex`. It never touches
//! a socket and never reads the clock: each method takes the client it acts
//! for and the current [`Time`], does O(log n) work and returns the
//! [`Reply`]. Blocking is the caller's business: [`Engine::reserve`] either
//! answers at once or registers the client as waiting and returns `None`;
//! when a job is handed to a waiting client, the engine records the outcome
//! and wakes that client's own [`Waiter`] (and no other).
//!
//! A hand-off is two steps apart in time: the engine reserves the job for
//! the waiter at once, and the waiter's thread collects it when it next gets
//! the lock. Two rules keep that gap harmless. A waiter whose connection has
//! already hung up is never handed a job (the engine asks its [`Waiter`],
//! which the server answers from the socket). And if a handed job's TTR runs
//! out before it was collected, the waiter never hears of it: it goes back
//! to waiting in its old place in line, so a job is never delivered after
//! its reservation lapsed, nor to two workers.
//!
//! A put may ask for the shorter path ([`Engine::start_deliveries`]): the
//! engine then encodes the handed job's `RESERVED` reply under the lock and
//! gives it, with the waiter, to the putting thread, which writes it to the
//! socket after releasing the lock and reports back
//! ([`Engine::delivered`]); only then does the waiter's thread go on. The
//! reply no longer waits for a sleeping thread to wake.
//!
//! Nothing the timer runs, and nothing a command runs, visits every tube or
//! every job: tubes waiting on time sit in a timetable, `stats` reads
//! running totals, and memory is given back by the timer thread (see
//! [`Engine::give_back_memory`]).
//!
//! Where each job lives follows from its state (see [`job::State`]):
//!
//! ```text
//!   put ──► delayed ──(time)──► ready ──reserve──► reserved ──delete──► gone
//!              ▲                  ▲  ◄──release 0──┘ │  │
//!              └───release N──────┼──────────────────┘  bury
//!                                 └──kick── buried ◄────┘
//! ```

pub mod heap;
pub mod job;
pub mod journal;
pub mod list;
pub mod table;
pub mod tube;

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Condvar};

use crate::protocol::{Reply, TubeName};
use crate::stats::{CommandCounts, JobCounts, JobStats, ServerStats, TubeStats};
use crate::time::Time;
use heap::Heap;
pub use job::{ClientId, Counters, Job, JobId, State, URGENT_PRIORITY};
pub use journal::{Journal, RestoredJob, RestoredState};
use list::List;
use table::JobTable;
use tube::{Pause, TubeId, Tubes};

/// A `HashMap` keyed by job or client id. Ids are sequential integers, so a
/// multiplicative hash spreads them well at a fraction of SipHash's cost.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing for `u64` keys.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// What one job costs besides its body, for `--max-job-memory`: the job
/// record, its table slot and its heap entry, rounded up. (Measured: about
/// 195 bytes with the old hash-table job table, about 137 with the slab, see
/// `job.rs`; kept at 200 so that the limit errs on the safe side.)
pub const JOB_MEMORY_OVERHEAD: u64 = 200;

/// The least memory worth handing back to the system after deletes: below
/// this the allocator's free lists are left to serve the next puts.
const GIVE_BACK_AT_LEAST: u64 = 16 << 20;

/// The last second of a reservation, when the holder is warned with
/// `DEADLINE_SOON` (reference §4.2).
const SAFETY_MARGIN_SECS: u32 = 1;

/// How the engine reaches the thread of a client blocked in reserve. The
/// server implements it over the client's `Condvar` and socket; the engine
/// sees neither, and asks only these two questions.
pub trait Waiter: Debug + Send + Sync {
    /// Wakes the client's thread: its blocked reserve has an outcome.
    fn wake(&self);

    /// True if the client's peer has already hung up (closed, reset, or shut
    /// down its sending side), as far as can be told without blocking.
    /// Asked just before a job is handed over, so that a job never goes to a
    /// connection whose hang-up has arrived but not yet been reported.
    fn has_hung_up(&self) -> bool;

    /// Writes as much of `reply` to the client as its socket takes without
    /// blocking, and returns how much that was. Called by the thread that
    /// handed the client a job, outside the engine's lock (see
    /// [`Engine::take_deliveries`]); 0 when there is no socket.
    fn deliver(&self, reply: &[u8]) -> usize;
}

/// A bare `Condvar` is the waiter of a client with no socket (tests,
/// benchmarks): it never hangs up by itself.
impl Waiter for Condvar {
    fn wake(&self) {
        self.notify_one();
    }

    fn has_hung_up(&self) -> bool {
        false
    }

    fn deliver(&self, _reply: &[u8]) -> usize {
        0
    }
}

/// How a blocked reserve ended, kept until the waiting client collects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// A job was reserved for the client. The wait it ended is kept: if the
    /// reservation lapses before the client collects it, the client resumes
    /// that same wait, in the same place in line.
    Reserved(JobId, Wait),
    DeadlineSoon,
    TimedOut,
    /// The job's `RESERVED` reply is being written to the client's socket
    /// by the thread that handed it over: the client's thread must not go
    /// on (its next reply would overtake this one) until it is written.
    Delivering(JobId, Wait),
    /// The reply was written by the handing thread; what it could not
    /// write without blocking is in the client's `undelivered`.
    Delivered,
}

/// A `RESERVED` reply for a blocked client, to be written to its socket by
/// the thread that handed it the job, outside the lock; then given back to
/// [`Engine::delivered`].
#[derive(Debug)]
pub struct Delivery {
    pub client: ClientId,
    pub waiter: Arc<dyn Waiter>,
    pub reply: Vec<u8>,
}

/// A reserve that is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wait {
    /// Position in every watched tube's waiting queue: smaller waited longer.
    seq: u64,
    /// When `reserve-with-timeout` gives up.
    timeout_at: Option<Time>,
    /// When the soonest of the client's reservations enters its safety margin.
    margin_at: Option<Time>,
}

/// What the engine knows of one connected client.
#[derive(Debug)]
struct Client {
    /// The tube `put`, `peek-*` and `kick` act on.
    used: TubeId,
    /// The tubes `reserve` takes jobs from: never empty, no duplicates.
    watched: Vec<TubeId>,
    /// Jobs this client holds, in the order it reserved them.
    reserved: List,
    /// The soonest TTR deadline among `reserved`, kept so that a reserve
    /// does not walk every job the client holds (a worker holding 20,000
    /// jobs made each of its reserves walk 20,000).
    soonest_deadline: Soonest,
    /// Has put a job (counted in `current-producers`).
    producer: bool,
    /// Has reserved (counted in `current-workers`).
    worker: bool,
    /// Set while the client is in its tubes' waiting queues.
    wait: Option<Wait>,
    /// How its blocked reserve ended, until its thread collects it.
    outcome: Option<Outcome>,
    /// Its thread is in a blocked reserve: from the reserve that blocked
    /// until [`Engine::check_wait`] gives the reply. A blocked client always
    /// has a `wait` or an `outcome`, never both.
    blocked: bool,
    /// The client has closed its sending side; it must never block.
    hung_up: bool,
    /// The tail of a delivered `RESERVED` reply that its socket did not take
    /// at once; the client's own thread writes it.
    undelivered: Vec<u8>,
    /// Woken when a blocked reserve ends; knows whether the peer is gone.
    waker: Arc<dyn Waiter>,
}

/// A cached minimum that is recomputed only after its holder leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Soonest {
    /// The minimum (`None`: the client holds no job).
    Known(Option<Time>),
    /// The job that held the minimum is gone or was touched: walk the list.
    Stale,
}

impl Client {
    /// A job with TTR deadline `deadline` joined its reservations.
    fn note_deadline(&mut self, deadline: Time) {
        if let Soonest::Known(soonest) = self.soonest_deadline {
            self.soonest_deadline = Soonest::Known(Some(soonest.map_or(deadline, |s| s.min(deadline))));
        }
    }

    /// A job with TTR deadline `deadline` left its reservations (or its
    /// deadline moved): if it may have been the soonest, look again later.
    fn forget_deadline(&mut self, deadline: Time) {
        if self.reserved.is_empty() {
            self.soonest_deadline = Soonest::Known(None);
        } else if self.soonest_deadline == Soonest::Known(Some(deadline)) {
            self.soonest_deadline = Soonest::Stale;
        }
    }
}

/// A job ready to be inserted by [`Engine::put`].
#[derive(Debug)]
pub struct NewJob {
    /// From [`Engine::start_put`].
    pub id: JobId,
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    /// When the put line was parsed.
    pub created: Time,
    pub body: Box<[u8]>,
}

/// All queue state of one server.
#[derive(Debug)]
pub struct Engine {
    /// The one owner of every job; queues hold ids into it.
    jobs: JobTable,
    tubes: Tubes,
    /// Every reserved job, by `(TTR deadline, id)`, for the timer.
    reserved: Heap<Time>,
    clients: IdMap<Client>,
    next_job_id: JobId,
    next_client_id: ClientId,
    next_wait_seq: u64,
    /// Clients blocked in reserve right now.
    waiting_clients: usize,
    producers: usize,
    workers: usize,
    total_connections: u64,
    cmds: CommandCounts,
    job_timeouts: u64,
    total_jobs: u64,
    max_job_size: u32,
    draining: bool,
    /// The timer thread's `Condvar`, and when it plans to wake next.
    timer: Option<Arc<Condvar>>,
    timer_due: Option<Time>,
    /// The write-ahead log, if the server has one (`-b`).
    journal: Option<Box<dyn Journal>>,
    /// Memory held by jobs, and by bodies being received, counted as body
    /// bytes plus [`JOB_MEMORY_OVERHEAD`] per job.
    job_memory: u64,
    /// The `--max-job-memory` cap on `job_memory`.
    memory_limit: Option<u64>,
    /// When the last job was buried. Burial times are kept strictly
    /// increasing, so the log can restore the buried lists' order from them.
    last_buried_at: Time,
    /// Jobs in each state over all tubes, kept as they move, so that `stats`
    /// costs the same with one tube or a million.
    job_counts: JobCounts,
    /// Tubes that [`Engine::tick`] has looked at, ever: a test's window on
    /// the rule that idle tubes cost the timer nothing.
    tubes_visited_by_tick: u64,
    /// The most `job_memory` since memory was last given back: when jobs
    /// now hold far less, the timer thread gives the difference back.
    job_memory_high_water: u64,
    /// The timer thread was told that memory can be given back.
    give_back_asked: bool,
    /// While set (by [`Engine::start_deliveries`]), hand-offs are not
    /// announced to the waiter's thread but listed in `deliveries`, for the
    /// calling thread to write out itself.
    collect_deliveries: bool,
    deliveries: Vec<ClientId>,
}

impl Engine {
    /// An empty engine with the `default` tube. `max_job_size` is the `-z`
    /// limit, shown by `stats` (the connection enforces it while reading).
    pub fn new(max_job_size: u32) -> Engine {
        let mut tubes = Tubes::default();
        tubes.find_or_create(&TubeName::default_tube());
        Engine {
            jobs: JobTable::default(),
            tubes,
            reserved: Heap::new(),
            clients: IdMap::default(),
            next_job_id: 1,
            next_client_id: 1,
            next_wait_seq: 0,
            waiting_clients: 0,
            producers: 0,
            workers: 0,
            total_connections: 0,
            cmds: CommandCounts::default(),
            job_timeouts: 0,
            total_jobs: 0,
            max_job_size,
            draining: false,
            timer: None,
            timer_due: None,
            journal: None,
            job_memory: 0,
            memory_limit: None,
            last_buried_at: Time::ZERO,
            job_counts: JobCounts::default(),
            tubes_visited_by_tick: 0,
            job_memory_high_water: 0,
            give_back_asked: false,
            collect_deliveries: false,
            deliveries: Vec::new(),
        }
    }

    /// Gives the engine the timer thread's `Condvar`, notified whenever a new
    /// deadline comes before the one the timer sleeps towards.
    pub fn set_timer(&mut self, timer: Arc<Condvar>) {
        self.timer = Some(timer);
    }

    /// Caps the memory jobs may take (`--max-job-memory`): a put that would
    /// pass it is refused with `OUT_OF_MEMORY`.
    pub fn set_memory_limit(&mut self, limit: Option<u64>) {
        self.memory_limit = limit;
    }

    /// Memory held by jobs, as the limit counts it.
    pub fn job_memory(&self) -> u64 {
        self.job_memory
    }

    /// Gives the engine a write-ahead log; every later change is recorded.
    pub fn set_journal(&mut self, journal: Box<dyn Journal>) {
        self.journal = Some(journal);
    }

    /// The write-ahead log's figures for `stats`, if there is one.
    pub fn journal_stats(&self) -> Option<crate::stats::BinlogStats> {
        self.journal.as_ref().map(|j| j.stats())
    }

    /// Puts back the jobs read from the log at start-up, and makes sure no
    /// id below `next_id` is handed out again. Each job names its tube by an
    /// index into `tube_names`. Buried jobs go back in the order they were
    /// buried.
    pub fn restore(
        &mut self,
        tube_names: &[TubeName],
        mut jobs: Vec<RestoredJob>,
        next_id: JobId,
        now: Time,
    ) {
        let buried_at = |job: &RestoredJob| match job.state {
            RestoredState::Buried { at } => at,
            _ => Time::ZERO,
        };
        jobs.sort_unstable_by_key(|job| (buried_at(job), job.id));
        // Tubes come back only for jobs that survived, as they were made.
        let mut tube_ids: Vec<Option<TubeId>> = vec![None; tube_names.len()];
        for r in jobs {
            self.next_job_id = self.next_job_id.max(r.id.saturating_add(1));
            let (Some(slot), Some(name)) = (tube_ids.get_mut(r.tube), tube_names.get(r.tube)) else {
                continue;
            };
            let tube = *slot.get_or_insert_with(|| self.tubes.find_or_create(name));
            let job = Job {
                tube,
                pri: r.pri,
                delay: r.delay,
                ttr: r.ttr.max(1),
                state: State::Ready,
                counters: r.counters,
                created: r.created,
                deadline: now,
                reserved_by: 0,
                heap_index: 0,
                links: Default::default(),
                file: r.file,
                body: r.body,
            };
            self.job_memory += job.body.len() as u64 + JOB_MEMORY_OVERHEAD;
            self.jobs.insert(r.id, job);
            match r.state {
                RestoredState::Buried { at } => {
                    self.last_buried_at = self.last_buried_at.max(at);
                    if let Some(job) = self.jobs.get_mut(&r.id) {
                        job.state = State::Buried;
                        job.deadline = at;
                    }
                    tally(&mut self.job_counts, State::Buried, r.pri, true);
                    self.tubes.get_mut(tube).buried.push_back(&mut self.jobs, r.id);
                }
                RestoredState::Delayed { until } if until > now => self.make_delayed(r.id, until),
                _ => self.make_ready(r.id, now),
            }
        }
        self.next_job_id = self.next_job_id.max(next_id);
    }

    /// The id the next put will get.
    pub fn next_id(&self) -> JobId {
        self.next_job_id
    }

    /// Enters drain mode (SIGUSR1): from now on every put gets `DRAINING`.
    pub fn start_draining(&mut self) {
        self.draining = true;
    }

    // ---------------------------------------------------------------
    // Clients
    // ---------------------------------------------------------------

    /// Registers a new client, using and watching `default`. `waker` wakes
    /// its thread while blocked in reserve.
    pub fn connect(&mut self, waker: Arc<dyn Waiter>) -> ClientId {
        let id = self.next_client_id;
        self.next_client_id += 1;
        self.total_connections += 1;
        let default = self.tubes.find_or_create(&TubeName::default_tube());
        let tube = self.tubes.get_mut(default);
        tube.using += 1;
        tube.watching += 1;
        self.clients.insert(
            id,
            Client {
                used: default,
                watched: vec![default],
                reserved: List::default(),
                soonest_deadline: Soonest::Known(None),
                producer: false,
                worker: false,
                wait: None,
                outcome: None,
                blocked: false,
                hung_up: false,
                undelivered: Vec::new(),
                waker,
            },
        );
        id
    }

    /// Forgets a client that closed: its reservations go back to ready at once,
    /// in the order it made them, and its tube references are dropped.
    pub fn disconnect(&mut self, c: ClientId, now: Time) {
        self.stop_waiting(c);
        while let Some(id) = self.clients.get(&c).and_then(|cl| cl.reserved.front()) {
            self.unlink(id);
            self.make_ready(id, now);
        }
        let Some(mut client) = self.clients.remove(&c) else { return };
        self.producers -= usize::from(client.producer);
        self.workers -= usize::from(client.worker);
        // beanstalkd empties the watch list by removing its first entry over
        // and over (each time the last entry fills the gap); tubes vanish in
        // that order, which `list-tubes` shows (reference §5.3).
        while !client.watched.is_empty() {
            let t = client.watched.swap_remove(0);
            self.tubes.get_mut(t).watching -= 1;
            self.tubes.remove_if_unreferenced(t);
        }
        self.tubes.get_mut(client.used).using -= 1;
        self.tubes.remove_if_unreferenced(client.used);
    }

    /// Notes that a client closed its sending side. A blocked reserve ends
    /// with `TIMED_OUT` now, and no later reserve will block (reference §1.7).
    pub fn hang_up(&mut self, c: ClientId) {
        let Some(client) = self.clients.get_mut(&c) else {
            return;
        };
        client.hung_up = true;
        if client.wait.is_some() {
            self.finish_wait(c, Outcome::TimedOut);
        }
    }

    // ---------------------------------------------------------------
    // put
    // ---------------------------------------------------------------

    /// Counts a put whose line parsed (reference §3.1 step 3).
    pub fn count_put(&mut self) {
        self.cmds.put += 1;
    }

    /// Marks the client a producer and allocates the job's id, before its
    /// body of `bytes` bytes is read; the id is used up even if the put then
    /// fails. `None` when the memory limit leaves no room for the body: the
    /// put is refused with `OUT_OF_MEMORY` before anything is allocated.
    /// Every `Some` must be followed by [`Engine::put`] or
    /// [`Engine::cancel_put`].
    pub fn start_put(&mut self, c: ClientId, bytes: u32) -> Option<JobId> {
        if let Some(client) = self.clients.get_mut(&c) {
            if !client.producer {
                client.producer = true;
                self.producers += 1;
            }
        }
        let cost = u64::from(bytes) + JOB_MEMORY_OVERHEAD;
        if self.memory_limit.is_some_and(|limit| self.job_memory + cost > limit) {
            return None;
        }
        self.job_memory += cost;
        self.job_memory_high_water = self.job_memory_high_water.max(self.job_memory);
        let id = self.next_job_id;
        self.next_job_id += 1;
        Some(id)
    }

    /// Gives back the memory claimed by [`Engine::start_put`] for a body that
    /// never arrived intact.
    pub fn cancel_put(&mut self, bytes: u32) {
        self.job_memory = self.job_memory.saturating_sub(u64::from(bytes) + JOB_MEMORY_OVERHEAD);
    }

    /// Inserts a job whose body arrived intact into the client's used tube.
    pub fn put(&mut self, c: ClientId, new: NewJob, now: Time) -> Reply<'_> {
        if self.draining {
            self.cancel_put(new.body.len() as u32);
            return Reply::Draining;
        }
        let Some(client) = self.clients.get(&c) else {
            return Reply::InternalError;
        };
        let tube = client.used;
        let id = new.id;
        let tube_len = self.tubes.get(tube).name.as_str().len();
        let body_len = new.body.len();
        if !self.journal_has_room(|journal| journal.reserve_put(tube_len, body_len)) {
            // No disk space: the id stays used up, the job is forgotten.
            self.cancel_put(body_len as u32);
            return Reply::OutOfMemory;
        }
        let job = Job {
            tube,
            pri: new.pri,
            delay: new.delay,
            ttr: new.ttr.max(1),
            // What it is about to become, so that its log record says so.
            state: if new.delay > 0 { State::Delayed } else { State::Ready },
            counters: Counters::default(),
            created: new.created,
            deadline: now.plus_secs(new.delay),
            reserved_by: 0,
            heap_index: 0,
            links: Default::default(),
            file: 0,
            body: new.body,
        };
        self.jobs.insert(id, job);
        // Logged before it is queued: if the write fails, no client can have
        // seen the job, and it is forgotten as if never put.
        if !self.log_full(id) {
            if let Some(job) = self.jobs.remove(&id) {
                self.cancel_put(job.body.len() as u32);
            }
            return Reply::InternalError;
        }
        self.total_jobs += 1;
        self.tubes.get_mut(tube).total_jobs += 1;
        if new.delay > 0 {
            self.make_delayed(id, now.plus_secs(new.delay));
        } else {
            self.make_ready(id, now);
        }
        self.compact();
        Reply::Inserted(id)
    }

    // ---------------------------------------------------------------
    // Tubes: use, watch, ignore
    // ---------------------------------------------------------------

    /// `use <tube>`.
    pub fn use_tube(&mut self, c: ClientId, name: &TubeName) -> Reply<'_> {
        self.cmds.use_ += 1;
        let new = self.tubes.find_or_create(name);
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        let old = std::mem::replace(&mut client.used, new);
        self.tubes.get_mut(new).using += 1;
        self.tubes.get_mut(old).using -= 1;
        self.tubes.remove_if_unreferenced(old);
        Reply::Using(&self.tubes.get(new).name)
    }

    /// `watch <tube>`.
    pub fn watch(&mut self, c: ClientId, name: &TubeName) -> Reply<'_> {
        self.cmds.watch += 1;
        let t = self.tubes.find_or_create(name);
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        if !client.watched.contains(&t) {
            client.watched.push(t);
            self.tubes.get_mut(t).watching += 1;
        }
        Reply::Watching(client.watched.len())
    }

    /// `ignore <tube>`.
    pub fn ignore(&mut self, c: ClientId, name: &TubeName) -> Reply<'_> {
        self.cmds.ignore += 1;
        let t = self.tubes.find(name);
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        let Some(slot) = t.and_then(|t| client.watched.iter().position(|&w| w == t)) else {
            return Reply::Watching(client.watched.len());
        };
        if client.watched.len() == 1 {
            return Reply::NotIgnored;
        }
        // Swap-remove, as beanstalkd does: the watch list order shows it.
        let t = client.watched.swap_remove(slot);
        let count = client.watched.len();
        self.tubes.get_mut(t).watching -= 1;
        self.tubes.remove_if_unreferenced(t);
        Reply::Watching(count)
    }

    // ---------------------------------------------------------------
    // reserve
    // ---------------------------------------------------------------

    /// `reserve` (`timeout` is `None`) or `reserve-with-timeout`.
    ///
    /// Returns the reply when the reserve ends at once. Otherwise the client
    /// is now waiting and `None` is returned: the caller sleeps on the client's
    /// `Condvar` until [`Engine::wake_time`], then asks [`Engine::check_wait`].
    pub fn reserve(&mut self, c: ClientId, timeout: Option<u32>, now: Time) -> Option<Reply<'_>> {
        match timeout {
            None => self.cmds.reserve += 1,
            Some(_) => self.cmds.reserve_with_timeout += 1,
        }
        let client = self.clients.get_mut(&c)?;
        if !client.worker {
            client.worker = true;
            self.workers += 1;
        }
        let margin_at = self.soonest_margin(c);
        let in_margin = margin_at.is_some_and(|m| now >= m);
        // In the margin, a job that is ready counts even in a paused tube.
        if in_margin && !self.has_ready_job(c, true) {
            return Some(Reply::DeadlineSoon);
        }
        if let Some(id) = self.best_ready_job(c) {
            self.reserve_for(c, id, now);
            return self.reserved_reply(id);
        }
        let client = self.clients.get_mut(&c)?;
        if in_margin {
            return Some(Reply::DeadlineSoon);
        }
        if client.hung_up || timeout == Some(0) {
            return Some(Reply::TimedOut);
        }
        let seq = self.next_wait_seq;
        self.next_wait_seq += 1;
        client.wait = Some(Wait { seq, timeout_at: timeout.map(|secs| now.plus_secs(secs)), margin_at });
        client.outcome = None;
        client.blocked = true;
        for &t in &client.watched {
            self.tubes.get_mut(t).waiting.insert(seq, c);
        }
        self.waiting_clients += 1;
        None
    }

    /// When a blocked reserve of `c` must be checked again even if nobody
    /// wakes it: its timeout or the start of its safety margin. `None` means
    /// it may sleep until woken.
    pub fn wake_time(&self, c: ClientId) -> Option<Time> {
        let wait = self.clients.get(&c)?.wait?;
        match (wait.timeout_at, wait.margin_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Ends a blocked reserve if it is over: a job was handed to the client,
    /// its safety margin began, its timeout passed, or it hung up. `None`
    /// means it is still waiting (or never blocked), and then
    /// [`Engine::wake_time`] or a wake-up is sure to come: a blocked client
    /// that is neither waiting nor has an outcome to collect gets `TIMED_OUT`
    /// rather than a sleep nothing would end.
    pub fn check_wait(&mut self, c: ClientId, now: Time) -> Option<Reply<'_>> {
        let client = self.clients.get_mut(&c)?;
        if !client.blocked || matches!(client.outcome, Some(Outcome::Delivering(..) | Outcome::Delivered)) {
            return None;
        }
        let outcome = match (client.outcome.take(), client.wait) {
            (Some(outcome), _) => outcome,
            (None, Some(wait)) if wait.margin_at.is_some_and(|m| now >= m) => {
                self.stop_waiting(c);
                Outcome::DeadlineSoon
            }
            (None, Some(wait)) if wait.timeout_at.is_some_and(|t| now >= t) => {
                self.stop_waiting(c);
                Outcome::TimedOut
            }
            (None, Some(_)) => return None,
            (None, None) => Outcome::TimedOut,
        };
        if let Outcome::Reserved(id, wait) = outcome {
            if !self.is_reserved_by(id, c) {
                // The TTR path recalls a lapsed hand-off (`recall_handoff`),
                // so this cannot happen; checked all the same, because
                // sending a job to a client that does not hold it is the one
                // thing that must never happen.
                self.resume_wait(c, wait, now);
                return self.check_wait(c, now);
            }
        }
        if let Some(client) = self.clients.get_mut(&c) {
            client.blocked = false;
        }
        match outcome {
            Outcome::Reserved(id, _) => Some(self.reserved_reply(id).unwrap_or(Reply::InternalError)),
            Outcome::DeadlineSoon => Some(Reply::DeadlineSoon),
            Outcome::TimedOut => Some(Reply::TimedOut),
            // Excluded above.
            Outcome::Delivering(..) | Outcome::Delivered => None,
        }
    }

    /// Ends a blocked reserve whose reply another thread already wrote:
    /// `Some(rest)` with what is left of the reply for the client's own
    /// thread to write (usually nothing). `None`: not delivered (yet).
    pub fn check_delivered(&mut self, c: ClientId) -> Option<Vec<u8>> {
        let client = self.clients.get_mut(&c)?;
        if !client.blocked || client.outcome != Some(Outcome::Delivered) {
            return None;
        }
        client.outcome = None;
        client.blocked = false;
        Some(std::mem::take(&mut client.undelivered))
    }

    /// From now until [`Engine::take_deliveries`], jobs handed to blocked
    /// clients are written out by the calling thread rather than by each
    /// client's own thread: the reply then leaves without waiting for a
    /// sleeping thread to wake (the fan-out's tail latency).
    pub fn start_deliveries(&mut self) {
        self.collect_deliveries = true;
    }

    /// The replies of the jobs handed over since
    /// [`Engine::start_deliveries`]. The caller writes each through its
    /// [`Waiter::deliver`] after releasing the lock, then reports with
    /// [`Engine::delivered`]; until then the client's thread waits.
    pub fn take_deliveries(&mut self) -> Vec<Delivery> {
        self.collect_deliveries = false;
        let mut deliveries = Vec::new();
        for c in std::mem::take(&mut self.deliveries) {
            let Some(Outcome::Reserved(id, wait)) = self.clients.get(&c).and_then(|client| client.outcome)
            else {
                continue;
            };
            let mut reply = Vec::new();
            match self.reserved_reply(id) {
                Some(r) if self.is_reserved_by(id, c) => r.encode(&mut reply),
                // Not this client's any more: its own thread sorts it out.
                _ => {
                    self.wake(c);
                    continue;
                }
            }
            if let Some(client) = self.clients.get_mut(&c) {
                client.outcome = Some(Outcome::Delivering(id, wait));
                deliveries.push(Delivery { client: c, waiter: Arc::clone(&client.waker), reply });
            }
        }
        deliveries
    }

    /// Reports that `written` bytes of `delivery`'s reply reached the
    /// client's socket, and wakes the client's thread to write the rest (if
    /// any) and go on.
    pub fn delivered(&mut self, delivery: Delivery, written: usize) {
        let Some(client) = self.clients.get_mut(&delivery.client) else {
            return;
        };
        if !matches!(client.outcome, Some(Outcome::Delivering(..))) {
            return;
        }
        client.outcome = Some(Outcome::Delivered);
        client.undelivered = delivery.reply;
        client.undelivered.drain(..written.min(client.undelivered.len()));
        client.waker.wake();
    }

    /// `reserve-job <id>`: reserves a ready, delayed or buried job in any tube.
    pub fn reserve_job(&mut self, c: ClientId, id: JobId, now: Time) -> Reply<'_> {
        let Some(job) = self.jobs.get(&id) else {
            return Reply::NotFound;
        };
        if job.state == State::Reserved {
            return Reply::NotFound;
        }
        // Taken from buried or delayed, it comes back ready after a restart:
        // that is a change the log must hear of.
        let needs_log = job.state != State::Ready;
        if needs_log && !self.has_room_for_update() {
            return Reply::OutOfMemory;
        }
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        if !client.worker {
            client.worker = true;
            self.workers += 1;
        }
        self.reserve_for(c, id, now);
        if needs_log && !self.log_update(id) {
            return Reply::InternalError;
        }
        self.compact();
        self.reserved_reply(id).unwrap_or(Reply::InternalError)
    }

    // ---------------------------------------------------------------
    // What a worker does with a job: delete, release, bury, touch
    // ---------------------------------------------------------------

    /// `delete <id>`: any job except one reserved by another client.
    pub fn delete(&mut self, c: ClientId, id: JobId) -> Reply<'_> {
        self.cmds.delete += 1;
        let Some(job) = self.jobs.get(&id) else {
            return Reply::NotFound;
        };
        if job.state == State::Reserved && job.reserved_by != c {
            return Reply::NotFound;
        }
        let tube = job.tube;
        // The delete record's room was claimed by the put: this cannot run
        // out of disk. If the write fails anyway the job is gone all the same.
        let logged = match &mut self.journal {
            Some(journal) => journal.write_delete(id, job, &self.tubes.get(tube).name).is_ok(),
            None => true,
        };
        self.unlink(id);
        if let Some(job) = self.jobs.remove(&id) {
            self.cancel_put(job.body.len() as u32);
        }
        self.tubes.get_mut(tube).cmd_delete += 1;
        self.tubes.remove_if_unreferenced(tube);
        self.ask_for_give_back();
        if !logged {
            return Reply::InternalError;
        }
        self.compact();
        Reply::Deleted
    }

    /// `release <id> <pri> <delay>`.
    pub fn release(&mut self, c: ClientId, id: JobId, pri: u32, delay: u32, now: Time) -> Reply<'_> {
        self.cmds.release += 1;
        if !self.is_reserved_by(id, c) {
            return Reply::NotFound;
        }
        if !self.has_room_for_update() {
            return Reply::OutOfMemory;
        }
        self.unlink(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.pri = pri;
            job.delay = delay;
            job.counters.releases = job.counters.releases.wrapping_add(1);
        }
        if delay > 0 {
            self.make_delayed(id, now.plus_secs(delay));
        } else {
            self.make_ready(id, now);
        }
        if !self.log_update(id) {
            return Reply::InternalError;
        }
        self.compact();
        Reply::Released
    }

    /// `bury <id> <pri>`.
    pub fn bury(&mut self, c: ClientId, id: JobId, pri: u32, now: Time) -> Reply<'_> {
        self.cmds.bury += 1;
        if !self.is_reserved_by(id, c) {
            return Reply::NotFound;
        }
        if !self.has_room_for_update() {
            return Reply::OutOfMemory;
        }
        self.unlink(id);
        let Some(job) = self.jobs.get_mut(&id) else {
            return Reply::InternalError;
        };
        job.pri = pri;
        job.counters.buries = job.counters.buries.wrapping_add(1);
        job.state = State::Buried;
        // Strictly after the previous burial, even within one clock tick.
        self.last_buried_at = now.max(Time(self.last_buried_at.0.saturating_add(1)));
        job.deadline = self.last_buried_at;
        let tube = job.tube;
        tally(&mut self.job_counts, State::Buried, pri, true);
        self.tubes.get_mut(tube).buried.push_back(&mut self.jobs, id);
        if !self.log_update(id) {
            return Reply::InternalError;
        }
        self.compact();
        Reply::Buried
    }

    /// `touch <id>`: a fresh full TTR from now.
    pub fn touch(&mut self, c: ClientId, id: JobId, now: Time) -> Reply<'_> {
        self.cmds.touch += 1;
        if !self.is_reserved_by(id, c) {
            return Reply::NotFound;
        }
        let Some(job) = self.jobs.get_mut(&id) else {
            return Reply::InternalError;
        };
        let (slot, deadline) = (job.heap_index as usize, now.plus_secs(job.ttr));
        let old_deadline = std::mem::replace(&mut job.deadline, deadline);
        if let Some(client) = self.clients.get_mut(&c) {
            client.forget_deadline(old_deadline);
            client.note_deadline(deadline);
        }
        self.reserved.remove(slot, &mut positions(&mut self.jobs));
        self.reserved.push(deadline, id, &mut positions(&mut self.jobs));
        Reply::Touched
    }

    // ---------------------------------------------------------------
    // peek, kick
    // ---------------------------------------------------------------

    /// `peek <id>`: any job, any state.
    pub fn peek(&mut self, id: JobId) -> Reply<'_> {
        self.cmds.peek += 1;
        self.found(Some(id))
    }

    /// `peek-ready`: the next job a reserve on the used tube would get
    /// (pause ignored).
    pub fn peek_ready(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.peek_ready += 1;
        let id = self.used_tube(c).and_then(|t| self.tubes.get(t).ready.peek()).map(|(_, id)| id);
        self.found(id)
    }

    /// `peek-delayed`: the used tube's delayed job that is due soonest.
    pub fn peek_delayed(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.peek_delayed += 1;
        let id = self.used_tube(c).and_then(|t| self.tubes.get(t).delayed.peek()).map(|(_, id)| id);
        self.found(id)
    }

    /// `peek-buried`: the used tube's oldest buried job.
    pub fn peek_buried(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.peek_buried += 1;
        let id = self.used_tube(c).and_then(|t| self.tubes.get(t).buried.front());
        self.found(id)
    }

    /// `kick <bound>`: up to `bound` buried jobs of the used tube, oldest
    /// first; only if it has none, up to `bound` delayed jobs, soonest first.
    pub fn kick(&mut self, c: ClientId, bound: u32, now: Time) -> Reply<'_> {
        self.cmds.kick += 1;
        let Some(t) = self.used_tube(c) else {
            return Reply::InternalError;
        };
        let from_buried = !self.tubes.get(t).buried.is_empty();
        let mut kicked = 0;
        while kicked < bound {
            let tube = self.tubes.get(t);
            let next = if from_buried { tube.buried.front() } else { tube.delayed.peek().map(|(_, id)| id) };
            let Some(id) = next else { break };
            if !self.has_room_for_update() {
                // Out of disk: stop here; the jobs not kicked stay as they were.
                if kicked == 0 {
                    return Reply::OutOfMemory;
                }
                break;
            }
            self.kick_one(id, now);
            if !self.log_update(id) {
                return Reply::InternalError;
            }
            kicked += 1;
        }
        self.compact();
        Reply::KickedCount(kicked)
    }

    /// `kick-job <id>`: a buried or delayed job in any tube.
    pub fn kick_job(&mut self, id: JobId, now: Time) -> Reply<'_> {
        match self.jobs.get(&id).map(|job| job.state) {
            Some(State::Buried | State::Delayed) => {
                if !self.has_room_for_update() {
                    return Reply::OutOfMemory;
                }
                self.kick_one(id, now);
                if !self.log_update(id) {
                    return Reply::InternalError;
                }
                self.compact();
                Reply::Kicked
            }
            _ => Reply::NotFound,
        }
    }

    // ---------------------------------------------------------------
    // Stats and lists
    // ---------------------------------------------------------------

    /// `stats-job <id>`.
    pub fn stats_job(&mut self, id: JobId, now: Time) -> Reply<'_> {
        self.cmds.stats_job += 1;
        let Some(job) = self.jobs.get(&id) else {
            return Reply::NotFound;
        };
        let time_left = match job.state {
            State::Reserved | State::Delayed => job.deadline.secs_since(now),
            State::Ready | State::Buried => 0,
        };
        let stats = JobStats {
            id,
            tube: &self.tubes.get(job.tube).name,
            state: job.state.name(),
            pri: job.pri,
            age: now.secs_since(job.created),
            delay: job.delay,
            ttr: job.ttr,
            time_left,
            file: u64::from(job.file),
            counters: job.counters,
        };
        Reply::Ok(stats.to_yaml())
    }

    /// `stats-tube <tube>`.
    pub fn stats_tube(&mut self, name: &TubeName, now: Time) -> Reply<'_> {
        self.cmds.stats_tube += 1;
        let Some(t) = self.tubes.find(name) else {
            return Reply::NotFound;
        };
        let tube = self.tubes.get(t);
        let stats = TubeStats {
            name: &tube.name,
            jobs: JobCounts {
                urgent: tube.urgent,
                ready: tube.ready.len(),
                reserved: tube.reserved,
                delayed: tube.delayed.len(),
                buried: tube.buried.len(),
            },
            total_jobs: tube.total_jobs,
            using: tube.using,
            watching: tube.watching,
            waiting: tube.waiting.len(),
            cmd_delete: tube.cmd_delete,
            cmd_pause_tube: tube.cmd_pause_tube,
            pause: tube.pause.map_or(0, |p| p.secs),
            pause_time_left: tube.pause.map_or(0, |p| p.until.secs_since(now)),
        };
        Reply::Ok(stats.to_yaml())
    }

    /// `stats`: the engine's part of the server stats (the caller adds the
    /// process's own figures).
    pub fn server_stats(&mut self) -> ServerStats {
        self.cmds.stats += 1;
        ServerStats {
            jobs: self.job_counts,
            cmds: self.cmds,
            job_timeouts: self.job_timeouts,
            total_jobs: self.total_jobs,
            max_job_size: self.max_job_size,
            current_tubes: self.tubes.len(),
            current_connections: self.clients.len(),
            producers: self.producers,
            workers: self.workers,
            waiting: self.waiting_clients,
            total_connections: self.total_connections,
            draining: self.draining,
        }
    }

    /// `list-tubes`.
    pub fn list_tubes(&mut self) -> Reply<'_> {
        self.cmds.list_tubes += 1;
        let names = self.tubes.ids().iter().map(|&t| self.tubes.get(t).name.as_str());
        Reply::Ok(crate::stats::list_yaml(names))
    }

    /// `list-tube-used`.
    pub fn list_tube_used(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.list_tube_used += 1;
        match self.used_tube(c) {
            Some(t) => Reply::Using(&self.tubes.get(t).name),
            None => Reply::InternalError,
        }
    }

    /// `list-tubes-watched`.
    pub fn list_tubes_watched(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.list_tubes_watched += 1;
        let Some(client) = self.clients.get(&c) else {
            return Reply::InternalError;
        };
        let names = client.watched.iter().map(|&t| self.tubes.get(t).name.as_str());
        Reply::Ok(crate::stats::list_yaml(names))
    }

    /// `pause-tube <tube> <delay>`. `tube` is `None` for a name the parser
    /// found illegal after the command was already counted.
    pub fn pause_tube(&mut self, tube: Option<&TubeName>, delay: u32, now: Time) -> Reply<'_> {
        self.cmds.pause_tube += 1;
        let Some(name) = tube else {
            return Reply::BadFormat;
        };
        let Some(t) = self.tubes.find(name) else {
            return Reply::NotFound;
        };
        let tube = self.tubes.get_mut(t);
        tube.cmd_pause_tube += 1;
        if delay == 0 {
            // beanstalkd stores 0 as a 1 ns pause: it ends at once.
            tube.pause = None;
            self.tubes.reschedule(t);
            self.serve_waiters(t, now);
        } else {
            let until = now.plus_secs(delay);
            tube.pause = Some(Pause { secs: delay, until });
            self.tubes.reschedule(t);
            self.schedule(until);
        }
        Reply::Paused
    }

    // ---------------------------------------------------------------
    // Time
    // ---------------------------------------------------------------

    /// Runs everything due at `now`: TTRs that ran out, delayed jobs that
    /// matured, pauses that ended. Returns when something is next due.
    pub fn tick(&mut self, now: Time) -> Option<Time> {
        while let Some((deadline, id)) = self.reserved.peek() {
            if deadline > now {
                break;
            }
            let holder = self.jobs.get(&id).map_or(0, |job| job.reserved_by);
            self.unlink(id);
            if let Some(job) = self.jobs.get_mut(&id) {
                job.counters.timeouts = job.counters.timeouts.wrapping_add(1);
            }
            self.job_timeouts += 1;
            self.recall_handoff(holder, id, now);
            self.make_ready(id, now);
        }
        // Only tubes with something due are visited: a tube waiting on
        // nothing, or on something later, costs nothing here.
        for t in self.tubes.due_at(now) {
            self.tubes_visited_by_tick += 1;
            while let Some((due, id)) = self.tubes.get(t).delayed.peek() {
                if due > now {
                    break;
                }
                self.unlink(id);
                self.make_ready(id, now);
            }
            let tube = self.tubes.get_mut(t);
            if tube.pause.is_some_and(|p| p.until <= now) {
                tube.pause = None;
                self.tubes.reschedule(t);
                self.serve_waiters(t, now);
            }
        }
        self.timer_due = self.next_due();
        self.timer_due
    }

    /// The earliest time at which [`Engine::tick`] has work to do.
    pub fn next_due(&self) -> Option<Time> {
        let reservation_ends = self.reserved.peek().map(|(at, _)| at);
        reservation_ends.into_iter().chain(self.tubes.next_event()).min()
    }

    // ---------------------------------------------------------------
    // Memory
    // ---------------------------------------------------------------

    /// True when jobs have been deleted in such numbers that giving their
    /// memory back pays: jobs hold less than half of what they held at the
    /// busiest moment since the last give-back, and the difference is at
    /// least 16 MiB; or the job table is mostly vacant.
    pub fn wants_give_back(&self) -> bool {
        let freed = self.job_memory_high_water.saturating_sub(self.job_memory);
        (freed >= GIVE_BACK_AT_LEAST && self.job_memory < self.job_memory_high_water / 2)
            || self.jobs.wants_shrink()
    }

    /// Shrinks the job table to the jobs alive now. O(jobs): the timer
    /// thread calls it, a moment after [`Engine::wants_give_back`] turned
    /// true, and then hands the freed pages back to the system outside the
    /// lock.
    pub fn give_back_memory(&mut self) {
        self.jobs.shrink();
        self.job_memory_high_water = self.job_memory;
        self.give_back_asked = false;
    }

    /// Wakes the timer thread, once, when memory could be given back. O(1):
    /// the delete path calls it.
    fn ask_for_give_back(&mut self) {
        if self.give_back_asked || !self.wants_give_back() {
            return;
        }
        self.give_back_asked = true;
        if let Some(timer) = &self.timer {
            timer.notify_one();
        }
    }

    // ---------------------------------------------------------------
    // Internals: moving jobs between queues
    // ---------------------------------------------------------------

    /// Takes a job out of whichever queue its state puts it in. Its state is
    /// stale until the caller files it somewhere else (or drops it).
    fn unlink(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let (t, slot, state) = (job.tube, job.heap_index as usize, job.state);
        let (pri, owner, deadline) = (job.pri, job.reserved_by, job.deadline);
        tally(&mut self.job_counts, state, pri, false);
        let tube = self.tubes.get_mut(t);
        match state {
            State::Ready => {
                tube.ready.remove(slot, &mut positions(&mut self.jobs));
                tube.urgent -= usize::from(pri < URGENT_PRIORITY);
            }
            State::Delayed => {
                tube.delayed.remove(slot, &mut positions(&mut self.jobs));
                self.tubes.reschedule(t);
            }
            State::Buried => tube.buried.remove(&mut self.jobs, id),
            State::Reserved => {
                tube.reserved -= 1;
                self.reserved.remove(slot, &mut positions(&mut self.jobs));
                if let Some(client) = self.clients.get_mut(&owner) {
                    client.reserved.remove(&mut self.jobs, id);
                    client.forget_deadline(deadline);
                }
            }
        }
    }

    /// Files an unlinked job as ready, then serves its tube's waiters.
    fn make_ready(&mut self, id: JobId, now: Time) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = State::Ready;
        let (t, pri) = (job.tube, job.pri);
        tally(&mut self.job_counts, State::Ready, pri, true);
        let tube = self.tubes.get_mut(t);
        tube.ready.push(pri, id, &mut positions(&mut self.jobs));
        tube.urgent += usize::from(pri < URGENT_PRIORITY);
        self.serve_waiters(t, now);
    }

    /// Files an unlinked job as delayed until `until`.
    fn make_delayed(&mut self, id: JobId, until: Time) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = State::Delayed;
        job.deadline = until;
        let t = job.tube;
        tally(&mut self.job_counts, State::Delayed, job.pri, true);
        self.tubes.get_mut(t).delayed.push(until, id, &mut positions(&mut self.jobs));
        self.tubes.reschedule(t);
        self.schedule(until);
    }

    /// Takes a ready, delayed or buried job out of its queue and reserves it
    /// for client `c`.
    fn reserve_for(&mut self, c: ClientId, id: JobId, now: Time) {
        self.unlink(id);
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let deadline = now.plus_secs(job.ttr);
        job.state = State::Reserved;
        job.reserved_by = c;
        job.deadline = deadline;
        job.counters.reserves = job.counters.reserves.wrapping_add(1);
        let t = job.tube;
        tally(&mut self.job_counts, State::Reserved, job.pri, true);
        self.tubes.get_mut(t).reserved += 1;
        self.reserved.push(deadline, id, &mut positions(&mut self.jobs));
        if let Some(client) = self.clients.get_mut(&c) {
            client.reserved.push_back(&mut self.jobs, id);
            client.note_deadline(deadline);
        }
        self.schedule(deadline);
    }

    /// Makes a buried or delayed job ready, counting the kick.
    fn kick_one(&mut self, id: JobId, now: Time) {
        self.unlink(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.counters.kicks = job.counters.kicks.wrapping_add(1);
        }
        self.make_ready(id, now);
    }

    /// Hands ready jobs of tube `t` to its longest waiters while both last.
    ///
    /// A waiter blocks only when none of its watched tubes has a job for it,
    /// so whenever a job becomes ready in `t`, `t`'s waiters are the only
    /// ones that can newly be served, and `t`'s best job is their best job.
    /// A waiter whose connection is already gone is passed over (its reserve
    /// ends with `TIMED_OUT`, as the hang-up watcher would have ended it), so
    /// the job goes to the longest waiter still connected.
    fn serve_waiters(&mut self, t: TubeId, now: Time) {
        loop {
            let tube = self.tubes.get(t);
            if tube.is_paused() {
                return;
            }
            let (Some((_, id)), Some((&seq, &c))) = (tube.ready.peek(), tube.waiting.first_key_value())
            else {
                return;
            };
            if self.has_hung_up(c) {
                self.hang_up(c);
            } else {
                self.hand_over(c, id, now);
            }
            // Both paths took `c` out of line; this only guards the loop's
            // progress should the queue and the client ever disagree.
            self.tubes.get_mut(t).waiting.remove(&seq);
        }
    }

    /// Reserves job `id` for blocked client `c` and wakes its thread to
    /// collect it.
    fn hand_over(&mut self, c: ClientId, id: JobId, now: Time) {
        let Some(wait) = self.stop_waiting(c) else {
            return;
        };
        self.reserve_for(c, id, now);
        if self.collect_deliveries {
            if let Some(client) = self.clients.get_mut(&c) {
                client.outcome = Some(Outcome::Reserved(id, wait));
                self.deliveries.push(c);
                return;
            }
        }
        self.set_outcome(c, Outcome::Reserved(id, wait));
    }

    /// Job `id`, reserved by `holder`, has just run out of TTR. If it was
    /// handed to `holder` while blocked and its thread has not collected it
    /// yet (another command held the lock for longer than the TTR), the
    /// client never heard of the job: its reserve goes on, in the place in
    /// line it had, rather than receive a job that may by now be someone
    /// else's. The job's counters keep the reservation and its timeout:
    /// both happened, as far as the queue is concerned.
    fn recall_handoff(&mut self, holder: ClientId, id: JobId, now: Time) {
        let Some(client) = self.clients.get_mut(&holder) else {
            return;
        };
        let Some(Outcome::Reserved(handed, wait)) = client.outcome else {
            return;
        };
        if handed != id {
            return;
        }
        client.outcome = None;
        self.resume_wait(holder, wait, now);
    }

    /// Puts client `c` back into the waiting queues with `wait`'s place in
    /// line and timeout, or hands it a job at once if one of its tubes has
    /// one (one may have become ready while it was out of line).
    fn resume_wait(&mut self, c: ClientId, wait: Wait, now: Time) {
        let margin_at = self.soonest_margin(c);
        let Some(client) = self.clients.get_mut(&c) else {
            return;
        };
        client.wait = Some(Wait { margin_at, ..wait });
        for &t in &client.watched {
            self.tubes.get_mut(t).waiting.insert(wait.seq, c);
        }
        self.waiting_clients += 1;
        if client.hung_up || self.has_hung_up(c) {
            self.hang_up(c);
        } else if let Some(id) = self.best_ready_job(c) {
            self.hand_over(c, id, now);
        }
    }

    /// Ends client `c`'s wait with `outcome` and wakes its thread.
    fn finish_wait(&mut self, c: ClientId, outcome: Outcome) {
        self.stop_waiting(c);
        self.set_outcome(c, outcome);
    }

    /// Wakes client `c`'s thread.
    fn wake(&self, c: ClientId) {
        if let Some(client) = self.clients.get(&c) {
            client.waker.wake();
        }
    }

    /// Leaves `outcome` for client `c`'s thread and wakes it.
    fn set_outcome(&mut self, c: ClientId, outcome: Outcome) {
        if let Some(client) = self.clients.get_mut(&c) {
            client.outcome = Some(outcome);
            client.waker.wake();
        }
    }

    /// Takes client `c` out of every waiting queue; returns the wait it
    /// ended, if it was waiting.
    fn stop_waiting(&mut self, c: ClientId) -> Option<Wait> {
        let client = self.clients.get_mut(&c)?;
        let wait = client.wait.take()?;
        for &t in &client.watched {
            self.tubes.get_mut(t).waiting.remove(&wait.seq);
        }
        self.waiting_clients -= 1;
        Some(wait)
    }

    /// Asks the timer thread to wake by `at` if it planned to sleep longer.
    fn schedule(&mut self, at: Time) {
        if self.timer_due.is_none_or(|due| at < due) {
            self.timer_due = Some(at);
            if let Some(timer) = &self.timer {
                timer.notify_one();
            }
        }
    }

    // ---------------------------------------------------------------
    // Internals: the write-ahead log
    // ---------------------------------------------------------------

    /// True when an update record can be written (always, without a log).
    fn has_room_for_update(&mut self) -> bool {
        self.journal_has_room(|journal| journal.reserve_update())
    }

    /// Makes a claim for log space with `claim`; if the disk is full, first
    /// empties the oldest log files by rewriting their live jobs (deletes may
    /// have left a few live jobs pinning many files), then tries once more.
    fn journal_has_room(&mut self, mut claim: impl FnMut(&mut Box<dyn Journal>) -> bool) -> bool {
        let Some(journal) = self.journal.as_mut() else { return true };
        if claim(journal) {
            return true;
        }
        let files = journal.files_to_free();
        if files.is_empty() {
            return false;
        }
        self.rewrite_files(&files);
        self.journal.as_mut().is_some_and(claim)
    }

    /// Logs job `id`'s full record and remembers which file it is in.
    /// False if the write failed.
    fn log_full(&mut self, id: JobId) -> bool {
        let (Some(journal), Some(job)) = (&mut self.journal, self.jobs.get(&id)) else { return true };
        match journal.write_full(id, job, &self.tubes.get(job.tube).name) {
            Ok(file) => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.file = file;
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Logs job `id`'s new state. False if the write failed.
    fn log_update(&mut self, id: JobId) -> bool {
        match (&mut self.journal, self.jobs.get(&id)) {
            (Some(journal), Some(job)) => journal.write_update(id, job).is_ok(),
            _ => true,
        }
    }

    /// Keeps the log's size in proportion to its live data: rewrites the
    /// live jobs of the oldest log file into the current one, a few at a
    /// time, for as long as the log asks (see [`Journal::next_rewrite`]).
    /// Once a file holds no live job it is deleted.
    fn compact(&mut self) {
        while let Some((file, id)) = self.journal.as_mut().and_then(|j| j.next_rewrite()) {
            if !self.rewrite_if_still_in(file, id) {
                return;
            }
        }
    }

    /// Rewrites the full record of every live job whose latest full record
    /// is in one of binlog files `files` into the current file, so that
    /// they can go (at start-up for files with unreadable records, and when
    /// the disk is full). Stops early if the disk is full.
    pub fn rewrite_files(&mut self, files: &[u32]) {
        for &file in files {
            while let Some(id) = self.journal.as_ref().and_then(|j| j.written_in(file)) {
                if !self.rewrite_if_still_in(file, id) {
                    return;
                }
            }
        }
    }

    /// Rewrites job `id` if its latest full record is still in `file`;
    /// otherwise tells the log that its note of it is stale. False if the
    /// log has no room or a write failed.
    fn rewrite_if_still_in(&mut self, file: u32, id: JobId) -> bool {
        let Some(journal) = self.journal.as_mut() else { return false };
        let Some(job) = self.jobs.get(&id).filter(|job| job.file == file) else {
            journal.forget_written(file, id);
            return true;
        };
        let (tube_len, body_len) = (self.tubes.get(job.tube).name.as_str().len(), job.body.len());
        journal.reserve_rewrite(tube_len, body_len) && self.log_full(id)
    }

    // ---------------------------------------------------------------
    // Internals: questions
    // ---------------------------------------------------------------

    fn used_tube(&self, c: ClientId) -> Option<TubeId> {
        self.clients.get(&c).map(|client| client.used)
    }

    /// Whether client `c`'s connection is known to be gone, asking its socket.
    fn has_hung_up(&self, c: ClientId) -> bool {
        self.clients.get(&c).is_some_and(|client| client.hung_up || client.waker.has_hung_up())
    }

    fn is_reserved_by(&self, id: JobId, c: ClientId) -> bool {
        self.jobs.get(&id).is_some_and(|job| job.state == State::Reserved && job.reserved_by == c)
    }

    /// The best `(pri, id)` ready job in `c`'s unpaused watched tubes.
    fn best_ready_job(&self, c: ClientId) -> Option<JobId> {
        let client = self.clients.get(&c)?;
        let tubes = client.watched.iter().map(|&t| self.tubes.get(t));
        tubes.filter(|tube| !tube.is_paused()).filter_map(|tube| tube.ready.peek()).min().map(|(_, id)| id)
    }

    fn has_ready_job(&self, c: ClientId, include_paused: bool) -> bool {
        self.clients.get(&c).is_some_and(|client| {
            client
                .watched
                .iter()
                .map(|&t| self.tubes.get(t))
                .any(|tube| !tube.ready.is_empty() && (include_paused || !tube.is_paused()))
        })
    }

    /// When the soonest-expiring reservation of `c` enters its safety
    /// margin. O(reservations held), as in beanstalkd; most workers hold none
    /// when they reserve.
    fn soonest_margin(&mut self, c: ClientId) -> Option<Time> {
        let client = self.clients.get(&c)?;
        let soonest = match client.soonest_deadline {
            Soonest::Known(soonest) => soonest,
            Soonest::Stale => {
                let deadlines = client.reserved.ids(&self.jobs).filter_map(|id| self.jobs.get(&id));
                let soonest = deadlines.map(|job| job.deadline).min();
                if let Some(client) = self.clients.get_mut(&c) {
                    client.soonest_deadline = Soonest::Known(soonest);
                }
                soonest
            }
        };
        soonest.map(|d| d.minus_secs(SAFETY_MARGIN_SECS))
    }

    fn reserved_reply(&self, id: JobId) -> Option<Reply<'_>> {
        self.jobs.get(&id).map(|job| Reply::Reserved(id, &job.body))
    }

    fn found(&self, id: Option<JobId>) -> Reply<'_> {
        match id.and_then(|id| Some((id, self.jobs.get(&id)?))) {
            Some((id, job)) => Reply::Found(id, &job.body),
            None => Reply::NotFound,
        }
    }
}

/// Counts a job filed into (`filed`) or taken out of the queue of `state`
/// in the engine-wide totals that `stats` shows.
fn tally(counts: &mut JobCounts, state: State, pri: u32, filed: bool) {
    let count = match state {
        State::Ready => &mut counts.ready,
        State::Delayed => &mut counts.delayed,
        State::Reserved => &mut counts.reserved,
        State::Buried => &mut counts.buried,
    };
    let urgent = state == State::Ready && pri < URGENT_PRIORITY;
    if filed {
        *count += 1;
        counts.urgent += usize::from(urgent);
    } else {
        *count -= 1;
        counts.urgent -= usize::from(urgent);
    }
}

/// The callback through which a heap reports where each job now sits.
fn positions(jobs: &mut JobTable) -> impl FnMut(JobId, usize) + '_ {
    |id, slot| {
        if let Some(job) = jobs.get_mut(&id) {
            job.heap_index = slot as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        Engine::new(65535)
    }

    fn client(e: &mut Engine) -> ClientId {
        e.connect(Arc::new(Condvar::new()))
    }

    fn name(s: &str) -> TubeName {
        TubeName::new(s.as_bytes()).unwrap()
    }

    fn put(e: &mut Engine, c: ClientId, pri: u32, delay: u32, ttr: u32, now: Time) -> JobId {
        e.count_put();
        let id = e.start_put(c, 4).unwrap();
        let job = NewJob { id, pri, delay, ttr, created: now, body: Box::from(&b"body"[..]) };
        assert_eq!(e.put(c, job, now), Reply::Inserted(id));
        id
    }

    fn reserved_id(reply: Option<Reply>) -> JobId {
        match reply {
            Some(Reply::Reserved(id, _)) => id,
            other => panic!("expected RESERVED, got {other:?}"),
        }
    }

    #[test]
    fn reserve_takes_lowest_priority_then_lowest_id() {
        let mut e = engine();
        let c = client(&mut e);
        let t = Time::ZERO;
        let a = put(&mut e, c, 5, 0, 10, t);
        let b = put(&mut e, c, 1, 0, 10, t);
        let d = put(&mut e, c, 1, 0, 10, t);
        assert_eq!(reserved_id(e.reserve(c, None, t)), b);
        assert_eq!(reserved_id(e.reserve(c, None, t)), d);
        // Released with the same priority, b goes ahead of newer jobs again.
        assert_eq!(e.release(c, b, 1, 0, t), Reply::Released);
        assert_eq!(reserved_id(e.reserve(c, None, t)), b);
        assert_eq!(reserved_id(e.reserve(c, None, t)), a);
    }

    #[test]
    fn ttr_expiry_returns_the_job_to_ready() {
        let mut e = engine();
        let c = client(&mut e);
        let id = put(&mut e, c, 0, 0, 2, Time::ZERO);
        reserved_id(e.reserve(c, None, Time::ZERO));
        assert_eq!(e.tick(Time::from_secs(1)), Some(Time::from_secs(2)));
        assert_eq!(e.jobs[&id].state, State::Reserved);
        assert_eq!(e.tick(Time::from_secs(2)), None);
        assert_eq!(e.jobs[&id].state, State::Ready);
        assert_eq!(e.jobs[&id].counters.timeouts, 1);
        assert_eq!(e.job_timeouts, 1);
    }

    #[test]
    fn delayed_jobs_mature_on_tick() {
        let mut e = engine();
        let c = client(&mut e);
        let id = put(&mut e, c, 0, 3, 10, Time::ZERO);
        assert_eq!(e.reserve(c, Some(0), Time::ZERO), Some(Reply::TimedOut));
        assert_eq!(e.next_due(), Some(Time::from_secs(3)));
        e.tick(Time::from_secs(3));
        assert_eq!(reserved_id(e.reserve(c, None, Time::from_secs(3))), id);
    }

    #[test]
    fn the_timer_never_visits_idle_tubes() {
        let mut e = engine();
        let c = client(&mut e);
        // A thousand tubes each hold one job due in a day: idle for now.
        for i in 0..1000 {
            e.use_tube(c, &name(&format!("idle{i}")));
            put(&mut e, c, 0, 86_400, 10, Time::ZERO);
        }
        e.use_tube(c, &name("busy"));
        let mut now = Time::ZERO;
        for _ in 0..50 {
            put(&mut e, c, 0, 1, 10, now);
            now = now.plus_secs(1);
            assert_eq!(e.next_due(), Some(now));
            e.tick(now);
        }
        // Fifty ticks, each with one tube's job due: fifty visits, not 50,050.
        assert_eq!(e.tubes_visited_by_tick, 50);
        assert_eq!(e.server_stats().jobs.ready, 50);
        assert_eq!(e.server_stats().jobs.delayed, 1000);
    }

    #[test]
    fn a_reply_written_by_the_handing_thread_ends_the_reserve_once_delivered() {
        let mut e = engine();
        let (producer, w) = (client(&mut e), client(&mut e));
        assert_eq!(e.reserve(w, None, Time::ZERO), None);
        e.start_deliveries();
        let id = put(&mut e, producer, 0, 0, 10, Time::ZERO);
        let mut deliveries = e.take_deliveries();
        assert_eq!(deliveries.len(), 1);
        let delivery = deliveries.remove(0);
        assert_eq!(delivery.reply, format!("RESERVED {id} 4\r\nbody\r\n").into_bytes());
        // While the reply is being written, the worker's thread must wait.
        assert_eq!(e.check_wait(w, Time::ZERO), None);
        assert_eq!(e.check_delivered(w), None);
        // The socket took all but the body: the worker's thread writes that.
        let written = delivery.reply.len() - 6;
        e.delivered(delivery, written);
        assert_eq!(e.check_delivered(w), Some(b"body\r\n".to_vec()));
        assert_eq!(e.check_delivered(w), None);
        assert_eq!(e.jobs[&id].reserved_by, w);
        assert_eq!(e.waiting_clients, 0);
    }

    #[test]
    fn blocked_waiters_are_served_oldest_first() {
        let mut e = engine();
        let producer = client(&mut e);
        let waiters: Vec<ClientId> = (0..3).map(|_| client(&mut e)).collect();
        for &w in &waiters {
            assert_eq!(e.reserve(w, None, Time::ZERO), None);
        }
        assert_eq!(e.waiting_clients, 3);
        let jobs: Vec<JobId> = (0..3).map(|_| put(&mut e, producer, 0, 0, 10, Time::ZERO)).collect();
        for (&w, &job) in waiters.iter().zip(&jobs) {
            assert_eq!(reserved_id(e.check_wait(w, Time::ZERO)), job);
        }
        assert_eq!(e.waiting_clients, 0);
    }

    #[test]
    fn a_hung_up_waiter_gets_timed_out_and_no_job() {
        let mut e = engine();
        let (producer, w) = (client(&mut e), client(&mut e));
        assert_eq!(e.reserve(w, None, Time::ZERO), None);
        e.hang_up(w);
        assert_eq!(e.check_wait(w, Time::ZERO), Some(Reply::TimedOut));
        let id = put(&mut e, producer, 0, 0, 10, Time::ZERO);
        assert_eq!(e.jobs[&id].state, State::Ready);
        assert_eq!(e.reserve(w, None, Time::ZERO).map(|r| r.word()), Some("RESERVED"));
    }

    /// A waiter standing for a connection whose peer may have gone.
    #[derive(Debug, Default)]
    struct FakeConnection {
        hung_up: std::sync::atomic::AtomicBool,
    }

    impl Waiter for FakeConnection {
        fn wake(&self) {}
        fn has_hung_up(&self) -> bool {
            self.hung_up.load(std::sync::atomic::Ordering::SeqCst)
        }
        fn deliver(&self, _reply: &[u8]) -> usize {
            0
        }
    }

    #[test]
    fn a_handed_job_whose_ttr_ran_out_before_collection_goes_back_to_the_same_waiter() {
        let mut e = engine();
        let (producer, w1, w2) = (client(&mut e), client(&mut e), client(&mut e));
        assert_eq!(e.reserve(w1, None, Time::ZERO), None);
        assert_eq!(e.reserve(w2, None, Time::ZERO), None);
        // Handed to w1, whose thread does not run before the TTR is over
        // (another command held the lock); then the timer runs.
        let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
        e.tick(Time::from_secs(2));
        // w1 never saw the first reservation; it kept its place at the head
        // of the line and holds a fresh one. w2 is still waiting.
        assert_eq!(e.jobs[&id].reserved_by, w1);
        assert_eq!(e.jobs[&id].deadline, Time::from_secs(3));
        assert_eq!(e.jobs[&id].counters.reserves, 2);
        assert_eq!(e.jobs[&id].counters.timeouts, 1);
        assert_eq!(e.check_wait(w2, Time::from_secs(2)), None);
        assert_eq!(e.wake_time(w2), None);
        assert_eq!(reserved_id(e.check_wait(w1, Time::from_secs(2))), id);
        assert_eq!(e.waiting_clients, 1);
    }

    #[test]
    fn a_lapsed_hand_off_is_never_delivered_once_the_job_is_someone_elses() {
        let mut e = engine();
        let (producer, w1, w2) = (client(&mut e), client(&mut e), client(&mut e));
        assert_eq!(e.reserve(w1, Some(60), Time::ZERO), None);
        assert_eq!(e.reserve(w2, None, Time::ZERO), None);
        let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
        // w1 half-closes while its hand-off waits to be collected; then the
        // TTR runs out: the job goes to w2, who deletes it.
        e.hang_up(w1);
        e.tick(Time::from_secs(2));
        assert_eq!(reserved_id(e.check_wait(w2, Time::from_secs(2))), id);
        assert_eq!(e.delete(w2, id), Reply::Deleted);
        // w1 finally collects: not the job, and not a sleep without end.
        assert_eq!(e.check_wait(w1, Time::from_secs(2)), Some(Reply::TimedOut));
        assert_eq!(e.waiting_clients, 0);
    }

    #[test]
    fn a_resumed_wait_keeps_its_timeout() {
        let mut e = engine();
        let (producer, w) = (client(&mut e), client(&mut e));
        assert_eq!(e.reserve(w, Some(5), Time::ZERO), None);
        let id = put(&mut e, producer, 0, 0, 1, Time::ZERO);
        // The tube is paused before w collects; the job then lapses and
        // cannot be handed back, so w waits on until its own timeout.
        assert_eq!(e.pause_tube(Some(&name("default")), 10, Time::ZERO), Reply::Paused);
        e.tick(Time::from_secs(2));
        assert_eq!(e.jobs[&id].state, State::Ready);
        assert_eq!(e.check_wait(w, Time::from_secs(2)), None);
        assert_eq!(e.wake_time(w), Some(Time::from_secs(5)));
        assert_eq!(e.check_wait(w, Time::from_secs(5)), Some(Reply::TimedOut));
    }

    #[test]
    fn a_blocked_client_with_nothing_to_wait_for_is_timed_out_not_left_asleep() {
        let mut e = engine();
        let c = client(&mut e);
        assert_eq!(e.reserve(c, None, Time::ZERO), None);
        // Its wait vanishes by some path that forgot to leave an outcome.
        e.stop_waiting(c);
        assert_eq!(e.check_wait(c, Time::ZERO), Some(Reply::TimedOut));
        // A client that is not blocked has nothing to collect.
        assert_eq!(e.check_wait(c, Time::ZERO), None);
    }

    #[test]
    fn a_waiter_whose_connection_is_gone_is_passed_over() {
        let mut e = engine();
        let producer = client(&mut e);
        let gone = Arc::new(FakeConnection::default());
        let w1 = e.connect(gone.clone());
        let w2 = client(&mut e);
        assert_eq!(e.reserve(w1, None, Time::ZERO), None);
        assert_eq!(e.reserve(w2, None, Time::ZERO), None);
        // The hang-up has arrived on the socket but was not reported yet.
        gone.hung_up.store(true, std::sync::atomic::Ordering::SeqCst);
        let id = put(&mut e, producer, 0, 0, 10, Time::ZERO);
        assert_eq!(reserved_id(e.check_wait(w2, Time::ZERO)), id);
        assert_eq!(e.jobs[&id].counters.reserves, 1);
        assert_eq!(e.check_wait(w1, Time::ZERO), Some(Reply::TimedOut));
        // And it never blocks again.
        assert_eq!(e.reserve(w1, None, Time::ZERO), Some(Reply::TimedOut));
    }

    #[test]
    fn disconnect_releases_reservations_in_reservation_order() {
        let mut e = engine();
        let (holder, waiter) = (client(&mut e), client(&mut e));
        let a = put(&mut e, holder, 10, 0, 10, Time::ZERO);
        let b = put(&mut e, holder, 1, 0, 10, Time::ZERO);
        assert_eq!(e.reserve_job(holder, a, Time::ZERO).word(), "RESERVED");
        assert_eq!(e.reserve_job(holder, b, Time::ZERO).word(), "RESERVED");
        assert_eq!(e.reserve(waiter, None, Time::ZERO), None);
        e.disconnect(holder, Time::ZERO);
        // The waiter gets the job reserved first, not the more urgent one.
        assert_eq!(reserved_id(e.check_wait(waiter, Time::ZERO)), a);
        assert_eq!(e.jobs[&b].state, State::Ready);
    }

    #[test]
    fn deadline_soon_when_holding_a_job_in_its_last_second() {
        let mut e = engine();
        let c = client(&mut e);
        put(&mut e, c, 0, 0, 3, Time::ZERO);
        reserved_id(e.reserve(c, None, Time::ZERO));
        // Blocks until the margin starts at 2 s.
        assert_eq!(e.reserve(c, Some(5), Time::ZERO), None);
        assert_eq!(e.wake_time(c), Some(Time::from_secs(2)));
        assert_eq!(e.check_wait(c, Time::from_secs(1)), None);
        assert_eq!(e.check_wait(c, Time::from_secs(2)), Some(Reply::DeadlineSoon));
        // Inside the margin, a reserve answers at once.
        assert_eq!(e.reserve(c, None, Time::from_secs(2)), Some(Reply::DeadlineSoon));
    }

    #[test]
    fn tubes_vanish_when_unreferenced_but_default_never() {
        let mut e = engine();
        let c = client(&mut e);
        e.use_tube(c, &name("e"));
        let id = put(&mut e, c, 0, 0, 10, Time::ZERO);
        e.use_tube(c, &name("default"));
        assert!(e.tubes.find(&name("e")).is_some());
        assert_eq!(e.delete(c, id), Reply::Deleted);
        assert!(e.tubes.find(&name("e")).is_none());
        e.disconnect(c, Time::ZERO);
        assert!(e.tubes.find(&name("default")).is_some());
    }

    #[test]
    fn kick_takes_buried_before_delayed() {
        let mut e = engine();
        let c = client(&mut e);
        let delayed = put(&mut e, c, 0, 100, 10, Time::ZERO);
        let buried = put(&mut e, c, 0, 0, 10, Time::ZERO);
        reserved_id(e.reserve(c, None, Time::ZERO));
        assert_eq!(e.bury(c, buried, 0, Time::ZERO), Reply::Buried);
        assert_eq!(e.kick(c, 10, Time::ZERO), Reply::KickedCount(1));
        assert_eq!(e.jobs[&delayed].state, State::Delayed);
        assert_eq!(e.kick(c, 10, Time::ZERO), Reply::KickedCount(1));
        assert_eq!(e.jobs[&delayed].state, State::Ready);
    }

    #[test]
    fn the_memory_limit_refuses_puts_until_jobs_are_deleted() {
        let mut e = engine();
        let c = client(&mut e);
        e.set_memory_limit(Some(2 * (4 + JOB_MEMORY_OVERHEAD)));
        let first = put(&mut e, c, 0, 0, 10, Time::ZERO);
        put(&mut e, c, 0, 0, 10, Time::ZERO);
        assert_eq!(e.start_put(c, 4), None);
        assert_eq!(e.delete(c, first), Reply::Deleted);
        assert!(e.start_put(c, 4).is_some());
        e.cancel_put(4);
        assert_eq!(e.job_memory(), 4 + JOB_MEMORY_OVERHEAD);
    }

    #[test]
    fn paused_tubes_hold_their_jobs_until_the_pause_ends() {
        let mut e = engine();
        let (producer, w) = (client(&mut e), client(&mut e));
        put(&mut e, producer, 0, 0, 10, Time::ZERO);
        assert_eq!(e.pause_tube(Some(&name("default")), 2, Time::ZERO), Reply::Paused);
        assert_eq!(e.reserve(w, None, Time::ZERO), None);
        e.tick(Time::from_secs(2));
        assert_eq!(e.check_wait(w, Time::from_secs(2)).map(|r| r.word()), Some("RESERVED"));
    }
}
