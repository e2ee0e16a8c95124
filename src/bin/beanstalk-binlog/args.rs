//! `beanstalk-binlog`'s command line: words, and `--flag [value]`
//! options, each checked as it is read. Which command takes which option
//! is `run`'s to say.

use std::ffi::OsString;

use beanstalk::binlog::inspect::{list, v7};

use super::Failure;

/// The command line, split into words and `--flag [value]` options.
pub(super) struct Args {
    pub(super) words: Vec<String>,
    pub(super) all: bool,
    pub(super) live: bool,
    pub(super) drop_keys: bool,
    pub(super) drop_holds: bool,
    pub(super) tube: Option<String>,
    pub(super) state: Option<String>,
    pub(super) first_id: Option<u64>,
    pub(super) id_step: Option<u64>,
    pub(super) max_job_size: Option<usize>,
}

pub(super) fn parse(args: &[OsString]) -> Result<Args, Failure> {
    let mut parsed = Args {
        words: Vec::new(),
        all: false,
        live: false,
        drop_keys: false,
        drop_holds: false,
        tube: None,
        state: None,
        first_id: None,
        id_step: None,
        max_job_size: None,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let Some(arg) = arg.to_str() else {
            return Err(Failure::Usage(format!("{}: not valid UTF-8", arg.to_string_lossy())));
        };
        let mut value = |flag: &str| {
            let v = rest.next().and_then(|v| v.to_str()).map(str::to_owned);
            v.ok_or_else(|| Failure::Usage(format!("{flag} needs a value")))
        };
        match arg {
            "--all" => parsed.all = true,
            "--live" => parsed.live = true,
            "--drop-keys" => parsed.drop_keys = true,
            "--drop-holds" => parsed.drop_holds = true,
            "--tube" => parsed.tube = Some(value(arg)?),
            "--state" => {
                let state = value(arg)?;
                if !list::STATES.contains(&state.as_str()) {
                    let why = if state == "reserved" {
                        " (a reserved job is logged as ready, which it becomes after a restart)"
                    } else {
                        ""
                    };
                    return Err(Failure::Usage(format!(
                        "--state {state}: use ready, delayed or buried{why}"
                    )));
                }
                parsed.state = Some(state);
            }
            "--first-id" => {
                let v = value(arg)?;
                let id = v.parse().ok().filter(|&id| id > 0);
                let id = id.ok_or_else(|| Failure::Usage(format!("--first-id {v}: not a job id")))?;
                parsed.first_id = Some(id);
            }
            "--id-step" => {
                let v = value(arg)?;
                let step = v.parse().ok().filter(|&step| step > 0);
                let step =
                    step.ok_or_else(|| Failure::Usage(format!("--id-step {v}: not a step of 1 or more")))?;
                parsed.id_step = Some(step);
            }
            "-z" => {
                let v = value(arg)?;
                let size = v.parse().ok().filter(|size| (1..=v7::LARGEST_MAX_JOB_SIZE).contains(size));
                let size = size.ok_or_else(|| {
                    Failure::Usage(format!(
                        "-z {v}: not a size beanstalkd takes (1 to {})",
                        v7::LARGEST_MAX_JOB_SIZE
                    ))
                })?;
                parsed.max_job_size = Some(size);
            }
            flag if flag.starts_with('-') && flag.len() > 1 => {
                return Err(Failure::Usage(format!("unknown option {flag}")))
            }
            word => parsed.words.push(word.to_owned()),
        }
    }
    Ok(parsed)
}
