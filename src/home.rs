//! What the other threads of a server hold of one event loop: its
//! [`Wakes`], and the connections the accept loop has dealt it, not yet
//! taken. The accept loop hands a connection over with [`Home::arrive`];
//! the loop takes them as it looks at its wakes.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::engine::ClientId;
use crate::stream::SharedConn;
use crate::wakes::Wakes;

/// One loop, as other threads reach it.
#[derive(Debug)]
pub(crate) struct Home {
    pub wakes: Arc<Wakes>,
    arrivals: Mutex<Vec<Arrival>>,
}

/// A connection accepted for a loop: its socket, the engine's id for it,
/// and whether it may run the admin commands.
#[derive(Debug)]
pub(crate) struct Arrival {
    pub conn: Arc<SharedConn>,
    pub client: ClientId,
    pub admin: bool,
}

impl Home {
    pub fn new(id: usize) -> std::io::Result<Home> {
        Ok(Home { wakes: Arc::new(Wakes::new(id)?), arrivals: Mutex::default() })
    }

    fn arrivals(&self) -> MutexGuard<'_, Vec<Arrival>> {
        self.arrivals.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hands the loop a connection to serve.
    pub fn arrive(&self, arrival: Arrival) {
        self.arrivals().push(arrival);
        self.wakes.ring();
    }

    /// The connections handed over since the loop last took them.
    pub fn take_arrivals(&self) -> Vec<Arrival> {
        std::mem::take(&mut *self.arrivals())
    }

    /// Whether any connection waits to be taken, or any wake.
    pub fn has_mail(&self) -> bool {
        self.wakes.any() || !self.arrivals().is_empty()
    }
}
