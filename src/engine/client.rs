//! What the engine knows of a connected client: the tube it uses, the
//! tubes it watches, the jobs it holds, and, while it is blocked in
//! reserve, its wait and how that wait ended. Also the [`Waker`] through
//! which the engine wakes a blocked client's connection without ever touching
//! its socket.

use std::fmt::Debug;
use std::sync::{Arc, Condvar};

use super::job::JobId;
use super::list::List;
use crate::ids::TubeId;
use crate::time::Time;

/// How the engine reaches the connection of a client blocked in reserve. The
/// server implements it over the client's mailbox and socket; the engine
/// sees neither, and asks only these things.
pub trait Waker: Debug + Send + Sync {
    /// Wakes the client's connection (its event loop): its blocked
    /// reserve has an outcome.
    fn wake(&self);

    /// Has `write` put job `id`'s `RESERVED` reply where the client's
    /// connection will find it without the engine's lock (its mailbox, see
    /// `mailbox.rs`): the blocked reserve is then over. `write` claims the
    /// room first; false if it could not, or if this client has nowhere to
    /// take a reply, and then the connection collects the job under the lock
    /// ([`Engine::check_wait`](super::Engine::check_wait)).
    fn deliver(&self, id: JobId, write: &mut dyn FnMut(&mut Vec<u8>) -> bool) -> bool {
        let _ = (id, write);
        false
    }

    /// [`Waker::wake`], called once the engine's lock is let go: a
    /// delivered reply may then be sent to the client on the way, by the
    /// thread that let the lock go.
    fn send_and_wake(&self) {
        self.wake();
    }

    /// Job `id`, whose `RESERVED` reply [`Waker::deliver`] left for this
    /// client, no longer belongs to it (its TTR ran out, or it was flushed).
    /// Takes the reply back if none of it has been sent
    /// ([`Withdrawal::Withdrawn`]); if part has, the rest is never sent and
    /// the connection is ended ([`Withdrawal::Cut`]): a client is never
    /// sent the whole of a job it no longer holds.
    fn withdraw(&self, id: JobId) -> Withdrawal {
        let _ = id;
        Withdrawal::Told
    }

    /// True if the client's peer has already hung up (closed, reset, or shut
    /// down its sending side), as far as can be told without blocking.
    /// Asked just before a job is handed over, so that a job never goes to a
    /// connection whose hang-up has arrived but not yet been reported.
    fn has_hung_up(&self) -> bool;

    /// True if bytes from the client wait unread in its socket, as far as
    /// can be told without blocking or reading them. Asked before a job is
    /// handed to a `reserve-with-abort`, whose wait those bytes call off.
    /// A client with no socket never sends: false.
    fn has_input(&self) -> bool {
        false
    }
}

/// What became of a delivered reply whose job the client no longer holds
/// ([`Waker::withdraw`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawal {
    /// All of it was sent (or none was ever left): the client was told
    /// while it held the job, as a worker that reserved it itself is.
    Told,
    /// None of it was sent, and now none will be: the reserve goes on.
    Withdrawn,
    /// Part of it was sent: the rest never will be, and the connection
    /// ends.
    Cut,
}

/// A bare `Condvar` is the waiter of a client with no socket (tests,
/// benchmarks): it never hangs up by itself.
impl Waker for Condvar {
    fn wake(&self) {
        self.notify_one();
    }

    fn has_hung_up(&self) -> bool {
        false
    }
}

/// A client's blocked reserve, from the `reserve` that blocked until its
/// own connection collects the outcome ([`Engine::check_wait`](super::Engine::check_wait)):
///
/// ```text
///   reserve, nothing ready
///          │
///          ▼
///     ┌─────────┐  a job for it: reserved ┌─────────────────────┐
///     │ Waiting │ ───── for it at once ──►│ Ended(Reserved(id)) │
///     └─────────┘                         └─────────────────────┘
///       ▲   │  timeout, safety margin,       │           │
///       │   │  hang-up (abort: a byte)       │ its TTR   │ collected by
///       │   ▼                                │ ran out   │ its own loop:
///       │ ┌──────────────────────────────┐   │ first     │ RESERVED
///       │ │ Ended(TimedOut/DeadlineSoon/ │   │           ▼
///       │ │       Aborted)               │   │      (not blocked)
///       │ └──────────────────────────────┘   │
///       └────── same place in line ──────────┘
/// ```
///
/// Two ways in, one way out: only the client's own connection ends a blocked
/// reserve, and only after the engine has caught up with the time (see
/// [`Engine::catch_up`](super::Engine::catch_up)), so a hand-off whose TTR
/// ran out before it was collected has already gone back to waiting.
///
/// That is the way of a job whose reply found no room in the client's
/// mailbox. Normally a job handed over skips `Ended` for `Delivered`: its
/// reply is left in the mailbox and the reserve is over at once for the
/// client's connection, which will not ask the engine again; its TTR runs from
/// then, as the reply leaves when the lock is let go. The engine keeps the
/// wait, for as long as the client is not blocked again: if the job is
/// taken from the client (its TTR runs out, or a `flush-tube`) before the
/// reply has left, the reply is withdrawn and the wait goes on, in its
/// place ([`Engine::withdraw_handoff`](super::Engine::withdraw_handoff)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Blocked {
    /// In every watched tube's waiting queue.
    Waiting(Wait),
    /// Out of line; its connection has yet to collect how the reserve ended.
    Ended(Outcome),
    /// Out of line: job `id`'s reply was left in its mailbox, and may not
    /// all have been sent yet. Its connection collects nothing from the
    /// engine.
    Delivered(JobId, Wait),
}

/// How a blocked reserve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// A job was reserved for the client. The wait it ended is kept: if the
    /// reservation lapses before the client collects it, the client resumes
    /// that same wait, in the same place in line.
    Reserved(JobId, Wait),
    DeadlineSoon,
    TimedOut,
    /// A byte from the client called off a `reserve-with-abort`.
    Aborted,
}

/// A reserve that is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wait {
    /// Position in every watched tube's waiting queue: smaller waited longer.
    pub(super) seq: u64,
    /// When `reserve-with-timeout` gives up.
    pub(super) timeout_at: Option<Time>,
    /// When the soonest of the client's reservations enters its safety margin.
    pub(super) margin_at: Option<Time>,
    /// A `reserve-with-abort`: any byte from the client ends the wait.
    pub(super) abortable: bool,
    /// A `reserve-batch` with a timeout: the job that ends the wait is
    /// collected by the connection, which adds what else is ready; it is
    /// never delivered alone to the mailbox.
    pub(super) batch: bool,
}

/// What the engine knows of one connected client.
#[derive(Debug)]
pub(super) struct Client {
    /// The tube `put`, `peek-*` and `kick` act on.
    pub(super) used: TubeId,
    /// The tubes `reserve` takes jobs from: never empty, no duplicates.
    pub(super) watched: Vec<TubeId>,
    /// Jobs this client holds, in the order it reserved them.
    pub(super) reserved: List,
    /// The soonest TTR deadline among `reserved`, kept so that a reserve
    /// does not walk every job the client holds (a worker holding 20,000
    /// jobs made each of its reserves walk 20,000).
    pub(super) soonest_deadline: Soonest,
    /// Has put a job (counted in `current-producers`).
    pub(super) producer: bool,
    /// Has reserved (counted in `current-workers`).
    pub(super) worker: bool,
    /// The client has closed its sending side; it must never block.
    pub(super) hung_up: bool,
    /// Its blocked reserve, while it is in one. Boxed, so that the
    /// many clients not in a blocked reserve carry one pointer for it.
    pub(super) blocked: Option<Box<Blocked>>,
    /// Woken when a blocked reserve ends; knows whether the peer is gone.
    pub(super) waker: Arc<dyn Waker>,
    /// How its reserves choose among its tubes (`reserve-mode`).
    pub(super) reserve_mode: crate::protocol::ReserveMode,
    /// Watched tubes given a weight other than 1 (`watch <tube> <weight>`).
    pub(super) weights: Vec<(TubeId, u16)>,
    /// The commands it may not run on jobs it does not hold (`delete`,
    /// `delete-batch`), when it is not the admin socket's
    /// ([`Engine::restrict`](super::Engine::restrict)); none by default.
    pub(super) refused: crate::protocol::AdminCommands,
}

/// A cached minimum that is recomputed only after its holder leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Soonest {
    /// The minimum (`None`: the client holds no job).
    Known(Option<Time>),
    /// The job that held the minimum is gone or was touched: walk the list.
    Stale,
}

impl Client {
    /// A job with TTR deadline `deadline` joined its reservations.
    pub(super) fn note_deadline(&mut self, deadline: Time) {
        if let Soonest::Known(soonest) = self.soonest_deadline {
            self.soonest_deadline = Soonest::Known(Some(soonest.map_or(deadline, |s| s.min(deadline))));
        }
    }

    /// A job with TTR deadline `deadline` left its reservations (or its
    /// deadline moved): if it may have been the soonest, look again later.
    pub(super) fn forget_deadline(&mut self, deadline: Time) {
        if self.reserved.is_empty() {
            self.soonest_deadline = Soonest::Known(None);
        } else if self.soonest_deadline == Soonest::Known(Some(deadline)) {
            self.soonest_deadline = Soonest::Stale;
        }
    }
}
