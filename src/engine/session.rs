//! A client's session: connecting, hanging up, closing (its reservations go
//! back to ready, its tubes may vanish), and the tubes it uses and watches
//! (`use`, `watch`, `ignore`), and what it may not do to the jobs it does
//! not hold when it is not the admin socket's. It changes no job except to
//! release a closing client's reservations.

use super::*;
use crate::protocol::{AdminCommands, Name};

impl Engine {
    /// Registers a new client, using and watching `default`. `waker` wakes
    /// its thread while blocked in reserve. `None` if the memory a client
    /// needs cannot be had, and then nothing changed.
    pub fn connect(&mut self, waker: Arc<dyn Waker>) -> Option<ClientId> {
        // The default tube is never destroyed.
        let default = self.tubes.find(&TubeName::default_tube())?;
        let tube = self.tubes.get_mut(default);
        let mut watched = Vec::new();
        let room = self.clients.try_reserve(1).is_ok()
            && watched.try_reserve_exact(1).is_ok()
            && tube.waiting.try_make_room_for(tube.watching + 1);
        if !room {
            return None;
        }
        watched.push(default);
        let client = Client {
            used: default,
            watched,
            reserved: List::default(),
            soonest_deadline: Soonest::Known(None),
            producer: false,
            worker: false,
            hung_up: false,
            blocked: None,
            waker,
            reserve_mode: Default::default(),
            weights: Vec::new(),
            refused: AdminCommands::NONE,
        };
        let client = crate::sys::try_box(client).ok()?;
        let id = self.next_client_id;
        self.next_client_id.0 += 1;
        self.total_connections += 1;
        tube.using += 1;
        tube.watching += 1;
        self.clients.insert(id, client);
        Some(id)
    }

    /// Client `c` is not the admin socket's: the commands of `refused`
    /// that work on jobs by id (`delete`, `delete-batch`) are
    /// `NOT_PERMITTED` on any job it does not hold (reference §3.0,
    /// `admin unless held`). The connection refuses the rest of the set
    /// whole, before the engine sees them.
    pub fn restrict(&mut self, c: ClientId, refused: AdminCommands) {
        if let Some(client) = self.clients.get_mut(&c) {
            client.refused = refused;
        }
    }

    /// Whether client `c` may not run `name` on a job it does not hold.
    pub(super) fn refuses(&self, c: ClientId, name: Name) -> bool {
        self.clients.get(&c).is_some_and(|client| client.refused.contains(name))
    }

    /// Forgets a client that closed: its reservations go back to ready at once,
    /// in the order it made them, and its tube references are dropped.
    pub fn disconnect(&mut self, c: ClientId, now: Time) {
        self.stop_waiting(c);
        while let Some(id) = self.clients.get(&c).and_then(|cl| cl.reserved.front()) {
            let spent = self.tries_spent(id);
            self.end_work(
                id,
                if spent { metering::WorkEnd::Buried } else { metering::WorkEnd::Released },
                now,
            );
            self.unlink(id);
            if !(spent && self.bury_spent(id, now, "its worker hung up")) {
                self.make_ready(id, now);
            }
        }
        self.serve_freed(now);
        let Some(mut client) = self.clients.remove(&c) else { return };
        self.producers -= usize::from(client.producer);
        self.workers -= usize::from(client.worker);
        // beanstalkd empties the watch list by removing its first entry over
        // and over (each time the last entry fills the gap); tubes vanish in
        // that order, which `list-tubes` shows (reference §5.3).
        while !client.watched.is_empty() {
            let t = client.watched.swap_remove(0);
            let tube = self.tubes.get_mut(t);
            tube.watching -= 1;
            tube.waiting.fit(tube.watching);
            self.tubes.remove_if_unreferenced(t);
        }
        self.tubes.get_mut(client.used).using -= 1;
        self.tubes.remove_if_unreferenced(client.used);
    }

    /// Notes that a client closed its sending side. A blocked reserve ends
    /// with `TIMED_OUT` now, and no later reserve will block (reference §1.7).
    pub fn hang_up(&mut self, c: ClientId) {
        let Some(client) = self.clients.get_mut(&c) else {
            return;
        };
        client.hung_up = true;
        if matches!(client.blocked.as_deref(), Some(Blocked::Waiting(_))) {
            self.finish_wait(c, Outcome::TimedOut);
        }
    }

    /// `use <tube>`.
    pub fn use_tube(&mut self, c: ClientId, name: &TubeName) -> Reply<'_> {
        self.cmds.use_ += 1;
        let Some(new) = self.tubes.find_or_create(name) else {
            return Reply::OutOfMemory;
        };
        let Some(client) = self.clients.get_mut(&c) else {
            self.tubes.remove_if_unreferenced(new);
            return Reply::InternalError;
        };
        let old = std::mem::replace(&mut client.used, new);
        self.tubes.get_mut(new).using += 1;
        self.tubes.get_mut(old).using -= 1;
        self.tubes.remove_if_unreferenced(old);
        Reply::Using(&self.tubes.get(new).name)
    }

    /// `watch <tube>`.
    pub fn watch(&mut self, c: ClientId, name: &TubeName) -> Reply<'_> {
        self.watch_weighted(c, name, 1)
    }

    /// `watch <tube> <weight>` (tuber's): `watch`, and the weight the
    /// client's weighted reserves give the tube (§3.26); watching it again
    /// sets the weight again, `watch <tube>` back to 1.
    pub fn watch_weighted(&mut self, c: ClientId, name: &TubeName, weight: u16) -> Reply<'_> {
        self.cmds.watch += 1;
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        if client.watched.try_reserve(1).is_err() {
            return Reply::OutOfMemory;
        }
        let Some(t) = self.tubes.find_or_create(name) else {
            return Reply::OutOfMemory;
        };
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        if !client.claim_weight(t, weight) {
            self.tubes.remove_if_unreferenced(t);
            return Reply::OutOfMemory;
        }
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        if !client.watched.contains(&t) {
            // Room in the tube's waiting queue for one more watcher, claimed
            // before anything changes; a tube this created goes again.
            let tube = self.tubes.get_mut(t);
            if !tube.waiting.try_make_room_for(tube.watching + 1) {
                self.tubes.remove_if_unreferenced(t);
                return Reply::OutOfMemory;
            }
            tube.watching += 1;
            client.watched.push(t);
        }
        client.set_weight(t, weight);
        Reply::Watching(client.watched.len())
    }

    /// `ignore <tube>`.
    pub fn ignore(&mut self, c: ClientId, name: &TubeName) -> Reply<'_> {
        self.cmds.ignore += 1;
        let t = self.tubes.find(name);
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        let Some(slot) = t.and_then(|t| client.watched.iter().position(|&w| w == t)) else {
            return Reply::Watching(client.watched.len());
        };
        if client.watched.len() == 1 {
            return Reply::NotIgnored;
        }
        // Swap-remove, as beanstalkd does: the watch list order shows it.
        let t = client.watched.swap_remove(slot);
        client.forget_weight(t);
        let count = client.watched.len();
        let tube = self.tubes.get_mut(t);
        tube.watching -= 1;
        tube.waiting.fit(tube.watching);
        self.tubes.remove_if_unreferenced(t);
        Reply::Watching(count)
    }
}
