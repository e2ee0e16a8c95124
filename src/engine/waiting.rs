//! A tube's waiting queue: the clients blocked in a reserve that watch
//! it, longest waiter first.
//!
//! A simpler server would use a `BTreeMap` from place in line to client.
//! Its nodes are allocated as entries arrive, with no way to claim them
//! first, so a blocked reserve could fail to allocate after it had changed
//! things. Here the queue is a sorted array whose room is claimed when a
//! client starts to watch the tube ([`WaitQueue::try_make_room_for`] its
//! watchers), so joining the queue, at the back or, resuming an old wait,
//! in the middle, never allocates.

use std::collections::VecDeque;

use crate::ids::ClientId;

/// Below this many entries of room a queue keeps what it has.
const MIN_ROOM: usize = 8;

/// Clients waiting on a tube, by place in line (`seq`: smaller waited longer).
#[derive(Debug, Default)]
pub struct WaitQueue {
    entries: VecDeque<(u64, ClientId)>,
}

impl WaitQueue {
    /// Makes room for `clients` entries in all; false if the memory cannot
    /// be had. A tube keeps room for every client that watches it, so any
    /// of them may wait on it without allocating.
    pub fn try_make_room_for(&mut self, clients: usize) -> bool {
        let missing = clients.saturating_sub(self.entries.len());
        self.entries.capacity() >= clients || self.entries.try_reserve(missing).is_ok()
    }

    /// Gives back room past what `clients` watchers need, in halvings, if a
    /// smaller block can be had (it is only an economy).
    pub fn fit(&mut self, clients: usize) {
        let need = clients.max(self.entries.len()).max(MIN_ROOM);
        if self.entries.capacity() > need * 4 {
            let mut smaller = VecDeque::new();
            if smaller.try_reserve_exact(need * 2).is_ok() {
                smaller.extend(self.entries.drain(..));
                self.entries = smaller;
            }
        }
    }

    /// Puts client `c` in line at place `seq`, within the room claimed.
    pub fn insert(&mut self, seq: u64, c: ClientId) {
        let at = self.entries.partition_point(|&(s, _)| s < seq);
        debug_assert!(self.entries.len() < self.entries.capacity(), "room claimed by watch");
        self.entries.insert(at, (seq, c));
    }

    /// Takes the client at place `seq` out of line, if it is there.
    pub fn remove(&mut self, seq: u64) {
        let at = self.entries.partition_point(|&(s, _)| s < seq);
        if self.entries.get(at).is_some_and(|&(s, _)| s == seq) {
            self.entries.remove(at);
        }
    }

    /// The longest waiter and its place in line.
    pub fn first(&self) -> Option<(u64, ClientId)> {
        self.entries.front().copied()
    }

    /// Clients waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nobody waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_waiter_first_and_a_resumed_wait_keeps_its_place() {
        let mut q = WaitQueue::default();
        assert!(q.try_make_room_for(3));
        q.insert(5, ClientId(1));
        q.insert(9, ClientId(2));
        q.remove(5);
        q.insert(7, ClientId(3));
        q.insert(5, ClientId(1));
        assert_eq!(q.first(), Some((5, ClientId(1))));
        q.remove(5);
        assert_eq!(q.first(), Some((7, ClientId(3))));
        q.remove(8);
        assert_eq!(q.len(), 2);
    }
}
