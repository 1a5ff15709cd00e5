//! Network (mode none): host listeners the test starts see nothing from inside.

use crate::harness::{
    ALL_THREE, Attack, BOTH_MUST, Boundary::Network, Ctx, Outcome, Tier::Scoped, Tier::Sealed,
    Verdict::Documented, Verdict::Must, check,
};
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "net.tcp-host-loopback",
        boundary: Network,
        description: "connect to a TCP listener on the host's 127.0.0.1",
        on: ALL_THREE,
        probe: tcp_loopback,
    },
    Attack {
        id: "net.tcp-host-address",
        boundary: Network,
        description: "connect to a host TCP listener on every host address (0.0.0.0 bind)",
        on: BOTH_MUST,
        probe: tcp_host_address,
    },
    Attack {
        id: "net.udp-host",
        boundary: Network,
        description: "send UDP datagrams to a host socket on 127.0.0.1",
        on: ALL_THREE,
        probe: udp,
    },
    Attack {
        id: "net.abstract-unix",
        boundary: Network,
        description: "connect to a host process's abstract unix socket",
        on: BOTH_MUST,
        probe: abstract_unix,
    },
    Attack {
        id: "net.raw-packet-socket",
        boundary: Network,
        description: "open raw IP and AF_PACKET sockets",
        on: BOTH_MUST,
        probe: raw_socket,
    },
    Attack {
        id: "net.interfaces",
        boundary: Network,
        description: "find an interface other than lo; set lo's MTU (to the host's value: success is seen, never a change)",
        on: BOTH_MUST,
        probe: interfaces,
    },
    Attack {
        id: "net.unix-socket-file-in-workdir",
        boundary: Network,
        description: "connect to a host process listening on a socket file inside the workdir",
        on: &[
            (
                Sealed,
                Documented("pathname unix sockets inside visible paths"),
            ),
            (
                Scoped,
                Documented("pathname unix sockets anywhere on the host"),
            ),
        ],
        probe: unix_socket_file,
    },
    Attack {
        id: "net.unix-socket-file-lent",
        boundary: Network,
        description: "connect to a host process's socket file in a directory lent with --mount :read",
        on: &[(
            Sealed,
            Documented("pathname unix sockets inside visible paths"),
        )],
        probe: unix_socket_lent,
    },
    Attack {
        id: "net.unix-socket-file-outside",
        boundary: Network,
        description: "connect to the harness's canary listener on a socket file in a temp dir outside the workdir (as a docker or ssh-agent socket would be); the bundle must not claim the network",
        on: &[
            (Sealed, Must),
            (
                Scoped,
                Documented("pathname unix sockets anywhere on the host"),
            ),
        ],
        probe: unix_socket_outside,
    },
    Attack {
        id: "net.tcp-host-ipv6",
        boundary: Network,
        description: "connect to a host TCP listener on ::1",
        on: BOTH_MUST,
        probe: tcp_ipv6,
    },
    Attack {
        id: "net.visible-socket-files",
        boundary: Network,
        description: "find every socket file visible outside the workdir (system view); connect to the harness's canary listener among them",
        // A listener in a visible system directory is reachable below Landlock ABI 9,
        // like one in the workdir (before the canary, this host had none there to try).
        on: &[
            (
                Sealed,
                Documented("pathname unix sockets inside visible paths"),
            ),
            (
                Scoped,
                Documented("pathname unix sockets anywhere on the host"),
            ),
        ],
        probe: visible_sockets,
    },
];

const CONNECT: &str = r#"
import os, socket
ok = []
for host in os.environ["ADDRS"].split():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect((host, int(os.environ["PORT"])))
        s.sendall(b"escaped")
        ok.append(host)
    except OSError as e:
        print("refused=%s %s" % (host, e))
print("connected=" + ",".join(ok))
"#;

/// Whether a non-blocking TCP listener has a pending connection.
fn accepted(l: &std::net::TcpListener) -> bool {
    match l.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

fn tcp_loopback(ctx: &Ctx) -> Outcome {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    ctx.var("PORT", l.local_addr().unwrap().port().to_string());
    ctx.var("ADDRS", "127.0.0.1 localhost");
    let r = ctx.py(CONNECT);
    ctx.assert_boundary(&r);
    let got = accepted(&l);
    check(
        !got && r.value("connected") == Some(""),
        "the host listener saw no connection",
        format!("connected: {}", r.out),
    )
}

/// The host's own addresses (not loopback), from /proc/net/fib_trie's local entries.
fn host_addresses() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = lines
        .windows(2)
        .filter(|w| w[1].contains("/32 host LOCAL"))
        .filter_map(|w| w[0].trim().strip_prefix("|-- ").map(str::to_owned))
        .filter(|a| !a.starts_with("127."))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn tcp_host_address(ctx: &Ctx) -> Outcome {
    let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let mut addrs = host_addresses();
    addrs.push("127.0.0.1".into());
    ctx.var("PORT", l.local_addr().unwrap().port().to_string());
    ctx.var("ADDRS", addrs.join(" "));
    let r = ctx.py(CONNECT);
    ctx.assert_boundary(&r);
    check(
        !accepted(&l) && r.value("connected") == Some(""),
        format!("no connection to {addrs:?}"),
        format!("connected: {}", r.out),
    )
}

fn udp(ctx: &Ctx) -> Outcome {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_nonblocking(true).unwrap();
    ctx.var("PORT", s.local_addr().unwrap().port().to_string());
    let r = ctx.py(
        "import os, socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor i in range(5):\n    try:\n        s.sendto(b'escaped', ('127.0.0.1', int(os.environ['PORT'])))\n    except OSError:\n        pass",
    );
    ctx.assert_boundary(&r);
    let mut buf = [0u8; 64];
    let got = s.recv_from(&mut buf);
    check(
        matches!(&got, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "no datagram arrived",
        "a datagram reached the host socket",
    )
}

fn abstract_unix(ctx: &Ctx) -> Outcome {
    let name = format!(
        "cofferdam-escape-{}-{}",
        std::process::id(),
        crate::harness::unique()
    );
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let l = UnixListener::bind_addr(&addr).unwrap();
    l.set_nonblocking(true).unwrap();
    ctx.var("NAME", &name);
    let r = ctx.py(
        "import os, socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ntry:\n    s.connect('\\0' + os.environ['NAME'])\n    print('connected=yes')\nexcept OSError as e:\n    print('refused=%s' % e)",
    );
    ctx.assert_boundary(&r);
    let got = match l.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("{e}"),
    };
    check(
        !got && r.value("connected").is_none(),
        r.value("refused").unwrap_or("refused").to_owned(),
        "connected to the host's abstract socket",
    )
}

fn raw_socket(ctx: &Ctx) -> Outcome {
    let r = ctx.py(
        "import socket\nfor name, fam, typ, proto in [('raw', socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), ('packet', socket.AF_PACKET, socket.SOCK_RAW, 0x0300)]:\n    try:\n        socket.socket(fam, typ, proto)\n        print(name + '=opened')\n    except OSError as e:\n        print(name + '_err=%d' % e.errno)",
    );
    ctx.assert_boundary(&r);
    check(
        r.value("raw").is_none() && r.value("packet").is_none(),
        format!(
            "raw errno {}, packet errno {}",
            r.value("raw_err").unwrap_or("?"),
            r.value("packet_err").unwrap_or("?")
        ),
        format!("opened: {}", r.out),
    )
}

fn interfaces(ctx: &Ctx) -> Outcome {
    // An RTM_NEWLINK that needs CAP_NET_ADMIN in the network namespace's owner and sets
    // what is already there: on a tier without a network namespace one that gets through
    // changes nothing on the host (never a route, which would).
    let mtu = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap();
    ctx.var("LO_MTU", mtu.trim());
    let r = ctx.sh("echo ifs=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,); ip link set dev lo mtu $LO_MTU 2>/dev/null && echo link=set; true");
    ctx.assert_boundary(&r);
    if ctx.tier() != Sealed {
        // No network namespace: the host's interfaces are listed (the scope report's
        // "network: no network namespace"); changing them needs a capability it lacks.
        return check(
            r.value("link").is_none(),
            format!(
                "lo unchanged (the MTU set refused); the host's interfaces are visible (no network namespace): {}",
                r.value("ifs").unwrap_or("?")
            ),
            "set lo's MTU on the host",
        );
    }
    let netns = crate::harness::controls_of(&r.bundle, "netns");
    assert_eq!(netns[0]["details"]["interfaces"], serde_json::json!(["lo"]));
    assert_eq!(netns[0]["details"]["mode"], "none");
    check(
        r.value("ifs") == Some("lo,") && r.value("link").is_none(),
        "only lo inside; the bundle records interfaces [lo], mode none",
        format!("inside: {}", r.out),
    )
}

/// Connect to the unix socket at `$SOCK` and send a line: `connected=yes` or `refused=…`.
const UNIX_CONNECT: &str = "import os, socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ntry:\n    s.connect(os.environ['SOCK'])\n    s.sendall(b'hello')\n    print('connected=yes')\nexcept OSError as e:\n    print('refused=%s' % e)";

/// Whether the (non-blocking) listener has a connection waiting.
fn unix_accepted(l: &UnixListener) -> bool {
    match l.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("{e}"),
    }
}

fn unix_socket_file(ctx: &Ctx) -> Outcome {
    let path = ctx.work().join("agent.sock");
    let l = UnixListener::bind(&path).unwrap();
    l.set_nonblocking(true).unwrap();
    ctx.var("SOCK", "agent.sock");
    let r = ctx.py(UNIX_CONNECT);
    ctx.assert_boundary(&r);
    let got = unix_accepted(&l);
    let abi = crate::common::landlock_abi_independently();
    check(
        !got,
        format!("refused ({})", r.value("refused").unwrap_or("?")),
        format!("the host listener accepted a connection from inside (Landlock ABI {abi})"),
    )
}

/// A host listener outside the workdir, never lent: the sealed tier's root does not show it;
/// the scoped tier below Landlock ABI 9 cannot stop the connect, so its bundle must say so
/// (network not claimed, the `unix_connect` row naming the cause and the fix).
fn unix_socket_outside(ctx: &Ctx) -> Outcome {
    let dir = ctx.outside();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("agent.sock");
    let l = UnixListener::bind(&path).unwrap();
    l.set_nonblocking(true).unwrap();
    ctx.var("SOCK", path.display().to_string());
    let r = ctx.py(UNIX_CONNECT);
    ctx.assert_boundary(&r);
    let got = unix_accepted(&l);
    let abi = crate::common::landlock_abi_independently();
    if got || r.value("connected").is_some() {
        // Reached: the record must not claim the network, and must say why and what fixes it.
        assert_eq!(
            r.safety("network_non_bypassable"),
            false,
            "{}",
            r.bundle["safety"]
        );
        let row = r
            .control_with("landlock", "control", "unix_connect")
            .unwrap_or_else(|| panic!("no unix_connect row: {}", r.bundle));
        let reason = row["reason"].as_str().unwrap_or("");
        assert!(
            row["status"] != "enforced" && reason.contains("ABI 9") && reason.contains("sealed"),
            "the unix_connect row: {row}"
        );
    }
    check(
        !got,
        format!("refused ({})", r.value("refused").unwrap_or("?")),
        format!(
            "the host listener outside the workdir accepted a connection from inside (Landlock \
             ABI {abi}); the bundle says network_non_bypassable false"
        ),
    )
}

fn unix_socket_lent(ctx: &Ctx) -> Outcome {
    let path = ctx.outside().join("agent.sock");
    let l = UnixListener::bind(&path).unwrap();
    l.set_nonblocking(true).unwrap();
    let lend = format!("{}:/lent:read", ctx.outside().display());
    let r = ctx.run(
        &["--mount", &lend],
        &[
            "/usr/bin/python3",
            "-c",
            "import socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ntry:\n    s.connect('/lent/agent.sock')\n    s.sendall(b'hello')\n    print('connected=yes')\nexcept OSError as e:\n    print('refused=%s' % e)",
        ],
    );
    assert_eq!(r.control("seccomp"), vec!["enforced"]);
    let got = match l.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("{e}"),
    };
    check(
        !got,
        format!("refused ({})", r.value("refused").unwrap_or("?")),
        "a host listener on a lent path accepted a connection from inside",
    )
}

fn tcp_ipv6(ctx: &Ctx) -> Outcome {
    let Ok(l) = std::net::TcpListener::bind("[::1]:0") else {
        return Outcome::Skipped("no IPv6 loopback on this host".into());
    };
    l.set_nonblocking(true).unwrap();
    ctx.var("PORT", l.local_addr().unwrap().port().to_string());
    let r = ctx.py(
        "import os, socket\ns = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\ns.settimeout(2)\ntry:\n    s.connect(('::1', int(os.environ['PORT'])))\n    print('connected=yes')\nexcept OSError as e:\n    print('refused=%s' % e)",
    );
    ctx.assert_boundary(&r);
    check(
        !accepted(&l) && r.value("connected").is_none(),
        r.value("refused").unwrap_or("refused").to_owned(),
        "connected to the host over ::1",
    )
}

/// The sweep only looks at the host's sockets (lstat): connecting to every one, as root on
/// a tier whose boundary is gone, would knock on every daemon of the host. What it
/// connects to is the harness's listener, in the canary directory under `/usr/lib` (as
/// root; the caller's temp dir otherwise), found by the same sweep.
fn visible_sockets(ctx: &Ctx) -> Outcome {
    let c = ctx.canaries();
    let l = UnixListener::bind(c.usr.join("sock")).unwrap();
    l.set_nonblocking(true).unwrap();
    let r = ctx.py(
        r#"
import os, socket, stat
canary = os.environ["USR_CANARY"] + "/"
found, connected = [], []
for top in ["/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib64", "/dev", "/tmp", "/proc/self/root"]:
    for root, dirs, files in os.walk(top):
        if root.startswith("/proc/self/root/proc"):
            dirs[:] = []
            continue
        for f in files:
            p = os.path.join(root, f)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    found.append(p)
                    if not p.startswith(canary):
                        continue
                    print("seen=cofferdam")
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(1)
                    s.connect(p)
                    connected.append(p)
            except OSError:
                pass
print("found=%d" % len(found))
print("connected=" + " ".join(connected))
"#,
    );
    ctx.assert_boundary(&r);
    c.assert_seen(&r);
    let reached = match l.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    };
    let refused = r.value("connected") == Some("") && !reached;
    // The documented line covers visible paths only: the caller's temp-dir canary is not
    // one (private /tmp on the sealed tier, not granted on the scoped), so reaching it
    // fails whatever the verdict.
    assert!(
        c.system || refused,
        "connected to the canary listener in a temp dir, outside every visible path: {}",
        r.out
    );
    check(
        refused,
        format!(
            "{} socket files visible; the canary listener is not connectable ({})",
            r.value("found").unwrap_or("?"),
            c.kind()
        ),
        format!(
            "connected to the canary listener: {}",
            r.value("connected").unwrap_or("?")
        ),
    )
}
