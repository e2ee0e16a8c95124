//! Framing, limits and bad input (reference §1.2-1.5, 9).
mod common;

use common::Rng;

use std::io::{Read, Write};
use std::time::Duration;

/// Long enough to notice a reply that should not come.
const SILENCE: Duration = Duration::from_millis(200);

const BAD: &str = "BAD_FORMAT\r\n";
const UNKNOWN: &str = "UNKNOWN_COMMAND\r\n";

/// A command line of exactly `total` bytes, CRLF included.
fn line_of(total: usize) -> Vec<u8> {
    let mut line = b"use ".to_vec();
    line.resize(total - 2, b'a');
    line.extend_from_slice(b"\r\n");
    line
}

// -------------------------------------------------------------------
// Line length (1.2)
// -------------------------------------------------------------------

#[test]
fn the_longest_legal_line_of_224_bytes_works() {
    let server = common::start();
    let mut c = server.connect();
    let name = "n".repeat(200);
    assert_eq!(c.cmd(&format!("use {name}")), format!("USING {name}\r\n"));
    let line = format!("pause-tube {name} 4294967295\r\n");
    assert_eq!(line.len(), 224);
    c.send(&line);
    c.expect("PAUSED\r\n");
    assert_eq!(c.yaml_map(&format!("stats-tube {name}"))["pause"], "4294967295");
}

#[test]
fn the_longest_legal_line_works_when_its_lf_arrives_separately() {
    let server = common::start();
    let mut c = server.connect();
    let name = "n".repeat(200);
    assert_eq!(c.cmd(&format!("watch {name}")), "WATCHING 2\r\n");
    c.send(format!("pause-tube {name} 4294967295\r"));
    c.expect_silence(SILENCE);
    c.send("\n");
    c.expect("PAUSED\r\n");
}

#[test]
fn overlong_lines_get_exactly_one_bad_format_and_the_connection_goes_on() {
    let server = common::start();
    let mut c = server.connect();
    for total in [226, 227, 300, 1024, 100 * 1024, 1024 * 1024] {
        let mut bytes = line_of(total);
        bytes.extend_from_slice(b"list-tube-used\r\n");
        c.send(&bytes);
        c.expect("BAD_FORMAT\r\nUSING default\r\n");
    }
    // Lone CRs and LFs inside an overlong line change nothing.
    let mut bytes = b"use ".to_vec();
    for _ in 0..60 {
        bytes.extend_from_slice(b"ab\rc\nd");
    }
    bytes.extend_from_slice(b"\r\nlist-tube-used\r\n");
    c.send(&bytes);
    c.expect("BAD_FORMAT\r\nUSING default\r\n");
    // Nothing of the discarded lines was executed.
    assert_eq!(c.cmd("list-tubes"), "OK 14\r\n---\n- default\n\r\n");
}

#[test]
fn a_valid_command_one_byte_too_long_is_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    let name = "n".repeat(200);
    assert_eq!(c.cmd(&format!("use {name}")), format!("USING {name}\r\n"));
    // A leading zero makes it 225 bytes.
    let line = format!("pause-tube {name} 04294967295\r\n");
    assert_eq!(line.len(), 225);
    c.send(&line);
    c.expect(BAD);
    assert_eq!(c.yaml_map(&format!("stats-tube {name}"))["pause"], "0");
}

#[test]
fn a_put_line_of_224_bytes_reads_its_body() {
    let server = common::start();
    let mut c = server.connect();
    let mut line = "put 0 0 1 ".to_owned();
    line.push_str(&" ".repeat(224 - 2 - line.len() - 1));
    line.push_str("2\r\n");
    assert_eq!(line.len(), 224);
    c.send(line + "hi\r\n");
    c.expect("INSERTED 1\r\n");
}

#[test]
fn an_overlong_quit_line_is_bad_format_and_does_not_close() {
    let server = common::start();
    let mut c = server.connect();
    c.send(format!("quit{}\r\n", "t".repeat(300)));
    c.expect(BAD);
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn a_partial_line_at_eof_gets_no_reply() {
    let server = common::start();
    let mut c = server.connect();
    c.send("list-tube-used\r\nstats");
    c.half_close();
    c.expect("USING default\r\n");
    c.expect_closed();
}

#[test]
fn a_225_byte_line_gets_one_bad_format_and_the_next_command_is_answered() {
    // beanstalkd's 225-byte quirk (no reply, next command swallowed) is
    // deliberately not copied (reference §1.2).
    let server = common::start();
    let mut c = server.connect();
    let mut bytes = line_of(225);
    bytes.extend_from_slice(b"list-tube-used\r\n");
    c.send(&bytes);
    c.expect("BAD_FORMAT\r\nUSING default\r\n");
    // The same with the CR as the 224th byte of a separate write.
    let bytes = line_of(225);
    c.send(&bytes[..224]);
    c.expect_silence(SILENCE);
    c.send(b"\nlist-tube-used\r\n");
    c.expect("BAD_FORMAT\r\nUSING default\r\n");
}

#[test]
fn an_overlong_line_sent_in_small_pieces_gets_one_bad_format_at_its_crlf() {
    let server = common::start();
    let mut c = server.connect();
    let bytes = line_of(5000);
    let (body, crlf) = bytes.split_at(bytes.len() - 2);
    for piece in body.chunks(100) {
        c.send(piece);
    }
    c.send(&crlf[..1]);
    c.expect_silence(SILENCE);
    c.send(&crlf[1..]);
    c.expect(BAD);
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn an_overlong_put_line_reads_no_body() {
    let server = common::start();
    let mut c = server.connect();
    let spaces = " ".repeat(230);
    c.send(format!("put 0 0 1{spaces}1\r\nx\r\n"));
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    assert_eq!(c.put_ok("y"), 1);
}

#[test]
fn a_tagged_put_past_224_bytes_is_a_put_and_never_runs_its_body() {
    let server = common::start();
    let mut c = server.connect();
    let mut other = server.connect();
    assert_eq!(other.put_ok("victim"), 1);
    // 264 bytes, every tag legal (tuber answers INSERTED): a job, whose
    // body is never a `delete 1`.
    let (group, after) = ("g".repeat(120), "a".repeat(120));
    let line = format!("put 0 0 60 8 grp:{group} aft:{after}\r\n");
    assert_eq!(line.len(), 264);
    c.send(format!("{line}delete 1\r\n"));
    c.expect("INSERTED 2\r\n");
    assert_eq!(c.cmd("peek 2"), "FOUND 2 8\r\ndelete 1\r\n");
    // Every tag at its longest: still a put.
    let (name, n) = ("n".repeat(200), "4294967295");
    let longest = format!("put 0 0 60 8 idp:{name}:{n} grp:{name} aft:{name} con:{name}:{n} max:{n}");
    c.send(format!("{longest}\r\ndelete 1\r\n"));
    c.expect("INSERTED 3\r\n");
    // Refused for any reason, a tagged put's body is swallowed: a bad tag,
    // junk beside a tag, a line past the longest legal one.
    c.send(format!("put 0 0 60 8 grp:{group} aft:{after} junk\r\ndelete 1\r\n"));
    c.expect("BAD_FORMAT\r\n");
    c.send(format!("put 0 0 60 8 grp:{group} aft:-{after}\r\ndelete 1\r\n"));
    c.expect("BAD_FORMAT\r\n");
    c.send(format!("put 0 0 60 8 grp:{group} {}\r\ndelete 1\r\n", "aft:x ".repeat(200)));
    c.expect("BAD_FORMAT\r\n");
    assert_eq!(c.cmd("peek 1"), "FOUND 1 6\r\nvictim\r\n");
    // A tagged put whose size cannot be read: its body cannot be told from
    // the commands after it, so the connection ends.
    c.send("put 0 0 60 x grp:g\r\ndelete 1\r\n");
    c.expect("BAD_FORMAT\r\n");
    c.expect_closed();
    assert_eq!(other.cmd("peek 1"), "FOUND 1 6\r\nvictim\r\n");
    // Without a tag, beanstalkd's bytes: an over-long put line reads no
    // body (an_overlong_put_line_reads_no_body).
    let mut c = server.connect();
    c.send(format!("put 0 0 60 8 {}\r\ndelete 9\r\n", "x".repeat(220)));
    c.expect("BAD_FORMAT\r\nNOT_FOUND\r\n");
}

/// Every put line there is to try: what one write of it, its body
/// (`use evil`, a command if run) and a probe (`use default`) gets back,
/// ids masked. A line whose body the server cannot tell from what follows
/// ends the connection (`None` as the probe's answer).
fn put_lines() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let swallowed = "BAD_FORMAT\r\nUSING default\r\n";
    let run = "BAD_FORMAT\r\nUSING evil\r\nUSING default\r\n";
    let inserted = "INSERTED <id>\r\nUSING default\r\n";
    let closed = "BAD_FORMAT\r\n";
    // `put 0 0 60 8`, spaces and `tail`: `total` bytes with CRLF.
    let padded = |total: usize, tail: &[u8]| {
        let head = b"put 0 0 60 8";
        [&head[..], &vec![b' '; total - 2 - head.len() - tail.len()], tail].concat()
    };
    vec![
        ("legal", b"put 0 0 60 8".to_vec(), inserted),
        ("legal, tagged", b"put 0 0 60 8 grp:x".to_vec(), inserted),
        ("junk after the size: beanstalkd's, the body run", b"put 0 0 60 8 junk".to_vec(), run),
        ("junk beside a tag", b"put 0 0 60 8 grp:x junk".to_vec(), swallowed),
        ("untagged, past 224 bytes", padded(300, b"x"), run),
        ("untagged, past 906 bytes", padded(1000, b"x"), run),
        ("tagged, 906 bytes: the longest", padded(906, b" grp:x"), inserted),
        ("tagged, 907 bytes", padded(907, b" grp:x"), swallowed),
        ("tagged, 980 bytes, the tag last", padded(980, b"grp:x"), swallowed),
        ("tagged past 906 bytes after a tab", padded(960, b"\tmax:3"), swallowed),
        ("tagged, with a NUL", b"put 0 0 60 8 grp:a\0".to_vec(), swallowed),
        ("tagged, past 906 bytes, with a NUL", padded(950, b"grp:a\0"), swallowed),
        (
            "tagged, its size after 900 zeros",
            [&b"put 0 0 60 "[..], &[b'0'; 900], b"8 grp:x"].concat(),
            swallowed,
        ),
        ("tagged, its size unreadable", b"put 0 0 60 x grp:g".to_vec(), closed),
        (
            "tagged, past 906 bytes, its size unreadable",
            [&b"put 0 0 60 x"[..], &[b' '; 961], b"grp:x"].concat(),
            closed,
        ),
    ]
}

/// What a client reads until the probe is answered or the connection
/// ends, `INSERTED <n>` masked as `INSERTED <id>`.
fn replies_to_the_probe(c: &mut std::net::TcpStream) -> String {
    let mut got = Vec::new();
    let mut chunk = [0; 256];
    while !got.ends_with(b"USING default\r\n") {
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    text.split_inclusive("\r\n")
        .map(|line| if line.starts_with("INSERTED ") { "INSERTED <id>\r\n" } else { line })
        .collect()
}

/// What a line does must not depend on how it is split (reference §1.2,
/// §3.1 step 4): every put line, with its body and a probe, in two writes
/// at every split point, and a byte a write, gets what one write gets;
/// no cut lets a refused tagged put's body run. The server is given a
/// moment to read the first part alone; a slow machine that reads both
/// at once tries one write again, which passes.
#[test]
fn every_put_line_split_anywhere_answers_as_one_write_does() {
    let server = common::start();
    let addr = server.addr;
    let connect = move || {
        let c = std::net::TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        c.set_read_timeout(Some(common::REPLY_TIMEOUT)).unwrap();
        c
    };
    let threads: Vec<_> = put_lines()
        .into_iter()
        .map(|(what, line, expected)| {
            std::thread::spawn(move || {
                let bytes = [&line[..], b"\r\nuse evil\r\nuse default\r\n"].concat();
                let closes = !expected.ends_with("USING default\r\n");
                let mut c = connect();
                c.write_all(&bytes).unwrap();
                assert_eq!(replies_to_the_probe(&mut c), expected, "{what}: one write");
                let mut c = connect();
                for cut in 0..=bytes.len() {
                    if closes {
                        c = connect();
                    }
                    c.write_all(&bytes[..cut]).unwrap();
                    std::thread::sleep(Duration::from_millis(3));
                    // A connection the server has closed may refuse the rest.
                    let _ = c.write_all(&bytes[cut..]);
                    assert_eq!(replies_to_the_probe(&mut c), expected, "{what}: split at byte {cut}");
                }
                if !closes {
                    // No split left anything behind: the next answer is the probe's.
                    c.write_all(b"use default\r\n").unwrap();
                    assert_eq!(replies_to_the_probe(&mut c), "USING default\r\n", "{what}: after the splits");
                }
                let mut c = connect();
                for byte in &bytes {
                    let _ = c.write_all(std::slice::from_ref(byte));
                    std::thread::sleep(Duration::from_micros(500));
                }
                assert_eq!(replies_to_the_probe(&mut c), expected, "{what}: a byte a write");
            })
        })
        .collect();
    for thread in threads {
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

/// `--max-job-memory` counts what a put's tags keep (reference §3.1a,
/// Memory): a job is its body + 200; its groups, concurrency key and
/// retry limit 40 each; a group's or key's name once, however many jobs
/// name it, twice its length + 192, until its last job goes.
#[test]
fn the_memory_limit_counts_tags_and_each_name_once() {
    let server = common::start_args(&["--max-job-memory", "2000"]);
    let mut c = server.connect();
    let (group, key) = ("g".repeat(50), "c".repeat(50));
    fn put(c: &mut common::Client, tags: &str, size: usize) -> String {
        let tags = if tags.is_empty() { String::new() } else { format!(" {tags}") };
        c.send(format!("put 0 0 60 {size}{tags}\r\n{}\r\n", "b".repeat(size)));
        c.reply()
    }
    // 1,200 of 2,000.
    assert_eq!(put(&mut c, "", 1000), "INSERTED 1\r\n");
    // 269 + 200, one entry, the name once though named twice: 292 + 40.
    let both = format!("grp:{group} aft:{group}");
    assert_eq!(put(&mut c, &both, 269), "OUT_OF_MEMORY\r\n", "1,200 + 469 + 332 = 2,001");
    assert_eq!(put(&mut c, "", 269), "INSERTED 2\r\n", "the same put without its tags fits, the id unused");
    assert_eq!(put(&mut c, &both, 268), "OUT_OF_MEMORY\r\n", "1,669 + 468 + 332");
    c.send("delete 2\r\n");
    c.expect("DELETED\r\n");
    assert_eq!(put(&mut c, &both, 268), "INSERTED 3\r\n", "2,000: the limit itself");
    // A second job of the group: its entry, the name counted already.
    c.send("delete 1\r\n");
    c.expect("DELETED\r\n");
    let member = format!("grp:{group}");
    assert_eq!(put(&mut c, &member, 961), "OUT_OF_MEMORY\r\n", "800 + 1,161 + 40");
    assert_eq!(put(&mut c, &member, 960), "INSERTED 4\r\n");
    // The group's last job gone, its name is given back.
    for id in [3, 4] {
        c.send(format!("delete {id}\r\n"));
        c.expect("DELETED\r\n");
    }
    let con = format!("con:{key}:2");
    assert_eq!(put(&mut c, &con, 1469), "OUT_OF_MEMORY\r\n", "1,669 + 292 + 40");
    assert_eq!(put(&mut c, &con, 1468), "INSERTED 5\r\n");
    c.send("delete 5\r\n");
    c.expect("DELETED\r\n");
    assert_eq!(put(&mut c, "max:3", 1761), "OUT_OF_MEMORY\r\n", "1,961 + 40");
    assert_eq!(put(&mut c, "max:3", 1760), "INSERTED 6\r\n");
    // Every tag at once: a unique key in `default` is 7 + 1 + 64 more.
    c.send("delete 6\r\n");
    c.expect("DELETED\r\n");
    let all = format!("idp:k grp:{group} aft:a con:{key} max:1");
    // 200 + 40 * 3 + (292 + 194 + 292) + 72 = 1,170.
    assert_eq!(put(&mut c, &all, 831), "OUT_OF_MEMORY\r\n");
    assert_eq!(put(&mut c, &all, 830), "INSERTED 7\r\n");
}

// -------------------------------------------------------------------
// CR, LF, NUL, empty lines, case (1.2)
// -------------------------------------------------------------------

#[test]
fn a_lone_cr_is_an_ordinary_byte_of_the_line() {
    // beanstalkd's lone-CR stall is deliberately not copied (reference §1.2).
    let server = common::start();
    let mut c = server.connect();
    c.send("use a\rb\r\n");
    c.expect(BAD);
    c.send("stats\rx\r\n");
    c.expect(BAD);
    c.send("\r\r\n");
    c.expect(UNKNOWN);
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn a_bare_lf_does_not_end_a_line() {
    let server = common::start();
    let mut c = server.connect();
    c.send("list-tube-used\n");
    c.expect_silence(SILENCE);
    c.send("\r\n");
    c.expect(BAD);
    c.send("\n\r\n");
    c.expect(UNKNOWN);
    c.send("list-tube-used\r\n\n");
    c.expect("USING default\r\n");
    // The stray LF starts the next line.
    c.send("stats\r\n");
    c.expect(UNKNOWN);
}

#[test]
fn a_nul_byte_in_a_line_is_bad_format_whatever_the_command() {
    let server = common::start();
    let mut c = server.connect();
    for line in [&b"\0"[..], b"stats\0", b"use a\0b", b"\0garbage", b"list-tube-used\0", b"foo\0bar"] {
        c.send([line, b"\r\n"].concat());
        c.expect(BAD);
    }
    // A put line with a NUL reads no body.
    c.send("put 0 0 1 1\0\r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    // In a body, NUL, CR and LF are just data.
    c.send("put 0 0 1 5\r\na\0\r\nb\r\n");
    c.expect("INSERTED 1\r\n");
    c.send("peek 1\r\n");
    c.expect("FOUND 1 5\r\na\0\r\nb\r\n");
}

#[test]
fn an_empty_line_is_unknown_command() {
    let server = common::start();
    let mut c = server.connect();
    c.send("\r\n\r\n");
    c.expect("UNKNOWN_COMMAND\r\nUNKNOWN_COMMAND\r\n");
}

#[test]
fn commands_are_case_sensitive() {
    let server = common::start();
    let mut c = server.connect();
    for line in ["PUT 0 0 1 1", "Put 0 0 1 1", "Stats", "STATS", "Use foo", "LIST-TUBES", "Reserve", "QUIT"] {
        assert_eq!(c.cmd(line), UNKNOWN, "{line:?}");
    }
}

#[test]
fn tube_names_are_case_sensitive() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use Foo"), "USING Foo\r\n");
    assert_eq!(c.cmd("watch foo"), "WATCHING 2\r\n");
    assert_eq!(c.cmd("stats-tube FOO"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 26\r\n---\n- default\n- Foo\n- foo\n\r\n");
}

// -------------------------------------------------------------------
// Command recognition (1.3)
// -------------------------------------------------------------------

#[test]
fn commands_whose_prefix_needs_a_trailing_space_are_unknown_without_it() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "put",
        "use",
        "delete",
        "kick",
        "kick-job",
        "touch",
        "bury",
        "release",
        "watch",
        "ignore",
        "peek",
        "list-tube",
        "use\tfoo",
        "peek\t1",
    ] {
        assert_eq!(c.cmd(line), UNKNOWN, "{line:?}");
    }
}

#[test]
fn matched_commands_with_an_empty_or_invalid_argument_are_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "put ",
        "use ",
        "kick ",
        "peek ",
        "kick-job ",
        "reserve-job ",
        "stats-job ",
        "reserve-with-timeout ",
        "delete ",
        "touch ",
        "bury ",
        "release ",
        "watch ",
        "ignore ",
        "stats-tube ",
        "pause-tube",
        "pause-tube ",
    ] {
        assert_eq!(c.cmd(line), BAD, "{line:?}");
    }
}

#[test]
fn commands_without_arguments_must_match_exactly() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "reserve-job",
        "reserve-with-timeout",
        "reservex",
        "reserve ",
        "stats-job",
        "stats-tube",
        "statsx",
        "stats ",
        "stats 1",
        "list-tubesx",
        "list-tubes ",
        "list-tube-used ",
        "list-tube-usedx",
        "list-tubes-watchedx",
        "list-tubes-watched ",
        "peek-readyx",
        "peek-ready ",
        "peek-delayed ",
        "peek-buriedx",
    ] {
        assert_eq!(c.cmd(line), BAD, "{line:?}");
    }
}

#[test]
fn quit_is_a_bare_prefix_that_closes_without_a_reply() {
    let server = common::start();
    for line in ["quit", "quitx", "quit now", "quit-tube a 1"] {
        let mut c = server.connect();
        c.send(format!("{line}\r\nlist-tube-used\r\n"));
        c.expect_closed();
    }
}

#[test]
fn pause_tube_needs_no_space_before_the_name() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("pause-tubedefault 5"), "PAUSED\r\n");
    assert_eq!(c.cmd("pause-tube   default   0"), "PAUSED\r\n");
    assert_eq!(c.cmd("pause-tube default*5"), BAD);
    assert_eq!(c.cmd("pause-tube foo10"), BAD);
    assert_eq!(c.cmd("pause-tube default 5 "), BAD);
    assert_eq!(c.cmd("pause-tube default"), BAD);
}

// -------------------------------------------------------------------
// Numbers (1.4)
// -------------------------------------------------------------------

#[test]
fn numbers_accept_leading_zeros_and_extra_spaces() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put  00   0  1   01\r\nx\r\n");
    c.expect("INSERTED 1\r\n");
    for line in ["peek 01", "peek  1", "peek 0000000000000000000000000000001", "peek    00001"] {
        assert_eq!(c.cmd(line), "FOUND 1 1\r\nx\r\n", "{line:?}");
    }
    assert_eq!(c.cmd("reserve-job 001"), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(c.cmd("release  1  007  0"), "RELEASED\r\n");
    assert_eq!(c.cmd("stats-job 1").lines().nth(5), Some("pri: 7"));
}

#[test]
fn fields_must_be_separated_by_spaces_and_nothing_may_follow_the_last() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "release 1x 2 3",
        "release 12 3",
        "release 1 2 3 4",
        "release 1 2 3 ",
        "bury 1 2 3",
        "delete 1 ",
        "delete 1x",
        "peek \t1",
        "touch 1\t",
        "kick-job 1 ",
        "stats-job 1x",
        "reserve-job 1 1",
    ] {
        assert_eq!(c.cmd(line), BAD, "{line:?}");
    }
}

#[test]
fn u32_fields_reject_4294967296_and_accept_4294967295() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "put 4294967296 0 1 1",
        "put 0 4294967296 1 1",
        "put 0 0 4294967296 1",
        "put 0 0 1 4294967296",
        "put 0 0 1 99999999999999999999999",
        "release 1 4294967296 0",
        "release 1 0 4294967296",
        "bury 1 4294967296",
        "pause-tube default 4294967296",
    ] {
        assert_eq!(c.cmd(line), BAD, "{line:?}");
    }
    c.send("put 4294967295 4294967295 4294967295 0\r\n\r\n");
    c.expect("INSERTED 1\r\n");
    let job = c.yaml_map("stats-job 1");
    assert_eq!(
        (job["pri"].as_str(), job["delay"].as_str(), job["ttr"].as_str()),
        ("4294967295", "4294967295", "4294967295")
    );
}

#[test]
fn u64_ids_reject_2_to_the_64() {
    let server = common::start();
    let mut c = server.connect();
    let max = "18446744073709551615";
    let over = "18446744073709551616";
    for cmd in ["peek", "delete", "touch", "kick-job", "stats-job", "reserve-job"] {
        assert_eq!(c.cmd(&format!("{cmd} {max}")), "NOT_FOUND\r\n", "{cmd}");
        assert_eq!(c.cmd(&format!("{cmd} {over}")), BAD, "{cmd}");
    }
    assert_eq!(c.cmd(&format!("release {max} 0 0")), "NOT_FOUND\r\n");
    assert_eq!(c.cmd(&format!("release {over} 0 0")), BAD);
    assert_eq!(c.cmd(&format!("bury {max} 0")), "NOT_FOUND\r\n");
    assert_eq!(c.cmd(&format!("bury {over} 0")), BAD);
}

#[test]
fn signs_are_bad_format_except_in_kick() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "peek +1",
        "peek -1",
        "put -1 0 1 1",
        "put +1 0 1 1",
        "release 1 -1 0",
        "bury 1 +0",
        "reserve-with-timeout -1",
        "reserve-with-timeout +1",
        "pause-tube default -1",
        "pause-tube default +1",
    ] {
        assert_eq!(c.cmd(line), BAD, "{line:?}");
    }
    assert_eq!(c.cmd("put 0 100 1 1\r\nx"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("put 0 100 1 1\r\ny"), "INSERTED 2\r\n");
    assert_eq!(c.cmd("put 0 100 1 1\r\nz"), "INSERTED 3\r\n");
    assert_eq!(c.cmd("kick +1"), "KICKED 1\r\n");
    assert_eq!(c.cmd("kick -1"), "KICKED 2\r\n");
}

#[test]
fn kick_parses_its_bound_like_strtoul() {
    let server = common::start();
    let mut c = server.connect();
    for _ in 0..5 {
        assert_eq!(c.put(0, 100, 1, "x").split(' ').next(), Some("INSERTED"));
    }
    assert_eq!(c.cmd("kick \t1"), "KICKED 1\r\n");
    assert_eq!(c.cmd("kick 1x"), "KICKED 1\r\n");
    assert_eq!(c.cmd("kick 4294967296"), "KICKED 0\r\n");
    assert_eq!(c.cmd("kick 4294967297 junk"), "KICKED 1\r\n");
    assert_eq!(c.cmd("kick 18446744073709551615"), "KICKED 2\r\n");
    assert_eq!(c.cmd("kick 18446744073709551616"), BAD);
    assert_eq!(c.cmd("kick x"), BAD);
    assert_eq!(c.cmd("kick -"), BAD);
}

#[test]
fn reserve_with_timeout_is_bounded_by_2147483647_and_ignores_trailing_bytes() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("reserve-with-timeout 2147483648"), BAD);
    assert_eq!(c.cmd("reserve-with-timeout 4294967296"), BAD);
    assert_eq!(c.cmd("reserve-with-timeout 0 junk"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0x"), "TIMED_OUT\r\n");
    assert_eq!(c.cmd("reserve-with-timeout   00"), "TIMED_OUT\r\n");
    c.put_ok("x");
    assert_eq!(c.cmd("reserve-with-timeout 2147483647"), "RESERVED 1 1\r\nx\r\n");
}

#[test]
fn ttr_0_becomes_1() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.put(0, 0, 0, "x"), "INSERTED 1\r\n");
    assert_eq!(c.yaml_map("stats-job 1")["ttr"], "1");
}

// -------------------------------------------------------------------
// Tube names (1.4)
// -------------------------------------------------------------------

#[test]
fn tube_names_of_200_bytes_are_fine_and_201_are_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    let ok = "x".repeat(200);
    let long = "x".repeat(201);
    assert_eq!(c.cmd(&format!("use {ok}")), format!("USING {ok}\r\n"));
    assert_eq!(c.cmd(&format!("watch {ok}")), "WATCHING 2\r\n");
    assert!(c.cmd(&format!("stats-tube {ok}")).starts_with("OK "));
    assert_eq!(c.cmd(&format!("pause-tube {ok} 0")), "PAUSED\r\n");
    assert_eq!(c.cmd(&format!("ignore {ok}")), "WATCHING 1\r\n");
    for cmd in ["use", "watch", "ignore", "stats-tube"] {
        assert_eq!(c.cmd(&format!("{cmd} {long}")), BAD, "{cmd}");
    }
    assert_eq!(c.cmd(&format!("pause-tube {long} 0")), BAD);
    assert_eq!(c.cmd("list-tubes-watched"), "OK 14\r\n---\n- default\n\r\n");
}

#[test]
fn tube_names_use_only_letters_digits_and_minus_plus_slash_semicolon_dot_dollar_underscore_parens() {
    let server = common::start();
    let mut c = server.connect();
    let all = "AZaz09-+/;.$_()";
    assert_eq!(c.cmd(&format!("use {all}")), format!("USING {all}\r\n"));
    for ch in all.chars().filter(|&ch| ch != '-') {
        assert_eq!(c.cmd(&format!("use {ch}")), format!("USING {ch}\r\n"));
    }
    for byte in (1u8..=255).filter(|b| !b.is_ascii_alphanumeric() && !b"-+/;.$_()".contains(b)) {
        let line = [&b"use a"[..], &[byte], b"b\r\n"].concat();
        c.send(&line);
        c.expect(BAD);
    }
    assert_eq!(c.cmd("list-tube-used"), "USING )\r\n");
}

#[test]
fn tube_names_must_not_start_with_minus_or_have_extra_spaces() {
    let server = common::start();
    let mut c = server.connect();
    for line in [
        "use -foo",
        "use -",
        "watch -foo",
        "ignore -foo",
        "stats-tube -foo",
        "pause-tube -foo 1",
        "use  foo",
        "use foo ",
        "watch foo bar",
        "ignore a b",
    ] {
        assert_eq!(c.cmd(line), BAD, "{line:?}");
    }
    assert_eq!(c.cmd("use a-"), "USING a-\r\n");
    assert_eq!(c.cmd("list-tubes"), "OK 19\r\n---\n- default\n- a-\n\r\n");
}

// -------------------------------------------------------------------
// Job bodies and -z (1.5)
// -------------------------------------------------------------------

#[test]
fn with_z_10_a_10_byte_body_is_inserted_and_11_bytes_is_job_too_big() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    assert_eq!(c.stat("max-job-size"), "10");
    assert_eq!(c.cmd("put 0 0 1 10\r\n0123456789"), "INSERTED 1\r\n");
    // The 13 bytes are swallowed unseen: they would quit if parsed.
    c.send("put 0 0 1 11\r\nquit\r\nstats\r");
    c.expect_silence(SILENCE);
    c.send("\n");
    c.expect("JOB_TOO_BIG\r\n");
    // No id was used up.
    assert_eq!(c.cmd("put 0 0 1 1\r\nx"), "INSERTED 2\r\n");
}

#[test]
fn job_too_big_comes_before_the_trailing_junk_check() {
    let server = common::start_args(&["-z", "10"]);
    let mut c = server.connect();
    c.send("put 0 0 1 11 junk\r\n0123456789a\r\n");
    c.expect("JOB_TOO_BIG\r\n");
    c.send("put 0 0 1 10 junk\r\nlist-tube-used\r\n");
    c.expect("BAD_FORMAT\r\nUSING default\r\n");
}

#[test]
fn with_z_0_only_empty_bodies_fit() {
    let server = common::start_args(&["-z", "0"]);
    let mut c = server.connect();
    assert_eq!(c.stat("max-job-size"), "0");
    assert_eq!(c.cmd("put 0 0 1 0\r\n"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("put 0 0 1 1\r\nx"), "JOB_TOO_BIG\r\n");
    assert_eq!(c.cmd("peek 1"), "FOUND 1 0\r\n\r\n");
}

#[test]
fn z_above_one_gib_is_clamped_to_1073741824() {
    let server = common::start_args(&["-z", "2000000000"]);
    assert_eq!(server.connect().stat("max-job-size"), "1073741824");
}

#[test]
fn default_max_job_size_is_65535() {
    let server = common::start();
    let mut c = server.connect();
    let body = "b".repeat(65535);
    assert_eq!(c.put(0, 0, 1, &body), "INSERTED 1\r\n");
    let body = "b".repeat(65536);
    assert_eq!(c.put(0, 0, 1, &body), "JOB_TOO_BIG\r\n");
    assert_eq!(c.put_ok("x"), 2);
}

#[test]
fn job_too_big_is_not_answered_until_the_body_arrives() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 65536\r\n");
    c.expect_silence(SILENCE);
    c.send(vec![b'z'; 65536]);
    c.expect_silence(SILENCE);
    c.send("\r\n");
    c.expect("JOB_TOO_BIG\r\n");
}

#[test]
fn eof_in_mid_body_sends_nothing_and_uses_up_an_id() {
    let server = common::start();
    let mut a = server.connect();
    a.send("put 0 0 1 10\r\nabc");
    a.half_close();
    a.expect_closed();
    let mut b = server.connect();
    assert_eq!(b.put_ok("x"), 2);
    assert_eq!(b.cmd("peek 1"), "NOT_FOUND\r\n");
    assert_eq!(b.stat("total-jobs"), "1");
}

#[test]
fn a_body_without_its_crlf_is_expected_crlf_and_uses_up_an_id() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 3\r\nabcde\r\n");
    c.expect("EXPECTED_CRLF\r\n");
    c.expect_closed();
    let mut c = server.connect();
    assert_eq!(c.put_ok("x"), 2);
    assert_eq!(c.cmd("peek 1"), "NOT_FOUND\r\n");
}

#[test]
fn a_put_line_with_trailing_junk_leaves_its_body_to_be_parsed_as_commands() {
    let server = common::start();
    let mut c = server.connect();
    c.send("put 0 0 1 1 \r\nx\r\n");
    c.expect("BAD_FORMAT\r\nUNKNOWN_COMMAND\r\n");
    c.send("put 0 0 1 14x\r\nlist-tube-used\r\n");
    c.expect("BAD_FORMAT\r\nUSING default\r\n");
    c.send("put 0 0 1\r\nuse body\r\n");
    c.expect("BAD_FORMAT\r\nUSING body\r\n");
    // None of them used an id.
    assert_eq!(c.put_ok("x"), 1);
}

#[test]
fn pipelined_commands_are_answered_in_order() {
    let server = common::start();
    let mut c = server.connect();
    c.send("use a\r\nuse b\r\nlist-tube-used\r\nput 0 0 1 2\r\nhi\r\npeek 1\r\n");
    c.expect("USING a\r\nUSING b\r\nUSING b\r\nINSERTED 1\r\nFOUND 1 2\r\nhi\r\n");
}

// -------------------------------------------------------------------
// Garbage
// -------------------------------------------------------------------

/// A fixed, seeded byte stream from the shared xorshift generator.
impl Rng {
    /// Random bytes with a CRLF now and then, so that many short garbage
    /// lines get parsed as well as long ones.
    fn garbage(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 2);
        while out.len() < len {
            let r = self.next();
            if r & 63 == 0 {
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(&r.to_le_bytes()[..4]);
            }
        }
        out
    }
}

#[test]
fn random_garbage_on_one_connection_never_stops_another_from_being_served() {
    let server = common::start();
    let mut garbage_conn = server.connect();
    // Drain whatever the garbage connection is told, so the server never
    // blocks writing to it.
    let mut reader = garbage_conn.stream.try_clone().unwrap();
    let drain = std::thread::spawn(move || {
        let mut sink = [0; 4096];
        let mut total = 0;
        while let Ok(n) = reader.read(&mut sink) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let mut other = server.connect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..24 {
        let chunk = rng.garbage(16 * 1024);
        // The server may close the garbage connection (a line could start
        // with "quit"); the other connection must not care.
        let _ = garbage_conn.stream.write_all(&chunk);
        assert_eq!(other.cmd("list-tube-used"), "USING default\r\n", "round {round}");
    }
    let _ = garbage_conn.stream.write_all(b"\r\nquit\r\n");
    assert!(drain.join().unwrap() > 0, "garbage got no replies at all");
    assert_eq!(other.put_ok("still here"), 1);
    let mut fresh = server.connect();
    assert_eq!(fresh.cmd("peek 1"), "FOUND 1 10\r\nstill here\r\n");
    assert_eq!(fresh.stat("current-connections"), "2");
}

/// A script touching every framing rule; its replies must not depend on how
/// its bytes are cut into writes.
fn framing_script() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(b"put 0 0 1 5\r\na\r\nb\0\r\n");
    s.extend_from_slice(&line_of(225));
    s.extend_from_slice(b"use a\rb\r\nlist-tube-used\n\r\n\r\n");
    s.extend_from_slice(&line_of(224 * 3 + 5));
    s.extend_from_slice(b"put 0 0 1 11\r\nquit\r\nstats\r\n");
    s.extend_from_slice(b"put 0 0 1 1 \r\nx\r\n");
    s.extend_from_slice(b"stats\0\r\npeek 1\r\npeek 3\r\n");
    s.extend_from_slice(&line_of(226));
    s.extend_from_slice(b"put 0 0 1 10\r\n0123456789\r\npeek-ready\r\n");
    // Last, for it ends the connection (reference §1.5).
    s.extend_from_slice(b"put 0 0 1 3\r\nabcde");
    s
}

#[test]
fn replies_do_not_depend_on_how_the_bytes_are_split() {
    let expected = "INSERTED 1\r\nBAD_FORMAT\r\nBAD_FORMAT\r\nBAD_FORMAT\r\nUNKNOWN_COMMAND\r\n\
         BAD_FORMAT\r\nJOB_TOO_BIG\r\nBAD_FORMAT\r\n\
         UNKNOWN_COMMAND\r\nBAD_FORMAT\r\nFOUND 1 5\r\na\r\nb\0\r\nNOT_FOUND\r\nBAD_FORMAT\r\n\
         INSERTED 2\r\nFOUND 1 5\r\na\r\nb\0\r\nEXPECTED_CRLF\r\n";
    let script = framing_script();
    let mut rng = Rng(12345);
    for max_piece in [script.len(), 1, 2, 3, 7, 223, 225] {
        let server = common::start_args(&["-z", "10"]);
        let mut c = server.connect();
        let mut rest = &script[..];
        while !rest.is_empty() {
            let n = (1 + rng.next() as usize % max_piece).min(rest.len());
            c.send(&rest[..n]);
            rest = &rest[n..];
        }
        c.expect(expected);
        c.expect_closed();
    }
}

#[test]
fn max_job_memory_refuses_puts_with_out_of_memory_until_jobs_are_deleted() {
    // Each 300-byte job counts 300 + 200 bytes against the limit.
    let server = common::start_args(&["--max-job-memory", "1000"]);
    let mut c = server.connect();
    let body = "x".repeat(300);
    assert_eq!(c.put(0, 0, 60, &body), "INSERTED 1\r\n");
    assert_eq!(c.put(0, 0, 60, &body), "INSERTED 2\r\n");
    // The body is swallowed unseen, then refused; no id is used up.
    assert_eq!(c.put(0, 0, 60, &body), "OUT_OF_MEMORY\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.put(0, 0, 60, &body), "INSERTED 3\r\n");
    // A body still arriving holds its claim; one that never arrives gives it
    // back when its connection goes.
    assert_eq!(c.cmd("delete 2"), "DELETED\r\n");
    let mut quitter = server.connect();
    quitter.send(format!("put 0 0 60 300\r\n{}", &body[..100]));
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    drop(quitter);
    let deadline = std::time::Instant::now() + common::HANG_GUARD;
    loop {
        // Id 4 or 5, depending on whether the abandoned put was seen first.
        match c.put(0, 0, 60, &body).as_str() {
            "INSERTED 4\r\n" | "INSERTED 5\r\n" => break,
            "OUT_OF_MEMORY\r\n" => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "the abandoned body's memory was never released");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
