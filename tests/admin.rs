//! Who may do what (reference §3.0, the promise `admin`; §7.1): with
//! `--admin-socket PATH`, the admin commands run only on connections to
//! that UNIX socket (mode 0600); on the main listener, TCP or UNIX, each
//! is answered `NOT_PERMITTED`, counts nothing, changes nothing, and `-V`
//! logs it. Without the flag nothing changes. Exact bytes, against the
//! real binary.
mod common;

use std::io::{BufRead, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;

use common::binary::{arg, spawn, TempDir};

/// Every admin command, as a line the parser takes: the rows of the
/// table of commands (reference §3.0) that promise `admin`, so that a new
/// admin command is refused here with no word in this file.
fn admin_lines() -> Vec<String> {
    let lines: Vec<String> =
        common::table::commands().iter().filter(|row| row.makes("admin")).map(|row| row.example()).collect();
    assert!(lines.len() >= 9, "the admin commands of §3.0: {lines:?}");
    lines
}

/// Sends `bytes` over a UNIX socket connection and reads `expected.len()`
/// bytes of replies.
fn unix_exchange(s: &mut UnixStream, bytes: &str, expected: &str) {
    s.write_all(bytes.as_bytes()).unwrap();
    let mut got = vec![0; expected.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expected, "for {bytes:?}");
}

fn unix_client(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    s
}

#[test]
fn admin_commands_are_refused_over_tcp_and_run_on_the_admin_socket() {
    let dir = TempDir::new("admin");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--admin-socket", admin.to_str().unwrap()]);
    let mode = std::fs::metadata(&admin).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the admin socket's mode");
    let mut c = s.client();
    assert_eq!(c.put(0, 0, 60, "job"), "INSERTED 1\r\n");
    let admin_lines = admin_lines();
    for line in &admin_lines {
        assert_eq!(c.cmd(line), "NOT_PERMITTED\r\n", "{line} over TCP");
    }
    // Pipelined: the refusal and the next command, each answered.
    c.send("flush-tube default\r\nput 0 0 60 1\r\nx\r\nkick 1\r\n");
    c.expect("NOT_PERMITTED\r\nINSERTED 2\r\nNOT_PERMITTED\r\n");
    // Nothing was counted or changed.
    let stats = c.stats();
    assert_eq!((stats["cmd-kick"].as_str(), stats["cmd-pause-tube"].as_str()), ("0", "0"));
    assert_eq!((stats["current-jobs-ready"].as_str(), stats["draining"].as_str()), ("2", "false"));
    // The admin socket runs them.
    let mut a = unix_client(&admin);
    unix_exchange(&mut a, "pause-tube default 0\r\n", "PAUSED\r\n");
    unix_exchange(&mut a, "drain\r\nundrain\r\n", "DRAINING\r\nNOT_DRAINING\r\n");
    unix_exchange(&mut a, "flush-tube default\r\n", "FLUSHED 2\r\n");
    // And every other command too, as any connection does.
    unix_exchange(&mut a, "put 0 0 60 1\r\ny\r\n", "INSERTED 3\r\n");
    unix_exchange(&mut a, "reserve\r\nbury 3 0\r\nkick 1\r\n", "RESERVED 3 1\r\ny\r\nBURIED\r\nKICKED 1\r\n");
    let count = |log: &str| log.lines().filter(|line| line.contains(": admin socket only")).count();
    let log = s.stderr_once(|log| count(log) >= admin_lines.len() + 2);
    assert_eq!(count(&log), admin_lines.len() + 2, "one -V line a refusal:\n{log}");
    assert!(log.contains(" info beanstalk: refuse flush-tube from 127.0.0.1:"), "{log}");
    let stderr = s.terminate();
    assert!(!admin.exists(), "the admin socket's file is removed at exit:\n{stderr}");
}

#[test]
fn a_unix_main_listener_is_refused_too_and_without_the_flag_nothing_changes() {
    let dir = TempDir::new("admin-unix");
    let (main, admin) = (dir.path.join("main.sock"), dir.path.join("admin.sock"));
    let listen = format!("unix:{}", main.display());
    let s = spawn(&["-l", &listen, "--admin-socket", admin.to_str().unwrap()]);
    let mut m = unix_client(&main);
    unix_exchange(&mut m, "put 0 0 60 1\r\nx\r\nclear-tube default\r\n", "INSERTED 1\r\nNOT_PERMITTED\r\n");
    unix_exchange(&mut unix_client(&admin), "clear-tube default\r\n", "CLEARED 1\r\n");
    drop(s);
    let plain = spawn(&[]);
    let mut c = plain.client();
    assert_eq!(c.put(0, 0, 60, "x"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("flush-tube default"), "FLUSHED 1\r\n");
    assert_eq!(c.cmd("drain"), "DRAINING\r\n");
}

#[test]
fn a_bad_admin_socket_stops_start_up() {
    let (code, stderr) = common::binary::run_to_exit(&[
        "-l",
        "127.0.0.1",
        "-p",
        "0",
        "--admin-socket",
        "/nonexistent/dir/admin.sock",
    ]);
    assert_eq!(code, Some(111), "{stderr}");
    assert!(stderr.contains("/nonexistent/dir/admin.sock"), "{stderr}");
    let (code, stderr) = common::binary::run_to_exit(&["-l", "127.0.0.1", "-p", "0", "--admin-socket", ""]);
    assert_eq!(code, Some(5), "{stderr}");
    // A main listener's socket file, bound first, goes with the failure.
    let dir = TempDir::new("admin-bad");
    let main = dir.path.join("main.sock");
    let listen = format!("unix:{}", main.display());
    let (code, stderr) =
        common::binary::run_to_exit(&["-l", &listen, "--admin-socket", "/nonexistent/dir/admin.sock"]);
    assert_eq!(code, Some(111), "{stderr}");
    assert!(!main.exists(), "{} left behind", main.display());
}

/// A client library meets the refusal as an error: greenstalk raises
/// `UnknownResponseError`, and its connection goes on.
#[test]
fn greenstalk_raises_on_the_refusal_and_goes_on() {
    if !common::python_has("greenstalk") {
        return;
    }
    let dir = TempDir::new("admin-greenstalk");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--admin-socket", admin.to_str().unwrap()]);
    let script = format!(
        "import greenstalk\n\
         c = greenstalk.Client(('127.0.0.1', {}))\n\
         try:\n    c.kick(1)\nexcept greenstalk.UnknownResponseError as e:\n    print('refused', e.status)\n\
         print(c.put('x'))\n",
        s.port()
    );
    let out = std::process::Command::new("python3").args(["-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "refused b'NOT_PERMITTED'\n1\n", "{}", String::from_utf8_lossy(&out.stderr));
}

/// The counts of every state and of deletes, from the admin socket: what
/// a route that changed nothing leaves as it was.
fn counts(a: &mut UnixStream) -> String {
    a.write_all(b"stats\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n") {
        a.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let len: usize = String::from_utf8_lossy(&head[3..head.len() - 2]).parse().unwrap();
    let mut body = vec![0; len + 2];
    a.read_exact(&mut body).unwrap();
    let stats = common::parse_yaml_map(&format!(
        "{}{}",
        String::from_utf8_lossy(&head),
        String::from_utf8_lossy(&body)
    ));
    [
        "current-jobs-ready",
        "current-jobs-delayed",
        "current-jobs-buried",
        "current-jobs-reserved",
        "cmd-delete",
    ]
    .map(|key| format!("{key}: {}", stats[key]))
    .join(", ")
}

/// No route over TCP reaches an admin effect beside the admin socket
/// (reference §3.0, `admin` and `admin unless held`): every job of
/// another is out of reach whatever the sequence (list then delete,
/// `reserve-job` then `release`, `peek`, `put` then `delete`, a batch
/// with one such id), while a worker's own jobs are its to delete,
/// release, bury and touch. Each refusal is `NOT_PERMITTED`, counts
/// nothing, changes nothing, and `-V` logs it.
#[test]
fn no_route_over_tcp_reaches_another_s_job_and_a_worker_keeps_its_own() {
    let dir = TempDir::new("admin-routes");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--admin-socket", admin.to_str().unwrap()]);
    let mut c = s.client();
    // Job 1 and 2 ready, 3 delayed an hour, 4 buried (by its worker).
    for body in ["r1", "r2"] {
        c.put_ok(body);
    }
    assert_eq!(c.put(0, 3600, 60, "d3"), "INSERTED 3\r\n");
    c.put_ok("b4");
    let mut w = s.client();
    assert_eq!(w.cmd("reserve-job 4"), "NOT_PERMITTED\r\n", "reserve-job is admin");
    let mut a = unix_client(&admin);
    unix_exchange(&mut a, "reserve-job 4\r\nbury 4 0\r\n", "RESERVED 4 2\r\nb4\r\nBURIED\r\n");
    let before = counts(&mut a);
    assert_eq!(
        before,
        "current-jobs-ready: 2, current-jobs-delayed: 1, current-jobs-buried: 1, current-jobs-reserved: 0, cmd-delete: 0"
    );
    // The listing is a read, and the deletes it leads to are refused.
    assert_eq!(c.cmd("list-jobs-ready 1000"), "OK 12\r\n---\n- 1\n- 2\n\r\n");
    // One reply read at a time: a wrong one fails at once, where a
    // fixed count of bytes would wait for more.
    for id in 1..=4 {
        assert_eq!(
            c.cmd(&format!("delete {id}")),
            "NOT_PERMITTED\r\n",
            "delete {id}: ready, delayed or buried"
        );
    }
    // kick-job's steps, and move-job's (a copy is a new job of its own).
    assert_eq!(c.cmd("reserve-job 4"), "NOT_PERMITTED\r\n");
    assert_eq!(c.cmd("release 4 0 0"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("peek 1"), "FOUND 1 2\r\nr1\r\n");
    assert_eq!(c.put(0, 0, 60, "r1"), "INSERTED 5\r\n");
    assert_eq!(c.cmd("delete 1"), "NOT_PERMITTED\r\n");
    assert_eq!(c.cmd("delete-batch 5 4"), "NOT_PERMITTED\r\n", "one job not held refuses the batch");
    // Missing, or another's reservation: beanstalkd's NOT_FOUND, counted.
    assert_eq!(w.cmd("reserve"), "RESERVED 1 2\r\nr1\r\n");
    assert_eq!(c.cmd("delete 1"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("delete 999"), "NOT_FOUND\r\n");
    assert_eq!(c.cmd("delete-batch 1 999"), "DELETED_BATCH 0 2\r\n");
    assert_eq!(
        counts(&mut a),
        "current-jobs-ready: 2, current-jobs-delayed: 1, current-jobs-buried: 1, current-jobs-reserved: 1, cmd-delete: 4"
    );
    // A worker's own jobs: touch, release, bury, delete.
    assert_eq!(w.cmd("touch 1"), "TOUCHED\r\n");
    assert_eq!(w.cmd("release 1 0 0"), "RELEASED\r\n");
    assert_eq!(w.cmd("reserve"), "RESERVED 1 2\r\nr1\r\n");
    assert_eq!(w.cmd("bury 1 0"), "BURIED\r\n");
    // Buried, it is no longer the worker's.
    assert_eq!(w.cmd("delete 1"), "NOT_PERMITTED\r\n");
    assert_eq!(w.cmd("reserve"), "RESERVED 2 2\r\nr2\r\n");
    assert_eq!(w.cmd("delete 2"), "DELETED\r\n");
    // The admin socket deletes any of them.
    unix_exchange(&mut a, "delete 1\r\ndelete 3\r\n", "DELETED\r\nDELETED\r\n");
    let stderr = s.stderr_once(|log| log.matches(": admin socket only").count() >= 9);
    let refusals: Vec<&str> = stderr.lines().filter(|line| line.contains(": admin socket only")).collect();
    let refused = |name: &str| {
        refusals.iter().filter(|line| line.contains(&format!(" refuse {name} from 127.0.0.1:"))).count()
    };
    assert_eq!(
        (refused("delete"), refused("delete-batch"), refused("reserve-job"), refusals.len()),
        (6, 1, 2, 9),
        "one -V line a refusal:\n{}",
        s.stderr()
    );
}

/// tuber's batch worker beside the admin socket: `reserve-batch` then
/// `delete-batch` of the jobs it holds, over TCP, deletes them all, and
/// none runs again.
#[test]
fn a_batch_worker_deletes_the_jobs_it_reserved_over_tcp() {
    let dir = TempDir::new("admin-batch");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--admin-socket", admin.to_str().unwrap()]);
    let mut c = s.client();
    for n in 0..10 {
        assert_eq!(c.put(0, 0, 2, &n.to_string()), format!("INSERTED {}\r\n", n + 1));
    }
    for round in 0..2 {
        let first = round * 5 + 1;
        c.send("reserve-batch 5\r\n");
        let mut replies = String::from("RESERVED_BATCH 5\r\n");
        for id in first..first + 5 {
            replies.push_str(&format!("RESERVED {id} 1\r\n{}\r\n", id - 1));
        }
        c.expect(replies);
        let ids: Vec<String> = (first..first + 5).map(|id| id.to_string()).collect();
        assert_eq!(c.cmd(&format!("delete-batch {}", ids.join(" "))), "DELETED_BATCH 5 0\r\n");
    }
    // Past their TTR, nothing comes back.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(c.cmd("reserve-batch 10"), "RESERVED_BATCH 0\r\n");
    assert_eq!(
        counts(&mut unix_client(&admin)),
        "current-jobs-ready: 0, current-jobs-delayed: 0, current-jobs-buried: 0, current-jobs-reserved: 0, cmd-delete: 10"
    );
}

/// The operator's set: `--admin-commands` names the commands refused,
/// each whole but `delete` and `delete-batch`; one not named runs over
/// TCP. Without `--admin-socket` the set changes nothing: any client
/// deletes any job, as in beanstalkd.
#[test]
fn the_operator_chooses_the_admin_commands_and_without_the_socket_none_is_refused() {
    let dir = TempDir::new("admin-chosen");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--admin-socket", admin.to_str().unwrap(), "--admin-commands", "stats, drain"]);
    let mut c = s.client();
    c.put_ok("a");
    c.put_ok("b");
    assert_eq!(c.cmd("kick 1"), "KICKED 0\r\n");
    assert_eq!(c.cmd("pause-tube default 0"), "PAUSED\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n", "delete is not in the chosen set");
    assert_eq!(c.cmd("stats"), "NOT_PERMITTED\r\n");
    assert_eq!(c.cmd("drain"), "NOT_PERMITTED\r\n");
    let mut a = unix_client(&admin);
    unix_exchange(&mut a, "drain\r\nundrain\r\n", "DRAINING\r\nNOT_DRAINING\r\n");
    drop(s);
    // Only delete-batch: a plain delete of another's job runs.
    let s = spawn(&["--admin-socket", admin.to_str().unwrap(), "--admin-commands=delete-batch"]);
    let mut c = s.client();
    c.put_ok("a");
    c.put_ok("b");
    assert_eq!(c.cmd("delete-batch 1"), "NOT_PERMITTED\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    drop(s);
    // No admin socket: beanstalkd's bytes, whatever the set.
    let plain = spawn(&["--admin-commands", "delete,delete-batch,reserve-job"]);
    let mut c = plain.client();
    for body in ["a", "b", "c"] {
        c.put_ok(body);
    }
    assert_eq!(c.cmd("reserve-job 3"), "RESERVED 3 1\r\nc\r\n");
    assert_eq!(c.cmd("delete 1"), "DELETED\r\n");
    assert_eq!(c.cmd("delete-batch 2 3"), "DELETED_BATCH 2 0\r\n");
}

#[test]
fn a_bad_admin_commands_list_stops_start_up() {
    for (list, why) in [("drain,kik", "kik (no such command)"), ("release", "release (never admin")] {
        let (code, stderr) = common::binary::run_to_exit(&["-p", "0", "--admin-commands", list]);
        assert_eq!(code, Some(5), "{stderr}");
        assert!(stderr.contains(&format!("invalid value for --admin-commands: {why}")), "{stderr}");
    }
}

/// Starts the binary with `args` after `umask 0`, as a shell a careless
/// operator left does, with `-V` and stderr piped.
fn start_under_umask_0(args: &[&str]) -> std::process::Child {
    std::process::Command::new("sh")
        .args(["-c", "umask 0 && exec \"$0\" -V \"$@\""])
        .arg(common::binary::binary_path())
        .args(args)
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The admin socket is mode 0600 from the moment its path exists: a
/// process spinning on `stat` (or on `connect`) never finds it open to
/// others, even under umask 0, where a `chmod` after the bind left a
/// window another user's `connect` got through. A hundred starts, each
/// watched from before the server runs by three threads spinning on
/// `stat` (one of them, at least, on another CPU than the server's);
/// and nothing is left beside it.
#[test]
fn the_admin_socket_is_0600_from_the_moment_it_exists() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = TempDir::new("admin-mode");
    let admin = dir.path.join("admin.sock");
    for start in 0..100 {
        let done = Arc::new(AtomicBool::new(false));
        let watchers: Vec<_> = (0..3)
            .map(|_| {
                let (admin, done) = (admin.clone(), Arc::clone(&done));
                std::thread::spawn(move || loop {
                    // Read first: a look after `done` finds the path if
                    // the server made it, however late this thread ran.
                    let last = done.load(Ordering::SeqCst);
                    if let Ok(meta) = std::fs::symlink_metadata(&admin) {
                        return Some(meta.permissions().mode() & 0o7777);
                    }
                    if last {
                        return None;
                    }
                })
            })
            .collect();
        let mut child = start_under_umask_0(&["-l", "127.0.0.1", "-p", "0", "--admin-socket", arg(&admin)]);
        // Once it serves (or has exited), the watchers have seen it.
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let served = stderr.lines().map_while(Result::ok).any(|line| line.contains(" bind "));
        done.store(true, Ordering::SeqCst);
        let modes: Vec<_> = watchers.into_iter().map(|w| w.join().unwrap()).collect();
        // Killed once it serves: a kill in the midst of start-up may
        // leave its private directory behind.
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&admin);
        assert!(served, "start {start}: the server did not start");
        assert_eq!(modes, [Some(0o600); 3], "start {start}: the admin socket's mode when first seen");
    }
    let left: Vec<_> = std::fs::read_dir(&dir.path).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left beside the admin socket: {left:?}");
}

/// Whatever the clients elsewhere: at `--max-connections 8`, with the
/// operator connected first and eight TCP clients idle after, the admin
/// socket takes more connections and answers them, its connections take
/// no client's place, and a ninth TCP client is still closed at once.
#[test]
fn the_operator_gets_in_at_the_connection_cap() {
    let dir = TempDir::new("admin-cap");
    let admin = dir.path.join("admin.sock");
    let s = spawn(&["--max-connections", "8", "--admin-socket", arg(&admin)]);
    let mut first = unix_client(&admin);
    unix_exchange(&mut first, "list-tube-used\r\n", "USING default\r\n");
    // Eight, each answered: the operator's connection took no place.
    let mut idle: Vec<_> = (0..8).map(|_| s.client()).collect();
    for c in &mut idle {
        assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    }
    // At the cap, the operator still gets in, again and again.
    for _ in 0..3 {
        let mut a = unix_client(&admin);
        unix_exchange(&mut a, "use ops\r\n", "USING ops\r\n");
        unix_exchange(&mut a, "drain\r\nundrain\r\n", "DRAINING\r\nNOT_DRAINING\r\n");
    }
    unix_exchange(&mut first, "list-tube-used\r\n", "USING default\r\n");
    // A ninth TCP client is closed unanswered; the eight are served.
    let mut ninth = std::net::TcpStream::connect(s.addr).unwrap();
    ninth.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    let _ = ninth.write_all(b"list-tube-used\r\n");
    // One read: the end of the stream (or a reset), or a reply at once.
    let mut got = [0; 64];
    let n = ninth.read(&mut got).unwrap_or(0);
    assert_eq!(String::from_utf8_lossy(&got[..n]), "", "a ninth TCP client is refused");
    for c in &mut idle {
        assert_eq!(c.cmd("list-tube-used"), "USING default\r\n");
    }
}

/// Runs the binary with `-V` and `args` until it exits, which it must do
/// without serving: a start-up that gets as far as its `bind` line fails
/// the test at once. Its exit code and stderr.
fn run_to_refusal(args: &[&str]) -> (Option<i32>, String) {
    let mut child = start_under_umask_0(args);
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut text = String::new();
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 {
        if line.contains(" bind ") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("started serving:\n{text}{line}");
        }
        text.push_str(&line);
        line.clear();
    }
    (child.wait().unwrap().code(), text)
}

/// A live admin socket is never taken: a second server given the same
/// path exits 111, as a `-l` it cannot bind does, with one line, and the
/// first keeps its socket (the same file) and answers on it. A stale one,
/// left by a server killed with SIGKILL, is replaced.
#[test]
fn a_second_server_never_takes_a_live_admin_socket() {
    let dir = TempDir::new("admin-taken");
    let admin = dir.path.join("admin.sock");
    let first = spawn(&["--admin-socket", arg(&admin)]);
    let inode = std::fs::symlink_metadata(&admin).unwrap().ino();
    let (code, stderr) = run_to_refusal(&["-l", "127.0.0.1", "-p", "0", "--admin-socket", arg(&admin)]);
    assert_eq!(code, Some(111), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line:\n{stderr}");
    assert!(stderr.contains(&format!("{}: another server is listening there", admin.display())), "{stderr}");
    assert_eq!(std::fs::symlink_metadata(&admin).unwrap().ino(), inode, "the first's socket file");
    unix_exchange(&mut unix_client(&admin), "drain\r\n", "DRAINING\r\n");
    let left: Vec<_> = std::fs::read_dir(&dir.path).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["admin.sock"], "nothing else left beside it");
    first.kill();
    assert!(admin.exists(), "SIGKILL leaves the socket file");
    let second = spawn(&["--admin-socket", arg(&admin)]);
    unix_exchange(&mut unix_client(&admin), "list-tube-used\r\n", "USING default\r\n");
    assert!(second.stderr().contains("removing existing local socket to replace it"), "{}", second.stderr());
}

/// `-l unix:P --admin-socket P` would make every client of P an admin:
/// refused at start-up with one line and exit 5, however the two spell
/// P, and nothing is bound.
#[test]
fn the_main_listener_and_the_admin_socket_may_not_be_one_socket() {
    let dir = TempDir::new("admin-same");
    let real = dir.path.join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path.join("link")).unwrap();
    let main = format!("unix:{}/real/s.sock", dir.path.display());
    let spellings = [
        format!("{}/real/s.sock", dir.path.display()),
        format!("unix:{}/real/s.sock", dir.path.display()),
        format!("{}/real/./s.sock", dir.path.display()),
        format!("{}//real//s.sock", dir.path.display()),
        format!("{}/link/s.sock", dir.path.display()),
        format!("{}/link/../real/s.sock", dir.path.display()),
    ];
    for admin in &spellings {
        let (code, stderr) = run_to_refusal(&["-l", &main, "--admin-socket", admin]);
        assert_eq!(code, Some(5), "{admin}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{admin}: one line:\n{stderr}");
        assert!(stderr.contains("are the same socket: every client would be an admin"), "{admin}: {stderr}");
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0, "{admin}: nothing bound");
    }
    // Another name in the same directory is another socket.
    let other = format!("{}/real/admin.sock", dir.path.display());
    let s = spawn(&["-l", &main, "--admin-socket", &other]);
    unix_exchange(&mut unix_client(Path::new(&other)), "drain\r\n", "DRAINING\r\n");
    drop(s);
}
