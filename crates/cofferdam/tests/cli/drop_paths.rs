//! `drop JOB --path P` against jobs made by real sealed runs: only the named changes leave
//! the stage (a path inside a directory replaced whole takes that directory), the rest
//! stays reviewable and applies; the ledger and the trace record it; a drop killed after
//! its ledger write leaves a stage that diff and apply accept; names that are not UTF-8
//! carry `path_bytes` in `diff --json` and are applied and dropped by `--path-bytes HEX`.

use crate::apply::{ok, run, sealed_host};
use crate::common::*;
use serde_json::Value;
use std::os::unix::ffi::OsStrExt;

fn ok_json(s: &Sandbox, args: &[&str]) -> Value {
    serde_json::from_str(&ok(&s.cmd().args(args).output().unwrap())).unwrap()
}

fn diff_paths(s: &Sandbox, id: &str) -> Vec<String> {
    let d = ok_json(s, &["diff", id, "--json"]);
    d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect()
}

fn dropped_events(s: &Sandbox, id: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(s.store.path().join("jobs").join(id).join("trace.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["event"]["type"] == "dropped")
        .map(|v| v["event"].clone())
        .collect()
}

fn state_of(s: &Sandbox, id: &str) -> Value {
    let jobs = ok_json(s, &["jobs", "--json"]);
    jobs.as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .unwrap()["state"]
        .clone()
}

#[test]
fn a_per_path_drop_discards_only_those_changes_and_the_rest_applies() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    std::fs::create_dir(s.work.path().join("op")).unwrap();
    s.write("op/old", "old\n");
    s.write("keep.txt", "before\n");
    let id = run(
        &s,
        "echo new > a.txt && echo after > keep.txt && mkdir -p new/sub && echo 1 > new/one \
         && echo 2 > new/sub/two && rm -rf op && mkdir op && echo x > op/new",
    );
    let all = diff_paths(&s, &id);
    for p in [
        "a.txt",
        "keep.txt",
        "new/one",
        "new/sub/two",
        "op",
        "op/new",
    ] {
        assert!(all.iter().any(|x| x == p), "{p} not staged: {all:?}");
    }

    // One file.
    let d = ok_json(&s, &["drop", &id, "--path", "a.txt", "--json"]);
    assert_eq!(d["state"], "staged", "{d}");
    assert_eq!(d["discarded_changes"], 1, "{d}");
    assert_eq!(d["dropped"][0]["path"], "a.txt", "{d}");
    // A path inside a directory replaced whole takes the directory (applying it later
    // would bring the dropped path back).
    let d = ok_json(&s, &["drop", &id, "--path", "op/new", "--json"]);
    let dropped: Vec<&str> = d["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(dropped, ["op", "op/new"], "{d}");
    assert_eq!(d["added"][0]["path"], "op", "{d}");
    // A file inside a new directory goes alone; the directory stays staged.
    ok(&s
        .cmd()
        .args(["drop", &id, "--path", "new/sub/two"])
        .output()
        .unwrap());

    let left = diff_paths(&s, &id);
    for gone in ["a.txt", "op", "op/new", "new/sub/two"] {
        assert!(
            !left.iter().any(|x| x == gone),
            "{gone} still staged: {left:?}"
        );
    }
    assert!(left.iter().any(|x| x == "new/sub"), "{left:?}");
    let review = ok_json(&s, &["--json", "status", "--review", &id]);
    let stage = &review["review_context"]["stage"];
    let listed: Vec<&str> = stage["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(listed, ["a.txt", "new/sub/two", "op", "op/new"], "{stage}");
    assert!(
        !stage["applied"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "a.txt"),
        "a dropped path is not applied: {stage}"
    );
    let text = ok(&s
        .cmd()
        .args(["--color", "never", "status", "--review", &id, "--no-pager"])
        .output()
        .unwrap());
    assert!(text.contains("dropped      a.txt"), "{text}");
    // Dropping it again is an error that says why.
    let again = s
        .cmd()
        .args(["drop", &id, "--path", "a.txt"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("applied or dropped already"),
        "{again:?}"
    );

    let events = dropped_events(&s, &id);
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0]["paths"], serde_json::json!(["a.txt"]));
    assert_eq!(events[0]["discarded_changes"], 1);

    // The rest applies; what was dropped never reaches the host.
    ok(&s.cmd().args(["apply", &id]).output().unwrap());
    let w = s.work.path();
    assert!(!w.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.join("keep.txt")).unwrap(),
        "after\n"
    );
    assert_eq!(std::fs::read_to_string(w.join("op/old")).unwrap(), "old\n");
    assert!(!w.join("op/new").exists());
    assert_eq!(std::fs::read_to_string(w.join("new/one")).unwrap(), "1\n");
    assert!(w.join("new/sub").is_dir() && !w.join("new/sub/two").exists());
    assert_eq!(state_of(&s, &id), "applied");
}

#[test]
fn a_drop_of_every_remaining_path_is_the_whole_drop() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let id = run(&s, "echo 1 > one && echo 2 > two");
    ok(&s
        .cmd()
        .args(["drop", &id, "--path", "one"])
        .output()
        .unwrap());
    let d = ok_json(&s, &["drop", &id, "--exclude", "nothing-*", "--json"]);
    assert_eq!(d["state"], "discarded", "{d}");
    assert_eq!(d["discarded_changes"], 1, "{d}");
    assert_eq!(state_of(&s, &id), "discarded");
    let events = dropped_events(&s, &id);
    assert_eq!(events[1]["paths"], serde_json::json!(["two"]), "{events:?}");
    assert!(!s.store.path().join("jobs").join(&id).join("upper").exists());
}

#[test]
fn a_drop_killed_after_its_ledger_write_leaves_a_stage_review_and_apply_accept() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let id = run(
        &s,
        "echo 1 > one && echo 2 > two && mkdir d && echo 3 > d/three",
    );
    let out = s
        .cmd()
        .env("COFFERDAM_TEST_DROP_KILL_AT", "ledger")
        .args(["drop", &id, "--path", "d"])
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
    // The ledger write is the drop: d is gone from the stage, the rest is there.
    assert_eq!(diff_paths(&s, &id), ["one", "two"]);
    ok_json(&s, &["--json", "status", "--review", &id]);
    ok(&s.cmd().args(["apply", &id]).output().unwrap());
    assert!(s.work.path().join("one").exists() && !s.work.path().join("d").exists());
    assert_eq!(state_of(&s, &id), "applied");
}

#[test]
fn names_that_are_not_utf8_carry_path_bytes_and_apply_and_drop_by_them() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let id = run(
        &s,
        "printf x > \"$(printf 'bad\\377.txt')\" && printf y > \"$(printf 'worse\\376')\" \
         && echo ok > fine.txt",
    );
    let d = ok_json(&s, &["diff", &id, "--json"]);
    let changes = d["changes"].as_array().unwrap();
    let bytes_of = |want: &[u8]| {
        changes
            .iter()
            .find(|c| {
                c["path_bytes"].as_array().is_some_and(|b| {
                    b.iter()
                        .map(|x| x.as_u64().unwrap() as u8)
                        .collect::<Vec<_>>()
                        == want
                })
            })
            .cloned()
    };
    assert!(bytes_of(b"bad\xff.txt").is_some(), "{d}");
    assert!(bytes_of(b"worse\xfe").is_some(), "{d}");
    let fine = changes.iter().find(|c| c["path"] == "fine.txt").unwrap();
    assert!(
        fine.get("path_bytes").is_none(),
        "UTF-8 names have no path_bytes: {fine}"
    );

    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    ok(&s
        .cmd()
        .args(["drop", &id, "--path-bytes", &hex(b"worse\xfe")])
        .output()
        .unwrap());
    ok(&s
        .cmd()
        .args(["apply", &id, "--path-bytes", &hex(b"bad\xff.txt")])
        .output()
        .unwrap());
    let host = |name: &[u8]| s.work.path().join(std::ffi::OsStr::from_bytes(name));
    assert_eq!(std::fs::read(host(b"bad\xff.txt")).unwrap(), b"x");
    assert!(!host(b"worse\xfe").exists());
    assert!(
        !s.work.path().join("fine.txt").exists(),
        "only the named path applied"
    );
    assert_eq!(diff_paths(&s, &id), ["fine.txt"]);
    let bad = s
        .cmd()
        .args(["apply", &id, "--path-bytes", "6"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
