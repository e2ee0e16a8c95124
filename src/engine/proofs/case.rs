//! What a case of the engine's tests is ([`Case`]), and what its steps
//! share; the list of them is `cases.rs`.

use super::case_worlds::Setup;
use super::runs::Run;
use super::sweep_world::Step;
use crate::engine::*;

/// One case: a command run as a connection runs it (see `cases.rs`).
#[derive(Clone, Copy)]
pub(super) struct Case {
    /// The command first, as the table names it (`delete-batch of a keyed
    /// job`), for the tests that look a command's cases up by its name.
    pub(super) name: &'static str,
    /// What the world needs before the step, on [`world_from`](super::sweep_world::world_from)'s.
    pub(super) world: Setup,
    /// The command, as a connection runs it.
    pub(super) step: Step,
    /// What it reaches when no allocation fails: the start of its reply's
    /// first line, or of its outcome as written (`""`: no reply, as for a
    /// reserve that blocks). A case that drifts from what it is named for,
    /// say a reserve meant to answer `DEADLINE_SOON` that finds a job,
    /// fails the allocation sweep.
    pub(super) reaches: &'static str,
    /// Whether the log sweep runs it: a case of a command the table marks
    /// logged, which writes the log (or, as a put naming a key's job, is
    /// the command's way of not writing it). Every case, logged or not,
    /// runs on a log in the agreement test.
    pub(super) logged: bool,
    /// The promise `bounded`: a run of the command over more jobs than a
    /// piece may touch, counting each piece's work (`runs.rs`), which
    /// the bounded test (`bounded.rs`) runs.
    pub(super) bounded: Option<Run>,
}

/// A case that does not write the log and proves no promise.
pub(super) const fn case(name: &'static str, world: Setup, reaches: &'static str, step: Step) -> Case {
    Case { name, world, step, reaches, logged: false, bounded: None }
}

impl Case {
    /// The case writes the log.
    pub(super) const fn logged(self) -> Case {
        Case { logged: true, ..self }
    }

    /// The case's command promises `bounded`, proved by `run`.
    pub(super) const fn bounded(self, run: Run) -> Case {
        Case { bounded: Some(run), ..self }
    }

    /// Whether the case is one of `command`'s: its name is the command's,
    /// or starts with it and a space, a comma or a colon.
    pub(super) fn is_for(&self, command: &str) -> bool {
        self.name
            .strip_prefix(command)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ',', ':']))
    }
}

/// A job id no world holds.
pub(super) const NO_JOB: JobId = 999;

/// `reply`, if the command answered at once, into `out`.
pub(super) fn answer(reply: Option<Reply<'_>>, out: &mut Vec<u8>) {
    if let Some(reply) = reply {
        reply.encode(out);
    }
}
