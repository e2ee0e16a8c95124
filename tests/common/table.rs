//! The table of commands (reference §3.0), read for the tests that hold
//! every command to the promises its row names: a command given a promise
//! gets that promise's check, or the check fails for want of a case.

const REFERENCE: &str = include_str!("../../src/reference.md");

/// One row: the command's name and the words of its *promises* cell.
pub struct Row {
    pub name: String,
    /// As written: `release <id> <pri> <delay>`.
    pub syntax: String,
    pub promises: Vec<String>,
}

impl Row {
    /// A line the parser takes for this command, each argument made up
    /// (as `src/reference.rs` makes its rows' lines): a tube is `tube`, a
    /// mode `fifo`, anything else `1`.
    pub fn example(&self) -> String {
        let arguments = self.syntax.split(' ').skip(1).map(|field| match field {
            "<tube>" => "tube",
            "<mode>" => "fifo",
            _ => "1",
        });
        std::iter::once(self.name.as_str()).chain(arguments).collect::<Vec<_>>().join(" ")
    }
}

/// Every row of §3.0.
pub fn rows() -> Vec<Row> {
    let section = REFERENCE.split("### 3.0 ").nth(1).expect("§3.0 in reference.md");
    let section = section.split("\n### ").next().unwrap_or_default();
    let mut header = None;
    let mut rows = Vec::new();
    for line in section.lines().filter(|line| line.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if header.is_none() {
            header = cells.iter().position(|&cell| cell == "promises");
            assert!(header.is_some(), "§3.0's table has no promises column: {line}");
            continue;
        }
        if !cells[1].starts_with('`') {
            continue;
        }
        let syntax = cells[1].trim_matches('`').to_owned();
        let name = syntax.split(' ').next().unwrap_or_default().to_owned();
        let words = cells[header.unwrap()].split(',').map(str::trim).filter(|w| !w.is_empty());
        rows.push(Row { name, syntax, promises: words.map(str::to_owned).collect() });
    }
    assert!(rows.len() > 20, "§3.0 has {} rows", rows.len());
    rows
}

/// The commands that make `promise`, in the table's order.
pub fn promising(promise: &str) -> Vec<String> {
    rows().into_iter().filter(|row| row.promises.iter().any(|p| p == promise)).map(|row| row.name).collect()
}
