//! The library as a Rust program embeds it: start-up errors come back as
//! `Err`, and a running server stops when dropped.
use std::io::{Read, Write};
use std::net::TcpStream;

use beanstalk::{Config, Server};

#[test]
fn a_missing_binlog_directory_is_an_error_from_spawn() {
    let config = Config { binlog_dir: Some("/no/such/dir".into()), ..Config::loopback() };
    let server = Server::bind(config).expect("binding a free port works");
    let error = server.spawn().err().expect("the binlog cannot be opened");
    assert!(error.to_string().starts_with("cannot use -b /no/such/dir: "), "{error}");
}

#[test]
fn a_spawned_server_serves_and_stops_when_dropped() {
    let running = Server::bind(Config::loopback()).unwrap().spawn().unwrap();
    let addr = running.local_addr().unwrap();
    let mut client = TcpStream::connect(addr).unwrap();
    client.write_all(b"put 0 0 60 2\r\nhi\r\nreserve\r\ndelete 1\r\n").unwrap();
    let mut reply = [0; 39];
    client.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"INSERTED 1\r\nRESERVED 1 2\r\nhi\r\nDELETED\r\n");
    drop(running);
    assert!(TcpStream::connect(addr).is_err(), "nothing listens once it is dropped");
}
