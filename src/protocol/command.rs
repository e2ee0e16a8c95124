//! What a command line can be: [`Command`], one variant a command with its
//! arguments, and [`ParseError`], why a line is none; with the few types
//! their arguments need. The data only: reading a line into one is
//! `mod.rs`, and nothing here reads bytes or holds state.

use super::{Reply, TubeName};
use crate::ids::JobId;

/// Heaviest weight `watch <tube> <weight>` takes (tuber's bound).
pub const MAX_WEIGHT: u16 = 9999;

/// How a client's `reserve` chooses among its watched tubes when more
/// than one has a job ready (tuber's `reserve-mode`, reference §3.26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReserveMode {
    /// beanstalkd's: the best `(pri, id)` job of them all.
    #[default]
    Fifo,
    /// A tube drawn at random by its watch weight; its best job.
    Weighted,
    /// The same, each weight divided by how long the tube's jobs take.
    WeightedFair,
}

impl ReserveMode {
    /// The mode's name, as `reserve-mode` takes and answers it.
    pub fn name(self) -> &'static str {
        match self {
            ReserveMode::Fifo => "fifo",
            ReserveMode::Weighted => "weighted",
            ReserveMode::WeightedFair => "weighted-fair",
        }
    }
}

/// What follows a put's size field (reference §3.1, step 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterSize {
    /// Nothing, or put tags this server takes: unique keys and retry
    /// limits.
    Nothing,
    /// Anything else, no put tag among it: `BAD_FORMAT`, and the body is
    /// not read, as beanstalkd does (its bytes are taken as commands).
    Junk,
    /// Tokens among which is a put tag (tuber's `idp:`, `grp:`, `aft:`,
    /// `con:`, and our `max:`), but which this server does not take:
    /// `BAD_FORMAT` once the body is read and dropped, so that a tuber
    /// client's body is never taken as commands (reference §3.1a).
    RefusedTags,
    /// Put tags this server takes, whose names' memory could not be had:
    /// `OUT_OF_MEMORY` once the body is read and dropped.
    OutOfMemory,
}

/// One parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `put <pri> <delay> <ttr> <bytes> [idp:<key>[:<seconds>]] [con:<key>[:<limit>]]
    /// [max:<reserves>]`. A body of `bytes` bytes plus CRLF follows the
    /// line. `after_size` says what else followed the size field:
    /// beanstalkd answers `BAD_FORMAT` for junk only after counting the
    /// command and checking the size, so the parser cannot reject it
    /// itself. `tags` are the put's tags: tuber's unique key (reference
    /// §3.1a) and concurrency key (§3.1c), and the retry limit (§3.1b).
    Put {
        pri: u32,
        delay: u32,
        ttr: u32,
        bytes: u32,
        after_size: AfterSize,
        tags: PutTags,
    },
    Use(TubeName),
    Reserve,
    /// `reserve-with-timeout <seconds>`, at most `i32::MAX` seconds.
    ReserveWithTimeout(u32),
    /// `reserve-with-abort`, and `reserve-with-abort-timeout <seconds>`
    /// (`Some`): a reserve whose wait any byte from the client calls off
    /// (reference §3.3a). Not beanstalkd 1.13's: its pull request #658.
    ReserveWithAbort(Option<u32>),
    ReserveJob(JobId),
    Delete(JobId),
    Release {
        id: JobId,
        pri: u32,
        delay: u32,
    },
    Bury {
        id: JobId,
        pri: u32,
    },
    Touch(JobId),
    /// `watch <tube>`, or tuber's `watch <tube> <weight>` (1 to
    /// [`MAX_WEIGHT`], reference §3.9).
    Watch(TubeName, Option<u16>),
    Ignore(TubeName),
    /// `reserve-mode <mode>`: tuber's (reference §3.26).
    ReserveMode(ReserveMode),
    Peek(JobId),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    /// `kick <bound>`.
    Kick(u32),
    KickJob(JobId),
    StatsJob(JobId),
    StatsTube(TubeName),
    Stats,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    /// `pause-tube <tube> <delay>`. `tube` is `None` when the name uses only
    /// legal bytes but is not a legal name (it starts with `-` or is too
    /// long): beanstalkd counts the command before it notices.
    PauseTube {
        tube: Option<TubeName>,
        delay: u32,
    },
    Quit,
    /// `move-job <id> <tube>`: ours, not beanstalkd's (reference §3.21).
    MoveJob {
        id: JobId,
        tube: TubeName,
    },
    /// `reserve-batch <count> [<timeout>]`, 1 to [`MAX_BATCH`](super::MAX_BATCH)
    /// jobs, waiting up to `timeout` seconds for the first: tuber's (reference §3.22).
    ReserveBatch(u32, Option<u32>),
    /// `delete-batch <id> <id> ...`, 1 to [`MAX_BATCH`](super::MAX_BATCH) ids: tuber's
    /// (reference §3.23). The ids stay in the line, read by [`batch_ids`](super::batch_ids):
    /// the parser allocates nothing.
    DeleteBatch,
    /// `clear-tube <tube>`: beanstalkd's pull request #87 (reference §3.24).
    ClearTube(TubeName),
    /// `drain`: tuber's; puts are refused from now on (reference §3.25).
    Drain,
    /// `undrain`: tuber's; puts are taken again (reference §3.25).
    Undrain,
    /// `peek-reserved`: tuber's (reference §3.27).
    PeekReserved,
    /// `flush-tube <tube>`: tuber's (reference §3.28).
    FlushTube(TubeName),
    /// `stats-group <group>`: tuber's (reference §3.30).
    StatsGroup(TubeName),
    /// `list-jobs-ready [<count> [<after>]]`: the used tube's ready jobs'
    /// ids, in reserve order (reference §3.29; the name is from a fork of
    /// beanstalkd, see there).
    ListJobsReady(Page),
    /// `list-jobs-delayed [<count> [<after>]]`: by due time.
    ListJobsDelayed(Page),
    /// `list-jobs-reserved [<count> [<after>]]`: by TTR deadline.
    ListJobsReserved(Page),
    /// `list-jobs-buried [<count> [<after>]]`: in kick order.
    ListJobsBuried(Page),
    /// `touch-all`: tuber's; a fresh TTR for every job the client holds
    /// (reference §3.31).
    TouchAll,
    /// `flush-buried <tube>`: tuber's; the tube's buried jobs deleted
    /// (reference §3.32).
    FlushBuried(TubeName),
}

impl Command {
    /// Whether it is a command on a whole tube, which the connection runs
    /// in chunks, the lock let go between them (reference §3.0, the
    /// promise `bounded`): the engine says what each does
    /// (`Engine::start_on_tube` and `Engine::tube_chunk`, in
    /// `engine/batch.rs`), and nothing in the connection names it.
    pub fn works_in_chunks(&self) -> bool {
        matches!(self, Command::ClearTube(_) | Command::FlushTube(_) | Command::FlushBuried(_))
    }
}

/// Which page a `list-jobs-*` line asks for (reference §3.29): at most
/// `count` jobs, 1 to [`MAX_BATCH`](super::MAX_BATCH) (all of them when
/// the line names none), after job `after` in the list's order, or from
/// its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub count: u32,
    pub after: Option<JobId>,
}

/// A put's `idp:<key>[:<seconds>]` token (reference §3.1a): the job's
/// name in its tube, which follows the rules of a tube name, and how long
/// the name outlives the job's delete (0: not at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueKey {
    pub name: TubeName,
    pub cooldown: u32,
}

/// A put's tags, as its line gave them. The names (a unique key, a
/// concurrency key, a group, an after-group) lie end to end in one buffer
/// on the heap, claimed fallibly, and only for a put that names any:
/// four names at their longest are 800 bytes, which, inline, a command
/// would copy down every frame a line passes through, on every
/// connection's stack.
#[derive(Clone, PartialEq, Eq)]
pub struct PutTags {
    /// The names, in the order of [`TagName`]; empty, and no allocation,
    /// for a put that names none.
    names: Vec<u8>,
    /// Each name's length in `names`, in the order of [`TagName`]; 0 for
    /// a name the put did not give (no legal name is empty).
    lens: [u8; 4],
    /// The unique key's cooldown.
    cooldown: u32,
    /// The concurrency key's limit.
    con_limit: u32,
    /// The retry limit (`max:`).
    pub limit: Option<u32>,
}

/// The names a put may give, in the order [`PutTags`] keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagName {
    /// `idp:`, the unique key.
    Key,
    /// `con:`, the concurrency key.
    Con,
    /// `grp:`, the group the job belongs to.
    Group,
    /// `aft:`, the group the job waits for.
    After,
}

impl PutTags {
    /// A put without tags.
    pub const NONE: PutTags =
        PutTags { names: Vec::new(), lens: [0; 4], cooldown: 0, con_limit: 0, limit: None };

    /// The tags of a put whose line named these; `None` if their names'
    /// memory cannot be had.
    pub fn new(key: Option<&UniqueKey>, limit: Option<u32>, con: Option<&ConKey>) -> Option<PutTags> {
        let key = key.map(|key| (key.name.as_str().as_bytes(), key.cooldown));
        PutTags::of(key, limit, con.map(|con| (con.name.as_str().as_bytes(), con.limit)))
    }

    /// The tags of names and numbers, the names legal (as the parser
    /// checked them, in its line); `None` if their memory cannot be had.
    pub(super) fn of(
        key: Option<(&[u8], u32)>,
        limit: Option<u32>,
        con: Option<(&[u8], u32)>,
    ) -> Option<PutTags> {
        let mut tags = PutTags { limit, ..PutTags::NONE };
        if let Some((name, cooldown)) = key {
            tags.place(TagName::Key, name)?;
            tags.cooldown = cooldown;
        }
        if let Some((name, limit)) = con {
            tags.place(TagName::Con, name)?;
            tags.con_limit = limit;
        }
        Some(tags)
    }

    /// These tags with a group (`grp:`) and an after-group (`aft:`), if
    /// given; `None` if their memory cannot be had.
    pub fn with_groups(mut self, group: Option<&[u8]>, after: Option<&[u8]>) -> Option<PutTags> {
        if let Some(name) = group {
            self.place(TagName::Group, name)?;
        }
        if let Some(name) = after {
            self.place(TagName::After, name)?;
        }
        Some(self)
    }

    /// Stores `name` as tag `which`, after the names before it, which must
    /// be placed first; `None` if its memory cannot be had. A name longer
    /// than a length byte holds is cut, which no legal name is.
    fn place(&mut self, which: TagName, name: &[u8]) -> Option<()> {
        let name = name.get(..name.len().min(usize::from(u8::MAX))).unwrap_or_default();
        self.names.try_reserve_exact(name.len()).ok()?;
        self.names.extend_from_slice(name);
        *self.lens.get_mut(which as usize)? = name.len() as u8;
        Some(())
    }

    /// Whether the put gave no tag.
    pub fn is_empty(&self) -> bool {
        self.lens == [0; 4] && self.limit.is_none()
    }

    /// Tag `which`'s name, if the put gave it.
    pub fn name(&self, which: TagName) -> Option<&[u8]> {
        let len = usize::from(*self.lens.get(which as usize)?);
        let at: usize = self.lens.iter().take(which as usize).map(|&len| usize::from(len)).sum();
        (len > 0).then(|| self.names.get(at..at.saturating_add(len))).flatten()
    }

    /// The unique key, if the put named one.
    pub fn key(&self) -> Option<UniqueKey> {
        let name = self.name(TagName::Key)?;
        Some(UniqueKey { name: TubeName::new(name)?, cooldown: self.cooldown })
    }

    /// The concurrency key's name and limit, if the put named one.
    pub fn con_name(&self) -> Option<(&[u8], u32)> {
        Some((self.name(TagName::Con)?, self.con_limit))
    }

    /// The concurrency key, if the put named one.
    pub fn con(&self) -> Option<ConKey> {
        let (name, limit) = self.con_name()?;
        Some(ConKey { name: TubeName::new(name)?, limit })
    }
}

impl std::fmt::Debug for PutTags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |which| self.name(which).map(String::from_utf8_lossy);
        f.debug_struct("PutTags")
            .field("key", &self.key())
            .field("con", &self.con())
            .field("limit", &self.limit)
            .field("group", &text(TagName::Group))
            .field("after", &text(TagName::After))
            .finish()
    }
}

/// A put's `con:<key>[:<limit>]` token (tuber's, reference §3.1c): the
/// key, which follows the rules of a tube name and is one for the whole
/// server, and how many of its jobs may be reserved at once (1 to
/// `u32::MAX`; 1 when the token gives none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConKey {
    pub name: TubeName,
    pub limit: u32,
}

/// Why a line is not a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// No command starts this line.
    UnknownCommand,
    /// A command was recognised but its arguments are wrong.
    BadFormat,
    /// A put that carries a tag, but whose size could not be read: its
    /// body cannot be told from the commands after it, so the connection
    /// ends after `BAD_FORMAT` rather than run it (reference §3.1 step 4).
    UnsizedTaggedPut,
}

impl ParseError {
    /// The reply a client gets for this error.
    pub fn reply(self) -> Reply<'static> {
        match self {
            ParseError::UnknownCommand => Reply::UnknownCommand,
            ParseError::BadFormat | ParseError::UnsizedTaggedPut => Reply::BadFormat,
        }
    }
}
