//! The README's TLS recipe, run as written: its `openssl` commands make a
//! CA and two certificates, its two stunnel configurations (ports and
//! paths swapped for this test's) make the tunnels, and greenstalk puts,
//! reserves and deletes through them; a tunnel without a client
//! certificate gets no answer. Needs `stunnel4`, `openssl` and greenstalk
//! (`.ci/run` installs them; elsewhere the test says it skips).
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

use common::binary::{self, TempDir};
use common::helper::Helper;

const README: &str = include_str!("../README.md");

/// The README's code block after the marker `<!-- tls: NAME -->`.
fn block(name: &str) -> String {
    let marker = format!("<!-- tls: {name} -->");
    let rest = &README[README.find(&marker).unwrap_or_else(|| panic!("README: no {marker}"))..];
    let start = rest.find("```").unwrap();
    let body = &rest[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_owned()
}

/// Whether `program` runs; under `CI=true` it must.
fn have(program: &str) -> bool {
    let found =
        Command::new(program).arg("-version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !found {
        assert!(!common::under_ci(), "CI must install {program} (.ci/run)");
        common::skipping(&format!("{program} is not installed"));
    }
    found
}

/// A stunnel in the foreground, listening on a free port that `config`
/// is given; killed when dropped.
fn stunnel(dir: &Path, name: &str, config: impl Fn(u16) -> String) -> Helper {
    Helper::start(&format!("stunnel {name}"), common::HANG_GUARD, |port| {
        let path = dir.join(format!("{name}.conf"));
        std::fs::write(&path, format!("foreground = yes\npid =\n{}", config(port))).unwrap();
        let mut command = Command::new("stunnel");
        command.arg(&path);
        command
    })
}

#[test]
fn the_readmes_tls_recipe_carries_greenstalk_and_refuses_a_client_without_a_certificate() {
    if !have("stunnel") || !have("openssl") || !common::python_has("greenstalk") {
        return;
    }
    let dir = TempDir::new("tls");
    for line in block("certificates").lines().filter(|l| !l.trim().is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let out = Command::new(words[0]).args(&words[1..]).current_dir(&dir.path).output().unwrap();
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let server = binary::spawn(&[]);
    let certs = format!("{}/", dir.path.display());
    let server_tunnel = stunnel(&dir.path, "server", |port| {
        block("server")
            .replace("0.0.0.0:11301", &format!("127.0.0.1:{port}"))
            .replace("127.0.0.1:11300", &format!("127.0.0.1:{}", server.port()))
            .replace("/etc/stunnel/", &certs)
    });
    let client_side = |port: u16| {
        block("client")
            .replace("127.0.0.1:11300", &format!("127.0.0.1:{port}"))
            .replace("queue.example:11301", &format!("127.0.0.1:{}", server_tunnel.port))
            .replace("/etc/stunnel/", &certs)
    };
    let client_tunnel = stunnel(&dir.path, "client", client_side);
    let tunnel_port = client_tunnel.port;

    let script = "import sys, greenstalk\n\
        c = greenstalk.Client(('127.0.0.1', int(sys.argv[1])))\n\
        jid = c.put(b'through the tunnel')\n\
        job = c.reserve(timeout=5)\n\
        assert job.id == jid and job.body == 'through the tunnel', job\n\
        c.delete(job)\n\
        print('put, reserved and deleted', jid)\n";
    let out = Command::new("python3").args(["-c", script, &tunnel_port.to_string()]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(said.trim(), "put, reserved and deleted 1");

    // The same tunnel without the client's certificate: the server's
    // stunnel ends the handshake, and no command is answered.
    let keyless = |port: u16| -> String {
        client_side(port)
            .lines()
            .filter(|l| !l.starts_with("cert =") && !l.starts_with("key ="))
            .map(|l| l.to_owned() + "\n")
            .collect()
    };
    let bare_tunnel = stunnel(&dir.path, "bare", keyless);
    let bare_port = bare_tunnel.port;
    let mut s = TcpStream::connect(("127.0.0.1", bare_port)).unwrap();
    s.set_read_timeout(Some(common::HANG_GUARD)).unwrap();
    let _ = s.write_all(b"list-tube-used\r\n");
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert!(
        reply.is_empty(),
        "a client without a certificate was answered: {:?}",
        String::from_utf8_lossy(&reply)
    );
    // And the server saw only the one client.
    let mut c = server.client();
    assert_eq!(common::stat_u64(&mut c, "total-jobs"), 1);
}
