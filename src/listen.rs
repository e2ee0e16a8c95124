//! The listening socket: made from `-l` and `-p` (a TCP address, the first
//! that binds of those the host name resolves to, as beanstalkd does; or a
//! UNIX socket path, replacing a stale socket file and nothing else), or
//! inherited from systemd; the admin socket (`--admin-socket`), a UNIX
//! socket that is mode 0600 from the moment its path exists and never
//! takes a live socket's place; and a connection accepted from either. It
//! knows nothing of the protocol.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

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
    fn bound_at(path: &Path) -> io::Result<SocketFile> {
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

    /// Binds a UNIX socket at `path` that only its owner (and root) may
    /// connect to from the moment the path exists: the admin socket.
    ///
    /// `bind` makes the file with the mode the umask leaves, and a `chmod`
    /// after it leaves a window in which anyone may connect (under umask
    /// 0 another user spinning on `connect` got in). Setting the umask
    /// around the bind would close it, but the umask is the whole
    /// process's: a file another thread makes meanwhile (an embedder's, a
    /// test's) would get 0600 too, a directory one its owner cannot
    /// enter. So the socket is bound inside a directory of our own, made
    /// 0700 beside `path` (the same file system), where nobody else can
    /// reach it, made 0600 there, and only then linked at `path`. A link
    /// never replaces what is there: a server that took the path
    /// meanwhile keeps it, and this start-up fails.
    ///
    /// A socket file already at `path` is replaced only if it is stale,
    /// that is if nothing accepts on it: a second server given the same
    /// path fails to start, rather than leave the first with no admin
    /// socket.
    pub(crate) fn bind_private(path: &Path) -> io::Result<Listener> {
        check_length(path)?;
        let dir = private_dir(path)?;
        let inside = dir.join("s");
        let bound = bind_unix(&inside).and_then(|listener| {
            std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o600))?;
            remove_stale(path, true)?;
            std::fs::hard_link(&inside, path).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => taken(path),
                _ => io::Error::new(e.kind(), format!("{}: {e}", path.display())),
            })?;
            Ok(listener)
        });
        // The private name goes, bound or not; the link at `path` stays.
        let _ = std::fs::remove_file(&inside);
        let _ = std::fs::remove_dir(&dir);
        let listener = Listener::Unix(bound?, Some(SocketFile::bound_at(path)?));
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
            // The path we linked it at, not the private one it was bound at.
            Listener::Unix(_, Some(file)) => format!("unix:{}", file.path.display()),
            Listener::Unix(l, None) => {
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

/// Binds a UNIX socket, replacing a socket file but nothing else, as
/// beanstalkd does.
fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    check_length(path)?;
    remove_stale(path, false)?;
    UnixListener::bind(path).map_err(|e| io::Error::new(e.kind(), format!("bind {}: {e}", path.display())))
}

fn check_length(path: &Path) -> io::Result<()> {
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
    Ok(())
}

/// Removes the socket file at `path`, if there is one, and refuses any
/// other kind of file. With `unless_live`, a socket something accepts on
/// is left alone, and so is one we cannot tell of: only a refused
/// `connect` says nobody listens.
fn remove_stale(path: &Path, unless_live: bool) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("another file already exists in the given path: {}", path.display()),
        ));
    }
    if unless_live {
        match UnixStream::connect(path) {
            Ok(_) => return Err(taken(path)),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                let why = format!("{}: cannot tell whether a server listens there: {e}", path.display());
                return Err(io::Error::new(e.kind(), why));
            }
        }
    }
    crate::log::event(format_args!("removing existing local socket to replace it"));
    std::fs::remove_file(path)
}

/// The error for a path another server listens at.
fn taken(path: &Path) -> io::Error {
    let why =
        format!("{}: another server is listening there (a live socket is never replaced)", path.display());
    io::Error::new(io::ErrorKind::AddrInUse, why)
}

/// Makes a directory of our own beside `path`, mode 0700 from its
/// creation. A name that is taken (another server of this process, or a
/// leftover of a process that had our pid) is never used: `mkdir` fails
/// on it, and the next is tried. Short, `.b<pid>.<n>`: the socket's path
/// inside must fit `sun_path` too.
fn private_dir(path: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let parent = path.parent().unwrap_or(Path::new(""));
    let mut tries = 0;
    loop {
        tries += 1;
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!(".b{}.{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            // The umask may have taken our own bits too; nobody else's
            // were ever there.
            Ok(()) => {
                return std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map(|()| dir)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 64 => {}
            // As a bind at `path` would fail (a missing directory, one we
            // may not write), and said of `path`.
            Err(e) => return Err(io::Error::new(e.kind(), format!("bind {}: {e}", path.display()))),
        }
    }
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
