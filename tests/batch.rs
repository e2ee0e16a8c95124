//! Commands on many jobs: tuber's `reserve-batch` and `delete-batch`,
//! with the exact bytes of tuber's README, and `clear-tube`; each edge,
//! what `stats` counts, and across a SIGKILL and a restart with `-b`.
mod common;

use std::time::Duration;

use common::binary::{self, arg, TempDir};

/// tuber's README, "Batch Operations", byte for byte.
#[test]
fn tubers_readme_examples_answer_as_tuber_does() {
    let server = common::start();
    let mut c = server.connect();
    for body in ["hello", "world", "goodbye"] {
        c.put_ok(body);
    }
    c.send("reserve-batch 5\r\n");
    c.expect(
        "RESERVED_BATCH 3\r\nRESERVED 1 5\r\nhello\r\nRESERVED 2 5\r\nworld\r\nRESERVED 3 7\r\ngoodbye\r\n",
    );
    assert_eq!(c.cmd("delete-batch 1 2 3 99"), "DELETED_BATCH 3 1\r\n");
    assert_eq!(c.cmd("reserve-batch 5"), "RESERVED_BATCH 0\r\n");
}

#[test]
fn reserve_batch_takes_jobs_as_reserve_would_and_counts_each() {
    let server = common::start();
    let mut c = server.connect();
    c.put(5, 0, 60, "five");
    c.put(1, 0, 60, "one");
    c.put(1, 30, 60, "later");
    c.put(3, 0, 60, "three");
    c.send("reserve-batch 2\r\n");
    c.expect("RESERVED_BATCH 2\r\nRESERVED 2 3\r\none\r\nRESERVED 4 5\r\nthree\r\n");
    let stats = c.stats();
    assert_eq!((stats["cmd-reserve"].as_str(), stats["current-jobs-reserved"].as_str()), ("2", "2"));
    assert_eq!(c.yaml_map("stats-job 2")["reserves"], "1");
    // Reserved as by `reserve`: the holder releases, another cannot delete.
    let mut other = server.connect();
    assert_eq!(other.cmd("delete-batch 2 4"), "DELETED_BATCH 0 2\r\n");
    assert_eq!(c.cmd("release 2 1 0"), "RELEASED\r\n");
    c.send("reserve-batch 1000\r\n");
    c.expect("RESERVED_BATCH 2\r\nRESERVED 2 3\r\none\r\nRESERVED 1 4\r\nfive\r\n");
}

/// tuber 0.8's long poll, `reserve-batch <count> <timeout>`: at once
/// with what is ready; with nothing, a wait for the first job, and the
/// batch is what is ready then; `RESERVED_BATCH 0` at the timeout, never
/// `TIMED_OUT`; a timeout of 0 does not wait.
#[test]
fn reserve_batch_with_a_timeout_waits_for_the_first_job_and_never_times_out() {
    let server = common::start();
    let mut worker = server.connect();
    let mut producer = server.connect();
    assert_eq!(worker.cmd("reserve-batch 5 0"), "RESERVED_BATCH 0\r\n");
    let started = std::time::Instant::now();
    assert_eq!(worker.cmd("reserve-batch 5 1"), "RESERVED_BATCH 0\r\n");
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
    // Ready: at once, as without a timeout.
    producer.put_ok("ready");
    worker.send("reserve-batch 5 30\r\n");
    assert_eq!(worker.reply(), "RESERVED_BATCH 1\r\n");
    assert_eq!(worker.reply(), "RESERVED 1 5\r\nready\r\n");
    // Nothing ready: it waits, and a put ends the wait with a batch, never
    // a bare `RESERVED`.
    worker.send("reserve-batch 5 30\r\n");
    worker.expect_silence(Duration::from_millis(200));
    producer.put_ok("first");
    assert_eq!(worker.reply(), "RESERVED_BATCH 1\r\n");
    assert_eq!(worker.reply(), "RESERVED 2 5\r\nfirst\r\n");
    // Puts in one write: the batch has the first and whatever else was
    // ready when it was collected, in order; the rest stay ready.
    worker.send("reserve-batch 2 30\r\n");
    worker.expect_silence(Duration::from_millis(200));
    producer.send("put 0 0 60 1\r\na\r\nput 0 0 60 1\r\nb\r\nput 0 0 60 1\r\nc\r\n");
    let head = worker.reply();
    let n: usize = head.strip_prefix("RESERVED_BATCH ").unwrap().trim_end().parse().unwrap();
    assert!((1..=2).contains(&n), "{head:?}");
    for (id, body) in [(3, "a"), (4, "b")].into_iter().take(n) {
        assert_eq!(worker.reply(), format!("RESERVED {id} 1\r\n{body}\r\n"));
    }
    for _ in 0..3 {
        producer.reply();
    }
    // Each job counted as a reserve, as a batch counts them; none as a
    // reserve-with-timeout.
    let stats = worker.stats();
    assert_eq!(stats["cmd-reserve"], (2 + n).to_string());
    assert_eq!(stats["cmd-reserve-with-timeout"], "0");
    assert_eq!(stats["current-jobs-ready"], (3 - n).to_string());
}

/// As `reserve-with-timeout` would (tuber 0.8.1): a worker whose job
/// enters its last second is told `DEADLINE_SOON`, before the wait and
/// during it; with a job ready, the job comes first.
#[test]
fn reserve_batch_with_a_timeout_says_deadline_soon_as_reserve_would() {
    let server = common::start();
    let mut worker = server.connect();
    let mut producer = server.connect();
    producer.put(0, 0, 2, "short");
    assert!(worker.cmd("reserve").starts_with("RESERVED 1 5\r\n"));
    // In its last second the job's holder is told, during the wait.
    let started = std::time::Instant::now();
    assert_eq!(worker.cmd("reserve-batch 5 30"), "DEADLINE_SOON\r\n");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // At the start of one too; a job ready comes first.
    assert_eq!(worker.cmd("reserve-batch 5 30"), "DEADLINE_SOON\r\n");
    producer.put_ok("next");
    worker.send("reserve-batch 5 30\r\n");
    assert_eq!(worker.reply(), "RESERVED_BATCH 1\r\n");
    assert_eq!(worker.reply(), "RESERVED 2 4\r\nnext\r\n");
}

#[test]
fn batch_counts_out_of_range_or_malformed_are_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    for line in [
        "reserve-batch 0",
        "reserve-batch 1001",
        "reserve-batch x",
        "reserve-batch",
        "reserve-batch ",
        "reserve-batch -1",
        "reserve-batch 1 2 3",
        "reserve-batch 1 x",
        "reserve-batch 1 -2",
        "reserve-batch 1 4294967296",
        "delete-batch ",
        "delete-batch 1 x",
        "delete-batch -1",
        "delete-batch 18446744073709551616",
    ] {
        assert_eq!(c.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    // As beanstalkd and tuber answer: no command starts so.
    for line in ["delete-batch", "delete-batchx 1", "delete-batch\t1"] {
        assert_eq!(c.cmd(line), "UNKNOWN_COMMAND\r\n", "{line:?}");
    }
    // Nothing was reserved or deleted.
    assert_eq!(c.stat("current-jobs-ready"), "1");
}

#[test]
fn delete_batch_takes_a_thousand_ids_on_one_line_and_no_more() {
    let server = common::start();
    let mut c = server.connect();
    let ids: Vec<u64> = (0..1000).map(|n| c.put_ok(&format!("job{n}"))).collect();
    // Ids of 20 digits with a `+`, tabs between and spaces after, as
    // tuber reads them: 23,015 bytes, within the 32 KiB a line may take.
    let long: String = (0..1000).map(|n| format!("\t+{:020}", ids[n])).collect();
    assert_eq!(c.cmd(&format!("delete-batch {long}  ")), "DELETED_BATCH 1000 0\r\n");
    assert_eq!(c.stat("current-jobs-ready"), "0");
    assert_eq!(c.stat("cmd-delete"), "1000");
    // 1001 ids, or a longer line, is BAD_FORMAT, and the next line is read.
    let too_many: String = (1..=1001).map(|id| format!(" {id}")).collect();
    assert_eq!(c.cmd(&format!("delete-batch{too_many}")), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd(&format!("delete-batch {long} 1")), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd(&format!("delete-batch {}", "0".repeat(40_000))), "BAD_FORMAT\r\n");
    // Any other command is held to 224 bytes as ever.
    assert_eq!(c.cmd(&format!("delete 1{}", " ".repeat(300))), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn delete_batch_treats_each_id_as_delete_would() {
    let server = common::start();
    let (mut a, mut b) = (server.connect(), server.connect());
    let held_by_b = a.put_ok("held");
    assert!(b.cmd("reserve").starts_with(&format!("RESERVED {held_by_b} ")));
    let buried = a.put_ok("buried");
    assert!(a.cmd("reserve").starts_with(&format!("RESERVED {buried} ")));
    assert_eq!(a.cmd(&format!("bury {buried} 0")), "BURIED\r\n");
    let ready = a.put_ok("ready");
    let delayed =
        a.put(0, 30, 60, "delayed").trim_end().trim_start_matches("INSERTED ").parse::<u64>().unwrap();
    let line = format!("delete-batch {ready} {held_by_b} {delayed} {ready} {buried} 77");
    assert_eq!(a.cmd(&line), "DELETED_BATCH 3 3\r\n");
    assert_eq!(b.cmd(&format!("delete-batch {held_by_b}")), "DELETED_BATCH 1 0\r\n");
    assert_eq!(a.stat("current-jobs-urgent"), "0");
    assert_eq!(a.stat("cmd-delete"), "7");
}

/// Tube `jobs` with a job reserved by the worker (its id returned), one
/// buried, one delayed and 2500 ready; the producer uses `jobs`.
fn a_job_in_every_state(server: &common::TestServer) -> (common::Client, common::Client, u64) {
    let (mut producer, mut worker) = (server.connect(), server.connect());
    assert_eq!(producer.cmd("use jobs"), "USING jobs\r\n");
    assert_eq!(worker.cmd("watch jobs"), "WATCHING 2\r\n");
    let held = producer.put_ok("held");
    assert!(worker.cmd("reserve").starts_with(&format!("RESERVED {held} ")));
    let buried = producer.put_ok("buried");
    assert!(worker.cmd("reserve").starts_with(&format!("RESERVED {buried} ")));
    assert_eq!(worker.cmd(&format!("bury {buried} 0")), "BURIED\r\n");
    producer.put(0, 100, 60, "delayed");
    for n in 0..2500 {
        producer.put_ok(&format!("ready {n}"));
    }
    (producer, worker, held)
}

#[test]
fn clear_tube_deletes_ready_delayed_and_buried_and_leaves_reserved_with_its_worker() {
    let server = common::start();
    let (mut producer, mut worker, held) = a_job_in_every_state(&server);
    producer.put_ok("elsewhere-not");
    let mut admin = server.connect();
    assert_eq!(admin.cmd("clear-tube jobs"), "CLEARED 2503\r\n");
    let tube = admin.yaml_map("stats-tube jobs");
    let counts: Vec<&str> = ["ready", "delayed", "buried", "reserved"]
        .iter()
        .map(|state| tube[&format!("current-jobs-{state}")].as_str())
        .collect();
    assert_eq!(counts, ["0", "0", "0", "1"]);
    assert_eq!(tube["cmd-delete"], "2503");
    assert_eq!(admin.stat("cmd-delete"), "2503");
    // The worker's job is still its own.
    assert_eq!(worker.cmd(&format!("touch {held}")), "TOUCHED\r\n");
    assert_eq!(worker.cmd(&format!("delete {held}")), "DELETED\r\n");
    assert_eq!(admin.cmd("clear-tube jobs"), "CLEARED 0\r\n");
    assert_eq!(admin.cmd("clear-tube default"), "CLEARED 0\r\n");
}

#[test]
fn clear_tube_never_makes_a_tube_and_checks_the_name() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("clear-tube nothing-here"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 14\r\n---\n- default\n\r\n");
    for line in ["clear-tube ", "clear-tube -x", "clear-tube a b", "clear-tube a*b"] {
        assert_eq!(c.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    assert_eq!(c.cmd("clear-tube"), "UNKNOWN_COMMAND\r\n");
    // A tube whose last job goes with the clear goes too, if unused.
    let mut p = server.connect();
    p.cmd("use gone");
    p.put_ok("x");
    p.cmd("use default");
    assert_eq!(c.cmd("clear-tube gone"), "CLEARED 1\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 14\r\n---\n- default\n\r\n");
}

/// With `-b`: what a clear, a batch delete and a kick of many did is what
/// comes back after a SIGKILL, and nothing they removed.
#[test]
fn batch_changes_survive_a_sigkill_as_made() {
    let dir = TempDir::new("batch");
    let flags = ["-b", arg(&dir.path)];
    let server = binary::spawn(&flags);
    let mut c = server.client();
    c.cmd("use jobs");
    c.cmd("watch jobs");
    let mut kept = Vec::new();
    for n in 0..3000 {
        c.put(0, 0, 60, &format!("gone {n}"));
    }
    c.cmd("use other");
    for n in 0..10 {
        kept.push(c.put_ok(&format!("other {n}")));
    }
    let mut buried = Vec::new();
    for _ in 0..5 {
        let reply = c.cmd("reserve");
        let id: u64 = reply.split(' ').nth(1).unwrap().parse().unwrap();
        assert_eq!(c.cmd(&format!("bury {id} 0")), "BURIED\r\n");
        buried.push(id);
    }
    let ids: String = kept[..4].iter().map(|id| format!(" {id}")).collect();
    assert_eq!(c.cmd(&format!("delete-batch{ids}")), "DELETED_BATCH 4 0\r\n");
    // The clear takes what is left of `jobs`: 2995 ready and 5 buried.
    assert_eq!(c.cmd("clear-tube jobs"), "CLEARED 3000\r\n");
    let stderr = server.kill();
    let server = binary::spawn(&flags);
    let mut c = server.client();
    assert_eq!(c.stat("current-jobs-ready"), "6", "{stderr}");
    assert_eq!(c.stat("current-tubes"), "2");
    c.cmd("use other");
    for id in &kept[4..] {
        assert!(c.cmd(&format!("peek {id}")).starts_with(&format!("FOUND {id} ")));
    }
    // Bury them all, kick them all, SIGKILL: they come back ready, kicked.
    c.cmd("watch other");
    for id in &kept[4..] {
        assert!(c.cmd("reserve").starts_with(&format!("RESERVED {id} ")));
        assert_eq!(c.cmd(&format!("bury {id} 0")), "BURIED\r\n");
    }
    assert_eq!(c.cmd("kick 100"), "KICKED 6\r\n");
    server.kill();
    let server = binary::spawn(&flags);
    let mut c = server.client();
    assert_eq!(c.stat("current-jobs-ready"), "6");
    assert_eq!(c.yaml_map(&format!("stats-job {}", kept[9]))["kicks"], "1");
}

/// tuber's `flush-tube` (reference §3.28): every job of the tube, reserved
/// ones too, goes; a worker holding one finds it gone as after a `delete`.
#[test]
fn flush_tube_deletes_every_job_and_the_holders_find_theirs_gone() {
    let server = common::start();
    let (_producer, mut worker, held) = a_job_in_every_state(&server);
    let mut admin = server.connect();
    assert_eq!(admin.cmd("flush-tube jobs"), "FLUSHED 2503\r\n");
    for state in ["ready", "delayed", "buried", "reserved"] {
        assert_eq!(admin.yaml_map("stats-tube jobs")[&format!("current-jobs-{state}")], "0", "{state}");
    }
    assert_eq!(admin.stat("cmd-delete"), "2503");
    for command in ["touch", "delete"] {
        assert_eq!(worker.cmd(&format!("{command} {held}")), "NOT_FOUND\r\n");
    }
    assert_eq!(admin.cmd("flush-tube jobs"), "FLUSHED 0\r\n");
    // tuber 0.9.1's bytes for a tube there is not (reference §3.28), and
    // none is made.
    assert_eq!(admin.cmd("flush-tube nothing-here"), "FLUSHED 0\r\n");
    assert_eq!(admin.cmd("stats-tube nothing-here"), "NOT_FOUND\r\n");
    for line in ["flush-tube ", "flush-tube -x", "flush-tube a b"] {
        assert_eq!(admin.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    assert_eq!(admin.cmd("flush-tube"), "UNKNOWN_COMMAND\r\n");
}

/// Buries every job `worker` can reserve, a thousand at a time; their ids.
fn bury_every_ready_job(worker: &mut common::Client) -> Vec<u64> {
    let mut buried = Vec::new();
    loop {
        worker.send("reserve-batch 1000\r\n");
        let head = worker.reply();
        let n: usize = head.trim_end().strip_prefix("RESERVED_BATCH ").unwrap().parse().unwrap();
        if n == 0 {
            return buried;
        }
        let ids: Vec<u64> =
            (0..n).map(|_| worker.reply().split(' ').nth(1).unwrap().parse().unwrap()).collect();
        let burials: String = ids.iter().map(|id| format!("bury {id} 0\r\n")).collect();
        worker.send(burials);
        for _ in &ids {
            assert_eq!(worker.reply(), "BURIED\r\n");
        }
        buried.extend(ids);
    }
}

/// tuber's `flush-buried` (reference §3.32): the tube's buried jobs go,
/// three chunks of them here, and its ready, delayed and reserved jobs
/// stay, a held one with its worker; `FLUSHED 0` for a tube with none or
/// none at all, and no tube is made.
#[test]
fn flush_buried_deletes_the_buried_jobs_alone_and_counts_each() {
    let server = common::start();
    let (mut producer, mut worker, held) = a_job_in_every_state(&server);
    let buried = bury_every_ready_job(&mut worker);
    assert_eq!(buried.len(), 2500);
    let ready = producer.put_ok("ready");
    producer.cmd("use other");
    let elsewhere = producer.put_ok("elsewhere");
    let mut kept = server.connect();
    assert!(kept.cmd(&format!("reserve-job {elsewhere}")).starts_with(&format!("RESERVED {elsewhere} ")));
    assert_eq!(kept.cmd(&format!("bury {elsewhere} 0")), "BURIED\r\n");
    let mut admin = server.connect();
    assert_eq!(admin.cmd("flush-buried jobs"), "FLUSHED 2501\r\n");
    let tube = admin.yaml_map("stats-tube jobs");
    let counts: Vec<&str> = ["ready", "delayed", "buried", "reserved"]
        .iter()
        .map(|state| tube[&format!("current-jobs-{state}")].as_str())
        .collect();
    assert_eq!(counts, ["1", "1", "0", "1"]);
    assert_eq!((tube["cmd-delete"].as_str(), admin.stat("cmd-delete").as_str()), ("2501", "2501"));
    assert_eq!(admin.cmd(&format!("peek {}", buried[0])), "NOT_FOUND\r\n");
    assert!(admin.cmd(&format!("peek {ready}")).starts_with(&format!("FOUND {ready} ")));
    assert_eq!(worker.cmd(&format!("touch {held}")), "TOUCHED\r\n");
    // Another tube's buried job stays.
    assert_eq!(admin.cmd("use other"), "USING other\r\n");
    assert_eq!(admin.cmd("peek-buried"), format!("FOUND {elsewhere} 9\r\nelsewhere\r\n"));
    assert_eq!(admin.cmd("flush-buried jobs"), "FLUSHED 0\r\n");
    // tuber 0.9.1's bytes for a tube there is not, and none is made.
    assert_eq!(admin.cmd("flush-buried nothing-here"), "FLUSHED 0\r\n");
    assert_eq!(admin.cmd("stats-tube nothing-here"), "NOT_FOUND\r\n");
    for line in ["flush-buried ", "flush-buried -x", "flush-buried a b"] {
        assert_eq!(admin.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    for line in ["flush-buried", "flush-buriedx a"] {
        assert_eq!(admin.cmd(line), "UNKNOWN_COMMAND\r\n", "{line:?}");
    }
}

/// A flush of buried jobs deletes each as `delete` does: a unique key
/// with a cooldown starts it, unlike `flush-tube`'s; with `-b`, a SIGKILL
/// brings back none of the jobs it deleted, the cooldown still running,
/// and the tube's other jobs as they were.
#[test]
fn flush_buried_starts_cooldowns_and_a_restart_agrees() {
    let dir = TempDir::new("flush-buried");
    let flags = ["-b", arg(&dir.path)];
    let server = binary::spawn(&flags);
    let mut c = server.client();
    assert_eq!(c.cmd("use keyed"), "USING keyed\r\n");
    assert_eq!(c.cmd("watch keyed"), "WATCHING 2\r\n");
    assert_eq!(c.cmd("ignore default"), "WATCHING 1\r\n");
    c.send("put 0 0 60 4 idp:cool:3600\r\ncool\r\nput 0 0 60 5 idp:plain\r\nplain\r\n");
    assert_eq!(c.reply(), "INSERTED 1\r\n");
    assert_eq!(c.reply(), "INSERTED 2\r\n");
    assert_eq!(c.put(5, 0, 60, "stays"), "INSERTED 3\r\n");
    let buried = bury_every_ready_job(&mut c);
    assert_eq!(buried, [1, 2, 3]);
    assert_eq!(c.cmd("kick-job 3"), "KICKED\r\n");
    assert_eq!(c.cmd("flush-buried keyed"), "FLUSHED 2\r\n");
    c.send("put 0 0 60 5 idp:cool:3600\r\nagain\r\nput 0 0 60 5 idp:plain\r\nagain\r\n");
    assert_eq!(c.reply(), "INSERTED 1 DELETED\r\n");
    assert_eq!(c.reply(), "INSERTED 4\r\n");
    let stderr = server.kill();
    let server = binary::spawn(&flags);
    let mut c = server.client();
    let counts = (c.stat("current-jobs-ready"), c.stat("current-jobs-buried"));
    assert_eq!(counts, ("2".to_owned(), "0".to_owned()), "{stderr}");
    assert_eq!(c.cmd("peek 1"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("peek 3"), "FOUND 3 5\r\nstays\r\n");
    assert_eq!(c.cmd("use keyed"), "USING keyed\r\n");
    c.send("put 0 0 60 5 idp:cool:3600\r\nagain\r\n");
    assert_eq!(c.reply(), "INSERTED 1 DELETED\r\n");
}

/// A tube gone with its last job may have keys cooling down: a flush of
/// it answers `FLUSHED 0`, as of any tube there is not, and frees them
/// (reference §3.28).
#[test]
fn flush_tube_of_a_tube_gone_frees_its_cooling_keys() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use gone"), "USING gone\r\n");
    assert_eq!(c.cmd("put 0 0 60 4 idp:cool:3600\r\ncool"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("use default"), "USING default\r\n");
    assert_eq!(c.cmd("stats-tube gone"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("flush-tube gone"), "FLUSHED 0\r\n");
    assert_eq!(c.cmd("stats-tube gone"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("use gone"), "USING gone\r\n");
    // The key's cooldown is over: a new job, not `INSERTED 1 DELETED`.
    assert_eq!(c.cmd("put 0 0 60 4 idp:cool:3600\r\nanew"), "INSERTED 2\r\n");
}

/// A flush frees the tube's unique keys, live or cooling down, as tuber's
/// does; with `-b`, a SIGKILL brings back none of it.
#[test]
fn flush_tube_frees_unique_keys_cooling_or_not_and_a_restart_agrees() {
    let dir = TempDir::new("flush");
    let flags = ["-b", arg(&dir.path)];
    let server = binary::spawn(&flags);
    let mut c = server.client();
    assert_eq!(c.cmd("use keyed"), "USING keyed\r\n");
    c.send("put 0 0 60 4 idp:live\r\nlive\r\nput 0 0 60 4 idp:cool:3600\r\ncool\r\n");
    assert_eq!(c.reply(), "INSERTED 1\r\n");
    assert_eq!(c.reply(), "INSERTED 2\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    c.send("put 0 0 60 5 idp:cool:3600\r\nagain\r\n");
    assert_eq!(c.reply(), "INSERTED 2 DELETED\r\n");
    assert_eq!(c.cmd("flush-tube keyed"), "FLUSHED 1\r\n");
    let stderr = server.kill();
    let server = binary::spawn(&flags);
    let mut c = server.client();
    assert_eq!(c.stat("current-jobs-ready"), "0", "{stderr}");
    assert_eq!(c.cmd("use keyed"), "USING keyed\r\n");
    c.send("put 0 0 60 4 idp:live\r\nlive\r\nput 0 0 60 4 idp:cool:3600\r\ncool\r\n");
    assert_eq!(c.reply(), "INSERTED 3\r\n");
    assert_eq!(c.reply(), "INSERTED 4\r\n");
}
