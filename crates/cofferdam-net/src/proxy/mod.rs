//! The supervisor's egress driver for `allow` mode (DESIGN.md §6): it serves the listening
//! sockets the sandbox's pid 1 made inside the sandbox's network namespace and handed over
//! (`crate::handover`), answers DNS only for allowed names (with synthetic addresses, so the
//! later connection is checked by name), checks each connection by name and port (the name
//! the resolver gave, TLS SNI, HTTP `Host`, the proxy request's target), connects upstream
//! from the host's network and splices bytes without terminating TLS, counting everything.
//!
//! Plain threads, not an async runtime: a run has a handful of connections at a time, the
//! driver starts only in `allow` mode (nothing of it is on the startup path of `none`), and
//! it costs no dependency. A denied connection is refused at once (not a timeout) with its
//! reason where the protocol can carry one: an HTTP request (proxied, or plain HTTP on the
//! transparent path) gets a `403` with a one-line reason naming the `--allow-net` entry that
//! would allow it (also in a `Proxy-Status` header, RFC 9209, so a failed CONNECT shows it),
//! a denied name gets a DNS `REFUSED`; TLS and other protocols are reset (answering inside
//! TLS would mean terminating it).
//!
//! Owns the serving and the counters. It decides through `decide` (pure) and never touches
//! the sandbox's setup.

pub mod counters;
pub mod decide;
pub mod dns;
pub mod relay;
pub mod sniff;
pub mod snmp;

use crate::allow::AllowEntry;
use crate::handover::{SocketInfo, SocketRole, recv_sockets};
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus, InterceptedProtocol,
    InterceptionProfile, InterceptionSnapshot,
};
use cofferdam_record::trace::NetworkVerdict;
use counters::{Decision, Tally};
use decide::{Synthetic, Upstream, Verdict};
use rustix::fd::{AsFd, OwnedFd};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The driver's name in the records.
pub const DRIVER: &str = "cofferdam-net";
/// The sandbox-side DNS listener.
pub const DNS_LISTEN: &str = "127.0.0.1:53";
/// The sandbox-side HTTP proxy.
pub const PROXY_PORT: u16 = 3128;
/// The variable that maps names to addresses for the driver's upstream lookups, for tests
/// only: `name=addr[,name=addr…]`. Its use is recorded as a run warning.
pub const TEST_RESOLVE_ENV: &str = "COFFERDAM_TEST_RESOLVE";

/// Why a connection to an allowed name is refused when the name resolves only to addresses
/// of the host or of private networks (DNS rebinding onto local services, the local network
/// or a cloud metadata endpoint); an address entry reaches those deliberately.
const HOST_INTERNAL: &str = "the name resolves only to addresses of this host or of private networks \
     (loopback, link-local, private, shared, unique-local, multicast); allow the address itself \
     (e.g. --allow-net 10.0.0.5:443) to reach it";

/// How long a transparent connection to a resolved name may take to show its first bytes
/// (SNI or `Host`) before it is judged by the resolved name alone (server-speaks-first
/// protocols send nothing).
const SNIFF_WAIT: Duration = Duration::from_millis(250);
/// How long a proxy client may take to send its request head.
const HEAD_WAIT: Duration = Duration::from_secs(10);
/// The largest request head or first bytes read before deciding.
const HEAD_MAX: usize = 16 * 1024;
/// How long an upstream connect may take.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// The most connections served at once (each takes two threads): beyond it new ones are
/// reset and counted as denied, so the sandbox cannot exhaust the supervisor.
const MAX_ACTIVE: usize = 512;
/// The most descriptors one connection holds (client and upstream, a copy of each, a pipe
/// per direction) with room for a resolver's sockets: the cap on connections is what the
/// descriptor limit leaves after [`FDS_RESERVED`] divided by this.
const FDS_PER_CONNECTION: u64 = 10;
/// Descriptors kept for the rest of the supervisor (its records, relays, the listeners).
const FDS_RESERVED: u64 = 64;
/// How long `finish` waits for open connections to end (the sandbox is gone by then).
const FINISH_GRACE: Duration = Duration::from_millis(500);
/// How long a listener pauses when it is at the descriptor limit and cannot even refuse.
const LIMIT_PAUSE: Duration = Duration::from_millis(20);
/// How long a listener pauses after an error of its own before accepting again.
const ERROR_PAUSE: Duration = Duration::from_millis(10);
/// How long, and how much, a forwarded request's client is read after its response, so
/// that closing it sends the response's end and no reset.
const DRAIN_WAIT: Duration = Duration::from_secs(1);
const DRAIN_MAX: u64 = 1 << 20;

/// The stack of every thread the proxy starts (the receiver, a listener per socket, two per
/// connection). Std's default is 2 MiB of address space each. A connection's deepest work
/// (the host resolver's `getaddrinfo`, the sniffers, formatting a denial) ran in the last
/// 32 KiB of this in an unoptimised build (the test
/// `a_connection_thread_resolves_and_sniffs_on_its_stack` keeps it to the last half);
/// glibc also bounds its own `alloca` use by the thread's stack size. Only the address
/// space shrinks: the pages a thread touches are resident either way (`bench/network.sh`,
/// 200 held connections: 18.8 KiB resident and 6.6 MiB of address space each before, 18.8
/// KiB and 3.1 MiB after, the rest of it glibc's malloc arenas).
pub(crate) const THREAD_STACK: usize = 256 * 1024;

/// A named proxy thread with the [`THREAD_STACK`] stack.
pub(crate) fn worker(name: &str) -> std::thread::Builder {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(THREAD_STACK)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Upstream name resolution: the host's resolver, or the test overrides.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    overrides: HashMap<String, IpAddr>,
    /// The addresses of the host's own interfaces, which a name must not lead to.
    local: HashSet<IpAddr>,
}

impl Resolver {
    /// The host's resolver. In a debug build (the test suite's), the overrides of
    /// [`TEST_RESOLVE_ENV`] when it is set (malformed pairs are ignored); a release build
    /// never reads it.
    pub fn from_env() -> Resolver {
        let overrides = if cfg!(debug_assertions) {
            std::env::var(TEST_RESOLVE_ENV)
                .unwrap_or_default()
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .filter_map(|(n, a)| Some((n.trim().to_ascii_lowercase(), a.trim().parse().ok()?)))
                .collect()
        } else {
            HashMap::new()
        };
        Resolver {
            overrides,
            local: interface_addresses(),
        }
    }

    /// Whether overrides are in force (the run records a warning).
    pub fn is_overridden(&self) -> bool {
        !self.overrides.is_empty()
    }

    /// Where `up` may be reached on `port`: an address as given; a name's addresses less
    /// those it must never lead to unless an address entry of `allow` names them
    /// ([`decide::outside_the_host`]). The test overrides are taken as given.
    fn resolve(
        &self,
        allow: &[AllowEntry],
        up: &Upstream,
        port: u16,
    ) -> std::io::Result<Vec<SocketAddr>> {
        match up {
            Upstream::Addr(a) => Ok(vec![SocketAddr::new(*a, port)]),
            Upstream::Name(n) => match self.overrides.get(n) {
                Some(a) => Ok(vec![SocketAddr::new(*a, port)]),
                None if self.is_overridden() => Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{n} is not in {TEST_RESOLVE_ENV}"),
                )),
                None => {
                    let found = (n.as_str(), port).to_socket_addrs()?.collect();
                    decide::outside_the_host(found, &self.local, |ip| {
                        decide::rule_for(allow, &ip.to_string(), port).is_some()
                    })
                    .ok_or_else(|| {
                        std::io::Error::new(std::io::ErrorKind::PermissionDenied, HOST_INTERNAL)
                    })
                }
            },
        }
    }

    fn connect(
        &self,
        allow: &[AllowEntry],
        up: &Upstream,
        port: u16,
    ) -> std::io::Result<TcpStream> {
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
        for addr in self.resolve(allow, up, port)? {
            match TcpStream::connect_timeout(&addr, CONNECT_WAIT) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// The addresses of the host's network interfaces (empty when they cannot be listed).
fn interface_addresses() -> HashSet<IpAddr> {
    let mut out = HashSet::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated into `head`, or fails and leaves it.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: `ifa_addr` points to a sockaddr whose family says its real type; the
            // casts below read only the type that family names.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                out.insert(IpAddr::V4(std::net::Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let sin6 = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                out.insert(IpAddr::V6(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` is the list getifaddrs allocated; nothing refers to it any more.
    unsafe { libc::freeifaddrs(head) };
    out
}

struct Shared {
    allow: Vec<AllowEntry>,
    resolver: Resolver,
    tally: Mutex<Tally>,
    synthetic: Mutex<Synthetic>,
    active: AtomicUsize,
    /// Copies of the listeners, shut down by `finish` to wake their threads.
    listeners: Mutex<Vec<OwnedFd>>,
    /// What the hand-over gave: the roles, or why there was none.
    received: Mutex<Option<Result<Vec<SocketInfo>, String>>>,
    /// The pid of a process inside the sandbox's network namespace (0: not known yet).
    sandbox_pid: Arc<AtomicU32>,
    /// The namespace's own counters, opened once the sockets arrived.
    snmp: Mutex<Option<snmp::Watch>>,
    /// Set by `finish` before it shuts the listeners down: their threads end.
    stopping: AtomicBool,
    /// A descriptor held in reserve: at the descriptor limit a listener closes it to accept
    /// one connection and refuse it, then takes it again.
    spare: Mutex<Option<OwnedFd>>,
    /// `RLIMIT_NOFILE` (soft, hard) as read back after raising the soft limit.
    nofile: Mutex<Option<(Option<u64>, Option<u64>)>>,
    /// The most connections served at once: [`MAX_ACTIVE`], or less when the descriptor
    /// limit leaves room for fewer ([`connection_cap`]).
    max_active: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The running driver.
pub struct Interceptor {
    shared: Arc<Shared>,
    receiver: Option<JoinHandle<()>>,
}

/// What the driver reports at the end of the run.
#[derive(Debug, Clone)]
pub struct InterceptReport {
    /// The driver's control observation (`egress_proxy`, dimension `network`).
    pub observation: ControlObservation,
    /// `network.interception`.
    pub profile: InterceptionProfile,
    /// `network.intercepted`, when the driver served.
    pub snapshot: Option<InterceptionSnapshot>,
    /// Every decision, for the trace.
    pub decisions: Vec<Decision>,
    /// `run_observation.network`, when the driver served (`None`: nothing was observed).
    pub network_observation: Option<cofferdam_record::bundle::AccessObservation>,
    /// Warnings for the run.
    pub warnings: Vec<String>,
}

impl Interceptor {
    /// Start: a thread waits for the sandbox's sockets on `socket` (the supervisor's end of
    /// the network socket) and serves them.
    pub fn start(allow: Vec<AllowEntry>, resolver: Resolver, socket: OwnedFd) -> Interceptor {
        let shared = Arc::new(Shared {
            allow,
            resolver,
            tally: Mutex::new(Tally::default()),
            synthetic: Mutex::new(Synthetic::default()),
            active: AtomicUsize::new(0),
            listeners: Mutex::new(Vec::new()),
            received: Mutex::new(None),
            sandbox_pid: Arc::new(AtomicU32::new(0)),
            snmp: Mutex::new(None),
            stopping: AtomicBool::new(false),
            spare: Mutex::new(None),
            nofile: Mutex::new(None),
            max_active: AtomicUsize::new(MAX_ACTIVE),
        });
        let s = shared.clone();
        let receiver = worker("cofferdam-net")
            .spawn(move || receive(&s, &socket))
            .ok();
        Interceptor { shared, receiver }
    }

    /// Where to put the pid of the sandbox's init (a process inside its network namespace)
    /// once it runs: the driver reads the namespace's counters through it.
    pub fn sandbox_pid(&self) -> Arc<AtomicU32> {
        self.shared.sandbox_pid.clone()
    }

    /// Stop serving (the sandbox has ended) and report.
    pub fn finish(mut self) -> InterceptReport {
        if let Some(r) = self.receiver.take() {
            let _ = r.join();
        }
        self.shared.stopping.store(true, Ordering::SeqCst);
        for fd in lock(&self.shared.listeners).iter() {
            let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Both);
        }
        let deadline = Instant::now() + FINISH_GRACE;
        while self.shared.active.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let received = lock(&self.shared.received).clone();
        let mut warnings = Vec::new();
        if self.shared.resolver.is_overridden() {
            warnings.push(format!(
                "network: upstream names were resolved through {TEST_RESOLVE_ENV} (a test \
                 setting), not the host's resolver"
            ));
        }
        {
            let tally = lock(&self.shared.tally);
            if tally.uncounted_destinations > 0 {
                warnings.push(format!(
                    "network: {} requests went to destinations past the first {} and are \
                     counted in the totals only",
                    tally.uncounted_destinations,
                    counters::MAX_DESTINATIONS
                ));
            }
            if tally.untraced > 0 {
                warnings.push(format!(
                    "network: {} decisions past the first {} are counted but not in the trace",
                    tally.untraced,
                    counters::MAX_DECISIONS
                ));
            }
        }
        if self.shared.active.load(Ordering::SeqCst) > 0 {
            warnings.push(
                "network: connections were still open when the run ended; their byte counts \
                 are incomplete"
                    .into(),
            );
        }
        let mut o = ControlObservation::new(
            ControlMechanism::EgressProxy,
            ControlDimension::Network,
            ControlStatus::Enforced,
        );
        o.details.insert("driver".into(), json!(DRIVER));
        if let Some((soft, hard)) = *lock(&self.shared.nofile) {
            o.details
                .insert("nofile".into(), json!({ "soft": soft, "hard": hard }));
            o.details.insert(
                "max_connections".into(),
                json!(self.shared.max_active.load(Ordering::SeqCst)),
            );
        }
        let (covers, snapshot) = match &received {
            Some(Ok(infos)) => {
                o.details.insert(
                    "sockets".into(),
                    serde_json::to_value(infos).unwrap_or_default(),
                );
                let mut covers = Vec::new();
                if infos
                    .iter()
                    .any(|i| matches!(i.role, SocketRole::DnsUdp | SocketRole::DnsTcp))
                {
                    covers.push(InterceptedProtocol::Dns);
                }
                if infos
                    .iter()
                    .any(|i| matches!(i.role, SocketRole::Tcp { .. }))
                {
                    covers.push(InterceptedProtocol::Tcp);
                }
                if infos.iter().any(|i| i.role == SocketRole::Proxy) {
                    covers.push(InterceptedProtocol::HttpConnect);
                }
                let mut snap = lock(&self.shared.tally).snapshot();
                match lock(&self.shared.snmp)
                    .as_mut()
                    .and_then(snmp::Watch::since_open)
                {
                    Some(u) => {
                        snap.tcp_refused_unlistened = Some(u.tcp_attempt_fails);
                        snap.udp_unlistened = Some(u.udp_no_ports);
                    }
                    None => warnings.push(
                        "network: the sandbox namespace's counters could not be read; \
                         attempts on ports nothing listens on are not counted (null)"
                            .into(),
                    ),
                }
                (covers, Some(snap))
            }
            Some(Err(e)) => {
                o.status = ControlStatus::Failed;
                o.reason = Some(e.clone());
                (Vec::new(), None)
            }
            None => {
                o.status = ControlStatus::Failed;
                o.reason = Some("the sandbox handed over no sockets".into());
                (Vec::new(), None)
            }
        };
        let network_observation = snapshot
            .is_some()
            .then(|| lock(&self.shared.tally).observation());
        let decisions = std::mem::take(&mut lock(&self.shared.tally).decisions);
        InterceptReport {
            observation: o,
            profile: InterceptionProfile {
                driver: DRIVER.into(),
                covers,
                dns_listen: Some(DNS_LISTEN.into()),
                proxy_listen: Some(format!("127.0.0.1:{PROXY_PORT}")),
            },
            snapshot,
            decisions,
            network_observation,
            warnings,
        }
    }
}

fn receive(shared: &Arc<Shared>, socket: &OwnedFd) {
    let got = match recv_sockets(socket.as_fd()) {
        Ok(Some(got)) => got,
        Ok(None) => return,
        Err(e) => {
            *lock(&shared.received) =
                Some(Err(format!("cannot receive the sandbox's sockets: {e}")));
            return;
        }
    };
    // The init unshared the namespace before pid 1 could send: it is inside now.
    // The supervisor stores its pid right after starting it: wait for that, briefly.
    let mut pid = shared.sandbox_pid.load(Ordering::SeqCst);
    for _ in 0..200 {
        if pid != 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        pid = shared.sandbox_pid.load(Ordering::SeqCst);
    }
    if pid != 0 {
        *lock(&shared.snmp) = snmp::Watch::open(pid);
    }
    let nofile = raise_nofile();
    *lock(&shared.nofile) = Some(nofile);
    shared
        .max_active
        .store(connection_cap(nofile.0), Ordering::SeqCst);
    *lock(&shared.spare) = open_spare();
    let mut infos = Vec::new();
    for (info, fd) in got {
        if let Ok(copy) = fd.try_clone() {
            lock(&shared.listeners).push(copy);
        }
        let s = shared.clone();
        let spawned = worker("cofferdam-net-listen").spawn(move || match info.role {
            SocketRole::DnsUdp => serve_dns_udp(&s, UdpSocket::from(fd)),
            SocketRole::DnsTcp => accept_loop(&s, TcpListener::from(fd), |sh, c| {
                on_loopback_or_transparent(sh, c, serve_dns_tcp);
            }),
            SocketRole::Proxy => accept_loop(&s, TcpListener::from(fd), |sh, c| {
                on_loopback_or_transparent(sh, c, serve_proxy);
            }),
            SocketRole::Tcp { .. } => {
                accept_loop(&s, TcpListener::from(fd), serve_transparent);
            }
            SocketRole::CatchAll => accept_loop(&s, TcpListener::from(fd), serve_catch_all),
        });
        if spawned.is_ok() {
            infos.push(info);
        }
    }
    *lock(&shared.received) = Some(Ok(infos));
}

fn accept_loop(shared: &Arc<Shared>, l: TcpListener, serve: fn(&Shared, TcpStream)) {
    loop {
        match l.accept() {
            Ok((stream, _)) => {
                let cap = shared.max_active.load(Ordering::SeqCst);
                if shared.active.fetch_add(1, Ordering::SeqCst) >= cap {
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                    over_capacity(shared, stream);
                    continue;
                }
                let s = shared.clone();
                let spawned = worker("cofferdam-net-conn").spawn(move || {
                    serve(&s, stream);
                    s.active.fetch_sub(1, Ordering::SeqCst);
                });
                if spawned.is_err() {
                    shared.active.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
            Err(_) if shared.stopping.load(Ordering::SeqCst) => return,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                refuse_at_descriptor_limit(shared, &l);
            }
            // Anything else (memory, buffers) passes: the listener never ends before the run.
            Err(_) => std::thread::sleep(ERROR_PAUSE),
        }
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard one (each connection takes several
/// descriptors); what it is afterwards, read back (`None`: unlimited or unreadable).
fn raise_nofile() -> (Option<u64>, Option<u64>) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    if now.maximum.is_some() && now.current != now.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: now.maximum,
                maximum: now.maximum,
            },
        );
    }
    let back = getrlimit(Resource::Nofile);
    (back.current, back.maximum)
}

/// The most connections served at once under a soft descriptor limit of `soft` (`None`:
/// unlimited): never so many that they could exhaust the supervisor's descriptors.
fn connection_cap(soft: Option<u64>) -> usize {
    let Some(soft) = soft else {
        return MAX_ACTIVE;
    };
    let fit = soft.saturating_sub(FDS_RESERVED) / FDS_PER_CONNECTION;
    usize::try_from(fit).map_or(MAX_ACTIVE, |n| n.clamp(1, MAX_ACTIVE))
}

/// The descriptor kept in reserve for [`refuse_at_descriptor_limit`].
fn open_spare() -> Option<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

/// `accept` said the process is out of descriptors: give up the spare one, accept the
/// waiting connection and reset it at once (counted), take the spare again. Without a
/// spare, pause briefly: the waiting connections stay queued until descriptors free up.
fn refuse_at_descriptor_limit(shared: &Shared, l: &TcpListener) {
    let mut spare = lock(&shared.spare);
    if spare.take().is_some() {
        if let Ok((stream, _)) = l.accept() {
            lock(&shared.tally).refused_at_limit += 1;
            deny_at_once(shared, stream, "the driver is at its descriptor limit");
        }
        *spare = open_spare();
    } else {
        *spare = open_spare();
        drop(spare);
        std::thread::sleep(LIMIT_PAUSE);
    }
}

/// Serve a connection to the resolver's or proxy's port with `serve` when it came to
/// 127.0.0.1, else (the port is also allowed, the listener is on every address) as a
/// transparent connection.
fn on_loopback_or_transparent(shared: &Shared, c: TcpStream, serve: fn(&Shared, TcpStream)) {
    match c.local_addr() {
        Ok(a) if a.ip().to_canonical() != IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) => {
            serve_transparent(shared, c);
        }
        _ => serve(shared, c),
    }
}

/// Refuse a connection beyond the cap on connections at once, counted as denied for its
/// destination and as refused at the limit.
fn over_capacity(shared: &Shared, stream: TcpStream) {
    lock(&shared.tally).refused_at_limit += 1;
    deny_at_once(shared, stream, "too many connections at once");
}

/// Refuse a connection the sandbox's catch-all rule diverted (nothing listens on its port in
/// the sandbox, and the port is not allowed), counted as denied for its destination.
fn serve_catch_all(shared: &Shared, stream: TcpStream) {
    match count_denied(shared, &stream, "the port is not allowed") {
        Some((host, port)) => refuse(stream, Vec::new(), &host, port),
        None => reset(stream),
    }
}

/// Reset `stream` at once and count it denied for its destination.
fn deny_at_once(shared: &Shared, stream: TcpStream, reason: &'static str) {
    count_denied(shared, &stream, reason);
    reset(stream);
}

/// Count `stream` denied for its destination, which it returns: the accepted socket's local
/// address, named when the resolver gave it out.
fn count_denied(
    shared: &Shared,
    stream: &TcpStream,
    reason: &'static str,
) -> Option<(String, u16)> {
    let local = stream.local_addr().ok()?;
    let host = lock(&shared.synthetic)
        .name_of(local.ip())
        .map_or_else(|| local.ip().to_canonical().to_string(), str::to_owned);
    let v = Verdict::Deny {
        host: host.clone(),
        reason,
    };
    record(shared, InterceptedProtocol::Tcp, local.port(), &v);
    Some((host, local.port()))
}

/// Refuse a denied transparent connection to `host`:`port` (already recorded): a plain HTTP
/// request (its first bytes in `first`, read here briefly when none were) is answered `403`
/// with the reason; anything else (TLS, whose handshake cannot carry an answer without
/// terminating it, another protocol, nothing within the sniffing wait) is reset.
fn refuse(mut client: TcpStream, mut first: Vec<u8>, host: &str, port: u16) {
    if first.is_empty() {
        first = read_until(&mut client, SNIFF_WAIT, told);
    }
    if !matches!(sniff::sniff(&first), sniff::Sniffed::Http(_)) {
        return reset(client);
    }
    answer(
        &mut client,
        "403 Forbidden",
        &decide::denial_reason(host, port),
    );
    // The answer is all: the client sees its end at once, and the rest of its request
    // is read before the close so that the close is no reset cutting the answer off.
    let _ = client.shutdown(std::net::Shutdown::Write);
    drain(client);
}

/// The DNS answer for a query, counted.
fn answer_dns(shared: &Shared, msg: &[u8]) -> Option<Vec<u8>> {
    let q = dns::parse_query(msg)?;
    let allowed = dns::is_internet(&q) && decide::name_allowed(&shared.allow, &q.name);
    let reply = if !dns::is_internet(&q) {
        dns::Reply::Refused
    } else if !allowed {
        // REFUSED, not NXDOMAIN: the name may well exist; this run's policy refuses it, and
        // resolvers fail at once on it (no negative caching of a name that is not absent).
        dns::Reply::Refused
    } else if q.qtype == dns::TYPE_A {
        match lock(&shared.synthetic).address_for(&q.name) {
            Some(a) => dns::Reply::A(a),
            None => dns::Reply::Refused,
        }
    } else {
        dns::Reply::Empty
    };
    let answered = matches!(reply, dns::Reply::A(_) | dns::Reply::Empty);
    lock(&shared.tally).dns(Decision {
        at_unix_ms: now_ms(),
        protocol: InterceptedProtocol::Dns,
        host: q.name.clone(),
        port: None,
        verdict: if answered {
            NetworkVerdict::Allowed
        } else {
            NetworkVerdict::Denied
        },
        rule: None,
        reason: (!answered).then(|| "the name is not allowed".to_owned()),
    });
    Some(dns::response(&q, reply))
}

fn serve_dns_udp(shared: &Arc<Shared>, sock: UdpSocket) {
    let mut buf = [0u8; 1500];
    loop {
        let got = sock.recv_from(&mut buf);
        // `finish` shuts the socket down, which ends every read with nothing: only then
        // does the listener end, never for a datagram (an empty one is malformed).
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        match got {
            Ok((n, peer)) => match answer_dns(shared, &buf[..n]) {
                Some(resp) => {
                    let _ = sock.send_to(&resp, peer);
                }
                None => lock(&shared.tally).malformed += 1,
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => std::thread::sleep(ERROR_PAUSE),
        }
    }
}

fn serve_dns_tcp(shared: &Shared, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(HEAD_WAIT));
    loop {
        let mut len = [0u8; 2];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if stream.read_exact(&mut msg).is_err() {
            return;
        }
        let Some(resp) = answer_dns(shared, &msg) else {
            lock(&shared.tally).malformed += 1;
            return;
        };
        let Ok(n) = u16::try_from(resp.len()) else {
            return;
        };
        // One write: the length prefix and the message in one segment where it fits.
        let mut framed = Vec::with_capacity(resp.len() + 2);
        framed.extend_from_slice(&n.to_be_bytes());
        framed.extend_from_slice(&resp);
        if stream.write_all(&framed).is_err() {
            return;
        }
    }
}

/// Reset the connection (a refusal the client sees at once, not a timeout).
fn reset(stream: TcpStream) {
    let _ = rustix::net::sockopt::set_socket_linger(&stream, Some(Duration::ZERO));
    drop(stream);
}

fn record(shared: &Shared, protocol: InterceptedProtocol, port: u16, v: &Verdict) {
    let (host, verdict, rule, reason) = match v {
        Verdict::Allow { host, rule, .. } => {
            (host, NetworkVerdict::Allowed, Some(rule.clone()), None)
        }
        Verdict::Deny { host, reason } => (
            host,
            NetworkVerdict::Denied,
            None,
            Some((*reason).to_owned()),
        ),
    };
    lock(&shared.tally).decide(Decision {
        at_unix_ms: now_ms(),
        protocol,
        host: host.clone(),
        port: Some(port),
        verdict,
        rule,
        reason,
    });
}

/// Read until `done` says the bytes are enough, the limit, the end, or the timeout.
fn read_until(stream: &mut TcpStream, wait: Duration, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let deadline = Instant::now() + wait;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !done(&buf) && buf.len() < HEAD_MAX {
        // The whole head within `wait`, however slowly its bytes come.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break;
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = stream.set_read_timeout(None);
    buf
}

/// What goes upstream first, and what after it.
enum Send<'a> {
    /// `first`, then everything the client sends (a tunnel, or a protocol not parsed).
    Splice(&'a [u8]),
    /// One HTTP request: `first` (its rebuilt head and the body bytes already read), then
    /// exactly `left` more body bytes, and nothing after: a second request on the
    /// connection never reaches the upstream unchecked.
    One { first: &'a [u8], left: u64 },
}

/// Connect upstream for an allowed verdict `v` and relay. The decision is recorded here,
/// once the name is resolved: a name that resolves only to host-internal addresses is
/// recorded (and answered) as denied.
#[allow(clippy::too_many_arguments)]
fn go_upstream(
    shared: &Shared,
    mut client: TcpStream,
    protocol: InterceptedProtocol,
    v: &Verdict,
    host: &str,
    port: u16,
    upstream: &Upstream,
    send: Send<'_>,
    reply: Option<&[u8]>,
) {
    let connected = shared.resolver.connect(&shared.allow, upstream, port);
    match &connected {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => record(
            shared,
            protocol,
            port,
            &Verdict::Deny {
                host: host.to_owned(),
                reason: HOST_INTERNAL,
            },
        ),
        _ => record(shared, protocol, port, v),
    }
    let up = match connected {
        Ok(up) => up,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && reply.is_some() => {
            return answer(&mut client, "403 Forbidden", HOST_INTERNAL);
        }
        Err(_) => {
            match reply {
                Some(_) => {
                    let _ = client.write_all(
                        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
                None => reset(client),
            }
            return;
        }
    };
    if let Some(r) = reply
        && !r.is_empty()
        && client.write_all(r).is_err()
    {
        return;
    }
    let _ = client.set_nodelay(true);
    match send {
        Send::Splice(first) => {
            let mut up_w = match up.try_clone() {
                Ok(u) => u,
                Err(_) => return,
            };
            if !first.is_empty() && up_w.write_all(first).is_err() {
                return;
            }
            if let Ok((sent, received)) = relay::splice(client, up) {
                lock(&shared.tally).bytes(host, Some(port), sent + first.len() as u64, received);
            }
        }
        Send::One { first, left } => {
            let (Ok(up_r), Ok(client_w)) = (up.try_clone(), client.try_clone()) else {
                return;
            };
            let back = worker("cofferdam-net-relay").spawn(move || relay::pump(up_r, client_w));
            let sent = send_one(&client, &up, first, left);
            let received = back.map_or(0, |t| t.join().unwrap_or(0));
            drain(client);
            lock(&shared.tally).bytes(host, Some(port), sent, received);
        }
    }
}

/// Send one request upstream: `first`, then `left` body bytes from the client, nothing
/// more. The bytes sent.
fn send_one(client: &TcpStream, mut up: &TcpStream, first: &[u8], left: u64) -> u64 {
    if up.write_all(first).is_err() {
        return 0;
    }
    let body = std::io::copy(&mut client.take(left), &mut up).unwrap_or(0);
    first.len() as u64 + body
}

/// Read what the client still sends (a pipelined request that is not forwarded), briefly
/// and boundedly, before closing it: closing with unread bytes would reset the connection
/// and could cut off the response it is still receiving.
fn drain(client: TcpStream) {
    if client.set_read_timeout(Some(DRAIN_WAIT)).is_ok() {
        let _ = std::io::copy(&mut (&client).take(DRAIN_MAX), &mut std::io::sink());
    }
}

/// One request of a transparent HTTP connection, the head it was read from in `first`:
/// its head rebuilt (its own `Host`, `Connection: close`), the body bytes already read,
/// and how many more follow.
fn one_request(first: &[u8], given: &str) -> Option<(Vec<u8>, u64)> {
    let head = sniff::parse_head(first).ok()??;
    let host = head.host.clone().unwrap_or_else(|| given.to_owned());
    Some(rebuilt(&head, &head.target, &host, &first[head.len..]))
}

/// `head` rebuilt for `target` and `host` with the body bytes of `rest` (at most the
/// body's length) after it, and how many body bytes are still to come.
fn rebuilt(head: &sniff::Head, target: &str, host: &str, rest: &[u8]) -> (Vec<u8>, u64) {
    let mut out = head.rebuild(target, host);
    let have = usize::try_from(head.body).map_or(rest.len(), |b| b.min(rest.len()));
    out.extend_from_slice(&rest[..have]);
    (out, head.body - have as u64)
}

/// The name a client claims in its first bytes (SNI or `Host`), once they tell.
fn claim_of(first: &[u8]) -> Option<String> {
    match sniff::sniff(first) {
        sniff::Sniffed::Tls(name) | sniff::Sniffed::Http(name) => name,
        _ => None,
    }
}

fn told(b: &[u8]) -> bool {
    sniff::sniff(b) != sniff::Sniffed::Incomplete
}

fn serve_transparent(shared: &Shared, mut client: TcpStream) {
    let Ok(local) = client.local_addr() else {
        return;
    };
    let (dest, port) = (local.ip().to_canonical(), local.port());
    let given = lock(&shared.synthetic).name_of(dest).map(str::to_owned);
    // Only a resolved name is checked against what the client claims; an address entry
    // allows the address whatever the client says.
    let first = match &given {
        Some(_) => read_until(&mut client, SNIFF_WAIT, told),
        None => Vec::new(),
    };
    if let Some(name) = given.as_deref()
        && !told(&first)
    {
        return serve_late_claim(shared, client, name, dest, port, first);
    }
    if matches!(sniff::sniff(&first), sniff::Sniffed::Malformed(_)) {
        lock(&shared.tally).malformed += 1;
        return reset(client);
    }
    let claimed = claim_of(&first);
    let v = decide::decide_transparent(
        &shared.allow,
        dest,
        given.as_deref(),
        port,
        claimed.as_deref(),
    );
    match &v {
        Verdict::Deny { host, .. } => {
            record(shared, InterceptedProtocol::Tcp, port, &v);
            refuse(client, first, host, port);
        }
        Verdict::Allow { host, upstream, .. } => {
            let tcp = InterceptedProtocol::Tcp;
            // A checked HTTP request goes up alone; anything else is spliced as it is.
            let one = match (&given, sniff::sniff(&first)) {
                (Some(g), sniff::Sniffed::Http(_)) => one_request(&first, g),
                _ => None,
            };
            let send = match &one {
                Some((first, left)) => Send::One { first, left: *left },
                None => Send::Splice(&first),
            };
            go_upstream(shared, client, tcp, &v, host, port, upstream, send, None);
        }
    }
}

/// A connection to a resolved name whose client has not told its name in time (a protocol
/// where the server speaks first, or a slow client): the upstream is connected and may speak,
/// but nothing the client sends goes upstream until its first bytes tell whether they claim
/// another name. Waiting longer never lets a mismatch through.
fn serve_late_claim(
    shared: &Shared,
    client: TcpStream,
    name: &str,
    dest: IpAddr,
    port: u16,
    first: Vec<u8>,
) {
    let by_name = decide::decide_transparent(&shared.allow, dest, Some(name), port, None);
    let Verdict::Allow { upstream, .. } = &by_name else {
        record(shared, InterceptedProtocol::Tcp, port, &by_name);
        return reset(client);
    };
    let up = match shared.resolver.connect(&shared.allow, upstream, port) {
        Ok(up) => up,
        Err(e) => {
            let v = if e.kind() == std::io::ErrorKind::PermissionDenied {
                Verdict::Deny {
                    host: name.to_owned(),
                    reason: HOST_INTERNAL,
                }
            } else {
                by_name
            };
            record(shared, InterceptedProtocol::Tcp, port, &v);
            return reset(client);
        }
    };
    let tcp = InterceptedProtocol::Tcp;
    relay_once_told(shared, client, up, tcp, name, dest, port, first);
}

/// Relay a connection to the name `name` whose upstream `up` is connected, once the
/// client's first bytes tell whether they claim another name (SNI, `Host`): until then the
/// upstream may speak, but nothing of the client's goes up. The decision is recorded here.
#[allow(clippy::too_many_arguments)]
fn relay_once_told(
    shared: &Shared,
    mut client: TcpStream,
    up: TcpStream,
    protocol: InterceptedProtocol,
    name: &str,
    dest: IpAddr,
    port: u16,
    mut first: Vec<u8>,
) {
    let (Ok(up_r), Ok(client_w)) = (up.try_clone(), client.try_clone()) else {
        return;
    };
    let denied = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let quiet = denied.clone();
    let back =
        worker("cofferdam-net-relay").spawn(move || relay::pump_unless(up_r, client_w, &quiet));
    let mut chunk = [0u8; 4096];
    while !told(&first) && first.len() < HEAD_MAX {
        match client.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => first.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let malformed = matches!(sniff::sniff(&first), sniff::Sniffed::Malformed(_));
    let v = if malformed {
        lock(&shared.tally).malformed += 1;
        Verdict::Deny {
            host: name.to_owned(),
            reason: "the request head is malformed",
        }
    } else {
        decide::decide_transparent(
            &shared.allow,
            dest,
            Some(name),
            port,
            claim_of(&first).as_deref(),
        )
    };
    record(shared, protocol, port, &v);
    let one = match sniff::sniff(&first) {
        sniff::Sniffed::Http(_) => one_request(&first, name),
        _ => None,
    };
    let sent = match &v {
        Verdict::Deny { host, .. } => {
            // The upstream side's relay must end without closing the client's stream, so
            // that the last close here is a reset (or the 403, when the upstream sent
            // the client nothing: an answer after its bytes would read as theirs).
            denied.store(true, Ordering::SeqCst);
            let _ = up.shutdown(std::net::Shutdown::Both);
            let received = back.map_or(0, |t| t.join().unwrap_or(0));
            lock(&shared.tally).bytes(name, Some(port), 0, received);
            if received == 0 && !malformed {
                return refuse(client, first, host, port);
            }
            return reset(client);
        }
        Verdict::Allow { .. } => match one {
            Some((head, left)) => {
                let sent = send_one(&client, &up, &head, left);
                let received = back.map_or(0, |t| t.join().unwrap_or(0));
                drain(client);
                lock(&shared.tally).bytes(name, Some(port), sent, received);
                return;
            }
            None => {
                let mut up_w = up;
                if up_w.write_all(&first).is_err() {
                    0
                } else {
                    first.len() as u64 + relay::pump(client, up_w)
                }
            }
        },
    };
    let received = back.map_or(0, |t| t.join().unwrap_or(0));
    lock(&shared.tally).bytes(name, Some(port), sent, received);
}

/// Answer a client with `status` and a one-line reason, and close. The reason is made plain
/// printable ASCII here (anything else, and `"` and `\\`, become `?`), whatever it quotes:
/// it goes into a header and onto the workload's terminal.
fn answer(client: &mut TcpStream, status: &str, why: &str) {
    let why: String = why
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '?',
        })
        .collect();
    let body = format!("cofferdam: {why}\n");
    let error = match status.split(' ').next() {
        Some("403") => "http_request_denied",
        Some("400") => "http_request_error",
        _ => "destination_unavailable",
    };
    let _ = client.write_all(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Proxy-Status: cofferdam; error={error}; details=\"cofferdam: {why}\"\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

fn serve_proxy(shared: &Shared, mut client: TcpStream) {
    let buf = read_until(&mut client, HEAD_WAIT, |b| {
        !matches!(sniff::parse_head(b), Ok(None))
    });
    let parsed = sniff::parse_head(&buf)
        .map_err(sniff::ProxyError::from)
        .and_then(|h| {
            let h = h.ok_or(sniff::ProxyError::Target)?;
            let r = sniff::proxy_request(&h)?;
            Ok((h, r))
        });
    let (head, req) = match parsed {
        Ok(hr) => hr,
        Err(sniff::ProxyError::Head(sniff::HeadError::HostMismatch)) => {
            // Another virtual host than the target: a denial for the name it claims.
            let claimed = sniff::parse_head(&buf)
                .ok()
                .flatten()
                .and_then(|h| h.host)
                .and_then(|h| sniff::split_authority(&h, 80));
            let (host, port) = claimed.unwrap_or_default();
            let reason = "the Host header names another destination than the request target";
            record(
                shared,
                InterceptedProtocol::HttpConnect,
                port,
                &Verdict::Deny { host, reason },
            );
            return answer(&mut client, "403 Forbidden", reason);
        }
        Err(e) => {
            lock(&shared.tally).malformed += 1;
            let why = if buf.is_empty() {
                "no request head".to_owned()
            } else if sniff::parse_head(&buf).is_ok_and(|h| h.is_none()) {
                format!(
                    "the request head did not complete within {HEAD_WAIT:?} and {HEAD_MAX} bytes"
                )
            } else {
                e.to_string()
            };
            return answer(&mut client, "400 Bad Request", &why);
        }
    };
    let (host, port) = match &req {
        sniff::ProxyRequest::Connect { host, port }
        | sniff::ProxyRequest::Forward { host, port, .. } => (host.clone(), *port),
    };
    let v = {
        let syn = lock(&shared.synthetic);
        decide::decide_proxy(&shared.allow, &syn, &host, port)
    };
    let (checked, upstream) = match &v {
        Verdict::Deny { host, .. } => {
            record(shared, InterceptedProtocol::HttpConnect, port, &v);
            let why = decide::denial_reason(host, port);
            return answer(&mut client, "403 Forbidden", &why);
        }
        Verdict::Allow { host, upstream, .. } => (host.clone(), upstream.clone()),
    };
    if matches!(req, sniff::ProxyRequest::Connect { .. })
        && let Upstream::Name(name) = &upstream
    {
        return tunnel_to_name(shared, client, &v, name, port, buf[head.len..].to_vec());
    }
    let forwarded;
    let (send, reply): (Send<'_>, &[u8]) = match req {
        // A CONNECT tunnel to an address sends on what followed the request head, after
        // the 200: an address entry allows the address whatever the client says.
        sniff::ProxyRequest::Connect { .. } => (
            Send::Splice(&buf[head.len..]),
            b"HTTP/1.1 200 Connection established\r\n\r\n",
        ),
        // A forwarded request goes up alone, in origin form, with the target's authority
        // as its one `Host` (RFC 9112 §3.2.2).
        sniff::ProxyRequest::Forward {
            path, authority, ..
        } => {
            forwarded = rebuilt(&head, &path, &authority, &buf[head.len..]);
            let (first, left) = (&forwarded.0, forwarded.1);
            (Send::One { first, left }, b"")
        }
    };
    let proxy = InterceptedProtocol::HttpConnect;
    go_upstream(
        shared,
        client,
        proxy,
        &v,
        &checked,
        port,
        &upstream,
        send,
        Some(reply),
    );
}

/// A CONNECT tunnel to the allowed name `name`: connected upstream and answered `200`, it
/// is then checked like a transparent connection to that name, by the SNI or `Host` in the
/// client's first bytes (`first` holds what came with the request head), so a tunnel is no
/// way around the check of either.
fn tunnel_to_name(
    shared: &Shared,
    mut client: TcpStream,
    v: &Verdict,
    name: &str,
    port: u16,
    first: Vec<u8>,
) {
    let proxy = InterceptedProtocol::HttpConnect;
    let Verdict::Allow { upstream, .. } = v else {
        return;
    };
    let up = match shared.resolver.connect(&shared.allow, upstream, port) {
        Ok(up) => up,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let deny = Verdict::Deny {
                host: name.to_owned(),
                reason: HOST_INTERNAL,
            };
            record(shared, proxy, port, &deny);
            return answer(&mut client, "403 Forbidden", HOST_INTERNAL);
        }
        Err(e) => {
            record(shared, proxy, port, v);
            return answer(&mut client, "502 Bad Gateway", &e.to_string());
        }
    };
    let _ = client.set_nodelay(true);
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    // `dest` matters only without a name.
    let dest = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
    relay_once_told(shared, client, up, proxy, name, dest, port, first);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_fits_the_descriptor_limit() {
        assert_eq!(connection_cap(None), MAX_ACTIVE);
        assert_eq!(connection_cap(Some(1024)), 96);
        assert_eq!(connection_cap(Some(10)), 1);
        assert_eq!(connection_cap(Some(1 << 20)), MAX_ACTIVE);
        let (soft, hard) = raise_nofile();
        assert_eq!(soft, hard, "the soft limit is raised to the hard one");
    }

    /// A connection's deepest work, with half of [`THREAD_STACK`] already taken by a caller
    /// frame: the host resolver (`getaddrinfo` through glibc's NSS), a request head of
    /// [`HEAD_MAX`] with nearly [`sniff`]'s most fields parsed and sniffed, a TLS record
    /// sniffed, a denial formatted. Overflowing the stack kills the test binary.
    #[test]
    fn a_connection_thread_resolves_and_sniffs_on_its_stack() {
        #[inline(never)]
        fn deep_work() -> usize {
            let resolver = Resolver::default();
            let up = Upstream::Name("localhost".into());
            let resolved = resolver.resolve(&[], &up, 80);
            let found = ("localhost", 443).to_socket_addrs().map(Iterator::count);
            let mut head = b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n".to_vec();
            for i in 0..90 {
                head.extend_from_slice(format!("X-Field-{i}: {}\r\n", "v".repeat(150)).as_bytes());
            }
            head.extend_from_slice(b"\r\n");
            assert!(head.len() <= HEAD_MAX, "{}", head.len());
            let parsed = sniff::parse_head(&head).unwrap().unwrap();
            let request = sniff::proxy_request(&parsed);
            let mut tls = vec![0x16, 3, 1, 0x40, 0];
            tls.extend(std::iter::repeat_n(7u8, HEAD_MAX - tls.len()));
            let sniffed = [sniff::sniff(&head), sniff::sniff(&tls)];
            let denial = decide::denial_reason(&"x".repeat(300), 443);
            format!("{resolved:?}{found:?}{request:?}{sniffed:?}{denial}").len()
        }
        #[inline(never)]
        fn with_half_the_stack_taken() -> usize {
            let taken = [1u8; THREAD_STACK / 2];
            let taken = std::hint::black_box(&taken);
            deep_work() + usize::from(taken[THREAD_STACK / 4])
        }
        let done = worker("stack-test")
            .spawn(with_half_the_stack_taken)
            .unwrap()
            .join()
            .unwrap();
        assert!(done > 0);
    }

    #[test]
    fn a_trickled_head_ends_at_its_deadline_not_per_byte() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let slow = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            for _ in 0..4 {
                if c.write_all(b"G").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(700));
            }
        });
        let (mut s, _) = l.accept().unwrap();
        let t = Instant::now();
        let got = read_until(&mut s, Duration::from_secs(1), |_| false);
        let took = t.elapsed();
        assert!(took < Duration::from_millis(1300), "{took:?}");
        assert_eq!(got, b"GG");
        drop(s);
        slow.join().unwrap();
    }
}
