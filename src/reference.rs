//! The protocol reference: what a client sees on the wire, command by
//! command, and where this server differs from beanstalkd. Code and tests
//! cite it as "reference §N". It holds no code; `cargo doc` renders it.
#![doc = include_str!("reference.md")]
