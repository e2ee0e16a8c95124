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
use std::sync::{Arc, Condvar};

use beanstalk::engine::{Engine, NewJob};
use beanstalk::protocol::{Reply, TubeName};
use beanstalk::stats::{BinlogStats, CommandCounts, JobCounts, ProcessStats, ServerStats};
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

// -------------------------------------------------------------------------
// Random numbers
// -------------------------------------------------------------------------

/// xorshift64*, seeded through splitmix64 so that small seeds spread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 1 } else { z })
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias does not matter here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

// -------------------------------------------------------------------------
// The reference model
// -------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Ready,
    Delayed,
    Reserved,
    Buried,
}

impl St {
    fn name(self) -> &'static str {
        match self {
            St::Ready => "ready",
            St::Delayed => "delayed",
            St::Reserved => "reserved",
            St::Buried => "buried",
        }
    }
}

#[derive(Debug, Clone)]
struct MJob {
    id: u64,
    tube: String,
    pri: u32,
    delay: u32,
    ttr: u32,
    state: St,
    /// Delayed: when it becomes ready. Reserved: when its TTR runs out.
    deadline: u64,
    reserved_by: u64,
    /// Order of burying (the buried list is FIFO by this).
    bury_seq: u64,
    reserves: u32,
    timeouts: u32,
    releases: u32,
    buries: u32,
    kicks: u32,
    created: u64,
    body: Vec<u8>,
}

#[derive(Debug, Clone)]
struct MTube {
    name: String,
    total_jobs: u64,
    cmd_delete: u64,
    cmd_pause_tube: u64,
    /// `(seconds asked for, unpause time)`.
    pause: Option<(u32, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Reserved(u64),
    DeadlineSoon,
    TimedOut,
}

#[derive(Debug, Clone)]
struct MClient {
    id: u64,
    used: String,
    watched: Vec<String>,
    /// Reserved job ids in reservation order.
    reserved: Vec<u64>,
    producer: bool,
    worker: bool,
    hung_up: bool,
    /// Blocked in reserve.
    waiting: bool,
    timeout_at: Option<u64>,
    /// How the last blocked reserve ended, until collected by `check_wait`.
    outcome: Option<Outcome>,
}

#[derive(Debug, Default)]
struct Model {
    jobs: Vec<MJob>,
    /// In `list-tubes` order.
    tubes: Vec<MTube>,
    clients: Vec<MClient>,
    /// Blocked clients, longest waiter first.
    waiters: Vec<u64>,
    next_job_id: u64,
    next_client_id: u64,
    next_bury_seq: u64,
    total_connections: u64,
    cmds: CommandCounts,
    job_timeouts: u64,
    total_jobs: u64,
    draining: bool,
    /// Jobs changed (or named) since the harness last looked.
    touched: Vec<u64>,
}

fn line(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.extend_from_slice(b"\r\n");
    v
}

fn with_data(head: String, data: &[u8]) -> Vec<u8> {
    let mut v = head.into_bytes();
    v.extend_from_slice(b"\r\n");
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    v
}

fn ok_yaml(yaml: &str) -> Vec<u8> {
    with_data(format!("OK {}", yaml.len()), yaml.as_bytes())
}

fn list_yaml<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let mut y = String::from("---\n");
    for n in names {
        let _ = writeln!(y, "- {n}");
    }
    y
}

impl Model {
    fn new() -> Model {
        Model {
            tubes: vec![MTube {
                name: "default".into(),
                total_jobs: 0,
                cmd_delete: 0,
                cmd_pause_tube: 0,
                pause: None,
            }],
            next_job_id: 1,
            next_client_id: 1,
            ..Model::default()
        }
    }

    // --- lookups, all linear scans ---

    fn job(&self, id: u64) -> Option<&MJob> {
        self.jobs.iter().find(|j| j.id == id)
    }

    fn job_mut(&mut self, id: u64) -> &mut MJob {
        self.jobs.iter_mut().find(|j| j.id == id).expect("model job")
    }

    fn client(&self, c: u64) -> &MClient {
        self.clients.iter().find(|cl| cl.id == c).expect("model client")
    }

    fn client_mut(&mut self, c: u64) -> &mut MClient {
        self.clients.iter_mut().find(|cl| cl.id == c).expect("model client")
    }

    fn tube(&self, name: &str) -> Option<&MTube> {
        self.tubes.iter().find(|t| t.name == name)
    }

    fn tube_mut(&mut self, name: &str) -> &mut MTube {
        self.tubes.iter_mut().find(|t| t.name == name).expect("model tube")
    }

    fn is_waiting(&self, c: u64) -> bool {
        self.clients.iter().any(|cl| cl.id == c && cl.waiting)
    }

    fn paused(&self, name: &str) -> bool {
        self.tube(name).is_some_and(|t| t.pause.is_some())
    }

    fn ready_head(&self, tube: &str) -> Option<(u32, u64)> {
        self.jobs.iter().filter(|j| j.tube == tube && j.state == St::Ready).map(|j| (j.pri, j.id)).min()
    }

    fn delayed_head(&self, tube: &str) -> Option<u64> {
        let head = self.jobs.iter().filter(|j| j.tube == tube && j.state == St::Delayed);
        head.map(|j| (j.deadline, j.id)).min().map(|(_, id)| id)
    }

    fn buried_head(&self, tube: &str) -> Option<u64> {
        let head = self.jobs.iter().filter(|j| j.tube == tube && j.state == St::Buried);
        head.map(|j| (j.bury_seq, j.id)).min().map(|(_, id)| id)
    }

    fn find_or_create(&mut self, name: &str) {
        if self.tube(name).is_none() {
            self.tubes.push(MTube {
                name: name.into(),
                total_jobs: 0,
                cmd_delete: 0,
                cmd_pause_tube: 0,
                pause: None,
            });
        }
    }

    /// reference §5.2: destroyed at once when nothing refers to it; swap-remove
    /// from the tube list (5.3).
    fn maybe_destroy(&mut self, name: &str) {
        if name == "default" {
            return;
        }
        let used = self.clients.iter().any(|cl| cl.used == name || cl.watched.iter().any(|w| w == name));
        let has_jobs = self.jobs.iter().any(|j| j.tube == name);
        if !used && !has_jobs {
            if let Some(i) = self.tubes.iter().position(|t| t.name == name) {
                self.tubes.swap_remove(i);
            }
        }
    }

    /// When the soonest of `c`'s reservations enters its safety margin.
    fn margin_of(&self, c: u64) -> Option<u64> {
        let cl = self.client(c);
        cl.reserved.iter().filter_map(|&id| self.job(id)).map(|j| j.deadline.saturating_sub(NS)).min()
    }

    fn wake_time(&self, c: u64) -> Option<u64> {
        let cl = self.client(c);
        if !cl.waiting {
            return None;
        }
        match (cl.timeout_at, self.margin_of(c)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // --- moving jobs ---

    fn unreserve(&mut self, id: u64) {
        let holder = self.job(id).map(|j| j.reserved_by).unwrap_or(0);
        if let Some(cl) = self.clients.iter_mut().find(|cl| cl.id == holder) {
            cl.reserved.retain(|&r| r != id);
        }
    }

    fn reserve_for(&mut self, c: u64, id: u64, now: u64) {
        let j = self.job_mut(id);
        j.state = St::Reserved;
        j.reserved_by = c;
        j.deadline = now.saturating_add(u64::from(j.ttr) * NS);
        j.reserves += 1;
        self.client_mut(c).reserved.push(id);
        self.touched.push(id);
    }

    fn end_wait(&mut self, c: u64, outcome: Outcome) {
        self.waiters.retain(|&w| w != c);
        let cl = self.client_mut(c);
        cl.waiting = false;
        cl.timeout_at = None;
        cl.outcome = Some(outcome);
    }

    /// reference §4.1, one pass: over every unpaused tube with both a waiter and
    /// a ready job, take the best `(pri, id)` head and give it to that
    /// tube's longest waiter; repeat.
    fn dispatch(&mut self, now: u64) {
        loop {
            let mut best: Option<(u32, u64, String)> = None;
            for t in &self.tubes {
                if t.pause.is_some() {
                    continue;
                }
                if !self.waiters.iter().any(|&w| self.client(w).watched.contains(&t.name)) {
                    continue;
                }
                if let Some((pri, id)) = self.ready_head(&t.name) {
                    if best.as_ref().is_none_or(|b| (pri, id) < (b.0, b.1)) {
                        best = Some((pri, id, t.name.clone()));
                    }
                }
            }
            let Some((_, id, tube)) = best else { return };
            let w = *self.waiters.iter().find(|&&w| self.client(w).watched.contains(&tube)).expect("waiter");
            self.end_wait(w, Outcome::Reserved(id));
            self.reserve_for(w, id, now);
        }
    }

    fn make_ready(&mut self, id: u64, now: u64) {
        self.job_mut(id).state = St::Ready;
        self.touched.push(id);
        self.dispatch(now);
    }

    fn reserved_reply(&self, id: u64) -> Vec<u8> {
        let j = self.job(id).expect("reserved job");
        with_data(format!("RESERVED {} {}", id, j.body.len()), &j.body)
    }

    fn found(&self, id: Option<u64>) -> Vec<u8> {
        match id.and_then(|id| self.job(id)) {
            Some(j) => with_data(format!("FOUND {} {}", j.id, j.body.len()), &j.body),
            None => line("NOT_FOUND"),
        }
    }

    // --- clients ---

    fn connect(&mut self) -> u64 {
        let id = self.next_client_id;
        self.next_client_id += 1;
        self.total_connections += 1;
        self.clients.push(MClient {
            id,
            used: "default".into(),
            watched: vec!["default".into()],
            reserved: Vec::new(),
            producer: false,
            worker: false,
            hung_up: false,
            waiting: false,
            timeout_at: None,
            outcome: None,
        });
        id
    }

    fn disconnect(&mut self, c: u64, now: u64) {
        self.waiters.retain(|&w| w != c);
        self.client_mut(c).waiting = false;
        // Reservations go back to ready in reservation order, one at a time
        // (reference §4.5, 4.1), counters untouched.
        while let Some(&id) = self.client(c).reserved.first() {
            self.client_mut(c).reserved.remove(0);
            self.make_ready(id, now);
        }
        // The watch list is emptied by removing index 0 over and over
        // (swap-remove), tubes vanishing in that order; then the used tube.
        while !self.client(c).watched.is_empty() {
            let t = self.client_mut(c).watched.swap_remove(0);
            self.maybe_destroy(&t);
        }
        let used = self.client(c).used.clone();
        self.clients.retain(|cl| cl.id != c);
        self.maybe_destroy(&used);
    }

    fn hang_up(&mut self, c: u64) {
        self.client_mut(c).hung_up = true;
        if self.client(c).waiting {
            self.end_wait(c, Outcome::TimedOut);
        }
    }

    // --- commands ---

    fn count_put(&mut self) {
        self.cmds.put += 1;
    }

    fn start_put(&mut self, c: u64) -> u64 {
        self.client_mut(c).producer = true;
        let id = self.next_job_id;
        self.next_job_id += 1;
        id
    }

    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        c: u64,
        id: u64,
        pri: u32,
        delay: u32,
        ttr: u32,
        created: u64,
        body: &[u8],
        now: u64,
    ) -> Vec<u8> {
        if self.draining {
            return line("DRAINING");
        }
        let tube = self.client(c).used.clone();
        self.tube_mut(&tube).total_jobs += 1;
        self.total_jobs += 1;
        self.jobs.push(MJob {
            id,
            tube,
            pri,
            delay,
            ttr: ttr.max(1),
            state: if delay > 0 { St::Delayed } else { St::Ready },
            deadline: now.saturating_add(u64::from(delay) * NS),
            reserved_by: 0,
            bury_seq: 0,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
            created,
            body: body.to_vec(),
        });
        self.touched.push(id);
        if delay == 0 {
            self.dispatch(now);
        }
        line(&format!("INSERTED {id}"))
    }

    fn use_tube(&mut self, c: u64, name: &str) -> Vec<u8> {
        self.cmds.use_ += 1;
        self.find_or_create(name);
        let old = std::mem::replace(&mut self.client_mut(c).used, name.into());
        self.maybe_destroy(&old);
        line(&format!("USING {name}"))
    }

    fn watch(&mut self, c: u64, name: &str) -> Vec<u8> {
        self.cmds.watch += 1;
        self.find_or_create(name);
        let cl = self.client_mut(c);
        if !cl.watched.iter().any(|w| w == name) {
            cl.watched.push(name.into());
        }
        line(&format!("WATCHING {}", cl.watched.len()))
    }

    fn ignore(&mut self, c: u64, name: &str) -> Vec<u8> {
        self.cmds.ignore += 1;
        let cl = self.client_mut(c);
        let Some(i) = cl.watched.iter().position(|w| w == name) else {
            return line(&format!("WATCHING {}", cl.watched.len()));
        };
        if cl.watched.len() == 1 {
            return line("NOT_IGNORED");
        }
        cl.watched.swap_remove(i);
        let n = cl.watched.len();
        self.maybe_destroy(name);
        line(&format!("WATCHING {n}"))
    }

    fn reserve(&mut self, c: u64, timeout: Option<u32>, now: u64) -> Option<Vec<u8>> {
        match timeout {
            None => self.cmds.reserve += 1,
            Some(_) => self.cmds.reserve_with_timeout += 1,
        }
        self.client_mut(c).worker = true;
        let in_margin = self.margin_of(c).is_some_and(|m| now >= m);
        let watched = self.client(c).watched.clone();
        // The margin test ignores pause (reference §3.3 step 3).
        let any_ready = watched.iter().any(|t| self.ready_head(t).is_some());
        if in_margin && !any_ready {
            return Some(line("DEADLINE_SOON"));
        }
        let best = watched.iter().filter(|t| !self.paused(t)).filter_map(|t| self.ready_head(t)).min();
        if let Some((_, id)) = best {
            self.reserve_for(c, id, now);
            return Some(self.reserved_reply(id));
        }
        if in_margin {
            // Only paused tubes have ready jobs: DEADLINE_SOON via the wait.
            return Some(line("DEADLINE_SOON"));
        }
        if self.client(c).hung_up || timeout == Some(0) {
            return Some(line("TIMED_OUT"));
        }
        let cl = self.client_mut(c);
        cl.waiting = true;
        cl.timeout_at = timeout.map(|s| now + u64::from(s) * NS);
        cl.outcome = None;
        self.waiters.push(c);
        None
    }

    fn check_wait(&mut self, c: u64, now: u64) -> Option<Vec<u8>> {
        let cl = self.client(c);
        if cl.outcome.is_none() {
            if !cl.waiting {
                return None;
            }
            let timeout_at = cl.timeout_at;
            if self.margin_of(c).is_some_and(|m| now >= m) {
                self.end_wait(c, Outcome::DeadlineSoon);
            } else if timeout_at.is_some_and(|t| now >= t) {
                self.end_wait(c, Outcome::TimedOut);
            } else {
                return None;
            }
        }
        match self.client_mut(c).outcome.take()? {
            Outcome::Reserved(id) => Some(self.reserved_reply(id)),
            Outcome::DeadlineSoon => Some(line("DEADLINE_SOON")),
            Outcome::TimedOut => Some(line("TIMED_OUT")),
        }
    }

    fn reserve_job(&mut self, c: u64, id: u64, now: u64) -> Vec<u8> {
        self.touched.push(id);
        match self.job(id) {
            None => return line("NOT_FOUND"),
            Some(j) if j.state == St::Reserved => return line("NOT_FOUND"),
            Some(_) => {}
        }
        self.client_mut(c).worker = true;
        self.reserve_for(c, id, now);
        self.reserved_reply(id)
    }

    fn reserved_by(&self, id: u64, c: u64) -> bool {
        self.job(id).is_some_and(|j| j.state == St::Reserved && j.reserved_by == c)
    }

    fn delete(&mut self, c: u64, id: u64) -> Vec<u8> {
        self.cmds.delete += 1;
        self.touched.push(id);
        let Some(j) = self.job(id) else { return line("NOT_FOUND") };
        if j.state == St::Reserved && j.reserved_by != c {
            return line("NOT_FOUND");
        }
        let tube = j.tube.clone();
        if j.state == St::Reserved {
            self.unreserve(id);
        }
        self.jobs.retain(|j| j.id != id);
        self.tube_mut(&tube).cmd_delete += 1;
        self.maybe_destroy(&tube);
        line("DELETED")
    }

    fn release(&mut self, c: u64, id: u64, pri: u32, delay: u32, now: u64) -> Vec<u8> {
        self.cmds.release += 1;
        self.touched.push(id);
        if !self.reserved_by(id, c) {
            return line("NOT_FOUND");
        }
        self.unreserve(id);
        let j = self.job_mut(id);
        j.pri = pri;
        j.delay = delay;
        j.releases += 1;
        if delay > 0 {
            j.state = St::Delayed;
            j.deadline = now.saturating_add(u64::from(delay) * NS);
        } else {
            self.make_ready(id, now);
        }
        line("RELEASED")
    }

    fn bury(&mut self, c: u64, id: u64, pri: u32) -> Vec<u8> {
        self.cmds.bury += 1;
        self.touched.push(id);
        if !self.reserved_by(id, c) {
            return line("NOT_FOUND");
        }
        self.unreserve(id);
        let seq = self.next_bury_seq;
        self.next_bury_seq += 1;
        let j = self.job_mut(id);
        j.pri = pri;
        j.buries += 1;
        j.state = St::Buried;
        j.bury_seq = seq;
        line("BURIED")
    }

    fn touch(&mut self, c: u64, id: u64, now: u64) -> Vec<u8> {
        self.cmds.touch += 1;
        self.touched.push(id);
        if !self.reserved_by(id, c) {
            return line("NOT_FOUND");
        }
        let j = self.job_mut(id);
        j.deadline = now.saturating_add(u64::from(j.ttr) * NS);
        line("TOUCHED")
    }

    fn peek(&mut self, id: u64) -> Vec<u8> {
        self.cmds.peek += 1;
        self.found(Some(id))
    }

    fn peek_ready(&mut self, c: u64) -> Vec<u8> {
        self.cmds.peek_ready += 1;
        let t = self.client(c).used.clone();
        self.found(self.ready_head(&t).map(|(_, id)| id))
    }

    fn peek_delayed(&mut self, c: u64) -> Vec<u8> {
        self.cmds.peek_delayed += 1;
        let t = self.client(c).used.clone();
        self.found(self.delayed_head(&t))
    }

    fn peek_buried(&mut self, c: u64) -> Vec<u8> {
        self.cmds.peek_buried += 1;
        let t = self.client(c).used.clone();
        self.found(self.buried_head(&t))
    }

    fn kick_one(&mut self, id: u64, now: u64) {
        self.job_mut(id).kicks += 1;
        self.make_ready(id, now);
    }

    fn kick(&mut self, c: u64, bound: u32, now: u64) -> Vec<u8> {
        self.cmds.kick += 1;
        let t = self.client(c).used.clone();
        let from_buried = self.buried_head(&t).is_some();
        let mut kicked = 0;
        while kicked < bound {
            let next = if from_buried { self.buried_head(&t) } else { self.delayed_head(&t) };
            let Some(id) = next else { break };
            self.kick_one(id, now);
            kicked += 1;
        }
        line(&format!("KICKED {kicked}"))
    }

    fn kick_job(&mut self, id: u64, now: u64) -> Vec<u8> {
        self.touched.push(id);
        match self.job(id).map(|j| j.state) {
            Some(St::Buried | St::Delayed) => {
                self.kick_one(id, now);
                line("KICKED")
            }
            _ => line("NOT_FOUND"),
        }
    }

    fn stats_job(&mut self, id: u64, now: u64) -> Vec<u8> {
        self.cmds.stats_job += 1;
        let Some(j) = self.job(id) else { return line("NOT_FOUND") };
        let time_left = match j.state {
            St::Reserved | St::Delayed => j.deadline.saturating_sub(now) / NS,
            St::Ready | St::Buried => 0,
        };
        let yaml = format!(
            "---\nid: {}\ntube: \"{}\"\nstate: {}\npri: {}\nage: {}\ndelay: {}\nttr: {}\ntime-left: {}\n\
             file: 0\nreserves: {}\ntimeouts: {}\nreleases: {}\nburies: {}\nkicks: {}\n",
            j.id,
            j.tube,
            j.state.name(),
            j.pri,
            now.saturating_sub(j.created) / NS,
            j.delay,
            j.ttr,
            time_left,
            j.reserves,
            j.timeouts,
            j.releases,
            j.buries,
            j.kicks
        );
        ok_yaml(&yaml)
    }

    fn job_counts<'a>(jobs: impl Iterator<Item = &'a MJob>) -> JobCounts {
        let mut n = JobCounts::default();
        for j in jobs {
            match j.state {
                St::Ready => {
                    n.ready += 1;
                    n.urgent += usize::from(j.pri < 1024);
                }
                St::Reserved => n.reserved += 1,
                St::Delayed => n.delayed += 1,
                St::Buried => n.buried += 1,
            }
        }
        n
    }

    fn stats_tube(&mut self, name: &str, now: u64) -> Vec<u8> {
        self.cmds.stats_tube += 1;
        let Some(t) = self.tube(name) else { return line("NOT_FOUND") };
        let n = Model::job_counts(self.jobs.iter().filter(|j| j.tube == name));
        let using = self.clients.iter().filter(|cl| cl.used == name).count();
        let watching = self.clients.iter().filter(|cl| cl.watched.iter().any(|w| w == name)).count();
        let waiting =
            self.waiters.iter().filter(|&&w| self.client(w).watched.iter().any(|x| x == name)).count();
        let (pause, left) = match t.pause {
            Some((secs, until)) => (secs, until.saturating_sub(now) / NS),
            None => (0, 0),
        };
        let yaml = format!(
            "---\nname: \"{}\"\ncurrent-jobs-urgent: {}\ncurrent-jobs-ready: {}\ncurrent-jobs-reserved: {}\n\
             current-jobs-delayed: {}\ncurrent-jobs-buried: {}\ntotal-jobs: {}\ncurrent-using: {}\n\
             current-watching: {}\ncurrent-waiting: {}\ncmd-delete: {}\ncmd-pause-tube: {}\npause: {}\n\
             pause-time-left: {}\n",
            t.name,
            n.urgent,
            n.ready,
            n.reserved,
            n.delayed,
            n.buried,
            t.total_jobs,
            using,
            watching,
            waiting,
            t.cmd_delete,
            t.cmd_pause_tube,
            pause,
            left
        );
        ok_yaml(&yaml)
    }

    fn server_stats(&mut self) -> ServerStats {
        self.cmds.stats += 1;
        ServerStats {
            jobs: Model::job_counts(self.jobs.iter()),
            cmds: self.cmds,
            job_timeouts: self.job_timeouts,
            total_jobs: self.total_jobs,
            max_job_size: MAX_JOB_SIZE,
            current_tubes: self.tubes.len(),
            current_connections: self.clients.len(),
            producers: self.clients.iter().filter(|cl| cl.producer).count(),
            workers: self.clients.iter().filter(|cl| cl.worker).count(),
            waiting: self.waiters.len(),
            total_connections: self.total_connections,
            draining: self.draining,
        }
    }

    fn list_tubes(&mut self) -> Vec<u8> {
        self.cmds.list_tubes += 1;
        ok_yaml(&list_yaml(self.tubes.iter().map(|t| &t.name)))
    }

    fn list_tube_used(&mut self, c: u64) -> Vec<u8> {
        self.cmds.list_tube_used += 1;
        line(&format!("USING {}", self.client(c).used))
    }

    fn list_tubes_watched(&mut self, c: u64) -> Vec<u8> {
        self.cmds.list_tubes_watched += 1;
        ok_yaml(&list_yaml(self.client(c).watched.iter()))
    }

    fn pause_tube(&mut self, name: Option<&str>, delay: u32, now: u64) -> Vec<u8> {
        self.cmds.pause_tube += 1;
        let Some(name) = name else { return line("BAD_FORMAT") };
        if self.tube(name).is_none() {
            return line("NOT_FOUND");
        }
        let t = self.tube_mut(name);
        t.cmd_pause_tube += 1;
        if delay == 0 {
            // Stored as a 1 ns pause: unpaused at once, waiters served.
            t.pause = None;
            self.dispatch(now);
        } else {
            t.pause = Some((delay, now.saturating_add(u64::from(delay) * NS)));
        }
        line("PAUSED")
    }

    /// Everything due at `now`, in the engine's documented order for events
    /// falling at the same instant: expired TTRs by `(deadline, id)`, then
    /// per tube in list order its matured delayed jobs by `(deadline, id)`
    /// and the end of its pause; a dispatcher pass after each job.
    fn tick(&mut self, now: u64) -> Option<u64> {
        loop {
            let due = self.jobs.iter().filter(|j| j.state == St::Reserved && j.deadline <= now);
            let Some((_, id)) = due.map(|j| (j.deadline, j.id)).min() else { break };
            self.unreserve(id);
            self.job_mut(id).timeouts += 1;
            self.job_timeouts += 1;
            self.make_ready(id, now);
        }
        let names: Vec<String> = self.tubes.iter().map(|t| t.name.clone()).collect();
        for name in names {
            loop {
                let due = self.jobs.iter().filter(|j| j.tube == name && j.state == St::Delayed);
                let due = due.filter(|j| j.deadline <= now).map(|j| (j.deadline, j.id)).min();
                let Some((_, id)) = due else { break };
                self.make_ready(id, now);
            }
            let t = self.tube_mut(&name);
            if t.pause.is_some_and(|(_, until)| until <= now) {
                t.pause = None;
                self.dispatch(now);
            }
        }
        self.next_due()
    }

    fn next_due(&self) -> Option<u64> {
        let jobs = self.jobs.iter().filter(|j| matches!(j.state, St::Reserved | St::Delayed));
        let pauses = self.tubes.iter().filter_map(|t| t.pause.map(|(_, until)| until));
        jobs.map(|j| j.deadline).chain(pauses).min()
    }
}

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
    Connect { slot: usize },
    Disconnect(u64),
    HangUp(u64),
    Put { c: u64, kind: PutKind, pri: u32, delay: u32, ttr: u32, created_ago: u64, body: Vec<u8> },
    Use(u64, &'static str),
    Watch(u64, &'static str),
    Ignore(u64, &'static str),
    Reserve(u64, Option<u32>),
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
    Drain,
    Advance(u64),
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
fn process_stats() -> ProcessStats {
    ProcessStats {
        pid: 1,
        version: "test",
        user_cpu: Default::default(),
        system_cpu: Default::default(),
        uptime_secs: 0,
        binlog: BinlogStats::default(),
        instance_id: "0".into(),
        hostname: "h".into(),
        os: "o".into(),
        platform: "p".into(),
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
            engine: Engine::new(MAX_JOB_SIZE),
            model: Model::new(),
            slots: [None; SLOTS],
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
            // A blocked client can only hang up or (rarely) be closed.
            if self.rng.chance(30) {
                return Op::HangUp(c);
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
                Op::Put { c, kind, pri, delay, ttr, created_ago, body }
            }
            200..=329 => {
                let timeout = match self.rng.below(100) {
                    0..=34 => None,
                    35..=64 => Some(0),
                    _ => Some(1 + self.rng.below(3) as u32),
                };
                Op::Reserve(c, timeout)
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
            _ => self.gen_advance(),
        }
    }

    // --- applying operations to both ---

    fn apply(&mut self, op: &Op) {
        let now = self.now;
        match *op {
            Op::Connect { slot } => {
                let e = self.engine.connect(Arc::new(Condvar::new()));
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
                self.engine.disconnect(c, self.t());
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
                self.engine.hang_up(c);
                self.model.hang_up(c);
                self.note("hang_up".into());
            }
            Op::Put { c, kind, pri, delay, ttr, created_ago, ref body } => {
                self.engine.count_put();
                self.model.count_put();
                if matches!(kind, PutKind::TooBig | PutKind::Junk) {
                    self.note(format!("put {kind:?}"));
                    return;
                }
                let e_id = self.engine.start_put(c, body.len() as u32).expect("no memory limit is set");
                let m_id = self.model.start_put(c);
                if e_id != m_id {
                    self.fail("start_put", format!("engine id {e_id}, model {m_id}"));
                }
                if kind == PutKind::ExpectedCrlf {
                    self.engine.cancel_put(body.len() as u32);
                    self.note("put ExpectedCrlf".into());
                    return;
                }
                let created = now.saturating_sub(created_ago);
                let job = NewJob {
                    id: e_id,
                    pri,
                    delay,
                    ttr,
                    created: Time(created),
                    body: body.clone().into_boxed_slice(),
                };
                let e = enc(&self.engine.put(c, job, self.t()));
                let m = self.model.put(c, m_id, pri, delay, ttr, created, body, now);
                self.cmp("put", &e, &m);
            }
            Op::Use(c, t) => {
                let e = enc(&self.engine.use_tube(c, &name(t)));
                let m = self.model.use_tube(c, t);
                self.cmp("use", &e, &m);
            }
            Op::Watch(c, t) => {
                let e = enc(&self.engine.watch(c, &name(t)));
                let m = self.model.watch(c, t);
                self.cmp("watch", &e, &m);
            }
            Op::Ignore(c, t) => {
                let e = enc(&self.engine.ignore(c, &name(t)));
                let m = self.model.ignore(c, t);
                self.cmp("ignore", &e, &m);
            }
            Op::Reserve(c, timeout) => {
                let e = self.engine.reserve(c, timeout, self.t()).map(|r| enc(&r));
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
            Op::ReserveJob(c, id) => {
                let e = enc(&self.engine.reserve_job(c, id, self.t()));
                let m = self.model.reserve_job(c, id, now);
                self.cmp("reserve-job", &e, &m);
            }
            Op::Delete(c, id) => {
                let e = enc(&self.engine.delete(c, id));
                let m = self.model.delete(c, id);
                self.cmp("delete", &e, &m);
            }
            Op::Release(c, id, pri, delay) => {
                let e = enc(&self.engine.release(c, id, pri, delay, self.t()));
                let m = self.model.release(c, id, pri, delay, now);
                self.cmp("release", &e, &m);
            }
            Op::Bury(c, id, pri) => {
                let e = enc(&self.engine.bury(c, id, pri, self.t()));
                let m = self.model.bury(c, id, pri);
                self.cmp("bury", &e, &m);
            }
            Op::Touch(c, id) => {
                let e = enc(&self.engine.touch(c, id, self.t()));
                let m = self.model.touch(c, id, now);
                self.cmp("touch", &e, &m);
            }
            Op::Peek(id) => {
                let e = enc(&self.engine.peek(id));
                let m = self.model.peek(id);
                self.cmp("peek", &e, &m);
            }
            Op::PeekReady(c) => {
                let e = enc(&self.engine.peek_ready(c));
                let m = self.model.peek_ready(c);
                self.cmp("peek-ready", &e, &m);
            }
            Op::PeekDelayed(c) => {
                let e = enc(&self.engine.peek_delayed(c));
                let m = self.model.peek_delayed(c);
                self.cmp("peek-delayed", &e, &m);
            }
            Op::PeekBuried(c) => {
                let e = enc(&self.engine.peek_buried(c));
                let m = self.model.peek_buried(c);
                self.cmp("peek-buried", &e, &m);
            }
            Op::Kick(c, bound) => {
                let e = enc(&self.engine.kick(c, bound, self.t()));
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
                let e = enc(&self.engine.list_tube_used(c));
                let m = self.model.list_tube_used(c);
                self.cmp("list-tube-used", &e, &m);
            }
            Op::ListTubesWatched(c) => {
                let e = enc(&self.engine.list_tubes_watched(c));
                let m = self.model.list_tubes_watched(c);
                self.cmp("list-tubes-watched", &e, &m);
            }
            Op::PauseTube(t, delay) => {
                let tube = t.map(name);
                let e = enc(&self.engine.pause_tube(tube.as_ref(), delay, self.t()));
                let m = self.model.pause_tube(t, delay, now);
                self.cmp(if delay == 0 { "pause-tube-0" } else { "pause-tube" }, &e, &m);
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
            let e = self.engine.check_wait(c, self.t()).map(|r| enc(&r));
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
        let e = self.engine.server_stats().to_yaml(&process_stats());
        let m = self.model.server_stats().to_yaml(&process_stats());
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
            let e = self.engine.wake_time(c).map(|t| t.0);
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
    }

    fn assert_coverage(&self) {
        let must = [
            "put INSERTED",
            "reserve RESERVED",
            "reserve DEADLINE_SOON",
            "reserve (blocks)",
            "reserve-with-timeout (blocks)",
            "reserve-with-timeout-0 TIMED_OUT",
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
    Op::Put { c, kind: PutKind::Ok, pri, delay, ttr, created_ago: 0, body: b"x".to_vec() }
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
    });
    h.go(Op::Put { c: 1, kind: PutKind::TooBig, pri: 0, delay: 0, ttr: 1, created_ago: 0, body: vec![] });
    h.go(Op::Put { c: 1, kind: PutKind::Junk, pri: 0, delay: 0, ttr: 1, created_ago: 0, body: vec![] });
    assert_eq!(h.go(put(1, 0, 0, 1)), "INSERTED 3\r\n");
    h.go(Op::Drain);
    assert_eq!(h.go(put(1, 0, 0, 1)), "DRAINING\r\n");
    assert_eq!(h.model.next_job_id, 5);
    assert_eq!(h.model.cmds.put, 6);
}
