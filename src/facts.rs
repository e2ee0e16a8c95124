//! One place per fact: the numbers that the prose repeats, held to the
//! constant that states each one. A fact lives in code, once; the README,
//! the protocol reference, the man page and the doc comments may name it,
//! and these tests read them all and fail when a mention disagrees. Each
//! finds the mentions by the words around them ("the format version is
//! 7", "128 KiB of address space a connection"): write a new mention in
//! those words and it is held too, here as anywhere (this file is one of
//! the documents). (The table of commands is held by `src/reference.rs`,
//! the README's flags and command lines by `config/readme.rs`.)

use crate::binlog::{kind, record};
use crate::host;
use crate::protocol::{MAX_BATCH_LINE, MAX_LINE, MAX_PUT_LINE};

/// Every document that repeats a fact, by name, as written: the recipes
/// the README links (`tests/recipes/`) are documents too.
const DOCUMENTS: [(&str, &str); 23] = [
    ("README.md", include_str!("../README.md")),
    ("benches/README.md", include_str!("../benches/README.md")),
    ("tests/recipes/shards.py", include_str!("../tests/recipes/shards.py")),
    ("tests/recipes/clients/call.py", include_str!("../tests/recipes/clients/call.py")),
    (
        "tests/recipes/clients/greenstalk_example.py",
        include_str!("../tests/recipes/clients/greenstalk_example.py"),
    ),
    ("tests/recipes/clients/pystalk_example.py", include_str!("../tests/recipes/clients/pystalk_example.py")),
    (
        "tests/recipes/clients/pheanstalk_example.php",
        include_str!("../tests/recipes/clients/pheanstalk_example.php"),
    ),
    ("tests/recipes/prometheus/alerts.yml", include_str!("../tests/recipes/prometheus/alerts.yml")),
    (
        "tests/recipes/prometheus/exporter-names.yml",
        include_str!("../tests/recipes/prometheus/exporter-names.yml"),
    ),
    ("tests/recipes/systemd/beanstalk.service", include_str!("../tests/recipes/systemd/beanstalk.service")),
    ("tests/recipes/systemd/beanstalk.socket", include_str!("../tests/recipes/systemd/beanstalk.socket")),
    ("src/reference.md", include_str!("reference.md")),
    ("beanstalk.1", include_str!("../beanstalk.1")),
    ("src/lib.rs", include_str!("lib.rs")),
    ("src/binlog/mod.rs", include_str!("binlog/mod.rs")),
    ("src/binlog/record.rs", include_str!("binlog/record.rs")),
    ("src/binlog/inspect/downgrade.rs", include_str!("binlog/inspect/downgrade.rs")),
    ("src/bin/beanstalk-binlog.rs", include_str!("bin/beanstalk-binlog.rs")),
    ("src/framing.rs", include_str!("framing.rs")),
    ("src/protocol/mod.rs", include_str!("protocol/mod.rs")),
    ("src/host.rs", include_str!("host.rs")),
    ("src/config.rs", include_str!("config.rs")),
    ("src/facts.rs", include_str!("facts.rs")),
];

/// `text` as one line of words: comment markers, the man page's macros
/// and escapes, Markdown's backticks and emphasis gone, so that a phrase
/// is found however it was wrapped or marked up.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let line = line.trim_start();
        let line = ["//!", "///", "# "].iter().find_map(|marker| line.strip_prefix(marker)).unwrap_or(line);
        // A man page's request line: `.B word` is `word`.
        let line = match line.strip_prefix('.') {
            Some(request) => request.split_once(' ').map_or("", |(_, rest)| rest),
            None => line,
        };
        out.push_str(line);
        out.push(' ');
    }
    let out = out.replace("\\-", "-").replace("\\ ", " ").replace(['`', '*', '"'], "");
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each document, by name, as prose.
fn documents() -> Vec<(&'static str, String)> {
    DOCUMENTS.iter().map(|(name, text)| (*name, prose(text))).collect()
}

/// The numbers written between `before` and `after` in `text` (`after`
/// may be empty): "less 16 descriptors" is 16 for `("less ", "
/// descriptors")`. Digits may be grouped by commas, as the prose writes
/// them.
fn mentions(text: &str, before: &str, after: &str) -> Vec<u64> {
    let lower = text.to_lowercase();
    let (before, after) = (before.to_lowercase(), after.to_lowercase());
    let mut found = Vec::new();
    for (at, _) in lower.match_indices(&before) {
        // With nothing before, a number starts where no digit precedes.
        let joined = lower[..at].ends_with(|c: char| c.is_ascii_digit() || c == ',');
        if before.is_empty() && joined {
            continue;
        }
        let rest = &lower[at + before.len()..];
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == ',')).unwrap_or(rest.len());
        let number = rest[..digits].trim_end_matches(',');
        if number.is_empty() || !rest[number.len()..].starts_with(&after) {
            continue;
        }
        found.extend(number.replace(',', "").parse::<u64>().ok());
    }
    found
}

/// Asserts that every mention in every document between `before` and
/// `after` is `want`, and that each document of `required` has one.
fn held(before: &str, after: &str, want: u64, required: &[&str]) {
    for (name, text) in documents() {
        let found = mentions(&text, before, after);
        for n in &found {
            assert_eq!(*n, want, "{name} says \"{before}{n}{after}\": the code says {want}");
        }
        if required.contains(&name) {
            assert!(!found.is_empty(), "{name} no longer says \"{before}{want}{after}\"");
        }
    }
}

#[test]
fn the_format_version_is_stated_as_the_code_writes_it() {
    let version = u64::from(record::VERSION);
    held(
        "format version is ",
        "",
        version,
        &["README.md", "beanstalk.1", "src/reference.md", "src/binlog/record.rs", "src/facts.rs"],
    );
    held("u32 version(=", ")", version, &["src/binlog/record.rs"]);
    // `downgrade` writes the previous version, which every build before
    // the next one reads.
    let previous = u64::from(record::PREVIOUS_VERSION);
    held("writes a log in format version ", "", previous, &["src/reference.md"]);
    held(
        "in format version ",
        ", which every build",
        previous,
        &["beanstalk.1", "src/bin/beanstalk-binlog.rs"],
    );
    held("before format version ", "", previous + 1, &["beanstalk.1", "src/reference.md"]);
    // The versions read are one list, and the messages name it.
    let readable = record::READABLE_VERSIONS;
    assert_eq!(readable.last(), Some(&record::VERSION));
    assert!(readable.windows(2).all(|pair| pair[1] == pair[0] + 1), "{readable:?}");
    let text = format!("versions {} to {}", readable[0], record::VERSION);
    assert_eq!(record::READABLE_VERSIONS_TEXT, text);
    // The history names versions that were.
    for (name, text) in documents() {
        for n in mentions(&text, "since format version ", "") {
            assert!(n <= version, "{name} says \"since format version {n}\": the newest is {version}");
        }
    }
}

/// The bound on a vanished peer (`listen.rs`, README "Connections").
#[test]
fn a_dead_peer_is_let_go_within_the_listeners_bound() {
    let secs = crate::listen::DEAD_PEER_SECS as u64;
    held("within ", " seconds of the last word", secs, &["README.md", "beanstalk.1", "src/reference.md"]);
    held("for ", " seconds (no answer to a probe", secs, &["README.md", "beanstalk.1"]);
    let dead = crate::listen::DEAD_PEER;
    held("connection silent for ", " seconds", dead.idle_secs as u64, &["beanstalk.1", "src/reference.md"]);
    held("probed every ", " seconds", dead.interval_secs as u64, &["README.md", "beanstalk.1"]);
}

#[test]
fn the_record_kinds_are_the_grammars() {
    // The grammar in record.rs's docs: "//!   7 Batch   item+, ...".
    let grammar: Vec<(u8, String)> = include_str!("binlog/record.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!   "))
        .filter_map(|row| {
            let mut words = row.split_whitespace();
            let number = words.next()?.parse().ok()?;
            Some((number, words.next()?.to_owned()))
        })
        .collect();
    let kinds: Vec<(u8, String)> = kind::ALL.iter().map(|(n, name)| (*n, name.to_string())).collect();
    assert_eq!(grammar, kinds, "record.rs's grammar against binlog/kind.rs");
    let newest = kind::ALL.iter().map(|(n, _)| u64::from(*n)).max().unwrap_or_default();
    for (name, text) in documents() {
        for n in mentions(&text, "kind ", "").into_iter().chain(mentions(&text, "kinds 1 to ", "")) {
            assert!((1..=newest).contains(&n), "{name} names record kind {n}: there is none");
        }
    }
}

#[test]
fn the_line_limits_are_the_parsers() {
    let line = MAX_LINE as u64;
    held("longer than ", " bytes", line, &["README.md", "src/framing.rs"]);
    held("at most ", " bytes including its CRLF", line, &["src/reference.md"]);
    held("over ", " bytes", line, &[]);
    held("line of exactly ", "", line + 1, &[]);
    // A delete-batch line, the one allowed past it.
    let batch = MAX_BATCH_LINE as u64;
    assert_eq!(batch % 1024, 0);
    held("up to ", " KiB", batch / 1024, &["src/framing.rs", "src/reference.md"]);
    held("may take up to ", " KB", batch / 1000, &[]);
    held("32 KiB (", " bytes", batch, &[]);
    // A put that carries tags, every tag at its longest.
    let put = MAX_PUT_LINE as u64;
    held("may be up to ", " bytes, CRLF included", put, &["src/reference.md"]);
    held("a line past ", " bytes", put, &["src/reference.md"]);
    held("up to ", " bytes (§1.2)", put, &["src/reference.md"]);
    held("take more, up to ", " bytes", put, &["src/framing.rs"]);
}

#[test]
fn a_connections_address_space_and_maps_are_the_hosts() {
    let space = host::ADDRESS_SPACE_PER_CONNECTION;
    assert_eq!(space % 1024, 0);
    held("", " KiB of address space a", space / 1024, &["README.md", "beanstalk.1"]);
    held("in use and ", " MiB", host::RESERVED_ADDRESS_SPACE >> 20, &["beanstalk.1"]);
    held("RLIMIT_NOFILE less ", " descriptors", host::RESERVED_FDS, &["README.md", "beanstalk.1"]);
    held("max_map_count less ", "", host::RESERVED_MAPS, &["README.md", "beanstalk.1"]);
    held("over ", " maps a busy connection", host::MAPS_PER_CONNECTION, &["README.md"]);
    held("the ", " memory maps each busy connection uses", host::MAPS_PER_CONNECTION, &["beanstalk.1"]);
    // What Linux's default vm.max_map_count allows.
    let default = (65_530 - host::RESERVED_MAPS) / host::MAPS_PER_CONNECTION;
    held("that is ", " connections", default, &["README.md"]);
    held("Linux's default allows ", " connections", default, &["tests/recipes/systemd/beanstalk.service"]);
}

#[test]
fn the_memory_limits_counts_are_the_engines() {
    use crate::engine::{named::NAME_MEMORY_OVERHEAD, unique::KEY_MEMORY_OVERHEAD};
    use crate::engine::{JOB_MEMORY_OVERHEAD, TAG_ENTRY_MEMORY};
    let (job, entry) = (JOB_MEMORY_OVERHEAD, TAG_ENTRY_MEMORY);
    let (key, name) = (KEY_MEMORY_OVERHEAD as u64, NAME_MEMORY_OVERHEAD as u64);
    held("bodies + ", " B a job", job, &["README.md"]);
    held("bodies + ", " bytes a job", job, &["src/config.rs"]);
    held("bodies plus ", " bytes a job", job, &["beanstalk.1"]);
    held("its body plus ", " bytes", job, &["src/reference.md"]);
    held("tube and key + ", " B", key, &["README.md"]);
    held("key plus ", " bytes", key, &["beanstalk.1", "src/reference.md"]);
    held("", " B a job for each of", entry, &["README.md"]);
    held("", " bytes a job for each of", entry, &["beanstalk.1"]);
    held("in one entry) ", " bytes each", entry, &["src/reference.md"]);
    held("twice its length + ", " B", name, &["README.md"]);
    held("twice its length plus ", " bytes", name, &["beanstalk.1", "src/reference.md"]);
}

#[test]
fn the_guide_names_a_test_for_every_promise() {
    // The promises column of the table of commands (reference §3.0).
    let rows = crate::reference::commands::commands();
    let mut promises: Vec<&str> = rows.iter().flat_map(|row| &row.promises).map(String::as_str).collect();
    promises.sort_unstable();
    promises.dedup();
    assert!(promises.len() >= 3, "{promises:?}");
    let guide = include_str!("lib.rs");
    let adding = guide.split("### Adding a command").nth(1).expect("the guide's Adding a command");
    let adding = prose(adding.split("\n//! ### ").next().unwrap_or_default());
    for promise in promises {
        assert!(
            adding.contains(&format!("({promise})")),
            "the guide names no test for the promise {promise}"
        );
    }
}

#[test]
fn the_readmes_performance_figures_are_the_records() {
    let readme = include_str!("../README.md");
    let record = include_str!("../benches/README.md");
    let table =
        readme.split("\n## Performance\n").nth(1).expect("the README's Performance").split("\n## ").next();
    let rows = table.unwrap_or_default().lines().filter(|line| line.starts_with("| ")).skip(1);
    let mut figures = 0;
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // | figure | bench | beanstalk | beanstalkd | ratio |: ours and beanstalkd's.
        for figure in cells[3..5].iter().flat_map(|cell| cell.split(" / ")).filter(|f| !f.is_empty()) {
            assert!(
                record.contains(figure),
                "the README's {figure:?} ({}) is not in benches/README.md",
                cells[1]
            );
            figures += 1;
        }
    }
    assert!(figures > 20, "found {figures} figures in the README's Performance table");
}
