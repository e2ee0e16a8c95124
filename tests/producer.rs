//! put and use: what a producer sees.
mod common;

#[test]
fn put_answers_inserted_with_sequential_ids() {
    let server = common::start();
    let mut c = server.connect();
    assert_eq!(c.cmd("put 0 0 60 5\r\nhello"), "INSERTED 1\r\n");
    assert_eq!(c.cmd("put 0 0 60 0\r\n"), "INSERTED 2\r\n");
}
