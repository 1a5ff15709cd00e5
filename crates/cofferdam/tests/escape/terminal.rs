//! Terminal: the command cannot type into a terminal (TIOCSTI, TIOCLINUX), not even the
//! caller's when cofferdam's stdout is one (the command gets a pipe there: `stdio.rs`).
//! (The relayed pseudo-terminal case, stdin and stdout a terminal, is `tests/cli/pty.rs`.)
//! Every terminal an attack reaches is a pty the harness made; runs start in a session
//! of their own, so the suite's own terminal is never one.

use crate::harness::{Attack, BOTH_MUST, Boundary::Terminal, Ctx, Outcome, check};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "tty.tiocsti-own",
        boundary: Terminal,
        description: "TIOCSTI/TIOCLINUX on fds 0-2, /dev/tty and a fresh /dev/ptmx",
        on: BOTH_MUST,
        probe: tiocsti_own,
    },
    Attack {
        id: "tty.tiocsti-caller-stdout",
        boundary: Terminal,
        description: "stdout is the caller's terminal (stdin redirected): inject input into it",
        on: BOTH_MUST,
        probe: tiocsti_caller,
    },
    Attack {
        id: "tty.caller-ctty",
        boundary: Terminal,
        description: "handed no terminal (stdin, stdout, stderr redirected), open /dev/tty: the caller's",
        on: BOTH_MUST,
        probe: caller_ctty,
    },
];

const INJECT: &str = r##"
import fcntl, os, termios
res = []
fds = [0, 1, 2]
for path in ["/dev/tty", "/dev/ptmx"]:
    try:
        fds.append(os.open(path, os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        res.append("%s:open-%d" % (path, e.errno))
for fd in fds:
    for name, req in [("sti", termios.TIOCSTI), ("linux", 0x541C)]:
        try:
            fcntl.ioctl(fd, req, b"\x0c" if name == "linux" else b"#")
            res.append("%d:%s:INJECTED" % (fd, name))
        except OSError as e:
            res.append("%d:%s:%d" % (fd, name, e.errno))
print("res=" + " ".join(res))
"##;

fn tiocsti_own(ctx: &Ctx) -> Outcome {
    let r = ctx.py(INJECT);
    ctx.assert_boundary(&r);
    let res = r.value("res").unwrap_or("").to_owned();
    // Every ioctl attempt answered EPERM by seccomp (not ENOTTY: the request is refused
    // before the driver sees it).
    let attempts: Vec<&str> = res
        .split(' ')
        .filter(|x| x.matches(':').count() == 2)
        .collect();
    let all_eperm = !attempts.is_empty()
        && attempts
            .iter()
            .all(|a| a.ends_with(&format!(":{}", libc::EPERM)));
    check(
        all_eperm,
        format!("{} ioctls, all EPERM", attempts.len()),
        format!("got: {res}"),
    )
}

/// A pty pair: (master, slave).
pub fn openpty() -> (File, File) {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r on a descriptor owned here; the name
    // buffer is NUL-terminated by ptsname_r on success.
    let (master, name) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(fd >= 0);
        let master = File::from_raw_fd(fd);
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut buf = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, buf.as_mut_ptr(), buf.len()), 0);
        (
            master,
            std::ffi::CStr::from_ptr(buf.as_ptr())
                .to_string_lossy()
                .into_owned(),
        )
    };
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(name)
        .unwrap();
    (master, slave)
}

pub(crate) fn pending_input(slave: &File) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int to the valid pointer.
    let r = unsafe { libc::ioctl(slave.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(r, 0);
    n
}

/// What the terminal shows so far (non-blocking).
pub(crate) fn drain(master: &File) -> String {
    use std::io::Read;
    // SAFETY: fcntl F_SETFL on a descriptor owned by `master`.
    unsafe {
        let fl = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let mut m = master;
    while let Ok(n) = m.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn tiocsti_caller(ctx: &Ctx) -> Outcome {
    let (master, slave) = openpty();
    // A session of its own: INJECT's /dev/tty is then nobody's, never the terminal the
    // suite runs in; the harness's pty is the only terminal it is handed.
    let out = ctx
        .detached_cmd()
        .args(["run", "-q", "--", "/usr/bin/python3", "-c", INJECT])
        .stdin(std::process::Stdio::null())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave.try_clone().unwrap())
        .status()
        .unwrap();
    assert!(out.success(), "{out:?}");
    let queued = pending_input(&slave);
    let screen = drain(&master);
    drop(master);
    let b = crate::common::json_of(&ctx.cmd().args(["status", "--json"]).output().unwrap());
    let seccomp = crate::harness::controls_of(&b, "seccomp");
    assert_eq!(seccomp[0]["status"], "enforced");
    assert!(
        seccomp[0]["details"]["conditional"]["ioctl"]
            .to_string()
            .contains("TIOCSTI")
    );
    assert!(screen.contains("res="), "{screen}");
    check(
        queued == 0 && !screen.contains("INJECTED"),
        "nothing queued in the caller's terminal input; the bundle lists TIOCSTI as denied",
        format!("{queued} bytes injected into the caller's terminal"),
    )
}

/// `cofferdam ARGS` as a shell in a terminal emulator would start it: session leader with
/// the pty slave as its controlling terminal, but every standard stream redirected away
/// from it (stdin /dev/null, stdout and stderr pipes).
fn spawn_on_ctty(ctx: &Ctx, slave: &File, args: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let tty = slave.as_raw_fd();
    let mut c = ctx.cmd();
    c.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setsid and ioctl(TIOCSCTTY) are async-signal-safe; `tty` stays open in the
    // parent (the child inherits it across fork) until the child has exec'd.
    unsafe {
        c.pre_exec(move || {
            if libc::setsid() < 0 || libc::ioctl(tty, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.spawn().unwrap()
}

const CTTY: &str = r#"
import os
try:
    fd = os.open("/dev/tty", os.O_RDWR)
    os.write(fd, b"PWNED-VIA-DEV-TTY\r\n")
    print("opened=yes")
except OSError as e:
    print("err=%d" % e.errno)
print("tty_nr=" + open("/proc/self/stat").read().rsplit(")", 1)[1].split()[4])
"#;

fn caller_ctty(ctx: &Ctx) -> Outcome {
    let (master, slave) = openpty();
    let child = spawn_on_ctty(
        ctx,
        &slave,
        &["run", "-q", "--", "/usr/bin/python3", "-c", CTTY],
    );
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let screen = drain(&master);
    check(
        !text.contains("opened=yes") && !screen.contains("PWNED") && text.contains("tty_nr=0"),
        format!(
            "no controlling terminal inside ({})",
            text.lines().next().unwrap_or("")
        ),
        format!("the command reached the caller's terminal: {}", text.trim()),
    )
}

/// Regression for `tty.caller-ctty`'s fix (the command starts in its own session when it
/// gets no terminal): the terminal's Ctrl-C still ends the run, through pid 1.
#[test]
fn ctrl_c_on_the_callers_terminal_still_ends_a_command_without_one() {
    if !crate::common::require(
        "unprivileged user namespaces",
        crate::common::userns_independently(),
    ) {
        return;
    }
    let ctx = Ctx::new(&crate::harness::TIERS[0]);
    let (master, slave) = openpty();
    let mut child = spawn_on_ctty(
        &ctx,
        &slave,
        &["run", "-q", "--", "sh", "-c", "echo ready; exec sleep 30"],
    );
    // Wait until the command runs (a ^C during the sandbox's setup is another matter).
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    // The terminal driver turns ^C into SIGINT for its foreground process group.
    use std::io::Write;
    (&master).write_all(b"\x03").unwrap();
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            panic!("Ctrl-C did not end the run");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130), "{status:?}");
    // The terminal's SIGINT reaches cofferdam too, which cancels the run (issue 6): the
    // workload ends by the forwarded SIGINT or the cancel's SIGTERM, whichever is first.
    let b = crate::common::json_of(&ctx.cmd().args(["status", "--json"]).output().unwrap());
    assert_eq!(b["run"]["failure"]["kind"], "cancelled", "{}", b["run"]);
    let sig = &b["run"]["failure"]["signal"];
    assert!(*sig == 2 || *sig == 15, "{}", b["run"]);
}
