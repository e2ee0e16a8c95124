//! A client's session: connecting, hanging up, closing (its reservations go
//! back to ready, its tubes may vanish), and the tubes it uses and watches
//! (`use`, `watch`, `ignore`). It changes no job except to release a closing
//! client's reservations.

use super::*;

impl Engine {
    /// Registers a new client, using and watching `default`. `waker` wakes
    /// its thread while blocked in reserve.
    pub fn connect(&mut self, waker: Arc<dyn Waker>) -> ClientId {
        let id = self.next_client_id;
        self.next_client_id.0 += 1;
        self.total_connections += 1;
        let default = self.tubes.find_or_create(&TubeName::default_tube());
        let tube = self.tubes.get_mut(default);
        tube.using += 1;
        tube.watching += 1;
        self.clients.insert(
            id,
            Box::new(Client {
                used: default,
                watched: vec![default],
                reserved: List::default(),
                soonest_deadline: Soonest::Known(None),
                producer: false,
                worker: false,
                hung_up: false,
                blocked: None,
                waker,
            }),
        );
        id
    }

    /// Forgets a client that closed: its reservations go back to ready at once,
    /// in the order it made them, and its tube references are dropped.
    pub fn disconnect(&mut self, c: ClientId, now: Time) {
        self.stop_waiting(c);
        while let Some(id) = self.clients.get(&c).and_then(|cl| cl.reserved.front()) {
            self.unlink(id);
            self.make_ready(id, now);
        }
        let Some(mut client) = self.clients.remove(&c) else { return };
        self.producers -= usize::from(client.producer);
        self.workers -= usize::from(client.worker);
        // beanstalkd empties the watch list by removing its first entry over
        // and over (each time the last entry fills the gap); tubes vanish in
        // that order, which `list-tubes` shows (reference §5.3).
        while !client.watched.is_empty() {
            let t = client.watched.swap_remove(0);
            self.tubes.get_mut(t).watching -= 1;
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
        let new = self.tubes.find_or_create(name);
        let Some(client) = self.clients.get_mut(&c) else {
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
        self.cmds.watch += 1;
        let t = self.tubes.find_or_create(name);
        let Some(client) = self.clients.get_mut(&c) else {
            return Reply::InternalError;
        };
        if !client.watched.contains(&t) {
            client.watched.push(t);
            self.tubes.get_mut(t).watching += 1;
        }
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
        let count = client.watched.len();
        self.tubes.get_mut(t).watching -= 1;
        self.tubes.remove_if_unreferenced(t);
        Reply::Watching(count)
    }
}
