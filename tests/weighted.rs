//! tuber's weighted reserve (reference §3.9, §3.26): `watch <tube>
//! <weight>`, `reserve-mode`, and how a reserve then chooses among the
//! tubes with a job ready.
mod common;

use std::time::Duration;

use common::Client;

/// Puts `count` jobs of body `body` into tube `tube`.
fn fill(c: &mut Client, tube: &str, body: &str, count: usize) {
    assert_eq!(c.cmd(&format!("use {tube}")), format!("USING {tube}\r\n"));
    for _ in 0..count {
        c.put_ok(body);
    }
}

/// Reserves `count` jobs and counts them by body.
fn reserve_counting(c: &mut Client, count: usize, bodies: [&str; 2]) -> [usize; 2] {
    let mut seen = [0; 2];
    for _ in 0..count {
        let reply = c.cmd("reserve-with-timeout 0");
        let body = reply.lines().nth(1).unwrap_or_default();
        let which = bodies.iter().position(|&b| b == body).unwrap_or_else(|| panic!("{reply:?}"));
        seen[which] += 1;
    }
    seen
}

#[test]
fn watch_takes_a_weight_as_tuber_reads_it() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("watch foo 4"), "WATCHING 2\r\n");
    // Again: the weight changes, the list does not.
    assert_eq!(c.cmd("watch foo 2"), "WATCHING 2\r\n");
    assert_eq!(c.cmd("watch bar +9999"), "WATCHING 3\r\n");
    assert_eq!(c.cmd("watch bar"), "WATCHING 3\r\n");
    for refused in
        ["watch foo 0", "watch foo 10000", "watch foo  4", "watch foo 4 ", "watch foo 4x", "watch foo -1"]
    {
        assert_eq!(c.cmd(refused), "BAD_FORMAT\r\n", "{refused}");
    }
    assert_eq!(c.cmd("list-tubes-watched"), "OK 26\r\n---\n- default\n- foo\n- bar\n\r\n");
}

#[test]
fn reserve_mode_answers_its_name_and_refuses_anything_else() {
    let server = common::start();
    let mut c = server.connect();
    for mode in ["weighted", "weighted-fair", "fifo"] {
        assert_eq!(c.cmd(&format!("reserve-mode {mode}")), format!("USING {mode}\r\n"));
    }
    for refused in
        ["reserve-mode blah", "reserve-mode ", "reserve-mode", "reserve-mode fifo ", "reserve-mode Fifo"]
    {
        assert_eq!(c.cmd(refused), "BAD_FORMAT\r\n", "{refused}");
    }
    // The connection's `use` is untouched.
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn a_weighted_reserve_draws_tubes_by_their_weight_and_fifo_takes_the_best_job() {
    let server = common::start();
    let mut producer = server.connect();
    fill(&mut producer, "high", "h", 150);
    fill(&mut producer, "low", "l", 150);
    let mut worker = server.connect();
    assert_eq!(worker.cmd("watch high 4"), "WATCHING 2\r\n");
    assert_eq!(worker.cmd("watch low 1"), "WATCHING 3\r\n");
    assert_eq!(worker.cmd("ignore default"), "WATCHING 2\r\n");
    // fifo, the default: the best (pri, id), all of `high` first.
    assert_eq!(reserve_counting(&mut worker, 20, ["h", "l"]), [20, 0]);
    assert_eq!(worker.cmd("reserve-mode weighted"), "USING weighted\r\n");
    let [high, low] = reserve_counting(&mut worker, 100, ["h", "l"]);
    // Four in five expected; wide bounds.
    assert!(high > 60 && low > 5, "high {high}, low {low}");
    // The rest, every job once; then nothing.
    assert_eq!(reserve_counting(&mut worker, 180, ["h", "l"]), [130 - high, 150 - low]);
    assert_eq!(worker.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    // A tube with nothing ready is never drawn, however heavy.
    assert_eq!(worker.cmd("watch empty 9999"), "WATCHING 3\r\n");
    fill(&mut producer, "low", "l", 20);
    assert_eq!(reserve_counting(&mut worker, 20, ["h", "l"]), [0, 20]);
}

#[test]
fn weighted_fair_draws_less_often_from_a_tube_whose_jobs_take_longer() {
    let server = common::start();
    let mut producer = server.connect();
    let mut worker = server.connect();
    // Ten jobs of each tube worked: `slow`'s for 200 ms each, `fast`'s not
    // at all. A loaded machine stretches every round trip, the fast
    // tube's too: 200 ms keeps the slow tube's far the longer.
    for (tube, held) in [("slow", Duration::from_millis(200)), ("fast", Duration::ZERO)] {
        fill(&mut producer, tube, tube, 10);
        assert_eq!(
            worker.cmd(&format!("watch {tube}")),
            if tube == "slow" { "WATCHING 2\r\n" } else { "WATCHING 3\r\n" }
        );
        for _ in 0..10 {
            let reply = worker.cmd("reserve-with-timeout 0");
            let id: u64 = reply.split(' ').nth(1).unwrap().parse().unwrap();
            std::thread::sleep(held);
            assert_eq!(worker.cmd(&format!("delete {id}")), "DELETED\r\n");
        }
    }
    fill(&mut producer, "slow", "s", 100);
    fill(&mut producer, "fast", "f", 100);
    assert_eq!(worker.cmd("reserve-mode weighted-fair"), "USING weighted-fair\r\n");
    let [slow, fast] = reserve_counting(&mut worker, 60, ["s", "f"]);
    // Equal weights: 1/0.2 s against 1/0.01 s (the floor), about 1 in 21.
    assert!(fast > 2 * slow, "slow {slow}, fast {fast}");
}
