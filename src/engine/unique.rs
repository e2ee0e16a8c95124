//! Unique keys (tuber's `put ... idp:<key>[:<seconds>]`, reference
//! §3.1a): which job each key of each tube names, and the keys that
//! outlive their job's delete for a cooldown.
//!
//! This is an index beside the job table, and only an index: it never
//! holds a job, a body or a queue position, and it changes nothing but
//! itself. The engine decides, under its lock, what a put with a key
//! does (`put.rs`), and starts a key's cooldown in the one place a job
//! leaves the table (`Engine::discard`, `worker.rs`).
//!
//! A job without a key costs nothing here: the job record carries a flag
//! (`Job::keyed`, in what was padding), so nothing looks a key up for it.
//! A keyed job costs two map entries and two copies of its name. The names
//! are scoped to the tube by *name*, not by tube slot, since a cooling key
//! outlives the tube its job left: "tube:key" (neither may hold a colon).
//! Clients choose the keys, so the map by name keeps std's keyed SipHash.
//! Cooldowns end in the order of a heap of their ends, which the timer
//! reads through `Engine::next_due`: nothing here is ever scanned.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::IdMap;
use crate::ids::JobId;
use crate::protocol::{TubeName, MAX_TUBE_NAME};
use crate::time::Time;

/// What the index holds for one key.
#[derive(Debug)]
struct Held {
    /// "tube:key", as the map by name holds it too.
    name: Box<[u8]>,
    /// Seconds the key outlives its job's delete.
    cooldown: u32,
    /// While cooling: when the cooldown ends; `None` while the job lives.
    until: Option<Time>,
    /// While cooling: the log file holding the cooldown's record.
    file: u32,
}

/// A key as the log writes it: the key without its tube, its cooldown,
/// and, once its job is deleted, when the cooldown ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedKey<'a> {
    pub key: &'a [u8],
    pub cooldown: u32,
    /// `Some` from the delete that starts the cooldown on.
    pub until: Option<Time>,
}

/// Every unique key, live or cooling. See the module documentation.
#[derive(Debug, Default)]
pub struct UniqueKeys {
    by_name: HashMap<Box<[u8]>, JobId>,
    by_job: IdMap<Held>,
    /// `(end, job)` of every cooling key, soonest first.
    ends: BinaryHeap<Reverse<(Time, JobId)>>,
}

/// A key's name and room, claimed for one insert or rename.
#[derive(Debug)]
pub struct KeyClaim {
    by_name: Box<[u8]>,
    by_job: Box<[u8]>,
}

/// Longest "tube:key".
const MAX_NAME: usize = 2 * MAX_TUBE_NAME + 1;

/// "tube:key" in `buf`, without allocating.
fn compose<'b>(buf: &'b mut [u8; MAX_NAME], tube: &[u8], key: &[u8]) -> &'b [u8] {
    let (t, k) = (tube.len(), key.len());
    buf[..t].copy_from_slice(tube);
    buf[t] = b':';
    buf[t + 1..t + 1 + k].copy_from_slice(key);
    &buf[..t + 1 + k]
}

/// The key part of "tube:key".
fn key_part(name: &[u8]) -> &[u8] {
    name.iter().position(|&b| b == b':').map_or(name, |colon| &name[colon + 1..])
}

impl UniqueKeys {
    /// The job that key `key` of tube `tube` names, live or cooling, and
    /// whether it is cooling.
    pub fn find(&self, tube: &TubeName, key: &TubeName) -> Option<(JobId, bool)> {
        let mut buf = [0; MAX_NAME];
        let name = compose(&mut buf, tube.as_str().as_bytes(), key.as_str().as_bytes());
        let id = *self.by_name.get(name)?;
        Some((id, self.by_job.get(&id).is_some_and(|held| held.until.is_some())))
    }

    /// "tube:key" in memory of its own, twice (one for each map), and
    /// room in both maps for one more key: what [`UniqueKeys::insert`] and
    /// [`UniqueKeys::rename`] take, claimed before anything changes.
    /// `None`: no memory.
    pub fn claim(&mut self, tube: &TubeName, key: &[u8]) -> Option<KeyClaim> {
        let mut buf = [0; MAX_NAME];
        let name = compose(&mut buf, tube.as_str().as_bytes(), key);
        let copy = || {
            let mut owned = Vec::new();
            owned.try_reserve_exact(name.len()).ok()?;
            owned.extend_from_slice(name);
            Some(owned.into_boxed_slice())
        };
        let (by_name, by_job) = (copy()?, copy()?);
        let room = self.by_name.try_reserve(1).is_ok() && self.by_job.try_reserve(1).is_ok();
        room.then_some(KeyClaim { by_name, by_job })
    }

    /// Names job `id` by the name claimed, with `cooldown`. Allocates
    /// nothing.
    pub fn insert(&mut self, id: JobId, claim: KeyClaim, cooldown: u32) {
        self.by_name.insert(claim.by_name, id);
        self.by_job.insert(id, Held { name: claim.by_job, cooldown, until: None, file: 0 });
    }

    /// Moves job `id`'s key to the tube the claimed name names
    /// (`move-job`). Allocates nothing.
    pub fn rename(&mut self, id: JobId, claim: KeyClaim) {
        let Some(held) = self.by_job.get_mut(&id) else { return };
        let old = std::mem::replace(&mut held.name, claim.by_job);
        self.by_name.remove(&old);
        self.by_name.insert(claim.by_name, id);
    }

    /// The key of job `id`, as the log writes it.
    pub fn logged(&self, id: JobId) -> Option<LoggedKey<'_>> {
        let held = self.by_job.get(&id)?;
        Some(LoggedKey { key: key_part(&held.name), cooldown: held.cooldown, until: held.until })
    }

    /// The key part of job `id`'s key: for `move-job`'s check.
    pub fn key_of(&self, id: JobId) -> Option<&[u8]> {
        self.by_job.get(&id).map(|held| key_part(&held.name))
    }

    /// True if job `id`'s key outlives it: its delete needs room for
    /// [`UniqueKeys::start_cooldown`], claimed by [`UniqueKeys::claim_cooldown`].
    pub fn cools(&self, id: JobId) -> bool {
        self.by_job.get(&id).is_some_and(|held| held.cooldown > 0)
    }

    /// Room for one more cooling key's end; false if it cannot be had.
    pub fn claim_cooldown(&mut self) -> bool {
        self.ends.try_reserve(1).is_ok()
    }

    /// Job `id` is leaving the table: its key cools down until `now` plus
    /// its cooldown (returned, to schedule), or is forgotten at once.
    pub fn start_cooldown(&mut self, id: JobId, now: Time) -> Option<Time> {
        let held = self.by_job.get_mut(&id)?;
        if held.cooldown == 0 {
            self.forget(id);
            return None;
        }
        let until = now.plus_secs(held.cooldown);
        held.until = Some(until);
        self.ends.push(Reverse((until, id)));
        Some(until)
    }

    /// Forgets job `id`'s key, live or cooling.
    pub fn forget(&mut self, id: JobId) {
        if let Some(held) = self.by_job.remove(&id) {
            self.by_name.remove(&held.name);
        }
    }

    /// Notes the log file holding cooling key `id`'s record.
    pub fn set_file(&mut self, id: JobId, file: u32) {
        if let Some(held) = self.by_job.get_mut(&id) {
            held.file = file;
        }
    }

    /// Deleted job `id`'s cooling key: its tube, when it ends, and the
    /// log file holding its record.
    pub fn cooling(&self, id: JobId) -> Option<(&[u8], Time, u32)> {
        let held = self.by_job.get(&id)?;
        let colon = held.name.iter().position(|&b| b == b':')?;
        Some((&held.name[..colon], held.until?, held.file))
    }

    /// When the soonest cooldown ends.
    pub fn next_end(&self) -> Option<Time> {
        self.ends.peek().map(|Reverse((until, _))| *until)
    }

    /// The job whose key's cooldown ends soonest, if that is due at `now`.
    pub fn due(&self, now: Time) -> Option<JobId> {
        self.ends.peek().filter(|Reverse((until, _))| *until <= now).map(|Reverse((_, id))| *id)
    }

    /// Ends the soonest cooldown, job `id`'s (from [`UniqueKeys::due`]):
    /// its key is free.
    pub fn end(&mut self, id: JobId) {
        self.ends.pop();
        self.forget(id);
    }

    /// Puts back a cooling key read from the log at start-up.
    pub fn restore_cooling(&mut self, id: JobId, tube: &TubeName, key: &TubeName, until: Time, file: u32) {
        // At start-up, best effort: a start this short of memory will
        // not serve long, and a key lost only lets a duplicate in.
        let Some(claim) = self.claim(tube, key.as_str().as_bytes()) else { return };
        if self.ends.try_reserve(1).is_err() {
            return;
        }
        self.insert(id, claim, 1);
        if let Some(held) = self.by_job.get_mut(&id) {
            held.until = Some(until);
            held.file = file;
        }
        self.ends.push(Reverse((until, id)));
    }

    /// Every key, `name -> job (until)`, in name order: for the failure
    /// sweeps to compare two engines.
    #[cfg(test)]
    pub fn sorted(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .by_job
            .iter()
            .map(|(id, held)| {
                let by_name = self.by_name.get(&held.name);
                format!(
                    "{} -> {id} {:?} cooldown={} {by_name:?}",
                    String::from_utf8_lossy(&held.name),
                    held.until,
                    held.cooldown
                )
            })
            .collect();
        all.sort();
        all.push(format!("{} ends, {} names", self.ends.len(), self.by_name.len()));
        all
    }

    /// Keys held, live and cooling.
    pub fn len(&self) -> usize {
        self.by_job.len()
    }

    /// True with no key held.
    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> TubeName {
        TubeName::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_key_is_scoped_to_its_tube_and_cools_down_until_its_end() {
        let mut keys = UniqueKeys::default();
        let n = keys.claim(&name("a"), b"k").unwrap();
        keys.insert(7, n, 5);
        assert_eq!(keys.find(&name("a"), &name("k")), Some((7, false)));
        assert_eq!(keys.find(&name("b"), &name("k")), None);
        assert_eq!(keys.logged(7), Some(LoggedKey { key: b"k", cooldown: 5, until: None }));
        assert!(keys.cools(7) && keys.claim_cooldown());
        let until = keys.start_cooldown(7, Time::ZERO).unwrap();
        assert_eq!(keys.find(&name("a"), &name("k")), Some((7, true)));
        assert_eq!(keys.next_end(), Some(until));
        assert_eq!(keys.due(Time(until.0 - 1)), None);
        assert_eq!(keys.due(until), Some(7));
        keys.end(7);
        assert!(keys.is_empty() && keys.find(&name("a"), &name("k")).is_none());
    }

    #[test]
    fn a_moved_key_is_found_in_its_new_tube_only() {
        let mut keys = UniqueKeys::default();
        let n = keys.claim(&name("a"), b"k").unwrap();
        keys.insert(1, n, 0);
        let n = keys.claim(&name("b"), keys.key_of(1).unwrap().to_vec().as_slice()).unwrap();
        keys.rename(1, n);
        assert_eq!(keys.find(&name("a"), &name("k")), None);
        assert_eq!(keys.find(&name("b"), &name("k")), Some((1, false)));
        assert_eq!(keys.start_cooldown(1, Time::ZERO), None, "no cooldown: forgotten at once");
        assert!(keys.is_empty());
    }
}
