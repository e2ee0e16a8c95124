//! Just enough HTTP/1.x for a scraper: find where a request's head ends,
//! decide what it asks for, and write one response, then close. No
//! keep-alive, no request bodies, no chunking. (The head is read by
//! `arriving.rs`.)
//!
//! It owns the bounds that make a hostile client cheap: a request's head
//! must fit in [`HEAD_MOST`] bytes and arrive within [`HEAD_DEADLINE`],
//! or the connection is answered and closed. It knows nothing of the
//! engine: the caller makes the body.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The most a request's head (request line and headers) may take.
pub const HEAD_MOST: usize = 8192;

/// How long a client has to send its request's head: a scraper sends it
/// at once, and a client that does not may be pushed out sooner
/// (`slots.rs`).
pub const HEAD_DEADLINE: Duration = Duration::from_secs(1);

/// How long a response may take to leave.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// What a request asks for, or what is wrong with it (a page's tube name
/// inline: see [`super::page::Ask`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Request {
    /// `GET /metrics` (or `HEAD`): the scrape.
    Metrics { head_only: bool },
    /// `GET /` or `/tube?…` (or `HEAD`): the operator's page.
    Page { head_only: bool, ask: super::page::Ask },
    /// A well-formed request for anything else.
    NotFound,
    /// A method other than GET or HEAD.
    MethodNotAllowed,
    /// Not HTTP/1.x, or cut off before its end.
    Malformed,
    /// A head longer than [`HEAD_MOST`].
    TooLarge,
    /// The head did not arrive within [`HEAD_DEADLINE`].
    TimedOut,
}

/// Where the head ends (after its blank line), if it has.
pub fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|at| at + 4)
}

/// What a whole head asks for.
pub fn parse(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else { return Request::Malformed };
    let mut lines = text.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line));
    let mut words = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Request::Malformed;
    }
    // Every header is `name: value`, the name one token.
    let headers_ok = lines.take_while(|line| !line.is_empty()).all(|line| {
        line.split_once(':').is_some_and(|(name, _)| !name.is_empty() && !name.contains([' ', '\t']))
    });
    if !headers_ok {
        return Request::Malformed;
    }
    let path = target.split('?').next().unwrap_or_default();
    let head_only = method == "HEAD";
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => Request::Metrics { head_only },
        ("GET" | "HEAD", _) => match super::page::ask(target) {
            Some(Some(ask)) => Request::Page { head_only, ask },
            Some(None) => Request::Malformed,
            None => Request::NotFound,
        },
        _ => Request::MethodNotAllowed,
    }
}

/// The content type of the text exposition format.
pub const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Writes a whole response: status line, headers, and `body` unless
/// `head_only`.
pub fn respond(
    stream: &mut TcpStream,
    status: &str,
    kind: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    stream.set_write_timeout(Some(WRITE_DEADLINE))?;
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
}

/// Closes after a response: stops sending, then reads and drops what the
/// client still sends, for at most [`HEAD_DEADLINE`] and 1 MiB, so that
/// closing with unread bytes (which resets the connection) does not throw
/// the response away before the client has read it.
pub fn close_gently(stream: &mut TcpStream, buf: &mut [u8; HEAD_MOST]) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut drained = 0;
    while drained < 1 << 20 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}

/// The status line and body of a refusal.
pub fn refusal(request: Request) -> (&'static str, &'static str) {
    match request {
        Request::NotFound => ("404 Not Found", "not found: the metrics are at /metrics, the page at /\n"),
        Request::MethodNotAllowed => ("405 Method Not Allowed", "only GET and HEAD\n"),
        Request::TooLarge => ("431 Request Header Fields Too Large", "request head too large\n"),
        Request::TimedOut => ("408 Request Timeout", "request head too slow\n"),
        Request::Malformed | Request::Metrics { .. } | Request::Page { .. } => {
            ("400 Bad Request", "bad request\n")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_apart() {
        let get = |head: &str| parse(head.as_bytes());
        assert_eq!(get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), Request::Metrics { head_only: false });
        assert_eq!(get("HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"), Request::Metrics { head_only: true });
        assert_eq!(get("GET /nothing HTTP/1.1\r\n\r\n"), Request::NotFound);
        let overview = Request::Page { head_only: false, ask: crate::metrics::page::Ask::Overview };
        assert_eq!(get("GET / HTTP/1.1\r\n\r\n"), overview);
        assert_eq!(get("GET /tube?name=%2 HTTP/1.1\r\n\r\n"), Request::Malformed);
        assert_eq!(get("POST /metrics HTTP/1.1\r\n\r\n"), Request::MethodNotAllowed);
        assert_eq!(get("GET /metrics\r\n\r\n"), Request::Malformed);
        assert_eq!(get("GET /metrics SPDY/3\r\n\r\n"), Request::Malformed);
        assert_eq!(get("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n"), Request::Malformed);
        assert_eq!(get("\u{1}\r\n\r\n"), Request::Malformed);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
