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
//! A keyed job costs its name's bytes and about 45 more: a slot of 32
//! bytes (which keeps the name's hash, so that growing reads no name),
//! and a bucket in each of two [`SlotTable`]s, which hold slot numbers
//! alone (5 and 4 bytes, at most three quarters full), found by the hash
//! of the name or of the job id. A `HashMap` entry for each would take 17
//! bytes a bucket. The names lie end to end in one buffer, the tube's name
//! then the key, so that a name costs no allocation and no pointer of its
//! own; the names of forgotten keys are packed away once they are most of
//! it. Measured (`cargo bench --bench unique`): a 16-byte key in tube
//! `default` costs 58 bytes beyond the key at 250k and 1M keys, and 62 at
//! 400k, just after both tables doubled (a `HashMap` for each, before:
//! 136). The names are scoped to the tube by *name*, not by tube slot,
//! since a cooling key outlives the tube its job left. Clients choose the
//! keys, so they are hashed with std's SipHash, keyed afresh by each
//! process.
//!
//! Cooldowns end in the order of a heap of their ends, which the timer
//! reads through `Engine::next_due`: nothing here is ever scanned. It is
//! the engine's own [`Heap`], told positions by the same callback as the
//! job heaps (`positions`, which finds no job for a cooling key's id and
//! does nothing), so its code is in the binary once.

use std::hash::{BuildHasher, Hasher, RandomState};

use super::heap::Heap;
use super::slot_table::SlotTable;

mod cooling;
use crate::ids::JobId;
use crate::protocol::{TubeName, MAX_TUBE_NAME};
use crate::time::Time;
pub use cooling::cooldown_end;

/// What the index holds for one key: 32 bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    /// The job it names; 0 in a free slot (ids start at 1).
    id: JobId,
    /// While cooling: when the cooldown ends, in whole seconds of
    /// [`Time`], rounded up (the timer keeps the exact end, in `ends`); 0
    /// while the job lives.
    until: u32,
    /// Its name's hash, so that growing the index by name reads no name.
    hash: u32,
    /// Seconds the key outlives its job's delete.
    cooldown: u32,
    /// While cooling: the log file holding its job's last record.
    file: u32,
    /// Where its tube's name starts in `UniqueKeys::names`; the key
    /// follows it. Both are at most 200 bytes, so their lengths are bytes.
    at: u32,
    tube_len: u8,
    key_len: u8,
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
#[derive(Debug)]
pub struct UniqueKeys {
    /// Slots by the hash of their tube and key.
    by_name: SlotTable,
    hasher: RandomState,
    /// Slots by their job's id.
    by_job: SlotTable,
    held: Vec<Held>,
    /// Slots of `held` no key uses, with room for every slot, so that
    /// forgetting a key allocates nothing.
    free: Vec<u32>,
    /// Every key's tube and key, end to end, and the names of keys since
    /// forgotten or moved, until [`UniqueKeys::claim`] packs them.
    names: Vec<u8>,
    /// Bytes of `names` that live keys use.
    named: usize,
    /// `(end, job)` of every cooling key, soonest first.
    ends: Heap<Time>,
}

impl Default for UniqueKeys {
    fn default() -> UniqueKeys {
        UniqueKeys {
            by_name: SlotTable::tagged(),
            hasher: RandomState::default(),
            by_job: SlotTable::default(),
            held: Vec::new(),
            free: Vec::new(),
            names: Vec::new(),
            named: 0,
            ends: Heap::default(),
        }
    }
}

/// A key's name, in place and with room for its slot, claimed for one
/// insert or rename, which must come before the next claim (that may pack
/// the names, and this one's with the dead).
#[derive(Debug)]
#[must_use]
pub struct KeyClaim {
    at: u32,
    tube_len: u8,
    key_len: u8,
}

/// What a key costs beyond its name, as `--max-job-memory` counts it: the
/// most the index was measured to take (module documentation).
pub const KEY_MEMORY_OVERHEAD: usize = 64;

/// Names packed away once more than half of `names` is dead, and this much.
const PACK_AT: usize = 64 * 1024;

/// Fibonacci hashing, as the job table's (`id_map.rs`): ids are not chosen
/// by clients. Its top half is its best.
fn id_hash(id: JobId) -> u32 {
    (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
}

/// The tube and key of `held`, whose name is in `names`.
fn name_in<'n>(names: &'n [u8], held: &Held) -> (&'n [u8], &'n [u8]) {
    let (at, tube) = (held.at as usize, usize::from(held.tube_len));
    let name = names.get(at..at + tube + usize::from(held.key_len)).unwrap_or_default();
    name.split_at(tube.min(name.len()))
}

/// The hash of a tube and key: SipHash keyed afresh by each process, since
/// clients choose the names. It hashes the two end to end, as they are
/// stored, so "ab" "c" and "a" "bc" share a hash: names with one hash cost
/// a longer search, never a wrong answer, since a search compares both.
fn name_hash(hasher: &RandomState, (tube, key): (&[u8], &[u8])) -> u32 {
    let mut sip = hasher.build_hasher();
    sip.write(tube);
    sip.write(key);
    sip.finish() as u32
}

impl UniqueKeys {
    /// The tube and key of `held`.
    fn name(&self, held: &Held) -> (&[u8], &[u8]) {
        name_in(&self.names, held)
    }

    /// The slot of key `key` of tube `tube`.
    fn slot_named(&self, tube: &[u8], key: &[u8]) -> Option<u32> {
        let hash = name_hash(&self.hasher, (tube, key));
        self.by_name
            .find(hash, |slot| self.held.get(slot as usize).is_some_and(|h| self.name(h) == (tube, key)))
    }

    fn slot_of(&self, id: JobId) -> Option<u32> {
        self.by_job.find(id_hash(id), |slot| self.held.get(slot as usize).is_some_and(|h| h.id == id))
    }

    fn held(&self, id: JobId) -> Option<&Held> {
        self.held.get(self.slot_of(id)? as usize)
    }

    fn held_mut(&mut self, id: JobId) -> Option<&mut Held> {
        let slot = self.slot_of(id)?;
        self.held.get_mut(slot as usize)
    }

    /// The job that key `key` of tube `tube` names, live or cooling, and
    /// whether it is cooling.
    pub fn find(&self, tube: &TubeName, key: &TubeName) -> Option<(JobId, bool)> {
        let slot = self.slot_named(tube.as_str().as_bytes(), key.as_str().as_bytes())?;
        let held = self.held.get(slot as usize)?;
        Some((held.id, held.until != 0))
    }

    /// Key `key` of tube `tube` written into the names, and room for one
    /// more key: what [`UniqueKeys::insert`] and [`UniqueKeys::rename`]
    /// take, claimed before anything a client can see changes. `None`: no
    /// memory.
    pub fn claim(&mut self, tube: &TubeName, key: &[u8]) -> Option<KeyClaim> {
        let tube = tube.as_str().as_bytes();
        if key.len() > MAX_TUBE_NAME {
            // Only from a damaged log: keys are checked as tube names.
            return None;
        }
        self.pack_names();
        let at = u32::try_from(self.names.len() + tube.len() + key.len()).ok()?;
        let Self { by_name, by_job, held, free, names, .. } = self;
        let slots = (0..).zip(held.iter()).filter(|(_, h)| h.id != 0);
        let room = by_name.make_room(1, &mut slots.clone().map(|(slot, h)| (slot, h.hash)))
            && by_job.make_room(1, &mut slots.map(|(slot, h)| (slot, id_hash(h.id))))
            && (!free.is_empty() || held.try_reserve(1).is_ok())
            && free.try_reserve((held.len() + 1).saturating_sub(free.len())).is_ok()
            && names.try_reserve(tube.len() + key.len()).is_ok();
        if !room {
            return None;
        }
        let at = at - (tube.len() + key.len()) as u32;
        names.extend_from_slice(tube);
        names.extend_from_slice(key);
        Some(KeyClaim { at, tube_len: tube.len() as u8, key_len: key.len() as u8 })
    }

    /// Packs the names of live keys together once most of `names` is
    /// dead. Best effort: it needs a copy's memory, and without it the
    /// dead names simply stay a while longer.
    fn pack_names(&mut self) {
        let dead = self.names.len() - self.named;
        if dead < PACK_AT || dead < self.named {
            return;
        }
        let mut packed = Vec::new();
        if packed.try_reserve_exact(self.named + self.named / 2).is_err() {
            return;
        }
        for slot in 0..self.held.len() {
            let held = self.held[slot];
            if held.id != 0 {
                let (tube, key) = name_in(&self.names, &held);
                packed.extend_from_slice(tube);
                packed.extend_from_slice(key);
                self.held[slot].at = (packed.len() - tube.len() - key.len()) as u32;
            }
        }
        self.names = packed;
    }

    /// Names job `id` by the name claimed, with `cooldown`. Allocates
    /// nothing.
    pub fn insert(&mut self, id: JobId, claim: KeyClaim, cooldown: u32) {
        let mut held = Held {
            id,
            cooldown,
            at: claim.at,
            tube_len: claim.tube_len,
            key_len: claim.key_len,
            ..Held::default()
        };
        held.hash = name_hash(&self.hasher, name_in(&self.names, &held));
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
        self.named += usize::from(held.tube_len) + usize::from(held.key_len);
        self.by_name.insert(held.hash, slot);
        self.by_job.insert(id_hash(id), slot);
    }

    /// Takes `slot` out of the index by name, and its name out of the
    /// names in use.
    fn unname(&mut self, slot: u32) {
        let Self { by_name, held, .. } = self;
        let Some(h) = held.get(slot as usize) else { return };
        by_name.remove(h.hash, slot, &|slot| held.get(slot as usize).map_or(0, |h| h.hash));
        self.named -= usize::from(h.tube_len) + usize::from(h.key_len);
    }

    /// Moves job `id`'s key to the tube the claimed name names
    /// (`move-job`). Allocates nothing.
    pub fn rename(&mut self, id: JobId, claim: KeyClaim) {
        let Some(slot) = self.slot_of(id) else { return };
        self.unname(slot);
        let mut held = self.held[slot as usize];
        (held.at, held.tube_len, held.key_len) = (claim.at, claim.tube_len, claim.key_len);
        held.hash = name_hash(&self.hasher, name_in(&self.names, &held));
        self.held[slot as usize] = held;
        self.named += usize::from(claim.tube_len) + usize::from(claim.key_len);
        self.by_name.insert(held.hash, slot);
    }

    /// The key of job `id`, as the log writes it.
    pub fn logged(&self, id: JobId) -> Option<LoggedKey<'_>> {
        let held = self.held(id)?;
        let until = (held.until != 0).then(|| Time::from_secs(held.until.into()));
        Some(LoggedKey { key: self.name(held).1, cooldown: held.cooldown, until })
    }

    /// The key part of job `id`'s key: for `move-job`'s check.
    pub fn key_of(&self, id: JobId) -> Option<&[u8]> {
        self.held(id).map(|held| self.name(held).1)
    }

    /// Forgets job `id`'s key, live or cooling.
    pub fn forget(&mut self, id: JobId) {
        let Some(slot) = self.slot_of(id) else { return };
        let Self { by_job, held, .. } = self;
        by_job.remove(id_hash(id), slot, &|slot| held.get(slot as usize).map_or(0, |h| id_hash(h.id)));
        self.unname(slot);
        self.held[slot as usize] = Held::default();
        self.free.push(slot);
    }

    /// Cooling keys of tube `tube` among the key slots from `from` (at most
    /// `scan` of them), `most` of them at most, onto `out`; returns the
    /// slot to go on from, `None` past the last. Slots stay where they are
    /// while their key lives, so a walk in pieces sees every key that was
    /// there when it began and is there still.
    pub fn cooling_in(
        &self,
        tube: &[u8],
        from: usize,
        scan: usize,
        most: usize,
        out: &mut Vec<JobId>,
    ) -> Option<usize> {
        let (mut slot, mut found) = (from, 0);
        for held in self.held.iter().skip(from).take(scan) {
            if found == most {
                return Some(slot);
            }
            if held.id != 0 && held.until != 0 && self.name(held).0 == tube {
                out.push(held.id);
                found += 1;
            }
            slot += 1;
        }
        (slot < self.held.len()).then_some(slot)
    }

    /// Notes the log file holding cooling key `id`'s record.
    pub fn set_file(&mut self, id: JobId, file: u32) {
        if let Some(held) = self.held_mut(id) {
            held.file = file;
        }
    }

    /// What the keys held count against `--max-job-memory`: their names,
    /// and [`KEY_MEMORY_OVERHEAD`] each.
    pub fn memory(&self) -> u64 {
        (self.named + self.len() * KEY_MEMORY_OVERHEAD) as u64
    }

    /// Keys held, live and cooling.
    pub fn len(&self) -> usize {
        self.by_job.len()
    }

    /// True with no key held.
    pub fn is_empty(&self) -> bool {
        self.by_job.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl UniqueKeys {
        /// Every key, `name -> job (until)`, in name order: for the failure
        /// sweeps to compare two engines.
        pub fn sorted(&self) -> Vec<String> {
            let mut all: Vec<String> = (self.held.iter())
                .filter(|held| held.id != 0)
                .map(|held| {
                    let (tube, key) = self.name(held);
                    let by_name = self.slot_named(tube, key).map(|slot| self.held[slot as usize].id);
                    let by_job = self.slot_of(held.id).map(|slot| self.held[slot as usize].id);
                    let name = format!("{}:{}", String::from_utf8_lossy(tube), String::from_utf8_lossy(key));
                    let cooling = held.until != 0;
                    format!(
                        "{name} -> {by_job:?} {by_name:?} cooldown={} cooling={cooling} until {:?}",
                        held.cooldown, held.until
                    )
                })
                .collect();
            all.sort();
            all.push(format!("{} ends, {} names", self.ends.len(), self.by_name.len()));
            all
        }
    }

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

    #[test]
    fn dead_names_are_packed_away_and_every_live_key_is_still_found() {
        let mut keys = UniqueKeys::default();
        let key = |id: u64| format!("a-long-enough-key-{id:08}");
        for id in 1..=10_000u64 {
            let claim = keys.claim(&name("tube"), key(id).as_bytes()).unwrap();
            keys.insert(id, claim, 0);
        }
        for id in (1..=10_000u64).filter(|id| id % 5 != 0) {
            keys.forget(id);
        }
        let before = keys.names.len();
        let claim = keys.claim(&name("other"), key(5).as_bytes()).unwrap();
        assert!(keys.names.len() < before / 2, "packed: {} of {before} bytes", keys.names.len());
        keys.rename(5, claim);
        assert_eq!(keys.names.len() - keys.named, key(5).len() + "tube".len(), "the old name is dead");
        for id in 1..=10_000u64 {
            let found = keys.find(&name("tube"), &name(&key(id)));
            let moved = keys.find(&name("other"), &name(&key(id)));
            match (id % 5, id) {
                (0, 5) => assert_eq!((found, moved), (None, Some((5, false)))),
                (0, _) => assert_eq!((found, moved), (Some((id, false)), None), "{id}"),
                _ => assert_eq!((found, moved), (None, None), "{id}"),
            }
        }
        assert_eq!(keys.key_of(10), Some(key(10).as_bytes()));
    }
}
