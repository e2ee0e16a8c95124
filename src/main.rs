//! `beanstalk`: the command-line entry point. Start-up follows beanstalkd's
//! order (reference §7.2): parse flags, bind (or take systemd's socket), drop
//! privileges, handle signals, open the binlog, serve. Exit codes are beanstalkd's.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use beanstalk::binlog::BinlogError;
use beanstalk::config::{self, Action, CommandLine};
use beanstalk::signals::Signals;
use beanstalk::{activation, log, privileges, Server};

/// Exit status for a bad command line.
const EXIT_USAGE: u8 = 5;
/// Exit status when the listening socket cannot be made, or signals cannot
/// be set up.
const EXIT_LISTEN: u8 = 111;

/// `malloc`, with big blocks as mappings of their own (`sys/memory.rs`;
/// `host` hands it out because `sys` is private).
#[global_allocator]
static ALLOCATOR: beanstalk::host::Allocator = beanstalk::host::Allocator;

/// Exit status when the process has too little memory to start.
const EXIT_MEMORY: u8 = 1;

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().map_or_else(|| "beanstalk".to_owned(), |a| a.to_string_lossy().into_owned());
    // Every line on stderr starts with the program's name, as beanstalkd's do.
    let program = std::path::Path::new(&argv0)
        .file_name()
        .map_or_else(|| "beanstalk".to_owned(), |name| name.to_string_lossy().into_owned());
    // Before any thread exists: the arena limit and the signal mask are
    // for every thread.
    beanstalk::host::tune_malloc();
    let signals = match Signals::block() {
        Ok(signals) => signals,
        Err(e) => return fail(&program, EXIT_LISTEN, format_args!("cannot set up signals: {e}")),
    };
    let line = match config::parse_args(args) {
        Ok(Action::Run(line)) => line,
        Ok(Action::Help) => {
            print!("{}", config::usage(&argv0));
            return ExitCode::SUCCESS;
        }
        Ok(Action::Version) => {
            let version = env!("CARGO_PKG_VERSION");
            println!("beanstalk {version} (beanstalkd {} protocol)", beanstalk::server::VERSION);
            return ExitCode::SUCCESS;
        }
        Ok(Action::HealthCheck(listen)) => {
            return match beanstalk::health::check(&listen) {
                Ok(()) => ExitCode::SUCCESS,
                Err(why) => {
                    eprintln!("{program}: not healthy: {why}");
                    ExitCode::FAILURE
                }
            };
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            eprint!("{}", config::usage(&argv0));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    log::enable(&program, line.verbosity);
    if let Some(why) = line.config.conflict() {
        return fail(&program, EXIT_USAGE, format_args!("{why}"));
    }
    for warning in &line.warnings {
        log::warning(format_args!("{warning}"));
    }
    if let Some(why) = beanstalk::host::HostLimits::read().too_little_memory() {
        return fail(&program, EXIT_MEMORY, format_args!("{why}"));
    }
    let (server, how) = match bind(&line) {
        Ok(bound) => bound,
        Err(e) => return fail(&program, EXIT_LISTEN, format_args!("{e}")),
    };
    if let Some(name) = &line.user {
        let switched = privileges::find_user(name).and_then(|account| {
            // Our own socket file goes to the user first, so that its
            // clients can connect to a server that no longer runs as root.
            if let Err(e) = server.give_socket_to(account.uid, account.gid) {
                log::problem(format_args!("cannot hand {} to {name}: {e}", server.listen_address()));
            }
            privileges::become_user(name, &account).map(|()| account)
        });
        match switched {
            Ok(account) => {
                log::event(format_args!("became user {name} (uid {}, gid {})", account.uid, account.gid))
            }
            Err(e) => {
                server.remove_socket_file();
                return fail(&program, e.exit_code(), format_args!("{e}"));
            }
        }
    }
    // Before the binlog: replaying it may take long, and a SIGTERM meanwhile
    // must still end the process.
    if let Err(e) = signals.spawn(server.handle()) {
        return fail(&program, EXIT_LISTEN, format_args!("cannot start the signal thread: {e}"));
    }
    if let Err(e) = server.open_binlog() {
        let who = match e {
            BinlogError::Unusable(..) => format!(" (here: {})", privileges::running_as()),
            _ => String::new(),
        };
        server.remove_socket_file();
        return fail(&program, e.exit_code(), format_args!("{e}{who}"));
    }
    // The start-up lines come once the server can serve: scripts (and the
    // tests) wait for the `bind` line, or `inherited` under socket
    // activation, where nothing is bound.
    log::event(format_args!("pid {}", std::process::id()));
    log::event(format_args!("{how} {} {}", server.listener_fd(), server.listen_address()));
    let limit = server.connection_limit();
    log::event(format_args!("max-connections {} ({})", limit.value, limit.reason));
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&program, 1, format_args!("{e}")),
    }
}

/// Binds the configured address, or takes the socket systemd passed; says
/// which for the `-V` line.
fn bind(line: &CommandLine) -> std::io::Result<(Server, &'static str)> {
    let Some(inherited) = activation::from_env(std::process::id(), |key| std::env::var(key).ok()) else {
        return Ok((Server::bind(line.config.clone())?, "bind"));
    };
    for warning in &inherited.warnings {
        log::warning(format_args!("{warning}"));
    }
    for option in &line.listen_options {
        log::warning(format_args!("inherited listen fd; ignoring option: {option}"));
    }
    Ok((Server::bind_inherited(inherited.fd, line.config.clone())?, "inherited (socket activation) fd"))
}

/// Prints why the server cannot start, and returns the exit status.
fn fail(program: &str, code: u8, message: std::fmt::Arguments<'_>) -> ExitCode {
    log::fatal(program, message);
    ExitCode::from(code)
}
