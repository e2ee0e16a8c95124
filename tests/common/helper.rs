//! A helper program a test starts beside the server (the real beanstalkd,
//! stunnel): on 127.0.0.1 and a port found free, waited for until it
//! accepts connections, SIGKILLed when dropped.
//!
//! A free port is found by binding port 0 and letting it go, so another
//! test's server may take it before the helper binds it. The helper then
//! exits, and is started again on another port.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How many ports are tried before a test fails.
const TRIES: usize = 5;

/// A helper program listening on `port`; SIGKILLed on drop.
pub struct Helper {
    child: Child,
    pub port: u16,
}

impl Helper {
    /// Runs `command(port)` for a free port, its output discarded, and
    /// waits (up to `limit`) until the port accepts connections; again on
    /// another port if the program exits first.
    pub fn start(what: &str, limit: Duration, mut command: impl FnMut(u16) -> Command) -> Helper {
        for _ in 0..TRIES {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let mut child = command(port)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let deadline = Instant::now() + limit;
            let mut exited = false;
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                if Instant::now() >= deadline {
                    // Not left running behind the failed test.
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{what} does not listen on {port}");
                }
                exited = child.try_wait().unwrap().is_some();
                if exited {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
            // The connection may have reached another server on the port
            // while the helper was failing to bind it.
            thread::sleep(Duration::from_millis(20));
            if !exited && child.try_wait().unwrap().is_none() {
                return Helper { child, port };
            }
            let _ = child.wait();
        }
        panic!("{what} found no free port in {TRIES} tries");
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
