//! The README's flags and command lines, held to this parser: the table
//! under "Flags" names every flag `-h` lists, and every command line in a
//! README code block, or in a recipe file it links, that starts
//! `beanstalk` (or `beanstalk-binlog`) is one this build takes. A flag
//! renamed, removed or added without the README fails here. So does a
//! link of the README to a file or a heading that is not there, and an
//! excerpt of a recipe that the recipe no longer says.

use std::collections::BTreeSet;

use super::long::LONG_OPTIONS;
use super::{parse_args, usage};

const README: &str = include_str!("../../README.md");
/// The recipe files the README links that run the server.
const RECIPES: [&str; 1] = [include_str!("../../tests/recipes/systemd/beanstalk.service")];
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

/// The README's code blocks, each without its fence's language.
fn code_blocks() -> impl Iterator<Item = &'static str> {
    README.split("```").skip(1).step_by(2).map(|block| block.split_once('\n').map_or("", |(_, code)| code))
}

/// The arguments of each command line in the README's code blocks and
/// recipes that runs the server, as the shell (or the unit, or the image)
/// passes them.
fn server_command_lines() -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    for block in code_blocks().chain(RECIPES) {
        for line in block.lines() {
            // Quotes, a Containerfile's brackets and the commas between
            // its quoted words are not arguments; a comma in a word is.
            let line = line.replace("\",", "\"").replace(['\'', '"', '[', ']'], " ");
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
    for block in code_blocks().chain(RECIPES) {
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

/// The README's text outside its code blocks.
fn prose() -> impl Iterator<Item = &'static str> {
    README.split("```").step_by(2)
}

/// A heading's anchor as GitHub makes it: lower case, spaces made `-`,
/// every other character but letters, digits, `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_link_of_the_readme_leads_somewhere() {
    let anchors: BTreeSet<String> = prose()
        .flat_map(str::lines)
        .filter_map(|line| line.trim_start_matches('#').strip_prefix(' ').filter(|_| line.starts_with('#')))
        .map(anchor)
        .collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for text in prose() {
        for (_, rest) in text.match_indices("](").map(|(at, _)| text.split_at(at + 2)) {
            let Some((target, _)) = rest.split_once(')') else { continue };
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            match target.split_once('#') {
                Some(("", fragment)) => {
                    assert!(anchors.contains(fragment), "README links to no heading #{fragment}")
                }
                _ => {
                    let path = target.split('#').next().unwrap_or_default();
                    assert!(root.join(path).exists(), "README links to {path}, which is not there");
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "found only {checked} links in the README");
}

#[test]
fn every_excerpt_in_the_readme_is_in_its_recipe() {
    let marker = "<!-- excerpt: ";
    let mut found = 0;
    for (at, _) in README.match_indices(marker) {
        let rest = &README[at + marker.len()..];
        let (path, rest) =
            rest.split_once(" -->\n```").expect("an excerpt marker names a file, then a block");
        let excerpt =
            rest.split_once('\n').and_then(|(_, code)| code.split_once("```")).map(|(code, _)| code);
        let excerpt: Vec<&str> = excerpt.expect("the excerpt's block ends").lines().collect();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let lines: Vec<&str> = file.lines().collect();
        assert!(
            lines.windows(excerpt.len()).any(|window| window == excerpt.as_slice()),
            "the README's excerpt of {} is not in it:\n{}",
            path.display(),
            excerpt.join("\n")
        );
        found += 1;
    }
    assert!(found >= 1, "found no excerpt in the README");
}

/// `--bodies-in-memory`'s bound by default (`engine/body.rs`), wherever
/// the docs give it: the README's table and section, the man page's
/// option and its PERSISTENCE; `-h` is made from the constant.
#[test]
fn the_docs_give_the_bodies_bound_by_default() {
    let squeeze = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let (readme, man) = (squeeze(README), squeeze(include_str!("../../beanstalk.1")));
    let n = super::DEFAULT_BODIES_IN_MEMORY;
    for said in [
        format!("`all` keeps every body in memory ([Bodies on disk](#bodies-on-disk)) | `{n}` |"),
        format!("`--bodies-in-memory` ({n} bytes by default)"),
    ] {
        assert!(readme.contains(&said), "README: {said}");
    }
    for said in [format!("in memory (default {n})"), format!("({n} bytes by default)")] {
        assert!(man.contains(&said), "man page: {said}");
    }
    assert!(squeeze(&usage("beanstalk")).contains(&format!("(default {n}; all")));
}
