//! The real beanstalkd, for the tests that check against it (its binlog,
//! the offline tool): where it is installed, and one started on 127.0.0.1
//! and a free port, SIGKILLed when dropped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

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
    child: Child,
    pub port: u16,
}

impl Beanstalkd {
    /// Starts `exe` with `args` after `-l 127.0.0.1 -p PORT`, and waits
    /// until it accepts connections. The free port is found by binding
    /// port 0 and letting it go, so another test's server may take it
    /// first: then beanstalkd exits, and it is started again on another.
    pub fn start(exe: &Path, args: &[&str]) -> Beanstalkd {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut child = Command::new(exe)
                .args(["-l", "127.0.0.1", "-p", &port.to_string()])
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut exited = false;
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "beanstalkd did not start");
                exited = child.try_wait().unwrap().is_some();
                if exited {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
            // A connection may have reached another server on the port
            // while beanstalkd was failing to bind it.
            thread::sleep(Duration::from_millis(20));
            if !exited && child.try_wait().unwrap().is_none() {
                return Beanstalkd { child, port };
            }
            let _ = child.wait();
        }
        panic!("beanstalkd found no free port in 5 tries");
    }

    pub fn client(&self) -> Client {
        Client::connect(([127, 0, 0, 1], self.port).into())
    }

    /// SIGKILL, as a crash or an impatient operator would.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Beanstalkd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
