//! What the load benchmarks share: starting a server binary on a free
//! loopback port (killed when dropped), and reading its memory from
//! `/proc`.
#![allow(dead_code)]

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A server process on 127.0.0.1 and a free port; SIGKILLed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    /// Starts `binary` and waits until it accepts connections.
    pub fn start(binary: &str) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(binary)
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "{binary} did not start");
            thread::sleep(Duration::from_millis(10));
        }
        Server { child, port }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap_or("x 0 kB");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}
