//! Socket families and devices (issue 16 §2): the address families no network mode needs
//! (vsock, packet, bluetooth, CAN, the crypto API, …), netlink protocols other than route,
//! exotic `socketpair`s, fanotify; each tried in network mode `none` and in mode `allow`
//! (where the scoped tier installs no socket filter of its own, so the kernel-surface
//! filter is all that answers).

use crate::harness::{Attack, BOTH_MUST, Boundary, Ctx, Outcome, controls_of};
use serde_json::{Value, json};

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "net.vsock",
        boundary: Boundary::Network,
        description: "make an AF_VSOCK socket and bind a port the host holds (the VM's vsock port space)",
        on: BOTH_MUST,
        probe: vsock,
    },
    Attack {
        id: "net.exotic-families",
        boundary: Boundary::Network,
        description: "make AF_PACKET, AF_ALG (bind sha256), AF_BLUETOOTH, AF_CAN, AF_TIPC, AF_RDS, AF_KEY, AF_XDP, AF_SMC sockets",
        on: BOTH_MUST,
        probe: exotic_families,
    },
    Attack {
        id: "net.netlink-protocols",
        boundary: Boundary::Network,
        description: "netlink other than route: audit, uevents (the host's device events), sock_diag (every socket), generic, netfilter",
        on: BOTH_MUST,
        probe: netlink_protocols,
    },
    Attack {
        id: "net.socketpair-families",
        boundary: Boundary::Network,
        description: "socketpair(2) with AF_TIPC, AF_VSOCK and AF_NETLINK",
        on: BOTH_MUST,
        probe: socketpair_families,
    },
    Attack {
        id: "ks.fanotify",
        boundary: Boundary::Kernel,
        description: "fanotify_init: watch other processes' file activity",
        on: BOTH_MUST,
        probe: fanotify,
    },
];

/// The network modes each socket attack is tried in: the default (`none`), and the mode
/// whose sockets the kernel-surface filter alone answers: `allow` on the sealed tier (an
/// unreachable name, so nothing leaves the host), `host` on the scoped tier (which refuses
/// `allow` and installs no socket filter in `host`).
fn modes(ctx: &Ctx) -> [(&'static str, &'static [&'static str]); 2] {
    let other: (&str, &[&str]) = if ctx.tier() == crate::harness::Tier::Sealed {
        ("allow", &["--allow-net", "cofferdam-test.invalid:443"])
    } else {
        ("host", &["--network", "host"])
    };
    [("none", &[]), other]
}

/// The kernel-surface filter's observation, whose details name the socket rule.
fn seccomp_socket_rule(bundle: &Value) -> Value {
    controls_of(bundle, "seccomp")
        .into_iter()
        .find(|c| c["dimension"] == "kernel_surface")
        .map(|c| c["details"]["socket_families"].clone())
        .unwrap_or(Value::Null)
}

/// The bundle names the allowlist, and the filter that holds it is enforced.
fn assert_rule(bundle: &Value) {
    let seccomp: Vec<Value> = controls_of(bundle, "seccomp")
        .into_iter()
        .filter(|c| c["dimension"] == "kernel_surface")
        .collect();
    assert!(
        seccomp.len() == 1 && seccomp[0]["status"] == "enforced",
        "seccomp kernel_surface: {seccomp:?}"
    );
    let rule = seccomp_socket_rule(bundle);
    assert_eq!(
        rule["allowed"],
        json!(["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]),
        "{rule}"
    );
    assert_eq!(rule["netlink_protocols"], json!(["NETLINK_ROUTE"]));
    assert_eq!(rule["socketpair"], json!(["AF_UNIX"]));
}

/// Run `script` (Python, printing `name=ok` or `name_err=<errno>` lines) in every mode;
/// denied when no `=ok` line appears for a name in `must_fail`, every errno is `errno`, and
/// every name in `must_work` printed `=ok`.
fn in_every_mode(
    ctx: &Ctx,
    script: &str,
    must_fail: &[&str],
    errno: i32,
    must_work: &[&str],
) -> Outcome {
    let mut evidence = Vec::new();
    for (mode, flags) in modes(ctx) {
        let r = ctx.run(flags, &["/usr/bin/python3", "-c", script]);
        if mode != "host" {
            // The tier's usual claims hold; in mode host (scoped) Landlock confines no TCP,
            // so its network row is absent by design.
            ctx.assert_boundary(&r);
        }
        assert_rule(&r.bundle);
        for name in must_fail {
            if r.value(name) == Some("ok") {
                return Outcome::Escaped(format!("mode {mode}: {name} opened; {}", r.out));
            }
            let got = r.value(&format!("{name}_err"));
            if got != Some(errno.to_string().as_str()) {
                return Outcome::Escaped(format!(
                    "mode {mode}: {name} failed with errno {got:?}, not the filter's {errno}: {}{}",
                    r.out, r.err
                ));
            }
        }
        for name in must_work {
            assert_eq!(
                r.value(name),
                Some("ok"),
                "mode {mode}: {name} must keep working: {}{}",
                r.out,
                r.err
            );
        }
        evidence.push(mode);
    }
    Outcome::Denied(format!(
        "{} refused with errno {errno} in modes {}; the bundle's seccomp names the allowlist",
        must_fail.join(", "),
        evidence.join(", ")
    ))
}

/// Python: try `expr` (which makes a socket, or raises), print `name=ok` / `name_err=N`.
fn attempt(name: &str, expr: &str) -> String {
    format!(
        "try:\n    {expr}\n    print('{name}=ok')\nexcept OSError as e:\n    print('{name}_err=%d' % e.errno)\n"
    )
}

fn vsock(ctx: &Ctx) -> Outcome {
    // A port of the vsock space held on the host: were the space shared, a bind inside
    // would fail with EADDRINUSE, and a socket that binds elsewhere would be reachable.
    let held = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import socket, sys\ns = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)\ns.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY))\nprint(s.getsockname()[1], flush=True)\nsys.stdin.read()",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut port = None;
    let mut holder = held.ok();
    if let Some(child) = holder.as_mut() {
        use std::io::BufRead;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        port = line.trim().parse::<u32>().ok();
    }
    let Some(port) = port else {
        if let Some(mut c) = holder {
            let _ = c.kill();
            let _ = c.wait();
        }
        return Outcome::Skipped("AF_VSOCK is not available on this host".into());
    };
    let script = format!(
        "import socket\n{}{}",
        attempt(
            "vsock",
            "s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)"
        ),
        attempt(
            "vsock_bind",
            &format!(
                "socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).bind((socket.VMADDR_CID_ANY, {port}))"
            )
        ),
    );
    let out = in_every_mode(
        ctx,
        &script,
        &["vsock", "vsock_bind"],
        libc::EAFNOSUPPORT,
        &[],
    );
    if let Some(mut c) = holder {
        let _ = c.kill();
        let _ = c.wait();
    }
    out
}

fn exotic_families(ctx: &Ctx) -> Outcome {
    let families: &[(&str, &str)] = &[
        (
            "packet_raw",
            "socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0x0300)",
        ),
        (
            "packet_dgram",
            "socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0x0300)",
        ),
        (
            "alg",
            "socket.socket(socket.AF_ALG, socket.SOCK_SEQPACKET, 0).bind(('hash', 'sha256'))",
        ),
        ("bluetooth", "socket.socket(31, socket.SOCK_RAW, 1)"),
        ("can", "socket.socket(29, socket.SOCK_RAW, 1)"),
        ("tipc", "socket.socket(30, socket.SOCK_RDM, 0)"),
        ("rds", "socket.socket(21, socket.SOCK_SEQPACKET, 0)"),
        ("key", "socket.socket(15, socket.SOCK_RAW, 2)"),
        ("xdp", "socket.socket(44, socket.SOCK_RAW, 0)"),
        ("smc", "socket.socket(43, socket.SOCK_STREAM, 0)"),
        ("qipcrtr", "socket.socket(42, socket.SOCK_DGRAM, 0)"),
    ];
    let mut script = String::from("import socket\n");
    for (name, expr) in families {
        script.push_str(&attempt(name, expr));
    }
    // What stays: unix, IP (the sealed tier's own namespace; on the scoped tier in mode
    // none the socket filter refuses IP, so only unix is required to work there).
    script.push_str(&attempt(
        "unix",
        "socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
    ));
    let names: Vec<&str> = families.iter().map(|(n, _)| *n).collect();
    in_every_mode(ctx, &script, &names, libc::EAFNOSUPPORT, &["unix"])
}

fn netlink_protocols(ctx: &Ctx) -> Outcome {
    let protocols: &[(&str, i32)] = &[
        ("audit", libc::NETLINK_AUDIT),
        ("uevent", libc::NETLINK_KOBJECT_UEVENT),
        ("sock_diag", libc::NETLINK_SOCK_DIAG),
        ("generic", libc::NETLINK_GENERIC),
        ("netfilter", libc::NETLINK_NETFILTER),
        ("xfrm", libc::NETLINK_XFRM),
    ];
    let mut script = String::from("import socket\n");
    for (name, proto) in protocols {
        // Uevents: joining group 1 would receive the host's device events.
        let expr = format!(
            "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, {proto}).bind((0, {}))",
            if *proto == libc::NETLINK_KOBJECT_UEVENT {
                1
            } else {
                0
            }
        );
        script.push_str(&attempt(name, &expr));
    }
    // Route stays: getaddrinfo, getifaddrs and if_nameindex need it.
    script.push_str(&attempt(
        "route",
        "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).bind((0, 0))",
    ));
    script.push_str(&attempt(
        "if_nameindex",
        "assert any(n == 'lo' for _, n in socket.if_nameindex())",
    ));
    let names: Vec<&str> = protocols.iter().map(|(n, _)| *n).collect();
    in_every_mode(
        ctx,
        &script,
        &names,
        libc::EPROTONOSUPPORT,
        &["route", "if_nameindex"],
    )
}

fn socketpair_families(ctx: &Ctx) -> Outcome {
    let mut script = String::from("import socket\n");
    for (name, family) in [
        ("tipc", 30),
        ("vsock", libc::AF_VSOCK),
        ("netlink", libc::AF_NETLINK),
    ] {
        script.push_str(&attempt(
            name,
            &format!("socket.socketpair({family}, socket.SOCK_DGRAM, 0)"),
        ));
    }
    script.push_str(&attempt("unix", "socket.socketpair(socket.AF_UNIX)"));
    in_every_mode(
        ctx,
        &script,
        &["tipc", "vsock", "netlink"],
        libc::EAFNOSUPPORT,
        &["unix"],
    )
}

fn fanotify(ctx: &Ctx) -> Outcome {
    // FAN_CLASS_NOTIF | FAN_REPORT_FID: the flags an unprivileged caller may use (5.13+).
    crate::kernel::syscall_probe(ctx, libc::SYS_fanotify_init, "0x200, 0", libc::EPERM)
}
