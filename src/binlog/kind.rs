//! The record kinds of the binlog: each record's first payload byte, one
//! constant each, so that a kind's number is written once. `record.rs`'s
//! grammar names the same kinds in its docs; a test (`src/facts.rs`)
//! holds the two together.

/// A job's every field: its put, and compaction's copy of it.
pub const FULL: u8 = 1;
/// A job's fields that change over its life.
pub const UPDATE: u8 = 2;
/// A job gone.
pub const DELETE: u8 = 3;
/// The next id to hand out; opens every file.
pub const NEXT_ID: u8 = 4;
/// A beanstalkd file imported into this one (`import.rs`).
pub const IMPORTED: u8 = 5;
/// A full record with a unique key (reference §3.1a); since version 2.
pub const KEYED_FULL: u8 = 6;
/// A change of many jobs, its records under one checksum; since version 3.
pub const BATCH: u8 = 7;
/// A full record with tags: a retry limit, a concurrency key, a group
/// (reference §3.1b to §3.1d); since version 4, groups since version 5.
pub const TAGGED_FULL: u8 = 8;

/// Every kind, with the name `record.rs`'s grammar gives it.
pub const ALL: [(u8, &str); 8] = [
    (FULL, "Full"),
    (UPDATE, "Update"),
    (DELETE, "Delete"),
    (NEXT_ID, "NextId"),
    (IMPORTED, "Imported"),
    (KEYED_FULL, "KeyedFull"),
    (BATCH, "Batch"),
    (TAGGED_FULL, "TaggedFull"),
];
