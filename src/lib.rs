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
//! The modules below are listed in the order a newcomer should read them;
//! data flows the same way, from socket to reply:
//!
//! 0. [`reference`](mod@reference): the protocol in prose, every command and reply, the
//!    job states, scheduling, and where this server differs from beanstalkd.
//!    The code cites it as "reference §N".
//! 1. [`ids`]: the job and client ids every module names. Then
//!    [`protocol`]: the wire format. A command line becomes a
//!    [`protocol::Command`]; a [`protocol::Reply`] becomes bytes. Start here
//!    to learn what clients can say.
//! 2. [`engine`]: every job, tube and client's queue state, and the only code
//!    that changes it, one method per command. Read its submodules in this
//!    order: [`engine::job`] (a job and its states), [`engine::heap`] (the
//!    intrusive heap behind ready, delayed and reserved jobs), [`engine::list`]
//!    (the buried FIFO), [`engine::tube`], [`engine::table`] (the job table:
//!    records in a slab, found by id), `client` (what the engine knows of a
//!    connection). Then the commands, one concept a file: `moves` (jobs
//!    between queues), `session` (connect, close, use, watch, ignore),
//!    `put`, `reserve` (and the hand-off to waiting clients), `worker`
//!    (delete, release, bury, touch, kick), `inspect` (peek, stats, lists),
//!    `schedule` (time-driven work, pause), `logging` (the binlog's side,
//!    compaction), and [`engine::journal`] (the trait the binlog
//!    implements).
//! 3. [`stats`]: the YAML bodies of `stats`, `stats-job`, `stats-tube` and
//!    `list-*`.
//! 4. [`time`]: the engine takes "now" as an argument and never reads a
//!    clock, which is what makes it testable.
//! 5. The threads' helpers (private): `stream` (a client's socket, and
//!    how the engine wakes its thread), `timer` (the thread that runs jobs
//!    whose time has come, and gives memory back) and `hangup` (the
//!    thread that notices workers vanishing while blocked in reserve); each
//!    takes only what it needs. Then `shared`, what every thread of a
//!    server shares.
//! 6. `framing` (private): bytes into command lines and bodies. Then `conn`
//!    (private): one connection's thread: commands, replies, blocking
//!    reserve, and going idle.
//! 7. `listen` (private): binding the listening socket. Then [`server`]:
//!    accepting, one thread per connection, starting the helper threads,
//!    shutdown.
//! 8. [`binlog`]: persistence (`-b`): the on-disk format, replay at
//!    start-up, group commit. The engine reaches it only through the
//!    [`engine::Journal`] trait. [`binlog::inspect`] reads a directory
//!    offline for the `beanstalk-binlog` tool; the server never calls it.
//! 9. [`config`]: beanstalkd's command-line flags; [`signals`],
//!    [`privileges`] (`-u`), [`activation`] (systemd sockets) and [`host`]
//!    (the connection limit the host allows, and the allocator that keeps
//!    idle connections small): what it takes to run as a service.
//! 10. `sys` (private): the only module allowed to call C directly: a few
//!     libc functions std lacks, each behind a safe wrapper, and the
//!     binary's allocator.
//!
//! ## Running a server in-process
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::TcpStream;
//!
//! let server = beanstalk::Server::bind(beanstalk::Config::loopback())?;
//! let running = server.spawn()?;
//! let mut client = TcpStream::connect(running.local_addr().unwrap())?;
//! client.write_all(b"put 0 0 60 5\r\nhello\r\n")?;
//! let mut reply = [0; 12];
//! client.read_exact(&mut reply)?;
//! assert_eq!(&reply, b"INSERTED 1\r\n");
//! running.shutdown();
//! # Ok::<(), std::io::Error>(())
//! ```

#![deny(unsafe_code)] // allowed in `sys` alone, below

pub mod activation;
pub mod binlog;
pub mod config;
mod conn;
pub mod engine;
mod framing;
mod hangup;
pub mod host;
pub mod ids;
mod listen;
pub mod privileges;
pub mod protocol;
pub mod reference;
pub mod server;
mod shared;
pub mod signals;
pub mod stats;
mod stream;
#[allow(unsafe_code)]
mod sys;
pub mod time;
mod timer;

pub use config::Config;
pub use server::{Handle, Running, Server};
