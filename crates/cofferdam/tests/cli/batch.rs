//! `cofferdam batch` (issue 24): a 20-task batch with `-j 4` where tasks succeed, fail,
//! time out and are cancelled by a SIGINT to the batch mid-way; every task that started is
//! a job whose bundle verifies and whose stage is reviewable; the task file is parsed
//! strictly, and every task's policy is checked before anything runs.

use crate::common::*;
use serde_json::Value;
use std::time::{Duration, Instant};

fn jobs_labelled(s: &Sandbox, label: &str) -> Vec<Value> {
    let out = s
        .cmd()
        .args(["--json", "jobs", "--label", label])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out).as_array().unwrap().clone()
}

#[test]
fn twenty_tasks_succeed_fail_time_out_and_are_cancelled_and_every_bundle_verifies() {
    let s = Sandbox::new();
    std::fs::create_dir(s.work.path().join("w")).unwrap();
    std::fs::write(s.work.path().join("w/seed.txt"), "seed\n").unwrap();
    let mut lines = String::new();
    for n in 1..=20 {
        let task = match n {
            // Succeed, changing a file (half in the shared workdir, half in fresh copies).
            1..=12 if n % 2 == 1 => format!(
                r#"{{"{}":"w","command":["sh","-c","echo {n} > out{n}.txt; echo said {n}"],"task_id":"t{n}","labels":{{"kind":"ok"}}}}"#,
                if n % 4 == 1 { "workdir" } else { "copy_of" }
            ),
            // Fail.
            1..=12 => format!(
                r#"{{"workdir":"w","command":["sh","-c","echo no >&2; exit 3"],"task_id":"t{n}"}}"#
            ),
            // Time out (the timeout policy key).
            13 | 14 => format!(
                r#"{{"workdir":"w","command":["sleep","60"],"timeout":"1s","task_id":"t{n}"}}"#
            ),
            // Still running (or not started) when the batch is cancelled.
            _ => format!(r#"{{"workdir":"w","command":["sleep","60"],"task_id":"t{n}"}}"#),
        };
        lines.push_str(&task);
        lines.push('\n');
    }
    let file = s.write("tasks.jsonl", &lines);
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cofferdam"))
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(["--json", "batch", "-j", "4"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Cancel once tasks 15 to 18 are live jobs (their supervisors handle SIGTERM then).
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let live = (15..=18)
            .filter(|n| {
                jobs_labelled(&s, &format!("batch.task={n}"))
                    .iter()
                    .any(|j| j["state"] == "active")
            })
            .count();
        if live == 4 {
            break;
        }
        assert!(Instant::now() < deadline, "tasks 15-18 never all ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let doc = json_of(&out);
    assert_eq!(doc["cancelled"], true);
    assert_eq!(doc["jobs"], 4);
    let tasks = doc["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 20);
    let batch = doc["batch"].as_str().unwrap();
    for t in tasks {
        let n = t["index"].as_u64().unwrap();
        let want = match n {
            1..=12 if n % 2 == 1 => (Some(0), Value::Null),
            1..=12 => (Some(3), "exit".into()),
            13 | 14 => (Some(124), "timeout".into()),
            15..=18 => (Some(130), "cancelled".into()),
            _ => (None, "not_started".into()),
        };
        assert_eq!(
            (t["exit_code"].as_i64(), &t["failure"]),
            (want.0, &want.1),
            "task {n}: {t}"
        );
        assert_eq!(t["task_id"], format!("t{n}"));
        if want.0.is_none() {
            assert!(t["job"].is_null() && t["bundle"].is_null(), "{t}");
            continue;
        }
        // A job with its bundle, labelled, verified by the strict reader, reviewable.
        assert_eq!(t["state"], "staged", "task {n}: {t}");
        let bundle_path = t["bundle"].as_str().unwrap();
        let verified = s
            .cmd()
            .args(["bundle", "verify", bundle_path])
            .output()
            .unwrap();
        assert!(verified.status.success(), "task {n}: {verified:?}");
        let bundle: Value = serde_json::from_slice(&std::fs::read(bundle_path).unwrap()).unwrap();
        assert_eq!(bundle["orchestration"]["batch"], batch);
        assert_eq!(bundle["orchestration"]["batch.task"], n.to_string());
        assert_eq!(bundle["run"]["task_id"], format!("t{n}"));
        let job = t["job"].as_str().unwrap();
        let review = s
            .cmd()
            .args(["status", "--review", "--no-pager", job])
            .output()
            .unwrap();
        assert!(review.status.success(), "task {n}: {review:?}");
        let changes = t["changes"].as_u64().unwrap();
        if want.0 == Some(0) {
            assert_eq!(changes, 1, "task {n}: {t}");
            // The command's output is in its job, not on the batch's terminal.
            let logs = s.cmd().args(["logs", job]).output().unwrap();
            assert!(
                String::from_utf8_lossy(&logs.stdout).contains(&format!("said {n}")),
                "task {n}: {logs:?}"
            );
        }
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains("said 1\n"));
    // `jobs --label batch=ID` finds the 18 jobs.
    assert_eq!(jobs_labelled(&s, &format!("batch={batch}")).len(), 18);
    // Two tasks applied into one workdir conflict like any two jobs... here each wrote its
    // own file, so the two shared-workdir successes both apply; the workdir is untouched
    // until then.
    assert!(!s.work.path().join("w/out1.txt").exists());
    for n in [1, 5] {
        let job = tasks[n - 1]["job"].as_str().unwrap();
        let applied = s.cmd().args(["apply", job]).output().unwrap();
        assert!(applied.status.success(), "{applied:?}");
        assert!(s.work.path().join(format!("w/out{n}.txt")).exists());
    }
}

#[test]
fn a_bad_task_file_or_policy_value_refuses_the_batch_before_anything_runs() {
    let s = Sandbox::new();
    std::fs::create_dir(s.work.path().join("w")).unwrap();
    for (name, text, want) in [
        (
            "a.jsonl",
            "{\"workdir\":\"w\",\"command\":[\"true\"]}\n{\"workdir\":\"w\",\"command\":[\"true\"],\"timeuot\":\"1s\"}\n",
            "a.jsonl:2: timeuot: unknown field `timeuot`",
        ),
        (
            "b.toml",
            "[[task]]\nworkdir = \"w\"\ncommand = [\"true\"]\n[[task]]\nworkdir = \"w\"\ncommand = [\"true\"]\ntimeout = \"soon\"\n",
            "task 2",
        ),
        (
            "c.toml",
            "[[task]]\nworkdir = \"w\"\ncommand = [\"true\"]\nlabels = { \"bad key!\" = \"v\" }\n",
            "task 1",
        ),
        (
            "d.toml",
            "[[task]]\nworkdir = \"missing\"\ncommand = [\"true\"]\n",
            "task 1",
        ),
    ] {
        let file = s.write(name, text);
        let out = s.cmd().arg("batch").arg(&file).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(want), "{name}: {stderr}");
    }
    assert!(jobs_labelled(&s, "batch.task=1").is_empty());
}

/// The batch SIGKILLed (no cancel of its own can run): the kernel's parent-death signal
/// (SIGTERM) ends each `cofferdam run` child, its sandbox and workload within a bound, and
/// every job is either cancelled with its records (staged) or interrupted, which `status
/// --review` seals on demand (the recover path); each bundle then verifies.
#[test]
fn a_killed_batch_takes_its_tasks_with_it_and_their_jobs_recover() {
    use crate::limits::{assert_gone, processes_with, wait_for};
    let s = Sandbox::new();
    std::fs::create_dir(s.work.path().join("w")).unwrap();
    let mut lines = String::new();
    for n in 1..=3 {
        lines.push_str(&format!(
            r#"{{"workdir":"w","command":["sh","-c","echo {n} > k{n}; exec sleep 3541"],"labels":{{"kind":"killed"}}}}"#
        ));
        lines.push('\n');
    }
    let file = s.write("tasks.jsonl", &lines);
    let mut child =
        crate::limits::spawn(&s, &["--json", "batch", "-j", "3", file.to_str().unwrap()]);
    let all_live = wait_for(Duration::from_secs(60), || {
        jobs_labelled(&s, "kind=killed")
            .iter()
            .filter(|j| j["state"] == "active")
            .count()
            == 3
            && processes_with("3541")
                .iter()
                .filter(|p| p.contains(": sleep 3541"))
                .count()
                == 3
    });
    assert!(
        all_live,
        "the three tasks never all ran: {:?}",
        processes_with("3541")
    );
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    child.wait().unwrap();
    // The workloads, then the supervisors and inits (whose command lines carry the marker
    // too, which `processes_with` leaves out): none is left, zombies aside.
    assert_gone("3541", 20);
    let left = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            })
            .filter_map(|e| {
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let zombie = stat
                    .rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                (cmd.contains("3541") && !zombie).then_some(cmd)
            })
            .collect()
    };
    assert!(
        wait_for(Duration::from_secs(20), || left().is_empty()),
        "left: {:?}",
        left()
    );
    let jobs = jobs_labelled(&s, "kind=killed");
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    for j in &jobs {
        let id = j["id"].as_str().unwrap();
        assert!(
            j["state"] == "staged" || j["state"] == "interrupted",
            "{id}: {j}"
        );
        let review = s
            .cmd()
            .args(["status", "--review", "--no-pager", id])
            .output()
            .unwrap();
        assert!(review.status.success(), "{id}: {review:?}");
        let b = json_of(&s.cmd().args(["status", "--json", id]).output().unwrap());
        assert_eq!(b["review_context"]["job_state"], "staged", "{id}: {b}");
        let verified = s.cmd().args(["bundle", "verify", id]).output().unwrap();
        assert!(verified.status.success(), "{id}: {verified:?}");
    }
}
