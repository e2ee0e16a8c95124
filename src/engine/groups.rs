//! Job groups (tuber's `put ... grp:<group>` and `aft:<group>`, reference
//! §3.1d): fan out, then fan in. A job put with `grp:` is a *member* of
//! its group until it is deleted; a job put with `aft:` waits for its
//! group: while the group has a member, the job is *held*, delayed with
//! no due time, and when the group's last member is deleted, every job
//! held for it becomes ready. Groups are server-wide, across tubes.
//!
//! A job waits for the *run* of its after-group under way at its put:
//! the group's members from the put of one that found it empty (its
//! `run`, that member's id) until it is empty again. A job put while the
//! group is under way, or that begins the run itself (`grp:s aft:s`, as
//! in tuber), waits for that run; a job put while the group is empty
//! waits for nothing, and a run begun after a job's put never holds it.
//! So a job waits for its group if the group's run began at or before its
//! id ([`Groups::waits`]): which a restart can work out again from the
//! log, where each member's full record keeps its run, and a held job is
//! written as delayed with no due time (reference §3.1d, §8).
//!
//! A job is held where it would otherwise become ready after its delay
//! (its put, or its delay running out) and nowhere else, as in tuber: a
//! job released or kicked is not held again. A held job sits in its
//! tube's delayed heap at [`NEVER`], after every job with a due time
//! (so `flush-tube`, the counts and listing find it as a delayed job),
//! and in its group's held list, so that the group's end finds it.
//!
//! This file owns the index of groups and those two moves,
//! [`Engine::make_held`] and [`Engine::let_go_of_held`]. A group's
//! members are counted by state as they move (`Engine::unlink` and the
//! `make_*` moves call [`Groups::count`]); a member's going is seen where
//! a job leaves the table (`Engine::forget_record`), and its held jobs
//! (and those of an earlier run still to be let go when a new run
//! begins) are let go at the end of the command, with the jobs it frees, at
//! most [`LET_GO_PIECE`] a lock: a group of a million held jobs is let
//! go by the timer (and the commands' catch-up) a piece at a time, as
//! the promise `bounded` of reference §3.0 asks of every command.

use super::job::{Tags, NEVER};
use super::list::List;
use super::named::{NameClaim, Named};
use super::*;

/// No group: a slot no group has.
const NONE: u32 = u32::MAX;

/// Held jobs let go under one hold of the lock, at most.
pub const LET_GO_PIECE: usize = crate::protocol::MAX_BATCH;

/// One group in use.
#[derive(Debug, Default)]
struct Group {
    /// Its members by state, as `stats-group` shows them: ready,
    /// reserved, delayed (held ones too), buried.
    members: [u32; 4],
    /// Jobs held until it has no member, in the order they were held.
    held: List,
    /// Its live jobs, members and jobs waiting for it or once held: it is
    /// known as long as one lives.
    jobs: u32,
    /// Its live members, whatever their state (a member just put is one
    /// before its first move counts it in `members`).
    alive: u32,
    /// While it has a member: the id of the member whose put began its
    /// current run. A job waits for it only if this is at or below its
    /// own id. 0 after a restart from a log older than runs: every job
    /// waits while it has a member, as before.
    run: JobId,
    /// Its last member went and its held jobs are to be let go.
    ended: bool,
}

/// What `stats-group` shows of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupStats {
    /// Members: ready, reserved, delayed (held ones too), buried.
    pub members: [u32; 4],
    /// Jobs held for it.
    pub waiting: usize,
}

/// Every group in use, and each tagged job's group and after-group.
#[derive(Debug, Default)]
pub struct Groups {
    groups: Named<Group>,
    /// Each tagged job's `(group, after-group)` slots, [`NONE`] for none.
    of_job: IdMap<(u32, u32)>,
    /// Groups that ended in this command, their held jobs to be let go:
    /// room for every group is claimed with the group.
    ended: Vec<u32>,
}

/// What a put with `grp:` or `aft:` needs, claimed before the job is made.
#[derive(Debug)]
pub struct GroupClaim {
    group: Option<NameClaim>,
    after: Option<NameClaim>,
}

/// The index of `state` in [`Group::members`].
fn member_index(state: State) -> usize {
    match state {
        State::Ready => 0,
        State::Reserved => 1,
        State::Delayed | State::Held => 2,
        State::Buried => 3,
    }
}

impl Groups {
    /// Claims the room a job in `group` and waiting for `after` needs
    /// (both may be one group); `None` without it.
    pub(super) fn claim(&mut self, group: Option<&[u8]>, after: Option<&[u8]>) -> Option<GroupClaim> {
        // `ended` holds each group at most once: room for every group
        // there may be after this put.
        // Both names may be new: room for both before either's copies.
        let new = |name: Option<&[u8]>| name.is_some_and(|name| self.groups.find(name).is_none());
        let both_new = usize::from(new(group)) + usize::from(new(after) && after != group);
        let room = self.of_job.try_reserve(1).is_ok()
            && self.ended.try_reserve(self.groups.slot_count() + 2).is_ok()
            && self.groups.make_room(both_new);
        if !room {
            return None;
        }
        let mut claim = |name: Option<&[u8]>| match name {
            Some(name) => self.groups.claim(name).map(Some),
            None => Some(None),
        };
        let (group, after) = (claim(group)?, claim(after)?);
        Some(GroupClaim { group, after })
    }

    /// Files job `id` in `group` and as waiting for `after`, in room
    /// claimed by [`Self::claim`]. Its member count comes with its first
    /// move ([`Self::count`]).
    pub(super) fn insert(
        &mut self,
        id: JobId,
        group: Option<&[u8]>,
        after: Option<&[u8]>,
        claim: GroupClaim,
    ) {
        let mut slot_of = |name: Option<&[u8]>, claim: Option<NameClaim>, member: bool| match (name, claim) {
            (Some(name), Some(claim)) => {
                let slot = self.groups.insert(name, claim, Group::default);
                if let Some(group) = self.groups.get_mut(slot) {
                    group.jobs += 1;
                    if member {
                        // The first member of an empty group begins a run.
                        if group.alive == 0 {
                            group.run = id;
                        }
                        group.alive += 1;
                    }
                }
                slot
            }
            _ => NONE,
        };
        // The group first: a job in the group it waits for begins the run
        // it then waits for.
        let group = slot_of(group, claim.group, true);
        let after = slot_of(after, claim.after, false);
        self.of_job.insert(id, (group, after));
    }

    /// Forgets job `id`, which is gone and unlinked: a group whose last
    /// member it was has ended, and a group goes with its last job.
    pub(super) fn forget(&mut self, id: JobId) {
        let Some((group, after)) = self.of_job.remove(&id) else {
            return;
        };
        // Its group first, as a member (it may wait for it too).
        for (slot, member) in [(group, true), (after, false)] {
            let Some(g) = self.groups.get_mut(slot) else {
                continue;
            };
            g.jobs -= 1;
            if member {
                g.alive -= 1;
            }
            if member && g.alive == 0 && !g.held.is_empty() && !g.ended {
                g.ended = true;
                // Room for one entry a group was claimed with it.
                self.ended.push(slot);
            }
            if g.jobs == 0 {
                // Gone, it has nothing left to let go: its slot may be
                // another group's before the timer comes.
                if g.ended {
                    self.ended.retain(|&ended| ended != slot);
                }
                self.groups.remove(slot);
            }
        }
    }

    /// Job `id` was filed in (`filed`) or taken out of a queue of `state`:
    /// its group's count of members in that state follows.
    pub(super) fn count(&mut self, id: JobId, state: State, filed: bool) {
        let slot = self.of_job.get(&id).map_or(NONE, |&(group, _)| group);
        if let Some(g) = self.groups.get_mut(slot) {
            let count = &mut g.members[member_index(state)];
            *count = if filed { *count + 1 } else { *count - 1 };
        }
    }

    /// Whether job `id` waits for its after-group: the group has a member,
    /// and its run began at or before the job's put (job `id` may have
    /// begun it). Once false, never true again for the job: a run that
    /// begins later begins with a higher id.
    pub(super) fn waits(&self, id: JobId) -> bool {
        let slot = self.of_job.get(&id).map_or(NONE, |&(_, after)| after);
        self.groups.get(slot).is_some_and(|g| g.alive > 0 && g.run <= id)
    }

    /// The run of job `id`'s group, if it is a member: what its full
    /// record keeps, for a restart's [`Self::waits`].
    pub(super) fn run_of(&self, id: JobId) -> Option<JobId> {
        let slot = self.of_job.get(&id).map_or(NONE, |&(group, _)| group);
        self.groups.get(slot).map(|g| g.run)
    }

    /// At a restart: member `id`'s full record says its group's run began
    /// at `run` (0: a log older than runs, which every job waits for).
    /// Every live member says the same; the lowest is kept.
    pub(super) fn restore_run(&mut self, id: JobId, run: JobId) {
        let slot = self.of_job.get(&id).map_or(NONE, |&(group, _)| group);
        if let Some(g) = self.groups.get_mut(slot) {
            g.run = g.run.min(run);
        }
    }

    /// Job `id`'s group and after-group names, as the log and `stats-job`
    /// show them.
    pub(super) fn of(&self, id: JobId) -> (Option<&[u8]>, Option<&[u8]>) {
        let (group, after) = self.of_job.get(&id).copied().unwrap_or((NONE, NONE));
        (self.groups.name(group), self.groups.name(after))
    }

    /// What the groups and their jobs' entries count against
    /// `--max-job-memory`: each group's name once, and an entry a job.
    pub(super) fn memory(&self) -> u64 {
        self.groups.memory() + self.of_job.len() as u64 * TAG_ENTRY_MEMORY
    }

    /// What a job in `group` and waiting for `after` would add to
    /// [`Self::memory`] (one name, if both are one).
    pub(super) fn memory_of(&self, group: Option<&[u8]>, after: Option<&[u8]>) -> u64 {
        let name = |name: Option<&[u8]>| name.map_or(0, |name| self.groups.memory_of(name));
        let after = if after == group { 0 } else { name(after) };
        name(group) + after + TAG_ENTRY_MEMORY
    }

    /// `stats-group`'s figures for the group called `name`, if it is known.
    pub(super) fn stats(&self, name: &[u8]) -> Option<GroupStats> {
        let group = self.groups.get(self.groups.find(name)?)?;
        Some(GroupStats { members: group.members, waiting: group.held.len() })
    }

    /// The held list of job `id`'s after-group.
    fn held_list(&mut self, id: JobId) -> Option<&mut List> {
        let slot = self.of_job.get(&id).map_or(NONE, |&(_, after)| after);
        self.groups.get_mut(slot).map(|g| &mut g.held)
    }

    /// Every group in use, as `(name, members, held, jobs)`, for a test's
    /// picture of the engine.
    #[cfg(test)]
    pub(super) fn sorted(&self) -> Vec<(Vec<u8>, [u32; 4], usize, u32)> {
        let mut all: Vec<_> =
            self.groups.iter().map(|(name, g)| (name.to_vec(), g.members, g.held.len(), g.jobs)).collect();
        all.sort();
        all
    }
}

impl Engine {
    /// Files an unlinked job as held for its after-group, which has a
    /// member: delayed with no due time. No timer waits for it.
    pub(super) fn make_held(&mut self, id: JobId) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = State::Held;
        job.deadline = NEVER;
        let (t, pri, tags) = (job.tube, job.pri, job.tags);
        self.tally_job(id, State::Held, pri, tags, true);
        self.tubes.get_mut(t).delayed.push(NEVER, id, &mut positions(&mut self.jobs));
        if let Some(held) = self.tubes.groups.held_list(id) {
            held.push_back(&mut self.jobs, id);
        }
    }

    /// Takes a held job out of its after-group's held list (`unlink` takes
    /// it out of its tube's delayed heap).
    pub(super) fn unhold(&mut self, id: JobId) {
        if let Some(held) = self.tubes.groups.held_list(id) {
            held.remove(&mut self.jobs, id);
        }
    }

    /// Files an unlinked job whose delay is over: held if it waits for a
    /// group with a member, else ready.
    pub(super) fn make_ready_or_held(&mut self, id: JobId, now: Time) {
        if self.jobs.get(&id).is_some_and(|job| job.tags.after()) && self.tubes.groups.waits(id) {
            self.make_held(id);
        } else {
            self.make_ready(id, now);
        }
    }

    /// Lets go of the jobs held for the groups whose last member went:
    /// each becomes ready, in the order it was held, and its tube's
    /// waiters are served; at most [`LET_GO_PIECE`] jobs, the rest left
    /// for the timer, which is told they are due. Called where a command
    /// ends, with [`Engine::serve_freed`], and so by every tick.
    pub(super) fn let_go_of_held(&mut self, now: Time) {
        let mut budget = LET_GO_PIECE;
        while let Some(&slot) = self.tubes.groups.ended.last() {
            // A member put since the end began a new run, which holds only
            // the jobs held for it: they are behind every job held for the
            // runs before.
            let next = self.tubes.groups.groups.get(slot).and_then(|g| g.held.front());
            let next = next.filter(|&id| !self.tubes.groups.waits(id));
            match next {
                Some(_) if budget == 0 => {
                    self.schedule(now);
                    return;
                }
                Some(id) => {
                    self.unlink(id);
                    self.make_ready(id, now);
                    budget -= 1;
                }
                None => {
                    self.tubes.groups.ended.pop();
                    if let Some(group) = self.tubes.groups.groups.get_mut(slot) {
                        group.ended = false;
                    }
                }
            }
        }
    }

    /// Whether held jobs wait to be let go ([`Engine::let_go_of_held`]):
    /// the timer is due at once.
    pub(super) fn letting_go(&self) -> bool {
        !self.tubes.groups.ended.is_empty()
    }

    /// `stats-group <group>`. Its own frame, never inlined into the
    /// connection's dispatch, whose frame every loop's thread
    /// touches.
    #[inline(never)]
    pub fn stats_group(&mut self, name: &TubeName) -> Reply<'_> {
        match self.tubes.groups.stats(name.as_str().as_bytes()) {
            Some(stats) => crate::stats::group_yaml(name, stats.members, stats.waiting)
                .map_or(Reply::OutOfMemory, Reply::Ok),
            None => Reply::NotFound,
        }
    }

    /// The job counts' and its group's tally of a job of `tags` filed in
    /// (`filed`) or taken out of a queue of `state`; a dead letter's in
    /// its tube's count of them, and the server's, too (so a dead letter
    /// is marked before it is filed, and unmarked after it is taken out).
    pub(super) fn tally_job(&mut self, id: JobId, state: State, pri: u32, tags: Tags, filed: bool) {
        tally(&mut self.job_counts, state, pri, filed);
        if tags.group() {
            self.tubes.groups.count(id, state, filed);
        }
        if state == State::Buried && tags.buried_by_limit() {
            if let Some(t) = self.jobs.get(&id).map(|job| job.tube) {
                let (server, tube) =
                    (&mut self.job_counts.buried_by_limit, &mut self.tubes.get_mut(t).buried_by_limit);
                if filed {
                    (*server, *tube) = (*server + 1, *tube + 1);
                } else {
                    (*server, *tube) = (*server - 1, *tube - 1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proofs::tests::{client, engine, name, put_tagged, reserved_id};
    use super::*;

    fn put_in(e: &mut Engine, c: ClientId, delay: u32, group: &str, after: &str) -> JobId {
        let named = |name: &'static str| Some(name.as_bytes()).filter(|name| !name.is_empty());
        let (group, after) = (named(leak(group)), named(leak(after)));
        put_tagged(e, c, 0, delay, 10, Time::ZERO, PutTags::NONE.with_groups(group, after).unwrap())
    }

    fn leak(text: &str) -> &'static str {
        Box::leak(text.to_owned().into_boxed_str())
    }

    fn reserve(e: &mut Engine, c: ClientId) -> Option<JobId> {
        match e.reserve(c, Some(0), Time::ZERO, &mut Vec::<u8>::new()) {
            Some(Reply::Reserved(id, _)) => Some(id),
            _ => None,
        }
    }

    fn state(e: &Engine, id: JobId) -> Option<State> {
        e.jobs.get(&id).map(|job| job.state)
    }

    #[test]
    fn a_job_waits_for_its_group_s_last_member_and_then_is_ready() {
        let mut e = engine();
        let c = client(&mut e);
        let a = put_in(&mut e, c, 0, "g", "");
        let b = put_in(&mut e, c, 0, "g", "");
        let after = put_in(&mut e, c, 0, "", "g");
        assert_eq!(state(&e, after), Some(State::Held));
        assert_eq!(e.tubes.groups.sorted(), [(b"g".to_vec(), [2, 0, 0, 0], 1, 3)]);
        assert_eq!(e.reserve_job(c, after, Time::ZERO, &mut Vec::<u8>::new()), Reply::NotFound);
        assert_eq!(reserve(&mut e, c), Some(a));
        // Buried, a member still holds it.
        assert_eq!(e.bury(c, a, 0, Time::ZERO), Reply::Buried);
        assert_eq!(e.delete(c, b, Time::ZERO), Reply::Deleted);
        assert_eq!(state(&e, after), Some(State::Held));
        assert_eq!(e.tubes.groups.sorted(), [(b"g".to_vec(), [0, 0, 0, 1], 1, 2)]);
        assert_eq!(e.delete(c, a, Time::ZERO), Reply::Deleted);
        assert_eq!(state(&e, after), Some(State::Ready));
        assert_eq!(reserve(&mut e, c), Some(after));
        assert_eq!(e.delete(c, after, Time::ZERO), Reply::Deleted);
        assert_eq!(e.tubes.groups.sorted(), []);
    }

    #[test]
    fn an_empty_group_holds_nothing_and_a_delay_that_ends_is_held_if_it_has_a_member() {
        let mut e = engine();
        let c = client(&mut e);
        let free = put_in(&mut e, c, 0, "", "nobody");
        assert_eq!(state(&e, free), Some(State::Ready));
        let member = put_in(&mut e, c, 0, "g", "");
        let later = put_in(&mut e, c, 5, "", "g");
        assert_eq!(state(&e, later), Some(State::Delayed));
        e.tick(Time::from_secs(5));
        assert_eq!(state(&e, later), Some(State::Held));
        // `kick` leaves it; `kick-job` takes it, as tuber's does.
        assert_eq!(e.kick(c, 10, Time::ZERO), Reply::KickedCount(0));
        assert_eq!(e.kick_job(later, Time::ZERO), Reply::Kicked);
        assert_eq!(state(&e, later), Some(State::Ready));
        assert_eq!(e.tubes.groups.sorted()[0].2, 0);
        assert_eq!(state(&e, member), Some(State::Ready));
    }

    #[test]
    fn a_group_s_end_serves_a_worker_blocked_in_another_tube() {
        let mut e = engine();
        let (producer, worker, waiter) = (client(&mut e), client(&mut e), client(&mut e));
        let member = put_in(&mut e, producer, 0, "g", "");
        e.use_tube(producer, &name("other"));
        let after = put_in(&mut e, producer, 0, "", "g");
        e.watch(waiter, &name("other"));
        e.ignore(waiter, &name("default"));
        assert_eq!(e.reserve(waiter, None, Time::ZERO, &mut Vec::<u8>::new()), None);
        assert_eq!(reserve(&mut e, worker), Some(member));
        assert_eq!(e.delete(worker, member, Time::ZERO), Reply::Deleted);
        assert_eq!(reserved_id(e.check_wait(waiter, Time::ZERO, &mut Vec::<u8>::new())), after);
    }

    #[test]
    fn a_job_waits_for_the_run_under_way_at_its_put_and_no_later_one() {
        let mut e = engine();
        let c = client(&mut e);
        // Put while `g` has no member, delayed: a run begun after its
        // put does not hold it when its delay ends.
        let early = put_in(&mut e, c, 5, "", "g");
        let m1 = put_in(&mut e, c, 0, "g", "");
        let held = put_in(&mut e, c, 0, "", "g");
        e.tick(Time::from_secs(5));
        assert_eq!((state(&e, early), state(&e, held)), (Some(State::Ready), Some(State::Held)));
        // A member put while the run goes on holds it on, after the first
        // member goes.
        let m2 = put_in(&mut e, c, 0, "g", "");
        assert_eq!(e.delete(c, m1, Time::ZERO), Reply::Deleted);
        assert_eq!(state(&e, held), Some(State::Held));
        assert_eq!(e.delete(c, m2, Time::ZERO), Reply::Deleted);
        assert_eq!(state(&e, held), Some(State::Ready));
        // In the group it waits for, it begins the run: held at its put.
        let own = put_in(&mut e, c, 0, "s", "s");
        assert_eq!(state(&e, own), Some(State::Held));
    }

    #[test]
    fn a_run_begun_while_held_jobs_are_let_go_holds_none_of_them() {
        let mut e = engine();
        let c = client(&mut e);
        let member = put_in(&mut e, c, 0, "g", "");
        let held: Vec<JobId> = (0..=LET_GO_PIECE).map(|_| put_in(&mut e, c, 0, "", "g")).collect();
        assert_eq!(e.delete(c, member, Time::ZERO), Reply::Deleted);
        let last = held[LET_GO_PIECE];
        assert_eq!(state(&e, last), Some(State::Held), "left for the next piece");
        // A new run, and a job held for it, before the next piece.
        put_in(&mut e, c, 0, "g", "");
        let new = put_in(&mut e, c, 0, "", "g");
        e.tick(Time::ZERO);
        assert_eq!((state(&e, last), state(&e, new)), (Some(State::Ready), Some(State::Held)));
        assert!(!e.letting_go());
    }

    #[test]
    fn a_held_job_moves_deletes_and_flushes_as_a_delayed_job() {
        let mut e = engine();
        let c = client(&mut e);
        put_in(&mut e, c, 0, "g", "");
        let held = put_in(&mut e, c, 0, "h", "g");
        let waiting = put_in(&mut e, c, 0, "", "h");
        assert_eq!(state(&e, waiting), Some(State::Held), "h has a member: the held job");
        assert_eq!(e.move_job(held, &name("other"), Time::ZERO), Reply::Moved);
        assert_eq!(state(&e, held), Some(State::Held));
        assert_eq!(e.tubes.groups.sorted()[0], (b"g".to_vec(), [1, 0, 0, 0], 1, 2));
        assert_eq!(e.delete(c, held, Time::ZERO), Reply::Deleted);
        assert_eq!(state(&e, waiting), Some(State::Ready), "h lost its only member");
        assert_eq!(e.flush_tube(&name("default"), 10, None, Time::ZERO), Ok((2, None)));
        assert_eq!(e.tubes.groups.sorted(), []);
    }
}
