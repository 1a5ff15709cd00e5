//! Network (mode allow): the supervisor's listeners against the workload. Malformed DNS and
//! request heads, descriptor exhaustion, a `Host` other than the proxy target, pipelined
//! requests. The upstreams are HTTP servers this test starts on the host's 127.0.0.1 and
//! allows by address (or by a test name resolved to 127.0.0.1); every attack asserts what
//! the upstream saw and what the bundle counted. Allow mode needs the sandbox's network
//! namespace: the copy tiers refuse `--allow-net` before anything runs
//! (`tests/cli/tiers.rs`), so these run on the sealed tier.

use crate::harness::{Attack, Boundary::Network, Ctx, Outcome, Run, SEALED_MUST, check};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "net.dns-malformed-datagrams",
        boundary: Network,
        description: "end the DNS listener with an empty datagram (and other non-queries)",
        on: SEALED_MUST,
        probe: dns_malformed,
    },
    Attack {
        id: "net.descriptor-exhaustion",
        boundary: Network,
        description: "hold 600 proxy tunnels open to exhaust the supervisor's descriptors",
        on: SEALED_MUST,
        probe: descriptor_exhaustion,
    },
    Attack {
        id: "net.proxy-host-mismatch",
        boundary: Network,
        description: "forward-proxy an allowed URI with a Host naming another virtual host",
        on: SEALED_MUST,
        probe: host_mismatch,
    },
    Attack {
        id: "net.proxy-lax-heads",
        boundary: Network,
        description: "smuggle a Host past the check: duplicate Host, space before colon, bare LF/CR",
        on: SEALED_MUST,
        probe: lax_heads,
    },
    Attack {
        id: "net.proxy-tunnel-host",
        boundary: Network,
        description: "CONNECT to an allowed name, then send another Host (or SNI) through the tunnel",
        on: SEALED_MUST,
        probe: tunnel_host,
    },
    Attack {
        id: "net.proxy-pipelined",
        boundary: Network,
        description: "pipeline a second request to another Host after a checked one",
        on: SEALED_MUST,
        probe: pipelined,
    },
];

/// An HTTP/1 origin on 127.0.0.1 that keeps connections open unless a request says
/// `Connection: close`, and records `<Host> <target>` of every request it reads.
struct Origin {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    /// Start it; its port is `$WEB` inside.
    fn start(ctx: &Ctx) -> Origin {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let port = listen(move |c| serve_origin(c, &s));
        ctx.var("WEB", port.to_string());
        Origin { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_origin(mut c: TcpStream, seen: &Mutex<Vec<String>>) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match c.read(&mut chunk) {
                Ok(n) if n > 0 && buf.len() < 1 << 16 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let field = |name: &str| {
            head.lines()
                .filter_map(|l| l.split_once(':'))
                .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
                .collect::<Vec<_>>()
                .join(",")
        };
        let target = head.split(' ').nth(1).unwrap_or("").to_owned();
        seen.lock()
            .unwrap()
            .push(format!("{} {target}", field("host")));
        let close = field("connection").eq_ignore_ascii_case("close");
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{}\r\nok",
            if close { "Connection: close\r\n" } else { "" }
        );
        if c.write_all(reply.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// A listener on 127.0.0.1 serving each connection with `serve` on a thread of its own;
/// its port.
fn listen(serve: impl Fn(TcpStream) + Clone + Send + 'static) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        while let Ok((c, _)) = l.accept() {
            let serve = serve.clone();
            std::thread::spawn(move || serve(c));
        }
    });
    port
}

/// A server that accepts connections and holds each until its client closes it.
fn holder() -> u16 {
    listen(|mut c| {
        let _ = c.set_read_timeout(Some(Duration::from_secs(60)));
        let _ = std::io::copy(&mut c, &mut std::io::sink());
    })
}

/// Run python `script` allowing the origin on port `p` by its address and as `svc.test`
/// (resolved to 127.0.0.1 by the test setting); the boundary checked.
fn run_origin_by_address_and_name(ctx: &Ctx, p: u16, script: &str) -> Run {
    let rules = [format!("127.0.0.1:{p}"), format!("svc.test:{p}")];
    ctx.var("COFFERDAM_TEST_RESOLVE", "svc.test=127.0.0.1");
    let r = ctx.run(
        &["--allow-net", &rules[0], "--allow-net", &rules[1]],
        &["/usr/bin/python3", "-c", script],
    );
    ctx.assert_boundary(&r);
    r
}

/// `network.intercepted.<key>` as a number (`None`: absent or null).
fn counter(r: &Run, key: &str) -> Option<u64> {
    r.bundle["network"]["intercepted"][key].as_u64()
}

fn intercepted(r: &Run) -> String {
    r.bundle["network"]["intercepted"].to_string()
}

/// The trace's network decisions.
fn decisions(r: &Run) -> Vec<Value> {
    crate::common::network_decisions(&r.bundle)
}

/// A python helper every probe script starts with: `ask(raw)` sends raw bytes to the proxy
/// and returns the status line (or the error's name) and the number of responses that came
/// back before the connection ended; `p` and `a` are the origin's port and address.
const ASK: &str = r#"
import os, socket, struct, time
def read_all(s):
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            return data
        data += c
def status_of(data):
    return data.split(b"\r\n", 1)[0].decode("latin-1").replace(" ", "_") or "EOF"
def ask(raw, addr=("127.0.0.1", 3128)):
    try:
        s = socket.create_connection(addr, timeout=5)
        s.sendall(raw)
        data = read_all(s)
        s.close()
    except OSError as e:
        return type(e).__name__, 0
    return status_of(data), data.count(b"HTTP/1.1 ")
p = os.environ.get("WEB", "")
a = "127.0.0.1:" + p
"#;

fn dns_malformed(ctx: &Ctx) -> Outcome {
    let script = format!(
        r#"{ASK}
def query(name, qid):
    m = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        m += bytes([len(label)]) + label.encode()
    return m + b"\0" + struct.pack(">HH", 1, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(3)
# An empty datagram, a short one, a truncated question, a response: none is a query.
for junk in (b"", b"\x00", query("svc.test", 7)[:14], b"\x12\x34\x81\x80" + bytes(8)):
    u.sendto(junk, ("127.0.0.1", 53))
time.sleep(0.2)
u.sendto(query("svc.test", 0x4242), ("127.0.0.1", 53))
try:
    r, _ = u.recvfrom(512)
    print("udp=%s:%d:%d" % (r[:2].hex(), r[3] & 15, r[7]))
except OSError as e:
    print("udp=" + type(e).__name__)
# Over TCP an empty message ends that connection only.
try:
    t = socket.create_connection(("127.0.0.1", 53), timeout=3)
    t.sendall(b"\0\0")
    print("tcp_empty=%r" % t.recv(16))
except OSError as e:
    print("tcp_empty=" + type(e).__name__)
try:
    t = socket.create_connection(("127.0.0.1", 53), timeout=3)
    m = query("svc.test", 0x4343)
    t.sendall(struct.pack(">H", len(m)) + m)
    # TCP may deliver the length prefix and the message in separate segments.
    r = b""
    while len(r) < 2 or len(r) < 2 + struct.unpack(">H", r[:2])[0]:
        c = t.recv(512)
        if not c:
            break
        r += c
    print("tcp=%s:%d" % (r[2:4].hex(), r[5] & 15) if len(r) >= 6 else "tcp=short:%r" % r)
except OSError as e:
    print("tcp=" + type(e).__name__)
"#
    );
    let r = ctx.run(
        &["--allow-net", "svc.test:80"],
        &["/usr/bin/python3", "-c", &script],
    );
    ctx.assert_boundary(&r);
    let served = r.value("udp") == Some("4242:0:1") && r.value("tcp") == Some("4343:0");
    let counted = counter(&r, "malformed_dropped") == Some(5)
        && r.bundle["network"]["intercepted"]["dns"]["answered"].as_u64() == Some(2);
    check(
        served && counted,
        format!(
            "the resolver answered after 4 non-queries over UDP and 1 over TCP, all counted: {}",
            intercepted(&r)
        ),
        format!(
            "DNS after malformed input: {}; counters {}",
            r.out,
            intercepted(&r)
        ),
    )
}

fn descriptor_exhaustion(ctx: &Ctx) -> Outcome {
    let web = Origin::start(ctx);
    let hold = holder();
    ctx.var("HOLD", hold.to_string());
    let script = format!(
        r#"{ASK}
import resource, selectors
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
hold, web = os.environ["HOLD"], p
req = ("CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n" % (hold, hold)).encode()
socks, failed, start = [], {{}}, time.time()
for i in range(600):
    if time.time() - start > 20:
        break
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=2)
        s.sendall(req)
        socks.append(s)
    except OSError as e:
        failed[type(e).__name__] = failed.get(type(e).__name__, 0) + 1
sel = selectors.DefaultSelector()
for s in socks:
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
got, left, deadline = {{}}, len(socks), time.time() + 5
while left and time.time() < deadline:
    for key, _ in sel.select(timeout=0.5):
        try:
            d = key.fileobj.recv(64)
            k = d[:12].decode("latin-1") if d else "EOF"
        except OSError as e:
            k = type(e).__name__
        got[k] = got.get(k, 0) + 1
        sel.unregister(key.fileobj)
        left -= 1
print("tunnels=%d" % got.get("HTTP/1.1 200", 0))
print("outcomes=%r pending=%d failed=%r" % (got, left, failed))
for s in socks:
    s.close()
# Service resumes once they are gone.
after = "none"
for i in range(40):
    time.sleep(0.25)
    status, _ = ask(("GET http://127.0.0.1:%s/after HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n" % (web, web)).encode())
    if status == "HTTP/1.1_200_OK":
        after = "served"
        break
print("after=" + after)
"#
    );
    let hold_rule = format!("127.0.0.1:{hold}");
    let web_rule = format!("127.0.0.1:{}", web.port);
    let r = ctx.run_with(
        &["--allow-net", &hold_rule, "--allow-net", &web_rule],
        &["/usr/bin/python3", "-c", &script],
        |c| {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec only setrlimit, a plain system call, runs.
            unsafe {
                c.pre_exec(|| {
                    let lim = rustix::process::Rlimit {
                        current: Some(256),
                        maximum: Some(1024),
                    };
                    rustix::process::setrlimit(rustix::process::Resource::Nofile, lim)
                        .map_err(std::io::Error::from)
                });
            }
        },
    );
    ctx.assert_boundary(&r);
    let proxy = r
        .control_with("egress_proxy", "driver", "cofferdam-net")
        .unwrap_or_default();
    let nofile = &proxy["details"]["nofile"];
    let raised = nofile["soft"] == 1024 && nofile["hard"] == 1024;
    let refused = counter(&r, "refused_at_limit").unwrap_or(0);
    let tunnels: u64 = r.value("tunnels").and_then(|t| t.parse().ok()).unwrap_or(0);
    let served =
        r.value("after") == Some("served") && web.seen().iter().any(|s| s.ends_with(" /after"));
    let traced = decisions(&r).iter().any(|d| {
        d["decision"] == "denied"
            && (d["reason"] == "too many connections at once"
                || d["reason"] == "the driver is at its descriptor limit")
    });
    let review = ctx
        .cmd()
        .args(["--color", "never", "status", "--review", &r.job])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&review.stdout)
        .contains(&format!("at limit  {refused} connection(s) refused"));
    check(
        raised && served && traced && shown && tunnels >= 1 && refused >= 400,
        format!("{tunnels} tunnels, {refused} refused at the limit, then served; nofile {nofile}"),
        format!(
            "raised {raised} served {served} traced {traced} shown {shown} refused {refused}: {}\n{}",
            r.out,
            intercepted(&r)
        ),
    )
}

fn host_mismatch(ctx: &Ctx) -> Outcome {
    let web = Origin::start(ctx);
    let p = web.port;
    let script = format!(
        r#"{ASK}
for key, host in (("other", "other.test"), ("port", "127.0.0.1:1"), ("ok", "127.0.0.1:" + p)):
    status, _ = ask(("GET http://127.0.0.1:%s/%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (p, key, host)).encode())
    print("%s=%s" % (key, status))
"#
    );
    let rule = format!("127.0.0.1:{p}");
    let r = ctx.run(
        &["--allow-net", &rule],
        &["/usr/bin/python3", "-c", &script],
    );
    ctx.assert_boundary(&r);
    let seen = web.seen();
    let ds = decisions(&r);
    let denied = |host: &str| {
        ds.iter().any(|d| {
            d["decision"] == "denied" && d["host"] == host && d["protocol"] == "http_connect"
        })
    };
    check(
        seen == vec![format!("127.0.0.1:{p} /ok")]
            && r.value("other") == Some("HTTP/1.1_403_Forbidden")
            && r.value("port") == Some("HTTP/1.1_403_Forbidden")
            && r.value("ok") == Some("HTTP/1.1_200_OK")
            && denied("other.test")
            && denied("127.0.0.1")
            && counter(&r, "denied") == Some(2),
        "a Host other than the target is refused (403, denied); the origin saw only its own",
        format!("origin saw {seen:?}; {}; {}", r.out, intercepted(&r)),
    )
}

fn lax_heads(ctx: &Ctx) -> Outcome {
    let web = Origin::start(ctx);
    let p = web.port;
    let script = format!(
        r#"{ASK}
heads = {{
    "dup": "GET http://%s/dup HTTP/1.1\r\nHost: %s\r\nHost: other.test\r\n\r\n" % (a, a),
    "space": "GET http://%s/space HTTP/1.1\r\nHost : other.test\r\n\r\n" % a,
    "lf": "GET http://%s/lf HTTP/1.1\nHost: %s\nX: y\n\n" % (a, a),
    "cr": "GET http://%s/cr\rx HTTP/1.1\r\nHost: %s\r\n\r\n" % (a, a),
    "te": "POST http://%s/te HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" % (a, a),
}}
for key, head in heads.items():
    print("%s=%s" % (key, ask(head.encode())[0]))
# The transparent path: straight to the allowed name, a second Host after the first.
print("tdup=%s" % ask(("GET /tdup HTTP/1.1\r\nHost: svc.test:%s\r\nHost: other.test\r\n\r\n" % p).encode(), ("svc.test", int(p)))[0])
"#
    );
    let r = run_origin_by_address_and_name(ctx, p, &script);
    let seen = web.seen();
    let bad = ["dup", "space", "lf", "cr", "te"];
    let refused = bad
        .iter()
        .all(|k| r.value(k) == Some("HTTP/1.1_400_Bad_Request"));
    let reset = r.value("tdup") == Some("ConnectionResetError");
    check(
        seen.is_empty() && refused && reset && counter(&r, "malformed_dropped") == Some(6),
        "5 lax proxy heads answered 400, a transparent one reset, none reached the origin, 6 counted",
        format!("origin saw {seen:?}; {}; {}", r.out, intercepted(&r)),
    )
}

fn pipelined(ctx: &Ctx) -> Outcome {
    let web = Origin::start(ctx);
    let p = web.port;
    let script = format!(
        r#"{ASK}
second = "GET /second HTTP/1.1\r\nHost: other.test\r\n\r\n"
# The forward proxy, then the transparent path to an allowed name.
status, n = ask(("GET http://%s/first HTTP/1.1\r\nHost: %s\r\n\r\n%s" % (a, a, second)).encode())
print("proxy=%s:%d" % (status, n))
status, n = ask(("GET /tfirst HTTP/1.1\r\nHost: svc.test:%s\r\n\r\n%s" % (p, second)).encode(), ("svc.test", int(p)))
print("transparent=%s:%d" % (status, n))
"#
    );
    let r = run_origin_by_address_and_name(ctx, p, &script);
    let mut seen = web.seen();
    seen.sort();
    let want = vec![
        format!("127.0.0.1:{p} /first"),
        format!("svc.test:{p} /tfirst"),
    ];
    check(
        seen == want
            && r.value("proxy") == Some("HTTP/1.1_200_OK:1")
            && r.value("transparent") == Some("HTTP/1.1_200_OK:1")
            && counter(&r, "allowed") == Some(2),
        "one request per checked connection: the pipelined second never reached the origin",
        format!("origin saw {seen:?}; {}; {}", r.out, intercepted(&r)),
    )
}

fn tunnel_host(ctx: &Ctx) -> Outcome {
    let web = Origin::start(ctx);
    let p = web.port;
    let script = format!(
        r#"{ASK}
connect = "CONNECT svc.test:%s HTTP/1.1\r\nHost: svc.test:%s\r\n\r\n" % (p, p)
def tunnel(inner):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
        s.sendall(connect.encode())
        first = s.recv(39)
        s.sendall(inner.encode())
        return status_of(first) + "|" + status_of(read_all(s))
    except OSError as e:
        return type(e).__name__
print("other=" + tunnel("GET /other HTTP/1.1\r\nHost: other.test\r\n\r\n"))
print("own=" + tunnel("GET /own HTTP/1.1\r\nHost: svc.test:%s\r\n\r\n" % p))
"#
    );
    let r = run_origin_by_address_and_name(ctx, p, &script);
    let seen = web.seen();
    let denied = decisions(&r).iter().any(|d| {
        d["decision"] == "denied" && d["host"] == "other.test" && d["protocol"] == "http_connect"
    });
    check(
        seen == vec![format!("svc.test:{p} /own")]
            && r.value("other")
                == Some("HTTP/1.1_200_Connection_established|HTTP/1.1_403_Forbidden")
            && r.value("own") == Some("HTTP/1.1_200_Connection_established|HTTP/1.1_200_OK")
            && denied,
        "a tunnel to an allowed name carries only that name's Host; another is answered 403 by cofferdam, denied",
        format!("origin saw {seen:?}; {}; {}", r.out, intercepted(&r)),
    )
}
