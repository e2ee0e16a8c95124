//! tuber's job groups (reference §3.1d, §3.30): `put ... grp:<group>`
//! makes a job a member of a group, `put ... aft:<group>` holds a job
//! until the group's last member is deleted, and `stats-group` shows a
//! group. Over TCP against the real binary, byte for byte, and across a
//! SIGKILL and compaction.

mod common;

use std::thread;

use common::binary::{binlog_tool as tool, spawn, TempDir};
use common::{settle, Client};

/// `put` with `delay` and `tags` after the size and body `body`; the reply.
fn put(c: &mut Client, delay: u32, tags: &str, body: &str) -> String {
    let tags = if tags.is_empty() { String::new() } else { format!(" {tags}") };
    c.send(format!("put 0 {delay} 60 {}{tags}\r\n{body}\r\n", body.len()));
    c.reply()
}

/// `stats-group`'s reply for these figures, as tuber writes it.
fn group_yaml(name: &str, [ready, reserved, delayed, buried]: [u32; 4], waiting: u32) -> String {
    let yaml = format!(
        "---\nname: \"{name}\"\nready: {ready}\nreserved: {reserved}\ndelayed: {delayed}\nburied: {buried}\n\
         waiting-jobs: {waiting}\n"
    );
    format!("OK {}\r\n{yaml}\r\n", yaml.len())
}

#[test]
fn a_job_after_a_group_waits_for_its_last_member_buried_ones_too() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:batch-1", "a"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "grp:batch-1", "b"), "INSERTED 2\r\n");
    assert_eq!(put(&mut c, 0, "aft:batch-1", "z"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("stats-group batch-1"), group_yaml("batch-1", [2, 0, 0, 0], 1));
    // Held: delayed with no due time, which no reserve takes.
    let held = c.yaml_map("stats-job 3");
    assert_eq!((held["state"].as_str(), held["time-left"].as_str()), ("delayed", "0"));
    assert_eq!((held["group"].as_str(), held["after-group"].as_str()), ("", "batch-1"));
    assert!(c.cmd("stats-tube default").contains("\ncurrent-jobs-delayed: 1\n"));
    assert_eq!(c.cmd("reserve-job 3"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("kick 10"), "KICKED 0\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(c.cmd("bury 1 0"), "BURIED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nb\r\n");
    assert_eq!(c.cmd("stats-group batch-1"), group_yaml("batch-1", [0, 1, 0, 1], 1));
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    // A buried member holds the group.
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("stats-group batch-1"), group_yaml("batch-1", [0, 0, 0, 0], 0));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 3 1\r\nz\r\n");
    assert_eq!(c.cmd("delete 3"), "DELETED\r\n");
    assert_eq!(c.cmd("stats-group batch-1"), "NOT_FOUND\r\n");
}

#[test]
fn a_job_after_an_empty_group_is_ready_and_held_jobs_go_in_the_order_they_came() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "aft:nobody", "free"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("stats-group nobody"), group_yaml("nobody", [0, 0, 0, 0], 0));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 4\r\nfree\r\n");
    assert_eq!(put(&mut c, 0, "grp:g", "m"), "INSERTED 2\r\n");
    assert_eq!(put(&mut c, 0, "aft:g", "y"), "INSERTED 3\r\n");
    assert_eq!(put(&mut c, 0, "aft:g", "z"), "INSERTED 4\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nm\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 3 1\r\ny\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 4 1\r\nz\r\n");
}

#[test]
fn chains_hold_each_link_and_cycles_hold_until_kicked() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:a", "1"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "aft:a grp:b", "2"), "INSERTED 2\r\n");
    assert_eq!(put(&mut c, 0, "aft:b", "3"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("stats-group b"), group_yaml("b", [0, 0, 1, 0], 1));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\n1\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\n2\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 3 1\r\n3\r\n");
    // Two groups waiting for each other: held for ever, until kicked.
    assert_eq!(put(&mut c, 0, "grp:x", "sx"), "INSERTED 4\r\n");
    assert_eq!(put(&mut c, 0, "grp:y", "sy"), "INSERTED 5\r\n");
    assert_eq!(put(&mut c, 0, "grp:x aft:y", "x"), "INSERTED 6\r\n");
    assert_eq!(put(&mut c, 0, "grp:y aft:x", "y"), "INSERTED 7\r\n");
    for id in [4, 5] {
        assert_eq!(
            c.cmd("reserve-with-timeout 0"),
            format!("RESERVED {id} 2\r\ns{}\r\n", ["x", "y"][id - 4])
        );
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("kick-job 7"), "KICKED\r\n");
    // Ready now, its group's member or not: reserve-job takes it too.
    assert_eq!(c.cmd("reserve-job 7"), "RESERVED 7 1\r\ny\r\n");
    assert_eq!(c.cmd("delete 7"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 6 1\r\nx\r\n");
}

#[test]
fn a_delay_that_ends_while_the_group_has_a_member_holds_the_job() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:g", "m"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 1, "aft:g", "late"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("peek-delayed"), "FOUND 2 4\r\nlate\r\n");
    let held = || c.cmd("stats-group g") == group_yaml("g", [1, 0, 0, 0], 1);
    assert!(settle(common::HANG_GUARD, held));
    assert_eq!(c.cmd("reserve-job 2"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("list-jobs-delayed"), "OK 8\r\n---\n- 2\n\r\n");
}

#[test]
fn a_group_s_end_serves_a_worker_blocked_in_another_tube() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(c.cmd("use alpha"), "USING alpha\r\n");
    assert_eq!(put(&mut c, 0, "grp:cross", "a"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("use gamma"), "USING gamma\r\n");
    assert_eq!(put(&mut c, 0, "aft:cross", "z"), "INSERTED 2\r\n");
    let addr = s.addr;
    let waiter = thread::spawn(move || {
        let mut w = Client::connect(addr);
        assert_eq!(w.cmd("watch gamma"), "WATCHING 2\r\n");
        w.cmd(&common::reserve_guarded())
    });
    let waiting = || c.yaml_map("stats-tube gamma").get("current-waiting").is_some_and(|n| n == "1");
    assert!(settle(common::HANG_GUARD, waiting));
    assert_eq!(c.cmd("flush-tube alpha"), "FLUSHED 1\r\n");
    assert_eq!(waiter.join().unwrap(), "RESERVED 2 1\r\nz\r\n");
}

#[test]
fn bad_group_names_are_refused_with_their_body_swallowed() {
    let s = spawn(&[]);
    let mut c = s.client();
    for tag in ["grp:", "aft:", "grp:-x", "aft:a:b", "grp:a*b"] {
        assert_eq!(put(&mut c, 0, tag, "delete 1"), "BAD_FORMAT\r\n", "{tag}");
    }
    assert_eq!(c.cmd("stats-group -x"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("stats-group "), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("stats-group never"), "NOT_FOUND\r\n");
    // Every tag at once, in any order.
    assert_eq!(put(&mut c, 0, "con:c1 aft:g0 max:3 grp:g1 idp:k1", "a"), "INSERTED 1\r\n");
    let job = c.yaml_map("stats-job 1");
    let fields = ["idempotency-key", "group", "after-group", "concurrency-key", "max-reserves"];
    let got: Vec<&str> = fields.iter().map(|field| job[*field].as_str()).collect();
    assert_eq!(got, ["k1", "g1", "g0", "c1", "3"]);
}

#[test]
fn groups_and_held_jobs_survive_sigkill_and_compaction() {
    let dir = TempDir::new("groups");
    let args = ["-b", dir.path.to_str().unwrap(), "-s", "10000"];
    let s = spawn(&args);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:g", "member"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "aft:g", "after"), "INSERTED 2\r\n");
    // Enough churn for the log to compact the files holding both.
    let body = "x".repeat(500);
    for id in 3..63 {
        assert_eq!(put(&mut c, 0, "", &body), format!("INSERTED {id}\r\n"));
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    let migrated = c.yaml_map("stats")["binlog-records-migrated"].parse::<u64>().unwrap();
    assert!(migrated >= 2, "compaction rewrote the group's jobs: {migrated}");
    s.kill();
    let s = spawn(&args);
    let mut c = s.client();
    assert_eq!(c.cmd("stats-group g"), group_yaml("g", [1, 0, 0, 0], 1));
    assert!(c.cmd("stats-job 2").contains("\nstate: delayed\n"));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 6\r\nmember\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 5\r\nafter\r\n");
}

/// A server logging into `dir`, and `-b`'s arguments to start it again.
fn logged(dir: &TempDir) -> (common::binary::Bin, [String; 2]) {
    let args = ["-b".to_owned(), dir.path.to_str().unwrap().to_owned()];
    (spawn(&[&args[0], &args[1]]), args)
}

/// The server started again, on its log, after a SIGKILL of `s`.
fn killed_and_started_again(s: common::binary::Bin, args: &[String; 2]) -> common::binary::Bin {
    s.kill();
    spawn(&[&args[0], &args[1]])
}

/// A job put into the group it waits for is held at its put, as tuber
/// holds it; kicked, it is ready, and a restart leaves it ready and the
/// other held (reference §3.1d, *Restarts*).
#[test]
fn a_self_waiting_job_is_held_at_its_put_and_a_restart_keeps_each_as_it_was() {
    let dir = TempDir::new("groups-self");
    let (s, args) = logged(&dir);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:s aft:s", "kicked"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "grp:s aft:s", "held"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("stats-group s"), group_yaml("s", [0, 0, 2, 0], 2));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("kick-job 1"), "KICKED\r\n");
    assert_eq!(c.cmd("stats-group s"), group_yaml("s", [1, 0, 1, 0], 1));
    let s = killed_and_started_again(s, &args);
    let mut c = s.client();
    assert_eq!(c.cmd("stats-group s"), group_yaml("s", [1, 0, 1, 0], 1));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 6\r\nkicked\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

/// `a grp:x aft:y`, put while `y` has no member, is ready; `b grp:y
/// aft:x` is held for `a`. After a restart the cycle still works.
#[test]
fn a_workable_cycle_of_two_groups_works_after_a_restart() {
    let dir = TempDir::new("groups-cycle");
    let (s, args) = logged(&dir);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:x aft:y", "a"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "grp:y aft:x", "b"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("stats-group x"), group_yaml("x", [1, 0, 0, 0], 1));
    let s = killed_and_started_again(s, &args);
    let mut c = s.client();
    assert_eq!(c.cmd("stats-group x"), group_yaml("x", [1, 0, 0, 0], 1));
    assert_eq!(c.cmd("stats-group y"), group_yaml("y", [0, 0, 1, 0], 0));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nb\r\n");
}

/// A job let go and reserved at a SIGKILL comes back ready, though its
/// group has a member again: the member began a run after its put.
#[test]
fn a_let_go_job_reserved_at_the_kill_comes_back_ready() {
    let dir = TempDir::new("groups-let-go");
    let (s, args) = logged(&dir);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:g", "m1"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "aft:g", "after"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 2\r\nm1\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 5\r\nafter\r\n");
    assert_eq!(put(&mut c, 0, "grp:g", "m3"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("stats-group g"), group_yaml("g", [1, 0, 0, 0], 0));
    let s = killed_and_started_again(s, &args);
    let mut c = s.client();
    assert_eq!(c.cmd("stats-group g"), group_yaml("g", [1, 0, 0, 0], 0));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 5\r\nafter\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 3 2\r\nm3\r\n");
}

#[test]
fn the_binlog_tool_shows_groups_exports_them_and_says_what_a_downgrade_drops() {
    let dir = TempDir::new("groups-tool");
    let path = dir.path.to_str().unwrap();
    let s = spawn(&["-b", path]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:g aft:h", "a"), "INSERTED 1\r\n");
    s.terminate();
    let (code, list, _) = tool(&["list", path]);
    assert!(code == 0 && list.lines().nth(1).is_some_and(|line| line.ends_with(" grp:g aft:h")), "{list}");
    let (_, show, _) = tool(&["show", path, "1"]);
    assert!(show.contains("\ngroup: g\nafter-group: h\n"), "{show}");
    let (code, export, _) = tool(&["export", path]);
    assert!(code == 0 && export.starts_with("put 0 0 60 1 grp:g aft:h\r\na\r\n"), "{export}");
    let out = TempDir::new("groups-tool-out");
    let target = out.path.join("older");
    let (code, _, said) = tool(&["downgrade", path, target.to_str().unwrap()]);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("dropped the groups (grp:, aft:) of 1 jobs, the jobs kept"), "{said}");
}

#[test]
fn thousands_of_held_jobs_are_let_go_a_piece_at_a_time_and_all_of_them() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "grp:g", "m"), "INSERTED 1\r\n");
    let held = 2500;
    c.send("put 0 0 60 1 aft:g\r\nz\r\n".repeat(held));
    for id in 2..held + 2 {
        assert_eq!(c.reply(), format!("INSERTED {id}\r\n"));
    }
    assert_eq!(c.cmd("stats-group g"), group_yaml("g", [1, 0, 0, 0], held as u32));
    assert_eq!(c.cmd("reserve-job 1"), "RESERVED 1 1\r\nm\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    let all_ready = || c.yaml_map("stats-tube default")["current-jobs-ready"] == held.to_string();
    assert!(settle(common::HANG_GUARD, all_ready));
    assert_eq!(c.cmd("stats-group g"), group_yaml("g", [0, 0, 0, 0], 0));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nz\r\n");
}
