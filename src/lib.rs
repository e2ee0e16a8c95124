//! # beanstalk
//!
//! A work-queue server that speaks beanstalkd's protocol, byte for byte,
//! written with Rust's standard library alone.
//!
//! Producers `put` jobs into named *tubes*; workers `reserve` them and then
//! `delete`, `release`, `bury` or `touch` them. Jobs have a priority, an
//! optional delay, and a time-to-run (TTR) after which a reserved job goes
//! back to the queue. Every beanstalkd client works against this server
//! unchanged.
//!
//! ## Reading the code
//!
//! Render this tour with every module it names (most are private) by
//! `cargo doc --no-deps --document-private-items --open`.
//!
//! ### First reading: the protocol and the design, in an hour
//!
//! In the order the bytes of a command travel, from the socket to the
//! reply. Each step uses only what came before it, but for the engine's
//! methods, which the connection calls by the protocol's command names.
//!
//! 1. [`reference`](mod@reference): the protocol in prose, every command and
//!    reply, the job states, scheduling, and where this server differs from
//!    beanstalkd. The code cites it as "reference §N". [`ids`]: the job and
//!    client ids every module names.
//! 2. [`event_loop`]: one I/O thread, its epoll set and the connections
//!    it owns, served a bounded share at a time; [`stream`]: a client's
//!    socket, TCP or UNIX, and [`mailbox`], where its blocked reserve
//!    ends. [`framing`]: its bytes cut into command lines.
//! 3. [`protocol`]: a line becomes a [`protocol::Command`]; a
//!    [`protocol::Reply`] becomes bytes (`protocol/reply.rs`); a
//!    [`protocol::TubeName`] is a name proved legal (`protocol/tube_name.rs`).
//! 4. [`conn`]: one connection as a state machine its loop drives
//!    (reading commands, reading a put's body, skipping a refused one,
//!    blocked in reserve, closing): the command loop, `put`, `reserve`, and
//!    the one rule for who writes a socket (`conn/body.rs` reads a body
//!    left in the log into a reply, off the lock); [`conn::wait`] is a blocked
//!    reserve, a registration in the engine rather than a sleeping thread.
//! 5. [`engine`]: every job, tube and client, and the only code that changes
//!    them, one method per command, never touching a socket or a clock. Its
//!    data first: [`engine::job`] (a job, and the picture of its states),
//!    [`engine::body`] (its body: in memory, or left in the log with `-b`),
//!    [`engine::table`] (the map from id to job), [`engine::heap`] (ready,
//!    delayed and reserved jobs), [`engine::list`] (buried jobs, a client's
//!    reservations), [`engine::tube`], [`engine::waiting`] (a tube's
//!    blocked reserves, longest waiter first), [`engine::client`] (what the engine
//!    knows of a connection, and the picture of a blocked reserve),
//!    [`engine::unique`] (tuber's unique keys, beside the job table). Then the commands: [`engine::session`] (connect, close,
//!    `use`, `watch`, `ignore`), [`engine::put`], [`engine::keyed`] (a put
//!    whose key names a job, the ratchet, cooldowns), [`engine::moves`] (jobs
//!    between queues, and serving waiters), [`engine::reserve`],
//!    [`engine::handoff`] (a job given to a blocked reserve, and taken back),
//!    [`engine::worker`] (`delete`, `release`, `bury`, `touch`, `kick`),
//!    [`engine::batch`] (the commands on many jobs, and on a whole tube),
//!    [`engine::inspect`] (`peek`, `stats-*`, `list-*`),
//!    [`engine::listing`] (`list-jobs-*`: a tube's jobs a page at a time),
//!    [`engine::schedule`] (TTRs, delays and pauses falling due),
//!    [`engine::journal`] (the trait a write-ahead log implements) and
//!    [`engine::journaling`] (the engine's calls to it).
//! 6. [`time`]: the engine's `now`, and the clock the server reads it from.
//!    [`timer`]: the thread that runs what falls due when no command
//!    comes.
//! 7. [`binlog`]: the write-ahead log (`-b`): what is logged, when a file
//!    may go, and what durability means. Then [`binlog::record`] (the
//!    bytes; `binlog/tags.rs`, the put's tags a full record keeps), [`binlog::writing`] (each change as a record),
//!    [`binlog::current`] (the file being written: its room, its appends),
//!    [`binlog::decode`] (reading them back), [`binlog::batch`] (a change
//!    of many jobs in one write, as one record of kind 7),
//!    [`binlog::files`] (which files may be deleted), [`binlog::body`] (a
//!    body left in the log, read back and checked), [`binlog::sync`]
//!    (group commit, `-f`, and the files removed once synced, all outside
//!    the engine's lock) and [`binlog::replay`] (start-up).
//! 8. [`stats`]: the YAML bodies of `stats`, `stats-job`, `stats-tube` and
//!    `list-*`.
//! 9. [`shared`] (what every thread of a server shares; the engine's lock,
//!    which wakes blocked reserves once let go, is [`engine_lock`]),
//!    [`listen`] (the listening socket), [`server`] (accepting, the loops,
//!    shutdown; `server/accepting.rs` is the accept loop, and
//!    `--admin-socket`'s; `server/recovery.rs` replays `-b` at start-up,
//!    `server/handle.rs` is what its owner holds) and [`signals`]
//!    (SIGTERM, SIGINT, SIGUSR1).
//!
//! Where the answers start:
//!
//! - **`put 0 0 60 5\r\nhello\r\n`, byte by byte:** `Input::next_line`
//!   in [`framing`] finds the line; [`protocol::parse`] makes it a
//!   `Command::Put`; `Conn::put` in [`conn`] asks [`engine::put`]'s
//!   `start_put` for an id and memory, reads the body, and calls
//!   `Engine::put`, which claims log room (`Journal::claim`), files the
//!   job and records it (`Journal::record`, [`binlog::writing`]); `Conn::ask_engine`
//!   holds `INSERTED 1` until the record is as durable as `-f` says
//!   ([`binlog::sync`]), and `Reply::encode` writes it.
//! - **A worker's command, `release 1 0 5`:** [`protocol::parse`] makes
//!   it a `Command::Release`; `Conn::execute` in [`conn`] has one arm for
//!   the commands that are one engine call, which `conn::answer` maps to
//!   `Engine::release`, under the lock that `Conn::ask_engine` takes (and
//!   `Engine::catch_up` first). [`engine::worker`] checks the
//!   job's state (reference §3.20) and makes the change through
//!   `Engine::journaled_change` ([`engine::journaling`]): claim log room,
//!   take the job out of its queue and file it as delayed
//!   ([`engine::moves`]), tell the log what the job now is
//!   (`Journal::record`). `RELEASED` waits for the record's durability,
//!   as a put's reply does.
//! - **A restart with `-b`:** `Server::open_binlog` in [`server`] decides
//!   the order: `Binlog::open` ([`binlog`]) locks the directory, surveys
//!   it ([`binlog::dir`]), replays our files oldest first
//!   ([`binlog::replay`]: a job's last record wins), imports beanstalkd's
//!   files ([`binlog::import`]) and starts a new file; then
//!   `Engine::restore` files every job (buried ones in the order of their
//!   burial times), the log is handed to the engine, and the live jobs of
//!   any damaged file are rewritten (`Engine::rewrite_files`).
//! - **`put 0 0 60 5 idp:report:300`, tuber's unique job:** the parser
//!   reads the token into a [`protocol::UniqueKey`]; `Engine::put` asks
//!   `Engine::check_key` ([`engine::keyed`]) whether the key names a job
//!   in the tube ([`engine::unique`]): if so nothing is stored and the
//!   answer is that job (`INSERTED 1 READY`); else the job is filed with
//!   its key, and its log record is a keyed one ([`binlog::record`]).
//!   `delete` goes through `Engine::discard` ([`engine::worker`]), where
//!   the key starts its cooldown, which the timer ends
//!   (`Engine::next_due`, [`engine::schedule`]).
//! - **How a blocked reserve is woken, and how FIFO is kept:**
//!   [`engine::reserve`], then `Engine::serve_waiters` in [`engine::moves`]
//!   (a tube's waiters in order of arrival), the picture on `Blocked` in
//!   [`engine::client`], and [`conn::wait`].
//! - **How a TTR expiry is found without a scan:** the engine's `reserved`
//!   heap, ordered by deadline ([`engine`]), `Engine::next_due` and
//!   `Engine::tick` in [`engine::schedule`], and the [`timer`] thread.
//! - **When a log file may be deleted:** [`binlog`]'s module docs, then
//!   [`binlog::files`].
//! - **What SIGTERM does:** [`signals`], then `Handle::shutdown` and the
//!   shutdown steps in [`server`].
//!
//! ### Adding a command
//!
//! The steps, in order; each file named is the only place its step goes.
//!
//! 1. **The reference** (`src/reference.md`): a row in the table of
//!    commands (§3.0: replies, logged or not, promises, section), which
//!    every other document points to and every test reads through one
//!    reader, `src/reference/commands.rs`; its own section in §3, saying
//!    what it checks in which order; its prefix in §1.3's list, placed so
//!    that no earlier prefix matches it first; for a command on a job, a
//!    line in §3.20.
//!    Then the README's cheat-sheet line: a test holds it, and the parser,
//!    to the table.
//! 2. **Parsing** ([`protocol`]): a [`protocol::Command`] variant and its
//!    prefix in `parse`, in §1.3's order, with a unit test of its
//!    arguments; its name and what it is to a connection that is not the
//!    admin socket's (`admin`, `admin unless held`, or neither, as its row
//!    promises) in the list of `protocol/admin.rs`, which the compiler
//!    asks for; and if it works on a whole tube in chunks (step
//!    4), in `Command::works_in_chunks`. A new reply word, or a new form
//!    of a word there is (`BURIED <count>` beside `BURIED`), is a
//!    [`protocol::Reply`] variant, in `encode` and `word`
//!    (`protocol/reply.rs`).
//! 3. **The engine** ([`engine`]): one `pub fn` named after the command,
//!    in the file of its concept ([`engine::worker`] for what is done to
//!    a job, [`engine::session`] for a client's tubes, [`engine::inspect`]
//!    for what only reads), taking the client and `now` and returning the
//!    reply. It moves a job between queues only through
//!    [`engine::moves`] (`unlink`, then `make_ready`, `make_delayed`,
//!    `reserve_for` or the buried list), claims any memory before it
//!    changes anything (room in a tube's heaps for a job that enters it:
//!    see `start_put`), and keeps the invariants written on
//!    [`engine::job::Job`]'s fields and on `Engine::bury`.
//! 4. **Persistence**, if the change must survive a restart: make it
//!    through [`engine::journaling`], which claims log room first and
//!    tells the log the job before and after; the log chooses the record
//!    and does its bookkeeping itself, so nothing in [`binlog`] changes
//!    and nothing of it needs reading. One job: inside
//!    `Engine::journaled_change` (`journaled_change_to` when the job
//!    changes tube); a delete, which may not fail for want of disk, is
//!    `journal_delete` then `forget_deleted`, as `Engine::delete` does.
//!    Many jobs (a `kick`, `clear-tube`, `delete-batch`): collect their
//!    ids in the room the engine keeps for them (`Kept`, in
//!    [`engine::batch`], so that a command that frees memory needs none),
//!    then `Engine::journaled_batch` with a function that pictures a job
//!    as the change leaves it, as the log sees it, from its position in
//!    the batch and the job before (`kicked`,
//!    `deleted(now)` in [`engine::journaling`]; a new kind of change is a
//!    new such function, written beside its command in the command's own
//!    file, and nothing in [`engine::journal`] or [`binlog`]).
//!    It logs them all in one frame under one checksum (all or nothing on
//!    disk, whatever byte a crash cuts the write at) and only then changes
//!    each job. When "one write" and "a bounded hold of the lock" pull
//!    apart, one write wins for a change that must survive a restart
//!    whole (`kick`, as beanstalkd does), and a command on a whole tube
//!    works in chunks of a thousand, each one write, one engine call a
//!    chunk, its reply saying exactly what was done (`clear-tube`,
//!    `flush-tube`): its chunk is a method beside theirs in
//!    [`engine::batch`], and its arms go there too, one in each of
//!    `Engine::start_on_tube` (how many jobs it may change, or
//!    `NOT_FOUND`), `Engine::tube_chunk` (which chunk method) and
//!    `TubeRun::reply` (the count's reply); the connection runs every such
//!    command alike. A frame costs 9 bytes, less 4 a record.
//! 5. **The connection** ([`conn`]): one arm in `conn::answer`, calling
//!    the engine's method; `Conn::ask_engine` runs it under the lock and
//!    holds the reply until the log is as durable as `-f` says. A command
//!    on a whole tube needs nothing here (`Command::works_in_chunks` routes
//!    it). A command whose reply the engine cannot make in one `Reply`
//!    gets an arm in `Conn::execute` and a method in `conn/batch.rs`.
//! 6. **Tests**: the exact bytes over TCP in the file of its area in
//!    `tests/` (`worker.rs`, `tubes.rs`, `batch.rs`, ...); for a logged
//!    command, a restart in that same file (`tests/binlog.rs` for the
//!    one-job commands, `tests/batch.rs` for those on many); and in the
//!    engine (whose tests are all in `engine/proofs/`, its `mod.rs` saying
//!    what each file is), its cases in the one list of cases,
//!    `engine/proofs/cases.rs` (kept in two files: more states and refusals
//!    in `engine/proofs/cases_more.rs`; a starting world it needs goes in
//!    `engine/proofs/case_worlds.rs`): each case is the command's name, its
//!    world, its step, the reply it reaches, `.logged()` for a logged
//!    command and `.bounded(run)` for the promise `bounded`. A step is a
//!    closure in the case, or, shared by several cases, a `fn <name>_step`
//!    beside them (the reach test reads steps by that name); a command on a
//!    whole tube's is `on_a_tube_step(w, out, "<its line>")`. A run is
//!    written beside its case too, a closure on `runs::filled` (and
//!    `runs::tube_chunks` for a command on a whole tube; a long run goes in
//!    `engine/proofs/runs.rs`). Every engine test reads that list: the
//!    allocation sweep (`engine/proofs/sweep.rs`) fails each allocation in
//!    turn and proves a refusal changes nothing; the log sweep
//!    (`engine/proofs/log_sweep.rs`) fails each write, fsync and allocation
//!    of a logged case; the agreement test (`engine/proofs/agreement.rs`)
//!    restarts from the log after every case and proves it rebuilds what
//!    memory holds (a difference by design goes in its one list,
//!    `DIFFERENCES`, with its reason); and the reach test
//!    (`engine/proofs/sweep_reach.rs`) fails until every engine method that
//!    takes `&mut self` is called by a case, every reply in the command's
//!    row is reached by a case named for it, and a logged command has a
//!    logged case. Each promise in the row's *promises* gets its test by
//!    the table: `engine/proofs/bounded.rs` (`bounded`), over the run a
//!    case names, `tests/full.rs` (`frees`) and `tests/torn.rs`
//!    (`one write`) fail until they have a case for it (in torn.rs's
//!    `case`, the lines that make its jobs); `src/reference.rs` (admin) holds
//!    `protocol/admin.rs`'s list to the commands the column names, and
//!    `tests/admin.rs` refuses each over TCP, read from the table (no word
//!    there); a command on jobs by id that a connection may run on the jobs
//!    it holds (admin unless held) is refused by its engine method, with a
//!    case of the refusal, and `tests/admin.rs` tries it on a job the
//!    sender does not hold. The model (`tests/model.rs`, random histories
//!    against the naive model in `tests/model/`) is not a step: it covers
//!    the commands it has, and a new command's engine cases and exact bytes
//!    cover it; add it there only when what it does to other jobs' order
//!    needs random histories to trust.
//!
//! The places that list commands beside the table, each held to it by a
//! test (`src/reference.rs`, `engine/proofs/sweep_reach.rs`): §1.3's
//! prefixes, the README's cheat-sheet, the parser's `Command` and
//! `protocol/admin.rs`'s names, the engine's cases, the admin commands in
//! the README ("Who may do what") and the man page (`--admin-commands`),
//! and, for a command beanstalkd lacks, §10's extras, the README's "How it
//! maps to beanstalkd" and the man page's list of commands beyond
//! beanstalkd's (the test names a missing one; the words are yours). The
//! places a new command's words go by hand, which no test holds: its own
//! section in §3 of the reference, and for a command that changes many jobs
//! in one write, §8.2's examples of such commands. Whose a command is
//! (ours, tuber's) is said in its section and §10, nowhere else.
//!
//! **A few event loops, one a CPU.** Connections are served by a fixed
//! set of I/O threads ([`event_loop`], `--threads`), each waiting on its
//! own epoll set of non-blocking sockets, edge-triggered; the accept loop
//! deals each new connection to the next loop, which owns it for life.
//! A turn of a loop serves each connection that has something to do a
//! bounded share (four reads of its socket, what they bring answered, what
//! the socket takes written), so a client that floods or stops reading
//! holds up only itself. A blocked reserve is a state of its connection
//! and a registration in the engine: the put that serves it leaves the
//! `RESERVED` reply in the worker's mailbox, sends it on the way once the
//! lock is let go, and wakes the worker's loop through its `eventfd`;
//! a hang-up or the byte that calls off a `reserve-with-abort` comes to
//! the loop as an epoll event, and a timeout as the loop's own timer.
//! This is beanstalkd's own design, one loop a core instead of one in
//! all. Until issue 59 each connection had a thread of its own; the
//! figures that ended that shape (a crowd of a thousand threads waiting
//! for two CPUs; an idle connection's stack) and this one's are in
//! `benches/README.md`.
//!
//! ### Second reading: the production machinery, each behind a narrow door
//!
//! Each of these buys something the protocol does not need, measured in
//! the README; the first reading makes sense without them.
//!
//! - **Running out.** Every command claims the memory and the log room it
//!   needs before it changes anything, and two sweeps prove it, failing
//!   every allocation (`engine/proofs/sweep.rs`, through `sys/failing.rs`)
//!   and every write and fsync of the log (`engine/proofs/log_sweep.rs`,
//!   through `binlog/faults.rs`) of every command in turn, both counting
//!   with `countdown.rs`; a third (`engine/proofs/agreement.rs`) restarts
//!   from the log after every command and compares it with memory. All
//!   three run the one list of cases, `engine/proofs/cases.rs`.
//! - **Memory.** [`conn::buffers`]: a connection lets its buffers go when
//!   idle. [`sys::memory`]: the binary's allocator, big blocks as mappings
//!   of their own, and [`sys::pages`]: small blocks in pages of their own
//!   size, each page's memory given back when its last block goes, so
//!   freed memory goes back with no pass and no pause; [`sys::regions`]:
//!   where pages come from, 1 MiB regions unmapped whole when empty
//!   (one kept as a spare, its memory given back), and free pages among
//!   live ones unmapped as holes while the maps allow ([`sys::holes`]).
//!   [`engine::table`]'s slab and index,
//!   [`engine::id_map`]'s hash and the heap's `PackedId`: a job in 235 bytes.
//! - **The log over time.** [`binlog::compaction`]: rewriting old files'
//!   live jobs at a pace bounded by what clients write. [`binlog::dir`]:
//!   the lock and what a directory holds; [`binlog::identity`]: the
//!   server's `id`, kept there. [`binlog::beanstalkd`] and
//!   `binlog::import`: taking over beanstalkd's own binlog directory.
//!   [`binlog::inspect`]: reading a directory offline, for the
//!   `beanstalk-binlog` tool; the server never calls it.
//! - **Watching it run.** [`metrics`]: the `--metrics` endpoint, a
//!   scrape copied out of the engine a bounded chunk at a time
//!   ([`metrics::scrape`]), formatted outside the lock
//!   ([`metrics::exposition`]), over a request bounded in size and time
//!   ([`metrics::http`]); the operator's page beside it, HTML with every
//!   client byte escaped ([`metrics::page`], reading the engine through
//!   [`engine::browse`]); what the engine measures for it, at no cost to a
//!   job's record, is [`engine::metering`]. [`log`]: what stderr says,
//!   with the priority or the time an operator filters by.
//! - **Running as a service.** [`config`] (beanstalkd's flags), [`health`]
//!   (`--health-check`, the binary as a client for a container), [`host`]
//!   (the connection limit the host allows), [`activation`] (systemd
//!   sockets), [`privileges`] (`-u`), and [`sys`], the only module that
//!   calls C: a few libc functions std lacks, each behind a safe wrapper.
//!
//! ## Running a server in-process
//!
//! A test suite can start a server on a free port, talk to it, and stop it
//! by dropping it. It writes nothing to stderr (see [`log`]), and every
//! start-up error (a port in use, a binlog directory it cannot use) comes
//! back as an `Err` from [`Server::bind`] or [`Server::spawn`].
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::TcpStream;
//!
//! let running = beanstalk::Server::bind(beanstalk::Config::loopback())?.spawn()?;
//! let mut client = TcpStream::connect(running.local_addr().unwrap())?;
//! client.write_all(b"put 0 0 60 5\r\nhello\r\nreserve\r\ndelete 1\r\n")?;
//! let mut replies = [0; 42];
//! client.read_exact(&mut replies)?;
//! assert_eq!(&replies, b"INSERTED 1\r\nRESERVED 1 5\r\nhello\r\nDELETED\r\n");
//! drop(running); // stops the server and waits for it
//! # Ok::<(), std::io::Error>(())
//! ```

// Only `sys`, below, may call C directly: the lint holds everywhere else.
// The tour links private modules; `cargo doc --document-private-items`
// renders them.
#![deny(unsafe_code)]
#![allow(rustdoc::private_intra_doc_links)]

// The server calls Linux directly (epoll, CLOCK_BOOTTIME, /proc, the
// struct layouts in `sys`), and nothing else is tested.
#[cfg(not(target_os = "linux"))]
compile_error!("beanstalk runs on Linux only: src/sys/ calls Linux's system interfaces directly");

// First reading, in the tour's order.
pub mod reference;
pub mod ids;
mod mailbox;
mod stream;
mod framing;
pub mod protocol;
mod conn;
pub mod engine;
pub mod time;
mod timer;
pub mod binlog;
pub mod stats;
mod metrics;
mod engine_lock;
mod shared;
mod wakes;
mod home;
mod event_loop;
mod listen;
pub mod server;
pub mod signals;

// Second reading: running as a service.
pub mod log;
pub mod config;
pub mod health;
pub mod host;
pub mod activation;
pub mod privileges;
#[allow(unsafe_code)]
mod sys;

// Test support: the countdown both failure sweeps count with
// (`sys/failing.rs`, `binlog/faults.rs`).
#[cfg(test)]
mod countdown;

// The numbers the prose repeats, held to the code that states them.
#[cfg(test)]
mod facts;

// The lib's own tests run under an allocator that can fail on request
// (the allocation-failure sweep).
#[cfg(test)]
#[global_allocator]
static FAILING: sys::failing::Failing = sys::failing::Failing;

pub use config::Config;
pub use server::{Handle, Running, Server};
