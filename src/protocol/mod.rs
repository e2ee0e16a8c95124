//! The wire protocol: bytes to [`Command`] (here, and a `put` line with
//! its tags in `put.rs`; what a line can be is `command.rs`), [`Reply`] to
//! bytes (`reply.rs`), and the [`TubeName`] both carry (`tube_name.rs`);
//! numbers are read by `fields.rs`; which commands a connection that is
//! not the admin socket's may run, `admin.rs`. No state.
//!
//! Parsing follows beanstalkd 1.13 exactly where a client can see it
//! (reference §1.3-1.4): commands are recognised by prefix in a fixed order,
//! which decides between `UNKNOWN_COMMAND` and `BAD_FORMAT`; numbers may be
//! preceded by any number of spaces and may carry leading zeros; `kick`
//! parses like C's `strtoul`; `put` and `pause-tube` report some problems only
//! after they have been counted. Framing (finding the CRLF, reading bodies)
//! belongs to the connection, not here: [`parse`] gets one line without its
//! CRLF and never reads or writes a socket.
//!
//! Every byte here comes straight from a client, so this module is held to
//! a stricter rule than the rest: no indexing, slicing or arithmetic that
//! could panic, and no `unwrap` — the lints below make the compiler check it.
#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects, clippy::unwrap_used, clippy::expect_used)]

mod admin;
mod command;
mod fields;
mod put;
mod reply;
mod tube_name;

use crate::ids::JobId;
pub use admin::{Admin, AdminCommands, Name};
pub use command::{
    AfterSize, Command, ConKey, Page, ParseError, PutTags, ReserveMode, TagName, UniqueKey, MAX_WEIGHT,
};
use fields::{id_fields, parse_kick_bound, skip_spaces, Fields};
use put::parse_put;
pub use put::{long_tagged_put, LongPut, MAX_PUT_LINE, PUT};
pub use reply::{data_reply_len, Data, NamedState, Reply, ReplyRoom, SHORT_REPLY_LEN};
use tube_name::is_name_byte;
pub use tube_name::{TubeName, MAX_TUBE_NAME};

/// The version of beanstalkd whose protocol this server speaks: what
/// `stats` reports as `version`, and the metrics' `build_info`.
pub const VERSION: &str = "1.13";

/// Longest command line, CRLF included (reference §1.2).
pub const MAX_LINE: usize = 224;

/// Most jobs one `reserve-batch` or `delete-batch` names (tuber's bound).
pub const MAX_BATCH: usize = 1000;

/// Longest `delete-batch` line, CRLF included: room for [`MAX_BATCH`]
/// ids of 20 digits with a `+` and a space or more each (tuber reads any
/// white space between them). The one line allowed past [`MAX_LINE`]
/// (reference §1.2).
pub const MAX_BATCH_LINE: usize = 32 * 1024;

/// The prefix of the one command whose line may pass [`MAX_LINE`]
/// whatever it carries. Only a space may follow it: `delete-batch` alone,
/// or followed by anything else, is no command (reference §1.3).
pub const DELETE_BATCH: &[u8] = b"delete-batch ";

/// Parses one command line, given without its CRLF.
pub fn parse(line: &[u8]) -> Result<Command, ParseError> {
    use Command as C;
    use ParseError::BadFormat;

    // beanstalkd turns the line into a C string, so an embedded NUL would cut
    // it short; it refuses such lines outright, whatever the command. But
    // a tagging client's put never has its body run, whatever refuses it.
    if line.contains(&0) {
        return line.strip_prefix(PUT).map_or(Err(BadFormat), put::put_with_nul);
    }
    // Prefixes in beanstalkd's order: the first match decides the command.
    let exact = |command: Command, rest: &[u8]| {
        if rest.is_empty() {
            Ok(command)
        } else {
            Err(BadFormat)
        }
    };
    if let Some(rest) = line.strip_prefix(PUT) {
        return parse_put(rest);
    }
    if let Some(rest) = line.strip_prefix(b"peek ") {
        return Ok(C::Peek(Fields::new(rest).last_u64()?));
    }
    if let Some(rest) = line.strip_prefix(b"peek-ready") {
        return exact(C::PeekReady, rest);
    }
    if let Some(rest) = line.strip_prefix(b"peek-delayed") {
        return exact(C::PeekDelayed, rest);
    }
    if let Some(rest) = line.strip_prefix(b"peek-buried") {
        return exact(C::PeekBuried, rest);
    }
    if let Some(rest) = line.strip_prefix(b"reserve-with-timeout ") {
        // Trailing bytes after the number are ignored (reference §1.4).
        let secs = Fields::new(rest).u32()?;
        if secs > i32::MAX as u32 {
            return Err(BadFormat);
        }
        return Ok(C::ReserveWithTimeout(secs));
    }
    // Ours (beanstalkd's pull request #658), before `reserve`, whose prefix
    // they share. Nothing may follow the number: a new command copies no
    // quirk.
    if let Some(rest) = line.strip_prefix(b"reserve-with-abort-timeout ") {
        let mut f = Fields::new(rest);
        let secs = f.u32()?;
        f.end()?;
        if secs > i32::MAX as u32 {
            return Err(BadFormat);
        }
        return Ok(C::ReserveWithAbort(Some(secs)));
    }
    if let Some(rest) = line.strip_prefix(b"reserve-with-abort") {
        return exact(C::ReserveWithAbort(None), rest);
    }
    if let Some(rest) = line.strip_prefix(b"reserve-job ") {
        return Ok(C::ReserveJob(Fields::new(rest).last_u64()?));
    }
    // tuber's, before `reserve`, whose prefix it shares: the mode's
    // name, and nothing else.
    if let Some(rest) = line.strip_prefix(b"reserve-mode ") {
        return match rest {
            b"fifo" => Ok(C::ReserveMode(ReserveMode::Fifo)),
            b"weighted" => Ok(C::ReserveMode(ReserveMode::Weighted)),
            b"weighted-fair" => Ok(C::ReserveMode(ReserveMode::WeightedFair)),
            _ => Err(BadFormat),
        };
    }
    // tuber's, before `reserve`, whose prefix it shares.
    if let Some(rest) = line.strip_prefix(b"reserve-batch ") {
        // tuber's reading: the count and an optional timeout, split at
        // white space, each a `u32` as Rust reads it (a `+` allowed).
        let mut fields = fields::id_fields(rest);
        let mut next = || fields.next().map(|n| n.and_then(|n| u32::try_from(n).ok()).ok_or(BadFormat));
        let count = next().ok_or(BadFormat)??;
        let timeout = next().transpose()?;
        if next().is_some() || !(1..=MAX_BATCH).contains(&(count as usize)) {
            return Err(BadFormat);
        }
        return Ok(C::ReserveBatch(count, timeout));
    }
    if let Some(rest) = line.strip_prefix(b"reserve") {
        return exact(C::Reserve, rest);
    }
    if let Some(rest) = line.strip_prefix(b"delete ") {
        return Ok(C::Delete(Fields::new(rest).last_u64()?));
    }
    if let Some(ids) = line.strip_prefix(DELETE_BATCH) {
        let mut count: usize = 0;
        for id in id_fields(ids) {
            id.ok_or(BadFormat)?;
            count = count.saturating_add(1);
        }
        return if (1..=MAX_BATCH).contains(&count) { Ok(C::DeleteBatch) } else { Err(BadFormat) };
    }
    if let Some(rest) = line.strip_prefix(b"release ") {
        let mut f = Fields::new(rest);
        let (id, pri) = (f.u64()?, f.u32()?);
        let delay = f.u32()?;
        f.end()?;
        return Ok(C::Release { id, pri, delay });
    }
    if let Some(rest) = line.strip_prefix(b"bury ") {
        let mut f = Fields::new(rest);
        let (id, pri) = (f.u64()?, f.u32()?);
        f.end()?;
        return Ok(C::Bury { id, pri });
    }
    if let Some(rest) = line.strip_prefix(b"kick ") {
        return Ok(C::Kick(parse_kick_bound(rest)?));
    }
    if let Some(rest) = line.strip_prefix(b"kick-job ") {
        return Ok(C::KickJob(Fields::new(rest).last_u64()?));
    }
    if let Some(rest) = line.strip_prefix(b"touch ") {
        return Ok(C::Touch(Fields::new(rest).last_u64()?));
    }
    if let Some(rest) = line.strip_prefix(b"stats-job ") {
        return Ok(C::StatsJob(Fields::new(rest).last_u64()?));
    }
    if let Some(rest) = line.strip_prefix(b"stats-tube ") {
        return Ok(C::StatsTube(TubeName::new(rest).ok_or(BadFormat)?));
    }
    if let Some(rest) = line.strip_prefix(b"stats-group ") {
        return Ok(C::StatsGroup(TubeName::new(rest).ok_or(BadFormat)?));
    }
    if let Some(rest) = line.strip_prefix(b"stats") {
        return exact(C::Stats, rest);
    }
    if let Some(rest) = line.strip_prefix(b"use ") {
        return Ok(C::Use(TubeName::new(rest).ok_or(BadFormat)?));
    }
    if let Some(rest) = line.strip_prefix(b"watch ") {
        // tuber's weight after one space; a name holds no space, so such a
        // line was `BAD_FORMAT` in beanstalkd.
        let mut parts = rest.splitn(2, |&b| b == b' ');
        let name = parts.next().unwrap_or_default();
        let weight = match parts.next() {
            Some(weight) => Some(watch_weight(weight).ok_or(BadFormat)?),
            None => None,
        };
        return Ok(C::Watch(TubeName::new(name).ok_or(BadFormat)?, weight));
    }
    if let Some(rest) = line.strip_prefix(b"ignore ") {
        return Ok(C::Ignore(TubeName::new(rest).ok_or(BadFormat)?));
    }
    if let Some(rest) = line.strip_prefix(b"list-tubes-watched") {
        return exact(C::ListTubesWatched, rest);
    }
    if let Some(rest) = line.strip_prefix(b"list-tube-used") {
        return exact(C::ListTubeUsed, rest);
    }
    if let Some(rest) = line.strip_prefix(b"list-tubes") {
        return exact(C::ListTubes, rest);
    }
    if line.starts_with(b"quit") {
        // A bare prefix: `quitx` and `quit now` quit too.
        return Ok(C::Quit);
    }
    if let Some(rest) = line.strip_prefix(b"pause-tube") {
        return parse_pause_tube(rest);
    }
    if let Some(rest) = line.strip_prefix(b"move-job ") {
        // The id, one space, and the name to the end of the line, as `use`.
        let mut f = Fields::new(rest);
        let id = f.u64()?;
        let name = f.rest.strip_prefix(b" ").ok_or(BadFormat)?;
        return Ok(C::MoveJob { id, tube: TubeName::new(name).ok_or(BadFormat)? });
    }
    if let Some(rest) = line.strip_prefix(b"clear-tube ") {
        return Ok(C::ClearTube(TubeName::new(rest).ok_or(BadFormat)?));
    }
    if let Some(rest) = line.strip_prefix(b"flush-tube ") {
        return Ok(C::FlushTube(TubeName::new(rest).ok_or(BadFormat)?));
    }
    // tuber's, the name as for `flush-tube`.
    if let Some(rest) = line.strip_prefix(b"flush-buried ") {
        return Ok(C::FlushBuried(TubeName::new(rest).ok_or(BadFormat)?));
    }
    // Ours, after a fork's names (reference §3.29): the whole word, then
    // nothing or a space and the page.
    if let Some(rest) = line.strip_prefix(b"list-jobs-") {
        let (command, rest): (fn(Page) -> Command, _) = if let Some(rest) = rest.strip_prefix(b"ready") {
            (C::ListJobsReady, rest)
        } else if let Some(rest) = rest.strip_prefix(b"delayed") {
            (C::ListJobsDelayed, rest)
        } else if let Some(rest) = rest.strip_prefix(b"reserved") {
            (C::ListJobsReserved, rest)
        } else if let Some(rest) = rest.strip_prefix(b"buried") {
            (C::ListJobsBuried, rest)
        } else {
            return Err(ParseError::UnknownCommand);
        };
        return parse_page(rest).map(command);
    }
    // tuber's, whole lines only: `drainx` or `drain ` is no command.
    match line {
        b"drain" => Ok(C::Drain),
        b"undrain" => Ok(C::Undrain),
        b"peek-reserved" => Ok(C::PeekReserved),
        b"touch-all" => Ok(C::TouchAll),
        _ => Err(ParseError::UnknownCommand),
    }
}

/// The ids of a line [`parse`] took as [`Command::DeleteBatch`], in order.
pub fn batch_ids(line: &[u8]) -> impl Iterator<Item = JobId> + '_ {
    let ids = line.strip_prefix(DELETE_BATCH).unwrap_or_default();
    id_fields(ids).map_while(|id| id)
}

/// What follows a `list-jobs-<state>`: nothing (a whole page from the
/// start), or a space, the count and, optionally, the id to list after.
fn parse_page(rest: &[u8]) -> Result<Page, ParseError> {
    let all = MAX_BATCH as u32;
    if rest.is_empty() {
        return Ok(Page { count: all, after: None });
    }
    if !rest.starts_with(b" ") {
        return Err(ParseError::UnknownCommand);
    }
    let mut f = Fields::new(rest);
    let count = f.u32()?;
    let after = if f.rest.is_empty() { None } else { Some(f.u64()?) };
    f.end()?;
    if count == 0 || count > all {
        return Err(ParseError::BadFormat);
    }
    Ok(Page { count, after })
}

/// `pause-tube`: spaces, a run of name bytes, then the delay to the end.
/// A `watch` weight as tuber reads it: a number as Rust's `u32::from_str`
/// reads it, 1 to [`MAX_WEIGHT`].
fn watch_weight(s: &[u8]) -> Option<u16> {
    let weight = fields::tuber_number(s)?;
    u16::try_from(weight).ok().filter(|w| (1..=MAX_WEIGHT).contains(w))
}

fn parse_pause_tube(rest: &[u8]) -> Result<Command, ParseError> {
    let rest = skip_spaces(rest);
    let name_len = rest.iter().take_while(|&&b| is_name_byte(b)).count();
    if name_len == 0 {
        return Err(ParseError::BadFormat);
    }
    let (name, rest) = rest.split_at(name_len);
    let delay = Fields::new(rest).last_u32()?;
    Ok(Command::PauseTube { tube: TubeName::new(name), delay })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use Command as C;
    use ParseError::{BadFormat, UnknownCommand};

    /// `put 1 2 3 4` with what followed the size and the put's tags.
    fn put_1234(after_size: AfterSize, tags: PutTags) -> Command {
        C::Put { pri: 1, delay: 2, ttr: 3, bytes: 4, after_size, tags }
    }

    fn name(s: &str) -> TubeName {
        TubeName::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn put_takes_four_numbers_with_loose_spacing() {
        let put = |pri, delay, ttr, bytes, junk: bool| C::Put {
            pri,
            delay,
            ttr,
            bytes,
            after_size: if junk { AfterSize::Junk } else { AfterSize::Nothing },
            tags: PutTags::NONE,
        };
        assert_eq!(parse(b"put 1 2 3 4"), Ok(put(1, 2, 3, 4, false)));
        assert_eq!(parse(b"put  00   0  1   01"), Ok(put(0, 0, 1, 1, false)));
        assert_eq!(parse(b"put 0 0 1 1 "), Ok(put(0, 0, 1, 1, true)));
        assert_eq!(parse(b"put 0 0 1 1x"), Ok(put(0, 0, 1, 1, true)));
        assert_eq!(
            parse(b"put 4294967295 4294967295 4294967295 0"),
            Ok(put(u32::MAX, u32::MAX, u32::MAX, 0, false))
        );
        assert_eq!(parse(b"put 4294967296 0 1 1"), Err(BadFormat));
        assert_eq!(parse(b"put -1 0 1 1"), Err(BadFormat));
        assert_eq!(parse(b"put 0 0 1"), Err(BadFormat));
        assert_eq!(parse(b"put "), Err(BadFormat));
        assert_eq!(parse(b"put"), Err(UnknownCommand));
    }

    #[test]
    fn put_takes_tubers_unique_key_token_and_nothing_else() {
        let key = |name: &[u8], cooldown| Some(UniqueKey { name: TubeName::new(name).unwrap(), cooldown });
        let put = |key: Option<UniqueKey>| {
            put_1234(AfterSize::Nothing, PutTags::new(key.as_ref(), None, None).unwrap())
        };
        let junk = put_1234(AfterSize::Junk, PutTags::NONE);
        let refused = put_1234(AfterSize::RefusedTags, PutTags::NONE);
        assert_eq!(parse(b"put 1 2 3 4 idp:my-key"), Ok(put(key(b"my-key", 0))));
        assert_eq!(parse(b"put 1 2 3 4 idp:report:300"), Ok(put(key(b"report", 300))));
        assert_eq!(parse(b"put 1 2 3 4 idp:k:0"), Ok(put(key(b"k", 0))));
        assert_eq!(parse(b"put 1 2 3 4 idp:k:+7"), Ok(put(key(b"k", 7))));
        assert_eq!(parse(b"put 1 2 3 4 idp:k:4294967295"), Ok(put(key(b"k", u32::MAX))));
        assert_eq!(parse(b"put 1 2 3 4  idp:a \tidp:b "), Ok(put(key(b"b", 0))), "tuber: the last wins");
        // tuber's tags this server does not take, or takes but malformed:
        // refused once the body is read, never taken as commands.
        for line in [
            &b"put 1 2 3 4 idp:"[..],
            b"put 1 2 3 4 idp:-bad",
            b"put 1 2 3 4 idp:k:",
            b"put 1 2 3 4 idp:k:x",
            b"put 1 2 3 4 idp:k:-1",
            b"put 1 2 3 4 idp:k:4294967296",
            b"put 1 2 3 4 idp:a:b:5",
            b"put 1 2 3 4 grp:",
            b"put 1 2 3 4 aft:a:b",
            b"put 1 2 3 4 con:c:0",
            b"put 1 2 3 4 con:c:x",
            b"put 1 2 3 4 con:",
            b"put 1 2 3 4 con:a:b:2",
            b"put 1 2 3 4 idp:k grp:-g",
            // A tag among junk: still a tagging client's line.
            b"put 1 2 3 4 idp:k extra",
            b"put 1 2 3 4 x idp:k",
        ] {
            assert_eq!(parse(line), Ok(refused.clone()), "{}", String::from_utf8_lossy(line));
        }
        let long = [b'k'; 201];
        assert_eq!(parse(&[&b"put 1 2 3 4 idp:"[..], &long].concat()), Ok(refused));
        // Anything else is beanstalkd's junk: the body is not read.
        for line in [&b"put 1 2 3 4idp:k"[..], b"put 1 2 3 4 IDP:k", b"put 1 2 3 4 x", b"put 1 2 3 4 xidp:k"]
        {
            assert_eq!(parse(line), Ok(junk.clone()), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn put_takes_a_retry_limit_alone_or_with_a_key_in_any_order() {
        let put = |key: Option<&[u8]>, limit| {
            let key = key.map(|name| UniqueKey { name: TubeName::new(name).unwrap(), cooldown: 0 });
            put_1234(AfterSize::Nothing, PutTags::new(key.as_ref(), limit, None).unwrap())
        };
        assert_eq!(parse(b"put 1 2 3 4 max:3"), Ok(put(None, Some(3))));
        assert_eq!(parse(b"put 1 2 3 4 max:0"), Ok(put(None, Some(0))));
        assert_eq!(parse(b"put 1 2 3 4 max:+09"), Ok(put(None, Some(9))));
        assert_eq!(parse(b"put 1 2 3 4 max:4294967295"), Ok(put(None, Some(u32::MAX))));
        assert_eq!(parse(b"put 1 2 3 4 max:1 max:2"), Ok(put(None, Some(2))), "the last wins");
        assert_eq!(parse(b"put 1 2 3 4 idp:k\tmax:5"), Ok(put(Some(b"k"), Some(5))));
        assert_eq!(parse(b"put 1 2 3 4 max:5 idp:k"), Ok(put(Some(b"k"), Some(5))));
        let refused = put_1234(AfterSize::RefusedTags, PutTags::NONE);
        for line in [
            &b"put 1 2 3 4 max:"[..],
            b"put 1 2 3 4 max:x",
            b"put 1 2 3 4 max:-1",
            b"put 1 2 3 4 max:4294967296",
            b"put 1 2 3 4 max:1:2",
            b"put 1 2 3 4 max:3 grp:g:1",
            b"put 1 2 3 4 max:3 x",
        ] {
            assert_eq!(parse(line), Ok(refused.clone()), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn a_tagged_put_may_pass_beanstalkds_line_limit_and_an_untagged_one_may_not() {
        let name = |c: u8| vec![c; MAX_TUBE_NAME];
        let digits = b"4294967295";
        // Every tag once, each at its longest: the longest legal put line.
        let longest = [
            &b"put "[..],
            digits,
            b" ",
            digits,
            b" ",
            digits,
            b" ",
            digits,
            b" idp:",
            &name(b'k'),
            b":",
            digits,
            b" grp:",
            &name(b'g'),
            b" aft:",
            &name(b'a'),
            b" con:",
            &name(b'c'),
            b":",
            digits,
            b" max:",
            digits,
        ]
        .concat();
        assert_eq!(longest.len() + 2, MAX_PUT_LINE);
        let Ok(C::Put { tags, after_size: AfterSize::Nothing, .. }) = parse(&longest) else {
            panic!("the longest tagged put is refused");
        };
        assert_eq!(tags.name(TagName::After), Some(&name(b'a')[..]));
        assert_eq!(tags.name(TagName::Con), Some(&name(b'c')[..]));
        // Past 224 bytes, a put with no tag is beanstalkd's over-long line.
        let untagged = [&b"put 1 2 3 4 "[..], &[b'x'; 220]].concat();
        assert_eq!(parse(&untagged), Err(BadFormat));
        let spaced = [&b"put 1 2 3 4"[..], &[b' '; 220]].concat();
        assert_eq!(parse(&spaced), Err(BadFormat));
        // A tagged put whose size cannot be read: the connection must end.
        assert_eq!(parse(b"put 1 2 3 x grp:g"), Err(ParseError::UnsizedTaggedPut));
        assert_eq!(parse(b"put 1 2 3 grp:g"), Err(ParseError::UnsizedTaggedPut));
        assert_eq!(parse(b"put 1 2 3 x"), Err(BadFormat));
        // What a line too long even for a tagged put says of its body.
        assert_eq!(long_tagged_put(&longest), Some(Some(u32::MAX)));
        assert_eq!(long_tagged_put(b"put 1 2 3 x grp:g"), Some(None));
        assert_eq!(long_tagged_put(&untagged), None);
        assert_eq!(long_tagged_put(b"peek grp:g"), None);
    }

    /// A line too long to keep is read as it is dropped, a piece at a
    /// time: what it says of its body is what the whole line says, at
    /// every cut (issue 62: a tag past the first piece once ran the body).
    #[test]
    fn a_long_put_says_the_same_of_its_body_however_it_is_cut() {
        let padded = |head: &[u8], tail: &[u8]| [head, &[b' '; 961][..], tail].concat();
        let lines = [
            (padded(b"put 0 0 60 8", b"grp:x"), Some(Some(8))),
            (padded(b"put 0 0 60 8", b"\tmax:3"), Some(Some(8))),
            (padded(b"put 0 0 60 8", b"gr p:x"), None),
            (padded(b"put 0 0 60 8 grp:a\0", b""), Some(Some(8))),
            (padded(b"put 0 0 60 x", b"grp:x"), Some(None)),
            (padded(b"put 0 0 60 4294967296", b"grp:x"), Some(None)),
            (padded(b"put 0 0 60", b"12 grp:x"), Some(Some(12))),
            (padded(b"peek 1", b"grp:x"), None),
            ([&b"put 0 0 60 "[..], &[b'0'; 900], b"8 grp:x"].concat(), Some(Some(8))),
            ([&b"put 0 0 60 "[..], &[b'0'; 900], b"8"].concat(), None),
            (padded(b"put 0 0 60 8 aft:", b""), Some(Some(8))),
        ];
        for (line, says) in lines {
            let shown = String::from_utf8_lossy(&line).into_owned();
            assert_eq!(long_tagged_put(&line), says, "{shown:?} whole");
            for cut in 0..=line.len() {
                let (first, rest) = line.split_at(cut);
                // As framing gives it: the start of the line, then each
                // byte once, whatever the pieces.
                let mut long = LongPut::new(&line);
                long.scan(first);
                long.scan(rest);
                assert_eq!(long.end(), says, "{shown:?} cut at {cut}");
            }
            let mut long = LongPut::new(&line);
            for byte in line.chunks(1) {
                long.scan(byte);
            }
            assert_eq!(long.end(), says, "{shown:?} a byte at a time");
        }
    }

    #[test]
    fn put_takes_tubers_group_and_after_group_with_any_other_tag() {
        let groups = |group: Option<&[u8]>, after: Option<&[u8]>| {
            put_1234(AfterSize::Nothing, PutTags::NONE.with_groups(group, after).unwrap())
        };
        assert_eq!(parse(b"put 1 2 3 4 grp:batch-1"), Ok(groups(Some(b"batch-1"), None)));
        assert_eq!(parse(b"put 1 2 3 4 aft:batch-1"), Ok(groups(None, Some(b"batch-1"))));
        assert_eq!(parse(b"put 1 2 3 4 aft:a grp:b"), Ok(groups(Some(b"b"), Some(b"a"))));
        assert_eq!(parse(b"put 1 2 3 4 grp:a grp:b"), Ok(groups(Some(b"b"), None)), "the last wins");
        let Ok(C::Put { tags, .. }) = parse(b"put 1 2 3 4 idp:k1 grp:g1 aft:g0 con:c1 max:2") else {
            panic!("not a put");
        };
        assert_eq!(tags.key().map(|key| key.name), TubeName::new(b"k1"));
        assert_eq!(tags.con_name(), Some((&b"c1"[..], 1)));
        assert_eq!(tags.name(TagName::Group), Some(&b"g1"[..]));
        assert_eq!(tags.name(TagName::After), Some(&b"g0"[..]));
        assert_eq!(tags.limit, Some(2));
        let refused = put_1234(AfterSize::RefusedTags, PutTags::NONE);
        for line in [&b"put 1 2 3 4 grp:"[..], b"put 1 2 3 4 aft:-x", b"put 1 2 3 4 grp:a*b"] {
            assert_eq!(parse(line), Ok(refused.clone()), "{}", String::from_utf8_lossy(line));
        }
        assert_eq!(parse(b"stats-group batch-1"), Ok(C::StatsGroup(name("batch-1"))));
        for line in [&b"stats-group "[..], b"stats-group -x", b"stats-group a b"] {
            assert_eq!(parse(line), Err(BadFormat), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn put_takes_tubers_concurrency_key_with_its_limit_or_one() {
        let con = |name: &[u8], limit| {
            let con = Some(ConKey { name: TubeName::new(name).unwrap(), limit });
            let after_size = AfterSize::Nothing;
            put_1234(after_size, PutTags::new(None, None, con.as_ref()).unwrap())
        };
        assert_eq!(parse(b"put 1 2 3 4 con:api"), Ok(con(b"api", 1)));
        assert_eq!(parse(b"put 1 2 3 4 con:api:3"), Ok(con(b"api", 3)));
        assert_eq!(parse(b"put 1 2 3 4 con:api:+03"), Ok(con(b"api", 3)));
        assert_eq!(parse(b"put 1 2 3 4 con:a con:b:2"), Ok(con(b"b", 2)), "the last wins");
        let all = parse(b"put 1 2 3 4 con:c:2 idp:k max:4");
        let tags = |c: &C| match c {
            C::Put { tags, .. } => (tags.key().map(|k| k.name), tags.limit, tags.con()),
            _ => (None, None, None),
        };
        assert_eq!(
            all.as_ref().map(tags),
            Ok((TubeName::new(b"k"), Some(4), Some(ConKey { name: TubeName::new(b"c").unwrap(), limit: 2 })))
        );
    }

    #[test]
    fn id_fields_are_u64_with_nothing_after() {
        assert_eq!(parse(b"peek 01"), Ok(C::Peek(1)));
        assert_eq!(parse(b"peek  1"), Ok(C::Peek(1)));
        assert_eq!(parse(b"peek 18446744073709551615"), Ok(C::Peek(u64::MAX)));
        assert_eq!(parse(b"peek 18446744073709551616"), Err(BadFormat));
        assert_eq!(parse(b"delete 1 "), Err(BadFormat));
        assert_eq!(parse(b"delete +1"), Err(BadFormat));
        assert_eq!(parse(b"touch\t1"), Err(UnknownCommand));
        assert_eq!(parse(b"release 1x 2 3"), Err(BadFormat));
        assert_eq!(parse(b"release 12 3"), Err(BadFormat));
        assert_eq!(parse(b"release 1 2 3"), Ok(C::Release { id: 1, pri: 2, delay: 3 }));
        assert_eq!(parse(b"bury 5 6"), Ok(C::Bury { id: 5, pri: 6 }));
    }

    #[test]
    fn commands_without_arguments_must_match_exactly() {
        assert_eq!(parse(b"reserve"), Ok(C::Reserve));
        for line in [
            &b"reserve "[..],
            b"reservex",
            b"reserve-job",
            b"reserve-with-timeout",
            b"stats ",
            b"stats-job",
            b"stats-tube",
            b"statsx",
            b"list-tubesx",
            b"peek-readyx",
            b"list-tube-used ",
        ] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
        for line in [&b"list-tube"[..], b"", b"PUT 0 0 1 1", b"Stats", b"peek", b"use"] {
            assert_eq!(parse(line), Err(UnknownCommand), "{:?}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn batches_take_one_to_a_thousand_and_nothing_else() {
        assert_eq!(parse(b"reserve-batch 5"), Ok(C::ReserveBatch(5, None)));
        assert_eq!(parse(b"reserve-batch  1000"), Ok(C::ReserveBatch(1000, None)));
        // tuber's long poll: a timeout after the count, read as it is.
        assert_eq!(parse(b"reserve-batch 5 0"), Ok(C::ReserveBatch(5, Some(0))));
        assert_eq!(parse(b"reserve-batch 5\t+30 "), Ok(C::ReserveBatch(5, Some(30))));
        assert_eq!(parse(b"reserve-batch 1 4294967295"), Ok(C::ReserveBatch(1, Some(u32::MAX))));
        // tuber's reading of a number: white space around it, a `+`.
        for line in
            [&b"reserve-batch +5"[..], b"reserve-batch 5 ", b"reserve-batch \t5\t", b"reserve-batch 05"]
        {
            assert_eq!(parse(line), Ok(C::ReserveBatch(5, None)), "{:?}", String::from_utf8_lossy(line));
        }
        for line in [
            &b"reserve-batch 0"[..],
            b"reserve-batch 1001",
            b"reserve-batch",
            b"reserve-batch ",
            b"reserve-batch x",
            b"reserve-batch -1",
            b"reserve-batch +",
            b"reserve-batch 1 2 3",
            b"reserve-batch 1 -2",
            b"reserve-batch 1 x",
            b"reserve-batch 1 4294967296",
            b"reserve-batch 4294967297 1",
            b"reserve-batch 99999999999999999999",
        ] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
        assert_eq!(parse(b"delete-batch 1 2 3 99"), Ok(C::DeleteBatch));
        assert_eq!(batch_ids(b"delete-batch 1  02 3 99").collect::<Vec<_>>(), [1, 2, 3, 99]);
        // tuber's: any white space between, before and after the ids.
        assert_eq!(batch_ids(b"delete-batch  +1\t2 3 \t").collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(parse(b"delete-batch 1 "), Ok(C::DeleteBatch));
        let most: String = (1..=1000).map(|id| format!(" {id}")).collect();
        assert_eq!(parse(format!("delete-batch{most}").as_bytes()), Ok(C::DeleteBatch));
        assert_eq!(parse(format!("delete-batch{most} 1001").as_bytes()), Err(BadFormat));
        for line in [
            &b"delete-batch "[..],
            b"delete-batch 1 x",
            b"delete-batch 1,2",
            b"delete-batch -1",
            b"delete-batch 1 +",
            b"delete-batch 18446744073709551616",
        ] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
        // As beanstalkd and tuber: no prefix matches these.
        for line in [&b"delete-batch"[..], b"delete-batchx 1", b"delete-batch\t1"] {
            assert_eq!(parse(line), Err(UnknownCommand), "{:?}", String::from_utf8_lossy(line));
        }
        assert_eq!(parse(b"clear-tube jobs"), Ok(C::ClearTube(name("jobs"))));
        for line in [&b"clear-tube "[..], b"clear-tube -x", b"clear-tube a b", b"clear-tube a*"] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
        assert_eq!(parse(b"clear-tube"), Err(UnknownCommand));
        assert_eq!(parse(b"drain"), Ok(C::Drain));
        assert_eq!(parse(b"undrain"), Ok(C::Undrain));
        for line in [&b"drain "[..], b"drainx", b"undrain 1", b"Drain"] {
            assert_eq!(parse(line), Err(UnknownCommand), "{:?}", String::from_utf8_lossy(line));
        }
    }

    /// tuber's `touch-all` (the whole line) and `flush-buried <tube>`
    /// (the name as for `flush-tube`), reference §3.31 and §3.32.
    #[test]
    fn touch_all_is_a_whole_line_and_flush_buried_takes_a_name() {
        assert_eq!(parse(b"touch-all"), Ok(C::TouchAll));
        // No prefix matched these in beanstalkd (`touch ` has its space).
        for line in [&b"touch-all "[..], b"touch-allx", b"touch-all 1", b"Touch-all", b"touch-"] {
            assert_eq!(parse(line), Err(UnknownCommand), "{:?}", String::from_utf8_lossy(line));
        }
        assert_eq!(parse(b"touch -all"), Err(BadFormat));
        assert_eq!(parse(b"flush-buried jobs"), Ok(C::FlushBuried(name("jobs"))));
        for line in [&b"flush-buried "[..], b"flush-buried -x", b"flush-buried a b", b"flush-buried a "] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
        for line in [&b"flush-buried"[..], b"flush-buriedx a", b"flush-buried\ta"] {
            assert_eq!(parse(line), Err(UnknownCommand), "{:?}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn quit_is_a_bare_prefix() {
        assert_eq!(parse(b"quit"), Ok(C::Quit));
        assert_eq!(parse(b"quitx"), Ok(C::Quit));
        assert_eq!(parse(b"quit now"), Ok(C::Quit));
    }

    #[test]
    fn nul_anywhere_is_bad_format() {
        assert_eq!(parse(b"stats\0"), Err(BadFormat));
        assert_eq!(parse(b"\0garbage"), Err(BadFormat));
        assert_eq!(parse(b"put 1 2 3 4\0"), Err(BadFormat));
        assert_eq!(parse(b"put 1 2 3 4 \0grp:a"), Err(BadFormat));
        // But a tagging client's put is refused as its others are: its
        // body swallowed, or, its size unread, its connection ended.
        assert_eq!(parse(b"put 1 2 3 4 grp:a\0"), Ok(put_1234(AfterSize::RefusedTags, PutTags::NONE)));
        assert_eq!(parse(b"put 1 2 3 4\0 grp:a"), Ok(put_1234(AfterSize::RefusedTags, PutTags::NONE)));
        assert_eq!(parse(b"put 1 2\0 3 4 grp:a"), Err(ParseError::UnsizedTaggedPut));
    }

    #[test]
    fn reserve_with_abort_is_exact_and_its_timeout_bounded() {
        assert_eq!(parse(b"reserve-with-abort"), Ok(C::ReserveWithAbort(None)));
        assert_eq!(parse(b"reserve-with-abort-timeout 07"), Ok(C::ReserveWithAbort(Some(7))));
        let most = parse(b"reserve-with-abort-timeout 2147483647");
        assert_eq!(most, Ok(C::ReserveWithAbort(Some(2147483647))));
        for line in [
            &b"reserve-with-abort "[..],
            b"reserve-with-abortx",
            b"reserve-with-abort-timeout",
            b"reserve-with-abort-timeout ",
            b"reserve-with-abort-timeout 1 junk",
            b"reserve-with-abort-timeout 2147483648",
        ] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn reserve_with_timeout_ignores_trailing_bytes_and_is_bounded() {
        assert_eq!(parse(b"reserve-with-timeout 0 junk"), Ok(C::ReserveWithTimeout(0)));
        assert_eq!(parse(b"reserve-with-timeout 0x"), Ok(C::ReserveWithTimeout(0)));
        assert_eq!(parse(b"reserve-with-timeout 2147483647"), Ok(C::ReserveWithTimeout(2147483647)));
        assert_eq!(parse(b"reserve-with-timeout 2147483648"), Err(BadFormat));
        assert_eq!(parse(b"reserve-with-timeout -1"), Err(BadFormat));
        assert_eq!(parse(b"reserve-with-timeout "), Err(BadFormat));
    }

    #[test]
    fn kick_parses_like_strtoul() {
        assert_eq!(parse(b"kick 5"), Ok(C::Kick(5)));
        assert_eq!(parse(b"kick \t 5"), Ok(C::Kick(5)));
        assert_eq!(parse(b"kick 1x"), Ok(C::Kick(1)));
        assert_eq!(parse(b"kick +3"), Ok(C::Kick(3)));
        assert_eq!(parse(b"kick -1"), Ok(C::Kick(u32::MAX)));
        assert_eq!(parse(b"kick 4294967296"), Ok(C::Kick(0)));
        assert_eq!(parse(b"kick 4294967298"), Ok(C::Kick(2)));
        assert_eq!(parse(b"kick 18446744073709551616"), Err(BadFormat));
        assert_eq!(parse(b"kick x"), Err(BadFormat));
        assert_eq!(parse(b"kick "), Err(BadFormat));
        assert_eq!(parse(b"kick -"), Err(BadFormat));
    }

    #[test]
    fn tube_names_run_to_the_end_of_the_line() {
        assert_eq!(parse(b"use foo"), Ok(C::Use(name("foo"))));
        assert_eq!(parse(b"watch a-b+c/d;e.f$g_h(i)"), Ok(C::Watch(name("a-b+c/d;e.f$g_h(i)"), None)));
        // tuber's weight, and its reserve modes.
        assert_eq!(parse(b"watch w 9999"), Ok(C::Watch(name("w"), Some(9999))));
        assert_eq!(parse(b"watch w +1"), Ok(C::Watch(name("w"), Some(1))));
        for refused in [&b"watch w 0"[..], b"watch w 10000", b"watch w ", b"watch w 1 2", b"watch w 1x"] {
            assert_eq!(parse(refused), Err(BadFormat), "{:?}", String::from_utf8_lossy(refused));
        }
        assert_eq!(parse(b"reserve-mode weighted-fair"), Ok(C::ReserveMode(ReserveMode::WeightedFair)));
        assert_eq!(parse(b"reserve-mode fifo "), Err(BadFormat));
        for line in [
            &b"use  foo"[..],
            b"use foo ",
            b"use -foo",
            b"use a*b",
            b"use caf\xe9",
            b"use ",
            b"ignore a b",
            b"stats-tube ",
        ] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
        let longest = [b'a'; MAX_TUBE_NAME];
        assert!(TubeName::new(&longest).is_some());
        assert!(TubeName::new(&[b'a'; MAX_TUBE_NAME + 1]).is_none());
    }

    #[test]
    fn move_job_takes_an_id_and_a_name_to_the_end_of_the_line() {
        assert_eq!(parse(b"move-job 5 other"), Ok(C::MoveJob { id: 5, tube: name("other") }));
        assert_eq!(parse(b"move-job  05 a-b"), Ok(C::MoveJob { id: 5, tube: name("a-b") }));
        for line in [
            &b"move-job 5"[..],
            b"move-job 5 ",
            b"move-job 5  other",
            b"move-job 5 other ",
            b"move-job 5 -other",
            b"move-job 5 a*b",
            b"move-job x other",
            b"move-job 5x other",
            b"move-job 18446744073709551616 other",
        ] {
            assert_eq!(parse(line), Err(BadFormat), "{:?}", String::from_utf8_lossy(line));
        }
        assert_eq!(parse(b"move-job"), Err(UnknownCommand));
    }

    #[test]
    fn pause_tube_quirks() {
        let paused = |n: &str, delay| C::PauseTube { tube: Some(name(n)), delay };
        assert_eq!(parse(b"pause-tube default 5"), Ok(paused("default", 5)));
        assert_eq!(parse(b"pause-tubedefault 5"), Ok(paused("default", 5)));
        assert_eq!(parse(b"pause-tube   x   0"), Ok(paused("x", 0)));
        assert_eq!(parse(b"pause-tube -x 1"), Ok(C::PauseTube { tube: None, delay: 1 }));
        assert_eq!(parse(b"pause-tube foo10"), Err(BadFormat));
        assert_eq!(parse(b"pause-tube default*5"), Err(BadFormat));
        assert_eq!(parse(b"pause-tube default 5 "), Err(BadFormat));
        assert_eq!(parse(b"pause-tube"), Err(BadFormat));
    }
}
