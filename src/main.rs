//! `beanstalk`: the command-line entry point. Parses beanstalkd's flags,
//! binds, and serves until killed. Exit codes follow beanstalkd (SPEC.md
//! 7.2): 5 for a bad command line, 111 when it cannot listen.

use std::process::ExitCode;

use beanstalk::config::{self, Action, Config};
use beanstalk::Server;

/// Exit status for a bad command line.
const EXIT_USAGE: u8 = 5;
/// Exit status when the listening socket cannot be made.
const EXIT_LISTEN: u8 = 111;

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().map_or_else(
        || "beanstalk".to_owned(),
        |a| a.to_string_lossy().into_owned(),
    );
    let config = match config::parse_args(args) {
        Ok(Action::Run(config)) => config,
        Ok(Action::Help) => {
            eprint!("{}", config::usage(&argv0));
            return ExitCode::SUCCESS;
        }
        Ok(Action::Version) => {
            println!(
                "beanstalk {} (beanstalkd {} protocol)",
                env!("CARGO_PKG_VERSION"),
                beanstalk::server::VERSION
            );
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
    if let Some(unsupported) = unsupported_flag(&config) {
        eprintln!("{argv0}: {unsupported} is not supported by this build yet");
        return ExitCode::from(EXIT_USAGE);
    }
    run(&argv0, config)
}

/// Flags that parse but whose feature is not built yet.
fn unsupported_flag(config: &Config) -> Option<&'static str> {
    if config.binlog_dir.is_some() {
        Some("-b (the binlog)")
    } else if config.user.is_some() {
        Some("-u")
    } else {
        None
    }
}

fn run(argv0: &str, config: Config) -> ExitCode {
    let verbosity = config.verbosity;
    let server = match Server::bind(config) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("{argv0}: {e}");
            return ExitCode::from(EXIT_LISTEN);
        }
    };
    if verbosity > 0 {
        eprintln!("{argv0}: pid {}", std::process::id());
        match server.local_addr() {
            Some(addr) => eprintln!("{argv0}: bind {} {addr}", server.listener_fd()),
            None => eprintln!("{argv0}: bind {} (unix socket)", server.listener_fd()),
        }
    }
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{argv0}: {e}");
            ExitCode::FAILURE
        }
    }
}
