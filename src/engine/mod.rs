//! The engine: every job, tube and client's queue state, and the only code
//! that changes it. One method per command.
//!
//! The engine is plain data behind the server's one `Mutex`. It never touches
//! a socket and never reads the clock: each method takes the client it acts
//! for and the current [`Time`], does O(log n) work and returns the
//! [`Reply`]. Blocking is the caller's business: [`Engine::reserve`] either
//! answers at once or registers the client as waiting and returns `None`;
//! when a job is handed to a waiting client, the engine records the outcome
//! and wakes that client's own [`Waker`] (and no other).
//!
//! A hand-off reserves the job for the waiter at once and leaves its reply
//! in the waiter's mailbox (see `handoff.rs`). Where the mailbox has no
//! room, it is two steps apart in time: the waiter's own connection collects
//! the job when it next gets the lock, and writes the reply. Two rules keep
//! that gap harmless. A
//! waiter whose connection has already hung up is never handed a job (the
//! engine asks its [`Waker`], which the server answers from the socket).
//! And the engine is always brought up to the present before it answers
//! ([`Engine::catch_up`]): if a handed job's TTR ran out before it was
//! collected, the job went back to the queue and the waiter back to waiting
//! in its old place in line, so a job is never delivered after its
//! reservation lapsed, nor to two workers.
//!
//! Nothing the timer runs, and nothing a command runs, visits every tube or
//! every job: tubes waiting on time sit in a timetable, `stats` reads
//! running totals, and the job table gives memory back a chunk at a time
//! as jobs go (see [`table`]).
//!
//! This file holds the state; the commands are `impl Engine` blocks in files
//! of their own, one concept each (listed below, in reading order), so that
//! each can be read alone. Helpers they share are `pub(super)`: the engine's
//! fields stay private to the engine.
//!
//! Where each job lives follows from its state: see the picture on
//! [`job::State`].

// The data, in reading order.
pub mod job;
pub mod body;
pub(crate) mod body_in_log;
pub mod table;
pub mod heap;
pub mod list;
pub mod tube;
pub(crate) mod client;
pub mod waiting;
pub mod unique;
pub(crate) mod named;

// The commands, by concept, each an `impl Engine` block over the state
// declared below, in reading order.
pub(crate) mod session;
pub(crate) mod put;
pub(crate) mod keyed;
pub(crate) mod retry;
pub(crate) mod concurrency;
pub(crate) mod groups;
pub(crate) mod moves;
pub(crate) mod reserve;
pub(crate) mod weighted;
pub(crate) mod handoff;
pub(crate) mod worker;
pub(crate) mod batch;
pub(crate) mod inspect;
pub(crate) mod listing;
pub(crate) mod browse;
pub(crate) mod schedule;
pub(crate) mod relocate;
pub mod metering;
pub mod journal;
pub(crate) mod journaling;

// Second reading.
pub(crate) mod id_map;
pub(crate) mod slot_table;

// The engine's tests, the one list of its cases and the tests that run
// them: test builds only.
#[cfg(test)]
mod proofs;

use std::fmt::Debug;
use std::sync::{Arc, Condvar};

use crate::ids::{IdRange, NO_ID_LEFT};
use crate::protocol::{data_reply_len, PutTags, Reply, ReplyRoom, TubeName, UniqueKey};
use crate::stats::{CommandCounts, JobCounts, JobStats, ServerStats, TubeStats};
use crate::time::Time;
pub use batch::{TubeRun, BATCH_PIECE, CLEAR_CHUNK};
pub use body::{Body, BodyRead, Keeping, LoggedBody, Place};
use client::{Blocked, Client, Outcome, Soonest, Wait};
pub use client::{Waker, Withdrawal};
use heap::Heap;
pub use id_map::{ClientMap, IdMap};
pub use job::{ClientId, Counters, Job, JobId, State, URGENT_PRIORITY};
pub use journal::{Change, Journal, LoggedJob, LoggedKey, RestoredJob, RestoredState};
use list::List;
use table::JobTable;
use tube::{Pause, TubeId, Tubes};

/// What one job costs besides its body, for `--max-job-memory`: the job
/// record, its table slot and its heap entry, rounded up. (By `job.rs`'s
/// accounting: 104 bytes of record, 4 of index, 12 or 16 of heap entry, and
/// the allocator's header and rounding of the body, 8 to 23 bytes: 128 to
/// 147 in all. Kept at 200 so that the limit errs on the safe side.)
pub const JOB_MEMORY_OVERHEAD: u64 = 200;

/// What a job's entry in one of the indexes of put tags costs, for
/// `--max-job-memory`: its retry limit (`retry.rs`), its concurrency key
/// (`concurrency.rs`) or its groups (`groups.rs`), each a hash map entry
/// of 12 to 16 bytes and its control byte, at most seven eighths full:
/// 39 bytes just after the table doubled; 29 measured (RSS, `max:3` or
/// one shared group a job, 40k to 600k jobs). The names they point to
/// count on their own ([`named::NAME_MEMORY_OVERHEAD`]); a unique key
/// counts as `unique::KEY_MEMORY_OVERHEAD` says.
pub const TAG_ENTRY_MEMORY: u64 = 40;

/// The last second of a reservation, when the holder is warned with
/// `DEADLINE_SOON` (reference §4.2).
const SAFETY_MARGIN_SECS: u32 = 1;

/// A job ready to be inserted by [`Engine::put`].
#[derive(Debug)]
pub struct NewJob {
    /// From [`Engine::start_put`]: the job's id and its claimed memory.
    pub ticket: PutTicket,
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    /// When the put line was parsed.
    pub created: Time,
    pub body: Box<[u8]>,
    /// Its put's tags: a unique key (`idp:`), a concurrency key (`con:`),
    /// a retry limit (`max:`).
    pub tags: PutTags,
}

/// The right to insert one job, from [`Engine::start_put`]: the id it was
/// given and the memory claimed for its body. It is spent by exactly one
/// [`Engine::put`] (inside the [`NewJob`]) or [`Engine::cancel_put`], and
/// cannot be copied, so the compiler keeps that rule.
#[must_use = "a put ticket holds claimed memory: spend it on put or cancel_put"]
#[derive(Debug, PartialEq, Eq)]
pub struct PutTicket {
    id: JobId,
    bytes: u32,
}

impl PutTicket {
    /// The id the job was given (used up even if the put then fails).
    pub fn id(&self) -> JobId {
        self.id
    }
}

/// All queue state of one server.
#[derive(Debug)]
pub struct Engine {
    /// The one owner of every job; queues hold ids into it.
    jobs: JobTable,
    tubes: Tubes,
    /// Every reserved job, by `(TTR deadline, id)`, for the timer.
    reserved: Heap<Time>,
    /// Boxed so that the map's slot is 16 bytes: the map doubles as clients
    /// come, and a doubling of 200-byte slots cost every connection more
    /// than the record itself.
    clients: ClientMap<Box<Client>>,
    next_job_id: JobId,
    /// Which ids puts get (`--job-id-start`, `--job-id-step`).
    id_range: IdRange,
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
    /// `--max-reserves`: the retry limit of a job put without `max:`
    /// (`retry.rs`); 0 is none.
    max_reserves: u32,
    /// The timer thread's `Condvar`, and when it plans to wake next.
    timer: Option<Arc<Condvar>>,
    timer_due: Option<Time>,
    /// The write-ahead log, if the server has one (`-b`).
    journal: Option<Box<dyn Journal>>,
    /// Memory held by jobs, and by bodies being received, counted as body
    /// bytes plus [`JOB_MEMORY_OVERHEAD`] per job.
    job_memory: u64,
    /// Puts between [`Engine::start_put`] and [`Engine::put`] or
    /// [`Engine::cancel_put`]: their jobs have room claimed but are not
    /// filed yet.
    puts_in_flight: usize,
    /// The `--max-job-memory` cap on `job_memory`.
    memory_limit: Option<u64>,
    /// When the last job was buried. Burial times are kept strictly
    /// increasing, so the log can restore the buried lists' order from them.
    last_buried_at: Time,
    /// Jobs in each state over all tubes, kept as they move, so that `stats`
    /// costs the same with one tube or a million.
    job_counts: JobCounts,
    /// The wakers of the blocked reserves ended under the lock now held,
    /// woken once it is let go ([`Engine::take_woken`]). Room for one a
    /// waiting client is claimed as it blocks.
    woken: Vec<Arc<dyn Waker>>,
    /// The random draws of weighted reserves (`weighted.rs`).
    draws: weighted::Draws,
    /// Whether `--metrics` measures ready ages and times (`metering.rs`).
    metering: bool,
    /// Room for the ids, and their log files, of a command on many jobs,
    /// kept from one to the next (`batch.rs`).
    kept_ids: batch::Kept<JobId>,
    kept_files: batch::Kept<u32>,
    /// Bodies left in the log (`body.rs`): their bytes, and the reads of
    /// one that failed.
    bodies: body_in_log::InLog,
}

impl Engine {
    /// An empty engine with the `default` tube. `max_job_size` is the `-z`
    /// limit, shown by `stats` (the connection enforces it while reading).
    pub fn new(max_job_size: u32) -> Engine {
        let mut tubes = Tubes::default();
        // At start-up, before any client: a process that cannot allocate
        // one tube cannot serve, and stops here as at any start-up failure.
        let default = tubes.find_or_create(&TubeName::default_tube());
        assert!(default.is_some(), "no memory for the default tube");
        Engine {
            jobs: JobTable::default(),
            tubes,
            reserved: Heap::new(),
            clients: ClientMap::default(),
            next_job_id: 1,
            id_range: IdRange::default(),
            next_client_id: ClientId(1),
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
            max_reserves: 0,
            timer: None,
            timer_due: None,
            journal: None,
            job_memory: 0,
            puts_in_flight: 0,
            memory_limit: None,
            last_buried_at: Time::ZERO,
            job_counts: JobCounts::default(),
            woken: Vec::new(),
            draws: Default::default(),
            metering: false,
            kept_ids: batch::Kept::new(),
            kept_files: batch::Kept::new(),
            bodies: body_in_log::InLog::default(),
        }
    }

    /// Makes puts take their ids from `range` (`--job-id-start`,
    /// `--job-id-step`): the next id is the range's first at or above the
    /// one it would have been.
    pub fn set_id_range(&mut self, range: IdRange) {
        self.id_range = range;
        self.next_job_id = range.first_from(self.next_job_id);
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

    /// How many jobs there are, in every state.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
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
    /// id below `next_id` is handed out again: the next is the id range's
    /// first above every id the log has seen. Each job names its tube by an
    /// index into `tube_names`. Buried jobs go back in the order they were
    /// buried.
    pub fn restore(&mut self, tube_names: &[TubeName], jobs: Vec<RestoredJob>, next_id: JobId, now: Time) {
        // Tubes come back only for jobs that survived, as they were made.
        let mut tube_ids: Vec<Option<TubeId>> = vec![None; tube_names.len()];
        // Buried jobs join their lists last, by burial time (the rule on
        // `Engine::bury`); the heaps order the others themselves.
        let mut buried: Vec<(u64, JobId)> = Vec::new();
        // Jobs waiting for a group whose delay is over (a held job is
        // logged as delayed with no due time) are held, if the group's run
        // they wait for is under way, last (reference §3.1d).
        let mut waiting: Vec<JobId> = Vec::new();
        // Ready jobs join their queues last too, in the order they became
        // ready, so that a tube's oldest ready job (`--metrics`) is as old
        // as the log can tell.
        let mut ready: Vec<(Time, JobId)> = Vec::new();
        for r in jobs {
            self.next_job_id = self.next_job_id.max(r.id.saturating_add(1));
            let (Some(slot), Some(name)) = (tube_ids.get_mut(r.tube), tube_names.get(r.tube)) else {
                continue;
            };
            if let RestoredState::Cooling { until } = r.state {
                // Only its key comes back, and no tube for it.
                if let Some(key) = &r.key {
                    self.tubes.keys.restore_cooling(
                        r.id,
                        name,
                        key,
                        until,
                        r.file,
                        &mut positions(&mut self.jobs),
                    );
                }
                continue;
            }
            // At start-up: a server that cannot rebuild a tube must not
            // start without its jobs, so this stops it, as any start-up
            // failure does.
            let tube = *slot.get_or_insert_with(|| {
                self.tubes.find_or_create(name).unwrap_or_else(|| panic!("no memory for tube {name}"))
            });
            let job = Job {
                tube,
                pri: r.pri,
                delay: r.delay,
                ttr: r.ttr.max(1),
                state: State::Ready,
                counters: r.counters,
                created: r.created,
                deadline: now,
                reserved_by: ClientId::default(),
                heap_index: 0,
                links: Default::default(),
                work_started: Default::default(),
                file: r.file,
                body: r.body,
                tags: job::Tags::of(false, r.limit.is_some())
                    .with_con(r.con.is_some())
                    .with_groups(r.group.is_some(), r.after.is_some()),
            };
            self.job_memory += job.body.in_memory() as u64 + JOB_MEMORY_OVERHEAD;
            self.bodies.bytes += (job.body.len() - job.body.in_memory()) as u64;
            self.jobs.insert(r.id, job);
            if let Some(key) = &r.key {
                self.restore_key(r.id, name, key);
            }
            if let Some(reserves) = r.limit {
                // At start-up, as for a tube above.
                assert!(self.tubes.limits.try_make_room(), "no memory for job {}'s retry limit", r.id);
                self.tubes.limits.insert(r.id, reserves);
            }
            if let Some((name, limit)) = &r.con {
                let claim = self.tubes.con.claim(name);
                let claim = claim.unwrap_or_else(|| panic!("no memory for job {}'s concurrency key", r.id));
                self.tubes.con.insert(r.id, name, *limit, claim);
            }
            if r.group.is_some() || r.after.is_some() {
                let (group, after) = (r.group.as_deref(), r.after.as_deref());
                let claim = self.tubes.groups.claim(group, after);
                let claim = claim.unwrap_or_else(|| panic!("no memory for job {}'s groups", r.id));
                self.tubes.groups.insert(r.id, group, after, claim);
                if group.is_some() {
                    self.tubes.groups.restore_run(r.id, r.run.unwrap_or(0));
                }
            }
            match r.state {
                RestoredState::Buried { at, by_limit } => {
                    self.last_buried_at = self.last_buried_at.max(at);
                    // The mark as logged; a log older than it, as the
                    // builds that wrote it inferred it (its limit is filed
                    // above).
                    let dead = by_limit.unwrap_or_else(|| self.tries_spent(r.id));
                    if let Some(job) = self.jobs.get_mut(&r.id) {
                        job.state = State::Buried;
                        job.set_buried_at(at);
                        job.tags.set_buried_by_limit(dead);
                    }
                    let tags = self.jobs.get(&r.id).map(|job| job.tags).unwrap_or_default();
                    self.tally_job(r.id, State::Buried, r.pri, tags, true);
                    buried.push((at.0, r.id));
                }
                RestoredState::Delayed { until } if until > now => self.make_delayed(r.id, until),
                RestoredState::Delayed { until } => {
                    if r.after.is_some() {
                        waiting.push(r.id);
                    }
                    ready.push((until, r.id));
                }
                RestoredState::Held => {
                    if r.after.is_some() {
                        waiting.push(r.id);
                    }
                    ready.push((ready_since(r.created, r.delay, &r.counters, now), r.id));
                }
                _ => ready.push((ready_since(r.created, r.delay, &r.counters, now), r.id)),
            }
        }
        ready.sort_unstable();
        for (since, id) in ready {
            self.make_ready(id, since);
        }
        buried.sort_unstable();
        for (_, id) in buried {
            if let Some(tube) = self.jobs.get(&id).map(|job| job.tube) {
                self.tubes.get_mut(tube).buried.push_back(&mut self.jobs, id);
            }
        }
        // Every member is filed now: a job whose delay is over, held or not
        // yet, is held if it waits for its group's run, as at the end of a
        // delay; a job logged ready (or reserved) never is: it was not held
        // when logged, and only a delay's end holds a job.
        for id in waiting {
            if self.jobs.get(&id).is_some_and(|job| job.state == State::Ready) && self.tubes.groups.waits(id)
            {
                self.unlink(id);
                self.make_held(id);
            }
        }
        // The room later moves need, as `start_put` would have claimed it.
        // Best effort: a start-up this short of memory will not serve long.
        for &t in self.tubes.ids().to_vec().iter() {
            let tube = self.tubes.get_mut(t);
            let in_tube = tube.job_count();
            let _ = tube.ready.try_make_room_for(in_tube) && tube.delayed.try_make_room_for(in_tube);
        }
        let _ = self.reserved.try_make_room_for(self.jobs.len());
        if let Some(end) = self.tubes.keys.next_end() {
            self.schedule(end);
        }
        self.next_job_id = self.id_range.first_from(self.next_job_id.max(next_id));
    }

    /// The id the next put will get.
    pub fn next_id(&self) -> JobId {
        self.next_job_id
    }

    /// Enters drain mode (SIGUSR1): from now on every put gets `DRAINING`.
    pub fn start_draining(&mut self) {
        self.draining = true;
    }

    /// `drain` (tuber's, reference §3.25): drain mode, as SIGUSR1 starts it.
    pub fn drain(&mut self) -> Reply<'_> {
        if !self.draining {
            crate::log::event(format_args!("drain mode: puts are answered DRAINING from now on (drain)"));
        }
        self.start_draining();
        Reply::Draining
    }

    /// `undrain` (tuber's, reference §3.25): puts are taken again, however
    /// drain mode began.
    pub fn undrain(&mut self) -> Reply<'_> {
        if self.draining {
            crate::log::event(format_args!("drain mode ends: puts are taken again (undrain)"));
        }
        self.draining = false;
        Reply::NotDraining
    }
}

/// Counts a job filed into (`filed`) or taken out of the queue of `state`
/// in the engine-wide totals that `stats` shows.
fn tally(counts: &mut JobCounts, state: State, pri: u32, filed: bool) {
    let count = match state {
        State::Ready => &mut counts.ready,
        State::Delayed | State::Held => &mut counts.delayed,
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

/// Since when a job the log brings back ready has been ready, as near as
/// the log can tell (reference §8.2): a job never reserved since its put
/// (or its delay's end), which is exact; one reserved before has been
/// ready again since a release, a kick or the restart, which the log does
/// not date, so since `now`.
fn ready_since(created: Time, delay: u32, counters: &Counters, now: Time) -> Time {
    // A kick may have ended its delay early, on a date the log lacks.
    if counters.reserves > 0 || counters.kicks > 0 {
        return now;
    }
    let due = created.0.saturating_add(u64::from(delay).saturating_mul(1_000_000_000));
    Time(due.min(now.0))
}
