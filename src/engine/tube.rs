//! A tube: a named queue with its own ready heap, delayed heap and buried
//! list, the clients waiting on it, its pause, and its counters.
//!
//! A tube knows nothing of other tubes or of clients beyond their ids. The
//! engine creates a tube when a client first names it (`use`, `watch`, a put
//! into it) and destroys it the moment nothing refers to it any more
//! (reference §5.2): no client uses or watches it, it holds no job in any state,
//! and it is not `default`.

use super::heap::Heap;
use super::list::List;
use super::waiting::WaitQueue;
use crate::protocol::TubeName;
use crate::time::Time;

pub use crate::ids::TubeId;

/// A pause set by `pause-tube`.
#[derive(Debug, Clone, Copy)]
pub struct Pause {
    /// The delay given to `pause-tube`, shown as `pause`.
    pub secs: u32,
    /// When the pause ends.
    pub until: Time,
}

/// One tube.
#[derive(Debug)]
pub struct Tube {
    pub name: TubeName,
    /// Ready jobs by `(pri, id)` (the heap breaks ties on the key by id).
    pub ready: Heap<u32>,
    /// Delayed jobs by `(ready time, id)`.
    pub delayed: Heap<Time>,
    /// Buried jobs, oldest burial first.
    pub buried: List,
    /// Jobs of this tube currently reserved by some client.
    pub reserved: usize,
    /// Ready jobs with an urgent priority.
    pub urgent: usize,
    /// Clients blocked in reserve that watch this tube, longest waiter
    /// first; with room for every client that watches it.
    pub waiting: WaitQueue,
    /// Clients whose used tube this is.
    pub using: usize,
    /// Clients watching this tube.
    pub watching: usize,
    pub pause: Option<Pause>,
    /// Jobs accepted by put into this tube since it was created.
    pub total_jobs: u64,
    /// Successful deletes of jobs in this tube.
    pub cmd_delete: u64,
    /// Successful pause-tube commands on this tube.
    pub cmd_pause_tube: u64,
    /// Its buried jobs marked dead letters (reference §3.1b), kept by
    /// `Engine::tally_job` as they are filed and taken out.
    pub buried_by_limit: usize,
    /// How long its jobs take, reserve to delete (`weighted-fair`).
    pub processing: super::weighted::ProcessingTime,
    /// Position in the engine's list of tubes (the `list-tubes` order).
    pub list_index: usize,
    /// This tube's entry in [`Tubes`]' timetable: the sooner of its first
    /// delayed job's due time and its pause's end, as last filed by
    /// [`Tubes::reschedule`]. `None`: nothing in this tube waits on time.
    timed_at: Option<Time>,
    /// Its place in the timetable's heap, while `timed_at` is set.
    timed_slot: u32,
}

/// What `--metrics` keeps of a tube (`metering.rs`), beside it rather than
/// in it, so that without `--metrics` a tube costs what it did.
#[derive(Debug, Default)]
pub struct TubeMeter {
    /// Its ready jobs in the order they became ready, oldest first.
    pub ready_order: List,
    /// Its histograms, from its first measurement.
    pub times: Option<Box<super::metering::TubeTimes>>,
}

impl Tube {
    /// A fresh, empty tube.
    pub fn new(name: TubeName, list_index: usize) -> Tube {
        Tube {
            name,
            ready: Heap::new(),
            delayed: Heap::new(),
            buried: List::default(),
            reserved: 0,
            urgent: 0,
            waiting: WaitQueue::default(),
            using: 0,
            watching: 0,
            pause: None,
            total_jobs: 0,
            cmd_delete: 0,
            cmd_pause_tube: 0,
            buried_by_limit: 0,
            processing: Default::default(),
            list_index,
            timed_at: None,
            timed_slot: 0,
        }
    }

    /// Jobs of this tube in any state.
    pub fn job_count(&self) -> usize {
        self.ready.len() + self.delayed.len() + self.buried.len() + self.reserved
    }

    /// True when nothing refers to the tube and it may be destroyed.
    pub fn is_unreferenced(&self) -> bool {
        self.using == 0 && self.watching == 0 && self.job_count() == 0 && !self.name.is_default()
    }

    /// True while `pause-tube` keeps reserves away from this tube.
    pub fn is_paused(&self) -> bool {
        self.pause.is_some()
    }

    /// When time next changes something in this tube: its soonest delayed
    /// job matures or its pause ends.
    fn next_event(&self) -> Option<Time> {
        // A held job is due at `NEVER`: no timer waits for it.
        let delayed = self.delayed.peek().map(|(due, _)| due).filter(|&due| due != super::job::NEVER);
        let pause_end = self.pause.map(|p| p.until);
        delayed.into_iter().chain(pause_end).min()
    }
}

/// Every tube, by id and by name, plus the `list-tubes` order.
///
/// `list-tubes` shows tubes in an array order where a destroyed tube's slot
/// is filled by the last tube (reference §5.3); `order` reproduces that.
///
/// The timetable `timed` lists only the tubes that wait on time (a delayed
/// job or a pause), by when: the timer finds what is due in O(log tubes)
/// and never visits an idle tube, however many there are.
///
/// Every list here keeps room for every tube, claimed when a tube is
/// created ([`Tubes::find_or_create`]), so that nothing done to a tube later
/// (destroying it, filing it in the timetable) allocates.
#[derive(Debug, Default)]
pub struct Tubes {
    slots: Vec<Option<Tube>>,
    free: Vec<TubeId>,
    by_name: std::collections::HashMap<TubeName, TubeId>,
    order: Vec<TubeId>,
    /// `(tube.timed_at, id)` of every tube whose `timed_at` is set; each
    /// tube's `timed_slot` says where it sits.
    timed: Heap<Time>,
    /// Room for [`Tubes::take_due`]'s answer. Pairs, as the metrics'
    /// scrape and the restore of buried jobs sort, so that the binary holds
    /// one sort rather than two (2 KB, paid by 12 bytes a tube).
    due: Vec<(u64, u64)>,
    /// The unique keys of every tube, by tube name, and those cooling
    /// down after their job's delete: kept with the tubes because they
    /// are scoped by tube, and because the log reads a job's key where it
    /// reads its tube's name (`journal::Picture::logged`).
    pub keys: super::unique::UniqueKeys,
    /// The retry limits of the jobs put with `max:`: kept beside the keys,
    /// where the log reads a job's tags (`journal::Picture::logged`).
    pub limits: super::retry::RetryLimits,
    /// The concurrency keys in use, by name, and each keyed job's, kept
    /// here for the same reason.
    pub con: super::concurrency::ConcurrencyKeys,
    /// The groups in use (`grp:`, `aft:`), by name, and each tagged job's,
    /// kept here for the same reason.
    pub groups: super::groups::Groups,
    /// With `--metrics`: each tube's [`TubeMeter`], by id, as long as
    /// `slots`; empty otherwise.
    meters: Vec<TubeMeter>,
    metering: bool,
}

impl Tubes {
    /// The tube called `name`, if it exists.
    pub fn find(&self, name: &TubeName) -> Option<TubeId> {
        self.by_name.get(name).copied()
    }

    /// The tube called `name`, created if it does not exist; `None` if the
    /// memory a new tube needs cannot be had, and then nothing changed.
    pub fn find_or_create(&mut self, name: &TubeName) -> Option<TubeId> {
        if let Some(id) = self.find(name) {
            return Some(id);
        }
        // Claim, then change: room in every list a tube enters, and in the
        // lists a tube may enter later.
        let tubes = self.order.len() + 1;
        let room = (!self.free.is_empty() || self.slots.try_reserve(1).is_ok())
            && self.free.try_reserve(self.slots.len().max(tubes).saturating_sub(self.free.len())).is_ok()
            && self.by_name.try_reserve(1).is_ok()
            && self.order.try_reserve(1).is_ok()
            && self.timed.try_make_room_for(tubes)
            && self.due.try_reserve(tubes.saturating_sub(self.due.len())).is_ok()
            && (!self.metering || self.meters.try_reserve(self.slots.len() + 1 - self.meters.len()).is_ok());
        if !room {
            return None;
        }
        let tube = Tube::new(name.clone(), self.order.len());
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(tube);
                id
            }
            None => {
                self.slots.push(Some(tube));
                (self.slots.len() - 1) as TubeId
            }
        };
        self.by_name.insert(name.clone(), id);
        self.order.push(id);
        if self.metering {
            // Within the room claimed above: one meter a slot.
            self.meters.resize_with(self.slots.len(), TubeMeter::default);
        }
        Some(id)
    }

    /// The live tube `id`.
    ///
    /// # Panics
    /// If the tube was destroyed: every holder of a `TubeId` (a job, a
    /// client's use or watch) is also a reference that keeps it alive.
    pub fn get(&self, id: TubeId) -> &Tube {
        self.slots[id as usize].as_ref().expect("live tube")
    }

    /// Tube `id`, if it still exists: for a caller that held the id
    /// without holding the lock (a scrape).
    pub fn live(&self, id: TubeId) -> Option<&Tube> {
        self.slots.get(id as usize)?.as_ref()
    }

    /// Keeps a [`TubeMeter`] for every tube from now on (`--metrics`):
    /// called before any tube but `default` exists.
    pub fn start_metering(&mut self) -> bool {
        self.metering = true;
        self.meters.try_reserve(self.slots.len()).is_ok() && {
            self.meters.resize_with(self.slots.len(), TubeMeter::default);
            true
        }
    }

    /// Tube `id`'s meter; `None` without `--metrics`.
    pub fn meter(&self, id: TubeId) -> Option<&TubeMeter> {
        self.meters.get(id as usize)
    }

    /// Tube `id`'s meter, mutably; `None` without `--metrics`.
    pub fn meter_mut(&mut self, id: TubeId) -> Option<&mut TubeMeter> {
        self.meters.get_mut(id as usize)
    }

    /// The live tube `id`, mutably. Panics as [`Tubes::get`].
    pub fn get_mut(&mut self, id: TubeId) -> &mut Tube {
        self.slots[id as usize].as_mut().expect("live tube")
    }

    /// Destroys tube `id` if nothing refers to it any more.
    pub fn remove_if_unreferenced(&mut self, id: TubeId) {
        if !self.get(id).is_unreferenced() {
            return;
        }
        let Some(tube) = self.slots[id as usize].take() else {
            return;
        };
        if tube.timed_at.is_some() {
            self.timed.remove(tube.timed_slot as usize, &mut timed_slots(&mut self.slots));
        }
        self.by_name.remove(&tube.name);
        if let Some(meter) = self.meters.get_mut(id as usize) {
            *meter = TubeMeter::default();
        }
        self.order.swap_remove(tube.list_index);
        if let Some(&moved) = self.order.get(tube.list_index) {
            self.get_mut(moved).list_index = tube.list_index;
        }
        self.free.push(id);
    }

    /// Number of live tubes.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when there are no tubes (never, in practice: `default` stays).
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Live tube ids in `list-tubes` order.
    pub fn ids(&self) -> &[TubeId] {
        &self.order
    }

    /// Refiles tube `id` in the timetable. Called after every change to its
    /// delayed heap or its pause; costs O(log tubes) only when the tube's
    /// next event moved.
    pub fn reschedule(&mut self, id: TubeId) {
        let tube = self.get_mut(id);
        let next = tube.next_event();
        let old = std::mem::replace(&mut tube.timed_at, next);
        if old == next {
            return;
        }
        let slot = tube.timed_slot as usize;
        if old.is_some() {
            self.timed.remove(slot, &mut timed_slots(&mut self.slots));
        }
        if let Some(next) = next {
            // Within the room claimed when the tube was created.
            self.timed.push(next, u64::from(id), &mut timed_slots(&mut self.slots));
        }
    }

    /// The soonest time at which some tube has something due.
    pub fn next_event(&self) -> Option<Time> {
        self.timed.peek().map(|(at, _)| at)
    }

    /// The tubes with something due at `now`, as `(list index, tube)`, in
    /// `list-tubes` order (the order in which the engine handles events
    /// falling at one instant).
    /// Visits only those tubes, and allocates nothing: the list's room was
    /// claimed with the tubes. Give it back with [`Tubes::return_due`].
    pub fn take_due(&mut self, now: Time) -> Vec<(u64, u64)> {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        // The due entries are a subtree at the heap's top: walk it, the
        // list itself serving as the walk's queue of heap slots.
        if self.timed.peek().is_some_and(|(at, _)| at <= now) {
            due.push((0, 0));
        }
        let mut next = 0;
        while next < due.len() {
            let slot = due[next].1 as usize;
            for child in [2 * slot + 1, 2 * slot + 2] {
                if self.timed.key_at(child).is_some_and(|at| at <= now) {
                    due.push((0, child as u64));
                }
            }
            next += 1;
        }
        for entry in due.iter_mut() {
            let id = self.timed.id_at(entry.1 as usize) as TubeId;
            *entry = (self.get(id).list_index as u64, u64::from(id));
        }
        due.sort_unstable();
        due
    }

    /// Gives back the list [`Tubes::take_due`] returned, with its room.
    pub fn return_due(&mut self, due: Vec<(u64, u64)>) {
        self.due = due;
    }

    /// Number of tubes in the timetable (for tests: idle tubes are not).
    pub fn timed_len(&self) -> usize {
        self.timed.len()
    }
}

/// The callback through which the timetable's heap reports where each tube
/// now sits.
fn timed_slots(slots: &mut [Option<Tube>]) -> impl FnMut(u64, usize) + '_ {
    |id, slot| {
        if let Some(Some(tube)) = slots.get_mut(id as usize) {
            tube.timed_slot = slot as u32;
        }
    }
}
