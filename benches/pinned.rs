//! The pinned pattern (issue 33): a 256 MiB address space filled with
//! 1000-byte jobs until a put is refused, then every job deleted but one in
//! `keep` (2, 16, 256, 4000, and one in 4000 at random). What the deletes
//! freed must serve any later need: new connections (each a thread and
//! its stack, here), held open, up to 300, then jobs of 100 KB up to
//! 1,500 (the caps). Ours against beanstalkd, each under the same limit,
//! in the same run.
//!
//!     cargo bench --bench pinned
//!
//! `BEANSTALKD=` skips beanstalkd; `PINNED_OURS` names another build of
//! ours. Loopback only; each server is killed when its round ends.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{row, Client, Server, Settings};

/// `ulimit -v`, in KiB.
const ADDRESS_SPACE_KIB: u64 = 256 * 1024;
const CONNECTIONS: usize = 300;
const BIG_JOBS: usize = 1500;

fn main() {
    let s = Settings::from_env("PINNED");
    for keep in [2, 16, 256, 4000, 0] {
        let ours = pinned(&s.ours, keep);
        let theirs = s.theirs.as_ref().map(|t| pinned(t, keep));
        let name = if keep == 0 { "1 in 4000 at random".to_owned() } else { format!("1 in {keep}") };
        row(&format!("kept {name}: connections served"), ours.0 as f64, theirs.map(|t| t.0 as f64));
        row(&format!("kept {name}: 100 KB jobs taken"), ours.1 as f64, theirs.map(|t| t.1 as f64));
    }
}

/// One round: (connections served, big jobs taken).
fn pinned(binary: &str, keep: u64) -> (usize, usize) {
    let server = Server::start_limited(binary, ADDRESS_SPACE_KIB, &["-z", "200000"]);
    let mut c = Client::connect(server.port);
    let small = format!("put 0 0 600 1000\r\n{}\r\n", "s".repeat(1000));
    let mut ids = Vec::new();
    'fill: loop {
        c.send(small.repeat(100).as_bytes());
        let mut refused = false;
        for _ in 0..100 {
            match c.reply() {
                0 => refused = true,
                id => ids.push(id),
            }
        }
        if refused || ids.len() > 2_000_000 {
            break 'fill;
        }
    }
    // A fixed pseudo-random choice, the same for both servers.
    let mut state = 33u64;
    let mut kept = |id: u64| match keep {
        0 => {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33).is_multiple_of(4000)
        }
        k => id.is_multiple_of(k),
    };
    let gone: Vec<u64> = ids.iter().copied().filter(|&id| !kept(id)).collect();
    for chunk in gone.chunks(1000) {
        let lines: String = chunk.iter().map(|id| format!("delete {id}\r\n")).collect();
        c.send(lines.as_bytes());
        for _ in chunk {
            c.reply();
        }
    }
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let Ok(mut client) = TcpStream::connect(("127.0.0.1", server.port)) else { break };
        let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = client.write_all(b"list-tube-used\r\n");
        let mut reply = [0; 64];
        if matches!(client.read(&mut reply), Ok(n) if &reply[..n] == b"USING default\r\n") {
            clients.push(client);
        }
    }
    let big = format!("put 0 0 600 100000\r\n{}\r\n", "b".repeat(100_000));
    let mut taken = 0;
    while taken < BIG_JOBS {
        c.send(big.as_bytes());
        if c.reply() == 0 {
            break;
        }
        taken += 1;
    }
    (clients.len(), taken)
}
