//! The command line: beanstalkd's flags, parsed the way beanstalkd parses
//! them, into a [`CommandLine`]: the server's [`Config`], which is all the
//! library takes, and what only the program acts on (`-u`, `-V`). No I/O
//! beyond what the caller prints, but [`Config::conflict`]'s look at where
//! two socket paths lead.
//!
//! Flags may be bundled (`-VV`, `-Fb DIR`), an argument may be attached
//! (`-p11300`, `-f0`) or be the next word, and a later flag overrides an
//! earlier one (reference §7.1). Error texts are beanstalkd's, so scripts that
//! grep for them keep working. Our own options are long (`--name VALUE`),
//! which beanstalkd rejects as an unknown flag, so they cannot clash.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::ids::IdRange;
use crate::protocol::AdminCommands;

mod long;
#[cfg(test)]
mod readme;
use long::parse_long;
pub use long::LONG_OPTIONS;

/// The largest `-z` beanstalkd allows; larger values are clamped.
pub const MAX_JOB_SIZE_LIMIT: u32 = 1_073_741_824;

/// How many tubes a scrape reports one by one unless `--metrics-max-tubes`
/// says otherwise.
pub const DEFAULT_METRICS_MAX_TUBES: usize = 1000;

/// With `-b`, the longest body memory keeps unless `--bodies-in-memory`
/// says otherwise (`engine/body.rs`): a body of this many bytes or fewer
/// stays in memory, where it costs about what a read of it would take in
/// time.
pub const DEFAULT_BODIES_IN_MEMORY: u32 = 256;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address: a host name or IP literal, and a port (0: any free one).
    Tcp { host: String, port: u16 },
    /// A UNIX stream socket at this path (`-l unix:PATH`).
    Unix(PathBuf),
}

/// When the binlog is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// At most once every this many milliseconds (`-f MS`; 0: every write).
    Every(u32),
    /// Never (`-F`).
    Never,
}

/// Everything a [`crate::Server`] needs to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub listen: Listen,
    /// Largest accepted job body in bytes (`-z`).
    pub max_job_size: u32,
    /// Binlog directory (`-b`); `None` keeps everything in memory.
    pub binlog_dir: Option<PathBuf>,
    pub fsync: Fsync,
    /// Size of each binlog file in bytes (`-s`).
    pub binlog_file_size: u32,
    /// With `-b`, the longest body memory keeps; a longer one stays in
    /// the log, read back when asked for (`--bodies-in-memory`,
    /// `engine/body.rs`); `None` (`all`): every body in memory.
    pub bodies_in_memory: Option<u32>,
    /// Most connections served at once (`--max-connections`); `None`: as
    /// many as the host's limits allow (see [`crate::host`]).
    pub max_connections: Option<usize>,
    /// Most memory jobs may take, in bytes (`--max-job-memory`).
    pub max_job_memory: Option<u64>,
    /// Event loops serving the connections (`--threads`); `None`: one a
    /// CPU online (see [`crate::host::cpus_online`]).
    pub threads: Option<usize>,
    /// Seconds a connection may send nothing before it is closed
    /// (`--conn-idle-timeout`), unless it is blocked in a reserve or holds
    /// a reserved job; `None`: never.
    pub conn_idle_timeout: Option<u32>,
    /// The retry limit of a job put without `max:` (`--max-reserves`,
    /// reference §3.1b); 0: none.
    pub max_reserves: u32,
    /// The ids puts get (`--job-id-start`, `--job-id-step`).
    pub job_ids: IdRange,
    /// Where Prometheus metrics are served (`--metrics HOST:PORT`); `None`:
    /// nowhere, and nothing measured.
    pub metrics: Option<String>,
    /// Most tubes a scrape reports one by one, the largest first
    /// (`--metrics-max-tubes`).
    pub metrics_max_tubes: usize,
    /// A second listener, a UNIX socket at this path, the only one whose
    /// connections may run the admin commands (`--admin-socket`,
    /// reference §3.0); `None`: every listener runs every command.
    pub admin_socket: Option<PathBuf>,
    /// The commands the other listeners' connections may not run, with
    /// an admin socket (`--admin-commands`, reference §3.0): by default
    /// every one with an admin effect.
    pub admin_commands: AdminCommands,
}

/// What the command line asks the program to run: the server's [`Config`],
/// and what the program does around the server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandLine {
    pub config: Config,
    /// User to become after binding (`-u`).
    pub user: Option<String>,
    /// How much to say on stderr: the number of `-V` flags.
    pub verbosity: u8,
    /// The `-l` and `-p` options as given (`"-p 11300"`), for the warning
    /// that socket activation ignores them.
    pub listen_options: Vec<String>,
    /// Warnings to print before starting (removed flags, clamped values).
    pub warnings: Vec<String>,
}

impl Default for Config {
    /// beanstalkd's defaults: `0.0.0.0:11300`, 65535-byte jobs, no binlog.
    fn default() -> Config {
        Config {
            listen: Listen::Tcp { host: "0.0.0.0".to_owned(), port: 11300 },
            max_job_size: 65535,
            binlog_dir: None,
            fsync: Fsync::Every(50),
            binlog_file_size: 10_485_760,
            bodies_in_memory: Some(DEFAULT_BODIES_IN_MEMORY),
            max_connections: None,
            max_job_memory: None,
            threads: None,
            conn_idle_timeout: None,
            max_reserves: 0,
            job_ids: IdRange::default(),
            metrics: None,
            metrics_max_tubes: DEFAULT_METRICS_MAX_TUBES,
            admin_socket: None,
            admin_commands: AdminCommands::safe(),
        }
    }
}

impl Config {
    /// A configuration listening on `127.0.0.1` on a free port: for tests and
    /// for embedding.
    pub fn loopback() -> Config {
        Config { listen: Listen::Tcp { host: "127.0.0.1".to_owned(), port: 0 }, ..Config::default() }
    }

    /// Why flags that parse one by one cannot run together: `-l unix:P
    /// --admin-socket P`, where every client of the one socket would be
    /// an admin, however the two spell P (`./P`, `dir//P`, `..`, a
    /// symbolic link to its directory). The program exits 5 on it.
    pub fn conflict(&self) -> Option<String> {
        let (Listen::Unix(main), Some(admin)) = (&self.listen, &self.admin_socket) else { return None };
        (place(main).is_some() && place(main) == place(admin)).then(|| {
            format!(
                "-l unix:{} and --admin-socket {} are the same socket: every client would be an admin",
                main.display(),
                admin.display()
            )
        })
    }
}

/// Where a socket path leads: its directory, by device and inode (which
/// no spelling changes), and its name; `None` if there is no such
/// directory, where no socket can be bound.
fn place(path: &std::path::Path) -> Option<(u64, u64, &std::ffi::OsStr)> {
    use std::os::unix::fs::MetadataExt;
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let meta = std::fs::metadata(dir).ok()?;
    Some((meta.dev(), meta.ino(), path.file_name()?))
}

/// What the command line asks for.
// Made once, at start-up: boxing the configuration would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Run(CommandLine),
    /// `-h` or `--help`: print the usage on stdout and exit 0.
    Help,
    /// `-v` or `--version`: print the version on stdout and exit 0.
    Version,
    /// `--health-check`: ask the server the other flags name (`-l`, `-p`)
    /// whether it serves, and exit 0 if it does (see `health.rs`).
    HealthCheck(Listen),
}

/// A command-line error; the caller prints it, then the usage, and exits 5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// A flag letter we do not know; holds beanstalkd's text for it.
    UnknownFlag(String),
    /// A flag that takes a value came last.
    MissingValue(char),
    /// A long option that takes a value came last.
    MissingLongValue(String),
    /// A number that is not entirely digits.
    InvalidSize(String),
    /// `-f` with a value that is not a number of milliseconds.
    InvalidInterval(String),
    /// `-s` with a value that is not a file size the log can use.
    InvalidFileSize(String),
    /// A port that is not a number from 0 to 65535.
    InvalidPort(String),
    /// A long option whose value is out of range.
    InvalidValue(String, String),
    /// A word that is not a flag.
    UnknownArgument(String),
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::UnknownFlag(word) => write!(f, "unknown flag: {word}"),
            ArgError::MissingValue(flag) => write!(f, "flag requires an argument: -{flag}"),
            ArgError::MissingLongValue(option) => write!(f, "option requires an argument: {option}"),
            ArgError::InvalidSize(value) => write!(f, "invalid size: {value}"),
            // beanstalkd's words first, for scripts that look for them.
            ArgError::InvalidInterval(value) => {
                write!(f, "invalid size: {value} (-f takes a number of milliseconds, 0 or more)")
            }
            ArgError::InvalidFileSize(value) => {
                write!(f, "invalid size: {value} (-s takes a number of bytes, 1 to 2147483647)")
            }
            ArgError::InvalidPort(value) => write!(f, "invalid port: {value}"),
            ArgError::InvalidValue(option, value) => {
                write!(f, "invalid value for {option}: {value}")
            }
            ArgError::UnknownArgument(word) => write!(f, "unknown argument: {word}"),
        }
    }
}

impl std::error::Error for ArgError {}

/// The `-h` text, with `argv0` as the program name.
pub fn usage(argv0: &str) -> String {
    format!(
        "Use: {argv0} [OPTIONS]\n\
         \n\
         Options:\n \
         -b DIR   write-ahead log directory\n \
         -f MS    fsync at most once every MS milliseconds (default is 50ms);\n          \
         use -f0 for \"always fsync\"\n \
         -F       never fsync\n \
         -l ADDR  listen on address (default is 0.0.0.0)\n \
         -p PORT  listen on port (default is 11300)\n \
         -u USER  become user and group\n \
         -z BYTES set the maximum job size in bytes (default is 65535);\n          \
         max allowed is 1073741824 bytes\n \
         -s BYTES set the size of each write-ahead log file (default is 10485760);\n          \
         will be rounded up to a multiple of 4096 bytes\n \
         -v       show version information (also --version)\n \
         -V       increase verbosity\n \
         -h       show this help (also --help)\n\
         \n\
         Options of this implementation (not in beanstalkd):\n \
         --max-connections N  serve at most N connections at once (default: what the\n                      \
         fd and memory limits allow); further ones are closed at once\n \
         --threads N          serve connections on N event loops (default: one a\n                      \
         CPU online)\n \
         --conn-idle-timeout SECONDS  close a connection that sent nothing for\n                      \
         SECONDS, unless it waits in a reserve or holds a job (default: never)\n \
         --max-job-memory BYTES  refuse puts with OUT_OF_MEMORY once jobs take\n                      \
         this much memory (bodies + 200 bytes a job, and what their tags\n                      \
         keep; default: no limit)\n \
         --max-reserves N     bury a job reserved N times when it is next released\n                      \
         or times out, unless put with max:<n> (default 0: never)\n \
         --job-id-start S     the first job id (default 1; at most 2^64-2)\n \
         --job-id-step K      ids go S, S+K, S+2K, ... (default 1); K servers with\n                      \
         starts 1..K and step K: id mod K names the server\n \
         --bodies-in-memory BYTES  with -b, keep bodies of up to BYTES in memory\n                      \
         and leave longer ones in the log, read back when asked for\n                      \
         (default {}; all: every body in memory)\n \
         --metrics HOST:PORT  serve Prometheus metrics at http://HOST:PORT/metrics\n                      \
         (default: off)\n \
         --metrics-max-tubes N  report at most N tubes one by one, the largest\n                      \
         (default 1000)\n \
         --admin-socket PATH  also listen on a UNIX socket at PATH (mode 0600), and\n                      \
         run the admin commands (drain, flush-tube, kick, ...) there\n                      \
         only; elsewhere they are answered NOT_PERMITTED\n \
         --admin-commands LIST  the commands (comma-separated) that only the admin\n                      \
         socket runs; delete and delete-batch run elsewhere on the\n                      \
         sender's own jobs (default: every command with an admin\n                      \
         effect, reference section 3.0)\n \
         --health-check       do not serve: ask the server that -l and -p name\n                      \
         whether it serves; exit 0 if it does, 1 if not (a\n                      \
         container's health check, with no shell)\n \
         -c, -n               removed from beanstalkd; accepted and ignored\n",
        DEFAULT_BODIES_IN_MEMORY
    )
}

/// Parses the arguments after the program name.
pub fn parse_args<I>(args: I) -> Result<Action, ArgError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let args: Vec<String> = args.into_iter().map(|a| a.into().to_string_lossy().into_owned()).collect();
    let mut line = CommandLine::default();
    let config = &mut line.config;
    let mut host = "0.0.0.0".to_owned();
    let mut port: u16 = 11300;
    let mut words = args.into_iter();
    let mut health_check = false;
    while let Some(word) = words.next() {
        if let Some(long) = word.strip_prefix("--").filter(|rest| !rest.is_empty()) {
            match long {
                "help" => return Ok(Action::Help),
                "version" => return Ok(Action::Version),
                "health-check" => health_check = true,
                _ => parse_long(long, &mut words, config)?,
            }
            continue;
        }
        let Some(flags) = word.strip_prefix('-').filter(|rest| !rest.is_empty()) else {
            return Err(ArgError::UnknownArgument(word));
        };
        for (at, flag) in flags.char_indices() {
            // A flag that takes a value eats the rest of the word, or the next word.
            let mut value = || {
                let attached = &flags[at + flag.len_utf8()..];
                if attached.is_empty() {
                    words.next().ok_or(ArgError::MissingValue(flag))
                } else {
                    Ok(attached.to_owned())
                }
            };
            match flag {
                'b' => config.binlog_dir = Some(PathBuf::from(value()?)),
                'f' => {
                    let given = value()?;
                    let ms = parse_size(&given).map_err(|_| ArgError::InvalidInterval(given))?;
                    config.fsync = Fsync::Every(ms);
                }
                'F' => config.fsync = Fsync::Never,
                'l' => {
                    host = value()?;
                    line.listen_options.push(format!("-l {host}"));
                }
                'p' => {
                    let given = value()?;
                    port = parse_port(&given)?;
                    line.listen_options.push(format!("-p {given}"));
                }
                's' => config.binlog_file_size = parse_binlog_size(&value()?)?,
                'u' => line.user = Some(value()?),
                'z' => config.max_job_size = parse_job_size(&value()?, &mut line.warnings)?,
                'V' => line.verbosity = line.verbosity.saturating_add(1),
                'v' => return Ok(Action::Version),
                'h' => return Ok(Action::Help),
                'c' | 'n' => {
                    line.warnings.push(format!("-{flag} flag was removed. binlog is always compacted."))
                }
                _ => {
                    // beanstalkd quotes the word from one character before the
                    // unknown letter: "-x" for "-x", "Vx" for "-Vx".
                    let from = word.len() - flags.len() + at - 1;
                    return Err(ArgError::UnknownFlag(word[from..].to_owned()));
                }
            }
            if matches!(flag, 'b' | 'f' | 'l' | 'p' | 's' | 'u' | 'z') {
                break;
            }
        }
    }
    line.config.listen = match host.strip_prefix("unix:") {
        Some(path) => Listen::Unix(PathBuf::from(path)),
        None => Listen::Tcp { host, port },
    };
    if health_check {
        return Ok(Action::HealthCheck(line.config.listen));
    }
    Ok(Action::Run(line))
}

/// A size as beanstalkd reads one: all decimal digits, or an error.
fn parse_size(value: &str) -> Result<u32, ArgError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ArgError::InvalidSize(value.to_owned()));
    }
    Ok(value.parse::<u64>().map_or(u32::MAX, |n| n.min(u64::from(u32::MAX)) as u32))
}

fn parse_port(value: &str) -> Result<u16, ArgError> {
    value.parse().map_err(|_| ArgError::InvalidPort(value.to_owned()))
}

/// `-z`: clamped to 1 GiB with a warning, as beanstalkd does; a negative
/// value (which beanstalkd wraps) is clamped too.
fn parse_job_size(value: &str, warnings: &mut Vec<String>) -> Result<u32, ArgError> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    let size = parse_size(digits).map_err(|_| ArgError::InvalidSize(value.to_owned()))?;
    if value.starts_with('-') || size > MAX_JOB_SIZE_LIMIT {
        warnings.push(format!("maximum job size was set to {MAX_JOB_SIZE_LIMIT}"));
        return Ok(MAX_JOB_SIZE_LIMIT);
    }
    Ok(size)
}

/// `-s`: 1 to 2147483647 (beanstalkd keeps it in a C int and wraps).
fn parse_binlog_size(value: &str) -> Result<u32, ArgError> {
    match parse_size(value) {
        Ok(size @ 1..=0x7fff_ffff) => Ok(size),
        _ => Err(ArgError::InvalidFileSize(value.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> CommandLine {
        match parse_args(args.iter().copied()) {
            Ok(Action::Run(line)) => line,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    fn run(args: &[&str]) -> Config {
        line(args).config
    }

    fn err(args: &[&str]) -> String {
        parse_args(args.iter().copied()).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_beanstalkds() {
        let c = run(&[]);
        assert_eq!(c.listen, Listen::Tcp { host: "0.0.0.0".into(), port: 11300 });
        assert_eq!(c.max_job_size, 65535);
        assert_eq!(c.fsync, Fsync::Every(50));
        assert_eq!(c.binlog_file_size, 10_485_760);
    }

    #[test]
    fn values_attach_or_follow_and_flags_bundle() {
        let l = line(&["-p11301", "-l", "127.0.0.1", "-VV", "-z", "10"]);
        assert_eq!(l.config.listen, Listen::Tcp { host: "127.0.0.1".into(), port: 11301 });
        assert_eq!((l.verbosity, l.config.max_job_size), (2, 10));
        let c = run(&["-Fb", "/tmp/x"]);
        assert_eq!((c.fsync, c.binlog_dir), (Fsync::Never, Some(PathBuf::from("/tmp/x"))));
        assert_eq!(run(&["-F", "-f0"]).fsync, Fsync::Every(0));
        assert_eq!(run(&["-f0", "-F"]).fsync, Fsync::Never);
    }

    #[test]
    fn unix_sockets_ignore_the_port() {
        assert_eq!(run(&["-l", "unix:/tmp/s", "-p", "5"]).listen, Listen::Unix("/tmp/s".into()));
    }

    #[test]
    fn errors_use_beanstalkds_words() {
        assert_eq!(err(&["-x"]), "unknown flag: -x");
        assert_eq!(err(&["-Vx"]), "unknown flag: Vx");
        assert_eq!(err(&["-VVxy"]), "unknown flag: Vxy");
        assert_eq!(err(&["--"]), "unknown flag: --");
        assert_eq!(err(&["-p"]), "flag requires an argument: -p");
        assert_eq!(err(&["-z", "abc"]), "invalid size: abc");
        assert_eq!(err(&["-f", "1x"]), "invalid size: 1x (-f takes a number of milliseconds, 0 or more)");
        assert_eq!(err(&["foo"]), "unknown argument: foo");
        assert_eq!(err(&["-"]), "unknown argument: -");
        assert_eq!(err(&["-p", "99999"]), "invalid port: 99999");
        assert_eq!(err(&["-s", "0"]), "invalid size: 0 (-s takes a number of bytes, 1 to 2147483647)");
        assert_eq!(
            err(&["-s", "2147483648"]),
            "invalid size: 2147483648 (-s takes a number of bytes, 1 to 2147483647)"
        );
    }

    #[test]
    fn version_and_help_act_when_parsed() {
        assert_eq!(parse_args(["-vh"]), Ok(Action::Version));
        assert_eq!(parse_args(["-hv"]), Ok(Action::Help));
        assert_eq!(parse_args(["--help"]), Ok(Action::Help));
        assert_eq!(parse_args(["--version"]), Ok(Action::Version));
        let local = |port| Listen::Tcp { host: "0.0.0.0".into(), port };
        assert_eq!(parse_args(["--health-check"]), Ok(Action::HealthCheck(local(11300))));
        assert_eq!(parse_args(["--health-check", "-p", "7"]), Ok(Action::HealthCheck(local(7))));
        let unix = Action::HealthCheck(Listen::Unix("/run/b.sock".into()));
        assert_eq!(parse_args(["-l", "unix:/run/b.sock", "--health-check"]), Ok(unix));
    }

    #[test]
    fn oversized_jobs_are_clamped_with_a_warning() {
        let l = line(&["-z", "2000000000"]);
        assert_eq!(l.config.max_job_size, MAX_JOB_SIZE_LIMIT);
        assert_eq!(l.warnings, ["maximum job size was set to 1073741824"]);
        assert_eq!(run(&["-z", "-5"]).max_job_size, MAX_JOB_SIZE_LIMIT);
        assert_eq!(run(&["-z", "0"]).max_job_size, 0);
    }

    #[test]
    fn removed_flags_warn_and_carry_on() {
        assert_eq!(line(&["-c"]).warnings, ["-c flag was removed. binlog is always compacted."]);
    }

    #[test]
    fn long_options() {
        assert_eq!(run(&["--max-connections", "5"]).max_connections, Some(5));
        assert_eq!(run(&["--max-connections=7"]).max_connections, Some(7));
        assert_eq!(run(&[]).max_connections, None);
        assert_eq!(err(&["--max-connections=0"]), "invalid value for --max-connections: 0");
        assert_eq!(err(&["--nope"]), "unknown flag: --nope");
        assert_eq!(run(&["--max-job-memory", "1000"]).max_job_memory, Some(1000));
        assert_eq!(run(&["--max-reserves", "3"]).max_reserves, 3);
        assert_eq!(run(&["--max-reserves=0"]).max_reserves, 0);
        assert_eq!(err(&["--max-reserves=x"]), "invalid value for --max-reserves: x");
        assert_eq!(err(&["--max-job-memory"]), "option requires an argument: --max-job-memory");
        let ids = run(&["--job-id-start", "2", "--job-id-step=3"]).job_ids;
        assert_eq!((ids.start, ids.step), (2, 3));
        assert_eq!(run(&[]).job_ids, IdRange { start: 1, step: 1 });
        assert_eq!(err(&["--job-id-step", "0"]), "invalid value for --job-id-step: 0");
        assert_eq!(err(&["--job-id-start=-1"]), "invalid value for --job-id-start: -1");
        let no_id = "invalid value for --job-id-start: 18446744073709551615";
        assert_eq!(err(&["--job-id-start", "18446744073709551615"]), no_id);
        assert_eq!(run(&["--job-id-start", "18446744073709551614"]).job_ids.start, u64::MAX - 1);
        assert_eq!(run(&["--metrics", "127.0.0.1:9100"]).metrics.as_deref(), Some("127.0.0.1:9100"));
        assert_eq!(run(&[]).metrics, None);
        assert_eq!(err(&["--metrics", "9100"]), "invalid value for --metrics: 9100");
        assert_eq!(run(&["--metrics-max-tubes=5"]).metrics_max_tubes, 5);
        assert_eq!(run(&[]).metrics_max_tubes, 1000);
        assert_eq!(run(&[]).admin_commands, AdminCommands::safe());
        let chosen = run(&["--admin-commands", "drain,undrain"]).admin_commands;
        assert_eq!(chosen.names().collect::<Vec<_>>(), ["drain", "undrain"]);
        assert_eq!(run(&["--admin-commands="]).admin_commands, AdminCommands::NONE);
        let never =
            "invalid value for --admin-commands: put (never admin: it changes only its sender's own jobs)";
        assert_eq!(err(&["--admin-commands", "drain,put"]), never);
    }
}
