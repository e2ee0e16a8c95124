//! A `put` line (reference §3.1-3.1d): its four numbers, then nothing,
//! beanstalkd's junk, or put tags (tuber's `idp:`, `grp:`, `aft:` and
//! `con:`, and our `max:`). It owns the rule that keeps a tagging
//! client's body from ever being run as commands: a line that carries a
//! tag may pass beanstalkd's 224 bytes, and, refused for any reason,
//! has its body swallowed, or, its size unknown, its connection ended.
//! Like the rest of the parser, it touches no state: a line too long to
//! be kept is read a piece at a time ([`LongPut`]), and what it does is
//! decided from all of its bytes, however the pieces were cut.

use super::fields::{leading_number, Fields};
use super::{AfterSize, Command, ParseError, PutTags, TubeName, MAX_LINE, MAX_TUBE_NAME};

/// The prefix of a put, whose line may pass [`MAX_LINE`] when it carries
/// a put tag (reference §1.2, §3.1a).
pub const PUT: &[u8] = b"put ";

/// Longest `put` line that carries tags, CRLF included: every tag once,
/// each at its longest (a name of [`MAX_TUBE_NAME`] bytes, a u32 of ten
/// digits), so that every put tuber takes is taken here (tuber's own
/// figure, without our `max:`, is 891). A put without a tag keeps
/// beanstalkd's [`MAX_LINE`] (reference §1.2).
pub const MAX_PUT_LINE: usize = {
    let number = 1 + U32_DIGITS;
    let numbers = PUT.len() - 1 + 4 * number;
    let named = 1 + 4 + MAX_TUBE_NAME;
    // idp:<key>:<seconds>, grp:<group>, aft:<group>, con:<key>:<limit>, max:<n>
    let tags = (named + number) + named + named + (named + number) + (1 + 4 + U32_DIGITS);
    numbers + tags + 2
};

/// Longest rest of a put line with no tag (after `put `, before CRLF).
const UNTAGGED_PUT_REST: usize = MAX_LINE - PUT.len() - 2;

/// Digits of the largest u32.
const U32_DIGITS: usize = 10;

/// The prefixes of the put tags: tuber's four, then ours, the retry
/// limit (reference §3.1b).
const PUT_TAGS: [&[u8]; 5] = [b"idp:", b"grp:", b"aft:", b"con:", b"max:"];

pub(super) fn parse_put(rest: &[u8]) -> Result<Command, ParseError> {
    // A line that carries a tag is a tuber client's: whatever refuses it,
    // its body must never be taken as commands (reference §3.1 step 4).
    let tagged = carries_tag(rest);
    let mut f = Fields::new(rest);
    let numbers = (|| Ok::<_, ParseError>((f.u32()?, f.u32()?, f.u32()?, f.u32()?)))();
    let Ok((pri, delay, ttr, bytes)) = numbers else {
        return Err(if tagged { ParseError::UnsizedTaggedPut } else { ParseError::BadFormat });
    };
    // Past beanstalkd's line limit only a tagged put is a put: any other
    // line that long is beanstalkd's `BAD_FORMAT`, the body not read.
    if !tagged && rest.len() > UNTAGGED_PUT_REST {
        return Err(ParseError::BadFormat);
    }
    // Nothing, or tokens that are all tuber's tags or our retry limit
    // (tuber's rule: the last of each counts, and one it cannot read
    // refuses the put, its body read); anything else is beanstalkd's junk
    // after the size, which drops the body too if a tag is among it.
    // The names stay in the line until the command is made: a name held
    // apart is 200 bytes more of this frame, on every connection's stack.
    let put = |after_size, tags| Ok(Command::Put { pri, delay, ttr, bytes, after_size, tags });
    let refused = || put(AfterSize::RefusedTags, PutTags::NONE);
    if f.rest.is_empty() {
        return put(AfterSize::Nothing, PutTags::NONE);
    }
    if !tagged {
        return put(AfterSize::Junk, PutTags::NONE);
    }
    let separated = matches!(f.rest.first(), Some(b' ' | b'\t'));
    let tokens = put_tokens(f.rest);
    if !separated || !tokens.clone().all(is_tag) {
        return refused();
    }
    let (mut key, mut limit, mut con, mut group, mut after) = (None, None, None, None, None);
    for token in tokens {
        let (tag, value) = token.split_at_checked(4).unwrap_or_default();
        let read = match tag {
            b"max:" => tuber_seconds(value).map(|reserves| limit = Some(reserves)),
            b"con:" => parse_con_key(value).map(|parsed| con = Some(parsed)),
            b"grp:" => TubeName::is_legal(value).then(|| group = Some(value)),
            b"aft:" => TubeName::is_legal(value).then(|| after = Some(value)),
            _ => unique_key_token(value).map(|parsed| key = Some(parsed)),
        };
        if read.is_none() {
            return refused();
        }
    }
    match PutTags::of(key, limit, con).and_then(|tags| tags.with_groups(group, after)) {
        Some(tags) => put(AfterSize::Nothing, tags),
        None => put(AfterSize::OutOfMemory, PutTags::NONE),
    }
}

/// The space- or tab-separated tokens of a put line's `rest`.
fn put_tokens(rest: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    rest.split(|&b| b == b' ' || b == b'\t').filter(|t| !t.is_empty())
}

/// Whether a token is a put tag.
fn is_tag(token: &[u8]) -> bool {
    PUT_TAGS.iter().any(|tag| token.starts_with(tag))
}

/// Whether the rest of a put line (after `put `) carries a put tag.
fn carries_tag(rest: &[u8]) -> bool {
    put_tokens(rest).any(is_tag)
}

/// A put line with a NUL, which beanstalkd refuses outright: its
/// `BAD_FORMAT`, the body left to be read as commands; but a line that
/// carries a tag is a tagging client's, refused as any of its lines is,
/// its body never run (reference §3.1 steps 1 and 4). `rest` follows
/// `put `.
pub(super) fn put_with_nul(rest: &[u8]) -> Result<Command, ParseError> {
    if !carries_tag(rest) {
        return Err(ParseError::BadFormat);
    }
    let mut f = Fields::new(rest);
    match (|| Ok::<_, ParseError>((f.u32()?, f.u32()?, f.u32()?, f.u32()?)))() {
        Ok((pri, delay, ttr, bytes)) => Ok(Command::Put {
            pri,
            delay,
            ttr,
            bytes,
            after_size: AfterSize::RefusedTags,
            tags: PutTags::NONE,
        }),
        Err(_) => Err(ParseError::UnsizedTaggedPut),
    }
}

/// What a whole put line too long for [`MAX_PUT_LINE`] leaves on the
/// socket: [`LongPut`] given all of it at once.
pub fn long_tagged_put(line: &[u8]) -> Option<Option<u32>> {
    let mut long = LongPut::new(line);
    long.scan(line);
    long.end()
}

/// A line too long for [`MAX_PUT_LINE`], read a piece at a time as it
/// arrives and is dropped, and never kept: what it leaves on the socket,
/// decided from every byte of it as [`parse_put`] would read the whole
/// line (its four numbers as [`Fields`] reads them, its tags as
/// [`carries_tag`] finds them), so that it is the same however its
/// pieces were cut (reference §3.1 step 4).
#[derive(Debug, Default)]
pub struct LongPut {
    /// The line starts with `put `: nothing else is read otherwise.
    put: bool,
    /// Bytes of `put ` passed over so far.
    prefix: usize,
    /// Numbers read whole so far (four: the size is read).
    fields: usize,
    /// The number being read, once a digit of it is.
    value: Option<u64>,
    /// The numbers cannot be read: the size is unknown.
    failed: bool,
    /// The fourth number, the body's size.
    size: Option<u32>,
    /// A token seen so far is a put tag.
    tagged: bool,
    /// The first bytes of the token being read, up to a tag's prefix.
    token: [u8; 4],
    /// How many of them are in `token`.
    token_len: usize,
}

impl LongPut {
    /// A line whose first bytes are `first` (four are all it looks at);
    /// [`LongPut::scan`] is then given every byte of it, from the first.
    pub fn new(first: &[u8]) -> LongPut {
        LongPut { put: first.starts_with(PUT), ..LongPut::default() }
    }

    /// The line's next bytes, each given once, in order.
    pub fn scan(&mut self, piece: &[u8]) {
        if !self.put {
            return;
        }
        for &b in piece {
            if self.prefix < PUT.len() {
                self.prefix = self.prefix.wrapping_add(1);
                continue;
            }
            if self.tagged && (self.failed || self.fields == 4) {
                return;
            }
            self.number_byte(b);
            self.tag_byte(b);
        }
    }

    /// One byte of the line's four numbers, as [`Fields::u32`] reads
    /// them: spaces before each, then its digits, a u32.
    fn number_byte(&mut self, b: u8) {
        if self.failed || self.fields == 4 {
            return;
        }
        match self.value {
            _ if b.is_ascii_digit() => {
                let digit = u64::from(b.wrapping_sub(b'0'));
                self.value = self.value.unwrap_or(0).checked_mul(10).and_then(|v| v.checked_add(digit));
                self.failed = self.value.is_none();
            }
            None => self.failed = b != b' ',
            Some(value) => {
                self.end_number(value);
                self.failed |= self.fields < 4 && b != b' ';
            }
        }
    }

    /// A number read whole: a u32, else the numbers cannot be read.
    fn end_number(&mut self, value: u64) {
        self.value = None;
        match u32::try_from(value) {
            Ok(n) => {
                self.fields = self.fields.wrapping_add(1);
                self.size = Some(n).filter(|_| self.fields == 4);
            }
            Err(_) => self.failed = true,
        }
    }

    /// One byte of the line's tokens, split at spaces and tabs.
    fn tag_byte(&mut self, b: u8) {
        if self.tagged {
            return;
        }
        if b == b' ' || b == b'\t' {
            self.token_len = 0;
        } else if let Some(slot) = self.token.get_mut(self.token_len) {
            *slot = b;
            self.token_len = self.token_len.wrapping_add(1);
            self.tagged = self.token_len == self.token.len() && is_tag(&self.token);
        }
    }

    /// At the line's end: `None` for a line that is not a put or carries
    /// no tag (beanstalkd's over-long line: its body, if any, is read as
    /// commands); else `Some` of its body's size, if it could be read
    /// (`Some(None)`: the body cannot be told from what follows it, and
    /// the connection must end).
    pub fn end(mut self) -> Option<Option<u32>> {
        if let (Some(value), false, 3) = (self.value, self.failed, self.fields) {
            self.end_number(value);
        }
        (self.put && self.tagged).then_some(self.size)
    }
}

/// `<key>` or `<key>:<seconds>`, as tuber reads a unique key: the seconds
/// after the last colon, a u32 as a tag's seconds, and the key a legal
/// tube name, so holding no colon of its own; left in the line.
fn unique_key_token(token: &[u8]) -> Option<(&[u8], u32)> {
    let Some(colon) = token.iter().rposition(|&b| b == b':') else {
        return TubeName::is_legal(token).then_some((token, 0));
    };
    let name = token.get(..colon).filter(|name| TubeName::is_legal(name))?;
    Some((name, tuber_seconds(token.get(colon.checked_add(1)?..)?)?))
}

/// `<key>` or `<key>:<limit>`, as tuber reads a concurrency key: the
/// limit after the last colon, a u32 read as a tag's seconds, but not 0.
fn parse_con_key(token: &[u8]) -> Option<(&[u8], u32)> {
    let Some(colon) = token.iter().rposition(|&b| b == b':') else {
        return TubeName::is_legal(token).then_some((token, 1));
    };
    let name = token.get(..colon).filter(|name| TubeName::is_legal(name))?;
    let limit = tuber_seconds(token.get(colon.checked_add(1)?..)?).filter(|&n| n > 0)?;
    Some((name, limit))
}

/// A tag's number as tuber reads its seconds: a u32 as Rust's
/// `str::parse` takes it (digits, an optional leading `+`).
fn tuber_seconds(text: &[u8]) -> Option<u32> {
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let (number, _) = leading_number(digits)?;
    u32::try_from(number).ok()
}
