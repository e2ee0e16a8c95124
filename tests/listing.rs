//! Listing jobs over the protocol (reference §3.29): `list-jobs-ready`,
//! `-delayed`, `-reserved` and `-buried`, the used tube's job ids in the
//! order each state serves them, a page at a time after a cursor.
mod common;

use std::collections::HashMap;
use std::thread;

use common::Client;

/// The ids of a `list-jobs-*` reply, checked to be the YAML list it must be.
fn ids(reply: &str) -> Vec<u64> {
    let (head, body) = reply.split_once("\r\n").unwrap_or_else(|| panic!("{reply:?}"));
    let body = body.strip_suffix("\r\n").unwrap_or_else(|| panic!("{reply:?}"));
    assert_eq!(head, format!("OK {}", body.len()), "{reply:?}");
    let items = body.strip_prefix("---\n").unwrap_or_else(|| panic!("{reply:?}"));
    items.lines().map(|line| line.strip_prefix("- ").unwrap().parse().unwrap()).collect()
}

#[test]
fn each_state_is_listed_in_the_order_it_serves_byte_for_byte() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("list-jobs-ready"), "OK 4\r\n---\n\r\n");
    let a = c.put(5, 0, 60, "a");
    let b = c.put(3, 0, 60, "b");
    let _ = c.put(3, 0, 60, "c");
    assert_eq!((a.as_str(), b.as_str()), ("INSERTED 1\r\n", "INSERTED 2\r\n"));
    // Ready: priority, then id.
    assert_eq!(c.cmd("list-jobs-ready"), "OK 16\r\n---\n- 2\n- 3\n- 1\n\r\n");
    // Delayed: due time, then id.
    c.put(0, 200, 60, "d");
    c.put(0, 100, 60, "e");
    assert_eq!(c.cmd("list-jobs-delayed"), "OK 12\r\n---\n- 5\n- 4\n\r\n");
    // Reserved: TTR deadline, then id, whoever holds them.
    c.put(9, 0, 5, "f");
    let mut worker = server.connect();
    for reply in ["RESERVED 2 1\r\nb\r\n", "RESERVED 3 1\r\nc\r\n", "RESERVED 1 1\r\na\r\n"] {
        assert_eq!(worker.cmd("reserve"), reply);
    }
    assert_eq!(c.cmd("reserve"), "RESERVED 6 1\r\nf\r\n");
    assert_eq!(c.cmd("list-jobs-reserved"), "OK 20\r\n---\n- 6\n- 2\n- 3\n- 1\n\r\n");
    assert_eq!(c.cmd("list-jobs-reserved 2 2"), "OK 12\r\n---\n- 3\n- 1\n\r\n");
    assert_eq!(worker.cmd("release 1 9 0"), "RELEASED\r\n");
    // Buried: in the order of burying, which kick follows.
    assert_eq!(worker.cmd("bury 3 0"), "BURIED\r\n");
    assert_eq!(worker.cmd("bury 2 0"), "BURIED\r\n");
    assert_eq!(c.cmd("list-jobs-buried"), "OK 12\r\n---\n- 3\n- 2\n\r\n");
    assert_eq!(c.cmd("list-jobs-reserved"), "OK 8\r\n---\n- 6\n\r\n");
    // Only the used tube's.
    c.cmd("use other");
    c.put(0, 0, 60, "g");
    assert_eq!(worker.cmd("watch other"), "WATCHING 2\r\n");
    assert_eq!(worker.cmd("reserve"), "RESERVED 7 1\r\ng\r\n");
    assert_eq!(c.cmd("list-jobs-reserved"), "OK 8\r\n---\n- 7\n\r\n");
    assert_eq!(c.cmd("list-jobs-ready"), "OK 4\r\n---\n\r\n");
    assert_eq!(c.cmd("list-jobs-buried"), "OK 4\r\n---\n\r\n");
}

#[test]
fn a_page_starts_after_its_cursor_and_a_cursor_gone_is_not_found() {
    let server = common::start();
    let mut c = server.connect();
    for pri in [4, 2, 3, 1] {
        c.put(pri, 0, 60, "x");
    }
    assert_eq!(c.cmd("list-jobs-ready 2"), "OK 12\r\n---\n- 4\n- 2\n\r\n");
    assert_eq!(c.cmd("list-jobs-ready 2 2"), "OK 12\r\n---\n- 3\n- 1\n\r\n");
    assert_eq!(c.cmd("list-jobs-ready  02  00001"), "OK 4\r\n---\n\r\n");
    assert_eq!(c.cmd("list-jobs-ready 1000 1"), "OK 4\r\n---\n\r\n");
    // Job 4 leaves the ready list: its place is gone.
    assert_eq!(c.cmd("reserve"), "RESERVED 4 1\r\nx\r\n");
    assert_eq!(c.cmd("list-jobs-ready 2 4"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("list-jobs-reserved 1 4"), "OK 4\r\n---\n\r\n");
    assert_eq!(c.cmd("list-jobs-buried 5 4"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("list-jobs-delayed 5 99"), "NOT_FOUND\r\n");
    // Nothing changed, and nothing was counted.
    assert_eq!(c.stat("current-jobs-ready"), "3");
    assert_eq!(c.stat("current-jobs-reserved"), "1");
}

#[test]
fn lines_that_are_no_page_are_refused_as_the_reference_says() {
    let server = common::start();
    let mut c = server.connect();
    for unknown in ["list-jobs-readyx", "list-jobs-ready\t1", "list-jobs-", "list-jobs-kicked", "list-jobs"] {
        assert_eq!(c.cmd(unknown), "UNKNOWN_COMMAND\r\n", "{unknown:?}");
    }
    for bad in [
        "list-jobs-ready ",
        "list-jobs-ready 0",
        "list-jobs-ready 1001",
        "list-jobs-ready -1",
        "list-jobs-ready +1",
        "list-jobs-ready 1 ",
        "list-jobs-ready 1 2 3",
        "list-jobs-buried x",
        "list-jobs-delayed 1 18446744073709551616",
    ] {
        assert_eq!(c.cmd(bad), "BAD_FORMAT\r\n", "{bad:?}");
    }
    assert_eq!(c.cmd("list-jobs-buried 1000"), "OK 4\r\n---\n\r\n");
}

/// Puts `count` jobs with priorities that do not follow their ids,
/// pipelined; returns each id's priority.
fn fill(c: &mut Client, count: u64) -> HashMap<u64, u32> {
    let mut batch = String::new();
    for i in 0..count {
        batch.push_str(&format!("put {} 0 60 1\r\nx\r\n", i * 7919 % 1000));
    }
    c.send(batch);
    (0..count)
        .map(|i| {
            let reply = c.reply();
            let id = reply.trim_end().strip_prefix("INSERTED ").unwrap().parse().unwrap();
            (id, (i * 7919 % 1000) as u32)
        })
        .collect()
}

/// Every page of `list-jobs-ready`, following each page's last id.
fn every_page(c: &mut Client) -> Vec<Vec<u64>> {
    let (mut pages, mut after) = (Vec::new(), String::new());
    loop {
        let page = ids(&c.cmd(&format!("list-jobs-ready 1000{after}")));
        let last = page.last().copied();
        let short = page.len() < 1000;
        pages.push(page);
        match last {
            Some(id) if !short => after = format!(" {id}"),
            _ => return pages,
        }
    }
}

#[test]
fn a_tube_larger_than_a_piece_is_listed_page_by_page_exactly() {
    let server = common::start();
    let mut c = server.connect();
    let pri = fill(&mut c, 40_000);
    let listed: Vec<u64> = every_page(&mut c).concat();
    let mut want: Vec<u64> = pri.keys().copied().collect();
    want.sort_by_key(|id| (pri[id], *id));
    assert_eq!(listed, want);
}

#[test]
fn a_tube_listed_while_a_worker_takes_its_jobs_is_listed_in_order() {
    let server = common::start();
    let mut c = server.connect();
    let pri = fill(&mut c, 40_000);
    let addr = server.addr;
    let worker = thread::spawn(move || {
        let mut w = Client::connect(addr);
        for _ in 0..5_000 {
            let reply = w.cmd("reserve-with-timeout 0");
            let id = reply.split(' ').nth(1).unwrap().to_owned();
            assert_eq!(w.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    });
    let place = |id: &u64| (pri[id], *id);
    let (mut pages, mut listed) = (0, 0);
    let mut page: Vec<u64> = Vec::new();
    while !worker.is_finished() || pages < 3 {
        // After the last id of the page before that is still ready (the
        // worker may have taken the later ones: their places are gone).
        let mut reply = String::from("NOT_FOUND\r\n");
        for cursor in page.iter().rev().map(|id| format!(" {id}")).chain([String::new()]) {
            reply = c.cmd(&format!("list-jobs-ready 1000{cursor}"));
            if reply != "NOT_FOUND\r\n" {
                let after = cursor.trim().parse().ok();
                page = ids(&reply);
                assert!(page.windows(2).all(|w| place(&w[0]) < place(&w[1])), "a page out of order");
                assert!(
                    after.is_none_or(|after| page.first().is_none_or(|first| place(&after) < place(first)))
                );
                break;
            }
        }
        assert_ne!(reply, "NOT_FOUND\r\n");
        (pages, listed) = (pages + 1, listed + page.len());
        if page.len() < 1000 {
            page.clear();
        }
    }
    worker.join().unwrap();
    assert!(listed > 0);
    // Quiet again: every page exact.
    let listed = every_page(&mut c).concat();
    assert_eq!(listed.len(), 35_000);
}
