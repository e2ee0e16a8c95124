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

    /// Hands the loop a connection to serve; gives it back if there is
    /// no memory to note it.
    pub fn arrive(&self, arrival: Arrival) -> Result<(), Arrival> {
        let mut arrivals = self.arrivals();
        if arrivals.try_reserve(1).is_err() {
            return Err(arrival);
        }
        arrivals.push(arrival);
        drop(arrivals);
        self.wakes.ring();
        Ok(())
    }

    /// The connections handed over since the loop last took them, swapped
    /// with `into` (empty), so a warm loop allocates nothing for them.
    pub fn take_arrivals(&self, into: &mut Vec<Arrival>) {
        std::mem::swap(&mut *self.arrivals(), into);
    }

    /// Whether any connection waits to be taken, or any wake.
    pub fn has_mail(&self) -> bool {
        self.wakes.any() || !self.arrivals().is_empty()
    }
}
