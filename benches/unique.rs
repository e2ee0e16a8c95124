//! Unique keys (issue 32, reference §3.1a): what a keyed job costs in
//! memory, and what keys cost a put. Ours only: beanstalkd has no keys.
//!
//!     cargo bench --bench unique
//!
//! - memory: N jobs of 100 bytes in tube `default`, each with a key of 16
//!   bytes, against N jobs without keys, at 250k, 400k and 1M jobs (a fresh
//!   server each): RSS per job, and what a key costs beyond its bytes (the
//!   issue's bound is 64 bytes). Several sizes, since a table that has
//!   just doubled costs most.
//! - speed: 1M keyed puts, each key put twice in a row so that half are
//!   duplicates, against 1M puts without keys, pipelined on one
//!   connection; then 1M puts without keys beside 1M keyed jobs (1M
//!   distinct keys), against the same puts beside 1M jobs without keys.
//!   The "beanstalkd" column is ours without keys.
//!
//! `UNIQUE_OURS` names another build of ours; `UNIQUE_ONLY` is `memory` or
//! `speed`. Loopback only; each server is killed when its scenario ends.

mod common;

use std::time::Instant;

use common::{pipeline, row, status_kib, Client, Server, Settings};

/// Bytes of each key: "key-" and 12 digits.
const KEY_BYTES: usize = 16;

fn main() {
    let s = Settings::from_env("UNIQUE");
    if s.runs("memory") {
        for jobs in [250_000, 400_000, 1_000_000] {
            let keyed = rss_per_job(&s.ours, jobs, true);
            let plain = rss_per_job(&s.ours, jobs, false);
            row(&format!("RSS per keyed job at {jobs} (B)"), keyed, None);
            row(&format!("RSS per job without a key at {jobs} (B)"), plain, None);
            row(
                &format!("a key's cost beyond its {KEY_BYTES} bytes at {jobs} (B)"),
                keyed - plain - KEY_BYTES as f64,
                None,
            );
        }
    }
    if s.runs("speed") {
        const PUTS: usize = 1_000_000;
        // Each server holds 1M jobs before its second row: with 1M
        // distinct keys, or with none.
        let keyed_server = Server::start(&s.ours);
        let mut c = Client::connect(keyed_server.port);
        let keyed = rate(&mut c, PUTS, |i| put(Some(i / 2)));
        pipeline(&mut c, PUTS / 2, 1, |i| put(Some(PUTS + i)));
        let beside_keys = rate(&mut c, PUTS, |_| put(None));
        drop(keyed_server);
        let plain_server = Server::start(&s.ours);
        let mut c = Client::connect(plain_server.port);
        let plain = rate(&mut c, PUTS, |_| put(None));
        let beside_jobs = rate(&mut c, PUTS, |_| put(None));
        row("1M keyed puts, half duplicates: puts/s (vs no keys)", keyed, Some(plain));
        row("puts/s without keys beside 1M keys (vs none)", beside_keys, Some(beside_jobs));
    }
}

/// A put of 100 bytes, keyed by `key` if any.
fn put(key: Option<usize>) -> Vec<u8> {
    let mut line = match key {
        Some(k) => format!("put 0 0 60 100 idp:key-{k:012}\r\n").into_bytes(),
        None => b"put 0 0 60 100\r\n".to_vec(),
    };
    line.extend_from_slice(&[b'x'; 100]);
    line.extend_from_slice(b"\r\n");
    line
}

/// RSS growth per job after `jobs` puts, keyed or not, in a fresh server.
fn rss_per_job(binary: &str, jobs: usize, keyed: bool) -> f64 {
    let server = Server::start(binary);
    let mut c = Client::connect(server.port);
    let start = status_kib(server.pid(), "VmRSS:");
    pipeline(&mut c, jobs, 1, |i| put(keyed.then_some(i)));
    let rss = status_kib(server.pid(), "VmRSS:");
    (rss.saturating_sub(start) * 1024) as f64 / jobs as f64
}

/// Puts a second for `count` commands made by `command(i)`.
fn rate(c: &mut Client, count: usize, command: impl Fn(usize) -> Vec<u8>) -> f64 {
    let t = Instant::now();
    pipeline(c, count, 1, command);
    count as f64 / t.elapsed().as_secs_f64()
}
