//! The real beanstalkd, for the tests that check against it (its binlog,
//! the offline tool): where it is installed, and one started on 127.0.0.1
//! and a free port, SIGKILLed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::helper::Helper;
use super::Client;

/// The real beanstalkd: `BEANSTALKD=path`, or Debian's
/// `/usr/bin/beanstalkd`. Missing, a test that needs it is skipped, saying
/// so where the harness does not swallow it, except under `CI=true`
/// (`.ci/run` installs it), where a missing one fails the test; so does a
/// `BEANSTALKD` that names nothing.
pub fn path() -> Option<PathBuf> {
    let given = std::env::var_os("BEANSTALKD").filter(|p| !p.is_empty());
    let path = given.clone().map_or_else(|| PathBuf::from("/usr/bin/beanstalkd"), PathBuf::from);
    if path.exists() {
        return Some(path);
    }
    assert!(given.is_none(), "BEANSTALKD={}: no such file", path.display());
    assert!(!super::under_ci(), "CI must install beanstalkd (.ci/run does; or set BEANSTALKD=path)");
    super::skipping("beanstalkd is not installed (apt-get install beanstalkd, or set BEANSTALKD=path)");
    None
}

/// A real beanstalkd on 127.0.0.1 and a free port; SIGKILLed on drop.
pub struct Beanstalkd {
    helper: Helper,
    pub port: u16,
}

impl Beanstalkd {
    /// Starts `exe` with `args` after `-l 127.0.0.1 -p PORT`, and waits
    /// until it accepts connections.
    pub fn start(exe: &Path, args: &[&str]) -> Beanstalkd {
        let helper = Helper::start("beanstalkd", super::HANG_GUARD, |port| {
            let mut command = Command::new(exe);
            command.args(["-l", "127.0.0.1", "-p", &port.to_string()]).args(args);
            command
        });
        Beanstalkd { port: helper.port, helper }
    }

    pub fn client(&self) -> Client {
        Client::connect(([127, 0, 0, 1], self.port).into())
    }

    /// SIGKILL, as a crash or an impatient operator would.
    pub fn kill(self) {
        drop(self.helper);
    }
}
