//! Who may run what (reference §3.0, the promises `admin` and `admin
//! unless held`; §7.1): every command's [`Name`], what each is to a
//! connection that is not the admin socket's ([`Admin`]), and the set of
//! commands such a connection may not run ([`AdminCommands`], the
//! operator's `--admin-commands`, whose default is every command with an
//! admin effect). Data and its parsing only: the connection refuses a
//! whole command before it runs, and the engine the part of one on jobs
//! its sender does not hold, which only it can tell.
//!
//! The promise behind the default: on a listener that is not the admin
//! socket, no sequence of commands changes a job its sender does not hold,
//! a whole tube, or the whole server. A connection changes the jobs it
//! holds (`delete`, `release`, `bury`, `touch`, `delete-batch` of its own
//! reservations are never admin business), takes ready jobs as any worker
//! does, and puts new ones.

use super::Command;

/// What a command is to a connection that is not the admin socket's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    /// Admin by default, refused whole (`admin` in §3.0): it changes a
    /// whole tube, the server, or jobs its sender need not hold.
    Whole,
    /// Admin by default on the jobs its sender does not hold (`admin
    /// unless held`): on its own reservations it runs, elsewhere it is
    /// `NOT_PERMITTED` and changes nothing. Who holds a job only the
    /// engine can tell.
    UnlessHeld,
    /// Not admin by default; an operator who names it has it refused
    /// whole.
    No,
    /// Never admin: it changes nothing but its sender's own jobs (or, for
    /// `put`, makes a new one, whose body a refusal would leave to be read
    /// as commands), so `--admin-commands` refuses to name it.
    Never,
}

/// Every command: its name as the table of commands writes it (reference
/// §3.0), and what it is to a connection that is not the admin socket's.
/// One list, from which the [`Name`] enum, [`Name::ALL`] and
/// [`Command::name`] are made: a `Command` variant missing here does not
/// compile, and a test holds the names and the classes to the table.
macro_rules! names {
    ($($variant:ident $name:literal $admin:ident,)*) => {
        /// A command's name, without its arguments.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Name {
            $($variant,)*
        }

        impl Name {
            /// Every command, in the order of the table of commands.
            pub const ALL: &'static [Name] = &[$(Name::$variant,)*];

            /// The name as a client sends it: `reserve-with-timeout`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Name::$variant => $name,)*
                }
            }

            /// What the command is to a connection that is not the admin
            /// socket's.
            pub fn admin(self) -> Admin {
                match self {
                    $(Name::$variant => Admin::$admin,)*
                }
            }
        }

        impl Command {
            /// This command's name.
            pub fn name(&self) -> Name {
                match self {
                    $(Command::$variant { .. } => Name::$variant,)*
                }
            }
        }
    };
}

names! {
    Put "put" Never,
    Use "use" No,
    Reserve "reserve" No,
    ReserveWithTimeout "reserve-with-timeout" No,
    ReserveJob "reserve-job" Whole,
    ReserveWithAbort "reserve-with-abort" No,
    Delete "delete" UnlessHeld,
    Release "release" Never,
    Bury "bury" Never,
    Touch "touch" Never,
    Watch "watch" No,
    Ignore "ignore" No,
    Peek "peek" No,
    PeekReady "peek-ready" No,
    PeekDelayed "peek-delayed" No,
    PeekBuried "peek-buried" No,
    Kick "kick" Whole,
    KickJob "kick-job" Whole,
    StatsJob "stats-job" No,
    StatsTube "stats-tube" No,
    Stats "stats" No,
    ListTubes "list-tubes" No,
    ListTubeUsed "list-tube-used" No,
    ListTubesWatched "list-tubes-watched" No,
    PauseTube "pause-tube" Whole,
    Quit "quit" Never,
    MoveJob "move-job" Whole,
    ReserveBatch "reserve-batch" No,
    DeleteBatch "delete-batch" UnlessHeld,
    ClearTube "clear-tube" Whole,
    Drain "drain" Whole,
    Undrain "undrain" Whole,
    ReserveMode "reserve-mode" No,
    PeekReserved "peek-reserved" No,
    FlushTube "flush-tube" Whole,
    ListJobsReady "list-jobs-ready" No,
    ListJobsDelayed "list-jobs-delayed" No,
    ListJobsReserved "list-jobs-reserved" No,
    ListJobsBuried "list-jobs-buried" No,
    StatsGroup "stats-group" No,
    TouchAll "touch-all" Never,
    FlushBuried "flush-buried" Whole,
}

// A set is one bit a command.
const _: () = assert!(Name::ALL.len() <= u64::BITS as usize);

impl Name {
    /// The command's bit in an [`AdminCommands`].
    fn bit(self) -> u64 {
        1u64.wrapping_shl(self as u32)
    }
}

/// The commands a connection that is not the admin socket's may not run
/// (`--admin-commands`): each named [`Admin::UnlessHeld`] on the jobs its
/// sender does not hold, any other whole. Without `--admin-socket` no
/// connection has any refused (reference §3.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminCommands(u64);

impl AdminCommands {
    /// No command refused: the admin socket's connections, and every
    /// connection without one.
    pub const NONE: AdminCommands = AdminCommands(0);

    /// The default: every command with an admin effect ([`Admin::Whole`]
    /// and [`Admin::UnlessHeld`]), so that no sequence of commands on
    /// another listener has one.
    pub fn safe() -> AdminCommands {
        let admin = Name::ALL.iter().filter(|name| matches!(name.admin(), Admin::Whole | Admin::UnlessHeld));
        AdminCommands(admin.fold(0, |set, name| set | name.bit()))
    }

    /// Whether `name` is refused, whole or on jobs not held.
    pub fn contains(self, name: Name) -> bool {
        self.0 & name.bit() != 0
    }

    /// Whether `command` is refused whole, before it runs: named here,
    /// and not a command the engine refuses only on jobs not held.
    pub fn refuses(self, command: &Command) -> bool {
        let name = command.name();
        self.contains(name) && name.admin() != Admin::UnlessHeld
    }

    /// The set `list` names: command names as the table writes them,
    /// separated by commas (spaces around them allowed); empty, none.
    /// `Err` names the word refused and why.
    pub fn parse(list: &str) -> Result<AdminCommands, String> {
        let mut set = AdminCommands::NONE;
        for word in list.split(',').map(str::trim).filter(|word| !word.is_empty()) {
            let Some(&name) = Name::ALL.iter().find(|name| name.as_str() == word) else {
                return Err(format!("{word} (no such command)"));
            };
            if name.admin() == Admin::Never {
                return Err(format!("{word} (never admin: it changes only its sender's own jobs)"));
            }
            set.0 |= name.bit();
        }
        Ok(set)
    }

    /// The names in the set, in the table's order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Name::ALL.iter().filter(move |&&name| self.contains(name)).map(|name| name.as_str())
    }
}

impl Default for AdminCommands {
    fn default() -> AdminCommands {
        AdminCommands::safe()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_safe_set_refuses_whole_commands_at_once_and_leaves_the_holders_to_the_engine() {
        let safe = AdminCommands::safe();
        assert!(safe.refuses(&Command::Drain));
        assert!(safe.refuses(&Command::ReserveJob(1)));
        assert!(!safe.refuses(&Command::Delete(1)), "the engine decides, by who holds the job");
        assert!(safe.contains(Name::Delete) && safe.contains(Name::DeleteBatch));
        assert!(!safe.refuses(&Command::Reserve) && !safe.refuses(&Command::Touch(1)));
        assert!(!AdminCommands::NONE.refuses(&Command::Drain));
        assert_eq!(AdminCommands::default(), safe);
    }

    #[test]
    fn a_list_names_commands_and_never_one_that_changes_only_its_senders_jobs() {
        let set = AdminCommands::parse("kick, pause-tube,,stats").unwrap();
        assert_eq!(set.names().collect::<Vec<_>>(), ["kick", "stats", "pause-tube"]);
        assert!(set.refuses(&Command::Stats) && !set.refuses(&Command::Drain));
        assert_eq!(AdminCommands::parse(""), Ok(AdminCommands::NONE));
        assert_eq!(AdminCommands::parse("kik"), Err("kik (no such command)".to_owned()));
        let never = "release (never admin: it changes only its sender's own jobs)";
        assert_eq!(AdminCommands::parse("drain,release"), Err(never.to_owned()));
        assert!(AdminCommands::parse("put").is_err() && AdminCommands::parse("Drain").is_err());
        let all: Vec<&str> = AdminCommands::safe().names().collect();
        assert_eq!(AdminCommands::parse(&all.join(",")), Ok(AdminCommands::safe()));
    }
}
