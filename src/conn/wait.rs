//! A blocked reserve, as a state of its connection: `Waiting` until the
//! engine has an outcome, and until a job's reply has all left.
//! No thread waits: the engine keeps the client in its tubes' waiting
//! queues (`engine/reserve.rs`), and the loop comes back here when
//! something may have ended the wait:
//!
//! - a wake: the engine handed the client a job (its whole `RESERVED`
//!   reply is in the mailbox, `mailbox.rs`) or ended the wait otherwise;
//! - the timer the loop set for the wait's timeout or safety margin;
//! - the socket: a hang-up ends any wait (`TIMED_OUT`), and, for a
//!   `reserve-with-abort`, any byte (`ABORTED`). The bytes stay unread,
//!   to be read as the next command (reference §1.1): commands pipelined
//!   behind a plain reserve wait for it to end.
//!
//! Every ending but a job's delivery is collected from the engine, under
//! the lock ([`crate::engine::Engine::check_wait`]); a job delivered is
//! sent from the mailbox without the lock, after every earlier reply, and
//! until its last byte has gone the engine may still take it back
//! (reference §10, a lapsed hand-off): then the reply is withdrawn, or,
//! begun, never finished.

use std::io::{self, Write};
use std::os::fd::AsRawFd;

use super::batch::{encode_wait_end, HeadRoom};
use super::{Conn, Lossy, State, Step};
use crate::mailbox::{Sent, Word};
use crate::protocol::{ReplyRoom, SHORT_REPLY_LEN};

impl Conn {
    /// The `Waiting` state: tells the engine what the socket said, then
    /// looks for an outcome.
    pub(super) fn step_waiting(&mut self, abortable: bool, batch: Option<u32>) -> io::Result<Step> {
        if self.gone || (abortable && self.stirred) {
            let hung_up = std::mem::take(&mut self.gone);
            self.stirred = false;
            self.shared.engine().client_stirred(self.client, hung_up);
        }
        let look = std::mem::take(&mut self.woken) | std::mem::take(&mut self.timer_fired);
        match self.link.mailbox.word() {
            Word::Cut => return Ok(Step::End),
            Word::Delivered => return self.deliver(),
            Word::Look => {}
            Word::Nothing if look => {}
            Word::Nothing => return self.wait_on(),
        }
        // Room for the short replies (the buffer may have gone while
        // idle); a job's reply claims its own. Without that much, the
        // connection ends, and a job handed to it goes back.
        if !self.output.claim(SHORT_REPLY_LEN) {
            return Ok(Step::End);
        }
        let now = self.shared.clock.now();
        let mut engine = self.shared.engine();
        if let Some(count) = batch {
            let reply_start = self.output.len();
            if let Some(reply) = engine.check_wait(self.client, now, &mut HeadRoom(&mut self.output)) {
                let (first, to_read) = encode_wait_end(reply, &mut self.output);
                let to_read = super::body::find(to_read, &engine);
                drop(engine);
                self.batch_after_wait(count, first, reply_start, to_read);
                self.state = State::Commands;
                self.wake_at = None;
                return Ok(Step::Again);
            }
        } else if let Some(reply) = engine.check_wait(self.client, now, &mut self.output) {
            let (job, reply_start) = (reply.reserved_job(), self.output.len());
            let to_read = super::body::encode(reply, &mut self.output);
            let to_read = super::body::find(to_read, &engine);
            drop(engine);
            if let Some(id) = job.filter(|_| self.read_body(to_read, reply_start)) {
                self.job_reply(id);
            }
            self.state = State::Commands;
            self.wake_at = None;
            return Ok(Step::Again);
        }
        self.wake_at = engine.wake_time(self.client);
        drop(engine);
        self.wait_on()
    }

    /// The wait goes on: once every earlier reply has gone, a job's reply
    /// may be sent by the thread that hands the job over (`mailbox.rs`).
    fn wait_on(&mut self) -> io::Result<Step> {
        if self.write_out()? {
            let quiet = self.input.is_drained() && !self.readable && !self.eof;
            self.link.mailbox.clear_to_send(quiet);
        }
        Ok(Step::Blocked)
    }

    /// A job handed over: every earlier reply, then the job's, from the
    /// mailbox, as the socket takes them. The wait is over once its last
    /// byte has gone; a reply withdrawn before any of it went leaves the
    /// wait as it was.
    fn deliver(&mut self) -> io::Result<Step> {
        if !self.write_out()? {
            return Ok(Step::Blocked);
        }
        if crate::log::enabled(crate::log::Kind::Trace) {
            let (peer, fd) = (self.link.stream.peer(), self.link.stream.as_raw_fd());
            let show =
                |line: &[u8]| crate::log::trace(format_args!(">{peer} (fd {fd}) reply {}", Lossy(line)));
            self.link.mailbox.first_line(show);
        }
        let stream = &self.link.stream;
        let mut failed = None;
        let sent = self.link.mailbox.send(|bytes| {
            let mut stream = stream;
            match stream.write(bytes) {
                Ok(n) => n,
                Err(e) => {
                    failed = Some(e);
                    0
                }
            }
        });
        match sent {
            Sent::All => {
                self.state = State::Commands;
                self.wake_at = None;
                return Ok(Step::Again);
            }
            Sent::Withdrawn => return Ok(Step::Blocked),
            Sent::Part => {}
        }
        match failed {
            Some(e) if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                return Err(e)
            }
            _ => {}
        }
        if self.link.mailbox.word() == Word::Cut {
            return Ok(Step::End);
        }
        self.writable = false;
        Ok(Step::Blocked)
    }
}
