//! The connections of one event loop, by token: the low 32 bits are a
//! slot, the high ones the slot's generation, so that a wake for a
//! connection that has closed never reaches the one that took its slot.
//! It knows nothing of what a connection does.

use crate::conn::Conn;

/// Each slot's generation and connection, and the slots free.
#[derive(Default)]
pub(super) struct Slots {
    slots: Vec<(u32, Option<Conn>)>,
    free: Vec<u32>,
}

impl Slots {
    /// Places the connection `make` builds for its token. Never allocates
    /// after [`Slots::claim_one_more`].
    pub(super) fn insert(&mut self, make: impl FnOnce(u64) -> Conn) -> u64 {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push((0, None));
            (self.slots.len() - 1) as u32
        });
        let slot = &mut self.slots[index as usize];
        let token = (u64::from(slot.0) << 32) | u64::from(index);
        slot.1 = Some(make(token));
        token
    }

    pub(super) fn get(&mut self, token: u64) -> Option<&mut Conn> {
        let (generation, conn) = self.slots.get_mut((token & 0xffff_ffff) as usize)?;
        if u64::from(*generation) != token >> 32 {
            return None;
        }
        conn.as_mut()
    }

    pub(super) fn remove(&mut self, token: u64) -> Option<Conn> {
        let index = (token & 0xffff_ffff) as u32;
        let (generation, conn) = self.slots.get_mut(index as usize)?;
        let conn = conn.take()?;
        *generation = generation.wrapping_add(1);
        self.free.push(index);
        Some(conn)
    }

    /// The token of slot `index`, if a connection is in it.
    pub(super) fn token(&self, index: usize) -> Option<u64> {
        let (generation, conn) = self.slots.get(index)?;
        conn.as_ref().map(|_| (u64::from(*generation) << 32) | index as u64)
    }

    /// How many slots there are, live or free: tokens are of slots below.
    pub(super) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// How many connections there are.
    pub(super) fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Room for one more connection, in the slots and in the free list
    /// its removal pushes to; false if it cannot be had.
    pub(super) fn claim_one_more(&mut self) -> bool {
        if !self.free.is_empty() {
            return true;
        }
        self.slots.try_reserve(1).is_ok() && self.free.try_reserve(self.slots.len() + 1).is_ok()
    }
}
