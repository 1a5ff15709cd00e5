//! Housekeeping (issue 20): `jobs` filters (`--workdir`, `--state`, `-n`) and the disk
//! the jobs take; `logs` prints what `--capture` saved, or says how to capture.

use crate::common::*;
use std::process::Output;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn job_lines(o: &Output) -> Vec<String> {
    stdout(o)
        .lines()
        .filter(|l| l.starts_with("run-"))
        .map(str::to_owned)
        .collect()
}

/// `run --json -- sh -c script` in `dir`; the job id.
pub(crate) fn run_in(s: &Sandbox, dir: &std::path::Path, script: &str) -> String {
    let out = s
        .cmd()
        .current_dir(dir)
        .args(["--json", "run", "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    json_of(&out)["job"].as_str().unwrap().to_owned()
}

#[test]
fn jobs_filters_and_the_disk_total() {
    let s = Sandbox::new();
    let sub = s.work.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let run = |dir: &std::path::Path, script: &str| run_in(&s, dir, script);
    let a = run(s.work.path(), "head -c 200000 /dev/urandom > big");
    let b = run(&sub, "echo b > b");
    let c = run(&sub, "echo c > c");
    let ok = s.cmd().args(["drop", &c]).output().unwrap();
    assert!(ok.status.success(), "{}", stderr(&ok));

    let all = s.cmd().arg("jobs").output().unwrap();
    assert_eq!(job_lines(&all).len(), 3, "{}", stdout(&all));
    let total = stdout(&all).lines().last().unwrap().to_owned();
    assert!(
        total.starts_with("3 job(s), ") && total.contains(" on disk in "),
        "{total}"
    );
    // The 200 kB file shows in the job's size and the total.
    let v = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
    let sized = v
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == a.as_str())
        .unwrap();
    assert!(sized["disk_bytes"].as_u64().unwrap() >= 200_000, "{sized}");

    let under = s.cmd().args(["jobs", "--workdir", "sub"]).output().unwrap();
    let lines = job_lines(&under);
    assert_eq!(lines.len(), 2, "{}", stdout(&under));
    assert!(
        lines[0].starts_with(&c) && lines[1].starts_with(&b),
        "{lines:?}"
    );
    let staged = s
        .cmd()
        .args(["jobs", "--state", "staged"])
        .output()
        .unwrap();
    let lines = job_lines(&staged);
    assert_eq!(lines.len(), 2, "{}", stdout(&staged));
    assert!(lines.iter().all(|l| !l.starts_with(&c)), "{lines:?}");
    let newest = s.cmd().args(["jobs", "-n", "1"]).output().unwrap();
    assert_eq!(job_lines(&newest).len(), 1);
    assert!(job_lines(&newest)[0].starts_with(&c));
    let both = s
        .cmd()
        .args(["--json", "jobs", "--workdir", "sub", "--state", "discarded"])
        .output()
        .unwrap();
    let v = json_of(&both);
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["id"], c.as_str());
    let none = s
        .cmd()
        .args(["jobs", "--state", "active"])
        .output()
        .unwrap();
    assert!(
        stdout(&none).starts_with("no job matches"),
        "{}",
        stdout(&none)
    );
    let bad = s.cmd().args(["jobs", "--state", "done"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("give one of active, staged"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn logs_prints_the_capture_or_says_how_to_capture() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--capture", "--", "sh", "-c"])
        .arg("echo to-out; echo to-err >&2")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let logs = s.cmd().arg("logs").output().unwrap();
    assert!(logs.status.success(), "{}", stderr(&logs));
    assert_eq!(stdout(&logs), "to-out\n");
    assert_eq!(stderr(&logs), "to-err\n");
    let v = json_of(&s.cmd().args(["--json", "logs", "last"]).output().unwrap());
    assert_eq!(v["stdout"]["text"], "to-out\n");
    assert_eq!(v["stderr"]["text"], "to-err\n");

    let out = s.cmd().args(["run", "-q", "--", "true"]).output().unwrap();
    assert!(out.status.success());
    let logs = s.cmd().arg("logs").output().unwrap();
    assert_eq!(logs.status.code(), Some(2));
    assert!(
        stderr(&logs).contains("captured no output"),
        "{}",
        stderr(&logs)
    );
    assert!(stderr(&logs).contains("--capture"), "{}", stderr(&logs));
}
