//! A caller whose stdout is a pipe nobody reads for a while: the supervisor keeps serving
//! its timeout (and signals and the status stream) while that pipe is full, and once the
//! caller drains it every byte the command wrote arrives and the run ends. So on the three
//! ways output passes: the pipes (spliced), `--capture` (read, saved and written) and the
//! command's terminal (`--tty`).

use crate::common::*;
use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// More than the sandbox's pipe (1 MiB) and the caller's (64 KiB) hold together.
const BYTES: usize = 4 * 1024 * 1024;

fn sealed_host() -> bool {
    require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0)
}

thread_local! {
    /// Whether the workload (its `sh -c`, marked by its `sleep` argument) was still alive
    /// just before the reader came back.
    static LIVE_BEFORE_READ: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn workload_alive(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
            c.starts_with(b"sh\0-c\0") && c.windows(marker.len()).any(|w| w == marker.as_bytes())
        })
    })
}

fn run_unread(
    s: &Sandbox,
    args: &[&str],
    unread: Duration,
    term_after: Option<Duration>,
) -> (Vec<u8>, std::process::ExitStatus) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cofferdam"))
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    if let Some(t) = term_after {
        std::thread::sleep(t);
        let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    }
    std::thread::sleep(unread);
    if let Some(marker) = args.last().and_then(|a| a.rsplit("; ").next()) {
        LIVE_BEFORE_READ.with(|l| l.set(workload_alive(marker)));
    }
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let start = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the run did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (out, st)
}

#[test]
fn output_to_a_slow_reader_arrives_whole_and_the_run_ends() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let script = format!("head -c {BYTES} /dev/zero");
    let (out, st) = run_unread(
        &s,
        &["run", "-q", "--", "sh", "-c", &script],
        Duration::from_secs(2),
        None,
    );
    assert_eq!(out.len(), BYTES, "output lost");
    assert!(st.success(), "{st:?}");
}

/// The stopped run's bundle names `kind`, and the workload was gone before the reader came.
fn assert_stopped_unread(s: &Sandbox, out: &[u8], kind: &str) {
    assert!(out.len() < BYTES, "{} bytes", out.len());
    let b = s.cmd().args(["status", "--json", "last"]).output().unwrap();
    let b = json_of(&b);
    assert_eq!(b["run"]["failure"]["kind"], kind, "{b}");
    assert!(
        !LIVE_BEFORE_READ.with(|l| l.get()),
        "the {kind} was served only once the reader came back"
    );
}

#[test]
fn the_timeout_holds_while_the_callers_stdout_is_full() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // The command blocks writing into the full pipes; nobody reads for 6 s. The 2 s timeout
    // must end it then, not once the reader comes back.
    let script = format!("head -c {BYTES} /dev/zero; sleep 59.25");
    let (out, st) = run_unread(
        &s,
        &["run", "-q", "--timeout", "2s", "--", "sh", "-c", &script],
        Duration::from_secs(6),
        None,
    );
    assert_eq!(st.code(), Some(124), "{st:?}");
    assert_stopped_unread(&s, &out, "timeout");
}

#[test]
fn a_sigterm_is_served_while_the_callers_stdout_is_full() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let script = format!("head -c {BYTES} /dev/zero; sleep 58.75");
    let (out, st) = run_unread(
        &s,
        &["run", "-q", "--", "sh", "-c", &script],
        Duration::from_secs(4),
        Some(Duration::from_secs(2)),
    );
    assert!(!st.success(), "{st:?}");
    assert_stopped_unread(&s, &out, "cancelled");
}

/// The ways output reaches the caller other than the spliced pipes.
const COPIED: [(&str, &str); 2] = [("--capture", "capture"), ("--tty", "terminal")];

#[test]
fn copied_output_to_a_slow_reader_arrives_whole_and_the_run_ends() {
    if !sealed_host() {
        return;
    }
    for (flag, what) in COPIED {
        let s = Sandbox::new();
        let script = format!("head -c {BYTES} /dev/zero");
        let (out, st) = run_unread(
            &s,
            &["run", "-q", flag, "--", "sh", "-c", &script],
            Duration::from_secs(2),
            None,
        );
        assert_eq!(out.len(), BYTES, "{what}: output lost");
        assert!(st.success(), "{what}: {st:?}");
    }
}

#[test]
fn the_timeout_holds_while_the_callers_stdout_is_full_of_copied_output() {
    if !sealed_host() {
        return;
    }
    for ((flag, what), sleep) in COPIED.into_iter().zip(["57.25", "56.75"]) {
        let s = Sandbox::new();
        let script = format!("head -c {BYTES} /dev/zero; sleep {sleep}");
        let (out, st) = run_unread(
            &s,
            &[
                "run",
                "-q",
                flag,
                "--timeout",
                "2s",
                "--",
                "sh",
                "-c",
                &script,
            ],
            Duration::from_secs(6),
            None,
        );
        assert_eq!(st.code(), Some(124), "{what}: {st:?}");
        assert_stopped_unread(&s, &out, "timeout");
    }
}

#[test]
fn a_sigterm_is_served_while_the_callers_stdout_is_full_of_copied_output() {
    if !sealed_host() {
        return;
    }
    for ((flag, what), sleep) in COPIED.into_iter().zip(["55.25", "54.75"]) {
        let s = Sandbox::new();
        let script = format!("head -c {BYTES} /dev/zero; sleep {sleep}");
        let (out, st) = run_unread(
            &s,
            &["run", "-q", flag, "--", "sh", "-c", &script],
            Duration::from_secs(4),
            Some(Duration::from_secs(2)),
        );
        assert!(!st.success(), "{what}: {st:?}");
        assert_stopped_unread(&s, &out, "cancelled");
    }
}
