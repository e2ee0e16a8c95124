//! The README's "From your client": its Python blocks, run as written
//! against the real binary (the helper, then greenstalk's block, then
//! pystalk's, each on a fresh server), each printing exactly the output
//! the README shows; and its PHP block (pheanstalk), whose syntax `php -l`
//! checks. pheanstalk itself is a Composer package the tests cannot
//! fetch, so that block is shown, not run, and the README says so.
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

/// The README's block after the marker line `<!-- client: ... (what) -->`,
/// as written, in its fence of `lang`.
fn readme_block(what: &str, lang: &str) -> String {
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let marker = format!("{what} -->\n");
    let (_, after) = readme.split_once(&marker).unwrap_or_else(|| panic!("README: no block marked {what}"));
    let after = after.strip_prefix(&format!("```{lang}\n")).expect("a fenced block follows the marker");
    let (block, _) = after.split_once("\n```\n").expect("the block ends");
    format!("{block}\n")
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

/// The helper block and `library`'s block, run as one script against a
/// fresh server: what it printed.
fn run_python(library: &str) -> String {
    let server = spawn(&[]);
    let dir = TempDir::new(&format!("client-{library}"));
    let script = dir.path.join("example.py");
    let text = readme_block("(the helper)", "python") + &readme_block(&format!("({library})"), "python");
    fs::write(&script, text).unwrap();
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
    assert_eq!(run_python("greenstalk"), readme_block("expects this output", "text"));
}

#[test]
fn the_readmes_pystalk_example_runs_as_written() {
    if !common::python_has("pystalk") {
        return;
    }
    assert_eq!(run_python("pystalk"), readme_block("expects this output", "text"));
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
    fs::write(&script, readme_block("(pheanstalk)", "php")).unwrap();
    let (status, out, err) = run(&dir.path, "php", &["-l", script.to_str().unwrap()], &[]);
    assert!(status.success(), "php -l: {status}\n{out}{err}");
}
