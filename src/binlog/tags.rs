//! The put's tags a job's full record keeps (reference §8.2): kind 6's
//! unique key, and kind 8's byte of flags and what each flag names, a
//! unique key, a retry limit, a concurrency key, a group, an after-group,
//! the group's run, in that order (the layout is in `record.rs`). Written by [`put`], read by [`read`]; a
//! flag this build does not know is damage.

use super::kind;
use super::reader::Reader;

/// The flags of kind 8's tags byte.
const TAG_KEY: u8 = 1;
const TAG_LIMIT: u8 = 2;
const TAG_CON: u8 = 4;
const TAG_GROUP: u8 = 8;
const TAG_AFTER: u8 = 16;
/// Since version 6, with [`TAG_GROUP`]: the group's run.
const TAG_RUN: u8 = 32;
/// The flags that make a record kind 8.
const KIND_8: u8 = TAG_LIMIT | TAG_CON | TAG_GROUP | TAG_AFTER;

/// Bytes a keyed full record takes beyond [`super::record::full_len`]'s, for a key of
/// `key_len` bytes.
pub fn key_len(key_len: usize) -> usize {
    4 + 1 + key_len
}

/// The put's tags a full record keeps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FullTags<'a> {
    /// The unique key and its cooldown (`idp:`).
    pub key: Option<(&'a [u8], u32)>,
    /// The retry limit (`max:`).
    pub limit: Option<u32>,
    /// The concurrency key and the limit the put gave it (`con:`).
    pub con: Option<(&'a [u8], u32)>,
    /// The group (`grp:`).
    pub group: Option<&'a [u8]>,
    /// The group it waits for (`aft:`).
    pub after: Option<&'a [u8]>,
    /// With `group`: the id of the member whose put began the group's
    /// run this job is a member of (reference §3.1d); 0 for none (no id
    /// is 0).
    pub run: u64,
}

impl FullTags<'_> {
    /// The record's kind: 8 for a retry limit, a concurrency key or a
    /// group, else 6 for a unique key alone, else 1.
    pub(super) fn kind(&self) -> u8 {
        if self.flags() & KIND_8 != 0 {
            kind::TAGGED_FULL
        } else if self.key.is_some() {
            kind::KEYED_FULL
        } else {
            kind::FULL
        }
    }

    /// Kind 8's flags byte.
    fn flags(&self) -> u8 {
        let bit = |present: bool, bit: u8| if present { bit } else { 0 };
        bit(self.key.is_some(), TAG_KEY)
            | bit(self.limit.is_some(), TAG_LIMIT)
            | bit(self.con.is_some(), TAG_CON)
            | bit(self.group.is_some(), TAG_GROUP)
            | bit(self.after.is_some(), TAG_AFTER)
            | bit(self.run().is_some(), TAG_RUN)
    }

    /// The run, written only with a group.
    fn run(&self) -> Option<u64> {
        Some(self.run).filter(|&run| run != 0 && self.group.is_some())
    }
}

/// A name's bytes in a record: its length, then the name (tube-name
/// rules: at most 200 bytes).
fn name_len(name: Option<&[u8]>) -> usize {
    name.map_or(0, |name| 1 + name.len())
}

/// Bytes a full record's tags take beyond [`super::record::full_len`]'s.
pub fn tags_len(tags: &FullTags<'_>) -> usize {
    let key = tags.key.map_or(0, |(key, _)| key_len(key.len()));
    if tags.kind() != kind::TAGGED_FULL {
        return key;
    }
    let con = tags.con.map_or(0, |(name, _)| 4 + 1 + name.len());
    let run = tags.run().map_or(0, |_| 8);
    1 + key + tags.limit.map_or(0, |_| 4) + con + name_len(tags.group) + name_len(tags.after) + run
}

/// Appends `tags` to a full record of `full_kind` ([`FullTags::kind`]).
pub(super) fn put(out: &mut Vec<u8>, full_kind: u8, tags: &FullTags<'_>) {
    if full_kind == kind::TAGGED_FULL {
        out.push(tags.flags());
    }
    if let Some((key, cooldown)) = tags.key {
        out.extend_from_slice(&cooldown.to_le_bytes());
        // Keys are tube names: at most 200 bytes.
        out.push(key.len() as u8);
        out.extend_from_slice(key);
    }
    if let Some(reserves) = tags.limit {
        out.extend_from_slice(&reserves.to_le_bytes());
    }
    if let Some((name, limit)) = tags.con {
        out.extend_from_slice(&limit.to_le_bytes());
        // Names are tube names: at most 200 bytes.
        out.push(name.len() as u8);
        out.extend_from_slice(name);
    }
    for name in [tags.group, tags.after].into_iter().flatten() {
        out.push(name.len() as u8);
        out.extend_from_slice(name);
    }
    if let Some(run) = tags.run() {
        out.extend_from_slice(&run.to_le_bytes());
    }
}

/// The tags at the end of a full record of `full_kind`; `None` if they are
/// not what that kind holds.
pub(super) fn read<'a>(r: &mut Reader<'a>, full_kind: u8) -> Option<FullTags<'a>> {
    let flags = match full_kind {
        kind::KEYED_FULL => TAG_KEY,
        kind::TAGGED_FULL => {
            let known = |flags: u8| flags & !(TAG_KEY | KIND_8 | TAG_RUN) == 0;
            // A run is a group's.
            let run_alone = |flags: u8| flags & TAG_RUN != 0 && flags & TAG_GROUP == 0;
            Some(r.u8()?).filter(|&flags| flags & KIND_8 != 0 && known(flags) && !run_alone(flags))?
        }
        _ => 0,
    };
    let key = if flags & TAG_KEY != 0 {
        let cooldown = r.u32()?;
        let key_len = r.u8()? as usize;
        Some((r.take(key_len)?, cooldown))
    } else {
        None
    };
    let limit = if flags & TAG_LIMIT != 0 { Some(r.u32()?) } else { None };
    let con = if flags & TAG_CON != 0 {
        let limit = r.u32()?;
        let name_len = r.u8()? as usize;
        Some((r.take(name_len)?, limit))
    } else {
        None
    };
    let mut name = |flag: u8| -> Option<Option<&'a [u8]>> {
        if flags & flag == 0 {
            return Some(None);
        }
        let len = r.u8()? as usize;
        Some(Some(r.take(len)?))
    };
    let (group, after) = (name(TAG_GROUP)?, name(TAG_AFTER)?);
    let run = if flags & TAG_RUN != 0 { Some(r.u64()?).filter(|&run| run != 0)? } else { 0 };
    Some(FullTags { key, limit, con, group, after, run })
}
