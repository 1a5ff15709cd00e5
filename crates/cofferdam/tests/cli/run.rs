//! `run`, `status` and `jobs` on the sealed tier: each invariant attempts the escape from
//! inside the sandbox and asserts both the denial and what the Run Bundle says.

use crate::common::*;
use serde_json::Value;
use std::path::Path;

/// The sealed tier needs user namespaces and Landlock; skip (or fail in CI) without them.
fn sealed_host() -> bool {
    require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0)
}

fn bundle_of(s: &Sandbox, job: &str) -> Value {
    let out = s.cmd().args(["status", "--json", job]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out)
}

fn last_bundle(s: &Sandbox) -> Value {
    bundle_of(s, "last")
}

/// Every regular file under `dir` with its bytes, for byte-for-byte comparisons.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            if ft.is_dir() {
                out.push((format!("{rel}/"), Vec::new()));
                stack.push(e.path());
            } else if ft.is_symlink() {
                out.push((
                    rel,
                    std::fs::read_link(e.path())
                        .unwrap()
                        .display()
                        .to_string()
                        .into_bytes(),
                ));
            } else {
                out.push((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn changes(b: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = b["filesystem"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

fn control_status(b: &Value, mechanism: &str) -> Vec<String> {
    b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["mechanism"] == mechanism)
        .map(|c| c["status"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn staged_run_leaves_the_host_unchanged_and_records_exactly_the_changes() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("b", "old b\n");
    s.write("keep", "keep\n");
    let before = snapshot(s.work.path());
    let out = s
        .cmd()
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "echo x > a; rm b; mkdir d; echo y > d/f; cat keep > /dev/null",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(snapshot(s.work.path()), before, "the host workdir changed");
    let b = last_bundle(&s);
    assert_eq!(
        changes(&b),
        vec![
            ("a".into(), "added".into()),
            ("b".into(), "deleted".into()),
            ("d".into(), "added".into()),
            ("d/f".into(), "added".into()),
        ]
    );
    assert_eq!(b["run"]["state"], "completed");
    assert_eq!(b["run"]["exit_code"], 0);
    assert_eq!(b["filesystem"]["state"], "staged");
    for field in [
        "filesystem_non_bypassable",
        "filesystem_read_non_bypassable",
        "filesystem_write_non_bypassable",
        "network_non_bypassable",
        "filesystem_changes_staged",
    ] {
        assert_eq!(b["safety"][field], true, "{field}");
    }
    assert_eq!(b["safety"]["host_process"], false);
    for m in [
        "userns",
        "pidns",
        "netns",
        "overlay",
        "pivot_root",
        "capabilities",
        "no_new_privs",
        "seccomp",
        "secrets_hidden",
    ] {
        assert_eq!(control_status(&b, m), vec!["enforced"], "{m}");
    }
    assert!(
        control_status(&b, "landlock")
            .iter()
            .all(|st| st == "enforced")
    );
    // The bundle on disk passes the strict reader and is private.
    let path = b["review_context"]["bundle_path"]
        .as_str()
        .unwrap()
        .to_owned();
    let ok = s.cmd().args(["bundle", "verify", &path]).output().unwrap();
    assert!(ok.status.success(), "{ok:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// The escape attempts: each line prints `denied:NAME` or `ESCAPED:NAME`.
const ESCAPES: &str = r#"
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "ESCAPED:$name"; else echo "denied:$name"; fi; }
try write-absolute sh -c "echo pwn > $OUTSIDE/absolute"
try write-via-symlink sh -c "echo pwn > ./out-link/symlink"
try write-proc-self-root sh -c "echo pwn > /proc/self/root$OUTSIDE/procself"
try write-proc-1-root sh -c "echo pwn > /proc/1/root$OUTSIDE/proc1"
try read-ssh cat "$HOSTHOME/.ssh/id_ed25519"
try read-aws cat "$HOSTHOME/.aws/credentials"
try read-store ls "$STORE/jobs"
try read-shadow sh -c "cat /etc/shadow | grep -q ."
try mount mount -t tmpfs none /mnt
try unshare unshare -U true
try mknod mknod ./null-dev c 1 3
try remount-rw mount -o remount,rw /usr
try signal-host kill -0 "$HOSTPID"
try see-host-pid test -e "/proc/$HOSTPID"
try sethostname hostname pwned
try write-usr sh -c "echo pwn > /usr/pwn"
"#;

/// Raw syscalls that seccomp must answer with EPERM (x86_64 numbers).
const SYSCALLS: &str = r#"
import ctypes, fcntl, os, termios
l = ctypes.CDLL(None, use_errno=True)
def sc(*a):
    r = l.syscall(*a)
    return 0 if r >= 0 else ctypes.get_errno()
res = {
  "ptrace": sc(101, 0, 0, 0, 0),
  "bpf": sc(321, 0, 0, 0),
  "io_uring_setup": sc(425, 1, 0),
  "keyctl": sc(250, 0, 0, 0, 0, 0),
  "perf_event_open": sc(298, 0, 0, -1, -1, 0),
  "unshare": sc(272, 0x10000000),
  "mount": sc(165, 0, 0, 0, 0, 0),
}
try:
    fd = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    fcntl.ioctl(fd, termios.TIOCSTI, b"x")
    res["tiocsti"] = 0
except OSError as e:
    res["tiocsti"] = e.errno
for k, v in res.items():
    print(f"{k}={v}")
"#;

/// Started with stdin, stdout and stderr closed, the binary opens `/dev/null` on them before
/// anything else (its own entry, in place of std's): the command's writes to them succeed,
/// no record lands on those numbers, and the run ends as its command did.
#[test]
fn a_run_started_with_closed_standard_descriptors_works_and_keeps_its_records_whole() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let bin = assert_cmd::cargo::cargo_bin("cofferdam");
    // Every write must succeed for the chain to reach `exit 3`.
    let out = std::process::Command::new("sh")
        .args(["-c", "exec \"$0\" \"$@\" <&- >&- 2>&-"])
        .arg(&bin)
        .args(["run", "--", "sh", "-c"])
        .arg("echo x && echo y >&2 && cat && echo z > a && exit 3")
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    let b = last_bundle(&s);
    assert_eq!(changes(&b), [("a".to_owned(), "added".to_owned())]);
    let job = s
        .store
        .path()
        .join("jobs")
        .join(b["run"]["run_id"].as_str().unwrap());
    for line in std::fs::read_to_string(job.join("trace.jsonl"))
        .unwrap()
        .lines()
    {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    serde_json::from_slice::<Value>(&std::fs::read(job.join("job.json")).unwrap()).unwrap();
    let verify = s
        .cmd()
        .args(["bundle", "verify"])
        .arg(job.join("run-bundle.json"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

#[test]
fn escapes_from_inside_fail_and_the_host_is_unchanged() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), s.work.path().join("out-link")).unwrap();
    for (dir, file) in [(".ssh", "id_ed25519"), (".aws", "credentials")] {
        std::fs::create_dir_all(s.home.path().join(dir)).unwrap();
        std::fs::write(s.home.path().join(dir).join(file), "SECRET").unwrap();
    }
    // A first run so the job store has something to find.
    s.cmd().args(["run", "-q", "--", "true"]).assert().success();
    let mut host = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let hostname_before = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let work_before = snapshot(s.work.path());

    let out = s
        .cmd()
        .env("OUTSIDE", outside.path())
        .env("HOSTHOME", s.home.path())
        .env("STORE", s.store.path())
        .env("HOSTPID", host.id().to_string())
        .args([
            "--color", "never", "run", "--env", "OUTSIDE", "--env", "HOSTHOME", "--env", "STORE",
            "--env", "HOSTPID", "--", "sh", "-c", ESCAPES,
        ])
        .output()
        .unwrap();
    host.kill().unwrap();
    host.wait().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let escaped: Vec<&str> = text.lines().filter(|l| l.starts_with("ESCAPED:")).collect();
    assert!(escaped.is_empty(), "escapes succeeded: {escaped:?}\n{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("denied:")).count(),
        16,
        "{text}"
    );

    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "a write landed outside"
    );
    assert_eq!(
        snapshot(s.work.path()),
        work_before,
        "the host workdir changed"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        hostname_before
    );
    let b = last_bundle(&s);
    assert_eq!(b["safety"]["filesystem_non_bypassable"], true);
    assert_eq!(control_status(&b, "seccomp"), vec!["enforced"]);
    // Only the escape attempts' own traces may be staged (mknod's target is refused).
    assert!(changes(&b).is_empty(), "{:?}", changes(&b));
}

#[test]
fn seccomp_answers_eperm_inside() {
    if !sealed_host() || !cfg!(target_arch = "x86_64") {
        return;
    }
    if !require("/usr/bin/python3", Path::new("/usr/bin/python3").exists()) {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--", "/usr/bin/python3", "-c", SYSCALLS])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for name in [
        "ptrace",
        "bpf",
        "io_uring_setup",
        "keyctl",
        "perf_event_open",
        "unshare",
        "mount",
        "tiocsti",
    ] {
        assert!(
            text.contains(&format!("{name}=1\n")),
            "{name} not EPERM:\n{text}"
        );
    }
}

#[test]
fn inside_has_no_capabilities_no_new_privs_and_only_its_own_processes() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c", "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; ls /proc | grep -c '^[0-9]'"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("CapBnd:\t0000000000000000"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
    let procs: u32 = text.lines().last().unwrap().trim().parse().unwrap();
    assert!(
        procs <= 6,
        "sees {procs} processes: host pids leak into /proc"
    );
}

#[test]
fn daemonized_processes_do_not_outlive_the_run() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let marker = "31.4159265";
    s.cmd()
        .args([
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            &format!("setsid sleep {marker} </dev/null >/dev/null 2>&1 & sleep 0.2"),
        ])
        .assert()
        .success();
    std::thread::sleep(std::time::Duration::from_millis(200));
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline);
            assert!(
                !cmdline.contains(marker),
                "a daemon outlived the run: pid {:?}",
                e.file_name()
            );
        }
    }
}

#[test]
fn host_environment_values_reach_neither_the_sandbox_nor_the_bundle() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .env("SECRET_TOKEN", "hunter2-not-projected")
        .env("PASSED_TOKEN", "visible-by-request")
        .args(["run", "--env", "PASSED_TOKEN", "--", "env"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("PASSED_TOKEN=visible-by-request"), "{text}");
    assert!(text.contains("COFFERDAM_RUN_ID=run-"), "{text}");
    let b = last_bundle(&s);
    let raw = serde_json::to_string(&b).unwrap();
    assert!(
        !raw.contains("visible-by-request") && !raw.contains("hunter2"),
        "a value reached the bundle"
    );
    let keys: Vec<&str> = b["environment"]["projected_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"PASSED_TOKEN") && !keys.contains(&"SECRET_TOKEN"),
        "{keys:?}"
    );
    assert_eq!(b["environment"]["inherits_host"], false);
}

/// `--env NAME=VALUE` sets the value inside; the bundle and the scope report keep the name
/// (as injected, credited to the flag) and never the value; a reserved name is refused
/// without echoing the value.
#[test]
fn env_name_value_sets_a_value_that_no_record_keeps() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .env("SET_TOKEN", "host-value-not-wanted")
        .args([
            "run",
            "--env",
            "SET_TOKEN=set-by-flag-3141",
            "--",
            "sh",
            "-c",
            "printf %s \"$SET_TOKEN\" > got",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let b = last_bundle(&s);
    let raw = serde_json::to_string(&b).unwrap();
    assert!(
        !raw.contains("set-by-flag-3141"),
        "a value reached the bundle"
    );
    let injected: Vec<&str> = b["environment"]["runtime_injected_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(injected.contains(&"SET_TOKEN"), "{injected:?}");
    let job = b["run"]["run_id"].as_str().unwrap().to_owned();
    let diff = s.cmd().args(["diff", &job]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&diff.stdout).contains("set-by-flag-3141"),
        "{diff:?}"
    );

    let scope = s
        .cmd()
        .args(["--json", "scope", "--env", "SET_TOKEN=set-by-flag-3141"])
        .output()
        .unwrap();
    assert!(scope.status.success(), "{scope:?}");
    let text = String::from_utf8_lossy(&scope.stdout);
    assert!(
        !text.contains("set-by-flag-3141"),
        "a value reached the scope report"
    );
    assert!(text.contains("SET_TOKEN"), "{text}");

    let out = s
        .cmd()
        .args(["run", "--env", "HOME=secret-home-2718", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        err.contains("HOME") && !err.contains("secret-home-2718"),
        "{err}"
    );
}

/// A network namespace the host refuses at run time (the cached host facts said it
/// would be granted) stops the run before the command starts, naming the step, and the
/// bundle claims no network namespace.
#[test]
fn a_network_namespace_the_host_refuses_stops_the_run_before_the_command() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // In an enclosing user namespace: a first run records the host's facts (network
    // namespaces work); then `user.max_net_namespaces` 0 makes every network namespace
    // made below it fail (ENOSPC), and nothing else. The cached facts still say the
    // sealed tier is available (a stale cache may only make the setup fail, never weaken
    // it), so the second run gets as far as the init's network namespace.
    let script = "\"$0\" run -q --pids none -- true \
        && echo 0 > /proc/sys/user/max_net_namespaces \
        && exec \"$0\" run -q --pids none -- sh -c 'echo ran > ran'";
    let out = std::process::Command::new("unshare")
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(["-Ur", "sh", "-c", script])
        .arg(assert_cmd::cargo::cargo_bin("cofferdam"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CLONE_NEWNET"),
        "{out:?}"
    );
    let b = last_bundle(&s);
    assert_eq!(b["run"]["failure"]["kind"], "setup", "{b}");
    assert!(
        b["run"]["failure"]["step"]
            .as_str()
            .unwrap()
            .contains("CLONE_NEWNET"),
        "{b}"
    );
    assert_eq!(b["filesystem"]["changed_files"], 0, "{b}");
    assert!(!s.work.path().join("ran").exists());
    let netns: Vec<&Value> = b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["mechanism"] == "netns" && o["status"] == "enforced")
        .collect();
    assert!(netns.is_empty(), "no network namespace is claimed: {b}");
}

/// A lent target inside the read-only system view (here under /usr) cannot get a mount
/// point: the run stops before the command, and says why and what to do instead.
#[test]
fn a_lent_target_in_the_read_only_system_view_is_refused_with_the_fix() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let src = s.write("lent", "data\n");
    let out = s
        .cmd()
        .args(["run", "-q", "--mount"])
        .arg(format!("{}:/usr/cofferdam-test-lent:read", src.display()))
        .args(["--", "sh", "-c", "echo ran > ran"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mount target /usr/cofferdam-test-lent")
            && err.contains("read-only system view")
            && err.contains("/mnt"),
        "{err}"
    );
    assert!(!s.work.path().join("ran").exists());
    assert!(!Path::new("/usr/cofferdam-test-lent").exists());
}

#[test]
fn exit_codes_and_typed_failures() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let code = |args: &[&str]| s.cmd().arg("run").arg("-q").args(args).output().unwrap();
    let out = code(&["--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let b = last_bundle(&s);
    assert_eq!(
        (
            b["run"]["failure"]["kind"].as_str(),
            b["run"]["state"].as_str()
        ),
        (Some("process_exit"), Some("failed"))
    );

    let out = code(&["--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137));
    assert_eq!(last_bundle(&s)["run"]["failure"]["signal"], 9);

    let out = code(&["--", "no-such-command-here"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("command not found"),
        "{out:?}"
    );

    let out = code(&["--", "/etc/passwd"]);
    assert_eq!(out.status.code(), Some(126));

    // A missing source is a usage error before any job (`usage.rs`); a target the view
    // cannot hold fails in the sandbox's setup.
    let out = code(&["--mount", "/no/such/source/dir", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let src = tempfile::tempdir().unwrap();
    let spec = format!("{}:/etc/hostname/under-a-file", src.path().display());
    let out = code(&["--mount", &spec, "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let b = last_bundle(&s);
    assert_eq!(b["run"]["failure"]["kind"], "setup");
    assert!(
        b["run"]["failure"]["step"]
            .as_str()
            .unwrap()
            .contains("/etc/hostname/under-a-file"),
        "{b}"
    );

    let out = s.cmd().args(["run", "--"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no command is a usage error");
}

#[test]
fn read_only_paths_are_enforced_by_the_kernel() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    std::fs::create_dir(s.work.path().join("locked")).unwrap();
    s.write("locked/file", "original\n");
    let out = s
        .cmd()
        .args([
            "run",
            "-q",
            "--read-only",
            "locked",
            "--",
            "sh",
            "-c",
            "echo pwn > locked/file || echo refused; echo ok > free",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("refused"), "{out:?}");
    assert_eq!(
        changes(&last_bundle(&s)),
        vec![("free".into(), "added".into())]
    );
}

#[test]
fn a_read_only_path_is_skipped_only_when_absent_never_when_it_cannot_be_resolved() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // Absent: nothing to protect, the run goes on.
    let out = s
        .cmd()
        .args(["run", "-q", "--read-only", "none", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A symlink loop on the way: the protection cannot be placed, so the run is refused
    // (it used to be skipped in silence), naming the link and the fix.
    std::os::unix::fs::symlink("loop", s.work.path().join("loop")).unwrap();
    let out = s
        .cmd()
        .args([
            "run",
            "-q",
            "--read-only",
            "loop/x",
            "--",
            "sh",
            "-c",
            "echo ran > marker",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let b = last_bundle(&s);
    assert_eq!(b["run"]["failure"]["kind"], "setup", "{b}");
    let step = b["run"]["failure"]["step"].as_str().unwrap();
    let link = s.work.path().join("loop");
    assert!(
        step.starts_with("read-only path ")
            && step.contains(&format!(
                "`{}` is a symlink to `loop`, which loops",
                link.display()
            ))
            && step.contains("name a path without symlinks with --read-only"),
        "{step}"
    );
    assert!(changes(&b).is_empty(), "the command ran: {b}");
}

#[test]
fn a_home_ending_in_dotdot_is_folded_where_it_enters() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let home = std::fs::canonicalize(s.home.path()).unwrap();
    std::fs::create_dir(home.join("sub")).unwrap();
    let out = s
        .cmd()
        .env("HOME", home.join("sub/.."))
        .args([
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            "echo \"$HOME\"; test -d \"$HOME\"",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", home.display())
    );
    // Through a symlink the fold would name another directory than the kernel reaches.
    std::fs::create_dir_all(home.join("deep/er")).unwrap();
    std::os::unix::fs::symlink(home.join("deep/er"), home.join("link")).unwrap();
    let out = s
        .cmd()
        .env("HOME", home.join("link/.."))
        .args(["run", "-q", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "HOME={}/link/.. passes a symlink before `..`: it is {}/deep on this host",
            home.display(),
            home.display()
        )),
        "{err}"
    );
}

#[test]
fn status_review_and_jobs_describe_the_run() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.cmd()
        .args(["run", "-q", "--", "sh", "-c", "echo 1 > one; echo 2 > two"])
        .assert()
        .success();
    let review = s.cmd().args(["status", "--review"]).output().unwrap();
    let text = String::from_utf8_lossy(&review.stdout);
    for needle in [
        "Safety",
        "Changes (2)",
        "added",
        "one",
        "two",
        "seccomp",
        "next: cofferdam diff",
    ] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }
    let jobs = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
    assert_eq!(jobs.as_array().unwrap().len(), 1);
    assert_eq!(jobs[0]["state"], "staged");
    assert_eq!(jobs[0]["changed_files"], 2);
    let id = jobs[0]["id"].as_str().unwrap();
    let by_prefix = bundle_of(&s, &id[..12]);
    assert_eq!(by_prefix["run"]["run_id"], id);
    let missing = s.cmd().args(["status", "run-nope"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(4));
}

#[test]
fn demo_shows_a_staged_run_and_three_refused_escapes() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .env("TMPDIR", s.work.path())
        .arg("demo")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for needle in [
        "write outside the project: refused",
        "read ~/.ssh: not visible",
        "reach the network: no route",
        "untouched:   yes",
        "Changes (4)",
        "cofferdam apply last",
    ] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }
    let project = std::fs::read_dir(s.work.path())
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("cofferdam-demo-")
        })
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read_to_string(project.join("README.md")).unwrap(),
        "# demo project\n"
    );
    assert!(project.join("notes.txt").exists());
}

#[test]
fn what_this_build_cannot_honour_is_refused_or_warned_never_silent() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "--mount", "/usr/share:stage", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refusing to run"),
        "{out:?}"
    );
    let jobs = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
    assert!(
        jobs.as_array().unwrap().is_empty(),
        "a refused run created a job: {jobs}"
    );

    let out = s
        .cmd()
        .args([
            "run",
            "-q",
            "--timeout",
            "1h",
            "--io-bps",
            "1MiB",
            "--max-file-size",
            "1MiB",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let b = last_bundle(&s);
    assert_eq!(b["resources"]["requested"]["io_bytes_per_sec"], 1 << 20);
    // Enforced only through a cgroup io controller (v1 blkio as root here); elsewhere the
    // run goes on with a warning and a limitation.
    let io_enforced = b["resources"]["effective"]
        .get("io_bytes_per_sec")
        .is_some();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).contains("`io_bps` is not enforced"),
        !io_enforced,
        "{out:?}"
    );
    assert_eq!(b["resources"]["effective"]["timeout_ms"], 3_600_000);
    assert_eq!(b["resources"]["effective"]["max_file_size_bytes"], 1 << 20);
    let limitations = b["resources"]["limitations"].to_string();
    assert!(limitations.contains("io_bps"), "{limitations}");
}

#[test]
fn secrets_stay_hidden_when_the_workdir_is_home_and_they_are_symlinks() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let home = s.home.path();
    std::fs::create_dir_all(home.join("dotfiles/ssh")).unwrap();
    std::fs::write(home.join("dotfiles/ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::os::unix::fs::symlink("dotfiles/ssh", home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".aws/credentials"), "AWS SECRET").unwrap();
    std::fs::write(home.join("notes"), "fine to read").unwrap();
    let out = s
        .cmd()
        .current_dir(home)
        .args(["run", "-q", "--", "sh", "-c", "cat notes; cat ~/.ssh/id_ed25519; cat ~/dotfiles/ssh/id_ed25519; cat ~/.aws/credentials; true"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("fine to read"),
        "the workdir itself must stay readable: {text}"
    );
    assert!(
        !text.contains("PRIVATE KEY") && !text.contains("AWS SECRET"),
        "a secret leaked: {text}"
    );
    let b = json_of(
        &s.cmd()
            .current_dir(home)
            .args(["status", "--json"])
            .output()
            .unwrap(),
    );
    let masked = b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["mechanism"] == "secrets_hidden")
        .unwrap()["details"]["masked"]
        .to_string();
    assert!(
        masked.contains("dotfiles/ssh") && masked.contains(".aws"),
        "{masked}"
    );
}

#[test]
fn status_review_shows_applied_remaining_and_conflicts_it_would_hit_now() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.cmd()
        .args(["run", "-q", "--", "sh", "-c", "echo 1 > one; echo 2 > two"])
        .assert()
        .success();
    s.cmd()
        .args(["apply", "last", "--path", "one"])
        .assert()
        .success();
    s.write("two", "the user's own two\n");
    let text = String::from_utf8(
        s.cmd()
            .args(["--color", "never", "status", "--review"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for needle in [
        "Stage: 1 applied, 1 remaining",
        "applied      one",
        "remaining    two",
        "Conflicts if applied now (1)",
        "conflict     two",
    ] {
        assert!(text.contains(needle), "`{needle}` missing:\n{text}");
    }
    let v = bundle_of(&s, "last");
    let stage = &v["review_context"]["stage"];
    assert_eq!(stage["applied"], serde_json::json!(["one"]));
    assert_eq!(stage["remaining"], serde_json::json!(["two"]));
    assert_eq!(stage["conflicts_now"][0]["path"], "two");
    let out = s.cmd().args(["apply", "last"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "the review predicted the refusal: {out:?}"
    );
}

#[test]
fn a_secret_lent_on_purpose_is_visible_and_the_bundle_says_the_read_boundary_is_partial() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    std::fs::create_dir_all(s.home.path().join(".aws")).unwrap();
    std::fs::write(s.home.path().join(".aws/credentials"), "LENT").unwrap();
    // Lent at another target, a plain --mount is refused: a secret is lent only by name.
    let lend = format!("{}:/creds:read", s.home.path().join(".aws").display());
    let out = s
        .cmd()
        .args(["run", "-q", "--mount", &lend, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let creds = s.home.path().join(".aws/credentials").display().to_string();
    let out = s
        .cmd()
        .args(["run", "-q", "--lend-secret", "~/.aws", "--", "cat", &creds])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "LENT");
    let b = last_bundle(&s);
    assert_eq!(control_status(&b, "secrets_hidden"), vec!["partial"]);
    let row = b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["mechanism"] == "secrets_hidden")
        .unwrap()
        .clone();
    assert!(
        row["reason"]
            .as_str()
            .unwrap_or("")
            .contains("--lend-secret"),
        "{row}"
    );
    assert_eq!(b["safety"]["filesystem_read_non_bypassable"], false);
    assert_eq!(b["safety"]["filesystem_non_bypassable"], false);
}

/// The sandbox inits whose working directory is `dir` (the init starts in the caller's):
/// a fork of the supervisor names itself `cofferdam-init` in its command line; an exec'd
/// one (a supervisor with other threads) has the init argument.
fn inits_in(dir: &Path) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let is_init = cmdline
            .split(|&b| b == 0)
            .any(|a| a == b"__cofferdam-sandbox-init" || a == b"cofferdam-init");
        if is_init && std::fs::read_link(entry.path().join("cwd")).ok().as_deref() == Some(dir) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn the_init_shows_none_of_the_callers_command_line_or_environment() {
    // The init is a fork of the supervisor (no exec): it overwrites the strings of the
    // supervisor's arguments and environment, which its /proc files (and pid 1's, forked
    // from it) would otherwise show to anyone who can read them.
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let work = std::fs::canonicalize(s.work.path()).unwrap();
    let marker = "cofferdam-test-marker-5c1f";
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cofferdam"))
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("MARKER_VALUE", marker)
        .current_dir(s.work.path())
        .args(["run", "-q", "--", "sh", "-c"])
        .arg(format!("sleep 30 # {marker}"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut inits = inits_in(&work);
    while inits.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        inits = inits_in(&work);
    }
    let found = inits.len();
    let proc_file = |pid: u32, name: &str| std::fs::read(format!("/proc/{pid}/{name}"));
    let shown: Vec<(String, Vec<u8>)> = inits
        .iter()
        .flat_map(|&pid| {
            ["cmdline", "environ"]
                .into_iter()
                .filter_map(move |n| Some((format!("{pid}/{n}"), proc_file(pid, n).ok()?)))
        })
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    // The init, and pid 1 (forked from it, with the same strings).
    assert!(found >= 1, "the run's init is listed");
    assert!(
        shown.iter().any(|(n, _)| n.ends_with("cmdline")),
        "its command line is readable: {shown:?}"
    );
    for (name, bytes) in &shown {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains(marker),
            "{name} shows the caller's: {text:?}"
        );
        assert!(
            !text.contains("sleep 30"),
            "{name} shows the command: {text:?}"
        );
    }
}

#[test]
fn a_setup_that_fails_after_the_init_started_leaves_no_init_behind() {
    // The init starts before the job exists (its start overlaps the job's creation); a job
    // that cannot be created must take it down, and create nothing.
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // A stage whose parent is missing passes the usage checks and fails at its creation
    // (a non-empty one is refused before the init starts: `usage.rs`).
    let parent = s.home.path().join("no-parent");
    let stage = parent.join("stage");
    let out = s
        .cmd()
        .args(["run", "--stage"])
        .arg(&stage)
        .args(["--", "sh", "-c", "echo ran > marker"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot create") && err.contains("No such file"),
        "the refusal names the cause: {err}"
    );
    let work = std::fs::canonicalize(s.work.path()).unwrap();
    assert_eq!(
        inits_in(&work),
        Vec::<u32>::new(),
        "no init outlives the refusal"
    );
    assert!(!work.join("marker").exists());
    let jobs = s.store.path().join("jobs");
    let listed: Vec<_> = std::fs::read_dir(&jobs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(listed.is_empty(), "no job was made: {listed:?}");
    assert!(!parent.exists(), "nothing was created for the stage");
}

/// Pages of `file` not yet written back, by cachestat(2) (Linux 6.5+); `None` without it.
fn dirty_pages(file: &std::fs::File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // The number of cachestat(2) on every architecture (the unified table); libc lacks it.
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: 0, len: 0 };
    let mut stat = Stat::default();
    // SAFETY: the kernel reads `range` and writes `stat`, both live and laid out as its
    // struct cachestat_range and struct cachestat.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0,
        )
    };
    (rc == 0).then_some(stat.nr_dirty + stat.nr_writeback)
}

#[test]
fn the_end_of_a_run_does_not_flush_the_stage_filesystem() {
    // The overlay is volatile: its unmount at the end of the run would otherwise sync the
    // whole filesystem holding the stage, every program's dirty pages on it.
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let work = std::fs::canonicalize(s.work.path()).unwrap();
    // Other tests flush this filesystem now and then (`apply` ends with a syncfs): a run
    // that flushed it would do so every time, so one attempt of five left clean is proof.
    let mut seen = Vec::new();
    for attempt in 0..5 {
        let big = s.store.path().join(format!("unrelated-{attempt}.bin"));
        let chunk = vec![0x5au8; 1 << 20];
        let mut f = std::fs::File::create(&big).unwrap();
        for _ in 0..16 {
            std::io::Write::write_all(&mut f, &chunk).unwrap();
        }
        let Some(before) = dirty_pages(&f) else {
            require("cachestat(2) (Linux 6.5+)", false);
            return;
        };
        let out = s
            .cmd()
            .args(["run", "--json", "--", "sh", "-c", "echo x > y; sync -f y"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        // The run does not wait for its init to unmount the overlay: wait here, so a sync
        // at the unmount would be seen.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !inits_in(&work).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(inits_in(&work), Vec::<u32>::new(), "the init ends promptly");
        let after = dirty_pages(&f).unwrap();
        std::fs::remove_file(&big).unwrap();
        if before > 0 && after == before {
            seen.clear();
            break;
        }
        seen.push((before, after));
    }
    if !seen.is_empty() && seen.iter().all(|(before, _)| *before == 0) {
        // The kernel wrote the files back before each run (a low dirty limit).
        println!("SKIP-HOST the files were written back before the runs");
        return;
    }
    assert!(
        seen.is_empty(),
        "every run flushed the filesystem holding the stage (dirty pages before, after): {seen:?}"
    );
    let b = last_bundle(&s);
    let overlay: Vec<&Value> = b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["mechanism"] == "overlay")
        .collect();
    assert_eq!(overlay.len(), 1, "{overlay:?}");
    assert_eq!(overlay[0]["details"]["volatile"], true);
    // The overlay's work directory, with the kernel's volatile mark, goes with the stage.
    let job = b["run"]["run_id"].as_str().unwrap().to_owned();
    let out = s.cmd().args(["drop", &job]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!s.store.path().join("jobs").join(&job).join("work").exists());
}
