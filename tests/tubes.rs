//! watch, ignore, the list commands, and when tubes come and go.
mod common;

use std::time::Duration;

use common::Client;

/// Long enough to notice a reply that should not come.
const QUIET: Duration = Duration::from_millis(200);

/// The exact `OK` reply of a YAML list of `names`.
fn yaml_list(names: &[&str]) -> String {
    let doc: String =
        std::iter::once("---\n".to_owned()).chain(names.iter().map(|n| format!("- {n}\n"))).collect();
    format!("OK {}\r\n{doc}\r\n", doc.len())
}

fn tubes(c: &mut Client) -> String {
    c.cmd("list-tubes")
}

// ---------------------------------------------------------------------
// The list commands
// ---------------------------------------------------------------------

#[test]
fn fresh_server_lists_only_default() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("list-tubes"), "OK 14\r\n---\n- default\n\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), "OK 14\r\n---\n- default\n\r\n");
    assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
}

#[test]
fn list_commands_must_match_exactly() {
    let server = common::start();
    let mut c = server.connect();
    for line in ["list-tubes ", "list-tubesx", "list-tube-used ", "list-tubes-watched "] {
        assert_eq!(c.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    assert_eq!(c.cmd("list-tube"), "UNKNOWN_COMMAND\r\n");
}

#[test]
fn list_tubes_shows_tubes_in_creation_order() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use b");
    c.cmd("watch a");
    c.cmd("watch c");
    assert_eq!(tubes(&mut c), "OK 26\r\n---\n- default\n- b\n- a\n- c\n\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), "OK 22\r\n---\n- default\n- a\n- c\n\r\n");
    assert_eq!(c.cmd("list-tube-used"), "USING b\r\n");
}

// ---------------------------------------------------------------------
// watch and ignore
// ---------------------------------------------------------------------

#[test]
fn watch_appends_a_tube_and_answers_the_count() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("watch a"), "WATCHING 2\r\n");
    assert_eq!(c.cmd("watch b"), "WATCHING 3\r\n");
    assert_eq!(c.cmd("watch a"), "WATCHING 3\r\n");
    assert_eq!(c.cmd("watch default"), "WATCHING 3\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), yaml_list(&["default", "a", "b"]));
    assert_eq!(tubes(&mut c), yaml_list(&["default", "a", "b"]));
}

#[test]
fn watch_and_ignore_with_bad_names_are_bad_format() {
    let server = common::start();
    let mut c = server.connect();
    for line in ["watch  a", "watch a ", "watch -a", "watch a*", "ignore ", "ignore a b"] {
        assert_eq!(c.cmd(line), "BAD_FORMAT\r\n", "{line:?}");
    }
    assert_eq!(c.cmd("watch"), "UNKNOWN_COMMAND\r\n");
    assert_eq!(c.cmd("ignore"), "UNKNOWN_COMMAND\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default"]));
}

#[test]
fn ignore_removes_a_watched_tube() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("watch a");
    assert_eq!(c.cmd("ignore default"), "WATCHING 1\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), yaml_list(&["a"]));
    // default is never destroyed.
    assert_eq!(tubes(&mut c), yaml_list(&["default", "a"]));
}

#[test]
fn ignore_of_the_only_watched_tube_is_not_ignored() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("ignore default"), "NOT_IGNORED\r\n");
    c.cmd("watch a");
    c.cmd("ignore default");
    assert_eq!(c.cmd("ignore a"), "NOT_IGNORED\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), yaml_list(&["a"]));
}

#[test]
fn ignore_of_a_nonexistent_tube_answers_watching_and_does_not_create_it() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("ignore nosuch"), "WATCHING 1\r\n");
    c.cmd("watch a");
    assert_eq!(c.cmd("ignore nosuch"), "WATCHING 2\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "a"]));
    assert_eq!(c.cmd("stats-tube nosuch"), "NOT_FOUND\r\n");
}

#[test]
fn ignore_of_an_existing_unwatched_tube_changes_nothing() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use u");
    assert_eq!(c.cmd("ignore u"), "WATCHING 1\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), yaml_list(&["default"]));
    assert_eq!(tubes(&mut c), yaml_list(&["default", "u"]));
}

#[test]
fn watch_list_and_used_tube_are_independent() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use p");
    c.cmd("watch w");
    c.cmd("ignore default");
    assert_eq!(c.cmd("list-tube-used"), "USING p\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), yaml_list(&["w"]));
    let mut other = server.connect();
    assert_eq!(other.cmd("list-tube-used"), "USING default\r\n");
    assert_eq!(other.cmd("list-tubes-watched"), yaml_list(&["default"]));
}

// ---------------------------------------------------------------------
// Creation and destruction (reference §5.1, 5.2)
// ---------------------------------------------------------------------

#[test]
fn stats_tube_list_and_kick_do_not_create_tubes() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("stats-tube ghost"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("pause-tube ghost 1"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("kick 1"), "KICKED 0\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default"]));
}

#[test]
fn a_used_tube_with_a_job_outlives_its_user_until_the_job_is_deleted() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("use e"), "USING e\r\n");
    assert_eq!(c.put(0, 0, 60, "x"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("use default"), "USING default\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "e"]));
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default"]));
}

#[test]
fn leaving_an_empty_used_tube_destroys_it() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use e");
    c.cmd("use f");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "f"]));
}

#[test]
fn ignoring_an_empty_tube_destroys_it_but_another_watcher_keeps_it() {
    let server = common::start();
    let mut a = server.connect();
    let mut b = server.connect();
    a.cmd("watch w");
    b.cmd("watch w");
    assert_eq!(a.cmd("ignore w"), "WATCHING 1\r\n");
    assert_eq!(tubes(&mut a), yaml_list(&["default", "w"]));
    assert_eq!(b.cmd("ignore w"), "WATCHING 1\r\n");
    assert_eq!(tubes(&mut a), yaml_list(&["default"]));
}

#[test]
fn closing_the_last_user_destroys_the_tube() {
    let server = common::start();
    let mut a = server.connect();
    let mut b = server.connect();
    b.cmd("use gone");
    b.cmd("watch gone2");
    assert_eq!(tubes(&mut a), yaml_list(&["default", "gone", "gone2"]));
    b.send("quit\r\n");
    b.expect_closed();
    assert_eq!(await_tube_count(&mut a, 1), yaml_list(&["default"]));
}

#[test]
fn a_reserved_job_keeps_an_unwatched_unused_tube_alive() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use r");
    c.put_ok("x");
    c.cmd("use default");
    assert_eq!(c.cmd("reserve-job 1"), "RESERVED 1 1\r\nx\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "r"]));
    assert_eq!(c.cmd("bury 1 0"), "BURIED\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "r"]));
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default"]));
}

#[test]
fn a_delayed_job_keeps_its_tube_alive() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use d");
    c.put(0, 100, 60, "x");
    c.cmd("use default");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "d"]));
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default"]));
}

#[test]
fn a_destroyed_tube_comes_back_fresh() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use t");
    c.put_ok("x");
    assert_eq!(c.cmd("pause-tube t 100"), "PAUSED\r\n");
    c.cmd("delete 1");
    c.cmd("use default");
    assert_eq!(c.cmd("stats-tube t"), "NOT_FOUND\r\n");
    c.cmd("use t");
    let stats = c.yaml_map("stats-tube t");
    assert_eq!(stats["total-jobs"], "0");
    assert_eq!(stats["cmd-delete"], "0");
    assert_eq!(stats["pause"], "0");
    assert_eq!(stats["cmd-pause-tube"], "0");
}

#[test]
fn default_is_never_destroyed() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use a");
    c.cmd("watch a");
    c.cmd("ignore default");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "a"]));
    assert_eq!(c.yaml_map("stats-tube default")["current-using"], "0");
}

// ---------------------------------------------------------------------
// Order after removal (reference §5.3)
// ---------------------------------------------------------------------

#[test]
fn destroyed_tube_is_replaced_by_the_last_tube_in_list_tubes() {
    let server = common::start();
    let mut c = server.connect();
    let mut holder = server.connect();
    for t in ["a", "b", "c", "d"] {
        holder.cmd(&format!("watch {t}"));
    }
    assert_eq!(tubes(&mut c), yaml_list(&["default", "a", "b", "c", "d"]));
    assert_eq!(holder.cmd("ignore b"), "WATCHING 4\r\n");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "a", "d", "c"]));
    assert_eq!(holder.cmd("list-tubes-watched"), yaml_list(&["default", "a", "d", "c"]));
}

#[test]
fn ignore_moves_the_last_watched_tube_into_the_gap() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("watch d");
    c.cmd("watch c");
    assert_eq!(c.cmd("ignore default"), "WATCHING 2\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), yaml_list(&["c", "d"]));
    assert_eq!(c.cmd("watch default"), "WATCHING 3\r\n");
    assert_eq!(c.cmd("list-tubes-watched"), yaml_list(&["c", "d", "default"]));
}

#[test]
fn new_tube_after_a_removal_goes_at_the_end() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("watch a");
    c.cmd("watch b");
    c.cmd("watch c");
    c.cmd("ignore a");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "c", "b"]));
    c.cmd("watch e");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "c", "b", "e"]));
    c.cmd("ignore c");
    assert_eq!(tubes(&mut c), yaml_list(&["default", "e", "b"]));
}

// ---------------------------------------------------------------------
// Reserving across tubes
// ---------------------------------------------------------------------

#[test]
fn reserve_picks_the_smallest_pri_and_id_across_watched_tubes() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use a");
    c.put(5, 0, 60, "a5");
    c.cmd("use b");
    c.put(3, 0, 60, "b3");
    c.cmd("use default");
    c.put(3, 0, 60, "d3");
    c.cmd("use unwatched");
    c.put(0, 0, 60, "u0");
    c.cmd("watch a");
    c.cmd("watch b");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 2\r\nb3\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 3 2\r\nd3\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 1 2\r\na5\r\n");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
}

#[test]
fn reserve_ignores_the_used_tube_and_reads_the_watch_list() {
    let server = common::start();
    let mut c = server.connect();
    c.cmd("use a");
    c.put_ok("x");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "TIMED_OUT\r\n");
    c.cmd("watch a");
    c.cmd("ignore default");
    c.cmd("use default");
    assert_eq!(c.cmd("reserve-with-timeout 0"), "RESERVED 1 1\r\nx\r\n");
}

#[test]
fn blocked_reserve_on_a_tube_is_served_by_a_put_into_it() {
    let server = common::start();
    let mut worker = server.connect();
    let mut producer = server.connect();
    assert_eq!(worker.cmd("watch a"), "WATCHING 2\r\n");
    assert_eq!(worker.cmd("ignore default"), "WATCHING 1\r\n");
    worker.send("reserve\r\n");
    worker.expect_silence(QUIET);
    // A put into a tube it does not watch leaves it waiting.
    assert_eq!(producer.put(0, 0, 60, "nope"), "INSERTED 1\r\n");
    worker.expect_silence(QUIET);
    assert_eq!(producer.cmd("use a"), "USING a\r\n");
    assert_eq!(producer.put(0, 0, 60, "yes"), "INSERTED 2\r\n");
    worker.expect("RESERVED 2 3\r\nyes\r\n");
    assert_eq!(producer.yaml_map("stats-job 1")["state"], "ready");
}

#[test]
fn a_waiter_on_several_tubes_is_served_by_any_of_them_exactly_once() {
    let server = common::start();
    let mut worker = server.connect();
    let mut producer = server.connect();
    worker.cmd("watch a");
    worker.cmd("watch b");
    worker.send("reserve\r\n");
    worker.expect_silence(QUIET);
    producer.cmd("use b");
    producer.put_ok("first");
    worker.expect("RESERVED 1 5\r\nfirst\r\n");
    producer.cmd("use a");
    producer.put_ok("second");
    assert_eq!(producer.yaml_map("stats-job 2")["state"], "ready");
    assert_eq!(producer.yaml_map("stats-tube a")["current-waiting"], "0");
    assert_eq!(producer.yaml_map("stats-tube b")["current-waiting"], "0");
}

#[test]
fn blocked_waiters_on_one_tube_are_served_in_arrival_order() {
    let server = common::start();
    let mut producer = server.connect();
    let mut first = server.connect();
    let mut second = server.connect();
    first.send("reserve\r\n");
    first.expect_silence(QUIET);
    second.send("reserve\r\n");
    second.expect_silence(QUIET);
    producer.put_ok("one");
    first.expect("RESERVED 1 3\r\none\r\n");
    producer.put_ok("two");
    second.expect("RESERVED 2 3\r\ntwo\r\n");
}

/// Polls `list-tubes` until it shows `count` tubes (a closed connection's
/// references are dropped just after its EOF), and returns the reply.
fn await_tube_count(c: &mut Client, count: usize) -> String {
    let mut list = String::new();
    let reached = common::settle(common::HANG_GUARD, || {
        list = tubes(c);
        list.matches("\n- ").count() == count
    });
    assert!(reached, "never {count} tubes: {list:?}");
    list
}

#[test]
fn closing_drops_watched_tubes_by_repeatedly_removing_the_first_entry() {
    // beanstalkd empties the watch list by swap-removing slot 0 until it is
    // empty: [default, a, b] drops default, then b, then a. Destroying b
    // first turns [default, a, b, y, z] into [default, a, z, y], and then
    // destroying a gives [default, y, z].
    let server = common::start();
    let mut closing = server.connect();
    let mut keeper = server.connect();
    closing.cmd("watch a");
    closing.cmd("watch b");
    keeper.cmd("watch y");
    keeper.cmd("watch z");
    assert_eq!(tubes(&mut keeper), yaml_list(&["default", "a", "b", "y", "z"]));
    drop(closing);
    assert_eq!(await_tube_count(&mut keeper, 3), yaml_list(&["default", "y", "z"]));
}

#[test]
fn closing_drops_the_watch_list_before_the_used_tube() {
    // Watch list [default, a, b, c] empties as default, c, b, a; b is still
    // used, so c and a go first and b last: [default, a, b, c, y, z] ->
    // [default, a, b, z, y] -> [default, y, b, z] -> [default, y, z].
    let server = common::start();
    let mut closing = server.connect();
    let mut keeper = server.connect();
    for t in ["a", "b", "c"] {
        closing.cmd(&format!("watch {t}"));
    }
    closing.cmd("use b");
    keeper.cmd("watch y");
    keeper.cmd("watch z");
    closing.send("quit\r\n");
    closing.expect_closed();
    assert_eq!(await_tube_count(&mut keeper, 3), yaml_list(&["default", "y", "z"]));
}
