//! The identities everything else refers to. They sit below every other
//! module, so that the wire format, the stats and the binlog can name a job
//! without depending on the engine that owns it. And [`IdRange`], which ids
//! a server hands out.

/// A job's id: unique within the process, starting at 1, never handed out
/// twice (ids continue across restarts through the binlog).
pub type JobId = u64;

/// The largest id a job can have. `u64::MAX` is never an id: it is what
/// "the next id" is once a range is spent ([`NO_ID_LEFT`]), so the next id
/// can always be written down (in the engine, in the log) and ids never
/// wrap (reference §7.1).
pub const LAST_JOB_ID: JobId = JobId::MAX - 1;

/// The next id of a range that has none left: every put is refused.
pub const NO_ID_LEFT: JobId = JobId::MAX;

/// The ids a server hands out: `start`, `start + step`, `start + 2 step`,
/// ... (`--job-id-start`, `--job-id-step`; 1 and 1 are beanstalkd's). K
/// servers given the starts 1..=K and the step K never share an id, and
/// `id mod K` names the one that holds a job (reference §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// At least 1.
    pub start: JobId,
    /// At least 1.
    pub step: JobId,
}

impl Default for IdRange {
    fn default() -> IdRange {
        IdRange { start: 1, step: 1 }
    }
}

impl IdRange {
    /// Whether this range would hand out `id`.
    pub fn contains(&self, id: JobId) -> bool {
        id >= self.start && (id - self.start).is_multiple_of(self.step.max(1))
    }

    /// The smallest id of the range at or above `id`, or [`NO_ID_LEFT`]
    /// when the range holds none up to [`LAST_JOB_ID`]: never an id below
    /// `id`, so a range never wraps.
    pub fn first_from(&self, id: JobId) -> JobId {
        let step = self.step.max(1);
        let first = if id <= self.start {
            Some(self.start)
        } else {
            let steps = (id - self.start).div_ceil(step);
            steps.checked_mul(step).and_then(|d| d.checked_add(self.start))
        };
        first.filter(|&id| id <= LAST_JOB_ID).unwrap_or(NO_ID_LEFT)
    }

    /// The id after `id` in the range, or [`NO_ID_LEFT`].
    pub fn after(&self, id: JobId) -> JobId {
        id.checked_add(self.step.max(1)).filter(|&next| next <= LAST_JOB_ID).unwrap_or(NO_ID_LEFT)
    }

    /// `--job-id-start S --job-id-step K`, as an operator types them.
    pub fn flags(&self) -> String {
        format!("--job-id-start {} --job-id-step {}", self.start, self.step)
    }
}

/// Index of a tube in the engine's tube table; stable while the tube
/// lives (a name is what a client sees; this is what a job records).
pub type TubeId = u32;

/// The identity of a client connection inside the engine. A type of its
/// own, so that a client and a job can never be passed in each other's
/// place (`delete(client, job)` would compile with two `u64`s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_its_start_plus_whole_steps() {
        let shard = IdRange { start: 2, step: 3 };
        assert!([2, 5, 8, 3_000_000_002].iter().all(|&id| shard.contains(id)));
        assert!([0, 1, 3, 4, 6, 7].iter().all(|&id| !shard.contains(id)));
        assert_eq!([1, 2, 3, 5, 6, 9].map(|id| shard.first_from(id)), [2, 2, 5, 5, 8, 11]);
        assert_eq!(IdRange::default().first_from(7), 7);
    }

    #[test]
    fn a_range_ends_at_the_last_id_and_never_wraps() {
        let halves = IdRange { start: 1, step: 1 << 63 };
        assert_eq!(halves.after(1), (1 << 63) + 1);
        assert_eq!(halves.after((1 << 63) + 1), NO_ID_LEFT);
        assert_eq!(halves.first_from((1 << 63) + 2), NO_ID_LEFT);
        assert_eq!(IdRange { start: 1, step: 1 << 62 }.first_from(u64::MAX), NO_ID_LEFT);
        assert_eq!(IdRange { start: 1, step: 1 << 62 }.first_from(3 << 62), 1 + (3 << 62));
        let last = IdRange { start: LAST_JOB_ID, step: 1 };
        assert_eq!((last.first_from(1), last.after(LAST_JOB_ID)), (LAST_JOB_ID, NO_ID_LEFT));
        assert_eq!(IdRange { start: NO_ID_LEFT, step: 1 }.first_from(1), NO_ID_LEFT);
        // Every step from 1 to 2^64 - 1, from every start near the end:
        // what comes after an id is above it, or none.
        for step in (0..64).map(|b| 1u64 << b).chain([3, 7, u64::MAX]) {
            for start in [1, 2, LAST_JOB_ID - step.min(LAST_JOB_ID - 1), LAST_JOB_ID] {
                let range = IdRange { start, step };
                let next = range.after(start);
                assert!(next == NO_ID_LEFT || (next > start && range.contains(next)), "{range:?}");
            }
        }
    }
}
