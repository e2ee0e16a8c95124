//! This implementation's own options, all long (`--name VALUE` or
//! `--name=VALUE`), which beanstalkd rejects as unknown flags, so they can
//! never clash with one of its (reference §7.1): what each sets in the
//! [`Config`], and the errors it gives.

use super::{ArgError, Config};

/// The long options this implementation adds (beanstalkd has none).
pub const LONG_OPTIONS: &[&str] = &[
    "max-connections",
    "threads",
    "conn-idle-timeout",
    "max-job-memory",
    "max-reserves",
    "job-id-start",
    "job-id-step",
    "bodies-in-memory",
    "metrics",
    "metrics-max-tubes",
    "admin-socket",
    "admin-commands",
];

/// Applies long option `option` (without its `--`), its value attached
/// or the next word.
pub(super) fn parse_long(
    option: &str,
    words: &mut impl Iterator<Item = String>,
    config: &mut Config,
) -> Result<(), ArgError> {
    let (name, attached) = match option.split_once('=') {
        Some((name, value)) => (name, Some(value.to_owned())),
        None => (option, None),
    };
    let mut value = || match attached.clone() {
        Some(v) => Ok(v),
        None => words.next().ok_or_else(|| ArgError::MissingLongValue(format!("--{name}"))),
    };
    let invalid = |v: &str| ArgError::InvalidValue(format!("--{name}"), v.to_owned());
    match name {
        "max-connections" => {
            let v = value()?;
            config.max_connections = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| invalid(&v))?);
            Ok(())
        }
        "threads" => {
            let v = value()?;
            config.threads =
                Some(v.parse().ok().filter(|&n| (1..=1024).contains(&n)).ok_or_else(|| invalid(&v))?);
            Ok(())
        }
        "conn-idle-timeout" => {
            let v = value()?;
            config.conn_idle_timeout = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| invalid(&v))?);
            Ok(())
        }
        "max-job-memory" => {
            let v = value()?;
            config.max_job_memory = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| invalid(&v))?);
            Ok(())
        }
        "max-reserves" => {
            let v = value()?;
            config.max_reserves = v.parse().map_err(|_| invalid(&v))?;
            Ok(())
        }
        "job-id-start" => {
            let v = value()?;
            // A range must hold at least one id; the largest is LAST_JOB_ID.
            let ids = 1..=crate::ids::LAST_JOB_ID;
            config.job_ids.start = v.parse().ok().filter(|n| ids.contains(n)).ok_or_else(|| invalid(&v))?;
            Ok(())
        }
        "job-id-step" => {
            let v = value()?;
            config.job_ids.step = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| invalid(&v))?;
            Ok(())
        }
        "bodies-in-memory" => {
            let v = value()?;
            config.bodies_in_memory = match v.as_str() {
                "all" => None,
                _ => Some(v.parse().map_err(|_| invalid(&v))?),
            };
            Ok(())
        }
        "metrics" => {
            let v = value()?;
            let port = v
                .rsplit_once(':')
                .and_then(|(host, port)| port.parse::<u16>().ok().filter(|_| !host.is_empty()));
            config.metrics = Some(port.map(|_| v.clone()).ok_or_else(|| invalid(&v))?);
            Ok(())
        }
        "metrics-max-tubes" => {
            let v = value()?;
            config.metrics_max_tubes = v.parse().ok().ok_or_else(|| invalid(&v))?;
            Ok(())
        }
        "admin-socket" => {
            let v = value()?;
            // A path, as `-l unix:PATH` takes one; `unix:` may lead.
            let path = v.strip_prefix("unix:").unwrap_or(&v);
            config.admin_socket =
                Some(path.into()).filter(|p: &std::path::PathBuf| !p.as_os_str().is_empty());
            config.admin_socket.as_ref().map(drop).ok_or_else(|| invalid(&v))
        }
        "admin-commands" => {
            let v = value()?;
            config.admin_commands = crate::protocol::AdminCommands::parse(&v).map_err(|why| invalid(&why))?;
            Ok(())
        }
        _ => Err(ArgError::UnknownFlag(format!("--{option}"))),
    }
}
