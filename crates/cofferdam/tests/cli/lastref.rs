//! `last` (issue 20): resolved from any folder inside the workdir (the nearest folder above
//! with jobs), a miss names the folder and the newest job; `apply` defaults to `last`;
//! `bundle verify` takes `last` or a job id as well as a file.

use crate::common::*;
use std::process::Output;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn last_walks_up_and_a_miss_says_where_it_looked() {
    let s = Sandbox::new();
    let deep = s.work.path().join("src/deep");
    std::fs::create_dir_all(&deep).unwrap();
    let out = s
        .cmd()
        .args(["--json", "run", "--", "sh", "-c", "echo a > a.txt"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let id = json_of(&out)["job"].as_str().unwrap().to_owned();
    // From src/deep: status, diff, bundle verify find the workdir's job.
    for args in [
        &["status"][..],
        &["diff", "--stat"],
        &["bundle", "verify", "last"],
    ] {
        let out = s.cmd().current_dir(&deep).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        if args[0] != "diff" {
            assert!(text(&out).contains(&id), "{args:?}: {}", text(&out));
        }
    }
    // A nearer folder with its own job wins.
    let out = s
        .cmd()
        .current_dir(s.work.path().join("src"))
        .args(["--json", "run", "--", "true"])
        .output()
        .unwrap();
    let inner = json_of(&out)["job"].as_str().unwrap().to_owned();
    let out = s
        .cmd()
        .current_dir(&deep)
        .args(["--json", "status"])
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["run"]["run_id"], inner.as_str());
    let out = s.cmd().args(["--json", "status"]).output().unwrap();
    assert_eq!(json_of(&out)["run"]["run_id"], id.as_str());

    // Elsewhere: exit 4, naming the folder and the newest job.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = s
        .cmd()
        .current_dir(elsewhere.path())
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    let looked = std::fs::canonicalize(elsewhere.path()).unwrap();
    assert!(
        err.contains(&format!(
            "no job ran in {} or a folder above it",
            looked.display()
        )),
        "{err}"
    );
    assert!(err.contains(&format!("the newest job is {inner}")), "{err}");
    // An empty store says so.
    let empty = Sandbox::new();
    let out = empty.cmd().arg("diff").output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no jobs yet"));
}

#[test]
fn apply_defaults_to_last_and_bundle_verify_takes_a_job() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["--json", "run", "--", "sh", "-c", "echo a > a.txt"])
        .output()
        .unwrap();
    let id = json_of(&out)["job"].as_str().unwrap().to_owned();
    let out = s
        .cmd()
        .args(["bundle", "verify", &id[..12]])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("valid Run Bundle"), "{}", text(&out));
    let sub = s.work.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let out = s.cmd().current_dir(&sub).arg("apply").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("a.txt")).unwrap(),
        "a\n"
    );
    // A name that is neither a file nor a job is a usage error.
    let out = s
        .cmd()
        .args(["bundle", "verify", "nope.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("a job id or `last`"), "{}", text(&out));
}
