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
//! (`Job::keyed`, in what was padding), so nothing looks a key up for it
//! (1M jobs of 100 bytes: 233.1 bytes a job, with this index or without).
//! A keyed job costs a slot of 48 bytes, an entry in each of two maps and
//! its name: 151 bytes a job more, for 18-byte names, at 1M keyed jobs
//! (when both maps have just doubled). The names are scoped to the tube by
//! *name*, not by tube slot, since a cooling key outlives the tube its job
//! left: "tube:key" (neither may hold a colon). Clients choose the keys,
//! so they are hashed with std's SipHash, keyed afresh by each process.
//! Cooldowns end in the order of a heap of their ends, which the timer
//! reads through `Engine::next_due`: nothing here is ever scanned. It is
//! the engine's own [`Heap`], told positions by the same callback as the
//! job heaps (`positions`, which finds no job for a cooling key's id and
//! does nothing), so its code is in the binary once.

use std::hash::{BuildHasher, RandomState};

use super::heap::Heap;
use super::IdMap;
use crate::ids::JobId;
use crate::protocol::{TubeName, MAX_TUBE_NAME};
use crate::time::Time;

/// What the index holds for one key.
#[derive(Debug, Default)]
struct Held {
    /// The job it names; 0 in a free slot.
    id: JobId,
    /// "tube:key", as the map by name holds it too.
    name: Box<[u8]>,
    /// Seconds the key outlives its job's delete.
    cooldown: u32,
    /// While cooling: the log file holding its job's last record.
    file: u32,
    /// While cooling: when the cooldown ends; `Time::ZERO` while the job
    /// lives (a cooldown is at least a second).
    until: Time,
    /// The next slot whose name has the same hash ([`NO_SLOT`]: none).
    same_hash: u32,
}

/// The end of a chain of slots.
const NO_SLOT: u32 = u32::MAX;

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
///
/// Both maps are the job table's overflow map's type, so that their code
/// is in the binary once: one maps a job id, the other the hash of a
/// "tube:key", to a slot of `held`. The hash is keyed afresh by each
/// process (std's SipHash), since clients choose the names; names whose
/// hashes are equal share a chain of slots, so a collision costs a longer
/// chain, never a wrong answer.
#[derive(Debug, Default)]
pub struct UniqueKeys {
    /// The hash of "tube:key" to the first slot of its chain.
    by_hash: IdMap<u32>,
    hasher: RandomState,
    /// Job id to its key's slot.
    by_job: IdMap<u32>,
    held: Vec<Held>,
    /// Slots of `held` no key uses, with room for every slot, so that
    /// forgetting a key allocates nothing.
    free: Vec<u32>,
    /// `(end, job)` of every cooling key, soonest first.
    ends: Heap<Time>,
}

/// A key's name and room, claimed for one insert or rename.
#[derive(Debug)]
pub struct KeyClaim {
    name: Box<[u8]>,
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

/// "tube:key" split at its colon.
fn split(name: &[u8]) -> (&[u8], &[u8]) {
    let colon = name.iter().position(|&b| b == b':').unwrap_or(name.len());
    (&name[..colon], name.get(colon + 1..).unwrap_or_default())
}

impl UniqueKeys {
    /// The slot of the key called `name` ("tube:key").
    fn slot_named(&self, name: &[u8]) -> Option<usize> {
        let mut slot = *self.by_hash.get(&self.hasher.hash_one(name))?;
        loop {
            let held = self.held.get(slot as usize)?;
            if *held.name == *name {
                return Some(slot as usize);
            }
            slot = held.same_hash;
        }
    }

    /// Puts `slot` at the head of its name's chain. Allocates nothing for
    /// a hash already there, and the room for a new one was claimed.
    fn link(&mut self, slot: u32) {
        let hash = self.hasher.hash_one(&self.held[slot as usize].name[..]);
        let next = self.by_hash.insert(hash, slot);
        self.held[slot as usize].same_hash = next.unwrap_or(NO_SLOT);
    }

    /// Takes `slot` out of its name's chain.
    fn unlink(&mut self, slot: u32) {
        let hash = self.hasher.hash_one(&self.held[slot as usize].name[..]);
        let next = self.held[slot as usize].same_hash;
        let Some(&head) = self.by_hash.get(&hash) else { return };
        if head == slot {
            if next == NO_SLOT {
                self.by_hash.remove(&hash);
            } else {
                self.by_hash.insert(hash, next);
            }
            return;
        }
        let mut at = head;
        while let Some(held) = self.held.get_mut(at as usize) {
            if held.same_hash == slot {
                held.same_hash = next;
                return;
            }
            at = held.same_hash;
        }
    }

    fn held(&self, id: JobId) -> Option<&Held> {
        self.held.get(*self.by_job.get(&id)? as usize)
    }

    fn held_mut(&mut self, id: JobId) -> Option<&mut Held> {
        self.held.get_mut(*self.by_job.get(&id)? as usize)
    }

    /// The job that key `key` of tube `tube` names, live or cooling, and
    /// whether it is cooling.
    pub fn find(&self, tube: &TubeName, key: &TubeName) -> Option<(JobId, bool)> {
        let mut buf = [0; MAX_NAME];
        let name = compose(&mut buf, tube.as_str().as_bytes(), key.as_str().as_bytes());
        let held = self.held.get(self.slot_named(name)?)?;
        Some((held.id, held.until != Time::ZERO))
    }

    /// "tube:key" in memory of its own, and room for one more key: what [`UniqueKeys::insert`] and
    /// [`UniqueKeys::rename`] take, claimed before anything changes.
    /// `None`: no memory.
    pub fn claim(&mut self, tube: &TubeName, key: &[u8]) -> Option<KeyClaim> {
        if key.len() > MAX_TUBE_NAME {
            // Only from a damaged log: keys are checked as tube names.
            return None;
        }
        let mut buf = [0; MAX_NAME];
        let name = compose(&mut buf, tube.as_str().as_bytes(), key);
        let mut owned = Vec::new();
        owned.try_reserve_exact(name.len()).ok()?;
        owned.extend_from_slice(name);
        let slots = self.held.len() + 1;
        let room = self.by_hash.try_reserve(1).is_ok()
            && self.by_job.try_reserve(1).is_ok()
            && (!self.free.is_empty() || self.held.try_reserve(1).is_ok())
            && self.free.try_reserve(slots.saturating_sub(self.free.len())).is_ok();
        room.then(|| KeyClaim { name: owned.into_boxed_slice() })
    }

    /// Names job `id` by the name claimed, with `cooldown`. Allocates
    /// nothing.
    pub fn insert(&mut self, id: JobId, claim: KeyClaim, cooldown: u32) {
        let held = Held { id, name: claim.name, cooldown, file: 0, until: Time::ZERO, same_hash: NO_SLOT };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.held[slot as usize] = held;
                slot
            }
            None => {
                self.held.push(held);
                (self.held.len() - 1) as u32
            }
        };
        self.link(slot);
        self.by_job.insert(id, slot);
    }

    /// Moves job `id`'s key to the tube the claimed name names
    /// (`move-job`). Allocates nothing.
    pub fn rename(&mut self, id: JobId, claim: KeyClaim) {
        let Some(&slot) = self.by_job.get(&id) else { return };
        self.unlink(slot);
        self.held[slot as usize].name = claim.name;
        self.link(slot);
    }

    /// The key of job `id`, as the log writes it.
    pub fn logged(&self, id: JobId) -> Option<LoggedKey<'_>> {
        let held = self.held(id)?;
        let until = (held.until != Time::ZERO).then_some(held.until);
        Some(LoggedKey { key: split(&held.name).1, cooldown: held.cooldown, until })
    }

    /// The key part of job `id`'s key: for `move-job`'s check.
    pub fn key_of(&self, id: JobId) -> Option<&[u8]> {
        self.held(id).map(|held| split(&held.name).1)
    }

    /// True if job `id`'s key outlives it: its delete needs room for
    /// [`UniqueKeys::start_cooldown`], claimed by [`UniqueKeys::claim_cooldown`].
    pub fn cools(&self, id: JobId) -> bool {
        self.held(id).is_some_and(|held| held.cooldown > 0)
    }

    /// Room for one more cooling key's end; false if it cannot be had.
    pub fn claim_cooldown(&mut self) -> bool {
        self.claim_cooldowns(1)
    }

    /// Room for `more` cooling keys' ends (a batch delete's).
    pub fn claim_cooldowns(&mut self, more: usize) -> bool {
        self.ends.try_make_room_for(self.ends.len() + more)
    }

    /// Job `id` is leaving the table: its key cools down until `now` plus
    /// its cooldown (returned, to schedule), or is forgotten at once.
    /// `set_pos` is the engine's `positions`: the job must be out of its
    /// queue already, since this heap tells it a slot of its own.
    pub fn start_cooldown(
        &mut self,
        id: JobId,
        now: Time,
        set_pos: &mut impl FnMut(JobId, usize),
    ) -> Option<Time> {
        let held = self.held_mut(id)?;
        if held.cooldown == 0 {
            self.forget(id);
            return None;
        }
        let until = now.plus_secs(held.cooldown);
        held.until = until;
        self.ends.push(until, id, set_pos);
        Some(until)
    }

    /// Forgets job `id`'s key, live or cooling.
    pub fn forget(&mut self, id: JobId) {
        let Some(slot) = self.by_job.remove(&id) else { return };
        self.unlink(slot);
        self.held[slot as usize] = Held::default();
        self.free.push(slot);
    }

    /// Notes the log file holding cooling key `id`'s record.
    pub fn set_file(&mut self, id: JobId, file: u32) {
        if let Some(held) = self.held_mut(id) {
            held.file = file;
        }
    }

    /// Deleted job `id`'s cooling key: its tube, when it ends, and the
    /// log file holding its record.
    pub fn cooling(&self, id: JobId) -> Option<(&[u8], Time, u32)> {
        let held = self.held(id).filter(|held| held.until != Time::ZERO)?;
        Some((split(&held.name).0, held.until, held.file))
    }

    /// When the soonest cooldown ends.
    pub fn next_end(&self) -> Option<Time> {
        self.ends.peek().map(|(until, _)| until)
    }

    /// The job whose key's cooldown ends soonest, if that is due at `now`.
    pub fn due(&self, now: Time) -> Option<JobId> {
        self.ends.peek().filter(|&(until, _)| until <= now).map(|(_, id)| id)
    }

    /// Ends the soonest cooldown, job `id`'s (from [`UniqueKeys::due`]):
    /// its key is free.
    pub fn end(&mut self, id: JobId, set_pos: &mut impl FnMut(JobId, usize)) {
        self.ends.pop(set_pos);
        self.forget(id);
    }

    /// Puts back a cooling key read from the log at start-up.
    pub fn restore_cooling(
        &mut self,
        id: JobId,
        tube: &TubeName,
        (key, cooldown): &(Box<[u8]>, u32),
        until: Time,
        file: u32,
        set_pos: &mut impl FnMut(JobId, usize),
    ) {
        // At start-up, best effort: a start this short of memory will
        // not serve long, and a key lost only lets a duplicate in.
        let Some(claim) = self.claim(tube, key) else { return };
        if !self.claim_cooldown() {
            return;
        }
        self.insert(id, claim, *cooldown);
        if let Some(held) = self.held_mut(id) {
            held.until = until;
            held.file = file;
        }
        self.ends.push(until, id, set_pos);
    }

    /// Every key, `name -> job (until)`, in name order: for the failure
    /// sweeps to compare two engines.
    #[cfg(test)]
    pub fn sorted(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .by_job
            .iter()
            .filter_map(|(id, &slot)| Some((id, self.held.get(slot as usize)?)))
            .map(|(id, held)| {
                let by_name = self.slot_named(&held.name).map(|slot| self.held[slot].id);
                let name = String::from_utf8_lossy(&held.name);
                let cooling = held.until != Time::ZERO;
                format!(
                    "{name} -> {id} {by_name:?} cooldown={} cooling={cooling} until {:?}",
                    held.cooldown, held.until
                )
            })
            .collect();
        all.sort();
        all.push(format!("{} ends, {} hashes", self.ends.len(), self.by_hash.len()));
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
        let until = keys.start_cooldown(7, Time::ZERO, &mut |_, _| {}).unwrap();
        assert_eq!(keys.find(&name("a"), &name("k")), Some((7, true)));
        assert_eq!(keys.next_end(), Some(until));
        assert_eq!(keys.due(Time(until.0 - 1)), None);
        assert_eq!(keys.due(until), Some(7));
        keys.end(7, &mut |_, _| {});
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
        assert_eq!(
            keys.start_cooldown(1, Time::ZERO, &mut |_, _| {}),
            None,
            "no cooldown: forgotten at once"
        );
        assert!(keys.is_empty());
    }

    #[test]
    fn many_keys_are_found_moved_and_forgotten() {
        let mut keys = UniqueKeys::default();
        for id in 1..=1000u64 {
            let claim = keys.claim(&name("a"), format!("k{id}").as_bytes()).unwrap();
            keys.insert(id, claim, 0);
        }
        for id in (2..=1000u64).step_by(2) {
            keys.forget(id);
        }
        for id in (3..=1000u64).step_by(6) {
            let claim = keys.claim(&name("b"), format!("k{id}").as_bytes()).unwrap();
            keys.rename(id, claim);
        }
        for id in 1..=1000u64 {
            let key = name(&format!("k{id}"));
            let (in_a, in_b) = (keys.find(&name("a"), &key), keys.find(&name("b"), &key));
            match (id % 2, id % 6) {
                (0, _) => assert_eq!((in_a, in_b), (None, None), "{id}"),
                (_, 3) => assert_eq!((in_a, in_b), (None, Some((id, false))), "{id}"),
                _ => assert_eq!((in_a, in_b), (Some((id, false)), None), "{id}"),
            }
        }
        assert_eq!(keys.len(), 500);
    }
}
