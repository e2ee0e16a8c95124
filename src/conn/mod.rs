//! One client connection, as a state machine its event loop drives: read
//! a line (and a body), ask the engine, queue the reply, write what the
//! socket takes. [`Conn::serve`] does as much as it can without waiting,
//! and says what it waits for; the loop (`event_loop.rs`) calls it again
//! when that comes.
//!
//! A connection is in one of these states ([`State`]):
//!
//! ```text
//!             ┌───────────────── a put's line ───────────────┐
//!             │                                              ▼
//!      ┌──────────┐ ◄──── body and CRLF in, job filed ─ ┌─────────┐
//!      │ Commands │                                     │  Body   │
//!      └──────────┘ ◄──── the refused body swallowed ─┐ └─────────┘
//!       │   ▲    │                                    │
//!       │   │    └── a refused put's line ──► Skipping┘
//!       │   │
//!       │   │                                            reserve,
//!       │   └─ an outcome; a job's reply all sent ── Waiting ◄── nothing
//!       │                                                         ready
//!       │
//!       └── quit, end of input, a fatal refusal ──► Closing (the replies
//!                                                   go out, then it ends)
//! ```
//!
//! `framing` turns the bytes into lines; here each line becomes a command,
//! a put's body is read by exact length (bounded by `-z`, reference §1.5),
//! and the reply is encoded. Replies are collected in an output buffer and
//! written when there is no complete command left to answer, so a
//! pipelining client gets many replies per write. The engine lock is held
//! only around engine calls, never across socket I/O.
//!
//! **Who writes the socket.** Only this connection's loop, and only in the
//! order of the commands: each command's reply is appended to the output
//! buffer after the one before, and a job handed to a blocked reserve
//! (left in the mailbox, `mailbox.rs`) is sent only once every earlier
//! reply has gone. Nothing else writes it, so a reply can never be
//! overtaken.
//!
//! Read in this order: this file (the states and their steps),
//! `commands.rs` (a line answered, `reserve` up to its wait), `put.rs` (a
//! put's body), [`wait`] (a blocked reserve), `batch.rs`
//! (commands on many jobs), then [`buffers`] (reading, writing, and letting
//! the buffers go while idle), which a first reading can skip.

mod commands;
mod body;
pub(crate) mod wait;
pub(crate) mod buffers;
mod batch;
mod listing;
mod put;

pub(crate) use buffers::IDLE_AFTER;

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use crate::engine::{ClientId, JobId};
use crate::framing::Input;
use crate::protocol::Reply;
use crate::shared::Shared;
use crate::stream::SharedConn;
use crate::time::Time;
use buffers::OUTPUT_HIGH_WATER;
use commands::Lossy;
use put::Body;

/// Reads of its socket a connection makes in one turn of its loop, at
/// most: then the others are served, and it comes back. A read takes up
/// to 4 KiB (dozens of pipelined commands), so a client that floods holds
/// its loop for a few hundred microseconds a turn.
const READS_A_TURN: usize = 4;

/// What a turn of [`Conn::serve`] left the connection waiting for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// Nothing: it has more to do, and goes to the back of the line.
    More,
    /// Its socket, or a wake, or (`Some`) the time given: a blocked
    /// reserve's timeout or safety margin.
    Waits(Option<Time>),
    /// The disk: its last reply waits until the log's first `seq` records
    /// are fsynced (`-f 0`), which its loop does once for every connection
    /// waiting so at the end of its turn, then calls
    /// [`Conn::synced`].
    Disk(u64),
    /// It has ended: the loop closes it.
    Closed,
}

/// Where a connection is (the picture in the module's docs).
enum State {
    /// Reading command lines and answering them.
    Commands,
    /// Reading a put's body by length.
    Body(Box<Body>),
    /// Swallowing a refused put's body, `left` bytes more, then answering
    /// `then`.
    Skipping { left: u64, then: Reply<'static> },
    /// Blocked in reserve (`abortable` for `reserve-with-abort`; `batch`,
    /// its count, for `reserve-batch`), until an outcome, or a job's reply
    /// left in the mailbox has all been sent.
    Waiting { abortable: bool, batch: Option<u32> },
    /// Sending what is left of the replies, then ending.
    Closing,
}

/// What one step of a state did.
enum Step {
    /// It moved on: step again.
    Again,
    /// It waits for its socket, a wake or a timer.
    Blocked,
    /// It used up its reads for this turn.
    Yield,
    /// The connection ends now, unsent replies and all.
    End,
    /// Its last reply waits for the disk (`Served::Disk`).
    Disk(u64),
}

/// What to do after a command.
#[derive(PartialEq, Eq)]
enum Next {
    Continue,
    Close,
}

/// One client's connection, owned by its loop.
pub(crate) struct Conn {
    shared: Arc<Shared>,
    /// Its socket and mailbox, which the engine shares as its waker.
    link: Arc<SharedConn>,
    client: ClientId,
    state: State,
    /// Bytes received and not yet answered.
    input: Input,
    /// Replies not yet written, from `unsent` on. Freed, like `input`,
    /// when the connection goes idle.
    output: Vec<u8>,
    unsent: usize,
    /// What this connection counts in `Shared::replies_unsent`.
    counted: usize,
    /// The `RESERVED` replies in `output` not yet all sent: each job, and
    /// where its reply ends. Before more of one leaves in a later turn,
    /// the job must still be this client's (reference §10, a lapsed
    /// reply is never finished).
    job_replies: Vec<(JobId, usize)>,
    /// A reply was added to `job_replies` in this turn: the job was
    /// reserved a moment ago, and its first write needs no check.
    job_replies_fresh: bool,
    /// Waiting for the disk (`-f 0`): the log's first `.0` records must be
    /// fsynced before the reply from `.1` on in `output` may leave, and
    /// no further command is answered until they are.
    on_disk: Option<(u64, usize)>,
    /// The client has shut down its sending side.
    eof: bool,
    /// The socket may have bytes to read, or room to write: edge-triggered,
    /// it is reported once and stays so until a read or write says not.
    readable: bool,
    writable: bool,
    /// Since the last turn, bytes came (`stirred`), or the peer hung up
    /// (`gone`): what a blocked reserve listens for.
    stirred: bool,
    gone: bool,
    /// The peer has hung up, as an event said: a short read no longer
    /// means the socket is empty, since the end of file that follows the
    /// last bytes raises no event of its own.
    hung_up: bool,
    /// Another thread woke it: its mailbox may have word.
    woken: bool,
    /// Its blocked reserve's timer: when it is set for, and whether it
    /// has fired.
    timer_at: Option<Time>,
    timer_fired: bool,
    /// When a blocked reserve is next to be looked at by the clock.
    wake_at: Option<Time>,
    /// In the loop's line of connections to serve.
    queued: bool,
    /// Served since the loop's last sweep: keeps its buffers.
    busy: bool,
    /// Bytes came since the loop's last sweep; and how many sweeps in a
    /// row have found none (`--conn-idle-timeout`).
    heard: bool,
    quiet_sweeps: u32,
    /// It may run the admin commands: no `--admin-socket`, or accepted
    /// from it.
    admin: bool,
}

impl Conn {
    pub(crate) fn new(shared: Arc<Shared>, link: Arc<SharedConn>, client: ClientId, admin: bool) -> Conn {
        Conn {
            shared,
            link,
            client,
            state: State::Commands,
            input: Input::default(),
            output: Vec::new(),
            unsent: 0,
            counted: 0,
            job_replies: Vec::new(),
            job_replies_fresh: false,
            on_disk: None,
            eof: false,
            readable: true,
            writable: true,
            stirred: false,
            gone: false,
            hung_up: false,
            woken: false,
            timer_at: None,
            timer_fired: false,
            wake_at: None,
            queued: false,
            busy: true,
            heard: true,
            quiet_sweeps: 0,
            admin,
        }
    }

    /// Notes what an event said of the socket.
    pub(crate) fn note(&mut self, readable: bool, writable: bool, gone: bool) {
        // A hang-up is read as the end of the input (or an error).
        self.readable |= readable || gone;
        self.writable |= writable || gone;
        self.stirred |= readable;
        self.gone |= gone;
        self.hung_up |= gone;
    }

    /// Notes a wake from another thread.
    pub(crate) fn woken(&mut self) {
        self.woken = true;
    }

    /// Notes that the timer set for `at` has fired.
    pub(crate) fn timer_due(&mut self, at: Time) {
        if self.timer_at == Some(at) {
            self.timer_at = None;
            self.timer_fired = true;
        }
    }

    /// Marks it as in the loop's line; false if it already was.
    pub(crate) fn enqueue(&mut self) -> bool {
        !std::mem::replace(&mut self.queued, true)
    }

    /// The server stops: the command in flight is answered, then the
    /// connection sees the end of its input; a blocked reserve ends.
    pub(crate) fn end_of_input(&mut self) {
        self.shared.engine().hang_up(self.client);
        self.link.stream.shutdown_read();
        self.readable = true;
        self.gone = true;
        self.hung_up = true;
    }

    /// Notes that the reply just encoded carries job `id`, reserved for
    /// this client.
    fn job_reply(&mut self, id: JobId) {
        self.job_reply_ending(id, self.output.len());
    }

    /// [`Conn::job_reply`] for a reply that ends at `end` in the output.
    fn job_reply_ending(&mut self, id: JobId, end: usize) {
        self.job_replies.push((id, end));
        self.job_replies_fresh = true;
    }

    /// Whether it may run the admin commands (the connection cap counts
    /// it unless it came through the admin socket).
    pub(crate) fn admin(&self) -> bool {
        self.admin
    }

    /// Ends the connection: a put's body half read gives back what it
    /// claimed, and the engine forgets the client (its jobs go back). The
    /// socket closes as the last reference to it goes.
    pub(crate) fn close(mut self) {
        let now = self.shared.clock.now();
        let mut engine = self.shared.engine();
        if let State::Body(body) = std::mem::replace(&mut self.state, State::Closing) {
            engine.cancel_put(body.ticket);
        }
        engine.disconnect(self.client, now);
        drop(engine);
        self.count_unsent(0);
        if crate::log::enabled(crate::log::Kind::Event) {
            let (peer, fd) = (self.link.stream.peer(), self.link.stream.as_raw_fd());
            crate::log::event(format_args!("close {peer} (fd {fd})"));
        }
    }

    /// Serves the connection as far as it goes without waiting.
    pub(crate) fn serve(&mut self) -> Served {
        self.queued = false;
        self.busy = true;
        let mut reads = READS_A_TURN;
        loop {
            let step = match self.state {
                State::Commands => self.step_commands(&mut reads),
                State::Body(_) => self.step_body(&mut reads),
                State::Skipping { .. } => self.step_skipping(&mut reads),
                State::Waiting { abortable, batch } => self.step_waiting(abortable, batch),
                State::Closing => self.step_closing(),
            };
            let served = match step {
                Ok(Step::Again) => continue,
                Ok(Step::Blocked) => Served::Waits(self.new_timer()),
                Ok(Step::Yield) => Served::More,
                Ok(Step::Disk(seq)) => Served::Disk(seq),
                Ok(Step::End) | Err(_) => return Served::Closed,
            };
            // What is answered goes out before the connection waits.
            let written = self.write_out();
            self.job_replies_fresh = false;
            return match written {
                Ok(_) => served,
                Err(_) => Served::Closed,
            };
        }
    }

    /// A timer to set for the blocked reserve, if it needs one it has not.
    fn new_timer(&mut self) -> Option<Time> {
        let at = self.wake_at.filter(|_| matches!(self.state, State::Waiting { .. }))?;
        if self.timer_at.is_some_and(|set| set <= at) {
            return None;
        }
        self.timer_at = Some(at);
        Some(at)
    }

    /// Answers every complete command in the input buffer, reading more as
    /// it needs, until the state changes or the socket has no more.
    fn step_commands(&mut self, reads: &mut usize) -> io::Result<Step> {
        if let Some((seq, _)) = self.on_disk {
            return Ok(Step::Disk(seq));
        }
        // A client that does not read holds up only itself: past the
        // high-water mark, nothing more is answered until the socket takes
        // what is pending.
        if self.output.len() - self.unsent >= OUTPUT_HIGH_WATER && !self.write_out()? {
            return Ok(Step::Blocked);
        }
        if let Some(line) = self.input.next_line() {
            self.answer_line(line);
            return Ok(Step::Again);
        }
        if self.eof {
            self.state = State::Closing;
            return Ok(Step::Again);
        }
        self.read_more(reads)
    }

    /// Sends what is left, then ends.
    fn step_closing(&mut self) -> io::Result<Step> {
        if let Some((seq, _)) = self.on_disk {
            return Ok(Step::Disk(seq));
        }
        Ok(if self.write_out()? { Step::End } else { Step::Blocked })
    }
}
