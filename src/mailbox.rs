//! A connection's mailbox: where its blocked reserve ends. The engine
//! leaves word there that the wait is over, and, when it hands the client
//! a job, the job's whole `RESERVED` reply, encoded under the engine's lock.
//! The thread that handed the job over sends those bytes once it has let
//! the lock go (or under it, for the few wakes that do not fit outside it,
//! when nothing else would reach the connection's thread); the
//! connection's own thread, woken, takes what they did not send and goes
//! back to reading commands, without taking the engine's lock again. So a job goes from a `put` to a waiting worker's socket with one
//! hold of the lock, and the worker's thread off the path.
//!
//! The connection's thread waits in one of two places. A wait that may
//! time out within a second, a `reserve-with-abort`, or one behind
//! pipelined commands sleeps on this mailbox's `Condvar`, and is woken.
//! Any other it spends in a read of its socket instead (`reading`, see
//! `conn/wait.rs`): a wake does not reach it there, and
//! need not, as a reply sent whole needs nothing more from it; it finds
//! the reply here when its read returns, with the worker's next command.
//! So the hand-off that matters most, a job to an idle worker, wakes the
//! worker's thread once, not twice.
//!
//! **Who writes the socket.** A connection's socket is written by its own
//! thread, except for one reply: the `RESERVED` of a blocked reserve, which
//! the thread that made it may start, and, while the connection's thread
//! waits in a read, the hang-up watcher may go on with (`hangup.rs`). That
//! is safe because
//! - the connection's thread writes nothing while it is blocked in
//!   reserve: it flushed every earlier reply before it blocked;
//! - the reply's bytes are sent only under this mailbox's lock, from the
//!   front, and the connection's thread takes what is left under the same
//!   lock, before it writes again: a reply is never torn, and none is
//!   overtaken;
//! - a send that would wait sends nothing more: the rest is the
//!   connection's thread's to write, however long that takes; or, while
//!   that thread waits in a read and so cannot, the watcher's, which is
//!   asked to under this lock, so never once the thread has taken it.
//!
//! It must not take the engine's lock: the engine takes this one inside
//! its own, and never the other way round.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::engine::{Waker, Withdrawal};
use crate::ids::JobId;

/// One connection's mailbox.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    mail: Mutex<Mail>,
    /// What the connection's thread sleeps on while blocked in reserve.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Mail {
    /// The wait may have ended: the connection's thread should ask the
    /// engine (only a delivered reply it need not ask about).
    ended: bool,
    /// A delivered `RESERVED` reply, whole, or empty.
    reply: Vec<u8>,
    /// The job `reply` is for.
    job: JobId,
    /// How much of `reply` has been sent.
    sent: usize,
    /// The connection's thread took a reply with part of it unsent, for
    /// this job, and is sending the rest.
    taken_unsent: Option<JobId>,
    /// A reply was withdrawn after part of it was sent: the connection
    /// must end (its socket has been shut down).
    cut: bool,
    /// The connection's thread waits in a read of its socket, not on
    /// `changed`: a wake does not reach it.
    reading: bool,
}

impl Mail {
    /// Part of a delivered reply is not sent yet.
    fn unsent(&self) -> bool {
        self.sent < self.reply.len()
    }

    /// Sends what `send` takes now of a delivered reply's unsent part,
    /// from where the last send stopped (nothing if it is all sent).
    fn send_more(&mut self, send: impl FnOnce(&[u8]) -> usize) {
        if self.unsent() {
            self.sent += send(&self.reply[self.sent..]);
        }
    }
}

/// How a sleep in the mailbox ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A job's reply was delivered: it is now in the caller's buffer, its
    /// first `sent` bytes sent already. The reserve is over.
    Delivered { sent: usize },
    /// Word came, or the time is up: ask the engine.
    Look,
    /// The reply was withdrawn after part of it was sent: the connection
    /// ends (see [`Mailbox::withdraw`]).
    Cut,
}

impl Mailbox {
    fn mail(&self) -> MutexGuard<'_, Mail> {
        self.mail.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Has the reply to the wait written into the mailbox by `write`, under
    /// the engine's lock; false if `write` could not (it claims room
    /// first), and then the engine takes the old way (the connection's
    /// thread collects the job under the lock).
    pub(crate) fn deliver(&self, id: JobId, write: &mut dyn FnMut(&mut Vec<u8>) -> bool) -> bool {
        let mut mail = self.mail();
        // One delivery a wait: the last one was taken before this wait began.
        debug_assert!(mail.reply.is_empty());
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
    /// was sent, by anyone, the rest never is: the caller shuts the socket
    /// down, and the connection's thread, woken, ends the connection.
    pub(crate) fn withdraw(&self, id: JobId) -> Withdrawal {
        let mut mail = self.mail();
        let withdrawal = if mail.job == id && !mail.reply.is_empty() {
            match mail.sent {
                0 => Withdrawal::Withdrawn,
                sent if sent < mail.reply.len() => Withdrawal::Cut,
                _ => Withdrawal::Told,
            }
        } else if mail.taken_unsent == Some(id) {
            Withdrawal::Cut
        } else {
            Withdrawal::Told
        };
        if withdrawal != Withdrawal::Told {
            mail.reply.clear();
            mail.sent = 0;
            mail.taken_unsent = None;
        }
        mail.cut |= withdrawal == Withdrawal::Cut;
        drop(mail);
        if withdrawal == Withdrawal::Cut {
            self.changed.notify_one();
        }
        withdrawal
    }

    /// The connection's thread has sent the whole of a reply it took with
    /// part unsent: from now on the job is the client's, whatever happens.
    pub(crate) fn told(&self) {
        self.mail().taken_unsent = None;
    }

    /// Tells the connection's thread that its wait may be over.
    pub(crate) fn wake(&self) {
        self.mail().ended = true;
        // After the lock is let go: woken, the thread takes it at once.
        self.changed.notify_one();
    }

    /// Sends what `send` takes now of a delivered reply (it returns how much
    /// it sent, never waiting), then wakes the connection's thread. If that
    /// thread waits in a read, it cannot write what is left: `finish` is
    /// then asked to have it sent as room comes (false if it cannot, and
    /// the thread takes it when its read gives up, within a second).
    pub(crate) fn send_and_wake(&self, send: impl FnOnce(&[u8]) -> usize, finish: impl FnOnce() -> bool) {
        self.end_wait(true, send, finish);
    }

    /// [`Mailbox::wake`], under the engine's lock (more wakes at once than
    /// are carried out of it, or the timer's): a thread waiting in a read is
    /// not reached by a wake, only by its reply, which is then sent now,
    /// under that lock; to a sleeping thread it is not.
    pub(crate) fn wake_reaching(&self, send: impl FnOnce(&[u8]) -> usize, finish: impl FnOnce() -> bool) {
        self.end_wait(false, send, finish);
    }

    /// Both of the above, under one hold of this lock: whether the thread
    /// reads and the word that the wait is over are seen together, so a
    /// thread about to read either is sent its reply or finds the word.
    fn end_wait(&self, always_send: bool, send: impl FnOnce(&[u8]) -> usize, finish: impl FnOnce() -> bool) {
        let mut mail = self.mail();
        if always_send || mail.reading {
            mail.send_more(send);
        }
        mail.ended = true;
        if mail.reading && (!mail.unsent() || finish()) {
            // Whole, or left to someone who will finish it: the thread will
            // find it here when its read returns.
            return;
        }
        drop(mail);
        self.changed.notify_one();
    }

    /// Sends more of a delivered reply, as [`Mailbox::send_and_wake`] did,
    /// if the connection's thread still waits in a read and part is unsent;
    /// if part still is, `finish` is asked again.
    pub(crate) fn send_rest(&self, send: impl FnOnce(&[u8]) -> usize, finish: impl FnOnce() -> bool) {
        let mut mail = self.mail();
        if !mail.reading {
            return;
        }
        mail.send_more(send);
        if mail.unsent() {
            // If no one can be asked, the thread takes it when its read
            // gives up.
            let _ = finish();
        }
    }

    /// The connection's thread is about to wait in a read of its socket;
    /// false if its wait has already ended, and then it must not.
    pub(crate) fn start_reading(&self) -> bool {
        let mut mail = self.mail();
        if mail.ended || mail.cut || !mail.reply.is_empty() {
            return false;
        }
        mail.reading = true;
        true
    }

    /// The connection's thread has come back from its read. A delivered
    /// reply is moved into `out`, as by [`Mailbox::sleep`]; from now on,
    /// only that thread sends what is left of it. Other word that came is
    /// kept, so that the next [`Mailbox::sleep`] returns at once.
    pub(crate) fn stop_reading(&self, out: &mut Vec<u8>) -> Woken {
        let mut mail = self.mail();
        mail.reading = false;
        if mail.reply.is_empty() && !mail.cut {
            return Woken::Look;
        }
        Self::take(&mut mail, out)
    }

    /// Sleeps until word comes or `timeout` passes (`None`: no timeout). A
    /// delivered reply is moved into `out`, which must be empty.
    pub(crate) fn sleep(&self, timeout: Option<Duration>, out: &mut Vec<u8>) -> Woken {
        let mut mail = self.mail();
        let waiting = |mail: &mut Mail| !mail.ended && !mail.cut && mail.reply.is_empty();
        mail = match timeout {
            Some(timeout) => self
                .changed
                .wait_timeout_while(mail, timeout, waiting)
                .map_or_else(|e| e.into_inner().0, |r| r.0),
            None => self.changed.wait_while(mail, waiting).unwrap_or_else(|e| e.into_inner()),
        };
        Self::take(&mut mail, out)
    }

    /// Takes the word left in `mail`: a delivered reply into `out`. One
    /// with part unsent stays withdrawable until [`Mailbox::told`].
    fn take(mail: &mut Mail, out: &mut Vec<u8>) -> Woken {
        if mail.cut {
            return Woken::Cut;
        }
        if mail.reply.is_empty() {
            mail.ended = false;
            return Woken::Look;
        }
        mail.ended = false;
        if mail.sent < mail.reply.len() {
            mail.taken_unsent = Some(mail.job);
        }
        debug_assert!(out.is_empty());
        // The buffers trade places: the mailbox keeps `out`'s room for the
        // next delivery, and nothing is copied.
        std::mem::swap(out, &mut mail.reply);
        mail.reply.clear();
        Woken::Delivered { sent: std::mem::take(&mut mail.sent) }
    }

    /// Lets go of the room kept for a delivery: the connection is idle.
    pub(crate) fn go_idle(&self) {
        let mut mail = self.mail();
        if mail.reply.is_empty() {
            mail.reply = Vec::new();
        }
    }
}

/// A mailbox with no socket (tests, benchmarks, an embedding's own
/// clients): the connection's thread sends the whole reply itself.
impl Waker for Mailbox {
    fn wake(&self) {
        Mailbox::wake(self);
    }

    fn has_hung_up(&self) -> bool {
        false
    }

    fn deliver(&self, id: JobId, write: &mut dyn FnMut(&mut Vec<u8>) -> bool) -> bool {
        Mailbox::deliver(self, id, write)
    }

    fn withdraw(&self, id: JobId) -> Withdrawal {
        Mailbox::withdraw(self, id)
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
    fn a_reply_partly_sent_is_taken_from_where_the_send_stopped() {
        let mailbox = Mailbox::default();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        mailbox.send_and_wake(|bytes| bytes.len().min(5), || false);
        let mut out = Vec::new();
        assert_eq!(mailbox.sleep(Some(Duration::ZERO), &mut out), Woken::Delivered { sent: 5 });
        assert_eq!(out, b"RESERVED 1 2\r\nhi\r\n");
        // The next wait starts empty: word of this one is used up.
        assert_eq!(mailbox.sleep(Some(Duration::ZERO), &mut Vec::new()), Woken::Look);
    }

    #[test]
    fn a_reply_sent_whole_is_all_sent_and_one_never_sent_is_all_unsent() {
        let mailbox = Mailbox::default();
        delivered(&mailbox, b"RESERVED 1 0\r\n\r\n");
        mailbox.send_and_wake(<[u8]>::len, || false);
        let mut out = Vec::new();
        assert_eq!(mailbox.sleep(None, &mut out), Woken::Delivered { sent: 16 });
        out.clear();
        delivered(&mailbox, b"RESERVED 2 0\r\n\r\n");
        assert_eq!(mailbox.sleep(None, &mut out), Woken::Delivered { sent: 0 });
        assert_eq!(out, b"RESERVED 2 0\r\n\r\n");
    }

    #[test]
    fn word_without_a_reply_says_look_and_so_does_the_time_running_out() {
        let mailbox = Mailbox::default();
        mailbox.wake();
        assert_eq!(mailbox.sleep(None, &mut Vec::new()), Woken::Look);
        assert_eq!(mailbox.sleep(Some(Duration::from_millis(1)), &mut Vec::new()), Woken::Look);
    }

    #[test]
    fn a_reply_sent_whole_to_a_reading_thread_is_found_when_its_read_returns() {
        let mailbox = Mailbox::default();
        assert!(mailbox.start_reading());
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        let asked = std::cell::Cell::new(false);
        mailbox.send_and_wake(<[u8]>::len, || asked.replace(true));
        assert!(!asked.get(), "nothing is left to finish");
        let mut out = Vec::new();
        assert_eq!(mailbox.stop_reading(&mut out), Woken::Delivered { sent: 18 });
        assert_eq!(out, b"RESERVED 1 2\r\nhi\r\n");
    }

    #[test]
    fn the_rest_of_a_reply_to_a_reading_thread_is_finished_until_the_thread_takes_it() {
        let mailbox = Mailbox::default();
        assert!(mailbox.start_reading());
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        let asked = std::cell::Cell::new(0);
        let finish = || {
            asked.set(asked.get() + 1);
            true
        };
        mailbox.send_and_wake(|bytes| bytes.len().min(5), finish);
        assert_eq!(asked.get(), 1, "the socket had room for 5 bytes only");
        // The watcher sends more as room comes, from where the send stopped.
        let sent = std::cell::RefCell::new(Vec::new());
        let send = |bytes: &[u8]| {
            sent.borrow_mut().extend_from_slice(&bytes[..4]);
            4
        };
        mailbox.send_rest(send, finish);
        assert_eq!(sent.borrow().as_slice(), b"VED ");
        assert_eq!(asked.get(), 2);
        // The thread's read returns: the rest is its own to write.
        let mut out = Vec::new();
        assert_eq!(mailbox.stop_reading(&mut out), Woken::Delivered { sent: 9 });
        mailbox.send_rest(|_| unreachable!("taken"), || unreachable!("taken"));
    }

    #[test]
    fn a_wait_ended_before_the_read_is_not_read_and_word_during_it_is_kept() {
        let mailbox = Mailbox::default();
        mailbox.wake();
        assert!(!mailbox.start_reading(), "the wait is over: ask the engine");
        assert_eq!(mailbox.sleep(None, &mut Vec::new()), Woken::Look);
        assert!(mailbox.start_reading());
        mailbox.wake();
        assert_eq!(mailbox.stop_reading(&mut Vec::new()), Woken::Look);
        // Kept for the sleep that follows, which must not block.
        assert_eq!(mailbox.sleep(None, &mut Vec::new()), Woken::Look);
    }

    #[test]
    fn a_wake_under_the_lock_sends_to_a_reading_thread_and_leaves_word_for_one_about_to_read() {
        let mailbox = Mailbox::default();
        // Not reading yet: nothing is sent, and the thread must not read.
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        mailbox.wake_reaching(|_| unreachable!("its own thread sends it"), || unreachable!());
        assert!(!mailbox.start_reading());
        assert_eq!(mailbox.sleep(None, &mut Vec::new()), Woken::Delivered { sent: 0 });
        // Reading: the reply is sent now, as nothing else would reach it.
        assert!(mailbox.start_reading());
        delivered(&mailbox, b"RESERVED 2 2\r\nhi\r\n");
        mailbox.wake_reaching(<[u8]>::len, || unreachable!("sent whole"));
        assert_eq!(mailbox.stop_reading(&mut Vec::new()), Woken::Delivered { sent: 18 });
    }

    #[test]
    fn a_delivery_that_finds_no_room_leaves_the_mailbox_empty() {
        let mailbox = Mailbox::default();
        assert!(!mailbox.deliver(1, &mut |_| false));
        assert_eq!(mailbox.sleep(Some(Duration::ZERO), &mut Vec::new()), Woken::Look);
    }

    #[test]
    fn a_reply_none_of_which_was_sent_is_withdrawn_and_the_wait_goes_on() {
        let mailbox = Mailbox::default();
        assert!(mailbox.start_reading());
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        mailbox.send_and_wake(|_| 0, || true);
        assert_eq!(mailbox.withdraw(2), Withdrawal::Told, "another job's");
        assert_eq!(mailbox.withdraw(1), Withdrawal::Withdrawn);
        // The watcher asked to finish it finds nothing to send.
        mailbox.send_rest(|_| unreachable!("withdrawn"), || unreachable!("withdrawn"));
        assert_eq!(mailbox.stop_reading(&mut Vec::new()), Woken::Look, "the engine has the wait again");
    }

    #[test]
    fn a_reply_partly_sent_is_never_finished_once_withdrawn() {
        let mailbox = Mailbox::default();
        assert!(mailbox.start_reading());
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        mailbox.send_and_wake(|bytes| bytes.len().min(5), || true);
        assert_eq!(mailbox.withdraw(1), Withdrawal::Cut);
        mailbox.send_rest(|_| unreachable!("cut"), || unreachable!("cut"));
        assert_eq!(mailbox.stop_reading(&mut Vec::new()), Woken::Cut);
        assert!(!mailbox.start_reading(), "the connection ends");
        assert_eq!(mailbox.sleep(None, &mut Vec::new()), Woken::Cut);
    }

    #[test]
    fn a_reply_taken_with_part_unsent_is_the_clients_once_told() {
        let mailbox = Mailbox::default();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        let mut out = Vec::new();
        assert_eq!(mailbox.sleep(None, &mut out), Woken::Delivered { sent: 0 });
        assert_eq!(mailbox.withdraw(1), Withdrawal::Cut, "its thread is sending it");
        out.clear();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        let mut out = Vec::new();
        let mailbox = Mailbox::default();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        assert_eq!(mailbox.sleep(None, &mut out), Woken::Delivered { sent: 0 });
        mailbox.told();
        assert_eq!(mailbox.withdraw(1), Withdrawal::Told);
        // Sent whole before it was taken: told.
        out.clear();
        delivered(&mailbox, b"RESERVED 1 2\r\nhi\r\n");
        mailbox.send_and_wake(<[u8]>::len, || false);
        assert_eq!(mailbox.withdraw(1), Withdrawal::Told);
    }
}
