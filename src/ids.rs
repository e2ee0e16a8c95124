//! The identities everything else refers to. They sit below every other
//! module, so that the wire format, the stats and the binlog can name a job
//! without depending on the engine that owns it.

/// A job's id: unique within the process, starting at 1, never handed out
/// twice (ids continue across restarts through the binlog).
pub type JobId = u64;

/// Index of a tube in the engine's tube table; stable while the tube
/// lives (a name is what a client sees; this is what a job records).
pub type TubeId = u32;

/// The identity of a client connection inside the engine. A type of its
/// own, so that a client and a job can never be passed in each other's
/// place (`delete(client, job)` would compile with two `u64`s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
