//! Every command whose row in the table of commands (reference §3.0)
//! promises `frees` works on a full server: with the address space used
//! up by jobs, so that a put is refused, it still answers as it would on
//! an empty one. A client cleaning up must always be able to.
mod common;

use common::binary::{self, arg, TempDir};
use common::{table, Client};

/// Jobs each case finds ready, in a tube of its own, made before the fill.
const JOBS: usize = 50;

/// Puts 1000-byte jobs, pipelined, until one is refused.
fn fill(c: &mut Client) {
    let body = vec![b'x'; 1000];
    let mut batch = Vec::new();
    for _ in 0..100 {
        batch.extend_from_slice(format!("put 0 0 600 {}\r\n", body.len()).as_bytes());
        batch.extend_from_slice(&body);
        batch.extend_from_slice(b"\r\n");
    }
    for _ in 0..10_000 {
        c.send(&batch);
        let replies: Vec<String> = (0..100).map(|_| c.reply()).collect();
        if replies.iter().any(|r| r == "OUT_OF_MEMORY\r\n") {
            return;
        }
        assert!(replies.iter().all(|r| r.starts_with("INSERTED ")), "{replies:?}");
    }
    panic!("a million jobs fitted: the address space is not limited");
}

/// `JOBS` ready jobs put into tube `tube`; their ids.
fn put_into(c: &mut Client, tube: &str) -> Vec<u64> {
    assert_eq!(c.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
    (0..JOBS).map(|n| c.put_ok(&format!("{tube} {n}"))).collect()
}

/// Reserves and buries every ready job of `tube`.
fn bury_all(c: &mut Client, tube: &str) {
    assert_eq!(c.cmd(&format!("watch {tube}")), "WATCHING 2\r\n");
    assert_eq!(c.cmd("ignore default"), "WATCHING 1\r\n");
    for _ in 0..JOBS {
        let reply = c.cmd("reserve-with-timeout 0");
        let id = reply.split(' ').nth(1).expect("RESERVED <id> <bytes>").to_owned();
        assert_eq!(c.cmd(&format!("bury {id} 0")), "BURIED\r\n");
    }
    assert_eq!(c.cmd("watch default"), "WATCHING 2\r\n");
    assert_eq!(c.cmd(&format!("ignore {tube}")), "WATCHING 1\r\n");
}

/// Reserves every ready job of `tube`, and keeps them.
fn hold_all(c: &mut Client, tube: &str) {
    assert_eq!(c.cmd(&format!("watch {tube}")), "WATCHING 2\r\n");
    assert_eq!(c.cmd("ignore default"), "WATCHING 1\r\n");
    for _ in 0..JOBS {
        assert!(c.cmd("reserve-with-timeout 0").starts_with("RESERVED "));
    }
    assert_eq!(c.cmd("watch default"), "WATCHING 2\r\n");
    assert_eq!(c.cmd(&format!("ignore {tube}")), "WATCHING 1\r\n");
}

/// Sets up a tube for each case, fills the server, then runs each
/// command that promises `frees`, in the table's order.
fn every_command_that_frees_works_when_full(args: &[&str]) {
    let server = binary::spawn_with_address_space(256 * 1024, args);
    let mut c = server.client();
    let mut cases: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for name in table::promising("frees") {
        let tube = format!("t-{name}");
        let ids = put_into(&mut c, &tube);
        let id_list = |ids: &[u64]| ids.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
        let steps: Vec<(String, String)> = match name.as_str() {
            "delete" => vec![(format!("delete {}", ids[0]), "DELETED\r\n".into())],
            "delete-batch" => vec![
                (format!("delete-batch {}", id_list(&ids[..10])), "DELETED_BATCH 10 0\r\n".into()),
                (format!("delete-batch {} 999999999", id_list(&ids[10..])), "DELETED_BATCH 40 1\r\n".into()),
            ],
            "clear-tube" => vec![(format!("clear-tube {tube}"), format!("CLEARED {JOBS}\r\n"))],
            "flush-tube" => vec![(format!("flush-tube {tube}"), format!("FLUSHED {JOBS}\r\n"))],
            "flush-buried" => {
                bury_all(&mut c, &tube);
                vec![(format!("flush-buried {tube}"), format!("FLUSHED {JOBS}\r\n"))]
            }
            // `c` holds the tube's jobs, and no other, through the fill.
            "touch-all" => {
                hold_all(&mut c, &tube);
                vec![("touch-all".into(), format!("TOUCHED_ALL {JOBS}\r\n"))]
            }
            "kick" => {
                bury_all(&mut c, &tube);
                let kick = format!("kick {JOBS}");
                vec![(format!("use {tube}"), String::new()), (kick, format!("KICKED {JOBS}\r\n"))]
            }
            "kick-job" => {
                bury_all(&mut c, &tube);
                vec![(format!("kick-job {}", ids[3]), "KICKED\r\n".into())]
            }
            // Into a tube that exists: a new tube would need memory.
            "move-job" => vec![(format!("move-job {} default", ids[0]), "MOVED\r\n".into())],
            other => {
                panic!("{other} promises `frees` in reference §3.0, and tests/full.rs has no case for it")
            }
        };
        cases.push((name, steps));
    }
    assert!(cases.len() >= 5, "{} commands promise `frees`", cases.len());
    let mut filler = server.client();
    for (name, steps) in cases {
        for (line, expected) in steps {
            if let Some(tube) = line.strip_prefix("use ") {
                assert_eq!(c.cmd(&line), format!("USING {tube}\r\n"));
                continue;
            }
            // Full again before every step: what the last one freed is
            // taken back.
            fill(&mut filler);
            assert_eq!(c.cmd(&line), expected, "{name} on a full server ({args:?}): {line}");
        }
    }
    // And the server still serves.
    assert!(c.cmd("list-tube-used").starts_with("USING "));
}

#[test]
fn every_command_that_frees_works_on_a_full_server() {
    every_command_that_frees_works_when_full(&[]);
}

#[test]
fn every_command_that_frees_works_on_a_full_server_with_a_binlog() {
    let dir = TempDir::new("full");
    // The fill's bodies in memory, as without a log: left in the log, a
    // million of them would fit (README, Bodies on disk).
    every_command_that_frees_works_when_full(&["-b", arg(&dir.path), "--bodies-in-memory", "all"]);
}
