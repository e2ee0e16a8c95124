//! `beanstalk-binlog`: reads a binlog directory (`-b DIR`, ours or
//! beanstalkd's) offline: checks it, says what pins its files, lists and
//! shows its jobs, exports them as protocol commands or as beanstalkd's own
//! log. A program of its own, so the server's binary does not grow.
//!
//! This file owns the command line, the messages and the exit statuses
//! (what a copy refuses without a flag is `beanstalk-binlog/refusals.rs`);
//! the reading and every report are `beanstalk::binlog::inspect`'s. It must
//! never write into the directory it reads, and never panic on bad input.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use beanstalk::binlog::inspect::{self, check, downgrade, export, list, usage, v7, Bodies, Log};
use beanstalk::ids::IdRange;
use beanstalk::server::VERSION;

const USAGE: &str = "\
Usage: beanstalk-binlog COMMAND DIR [OPTIONS]

Reads a binlog directory (the -b DIR of beanstalk, or of beanstalkd 1.4 to
1.13) offline. Never changes a byte of DIR; a directory a running server
holds may be read, and is said to be.

Commands:
  check DIR            verify every record of every file; damage is shown as
                       FILE:OFFSET: what. Exit 0 clean, 1 damaged (a torn tail
                       included), 2 unreadable or not a binlog directory
  usage DIR [--all]    each file's size, live jobs, and whether it can be
                       deleted; the jobs and files that keep it (alias: pins)
  list DIR [--tube T] [--state ready|delayed|buried]
                       one line per job: id, tube, state, priority, delay,
                       time left, TTR, body size, age
  show DIR ID          one job's fields, an empty line, then its body
  export DIR [--first-id N] [--id-step K] [--live] [--drop-keys]
                       protocol commands on stdout that rebuild the queue on
                       a server that gives the puts ids from N (default 1: a
                       fresh server), K apart (its --job-id-step, default 1);
                       the old id -> new id mapping on stderr
  to-beanstalkd DIR OUT [-z BYTES] [--live] [--drop-keys] [--drop-holds]
                       write OUT/binlog.1, which beanstalkd 1.5 to 1.13 replays
                       to the same jobs; OUT must be empty or missing. -z is
                       the -z beanstalkd will run with (default 65535, its
                       own): beanstalkd's replay drops a job whose body and
                       CRLF exceed it, and every job after it, so nothing is
                       written unless every job fits; start beanstalkd with
                       that -z. Every refusal (keys, holds, -z) is said in
                       one run
  downgrade DIR OUT [--live] [--drop-keys] [--drop-holds]
                       write OUT/beanstalk.1 in format version 2, which every
                       build of beanstalk before format version 3 reads: a
                       rollback that keeps every job and every id; OUT must
                       be empty or missing. Start the older build with -b OUT

export, to-beanstalkd and downgrade refuse a directory a server holds, unless
--live; and a directory with unique keys (idp:), which none of them can carry,
unless --drop-keys, which writes those jobs without their keys.
to-beanstalkd and downgrade carry no groups: they refuse a directory with jobs
held for a group (aft:), which would run early, unless --drop-holds, which
writes those jobs without their hold and says how many.
-v, --version prints the version; -h, --help this text.
Exit status: 0 done, 1 damaged (check), no such job (show), a job that
beanstalkd's -z would drop (to-beanstalkd), or keys or holds that would be
dropped without --drop-keys or --drop-holds (nothing written), 2 bad command
line or unreadable directory.
";

/// Bad command line or unreadable input.
const FAILED: u8 = 2;
/// Says on stderr how many retry limits (`max:`), concurrency keys and
/// groups a copy leaves out, the jobs kept without them (`why`), and how
/// many jobs held for a group it writes without their hold (as asked:
/// [`refused_copy`]).
fn say_limits_dropped(log: &Log, why: &str) {
    let limits = downgrade::limits(log);
    if limits > 0 {
        eprintln!("beanstalk-binlog: dropped {limits} retry limits (max:), the jobs kept ({why})");
    }
    let con = downgrade::con_keys(log);
    if con > 0 {
        eprintln!("beanstalk-binlog: dropped {con} concurrency keys (con:), the jobs kept ({why})");
    }
    let groups = downgrade::groups(log);
    if groups > 0 {
        eprintln!(
            "beanstalk-binlog: dropped the groups (grp:, aft:) of {groups} jobs, the jobs kept ({why})"
        );
    }
    let holds = downgrade::holds(log);
    if holds > 0 {
        eprintln!(
            "beanstalk-binlog: {holds} jobs held for a group (aft:) written without their hold, as asked: \
             they will run early, before their group's members are done"
        );
    }
}

/// A job beanstalkd would drop: nothing written.
const REFUSED: u8 = 1;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        // A reader that went away (`| head`) is not an error.
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => fail(&format!("writing the output: {e}")),
        Err(Failure::Usage(message)) => {
            eprintln!("beanstalk-binlog: {message} (beanstalk-binlog --help for usage)");
            ExitCode::from(FAILED)
        }
        Err(Failure::Input(message)) => fail(&message),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("beanstalk-binlog: {message}");
    ExitCode::from(FAILED)
}

enum Failure {
    Usage(String),
    Input(String),
    Output(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Output(e)
    }
}

// Beside this file, not in src/bin/ itself, where cargo would take it for
// a program of its own.
#[path = "beanstalk-binlog/args.rs"]
mod args;

use args::parse;

#[path = "beanstalk-binlog/refusals.rs"]
mod refusals;

use refusals::{keys_lost, refuse_held, refused_copy, too_big_for_beanstalkd};

fn run(raw: &[OsString]) -> Result<u8, Failure> {
    if raw.iter().any(|a| a == "-h" || a == "--help") || raw.first().is_some_and(|a| a == "help") {
        io::stdout().write_all(USAGE.as_bytes())?;
        return Ok(0);
    }
    // The server's format: the program, its version, the protocol it is for.
    if raw.iter().any(|a| a == "-v" || a == "--version") {
        let version = env!("CARGO_PKG_VERSION");
        writeln!(io::stdout(), "beanstalk-binlog {version} (beanstalkd {VERSION} protocol)")?;
        return Ok(0);
    }
    let args = parse(raw)?;
    let words: Vec<&str> = args.words.iter().map(String::as_str).collect();
    let allowed = |ok: &[&str]| -> Result<(), Failure> {
        let given = [("--all", args.all), ("--live", args.live), ("--tube", args.tube.is_some())];
        let more = [
            ("--drop-keys", args.drop_keys),
            ("--drop-holds", args.drop_holds),
            ("--state", args.state.is_some()),
            ("--first-id", args.first_id.is_some()),
            ("--id-step", args.id_step.is_some()),
            ("-z", args.max_job_size.is_some()),
        ];
        match given.iter().chain(&more).find(|(flag, set)| *set && !ok.contains(flag)) {
            Some((flag, _)) => Err(Failure::Usage(format!("{} does not take {flag}", words[0]))),
            None => Ok(()),
        }
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match words.as_slice() {
        [] => Err(Failure::Usage("no command given".into())),
        ["check", dir] => {
            allowed(&[])?;
            if let Some(pid) = inspect::holder(Path::new(dir)) {
                eprintln!(
                    "beanstalk-binlog: {dir} is held by a running server (pid {pid}): checking it anyway; a \
                     record cut short at the end of its newest file may be a write in flight"
                );
            }
            match check::run(Path::new(dir), &mut out) {
                Ok(code) => {
                    out.flush()?;
                    Ok(code)
                }
                Err(message) => {
                    out.flush()?;
                    eprintln!("beanstalk-binlog: {message}");
                    Ok(check::UNREADABLE)
                }
            }
        }
        ["usage" | "pins", dir] => {
            allowed(&["--all"])?;
            let log = open(dir, Bodies::None)?;
            usage::report(&log, args.all, &mut out)?;
            Ok(finish(out)?)
        }
        ["list", dir] => {
            allowed(&["--tube", "--state"])?;
            let log = open(dir, Bodies::None)?;
            let filter = list::Filter { tube: args.tube.clone(), state: args.state.clone() };
            list::list(&log, &filter, &mut out)?;
            Ok(finish(out)?)
        }
        ["show", dir, id] => {
            allowed(&[])?;
            let id: u64 = id.parse().map_err(|_| Failure::Usage(format!("{id}: not a job id")))?;
            let log = open(dir, Bodies::One(id))?;
            let Some(job) = log.jobs.iter().find(|j| j.id == id) else {
                eprintln!("beanstalk-binlog: job {id} is not in {dir} (deleted, or never put)");
                return Ok(1);
            };
            list::show(&log, job, &mut out)?;
            Ok(finish(out)?)
        }
        ["export", dir] => {
            allowed(&["--first-id", "--id-step", "--live", "--drop-keys"])?;
            refuse_held(dir, args.live, "export")?;
            let log = open(dir, Bodies::All)?;
            if let Some(refusal) = keys_lost(&log, args.drop_keys, "the puts carry none") {
                eprintln!("beanstalk-binlog: {refusal}");
                return Ok(REFUSED);
            }
            let stderr = io::stderr();
            let mut mapping = BufWriter::new(stderr.lock());
            let ids = IdRange { start: args.first_id.unwrap_or(1), step: args.id_step.unwrap_or(1) };
            let done = export::write(&log, ids, &mut out, &mut mapping)?;
            if done.largest_body > 65_535 {
                writeln!(
                    mapping,
                    "the largest body is {} bytes: the server needs -z {0} or more",
                    done.largest_body
                )?;
            }
            // Plain puts, for any server: the keys do not go with them.
            let keys = downgrade::keys(&log);
            if keys > 0 {
                writeln!(mapping, "dropped {keys} unique keys (idp:), of jobs and cooling down, as asked")?;
            }
            mapping.flush()?;
            Ok(finish(out)?)
        }
        ["to-beanstalkd", dir, target] => {
            allowed(&["--live", "-z", "--drop-keys", "--drop-holds"])?;
            refuse_held(dir, args.live, "to-beanstalkd")?;
            let log = open(dir, Bodies::All)?;
            // Every refusal in one run: a rollback is not three runs.
            let refused = refused_copy(&log, &args, "beanstalkd has none");
            let too_big = too_big_for_beanstalkd(&log, args.max_job_size);
            if let Some(refusal) = &too_big {
                eprintln!("beanstalk-binlog: {refusal}");
            }
            if refused || too_big.is_some() {
                return Ok(REFUSED);
            }
            let written = v7::write_dir(&log, &PathBuf::from(target)).map_err(Failure::Input)?;
            let file = Path::new(target).join("binlog.1");
            let z = match args.max_job_size {
                Some(size) => format!("start beanstalkd with -z {size}"),
                None => "beanstalkd's default -z will do".to_owned(),
            };
            eprintln!("beanstalk-binlog: wrote {} jobs to {}; {z}", written.jobs, file.display());
            say_limits_dropped(&log, "beanstalkd has none");
            if written.keys_dropped > 0 {
                eprintln!(
                    "beanstalk-binlog: dropped {} unique keys (idp:), of jobs and cooling down, as asked",
                    written.keys_dropped
                );
            }
            Ok(0)
        }
        ["downgrade", dir, target] => {
            allowed(&["--live", "--drop-keys", "--drop-holds"])?;
            refuse_held(dir, args.live, "downgrade")?;
            let log = open(dir, Bodies::All)?;
            if refused_copy(&log, &args, "format version 2 has none") {
                return Ok(REFUSED);
            }
            let jobs = downgrade::write_dir(&log, &PathBuf::from(target)).map_err(Failure::Input)?;
            let file = Path::new(target).join("beanstalk.1");
            eprintln!(
                "beanstalk-binlog: wrote {jobs} jobs to {} (format version 2; the next id {}); start the older \
                 build with -b {target}",
                file.display(),
                log.next_id
            );
            say_limits_dropped(&log, "format version 2 has none");
            let keys = downgrade::keys(&log);
            if keys > 0 {
                eprintln!(
                    "beanstalk-binlog: dropped {keys} unique keys (idp:), of jobs and cooling down, as asked"
                );
            }
            Ok(0)
        }
        [command, ..]
            if ["check", "usage", "pins", "list", "show", "export", "to-beanstalkd", "downgrade"]
                .contains(command) =>
        {
            Err(Failure::Usage(format!("{command}: wrong number of arguments")))
        }
        [command, ..] => Err(Failure::Usage(format!("unknown command {command}"))),
    }
}

/// Reads the directory, saying on stderr what the reader should know.
fn open(dir: &str, bodies: Bodies) -> Result<Log, Failure> {
    let log = inspect::open(Path::new(dir), bodies).map_err(Failure::Input)?;
    if let Some(pid) = log.held_by {
        eprintln!(
            "beanstalk-binlog: {dir} is held by a running server (pid {pid}): reading it anyway; its newest \
             file may be in the middle of a write, and jobs may change while this runs"
        );
    }
    for file in &log.files {
        for damage in &file.damage {
            eprintln!("beanstalk-binlog: {}", damage.message);
        }
    }
    for note in &log.notes {
        eprintln!("beanstalk-binlog: {note}");
    }
    Ok(log)
}

fn finish(mut out: impl Write) -> io::Result<u8> {
    out.flush()?;
    Ok(0)
}
