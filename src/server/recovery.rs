//! Start-up with `-b`: the binlog opened, replayed into the engine and
//! handed to it, before the server serves. [`Server::run`] and
//! [`Server::spawn`] call it if the binary has not (it does, after
//! dropping privileges). It must not serve, and runs before any client.

use std::sync::Arc;
use std::time::Instant;

use super::Server;
use crate::binlog::{Binlog, BinlogError};
use crate::engine::RestoredState;
use crate::log::Count;

impl Server {
    /// Opens the binlog of `config.binlog_dir`, if any: locks the directory,
    /// replays it into the engine, and starts a new file. What replay found
    /// is logged (see [`crate::log`]), its warnings as problems. [`Server::run`]
    /// and [`Server::spawn`] call this themselves if it has not been called;
    /// the binary calls it after dropping privileges.
    pub fn open_binlog(&self) -> Result<(), BinlogError> {
        let shared = &self.shared;
        let Some(dir) = &shared.config.binlog_dir else { return Ok(()) };
        if shared.durability.get().is_some() {
            return Ok(());
        }
        let started = Instant::now();
        let (binlog, recovered) = Binlog::open(
            dir,
            shared.config.binlog_file_size,
            shared.config.fsync,
            shared.clock,
            shared.config.job_ids,
            crate::engine::Keeping { above: shared.config.bodies_in_memory },
        )?;
        for warning in &recovered.warnings {
            crate::log::warning(format_args!("{warning}"));
        }
        let count = |f: fn(&RestoredState) -> bool, kind| {
            Count(recovered.jobs.iter().filter(|j| f(&j.state)).count() as u64, kind)
        };
        let (ready, delayed, buried) = (
            count(|s| matches!(s, RestoredState::Ready), "ready job"),
            // A held job is a delayed job with no due time.
            count(|s| matches!(s, RestoredState::Delayed { .. } | RestoredState::Held), "delayed job"),
            count(|s| matches!(s, RestoredState::Buried { .. }), "buried job"),
        );
        crate::log::event(format_args!(
            "binlog {}: replayed {} in {} ms: {ready}, {delayed} and {buried}",
            dir.display(),
            Count(recovered.files as u64, "file"),
            started.elapsed().as_millis()
        ));
        // The directory is locked (the binlog holds it): its identity is ours.
        let kept_id = crate::binlog::identity::load_or_keep(dir, &shared.process.instance_id)?;
        let _ = shared.process.kept_id.set(kept_id);
        let durability = binlog.durability();
        let mut engine = shared.engine();
        engine.restore(&recovered.tubes, recovered.jobs, recovered.next_id, shared.clock.now());
        if engine.next_id() == crate::ids::NO_ID_LEFT {
            crate::log::problem(format_args!(
                "job ids spent: {} has no id left after the binlog's; every put is answered OUT_OF_MEMORY",
                shared.config.job_ids.flags()
            ));
        }
        engine.set_journal(Box::new(binlog));
        engine.rewrite_files(&recovered.corrupt);
        drop(engine);
        // Under `-f 0` the loops wait for the syncer's fsyncs, which ring
        // their bells.
        let homes = shared.homes.clone();
        durability.on_synced(Box::new(move || homes.iter().for_each(|home| home.wakes.ring_always())));
        crate::binlog::sync::Durability::start_group_syncer(&durability)
            .map_err(|e| BinlogError::Open(format!("cannot start the fsync thread: {e}")))?;
        let _ = shared.durability.set(Arc::clone(&durability));
        durability.sync_all();
        Ok(())
    }
}
