//! Socket families and devices (issue 16 §2): the address families no network mode needs
//! (vsock, packet, bluetooth, CAN, the crypto API, …), netlink protocols other than route,
//! exotic `socketpair`s and fanotify, each tried in network mode `none` and in the mode
//! whose sockets only the kernel-surface filter answers; and the host's devices a run must
//! not reach: the user's other terminals (a canary pty the test opens) and `/dev/shm`.

use crate::harness::{
    Attack, BOTH_MUST, Boundary, Ctx, Outcome, Tier, Verdict, check, controls_of,
};
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

/// The device attacks: the host's other terminals and its `/dev/shm`.
pub const DEVICE_ATTACKS: &[Attack] = &[
    Attack {
        id: "tty.other-pts",
        boundary: Boundary::Terminal,
        description: "handed no terminal, open another /dev/pts/N of the user's (a canary pty) and write to it",
        on: BOTH_MUST,
        probe: other_pts,
    },
    Attack {
        id: "tty.other-pts-own-terminal",
        boundary: Boundary::Terminal,
        description: "run on a terminal: the own pty and /dev/tty open, another /dev/pts/N (a canary) does not",
        on: BOTH_MUST,
        probe: other_pts_own_terminal,
    },
    Attack {
        id: "fw.host-dev-shm",
        boundary: Boundary::FsWrite,
        description: "read and write a canary in the host's /dev/shm, create a file there",
        on: BOTH_MUST,
        probe: host_dev_shm,
    },
];

/// A pty pair made by the test: a canary standing for another of the user's terminals.
struct Pty {
    master: std::fs::File,
    slave: std::fs::File,
    name: String,
}

fn openpty() -> Pty {
    use std::os::fd::AsRawFd;
    let (master, slave) = crate::terminal::openpty();
    let name = std::fs::read_link(format!("/proc/self/fd/{}", slave.as_raw_fd()))
        .unwrap()
        .display()
        .to_string();
    Pty {
        master,
        slave,
        name,
    }
}

impl Pty {
    /// Everything readable on the master within `ms` milliseconds of quiet.
    fn drain(&self, ms: i32) -> Vec<u8> {
        use std::os::fd::AsRawFd;
        let mut out = Vec::new();
        loop {
            let mut p = libc::pollfd {
                fd: self.master.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
                return out;
            }
            let mut buf = [0u8; 65536];
            // SAFETY: reads into a buffer of the given length.
            let n =
                unsafe { libc::read(self.master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return out;
            }
            out.extend_from_slice(&buf[..usize::try_from(n).unwrap()]);
        }
    }

    /// `stty -g` of the terminal.
    fn modes(&self) -> String {
        let out = std::process::Command::new("stty")
            .arg("-g")
            .stdin(self.slave.try_clone().unwrap())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Python: open `path` (from the environment variable `var`) read-write, write a marker to
/// it and change its modes; print `name=opened` or `name_err=N`.
fn open_terminal_script(name: &str, var: &str) -> String {
    format!(
        "import os, termios\ntry:\n    fd = os.open(os.environ['{var}'], os.O_RDWR | os.O_NOCTTY)\n    os.write(fd, b'cofferdam-canary')\n    a = termios.tcgetattr(fd)\n    a[3] &= ~termios.ECHO\n    termios.tcsetattr(fd, termios.TCSANOW, a)\n    print('{name}=opened', flush=True)\nexcept OSError as e:\n    print('{name}_err=%d' % e.errno, flush=True)\n"
    )
}

/// The canary got no byte and kept its modes.
fn canary_untouched(canary: &Pty, before: &str) -> Result<(), String> {
    let got = canary.drain(100);
    if !got.is_empty() {
        return Err(format!(
            "the canary terminal received {:?}",
            String::from_utf8_lossy(&got)
        ));
    }
    if canary.modes() != before {
        return Err("the canary terminal's modes changed".into());
    }
    Ok(())
}

/// Landlock's device grants on the scoped tier (its `filesystem_write` details): the null
/// devices, the random devices (`git add` reads `/dev/urandom`), `/dev/tty` and the run's
/// own pty, no /dev/pts, /dev/ptmx or /dev/shm.
fn assert_scoped_devices(bundle: &Value, own: Option<&str>) {
    let write = controls_of(bundle, "landlock")
        .into_iter()
        .find(|c| c["dimension"] == "filesystem_write")
        .unwrap_or(Value::Null);
    let mut want = vec![
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
    ];
    want.extend(own);
    assert_eq!(write["details"]["devices"], json!(want), "{write}");
}

fn other_pts(ctx: &Ctx) -> Outcome {
    let canary = openpty();
    let before = canary.modes();
    ctx.var("CANARY_PTS", canary.name.clone());
    let r = ctx.py(&open_terminal_script("canary", "CANARY_PTS"));
    ctx.assert_boundary(&r);
    if ctx.tier() == crate::harness::Tier::Scoped {
        assert_scoped_devices(&r.bundle, None);
    }
    if r.value("canary") == Some("opened") {
        return Outcome::Escaped(format!("opened {}: {}", canary.name, r.out));
    }
    match canary_untouched(&canary, &before) {
        Err(e) => Outcome::Escaped(e),
        Ok(()) => Outcome::Denied(format!(
            "{} refused (errno {}); the canary got nothing; Landlock grants no /dev/pts",
            canary.name,
            r.value("canary_err").unwrap_or("?")
        )),
    }
}

fn other_pts_own_terminal(ctx: &Ctx) -> Outcome {
    use std::os::unix::process::CommandExt;
    let caller = openpty();
    let canary = openpty();
    let before = canary.modes();
    let script = format!(
        "import os\nprint('own_name=' + os.ttyname(0), flush=True)\nfor name, path in [('own', os.ttyname(0)), ('devtty', '/dev/tty')]:\n    try:\n        os.close(os.open(path, os.O_RDWR | os.O_NOCTTY))\n        print(name + '=ok', flush=True)\n    except OSError as e:\n        print(name + '_err=%d' % e.errno, flush=True)\n{}",
        open_terminal_script("canary", "CANARY_PTS")
    );
    let mut c = ctx.cmd();
    c.env("CANARY_PTS", &canary.name)
        .env("TERM", "xterm")
        .args(["--color", "never", "run", "-q"])
        .args(ctx_run_args(ctx))
        .args([
            "--env",
            "CANARY_PTS",
            "--",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .stdin(caller.slave.try_clone().unwrap())
        .stdout(caller.slave.try_clone().unwrap())
        .stderr(caller.slave.try_clone().unwrap());
    // SAFETY: setsid and ioctl are async-signal-safe; the child only makes the terminal on
    // fd 0 its controlling terminal before exec.
    unsafe {
        c.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    let mut shown = Vec::new();
    let start = std::time::Instant::now();
    let status = loop {
        shown.extend(caller.drain(50));
        if let Some(st) = child.try_wait().unwrap() {
            shown.extend(caller.drain(100));
            break st;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("cofferdam did not end: {}", String::from_utf8_lossy(&shown));
        }
    };
    let screen = String::from_utf8_lossy(&shown).replace('\r', "");
    let value = |k: &str| {
        screen
            .lines()
            .find_map(|l| l.trim().strip_prefix(k)?.strip_prefix('='))
            .map(str::to_owned)
    };
    assert!(status.success(), "cofferdam failed ({status}): {screen}");
    assert_eq!(
        value("own").as_deref(),
        Some("ok"),
        "the own terminal: {screen}"
    );
    assert_eq!(value("devtty").as_deref(), Some("ok"), "/dev/tty: {screen}");
    let out = ctx
        .cmd()
        .args(["status", "--json", "last"])
        .output()
        .unwrap();
    let status_json: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let bundle = if status_json["bundle"].is_object() {
        status_json["bundle"].clone()
    } else {
        status_json
    };
    if ctx.tier() == crate::harness::Tier::Scoped {
        assert_scoped_devices(&bundle, value("own_name").as_deref());
    }
    if value("canary").as_deref() == Some("opened") {
        return Outcome::Escaped(format!(
            "opened {} from a run on its own terminal",
            canary.name
        ));
    }
    match canary_untouched(&canary, &before) {
        Err(e) => Outcome::Escaped(e),
        Ok(()) => Outcome::Denied(format!(
            "own terminal {} and /dev/tty open; {} refused (errno {})",
            value("own_name").unwrap_or_default(),
            canary.name,
            value("canary_err").unwrap_or_default()
        )),
    }
}

/// The `run` arguments selecting the context's tier.
fn ctx_run_args(ctx: &Ctx) -> Vec<&'static str> {
    match ctx.tier() {
        crate::harness::Tier::Sealed => vec!["--containment", "sealed"],
        crate::harness::Tier::Scoped => vec!["--tier", "scoped"],
        crate::harness::Tier::Advisory => vec!["--tier", "advisory", "--containment", "advisory"],
    }
}

fn host_dev_shm(ctx: &Ctx) -> Outcome {
    let tag = format!("{}-{}", std::process::id(), crate::harness::unique());
    let canary = std::path::PathBuf::from(format!("/dev/shm/cofferdam-canary-{tag}"));
    let planted = std::path::PathBuf::from(format!("/dev/shm/cofferdam-planted-{tag}"));
    std::fs::write(&canary, "canary\n").unwrap();
    ctx.var("CANARY", canary.display().to_string());
    ctx.var("PLANTED", planted.display().to_string());
    let r = ctx.sh(
        // Listed first: on the sealed tier /dev/shm is the run's own, so the writes below
        // land there (and would then be listed) while the host's stays untouched.
        "ls /dev/shm 2>/dev/null | grep -c cofferdam-canary | sed 's/^/listed=/'; cat \"$CANARY\" 2>/dev/null | sed 's/^/read=/'; echo x >> \"$CANARY\" 2>/dev/null && echo appended=yes; echo x > \"$PLANTED\" 2>/dev/null && echo planted=yes; true",
    );
    let after = std::fs::read_to_string(&canary).unwrap_or_default();
    let planted_exists = planted.exists();
    let _ = std::fs::remove_file(&canary);
    let _ = std::fs::remove_file(&planted);
    ctx.assert_boundary(&r);
    if ctx.tier() == crate::harness::Tier::Scoped {
        assert_scoped_devices(&r.bundle, None);
    }
    if r.value("read").is_some() || after != "canary\n" || planted_exists {
        return Outcome::Escaped(format!(
            "the host's /dev/shm is reachable: {} (canary now {after:?}, planted {planted_exists})",
            r.out
        ));
    }
    check(
        r.value("listed").unwrap_or("0") == "0",
        "the canary is neither readable, writable nor listed, and nothing was created",
        format!("the host's /dev/shm is listed: {}", r.out),
    )
}

/// The scope report's line for what `workdir_exec = false` does not stop.
const WORKDIR_EXEC: &str = "code the command writes still runs with workdir_exec";

/// Executing what the command writes, with `workdir_exec = false`.
pub const EXEC_ATTACKS: &[Attack] = &[
    Attack {
        id: "ks.memfd-exec",
        boundary: Boundary::Kernel,
        description: "workdir_exec = false: write a binary and a script into a memfd and execve it (path and fexecve)",
        on: &[
            (Tier::Sealed, Verdict::Documented(WORKDIR_EXEC)),
            (Tier::Scoped, Verdict::Documented(WORKDIR_EXEC)),
        ],
        probe: memfd_exec,
    },
    Attack {
        id: "fw.exec-written-file",
        boundary: Boundary::FsWrite,
        description: "workdir_exec = false: execve a binary copied into the workdir, HOME, /tmp and /dev/shm",
        on: BOTH_MUST,
        probe: exec_written_file,
    },
];

const MEMFD_EXEC: &str = r##"
import os
echo = open("/bin/echo", "rb").read()
for name, data, argv in [("elf", echo, ["echo", "ran"]), ("script", b"#!/bin/sh\necho ran\n", ["sh"])]:
    for how in ["path", "fd"]:
        try:
            fd = os.memfd_create("cofferdam", 0)
            os.write(fd, data)
        except OSError as e:
            print("%s_%s_err=create-%d" % (name, how, e.errno), flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(1, 2)
                print("%s_%s=" % (name, how), end="", flush=True)
                os.execv("/proc/self/fd/%d" % fd, argv) if how == "path" else os.execve(fd, argv, {})
            except OSError as e:
                print("\n%s_%s_err=%d" % (name, how, e.errno), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        os.close(fd)
"##;

/// Run with `workdir_exec = false` from the workdir's manifest.
fn no_exec(ctx: &Ctx) {
    ctx.put(
        &ctx.work().join("cofferdam.toml"),
        "[filesystem]\nworkdir_exec = false\n",
    );
}

fn memfd_exec(ctx: &Ctx) -> Outcome {
    no_exec(ctx);
    let r = ctx.py(MEMFD_EXEC);
    ctx.assert_boundary(&r);
    let row = controls_of(&r.bundle, "pidns")
        .into_iter()
        .find(|c| c["details"]["control"] == "memfd_noexec")
        .unwrap_or_else(|| panic!("no memfd_noexec row: {}", r.bundle["executor_observations"]));
    assert_eq!(row["dimension"], "kernel_surface");
    let enforced = row["status"] == "enforced";
    // SAFETY: geteuid has no failure mode.
    if ctx.tier() == Tier::Sealed && unsafe { libc::geteuid() } == 0 {
        // Run by root, the sealed tier can raise the sysctl: it must have.
        assert!(enforced, "sealed as root: memfd_noexec not enforced: {row}");
    }
    assert_eq!(enforced, row["details"]["value"] == 2, "{row}");
    let ran: Vec<&str> = ["elf_path", "elf_fd", "script_path", "script_fd"]
        .into_iter()
        .filter(|k| r.value(k) == Some("ran"))
        .collect();
    if enforced {
        // The bundle says refused: any execve that ran is a false claim, not a limitation.
        assert!(
            ran.is_empty(),
            "memfd_noexec enforced but {ran:?} ran: {}",
            r.out
        );
        return Outcome::Denied(format!(
            "vm.memfd_noexec reads 2 in the run's pid namespace (bundle: pidns memfd_noexec enforced); every execve failed: {}",
            r.out.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    assert!(
        row["reason"]
            .as_str()
            .is_some_and(|s| s.contains("can be executed")),
        "{row}"
    );
    let warned = r.bundle["safety"]["warnings"].as_array().is_some_and(|w| {
        w.iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("memfd")))
    });
    assert!(warned, "no warning names memfd: {}", r.bundle["safety"]);
    if ran.is_empty() {
        return Outcome::Denied(format!("no memfd execve ran: {}", r.out));
    }
    Outcome::Escaped(format!(
        "{ran:?} ran from a memfd; the bundle says memfd_noexec {} ({})",
        row["status"], row["details"]["value"]
    ))
}

fn exec_written_file(ctx: &Ctx) -> Outcome {
    no_exec(ctx);
    let r = ctx.sh(
        "for d in \"$PWD\" \"$HOME\" /tmp /dev/shm; do cp /bin/echo \"$d/cofferdam-x\" 2>/dev/null && chmod +x \"$d/cofferdam-x\" && \"$d/cofferdam-x\" ran 2>/dev/null | sed \"s|^|ran_$d=|\"; done; true",
    );
    ctx.assert_boundary(&r);
    let ran: Vec<&str> = r
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("ran_"))
        .collect();
    check(
        ran.is_empty(),
        "no copied binary ran from the workdir, HOME, /tmp or /dev/shm",
        format!("ran: {ran:?}"),
    )
}

/// Watching host file activity.
pub const WATCH_ATTACKS: &[Attack] = &[Attack {
    id: "fr.inotify-host-activity",
    boundary: Boundary::FsRead,
    description: "inotify on a host directory (lent read-only on sealed; outside every grant on scoped): names of files a host process creates",
    on: &[
        (Tier::Sealed, Verdict::Documented("file activity: inotify")),
        (Tier::Scoped, Verdict::Documented("file activity: inotify")),
    ],
    probe: inotify_host_activity,
}];

const INOTIFY: &str = r#"
import ctypes, os, select, struct, sys
l = ctypes.CDLL(None, use_errno=True)
fd = l.inotify_init1(0)
w = l.inotify_add_watch(fd, os.environ["WATCHED"].encode(), 0x100 | 0x4 | 0x8)
print("watch=%d" % (w if w < 0 else 0), "errno=%d" % ctypes.get_errno(), flush=True)
try:
    print("listed=%d" % len(os.listdir(os.environ["WATCHED"])))
except OSError as e:
    print("list_err=%d" % e.errno)
if w >= 0 and select.select([fd], [], [], 10)[0]:
    b = os.read(fd, 4096)
    n = struct.unpack_from("iIII", b)[3]
    print("event=" + b[16:16 + n].rstrip(b"\0").decode())
"#;

fn inotify_host_activity(ctx: &Ctx) -> Outcome {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = ctx.outside().join("watched");
    std::fs::create_dir_all(&dir).unwrap();
    let (flags, watched): (Vec<String>, String) = if ctx.tier() == Tier::Sealed {
        (
            vec!["--mount".into(), format!("{}:/lent:read", dir.display())],
            "/lent".into(),
        )
    } else {
        (Vec::new(), dir.display().to_string())
    };
    ctx.var("WATCHED", watched);
    // A host process making files while the command runs (bounded: 15 s).
    let stop = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..150 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let _ = std::fs::write(dir.join(format!("host-activity-{i}")), "");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let r = ctx.run(&flags, &["/usr/bin/python3", "-c", INOTIFY]);
        stop.store(true, Ordering::SeqCst);
        r
    });
    ctx.assert_boundary(&r);
    match r.value("event") {
        Some(name) if name.starts_with("host-activity-") => Outcome::Escaped(format!(
            "saw a host process create {name} (listing: {})",
            r.value("listed").map_or_else(
                || format!("refused, errno {:?}", r.value("list_err")),
                str::to_owned
            )
        )),
        _ => Outcome::Denied(format!("no host event seen: {}", r.out)),
    }
}
