//! The protocol reference: what a client sees on the wire, command by
//! command, and where this server differs from beanstalkd. Code and tests
//! cite it as "reference §N". It holds no code but, for the tests, the
//! reader of its table of commands (`reference/commands.rs`); `cargo doc`
//! renders it.
#![doc = include_str!("reference.md")]

#[cfg(test)]
pub(crate) mod commands;

#[cfg(test)]
mod tests {
    //! The table of commands (§3.0) is the one list: these tests hold the
    //! parser, the prefix list of §1.3 and the README's cheat-sheet to it.

    use std::collections::BTreeSet;

    use super::commands::{commands, reply_words, Row, REFERENCE};
    use crate::protocol::{parse, Admin, AdminCommands, Name};

    const README: &str = include_str!("../README.md");
    const PROTOCOL: &str = include_str!("protocol/command.rs");
    const REPLIES: &str = include_str!("protocol/reply.rs");

    /// `ReserveWithTimeout` as the protocol writes it: `reserve-with-timeout`.
    fn kebab(variant: &str) -> String {
        let mut name = String::new();
        for c in variant.chars() {
            if c.is_ascii_uppercase() && !name.is_empty() {
                name.push('-');
            }
            name.push(c.to_ascii_lowercase());
        }
        name
    }

    /// The variants of `enum Command`, read from its source.
    fn command_variants() -> Vec<String> {
        let body = PROTOCOL.split("pub enum Command {").nth(1).expect("enum Command");
        let body = body.split("\n}").next().unwrap_or_default();
        body.lines()
            .filter_map(|line| line.strip_prefix("    "))
            .filter(|line| line.starts_with(|c: char| c.is_ascii_uppercase()))
            .map(|line| {
                line.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or_default().to_owned()
            })
            .collect()
    }

    /// §1.6 lists every reply there is: each word `Reply::word` gives,
    /// read from its source.
    #[test]
    fn the_list_of_replies_names_every_reply_word() {
        let word = REPLIES.split("pub fn word(&self)").nth(1).expect("Reply::word");
        let word = word.split("\n    }\n").next().unwrap_or_default();
        let words: BTreeSet<String> = word.split('"').skip(1).step_by(2).map(str::to_owned).collect();
        assert!(words.len() > 30, "Reply::word was not read: {words:?}");
        let section = REFERENCE.split("### 1.6 ").nth(1).expect("§1.6 in reference.md");
        let listed = reply_words(section.split("```").nth(1).unwrap_or_default());
        let missing: Vec<&String> = words.difference(&listed).collect();
        assert!(missing.is_empty(), "replies §1.6 does not list: {missing:?}");
    }

    #[test]
    fn every_command_of_the_parser_is_in_the_table_and_nothing_else() {
        let in_table: BTreeSet<String> = commands().iter().map(|row| row.name().to_owned()).collect();
        let parsed: BTreeSet<String> = command_variants().iter().map(|v| kebab(v)).collect();
        assert!(parsed.len() > 20, "{parsed:?}");
        assert_eq!(parsed, in_table, "protocol::Command against the table of commands, reference §3.0");
    }

    #[test]
    fn each_row_of_the_table_parses_as_its_command() {
        for row in commands() {
            let line = row.example();
            let command = parse(line.as_bytes()).unwrap_or_else(|e| panic!("{line:?}: {e:?}"));
            let variant = format!("{command:?}");
            let variant = variant.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or_default();
            assert_eq!(kebab(variant), row.name(), "{line:?}");
        }
    }

    /// The class a row's promises give its command: `admin`, `admin
    /// unless held`, or neither.
    fn admin_class(row: &Row) -> Option<Admin> {
        match (row.makes("admin"), row.makes("admin unless held")) {
            (true, false) => Some(Admin::Whole),
            (false, true) => Some(Admin::UnlessHeld),
            (false, false) => None,
            (true, true) => panic!("{}: both admin and admin unless held", row.name()),
        }
    }

    #[test]
    fn the_admin_commands_are_those_the_table_says() {
        let table = commands();
        // The names, in the table's order, are the parser's.
        let names: Vec<&str> = Name::ALL.iter().map(|name| name.as_str()).collect();
        let rows: Vec<&str> = table.iter().map(Row::name).collect();
        assert_eq!(names, rows, "protocol/admin.rs's names against §3.0");
        let safe = AdminCommands::safe();
        let mut admin = 0;
        for row in &table {
            let command = parse(row.example().as_bytes()).unwrap();
            let name = command.name();
            assert_eq!(name.as_str(), row.name(), "{}: Command::name", row.example());
            // The default set is the rows marked `admin` or `admin unless
            // held`, and each class is the column's.
            let class = admin_class(row);
            assert_eq!(
                safe.contains(name),
                class.is_some(),
                "{}: the default admin set against §3.0",
                row.name()
            );
            if let Some(class) = class {
                assert_eq!(name.admin(), class, "{}: its admin class against §3.0", row.name());
                admin += 1;
            } else {
                assert!(
                    matches!(name.admin(), Admin::No | Admin::Never),
                    "{}: §3.0 says no admin",
                    row.name()
                );
            }
        }
        assert!(admin >= 5, "{admin} admin commands");
    }

    /// The README's and the man page's lists of the admin commands name
    /// exactly the default set: the rows that promise `admin` or `admin
    /// unless held`.
    #[test]
    fn the_admin_commands_listed_for_readers_are_those_of_the_table() {
        let admin: BTreeSet<String> = commands()
            .iter()
            .filter(|row| admin_class(row).is_some())
            .map(|row| row.name().to_owned())
            .collect();
        // README, "Who may do what": `(`drain`, ..., `delete-batch` ...:
        // the rows marked `admin` ... in reference §3.0)`.
        let end = ": the rows marked `admin`";
        let before =
            README.split(end).next().filter(|b| b.len() < README.len()).expect("the README's admin list");
        let list = &before[before.rfind('(').unwrap_or_default()..];
        let readme: BTreeSet<String> = list.split('`').skip(1).step_by(2).map(str::to_owned).collect();
        assert_eq!(readme, admin, "the README's admin commands against §3.0");
        // The man page's `--admin-commands`: `.RB ( drain ,` ... `.BR move\-job ):`.
        const MAN: &str = include_str!("../beanstalk.1");
        let option = MAN.split(".BI \\-\\-admin\\-commands").nth(1).expect("the man page's --admin-commands");
        let option = option.split("The default is").nth(1).unwrap_or_default();
        let option = option.split("This option is not").next().unwrap_or_default();
        let man: BTreeSet<String> = option
            .lines()
            .filter_map(|line| line.strip_prefix(".RB ( ").or(line.strip_prefix(".BR ")))
            .map(|line| line.split(' ').next().unwrap_or_default().replace("\\-", "-"))
            .collect();
        assert_eq!(man, admin, "the man page's admin commands (--admin-commands) against §3.0");
    }

    #[test]
    fn every_command_has_its_prefix_in_section_1_3() {
        let section =
            REFERENCE.split("### 1.3 ").nth(1).expect("§1.3").split("\n### ").next().unwrap_or_default();
        for row in commands() {
            assert!(section.contains(&format!("\"{}", row.name())), "{} is not in §1.3", row.name());
        }
    }

    /// beanstalkd 1.13's commands: fixed, as that release is.
    const BEANSTALKDS: [&str; 25] = [
        "put",
        "use",
        "reserve",
        "reserve-with-timeout",
        "reserve-job",
        "delete",
        "release",
        "bury",
        "touch",
        "watch",
        "ignore",
        "peek",
        "peek-ready",
        "peek-delayed",
        "peek-buried",
        "kick",
        "kick-job",
        "stats-job",
        "stats-tube",
        "stats",
        "list-tubes",
        "list-tube-used",
        "list-tubes-watched",
        "pause-tube",
        "quit",
    ];

    /// Each command of the table that beanstalkd lacks is named where a
    /// reader looks for what this server adds: the README's "How it maps
    /// to beanstalkd", the man page, and §10.
    #[test]
    fn every_command_beanstalkd_lacks_is_named_where_extras_are_listed() {
        const MAN: &str = include_str!("../beanstalk.1");
        let man = MAN.replace("\\-", "-");
        let maps = README.split("## How it maps to beanstalkd").nth(1).expect("README: How it maps");
        let maps = maps.split("\n## ").next().unwrap_or_default();
        let differs = REFERENCE.split("## 10. ").nth(1).expect("§10");
        let extras: Vec<String> = commands()
            .iter()
            .map(|row| row.name().to_owned())
            .filter(|name| !BEANSTALKDS.contains(&name.as_str()))
            .collect();
        assert!(extras.len() >= 5, "{extras:?}");
        for name in &extras {
            let quoted = format!("`{name}");
            assert!(maps.contains(&quoted), "README's How it maps to beanstalkd does not name {name}");
            assert!(differs.contains(&quoted), "reference §10 does not name {name}");
            assert!(man.contains(name.as_str()), "the man page does not name {name}");
        }
    }

    #[test]
    fn the_readme_cheat_sheet_is_a_copy_of_the_table() {
        let table = commands();
        let sheet = README.split("## Protocol cheat-sheet").nth(1).expect("the README's cheat-sheet");
        let sheet = sheet.split("```text\n").nth(1).and_then(|s| s.split("```").next()).unwrap_or_default();
        let mut named = BTreeSet::new();
        for line in sheet.lines() {
            // Commands, then at least three spaces, then their replies.
            let (commands, replies) = line.split_once("   ").unwrap_or((line, ""));
            let names: Vec<&str> =
                commands.split(" | ").map(|c| c.split(' ').next().unwrap_or_default()).collect();
            let mut want = BTreeSet::new();
            for name in &names {
                let row = table.iter().find(|row| row.name() == *name);
                let row = row.unwrap_or_else(|| panic!("the cheat-sheet's {name} is not in the table"));
                want.extend(row.replies.iter().cloned());
                named.insert(name.to_string());
            }
            assert_eq!(reply_words(replies), want, "the cheat-sheet's line {line:?}");
        }
        let all: BTreeSet<String> = table.iter().map(|row| row.name().to_owned()).collect();
        assert_eq!(named, all, "commands of the table missing from the cheat-sheet");
    }
}
