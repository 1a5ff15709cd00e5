//! Resource limits and typed outcomes through the real binary: timeout, cancellation, a
//! killed supervisor, memory, pids, file size, stage size and /tmp size. Each test asserts
//! the exit code, `run.failure` and what `resources` says; timing only within generous
//! bounds. As root on a host with cgroup v1 controllers the cgroup must be used; elsewhere
//! the rlimit fallback and its limitation are asserted.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn sealed_host() -> bool {
    require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether cofferdam must use a cgroup v1 controller here: running as root with the
/// controller's v1 hierarchy mounted.
fn v1_as_root(controller: &str) -> bool {
    is_root()
        && std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.get(2) == Some(&"cgroup")
                    && f.get(3)
                        .is_some_and(|o| o.split(',').any(|c| c == controller))
            })
}

pub(crate) fn last_bundle(s: &Sandbox) -> Value {
    let out = s.cmd().args(["status", "--json", "last"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out)
}

fn trace_of(b: &Value) -> String {
    std::fs::read_to_string(b["run"]["event_stream_ref"].as_str().unwrap()).unwrap()
}

/// Processes whose command line contains `marker` (a unique argument of the workload).
pub(crate) fn processes_with(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(marker) && !cmd.contains("cofferdam") {
                out.push(format!("{name}: {cmd}"));
            }
        }
    }
    out
}

/// Wait up to `limit` for `cond`.
pub(crate) fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// `cofferdam ARGS` started in the background with the test's clean environment.
pub(crate) fn spawn(s: &Sandbox, args: &[&str]) -> Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("cofferdam"))
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `spawn`, then wait until the workload (`marker`) runs.
pub(crate) fn start(s: &Sandbox, args: &[&str], marker: &str) -> Child {
    let child = spawn(s, args);
    let started = wait_for(Duration::from_secs(20), || {
        !processes_with(marker).is_empty()
    });
    assert!(started, "the workload never started");
    child
}

/// Assert that no process with `marker` is left within `secs`.
pub(crate) fn assert_gone(marker: &str, secs: u64) {
    let gone = wait_for(Duration::from_secs(secs), || {
        processes_with(marker).is_empty()
    });
    assert!(gone, "left behind: {:?}", processes_with(marker));
}

/// `cofferdam run -q` with the test's clean environment.
fn run_q(s: &Sandbox) -> assert_cmd::Command {
    let mut c = s.cmd();
    c.args(["run", "-q"]);
    c
}

pub(crate) fn kill(child: &Child, sig: i32) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own unreaped child.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[test]
fn timeout_ends_the_run_with_124_and_kills_a_workload_that_ignores_sigterm() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let t = Instant::now();
    let out = run_q(&s)
        .args(["--timeout", "1s", "--", "sleep", "30"])
        .output()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let b = last_bundle(&s);
    assert_eq!(b["run"]["failure"]["kind"], "timeout", "{b}");
    assert_eq!(b["run"]["failure"]["limit"], "timeout_ms");
    assert_eq!(b["run"]["state"], "failed");
    assert_eq!(b["resources"]["effective"]["timeout_ms"], 1000);
    assert!(trace_of(&b).contains(r#""type":"limit_hit","limit":"timeout_ms""#));

    // SIGTERM ignored: the grace period ends in SIGKILL of the whole pid namespace.
    let out = run_q(&s)
        .args(["--timeout", "1s", "--", "sh", "-c"])
        .arg("trap '' TERM; sleep 3511 & sleep 3511; wait")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert_eq!(last_bundle(&s)["run"]["failure"]["kind"], "timeout");
    assert_gone("3511", 5);
}

#[test]
fn sigint_or_sigterm_to_cofferdam_cancels_with_130_and_leaves_nothing() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    for (sig, marker) in [(libc::SIGINT, "3512"), (libc::SIGTERM, "3513")] {
        let mut child = start(&s, &["run", "-q", "--", "sleep", marker], marker);
        kill(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "signal {sig}");
        let b = last_bundle(&s);
        assert_eq!(b["run"]["failure"]["kind"], "cancelled", "{b}");
        assert_eq!(b["run"]["state"], "cancelled");
        assert_gone(marker, 5);
    }
}

#[test]
fn memory_limit_ends_in_oom_under_a_cgroup_or_fails_the_allocation_under_rlimits() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--memory", "64MiB", "--", "awk"])
        .arg("BEGIN { s = \"x\"; while (length(s) < 512 * 1024 * 1024) s = s s; print length(s) }")
        .output()
        .unwrap();
    assert!(!out.status.success(), "512 MiB fit under 64 MiB: {out:?}");
    let b = last_bundle(&s);
    let r = &b["resources"];
    assert_eq!(r["requested"]["memory_bytes"], 64 << 20);
    let by_cgroup = r["mechanisms"].to_string().contains("memory: cgroup");
    if v1_as_root("memory") {
        assert!(
            by_cgroup,
            "root with a v1 memory hierarchy must use it: {r}"
        );
    }
    if by_cgroup {
        assert_eq!(b["run"]["failure"]["kind"], "oom", "{b}");
        assert_eq!(out.status.code(), Some(137));
        assert!(trace_of(&b).contains(r#""limit":"memory_bytes""#));
    } else {
        assert_eq!(b["run"]["failure"]["kind"], "process_exit", "{b}");
        let lim = r["limitations"].to_string();
        assert!(
            lim.contains("RLIMIT_DATA") && lim.contains("no cgroup"),
            "{r}"
        );
    }
    let left = std::fs::read_dir("/sys/fs/cgroup/memory")
        .map(|_| find_cgroups(Path::new("/sys/fs/cgroup/memory"), 4))
        .unwrap_or_default();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
}

/// `cofferdam-run-*` cgroup directories under `dir`, `depth` levels down.
fn find_cgroups(dir: &Path, depth: u32) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("cofferdam-run-") {
            // Another test's run may be live: only a finished run's cgroup is a leak.
            let procs = std::fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default();
            if procs.trim().is_empty() {
                out.push(e.path().display().to_string());
            }
        } else if depth > 0 {
            out.extend(find_cgroups(&e.path(), depth - 1));
        }
    }
    out
}

#[test]
fn a_fork_bomb_under_pids_is_contained_and_leaves_nothing() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--pids", "64", "--timeout", "5s", "--", "bash", "-c"])
        // Bounded, so a host where nothing enforces --pids (root on cgroup v2 without
        // delegation) is not flooded; the pids cgroup refuses well before 300.
        .arg("i=0; while [ $i -lt 300 ]; do sleep 3514 & i=$((i+1)); done; wait")
        .output()
        .unwrap();
    let b = last_bundle(&s);
    let kind = b["run"]["failure"]["kind"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        kind == "timeout" || kind == "limit",
        "{kind}: {}",
        b["run"]["failure"]
    );
    assert_ne!(out.status.code(), Some(0));
    if v1_as_root("pids") {
        assert!(
            b["resources"]["mechanisms"]
                .to_string()
                .contains("pids: cgroup v1 pids.max"),
            "{}",
            b["resources"]
        );
        assert!(trace_of(&b).contains(r#""limit":"pids""#), "no limit_hit");
    }
    assert_gone("3514", 5);
}

#[test]
fn a_write_past_max_file_size_ends_as_limit() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--max-file-size", "1MiB", "--", "dd"])
        .args(["if=/dev/zero", "of=big", "bs=1M", "count=10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 25), "{out:?}");
    let b = last_bundle(&s);
    let f = &b["run"]["failure"];
    assert_eq!(f["kind"], "limit", "{b}");
    assert_eq!(f["limit"], "max_file_size_bytes");
    assert_eq!(b["resources"]["effective"]["max_file_size_bytes"], 1 << 20);
    assert!(trace_of(&b).contains(r#""limit":"max_file_size_bytes""#));
}

#[test]
fn a_stage_past_stage_size_ends_as_limit_whether_the_poll_or_the_seal_sees_it() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // Still running: the poll stops it.
    let out = run_q(&s)
        .args(["--stage-size", "1MiB", "--timeout", "60s", "--", "sh", "-c"])
        .arg("dd if=/dev/zero of=big bs=1M count=10 2>/dev/null; sleep 3515")
        .output()
        .unwrap();
    let b = last_bundle(&s);
    assert_eq!(b["run"]["failure"]["kind"], "limit", "{b}");
    assert_eq!(b["run"]["failure"]["limit"], "stage_size_bytes");
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(b["resources"]["effective"]["stage_size_bytes"], 1 << 20);
    assert!(
        b["resources"]["limitations"].to_string().contains("poll"),
        "the poll's overshoot is a stated limitation"
    );
    // Gone before a poll: the check at seal fails the run, and the exit status says so
    // although the command itself exited 0 (`run … && apply` must not go on).
    let out = run_q(&s)
        .args(["--stage-size", "1MiB", "--", "dd"])
        .args(["if=/dev/zero", "of=big2", "bs=1M", "count=10"])
        .output()
        .unwrap();
    let b = last_bundle(&s);
    assert_eq!(b["run"]["failure"]["limit"], "stage_size_bytes", "{b}");
    assert_eq!(out.status.code(), Some(123), "{out:?}");
    // Under the cap: no failure.
    let out = run_q(&s)
        .args(["--stage-size", "1MiB", "--", "sh", "-c", "echo hi > small"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn tmp_size_caps_the_sandboxs_tmp() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--tmp-size", "1MiB", "--", "dd"])
        .args(["if=/dev/zero", "of=/tmp/big", "bs=1M", "count=10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No space left"),
        "{out:?}"
    );
    let b = last_bundle(&s);
    assert_eq!(b["resources"]["effective"]["tmp_size_bytes"], 1 << 20);
}

#[test]
fn kill_from_another_terminal_cancels_a_live_job_and_refuses_an_ended_one() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let mut child = start(&s, &["run", "-q", "--", "sleep", "3516"], "3516");
    let out = s.cmd().args(["kill", "last"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(last_bundle(&s)["run"]["failure"]["kind"], "cancelled");
    assert_gone("3516", 5);
    // Ended: nothing is signalled.
    let out = s.cmd().args(["kill", "last"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not running"));
}

/// Start `script` under `cofferdam run`, wait for `marker` to run, SIGKILL cofferdam, and
/// assert the sandbox died with it.
fn run_then_kill_the_supervisor(s: &Sandbox, script: &str, marker: &str) {
    let mut child = start(s, &["run", "-q", "--", "sh", "-c", script], marker);
    kill(&child, libc::SIGKILL);
    child.wait().unwrap();
    assert_gone(marker, 2);
}

#[test]
fn a_killed_supervisor_takes_the_sandbox_with_it_and_the_job_shows_interrupted() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    run_then_kill_the_supervisor(&s, "echo x > kept; sleep 3517", "3517");
    let out = s.cmd().args(["status", "--json", "last"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json_of(&out)["review_context"]["job_state"], "interrupted");
    assert!(
        s.work.path().join("kept").metadata().is_err(),
        "the stage leaked"
    );

    // `status --review` seals it on demand; the record says what is and is not known.
    let out = s
        .cmd()
        .args(["status", "--review", "last"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    assert_eq!(b["review_context"]["job_state"], "staged", "{b}");
    assert_eq!(b["run"]["failure"]["kind"], "signal");
    assert!(
        b["run"]["failure"].get("signal").is_none(),
        "unknown is absent"
    );
    let message = b["run"]["failure"]["message"].as_str().unwrap();
    assert!(message.contains("supervisor ended abruptly"), "{message}");
    assert_eq!(b["safety"]["filesystem_non_bypassable"], false);
    assert_eq!(b["filesystem"]["changes"][0]["path"], "kept");
    // …and its change applies.
    let out = s.cmd().args(["apply", "last"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("kept")).unwrap(),
        "x\n"
    );
}

/// Issue 21: an agent's notes outlive a supervisor killed mid-run. The control socket keeps
/// a journal in the job; the recovered seal puts what it kept in the bundle's `agentctl`
/// (no counters: they were not kept; a checkpoint asked for is reported not made) and the
/// review shows the note.
#[test]
fn notes_an_agent_left_survive_a_killed_supervisor() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    run_then_kill_the_supervisor(
        &s,
        "cofferdam ctl note 'half done: tests next' && cofferdam ctl checkpoint before \
         && echo noted > kept && sleep 3518",
        "3518",
    );
    let out = s
        .cmd()
        .args(["status", "--review", "--json", "last"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = json_of(&out);
    assert_eq!(r["agent_notes"][0]["text"], "half done: tests next", "{r}");
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let a = &b["agentctl"];
    assert_eq!(a["requests"].as_array().map(Vec::len), Some(2), "{a}");
    assert_eq!(a["requests"][1]["request"], "checkpoint", "{a}");
    assert!(
        a.get("counters").is_none(),
        "unknown counters are absent: {a}"
    );
    assert!(
        a["directives"][0]["directive"]
            .as_str()
            .unwrap_or("")
            .contains("not made"),
        "{a}"
    );
    let dir = std::fs::read_dir(s.store.path().join("jobs"))
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.path().join("agentctl.jsonl").exists());
    assert!(!dir, "the journal is gone once the bundle holds it");
}

#[test]
fn apply_seals_an_interrupted_job_itself() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    run_then_kill_the_supervisor(&s, "echo y > made; sleep 3518", "3518");
    let out = s.cmd().args(["apply", "last"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("made")).unwrap(),
        "y\n"
    );
}

#[test]
fn cpus_is_a_cgroup_quota_or_a_stated_limitation() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--cpus", "0.5", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = last_bundle(&s)["resources"].clone();
    if v1_as_root("cpu") {
        assert_eq!(r["effective"]["cpus"], 0.5, "{r}");
        assert!(
            r["mechanisms"].to_string().contains("cpu.cfs_quota_us"),
            "{r}"
        );
    } else if r["effective"].get("cpus").is_none() {
        assert!(r["limitations"].to_string().contains("cpus"), "{r}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("`cpus` is not enforced"),
            "{out:?}"
        );
    }
}

#[test]
fn cpu_time_ends_as_limit_by_sigxcpu() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--cpu-time", "1s", "--timeout", "60s", "--", "sh", "-c"])
        .arg("while :; do :; done")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 24), "{out:?}");
    let b = last_bundle(&s);
    assert_eq!(b["run"]["failure"]["kind"], "limit", "{b}");
    assert_eq!(b["run"]["failure"]["limit"], "cpu_time_ms");
    assert_eq!(b["resources"]["effective"]["cpu_time_ms"], 1000);
}

/// The run's observation of rlimit `name` (`RLIMIT_NPROC`), if any.
fn rlimit_observation(b: &Value, name: &str) -> Option<Value> {
    b["executor_observations"]["controls"]
        .as_array()?
        .iter()
        .find(|o| o["mechanism"] == "rlimit" && o["details"]["resource"] == name)
        .cloned()
}

#[test]
fn without_flags_the_default_pids_limit_holds_is_marked_default_and_none_removes_it() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--", "sh", "-c", "grep processes /proc/self/limits"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let b = last_bundle(&s);
    let r = &b["resources"];
    assert_eq!(r["requested"]["pids"], 4096, "{r}");
    let mechanisms = r["mechanisms"].to_string();
    let nproc = rlimit_observation(&b, "RLIMIT_NPROC");
    if v1_as_root("pids") {
        assert_eq!(r["effective"]["pids"], 4096, "{r}");
        assert!(mechanisms.contains("cgroup v1 pids.max"), "{r}");
        assert!(nproc.is_none(), "the cgroup replaces RLIMIT_NPROC");
    } else if !is_root() {
        // Sealed: RLIMIT_NPROC inside the run's own user namespace.
        assert_eq!(r["effective"]["pids"], 4096, "{r}");
        assert_eq!(nproc.unwrap()["status"], "enforced");
        let limits = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(limits.contains("4096"), "{limits}");
    } else {
        // Root without a pids cgroup (pure v2 without delegation): not enforced, and said.
        assert!(r["effective"]["pids"].is_null(), "{r}");
        assert!(r["limitations"].to_string().contains("pids 4096"), "{r}");
    }
    if !r["effective"]["pids"].is_null() {
        assert!(mechanisms.contains("cofferdam's default"), "{r}");
    }

    // `--pids none` removes it: nothing requested, nothing installed.
    let out = run_q(&s)
        .args(["--pids", "none", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let b = last_bundle(&s);
    assert!(b["resources"]["requested"]["pids"].is_null(), "{b}");
    assert!(rlimit_observation(&b, "RLIMIT_NPROC").is_none());
    assert!(!b["resources"]["mechanisms"].to_string().contains("pids"));

    // Shown before the run, and marked.
    let out = s
        .cmd()
        .args(["run", "--explain-scope", "--", "true"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("4096") && text.contains("[cofferdam's default; --pids none removes it]"),
        "{text}"
    );
    let out = s.cmd().args(["scope", "--json"]).output().unwrap();
    let scope = json_of(&out);
    let row = scope["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pids")
        .cloned()
        .unwrap();
    assert_eq!(row["default"], true, "{row}");

    // Bad values name the flag and the way to remove the limit.
    for bad in ["0", "lots", "-3"] {
        let out = run_q(&s)
            .arg(format!("--pids={bad}"))
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--pids") && err.contains("none"), "{err}");
    }
}

#[test]
fn a_pids_limit_counts_the_runs_tasks_not_the_users_other_processes() {
    if !sealed_host() {
        return;
    }
    // 80 processes of this user outside the run, more than its --pids 64: RLIMIT_NPROC set
    // in the host's namespace would refuse the run's first fork; set inside the run's user
    // namespace (or a pids cgroup, as root here) it counts the run's tasks only. The same
    // holds for the default 4096 for a user who already runs thousands of processes.
    let mut outside: Vec<Child> = (0..80)
        .map(|_| {
            std::process::Command::new("sleep")
                .arg("3521")
                .spawn()
                .unwrap()
        })
        .collect();
    let s = Sandbox::new();
    let out = run_q(&s)
        .args(["--pids", "64", "--", "sh", "-c"])
        .arg("for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2 & done; wait; echo started=10")
        .output();
    for c in &mut outside {
        let _ = c.kill();
        let _ = c.wait();
    }
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("started=10"));
    let b = last_bundle(&s);
    if !is_root() || v1_as_root("pids") {
        assert_eq!(
            b["resources"]["effective"]["pids"], 64,
            "{}",
            b["resources"]
        );
    }
}

#[test]
fn on_a_copy_tier_without_a_cgroup_the_default_pids_limit_is_left_out_and_said() {
    if !crate::tiers::scoped_host() {
        return;
    }
    let s = Sandbox::new();
    let out = crate::tiers::no_userns(&s)
        .args([
            "run",
            "-q",
            "--",
            "sh",
            "-c",
            "grep processes /proc/self/limits",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(" 4096 "),
        "RLIMIT_NPROC was set to the default: {out:?}"
    );
    let b = last_bundle(&s);
    let r = &b["resources"];
    assert_eq!(r["requested"]["pids"], 4096, "{r}");
    if r["mechanisms"].to_string().contains("pids: cgroup") {
        // The host's root in the simulation (uid 0 of a user namespace still owns the v1
        // hierarchy's files): the cgroup holds it, as on the sealed tier.
        assert_eq!(r["effective"]["pids"], 4096, "{r}");
        assert!(is_root());
        return;
    }
    assert!(r["effective"]["pids"].is_null(), "{r}");
    assert!(r["limitations"].to_string().contains("not applied"), "{r}");
    let o = rlimit_observation(&b, "RLIMIT_NPROC").unwrap();
    assert_eq!(o["status"], "unavailable", "{o}");
    assert_eq!(o["details"]["default"], true, "{o}");
}

#[test]
fn real_time_scheduling_and_raised_priority_are_refused_and_recorded() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let script = "import os\n\
        try:\n    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\n    print('fifo=ok')\n\
        except OSError as e:\n    print('fifo=errno%d' % e.errno)\n\
        try:\n    os.setpriority(os.PRIO_PROCESS, 0, -20)\n    print('raise=ok')\n\
        except OSError as e:\n    print('raise=errno%d' % e.errno)\n\
        print('policy=%d' % os.sched_getscheduler(0))\n";
    let out = run_q(&s)
        .args(["--", "python3", "-c", script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("fifo=errno{}", libc::EPERM)),
        "{text}"
    );
    assert!(
        text.contains(&format!("raise=errno{}", libc::EACCES)),
        "{text}"
    );
    assert!(
        text.contains(&format!("policy={}", libc::SCHED_OTHER)),
        "{text}"
    );
    let b = last_bundle(&s);
    for name in ["RLIMIT_RTPRIO", "RLIMIT_NICE"] {
        let o = rlimit_observation(&b, name).unwrap_or_else(|| panic!("no {name} observation"));
        assert_eq!(o["status"], "enforced", "{o}");
        assert_eq!(o["details"]["hard"], 0, "{o}");
    }
    assert!(
        b["resources"]["mechanisms"]
            .to_string()
            .contains("RLIMIT_RTPRIO=0, RLIMIT_NICE=0"),
        "{}",
        b["resources"]
    );
}

/// The whole disk behind `path` as `MAJ:MIN`, when it is a block device that is not a
/// partition (the test does not follow partitions to their disk; the unit tests do).
fn whole_disk_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).unwrap().dev();
    let name = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let sys = Path::new("/sys/dev/block").join(&name);
    (sys.exists() && !sys.join("partition").exists()).then_some(name)
}

#[test]
fn io_bps_throttles_the_disks_behind_the_run_or_says_why_not() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // O_DIRECT: v1 throttles direct writes (buffered ones go by writeback). No timing is
    // asserted; only that the limit is installed and recorded, or its absence explained.
    let out = run_q(&s)
        .args(["--io-bps", "8MiB", "--", "dd", "if=/dev/zero", "of=f"])
        .args(["bs=1M", "count=4", "oflag=direct"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let b = last_bundle(&s);
    let r = &b["resources"];
    assert_eq!(r["requested"]["io_bytes_per_sec"], 8 << 20, "{r}");
    let cg = b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| {
            o["mechanism"] == "cgroup"
                && o["details"]["dimension"] == "io_bytes_per_sec"
                && o["status"] == "enforced"
        })
        .cloned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if v1_as_root("blkio") && whole_disk_of(s.work.path()).is_some() {
        let cg = cg
            .clone()
            .unwrap_or_else(|| panic!("no enforced io cgroup: {b}"));
        assert_eq!(cg["details"]["version"], 1, "{cg}");
        assert_eq!(cg["details"]["controller"], "blkio", "{cg}");
        let disk = whole_disk_of(s.work.path()).unwrap();
        assert!(
            cg["details"]["devices"].to_string().contains(&disk),
            "{disk}: {cg}"
        );
        assert_eq!(
            cg["details"]["value"],
            format!("{disk} {}", 8 << 20),
            "{cg}"
        );
        assert_eq!(r["effective"]["io_bytes_per_sec"], 8 << 20, "{r}");
        assert!(r["mechanisms"].to_string().contains("io_bps: cgroup v1"));
        assert!(r["limitations"].to_string().contains("buffered writes"));
        assert!(!stderr.contains("io_bps"), "{stderr}");
    } else if cg.is_none() {
        // Not as root here (blkio needs root), no delegated io, or no block device.
        assert!(r["effective"]["io_bytes_per_sec"].is_null(), "{r}");
        assert!(r["limitations"].to_string().contains("io_bps"), "{r}");
        assert!(stderr.contains("`io_bps` is not enforced here"), "{stderr}");
    }
    let scope = json_of(
        &s.cmd()
            .args(["scope", "--json", "--io-bps", "8MiB"])
            .output()
            .unwrap(),
    );
    // Before launch: `available` wherever a controller is (the disks are resolved at
    // launch); never `unavailable` for a run that then enforced it.
    let status = scope["io_max"]["status"].as_str().unwrap().to_owned();
    if v1_as_root("blkio") || cg.is_some() {
        assert_eq!(status, "available", "{}", scope["io_max"]);
    }
}
