//! Framing: how a byte stream becomes command lines and exact-length
//! bodies (reference §1.2, 1.5). It owns a connection's input buffer and
//! reads from its socket, but knows no command: `conn` asks it for the next
//! line, or for `n` bytes of body.
//!
//! A line ends at the first CRLF. A line longer than 224 bytes
//! ([`MAX_LINE`]) is dropped as it arrives, keeping at most a trailing CR
//! (the possible first half of its CRLF), and reported once as
//! [`Line::TooLong`] when its CRLF comes; so a client cannot make the
//! server buffer more than a few kilobytes of command text. What such a
//! line says of a tagged put's body is read from every byte as it is
//! dropped ([`LongPut`]), so that it is what one write of the line says,
//! however the line was split. Two kinds of
//! line may be longer: a `put` whose tags take more, up to 906 bytes
//! ([`MAX_PUT_LINE`]; the parser refuses a longer put line that carries
//! no tag), and a `delete-batch`, whose thousand ids may take up to
//! 32 KiB ([`MAX_BATCH_LINE`]): the buffer grows for it, within its
//! reservation, and no further.
//!
//! The buffer is allocated by the first read and kept while the client is
//! busy; the event loop lets go of it once the client has been quiet for a
//! moment, so an idle connection holds no heap.

use std::io;

use crate::protocol::{LongPut, DELETE_BATCH, MAX_BATCH_LINE, MAX_LINE, MAX_PUT_LINE, PUT};
use crate::stream::Stream;
use crate::sys;

/// Size of the input buffer, and so the most one read takes: dozens of
/// pipelined commands fit in it.
const INPUT_BUFFER: usize = 4 * 1024;

/// The input buffer's reservation: more than it uses, so that it is a
/// mapping of its own (see `sys::Allocator`), of which only the first page
/// is ever written. Freed, it leaves no hole in the heap.
const INPUT_RESERVED: usize = sys::OWN_MAPPING_AT;

/// The input buffer when [`INPUT_RESERVED`] cannot be had: room for any
/// line but a long `delete-batch`, taken from the heap's free chunks. A
/// client quiet long enough for its buffer to be let go may speak again
/// when a crowd has taken every page a mapping could have: it is then
/// answered (`OUT_OF_MEMORY`, as a rule), not cut off.
const SMALL_INPUT: usize = MAX_PUT_LINE.next_multiple_of(512);

fn out_of_memory<T>(_: T) -> io::Error {
    io::ErrorKind::OutOfMemory.into()
}

/// A new input buffer, [`INPUT_BUFFER`] long in its own mapping, or else
/// [`SMALL_INPUT`] long; `None` if neither can be had. `reserve` reserves
/// room (`try_reserve_exact`, but for the tests).
fn first_buffer(reserve: impl Fn(&mut Vec<u8>, usize) -> bool) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let len = if reserve(&mut buf, INPUT_RESERVED) {
        INPUT_BUFFER
    } else if reserve(&mut buf, SMALL_INPUT) {
        SMALL_INPUT
    } else {
        return None;
    };
    buf.resize(len, 0);
    Some(buf)
}

/// The buffer's size while a `delete-batch` line longer than
/// [`INPUT_BUFFER`] arrives: the longest such line, rounded up to a page.
const BATCH_BUFFER: usize = MAX_BATCH_LINE.next_multiple_of(4096);

/// The longest line that may start with `pending`'s bytes, CRLF included.
fn longest_line(pending: &[u8]) -> usize {
    if pending.starts_with(DELETE_BATCH) {
        MAX_BATCH_LINE
    } else if pending.starts_with(PUT) {
        MAX_PUT_LINE
    } else {
        MAX_LINE
    }
}

/// A line found in the input buffer.
pub(crate) enum Line {
    /// A complete line: `[start..end]` of the buffer, CRLF excluded (see
    /// [`Input::line`]).
    Complete(usize, usize),
    /// A line longer than the protocol allows has ended. If it was a put
    /// that carried a tag, what it said of its body (see [`LongPut::end`]):
    /// the body must not be run.
    TooLong(Option<Option<u32>>),
}

/// Bytes received and not yet consumed: `buf[start..end]`.
#[derive(Default)]
pub(crate) struct Input {
    /// Empty (not allocated) while the connection is idle.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Inside a line that is already too long: drop bytes until its CRLF.
    discarding: bool,
    /// What the line being dropped says of a put's body, read from every
    /// byte as it is dropped: so that it says what the line would say had
    /// it come whole, however it was split.
    long_put: LongPut,
    /// The last read took less than it had room for.
    short: bool,
}

impl Input {
    /// Whether every byte received has been consumed.
    pub fn is_drained(&self) -> bool {
        self.start == self.end
    }

    /// The bytes of a line [`Input::next_line`] found.
    pub fn line(&self, start: usize, end: usize) -> &[u8] {
        &self.buf[start..end]
    }

    /// The buffer's allocation, in bytes (0 while freed).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Frees the buffer if nothing is left in it.
    pub fn release_if_drained(&mut self) {
        if self.is_drained() {
            self.buf = Vec::new();
            (self.start, self.end) = (0, 0);
        }
    }

    /// Finds the next line in the buffer; `None` when more input is needed.
    pub fn next_line(&mut self) -> Option<Line> {
        let pending = &self.buf[self.start..self.end];
        let Some(at) = find_crlf(pending) else {
            if self.discarding || pending.len() >= longest_line(pending) {
                // Too long already. Keep only a trailing CR, which may be the
                // first half of the CRLF that ends this line; what goes is
                // read first for what the line says of a put's body.
                let keep = usize::from(pending.last() == Some(&b'\r'));
                let dropped = &pending[..pending.len() - keep];
                if !self.discarding {
                    self.long_put = LongPut::new(dropped);
                }
                self.long_put.scan(dropped);
                self.discarding = true;
                self.start = self.end - keep;
            }
            return None;
        };
        let (line_start, line_end) = (self.start, self.start + at);
        self.start = line_end + 2;
        let line = &self.buf[line_start..line_end];
        if std::mem::take(&mut self.discarding) {
            self.long_put.scan(line);
            return Some(Line::TooLong(std::mem::take(&mut self.long_put).end()));
        }
        if at > longest_line(line) - 2 {
            return Some(Line::TooLong(crate::protocol::long_tagged_put(line)));
        }
        Some(Line::Complete(line_start, line_end))
    }

    /// Reads more from `stream` into the buffer, allocating it if it was
    /// let go: one read, which never waits (the socket is non-blocking).
    /// Returns the bytes read, 0 at end of file; `WouldBlock` if none are
    /// there yet.
    pub fn fill(&mut self, stream: &Stream) -> io::Result<usize> {
        if self.is_drained() {
            (self.start, self.end) = (0, 0);
        }
        if self.buf.is_empty() {
            // Look before allocating: most reads of an idle connection's
            // socket find nothing (a new connection's first look, an edge
            // that a hang-up raised), and the buffer's page is then never
            // touched. A look consumes nothing, so a buffer that cannot be
            // had loses no byte, and may be asked for again.
            if stream.peek_now()? == 0 {
                self.short = true;
                return Ok(0);
            }
            // A buffer that cannot be had ends this connection, and only it.
            self.buf = first_buffer(|buf, bytes| buf.try_reserve_exact(bytes).is_ok())
                .ok_or_else(|| out_of_memory(()))?;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
            if self.end == self.buf.len() {
                // A whole buffer of one line still short of its CRLF: only
                // a `delete-batch` line can be (`next_line` drops others).
                // Within the reservation, nothing is allocated; a small
                // buffer must grow to take it.
                let more = BATCH_BUFFER.saturating_sub(self.buf.capacity());
                self.buf.try_reserve_exact(more).map_err(out_of_memory)?;
                self.buf.resize(BATCH_BUFFER, 0);
            }
        }
        let free = &mut self.buf[self.end..];
        let asked = free.len();
        let read = stream.read_now(free)?;
        self.end += read;
        self.short = read < asked;
        Ok(read)
    }

    /// The last read took less than it had room for: the socket had no
    /// more then, and (edge-triggered) the loop hears when more comes.
    pub fn last_read_was_short(&self) -> bool {
        self.short
    }

    /// How many bytes are buffered and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Moves as much of `dst` as is buffered into it; returns how much.
    pub fn take(&mut self, dst: &mut [u8]) -> usize {
        let n = (self.end - self.start).min(dst.len());
        dst[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        n
    }

    /// Consumes up to `n` buffered bytes, and returns them.
    pub fn take_up_to(&mut self, n: usize) -> &[u8] {
        let start = self.start;
        self.start += (self.end - start).min(n);
        &self.buf[start..self.start]
    }

    /// Drops up to `count` buffered bytes; returns how many.
    pub fn skip(&mut self, count: u64) -> u64 {
        let n = ((self.end - self.start) as u64).min(count);
        self.start += n as usize;
        n
    }
}

/// Position of the first CRLF in `bytes`.
fn find_crlf(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(lf) = find_newline(&bytes[from..]) {
        let at = from + lf;
        if at > 0 && bytes[at - 1] == b'\r' {
            return Some(at - 1);
        }
        from = at + 1;
    }
    None
}

/// Position of the first `\n` in `bytes`, looked for eight bytes at a
/// time: every command line passes through here, and a byte-by-byte
/// search was 6% of the release build's instructions on pipelined puts
/// (this takes 4.7% off them, 1.5% off the `minimal` build's). In
/// `word ^ NEWLINES` a `\n` is a zero byte, and `(x - 0x01..) & !x &
/// 0x80..` sets the top bit of the lowest zero byte (higher bytes may be
/// set falsely by its borrow, never lower ones), so the lowest set bit
/// says where it is.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const TOPS: u64 = u64::from_le_bytes([0x80; 8]);
    const NEWLINES: u64 = u64::from_le_bytes([b'\n'; 8]);
    let mut at = 0;
    while let Some(&word) = bytes.get(at..).and_then(|rest| rest.first_chunk::<8>()) {
        let x = u64::from_le_bytes(word) ^ NEWLINES;
        let zero_bytes = x.wrapping_sub(ONES) & !x & TOPS;
        if zero_bytes != 0 {
            return Some(at + zero_bytes.trailing_zeros() as usize / 8);
        }
        at += 8;
    }
    let tail = bytes.get(at..).unwrap_or_default();
    tail.iter().position(|&b| b == b'\n').map(|found| at + found)
}

#[cfg(test)]
mod tests {
    use super::{find_crlf, find_newline, first_buffer, Input, Line, INPUT_BUFFER, SMALL_INPUT};
    use crate::stream::Stream;
    use std::io::Write;

    #[test]
    fn a_line_ends_at_the_first_crlf_only() {
        assert_eq!(find_crlf(b"stats\r\n"), Some(5));
        assert_eq!(find_crlf(b"a\nb\r\n"), Some(3));
        assert_eq!(find_crlf(b"a\rb\r\n"), Some(3));
        assert_eq!(find_crlf(b"\r\n"), Some(0));
        assert_eq!(find_crlf(b"abc\r"), None);
        assert_eq!(find_crlf(b"\n"), None);
    }

    #[test]
    fn a_newline_is_found_at_every_offset_among_any_bytes() {
        // Bytes around it that a borrow could confuse: 0x0b is '\n' + 1,
        // 0x00 and 0x80 are the edges of the word trick.
        for fill in [b'x', 0x00, 0x0b, 0x09, 0x80, 0xff] {
            for len in 0..40 {
                let plain = vec![fill; len];
                assert_eq!(find_newline(&plain), None, "fill {fill:#x} len {len}");
                for at in 0..len {
                    let mut bytes = plain.clone();
                    bytes[at] = b'\n';
                    if at + 1 < len {
                        bytes[len - 1] = b'\n';
                    }
                    assert_eq!(find_newline(&bytes), Some(at), "fill {fill:#x} len {len} at {at}");
                }
            }
        }
    }

    #[test]
    fn bytes_are_taken_only_as_far_as_they_are_buffered() {
        let mut input =
            Input { buf: b"put 0 0 1 2\r\nhi\r".to_vec(), start: 13, end: 16, ..Input::default() };
        assert_eq!(input.take_up_to(2), b"hi");
        assert_eq!(input.take_up_to(2), b"\r");
        assert_eq!(input.take_up_to(2), b"");
        assert!(input.is_drained());
    }

    #[test]
    fn a_buffer_short_of_a_mapping_is_a_small_one_and_grows_for_a_long_batch() {
        let big = first_buffer(|buf, bytes| buf.try_reserve_exact(bytes).is_ok()).unwrap();
        assert_eq!(big.len(), INPUT_BUFFER);
        let small = first_buffer(|buf, bytes| bytes <= SMALL_INPUT && buf.try_reserve_exact(bytes).is_ok());
        assert_eq!(small.as_ref().map(Vec::len), Some(SMALL_INPUT));
        assert!(first_buffer(|_, _| false).is_none());
        // A small buffer serves the longest line of all.
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let line = format!("delete-batch{}\r\n", " 1".repeat(3000));
        theirs.write_all(line.as_bytes()).unwrap();
        let stream = Stream::Unix(ours);
        let mut input = Input { buf: small.unwrap(), ..Input::default() };
        let found = loop {
            if let Some(found) = input.next_line() {
                break found;
            }
            assert!(input.fill(&stream).unwrap() > 0);
        };
        let Line::Complete(start, end) = found else { panic!("the line was refused") };
        assert_eq!(input.line(start, end), line.trim_end().as_bytes());
    }
}
