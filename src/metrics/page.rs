//! The operator's page at `/` of the `--metrics` listener (README,
//! Monitoring, "The page"):
//! HTML, no script. The overview lists every tube a scrape keeps with its
//! counts, the oldest ready job's age, its pause and its dead letters, and
//! the server's dead letters, newest burial first; `/tube?name=…` pages a
//! tube's jobs by state, each with its `stats-job` fields and the first
//! bytes of its body.
//!
//! It is read-only: where an operator would act, it shows the line to send
//! to the admin socket. Every byte that came from a client (a body, a tube
//! name) is escaped before it is written ([`Text`]), so a body of
//! `<script>` shows as text. It reads the engine as a scrape does: a
//! bounded piece a hold of the lock ([`crate::engine::Engine::job_view`],
//! [`crate::engine::Engine::dead_letters`]), formatting outside it.

use std::fmt::{self, Write};

use super::scrape;
use crate::engine::{JobId, State};
use crate::protocol::TubeName;
use crate::shared::Shared;

/// Jobs on one page of a tube.
const JOBS_A_PAGE: usize = 20;

/// Bytes of a body shown.
const BODY_SHOWN: usize = 256;

/// Dead letters the overview lists, and buried jobs a hold of the lock
/// looks at (64 holds a tube at most) to find them.
const DEAD_SHOWN: usize = 100;
const BURIED_A_HOLD: usize = 1024;
const HOLDS_A_TUBE: usize = 64;

/// What a page request asks for. The name is held inline (a few hundred
/// bytes in the short queue of whole requests), so reading a request
/// allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub enum Ask {
    Overview,
    Tube { name: TubeName, state: State, after: Option<JobId> },
}

/// The states a tube page lists, in the order of its links.
const STATES: [State; 4] = [State::Ready, State::Delayed, State::Reserved, State::Buried];

/// Reads a page's target (`/` or `/tube?name=…&state=…&after=…`); `None`
/// for a path that is no page, `Some(None)` for a page's query that is
/// not one (a bad name, state or cursor, a key unknown or twice).
pub fn ask(target: &str) -> Option<Option<Ask>> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/" => Some(query.is_empty().then_some(Ask::Overview)),
        "/tube" => Some(tube_ask(query)),
        _ => None,
    }
}

fn tube_ask(query: &str) -> Option<Ask> {
    let (mut name, mut state, mut after) = (None, None, None);
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=')?;
        let slot = match key {
            "name" => &mut name,
            "state" => &mut state,
            "after" => &mut after,
            _ => return None,
        };
        if slot.replace(value).is_some() {
            return None;
        }
    }
    let mut decoded = [0u8; crate::protocol::MAX_TUBE_NAME];
    let name = TubeName::new(percent_decode(name?, &mut decoded)?)?;
    let state = match state.unwrap_or("ready") {
        "ready" => State::Ready,
        "delayed" => State::Delayed,
        "reserved" => State::Reserved,
        "buried" => State::Buried,
        _ => return None,
    };
    let after = match after {
        Some(id) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => Some(id.parse().ok()?),
        Some(_) => return None,
        None => None,
    };
    Some(Ask::Tube { name, state, after })
}

/// `%XX` decoded into `out`; other bytes as they are (a `+` is a `+`:
/// tube names have no spaces, and may have plus signs).
fn percent_decode<'a>(text: &str, out: &'a mut [u8]) -> Option<&'a [u8]> {
    let (mut bytes, mut len) = (text.bytes(), 0);
    while let Some(b) = bytes.next() {
        let b = if b == b'%' {
            // Two hex digits, nothing else (`from_str_radix` takes a sign).
            let digit = |b: Option<u8>| char::from(b?).to_digit(16);
            (digit(bytes.next())? * 16 + digit(bytes.next())?) as u8
        } else {
            b
        };
        *out.get_mut(len)? = b;
        len += 1;
    }
    out.get(..len)
}

/// Text from a client, escaped for HTML as it is written: `&<>"'` as
/// entities, bytes that are not UTF-8 as U+FFFD.
struct Text<'a>(&'a [u8]);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '&' => f.write_str("&amp;")?,
                    '<' => f.write_str("&lt;")?,
                    '>' => f.write_str("&gt;")?,
                    '"' => f.write_str("&quot;")?,
                    '\'' => f.write_str("&#39;")?,
                    c => f.write_char(c)?,
                }
            }
            if !chunk.invalid().is_empty() {
                f.write_char('\u{fffd}')?;
            }
        }
        Ok(())
    }
}

/// A tube's name in a link's query: every byte but letters and digits
/// as `%XX`.
struct Query<'a>(&'a str);

impl fmt::Display for Query<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.bytes() {
            if b.is_ascii_alphanumeric() {
                f.write_char(b as char)?;
            } else {
                write!(f, "%{b:02X}")?;
            }
        }
        Ok(())
    }
}

const HEAD: &str = "<!doctype html><html lang=en><head><meta charset=utf-8><title>beanstalk</title>\
<style>body{font:14px sans-serif;margin:1.5em}table{border-collapse:collapse}\
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}\
pre{white-space:pre-wrap;word-break:break-all;background:#f6f6f6;padding:4px;margin:2px 0}\
code{background:#eee;padding:0 3px}</style></head><body>";

/// The page `ask` names, as HTML; `None` if its memory cannot be had or
/// the tube does not exist (`Some` of a 404's page then).
#[inline(never)]
pub fn write(shared: &Shared, ask: &Ask) -> Option<(bool, String)> {
    let mut out = String::new();
    out.try_reserve(64 * 1024).ok()?;
    out.push_str(HEAD);
    let found = match ask {
        Ask::Overview => overview(shared, &mut out).is_ok(),
        Ask::Tube { name, state, after } => tube(shared, name, *state, *after, &mut out)?,
    };
    out.push_str("</body></html>\n");
    Some((found, out))
}

fn overview(shared: &Shared, out: &mut String) -> fmt::Result {
    let Some(s) = scrape::collect(shared) else { return write!(out, "<p>out of memory</p>") };
    let v = &s.overview.server;
    write!(
        out,
        "<h1>beanstalk</h1><p>{} jobs ({} ready, {} reserved, {} delayed, {} buried) in {} tubes; \
         {} connections, {} waiting; up {} s{}.</p><h2>Tubes</h2><table><tr><th>tube<th>ready<th>delayed\
         <th>reserved<th>buried<th>dead letters<th>waiting<th>oldest ready<th>paused</tr>",
        v.jobs.ready + v.jobs.reserved + v.jobs.delayed + v.jobs.buried,
        v.jobs.ready,
        v.jobs.reserved,
        v.jobs.delayed,
        v.jobs.buried,
        s.overview.tubes,
        v.current_connections,
        v.waiting,
        s.process.uptime_secs,
        if v.draining { "; draining: puts are refused" } else { "" },
    )?;
    for t in &s.tubes {
        let (name, j) = (t.stats.name.as_str(), &t.stats.jobs);
        write!(out, "<tr><td><a href=\"/tube?name={}\">{}</a>", Query(name), Text(name.as_bytes()))?;
        for (state, n) in STATES.iter().zip([j.ready, j.delayed, j.reserved, j.buried]) {
            write!(out, "<td><a href=\"/tube?name={}&amp;state={}\">{n}</a>", Query(name), state.name())?;
        }
        write!(
            out,
            "<td>{}<td>{}<td>{} s<td>",
            j.buried_by_limit,
            t.stats.waiting,
            t.oldest_ready_ns / 1_000_000_000
        )?;
        if t.stats.pause_time_left > 0 {
            write!(out, "{} s left", t.stats.pause_time_left)?;
        }
    }
    out.push_str("</table>");
    if s.left_out > 0 {
        write!(out, "<p>{} smaller tubes left out (<code>--metrics-max-tubes</code>).</p>", s.left_out)?;
    }
    out.push_str(
        "<p>To pause a tube, send <code>pause-tube &lt;tube&gt; &lt;seconds&gt;</code> to the admin socket.</p>\
         <h2>Dead letters</h2><p>Jobs their retry limit buried, the newest burial first. To run one again, \
         send <code>kick-job &lt;id&gt;</code> to the admin socket; to drop it, <code>delete &lt;id&gt;</code>.</p>",
    );
    let with_dead = s.tubes.iter().filter(|t| t.stats.jobs.buried_by_limit > 0);
    dead_letters(shared, with_dead.map(|t| &t.stats.name), out)
}

/// The dead letters of the tubes `names`, newest burial first.
fn dead_letters<'a>(
    shared: &Shared,
    names: impl Iterator<Item = &'a TubeName>,
    out: &mut String,
) -> fmt::Result {
    // Each dead letter found as (newest first, id), sorted as the scrape
    // sorts its pairs (one sort in the binary); the best kept as they come.
    let mut found: Vec<(u64, u64)> = Vec::new();
    let mut ids: Vec<JobId> = Vec::new();
    if ids.try_reserve_exact(DEAD_SHOWN).is_err() || found.try_reserve_exact(2 * DEAD_SHOWN).is_err() {
        return write!(out, "<p>out of memory</p>");
    }
    for name in names {
        let mut before = None;
        ids.clear();
        for _ in 0..HOLDS_A_TUBE {
            let engine = shared.engine();
            let Some(t) = engine.tube_named(name) else { break };
            before = engine.dead_letters(t, before, BURIED_A_HOLD, &mut ids);
            if before.is_none() {
                break;
            }
        }
        let (engine, now) = shared.engine_now();
        for &id in &ids {
            let buried_at = engine.buried_at(id).unwrap_or(now);
            found.push((u64::MAX - buried_at.0, u64::MAX - id));
        }
        drop(engine);
        // A job kicked and buried again between holds is met twice.
        found.sort_unstable();
        found.dedup();
        found.truncate(DEAD_SHOWN);
    }
    if found.is_empty() {
        return write!(out, "<p>None.</p>");
    }
    out.push_str("<table><tr><th>id<th>buried<th>body</tr>");
    for chunk in found.chunks(JOBS_A_PAGE) {
        let (engine, now) = shared.engine_now();
        for &(_, id) in chunk {
            let id = u64::MAX - id;
            let Some(view) = engine.job_view(id, now, BODY_SHOWN) else { continue };
            let ago = now.secs_since(view.buried_at.unwrap_or(now));
            write!(out, "<tr><td>{id}<td>{ago} s ago<td style=\"text-align:left\">")?;
            body(&view, out)?;
        }
    }
    out.push_str("</table>");
    Ok(())
}

/// A body's first bytes, escaped, and its length.
fn body(view: &crate::engine::browse::JobView, out: &mut String) -> fmt::Result {
    let more = if view.in_log {
        ", kept in the log, not shown"
    } else if view.body_len > view.body.len() {
        ", the first shown"
    } else {
        ""
    };
    write!(out, "{} bytes{more}<pre>{}</pre>", view.body_len, Text(&view.body))
}

/// A page of tube `name`'s jobs in `state` after job `after`: `Some(false)`
/// when there is no such tube, `None` out of memory.
fn tube(
    shared: &Shared,
    name: &TubeName,
    state: State,
    after: Option<JobId>,
    out: &mut String,
) -> Option<bool> {
    let n = Text(name.as_str().as_bytes());
    let _ = write!(out, "<h1><a href=\"/\">beanstalk</a>: tube {n}</h1><p>");
    for s in STATES {
        let _ = write!(
            out,
            "<a href=\"/tube?name={}&amp;state={}\">{}</a> ",
            Query(name.as_str()),
            s.name(),
            s.name()
        );
    }
    let _ = write!(
        out,
        "</p><p>To kick, pause or flush, send <code>use {n}</code> then <code>kick &lt;n&gt;</code>, \
         <code>pause-tube {n} &lt;seconds&gt;</code> or <code>flush-buried {n}</code> to the admin socket.</p>"
    );
    // The cursor placed and the first piece gathered under one lock, as
    // `list-jobs-*` does: a buried cursor's link to the next is read while
    // the cursor is known buried in this tube. Nothing holds the tube
    // between pieces (a `list-jobs-*` client uses its tube): it may go,
    // its last job and user gone, and its slot be another tube's; each
    // piece checks it is still there.
    let mut listing = None;
    let ids = loop {
        let engine = shared.engine();
        let t = engine.tube_named(name);
        if t.is_none() || listing.as_ref().is_some_and(|&(held, _)| Some(held) != t) {
            out.push_str("<p>No such tube.</p>");
            return Some(false);
        }
        if listing.is_none() {
            let Ok(first) = engine.list_tube_jobs(t?, state, JOBS_A_PAGE, after) else {
                out.push_str("<p>That job is no longer here: <a href=\"/\">start again</a>.</p>");
                return Some(true);
            };
            listing = Some((t?, first));
        }
        if engine.list_jobs_piece(&mut listing.as_mut()?.1) {
            break listing?.1.ids();
        }
    };
    let _ = write!(out, "<h2>{} jobs</h2>", state.name());
    let (engine, now) = shared.engine_now();
    for &id in &ids {
        let Some(view) = engine.job_view(id, now, BODY_SHOWN) else { continue };
        let _ = write!(out, "<h3>job {id}</h3><pre>{}</pre>", Text(view.stats.as_bytes()));
        let _ = body(&view, out);
        let _ = write!(out, "<p>Admin: <code>kick-job {id}</code>, <code>delete {id}</code></p>");
    }
    drop(engine);
    match ids.last() {
        Some(last) if ids.len() == JOBS_A_PAGE => {
            let (q, s) = (Query(name.as_str()), state.name());
            let _ =
                write!(out, "<p><a href=\"/tube?name={q}&amp;state={s}&amp;after={last}\">next page</a></p>");
        }
        Some(_) => {}
        None => out.push_str("<p>None.</p>"),
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page's numbers, where the README and the man page give them.
    #[test]
    fn the_docs_give_the_pages_numbers() {
        let readme = include_str!("../../README.md").split_whitespace().collect::<Vec<_>>().join(" ");
        let man = include_str!("../../beanstalk.1").split_whitespace().collect::<Vec<_>>().join(" ");
        for said in [
            format!("the first {BODY_SHOWN} bytes"),
            format!("{JOBS_A_PAGE} a page"),
            format!("at most {} requests", super::super::MOST_AT_ONCE),
        ] {
            assert!(readme.contains(&said), "README: {said}");
        }
        assert!(man.contains(&format!("{JOBS_A_PAGE} a page")), "man page");
        assert!(readme.contains(&format!("the newest {DEAD_SHOWN} by burial first")), "README: dead letters");
    }

    #[test]
    fn client_bytes_are_escaped_and_queries_read_back() {
        let shown = Text(b"<script>alert('x')</script> & \"q\" \xff").to_string();
        assert_eq!(shown, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot; \u{fffd}");
        let name = "a+b/c;$(d)";
        let target = format!("/tube?name={}&state=buried&after=7", Query(name));
        let want =
            Ask::Tube { name: TubeName::new(name.as_bytes()).unwrap(), state: State::Buried, after: Some(7) };
        assert_eq!(ask(&target), Some(Some(want)));
        assert_eq!(ask("/"), Some(Some(Ask::Overview)));
        assert_eq!(ask("/metrics"), None);
        for bad in [
            "/?x",
            "/tube",
            "/tube?name=",
            "/tube?name=a&name=a",
            "/tube?name=a&state=gone",
            "/tube?name=%zz",
            "/tube?name=a%+1",
        ] {
            assert_eq!(ask(bad), Some(None), "{bad}");
        }
        assert_eq!(ask("/tube?name=a&after=-1"), Some(None));
        assert_eq!(ask(&format!("/tube?name={}", "a".repeat(201))), Some(None));
    }
}
