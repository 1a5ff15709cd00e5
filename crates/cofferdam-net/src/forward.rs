//! `--publish`: the supervisor's forwarder from host ports into the sealed sandbox's network
//! namespace, and the socket service it talks to.
//!
//! An unprivileged supervisor cannot enter the sandbox's network namespace (`setns` needs
//! `CAP_SYS_ADMIN` in its own user namespace), but a socket keeps the namespace it was made
//! in. So the sandbox init — the parent of pid 1, inside the network namespace, outside the
//! pid namespace, where nothing the command runs can see or signal it — serves the
//! supervisor fresh, unconnected TCP sockets of that namespace over the publish socket
//! (`cofferdam_sandbox::fds::PUBLISH` in the init): one request in, one reply out, each a
//! `cofferdam_channel` message ([`PublishRequest`], [`PublishReply`]: the socket attached,
//! or the errno that kept the init from making one). The supervisor asks for one
//! socket per connection it accepted on a host port, connects it to 127.0.0.1:PORT (the
//! connect happens in the sandbox's namespace) and relays bytes, unread, both ways.
//!
//! Bounds: the supervisor holds at most [`MAX_CONNECTIONS`] relayed connections at once and
//! closes the others at once; the init makes a socket only when asked and keeps no copy.
//! The command cannot reach the channel: the init's end is in a process outside its pid
//! namespace, and pid 1 closes its inherited copy before the command starts.
//!
//! Owns the host listeners, the wire format of the socket service (both ends), the relay and
//! its counters. It decides nothing (the mapping and where it may run are
//! `cofferdam_policy::publish` and `refusal`) and touches nothing of the sandbox's setup.

use cofferdam_policy::publish::PublishEntry;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::{AddressFamily, Shutdown, SocketAddrV4, SocketType};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The most connections relayed at once, over every mapping.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a connect to the command's port may take (a full listen queue stalls it).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the host side of a mapping could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// Something else listens on the host address and port.
    #[error(
        "--publish {entry}: {host} is in use on this host (another program listens there); \
         pick another HOST_PORT or stop that program"
    )]
    Busy {
        /// The mapping.
        entry: PublishEntry,
        /// Its host side.
        host: SocketAddr,
    },
    /// Any other failure to bind or listen.
    #[error("--publish {entry}: cannot listen on {host}: {source}{hint}")]
    Bind {
        /// The mapping.
        entry: PublishEntry,
        /// Its host side.
        host: SocketAddr,
        /// What the kernel said.
        source: std::io::Error,
        /// What to change, when known.
        hint: &'static str,
    },
}

/// The host listeners, bound before the run starts.
#[derive(Debug)]
pub struct Bound {
    listeners: Vec<(PublishEntry, TcpListener, SocketAddr)>,
}

/// Bind every mapping's host side (`SO_REUSEADDR`, as servers do, so a port left in
/// `TIME_WAIT` by an earlier run is not "in use").
pub fn bind(entries: &[PublishEntry]) -> Result<Bound, ForwardError> {
    let mut listeners = Vec::new();
    for &entry in entries {
        let host = entry.host();
        let l = TcpListener::bind(host).map_err(|source| match source.kind() {
            std::io::ErrorKind::AddrInUse => ForwardError::Busy { entry, host },
            std::io::ErrorKind::PermissionDenied => ForwardError::Bind {
                entry,
                host,
                source,
                hint: "; ports below 1024 need privileges: pick a HOST_PORT of 1024 or more",
            },
            std::io::ErrorKind::AddrNotAvailable => ForwardError::Bind {
                entry,
                host,
                source,
                hint: "; give an address of this host",
            },
            _ => ForwardError::Bind {
                entry,
                host,
                source,
                hint: "",
            },
        })?;
        let at = l.local_addr().map_err(|source| ForwardError::Bind {
            entry,
            host,
            source,
            hint: "",
        })?;
        listeners.push((entry, l, at));
    }
    Ok(Bound { listeners })
}

impl Bound {
    /// The host addresses actually bound (a host port 0 reads back as the kernel's choice),
    /// in mapping order.
    pub fn addresses(&self) -> Vec<(PublishEntry, SocketAddr)> {
        self.listeners.iter().map(|(e, _, a)| (*e, *a)).collect()
    }

    /// Serve every listener, asking the socket service on `channel` for each connection's
    /// sandbox socket.
    pub fn start(self, channel: OwnedFd) -> Forwarder {
        let shared = Arc::new(Shared {
            channel: Mutex::new(channel),
            active: AtomicUsize::new(0),
            open: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        let mut accepters = Vec::new();
        let mut mappings = Vec::new();
        for (entry, listener, at) in self.listeners {
            let counts = Arc::new(Counts::default());
            let stop = listener.try_clone().ok().map(OwnedFd::from);
            let (s, c) = (shared.clone(), counts.clone());
            let thread = std::thread::spawn(move || accept_loop(&listener, entry.port, &s, &c));
            accepters.push((stop, thread));
            mappings.push((entry, at, counts));
        }
        Forwarder {
            shared,
            accepters,
            mappings,
        }
    }
}

#[derive(Default, Debug)]
struct Counts {
    accepted: AtomicU64,
    relayed: AtomicU64,
    refused: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

struct Shared {
    channel: Mutex<OwnedFd>,
    active: AtomicUsize,
    /// The relayed connections' host sides, shut down when the run ends.
    open: Mutex<Vec<(u64, TcpStream)>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The forwarder of a run.
pub struct Forwarder {
    shared: Arc<Shared>,
    accepters: Vec<(Option<OwnedFd>, JoinHandle<()>)>,
    mappings: Vec<(PublishEntry, SocketAddr, Arc<Counts>)>,
}

/// What one mapping saw, read when the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishReport {
    /// The mapping.
    pub entry: PublishEntry,
    /// The host address bound.
    pub bound: SocketAddr,
    /// Connections accepted on the host side.
    pub accepted: u64,
    /// Of those, connected to the command's port and relayed.
    pub relayed: u64,
    /// Of those, closed at once: nothing listened on the port inside (yet), the sandbox
    /// could not give a socket (it was not running), or the forwarder was at its limit.
    pub refused: u64,
    /// Bytes relayed host → sandbox.
    pub bytes_in: u64,
    /// Bytes relayed sandbox → host.
    pub bytes_out: u64,
}

impl PublishReport {
    /// The mapping's entry in the bundle's `network.policy.publish`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "host": self.bound.to_string(),
            "port": self.entry.port,
            "accepted": self.accepted,
            "relayed": self.relayed,
            "refused": self.refused,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
        })
    }
}

impl Forwarder {
    /// Stop (the sandbox has ended): no more connections are accepted, open ones are shut
    /// down, and every thread is joined; then the counters are read.
    pub fn finish(self) -> Vec<PublishReport> {
        for (stop, _) in &self.accepters {
            if let Some(fd) = stop {
                // Wakes the blocked accept(2) with EINVAL (Linux).
                let _ = rustix::net::shutdown(fd, Shutdown::Both);
            }
        }
        for (_, t) in self.accepters {
            let _ = t.join();
        }
        for (_, s) in lock(&self.shared.open).iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
        self.mappings
            .into_iter()
            .map(|(entry, bound, c)| PublishReport {
                entry,
                bound,
                accepted: c.accepted.load(Ordering::SeqCst),
                relayed: c.relayed.load(Ordering::SeqCst),
                refused: c.refused.load(Ordering::SeqCst),
                bytes_in: c.bytes_in.load(Ordering::SeqCst),
                bytes_out: c.bytes_out.load(Ordering::SeqCst),
            })
            .collect()
    }
}

fn accept_loop(listener: &TcpListener, port: u16, shared: &Arc<Shared>, counts: &Arc<Counts>) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
            // Shut down by `finish`, or broken: either way no more connections.
            Err(_) => return,
        };
        counts.accepted.fetch_add(1, Ordering::SeqCst);
        if shared.active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.active.fetch_sub(1, Ordering::SeqCst);
            counts.refused.fetch_add(1, Ordering::SeqCst);
            reset(&client);
            continue;
        }
        let id = NEXT.fetch_add(1, Ordering::SeqCst);
        let (s, c) = (shared.clone(), counts.clone());
        let t = std::thread::spawn(move || {
            serve(client, port, id, &s, &c);
            s.active.fetch_sub(1, Ordering::SeqCst);
        });
        let mut threads = lock(&shared.threads);
        threads.retain(|t| !t.is_finished());
        threads.push(t);
    }
}

/// Close `client` with a reset, so the peer sees "connection refused/reset" at once.
fn reset(client: &TcpStream) {
    let _ = rustix::net::sockopt::set_socket_linger(client, Some(Duration::ZERO));
}

fn serve(client: TcpStream, port: u16, id: u64, shared: &Shared, counts: &Counts) {
    let inside = match sandbox_socket(&shared.channel).and_then(|fd| connect_inside(fd, port)) {
        Ok(s) => s,
        Err(_) => {
            counts.refused.fetch_add(1, Ordering::SeqCst);
            reset(&client);
            return;
        }
    };
    counts.relayed.fetch_add(1, Ordering::SeqCst);
    if let Ok(c) = client.try_clone() {
        lock(&shared.open).push((id, c));
    }
    let (Ok(mut client_r), Ok(mut inside_w)) = (client.try_clone(), inside.try_clone()) else {
        lock(&shared.open).retain(|(i, _)| *i != id);
        return;
    };
    let upstream = std::thread::spawn(move || {
        let n = std::io::copy(&mut client_r, &mut inside_w).unwrap_or(0);
        let _ = inside_w.shutdown(std::net::Shutdown::Write);
        n
    });
    let (mut inside_r, mut client_w) = (inside, client);
    let down = std::io::copy(&mut inside_r, &mut client_w).unwrap_or(0);
    let _ = client_w.shutdown(std::net::Shutdown::Write);
    let up = upstream.join().unwrap_or(0);
    counts.bytes_in.fetch_add(up, Ordering::SeqCst);
    counts.bytes_out.fetch_add(down, Ordering::SeqCst);
    lock(&shared.open).retain(|(i, _)| *i != id);
}

/// Connect a socket of the sandbox's namespace to 127.0.0.1:`port` there.
fn connect_inside(fd: OwnedFd, port: u16) -> Result<TcpStream, Errno> {
    // The service is trusted, but what crosses a boundary is checked: an IPv4 stream socket.
    if rustix::net::sockopt::socket_domain(&fd)? != AddressFamily::INET
        || rustix::net::sockopt::socket_type(&fd)? != SocketType::STREAM
    {
        return Err(Errno::PROTOTYPE);
    }
    // SO_SNDTIMEO bounds connect(2) too.
    rustix::net::sockopt::set_socket_timeout(
        &fd,
        rustix::net::sockopt::Timeout::Send,
        Some(CONNECT_TIMEOUT),
    )?;
    let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    loop {
        match rustix::net::connect(&fd, &to) {
            Err(Errno::INTR) => {}
            other => break other?,
        }
    }
    rustix::net::sockopt::set_socket_timeout(&fd, rustix::net::sockopt::Timeout::Send, None)?;
    Ok(TcpStream::from(fd))
}

/// Ask the socket service for one socket: one request, one reply, under the channel's lock.
fn sandbox_socket(channel: &Mutex<OwnedFd>) -> Result<OwnedFd, Errno> {
    let ch = lock(channel);
    request(ch.as_fd())
}

/// The channel's name in its errors.
pub const CHANNEL: &str = "publish";

/// The supervisor's request on the publish channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PublishRequest {
    /// One fresh TCP socket of the sandbox's network namespace.
    Socket,
}

/// The init's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PublishReply {
    /// The socket, the frame's one descriptor.
    Socket,
    /// No socket: the errno of the failed `socket(2)`.
    Failed {
        /// The errno.
        errno: i32,
    },
}

/// The supervisor's end: ask for a socket and receive it (`PIPE` once the sandbox is gone).
pub fn request(channel: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    cofferdam_channel::send(channel, CHANNEL, &PublishRequest::Socket, &[])
        .map_err(|e| e.errno())?;
    match cofferdam_channel::recv::<PublishReply>(channel, CHANNEL) {
        Ok(None) => Err(Errno::PIPE),
        Ok(Some((PublishReply::Socket, fds))) => match <[OwnedFd; 1]>::try_from(fds) {
            Ok([fd]) => Ok(fd),
            Err(_) => Err(Errno::PROTO),
        },
        Ok(Some((PublishReply::Failed { errno: 0 }, _))) => Err(Errno::PROTO),
        Ok(Some((PublishReply::Failed { errno }, _))) => Err(Errno::from_raw_os_error(errno)),
        Err(e) => Err(e.errno()),
    }
}

/// What the service makes per request: an unconnected IPv4 TCP socket (close-on-exec) of the
/// caller's network namespace.
pub fn tcp_socket() -> Result<OwnedFd, Errno> {
    rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
}

/// The sandbox's end: answer each request on `channel` with a socket from `make` until the
/// supervisor closes it; the socket is closed here once sent.
pub fn serve_sockets(channel: BorrowedFd<'_>, make: impl Fn() -> Result<OwnedFd, Errno>) {
    while serve_one(channel, &make) {}
}

/// Answer one request on `channel` (read when it is readable): `false` when the service
/// should end (end of stream, an error, a message that is not a request).
pub fn serve_one(channel: BorrowedFd<'_>, make: &impl Fn() -> Result<OwnedFd, Errno>) -> bool {
    match cofferdam_channel::recv::<PublishRequest>(channel, CHANNEL) {
        Ok(Some((PublishRequest::Socket, _))) => {}
        Ok(None) | Err(_) => return false,
    }
    let sent = match make() {
        Ok(fd) => cofferdam_channel::send(channel, CHANNEL, &PublishReply::Socket, &[fd.as_fd()]),
        Err(e) => cofferdam_channel::send(
            channel,
            CHANNEL,
            &PublishReply::Failed {
                errno: e.raw_os_error(),
            },
            &[],
        ),
    };
    sent.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::SocketFlags;
    use std::io::{Read, Write};

    fn pair() -> (OwnedFd, OwnedFd) {
        rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    #[test]
    fn the_service_answers_each_request_and_ends_with_the_channel() {
        let (sup, sandbox) = pair();
        let t = std::thread::spawn(move || serve_sockets(sandbox.as_fd(), tcp_socket));
        for _ in 0..3 {
            let fd = request(sup.as_fd()).unwrap();
            assert_eq!(
                rustix::net::sockopt::socket_domain(&fd).unwrap(),
                AddressFamily::INET
            );
        }
        drop(sup);
        t.join().unwrap();
    }

    #[test]
    fn a_failed_socket_is_told_and_a_gone_service_is_pipe() {
        let (sup, sandbox) = pair();
        let t = std::thread::spawn(move || serve_sockets(sandbox.as_fd(), || Err(Errno::MFILE)));
        assert_eq!(request(sup.as_fd()).unwrap_err(), Errno::MFILE);
        let (sup2, sandbox2) = pair();
        drop(sandbox2);
        assert_eq!(request(sup2.as_fd()).unwrap_err(), Errno::PIPE);
        drop(sup);
        t.join().unwrap();
    }

    #[test]
    fn a_busy_host_port_is_busy() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let e: PublishEntry = format!("{port}:80").parse().unwrap();
        let err = bind(&[e]).unwrap_err();
        assert!(matches!(err, ForwardError::Busy { .. }), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("127.0.0.1:{port} is in use"))
        );
    }

    /// The whole relay on this host's network (the "sandbox" sockets are ordinary ones).
    #[test]
    fn connections_are_relayed_and_refused_when_nothing_listens() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let free = TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = free.local_addr().unwrap().port();
        drop(free);
        let entries: Vec<PublishEntry> =
            ["0:".to_string() + &port.to_string(), format!("0:{closed}")]
                .iter()
                .map(|s| s.parse().unwrap())
                .collect();
        let bound = bind(&entries).unwrap();
        let at = bound.addresses();
        let (sup, sandbox) = pair();
        let service = std::thread::spawn(move || serve_sockets(sandbox.as_fd(), tcp_socket));
        let fwd = bound.start(sup);
        let echo = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut c, _) = server.accept().unwrap();
                let mut b = [0u8; 5];
                c.read_exact(&mut b).unwrap();
                c.write_all(&b).unwrap();
            }
        });
        let mut a = TcpStream::connect(at[0].1).unwrap();
        let mut b = TcpStream::connect(at[0].1).unwrap();
        a.write_all(b"hello").unwrap();
        b.write_all(b"world").unwrap();
        let mut got = [0u8; 5];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"world");
        echo.join().unwrap();
        let mut r = TcpStream::connect(at[1].1).unwrap();
        let mut rest = Vec::new();
        assert!(r.read_to_end(&mut rest).map_or(true, |n| n == 0));
        let reports = fwd.finish();
        assert_eq!(reports[0].accepted, 2);
        assert_eq!(reports[0].relayed, 2);
        assert_eq!(reports[0].bytes_in, 10);
        assert_eq!(reports[1].refused, 1);
        assert_eq!(reports[1].relayed, 0);
        service.join().unwrap();
    }
}
