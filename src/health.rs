//! `beanstalk --health-check`: the binary as a client of a running server,
//! for a container's health check, which runs a program and reads its exit
//! status and has no shell to run `nc` in. It connects to the address the
//! same `-l` and `-p` flags name (the any-address `0.0.0.0` or `::` as the
//! loopback), asks `list-tube-used`, and wants `USING ` back within a few
//! seconds.
//!
//! It is a client only: it never binds, reads no binlog and starts no
//! thread.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::config::Listen;

/// How long each step (connect, write, read) may take.
const PATIENCE: Duration = Duration::from_secs(5);

/// Whether the server at `listen` serves: `Err` says why not.
pub fn check(listen: &Listen) -> Result<(), String> {
    let reply = match listen {
        Listen::Tcp { host, port } => {
            let host = match host.as_str() {
                "0.0.0.0" | "" => "127.0.0.1",
                "::" => "::1",
                host => host,
            };
            // As the server resolves `-l`: a static build reads no DNS.
            let addr = crate::listen::resolve(host, *port).map_err(|e| e.to_string())?.into_iter().next();
            let addr = addr.ok_or_else(|| format!("{host}:{port}: no such address"))?;
            let stream =
                TcpStream::connect_timeout(&addr, PATIENCE).map_err(|e| format!("{addr}: {}", said(&e)))?;
            ask(stream, |s| (s.set_read_timeout(Some(PATIENCE)), s.set_write_timeout(Some(PATIENCE))))
                .map_err(|e| format!("{addr}: {}", said(&e)))?
        }
        Listen::Unix(path) => {
            let stream =
                UnixStream::connect(path).map_err(|e| format!("{}: {}", path.display(), said(&e)))?;
            ask(stream, |s| (s.set_read_timeout(Some(PATIENCE)), s.set_write_timeout(Some(PATIENCE))))
                .map_err(|e| format!("{}: {}", path.display(), said(&e)))?
        }
    };
    if reply.starts_with(b"USING ") {
        Ok(())
    } else {
        Err(format!("answered {:?}", String::from_utf8_lossy(&reply)))
    }
}

/// Why a step failed, as an operator reads it: a socket's timeout
/// (`EAGAIN`, "Resource temporarily unavailable", on a read or write; or
/// a connect that timed out) is a server that does not answer.
fn said(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("no answer within {} s", PATIENCE.as_secs())
        }
        _ => e.to_string(),
    }
}

/// Sends `list-tube-used` on `stream` and reads its reply's line.
fn ask<S: Read + Write>(
    mut stream: S,
    timeouts: impl Fn(&S) -> (io::Result<()>, io::Result<()>),
) -> io::Result<Vec<u8>> {
    let (read, write) = timeouts(&stream);
    read.and(write)?;
    stream.write_all(b"list-tube-used\r\n")?;
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    // One line, at most a reply's length (`USING` and a 200-byte name).
    while reply.len() < 256 && !reply.ends_with(b"\r\n") {
        match stream.read(&mut byte)? {
            0 => break,
            _ => reply.push(byte[0]),
        }
    }
    Ok(reply)
}
