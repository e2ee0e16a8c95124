//! The identities everything else refers to. They sit below every other
//! module, so that the wire format, the stats and the binlog can name a job
//! without depending on the engine that owns it.

/// A job's id: unique within the process, starting at 1, never handed out
/// twice (ids continue across restarts through the binlog).
pub type JobId = u64;

/// The identity of a client connection inside the engine.
pub type ClientId = u64;
