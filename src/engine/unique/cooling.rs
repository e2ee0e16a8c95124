//! A unique key's cooldown (reference §3.1a): the key outlives its job's
//! delete by the seconds its put gave, answering `INSERTED <id> DELETED`,
//! then is forgotten. The ends lie in a heap that the timer reads (through
//! `Engine::next_due`), so nothing is scanned; this file changes nothing
//! but the keys' own index (`unique.rs`), and decides nothing the engine
//! does not ask (`keyed.rs`, `worker.rs`).

use super::UniqueKeys;
use crate::ids::JobId;
use crate::protocol::TubeName;
use crate::time::Time;

/// When a cooldown of `cooldown` seconds that starts at `now` ends: on a
/// whole second, rounded up, since a key keeps it in whole seconds; and by
/// 2106 (`u32::MAX` seconds), whatever the cooldown.
pub fn cooldown_end(now: Time, cooldown: u32) -> Time {
    Time::from_secs(end_secs(now.plus_secs(cooldown).0.div_ceil(1_000_000_000)).into())
}

/// A cooldown's end in whole seconds, as a key keeps it: never 0, at most
/// `u32::MAX`.
fn end_secs(secs: u64) -> u32 {
    u32::try_from(secs).unwrap_or(u32::MAX).max(1)
}

impl UniqueKeys {
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
        let until = cooldown_end(now, held.cooldown);
        held.until = end_secs(until.0 / 1_000_000_000);
        self.ends.push(until, id, set_pos);
        Some(until)
    }

    /// Deleted job `id`'s cooling key: its tube, when it ends, and the
    /// log file holding its record.
    pub fn cooling(&self, id: JobId) -> Option<(&[u8], Time, u32)> {
        let held = self.held(id).filter(|held| held.until != 0)?;
        Some((self.name(held).0, Time::from_secs(held.until.into()), held.file))
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
        // The end was a whole second when it was logged; the clocks'
        // offset, read again, may move it a few nanoseconds either way.
        let secs = end_secs(until.0.saturating_add(500_000_000) / 1_000_000_000);
        if let Some(held) = self.held_mut(id) {
            held.until = secs;
            held.file = file;
        }
        self.ends.push(Time::from_secs(secs.into()), id, set_pos);
    }
}
