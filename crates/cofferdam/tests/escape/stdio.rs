//! Terminal, the standard descriptors: no descriptor of the caller's reaches the command.
//! Without a pty its stdin, stdout and stderr are pipes the supervisor relays, so a host
//! file on stdout or stdin cannot be `fchmod`ed, re-timed, given xattrs or reopened through
//! `/proc/self/fd/N`, and a terminal on stdout alone (stdin redirected) cannot be read or
//! re-moded. Each attack also checks what the bundle read back (`close_fds`'s `stdio`).

use crate::harness::{
    Attack, Boundary::Terminal, Ctx, EVERY_TIER_MUST, Outcome, Run, TIERS, check, controls_of,
    unique,
};
use crate::terminal::{drain, openpty, pending_input};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "tty.stdout-host-file-metadata",
        boundary: Terminal,
        description: "stdout is a host file: fchmod/futimens/fsetxattr it and reopen it through /proc/self/fd/1",
        on: EVERY_TIER_MUST,
        probe: stdout_host_file,
    },
    Attack {
        id: "tty.stderr-host-file-metadata",
        boundary: Terminal,
        description: "stderr is a host file: fchmod/futimens/fsetxattr it and reopen it through /proc/self/fd/2",
        on: EVERY_TIER_MUST,
        probe: stderr_host_file,
    },
    Attack {
        id: "tty.stdin-host-file-reopen",
        boundary: Terminal,
        description: "stdin is a host file: reopen /proc/self/fd/0 for writing, truncate or chmod it",
        on: EVERY_TIER_MUST,
        probe: stdin_host_file,
    },
    Attack {
        id: "tty.stdout-terminal-stdin-pipe",
        boundary: Terminal,
        description: "stdin a pipe, stdout the caller's terminal: read what is typed, change its modes",
        on: EVERY_TIER_MUST,
        probe: stdout_terminal,
    },
];

/// `cofferdam run -q` on the context's tier with the given standard streams; the exit code
/// and the run's bundle (read from the store: the summary would go to the stdout under test).
fn run_with(ctx: &Ctx, stdin: Stdio, stdout: Stdio, stderr: Stdio, argv: &[&str]) -> Run {
    let spec = TIERS
        .iter()
        .find(|s| s.tier == ctx.tier() && !s.no_userns)
        .unwrap();
    let out = ctx
        .cmd()
        .args(["--color", "never", "run", "-q"])
        .args(spec.run_args)
        .arg("--")
        .args(argv)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .output()
        .unwrap();
    let status = ctx.cmd().args(["status", "--json"]).output().unwrap();
    let bundle = crate::common::json_of(&status);
    let job = bundle["run"]["run_id"].as_str().unwrap().to_owned();
    Run {
        code: out.status.code(),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
        bundle_path: ctx.store().join("jobs").join(&job).join("run-bundle.json"),
        job,
        bundle,
    }
}

/// The value printed as `key=value` in `text`.
fn value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or("")
}

/// `outcome` when it is an escape (the host's state says it all); else what every run here
/// must also say: the command ran, and its fds 0-2 were read back as the sandbox's pipes.
fn assert_pipes(ctx: &Ctx, r: &Run, outcome: Outcome) -> Outcome {
    if let Outcome::Escaped(_) = outcome {
        return outcome;
    }
    assert_eq!(r.code, Some(0), "{r:?}");
    ctx.assert_boundary(r);
    let fds = controls_of(&r.bundle, "close_fds");
    assert!(
        fds.len() == 1
            && fds[0]["status"] == "enforced"
            && fds[0]["details"]["stdio"] == serde_json::json!(["pipe", "pipe", "pipe"]),
        "close_fds: {fds:?}"
    );
    outcome
}

/// A moment no run here touches the file at (2001-01-01).
const STAMP: i64 = 978_307_200;

/// The probes' common start: `V` the descriptor under attack (the first argument), `p` its
/// `/proc/self/fd` link, `res` the findings (starting with what `V` is), `t` one attempt.
macro_rules! prelude {
    () => {
        r#"
import os, stat, sys
V = int(sys.argv[1])
p = "/proc/self/fd/%d" % V
res = []
res.append("kind=" + ("fifo" if stat.S_ISFIFO(os.fstat(V).st_mode) else "other"))
def t(name, f):
    try:
        f()
        res.append(name + ":DONE")
    except OSError as e:
        res.append("%s:%d" % (name, e.errno))
"#
    };
}

const METADATA: &str = concat!(
    prelude!(),
    r#"
t("fchmod", lambda: os.fchmod(V, 0o4755))
t("chmod-proc", lambda: os.chmod(p, 0o4777))
t("futimens", lambda: os.utime(V, (978307200, 978307200)))
t("utime-proc", lambda: os.utime(p, (978307200, 978307200)))
t("fsetxattr", lambda: os.setxattr(V, "user.cofferdam", b"pwn"))
t("fsetxattr-new", lambda: os.setxattr(V, "user.other", b"1"))
t("fremovexattr", lambda: os.removexattr(V, "user.cofferdam"))
def reopen():
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    try:
        res.append("read=" + os.read(fd, 64).decode(errors="replace").strip())
    finally:
        os.close(fd)
t("reopen-read", reopen)
os.write(3 - V, ("res=" + " ".join(res) + "\n").encode())
"#
);

/// Mode, mtime, atime and the `user.cofferdam` / `user.other` xattrs of `p`.
fn file_state(p: &Path) -> (u32, i64, i64, Option<Vec<u8>>, Option<Vec<u8>>) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let get = |name: &std::ffi::CStr| {
        let mut buf = [0u8; 64];
        // SAFETY: valid C strings and a buffer of the length given.
        let r = unsafe {
            libc::getxattr(
                c.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        usize::try_from(r).ok().map(|n| buf[..n].to_vec())
    };
    (
        m.mode() & 0o7777,
        m.mtime(),
        m.atime(),
        get(c"user.cofferdam"),
        get(c"user.other"),
    )
}

/// A canary file of the caller's outside the workdir: mode 0600, content `canary`, an
/// xattr when the filesystem takes one.
fn canary(ctx: &Ctx) -> std::path::PathBuf {
    let p = ctx.outside().join(format!("stdio-{}", unique()));
    std::fs::write(&p, "canary\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid C strings and a one-byte value. A filesystem without user xattrs
    // refuses; the comparison then covers mode and times only.
    unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.cofferdam".as_ptr(),
            c"k".as_ptr().cast(),
            1,
            0,
        );
    }
    p
}

fn output_host_file(ctx: &Ctx, victim_fd: i32) -> Outcome {
    let p = canary(ctx);
    let before = file_state(&p);
    let file = || std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    let fd = victim_fd.to_string();
    let argv = ["/usr/bin/python3", "-c", METADATA, fd.as_str()];
    let r = if victim_fd == 1 {
        run_with(ctx, Stdio::null(), file().into(), Stdio::piped(), &argv)
    } else {
        run_with(ctx, Stdio::null(), Stdio::piped(), file().into(), &argv)
    };
    let report = if victim_fd == 1 { &r.err } else { &r.out };
    let res = value(report, "res").to_owned();
    let after = file_state(&p);
    let text = std::fs::read_to_string(&p).unwrap_or_default();
    let outcome = check(
        after.0 == before.0
            && after.3 == before.3
            && after.4 == before.4
            && after.1 != STAMP
            && after.2 != STAMP
            && !res.contains("read=canary")
            && text.starts_with("canary\n")
            && res.contains("kind=fifo"),
        format!(
            "the host file's mode {:o}, times and xattrs unchanged; fd {victim_fd} is a pipe",
            after.0
        ),
        format!("{before:?} -> {after:?}; the command saw: {res}"),
    );
    assert_pipes(ctx, &r, outcome)
}

fn stdout_host_file(ctx: &Ctx) -> Outcome {
    output_host_file(ctx, 1)
}

fn stderr_host_file(ctx: &Ctx) -> Outcome {
    output_host_file(ctx, 2)
}

const STDIN: &str = concat!(
    prelude!(),
    r#"
res.append("got=" + os.read(0, 64).decode(errors="replace").strip())
def write(flags):
    fd = os.open(p, flags | os.O_NONBLOCK)
    try:
        os.write(fd, b"PWNED\n")
    finally:
        os.close(fd)
t("reopen-append", lambda: write(os.O_WRONLY | os.O_APPEND))
t("reopen-rdwr", lambda: write(os.O_RDWR))
t("truncate-proc", lambda: os.truncate(p, 0))
t("fchmod", lambda: os.fchmod(0, 0o4755))
t("chmod-proc", lambda: os.chmod(p, 0o4777))
t("futimens", lambda: os.utime(0, (978307200, 978307200)))
print("res=" + " ".join(res))
"#
);

fn stdin_host_file(ctx: &Ctx) -> Outcome {
    let p = canary(ctx);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = file_state(&p);
    let stdin = File::open(&p).unwrap();
    let r = run_with(
        ctx,
        stdin.into(),
        Stdio::piped(),
        Stdio::piped(),
        &["/usr/bin/python3", "-c", STDIN, "0"],
    );
    let res = value(&r.out, "res").to_owned();
    let after = file_state(&p);
    let text = std::fs::read_to_string(&p).unwrap();
    let outcome = check(
        text == "canary\n" && after.0 == before.0 && after.1 != STAMP && res.contains("kind=fifo"),
        "the host file is unchanged (content, mode, times); fd 0 is a pipe",
        format!("file {text:?}, {before:?} -> {after:?}; the command saw: {res}"),
    );
    assert!(
        res.contains("got=canary"),
        "stdin reached the command: {r:?}"
    );
    assert_pipes(ctx, &r, outcome)
}

/// Every terminal attribute and the window size of `tty`, for a before/after comparison.
fn tty_state(tty: &File) -> (u32, u32, u32, u32, Vec<u8>, u16, u16) {
    // SAFETY: tcgetattr and TIOCGWINSZ fill the zeroed structs through valid pointers.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(tty.as_raw_fd(), &mut t), 0);
        let mut w: libc::winsize = std::mem::zeroed();
        assert_eq!(libc::ioctl(tty.as_raw_fd(), libc::TIOCGWINSZ, &mut w), 0);
        (
            t.c_iflag,
            t.c_oflag,
            t.c_cflag,
            t.c_lflag,
            t.c_cc.to_vec(),
            w.ws_row,
            w.ws_col,
        )
    }
}

const TERMINAL: &str = r#"
import fcntl, os, select, stat, struct, termios
res = []
res.append("kind=" + ("fifo" if stat.S_ISFIFO(os.fstat(1).st_mode) else "other"))
def t(name, f):
    try:
        f()
        res.append(name + ":DONE")
    except (OSError, termios.error) as e:
        res.append("%s:%s" % (name, e.args[0]))
def modes():
    a = termios.tcgetattr(1)
    a[3] &= ~(termios.ECHO | termios.ICANON)
    a[1] &= ~termios.OPOST
    termios.tcsetattr(1, termios.TCSANOW, a)
t("tcsetattr", modes)
t("winsize", lambda: fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 11, 22, 0, 0)))
def read(fd):
    r, _, _ = select.select([fd], [], [], 1.0)
    got = os.read(fd, 100) if r else b""
    res.append("read%d=%s" % (fd, got.decode(errors="replace").strip()))
t("read-fd1", lambda: read(1))
t("read-fd2", lambda: read(2))
def reopen():
    fd = os.open("/proc/self/fd/1", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    read(fd)
t("reopen-read", reopen)
print("res=" + " ".join(res))
"#;

fn stdout_terminal(ctx: &Ctx) -> Outcome {
    use std::io::Write;
    let (master, slave) = openpty();
    // Someone types at the terminal before and while the command runs.
    (&master).write_all(b"SECRET-TYPED\n").unwrap();
    // The line discipline takes the bytes in asynchronously.
    let t0 = std::time::Instant::now();
    while pending_input(&slave) < 13 && t0.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let typed = pending_input(&slave);
    assert_eq!(typed, 13, "SECRET-TYPED\\n is queued");
    let _echo = drain(&master);
    let before = tty_state(&slave);
    let r = run_with(
        ctx,
        Stdio::null(),
        slave.try_clone().unwrap().into(),
        slave.try_clone().unwrap().into(),
        &["/usr/bin/python3", "-c", TERMINAL],
    );
    let screen = drain(&master);
    let res = value(&screen, "res").to_owned();
    let after = tty_state(&slave);
    assert!(
        screen.contains("res="),
        "the output reached the terminal: {screen}"
    );
    let outcome = check(
        after == before
            && pending_input(&slave) == typed
            && !res.contains("SECRET")
            && res.contains("kind=fifo"),
        "the terminal's modes and size unchanged, what was typed still unread; fd 1 is a pipe",
        format!("{before:?} -> {after:?}; the command saw: {res}"),
    );
    assert_pipes(ctx, &r, outcome)
}
