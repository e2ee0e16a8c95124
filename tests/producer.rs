//! put and use: what a producer sees.
mod common;

use std::time::Duration;

/// Long enough to notice a reply that should not come, short enough to keep
/// the suite fast.
const QUIET: Duration = Duration::from_millis(200);

#[test]
fn put_answers_inserted_with_sequential_ids() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("put 0 0 60 5\r\nhello"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("put 0 0 60 0\r\n"), "INSERTED 2\r\n");
}

#[test]
fn put_stores_body_with_crlf_and_nul_bytes_verbatim() {
    let server = common::start();
    let mut c = server.connect();
    c.send(b"put 0 0 60 7\r\na\r\n\0b\0\r\r\n");
    c.expect("INSERTED 1\r\n");
    c.send("peek 1\r\n");
    c.expect(b"FOUND 1 7\r\na\r\n\0b\0\r\r\n");
}

#[test]
fn put_with_a_body_that_looks_like_commands_stores_it_unparsed() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 60 11\r\nuse x\r\nquit\r\n");
    c.expect("INSERTED 1\r\n");
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    assert_eq!(c.cmd("peek 1"), "FOUND 1 11\r\nuse x\r\nquit\r\n");
}

#[test]
fn put_with_zero_byte_body_is_inserted_and_found_empty() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 60 0\r\n\r\n");
    c.expect("INSERTED 1\r\n");
    assert_eq!(c.cmd("peek 1"), "FOUND 1 0\r\n\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 0\r\n\r\n");
}

#[test]
fn put_with_ttr_zero_stores_ttr_one() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 0, "x"), "INSERTED 1\r\n");
    assert_eq!(c.yaml_map("stats-job 1")["ttr"], "1");
}

#[test]
fn put_accepts_max_u32_priority_delay_and_ttr() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 4294967295 4294967295 4294967295 1\r\nx\r\n");
    c.expect("INSERTED 1\r\n");
    let job = c.yaml_map("stats-job 1");
    assert_eq!(job["pri"], "4294967295");
    assert_eq!(job["delay"], "4294967295");
    assert_eq!(job["ttr"], "4294967295");
    assert_eq!(job["state"], "delayed");
    assert_eq!(job["time-left"], "4294967294");
    assert_eq!(c.cmd("peek-delayed"), "FOUND 1 1\r\nx\r\n");
}

#[test]
fn put_with_a_field_above_u32_is_bad_format_and_body_becomes_a_command() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 4294967296 0 1 1\r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    c.send("put 0 0 4294967296 1\r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    // Neither used up an id.
    assert_eq!(c.put(0, 0, 1, "y"), "INSERTED 1\r\n");
}

#[test]
fn put_with_missing_or_signed_fields_is_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("put 0 0 1"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("put -1 0 1 1"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("put "), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("put"), "UNKNOWN_COMMAND\r\n");
    assert_eq!(c.put(0, 0, 1, "y"), "INSERTED 1\r\n");
}

#[test]
fn put_with_extra_spaces_and_leading_zeros_is_accepted() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put  00   0  1   01\r\nx\r\n");
    c.expect("INSERTED 1\r\n");
}

#[test]
fn put_with_trailing_junk_is_bad_format_and_body_is_parsed_as_commands() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 1 \r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    c.send("put 0 0 1 6x\r\nuse t1\r\n");
    c.expect("BAD_FORMAT\r\nUSING t1\r\n");
    // No id was used up and the connection is not a producer yet.
    assert_eq!(c.stat("current-producers"), "0");
    assert_eq!(c.put(0, 0, 1, "y"), "INSERTED 1\r\n");
}

#[test]
fn put_without_crlf_after_body_is_expected_crlf_and_the_end() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 3\r\nabcde\r\n");
    // The two bytes after the body were "de": the reply, then the close
    // (reference §1.5); the CRLF left over is never read.
    c.expect("EXPECTED_CRLF\r\n");
    c.expect_closed();
    assert_eq!(server.connect().cmd("peek 1"), "NOT_FOUND\r\n");
}

#[test]
fn put_with_expected_crlf_uses_up_an_id() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 1\r\nxyz\r\n");
    c.expect("EXPECTED_CRLF\r\n");
    c.expect_closed();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 1, "y"), "INSERTED 2\r\n");
    assert_eq!(c.stat("total-jobs"), "1");
}

/// A client that sizes its body in characters, as JavaScript's `.length`
/// does, sends more bytes than it declares: with beanstalkd, whatever
/// follows the miscount runs as commands, here a `delete` of another
/// client's job. Here the connection ends after `EXPECTED_CRLF`, whether
/// the body came with its line (filed under one hold of the lock) or
/// after it (read once its id is claimed).
#[test]
fn a_miscounted_body_never_runs_what_follows_it() {
    let server = common::start();
    let mut owner = server.connect();
    for (way, split) in [("whole", false), ("split", true)] {
        let id = owner.put_ok("precious");
        // Each "€" is 3 bytes and 1 character: enough of them that the 2
        // bytes after the declared length end one, and `delete <id>` is
        // next, as a character-counting client would send it.
        let delete = format!("delete {id}");
        assert_eq!(delete.len() % 2, 0, "{way}: an even command, for whole characters");
        let body = format!("{}{delete}", "€".repeat((delete.len() + 2) / 2));
        let line = format!("put 0 0 60 {}\r\n", body.chars().count());
        let mut c = server.connect();
        if split {
            c.send(&line);
            std::thread::sleep(Duration::from_millis(50));
            c.send(format!("{body}\r\n"));
        } else {
            c.send(format!("{line}{body}\r\n"));
        }
        c.expect("EXPECTED_CRLF\r\n");
        c.expect_closed();
        assert_eq!(owner.cmd(&format!("peek {id}")), format!("FOUND {id} 8\r\nprecious\r\n"), "{way}");
    }
}

#[test]
fn put_larger_than_max_job_size_waits_for_the_whole_body_then_job_too_big() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 65536\r\n");
    c.expect_silence(QUIET);
    c.send(vec![b'a'; 65536]);
    c.expect_silence(QUIET);
    c.send("\r\n");
    c.expect("JOB_TOO_BIG\r\n");
    // The connection stays usable and no id was used up.
    assert_eq!(c.put(0, 0, 1, "y"), "INSERTED 1\r\n");
}

#[test]
fn put_of_default_max_job_size_65535_is_inserted() {
    let server = common::start();
    let mut c = server.connect();
    let body = "b".repeat(65535);
    assert_eq!(c.put(0, 0, 1, &body), "INSERTED 1\r\n");
    assert_eq!(c.cmd("peek 1"), format!("FOUND 1 65535\r\n{body}\r\n"));
}

#[test]
fn put_limit_follows_z_flag_exactly() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 1, "0123456789"), "INSERTED 1\r\n");
    assert_eq!(c.put(0, 0, 1, "0123456789a"), "JOB_TOO_BIG\r\n");
    assert_eq!(c.put(0, 0, 1, "x"), "INSERTED 2\r\n");
}

#[test]
fn job_too_big_discards_the_body_unseen_even_if_it_holds_commands() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    // 12-byte body "use foo\r\nabc" plus CRLF: all discarded.
    c.send("put 0 0 1 12\r\nuse foo\r\nabc\r\nlist-tube-used\r\n");
    c.expect("JOB_TOO_BIG\r\nUSING default\r\n");
}

#[test]
fn job_too_big_is_checked_before_trailing_junk() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    c.send("put 0 0 1 11 garbage\r\n01234567890\r\n");
    c.expect("JOB_TOO_BIG\r\n");
    assert_eq!(c.put(0, 0, 1, "x"), "INSERTED 1\r\n");
}

#[test]
fn job_too_big_discards_exactly_bytes_plus_two_whatever_they_are() {
    let server = common::start_args(&["-z", "2"]);
    let mut c = server.connect();
    // Body 3 bytes + 2: "abcXY" discarded, then the next line follows.
    c.send("put 0 0 1 3\r\nabcXYlist-tube-used\r\n");
    c.expect("JOB_TOO_BIG\r\nUSING default\r\n");
}

#[test]
fn delayed_put_is_delayed_then_becomes_ready() {
    let server = common::start();
    let mut c = server.connect();
    let putting = std::time::Instant::now();
    assert_eq!(c.put(3, 1, 60, "later"), "INSERTED 1\r\n");
    let job = c.yaml_map("stats-job 1");
    assert_eq!(job["delay"], "1");
    let (ready, delayed) = (c.cmd("peek-ready"), c.cmd("peek-delayed"));
    let reserved = c.cmd("reserve-with-timeout 0");
    // Delayed still, unless a loaded machine took the second to ask; then
    // the reserve may have taken it.
    if putting.elapsed() >= Duration::from_secs(1) && reserved != "TIMED_OUT\r\n" {
        assert_eq!(reserved, "RESERVED 1 5\r\nlater\r\n");
        return;
    }
    assert_eq!(job["state"], "delayed");
    assert_eq!(ready, "NOT_FOUND\r\n");
    assert_eq!(delayed, "FOUND 1 5\r\nlater\r\n");
    assert_eq!(reserved, "TIMED_OUT\r\n");
    assert_eq!(c.cmd(&common::reserve_guarded()), "RESERVED 1 5\r\nlater\r\n");
}

#[test]
fn use_answers_using_and_creates_the_tube() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use jobs"), "USING jobs\r\n");
    assert_eq!(c.cmd("list-tube-used"), "USING jobs\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 21\r\n---\n- default\n- jobs\n\r\n");
    assert_eq!(c.cmd("use jobs"), "USING jobs\r\n");
}

#[test]
fn put_goes_into_the_used_tube() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use jobs"), "USING jobs\r\n");
    assert_eq!(c.put(0, 0, 60, "x"), "INSERTED 1\r\n");
    assert_eq!(c.yaml_map("stats-job 1")["tube"], "\"jobs\"");
    assert_eq!(c.yaml_map("stats-tube jobs")["current-jobs-ready"], "1");
    // The watch list is still [default]: nothing to reserve.
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

#[test]
fn use_accepts_every_legal_name_byte_and_200_bytes() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use a-b+c/d;e.f$g_h(i)9"), "USING a-b+c/d;e.f$g_h(i)9\r\n");
    let long = "n".repeat(200);
    assert_eq!(c.cmd(&format!("use {long}")), format!("USING {long}\r\n"));
}

#[test]
fn use_with_a_bad_name_is_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    for line in ["use  foo", "use foo ", "use -foo", "use a*b", "use "] {
        assert_eq!(c.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    assert_eq!(c.cmd(&format!("use {}", "n".repeat(201))), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("use"), "UNKNOWN_COMMAND\r\n");
    assert_eq!(c.cmd("use\tfoo"), "UNKNOWN_COMMAND\r\n");
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn peek_finds_a_job_in_any_tube_by_id() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use other");
    assert_eq!(c.put(0, 0, 60, "abc"), "INSERTED 1\r\n");
    c.cmd("use default");
    assert_eq!(c.cmd("peek 1"), "FOUND 1 3\r\nabc\r\n");
    assert_eq!(c.cmd("peek 01"), "FOUND 1 3\r\nabc\r\n");
    assert_eq!(c.cmd("peek 2"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("peek 18446744073709551615"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("peek 18446744073709551616"), "BAD_FORMAT\r\n");
    assert_eq!(c.cmd("peek"), "UNKNOWN_COMMAND\r\n");
}

#[test]
fn peek_finds_a_job_reserved_by_another_connection() {
    let server = common::start();
    let mut producer = server.connect();
    let mut worker = server.connect();
    producer.put_ok("busy");
    assert_eq!(worker.cmd("reserve"), "RESERVED 1 4\r\nbusy\r\n");
    assert_eq!(producer.cmd("peek 1"), "FOUND 1 4\r\nbusy\r\n");
}

#[test]
fn peek_ready_shows_the_smallest_pri_then_id_of_the_used_tube() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("peek-ready"), "NOT_FOUND\r\n");
    c.put(5, 0, 60, "a");
    c.put(2, 0, 60, "b");
    c.put(2, 0, 60, "c");
    assert_eq!(c.cmd("peek-ready"), "FOUND 2 1\r\nb\r\n");
    c.cmd("use other");
    assert_eq!(c.cmd("peek-ready"), "NOT_FOUND\r\n");
    // A peek changes nothing.
    c.cmd("use default");
    assert_eq!(c.cmd("peek-ready"), "FOUND 2 1\r\nb\r\n");
}

#[test]
fn peek_delayed_shows_the_job_due_soonest() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("peek-delayed"), "NOT_FOUND\r\n");
    c.put(0, 200, 60, "a");
    c.put(0, 100, 60, "b");
    c.put(0, 300, 60, "c");
    c.put(0, 0, 60, "ready");
    assert_eq!(c.cmd("peek-delayed"), "FOUND 2 1\r\nb\r\n");
}

#[test]
fn peek_buried_shows_the_oldest_buried_job() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("peek-buried"), "NOT_FOUND\r\n");
    c.put_ok("a");
    c.put_ok("b");
    c.cmd("reserve-job 2");
    c.cmd("reserve-job 1");
    assert_eq!(c.cmd("bury 2 0"), "BURIED\r\n");
    assert_eq!(c.cmd("bury 1 0"), "BURIED\r\n");
    assert_eq!(c.cmd("peek-buried"), "FOUND 2 1\r\nb\r\n");
}

#[test]
fn peek_commands_without_arguments_must_match_exactly() {
    let server = common::start();
    let mut c = server.connect();
    for line in ["peek-ready ", "peek-readyx", "peek-delayed ", "peek-buried 1"] {
        assert_eq!(c.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
}

#[test]
fn pipelined_commands_in_one_write_are_answered_in_order() {
    let server = common::start();
    let mut c = server.connect();
    c.send("use a\r\nuse b\r\nlist-tube-used\r\n");
    c.expect("USING a\r\nUSING b\r\nUSING b\r\n");
}

#[test]
fn pipelined_puts_and_peeks_in_one_write_are_answered_in_order() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 1 0 60 2\r\nab\r\nput 0 0 60 0\r\n\r\npeek-ready\r\nbogus\r\npeek 1\r\n");
    c.expect("INSERTED 1\r\nINSERTED 2\r\nFOUND 2 0\r\n\r\nUNKNOWN_COMMAND\r\nFOUND 1 2\r\nab\r\n");
}

#[test]
fn many_pipelined_puts_are_all_answered() {
    let server = common::start();
    let mut c = server.connect();
    let batch: String = (0..500).map(|_| "put 0 0 60 3\r\nabc\r\n").collect();
    c.send(batch);
    let expected: String = (1..=500).map(|id| format!("INSERTED {id}\r\n")).collect();
    c.expect(expected);
}

#[test]
fn put_sent_byte_by_byte_is_inserted() {
    let server = common::start();
    let mut c = server.connect();
    for &b in b"put 0 0 60 4\r\na\r\nb\r\n" {
        c.send([b]);
    }
    c.expect("INSERTED 1\r\n");
    for &b in b"peek 1\r\n" {
        c.send([b]);
    }
    c.expect("FOUND 1 4\r\na\r\nb\r\n");
}

#[test]
fn command_split_between_cr_and_lf_is_one_line() {
    let server = common::start();
    let mut c = server.connect();
    c.send("list-tube-used\r");
    c.expect_silence(QUIET);
    c.send("\n");
    c.expect("USING default\r\n");
}

#[test]
fn a_bare_lf_does_not_end_a_line() {
    let server = common::start();
    let mut c = server.connect();
    c.send("list-tube-used\n");
    c.expect_silence(QUIET);
    c.send("\r\n");
    c.expect("BAD_FORMAT\r\n");
}

#[test]
fn put_is_counted_once_its_line_parses_even_if_it_then_fails() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    c.send("put 4294967296 0 1 1\r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(c.stat("cmd-put"), "0");
    c.send("put 0 0 1 1 \r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    c.send("put 0 0 1 11\r\n0123456789a\r\n");
    c.expect("JOB_TOO_BIG\r\n");
    let stats = c.stats();
    assert_eq!(stats["cmd-put"], "2");
    assert_eq!(stats["current-producers"], "0");
    assert_eq!(stats["total-jobs"], "0");
}

#[test]
fn put_with_expected_crlf_is_counted_and_files_nothing() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 1\r\nx--");
    c.expect("EXPECTED_CRLF\r\n");
    c.expect_closed();
    let stats = server.connect().stats();
    assert_eq!(stats["cmd-put"], "1");
    assert_eq!(stats["total-jobs"], "0");
}

#[test]
fn peek_ready_ignores_pause() {
    let server = common::start();
    let mut c = server.connect();
    c.put_ok("x");
    assert_eq!(c.cmd("pause-tube default 100"), "PAUSED\r\n");
    assert_eq!(c.cmd("peek-ready"), "FOUND 1 1\r\nx\r\n");
    assert_eq!(c.put(0, 0, 60, "y"), "INSERTED 2\r\n");
}

#[test]
fn pipelined_input_larger_than_any_buffer_is_answered_in_order() {
    let server = common::start();
    let mut c = server.connect();
    let big = "z".repeat(30000);
    let mut batch = String::new();
    for _ in 0..3 {
        batch.push_str(&format!("put 0 0 60 30000\r\n{big}\r\n"));
    }
    for _ in 0..1500 {
        batch.push_str("list-tube-used\r\n");
    }
    batch.push_str("peek 3\r\n");
    c.send(batch);
    c.expect("INSERTED 1\r\nINSERTED 2\r\nINSERTED 3\r\n");
    c.expect("USING default\r\n".repeat(1500));
    c.expect(format!("FOUND 3 30000\r\n{big}\r\n"));
}

#[test]
fn expected_crlf_reads_nothing_after_the_trailer() {
    let server = common::start();
    let mut c = server.connect();
    // A 0-byte body: the two trailer bytes are "X\r"; the "\n" left over,
    // and the command after it, are never read.
    c.send("put 0 0 1 0\r\nX\r\nlist-tube-used\r\n");
    c.expect("EXPECTED_CRLF\r\n");
    c.expect_closed();
    assert_eq!(server.connect().put(0, 0, 1, "x"), "INSERTED 2\r\n");
}

#[test]
fn put_line_with_a_nul_byte_is_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    c.send(b"put 0 0 1 1\0\r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(c.put(0, 0, 1, "x"), "INSERTED 1\r\n");
}

#[test]
fn a_client_quiet_past_the_idle_timeout_is_answered_as_before() {
    // Quiet for over a second, the connection frees its buffers and sleeps
    // in poll; a body that stalls that long mid-way is still read whole.
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use quiet"), "USING quiet\r\n");
    std::thread::sleep(Duration::from_millis(1300));
    c.send("put 0 0 60 5\r\nhe");
    std::thread::sleep(Duration::from_millis(1300));
    c.send("llo\r\nlist-tube-used\r\n");
    c.expect("INSERTED 1\r\nUSING quiet\r\n");
}

/// A put's body sent with its line is filed under one hold of the lock, a
/// body sent after it under two: a client sees the same bytes either way,
/// ids used up by refused puts included.
#[test]
fn a_body_sent_with_its_line_or_after_it_gets_the_same_replies() {
    let server = common::start();
    let mut c = server.connect();
    let whole = |c: &mut common::Client, line: &str, body: &[u8]| {
        c.send([line.as_bytes(), body].concat());
        c.reply()
    };
    let split = |c: &mut common::Client, line: &str, body: &[u8]| {
        c.send(line);
        std::thread::sleep(Duration::from_millis(50));
        c.send(body);
        c.reply()
    };
    for (way, put) in
        [("whole", &whole as &dyn Fn(&mut common::Client, &str, &[u8]) -> String), ("split", &split)]
    {
        let id = c.put_ok("x") + 1;
        assert_eq!(put(&mut c, "put 0 0 60 3\r\n", b"abc\r\n"), format!("INSERTED {id}\r\n"), "{way}");
        let mut miscounted = server.connect();
        assert_eq!(put(&mut miscounted, "put 0 0 60 3\r\n", b"abcde"), "EXPECTED_CRLF\r\n", "{way}");
        miscounted.expect_closed();
        // The refused put used up an id, as beanstalkd's does.
        assert_eq!(c.put_ok("y"), id + 2, "{way}");
        assert_eq!(put(&mut c, "put 0 0 60 70000\r\n", &[b'z'; 70002]), "JOB_TOO_BIG\r\n", "{way}");
        assert_eq!(c.cmd(&format!("peek {id}")), format!("FOUND {id} 3\r\nabc\r\n"), "{way}");
    }
}
