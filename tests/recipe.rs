//! The README's "Past one machine", end to end: three servers with `-b`
//! and `--job-id-step 3`, producers putting round-robin, workers blocked
//! with `reserve-with-abort` on all three that call the other waits off
//! when one answers, and one server SIGKILLed and restarted mid-run. Every
//! acknowledged put must be consumed and deleted exactly once, every
//! delete must go to the server `id mod 3` names, and no worker may poll.
//!
//! Bounded: 2 producers × 240 puts, 3 workers, 127.0.0.1 only, a minute
//! at most; only the servers started here are ever signalled.
mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::binary::{self, arg, Bin, TempDir};

const SERVERS: usize = 3;
const PRODUCERS: usize = 2;
const PUTS_EACH: usize = 240;
const WORKERS: usize = 3;
const LIMIT: Duration = common::HANG_GUARD;

/// Server `s` (0-based) is started with `--job-id-start s+1`, so it holds
/// exactly the ids that leave `(s + 1) mod 3`.
fn route(id: u64) -> usize {
    ((id + 2) % SERVERS as u64) as usize
}

/// Where each server listens now: a restarted one has a new port.
type Book = Arc<Mutex<[SocketAddr; SERVERS]>>;

/// What the workers saw, shared with the test's thread.
#[derive(Default)]
struct Ledger {
    /// Acknowledged puts: body -> (server, id).
    acknowledged: HashMap<String, (usize, u64)>,
    /// Times each body was handed to a worker.
    delivered: HashMap<String, usize>,
    /// `DELETED` replies per body.
    deleted: HashMap<String, usize>,
    /// Deletes sent whose reply was lost with their server.
    unconfirmed: HashSet<String>,
    /// Waits called off (`ABORTED`), and jobs handed over just before
    /// their wait was called off (`RESERVED` to a wait already called off).
    aborted: usize,
    raced: usize,
    /// Anything that breaks the recipe's promises.
    violations: Vec<String>,
}

fn start(dir: &TempDir, s: usize) -> Bin {
    let start = (s + 1).to_string();
    binary::spawn(&["-b", arg(&dir.path), "--job-id-start", &start, "--job-id-step", "3"])
}

fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_nodelay(true).ok()?;
    stream.set_read_timeout(Some(common::HANG_GUARD)).ok()?;
    Some(stream)
}

/// One reply, read whole: the line, and a `RESERVED` job's id and body.
fn read_reply(reader: &mut impl BufRead) -> Option<(String, Option<(u64, String)>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 || !line.ends_with("\r\n") {
        return None;
    }
    let line = line.trim_end().to_owned();
    let Some(rest) = line.strip_prefix("RESERVED ") else { return Some((line, None)) };
    let (id, len) = rest.split_once(' ')?;
    let mut body = vec![0; len.parse::<usize>().ok()? + 2];
    reader.read_exact(&mut body).ok()?;
    body.truncate(body.len() - 2);
    Some((line.clone(), Some((id.parse().ok()?, String::from_utf8(body).ok()?))))
}

fn producer(p: usize, book: Book, ledger: Arc<Mutex<Ledger>>) {
    let mut conns: Vec<Option<BufReader<TcpStream>>> = (0..SERVERS).map(|_| None).collect();
    for n in 0..PUTS_EACH {
        // Round-robin; a put that fails is lost to this producer (it was
        // never acknowledged), and the next goes to the next server.
        let s = n % SERVERS;
        let body = format!("p{p}-{n}");
        if conns[s].is_none() {
            let addr = book.lock().unwrap()[s];
            conns[s] = connect(addr).map(BufReader::new);
        }
        let Some(conn) = conns[s].as_mut() else { continue };
        let sent = conn.get_mut().write_all(format!("put 0 0 30 {}\r\n{body}\r\n", body.len()).as_bytes());
        let reply = sent.ok().and_then(|()| read_reply(conn));
        match reply.as_ref().and_then(|(line, _)| line.strip_prefix("INSERTED ")) {
            Some(id) => {
                let id: u64 = id.parse().unwrap();
                let mut ledger = ledger.lock().unwrap();
                if route(id) != s {
                    ledger.violations.push(format!("server {s} gave id {id}, which routes to {}", route(id)));
                }
                ledger.acknowledged.insert(body, (s, id));
            }
            None => conns[s] = None,
        }
        // Spread the puts over the run, so that the kill lands among jobs
        // in every state.
        thread::sleep(Duration::from_millis(2));
    }
}

/// A command a worker sent on one connection and whose reply it awaits.
#[derive(Debug, Clone, PartialEq)]
enum Sent {
    ReserveWithAbort,
    /// The bare `\r\n` that calls a wait off: `UNKNOWN_COMMAND` once read.
    CallOff,
    Delete(u64, String),
}

/// A worker's connection to one server.
struct Link {
    /// Counts connections, so that replies from a closed one are ignored.
    generation: u64,
    stream: Option<TcpStream>,
    sent: VecDeque<Sent>,
}

enum Event {
    Reply(String, Option<(u64, String)>),
    Closed,
}

fn worker(book: Book, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    let (tx, rx): (Sender<(usize, u64, Event)>, Receiver<_>) = mpsc::channel();
    let mut links: Vec<Link> =
        (0..SERVERS).map(|_| Link { generation: 0, stream: None, sent: VecDeque::new() }).collect();
    let violation = |what: String| ledger.lock().unwrap().violations.push(what);
    while !stop.load(Ordering::SeqCst) {
        // Waiting on every server the worker reaches: (re)connect what is
        // down, and block on each idle link with reserve-with-abort.
        for (s, link) in links.iter_mut().enumerate() {
            if link.stream.is_none() {
                let Some(stream) = connect(book.lock().unwrap()[s]) else { continue };
                link.generation += 1;
                let (reader, tx, generation) = (stream.try_clone().unwrap(), tx.clone(), link.generation);
                thread::spawn(move || {
                    let mut reader = BufReader::new(reader);
                    while let Some((line, job)) = read_reply(&mut reader) {
                        if tx.send((s, generation, Event::Reply(line, job))).is_err() {
                            return;
                        }
                    }
                    let _ = tx.send((s, generation, Event::Closed));
                });
                link.stream = Some(stream);
            }
            if link.sent.is_empty() {
                send(link, Sent::ReserveWithAbort);
            }
        }
        // Every link busy: one blocked reserve a server, no polling. Wake
        // now and then only to see whether the run is over or a server
        // that was down is back.
        let (s, generation, event) = match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => unreachable!("the worker holds a sender"),
        };
        if generation != links[s].generation {
            continue;
        }
        let line = match event {
            Event::Closed => {
                // The server went: what was in flight on it is lost, and a
                // delete sent there may or may not have been done.
                let link = &mut links[s];
                for sent in link.sent.drain(..) {
                    if let Sent::Delete(_, body) = sent {
                        ledger.lock().unwrap().unconfirmed.insert(body);
                    }
                }
                link.stream = None;
                continue;
            }
            Event::Reply(line, job) => match (links[s].sent.pop_front(), job) {
                (Some(Sent::ReserveWithAbort), Some((id, body))) => {
                    {
                        let mut ledger = ledger.lock().unwrap();
                        *ledger.delivered.entry(body.clone()).or_default() += 1;
                        ledger.raced += usize::from(links[s].sent.front() == Some(&Sent::CallOff));
                    }
                    // The work: long enough that a crash finds jobs held.
                    thread::sleep(Duration::from_millis(1));
                    // The delete goes where the id routes; the job came
                    // from there, on this same connection.
                    if route(id) != s {
                        violation(format!("job {id} came from server {s}, but routes to {}", route(id)));
                    }
                    send(&mut links[route(id)], Sent::Delete(id, body));
                    // One answered: call the other waits off.
                    for (o, link) in links.iter_mut().enumerate() {
                        let waiting = link.sent.back() == Some(&Sent::ReserveWithAbort);
                        if o != s && waiting {
                            send(link, Sent::CallOff);
                        }
                    }
                    continue;
                }
                (Some(Sent::ReserveWithAbort), None) if line == "ABORTED" => {
                    ledger.lock().unwrap().aborted += 1;
                    continue;
                }
                (Some(Sent::CallOff), None) if line == "UNKNOWN_COMMAND" => continue,
                (Some(Sent::Delete(_, body)), None) if line == "DELETED" => {
                    *ledger.lock().unwrap().deleted.entry(body).or_default() += 1;
                    continue;
                }
                (sent, _) => format!("server {s}: {line:?} in reply to {sent:?}"),
            },
        };
        violation(line);
    }
}

fn send(link: &mut Link, what: Sent) {
    let bytes = match &what {
        Sent::ReserveWithAbort => "reserve-with-abort\r\n".to_owned(),
        Sent::CallOff => "\r\n".to_owned(),
        Sent::Delete(id, _) => format!("delete {id}\r\n"),
    };
    let Some(stream) = link.stream.as_mut() else { return };
    // A failed write shows up as the reader's Closed.
    if stream.write_all(bytes.as_bytes()).is_ok() {
        link.sent.push_back(what);
    }
}

/// The sum of the `current-jobs-*` counts of every server.
fn jobs_left(book: &Book) -> Option<u64> {
    let addrs = *book.lock().unwrap();
    let mut total = 0;
    for addr in addrs {
        let mut c = common::Client::connect(addr);
        let stats = c.stats();
        for key in
            ["current-jobs-ready", "current-jobs-reserved", "current-jobs-delayed", "current-jobs-buried"]
        {
            total += stats[key].parse::<u64>().ok()?;
        }
        assert_eq!(stats["cmd-reserve-with-timeout"], "0", "a worker polled");
    }
    Some(total)
}

#[test]
fn three_servers_a_crash_and_every_acknowledged_job_deleted_exactly_once() {
    let started = Instant::now();
    let dirs: Vec<TempDir> = (0..SERVERS).map(|s| TempDir::new(&format!("recipe-{s}"))).collect();
    let mut servers: Vec<Option<Bin>> = (0..SERVERS).map(|s| Some(start(&dirs[s], s))).collect();
    let book: Book = Arc::new(Mutex::new([0, 1, 2].map(|s| servers[s].as_ref().unwrap().addr)));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));

    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (book, ledger, stop) = (Arc::clone(&book), Arc::clone(&ledger), Arc::clone(&stop));
            thread::spawn(move || worker(book, ledger, stop))
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (book, ledger) = (Arc::clone(&book), Arc::clone(&ledger));
            thread::spawn(move || producer(p, book, ledger))
        })
        .collect();

    // Mid-run, once a third of the puts are acknowledged: SIGKILL the
    // second server, and start it again on its directory.
    let third = PRODUCERS * PUTS_EACH / 3;
    assert!(common::settle(LIMIT, || ledger.lock().unwrap().acknowledged.len() >= third));
    servers[1].take().unwrap().kill();
    thread::sleep(Duration::from_millis(100));
    let restarted = start(&dirs[1], 1);
    book.lock().unwrap()[1] = restarted.addr;
    servers[1] = Some(restarted);

    for p in producers {
        p.join().unwrap();
    }
    let acknowledged = ledger.lock().unwrap().acknowledged.len();
    assert!(acknowledged >= PRODUCERS * PUTS_EACH * 2 / 3, "only {acknowledged} puts acknowledged");
    let all_done = || {
        let ledger = ledger.lock().unwrap();
        let done = ledger.acknowledged.keys().all(|body| {
            ledger.deleted.get(body).is_some_and(|&n| n >= 1) || ledger.unconfirmed.contains(body)
        });
        drop(ledger);
        done && jobs_left(&book) == Some(0)
    };
    let finished = common::settle(LIMIT.saturating_sub(started.elapsed()), all_done);
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().unwrap();
    }

    let ledger = ledger.lock().unwrap();
    assert_eq!(ledger.violations, Vec::<String>::new());
    assert!(finished, "not every acknowledged job was deleted in time");
    for (body, &(s, id)) in &ledger.acknowledged {
        let deleted = ledger.deleted.get(body).copied().unwrap_or(0);
        // Deleted once; or its DELETED was lost with the killed server,
        // and then it never came back (every server is empty).
        let once = deleted == 1 || (deleted == 0 && ledger.unconfirmed.contains(body));
        assert!(once, "{body} (job {id} on server {s}) deleted {deleted} times");
        assert!(ledger.delivered.get(body).is_some_and(|&n| n >= 1), "{body} never delivered");
    }
    assert!(ledger.deleted.values().all(|&n| n == 1), "a job deleted twice");
    assert!(ledger.aborted > 0, "no wait was ever called off");
    eprintln!(
        "{acknowledged} acknowledged, {} delivered ({} more than once), {} waits called off, {} jobs \
         handed over as their wait was called off, in {:?}",
        ledger.delivered.len(),
        ledger.delivered.values().filter(|&&n| n > 1).count(),
        ledger.aborted,
        ledger.raced,
        started.elapsed()
    );
}
