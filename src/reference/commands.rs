//! The table of commands (reference §3.0), read: a row a command, with
//! the replies it names, whether it is logged, and its promises. The one
//! reader of the table, for every test that holds something to it: the
//! lib's (`reference.rs`, the engine's proofs, `facts.rs`) as
//! `crate::reference::commands`, the integration tests' (`tests/admin.rs`,
//! `tests/full.rs`, `tests/torn.rs`) as `common::table`, which is this
//! file. So it uses std alone, and nothing of the crate.

use std::collections::BTreeSet;

/// The reference, whose §3.0 this reads.
pub const REFERENCE: &str = include_str!("../reference.md");

/// One row of the table of commands.
pub struct Row {
    /// As written: `release <id> <pri> <delay>`.
    pub syntax: String,
    /// The reply words it names: `RELEASED`, `NOT_FOUND`, ...
    pub replies: BTreeSet<String>,
    /// Whether the command's change of a job is logged: its cell says
    /// anything but `no` (`reserve-job`'s says of which jobs).
    pub logged: bool,
    /// Its promises, as written: `frees`, `admin unless held`, ...
    pub promises: Vec<String>,
}

impl Row {
    /// The command's name: `release`.
    pub fn name(&self) -> &str {
        self.syntax.split(' ').next().unwrap_or_default()
    }

    /// Whether the row makes `promise`.
    pub fn makes(&self, promise: &str) -> bool {
        self.promises.iter().any(|p| p == promise)
    }

    /// A line the parser must take for this command, each argument made
    /// up: a tube is `tube`, a mode `fifo`, anything else `1`.
    pub fn example(&self) -> String {
        let arguments = self.syntax.split(' ').skip(1).map(|field| match field {
            "<tube>" => "tube",
            "<mode>" => "fifo",
            _ => "1",
        });
        std::iter::once(self.name()).chain(arguments).collect::<Vec<_>>().join(" ")
    }
}

/// Every row of §3.0's table, in its order. The columns are found by
/// their headings.
pub fn commands() -> Vec<Row> {
    let section = REFERENCE.split("\n### 3.0 ").nth(1).expect("§3.0 in reference.md");
    let section = section.split("\n### ").next().unwrap_or_default();
    let mut lines = section.lines().filter(|line| line.starts_with('|'));
    let heading = cells(lines.next().expect("§3.0's table"));
    let column = |name: &str| {
        let at = heading.iter().position(|&cell| cell == name);
        at.unwrap_or_else(|| panic!("§3.0's table has no column {name:?}: {heading:?}"))
    };
    let (command, replies, logged, promises) =
        (column("command"), column("replies"), column("logged"), column("promises"));
    let rows: Vec<Row> = lines
        .map(cells)
        .filter(|cells| cells[command].starts_with('`'))
        .map(|cells| {
            assert_eq!(cells.len(), heading.len(), "a row of §3.0 with another count of cells: {cells:?}");
            Row {
                syntax: cells[command].trim_matches('`').to_owned(),
                replies: reply_words(cells[replies]),
                logged: cells[logged] != "no",
                promises: cells[promises]
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect(),
            }
        })
        .collect();
    assert!(rows.len() > 20, "§3.0's table has {} rows", rows.len());
    rows
}

/// The names of the commands whose row makes `promise`, in the table's
/// order.
pub fn promising(promise: &str) -> Vec<String> {
    commands().iter().filter(|row| row.makes(promise)).map(|row| row.name().to_owned()).collect()
}

/// The words in capitals of `text`: the replies it names.
pub fn reply_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .filter(|word| word.len() > 1)
        .map(str::to_owned)
        .collect()
}

/// The cells of a table's line, trimmed.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().strip_prefix('|').unwrap_or(line);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(str::trim).collect()
}
