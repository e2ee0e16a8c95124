//! A `put` line (reference §3.1-3.1d): its four numbers, then nothing,
//! beanstalkd's junk, or put tags (tuber's `idp:`, `grp:`, `aft:` and
//! `con:`, and our `max:`). It owns the rule that keeps a tagging
//! client's body from ever being run as commands: a line that carries a
//! tag may pass beanstalkd's 224 bytes, and, refused for any reason,
//! has its body swallowed, or, its size unknown, its connection ended.
//! Like the rest of the parser, it touches no state.

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

/// What a put line too long for [`MAX_PUT_LINE`] leaves on the socket, as
/// far as its first bytes tell: `None` for a line that is not a put or
/// carries no tag (beanstalkd's over-long line: its body, if any, is read
/// as commands); else `Some` of its body's size, if that could be read
/// (`Some(None)`: the body cannot be told from what follows it, and the
/// connection must end). `start` is the line's first bytes.
pub fn long_tagged_put(start: &[u8]) -> Option<Option<u32>> {
    let rest = start.strip_prefix(PUT)?;
    if !carries_tag(rest) {
        return None;
    }
    let mut f = Fields::new(rest);
    Some(
        (|| Ok::<_, ParseError>((f.u32()?, f.u32()?, f.u32()?, f.u32()?)))()
            .ok()
            .map(|(_, _, _, bytes)| bytes),
    )
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
