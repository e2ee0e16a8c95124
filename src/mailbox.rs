//! A connection's mailbox: where its blocked reserve ends. The engine
//! leaves word there that the wait is over, and, when it hands the client
//! a job, the job's whole `RESERVED` reply, encoded under the engine's
//! lock. The connection's event loop, woken, sends the reply from here
//! and goes back to reading commands, without taking the engine's lock
//! again: a job goes from a `put` to a waiting worker's socket with one
//! hold of the lock.
//!
//! **Why the reply stays here until it is all sent.** The engine may take
//! the job back before the worker was told (its TTR ran out while the
//! socket was full, or a `flush-tube` deleted it): then the reply must
//! never be finished (reference §10). Only the mailbox knows how much of
//! the reply has left, so it answers [`Mailbox::withdraw`]: none sent, the
//! reply goes and the wait goes on; part sent, the connection is cut;
//! all sent, the worker was told while it held the job.
//!
//! **Who writes the socket.** The connection's own loop, and one other:
//! the thread that delivered a reply may send it on the way once it lets
//! the engine's lock go, if the loop said it waits with nothing earlier
//! unsent (`clear_to_send`), so that the worker is told at once. The
//! reply's bytes leave only under this mailbox's lock, from the front, so
//! it is never torn, and nothing earlier is overtaken. It must not take
//! the engine's lock: the engine takes this one inside its own, and never
//! the other way round.

use std::sync::{Mutex, MutexGuard};

use crate::engine::Withdrawal;
use crate::ids::JobId;

/// One connection's mailbox.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    mail: Mutex<Mail>,
}

#[derive(Debug, Default)]
struct Mail {
    /// The wait may have ended: the loop should ask the engine (only a
    /// delivered reply it need not ask about).
    ended: bool,
    /// A delivered `RESERVED` reply, whole, until all of it is sent.
    reply: Vec<u8>,
    /// The job `reply` is for.
    job: JobId,
    /// How much of `reply` has been sent.
    sent: usize,
    /// A reply was withdrawn after part of it was sent: the connection
    /// must end.
    cut: bool,
    /// The loop waits with no earlier reply unsent: the thread that
    /// delivers a reply may send it on the way ([`Mailbox::send_early`]).
    clear_to_send: bool,
    /// And it has no bytes from the client to act on: only new bytes
    /// (which raise an event) or a timer can give it work.
    quiet: bool,
}

/// What the loop finds in the mailbox.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Word {
    /// Nothing new.
    Nothing,
    /// The wait may be over: ask the engine.
    Look,
    /// A job's reply was delivered, and some of it is not sent yet:
    /// [`Mailbox::send`] it.
    Delivered,
    /// A reply was withdrawn after part of it was sent: the connection ends.
    Cut,
}

/// How much of a delivered reply [`Mailbox::send`] has sent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// All of it: the reserve is over.
    All,
    /// Part of it: the rest when the socket has room.
    Part,
    /// None was there: it was withdrawn, and the wait goes on.
    Withdrawn,
}

impl Mailbox {
    fn mail(&self) -> MutexGuard<'_, Mail> {
        self.mail.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Has the reply to the wait written into the mailbox by `write`, under
    /// the engine's lock; false if `write` could not (it claims room
    /// first), and then the engine takes the old way (the loop collects
    /// the job under the lock).
    pub(crate) fn deliver(&self, id: JobId, write: &mut dyn FnMut(&mut Vec<u8>) -> bool) -> bool {
        let mut mail = self.mail();
        mail.reply.clear();
        mail.sent = 0;
        mail.job = id;
        let written = write(&mut mail.reply);
        if !written {
            mail.reply.clear();
        }
        written
    }

    /// Job `id`'s reply is no longer the client's to have (the engine took
    /// the job back, under its lock). If it is here and none of it was
    /// sent, it goes, and the wait is the engine's again. If part of it
    /// was sent, the rest never is, and the connection ends.
    pub(crate) fn withdraw(&self, id: JobId) -> Withdrawal {
        let mut mail = self.mail();
        let withdrawal = match mail.sent {
            _ if mail.job != id || mail.reply.is_empty() => Withdrawal::Told,
            0 => Withdrawal::Withdrawn,
            sent if sent < mail.reply.len() => Withdrawal::Cut,
            _ => Withdrawal::Told,
        };
        if withdrawal != Withdrawal::Told {
            mail.reply.clear();
            mail.sent = 0;
            mail.clear_to_send &= withdrawal == Withdrawal::Withdrawn;
        }
        mail.cut |= withdrawal == Withdrawal::Cut;
        withdrawal
    }

    /// Notes that the wait may be over (the caller then wakes the loop).
    pub(crate) fn wake(&self) {
        self.mail().ended = true;
    }

    /// What the loop should do about this mailbox now. The word that the
    /// wait may be over is taken: asked again, it is [`Word::Nothing`].
    pub(crate) fn word(&self) -> Word {
        let mut mail = self.mail();
        if mail.cut {
            Word::Cut
        } else if !mail.reply.is_empty() {
            Word::Delivered
        } else if std::mem::take(&mut mail.ended) {
            Word::Look
        } else {
            Word::Nothing
        }
    }

    /// Sends what `send` takes of a delivered reply's unsent part (it
    /// returns how much it sent, never waiting). Once all of it has gone,
    /// the job is the client's, whatever happens, and the mailbox is
    /// empty.
    pub(crate) fn send(&self, send: impl FnOnce(&[u8]) -> usize) -> Sent {
        let mut mail = self.mail();
        if mail.reply.is_empty() {
            return Sent::Withdrawn;
        }
        let sent = mail.sent;
        if sent < mail.reply.len() {
            mail.sent += send(&mail.reply[sent..]);
        }
        if mail.sent < mail.reply.len() {
            return Sent::Part;
        }
        mail.reply.clear();
        mail.sent = 0;
        mail.ended = false;
        mail.clear_to_send = false;
        // A large job's reply is not kept for the next.
        if mail.reply.capacity() > 64 * 1024 {
            mail.reply = Vec::new();
        }
        Sent::All
    }

    /// The loop waits in a blocked reserve with every earlier reply sent
    /// (and, if `quiet`, no bytes of the client's to act on): until it
    /// takes a delivered reply, another thread may send it.
    pub(crate) fn clear_to_send(&self, quiet: bool) {
        let mut mail = self.mail();
        mail.clear_to_send = true;
        mail.quiet = quiet;
    }

    /// Sends what `send` takes now of a delivered reply, if the loop said
    /// it is clear to: called by the thread that handed the job over, once
    /// it has let the engine's lock go, so that the worker is told at once
    /// (its TTR runs from the hand-off), not when its loop next comes to
    /// it, which may be after a long command of the putting client's.
    /// True if all of it has gone and the loop was quiet: then it need not
    /// be woken, as nothing is left for it to do until the worker's next
    /// command, whose bytes wake it, and it finds the wait over then.
    pub(crate) fn send_early(&self, send: impl FnOnce(&[u8]) -> usize) -> bool {
        let mut mail = self.mail();
        if !mail.clear_to_send || mail.reply.is_empty() {
            return false;
        }
        let sent = mail.sent;
        mail.sent += send(&mail.reply[sent..]);
        mail.quiet && mail.sent == mail.reply.len()
    }

    /// Shows `show` the first line of a delivered reply (for `-VV`).
    pub(crate) fn first_line(&self, show: impl FnOnce(&[u8])) {
        let mail = self.mail();
        show(mail.reply.split(|&b| b == b'\r').next().unwrap_or_default());
    }

    /// Lets go of the room kept for a delivery: the connection is idle.
    pub(crate) fn go_idle(&self) {
        let mut mail = self.mail();
        if mail.reply.is_empty() {
            mail.reply = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivered(mailbox: &Mailbox, reply: &[u8]) {
        assert!(mailbox.deliver(1, &mut |out| {
            out.extend_from_slice(reply);
            true
        }));
    }

    #[test]
    fn a_reply_is_sent_from_where_the_last_send_stopped() {
        let mailbox = Mailbox::default();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        assert_eq!(mailbox.word(), Word::Delivered);
        let mut wire = Vec::new();
        let part = mailbox.send(|bytes| {
            wire.extend_from_slice(&bytes[..5]);
            5
        });
        assert_eq!(part, Sent::Part);
        let all = mailbox.send(|bytes| {
            wire.extend_from_slice(bytes);
            bytes.len()
        });
        assert_eq!(all, Sent::All);
        assert_eq!(wire, b"RESERVED 1 2\r\nhi\r\n");
        assert_eq!(mailbox.word(), Word::Nothing);
    }

    #[test]
    fn a_withdrawal_takes_back_an_unsent_reply_and_cuts_a_part_sent_one() {
        let mailbox = Mailbox::default();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        assert_eq!(mailbox.withdraw(2), Withdrawal::Told, "another job's");
        assert_eq!(mailbox.withdraw(1), Withdrawal::Withdrawn);
        assert_eq!(mailbox.word(), Word::Nothing);

        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        assert_eq!(mailbox.send(|_| 3), Sent::Part);
        assert_eq!(mailbox.withdraw(1), Withdrawal::Cut);
        assert_eq!(mailbox.word(), Word::Cut);

        let mailbox = Mailbox::default();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        assert_eq!(mailbox.send(|bytes| bytes.len()), Sent::All);
        assert_eq!(mailbox.send(|bytes| bytes.len()), Sent::Withdrawn, "nothing left");
        assert_eq!(mailbox.withdraw(1), Withdrawal::Told, "all of it went");
    }

    #[test]
    fn word_that_a_wait_ended_is_taken_once() {
        let mailbox = Mailbox::default();
        mailbox.wake();
        assert_eq!(mailbox.word(), Word::Look);
        assert_eq!(mailbox.word(), Word::Nothing);
    }
}
