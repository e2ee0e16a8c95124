//! The YAML lists: `list-tubes`, `list-tubes-watched`, `list-jobs-*`'s
//! ids, and `stats-group`'s body. Formatting only.

use super::*;

/// A YAML list of names, as `list-tubes` and `list-tubes-watched` send it;
/// `None` if the memory for it cannot be had (clients decide how many
/// tubes there are).
pub fn list_yaml<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Option<String> {
    let size = 4 + names.clone().map(|name| name.len() + 3).sum::<usize>();
    let mut y = String::new();
    y.try_reserve_exact(size.max(REPLY_BUFFER_MIN)).ok()?;
    y.push_str("---\n");
    for name in names {
        y.push_str("- ");
        y.push_str(name);
        y.push('\n');
    }
    Some(y)
}

/// A YAML list of job ids, as `list-jobs-*` sends it; `None` if the
/// memory for it cannot be had.
pub fn id_list_yaml(ids: &[u64]) -> Option<String> {
    use std::fmt::Write;
    let mut y = String::new();
    y.try_reserve_exact((4 + ids.len() * 23).max(REPLY_BUFFER_MIN)).ok()?;
    y.push_str("---\n");
    for id in ids {
        let _ = writeln!(y, "- {id}");
    }
    Some(y)
}

/// `stats-group`'s YAML, tuber's: the group's name quoted, its members
/// by state, and the jobs held for it; `None` if the memory for it cannot
/// be had.
pub fn group_yaml(name: &TubeName, members: [u32; 4], waiting: usize) -> Option<String> {
    let mut y = yaml_buffer(REPLY_BUFFER_MIN)?;
    let [ready, reserved, delayed, buried] = members;
    let _ = write!(
        y,
        "---\nname: \"{name}\"\nready: {ready}\nreserved: {reserved}\ndelayed: {delayed}\nburied: {buried}\n\
         waiting-jobs: {waiting}\n"
    );
    Some(y)
}
