//! Every Run Bundle the binary writes passes `cofferdam bundle verify`: on each tier, for a
//! run that completed, exited non-zero, timed out (also during setup), failed to exec, failed
//! in setup, and with the network confined, allowed or shared; an OOM kill as root. The strict reader checks the rows against the
//! tier's table, so a sandbox change that drops or renames a row fails here first.

use crate::apply::sealed_host;
use crate::common::{Sandbox, json_of, landlock_abi_independently, require};
use serde_json::Value;

/// `(tier flags, run flags and command, exit status, run.state, run.failure.kind)`.
type Case = (
    &'static [&'static str],
    &'static [&'static str],
    i32,
    &'static str,
    Option<&'static str>,
);

const SEALED: &[&str] = &[];
const SCOPED: &[&str] = &["--tier", "scoped"];
const ADVISORY: &[&str] = &["--containment", "advisory", "--tier", "advisory"];

const COMMON: [(&[&str], i32, &str, Option<&str>); 6] = [
    (&["--", "true"], 0, "completed", None),
    (
        &["--", "sh", "-c", "exit 3"],
        3,
        "failed",
        Some("process_exit"),
    ),
    (
        &["--timeout", "1s", "--", "sleep", "5"],
        124,
        "failed",
        Some("timeout"),
    ),
    // Often expires during setup, before the sandbox reported all of its rows.
    (
        &["--timeout", "1ms", "--", "sleep", "5"],
        124,
        "failed",
        Some("timeout"),
    ),
    (
        &["--", "/nonexistent-cofferdam-test"],
        127,
        "failed",
        Some("setup"),
    ),
    (&["--network", "host", "--", "true"], 0, "completed", None),
];

fn verify(s: &Sandbox, case: &str, args: &[&str]) -> Value {
    let out = s.cmd().args(args).output().unwrap();
    let jobs = s.store.path().join("jobs");
    // A fresh store per case: its only job is this run.
    let dirs: Vec<_> = std::fs::read_dir(&jobs)
        .unwrap_or_else(|e| panic!("{case}: no jobs ({e}): {out:?}"))
        .map(|e| e.unwrap().path())
        .collect();
    let [job] = dirs.as_slice() else {
        panic!("{case}: expected one job, found {dirs:?}: {out:?}");
    };
    let bundle = job.join("run-bundle.json");
    assert!(bundle.exists(), "{case}: no run-bundle.json: {out:?}");
    let v = s
        .cmd()
        .args(["--json", "bundle", "verify"])
        .arg(&bundle)
        .output()
        .unwrap();
    let report = json_of(&v);
    assert_eq!(report["valid"], true, "{case}: {report}");
    assert!(v.status.success(), "{case}: {v:?}");
    let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let code = out.status.code().unwrap_or(-1);
    serde_json::json!({"bundle": b, "code": code})
}

fn run_cases(tier: &[&str], name: &str, extra: &[Case]) {
    let common = COMMON
        .iter()
        .map(|&(args, code, state, kind)| (tier, args, code, state, kind));
    for (tier, args, code, state, kind) in common.chain(extra.iter().copied()) {
        let mut all = vec!["run"];
        all.extend_from_slice(tier);
        all.extend_from_slice(args);
        let case = format!("{name}: {}", all.join(" "));
        let got = verify(&Sandbox::new(), &case, &all);
        let b = &got["bundle"];
        if code >= 0 {
            assert_eq!(got["code"], code, "{case}: {b}");
        }
        assert_eq!(b["run"]["state"], state, "{case}");
        assert_eq!(
            b["run"]["failure"]["kind"].as_str(),
            kind,
            "{case}: {}",
            b["run"]["failure"]
        );
    }
}

#[test]
fn every_sealed_bundle_verifies() {
    if !sealed_host() {
        return;
    }
    run_cases(
        SEALED,
        "sealed",
        &[
            (
                SEALED,
                &["--allow-net", "example.com", "--", "true"],
                0,
                "completed",
                None,
            ),
            // A setup failure inside the sandbox: a mount point beneath a regular file of
            // the read-only view (limits below their minimum are usage errors now, refused
            // before a job exists, so `--pids 1` no longer gets this far).
            (
                SEALED,
                &["--mount", "/usr:/etc/hostname/under-a-file", "--", "true"],
                125,
                "failed",
                Some("setup"),
            ),
        ],
    );
}

#[test]
fn an_oom_bundle_verifies() {
    // The OOM kill needs the memory controller, which only root has here (an unprivileged
    // run gets RLIMIT_DATA instead, and an allocation failure, not an OOM kill): a user
    // limitation, not a missing host feature, so no SKIP-HOST.
    // SAFETY: geteuid has no preconditions.
    if !sealed_host() || unsafe { libc::geteuid() } != 0 {
        return;
    }
    let memory = std::path::Path::new("/sys/fs/cgroup/memory").is_dir()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
    if !require("the memory cgroup controller", memory) {
        return;
    }
    let fill = "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo ${#x}";
    let args = ["run", "--memory", "64M", "--", "sh", "-c", fill];
    let got = verify(&Sandbox::new(), "sealed: oom", &args);
    assert_eq!(got["bundle"]["run"]["failure"]["kind"], "oom", "{got}");
}

#[test]
fn every_scoped_bundle_verifies() {
    if !require("Landlock", landlock_abi_independently() > 0) {
        return;
    }
    run_cases(SCOPED, "scoped", &[]);
}

#[test]
fn every_advisory_bundle_verifies() {
    run_cases(ADVISORY, "advisory", &[]);
}

#[test]
fn the_review_json_verifies_before_and_after_apply() {
    // `status --review --json` prints a bundle (plus `review_context`); whether it is the
    // saved record or the refreshed view, its fields must agree with each other, so the
    // strict reader accepts it at each step of the stage's life.
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let run = s
        .cmd()
        .args(["run", "--", "sh", "-c", "echo a > a; echo b > b"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let steps: [&[&str]; 3] = [&[], &["apply", "--path", "a", "last"], &["apply", "last"]];
    for step in steps {
        if !step.is_empty() {
            let out = s.cmd().args(step).output().unwrap();
            assert!(out.status.success(), "{step:?}: {out:?}");
        }
        crate::review_json::review(&s, &format!("after {step:?}"));
    }
}
