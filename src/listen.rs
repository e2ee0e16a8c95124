//! The listening socket: made from `-l` and `-p` (a TCP address, the first
//! that binds of those the host name resolves to, as beanstalkd does; or a
//! UNIX socket path, replacing a stale socket file and nothing else), or
//! inherited from systemd; and a connection accepted from it. It knows
//! nothing of the protocol.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use crate::config::Listen;
use crate::stream::Stream;
use crate::sys;

/// When an accepted TCP connection's peer counts as gone: after a minute
/// of silence it is probed every 10 seconds, and dropped once two minutes
/// pass with nothing from it, whether it was silent or had data of ours
/// unacknowledged. So the jobs of a worker whose machine vanished (no FIN,
/// no RST: a power cut, a pulled cable, a VM torn down) go back to ready
/// within [`DEAD_PEER_SECS`] of the last word from it, not after the
/// kernel's two hours of silence or fifteen minutes of retransmissions. A
/// live peer's kernel answers the probes, however long its worker works
/// or its client waits in a reserve.
pub(crate) const DEAD_PEER: sys::DeadPeer =
    sys::DeadPeer { idle_secs: 60, interval_secs: 10, probes: 6, user_timeout_ms: DEAD_PEER_SECS * 1000 };

/// The bound the README states: a vanished peer is let go within this
/// many seconds of the last byte or acknowledgement from it.
pub(crate) const DEAD_PEER_SECS: i32 = 120;

/// beanstalkd's listen backlog; std's default of 128 drops SYNs under a burst
/// of connects, and each drop costs the client a 1 s retransmit.
const LISTEN_BACKLOG: i32 = 1024;

/// The listening socket. It is non-blocking: the accept loop waits in
/// `poll`, and a connection that vanished between `poll` and `accept` must
/// send it back to waiting, not block it where no shutdown can reach.
#[derive(Debug)]
pub(crate) enum Listener {
    Tcp(TcpListener),
    /// A UNIX socket, with its file if we created it (and so remove it).
    Unix(UnixListener, Option<SocketFile>),
}

/// A UNIX socket file this server created, as it was when bound: at
/// shutdown it is removed only if it is still that file, so that a second
/// instance that has since bound the same path keeps its socket.
#[derive(Debug, Clone)]
pub(crate) struct SocketFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl SocketFile {
    /// Notes the identity of the socket file just bound at `path`.
    fn bound_at(path: &std::path::Path) -> io::Result<SocketFile> {
        let meta = std::fs::symlink_metadata(path)?;
        Ok(SocketFile { path: path.to_path_buf(), device: meta.dev(), inode: meta.ino() })
    }

    /// Whether `path` still names the socket file we bound.
    fn is_still_ours(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == (self.device, self.inode))
    }

    /// Removes the file if it is still the one we bound.
    pub(crate) fn remove_if_ours(&self) {
        if self.is_still_ours() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Listener {
    /// Binds what `-l` and `-p` say, ready for the accept loop.
    pub(crate) fn bind(listen: &Listen) -> io::Result<Listener> {
        let listener = match listen {
            Listen::Tcp { host, port } => Listener::Tcp(bind_tcp(host, *port)?),
            Listen::Unix(path) => {
                let listener = bind_unix(path)?;
                Listener::Unix(listener, Some(SocketFile::bound_at(path)?))
            }
        };
        listener.prepare()
    }

    /// Takes the listening socket systemd passed as `fd`, which nothing
    /// else in the process may own.
    pub(crate) fn inherited(fd: RawFd) -> io::Result<Listener> {
        let listener = match sys::inherited_listener(fd)? {
            sys::Inherited::Tcp(l) => Listener::Tcp(l),
            sys::Inherited::Unix(l) => Listener::Unix(l, None),
        };
        listener.prepare()
    }

    /// beanstalkd's backlog, and non-blocking (see [`Listener`]).
    fn prepare(self) -> io::Result<Listener> {
        if let Listener::Tcp(l) = &self {
            sys::set_backlog(l, LISTEN_BACKLOG)?;
        }
        self.set_nonblocking()?;
        Ok(self)
    }

    /// The TCP address bound; `None` for a UNIX socket.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// Where it listens, as `-l` would say it.
    pub(crate) fn address(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
            Listener::Unix(l, _) => {
                match l.local_addr().ok().and_then(|a| a.as_pathname().map(PathBuf::from)) {
                    Some(path) => format!("unix:{}", path.display()),
                    None => "an unnamed unix socket".to_owned(),
                }
            }
        }
    }

    /// Hands a UNIX socket file we created to `uid` and `gid`: the file we
    /// bound, never what its path may lead to now. A symbolic link put in
    /// its place by someone else is not followed (`lchown`), and a file
    /// that is no longer ours is left alone.
    pub(crate) fn give_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        match self {
            Listener::Unix(_, Some(file)) => {
                if !file.is_still_ours() {
                    return Err(io::Error::other(format!("{} was replaced", file.path.display())));
                }
                std::os::unix::fs::lchown(&file.path, Some(uid), Some(gid))
            }
            _ => Ok(()),
        }
    }

    /// The UNIX socket file we created, if any.
    pub(crate) fn socket_file(&self) -> Option<&SocketFile> {
        match self {
            Listener::Unix(_, file) => file.as_ref(),
            Listener::Tcp(_) => None,
        }
    }

    /// Removes a UNIX socket file we created, if it is still ours.
    pub(crate) fn remove_socket_file(&self) {
        if let Listener::Unix(_, Some(file)) = self {
            file.remove_if_ours();
        }
    }

    /// Takes one waiting connection.
    pub(crate) fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (stream, _) = l.accept()?;
                // Replies are whole; Nagle would only delay them.
                let _ = stream.set_nodelay(true);
                // A worker whose host vanishes mid-reserve sends no FIN;
                // keepalive probes notice, or its replies going
                // unacknowledged, and its reservations come back.
                let _ = sys::set_keepalive(&stream, &DEAD_PEER);
                Ok(Stream::Tcp(stream))
            }
            Listener::Unix(l, _) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l, _) => l.set_nonblocking(true),
        }
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        }
    }
}

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
pub(crate) fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
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
pub(crate) fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
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
fn bind_unix(path: &std::path::Path) -> io::Result<UnixListener> {
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
    #[test]
    fn accepted_tcp_connections_have_keepalive_on() {
        use super::*;
        let listener = Listener::Tcp(TcpListener::bind("127.0.0.1:0").unwrap());
        let Listener::Tcp(l) = &listener else { unreachable!() };
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let accepted = listener.accept().unwrap();
        assert!(matches!(accepted, Stream::Tcp(_)));
        assert!(sys::keepalive(&accepted).unwrap());
        // And it is our doing: a socket starts without it.
        assert!(!sys::keepalive(&client).unwrap());
    }

    /// A dead peer is noticed within the README's bound: the timings are
    /// set on every accepted TCP connection, as the kernel reads them back,
    /// and they add up to the bound.
    #[test]
    fn accepted_tcp_connections_let_a_dead_peer_go_within_two_minutes() {
        use super::*;
        let listener = Listener::Tcp(TcpListener::bind("127.0.0.1:0").unwrap());
        let Listener::Tcp(l) = &listener else { unreachable!() };
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let accepted = listener.accept().unwrap();
        let want = sys::DeadPeer { idle_secs: 60, interval_secs: 10, probes: 6, user_timeout_ms: 120_000 };
        assert_eq!(sys::dead_peer(&accepted).unwrap(), want);
        assert_eq!(DEAD_PEER, want);
        // Unanswered probes alone end it by the bound too.
        assert_eq!(want.idle_secs + want.interval_secs * want.probes, DEAD_PEER_SECS);
        // A socket starts with the kernel's: no user timeout at all.
        assert_eq!(sys::dead_peer(&client).unwrap().user_timeout_ms, 0);
    }

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
