//! `cofferdam gc` / `prune` (issue 20): removes finished jobs by state, age and workdir,
//! `--dry-run` removes nothing, a live job is never removed, and it says what it freed.

use crate::common::*;
use crate::housekeeping::run_in;
use crate::limits::{assert_gone, kill, start};
use std::process::Output;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ids(s: &Sandbox) -> Vec<String> {
    let v = json_of(&s.cmd().args(["--json", "jobs"]).output().unwrap());
    v.as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn gc_removes_what_it_is_asked_and_never_a_live_job() {
    let s = Sandbox::new();
    let sub = s.work.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let run = |dir: &std::path::Path, script: &str| run_in(&s, dir, script);
    let applied = run(s.work.path(), "head -c 100000 /dev/urandom > f");
    assert!(
        s.cmd()
            .args(["apply", &applied])
            .output()
            .unwrap()
            .status
            .success()
    );
    let dropped = run(&sub, "echo d > d");
    assert!(
        s.cmd()
            .args(["drop", &dropped])
            .output()
            .unwrap()
            .status
            .success()
    );
    let staged = run(&sub, "echo s > s");
    let outside = tempfile::tempdir().unwrap();
    let kept_in = outside.path().join("stage");
    let out = s
        .cmd()
        .args(["--json", "run", "--stage"])
        .arg(&kept_in)
        .args(["--", "true"])
        .output()
        .unwrap();
    let linked = json_of(&out)["job"].as_str().unwrap().to_owned();
    assert!(
        s.cmd()
            .args(["drop", &linked])
            .output()
            .unwrap()
            .status
            .success()
    );

    // Too young for --older-than: nothing.
    let out = s.cmd().args(["gc", "--older-than", "1h"]).output().unwrap();
    assert!(
        stdout(&out).contains("removed 0 job(s), 0 B freed"),
        "{}",
        stdout(&out)
    );
    // A dry run names what would go and removes nothing.
    let out = s.cmd().args(["gc", "--dry-run"]).output().unwrap();
    let said = stdout(&out);
    for id in [&applied, &dropped, &linked] {
        assert!(said.contains(&format!("would remove {id}")), "{said}");
    }
    assert!(!said.contains(&staged), "{said}");
    assert!(said.contains("would remove 3 job(s)"), "{said}");
    assert_eq!(ids(&s).len(), 4);
    // --workdir: only sub's dropped job.
    let v = json_of(
        &s.cmd()
            .args(["--json", "prune", "--workdir", "sub"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["removed"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["removed"][0]["id"], dropped.as_str());
    assert!(!ids(&s).contains(&dropped));
    // The rest of the finished ones; the --stage directory is left and said so.
    let out = s.cmd().arg("gc").output().unwrap();
    let said = stdout(&out);
    assert!(
        said.contains("removed 2 job(s)") && said.contains("freed"),
        "{said}"
    );
    assert!(said.contains("(--stage)"), "{said}");
    assert!(kept_in.join("job.json").exists());
    assert_eq!(ids(&s), vec![staged.clone()]);

    // A live run is never removed, whatever the states asked for.
    let marker = format!("gc-live-{}", std::process::id());
    let script = format!("sleep 30 # {marker}");
    let child = start(&s, &["run", "-q", "--", "sh", "-c", &script], &marker);
    let out = s
        .cmd()
        .args([
            "--json",
            "gc",
            "--state",
            "staged",
            "--state",
            "interrupted",
        ])
        .output()
        .unwrap();
    let v = json_of(&out);
    let removed: Vec<&str> = v["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(removed, vec![staged.as_str()], "{v}");
    assert_eq!(ids(&s).len(), 1, "the live job stays");
    kill(&child, libc::SIGTERM);
    let mut child = child;
    child.wait().unwrap();
    assert_gone(&marker, 10);
    let bad = s.cmd().args(["gc", "--state", "active"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
