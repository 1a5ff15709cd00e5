//! Interactive use and `--capture`: `cofferdam run` driven from a real pseudo-terminal this
//! test opens (the caller's terminal), and from pipes and files (the command then gets
//! pipes the supervisor relays; `--tty` / `--no-tty` override). Each test compares `stty -g` of the
//! caller's terminal before and after the run: cofferdam puts it in raw mode while the
//! command runs on its own pty and must give it back exactly, however the run ends.

use crate::common::*;
use serde_json::Value;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Generous: the tests run in parallel with the rest of the suite.
const TIMEOUT: Duration = Duration::from_secs(30);

fn sealed_host() -> bool {
    require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0)
}

/// The caller's terminal: a pty pair whose slave becomes cofferdam's stdin, stdout, stderr
/// and controlling terminal; the test plays the terminal emulator on the master.
pub(crate) struct Term {
    master: File,
    slave: File,
}

impl Term {
    pub(crate) fn new(rows: u16, cols: u16) -> Term {
        // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r on a descriptor this function owns;
        // the name buffer is large enough and NUL-terminated by ptsname_r on success.
        let (master, name) = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
            let master = File::from_raw_fd(fd);
            assert_eq!(libc::grantpt(fd), 0);
            assert_eq!(libc::unlockpt(fd), 0);
            let mut buf = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(fd, buf.as_mut_ptr(), buf.len()), 0);
            let name = std::ffi::CStr::from_ptr(buf.as_ptr())
                .to_string_lossy()
                .into_owned();
            (master, name)
        };
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&name)
            .unwrap();
        let t = Term { master, slave };
        t.resize(rows, cols);
        t
    }

    /// Set the window size, as a terminal emulator does (the kernel signals SIGWINCH).
    fn resize(&self, rows: u16, cols: u16) {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a winsize from the valid pointer.
        let r = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
        assert_eq!(r, 0);
    }

    /// `stty -g` of the terminal: every attribute, for a before/after comparison.
    fn stty(&self) -> String {
        let out = std::process::Command::new("stty")
            .arg("-g")
            .stdin(self.slave.try_clone().unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Bytes waiting in the terminal's input queue (what someone would have typed).
    fn pending_input(&self) -> i32 {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes an int to the valid pointer.
        let r = unsafe { libc::ioctl(self.slave.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(r, 0);
        n
    }

    /// Start `cofferdam ARGS` on this terminal as a session leader, the way a shell in a
    /// terminal emulator would.
    pub(crate) fn spawn(&self, s: &Sandbox, args: &[&str]) -> Session<'_> {
        self.spawn_with(s, args, self.slave.try_clone().unwrap())
    }

    /// As [`Term::spawn`], with stdout redirected to `stdout` (stdin and stderr stay the
    /// terminal), as `cofferdam run … > file` typed at the shell.
    fn spawn_with(&self, s: &Sandbox, args: &[&str], stdout: File) -> Session<'_> {
        self.spawn_env(s, args, stdout, &[])
    }

    /// As [`Term::spawn_with`], with `env` added to the environment.
    fn spawn_env(
        &self,
        s: &Sandbox,
        args: &[&str],
        stdout: File,
        env: &[(&str, &str)],
    ) -> Session<'_> {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cofferdam"));
        cmd.args(args)
            .env_clear()
            .envs(env.iter().copied())
            .env("HOME", s.home.path())
            .env("COFFERDAM_HOME", s.store.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TERM", "xterm")
            .current_dir(s.work.path())
            .stdin(self.slave.try_clone().unwrap())
            .stdout(stdout)
            .stderr(self.slave.try_clone().unwrap());
        // SAFETY: setsid and ioctl are async-signal-safe; the child only makes the terminal
        // on fd 0 its controlling terminal before exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Session {
            child: cmd.spawn().unwrap(),
            term: self,
            out: Vec::new(),
        }
    }
}

pub(crate) struct Session<'t> {
    child: Child,
    term: &'t Term,
    out: Vec<u8>,
}

impl Session<'_> {
    /// Read what is there within `wait`; whether anything came.
    fn pump(&mut self, wait: Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.term.master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(wait.as_millis()).unwrap();
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
            return false;
        }
        let mut buf = [0u8; 65536];
        // SAFETY: reads into a buffer of the given length.
        let n = unsafe {
            libc::read(
                self.term.master.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n <= 0 {
            return false;
        }
        self.out
            .extend_from_slice(&buf[..usize::try_from(n).unwrap()]);
        true
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }

    /// Read until the screen shows `what`.
    pub(crate) fn expect(&mut self, what: &str) {
        let start = Instant::now();
        while !self.text().contains(what) {
            assert!(
                start.elapsed() < TIMEOUT,
                "timed out waiting for {what:?}; the terminal shows:\n{}",
                self.text()
            );
            self.pump(Duration::from_millis(50));
        }
    }

    pub(crate) fn type_in(&mut self, keys: &str) {
        (&self.term.master).write_all(keys.as_bytes()).unwrap();
    }

    /// Wait for cofferdam to end, reading the terminal meanwhile; its status and everything
    /// the terminal showed.
    pub(crate) fn finish(mut self) -> (ExitStatus, String) {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                while self.pump(Duration::from_millis(100)) {}
                return (st, self.text());
            }
            if start.elapsed() > TIMEOUT {
                let _ = self.child.kill();
                panic!(
                    "cofferdam did not end; the terminal shows:\n{}",
                    self.text()
                );
            }
            self.pump(Duration::from_millis(50));
        }
    }
}

fn last_bundle(s: &Sandbox) -> Value {
    let out = s.cmd().args(["status", "--json", "last"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out)
}

#[test]
fn the_command_gets_its_own_terminal_with_the_callers_size() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(33, 101);
    let before = t.stty();
    let (st, screen) = t
        .spawn(&s, &["run", "-q", "--", "sh", "-c", "tty; stty size"])
        .finish();
    assert_eq!(st.code(), Some(0), "{screen}");
    let tty = screen
        .lines()
        .find(|l| l.starts_with("/dev/"))
        .unwrap_or_default();
    assert!(
        tty.trim_end()
            .strip_prefix("/dev/pts/")
            .is_some_and(|n| n.trim_end().chars().all(|c| c.is_ascii_digit())),
        "not a pty name: {tty:?} in\n{screen}"
    );
    assert!(screen.contains("33 101"), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
}

#[test]
fn bash_accepts_input_resizes_and_the_terminal_is_restored() {
    if !sealed_host() {
        return;
    }
    if !require("/bin/bash", Path::new("/bin/bash").exists()) {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(33, 101);
    let before = t.stty();
    let mut run = t.spawn(
        &s,
        &["run", "-q", "--", "bash", "--norc", "--noprofile", "-i"],
    );
    run.type_in("echo $((6*7))-answer\r");
    run.expect("42-answer");
    run.type_in("stty size\r");
    run.expect("33 101");
    t.resize(50, 120);
    // The relay passes the new size on when the supervisor gets SIGWINCH; ask until it has.
    let start = Instant::now();
    while !run.text().contains("50 120") {
        assert!(start.elapsed() < TIMEOUT, "{}", run.text());
        run.type_in("stty size\r");
        for _ in 0..5 {
            run.pump(Duration::from_millis(50));
        }
    }
    run.type_in("exit 7\r");
    let (st, screen) = run.finish();
    assert_eq!(st.code(), Some(7), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
}

#[test]
fn ctrl_c_reaches_the_command_through_its_terminal() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    let mut run = t.spawn(
        &s,
        &[
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            "echo ready; sleep 60; echo slept",
        ],
    );
    run.expect("ready");
    let started = Instant::now();
    // Like a user: again until it ends (a first ^C can land before `sleep` exists, while the
    // shell defers it).
    while run.child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < TIMEOUT, "{}", run.text());
        run.type_in("\x03");
        for _ in 0..10 {
            run.pump(Duration::from_millis(50));
        }
    }
    let (st, screen) = run.finish();
    assert_eq!(st.code(), Some(130), "{screen}");
    assert!(!screen.contains("slept"), "{screen}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
}

#[test]
fn the_terminal_is_restored_when_the_command_is_killed() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    let (st, screen) = t
        .spawn(&s, &["run", "-q", "--", "sh", "-c", "kill -9 $$"])
        .finish();
    assert_eq!(st.code(), Some(137), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
    assert_eq!(last_bundle(&s)["run"]["failure"]["signal"], 9);
}

#[test]
fn sigterm_to_cofferdam_ends_the_command_restores_the_terminal_and_keeps_the_record() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    let mut run = t.spawn(&s, &["run", "-q", "--", "sh", "-c", "echo ready; sleep 60"]);
    run.expect("ready");
    // SAFETY: kill(2) on the child this test started.
    let r = unsafe {
        libc::kill(
            libc::pid_t::try_from(run.child.id()).unwrap(),
            libc::SIGTERM,
        )
    };
    assert_eq!(r, 0);
    let (st, screen) = run.finish();
    // A cancellation (DESIGN.md §7): forwarded as SIGTERM, recorded as `cancelled`.
    assert_eq!(st.code(), Some(130), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
    let failure = &last_bundle(&s)["run"]["failure"];
    assert_eq!(failure["kind"], "cancelled", "{failure}");
    assert_eq!(failure["signal"], 15);
}

#[test]
fn setup_and_exec_failures_leave_the_terminal_as_it_was() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    // A mount target beneath a regular file fails in the sandbox's setup.
    let src = tempfile::tempdir().unwrap();
    let spec = format!("{}:/etc/hostname/under-a-file", src.path().display());
    let (st, screen) = t
        .spawn(&s, &["run", "-q", "--mount", &spec, "--", "true"])
        .finish();
    assert_eq!(st.code(), Some(125), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
    // The exec fails after the command's terminal was set up and the caller's made raw.
    let (st, screen) = t
        .spawn(&s, &["run", "-q", "--", "/nonexistent/command"])
        .finish();
    assert_eq!(st.code(), Some(127), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
}

#[test]
fn a_command_that_stops_itself_suspends_cofferdam_with_the_terminal_given_back() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    let mut run = t.spawn(
        &s,
        &[
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            "echo ready; kill -STOP $$; echo continued",
        ],
    );
    run.expect("ready");
    let pid = run.child.id();
    let start = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        if stat
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('T')
        {
            break;
        }
        assert!(start.elapsed() < TIMEOUT, "cofferdam did not stop");
        run.pump(Duration::from_millis(20));
    }
    assert_eq!(
        t.stty(),
        before,
        "the terminal is not given back while stopped"
    );
    // What the shell's `fg` does: continue the job's process group.
    // SAFETY: kill(2) on the process group of the child this test started (it is its leader).
    let r = unsafe { libc::kill(-libc::pid_t::try_from(pid).unwrap(), libc::SIGCONT) };
    assert_eq!(r, 0);
    run.expect("continued");
    let (st, screen) = run.finish();
    assert_eq!(st.code(), Some(0), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
}

/// TIOCSTI on every terminal descriptor the command can reach: stdin, stdout, stderr and
/// /dev/tty (all its own pty).
const TIOCSTI: &str = r#"
import fcntl, os, termios
for name, fd in (("0", 0), ("1", 1), ("2", 2), ("tty", os.open("/dev/tty", os.O_RDWR))):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"X")
        print(f"tiocsti-{name}=injected")
    except OSError as e:
        print(f"tiocsti-{name}=errno{e.errno}")
"#;

#[test]
fn tiocsti_inside_does_not_reach_the_callers_terminal() {
    if !sealed_host() {
        return;
    }
    if !require("/usr/bin/python3", Path::new("/usr/bin/python3").exists()) {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    let (st, screen) = t
        .spawn(&s, &["run", "-q", "--", "/usr/bin/python3", "-c", TIOCSTI])
        .finish();
    assert_eq!(st.code(), Some(0), "{screen}");
    assert_eq!(screen.matches("tiocsti-").count(), 4, "{screen}");
    assert!(!screen.contains("=injected"), "{screen}");
    // Nothing waits in the caller's input queue, and nothing was typed into it.
    assert_eq!(t.pending_input(), 0);
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
}

#[test]
fn without_a_terminal_stdin_and_stdout_are_pipes_and_nothing_is_captured() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--", "cat"])
        .write_stdin("hi\n")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    let b = last_bundle(&s);
    assert_eq!(b["run"]["output"], serde_json::json!({}));
    assert!(
        !b["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["kind"] == "capture")
    );
    // SIGPIPE is the command's default again (the init is a Rust program that ignores it).
    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c", "yes | head -n 1"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "y\n");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("Broken pipe"),
        "{out:?}"
    );
}

fn capture_of(b: &Value, stream: &str) -> (String, u64, bool) {
    let c = &b["run"]["output"][stream];
    (
        c["path"].as_str().unwrap_or_default().to_owned(),
        c["total_bytes"].as_u64().unwrap(),
        c["truncated"].as_bool().unwrap(),
    )
}

#[test]
fn capture_saves_stdout_and_stderr_and_the_bundle_points_at_them() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args([
            "run",
            "-q",
            "--capture",
            "--",
            "sh",
            "-c",
            "printf 'to stdout\\n'; printf 'to stderr!' >&2; exit 4",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    // Still shown as it happens.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "to stdout\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to stderr!"));
    let b = last_bundle(&s);
    let (path, total, truncated) = capture_of(&b, "stdout");
    assert!(path.ends_with("/output/stdout"), "{path}");
    assert_eq!((total, truncated), (10, false));
    assert_eq!(std::fs::read(&path).unwrap(), b"to stdout\n");
    let (epath, etotal, etruncated) = capture_of(&b, "stderr");
    assert!(epath.ends_with("/output/stderr"), "{epath}");
    assert_eq!((etotal, etruncated), (10, false));
    assert_eq!(std::fs::read(&epath).unwrap(), b"to stderr!");
    let captures: Vec<&str> = b["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "capture")
        .map(|a| a["path"].as_str().unwrap())
        .collect();
    assert_eq!(captures, vec![path.as_str(), epath.as_str()]);
    // Capture files are private to the user.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // The bundle still reads as a valid schema-4 bundle.
    let bundle_file = Path::new(&path)
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("run-bundle.json");
    s.cmd()
        .args(["bundle", "verify"])
        .arg(&bundle_file)
        .assert()
        .success();
}

#[test]
fn output_past_the_capture_limit_is_counted_and_marked_truncated() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let size: u64 = 17 * 1024 * 1024 + 123;
    let out = s
        .cmd()
        .args([
            "run",
            "-q",
            "--capture",
            "--",
            "head",
            "-c",
            &size.to_string(),
            "/dev/zero",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{:?}", out.status);
    assert_eq!(
        out.stdout.len() as u64,
        size,
        "the output was not all passed on"
    );
    let b = last_bundle(&s);
    let (path, total, truncated) = capture_of(&b, "stdout");
    assert_eq!((total, truncated), (size, true));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 * 1024 * 1024);
    let (_, etotal, etruncated) = capture_of(&b, "stderr");
    assert_eq!((etotal, etruncated), (0, false));
}

#[test]
fn capture_on_a_terminal_keeps_the_transcript() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    let (st, screen) = t
        .spawn(
            &s,
            &[
                "run",
                "-q",
                "--capture",
                "--",
                "sh",
                "-c",
                "echo on-the-terminal; echo also-stderr >&2",
            ],
        )
        .finish();
    assert_eq!(st.code(), Some(0), "{screen}");
    assert!(screen.contains("on-the-terminal"), "{screen}");
    assert_eq!(t.stty(), before, "the caller's terminal was not restored");
    let b = last_bundle(&s);
    let (path, total, truncated) = capture_of(&b, "stdout");
    assert!(path.ends_with("/output/terminal"), "{path}");
    assert!(b["run"]["output"].get("stderr").is_none(), "{b}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, "on-the-terminal\r\nalso-stderr\r\n");
    assert_eq!((total, truncated), (text.len() as u64, false));
}

/// `program` with the sandbox's clean environment, as a plain `std` command (whose stdout
/// and stderr can be files).
fn plain(s: &Sandbox, program: &str) -> std::process::Command {
    let mut c = std::process::Command::new(program);
    c.env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path());
    c
}

#[test]
fn output_redirected_to_a_file_has_its_bytes_and_stderr_stays_apart() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let dir = tempfile::tempdir().unwrap();
    // `cofferdam run -q -- printf 'a\nb\n' > f`: no CR, nothing else.
    let f = dir.path().join("f");
    let st = plain(&s, env!("CARGO_BIN_EXE_cofferdam"))
        .args(["run", "-q", "--", "printf", "a\\nb\\n"])
        .stdout(File::create(&f).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(std::fs::read(&f).unwrap(), b"a\nb\n");
    // stderr is its own stream: `2>/dev/null` drops it, a pipe gets only it.
    let script = "echo out; echo err >&2; echo out2";
    let out = plain(&s, env!("CARGO_BIN_EXE_cofferdam"))
        .args(["run", "-q", "--", "sh", "-c", script])
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\nout2\n");
    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\nout2\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    // `2>&1`: stdout and stderr interleaved exactly as the command wrote them.
    let lines = "i=0; while [ $i -lt 300 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done";
    let bare = plain(&s, "sh")
        .args(["-c", &format!("({lines}) 2>&1")])
        .output()
        .unwrap();
    let merged = plain(&s, "sh")
        .args(["-c", "\"$0\" run -q -- sh -c \"$1\" 2>&1"])
        .args([env!("CARGO_BIN_EXE_cofferdam"), lines])
        .output()
        .unwrap();
    assert!(
        bare.stdout.len() > 2000 && merged.stdout == bare.stdout,
        "{merged:?}"
    );
    // A few MB: to a file (spliced), to an O_APPEND file (copied), through stdin.
    let seq = std::process::Command::new("seq")
        .args(["1", "400000"])
        .output()
        .unwrap()
        .stdout;
    let g = dir.path().join("g");
    std::fs::write(&g, "head\n").unwrap();
    for (file, append) in [(&f, false), (&g, true)] {
        let out = std::fs::OpenOptions::new()
            .write(true)
            .truncate(!append)
            .append(append)
            .open(file)
            .unwrap();
        let st = plain(&s, env!("CARGO_BIN_EXE_cofferdam"))
            .args(["run", "-q", "--", "seq", "1", "400000"])
            .stdout(out)
            .status()
            .unwrap();
        assert!(st.success());
    }
    assert!(std::fs::read(&f).unwrap() == seq, "spliced output differs");
    assert!(
        std::fs::read(&g).unwrap() == [b"head\n".as_slice(), &seq].concat(),
        "appended output differs"
    );
    let out = s
        .cmd()
        .args(["run", "-q", "--", "cat"])
        .write_stdin(seq.clone())
        .output()
        .unwrap();
    assert!(out.stdout == seq, "stdin relayed whole");
}

#[test]
fn from_a_terminal_with_stdout_redirected_the_command_gets_pipes_and_the_terminal_is_untouched() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    let before = t.stty();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("out");
    let mut run = t.spawn_with(
        &s,
        &[
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            "echo ready >&2; read x; echo \"got=$x\"; tty; stty -g 2>&1 || true",
        ],
        File::create(&f).unwrap(),
    );
    run.expect("ready");
    // Typed at the caller's terminal, in its own (cooked) mode: it echoes, and the line
    // reaches the command through its stdin pipe.
    run.type_in("hello\n");
    let (st, screen) = run.finish();
    assert_eq!(st.code(), Some(0), "{screen}");
    let text = std::fs::read_to_string(&f).unwrap();
    assert!(text.starts_with("got=hello\nnot a tty\n"), "{text:?}");
    assert!(!text.contains('\r'), "{text:?}");
    assert!(
        screen.contains("hello"),
        "the caller's terminal echoed: {screen}"
    );
    assert_eq!(t.stty(), before, "the caller's terminal modes changed");
}

/// What the bundle's `close_fds` read back of descriptors 0-2.
fn close_fds_stdio(b: &Value) -> Value {
    b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["mechanism"] == "close_fds")
        .map(|c| c["details"]["stdio"].clone())
        .unwrap_or_default()
}

#[test]
fn tty_and_no_tty_override_the_choice() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // --tty from pipes: a terminal of the sandbox's, with its line endings.
    let out = s
        .cmd()
        .args(["run", "-q", "--tty", "--", "sh", "-c", "tty; echo a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("/dev/pts/") && text.ends_with("a\r\n"),
        "{text:?}"
    );
    // The init held /dev/null on 0-2 while the command got the terminal made inside.
    assert_eq!(
        close_fds_stdio(&last_bundle(&s)),
        serde_json::json!(["null", "null", "null"])
    );
    // The end of a stdin that is no terminal reaches the command as its terminal's EOF
    // character; a command that closes its terminal before it exits (cat) is not hung up
    // on its way out (it ends 0, not by SIGHUP).
    for _ in 0..20 {
        let out = s
            .cmd()
            .args(["run", "-q", "--tty", "--", "cat"])
            .write_stdin("hi\n")
            .timeout(TIMEOUT)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\r\nhi\r\n");
    }
    assert!(
        last_bundle(&s)["run"]["warnings"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no raw mode to enter without a terminal on stdin"
    );
    // --no-tty on a terminal: pipes, and the caller's terminal as it was.
    let t = Term::new(24, 80);
    let before = t.stty();
    let (st, screen) = t
        .spawn(
            &s,
            &["run", "-q", "--no-tty", "--", "sh", "-c", "tty; echo done"],
        )
        .finish();
    assert_eq!(st.code(), Some(0), "{screen}");
    assert!(
        screen.contains("not a tty") && screen.contains("done"),
        "{screen}"
    );
    assert_eq!(t.stty(), before);
    assert_eq!(
        close_fds_stdio(&last_bundle(&s)),
        serde_json::json!(["pipe", "pipe", "pipe"])
    );
    // Both at once is a usage error.
    let out = s
        .cmd()
        .args(["run", "--tty", "--no-tty", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn a_closed_reader_ends_the_command_by_sigpipe_and_unread_stdin_does_not_hold_the_run() {
    if !sealed_host() {
        return;
    }
    if !require("/bin/bash", Path::new("/bin/bash").exists()) {
        return;
    }
    let s = Sandbox::new();
    // `yes` outside would die of SIGPIPE once `head` is gone: so it does inside.
    let out = plain(&s, "bash")
        .args([
            "-c",
            "set -o pipefail; \"$COFFERDAM\" run -q -- yes | head -n 1; echo \"rc=$?\"",
        ])
        .env("COFFERDAM", env!("CARGO_BIN_EXE_cofferdam"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "y\nrc=141\n",
        "{out:?}"
    );
    // A stdin that never ends and is never read: the run ends with its command.
    let mut child = plain(&s, env!("CARGO_BIN_EXE_cofferdam"))
        .args(["run", "-q", "--", "true"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(start.elapsed() < TIMEOUT, "the run waited for its stdin");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success());
    drop(child.stdin.take());
}

#[test]
fn a_background_run_does_not_take_what_is_typed_at_the_terminal() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Term::new(24, 80);
    // A job-control shell on the terminal starts cofferdam in the background, its stdin
    // the terminal: reading it would steal the foreground's input (and stop cofferdam by
    // SIGTTIN). The command never reads it; the run must end, the typed line stay queued.
    let mut sh = plain(&s, "sh");
    sh.args([
        "-c",
        "set -m; \"$0\" run -q -- sh -c 'sleep 1; echo done' & wait $!; echo \"rc=$?\"",
        env!("CARGO_BIN_EXE_cofferdam"),
    ])
    .stdin(t.slave.try_clone().unwrap())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    // SAFETY: setsid and ioctl are async-signal-safe; the child makes the terminal on fd 0
    // its controlling terminal before exec.
    unsafe {
        sh.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = sh.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    (&t.master).write_all(b"typed\n").unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            panic!("the background run did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "done\nrc=0\n",
        "{out:?}"
    );
    assert_eq!(
        t.pending_input(),
        6,
        "the typed line is still the terminal's"
    );
}

/// `status --review` and `diff` taller than the terminal go through `$PAGER`; short output,
/// `--no-pager`, `PAGER=` / `PAGER=cat`, `--json` and a pipe print directly.
#[test]
fn long_review_output_goes_through_the_pager_on_a_terminal_only() {
    let s = Sandbox::new();
    let job =
        crate::review_scale::run_job(&s, "scoped", "for i in $(seq 1 60); do echo $i > f$i; done");
    // The pager records what it was given and says it ran.
    let pager = s.home.path().join("pager.sh");
    std::fs::write(&pager, "#!/bin/sh\ncat > \"$0.out\"\necho PAGER-RAN\n").unwrap();
    std::fs::set_permissions(&pager, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let record = s.home.path().join("pager.sh.out");
    let pager = pager.to_str().unwrap();
    let term = Term::new(24, 80);
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let _ = std::fs::remove_file(&record);
        let (st, shown) = term
            .spawn_env(&s, args, term.slave.try_clone().unwrap(), env)
            .finish();
        assert!(st.success(), "{args:?}: {shown}");
        (shown, std::fs::read_to_string(&record).ok())
    };

    for args in [
        &["status", "--review", job.as_str()][..],
        &["diff", job.as_str()],
        &["diff", "--stat", job.as_str()],
    ] {
        let (shown, paged) = run(args, &[("PAGER", pager)]);
        assert!(shown.contains("PAGER-RAN"), "{args:?}: {shown}");
        let paged = paged.unwrap_or_else(|| panic!("{args:?}: the pager got nothing"));
        assert!(paged.contains("f17"), "{args:?}: {paged}");
        assert!(!shown.contains("f17"), "{args:?}: printed too: {shown}");
    }
    // Short output is printed directly.
    let (shown, paged) = run(&["status", job.as_str()], &[("PAGER", pager)]);
    assert!(paged.is_none() && shown.contains("changes   60"), "{shown}");
    // Turned off.
    for (args, env) in [
        (
            &["status", "--review", "--no-pager", job.as_str()][..],
            pager,
        ),
        (&["diff", "--no-pager", job.as_str()], pager),
        (&["status", "--review", job.as_str()], ""),
        (&["diff", job.as_str()], "cat"),
        (&["--json", "diff", job.as_str()], pager),
    ] {
        let (shown, paged) = run(args, &[("PAGER", env)]);
        assert!(paged.is_none(), "{args:?} PAGER={env}: paged");
        assert!(
            shown.contains("f17") && !shown.contains("PAGER-RAN"),
            "{shown}"
        );
    }
    // Piped: printed directly.
    let _ = std::fs::remove_file(&record);
    let out = s
        .cmd()
        .env("PAGER", pager)
        .args(["status", "--review", &job])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("f17"),
        "{out:?}"
    );
    assert!(!record.exists());
}

/// Progress of long work (the copy of the scoped tier, the seal) is drawn on stderr when it
/// is a terminal, and never on a pipe or with `-q`. `COFFERDAM_TEST_PROGRESS_AT_ONCE` (debug
/// builds) draws it at once instead of after a quarter second, so a small job shows it.
#[test]
fn progress_shows_on_a_terminal_only() {
    if !require("Landlock", landlock_abi_independently() > 0) {
        return;
    }
    let s = Sandbox::new();
    for i in 0..20 {
        s.write(&format!("f{i}"), "x\n");
    }
    let at_once = [("COFFERDAM_TEST_PROGRESS_AT_ONCE", "1")];
    let term = Term::new(24, 80);
    let args = ["run", "--tier", "scoped", "--", "sh", "-c", "echo new > n"];
    let (st, shown) = term
        .spawn_env(&s, &args, term.slave.try_clone().unwrap(), &at_once)
        .finish();
    assert!(st.success(), "{shown}");
    assert!(shown.contains("copying the workdir"), "{shown}");
    assert!(shown.contains("sealing the stage"), "{shown}");

    let (st, shown) = term
        .spawn_env(
            &s,
            &["run", "-q", "--tier", "scoped", "--", "true"],
            term.slave.try_clone().unwrap(),
            &at_once,
        )
        .finish();
    assert!(st.success(), "{shown}");
    assert!(!shown.contains("copying the workdir"), "-q: {shown}");

    let out = s
        .cmd()
        .env("COFFERDAM_TEST_PROGRESS_AT_ONCE", "1")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("copying the workdir") && !err.contains("sealing the stage"),
        "on a pipe: {err}"
    );
}
