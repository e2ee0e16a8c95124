//! The README's flags and command lines, held to this parser: the table
//! under "Flags" names every flag `-h` lists, and every command line in a
//! README code block that starts `beanstalk` (or `beanstalk-binlog`)
//! is one this build takes. A flag renamed, removed or added without the
//! README fails here.

use std::collections::BTreeSet;

use super::long::LONG_OPTIONS;
use super::{parse_args, usage};

const README: &str = include_str!("../../README.md");
const BINLOG_TOOL: &str = include_str!("../bin/beanstalk-binlog.rs");

/// The flags in `text`'s words: `-l`, `--max-connections` (a short flag
/// is its letter, whatever is attached: `-f0` is `-f`).
fn flags_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '`' | ',' | ';' | '(' | ')'))
        .filter_map(|word| {
            if let Some(long) = word.strip_prefix("--") {
                let name: String = long.chars().take_while(|c| c.is_ascii_lowercase() || *c == '-').collect();
                return (!name.is_empty()).then(|| format!("--{name}"));
            }
            let letter = word.strip_prefix('-')?.chars().next().filter(char::is_ascii_alphabetic)?;
            Some(format!("-{letter}"))
        })
        .collect()
}

/// The README's section `heading`, up to the next of its level.
fn section(heading: &str) -> &'static str {
    let rest =
        README.split(&format!("\n## {heading}\n")).nth(1).unwrap_or_else(|| panic!("README: no {heading}"));
    rest.split("\n## ").next().unwrap_or_default()
}

#[test]
fn the_readmes_flag_table_names_every_flag_and_only_those() {
    let table: String = section("Flags")
        .lines()
        .filter(|line| line.starts_with("| `-"))
        .filter_map(|line| line.split('|').nth(1))
        .collect::<Vec<_>>()
        .join(" ");
    let named = flags_in(&table);
    let listed = flags_in(&usage("beanstalk"));
    assert_eq!(named, listed, "the README's Flags table against `beanstalk -h`");
    for option in LONG_OPTIONS {
        assert!(named.contains(&format!("--{option}")), "the README's Flags table lacks --{option}");
    }
}

/// The arguments of each command line in the README's code blocks that
/// runs the server, as the shell (or the unit, or the image) passes them.
fn server_command_lines() -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    for block in README.split("```").skip(1).step_by(2) {
        for line in block.lines().skip(1) {
            // Quotes and a Containerfile's brackets are not arguments.
            let line = line.replace(['\'', '"', '[', ']', ','], " ");
            let words: Vec<&str> = line.split_whitespace().collect();
            let start = words.iter().enumerate().position(|(at, word)| {
                let program = *word == "beanstalk" || word.ends_with("/beanstalk");
                let first = at == 0 || matches!(words[at - 1], "$" | "exec" | "CMD" | "ENTRYPOINT");
                program && first
            });
            let args = match start {
                Some(at) => &words[at + 1..],
                None if line.trim_start().starts_with("cargo run") => {
                    match words.iter().position(|w| *w == "--") {
                        Some(at) => &words[at + 1..],
                        None => continue,
                    }
                }
                None => continue,
            };
            let args = args
                .iter()
                .take_while(|word| !matches!(word.chars().next(), Some('&' | '|' | ';' | '#' | '>')));
            lines.push(args.map(|word| word.to_string()).collect());
        }
    }
    lines
}

#[test]
fn every_server_command_line_in_the_readme_parses() {
    let lines = server_command_lines();
    assert!(lines.len() >= 8, "found only {lines:?}");
    assert!(lines.iter().any(|args| args.contains(&"--health-check".to_owned())), "{lines:?}");
    for args in lines {
        assert!(
            parse_args(&args).is_ok(),
            "the README runs `beanstalk {}`: {:?}",
            args.join(" "),
            parse_args(&args)
        );
    }
}

#[test]
fn every_binlog_tool_command_in_the_readme_is_one_it_has() {
    let mut found = 0;
    for block in README.split("```").skip(1).step_by(2) {
        for line in block.lines() {
            let Some((_, rest)) = line.split_once("beanstalk-binlog ") else { continue };
            let Some(command) = rest.split_whitespace().next() else { continue };
            assert!(
                BINLOG_TOOL.contains(&format!("\n  {command} ")),
                "the README runs beanstalk-binlog {command}"
            );
            found += 1;
        }
    }
    assert!(found >= 2, "found {found} beanstalk-binlog commands in the README's code blocks");
}
