//! A reply's body left in the log (`engine/body.rs`): the engine writes the
//! reply with the body's room zeroed and names what to read under its
//! lock; the connection reads it in once the lock is let go, so a cold or
//! slow disk holds up this client alone (its loop for one read).
//!
//! A body that cannot be read (its file gone, a failed checksum, `EIO`)
//! never reaches the client: the reply becomes `INTERNAL_ERROR`, as
//! beanstalkd answers a failure of its own, the job is buried
//! (`Engine::body_lost`), and the operator is told. In a `reserve-batch`
//! the whole batch is `INTERNAL_ERROR`; its other jobs go back to ready, as
//! if never reserved.

use super::Conn;
use crate::engine::{BodyRead, Engine, JobId};
use crate::protocol::Reply;

/// A body the reply just written leaves to read: the job, and the read
/// (`None` if the engine had no reader for it, which fails as a read).
pub(super) type ToRead = Option<(JobId, Option<BodyRead>)>;

/// Encodes `reply` into `output` under the lock, and names the job whose
/// body it leaves to read, if any: [`find`] it, under the same lock.
pub(super) fn encode(reply: Reply<'_>, output: &mut Vec<u8>) -> Option<JobId> {
    let to_read = reply.body_to_read();
    reply.encode(output);
    to_read
}

/// What to read for job `id`'s body, named by [`encode`].
pub(super) fn find(id: Option<JobId>, engine: &Engine) -> ToRead {
    id.map(|id| (id, engine.body_read(id)))
}

impl Conn {
    /// Reads in the body of the reply from `reply_start` on, whose last
    /// bytes before its CRLF are the body's zeroed room, with no lock
    /// held. False if it could not be: the reply is then `INTERNAL_ERROR`.
    pub(super) fn read_body(&mut self, to_read: ToRead, reply_start: usize) -> bool {
        let Some((id, read)) = to_read else { return true };
        let end = self.output.len().saturating_sub(2);
        let len = read.as_ref().map_or(0, |read| read.place.len as usize);
        match self.fill(end.saturating_sub(len), read.as_ref()) {
            Ok(()) => true,
            Err(e) => {
                self.output.truncate(reply_start);
                Reply::InternalError.encode(&mut self.output);
                self.body_lost(id, &e);
                false
            }
        }
    }

    /// Reads in the bodies of a batch's replies, each `(id, start, read)`
    /// with its body's room at `start`. `Err` with the first job whose
    /// body could not be read, after it was buried.
    pub(super) fn read_bodies(&mut self, reads: &[(JobId, usize, Option<BodyRead>)]) -> Result<(), JobId> {
        for (id, start, read) in reads {
            if let Err(e) = self.fill(*start, read.as_ref()) {
                self.body_lost(*id, &e);
                return Err(*id);
            }
        }
        Ok(())
    }

    /// Reads a body into the output from `start` on.
    fn fill(&mut self, start: usize, read: Option<&BodyRead>) -> std::io::Result<()> {
        let read = read.ok_or_else(|| std::io::Error::other("its log file has no reader"))?;
        let room = self.output.get_mut(start..start + read.place.len as usize);
        crate::binlog::body::read(read, room.ok_or_else(|| std::io::Error::other("no room"))?)
    }

    /// Tells the operator, and the engine, that job `id`'s body is lost.
    fn body_lost(&mut self, id: JobId, e: &std::io::Error) {
        crate::log::problem(format_args!("job {id}: its body cannot be read from the log ({e}); buried"));
        let (mut engine, now) = self.shared.engine_now();
        // The client is answered `INTERNAL_ERROR` whatever this was.
        let _ = engine.body_lost(self.client, id, now);
    }
}
