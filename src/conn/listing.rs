//! The connection's side of `list-jobs-<state>` (reference §3.29): a
//! page gathered by the engine a piece a lock (`engine/listing.rs`), so
//! that the other clients are served between pieces, and its ids sent as
//! the YAML list `list-tubes` sends.

use super::Conn;
use crate::engine::State;
use crate::protocol::{Page, Reply};

impl Conn {
    /// `list-jobs-ready`, `-delayed`, `-reserved` or `-buried`: the
    /// cursor is placed, and the first piece gathered, under one lock.
    pub(super) fn list_jobs(&mut self, state: State, page: Page) {
        let shared = &*self.shared;
        let mut done;
        let mut listing = {
            let (engine, _) = shared.engine_now();
            match engine.list_jobs(self.client, state, page.count as usize, page.after) {
                Ok(mut listing) => {
                    done = engine.list_jobs_piece(&mut listing);
                    listing
                }
                Err(refusal) => return refusal.encode(&mut self.output),
            }
        };
        while !done {
            done = shared.engine().list_jobs_piece(&mut listing);
        }
        let ids = listing.ids();
        let reply = crate::stats::id_list_yaml(&ids).map_or(Reply::OutOfMemory, Reply::Ok);
        reply.encode(&mut self.output);
    }
}
