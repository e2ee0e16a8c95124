//! tuber's concurrency keys (reference §3.1c): `put ... con:<key>[:<n>]`,
//! at most n jobs of a key reserved at once, server-wide; a ready job of a
//! key at its limit is passed over. Over TCP against the real binary,
//! byte for byte, and across a SIGKILL.

mod common;

use std::thread;

use common::binary::{spawn, TempDir};
use common::{settle, Client};

/// `put` with `tags` after the size and body `body`; the reply.
fn put(c: &mut Client, pri: u32, tags: &str, body: &str) -> String {
    let tags = if tags.is_empty() { String::new() } else { format!(" {tags}") };
    c.send(format!("put {pri} 0 60 {}{tags}\r\n{body}\r\n", body.len()));
    c.reply()
}

#[test]
fn a_key_at_its_limit_passes_its_jobs_over_until_a_slot_comes_back() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "con:api:2", "a"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "con:api:2", "b"), "INSERTED 2\r\n");
    assert_eq!(put(&mut c, 0, "con:api:2", "c"), "INSERTED 3\r\n");
    assert_eq!(put(&mut c, 9, "", "plain"), "INSERTED 4\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nb\r\n");
    // Job 3 is the most urgent, and held back: the plain job goes first.
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 4 5\r\nplain\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("reserve-job 3"), "NOT_FOUND\r\n");
    // Still ready, and shown so.
    assert_eq!(c.cmd("peek-ready"), "FOUND 3 1\r\nc\r\n");
    assert!(c.cmd("stats-tube default").contains("\ncurrent-jobs-ready: 1\n"));
    // Each way out of a reservation gives its slot back.
    assert_eq!(c.cmd("release 1 0 10"), "RELEASED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 3 1\r\nc\r\n");
    assert_eq!(c.cmd("bury 2 0"), "BURIED\r\n");
    assert_eq!(c.cmd("kick 1"), "KICKED 1\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nb\r\n");
}

#[test]
fn stats_job_shows_tubers_fields_for_a_tagged_job_only() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "con:c1 idp:k1:30", "a"), "INSERTED 1\r\n");
    let yaml = "---\nid: 1\ntube: \"default\"\nstate: ready\npri: 0\nage: 0\ndelay: 0\nttr: 60\n\
                time-left: 0\nfile: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\nburies: 0\nkicks: 0\n\
                idempotency-key: k1\nidempotency-ttl: 30\ngroup: \nafter-group: \n\
                concurrency-key: c1\nconcurrency-limit: 1\n";
    assert_eq!(c.cmd("stats-job 1"), format!("OK {}\r\n{yaml}\r\n", yaml.len()));
    assert_eq!(put(&mut c, 0, "", "b"), "INSERTED 2\r\n");
    assert!(c.cmd("stats-job 2").ends_with("\nkicks: 0\n\r\n"), "beanstalkd's bytes");
}

#[test]
fn a_key_is_one_for_every_tube_and_a_blocked_worker_gets_the_job_a_slot_frees() {
    let s = spawn(&[]);
    let mut c = s.client();
    assert_eq!(c.cmd("use a"), "USING a\r\n");
    assert_eq!(put(&mut c, 0, "con:shared", "first"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("use b"), "USING b\r\n");
    assert_eq!(put(&mut c, 0, "con:shared", "second"), "INSERTED 2\r\n");
    let mut holder = s.client();
    assert_eq!(holder.cmd("watch a"), "WATCHING 2\r\n");
    assert_eq!(holder.cmd("reserve"), "RESERVED 1 5\r\nfirst\r\n");
    let addr = s.addr;
    let waiter = thread::spawn(move || {
        let mut w = Client::connect(addr);
        assert_eq!(w.cmd("watch b"), "WATCHING 2\r\n");
        w.cmd(&common::reserve_guarded())
    });
    // The waiter blocks on the held-back job until the holder hangs up.
    let waiting = || c.yaml_map("stats-tube b").get("current-waiting").is_some_and(|n| n == "1");
    assert!(settle(common::HANG_GUARD, waiting));
    drop(holder);
    assert_eq!(waiter.join().unwrap(), "RESERVED 2 6\r\nsecond\r\n");
}

#[test]
fn malformed_keys_are_refused_with_their_body_swallowed() {
    let s = spawn(&[]);
    let mut c = s.client();
    for tag in ["con:", "con:k:0", "con:k:x", "con:k:-1", "con:a:b:2", "con:-k"] {
        assert_eq!(put(&mut c, 0, tag, "delete 1"), "BAD_FORMAT\r\n", "{tag}");
    }
    assert_eq!(put(&mut c, 0, "con:k:+3", "x"), "INSERTED 1\r\n");
    assert!(c.cmd("stats-job 1").ends_with("concurrency-key: k\nconcurrency-limit: 3\n\r\n"));
}

#[test]
fn keys_survive_sigkill_and_a_reservation_s_slot_comes_back_with_it() {
    let dir = TempDir::new("concurrency");
    let args = ["-b", dir.path.to_str().unwrap()];
    let s = spawn(&args);
    let mut c = s.client();
    assert_eq!(put(&mut c, 0, "con:k", "a"), "INSERTED 1\r\n");
    assert_eq!(put(&mut c, 0, "con:k max:3", "b"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 1\r\na\r\n");
    s.kill();
    // The reservation is gone with the server, and with it the slot.
    let s = spawn(&args);
    let mut c = s.client();
    assert!(c
        .cmd("stats-job 2")
        .ends_with("concurrency-key: k\nconcurrency-limit: 1\nmax-reserves: 3\n\r\n"));
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\na\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 2 1\r\nb\r\n");
}
