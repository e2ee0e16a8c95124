//! Model-based test of the engine: a seeded random sequence of operations is
//! run against [`Engine`] and against a deliberately naive reference model
//! written here (plain `Vec`s and linear scans, straight from the
//! protocol reference, `src/reference.md` §2-6), and every reply, the stats of every tube, the server
//! stats and the stats of every job an operation touched are compared after
//! every step.
//!
//! Time is a fake clock: the engine never reads one, so the test advances
//! "now" itself and, like the server's timer thread and blocked connection
//! threads would, calls `tick` at every moment something falls due and
//! `check_wait` for every client after every event.
//!
//! `MODEL_STEPS` sets the number of steps (split over the default seeds, or
//! all for `MODEL_SEED`); `MODEL_SEED` runs a single seed. A failure prints
//! the seed, the step, and the last operations, with the command that
//! replays it.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use beanstalk::engine::{ClientId, Engine, NewJob, Waker};
use beanstalk::protocol::{Command, PutTags, Reply, TubeName, UniqueKey};
use beanstalk::stats::{BinlogStats, ProcessStats};
use beanstalk::time::Time;

const NS: u64 = 1_000_000_000;
const MAX_JOB_SIZE: u32 = 65535;
/// How many client slots the random sequence juggles.
const SLOTS: usize = 6;
/// Tube names; the first three are picked more often, so that clients share
/// tubes, and the rest make for long tube and watch lists.
const TUBE_NAMES: [&str; 7] = ["default", "a", "b", "c", "d", "e", "f"];
const DEFAULT_SEEDS: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 0x5eed_cafe];
/// Total steps in CI, split over [`DEFAULT_SEEDS`].
const DEFAULT_STEPS: u64 = 160_000;
/// Operations shown when a run fails.
const HISTORY: usize = 24;

mod common;
#[path = "model/reference.rs"]
mod reference;

use common::Rng;
use reference::{line, Model, St};

// -------------------------------------------------------------------------
// Operations
// -------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PutKind {
    /// Accepted (or DRAINING).
    Ok,
    /// Body without its CRLF: the id is used up.
    ExpectedCrlf,
    /// Only counted: bytes above max-job-size.
    TooBig,
    /// Only counted: junk after `<bytes>`.
    Junk,
}

#[derive(Debug, Clone)]
enum Op {
    Connect {
        slot: usize,
    },
    Disconnect(u64),
    HangUp(u64),
    Put {
        c: u64,
        kind: PutKind,
        pri: u32,
        delay: u32,
        ttr: u32,
        created_ago: u64,
        body: Vec<u8>,
        /// `idp:<key>:<seconds>` (reference §3.1a).
        key: Option<(&'static str, u32)>,
    },
    Use(u64, &'static str),
    Watch(u64, &'static str),
    Ignore(u64, &'static str),
    Reserve(u64, Option<u32>),
    /// `reserve-with-abort[-timeout]`; `true`: bytes came behind it.
    ReserveWithAbort(u64, Option<u32>, bool),
    /// The client sends a byte, and the hang-up watcher reports it.
    Abort(u64),
    ReserveJob(u64, u64),
    Delete(u64, u64),
    Release(u64, u64, u32, u32),
    Bury(u64, u64, u32),
    Touch(u64, u64),
    Peek(u64),
    PeekReady(u64),
    PeekDelayed(u64),
    PeekBuried(u64),
    Kick(u64, u32),
    KickJob(u64),
    StatsJob(u64),
    StatsTube(&'static str),
    Stats,
    ListTubes,
    ListTubeUsed(u64),
    ListTubesWatched(u64),
    PauseTube(Option<&'static str>, u32),
    MoveJob(u64, &'static str),
    ReserveBatch(u64, u32),
    DeleteBatch(u64, Vec<u64>),
    ClearTube(&'static str),
    Drain,
    Advance(u64),
}

/// A client's socket as the engine sees it: bytes may wait in it, unread.
#[derive(Debug, Default)]
struct Socket {
    input: AtomicBool,
}

impl Waker for Socket {
    fn wake(&self) {}
    fn has_hung_up(&self) -> bool {
        false
    }
    fn has_input(&self) -> bool {
        self.input.load(Ordering::SeqCst)
    }
}

fn enc(r: &Reply) -> Vec<u8> {
    let mut v = Vec::new();
    r.encode(&mut v);
    v
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).escape_debug().to_string()
}

/// The first word of a reply, for the coverage counts.
fn word(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == b' ' || b == b'\r').unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn name(s: &str) -> TubeName {
    TubeName::new(s.as_bytes()).expect("valid tube name")
}

/// Fixed process figures, so that whole `stats` documents can be compared.
fn process_stats() -> ProcessStats<'static> {
    ProcessStats {
        pid: 1,
        version: "test",
        user_cpu: Default::default(),
        system_cpu: Default::default(),
        uptime_secs: 0,
        binlog: BinlogStats::default(),
        instance_id: "0",
        hostname: "h",
        os: "o",
        platform: "p",
    }
}

/// Runs alternate between phases so that queues both fill up (many jobs,
/// kicks, timeouts) and run dry (blocked reserves, dispatch to waiters,
/// DEADLINE_SOON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mood {
    Balanced,
    /// Mostly puts.
    Produce,
    /// Mostly reserves.
    Consume,
    /// Clients reserve and hold jobs, then disconnect while others wait.
    Hoard,
}

// -------------------------------------------------------------------------
// The harness
// -------------------------------------------------------------------------

struct Harness {
    seed: u64,
    steps: u64,
    step: u64,
    now: u64,
    rng: Rng,
    engine: Engine,
    model: Model,
    slots: [Option<u64>; SLOTS],
    /// Each client's socket, by client id.
    sockets: BTreeMap<u64, Arc<Socket>>,
    history: VecDeque<String>,
    drain_at: Option<u64>,
    /// The current phase of the run, and when it ends.
    mood: Mood,
    mood_until: u64,
    /// Reply words seen per operation kind.
    coverage: BTreeMap<String, u64>,
    /// The engine's reply to the last operation, and the blocked reserves
    /// that ended since (client, reply), for the scripted scenarios.
    last: Vec<u8>,
    woke: Vec<(u64, String)>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut msg = format!(
                "\n=== model test FAILED: seed {} at step {} (now = {} ns) ===\nlast operations \
                 (after each one: check_wait for every client, list-tubes, stats-tube of every tube, \
                 stats-job of the touched jobs, stats):\n",
                self.seed, self.step, self.now
            );
            for h in &self.history {
                let _ = writeln!(msg, "  {h}");
            }
            let _ = writeln!(
                msg,
                "replay: MODEL_SEED={} MODEL_STEPS={} cargo test --test model engine_matches_reference_model",
                self.seed, self.steps
            );
            eprintln!("{msg}");
        }
    }
}

impl Harness {
    fn new(seed: u64, steps: u64) -> Harness {
        let mut rng = Rng::new(seed);
        // Drain mode ends all successful puts, so it comes late, in some runs.
        let drain = rng.chance(400);
        let back = rng.below(steps / 10 + 1);
        let drain_at = (drain && steps > 0).then(|| steps.saturating_sub(1 + back));
        Harness {
            seed,
            steps,
            step: 0,
            now: 0,
            rng,
            // Odd seeds measure for --metrics: the same answers, and the
            // lists of ready jobs kept through every move (`check`).
            engine: {
                let mut engine = Engine::new(MAX_JOB_SIZE);
                engine.set_metering(seed % 2 == 1);
                engine
            },
            model: Model::new(),
            slots: [None; SLOTS],
            sockets: BTreeMap::new(),
            history: VecDeque::new(),
            drain_at,
            mood: Mood::Balanced,
            mood_until: 0,
            coverage: BTreeMap::new(),
            last: Vec::new(),
            woke: Vec::new(),
        }
    }

    fn t(&self) -> Time {
        Time(self.now)
    }

    fn note(&mut self, key: String) {
        *self.coverage.entry(key).or_default() += 1;
    }

    fn fail(&self, what: &str, detail: String) -> ! {
        panic!("mismatch in {what}: {detail}");
    }

    /// Compares a reply and counts it for the coverage report.
    fn cmp(&mut self, what: &str, engine: &[u8], model: &[u8]) {
        if engine != model {
            self.fail(what, format!("\n  engine: {}\n  model:  {}", show(engine), show(model)));
        }
        let key = format!("{what} {}", word(engine));
        self.note(key);
        self.last = engine.to_vec();
    }

    fn cmp_opt(&mut self, what: &str, engine: Option<Vec<u8>>, model: Option<Vec<u8>>) {
        match (&engine, &model) {
            (Some(e), Some(m)) => self.cmp(what, e, m),
            (None, None) => {}
            _ => self.fail(
                what,
                format!(
                    "\n  engine: {}\n  model:  {}",
                    engine.as_deref().map_or("(blocks)".into(), show),
                    model.as_deref().map_or("(blocks)".into(), show)
                ),
            ),
        }
    }

    fn run(&mut self) {
        while self.step < self.steps {
            let op = self.gen_op();
            self.one_step(op);
        }
    }

    /// Applies one operation to both, lets blocked clients collect what
    /// happened to them, and compares all the state.
    fn one_step(&mut self, op: Op) {
        let entry = format!("#{:<7} t={:>10.6}s {:?}", self.step, self.now as f64 / NS as f64, op);
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(entry);
        self.last.clear();
        self.woke.clear();
        self.apply(&op);
        self.settle();
        let last = std::mem::take(&mut self.last);
        self.check(self.step.is_multiple_of(32));
        self.last = last;
        self.step += 1;
    }

    // --- generating operations ---

    fn free_clients(&self) -> Vec<u64> {
        self.slots.iter().flatten().copied().filter(|&c| !self.model.is_waiting(c)).collect()
    }

    fn blocked_clients(&self) -> Vec<u64> {
        self.slots.iter().flatten().copied().filter(|&c| self.model.is_waiting(c)).collect()
    }

    fn gen_advance(&mut self) -> Op {
        let by = match self.rng.below(4) {
            0 => self.rng.below(4) * NS,
            1 => self.rng.below(NS / 20),
            _ => self.rng.below(3 * NS),
        };
        Op::Advance(by)
    }

    fn gen_tube(&mut self) -> &'static str {
        match self.rng.chance(500) {
            true => self.rng.pick(&TUBE_NAMES[..3]),
            false => self.rng.pick(&TUBE_NAMES),
        }
    }

    fn gen_pri(&mut self) -> u32 {
        match self.rng.below(12) {
            0 => 0,
            1 => 1,
            2 => 1023,
            3 => 1024,
            4 => 1025,
            5 => u32::MAX,
            6 => self.rng.next() as u32,
            _ => 1020 + self.rng.below(8) as u32,
        }
    }

    /// A job id for a command of client `c`: often one it holds, or one in
    /// a state the command accepts, sometimes any id at all.
    fn gen_job(&mut self, c: u64) -> u64 {
        let mine = self.model.client(c).reserved.clone();
        match self.rng.below(10) {
            0..=5 if !mine.is_empty() => self.rng.pick(&mine),
            0..=8 if !self.model.jobs.is_empty() => {
                let i = self.rng.below(self.model.jobs.len() as u64) as usize;
                self.model.jobs[i].id
            }
            _ => self.rng.below(self.model.next_job_id + 2),
        }
    }

    fn gen_op(&mut self) -> Op {
        if self.drain_at == Some(self.step) {
            return Op::Drain;
        }
        if self.step >= self.mood_until {
            self.mood =
                self.rng.pick(&[Mood::Balanced, Mood::Produce, Mood::Consume, Mood::Consume, Mood::Hoard]);
            self.mood_until = self.step + 200 + self.rng.below(800);
        }
        if self.rng.chance(80) {
            return self.gen_advance();
        }
        let slot = self.rng.below(SLOTS as u64) as usize;
        let Some(mut c) = self.slots[slot] else {
            return Op::Connect { slot };
        };
        if self.model.is_waiting(c) {
            // A blocked client can only hang up, (rarely) be closed, or
            // send a byte (which only a reserve-with-abort reads).
            if self.rng.chance(30) {
                return Op::HangUp(c);
            }
            if self.rng.chance(40) {
                return Op::Abort(c);
            }
            if self.rng.chance(15) {
                return Op::Disconnect(c);
            }
            let free = self.free_clients();
            if free.is_empty() {
                return self.gen_advance();
            }
            c = self.rng.pick(&free);
        }
        if self.model.client(c).hung_up && self.rng.chance(250) {
            return Op::Disconnect(c);
        }
        let many_jobs = self.model.jobs.len() > 50;
        let mut r = self.rng.below(1000);
        match self.mood {
            Mood::Balanced => {}
            // put -> reserve
            Mood::Consume if r < 200 && self.rng.chance(850) => r = 200 + self.rng.below(130),
            // reserve -> put
            Mood::Produce if (200..330).contains(&r) && self.rng.chance(700) => r = self.rng.below(200),
            // delete, release, bury, touch -> reserve, reserve-job, disconnect
            Mood::Hoard if (350..550).contains(&r) => {
                r = match self.rng.below(10) {
                    0..=6 => 200 + self.rng.below(150),
                    7 => 830,
                    _ => r,
                }
            }
            _ => {}
        }
        match r {
            0..=199 if many_jobs => {
                let id = self.gen_job(c);
                Op::Delete(c, id)
            }
            0..=199 => {
                let kind = match self.rng.below(100) {
                    0..=3 => PutKind::ExpectedCrlf,
                    4..=6 => PutKind::TooBig,
                    7..=9 => PutKind::Junk,
                    _ => PutKind::Ok,
                };
                let delay = match self.rng.below(100) {
                    0..=54 => 0,
                    55..=69 => 1,
                    70..=79 => 2,
                    80..=89 => 3,
                    90..=98 => self.rng.below(6) as u32,
                    _ => u32::MAX,
                };
                let ttr = match self.rng.below(200) {
                    0 => u32::MAX,
                    _ => self.rng.pick(&[0, 1, 1, 2, 2, 3, 3, 4, 6]),
                };
                let created_ago = if self.rng.chance(200) { self.rng.below(2 * NS) } else { 0 };
                let len = self.rng.below(6) as usize;
                let body = (0..len).map(|_| self.rng.below(256) as u8).collect();
                let pri = self.gen_pri();
                let key = match self.rng.below(100) {
                    0..=29 => Some((self.rng.pick(&["k1", "k2", "k3"]), self.rng.pick(&[0, 0, 1, 2]))),
                    _ => None,
                };
                Op::Put { c, kind, pri, delay, ttr, created_ago, body, key }
            }
            200..=329 => {
                let timeout = match self.rng.below(100) {
                    0..=34 => None,
                    35..=64 => Some(0),
                    _ => Some(1 + self.rng.below(3) as u32),
                };
                match self.rng.below(100) {
                    0..=19 => Op::ReserveWithAbort(c, timeout, self.rng.chance(150)),
                    _ => Op::Reserve(c, timeout),
                }
            }
            330..=349 => Op::ReserveJob(c, self.gen_job(c)),
            350..=419 => Op::Delete(c, self.gen_job(c)),
            420..=479 => {
                let id = self.gen_job(c);
                let pri = self.gen_pri();
                let delay = match self.rng.below(10) {
                    0..=5 => 0,
                    _ => self.rng.below(4) as u32,
                };
                Op::Release(c, id, pri, delay)
            }
            480..=514 => {
                let id = self.gen_job(c);
                Op::Bury(c, id, self.gen_pri())
            }
            515..=549 => Op::Touch(c, self.gen_job(c)),
            550..=584 => Op::Use(c, self.gen_tube()),
            585..=619 => Op::Watch(c, self.gen_tube()),
            620..=654 => Op::Ignore(c, self.gen_tube()),
            655..=669 => Op::Peek(self.gen_job(c)),
            670..=679 => Op::PeekReady(c),
            680..=689 => Op::PeekDelayed(c),
            690..=699 => Op::PeekBuried(c),
            700..=729 => {
                let bound = match self.rng.below(20) {
                    0 => u32::MAX,
                    _ => self.rng.below(5) as u32,
                };
                Op::Kick(c, bound)
            }
            730..=754 => {
                let kickable: Vec<u64> = (self.model.jobs.iter())
                    .filter(|j| matches!(j.state, St::Buried | St::Delayed))
                    .map(|j| j.id)
                    .collect();
                let id = match kickable.is_empty() || self.rng.chance(300) {
                    true => self.gen_job(c),
                    false => self.rng.pick(&kickable),
                };
                Op::KickJob(id)
            }
            755..=769 => Op::StatsJob(self.gen_job(c)),
            770..=779 => Op::StatsTube(self.gen_tube()),
            780..=784 => Op::Stats,
            785..=789 => Op::ListTubes,
            790..=794 => Op::ListTubeUsed(c),
            795..=799 => Op::ListTubesWatched(c),
            800..=829 => {
                let tube = if self.rng.chance(50) { None } else { Some(self.gen_tube()) };
                let delay = match self.rng.below(20) {
                    0..=5 => 0,
                    6 => 100,
                    _ => 1 + self.rng.below(4) as u32,
                };
                Op::PauseTube(tube, delay)
            }
            830..=841 => Op::Disconnect(c),
            842..=846 => Op::HangUp(c),
            847..=871 => Op::MoveJob(self.gen_job(c), self.gen_tube()),
            872..=886 => Op::ReserveBatch(c, 1 + self.rng.below(4) as u32),
            887..=901 => {
                let n = 1 + self.rng.below(5);
                Op::DeleteBatch(c, (0..n).map(|_| self.gen_job(c)).collect())
            }
            902..=905 => Op::ClearTube(self.gen_tube()),
            _ => self.gen_advance(),
        }
    }

    // --- applying operations to both ---

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match *op {
            Op::Connect { slot } => {
                let socket = Arc::new(Socket::default());
                let e = self.engine.connect(socket.clone()).expect("memory for a client").0;
                self.sockets.insert(e, socket);
                let m = self.model.connect();
                if e != m {
                    self.fail("connect", format!("engine client id {e}, model {m}"));
                }
                self.slots[slot] = Some(e);
                self.note("connect".into());
            }
            Op::Disconnect(c) => {
                let held = self.model.client(c).reserved.len();
                let others_wait = self.model.waiters.iter().any(|&w| w != c);
                let tubes_before = self.model.tubes.len();
                if held >= 2 && others_wait {
                    self.note("disconnect: 2+ jobs back while others wait".into());
                }
                self.engine.disconnect(ClientId(c), self.t());
                self.model.disconnect(c, now);
                if tubes_before >= self.model.tubes.len() + 2 {
                    self.note("disconnect: 2+ tubes destroyed".into());
                }
                for s in &mut self.slots {
                    if *s == Some(c) {
                        *s = None;
                    }
                }
                self.note("disconnect".into());
            }
            Op::HangUp(c) => {
                self.engine.hang_up(ClientId(c));
                self.model.hang_up(c);
                self.note("hang_up".into());
            }
            Op::Put { c, kind, pri, delay, ttr, created_ago, ref body, key } => {
                self.engine.count_put();
                self.model.count_put();
                if matches!(kind, PutKind::TooBig | PutKind::Junk) {
                    self.note(format!("put {kind:?}"));
                    return;
                }
                let ticket =
                    self.engine.start_put(ClientId(c), body.len() as u32).expect("no memory limit is set");
                let e_id = ticket.id();
                let m_id = self.model.start_put(c);
                if e_id != m_id {
                    self.fail("start_put", format!("engine id {e_id}, model {m_id}"));
                }
                if kind == PutKind::ExpectedCrlf {
                    self.engine.cancel_put(ticket);
                    self.note("put ExpectedCrlf".into());
                    return;
                }
                let created = now.saturating_sub(created_ago);
                let job = NewJob {
                    ticket,
                    pri,
                    delay,
                    ttr,
                    created: Time(created),
                    body: body.clone().into_boxed_slice(),
                    tags: PutTags::new(
                        key.map(|(k, cooldown)| UniqueKey { name: name(k), cooldown }).as_ref(),
                        None,
                        None,
                    )
                    .unwrap(),
                };
                let e = enc(&self.engine.put(ClientId(c), job, self.t()));
                let m_key = key.map(|(k, cooldown)| (k.to_owned(), cooldown));
                let m = self.model.put(c, m_id, pri, delay, ttr, created, body, now, m_key);
                self.cmp("put", &e, &m);
            }
            Op::Use(c, t) => {
                let e = enc(&self.engine.use_tube(ClientId(c), &name(t)));
                let m = self.model.use_tube(c, t);
                self.cmp("use", &e, &m);
            }
            Op::Watch(c, t) => {
                let e = enc(&self.engine.watch(ClientId(c), &name(t)));
                let m = self.model.watch(c, t);
                self.cmp("watch", &e, &m);
            }
            Op::Ignore(c, t) => {
                let e = enc(&self.engine.ignore(ClientId(c), &name(t)));
                let m = self.model.ignore(c, t);
                self.cmp("ignore", &e, &m);
            }
            Op::Reserve(c, timeout) => {
                let e = self
                    .engine
                    .reserve(ClientId(c), timeout, self.t(), &mut Vec::<u8>::new())
                    .map(|r| enc(&r));
                let m = self.model.reserve(c, timeout, now);
                let what = match timeout {
                    None => "reserve",
                    Some(0) => "reserve-with-timeout-0",
                    Some(_) => "reserve-with-timeout",
                };
                if e.is_none() && m.is_none() {
                    self.note(format!("{what} (blocks)"));
                }
                self.cmp_opt(what, e, m);
            }
            Op::ReserveWithAbort(c, timeout, input_waiting) => {
                let e = self
                    .engine
                    .reserve_with_abort(ClientId(c), timeout, input_waiting, self.t(), &mut Vec::<u8>::new())
                    .map(|r| enc(&r));
                let m = self.model.reserve_with_abort(c, timeout, input_waiting, now);
                let what = match timeout {
                    None => "reserve-with-abort",
                    Some(_) => "reserve-with-abort-timeout",
                };
                if e.is_none() && m.is_none() {
                    self.note(format!("{what} (blocks)"));
                }
                self.cmp_opt(what, e, m);
            }
            Op::Abort(c) => {
                // The byte waits in the socket while the watcher reports
                // it, then is read as the client's next command.
                let socket = self.sockets.get(&c).cloned().expect("a connected client");
                socket.input.store(true, Ordering::SeqCst);
                self.engine.client_stirred(ClientId(c), false);
                socket.input.store(false, Ordering::SeqCst);
                self.model.abort(c);
                self.note("abort".into());
            }
            Op::ReserveJob(c, id) => {
                let e = enc(&self.engine.reserve_job(ClientId(c), id, self.t(), &mut Vec::<u8>::new()));
                let m = self.model.reserve_job(c, id, now);
                self.cmp("reserve-job", &e, &m);
            }
            Op::Delete(c, id) => {
                let e = enc(&self.engine.delete(ClientId(c), id, self.t()));
                let m = self.model.delete(c, id, now);
                self.cmp("delete", &e, &m);
            }
            Op::Release(c, id, pri, delay) => {
                let e = enc(&self.engine.release(ClientId(c), id, pri, delay, self.t()));
                let m = self.model.release(c, id, pri, delay, now);
                self.cmp("release", &e, &m);
            }
            Op::Bury(c, id, pri) => {
                let e = enc(&self.engine.bury(ClientId(c), id, pri, self.t()));
                let m = self.model.bury(c, id, pri);
                self.cmp("bury", &e, &m);
            }
            Op::Touch(c, id) => {
                let e = enc(&self.engine.touch(ClientId(c), id, self.t()));
                let m = self.model.touch(c, id, now);
                self.cmp("touch", &e, &m);
            }
            Op::Peek(id) => {
                let e = enc(&self.engine.peek(id));
                let m = self.model.peek(id);
                self.cmp("peek", &e, &m);
            }
            Op::PeekReady(c) => {
                let e = enc(&self.engine.peek_ready(ClientId(c)));
                let m = self.model.peek_ready(c);
                self.cmp("peek-ready", &e, &m);
            }
            Op::PeekDelayed(c) => {
                let e = enc(&self.engine.peek_delayed(ClientId(c)));
                let m = self.model.peek_delayed(c);
                self.cmp("peek-delayed", &e, &m);
            }
            Op::PeekBuried(c) => {
                let e = enc(&self.engine.peek_buried(ClientId(c)));
                let m = self.model.peek_buried(c);
                self.cmp("peek-buried", &e, &m);
            }
            Op::Kick(c, bound) => {
                let e = enc(&self.engine.kick(ClientId(c), bound, self.t()));
                let m = self.model.kick(c, bound, now);
                let what = if m == line("KICKED 0") { "kick" } else { "kick>0" };
                self.cmp(what, &e, &m);
            }
            Op::KickJob(id) => {
                let e = enc(&self.engine.kick_job(id, self.t()));
                let m = self.model.kick_job(id, now);
                self.cmp("kick-job", &e, &m);
            }
            Op::StatsJob(id) => {
                let e = enc(&self.engine.stats_job(id, self.t()));
                let m = self.model.stats_job(id, now);
                self.cmp("stats-job", &e, &m);
            }
            Op::StatsTube(t) => {
                let e = enc(&self.engine.stats_tube(&name(t), self.t()));
                let m = self.model.stats_tube(t, now);
                self.cmp("stats-tube", &e, &m);
            }
            Op::Stats => self.compare_server_stats(),
            Op::ListTubes => {
                let e = enc(&self.engine.list_tubes());
                let m = self.model.list_tubes();
                self.cmp("list-tubes", &e, &m);
            }
            Op::ListTubeUsed(c) => {
                let e = enc(&self.engine.list_tube_used(ClientId(c)));
                let m = self.model.list_tube_used(c);
                self.cmp("list-tube-used", &e, &m);
            }
            Op::ListTubesWatched(c) => {
                let e = enc(&self.engine.list_tubes_watched(ClientId(c)));
                let m = self.model.list_tubes_watched(c);
                self.cmp("list-tubes-watched", &e, &m);
            }
            Op::PauseTube(t, delay) => {
                let tube = t.map(name);
                let e = enc(&self.engine.pause_tube(tube.as_ref(), delay, self.t()));
                let m = self.model.pause_tube(t, delay, now);
                self.cmp(if delay == 0 { "pause-tube-0" } else { "pause-tube" }, &e, &m);
            }
            Op::MoveJob(id, t) => {
                let e = enc(&self.engine.move_job(id, &name(t), self.t()));
                let m = self.model.move_job(id, t, now);
                self.cmp("move-job", &e, &m);
            }
            Op::ReserveBatch(c, count) => {
                let mut e = Vec::new();
                let mut ids = Vec::with_capacity(count as usize);
                let head =
                    self.engine.reserve_batch(ClientId(c), count, self.t(), usize::MAX, &mut e, &mut ids);
                head.encode(&mut e);
                for &id in &ids {
                    self.engine.reserved_reply(id).unwrap().encode(&mut e);
                }
                let m = self.model.reserve_batch(c, count, now);
                self.cmp(if ids.is_empty() { "reserve-batch-0" } else { "reserve-batch" }, &e, &m);
            }
            Op::DeleteBatch(c, ref ids) => {
                let e = enc(&self.engine.delete_batch(ClientId(c), &mut ids.iter().copied(), self.t()));
                let m = self.model.delete_batch(c, ids, now);
                self.cmp("delete-batch", &e, &m);
            }
            Op::ClearTube(t) => {
                // As the connection runs it: started, then chunks until
                // one gives the reply.
                let e = match self.engine.start_on_tube(Command::ClearTube(name(t))) {
                    Err(answer) => enc(&answer),
                    Ok(mut run) => loop {
                        if let Some(reply) = self.engine.tube_chunk(&mut run, self.t()) {
                            break enc(&reply);
                        }
                    },
                };
                let m = self.model.clear_tube(t, now);
                self.cmp(if m == line("CLEARED 0") { "clear-tube-0" } else { "clear-tube" }, &e, &m);
            }
            Op::Drain => {
                self.engine.start_draining();
                self.model.draining = true;
                self.note("drain".into());
            }
            Op::Advance(by) => self.advance(by),
        }
    }

    /// Moves the fake clock forward by `by`, stopping at every moment where
    /// something falls due (a TTR, a delay, a pause, a waiter's timeout or
    /// safety margin) as the timer thread and the blocked connection threads
    /// would.
    fn advance(&mut self, by: u64) {
        let target = self.now + by;
        for _ in 0..100_000 {
            let mut next = self.model.next_due();
            for c in self.blocked_clients() {
                if let Some(w) = self.model.wake_time(c) {
                    next = Some(next.map_or(w, |n| n.min(w)));
                }
            }
            match next {
                Some(at) if at <= target => {
                    self.now = self.now.max(at);
                    self.tick_and_settle();
                }
                _ => {
                    self.now = target;
                    self.tick_and_settle();
                    return;
                }
            }
        }
        panic!("time does not advance: the model keeps something due at {} ns", self.now);
    }

    fn tick_and_settle(&mut self) {
        let e = self.engine.tick(self.t()).map(|t| t.0);
        let m = self.model.tick(self.now);
        if e != m {
            self.fail("tick (next due time)", format!("engine {e:?}, model {m:?}"));
        }
        self.note("tick".into());
        self.settle();
    }

    /// Asks every client whether its blocked reserve is over, as its thread
    /// would when woken.
    fn settle(&mut self) {
        let clients: Vec<u64> = self.slots.iter().flatten().copied().collect();
        for c in clients {
            let e = self.engine.check_wait(ClientId(c), self.t(), &mut Vec::<u8>::new()).map(|r| enc(&r));
            let m = self.model.check_wait(c, self.now);
            if let Some(e) = &e {
                self.woke.push((c, String::from_utf8_lossy(e).into_owned()));
            }
            let last = std::mem::take(&mut self.last);
            self.cmp_opt("check_wait", e, m);
            self.last = last;
        }
    }

    // --- comparing state ---

    fn compare_server_stats(&mut self) {
        let e = self.engine.server_stats().to_yaml(&process_stats()).expect("memory for stats");
        let m = self.model.server_stats().to_yaml(&process_stats()).expect("memory for stats");
        if e != m {
            let diff: Vec<String> = e
                .lines()
                .zip(m.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("engine `{a}`, model `{b}`"))
                .collect();
            self.fail("stats", diff.join("; "));
        }
    }

    fn check(&mut self, all_jobs: bool) {
        for c in self.blocked_clients() {
            let e = self.engine.wake_time(ClientId(c)).map(|t| t.0);
            let m = self.model.wake_time(c);
            if e != m {
                self.fail("wake_time", format!("client {c}: engine {e:?}, model {m:?}"));
            }
        }
        let e = enc(&self.engine.list_tubes());
        let m = self.model.list_tubes();
        self.cmp("check list-tubes", &e, &m);
        let mut names: Vec<String> = self.model.tubes.iter().map(|t| t.name.clone()).collect();
        if let Some(&gone) = TUBE_NAMES.iter().find(|n| self.model.tube(n).is_none()) {
            names.push(gone.into());
        }
        for t in names {
            let e = enc(&self.engine.stats_tube(&name(&t), self.t()));
            let m = self.model.stats_tube(&t, self.now);
            self.cmp("check stats-tube", &e, &m);
        }
        let mut ids = std::mem::take(&mut self.model.touched);
        if all_jobs {
            ids.extend(self.model.jobs.iter().map(|j| j.id));
            ids.push(self.model.next_job_id);
        }
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let e = enc(&self.engine.stats_job(id, self.t()));
            let m = self.model.stats_job(id, self.now);
            self.cmp("check stats-job", &e, &m);
        }
        self.compare_server_stats();
        self.check_meters();
    }

    /// With metering, a tube with no ready job has no oldest ready job:
    /// its list of ready jobs emptied as its ready heap did, through every
    /// move (a list left with a job in it would name it here).
    fn check_meters(&mut self) {
        let mut sizes = Vec::with_capacity(self.engine.tube_count());
        self.engine.tube_sizes(0, usize::MAX, &mut sizes);
        let mut figures = Vec::with_capacity(sizes.len());
        self.engine.tube_figures(sizes.iter().map(|&(_, t)| t), self.t(), &mut figures);
        for f in figures {
            if f.stats.jobs.ready == 0 && f.oldest_ready_ns != 0 {
                let t = f.stats.name.as_str();
                self.fail(
                    "metering",
                    format!("tube {t}: no ready job, oldest ready {} ns", f.oldest_ready_ns),
                );
            }
        }
    }

    fn assert_coverage(&self) {
        let must = [
            "put INSERTED",
            "reserve RESERVED",
            "reserve DEADLINE_SOON",
            "reserve (blocks)",
            "reserve-with-timeout (blocks)",
            "reserve-with-timeout-0 TIMED_OUT",
            "reserve-with-abort (blocks)",
            "reserve-with-abort ABORTED",
            "reserve-with-abort RESERVED",
            "check_wait ABORTED",
            "check_wait RESERVED",
            "check_wait TIMED_OUT",
            "check_wait DEADLINE_SOON",
            "reserve-job RESERVED",
            "release RELEASED",
            "bury BURIED",
            "touch TOUCHED",
            "delete DELETED",
            "kick>0 KICKED",
            "kick-job KICKED",
            "reserve-batch RESERVED_BATCH",
            "delete-batch DELETED_BATCH",
            "clear-tube CLEARED",
            "pause-tube PAUSED",
            "pause-tube-0 PAUSED",
            "pause-tube BAD_FORMAT",
            "ignore NOT_IGNORED",
            "peek-buried FOUND",
            "peek-delayed FOUND",
            "hang_up",
            "disconnect",
        ];
        let missing: Vec<&str> = must.iter().copied().filter(|k| !self.coverage.contains_key(*k)).collect();
        assert!(missing.is_empty(), "seed {}: these never happened: {missing:?}", self.seed);
        assert!(self.model.job_timeouts > 0, "seed {}: no TTR ever ran out", self.seed);
    }
}

fn env_u64(key: &str) -> Option<u64> {
    let v = std::env::var(key).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{key} must be a number, not {v:?}")))
}

#[test]
fn engine_matches_reference_model() {
    let (seeds, per_seed): (Vec<u64>, u64) = match env_u64("MODEL_SEED") {
        Some(seed) => {
            (vec![seed], env_u64("MODEL_STEPS").unwrap_or(DEFAULT_STEPS / DEFAULT_SEEDS.len() as u64))
        }
        None => {
            let total = env_u64("MODEL_STEPS").unwrap_or(DEFAULT_STEPS);
            (DEFAULT_SEEDS.to_vec(), total.div_ceil(DEFAULT_SEEDS.len() as u64))
        }
    };
    let started = std::time::Instant::now();
    let reports: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = seeds
            .iter()
            .map(|&seed| {
                s.spawn(move || {
                    let mut h = Harness::new(seed, per_seed);
                    h.run();
                    if per_seed >= 10_000 {
                        h.assert_coverage();
                    }
                    let mut r = format!(
                        "seed {seed}: {per_seed} steps, {:.1} s of fake time, {} job timeouts, {} jobs put{}\n",
                        h.now as f64 / NS as f64,
                        h.model.job_timeouts,
                        h.model.total_jobs,
                        if h.drain_at.is_some() { ", drained at the end" } else { "" }
                    );
                    for (k, n) in &h.coverage {
                        let _ = write!(r, "  {k}: {n}");
                    }
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    for r in &reports {
        println!("{r}");
    }
    println!(
        "{} steps over {} seed(s) in {:.1} s",
        per_seed * seeds.len() as u64,
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

// -------------------------------------------------------------------------
// Scripted scenarios: the protocol reference's examples, run through the same harness
// (engine and model compared after every step) with the expected replies
// spelled out, so the model itself is pinned to the reference.
// -------------------------------------------------------------------------

/// `OK <bytes>` and the YAML, as the engine sends it.
fn ok_text(yaml: &str) -> String {
    format!("OK {}\r\n{yaml}\r\n", yaml.len())
}

fn scripted() -> Harness {
    Harness::new(0, 0)
}

fn put(c: u64, pri: u32, delay: u32, ttr: u32) -> Op {
    Op::Put { c, kind: PutKind::Ok, pri, delay, ttr, created_ago: 0, body: b"x".to_vec(), key: None }
}

impl Harness {
    /// Runs `op` and returns the engine's reply as text.
    fn go(&mut self, op: Op) -> String {
        self.one_step(op);
        String::from_utf8_lossy(&self.last).into_owned()
    }

    fn connect_n(&mut self, n: usize) {
        for slot in 0..n {
            self.go(Op::Connect { slot });
        }
    }
}

#[test]
fn scenario_disconnect_destroys_watched_tubes_in_swap_remove_order() {
    // reference §5.3 and 4.5: the closing client's watch list is emptied by
    // removing index 0 over and over.
    let mut h = scripted();
    h.connect_n(2);
    for t in ["x", "y", "z"] {
        h.go(Op::Watch(1, t));
    }
    h.go(Op::Watch(2, "a"));
    h.go(Op::Watch(2, "b"));
    assert_eq!(h.go(Op::Ignore(1, "default")), "WATCHING 3\r\n");
    assert_eq!(h.go(Op::ListTubesWatched(1)), ok_text("---\n- z\n- x\n- y\n"));
    assert_eq!(h.go(Op::ListTubes), ok_text("---\n- default\n- x\n- y\n- z\n- a\n- b\n"));
    // Destroyed in the order z, y, x.
    h.go(Op::Disconnect(1));
    assert_eq!(h.go(Op::ListTubes), ok_text("---\n- default\n- b\n- a\n"));
}

#[test]
fn scenario_list_orders_from_spec_5_3() {
    let mut h = scripted();
    h.connect_n(2);
    for t in ["a", "b", "c", "d"] {
        h.go(Op::Watch(2, t));
    }
    h.go(Op::Ignore(2, "b"));
    assert_eq!(h.go(Op::ListTubes), ok_text("---\n- default\n- a\n- d\n- c\n"));
    // The watch list [default, d, c] becomes [c, d] without default.
    h.go(Op::Watch(1, "d"));
    h.go(Op::Watch(1, "c"));
    assert_eq!(h.go(Op::ListTubesWatched(1)), ok_text("---\n- default\n- d\n- c\n"));
    assert_eq!(h.go(Op::Ignore(1, "default")), "WATCHING 2\r\n");
    assert_eq!(h.go(Op::ListTubesWatched(1)), ok_text("---\n- c\n- d\n"));
}

#[test]
fn scenario_one_job_at_a_time_on_close_and_kick() {
    // reference §4.1: the waiter gets the first job moved, not the best one.
    let mut h = scripted();
    h.connect_n(2);
    h.go(put(1, 10, 0, 60)); // A
    h.go(put(1, 1, 0, 60)); // B
    h.go(Op::ReserveJob(1, 1));
    h.go(Op::ReserveJob(1, 2));
    h.go(Op::Reserve(2, None));
    h.go(Op::Disconnect(1));
    assert_eq!(h.woke, vec![(2, "RESERVED 1 1\r\nx\r\n".to_string())]);

    let mut h = scripted();
    h.connect_n(2);
    h.go(put(1, 10, 0, 60)); // C
    h.go(put(1, 1, 0, 60)); // D
    h.go(Op::ReserveJob(1, 1));
    h.go(Op::ReserveJob(1, 2));
    h.go(Op::Bury(1, 1, 10));
    h.go(Op::Bury(1, 2, 1));
    h.go(Op::Reserve(2, None));
    assert_eq!(h.go(Op::Kick(1, 2)), "KICKED 2\r\n");
    assert_eq!(h.woke, vec![(2, "RESERVED 1 1\r\nx\r\n".to_string())]);
}

#[test]
fn scenario_waiters_are_served_longest_first() {
    let mut h = scripted();
    h.connect_n(5);
    for c in 2..=5 {
        h.go(Op::Reserve(c, None));
    }
    for want in 2..=5 {
        h.go(put(1, 0, 0, 60));
        assert_eq!(h.woke.len(), 1);
        assert_eq!(h.woke[0].0, want);
    }
}

#[test]
fn scenario_timeout_then_deadline_soon_from_spec_3_3() {
    // Holding a ttr-3 job reserved at t=0: reserve-with-timeout 1 gives
    // TIMED_OUT at t=1, and then reserve-with-timeout 5 gives DEADLINE_SOON
    // at t=2.
    let mut h = scripted();
    h.connect_n(1);
    h.go(put(1, 0, 0, 3));
    assert_eq!(h.go(Op::Reserve(1, None)), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(h.go(Op::Reserve(1, Some(1))), "");
    h.go(Op::Advance(NS - 1));
    assert!(h.woke.is_empty());
    h.go(Op::Advance(1));
    assert_eq!(h.woke, vec![(1, "TIMED_OUT\r\n".to_string())]);
    assert_eq!(h.go(Op::Reserve(1, Some(5))), "");
    h.go(Op::Advance(NS / 2));
    assert!(h.woke.is_empty());
    h.go(Op::Advance(NS));
    assert_eq!(h.woke, vec![(1, "DEADLINE_SOON\r\n".to_string())]);
    assert_eq!(h.now, 2 * NS + NS / 2);
    // In the margin a reserve answers at once; at t=3 the job times out.
    assert_eq!(h.go(Op::Reserve(1, None)), "DEADLINE_SOON\r\n");
    h.go(Op::Advance(NS / 2));
    assert_eq!(h.go(Op::Reserve(1, Some(0))), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(h.model.job_timeouts, 1);
}

#[test]
fn scenario_margin_ignores_pause() {
    // reference §3.3 step 3: a ready job in a paused watched tube still counts
    // as ready for the margin test, and the reply is DEADLINE_SOON anyway.
    let mut h = scripted();
    h.connect_n(2);
    h.go(put(2, 0, 0, 1));
    h.go(Op::Reserve(1, None));
    h.go(put(2, 0, 0, 60));
    h.go(Op::PauseTube(Some("default"), 10));
    assert_eq!(h.go(Op::Reserve(1, None)), "DEADLINE_SOON\r\n");
    // Unpaused, the ready job is handed over even in the margin.
    h.go(Op::PauseTube(Some("default"), 0));
    assert_eq!(h.go(Op::Reserve(1, None)), "RESERVED 2 1\r\nx\r\n");
}

#[test]
fn scenario_pause_end_serves_waiters() {
    let mut h = scripted();
    h.connect_n(2);
    h.go(put(1, 0, 0, 60));
    h.go(Op::PauseTube(Some("default"), 3));
    h.go(Op::Advance(NS));
    assert_eq!(h.go(Op::Reserve(2, None)), "");
    h.go(Op::Advance(NS + NS / 2));
    assert!(h.woke.is_empty());
    h.go(Op::Advance(NS));
    assert_eq!(h.woke, vec![(2, "RESERVED 1 1\r\nx\r\n".to_string())]);
    assert_eq!(h.now, 3 * NS + NS / 2);
}

#[test]
fn scenario_ids_are_used_up_by_failed_puts() {
    let mut h = scripted();
    h.connect_n(1);
    assert_eq!(h.go(put(1, 0, 0, 1)), "INSERTED 1\r\n");
    h.go(Op::Put {
        c: 1,
        kind: PutKind::ExpectedCrlf,
        pri: 0,
        delay: 0,
        ttr: 1,
        created_ago: 0,
        body: vec![],
        key: None,
    });
    h.go(Op::Put {
        c: 1,
        kind: PutKind::TooBig,
        pri: 0,
        delay: 0,
        ttr: 1,
        created_ago: 0,
        body: vec![],
        key: None,
    });
    h.go(Op::Put {
        c: 1,
        kind: PutKind::Junk,
        pri: 0,
        delay: 0,
        ttr: 1,
        created_ago: 0,
        body: vec![],
        key: None,
    });
    assert_eq!(h.go(put(1, 0, 0, 1)), "INSERTED 3\r\n");
    h.go(Op::Drain);
    assert_eq!(h.go(put(1, 0, 0, 1)), "DRAINING\r\n");
    assert_eq!(h.model.next_job_id, 5);
    assert_eq!(h.model.cmds.put, 6);
}
