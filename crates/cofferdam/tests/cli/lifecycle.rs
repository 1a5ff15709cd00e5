//! The end of a run's processes on the copy tiers (no pid namespace), through the real
//! binary: a timeout ends a workload of fork-and-exit chains (which once made the end-of-run
//! kill quadratic and the run never end), and a SIGKILLed supervisor leaves no process of
//! the command behind. Timing only as a generous liveness bound.

use crate::common::*;
use crate::limits::{assert_gone, kill, processes_with, spawn, start, wait_for};
use std::time::Duration;

/// A workload that ignores SIGTERM and runs `argv[2]` fork-and-exit chains (each process
/// forks and exits at once, its child goes on) for two minutes, then ends by itself.
const CHAINS_C: &str = r#"
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    signal(SIGTERM, SIG_IGN);
    struct rlimit r = {4096, 4096};
    setrlimit(RLIMIT_NPROC, &r); /* a safety net for the host when run unprivileged */
    time_t end = time(0) + 120;
    int n = atoi(argv[2]);
    for (int i = 0; i < n; i++) {
        if (fork() == 0) {
            while (time(0) < end) {
                pid_t p = fork();
                if (p > 0) _exit(0);
                if (p < 0) usleep(1000);
            }
            _exit(0);
        }
    }
    for (;;) pause();
}
"#;

fn scoped_tier_here() -> bool {
    require("Landlock", landlock_abi_independently() > 0)
}

#[test]
fn a_timeout_ends_fork_and_exit_chains_on_the_scoped_tier_and_leaves_nothing() {
    if !scoped_tier_here() {
        return;
    }
    let s = Sandbox::new();
    let src = s.write("chains.c", CHAINS_C);
    let cc = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(s.work.path().join("chains"))
        .arg(&src)
        .status();
    if !require("a C compiler (cc)", cc.is_ok_and(|st| st.success())) {
        return;
    }
    let marker = format!("chainmark{}", std::process::id());
    let mut child = spawn(
        &s,
        &[
            "run",
            "-q",
            "--tier",
            "scoped",
            "--timeout",
            "2s",
            "--",
            "./chains",
            &marker,
            "40",
        ],
    );
    // A liveness bound, not a timing: the run must end, long before the chains would.
    let ended = wait_for(Duration::from_secs(60), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    assert!(ended, "a --timeout 2s run was still running after 60 s");
    assert_eq!(status.code(), Some(124), "{status:?}");
    assert_gone(&marker, 5);
}

#[test]
fn a_killed_supervisor_on_the_scoped_tier_leaves_no_process_of_the_command() {
    if !scoped_tier_here() {
        return;
    }
    let s = Sandbox::new();
    let marker = "73541";
    let script = format!(
        "sleep {marker} & (trap '' TERM HUP; exec sleep {marker}) & setsid sleep {marker} & \
         sleep {marker}"
    );
    let mut child = start(
        &s,
        &["run", "-q", "--tier", "scoped", "--", "sh", "-c", &script],
        marker,
    );
    let sleeps = || {
        processes_with(marker)
            .iter()
            .filter(|p| p.contains(": sleep "))
            .count()
    };
    assert!(wait_for(Duration::from_secs(10), || sleeps() == 4));
    kill(&child, libc::SIGKILL);
    child.wait().unwrap();
    assert_gone(marker, 5);
    let out = s.cmd().args(["status", "--json", "last"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json_of(&out)["review_context"]["job_state"], "interrupted");
    drop_and_check_cgroup_removed(&s);
}

/// `drop` of a job whose supervisor was killed seals it first, which removes the run's
/// cgroup the dead supervisor left (nothing else would: the test's store goes with it).
fn drop_and_check_cgroup_removed(s: &Sandbox) {
    let jobs = s.cmd().args(["jobs", "--json"]).output().unwrap();
    let id = json_of(&jobs)[0]["id"].as_str().unwrap().to_owned();
    let out = s.cmd().args(["drop", &id]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let name = format!("cofferdam-{id}");
    let left: Vec<_> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|c| c.path().join(&name))
        .filter(|p| p.exists())
        .collect();
    assert!(left.is_empty(), "cgroups left after drop: {left:?}");
}

#[test]
fn kill_signals_only_the_process_that_holds_the_job_lock() {
    if !scoped_tier_here() {
        return;
    }
    let s = Sandbox::new();
    // An unrelated process of the user, older than the run: what a recycled pid could be.
    let mut decoy = std::process::Command::new("sleep")
        .arg("73542")
        .spawn()
        .unwrap();
    let mut child = start(
        &s,
        &["run", "-q", "--tier", "scoped", "--", "sleep", "73543"],
        "73543",
    );
    kill(&child, libc::SIGKILL);
    child.wait().unwrap();
    assert_gone("73543", 5);
    // The dead supervisor's job still says `active`; its pid now names the decoy, and
    // another process (this test, as any other cofferdam command could) holds the lock.
    let jobs = s.store.path().join("jobs");
    let dir = std::fs::read_dir(&jobs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let state_path = dir.join("job.json");
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).unwrap()).unwrap();
    assert_eq!(state["state"], "active", "{state}");
    state["pid"] = decoy.id().into();
    std::fs::write(&state_path, serde_json::to_vec(&state).unwrap()).unwrap();
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("lock"))
        .unwrap();
    lock.lock().unwrap();

    let out = s.cmd().args(["kill", "last"]).output().unwrap();
    let alive = matches!(decoy.try_wait(), Ok(None));
    let _ = decoy.kill();
    let _ = decoy.wait();
    assert!(alive, "kill signalled a process that is not the supervisor");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not running"),
        "{out:?}"
    );
    drop(lock);
    drop_and_check_cgroup_removed(&s);
}

#[test]
fn a_workload_that_kills_its_init_leaves_nothing_behind() {
    if !scoped_tier_here() {
        return;
    }
    let s = Sandbox::new();
    let marker = "73544";
    // The command runs as the caller's user: it can SIGKILL its init, whose handler then
    // cannot run. The setsid'd sleep is orphaned to the supervisor (a child subreaper on the
    // copy tiers), or swept from the run's cgroup where there is one.
    let out = s
        .cmd()
        .args(["run", "-q", "--tier", "scoped", "--", "sh", "-c"])
        .arg(format!(
            "setsid sleep {marker} >/dev/null 2>&1 </dev/null & sleep 0.3; kill -9 $PPID"
        ))
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let left = processes_with(marker);
    for p in &left {
        let pid: i32 = p.split(':').next().unwrap().parse().unwrap();
        // SAFETY: kill(2) on the orphan this test's workload made (found by marker).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    assert!(left.is_empty(), "outlived the run: {left:?}");
    let b = crate::limits::last_bundle(&s);
    assert!(
        b["run"]["warnings"]
            .to_string()
            .contains("outlived its init"),
        "{}",
        b["run"]["warnings"]
    );
}
