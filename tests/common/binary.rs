//! Running the real `beanstalk` binary from a test: on 127.0.0.1 and a port
//! the kernel picks (`-p 0 -V`; the port is read from the `bind` line on
//! stderr), in a temporary directory of its own when it needs one. Only the
//! processes started here are ever signalled, by their own handles.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Client;

/// How long a server may take to start, or to exit when it should: a
/// hang guard only (see [`super::HANG_GUARD`]).
pub const START_LIMIT: Duration = super::HANG_GUARD;

/// A directory of its own under the temporary directory, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let path =
            std::env::temp_dir().join(format!("beanstalk-test-{tag}-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Binary `name` under test: the one Cargo built with the tests, or the
/// one environment variable `var` names (CI runs some tests against the
/// static `minimal` build users deploy, which Cargo's test build is not).
fn under_test(name: &str, var: &str) -> PathBuf {
    match std::env::var_os(var).filter(|p| !p.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => assert_cmd::cargo::cargo_bin(name),
    }
}

/// The server binary under test (`BEANSTALK_BIN`).
pub fn binary_path() -> PathBuf {
    under_test("beanstalk", "BEANSTALK_BIN")
}

/// The binary, ready to be given arguments.
pub fn beanstalk() -> Command {
    let mut cmd = Command::new(binary_path());
    // Lines start with a timestamp, as the tests expect, even when the
    // tests themselves run with stderr in the journal.
    cmd.env_remove("JOURNAL_STREAM");
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    cmd
}

/// A running `beanstalk`; SIGKILLed on drop if still running.
pub struct Bin {
    pub child: Child,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

/// The `beanstalk-binlog` binary under test (`BEANSTALK_BINLOG_BIN`).
pub fn binlog_tool_path() -> PathBuf {
    under_test("beanstalk-binlog", "BEANSTALK_BINLOG_BIN")
}

/// Runs `beanstalk-binlog` with `args`: its exit code (-1 if killed),
/// stdout and stderr as text.
pub fn binlog_tool(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(binlog_tool_path())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run beanstalk-binlog");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// Starts the binary with `args` after `-V -l 127.0.0.1 -p 0` (a later `-l`
/// wins), and waits until it listens.
pub fn spawn(args: &[&str]) -> Bin {
    spawn_command(beanstalk(), args)
}

/// As [`spawn`], with its address space limited to `kib` KiB (the shell's
/// `ulimit -v`, which sets `RLIMIT_AS`).
pub fn spawn_with_address_space(kib: u64, args: &[&str]) -> Bin {
    let binary = binary_path();
    let mut sh = Command::new("sh");
    sh.args(["-c", &format!("ulimit -v {kib} && exec \"$0\" \"$@\"")]).arg(binary);
    sh.stdin(Stdio::null()).stdout(Stdio::null());
    spawn_command(sh, args)
}

/// As [`spawn`], with its descriptors limited to `n` (`ulimit -n`).
#[allow(dead_code)]
pub fn spawn_with_fd_limit(n: u64, args: &[&str]) -> Bin {
    let mut sh = Command::new("sh");
    sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")]).arg(binary_path());
    sh.stdin(Stdio::null()).stdout(Stdio::null());
    spawn_command(sh, args)
}

fn spawn_command(mut command: Command, args: &[&str]) -> Bin {
    command.env_remove("JOURNAL_STREAM");
    let mut child =
        command.args(["-V", "-l", "127.0.0.1", "-p", "0"]).args(args).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel::<String>();
    let pipe = child.stderr.take().unwrap();
    let log = Arc::clone(&stderr);
    let reader = thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            log.lock().unwrap().push_str(&format!("{line}\n"));
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + START_LIMIT;
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(rest) = line.split(" bind ").nth(1) {
                    if rest.contains(" unix:") {
                        // No TCP address: `addr` means nothing for this server.
                        break SocketAddr::from(([127, 0, 0, 1], 0));
                    }
                    let addr = rest.split(' ').nth(1).expect("bind FD ADDR:PORT");
                    break addr.parse::<SocketAddr>().expect("address in the bind line");
                }
            }
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().unwrap();
                let _ = reader.join();
                let text = stderr.lock().unwrap().clone();
                panic!("server did not start ({status}); flags {args:?}; stderr:\n{text}");
            }
        }
    };
    Bin { child, addr, stderr, reader: Some(reader) }
}

impl Bin {
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// What the server wrote to stderr, once `done` says it holds what a
    /// test waits for, or after 10 s: a line reaches the test through a
    /// pipe and a reader thread, a moment after the server wrote it,
    /// which may be after the reply the client already read.
    #[allow(dead_code)]
    pub fn stderr_once(&self, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.stderr();
            if done(&log) || Instant::now() >= deadline {
                return log;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a signal by name (`TERM`, `USR1`, ...).
    pub fn signal(&self, name: &str) {
        // The shell's builtin `kill`: there may be no kill binary.
        let command = format!("kill -{name} {}", self.child.id());
        let status = Command::new("sh").args(["-c", &command]).status().unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for the process to exit by itself; its exit code and how long
    /// that took.
    pub fn wait_exit(&mut self, limit: Duration) -> (Option<i32>, Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.code(), start.elapsed());
            }
            assert!(start.elapsed() < limit, "server still running after {limit:?}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL (a crash); returns the whole stderr.
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        self.finish()
    }

    /// SIGTERM (a clean stop); returns the whole stderr.
    pub fn terminate(mut self) -> String {
        self.signal("TERM");
        self.wait_exit(START_LIMIT);
        self.finish()
    }

    fn finish(&mut self) -> String {
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.stderr()
    }
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary with `args`; it must exit by itself within the start
/// limit. Returns its exit code and stderr.
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = beanstalk().args(args).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + START_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("beanstalk {args:?} did not exit");
        }
        thread::sleep(Duration::from_millis(5));
    };
    let mut text = String::new();
    child.stderr.take().unwrap().read_to_string(&mut text).unwrap();
    (status.code(), text)
}

/// `Path` as an argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}
