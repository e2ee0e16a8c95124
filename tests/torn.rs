//! Every command whose row in the table of commands (reference §3.0)
//! promises `one write` is all or nothing on disk: its records are one
//! frame under one checksum, so a write cut at any byte (a power loss, a
//! kernel crash: what `-f 0` is for) replays none of the change, and the
//! whole write replays all of it.
mod common;

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use common::binary::{self, arg, TempDir};
use common::{table, Client};

/// Jobs each case makes; the change touches most of them.
const JOBS: u64 = 4;

/// Makes the jobs the command then changes: `(set-up lines, the command,
/// its reply)`.
fn case(name: &str) -> (Vec<String>, String, String) {
    let puts = |tube: &str| {
        let mut lines = vec![format!("use {tube}")];
        lines.extend((1..=JOBS).map(|n| format!("put 0 0 60 1\r\n{n}")));
        lines
    };
    match name {
        "delete-batch" => {
            let mut lines = puts("default");
            // A unique key that outlives its job: its cooldown is logged
            // in the same frame.
            lines.push("put 0 0 60 1 idp:key:3600\r\nk".into());
            (lines, "delete-batch 1 2 3 5".into(), "DELETED_BATCH 4 0\r\n".into())
        }
        "clear-tube" => (puts("jobs"), "clear-tube jobs".into(), format!("CLEARED {JOBS}\r\n")),
        "flush-tube" => {
            let mut lines = puts("jobs");
            // A reserved job, a live key and a cooling one: all in the frame.
            lines.extend(["watch jobs".into(), "reserve".into()]);
            lines.push("put 0 0 60 1 idp:live\r\nl".into());
            lines.push("put 0 0 60 1 idp:cool:3600\r\nc".into());
            lines.push(format!("delete {}", JOBS + 2));
            (lines, "flush-tube jobs".into(), format!("FLUSHED {}\r\n", JOBS + 1))
        }
        "flush-buried" => {
            let mut lines = puts("jobs");
            lines.push("watch jobs".into());
            for id in 1..=JOBS {
                lines.push("reserve".into());
                lines.push(format!("bury {id} 0"));
            }
            // A unique key that outlives its job: its cooldown is logged
            // in the same frame.
            lines.push("put 0 0 60 1 idp:key:3600\r\nk".into());
            lines.push("reserve".into());
            lines.push(format!("bury {} 0", JOBS + 1));
            (lines, "flush-buried jobs".into(), format!("FLUSHED {}\r\n", JOBS + 1))
        }
        "kick" => {
            let mut lines = puts("default");
            for id in 1..=JOBS {
                lines.push("reserve".into());
                lines.push(format!("bury {id} 0"));
            }
            (lines, format!("kick {JOBS}"), format!("KICKED {JOBS}\r\n"))
        }
        other => {
            panic!("{other} promises `one write` in reference §3.0, and tests/torn.rs has no case for it")
        }
    }
}

/// The newest of the directory's log files.
fn newest(dir: &Path) -> PathBuf {
    let mut files: Vec<(u32, PathBuf)> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let path = e.ok()?.path();
            let n = path.file_name()?.to_str()?.strip_prefix("beanstalk.")?.parse().ok()?;
            Some((n, path))
        })
        .collect();
    files.sort();
    files.pop().expect("a log file").1
}

/// Where the file's records of kind 7 (a batch frame) start and end.
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut at = 12;
    while at + 9 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        if bytes[at + 8] == 7 {
            found.push((at, at + 8 + len));
        }
        at += 8 + len;
    }
    found
}

/// What a restart of a copy of `dir` holds: each job's state, or gone.
fn replayed(dir: &Path, tag: &str) -> Vec<String> {
    let copy = TempDir::new(tag);
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "lock" {
            fs::copy(entry.path(), copy.path.join(entry.file_name())).unwrap();
        }
    }
    let server = common::start_args(&["-b", arg(&copy.path), "-s", "65536"]);
    let mut c: Client = server.connect();
    (1..=JOBS + 1)
        .map(|id| {
            let reply = c.cmd(&format!("stats-job {id}"));
            match reply.as_str() {
                "NOT_FOUND\r\n" => "gone".to_owned(),
                _ => common::parse_yaml_map(&reply)["state"].clone(),
            }
        })
        .collect()
}

#[test]
fn a_change_of_many_jobs_cut_at_any_byte_replays_all_or_nothing() {
    let commands = table::promising("one write");
    assert!(commands.len() >= 3, "{commands:?}");
    for name in commands {
        let (setup, command, reply) = case(&name);
        let dir = TempDir::new("torn");
        let server = binary::spawn(&["-b", arg(&dir.path), "-s", "65536"]);
        let mut c = server.client();
        for line in &setup {
            let answer = c.cmd(line);
            assert!(!answer.contains("ERROR") && !answer.starts_with("BAD"), "{line:?}: {answer:?}");
        }
        assert_eq!(c.cmd(&command), reply, "{command}");
        // Acknowledged: in the file (no fsync asked for), whatever comes.
        server.kill();

        let file = newest(&dir.path);
        let bytes = fs::read(&file).unwrap();
        let found = frames(&bytes);
        assert_eq!(found.len(), 1, "{name}: one frame, the command's");
        let (start, end) = found[0];
        let cut_at = |cut: usize, zeros: bool| {
            let f = OpenOptions::new().write(true).open(&file).unwrap();
            f.set_len(cut as u64).unwrap();
            if zeros {
                // A preallocated file's tail: zeros where the write stopped.
                f.set_len(bytes.len() as u64).unwrap();
            }
            let state = replayed(&dir.path, "torn-cut");
            fs::write(&file, &bytes).unwrap();
            state
        };
        let before = cut_at(start, true);
        let after = cut_at(bytes.len(), false);
        assert_ne!(before, after, "{name} changed nothing");
        for cut in start + 1..end {
            let zeros = cut % 2 == 0;
            // Zeros where the write's own last bytes were zeros are the
            // whole write.
            let whole = zeros && bytes[cut..end].iter().all(|&b| b == 0);
            let expected = if whole { &after } else { &before };
            let what = format!("{name} cut {} bytes into its {}-byte write", cut - start, end - start);
            assert_eq!(&cut_at(cut, zeros), expected, "{what}");
        }
    }
}
