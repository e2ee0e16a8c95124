//! systemd socket activation (reference §7.4): when `LISTEN_PID` is our pid and
//! `LISTEN_FDS` is at least 1, serve on the inherited fd 3 instead of binding.
//!
//! This is the whole protocol: two environment variables and a fixed fd
//! number, so no libsystemd is needed.

use std::os::fd::RawFd;

/// The first fd systemd passes.
pub const LISTEN_FDS_START: RawFd = 3;

/// What the environment says about inherited sockets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    /// The fd to listen on.
    pub fd: RawFd,
    /// Warnings to print (extra fds ignored).
    pub warnings: Vec<String>,
}

/// Reads `LISTEN_PID` and `LISTEN_FDS` from `env` for process `pid`.
pub fn from_env(pid: u32, env: impl Fn(&str) -> Option<String>) -> Option<Activation> {
    let listen_pid: u32 = env("LISTEN_PID")?.trim().parse().ok()?;
    let count: u32 = env("LISTEN_FDS")?.trim().parse().ok()?;
    if listen_pid != pid || count == 0 {
        return None;
    }
    let mut warnings = Vec::new();
    if count > 1 {
        warnings.push("inherited more than one listen socket; ignoring all but the first".to_owned());
    }
    Some(Activation { fd: LISTEN_FDS_START, warnings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |key| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn activates_only_for_our_pid() {
        let ours = [("LISTEN_PID", "42"), ("LISTEN_FDS", "1")];
        assert_eq!(from_env(42, env(&ours)).map(|a| a.fd), Some(3));
        assert_eq!(from_env(43, env(&ours)), None);
        assert_eq!(from_env(42, env(&[("LISTEN_PID", "42"), ("LISTEN_FDS", "0")])), None);
        assert_eq!(from_env(42, env(&[("LISTEN_FDS", "1")])), None);
    }

    #[test]
    fn warns_about_extra_sockets() {
        let a = from_env(7, env(&[("LISTEN_PID", "7"), ("LISTEN_FDS", "2")])).unwrap();
        assert_eq!(a.warnings.len(), 1);
    }
}
