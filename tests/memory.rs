//! Running out of memory is an answer, not a crash. Each test starts the
//! real binary with its address space capped (`ulimit -v`), drives it past
//! what fits, and checks that the client who asked for too much is told
//! `OUT_OF_MEMORY` (or, for a connection's buffers, that one connection
//! closes), while the server and every job it holds carry on.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::binary;

/// 8 MB puts under a 384 MiB address space: once the bodies fill it, a
/// put is refused with `OUT_OF_MEMORY`; the jobs already taken are all
/// there, whole, and the server goes on serving.
#[test]
fn a_put_too_big_for_the_memory_left_is_refused_and_nothing_is_lost() {
    let server = binary::spawn_with_address_space(384 * 1024, &["-z", "8000000"]);
    let mut producer = server.client();
    let body = vec![b'b'; 8_000_000];
    let mut ids = Vec::new();
    let refusal = loop {
        assert!(ids.len() < 60, "384 MiB took {} jobs of 8 MB", ids.len());
        let reply = String::from_utf8_lossy(&put(&mut producer, &body)).into_owned();
        match reply.strip_prefix("INSERTED ") {
            Some(id) => ids.push(id.trim_end().parse::<u64>().unwrap()),
            None => break reply,
        }
    };
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    assert!(ids.len() >= 10, "only {} jobs fitted", ids.len());
    // Every job is there; after a delete makes room, the first is whole.
    let mut observer = server.client();
    assert_eq!(observer.stat("current-jobs-ready"), ids.len().to_string());
    assert_eq!(observer.cmd(&format!("delete {}", ids[ids.len() - 1])), "DELETED\r\n");
    let first = observer.cmd(&format!("peek {}", ids[0]));
    assert!(
        first.starts_with(&format!("FOUND {} 8000000\r\nbbbb", ids[0])),
        "{}",
        &first[..40.min(first.len())]
    );
    assert_eq!(first.len(), format!("FOUND {} 8000000\r\n", ids[0]).len() + 8_000_002);
    // And small work goes on as before.
    assert_eq!(producer.put(0, 0, 60, "small"), format!("INSERTED {}\r\n", ids[ids.len() - 1] + 2));
}

fn put(c: &mut common::Client, body: &[u8]) -> Vec<u8> {
    c.send(format!("put 0 0 60 {}\r\n", body.len()));
    c.send(body);
    c.send(b"\r\n");
    c.reply_bytes()
}

/// 400 clients at once under a 128 MiB address space: the connection
/// limit counts the address space, so each client is either served or
/// closed at once, and the server stays up for the next.
#[test]
fn a_connection_storm_in_a_small_address_space_is_served_or_refused_cleanly() {
    let server = binary::spawn_with_address_space(128 * 1024, &[]);
    let mut clients: Vec<TcpStream> = (0..400).map(|_| TcpStream::connect(server.addr).unwrap()).collect();
    let (mut served, mut refused) = (0, 0);
    for client in &mut clients {
        client.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
        let sent = client.write_all(b"list-tube-used\r\n");
        let mut reply = [0; 64];
        match (sent, client.read(&mut reply)) {
            (Ok(()), Ok(n)) if &reply[..n] == b"USING default\r\n" => served += 1,
            (_, Ok(0)) | (Err(_), _) => refused += 1,
            (_, Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => refused += 1,
            (_, other) => panic!("neither served nor refused: {other:?}"),
        }
    }
    assert_eq!(served + refused, 400);
    assert!(served >= 200, "only {served} of 400 served");
    drop(clients);
    let mut late = server.client();
    assert_eq!(late.cmd("list-tube-used"), "USING default\r\n");
    let log = server.stderr();
    let limit = log.lines().find(|line| line.contains("max-connections")).unwrap_or_default();
    assert!(limit.contains("RLIMIT_AS"), "the limit line names another cap: {limit:?}");
}

/// A client of `server` once one is served: with the address space full,
/// a new connection may be closed at once for want of its buffers (a
/// clean refusal), until the pages a few live jobs pin are emptied, at
/// most once a second (`sys/evacuation.rs`); a loaded machine may need a
/// few tries.
fn connect_when_room(server: &binary::Bin) -> common::Client {
    let deadline = std::time::Instant::now() + common::HANG_GUARD;
    loop {
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
        let mut reply = [0; 15];
        let served = s.write_all(b"list-tube-used\r\n").is_ok() && s.read_exact(&mut reply).is_ok();
        if served && &reply == b"USING default\r\n" {
            return server.client();
        }
        assert!(std::time::Instant::now() < deadline, "no connection served after the storm");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Puts pipelined in batches until one is refused; returns the ids taken
/// and the refusal.
fn fill(c: &mut common::Client, body: &[u8], most: usize) -> (Vec<u64>, String) {
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    loop {
        assert!(ids.len() < most, "{most} jobs of {} bytes fitted", body.len());
        batch.clear();
        for _ in 0..100 {
            batch.extend_from_slice(format!("put 0 0 600 {}\r\n", body.len()).as_bytes());
            batch.extend_from_slice(body);
            batch.extend_from_slice(b"\r\n");
        }
        c.send(&batch);
        let mut refusal = None;
        for _ in 0..100 {
            let reply = c.reply();
            match reply.strip_prefix("INSERTED ") {
                Some(id) => ids.push(id.trim_end().parse::<u64>().unwrap()),
                None => refusal = refusal.or(Some(reply)),
            }
        }
        if let Some(refusal) = refusal {
            return (ids, refusal);
        }
    }
}

/// Deletes `ids`, pipelined.
fn delete_all(c: &mut common::Client, ids: &[u64]) {
    for chunk in ids.chunks(1000) {
        let batch: String = chunk.iter().map(|id| format!("delete {id}\r\n")).collect();
        c.send(batch);
        for _ in chunk {
            assert_eq!(c.reply(), "DELETED\r\n");
        }
    }
}

/// Scenario 3 of issue 23: a burst of small jobs fills a 256 MiB address
/// space; once they are deleted, the memory they took serves anything
/// again: big jobs, and new connections with their threads and buffers.
#[test]
fn memory_freed_by_small_jobs_serves_big_jobs_and_connections_again() {
    let server = binary::spawn_with_address_space(256 * 1024, &["-z", "200000"]);
    let mut producer = server.client();
    let (small, refusal) = fill(&mut producer, &[b's'; 1000], 1_000_000);
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    assert!(small.len() > 100_000, "only {} small jobs fitted", small.len());
    delete_all(&mut producer, &small);
    // 100 KB each: beanstalkd fits about 2,600 here; before regions were
    // given back, 326 to 365 did.
    let (big, refusal) = fill(&mut producer, &[b'b'; 100_000], 100_000);
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    assert!(big.len() >= 1500, "only {} big jobs fitted after the drain", big.len());
    delete_all(&mut producer, &big);
    // And connections, each a thread and its buffers.
    let mut clients: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(server.addr).unwrap()).collect();
    let mut served = 0;
    for client in &mut clients {
        client.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
        let _ = client.write_all(b"list-tube-used\r\n");
        let mut reply = [0; 64];
        if matches!(client.read(&mut reply), Ok(n) if &reply[..n] == b"USING default\r\n") {
            served += 1;
        }
    }
    assert_eq!(served, 300, "of 300 new connections");
}

/// Deletes the first of `jobs` (1 MB each, filling the memory), has each
/// of `idle` ask once, and fills the memory again: so that their buffers
/// (given back while they were idle during the fill) are had again before
/// the test takes what is left. Otherwise whether they can still ask
/// later depends on how many bytes the fill happened to leave, which moves
/// with the binary's size, and a connection is closed (rightly) when they
/// are too few. Returns the jobs now in memory.
fn room_for_the_idle(
    producer: &mut common::Client,
    jobs: Vec<u64>,
    idle: &mut [&mut common::Client],
) -> Vec<u64> {
    delete_all(producer, &jobs[..1]);
    for client in idle.iter_mut() {
        assert_eq!(client.cmd("list-tube-used"), "USING default\r\n");
    }
    let (more, refusal) = fill(producer, &vec![b'j'; 1_000_000], 10);
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    jobs[1..].iter().chain(&more).copied().collect()
}

/// Scenario 1 of issue 23: with memory full of 1 MB jobs, `watch` of
/// thousands of new tubes is answered `WATCHING` while tubes fit, then
/// `OUT_OF_MEMORY`; the server and every job carry on.
#[test]
fn new_tubes_past_the_memory_left_are_refused_and_nothing_is_lost() {
    let server = binary::spawn_with_address_space(256 * 1024, &["-z", "1000000"]);
    // Connected first: a connection's thread needs memory of its own.
    let (mut producer, mut watcher, mut observer) = (server.client(), server.client(), server.client());
    let (jobs, refusal) = fill(&mut producer, &vec![b'j'; 1_000_000], 1000);
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    let jobs = room_for_the_idle(&mut producer, jobs, &mut [&mut observer, &mut watcher]);
    let (mut watching, mut refused) = (0, 0);
    for batch in 0..100 {
        let names: String = (0..200).map(|i| format!("watch fresh-{}\r\n", batch * 200 + i)).collect();
        watcher.send(names);
        for _ in 0..200 {
            match watcher.reply().as_str() {
                "OUT_OF_MEMORY\r\n" => refused += 1,
                reply if reply.starts_with("WATCHING ") => watching += 1,
                other => panic!("neither watching nor refused: {other:?}"),
            }
        }
    }
    assert_eq!(watching + refused, 20_000);
    assert!(refused > 0, "20,000 tubes fitted: the test no longer runs out of memory");
    assert_eq!(observer.stat("current-jobs-ready"), jobs.len().to_string());
    assert_eq!(observer.stat("current-tubes"), (watching + 1).to_string());
    // Memory back, tubes fit again.
    delete_all(&mut producer, &jobs[..10]);
    assert_eq!(watcher.cmd("watch one-more"), format!("WATCHING {}\r\n", watching + 2));
}

/// Scenario 2 of issue 23: a reserve whose reply cannot be had is
/// `OUT_OF_MEMORY`, and the job stays ready for anyone, never reserved by
/// a worker that was not told of it.
#[test]
fn a_reserve_that_cannot_send_its_job_leaves_the_job_ready() {
    let server = binary::spawn_with_address_space(256 * 1024, &["-z", "1000000"]);
    // Connected first: a connection's thread needs memory of its own.
    let (mut worker, mut producer, mut observer) = (server.client(), server.client(), server.client());
    let (jobs, refusal) = fill(&mut producer, &vec![b'j'; 1_000_000], 1000);
    assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
    let jobs = room_for_the_idle(&mut producer, jobs, &mut [&mut observer, &mut worker]);
    let mut small_jobs = Vec::new();
    let mut delivered = 0;
    for _ in 0..3 {
        // Memory full to within 64 KB just before: a megabyte's body no
        // longer fits, but a reply that grows a buffer the worker holds
        // might; smaller jobs take what is left.
        let (small, refusal) = fill(&mut producer, &vec![b's'; 64 * 1024], 100);
        assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
        small_jobs.extend(small);
        worker.send("reserve-with-timeout 0\r\n");
        let reply = worker.reply_bytes();
        if reply.starts_with(b"RESERVED ") {
            delivered += 1;
        } else {
            assert_eq!(reply, b"OUT_OF_MEMORY\r\n");
        }
    }
    assert!(delivered < 3, "every reserve was delivered: the test no longer runs out of memory");
    assert_eq!(observer.stat("current-jobs-reserved"), delivered.to_string());
    assert_eq!(observer.stat("current-jobs-ready"), (jobs.len() + small_jobs.len() - delivered).to_string());
    delete_all(&mut producer, &small_jobs);
    // With memory back, the next reserve delivers the job every other
    // worker could have had.
    delete_all(&mut producer, &jobs[jobs.len() - 5..]);
    worker.send("reserve-with-timeout 0\r\n");
    let reply = worker.reply_bytes();
    assert!(reply.starts_with(format!("RESERVED {} 1000000\r\n", jobs[delivered]).as_bytes()));
}

/// New connections until refused (at most `conn_cap`), held open, then
/// big jobs until refused (at most `big_cap`): the two counts.
fn connections_then_big_jobs(server: &binary::Bin, conn_cap: usize, big_cap: usize) -> (usize, usize) {
    let mut producer = server.client();
    let mut clients = Vec::new();
    let mut served = 0;
    for _ in 0..conn_cap {
        let Ok(mut client) = TcpStream::connect(server.addr) else { break };
        client.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
        let _ = client.write_all(b"list-tube-used\r\n");
        let mut reply = [0; 64];
        if matches!(client.read(&mut reply), Ok(n) if &reply[..n] == b"USING default\r\n") {
            served += 1;
        }
        clients.push(client);
    }
    let mut big = 0;
    let body = vec![b'b'; 100_000];
    while big < big_cap && put(&mut producer, &body) != b"OUT_OF_MEMORY\r\n" {
        big += 1;
    }
    (served, big)
}

/// Issue 33's pinned pattern: a 256 MiB address space filled with 1000-byte
/// jobs, then all deleted but one in `keep` (and one in 4000 at random).
/// What the deletes freed must serve new connections (their threads'
/// stacks included) and big jobs, and opening connections until refused
/// must never take the server down: every kept job is still there after.
/// beanstalkd serves the caps (300 connections, 1,500 jobs of 100 KB) in
/// the same address space, but for no big job at one in 16 or 2; 0.9 of
/// that is the floor here.
#[test]
fn a_few_live_jobs_do_not_pin_the_address_space_and_a_connection_storm_cannot_abort() {
    let mut rng = common::Rng::new(33);
    for keep in [4000, 0, 256, 16, 2] {
        let server = binary::spawn_with_address_space(256 * 1024, &["-z", "200000"]);
        let mut producer = server.client();
        let (small, refusal) = fill(&mut producer, &[b's'; 1000], 1_000_000);
        assert_eq!(refusal, "OUT_OF_MEMORY\r\n");
        let kept: Vec<u64> = match keep {
            0 => small.iter().copied().filter(|_| rng.below(4000) == 0).collect(),
            k => small.iter().copied().step_by(k).collect(),
        };
        let gone: Vec<u64> = small.iter().copied().filter(|id| kept.binary_search(id).is_err()).collect();
        delete_all(&mut producer, &gone);
        let (served, big) = connections_then_big_jobs(&server, 300, 1500);
        eprintln!("keep 1 in {keep}: {} kept, {served} connections, {big} big jobs", kept.len());
        // Past the storm: the server is up, and every kept job is there,
        // its body intact wherever it was moved to.
        let mut observer = connect_when_room(&server);
        let body = "s".repeat(1000);
        for id in &kept {
            assert_eq!(observer.cmd(&format!("peek {id}")), format!("FOUND {id} 1000\r\n{body}\r\n"));
        }
        // One in 16 or in 2 frees no page by itself: the pages they pin
        // are emptied into each other when memory runs short
        // (`sys/evacuation.rs`), and then hold more big jobs than
        // beanstalkd's heap, which takes none.
        let (least_served, least_big) = match keep {
            16 | 2 => (270, 0),
            _ => (270, 1350),
        };
        assert!(
            served >= least_served && big >= least_big,
            "keep 1 in {keep}: {served} connections, {big} big jobs"
        );
    }
}

/// An idle connection costs a few hundred bytes, whatever it did (issue 59:
/// at most 2 KiB; it has no thread of its own): 200 clients each
/// run `stats`, `list-tubes`, a put, reserve and delete, and a
/// `delete-batch`, then go quiet; once their buffers went (a second of
/// quiet, and a sweep of its loop's, then a second more for freed pages),
/// RSS has grown by less than 2 KiB a connection.
#[test]
fn an_idle_connection_costs_under_two_kib_whatever_it_did() {
    let server = binary::spawn(&[]);
    let pid = server.child.id();
    let rss_kib = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap().to_owned();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
    };
    server.client().cmd("stats");
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib();
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let mut c = server.client();
            c.cmd("stats");
            c.cmd("list-tubes");
            let id = c.put(0, 0, 60, "hello");
            let id = id.trim_start_matches("INSERTED ").trim_end();
            assert!(c.cmd("reserve").starts_with("RESERVED "));
            assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
            assert_eq!(c.cmd(&format!("delete-batch {id}")), "DELETED_BATCH 0 1\r\n");
            c
        })
        .collect();
    // `.ci/run` runs this test in a release build too.
    let most = 2.0;
    // A connection lets go of its buffers after a second of quiet, which
    // a loaded machine may take longer to see: wait for it.
    let mut per_connection = f64::MAX;
    let idle = common::settle(Duration::from_secs(20), || {
        per_connection = rss_kib().saturating_sub(before) as f64 / clients.len() as f64;
        per_connection < most
    });
    assert!(idle, "{per_connection:.1} KiB an idle connection");
}
