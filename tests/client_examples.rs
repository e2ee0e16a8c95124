//! The README's "From your client": the examples it links, in
//! `tests/recipes/clients/`, run as written against the real binary
//! (greenstalk's, then pystalk's, each with the helper `call.py` beside it
//! and on a fresh server), each printing exactly `expected_output.txt`;
//! and the PHP one (pheanstalk), whose syntax `php -l` checks. pheanstalk
//! itself is a Composer package the tests cannot fetch, so that example
//! is shown, not run, and the README and the file say so.
//!
//! Needs python3 with greenstalk and pystalk, and php (`.ci/run` installs
//! them). Without them a test says so and passes, except under `CI=true`,
//! where it fails. Bounded: a few commands on 127.0.0.1, 60 s a script.
mod common;

use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::binary::{spawn, TempDir};

const LIMIT: Duration = common::HANG_GUARD;

/// The file `name` of the README's client examples, as written.
fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/recipes/clients").join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `program` on `script` (a file in `dir`) with `env`, within
/// [`LIMIT`]: its exit status, stdout and stderr.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, String)]) -> (ExitStatus, String, String) {
    let (out, err) = (dir.join("out"), dir.join("err"));
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    // Files, not pipes: a pipe nobody reads while this waits could fill.
    let mut child =
        command.stdout(File::create(&out).unwrap()).stderr(File::create(&err).unwrap()).spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{program} did not end within {LIMIT:?}: {}", fs::read_to_string(&err).unwrap());
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status, fs::read_to_string(&out).unwrap(), fs::read_to_string(&err).unwrap())
}

/// `library`'s example, with the helper beside it, run against a fresh
/// server: what it printed.
fn run_python(library: &str) -> String {
    let server = spawn(&[]);
    let dir = TempDir::new(&format!("client-{library}"));
    let name = format!("{library}_example.py");
    let script = dir.path.join(&name);
    fs::write(dir.path.join("call.py"), example("call.py")).unwrap();
    fs::write(&script, example(&name)).unwrap();
    let env = [("BEANSTALK_PORT", server.port().to_string())];
    let (status, out, err) = run(&dir.path, "python3", &[script.to_str().unwrap()], &env);
    assert!(status.success(), "{library}'s example: {status}\n{out}{err}");
    out
}

#[test]
fn the_readmes_greenstalk_example_runs_as_written() {
    if !common::python_has("greenstalk") {
        return;
    }
    assert_eq!(run_python("greenstalk"), example("expected_output.txt"));
}

#[test]
fn the_readmes_pystalk_example_runs_as_written() {
    if !common::python_has("pystalk") {
        return;
    }
    assert_eq!(run_python("pystalk"), example("expected_output.txt"));
}

#[test]
fn the_readmes_pheanstalk_example_is_valid_php() {
    let found =
        Command::new("php").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !found {
        assert!(!common::under_ci(), "CI must install php-cli (.ci/run)");
        common::skipping("php is not installed (apt-get install php-cli)");
        return;
    }
    let dir = TempDir::new("client-pheanstalk");
    let script = dir.path.join("example.php");
    fs::write(&script, example("pheanstalk_example.php")).unwrap();
    let (status, out, err) = run(&dir.path, "php", &["-l", script.to_str().unwrap()], &[]);
    assert!(status.success(), "php -l: {status}\n{out}{err}");
}
