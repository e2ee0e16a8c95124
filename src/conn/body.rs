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

/// Where a reply just written left a body's room, to be read into.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hole {
    id: JobId,
    at: usize,
    len: usize,
}

/// A body to read in: its room, and the read (`None` if the engine had no
/// reader for it, which fails as a read does).
pub(super) type ToRead = Option<(Hole, Option<BodyRead>)>;

/// Encodes `reply` into `output` under the lock, and says where it left
/// a body to read, if it did (a reply that found no room for it, written
/// `OUT_OF_MEMORY`, left none): [`find`] it, under the same lock.
pub(super) fn encode(reply: Reply<'_>, output: &mut Vec<u8>) -> Option<Hole> {
    let to_read = reply.body_to_read();
    let before = output.len();
    reply.encode(output);
    let (id, len) = to_read?;
    let written = output.get(before..).unwrap_or_default();
    if written.starts_with(Reply::OutOfMemory.word().as_bytes()) {
        return None;
    }
    let at = output.len().checked_sub(len + 2).filter(|&at| at > before)?;
    Some(Hole { id, at, len })
}

/// What to read into `hole`, left by [`encode`].
pub(super) fn find(hole: Option<Hole>, engine: &Engine) -> ToRead {
    hole.map(|hole| (hole, engine.body_read(hole.id)))
}

impl Conn {
    /// Reads in the body of the reply from `reply_start` on, with no lock
    /// held. False if it could not be: the reply is then `INTERNAL_ERROR`.
    /// (Its own frame, never inlined: most replies have no body to read.)
    #[inline(never)]
    pub(super) fn read_body(&mut self, to_read: ToRead, reply_start: usize) -> bool {
        let Some((hole, read)) = to_read else { return true };
        match self.fill(hole, read.as_ref()) {
            Ok(()) => true,
            Err(e) => {
                self.output.truncate(reply_start);
                Reply::InternalError.encode(&mut self.output);
                self.unread(hole.id, read.is_some(), &e);
                false
            }
        }
    }

    /// Reads in the bodies of a batch's replies. `Err` if one could not
    /// be read, with its job if that was buried.
    #[inline(never)]
    pub(super) fn read_bodies(&mut self, reads: &[(Hole, Option<BodyRead>)]) -> Result<(), Option<JobId>> {
        for (hole, read) in reads {
            if let Err(e) = self.fill(*hole, read.as_ref()) {
                self.unread(hole.id, read.is_some(), &e);
                return Err(read.is_some().then_some(hole.id));
            }
        }
        Ok(())
    }

    /// Job `id`'s body was not read: `lost` (its read failed: the body is
    /// gone or damaged, and the job is buried), or its file could not be
    /// opened now (no descriptor to spare: the job is kept, and one this
    /// client holds goes back to ready).
    fn unread(&mut self, id: JobId, lost: bool, e: &std::io::Error) {
        if lost {
            self.body_lost(id, e);
            return;
        }
        crate::log::problem(format_args!("job {id}: its log file cannot be opened now ({e}); not sent"));
        let (mut engine, now) = self.shared.engine_now();
        engine.unsend(self.client, id, now);
    }

    /// Reads a body into its hole in the output.
    fn fill(&mut self, hole: Hole, read: Option<&BodyRead>) -> std::io::Result<()> {
        let read = read.filter(|read| read.id == hole.id && read.place.len as usize == hole.len);
        let read = read.ok_or_else(|| std::io::Error::other("no descriptor or memory to open it"))?;
        let room = self.output.get_mut(hole.at..hole.at + hole.len);
        crate::binlog::body::read(read, room.ok_or_else(|| std::io::Error::other("no room"))?)
    }
    /// Tells the operator, and the engine, that job `id`'s body is lost.
    #[cold]
    #[inline(never)]
    fn body_lost(&mut self, id: JobId, e: &std::io::Error) {
        crate::log::problem(format_args!("job {id}: its body cannot be read from the log ({e}); buried"));
        let (mut engine, now) = self.shared.engine_now();
        // The client is answered `INTERNAL_ERROR` whatever this was.
        let _ = engine.body_lost(self.client, id, now);
    }
}
