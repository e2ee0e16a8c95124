//! Running out of disk is an answer, not a wedge. The log's directory is
//! put on a small tmpfs (mounting one needs root; the test says so and
//! passes without it), filled until puts are refused, then mostly emptied
//! by deletes: the log rewrites its few live jobs into the room it kept,
//! its old files go, and puts succeed again.

mod common;

use std::path::Path;
use std::process::Command;

use common::binary;

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct Tmpfs(binary::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = binary::TempDir::new("disk-full");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir.path)
            .status()
            .is_ok_and(|status| status.success());
        mounted.then_some(Tmpfs(dir))
    }

    fn path(&self) -> &Path {
        &self.0.path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.path()).status();
    }
}

fn put(c: &mut common::Client, body: &[u8]) -> String {
    c.send(format!("put 0 0 600 {}\r\n", body.len()));
    c.send(body);
    c.send(b"\r\n");
    c.reply()
}

/// Scenario 4 of issue 23: 1 KB jobs fill a 2 MiB disk; once all but one
/// job in 50 are deleted, puts succeed again.
#[test]
fn a_full_disk_recovers_once_deletes_leave_little_live_data() {
    let Some(disk) = Tmpfs::mount("2m") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let server = binary::spawn(&["-b", binary::arg(disk.path()), "-s", "262144"]);
    let mut c = server.client();
    let body = [b'x'; 1000];
    let mut ids = Vec::new();
    let refusal = loop {
        assert!(ids.len() < 10_000, "2 MiB took {} jobs of 1 KB", ids.len());
        let reply = put(&mut c, &body);
        match reply.strip_prefix("INSERTED ") {
            Some(id) => ids.push(id.trim_end().parse::<u64>().unwrap()),
            None => break reply,
        }
    };
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    assert!(ids.len() > 1000, "only {} jobs before the disk filled", ids.len());
    for (n, id) in ids.iter().enumerate() {
        if n % 50 != 0 {
            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    }
    for n in 0..200 {
        assert!(put(&mut c, &body).starts_with("INSERTED "), "put {n} after the deletes refused");
    }
    // Every job kept is whole.
    for id in ids.iter().step_by(50) {
        assert!(c.cmd(&format!("peek {id}")).starts_with(&format!("FOUND {id} 1000\r\n")));
    }
}
