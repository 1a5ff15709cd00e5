//! Network modes against the real CLI, on loopback only: test servers on 127.0.0.1 started
//! here, clients inside the sandbox (python3 sockets as the plain client, curl as the
//! proxy-aware one). Each test attempts the forbidden connection and asserts the refusal, that
//! the server never saw it, and what the bundle and the trace say.

use crate::common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Whether this host runs sealed network tests (also `publish`'s).
pub(crate) fn sealed_host() -> bool {
    require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0)
        && require(
            "curl",
            std::process::Command::new("curl")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
        )
}

/// A one-response HTTP server on 127.0.0.1 answering `body`, counting the requests it got.
struct Server {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn server(body: &'static str) -> Server {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let h = h.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                h.fetch_add(1, Ordering::SeqCst);
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Server { port, hits }
}

/// A server that speaks first (as SSH and SMTP do): a banner, then one line back.
fn banner_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let _ = c.write_all(b"HELLO\r\n");
                let mut line = [0u8; 64];
                if let Ok(n) = c.read(&mut line) {
                    let _ = c.write_all(&line[..n]);
                }
            });
        }
    });
    port
}

fn run_script(s: &Sandbox, args: &[&str], env: &[(&str, &str)], script: &str) -> (String, Value) {
    let mut cmd = s.cmd();
    cmd.arg("run").arg("-q").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.args(["--", "sh", "-c", script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{out:?}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    (stdout, b)
}

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {out}"))
}

fn destination<'a>(b: &'a Value, host: &str, port: u16) -> &'a Value {
    b["network"]["intercepted"]["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["host"] == host && d["port"] == port)
        .unwrap_or_else(|| panic!("no {host}:{port} in {}", b["network"]))
}

/// A plain TCP client (no proxy): prints the body, or the error's name.
const PLAIN: &str = r#"python3 - "$@" <<'PY'
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: " + sys.argv[3].encode() + b"\r\n\r\n")
    data = b""
    while True:
        c = s.recv(4096)
        if not c: break
        data += c
    print(data.split(b"\r\n\r\n", 1)[-1].decode() or "EMPTY")
except OSError as e:
    print(type(e).__name__)
PY"#;

/// A server inside the sandbox on a port nothing allows, and a client of it: prints `in`.
const INNER: &str = r#"printf 'inner='; python3 -c '
import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname(), timeout=5)
a, _ = l.accept(); a.sendall(b"in"); print(c.recv(2).decode())
'
"#;

fn plain(key: &str, host: &str, port: u16, header_host: &str) -> String {
    format!(
        "printf '{key}='; sh -c '{}' x {host} {port} {header_host}\n",
        PLAIN.replace('\'', "'\\''")
    )
}

#[test]
fn allow_reaches_the_allowed_port_by_every_client_and_refuses_the_other_at_once() {
    if !sealed_host() {
        return;
    }
    let (p1, p2) = (server("P1"), server("P2"));
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let uport = udp.local_addr().unwrap().port();
    let s = Sandbox::new();
    let allow = format!("127.0.0.1:{}", p1.port);
    // UDP other than DNS, ICMP and raw sockets get nothing.
    let other = format!(
        r#"printf 'other='; python3 -c '
import socket
out = []
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"x", ("127.0.0.1", {uport}))
for kind, proto in (("icmp", (socket.SOCK_DGRAM, socket.IPPROTO_ICMP)), ("raw", (socket.SOCK_RAW, socket.IPPROTO_ICMP))):
    try:
        socket.socket(socket.AF_INET, *proto); out.append(kind + ":open")
    except OSError as e:
        out.append(kind + ":" + type(e).__name__)
print(" ".join(out))
'
"#
    );
    let script = format!(
        "{}{}{}\
         printf 'proxy1='; curl -sS -p -x \"$HTTPS_PROXY\" --noproxy '' http://127.0.0.1:{a}/ 2>/dev/null; echo \" rc=$?\"\n\
         printf 'proxy2='; curl -sS -p -x \"$HTTPS_PROXY\" --noproxy '' http://127.0.0.1:{b}/ 2>/dev/null; echo \" rc=$?\"\n\
         printf 'env='; echo \"$HTTPS_PROXY $http_proxy\"\n{other}{INNER}",
        plain("plain1", "127.0.0.1", p1.port, "x"),
        plain("plain2", "127.0.0.1", p2.port, "x"),
        plain("plain3", "::1", p2.port, "x"),
        a = p1.port,
        b = p2.port,
    );
    let (out, b) = run_script(&s, &["--allow-net", &allow], &[], &script);
    assert_eq!(line(&out, "plain1"), "P1", "{out}");
    // Refused at once: told why by the driver (the catch-all answers a plain HTTP request
    // with a 403), or refused by the kernel without the catch-all.
    let told = |host: &str| {
        format!(
            "cofferdam: {host}:{p} is not in the allowlist; allow it with --allow-net {host}:{p}",
            p = p2.port
        )
    };
    let refused = |got: &str, told: &str| got == told || got == "ConnectionRefusedError";
    assert!(refused(line(&out, "plain2"), &told("127.0.0.1")), "{out}");
    assert!(refused(line(&out, "plain3"), &told("[::1]")), "{out}");
    // A server the command runs itself, on a port not allowed, is still its own.
    assert_eq!(line(&out, "inner"), "in", "{out}");
    assert_eq!(line(&out, "proxy1"), "P1 rc=0", "{out}");
    // curl's "CONNECT tunnel failed" (56): the proxy answered 403.
    assert_eq!(line(&out, "proxy2"), " rc=56", "{out}");
    assert_eq!(
        line(&out, "env"),
        "http://127.0.0.1:3128 http://127.0.0.1:3128"
    );
    assert_eq!(
        line(&out, "other"),
        "icmp:PermissionError raw:PermissionError",
        "{out}"
    );
    let mut buf = [0u8; 8];
    assert!(
        udp.recv(&mut buf).is_err(),
        "a UDP datagram reached the host"
    );
    assert_eq!(p2.hits.load(Ordering::SeqCst), 0, "P2 was reached");
    assert_eq!(p1.hits.load(Ordering::SeqCst), 2);

    assert_eq!(b["network"]["policy"]["mode"], "allow");
    assert_eq!(b["network"]["policy"]["allow"][0], allow);
    assert_eq!(b["network"]["interception"]["driver"], "cofferdam-net");
    assert_eq!(
        b["network"]["interception"]["covers"],
        serde_json::json!(["dns", "tcp", "http_connect"])
    );
    let controls = b["executor_observations"]["controls"].as_array().unwrap();
    let netns = controls.iter().find(|c| c["mechanism"] == "netns").unwrap();
    // The catch-all diverts the plain attempt on P2 to the driver, which names it; without
    // it the sandbox's kernel refuses it unseen (counted in aggregate only).
    let caught = netns["details"]["catch_all"] == true;
    require("nf_tables socket+tproxy in the sandbox's namespace", caught);
    // The IPv6 catch-all (on ::1, the only IPv6 destination there is) when the host has IPv6.
    let v6 = netns["details"]["catch_all_listen"]
        .as_array()
        .is_some_and(|a| a.len() == 2);
    let n = &b["network"]["intercepted"];
    assert_eq!(
        (n["allowed"].as_u64(), n["denied"].as_u64()),
        (Some(2), Some(1 + u64::from(caught) + u64::from(v6))),
        "{n}"
    );
    assert!(n["bytes_received"].as_u64().unwrap() > 0, "{n}");
    let d1 = destination(&b, "127.0.0.1", p1.port);
    assert_eq!(
        (d1["allowed"].as_u64(), d1["denied"].as_u64()),
        (Some(2), Some(0))
    );
    let d2 = destination(&b, "127.0.0.1", p2.port);
    assert_eq!(
        (d2["allowed"].as_u64(), d2["denied"].as_u64()),
        (Some(0), Some(if caught { 2 } else { 1 }))
    );
    if !caught {
        assert!(n["tcp_refused_unlistened"].as_u64().unwrap() >= 1, "{n}");
    }
    assert!(n["tcp_refused_unlistened"].as_u64().is_some(), "{n}");
    assert!(n["udp_unlistened"].as_u64().unwrap() >= 1, "{n}");

    let ds = network_decisions(&b);
    let has = |proto: &str, port: u16, verdict: &str| {
        ds.iter().any(|d| {
            d["protocol"] == proto
                && d["host"] == "127.0.0.1"
                && d["port"] == port
                && d["decision"] == verdict
        })
    };
    assert!(has("tcp", p1.port, "allowed"), "{ds:?}");
    assert!(has("http_connect", p1.port, "allowed"), "{ds:?}");
    assert!(has("http_connect", p2.port, "denied"), "{ds:?}");
    let caught_at = |host: &str| {
        ds.iter().any(|d| {
            d["protocol"] == "tcp"
                && d["host"] == host
                && d["port"] == p2.port
                && d["decision"] == "denied"
                && d["reason"] == "the port is not allowed"
        })
    };
    if caught {
        assert!(caught_at("127.0.0.1"), "{ds:?}");
    }
    if v6 {
        assert!(caught_at("::1"), "{ds:?}");
        assert_eq!(destination(&b, "::1", p2.port)["denied"], 1);
    }

    assert_eq!(b["safety"]["network_non_bypassable"], true);
    assert_eq!(netns["status"], "enforced");
    assert_eq!(netns["details"]["mode"], "allow");
    assert_eq!(netns["details"]["resolv_conf_local"], true);
    let proxy = controls
        .iter()
        .find(|c| c["mechanism"] == "egress_proxy")
        .unwrap();
    assert_eq!(proxy["status"], "enforced");

    let review = s
        .cmd()
        .args(["status", "--review", "last"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&review.stdout);
    assert!(
        text.contains(&format!("127.0.0.1:{}", p2.port)) && text.contains("denied"),
        "{text}"
    );
}

#[test]
fn a_name_rule_is_checked_by_dns_sni_and_host() {
    if !sealed_host() {
        return;
    }
    let p1 = server("P1");
    let s = Sandbox::new();
    let port = p1.port;
    let tls = format!(
        r#"printf 'sni='; python3 -c '
import socket, ssl
c = ssl.create_default_context()
try:
    s = socket.create_connection(("svc.test", {port}), timeout=5)
    c.wrap_socket(s, server_hostname="other.test")
    print("HANDSHAKE")
except OSError as e:
    print(type(e).__name__)
'
"#
    );
    let bport = banner_server();
    let banner = format!(
        r#"printf 'banner='; python3 -c '
import socket
s = socket.create_connection(("svc.test", {bport}), timeout=5)
hello = s.recv(64)
s.sendall(b"ME\r\n")
print((hello + s.recv(64)).decode().replace("\r\n", " ").strip())
'
"#
    );
    // A client that tells its name only after the sniffing window: still checked.
    let slow = format!(
        r#"printf 'slow='; python3 -c '
import socket, time
s = socket.create_connection(("svc.test", {port}), timeout=5)
time.sleep(0.6)
s.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
try:
    print(s.recv(100).split(b"\r\n")[0].decode() or "EOF")
except OSError as e:
    print(type(e).__name__)
'
"#
    );
    let script = format!(
        "printf 'proxy='; curl -sS http://svc.test:{port}/ 2>/dev/null; echo\n\
         printf 'direct='; curl -sS --noproxy '*' http://svc.test:{port}/ 2>/dev/null; echo\n\
         printf 'other='; curl -sS --noproxy '*' http://other.test:{port}/ 2>/dev/null; echo \"rc=$?\"\n\
         printf 'resolve='; python3 -c 'import socket\ntry:\n  socket.getaddrinfo(\"other.test\", 80); print(\"RESOLVED\")\nexcept socket.gaierror: print(\"gaierror\")'\n\
         {}{tls}{slow}{banner}",
        plain("fronted", "svc.test", port, "other.test"),
    );
    let (out, b) = run_script(
        &s,
        &[
            "--allow-net",
            &format!("svc.test:{port}"),
            "--allow-net",
            &format!("svc.test:{bport}"),
        ],
        &[("COFFERDAM_TEST_RESOLVE", "svc.test=127.0.0.1")],
        &script,
    );
    assert_eq!(line(&out, "proxy"), "P1", "{out}");
    assert_eq!(line(&out, "direct"), "P1", "{out}");
    // curl's "could not resolve host" (6).
    assert_eq!(line(&out, "other"), "rc=6", "{out}");
    assert_eq!(line(&out, "resolve"), "gaierror", "{out}");
    // A plain HTTP request for another name is told why; TLS is reset.
    assert_eq!(
        line(&out, "fronted"),
        format!(
            "cofferdam: other.test:{port} is not in the allowlist; allow it with --allow-net other.test:{port}"
        ),
        "{out}"
    );
    assert_ne!(line(&out, "sni"), "HANDSHAKE", "{out}");
    assert_eq!(line(&out, "slow"), "HTTP/1.1 403 Forbidden", "{out}");
    assert_eq!(line(&out, "banner"), "HELLO ME", "{out}");
    assert_eq!(
        p1.hits.load(Ordering::SeqCst),
        2,
        "only the two allowed requests"
    );

    let n = &b["network"]["intercepted"];
    assert!(n["dns"]["answered"].as_u64().unwrap() >= 1, "{n}");
    assert!(n["dns"]["refused"].as_u64().unwrap() >= 1, "{n}");
    assert_eq!(destination(&b, "svc.test", port)["allowed"], 2);
    assert_eq!(destination(&b, "other.test", port)["denied"], 3, "{n}");
    let refused = b["network"]["intercepted"]["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["host"] == "other.test" && d.get("port").is_none())
        .unwrap_or_else(|| panic!("no refused name in {n}"));
    assert!(refused["denied"].as_u64().unwrap() >= 1);
    let ds = network_decisions(&b);
    assert!(
        ds.iter().any(|d| d["protocol"] == "dns"
            && d["host"] == "other.test"
            && d["decision"] == "denied"),
        "{ds:?}"
    );
    assert!(
        ds.iter().any(|d| d["protocol"] == "tcp"
            && d["host"] == "svc.test"
            && d["rule"] == format!("svc.test:{port}")),
        "{ds:?}"
    );
    assert!(
        b["run"]["warnings"]
            .to_string()
            .contains("COFFERDAM_TEST_RESOLVE"),
        "{}",
        b["run"]["warnings"]
    );
}

#[test]
fn none_reaches_nothing_of_the_host() {
    if !sealed_host() {
        return;
    }
    let p1 = server("P1");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let uport = udp.local_addr().unwrap().port();
    let name = format!("cofferdam-net-test-{}", std::process::id());
    let abs = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    abs.set_nonblocking(true).unwrap();
    let s = Sandbox::new();
    let script = format!(
        "{}printf 'dns='; python3 -c 'import socket\ntry:\n  socket.getaddrinfo(\"localhost.localdomain.invalid\", 80); print(\"RESOLVED\")\nexcept socket.gaierror: print(\"gaierror\")'\n\
         printf 'udp='; python3 -c 'import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry:\n  s.sendto(b\"x\", (\"127.0.0.1\", {uport})); print(\"SENT\")\nexcept OSError as e: print(type(e).__name__)'\n\
         printf 'abstract='; python3 -c 'import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n  s.connect(\"\\0{name}\"); print(\"CONNECTED\")\nexcept OSError as e: print(type(e).__name__)'\n",
        plain("tcp", "127.0.0.1", p1.port, "x"),
    );
    let (out, b) = run_script(&s, &[], &[], &script);
    assert_eq!(line(&out, "tcp"), "ConnectionRefusedError", "{out}");
    assert_eq!(line(&out, "dns"), "gaierror", "{out}");
    assert_eq!(line(&out, "abstract"), "ConnectionRefusedError", "{out}");
    assert_eq!(p1.hits.load(Ordering::SeqCst), 0);
    let mut buf = [0u8; 8];
    assert!(
        udp.recv(&mut buf).is_err(),
        "the host's UDP server got a datagram"
    );
    assert!(
        abs.accept().is_err(),
        "the host's abstract socket got a connection"
    );
    assert_eq!(b["network"]["policy"]["mode"], "none");
    assert!(
        b["network"].get("interception").is_none(),
        "{}",
        b["network"]
    );
    assert!(
        !b["executor_observations"]["controls"]
            .to_string()
            .contains("egress_proxy")
    );
    assert_eq!(b["safety"]["network_non_bypassable"], true);
}

#[test]
fn host_is_recorded_as_bypassable() {
    if !sealed_host() {
        return;
    }
    let p1 = server("P1");
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--network", "host", "--", "curl", "-sS"])
        .arg(format!("http://127.0.0.1:{}/", p1.port))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "P1");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("network mode host"),
        "{out:?}"
    );
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    assert_eq!(b["network"]["policy"]["mode"], "host");
    assert_eq!(b["safety"]["network_non_bypassable"], false);
    assert!(
        b["safety"]["warnings"]
            .to_string()
            .contains("network mode host"),
        "{}",
        b["safety"]
    );
    let scope = s
        .cmd()
        .args(["scope", "--network", "host"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&scope.stdout).contains("network mode host"),
        "{scope:?}"
    );
}

/// `cofferdam ARGS` with the host's `/etc/hosts` replaced (in a mount namespace of its own)
/// by one naming `internal.test` 127.0.0.1: the supervisor's real resolver, no test override.
fn with_hosts_file(s: &Sandbox, args: &[&str]) -> std::process::Output {
    let hosts = s.home.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.1 internal.test\n").unwrap();
    std::process::Command::new("unshare")
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(["-U", "-r", "-m", "sh", "-c"])
        .arg("mount --bind \"$1\" /etc/hosts && shift && exec \"$@\"")
        .arg("sh")
        .arg(&hosts)
        .arg(assert_cmd::cargo::cargo_bin("cofferdam"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn an_allowed_name_never_leads_to_the_hosts_loopback_unless_an_address_entry_says_so() {
    if !sealed_host() {
        return;
    }
    let can = std::process::Command::new("unshare")
        .args(["-U", "-r", "-m", "true"])
        .status()
        .is_ok_and(|st| st.success());
    if !require("unshare -U -r -m (a private /etc/hosts)", can) {
        return;
    }
    let p1 = server("internal-secret");
    let s = Sandbox::new();
    let rule = format!("internal.test:{}", p1.port);
    // Through the proxy, so the name is resolved by the supervisor (inside the sandbox the
    // host's /etc/hosts would answer first and the address be judged as an address).
    let client = format!(
        "curl -s -m 5 -p -x \"$HTTPS_PROXY\" -o /dev/null -w 'code=%{{http_code}}\\n' http://internal.test:{}/ ; echo rc=$?",
        p1.port
    );
    // The name resolves (on the host) to 127.0.0.1 only: refused, recorded with the reason.
    let out = with_hosts_file(
        &s,
        &["run", "-q", "--allow-net", &rule, "--", "sh", "-c", &client],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    assert_ne!(line(&stdout, "rc"), "0", "{stdout}");
    assert_eq!(
        p1.hits.load(Ordering::SeqCst),
        0,
        "the host's server was reached"
    );
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let denied: Vec<Value> = network_decisions(&b)
        .into_iter()
        .filter(|d| d["decision"] == "denied" && d["host"] == "internal.test")
        .collect();
    assert!(
        denied.iter().any(|d| d["reason"]
            .as_str()
            .unwrap_or("")
            .contains("private networks")),
        "{:?}",
        network_decisions(&b)
    );
    // An address entry for the same port says the host's loopback is meant: allowed.
    let addr_rule = format!("127.0.0.1:{}", p1.port);
    let out = with_hosts_file(
        &s,
        &[
            "run",
            "-q",
            "--allow-net",
            &rule,
            "--allow-net",
            &addr_rule,
            "--",
            "sh",
            "-c",
            &client,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(line(&stdout, "code"), "200", "{out:?}");
    assert_eq!(p1.hits.load(Ordering::SeqCst), 1);
}

#[test]
fn a_denied_destination_is_told_why_and_a_denied_name_is_refused_at_once() {
    if !sealed_host() {
        return;
    }
    let up = server("UP");
    let s = Sandbox::new();
    let port = up.port;
    let reason =
        "cofferdam: denied.test is not in the allowlist; allow it with --allow-net denied.test";
    // Through the proxy (curl takes it from the environment): a forwarded request and a
    // CONNECT, each answered 403 with the reason; the CONNECT's is in its Proxy-Status.
    // Then a plain HTTP request on the transparent path naming the denied host, and the
    // resolver's answer for the denied name, timed.
    let script = format!(
        "printf 'allowed='; curl -sS http://allowed.test:{port}/; echo\n\
         printf 'forward='; curl -sS -w 'fcode=%{{http_code}}' http://denied.test/; echo\n\
         printf 'connect='; curl -sS -v -o /dev/null -w 'code=%{{http_connect}}' https://denied.test/ 2>connect.err; echo \" rc=$?\"\n\
         printf 'status='; grep -i '^< proxy-status:' connect.err | tr -d '\\r'; rm -f connect.err\n\
         printf 'transparent='; curl -sS --noproxy '*' -H 'Host: denied.test' -w 'tcode=%{{http_code}}' http://allowed.test:{port}/; echo\n\
         printf 'getent='; getent hosts denied.test; echo \"rc=$?\"\n\
         printf 'gai='; python3 -c 'import socket, time\nt = time.monotonic()\ntry:\n  socket.getaddrinfo(\"denied.test\", 443); print(\"RESOLVED\")\nexcept socket.gaierror as e:\n  print(\"EAI_AGAIN\" if e.errno == socket.EAI_AGAIN else e.errno, \"fast\" if time.monotonic() - t < 2 else \"slow\")\n'\n"
    );
    let (out, b) = run_script(
        &s,
        &[
            "--network",
            "allow",
            "--allow-net",
            &format!("allowed.test:{port}"),
        ],
        &[("COFFERDAM_TEST_RESOLVE", "allowed.test=127.0.0.1")],
        &script,
    );
    assert_eq!(line(&out, "allowed"), "UP", "{out}");
    assert_eq!(line(&out, "forward"), reason, "{out}");
    assert_eq!(line(&out, "fcode"), "403", "{out}");
    // curl's "CONNECT tunnel failed" (56), the reason in the header it shows.
    assert_eq!(line(&out, "connect"), "code=403 rc=56", "{out}");
    assert_eq!(
        line(&out, "status"),
        format!("< Proxy-Status: cofferdam; error=http_request_denied; details=\"{reason}\""),
        "{out}"
    );
    assert_eq!(
        line(&out, "transparent"),
        format!(
            "cofferdam: denied.test:{port} is not in the allowlist; allow it with --allow-net denied.test:{port}"
        ),
        "{out}"
    );
    assert_eq!(line(&out, "tcode"), "403", "{out}");
    // getent's "not found" (2), not a hang; getaddrinfo's "try again" (REFUSED), at once.
    assert_eq!(line(&out, "getent"), "rc=2", "{out}");
    assert_eq!(line(&out, "gai"), "EAI_AGAIN fast", "{out}");
    assert_eq!(
        up.hits.load(Ordering::SeqCst),
        1,
        "only the allowed request"
    );

    let ds = network_decisions(&b);
    let denied = |proto: &str| {
        ds.iter().any(|d| {
            d["protocol"] == proto && d["host"] == "denied.test" && d["decision"] == "denied"
        })
    };
    assert!(denied("http_connect"), "{ds:?}");
    assert!(denied("tcp"), "{ds:?}");
    assert!(denied("dns"), "{ds:?}");
    assert!(
        b["network"]["intercepted"]["dns"]["refused"]
            .as_u64()
            .unwrap()
            >= 1,
        "{}",
        b["network"]
    );
    // run_observation.network (issue 21): the same decisions, totals and by rule; the
    // filesystem dimension is the file watch's as root (`file_watch.rs`), and absent rather
    // than zeros as a user.
    let o = &b["run_observation"]["network"];
    let n = &b["network"]["intercepted"];
    let num = |v: &Value| v.as_u64().unwrap();
    assert_eq!(
        num(&o["allowed"]),
        num(&n["allowed"]) + num(&n["dns"]["answered"]),
        "{o}"
    );
    assert_eq!(
        num(&o["denied"]),
        num(&n["denied"]) + num(&n["dns"]["refused"]),
        "{o}"
    );
    let files = b["run_observation"].get("filesystem");
    if rustix::process::geteuid().is_root() {
        assert_eq!(
            files.unwrap()["denied"],
            Value::Null,
            "{}",
            b["run_observation"]
        );
    } else {
        assert!(files.is_none(), "{}", b["run_observation"]);
    }
    let rule = |name: &str| {
        o["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rule"] == name)
            .unwrap_or_else(|| panic!("no rule {name} in {o}"))
            .clone()
    };
    assert!(
        num(&rule(&format!("allowed.test:{port}"))["allowed"]) >= 1,
        "{o}"
    );
    assert!(num(&rule("default")["denied"]) >= 3, "{o}");
    let denials = o["denials"].as_array().unwrap();
    let listed = |target: &str, access: &str| {
        denials.iter().any(|d| {
            d["target"] == target && d["access"] == access && d["mechanism"] == "egress_proxy"
        })
    };
    assert!(listed("denied.test", "resolve"), "{o}");
    assert!(listed(&format!("denied.test:{port}"), "connect"), "{o}");
}

/// A record the trace cannot take is a warning in the bundle and on stderr, never dropped:
/// the supervisor runs under a file-size limit (soft, so the sandbox's own rlimits still
/// install) that the bundle fits and the trace outgrows: every denied name is one traced
/// decision (up to 10 000), while the bundle lists at most 4096 destinations (about 1.1 MB
/// here against the trace's 1.7 MB). The failed write leaves no torn line; the events
/// written before it stay.
#[test]
fn a_trace_write_that_fails_is_a_bundle_warning_not_a_silent_loss() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let script = "import socket\n\
                  for i in range(6000):\n    \
                      try: socket.getaddrinfo('d%d-' % i + 'x' * 50 + '.' + 'y' * 50 + '.test', 443)\n    \
                      except OSError: pass\n";
    let out = std::process::Command::new("bash")
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args([
            "-c",
            "trap '' XFSZ; ulimit -S -f 1400 && exec \"$0\" \"$@\"",
        ])
        .arg(assert_cmd::cargo::cargo_bin("cofferdam"))
        .args([
            "run",
            "-q",
            "--network",
            "allow",
            "--",
            "python3",
            "-c",
            script,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lost = "the job's trace could not record the network driver's decisions";
    assert!(
        err.contains(&format!("cofferdam: warning: {lost}")),
        "{err}"
    );
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let warnings = b["run"]["warnings"].to_string();
    assert!(warnings.contains(lost), "{warnings}");
    assert!(
        warnings.contains("File too large"),
        "the cause is told: {warnings}"
    );
    // Nothing of the lost write is in the trace, and every line left is whole.
    assert!(network_decisions(&b).is_empty());
    let trace = std::fs::read_to_string(b["run"]["event_stream_ref"].as_str().unwrap()).unwrap();
    assert!(
        trace.ends_with('\n') && trace.lines().count() > 2,
        "{trace}"
    );
}
