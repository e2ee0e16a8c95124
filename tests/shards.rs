//! What one server of several needs: ids from a range a pool can route
//! (`--job-id-start`, `--job-id-step`), kept across a crash and a restart.
mod common;

use common::binary::{self, arg, TempDir};

#[test]
fn puts_get_the_start_then_every_step_and_failed_puts_use_theirs_up() {
    let server = common::start_args(&["--job-id-start", "2", "--job-id-step", "3"]);
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 60, "a"), "INSERTED 2\r\n");
    assert_eq!(c.put(0, 0, 60, "b"), "INSERTED 5\r\n");
    // A body without its CRLF uses its id up (reference §2.1), and ends
    // its connection (§1.5).
    let mut miscounted = server.connect();
    miscounted.send("put 0 0 60 1\r\nxyz\r\n");
    miscounted.expect("EXPECTED_CRLF\r\n");
    miscounted.expect_closed();
    assert_eq!(c.put(0, 0, 60, "c"), "INSERTED 11\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 1\r\na\r\n");
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    assert_eq!(c.cmd("delete 3"), "NOT_FOUND\r\n");
}

#[test]
fn ids_continue_in_the_range_after_a_sigkill() {
    let dir = TempDir::new("shard-ids");
    let flags = ["-b", arg(&dir.path), "--job-id-start", "3", "--job-id-step", "3"];
    let server = binary::spawn(&flags);
    let mut c = server.client();
    for (body, id) in [("a", 3), ("b", 6), ("c", 9)] {
        assert_eq!(c.put(0, 0, 60, body), format!("INSERTED {id}\r\n"));
    }
    assert_eq!(c.cmd("delete 9"), "DELETED\r\n");
    server.kill();

    let server = binary::spawn(&flags);
    let mut c = server.client();
    // 9 was seen, so the next is 12, not 9 again.
    assert_eq!(c.put(0, 0, 60, "d"), "INSERTED 12\r\n");
    assert_eq!(c.cmd("peek 6"), "FOUND 6 1\r\nb\r\n");
    // A directory with no live job left fits any range, which continues
    // above every id the directory has seen.
    for id in [3, 6, 12] {
        assert_eq!(c.cmd(&format!("delete {id}")), "DELETED\r\n");
    }
    server.kill();
    let server = binary::spawn(&["-b", arg(&dir.path), "--job-id-start", "1", "--job-id-step", "5"]);
    assert_eq!(server.client().put(0, 0, 60, "e"), "INSERTED 16\r\n");
}

#[test]
fn a_directory_whose_jobs_do_not_fit_the_flags_is_refused_in_one_line() {
    let dir = TempDir::new("shard-refuse");
    let server = binary::spawn(&["-b", arg(&dir.path)]);
    let mut c = server.client();
    c.put_ok("one");
    c.put_ok("two");
    server.kill();

    let (code, stderr) =
        binary::run_to_exit(&["-b", arg(&dir.path), "--job-id-start", "1", "--job-id-step", "3"]);
    assert_eq!(code, Some(1));
    let expected = format!(
        "beanstalk: binlog {}: it holds job 2, which --job-id-start 1 --job-id-step 3 would never give \
         out; start with the --job-id-start and --job-id-step it was written with, or move its jobs to \
         such a server with beanstalk-binlog export\n",
        dir.path.display()
    );
    assert_eq!(stderr, expected);
    // Nothing was changed: the right flags serve both jobs.
    let server = binary::spawn(&["-b", arg(&dir.path)]);
    assert_eq!(server.client().cmd("peek 2"), "FOUND 2 3\r\ntwo\r\n");
}

#[test]
fn the_stats_id_is_kept_in_the_directory_across_a_sigkill_and_a_restart() {
    let dir = TempDir::new("shard-identity");
    let id_of = |server: &binary::Bin| server.client().stat("id");
    let server = binary::spawn(&["-b", arg(&dir.path)]);
    let first = id_of(&server);
    assert!(first.len() == 16 && first.bytes().all(|b| b.is_ascii_hexdigit()), "{first:?}");
    server.kill();
    let server = binary::spawn(&["-b", arg(&dir.path)]);
    assert_eq!(id_of(&server), first, "the same directory is the same server");
    assert_eq!(std::fs::read_to_string(dir.path.join("server-id")).unwrap(), format!("{first}\n"));
    server.terminate();
    let server = binary::spawn(&["-b", arg(&dir.path)]);
    assert_eq!(id_of(&server), first);

    // A new directory is a new server; without -b, every start is.
    let other = TempDir::new("shard-identity-new");
    let server = binary::spawn(&["-b", arg(&other.path)]);
    assert_ne!(id_of(&server), first);
    let (a, b) = (common::start(), common::start());
    assert_ne!(a.connect().stat("id"), b.connect().stat("id"));
}

/// An id is never given twice (reference §7.1): a range ends at
/// 18446744073709551614, and once spent every put is `OUT_OF_MEMORY`, its
/// body swallowed, across a SIGKILL and a restart; nothing is overwritten.
#[test]
fn a_spent_range_refuses_puts_and_never_wraps_even_after_a_sigkill() {
    for (start, step, ids) in [
        ("1", "9223372036854775808", vec![1u64, 9223372036854775809]),
        ("18446744073709551613", "1", vec![18446744073709551613, 18446744073709551614]),
    ] {
        let dir = TempDir::new("spent-ids");
        let flags = ["-b", arg(&dir.path), "--job-id-start", start, "--job-id-step", step];
        let server = binary::spawn(&flags);
        let mut c = server.client();
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(c.put(0, 0, 60, &format!("job{n}")), format!("INSERTED {id}\r\n"));
        }
        for _ in 0..3 {
            assert_eq!(c.put(0, 0, 60, "late"), "OUT_OF_MEMORY\r\n");
        }
        let stderr = server.kill();
        assert!(stderr.contains("job ids spent"), "{stderr}");
        let server = binary::spawn(&flags);
        let mut c = server.client();
        assert_eq!(c.put(0, 0, 60, "later"), "OUT_OF_MEMORY\r\n");
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(c.cmd("reserve-with-timeout 0"), format!("RESERVED {id} 4\r\njob{n}\r\n"));
        }
        assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
        assert!(server.kill().contains("job ids spent: --job-id-start"));
    }
}

#[test]
fn a_range_that_holds_no_id_is_refused_in_one_line() {
    let (code, stderr) = binary::run_to_exit(&["--job-id-start", "18446744073709551615"]);
    assert_eq!(code, Some(5));
    assert_eq!(
        stderr.lines().next(),
        Some("beanstalk: invalid value for --job-id-start: 18446744073709551615")
    );
}
