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
//! 1. [`protocol`]: the wire format. A command line becomes a
//!    [`protocol::Command`]; a [`protocol::Reply`] becomes bytes. Start here
//!    to learn what clients can say.
//! 2. [`engine`]: every job, tube and client's queue state, and the only code
//!    that changes it, one method per command. Read its submodules in this
//!    order: [`engine::job`] (a job and its states), [`engine::heap`] (the
//!    intrusive heap behind ready, delayed and reserved jobs), [`engine::list`]
//!    (the buried FIFO), [`engine::tube`], [`engine::table`] (the job table:
//!    records in a slab, found by id).
//! 3. [`stats`]: the YAML bodies of `stats`, `stats-job`, `stats-tube` and
//!    `list-*`.
//! 4. [`time`]: the engine takes "now" as an argument and never reads a
//!    clock, which is what makes it testable.
//! 5. `conn` (private): one connection's thread. Framing, bodies, blocking
//!    reserve.
//! 6. [`server`]: listening, accepting, one thread per connection, shutdown;
//!    and the two helper threads, `timer` (jobs whose time has come) and
//!    `hangup` (workers that vanish while blocked in reserve).
//! 7. [`binlog`]: persistence (`-b`): the on-disk format, replay at
//!    start-up, group commit. The engine reaches it only through the
//!    [`engine::Journal`] trait.
//! 8. [`config`]: beanstalkd's command-line flags; [`signals`],
//!    [`privileges`] (`-u`) and [`activation`] (systemd sockets): what it
//!    takes to run as a service.
//! 9. `sys` (private): the only module allowed to call C directly: a few
//!    libc functions std lacks, each behind a safe wrapper.
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
mod hangup;
pub mod privileges;
pub mod protocol;
pub mod server;
pub mod signals;
pub mod stats;
#[allow(unsafe_code)]
mod sys;
pub mod time;
mod timer;

pub use config::Config;
pub use server::{Handle, Running, Server};
