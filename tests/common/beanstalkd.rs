//! The real beanstalkd, for the tests that check against it (its binlog,
//! the offline tool): where it is installed, and one started on 127.0.0.1
//! and a free port, SIGKILLed when dropped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::Client;

/// The real beanstalkd, if installed. CI must install it; elsewhere a test
/// that needs it is skipped, saying so.
pub fn path() -> Option<PathBuf> {
    let found = ["/usr/bin/beanstalkd", "/usr/local/bin/beanstalkd", "/usr/sbin/beanstalkd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must install beanstalkd (see .ci/run)");
        eprintln!("beanstalkd is not installed: skipping (apt-get install beanstalkd)");
    }
    found
}

/// A real beanstalkd on 127.0.0.1 and a free port; SIGKILLed on drop.
pub struct Beanstalkd {
    child: Child,
    pub port: u16,
}

impl Beanstalkd {
    /// Starts `exe` with `args` after `-l 127.0.0.1 -p PORT`, and waits
    /// until it accepts connections.
    pub fn start(exe: &Path, args: &[&str]) -> Beanstalkd {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(exe)
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "beanstalkd did not start");
            thread::sleep(Duration::from_millis(10));
        }
        Beanstalkd { child, port }
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
