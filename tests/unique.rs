//! Unique jobs (tuber's `put ... idp:<key>[:<seconds>]`, reference §3.1a),
//! over TCP against the real binary: every reply of tuber's table byte for
//! byte, the priority ratchet in each state, the cooldown, two clients
//! racing on one key, `move-job` with a key, and keys and cooldowns across
//! a SIGKILL and restart with compaction.

mod common;

use std::thread;

use common::binary::{binlog_tool as tool_status, spawn, Bin, TempDir};
use common::{settle, Client};

/// `put` with `token` after the size, and body `body`; the reply line.
fn put(c: &mut Client, pri: u32, delay: u32, token: &str, body: &str) -> String {
    c.send(format!("put {pri} {delay} 30 {} {token}\r\n{body}\r\n", body.len()));
    c.reply()
}

fn server(args: &[&str]) -> Bin {
    spawn(args)
}

#[test]
fn tubers_readme_lines_get_tubers_replies_byte_for_byte() {
    let s = server(&[]);
    let mut c = s.client();
    // README, "Unique Jobs (Idempotency)" and "Priority Ratchet".
    assert_eq!(put(&mut c, 100, 0, "idp:my-key", "hello"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 100, 0, "idp:my-key", "hello"), "INSERTED 1 READY\r\n");
    assert_eq!(put(&mut c, 50, 0, "idp:my-key", "hello"), "INSERTED 1 READY 50\r\n");
    assert_eq!(put(&mut c, 200, 0, "idp:my-key", "hello"), "INSERTED 1 READY\r\n");
    // "Cooldown TTL".
    assert_eq!(put(&mut c, 0, 0, "idp:report:300", "hello"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 5\r\nhello\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:report:300", "hello"), "INSERTED 2 DELETED\r\n");
    // Nothing was stored by the repeats: no job, no id.
    assert_eq!(c.put(0, 0, 30, "plain"), "INSERTED 3\r\n");
    assert!(c.cmd("stats-job 1").contains("\npri: 50\n"));
    let stats = c.stats();
    assert_eq!((stats["total-jobs"].as_str(), stats["current-jobs-ready"].as_str()), ("3", "2"));
}

#[test]
fn each_state_answers_its_word_and_the_ratchet_only_lowers() {
    let s = server(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 500, 0, "idp:r", "a"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 500, 100, "idp:d", "b"), "INSERTED 2\r\n");
    assert_eq!(put(&mut c, 500, 0, "idp:b", "c"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("reserve-job 3"), "RESERVED 3 1\r\nc\r\n");
    assert_eq!(c.cmd("bury 3 500"), "BURIED\r\n");
    assert_eq!(c.cmd("reserve-job 1"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(put(&mut c, 500, 0, "idp:r", "x"), "INSERTED 1 RESERVED\r\n");
    assert_eq!(put(&mut c, 400, 0, "idp:r", "x"), "INSERTED 1 RESERVED 400\r\n");
    assert_eq!(put(&mut c, 600, 0, "idp:d", "x"), "INSERTED 2 DELAYED\r\n");
    assert_eq!(put(&mut c, 300, 0, "idp:d", "x"), "INSERTED 2 DELAYED 300\r\n");
    assert_eq!(put(&mut c, 500, 0, "idp:b", "x"), "INSERTED 3 BURIED\r\n");
    assert_eq!(put(&mut c, 200, 0, "idp:b", "x"), "INSERTED 3 BURIED 200\r\n");
    for (id, pri) in [(1, 400), (2, 300), (3, 200)] {
        assert!(c.cmd(&format!("stats-job {id}")).contains(&format!("\npri: {pri}\n")), "job {id}");
    }
    // A ready job takes its new place at once, and counts as urgent.
    assert_eq!(c.cmd("release 1 2000 0"), "RELEASED\r\n");
    assert_eq!(c.put(1000, 0, 30, "other"), "INSERTED 4\r\n");
    assert_eq!(c.cmd("peek-ready"), "FOUND 4 5\r\nother\r\n");
    assert_eq!(c.stat("current-jobs-urgent"), "1");
    assert_eq!(put(&mut c, 7, 0, "idp:r", "x"), "INSERTED 1 READY 7\r\n");
    assert_eq!(c.cmd("peek-ready"), "FOUND 1 1\r\na\r\n");
    assert_eq!(c.stat("current-jobs-urgent"), "2");
    // The buried job keeps its ratcheted priority when kicked.
    assert_eq!(c.cmd("kick-job 3"), "KICKED\r\n");
    assert!(c.cmd("stats-job 3").contains("\npri: 200\n"));
}

#[test]
fn a_key_is_scoped_to_its_tube_and_freed_by_a_delete_without_cooldown() {
    let s = server(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 0, "idp:k", "a"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("use other"), "USING other\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k", "a"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k:0", "a"), "INSERTED 3\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k", "a"), "INSERTED 3 READY\r\n");
    // peek and stats-job show nothing of the key.
    assert_eq!(c.cmd("peek 3"), "FOUND 3 1\r\na\r\n");
}

#[test]
fn tubers_malformed_tags_are_refused_with_their_body_swallowed_and_junk_as_beanstalkd_does() {
    let s = server(&[]);
    let mut c = s.client();
    let id = c.put_ok("keep me");
    // tuber's tags, malformed: the body is read and dropped, so a body
    // that reads as a command is never run.
    let body = format!("delete {id}");
    // A tag beside junk is a tagging client's line too.
    for token in
        ["grp:-g", "aft:a:b", "con:c:0", "con:", "idp:", "idp:-k", "idp:k:x", "idp:k grp:-g", "idp:k extra"]
    {
        assert_eq!(put(&mut c, 0, 0, token, &body), "BAD_FORMAT\r\n", "{token}");
        assert_eq!(c.cmd("list-tube-used"), "USING default\r\n", "{token}: the body was read as a command");
    }
    assert_eq!(c.cmd(&format!("peek {id}")), format!("FOUND {id} 7\r\nkeep me\r\n"));
    // Anything else after the size is beanstalkd's junk: the body is not
    // read, and its bytes are taken as commands, as beanstalkd takes them.
    for token in ["IDP:k extra", "x"] {
        assert_eq!(put(&mut c, 0, 0, token, "hello"), "BAD_FORMAT\r\n", "{token}");
        assert_eq!(c.reply(), "UNKNOWN_COMMAND\r\n", "{token}");
    }
    assert_eq!(c.stat("total-jobs"), "1");
}

#[test]
fn a_cooldown_answers_deleted_until_it_ends() {
    let s = server(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 0, "idp:k:1", "a"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k:1", "a"), "INSERTED 1 DELETED\r\n");
    // The cooldown ends by the timer; a put after it makes a new job. Each
    // earlier try stores nothing, so the first new job is job 2.
    let mut last = String::new();
    let fresh = settle(common::HANG_GUARD, || {
        last = put(&mut c, 0, 0, "idp:k:1", "a");
        last != "INSERTED 1 DELETED\r\n"
    });
    assert!(fresh, "cooldown never ended");
    assert_eq!(last, "INSERTED 2\r\n");
}

#[test]
fn two_clients_racing_on_one_key_get_one_job_between_them() {
    const ROUNDS: usize = 1000;
    let s = server(&[]);
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let mut c = s.client();
            thread::spawn(move || {
                let puts: String =
                    (0..ROUNDS).map(|i| format!("put 0 0 30 1 idp:round{i}\r\nx\r\n")).collect();
                c.send(puts);
                (0..ROUNDS).map(|_| c.reply()).collect::<Vec<_>>()
            })
        })
        .collect();
    let replies: Vec<Vec<String>> = racers.into_iter().map(|r| r.join().unwrap()).collect();
    for (i, (a, b)) in replies[0].iter().zip(&replies[1]).enumerate() {
        let (new, repeat) = if a.ends_with(" READY\r\n") { (b, a) } else { (a, b) };
        let id = new.strip_prefix("INSERTED ").and_then(|r| r.strip_suffix("\r\n")).expect(new);
        assert!(id.parse::<u64>().is_ok(), "round {i}: {a:?} {b:?}");
        assert_eq!(*repeat, format!("INSERTED {id} READY\r\n"), "round {i}");
    }
    let mut c = s.client();
    assert_eq!(c.stat("current-jobs-ready"), ROUNDS.to_string());
    assert_eq!(c.stat("total-jobs"), ROUNDS.to_string());
}

#[test]
fn move_job_carries_the_key_and_refuses_a_tube_that_has_it() {
    let s = server(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 0, "idp:k", "a"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("move-job 1 there"), "MOVED\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k", "b"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("use there"), "USING there\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k", "c"), "INSERTED 1 READY\r\n");
    assert_eq!(c.cmd("move-job 2 there"), "KEY_TAKEN\r\n");
    assert!(c.cmd("stats-job 2").contains("\ntube: \"default\"\n"), "nothing changed");
    assert_eq!(c.cmd("use default"), "USING default\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k", "d"), "INSERTED 2 READY\r\n");
}

#[test]
fn keys_and_cooldowns_survive_sigkill_restart_and_compaction() {
    let dir = TempDir::new("unique");
    let args = ["-b", dir.path.to_str().unwrap(), "-s", "4096"];
    let s = server(&args);
    let mut c = s.client();
    assert_eq!(put(&mut c, 9, 0, "idp:live:300", "kept"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:gone:300", "gone"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(put(&mut c, 5, 0, "idp:live", "x"), "INSERTED 1 READY 5\r\n");
    // Enough churn through small files that compaction rewrites both the
    // live keyed job and the cooling key out of the files they were in.
    let body = "b".repeat(500);
    for _ in 0..200 {
        let id = c.put_ok(&body);
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    // A file let go leaves the disk after the next fsync (`-f`).
    let first_gone = || !dir.path.join("beanstalk.1").exists();
    assert!(common::settle(common::HANG_GUARD, first_gone), "compaction removed the first file");
    s.kill();
    for _ in 0..2 {
        let s = server(&args);
        let mut c = s.client();
        assert_eq!(put(&mut c, 9, 0, "idp:live:300", "x"), "INSERTED 1 READY\r\n");
        assert!(c.cmd("stats-job 1").contains("\npri: 5\n"));
        assert_eq!(put(&mut c, 0, 0, "idp:gone:300", "x"), "INSERTED 2 DELETED\r\n");
        s.kill();
    }
}

#[test]
fn a_cooldown_that_ended_while_stopped_ends_at_start() {
    let dir = TempDir::new("unique-ended");
    let args = ["-b", dir.path.to_str().unwrap()];
    let s = server(&args);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 0, "idp:k:1", "a"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:k:1", "a"), "INSERTED 1 DELETED\r\n");
    s.kill();
    let s = server(&args);
    let mut c = s.client();
    let mut last = String::new();
    let fresh = settle(common::HANG_GUARD, || {
        last = put(&mut c, 0, 0, "idp:k:1", "a");
        last != "INSERTED 1 DELETED\r\n"
    });
    assert!(fresh && last == "INSERTED 2\r\n", "{last:?}");
}

/// `beanstalk-binlog`'s output: stdout and stderr, after a success.
fn tool(args: &[&str]) -> (String, String) {
    let (code, stdout, stderr) = tool_status(args);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    (stdout, stderr)
}

#[test]
fn the_binlog_tool_gives_keys_and_to_beanstalkd_drops_them() {
    let dir = TempDir::new("unique-tool");
    let path = dir.path.to_str().unwrap();
    let s = server(&["-b", path]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, 0, "idp:report:300", "a"), "INSERTED 1\r\n");
    assert_eq!(c.put(0, 0, 30, "b"), "INSERTED 2\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:gone:300", "c"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("delete 3"), "DELETED\r\n");
    s.terminate();
    let (list, _) = tool(&["list", path]);
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines[1].trim_start().starts_with("1 ") && lines[1].ends_with(" idp:report:300"), "{list}");
    assert!(!lines[2].contains("idp:"), "{list}");
    let (show, _) = tool(&["show", path, "1"]);
    assert!(show.contains("\nkey: report\nkey-cooldown: 300\n"), "{show}");
    // A copy that cannot carry the keys is refused, nothing written,
    // unless told to drop them.
    let out = TempDir::new("unique-tool-out");
    let refusal = "unique keys (idp:), of jobs and cooling down, would be dropped";
    for (command, why) in [
        ("to-beanstalkd", "beanstalkd has none"),
        ("export", "the puts carry none"),
        ("downgrade", "format version 2 has none"),
    ] {
        let target = out.path.join(command);
        let mut args = vec![command, path];
        if command != "export" {
            args.push(target.to_str().unwrap());
        }
        let (code, stdout, said) = tool_status(&args);
        assert_eq!(code, 1, "{command}: {said}");
        assert!(stdout.is_empty() && !target.exists(), "{command} wrote something");
        assert!(said.contains(&format!("2 {refusal} ({why}): nothing written")), "{command}: {said}");
        args.push("--drop-keys");
        let (code, stdout, said) = tool_status(&args);
        assert_eq!(code, 0, "{command} --drop-keys: {said}");
        assert!(said.contains("dropped 2 unique keys (idp:), of jobs and cooling down, as asked"), "{said}");
        assert!(!stdout.contains("idp:"), "{stdout}");
    }
    // The downgraded directory holds both jobs, keyless, and the ids go on.
    let older = server(&["-b", out.path.join("downgrade").to_str().unwrap()]);
    let mut c = older.client();
    assert_eq!(c.cmd("peek 1"), "FOUND 1 1\r\na\r\n");
    assert_eq!(c.cmd("peek 2"), "FOUND 2 1\r\nb\r\n");
    assert_eq!(put(&mut c, 0, 0, "idp:report:300", "d"), "INSERTED 4\r\n");
}

#[test]
fn keys_count_against_max_job_memory_and_come_back_when_they_go() {
    // 1000 + 200 for the first job, 500 + 200 for the second: 1,900 of
    // 2,000. A 50-byte key in tube `default` costs 50 + 7 + 64 more.
    let s = server(&["--max-job-memory", "2000"]);
    let mut c = s.client();
    let key = format!("idp:{}", "k".repeat(50));
    let id = |reply: String| -> u64 {
        let id = reply.strip_prefix("INSERTED ").and_then(|r| r.strip_suffix("\r\n"));
        id.and_then(|id| id.parse().ok()).unwrap_or_else(|| panic!("{reply:?}"))
    };
    id(c.put(0, 0, 30, &"a".repeat(1000)));
    assert_eq!(put(&mut c, 0, 0, &key, &"b".repeat(500)), "OUT_OF_MEMORY\r\n");
    let plain = id(c.put(0, 0, 30, &"b".repeat(500)));
    assert_eq!(c.cmd(&format!("delete {plain}")), "DELETED\r\n", "the same put without a key fit");
    let keyed = id(put(&mut c, 0, 0, &key, &"b".repeat(400)));
    assert_eq!(c.put(0, 0, 30, &"c".repeat(80)), "OUT_OF_MEMORY\r\n", "1,200 + 600 + 121 + 280");
    assert_eq!(c.cmd(&format!("delete {keyed}")), "DELETED\r\n");
    id(c.put(0, 0, 30, &"c".repeat(80)));
}
