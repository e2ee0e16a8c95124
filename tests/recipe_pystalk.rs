//! The README's "Past one machine" with the pool it names, pystalk's
//! `ProductionPool`: the recipe it links, `tests/recipes/shards.py` (the
//! producers' pool and the worker's loop), run as written by
//! `recipe_pystalk.py`, which starts three
//! servers, SIGKILLs and restarts one, retires another while puts and
//! workers run, and checks that every acknowledged put is deleted exactly
//! once, on the server its id names, and that none reaches the retired
//! server after its drain.
//!
//! Needs python3 and pystalk (`pip install pystalk`; `.ci/run` installs
//! it). Without them the test says so and passes, except under `CI=true`,
//! where it fails. Bounded: 900 puts, 127.0.0.1 only, 90 s inside the
//! script and 150 s here; only processes this test started (the script,
//! and the servers it wrote down as its own) are ever killed.
mod common;

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::binary::TempDir;

const LIMIT: Duration = common::HANG_GUARD;
/// The recipe the README links, as written.
const RECIPE: &str = include_str!("recipes/shards.py");

/// Kills the servers the script started, should it not have: each pid it
/// wrote down, if that process is still our binary.
fn kill_servers_of(dir: &Path, binary: &Path) {
    let pids = fs::read_to_string(dir.join("pids")).unwrap_or_default();
    for pid in pids.lines().filter_map(|line| line.parse::<u32>().ok()) {
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.starts_with(binary.as_os_str().as_encoded_bytes()) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

#[test]
fn the_readme_recipe_works_with_pystalks_pool_through_a_crash_and_a_retirement() {
    if !common::python_has("pystalk") {
        return;
    }
    let dir = TempDir::new("recipe-pystalk");
    let script = dir.path.join("recipe.py");
    let harness = include_str!("recipe_pystalk.py");
    fs::write(&script, format!("{RECIPE}{harness}")).unwrap();
    let binary = common::binary::binary_path();
    // Files, not pipes: a pipe nobody reads while this waits could fill.
    let (out, err) = (dir.path.join("out"), dir.path.join("err"));
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(&binary)
        .arg(&dir.path)
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    kill_servers_of(&dir.path, &binary);
    let stderr = fs::read_to_string(&err).unwrap();
    let report = fs::read_to_string(&out).unwrap();
    // The figures, where the harness does not swallow them.
    let _ = write!(std::io::stderr(), "recipe with pystalk: {report}");
    let status =
        status.unwrap_or_else(|| panic!("the recipe did not end within {LIMIT:?}: {report}{stderr}"));
    assert!(status.success(), "{status}: {report}{stderr}");
    assert!(report.starts_with("acknowledged 900, deleted "), "{report}{stderr}");
}
