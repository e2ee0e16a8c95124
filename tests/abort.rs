//! `reserve-with-abort` (reference §3.3a): a reserve whose wait any byte
//! from the client calls off, the byte then read as the next command.
mod common;

use std::time::{Duration, Instant};

use common::{Client, TestServer};

/// Long enough to notice a reply that should not come.
const QUIET: Duration = Duration::from_millis(200);

/// Sends `line` and waits until the server counts one more blocked
/// worker than `before`, so that what the test does next happens during
/// the wait, not before it starts.
fn block(server: &TestServer, c: &mut Client, line: &str) {
    let mut observer = server.connect();
    let before = common::stat_u64(&mut observer, "current-waiting");
    c.send(format!("{line}\r\n"));
    let blocked = || common::stat_u64(&mut observer, "current-waiting") == before + 1;
    assert!(common::settle(common::HANG_GUARD, blocked), "{line} never blocked");
}

#[test]
fn a_byte_aborts_the_wait_and_is_then_read_as_the_next_command() {
    let server = common::start();
    let mut c = server.connect();
    // One byte alone: ABORTED, and the byte still starts the next line.
    block(&server, &mut c, "reserve-with-abort");
    c.send("l");
    c.expect("ABORTED\r\n");
    c.expect_silence(QUIET);
    c.send("ist-tube-used\r\n");
    c.expect("USING default\r\n");
    // `watch` calls the wait off and changes what the next one waits on.
    block(&server, &mut c, "reserve-with-abort");
    c.send("watch mail\r\n");
    c.expect("ABORTED\r\nWATCHING 2\r\n");
    // A bare CRLF calls it off too: an empty line is UNKNOWN_COMMAND.
    block(&server, &mut c, "reserve-with-abort");
    c.send("\r\n");
    c.expect("ABORTED\r\nUNKNOWN_COMMAND\r\n");
    // A lone LF calls it off, but ends no line (reference §1.2): it begins
    // the next one, which is then unknown. The man page says CRLF for this.
    block(&server, &mut c, "reserve-with-abort");
    c.send("\n");
    c.expect("ABORTED\r\n");
    c.expect_silence(QUIET);
    c.send("list-tube-used\r\n");
    c.expect("UNKNOWN_COMMAND\r\n");
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    let mut producer = server.connect();
    assert_eq!(producer.cmd("use mail"), "USING mail\r\n");
    assert_eq!(producer.put(0, 0, 60, "hi"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("reserve-with-abort"), "RESERVED 1 2\r\nhi\r\n");
    assert_eq!(c.stat("current-waiting"), "0");
}

#[test]
fn bytes_pipelined_behind_it_abort_at_once_unless_a_job_is_ready() {
    let server = common::start();
    let mut c = server.connect();
    c.send("reserve-with-abort\r\nlist-tube-used\r\n");
    c.expect("ABORTED\r\nUSING default\r\n");
    // Part of a line is a byte from the client as well.
    c.send("reserve-with-abort\r\nlist-tu");
    c.expect("ABORTED\r\n");
    c.send("be-used\r\n");
    c.expect("USING default\r\n");
    // A ready job is taken: there was no wait to call off.
    c.put_ok("job");
    c.send("reserve-with-abort\r\nlist-tube-used\r\n");
    c.expect("RESERVED 1 3\r\njob\r\nUSING default\r\n");
}

#[test]
fn a_half_close_gives_timed_out() {
    let server = common::start();
    let mut c = server.connect();
    block(&server, &mut c, "reserve-with-abort");
    c.half_close();
    c.expect("TIMED_OUT\r\n");
    c.expect_closed();
}

#[test]
fn a_plain_reserve_is_not_aborted_by_bytes() {
    let server = common::start();
    let mut c = server.connect();
    block(&server, &mut c, "reserve");
    c.send("list-tube-used\r\n");
    c.expect_silence(QUIET);
    server.connect().put_ok("job");
    c.expect("RESERVED 1 3\r\njob\r\nUSING default\r\n");
}

#[test]
fn its_timed_form_times_out_like_reserve_with_timeout() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("reserve-with-abort-timeout 0"), "TIMED_OUT\r\n");
    let started = Instant::now();
    assert_eq!(c.cmd("reserve-with-abort-timeout 1"), "TIMED_OUT\r\n");
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
    block(&server, &mut c, "reserve-with-abort-timeout 100");
    c.send("\r\n");
    c.expect("ABORTED\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(c.cmd("reserve-with-abort-timeout 1 x"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("reserve-with-abort "), "BAD_FORMAT\r\n");
    // Counted in beanstalkd's own keys: 3 timed, 0 plain.
    assert_eq!(c.stat("cmd-reserve-with-timeout"), "3");
    assert_eq!(c.stat("cmd-reserve"), "0");
}

#[test]
fn a_job_handed_over_before_the_byte_is_delivered_then_the_byte_is_a_command() {
    let server = common::start();
    let mut w = server.connect();
    let mut producer = server.connect();
    block(&server, &mut w, "reserve-with-abort");
    // INSERTED comes after the hand-off: the job was the waiter's first.
    assert_eq!(producer.put(0, 0, 60, "job"), "INSERTED 1\r\n");
    w.send("\r\n");
    w.expect("RESERVED 1 3\r\njob\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(producer.yaml_map("stats-job 1")["reserves"], "1");
    assert_eq!(w.cmd("delete 1"), "DELETED\r\n");
}

/// The byte and the job race: whichever comes first, the job is delivered
/// once (to the waiter, or later to whoever reserves it), never lost and
/// never twice.
#[test]
fn a_job_racing_the_abort_is_delivered_exactly_once() {
    let server = common::start();
    let mut w = server.connect();
    let mut producer = server.connect();
    let (mut delivered, mut aborted) = (0, 0);
    for round in 1..=100u64 {
        block(&server, &mut w, "reserve-with-abort");
        let body = format!("job{round}");
        producer.send(format!("put 0 0 60 {}\r\n{body}\r\n", body.len()));
        w.send("list-tube-used\r\n");
        assert_eq!(producer.reply(), format!("INSERTED {round}\r\n"));
        let first = w.reply();
        if first == "ABORTED\r\n" {
            aborted += 1;
            w.expect("USING default\r\n");
            // The job was not handed over: it is ready for anyone.
            assert_eq!(
                w.cmd("reserve-with-timeout 0"),
                format!("RESERVED {round} {}\r\n{body}\r\n", body.len())
            );
        } else {
            delivered += 1;
            assert_eq!(first, format!("RESERVED {round} {}\r\n{body}\r\n", body.len()));
            w.expect("USING default\r\n");
        }
        assert_eq!(producer.yaml_map(&format!("stats-job {round}"))["reserves"], "1");
        assert_eq!(w.cmd(&format!("delete {round}")), "DELETED\r\n");
    }
    assert_eq!(w.stat("current-jobs-ready"), "0");
    eprintln!("{delivered} delivered to the waiter, {aborted} aborted first");
}

#[test]
fn it_is_served_first_come_first_served_with_plain_reserves() {
    let server = common::start();
    let mut a = server.connect();
    let mut b = server.connect();
    let mut c = server.connect();
    let mut producer = server.connect();
    block(&server, &mut a, "reserve");
    block(&server, &mut b, "reserve-with-abort");
    block(&server, &mut c, "reserve-with-timeout 100");
    for (n, waiter) in [&mut a, &mut b, &mut c].into_iter().enumerate() {
        let id = n + 1;
        assert_eq!(producer.put(0, 0, 60, "j"), format!("INSERTED {id}\r\n"));
        waiter.expect(format!("RESERVED {id} 1\r\nj\r\n"));
    }
    // An aborted waiter leaves the line: the next job goes to the one
    // behind it.
    block(&server, &mut a, "reserve-with-abort");
    block(&server, &mut b, "reserve");
    a.send("\r\n");
    a.expect("ABORTED\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(producer.put(0, 0, 60, "k"), "INSERTED 4\r\n");
    b.expect("RESERVED 4 1\r\nk\r\n");
    a.expect_silence(QUIET);
}

#[test]
fn a_waiter_on_several_servers_calls_the_others_off_when_one_answers() {
    // The recipe of the README's "Past one machine", in small.
    let servers = [common::start(), common::start()];
    let mut waits: Vec<Client> = servers.iter().map(|s| s.connect()).collect();
    for (server, w) in servers.iter().zip(&mut waits) {
        block(server, w, "reserve-with-abort");
    }
    servers[1].connect().put_ok("from 1");
    waits[1].expect("RESERVED 1 6\r\nfrom 1\r\n");
    waits[0].send("\r\n");
    waits[0].expect("ABORTED\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(waits[1].cmd("delete 1"), "DELETED\r\n");
}
