//! The operator's page at `/` of `--metrics` (reference §9.3), as a user
//! meets it: opened in a real browser (Debian's Chromium, headless), which
//! shows every tube, a dead letter and its body, and a hostile body as
//! text; a tube's jobs paged by state; and requests that are hostile
//! refused without harm to the queue's clients.
//!
//! Chromium comes from Debian's `chromium` package, which `.ci/run`
//! installs. A test that needs it and does not find it fails when
//! `CI=true`, and says it skips otherwise.
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::binary::{self, Bin, TempDir};
use common::Client;

const CHROMIUM: &str = "/usr/bin/chromium";

/// A body a careless page would run.
const HOSTILE: &str = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='img'\">";

/// A server with `--metrics` on a free loopback port, and that port's address.
fn start(args: &[&str]) -> (Bin, SocketAddr) {
    let mut all = vec!["--metrics", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let bin = binary::spawn(&all);
    let log = bin.stderr_once(|log| log.contains("metrics http://"));
    let rest = log.split("metrics http://").nth(1).expect("no metrics line");
    let addr = rest.split('/').next().unwrap().parse().expect("metrics address");
    (bin, addr)
}

/// One GET of `target`: the status line and the body.
fn get(addr: SocketAddr, target: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    write!(s, "GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let text = String::from_utf8_lossy(&all).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.lines().next().unwrap_or_default().to_owned(), body.to_owned())
}

/// The page at `url` as Chromium shows it: the DOM after its scripts (if
/// any had run), serialized. `None` when there is no Chromium here.
fn browser_dom(url: &str) -> Option<String> {
    if !std::path::Path::new(CHROMIUM).exists() {
        assert!(!common::under_ci(), "CI=true and no {CHROMIUM}: .ci/run installs Debian's chromium");
        common::skipping("no chromium here");
        return None;
    }
    let profile = TempDir::new("chromium");
    let out = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=2000",
            &format!("--user-data-dir={}", profile.path.display()),
            "--dump-dom",
            url,
        ])
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A dead letter in tube `evil` whose body is [`HOSTILE`], a job of each
/// other state in tube `mail`, on the server at `queue`.
fn queue_to_look_at(queue: SocketAddr) -> Client {
    let mut c = Client::connect(queue);
    assert_eq!(c.cmd("use evil"), "USING evil\r\n");
    assert_eq!(c.put(0, 0, 60, HOSTILE), "INSERTED 1\r\n");
    assert_eq!(c.cmd("watch evil"), "WATCHING 2\r\n");
    assert!(c.cmd("reserve").starts_with("RESERVED 1 "));
    assert_eq!(c.cmd("release 1 0 0"), "RELEASED\r\n");
    assert_eq!(c.cmd("use mail"), "USING mail\r\n");
    for body in ["ready", "delayed", "reserved", "buried"] {
        c.put(0, if body == "delayed" { 3600 } else { 0 }, 600, body);
    }
    assert_eq!(c.cmd("watch mail"), "WATCHING 3\r\n");
    assert_eq!(c.cmd("ignore default"), "WATCHING 2\r\n");
    assert_eq!(c.cmd("reserve"), "RESERVED 2 5\r\nready\r\n");
    assert_eq!(c.cmd("release 2 0 0"), "RELEASED\r\n");
    c
}

#[test]
fn the_page_in_a_browser_shows_every_tube_and_a_dead_letter_with_its_body_as_text() {
    let (server, addr) = start(&["--max-reserves", "1"]);
    let _c = queue_to_look_at(server.addr);
    let Some(dom) = browser_dom(&format!("http://{addr}/")) else { return };
    // The title is the page's: no script of the body ran.
    assert!(dom.contains("<title>beanstalk</title>"), "{dom}");
    assert!(!dom.contains("pwned") || dom.contains("&lt;script&gt;document.title='pwned'"), "{dom}");
    assert!(!dom.contains("<img"), "the body's tag became an element: {dom}");
    // Every tube, with its counts; the dead letter, its body shown as text.
    for tube in ["default", "evil", "mail"] {
        assert!(dom.contains(&format!("<a href=\"/tube?name={tube}\">{tube}</a>")), "{tube}: {dom}");
    }
    assert!(dom.contains("<h2>Dead letters</h2>"), "{dom}");
    let shown = "&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;img src=x onerror=\"document.title='img'\"&gt;";
    let dead = dom.split("<h2>Dead letters</h2>").nth(1).unwrap_or_default();
    assert!(
        dead.contains("<tr><td>1</td><td>") && dead.contains(&format!("81 bytes<pre>{shown}</pre>")),
        "{dom}"
    );
    assert!(dom.contains("<code>kick-job &lt;id&gt;</code>"), "the line for the admin socket: {dom}");

    // A tube's page, by state, in the browser too.
    let Some(dom) = browser_dom(&format!("http://{addr}/tube?name=evil&state=buried")) else { return };
    assert!(dom.contains("<title>beanstalk</title>") && !dom.contains("<img"), "{dom}");
    assert!(dom.contains("<h3>job 1</h3>") && dom.contains("buried-by-retry-limit: true"), "{dom}");
    assert!(dom.contains(&format!("81 bytes<pre>{shown}</pre>")), "{dom}");
    assert!(dom.contains("<code>kick-job 1</code>"), "{dom}");
}

#[test]
fn a_tube_pages_its_jobs_by_state_with_their_stats_and_first_bytes() {
    let (server, addr) = start(&[]);
    let mut c = Client::connect(server.addr);
    assert_eq!(c.cmd("use pages"), "USING pages\r\n");
    let long = "x".repeat(300);
    for n in 1..=25 {
        c.put(0, 0, 60, &format!("job-{n}-{long}"));
    }
    let (status, first) = get(addr, "/tube?name=pages");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(first.matches("<h3>job ").count(), 20, "{first}");
    assert!(
        first.contains("<h3>job 1</h3><pre>---\nid: 1\ntube: &quot;pages&quot;\nstate: ready\n"),
        "{first}"
    );
    // The first 256 bytes of a 306-byte body.
    assert!(
        first.contains(&format!("306 bytes, the first shown<pre>job-1-{}</pre>", &long[..250])),
        "{first}"
    );
    let next = "<a href=\"/tube?name=pages&amp;state=ready&amp;after=20\">next page</a>";
    assert!(first.contains(next), "{first}");
    let (_, second) = get(addr, "/tube?name=pages&state=ready&after=20");
    let ids: Vec<&str> = second.split("<h3>job ").skip(1).map(|s| s.split('<').next().unwrap()).collect();
    assert_eq!(ids, ["21", "22", "23", "24", "25"]);
    assert!(!second.contains("next page"));
    let (_, buried) = get(addr, "/tube?name=pages&state=buried");
    assert!(buried.contains("<h2>buried jobs</h2><p>None.</p>"), "{buried}");
    assert_eq!(get(addr, "/tube?name=nothing").0, "HTTP/1.1 404 Not Found");
    // Nothing was counted: a page is no command.
    assert_eq!(c.stat("cmd-stats-job"), "0");
}

#[test]
fn hostile_requests_are_refused_and_the_queue_is_served_beside_a_flood_of_pages() {
    let (server, addr) = start(&[]);
    for bad in ["/tube?name=a%zz", "/tube?name=a&name=b", "/tube?name=a&after=x", "/?q=1", "/tube?name=-a"] {
        assert_eq!(get(addr, bad).0, "HTTP/1.1 400 Bad Request", "{bad}");
    }
    let long = format!("/tube?name={}", "a".repeat(9000));
    assert_eq!(get(addr, &long).0, "HTTP/1.1 431 Request Header Fields Too Large");
    // 10,000 pages asked for by 8 clients as fast as they are answered,
    // while a producer and a worker go on, a job a millisecond: each of
    // their commands is answered, in order, with a job of 100 in the
    // tube. (No rate is asserted: the deadline is a hang guard.)
    let mut producer = Client::connect(server.addr);
    for _ in 0..100 {
        producer.put(0, 0, 60, "job");
    }
    let pages = Arc::new(AtomicUsize::new(0));
    let stop = Instant::now() + common::HANG_GUARD;
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let pages = Arc::clone(&pages);
            thread::spawn(move || {
                while pages.load(Ordering::Relaxed) < 10_000 && Instant::now() < stop {
                    let n = pages.fetch_add(1, Ordering::Relaxed);
                    let status = get(addr, if n.is_multiple_of(2) { "/" } else { "/tube?name=default" }).0;
                    assert!(status == "HTTP/1.1 200 OK" || status.starts_with("HTTP/1.1 503"), "{status}");
                }
            })
        })
        .collect();
    let mut worker = Client::connect(server.addr);
    let mut done = 0;
    while !flood.iter().all(|t| t.is_finished()) {
        assert_eq!(producer.put(0, 0, 60, "job"), format!("INSERTED {}\r\n", 101 + done));
        let reply = worker.cmd("reserve-with-timeout 0");
        let id = reply.strip_prefix("RESERVED ").and_then(|r| r.split(' ').next()).expect(&reply).to_owned();
        assert_eq!(worker.cmd(&format!("delete {id}")), "DELETED\r\n");
        done += 1;
        thread::sleep(Duration::from_millis(1));
    }
    for t in flood {
        t.join().unwrap();
    }
    let pages = pages.load(Ordering::Relaxed);
    assert!(pages >= 10_000 && done > 0, "{pages} pages, {done} jobs");
    eprintln!("{pages} pages beside {done} puts, reserves and deletes");
    assert_eq!(producer.stat("current-jobs-ready"), "100");
    drop(server);
}

/// A tube's page lists its jobs a piece a lock, and holds no reference
/// to the tube between pieces: a tube that goes meanwhile (its last user
/// gone) is "no such tube", never a panic that takes the answering
/// thread (or, built with `panic = "abort"`, the server) with it.
#[test]
fn a_tube_that_goes_while_its_page_is_made_is_no_such_tube() {
    let (server, addr) = start(&[]);
    let stop = Instant::now() + Duration::from_secs(2);
    let queue = server.addr;
    // A tube made and dropped again and again by a client that uses it.
    let churn = thread::spawn(move || {
        let mut c = Client::connect(queue);
        let lines = "use t\r\nuse default\r\n".repeat(200);
        while Instant::now() < stop {
            c.send(&lines);
            for _ in 0..200 {
                assert_eq!(c.reply(), "USING t\r\n");
                assert_eq!(c.reply(), "USING default\r\n");
            }
        }
    });
    let mut pages = 0;
    while Instant::now() < stop {
        let (status, _) = get(addr, "/tube?name=t");
        assert!(
            status == "HTTP/1.1 200 OK" || status == "HTTP/1.1 404 Not Found",
            "{status:?} after {pages}"
        );
        pages += 1;
    }
    churn.join().unwrap();
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
    assert_eq!(get(addr, "/").0, "HTTP/1.1 200 OK");
}
