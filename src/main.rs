//! `beanstalk`: the command-line entry point. Start-up follows beanstalkd's
//! order (reference §7.2): parse flags, bind (or take systemd's socket), drop
//! privileges, handle signals, serve. Exit codes are beanstalkd's.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use beanstalk::config::{self, Action, Config};
use beanstalk::signals::Signals;
use beanstalk::{activation, privileges, Server};

/// Exit status for a bad command line.
const EXIT_USAGE: u8 = 5;
/// Exit status when the listening socket cannot be made, or signals cannot
/// be set up.
const EXIT_LISTEN: u8 = 111;

/// `malloc`, with big blocks as mappings of their own (`sys/memory.rs`;
/// `host` hands it out because `sys` is private).
#[global_allocator]
static ALLOCATOR: beanstalk::host::Allocator = beanstalk::host::Allocator;

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().map_or_else(|| "beanstalk".to_owned(), |a| a.to_string_lossy().into_owned());
    // Before any thread exists: the arena limit and the signal mask are
    // for every thread.
    beanstalk::host::tune_malloc();
    let signals = match Signals::block() {
        Ok(signals) => signals,
        Err(e) => return fail(&argv0, EXIT_LISTEN, format_args!("cannot set up signals: {e}")),
    };
    let config = match config::parse_args(args) {
        Ok(Action::Run(config)) => config,
        Ok(Action::Help) => {
            eprint!("{}", config::usage(&argv0));
            return ExitCode::SUCCESS;
        }
        Ok(Action::Version) => {
            let version = env!("CARGO_PKG_VERSION");
            println!("beanstalk {version} (beanstalkd {} protocol)", beanstalk::server::VERSION);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{argv0}: {e}");
            eprint!("{}", config::usage(&argv0));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    for warning in &config.warnings {
        eprintln!("{argv0}: {warning}");
    }
    let server = match bind(&argv0, config.clone()) {
        Ok(server) => server,
        Err(e) => return fail(&argv0, EXIT_LISTEN, format_args!("{e}")),
    };
    if let Some(user) = &config.user {
        if let Err(e) = privileges::become_user(user) {
            return fail(&argv0, e.exit_code(), format_args!("{e}"));
        }
    }
    match server.open_binlog() {
        Ok(warnings) => warnings.iter().for_each(|w| eprintln!("{argv0}: {w}")),
        Err(e) => return fail(&argv0, e.exit_code(), format_args!("{e}")),
    }
    if config.verbosity > 0 {
        eprintln!("{argv0}: pid {}", std::process::id());
        match server.local_addr() {
            Some(addr) => eprintln!("{argv0}: bind {} {addr}", server.listener_fd()),
            None => eprintln!("{argv0}: bind {} (unix socket)", server.listener_fd()),
        }
        let limit = server.connection_limit();
        eprintln!("{argv0}: max-connections {} ({})", limit.value, limit.reason);
    }
    if let Err(e) = signals.spawn(server.handle()) {
        return fail(&argv0, EXIT_LISTEN, format_args!("cannot start the signal thread: {e}"));
    }
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&argv0, 1, format_args!("{e}")),
    }
}

/// Binds the configured address, or takes the socket systemd passed.
fn bind(argv0: &str, config: Config) -> std::io::Result<Server> {
    let Some(inherited) = activation::from_env(std::process::id(), |key| std::env::var(key).ok()) else {
        return Server::bind(config);
    };
    for warning in &inherited.warnings {
        eprintln!("{argv0}: {warning}");
    }
    for option in &config.listen_options {
        eprintln!("{argv0}: inherited listen fd; ignoring option: {option}");
    }
    Server::bind_inherited(inherited.fd, config)
}

fn fail(argv0: &str, code: u8, message: std::fmt::Arguments<'_>) -> ExitCode {
    eprintln!("{argv0}: {message}");
    ExitCode::from(code)
}
