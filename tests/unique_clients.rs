//! Issue 32's last check: greenstalk and pystalk, which never send a key,
//! see no difference in a server holding keyed jobs (`unique_clients.py`
//! puts them over a raw socket, then works the same server through both).
//!
//! Needs python3 with greenstalk and pystalk (`pip install greenstalk
//! pystalk`; `.ci/run` installs them). Without them the test says so and
//! passes, except under `CI=true`, where it fails. 127.0.0.1 only; the
//! script is bounded by its clients' timeouts and by 60 s here.
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::binary;

#[test]
fn greenstalk_and_pystalk_see_no_difference_beside_keyed_jobs() {
    if !common::python_has("greenstalk, pystalk") {
        return;
    }
    let server = binary::spawn(&[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/unique_clients.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(server.port().to_string())
        .arg(common::HANG_GUARD.as_secs().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let deadline = Instant::now() + common::HANG_GUARD;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the script ran past {:?}", common::HANG_GUARD);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim() == "ok", "{stdout}\n{stderr}\n{}", server.stderr());
}
