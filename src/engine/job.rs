//! A job: its identity, its parameters, its counters, and where it is.
//!
//! The engine's job table owns every `Job`; the queues (heaps and lists) hold
//! only ids. Which queue a job is in follows from its [`State`], and the two
//! position fields (`heap_index`, `links`) are meaningful only for the state
//! that uses them. The record is kept small on purpose: a server holding a
//! million jobs pays for every field a million times.

use crate::time::Time;

pub use crate::ids::{ClientId, JobId, TubeId};
pub use crate::stats::Counters;

/// Priorities below this count as "urgent" in the stats.
pub const URGENT_PRIORITY: u32 = 1024;

/// The four states of reference §2.1, each with its own queue.
///
/// ```text
///   put, delay 0 ────────────────────┐
///                                    ▼
///   put, delay N ──► delayed ─────► ready ◄────────── kick ─────────┐
///                     ▲   time passes │  ▲                           │
///                     │               │  │ release 0, TTR runs out,  │
///                     │       reserve │  │ holder disconnects        │
///                     │               ▼  │                           │
///                     └── release N ─ reserved ──────── bury ────► buried
///
///   delete: from any state (a reserved job by its holder only) ──► gone
/// ```
///
/// `kick` takes buried jobs first, and delayed ones when a tube has none
/// buried; `kick-job` takes either. `reserve-job` takes a ready, delayed or
/// buried job straight to reserved. The moves themselves are in
/// `engine/moves.rs` (into and out of each queue) and the commands' files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// In its tube's ready heap, ordered by `(pri, id)`.
    Ready,
    /// In its tube's delayed heap, ordered by `(deadline, id)`.
    Delayed,
    /// In the engine's reserved heap (by `(deadline, id)`) and in the
    /// reserving client's list of reservations.
    Reserved,
    /// In its tube's buried list, in the order of burying.
    Buried,
    /// Put with `aft:<group>` while that group had members (reference
    /// §3.1d): delayed with no due time, until the group has none. In its
    /// tube's delayed heap at [`NEVER`], after every job with a due time,
    /// and in its group's list of held jobs (`groups.rs`). Every count
    /// and `stats-job` call it delayed, as tuber does.
    Held,
}

/// A held job's due time in its tube's delayed heap: no clock reaches it,
/// and the timer never waits for it (`Tube::next_event`).
pub const NEVER: Time = Time(u64::MAX);

impl State {
    /// The word `stats-job` shows.
    pub fn name(self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Delayed | State::Held => "delayed",
            State::Reserved => "reserved",
            State::Buried => "buried",
        }
    }
}

/// One job's record.
///
/// # Memory layout
///
/// 104 bytes on 64-bit targets (checked by a test below), paid once per job
/// in the job table's slab, with no per-record allocator overhead:
///
/// | field | bytes | why it is there |
/// |---|---|---|
/// | `created` | 8 | nanoseconds: `age`, and the binlog keeps it across restarts |
/// | `deadline` | 8 | due time (delayed), TTR end (reserved), burial time (buried) |
/// | `reserved_by` | 8 | the holder; client ids are never reused, so 64 bits |
/// | `links` | 16 | two job ids: O(1) unlink from a buried list or a client's reservations |
/// | `body` | 16 | pointer and length of the body, which lives in its own allocation; or, left in the log, its record's offset and its length (`body.rs`) |
/// | `tube` | 4 | a tube slot, not its name |
/// | `pri`, `delay`, `ttr` | 12 | the protocol's 32-bit parameters |
/// | `heap_index` | 4 | slot in its heap, for O(log n) removal from the middle |
/// | `file` | 4 | binlog file of its latest full record |
/// | `counters` | 20 | five 32-bit counters, wrapping as beanstalkd's |
/// | `state` | 1 | + 3 bytes of padding to the 8-byte alignment, now used: |
/// | `tags` | 1 | which put tags it has, kept beside the table: a unique key (`unique.rs`), a retry limit (`retry.rs`), a concurrency key (`concurrency.rs`), a group or an after-group (`groups.rs`) |
/// | `work_started` | 2 | when reserved, in 16 ms steps (`--metrics`, `weighted-fair`) |
///
/// The id is not stored: the table's index maps id to slot, and every
/// caller that holds a record got there from its id. (Storing it would take
/// the record to 112 bytes.)
///
/// Around the record, a job with a 100-byte body costs: the body's own
/// allocation (glibc rounds 100 bytes plus its 8-byte header up to 112), 4
/// bytes of the table's index, and a `(key, id)` entry in the heap of its
/// state (12 bytes in a ready heap, 16 in the delayed and reserved heaps,
/// whose keys are times): about 232 bytes in all for a ready job
/// (beanstalkd 1.12: about 299).
#[derive(Debug)]
pub struct Job {
    /// The tube it is in: set by put, and changed by nothing else but
    /// `move-job` (`Engine::move_to_tube`, in `moves.rs`).
    ///
    /// What relies on it, so what a change must keep true: the job sits
    /// in this tube's queue for its state, which `Engine::unlink` finds by
    /// this field; it counts in this tube's `job_count` (which keeps the
    /// tube alive, reference §5.2), its `reserved` and `urgent`; this
    /// tube's heaps hold room for it, claimed at put so that no later move
    /// allocates; and its log records name this tube (a change of tube
    /// takes a full record, which the log works out for itself). So a
    /// command may change the tube only while the job is unlinked from every queue,
    /// after room was claimed in the new tube's heaps, and the job is then
    /// filed into the new tube's queues; a tube left empty is removed only
    /// after the change is logged, since the log is told its name.
    pub(super) tube: TubeId,
    pub(super) pri: u32,
    /// Seconds of the last delay given by put or release.
    pub(super) delay: u32,
    /// Time to run, in seconds; at least 1.
    pub(super) ttr: u32,
    pub(super) state: State,
    pub(super) counters: Counters,
    /// When the put command line was parsed (`age` counts from here).
    pub(super) created: Time,
    /// Delayed: when it becomes ready. Reserved: when its TTR runs out.
    /// Buried: the burial time, read and written only as
    /// [`Job::buried_at`]. Otherwise stale.
    pub(super) deadline: Time,
    /// The client holding it. Valid only while `state == Reserved`.
    pub(super) reserved_by: ClientId,
    /// Slot in the heap of its state. Valid only while ready, delayed or
    /// reserved.
    /// (A `u32`: no heap holds four billion jobs, and every byte of a job
    /// record is paid a million times over.)
    pub(super) heap_index: u32,
    /// Neighbours in its tube's buried list (while buried), in its
    /// client's reservation list (while reserved) or in its after-group's
    /// held list (while held).
    pub(super) links: Links,
    /// The binlog file holding its latest full record; 0 without a binlog.
    pub(super) file: u32,
    /// When it was last reserved, for `--metrics` (`metering.rs`): in the
    /// record's padding, so it costs nothing.
    pub(super) work_started: super::metering::Stamp,
    /// The opaque body, without the trailing CRLF: in memory, or where
    /// the log holds it (`body.rs`).
    pub(super) body: super::body::Body,
    /// Which put tags it has, each held beside the job table: in what was
    /// padding after `state`, so a job without tags looks nothing up.
    pub(super) tags: Tags,
}

/// A job's put tags, one bit each; what each holds is kept beside the
/// job table, found by the job's id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tags(u8);

impl Tags {
    const KEY: u8 = 1;
    const LIMIT: u8 = 2;
    const CON: u8 = 4;
    const GROUP: u8 = 8;
    const AFTER: u8 = 16;
    /// Not a put tag: buried by its retry limit, and not moved out of the
    /// buried list since (`retry.rs`). In memory only: a restart gives it
    /// back to a buried job whose tries are spent.
    const DEAD: u8 = 32;

    /// The tags of a job with a unique key (`idp:`, in `Tubes::keys`) or
    /// not, and with a retry limit (`max:`, in `Tubes::limits`) or not.
    pub(super) fn of(keyed: bool, limited: bool) -> Tags {
        Tags((u8::from(keyed) * Tags::KEY) | (u8::from(limited) * Tags::LIMIT))
    }

    pub(super) fn keyed(self) -> bool {
        self.0 & Tags::KEY != 0
    }

    pub(super) fn limited(self) -> bool {
        self.0 & Tags::LIMIT != 0
    }

    pub(super) fn set_keyed(&mut self) {
        self.0 |= Tags::KEY;
    }

    /// With a concurrency key (`con:`, in `Tubes::con`) or not.
    pub(super) fn with_con(self, con: bool) -> Tags {
        Tags(self.0 | (u8::from(con) * Tags::CON))
    }

    pub(super) fn con(self) -> bool {
        self.0 & Tags::CON != 0
    }

    /// In a group (`grp:`) or not, and waiting for one (`aft:`) or not:
    /// both in `Tubes::groups`.
    pub(super) fn with_groups(self, group: bool, after: bool) -> Tags {
        Tags(self.0 | (u8::from(group) * Tags::GROUP) | (u8::from(after) * Tags::AFTER))
    }

    pub(super) fn group(self) -> bool {
        self.0 & Tags::GROUP != 0
    }

    pub(super) fn after(self) -> bool {
        self.0 & Tags::AFTER != 0
    }

    /// Whether its retry limit buried it (a dead letter) and it is buried
    /// still.
    pub(super) fn buried_by_limit(self) -> bool {
        self.0 & Tags::DEAD != 0
    }

    pub(super) fn set_buried_by_limit(&mut self, dead: bool) {
        self.0 = (self.0 & !Tags::DEAD) | (u8::from(dead) * Tags::DEAD);
    }

    /// Whether it has a tag tuber's `stats-job` shows fields for.
    pub(super) fn tuber(self) -> bool {
        self.0 & (Tags::KEY | Tags::CON | Tags::GROUP | Tags::AFTER) != 0
    }
}

/// A job's neighbours in whichever list it is in (see `list.rs`): its
/// tube's buried list, its holder's reservations, or its after-group's
/// held jobs. Id 0 means "none":
/// job ids start at 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Links {
    pub(super) prev: JobId,
    pub(super) next: JobId,
}

impl Job {
    /// When a buried job was buried: it orders the buried list after a
    /// restart. It shares the `deadline` field, which a buried job has no
    /// other use for, so that the record stays 104 bytes. The time is the
    /// server's own clock's, never converted to the wall clock, since it is
    /// only ever compared (see `Engine::bury` for the rule that keeps the
    /// order right).
    pub(super) fn buried_at(&self) -> Time {
        self.deadline
    }

    pub(super) fn set_buried_at(&mut self, at: Time) {
        self.deadline = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout documented on [`Job`]: a change that grows the record
    /// shows here first, and in the memory figures a million times over.
    #[test]
    fn a_job_record_is_104_bytes() {
        assert_eq!(std::mem::size_of::<Job>(), 104);
        // The slab stores `Option<Job>`: the body's pointer is never null,
        // so the `None` of a vacant slot costs nothing.
        assert_eq!(std::mem::size_of::<Option<Job>>(), 104);
    }
}
