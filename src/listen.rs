//! Making the listening socket from `-l` and `-p`: a TCP address (the first
//! that binds of those the host name resolves to, as beanstalkd does) or a
//! UNIX socket path (replacing a stale socket file, and nothing else). It
//! binds; it accepts nothing and knows nothing of the protocol.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;

/// Longest UNIX socket path (`sun_path` is 108 bytes with its NUL).
const MAX_UNIX_PATH: usize = 107;

/// Binds the first address `host:port` resolves to that accepts the bind,
/// as beanstalkd does with getaddrinfo's results.
pub(crate) fn bind_tcp(host: &str, port: u16) -> io::Result<TcpListener> {
    let mut last_error = io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address found"));
    for addr in resolve(host, port)? {
        match TcpListener::bind(addr) {
            Ok(listener) => return Ok(listener),
            Err(e) => last_error = io::Error::new(e.kind(), format!("bind {addr}: {e}")),
        }
    }
    Err(last_error)
}

/// The addresses of `host`, through the C library's resolver (files, DNS,
/// whatever nsswitch.conf says).
#[cfg(not(target_feature = "crt-static"))]
fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let addresses = (host, port)
        .to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("getaddrinfo({host}): {e}")))?;
    Ok(addresses.collect())
}

/// The addresses of `host` in a static build: an IP literal, or a name in
/// `/etc/hosts`. Static glibc's getaddrinfo would add 130 KB to the binary
/// (NSS, a dynamic loader, iconv tables) only to `dlopen` NSS modules that
/// a minimal host may not have; a listen address is almost always a literal.
#[cfg(target_feature = "crt-static")]
fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut found = hosts_lookup(&hosts, host);
    if found.is_empty() && host.eq_ignore_ascii_case("localhost") {
        found.push(std::net::Ipv4Addr::LOCALHOST.into());
    }
    if found.is_empty() {
        let why = "not an IP address nor a name in /etc/hosts (a static build does not use DNS)";
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("{host}: {why}")));
    }
    Ok(found.into_iter().map(|ip| SocketAddr::new(ip, port)).collect())
}

/// The addresses given to `name` in the text of an `/etc/hosts` file
/// (`ADDRESS NAME [ALIAS...]` lines, `#` starting a comment), in file order.
#[cfg_attr(not(target_feature = "crt-static"), allow(dead_code))]
fn hosts_lookup(hosts: &str, name: &str) -> Vec<std::net::IpAddr> {
    hosts
        .lines()
        .filter_map(|line| {
            let mut words = line.split('#').next().unwrap_or_default().split_whitespace();
            let ip = words.next()?.parse().ok()?;
            words.any(|word| word.eq_ignore_ascii_case(name)).then_some(ip)
        })
        .collect()
}

/// Binds a UNIX socket, replacing a stale socket file but nothing else.
pub(crate) fn bind_unix(path: &std::path::Path) -> io::Result<UnixListener> {
    let len = path.as_os_str().len();
    if len > MAX_UNIX_PATH {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is too long ({len} characters), where maximum allowed is {MAX_UNIX_PATH}",
                path.display()
            ),
        ));
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("another file already exists in the given path: {}", path.display()),
            ));
        }
        crate::log::event(format_args!("removing existing local socket to replace it"));
        std::fs::remove_file(path)?;
    }
    UnixListener::bind(path).map_err(|e| io::Error::new(e.kind(), format!("bind {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file_names_and_aliases_resolve_in_file_order() {
        let hosts = "# comment localhost\n127.0.0.1 localhost\n::1 localhost ip6-localhost\n\
                     10.0.0.7\tqueue.example queue # the queue host\nnot-an-ip queue\n";
        let ips = |name| hosts_lookup(hosts, name).iter().map(|ip| ip.to_string()).collect::<Vec<_>>();
        assert_eq!(ips("localhost"), ["127.0.0.1", "::1"]);
        assert_eq!(ips("QUEUE"), ["10.0.0.7"]);
        assert_eq!(ips("the"), Vec::<String>::new());
        assert_eq!(ips("comment"), Vec::<String>::new());
    }
}
