//! The reference model: the engine's behaviour written as plainly as
//! possible, straight from the protocol reference (`src/reference.md`
//! §2-6). Plain `Vec`s, linear scans, and whole-state recomputation: slow,
//! obviously right, and sharing no code with the engine, so that the two
//! can only agree by both being right. The driver in `../model.rs` runs
//! both side by side and compares every reply.

use std::fmt::Write as _;

use beanstalk::stats::{CommandCounts, JobCounts, ServerStats};

use super::{MAX_JOB_SIZE, NS};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum St {
    Ready,
    Delayed,
    Reserved,
    Buried,
}

impl St {
    pub fn name(self) -> &'static str {
        match self {
            St::Ready => "ready",
            St::Delayed => "delayed",
            St::Reserved => "reserved",
            St::Buried => "buried",
        }
    }
}

#[derive(Debug, Clone)]
pub struct MJob {
    pub id: u64,
    pub tube: String,
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    pub state: St,
    /// Delayed: when it becomes ready. Reserved: when its TTR runs out.
    pub deadline: u64,
    pub reserved_by: u64,
    /// Order of burying (the buried list is FIFO by this).
    pub bury_seq: u64,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
    pub created: u64,
    pub body: Vec<u8>,
    /// Unique key and its cooldown (reference §3.1a).
    pub key: Option<(String, u32)>,
}

#[derive(Debug, Clone)]
pub struct MTube {
    pub name: String,
    pub total_jobs: u64,
    pub cmd_delete: u64,
    pub cmd_pause_tube: u64,
    /// `(seconds asked for, unpause time)`.
    pub pause: Option<(u32, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Reserved(u64),
    DeadlineSoon,
    TimedOut,
    Aborted,
}

#[derive(Debug, Clone)]
pub struct MClient {
    pub id: u64,
    pub used: String,
    pub watched: Vec<String>,
    /// Reserved job ids in reservation order.
    pub reserved: Vec<u64>,
    pub producer: bool,
    pub worker: bool,
    pub hung_up: bool,
    /// Blocked in reserve.
    pub waiting: bool,
    pub timeout_at: Option<u64>,
    /// The blocked reserve is a `reserve-with-abort` (reference §3.3a).
    pub abortable: bool,
    /// How the last blocked reserve ended, until collected by `check_wait`.
    pub outcome: Option<Outcome>,
}

#[derive(Debug, Default)]
pub struct Model {
    pub jobs: Vec<MJob>,
    /// In `list-tubes` order.
    pub tubes: Vec<MTube>,
    pub clients: Vec<MClient>,
    /// Blocked clients, longest waiter first.
    pub waiters: Vec<u64>,
    pub next_job_id: u64,
    pub next_client_id: u64,
    pub next_bury_seq: u64,
    pub total_connections: u64,
    pub cmds: CommandCounts,
    pub job_timeouts: u64,
    pub total_jobs: u64,
    pub draining: bool,
    /// Jobs changed (or named) since the harness last looked.
    pub touched: Vec<u64>,
    /// Keys cooling down after their job's delete: `(tube, key, job, end)`.
    pub cooling: Vec<(String, String, u64, u64)>,
}

pub fn line(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.extend_from_slice(b"\r\n");
    v
}

pub fn with_data(head: String, data: &[u8]) -> Vec<u8> {
    let mut v = head.into_bytes();
    v.extend_from_slice(b"\r\n");
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    v
}

pub fn ok_yaml(yaml: &str) -> Vec<u8> {
    with_data(format!("OK {}", yaml.len()), yaml.as_bytes())
}

pub fn list_yaml<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let mut y = String::from("---\n");
    for n in names {
        let _ = writeln!(y, "- {n}");
    }
    y
}

impl Model {
    pub fn new() -> Model {
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

    pub fn job(&self, id: u64) -> Option<&MJob> {
        self.jobs.iter().find(|j| j.id == id)
    }

    pub fn job_mut(&mut self, id: u64) -> &mut MJob {
        self.jobs.iter_mut().find(|j| j.id == id).expect("model job")
    }

    pub fn client(&self, c: u64) -> &MClient {
        self.clients.iter().find(|cl| cl.id == c).expect("model client")
    }

    pub fn client_mut(&mut self, c: u64) -> &mut MClient {
        self.clients.iter_mut().find(|cl| cl.id == c).expect("model client")
    }

    pub fn tube(&self, name: &str) -> Option<&MTube> {
        self.tubes.iter().find(|t| t.name == name)
    }

    pub fn tube_mut(&mut self, name: &str) -> &mut MTube {
        self.tubes.iter_mut().find(|t| t.name == name).expect("model tube")
    }

    pub fn is_waiting(&self, c: u64) -> bool {
        self.clients.iter().any(|cl| cl.id == c && cl.waiting)
    }

    pub fn paused(&self, name: &str) -> bool {
        self.tube(name).is_some_and(|t| t.pause.is_some())
    }

    pub fn ready_head(&self, tube: &str) -> Option<(u32, u64)> {
        self.jobs.iter().filter(|j| j.tube == tube && j.state == St::Ready).map(|j| (j.pri, j.id)).min()
    }

    pub fn delayed_head(&self, tube: &str) -> Option<u64> {
        let head = self.jobs.iter().filter(|j| j.tube == tube && j.state == St::Delayed);
        head.map(|j| (j.deadline, j.id)).min().map(|(_, id)| id)
    }

    pub fn buried_head(&self, tube: &str) -> Option<u64> {
        let head = self.jobs.iter().filter(|j| j.tube == tube && j.state == St::Buried);
        head.map(|j| (j.bury_seq, j.id)).min().map(|(_, id)| id)
    }

    pub fn find_or_create(&mut self, name: &str) {
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
    pub fn maybe_destroy(&mut self, name: &str) {
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
    pub fn margin_of(&self, c: u64) -> Option<u64> {
        let cl = self.client(c);
        cl.reserved.iter().filter_map(|&id| self.job(id)).map(|j| j.deadline.saturating_sub(NS)).min()
    }

    pub fn wake_time(&self, c: u64) -> Option<u64> {
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

    pub fn unreserve(&mut self, id: u64) {
        let holder = self.job(id).map(|j| j.reserved_by).unwrap_or(0);
        if let Some(cl) = self.clients.iter_mut().find(|cl| cl.id == holder) {
            cl.reserved.retain(|&r| r != id);
        }
    }

    pub fn reserve_for(&mut self, c: u64, id: u64, now: u64) {
        let j = self.job_mut(id);
        j.state = St::Reserved;
        j.reserved_by = c;
        j.deadline = now.saturating_add(u64::from(j.ttr) * NS);
        j.reserves += 1;
        self.client_mut(c).reserved.push(id);
        self.touched.push(id);
    }

    pub fn end_wait(&mut self, c: u64, outcome: Outcome) {
        self.waiters.retain(|&w| w != c);
        let cl = self.client_mut(c);
        cl.waiting = false;
        cl.timeout_at = None;
        cl.outcome = Some(outcome);
    }

    /// reference §4.1, one pass: over every unpaused tube with both a waiter and
    /// a ready job, take the best `(pri, id)` head and give it to that
    /// tube's longest waiter; repeat.
    pub fn dispatch(&mut self, now: u64) {
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

    pub fn make_ready(&mut self, id: u64, now: u64) {
        self.job_mut(id).state = St::Ready;
        self.touched.push(id);
        self.dispatch(now);
    }

    pub fn reserved_reply(&self, id: u64) -> Vec<u8> {
        let j = self.job(id).expect("reserved job");
        with_data(format!("RESERVED {} {}", id, j.body.len()), &j.body)
    }

    pub fn found(&self, id: Option<u64>) -> Vec<u8> {
        match id.and_then(|id| self.job(id)) {
            Some(j) => with_data(format!("FOUND {} {}", j.id, j.body.len()), &j.body),
            None => line("NOT_FOUND"),
        }
    }

    // --- clients ---

    pub fn connect(&mut self) -> u64 {
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
            abortable: false,
            outcome: None,
        });
        id
    }

    pub fn disconnect(&mut self, c: u64, now: u64) {
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

    pub fn hang_up(&mut self, c: u64) {
        self.client_mut(c).hung_up = true;
        if self.client(c).waiting {
            self.end_wait(c, Outcome::TimedOut);
        }
    }

    // --- commands ---

    pub fn count_put(&mut self) {
        self.cmds.put += 1;
    }

    pub fn start_put(&mut self, c: u64) -> u64 {
        self.client_mut(c).producer = true;
        let id = self.next_job_id;
        self.next_job_id += 1;
        id
    }

    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &mut self,
        c: u64,
        id: u64,
        pri: u32,
        delay: u32,
        ttr: u32,
        created: u64,
        body: &[u8],
        now: u64,
        key: Option<(String, u32)>,
    ) -> Vec<u8> {
        if self.draining {
            return line("DRAINING");
        }
        let tube = self.client(c).used.clone();
        if let Some((name, _)) = &key {
            let same =
                |t: &str, k: &Option<(String, u32)>| t == tube && k.as_ref().is_some_and(|(n, _)| n == name);
            let found = self.jobs.iter().find(|j| same(&j.tube, &j.key)).map(|j| j.id);
            let cooling =
                self.cooling.iter().find(|(t, k, ..)| *t == tube && k == name).map(|&(.., id, _)| id);
            if found.is_some() || cooling.is_some() {
                // Nothing stored: the id goes back.
                if self.next_job_id == id + 1 {
                    self.next_job_id = id;
                }
            }
            if let Some(id) = cooling {
                return line(&format!("INSERTED {id} DELETED"));
            }
            if let Some(id) = found {
                self.touched.push(id);
                let j = self.job_mut(id);
                let word = j.state.name().to_uppercase();
                if pri < j.pri {
                    j.pri = pri;
                    return line(&format!("INSERTED {id} {word} {pri}"));
                }
                return line(&format!("INSERTED {id} {word}"));
            }
        }
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
            key,
        });
        self.touched.push(id);
        if delay == 0 {
            self.dispatch(now);
        }
        line(&format!("INSERTED {id}"))
    }

    pub fn use_tube(&mut self, c: u64, name: &str) -> Vec<u8> {
        self.cmds.use_ += 1;
        self.find_or_create(name);
        let old = std::mem::replace(&mut self.client_mut(c).used, name.into());
        self.maybe_destroy(&old);
        line(&format!("USING {name}"))
    }

    pub fn watch(&mut self, c: u64, name: &str) -> Vec<u8> {
        self.cmds.watch += 1;
        self.find_or_create(name);
        let cl = self.client_mut(c);
        if !cl.watched.iter().any(|w| w == name) {
            cl.watched.push(name.into());
        }
        line(&format!("WATCHING {}", cl.watched.len()))
    }

    pub fn ignore(&mut self, c: u64, name: &str) -> Vec<u8> {
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

    pub fn reserve(&mut self, c: u64, timeout: Option<u32>, now: u64) -> Option<Vec<u8>> {
        self.reserve_abortable(c, timeout, None, now)
    }

    /// `reserve-with-abort[-timeout]` (reference §3.3a): `input_waiting`
    /// says bytes already came behind the command.
    pub fn reserve_with_abort(
        &mut self,
        c: u64,
        timeout: Option<u32>,
        input_waiting: bool,
        now: u64,
    ) -> Option<Vec<u8>> {
        self.reserve_abortable(c, timeout, Some(input_waiting), now)
    }

    /// A byte from `c` arrived and was noticed: it ends a
    /// `reserve-with-abort`'s wait, and nothing else.
    pub fn abort(&mut self, c: u64) {
        let cl = self.client(c);
        if cl.waiting && cl.abortable {
            self.end_wait(c, Outcome::Aborted);
        }
    }

    fn reserve_abortable(
        &mut self,
        c: u64,
        timeout: Option<u32>,
        abort: Option<bool>,
        now: u64,
    ) -> Option<Vec<u8>> {
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
        if abort == Some(true) {
            return Some(line("ABORTED"));
        }
        if self.client(c).hung_up || timeout == Some(0) {
            return Some(line("TIMED_OUT"));
        }
        let cl = self.client_mut(c);
        cl.waiting = true;
        cl.abortable = abort.is_some();
        cl.timeout_at = timeout.map(|s| now + u64::from(s) * NS);
        cl.outcome = None;
        self.waiters.push(c);
        None
    }

    pub fn check_wait(&mut self, c: u64, now: u64) -> Option<Vec<u8>> {
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
            Outcome::Aborted => Some(line("ABORTED")),
        }
    }

    pub fn reserve_job(&mut self, c: u64, id: u64, now: u64) -> Vec<u8> {
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

    pub fn reserved_by(&self, id: u64, c: u64) -> bool {
        self.job(id).is_some_and(|j| j.state == St::Reserved && j.reserved_by == c)
    }

    pub fn delete(&mut self, c: u64, id: u64, now: u64) -> Vec<u8> {
        self.cmds.delete += 1;
        self.touched.push(id);
        let Some(j) = self.job(id) else { return line("NOT_FOUND") };
        if j.state == St::Reserved && j.reserved_by != c {
            return line("NOT_FOUND");
        }
        let tube = j.tube.clone();
        let (key, reserved) = (j.key.clone(), j.state == St::Reserved);
        if let Some((key, cooldown)) = key.filter(|(_, secs)| *secs > 0) {
            // It ends on a whole second of the server's clock, rounded up.
            let end = (now + u64::from(cooldown) * NS).div_ceil(NS) * NS;
            self.cooling.push((tube.clone(), key, id, end));
        }
        if reserved {
            self.unreserve(id);
        }
        self.jobs.retain(|j| j.id != id);
        self.tube_mut(&tube).cmd_delete += 1;
        self.maybe_destroy(&tube);
        line("DELETED")
    }

    pub fn release(&mut self, c: u64, id: u64, pri: u32, delay: u32, now: u64) -> Vec<u8> {
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

    pub fn bury(&mut self, c: u64, id: u64, pri: u32) -> Vec<u8> {
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

    pub fn touch(&mut self, c: u64, id: u64, now: u64) -> Vec<u8> {
        self.cmds.touch += 1;
        self.touched.push(id);
        if !self.reserved_by(id, c) {
            return line("NOT_FOUND");
        }
        let j = self.job_mut(id);
        j.deadline = now.saturating_add(u64::from(j.ttr) * NS);
        line("TOUCHED")
    }

    pub fn peek(&mut self, id: u64) -> Vec<u8> {
        self.cmds.peek += 1;
        self.found(Some(id))
    }

    pub fn peek_ready(&mut self, c: u64) -> Vec<u8> {
        self.cmds.peek_ready += 1;
        let t = self.client(c).used.clone();
        self.found(self.ready_head(&t).map(|(_, id)| id))
    }

    pub fn peek_delayed(&mut self, c: u64) -> Vec<u8> {
        self.cmds.peek_delayed += 1;
        let t = self.client(c).used.clone();
        self.found(self.delayed_head(&t))
    }

    pub fn peek_buried(&mut self, c: u64) -> Vec<u8> {
        self.cmds.peek_buried += 1;
        let t = self.client(c).used.clone();
        self.found(self.buried_head(&t))
    }

    pub fn kick_one(&mut self, id: u64, now: u64) {
        self.job_mut(id).kicks += 1;
        self.make_ready(id, now);
    }

    pub fn kick(&mut self, c: u64, bound: u32, now: u64) -> Vec<u8> {
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

    /// reference §3.21: a ready, delayed or buried job into tube `name`,
    /// all else kept; a buried one goes to the end of the new tube's queue,
    /// a ready one to its waiters. The tube it left may go.
    pub fn move_job(&mut self, id: u64, name: &str, now: u64) -> Vec<u8> {
        self.touched.push(id);
        let Some(j) = self.job(id) else { return line("NOT_FOUND") };
        if j.state == St::Reserved {
            return line("NOT_FOUND");
        }
        if j.tube == name {
            return line("MOVED");
        }
        if let Some((key, _)) = &j.key {
            let taken =
                self.jobs.iter().any(|o| o.tube == name && o.key.as_ref().is_some_and(|(k, _)| k == key))
                    || self.cooling.iter().any(|(t, k, ..)| t == name && k == key);
            if taken {
                return line("KEY_TAKEN");
            }
        }
        let (from, state) = (j.tube.clone(), j.state);
        self.find_or_create(name);
        let seq = self.next_bury_seq;
        let j = self.job_mut(id);
        j.tube = name.into();
        if state == St::Buried {
            j.bury_seq = seq;
            self.next_bury_seq += 1;
        }
        if state == St::Ready {
            self.dispatch(now);
        }
        self.maybe_destroy(&from);
        line("MOVED")
    }

    /// reference §3.22: what `reserve` would take, one job after another,
    /// never waiting; each counted as a `reserve`.
    pub fn reserve_batch(&mut self, c: u64, count: u32, now: u64) -> Vec<u8> {
        self.client_mut(c).worker = true;
        let mut ids = Vec::new();
        while ids.len() < count as usize {
            let watched = self.client(c).watched.clone();
            let best = watched.iter().filter(|t| !self.paused(t)).filter_map(|t| self.ready_head(t)).min();
            let Some((_, id)) = best else { break };
            self.cmds.reserve += 1;
            self.touched.push(id);
            self.reserve_for(c, id, now);
            ids.push(id);
        }
        let mut out = line(&format!("RESERVED_BATCH {}", ids.len()));
        for id in ids {
            out.extend(self.reserved_reply(id));
        }
        out
    }

    /// reference §3.23: each id as `delete` would take it.
    pub fn delete_batch(&mut self, c: u64, ids: &[u64], now: u64) -> Vec<u8> {
        let deleted = ids.iter().filter(|&&id| self.delete(c, id, now) == line("DELETED")).count();
        line(&format!("DELETED_BATCH {deleted} {}", ids.len() - deleted))
    }

    /// reference §3.24: every ready, delayed and buried job of the tube.
    pub fn clear_tube(&mut self, name: &str, now: u64) -> Vec<u8> {
        if self.tube(name).is_none() {
            return line("NOT_FOUND");
        }
        let gone: Vec<u64> =
            self.jobs.iter().filter(|j| j.tube == name && j.state != St::Reserved).map(|j| j.id).collect();
        // Each as `delete` would: counted, and its key cooling.
        for &id in &gone {
            self.delete(0, id, now);
        }
        line(&format!("CLEARED {}", gone.len()))
    }

    pub fn kick_job(&mut self, id: u64, now: u64) -> Vec<u8> {
        self.touched.push(id);
        match self.job(id).map(|j| j.state) {
            Some(St::Buried | St::Delayed) => {
                self.kick_one(id, now);
                line("KICKED")
            }
            _ => line("NOT_FOUND"),
        }
    }

    pub fn stats_job(&mut self, id: u64, now: u64) -> Vec<u8> {
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
        // tuber's lines, for a job with one of its tags (reference §3.1c).
        let yaml = match &j.key {
            Some((key, cooldown)) => format!(
                "{yaml}idempotency-key: {key}\nidempotency-ttl: {cooldown}\ngroup: \nafter-group: \n\
                 concurrency-key: \nconcurrency-limit: 0\n"
            ),
            None => yaml,
        };
        ok_yaml(&yaml)
    }

    pub fn job_counts<'a>(jobs: impl Iterator<Item = &'a MJob>) -> JobCounts {
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

    pub fn stats_tube(&mut self, name: &str, now: u64) -> Vec<u8> {
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

    pub fn server_stats(&mut self) -> ServerStats {
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
            // Without a log, every body is in memory: `stats` shows none
            // of these.
            job_memory: 0,
            bodies_in_log: 0,
            body_read_failures: 0,
        }
    }

    pub fn list_tubes(&mut self) -> Vec<u8> {
        self.cmds.list_tubes += 1;
        ok_yaml(&list_yaml(self.tubes.iter().map(|t| &t.name)))
    }

    pub fn list_tube_used(&mut self, c: u64) -> Vec<u8> {
        self.cmds.list_tube_used += 1;
        line(&format!("USING {}", self.client(c).used))
    }

    pub fn list_tubes_watched(&mut self, c: u64) -> Vec<u8> {
        self.cmds.list_tubes_watched += 1;
        ok_yaml(&list_yaml(self.client(c).watched.iter()))
    }

    pub fn pause_tube(&mut self, name: Option<&str>, delay: u32, now: u64) -> Vec<u8> {
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
    pub fn tick(&mut self, now: u64) -> Option<u64> {
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
        self.cooling.retain(|&(.., end)| end > now);
        self.next_due()
    }

    pub fn next_due(&self) -> Option<u64> {
        let jobs = self.jobs.iter().filter(|j| matches!(j.state, St::Reserved | St::Delayed));
        let pauses = self.tubes.iter().filter_map(|t| t.pause.map(|(_, until)| until));
        let cooling = self.cooling.iter().map(|&(.., end)| end);
        jobs.map(|j| j.deadline).chain(pauses).chain(cooling).min()
    }
}
