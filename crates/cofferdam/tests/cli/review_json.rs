//! `status --review --json` is the refreshed view of a job (spec/run-bundle-format.txt): its
//! `filesystem` and `safety.filesystem_changes_staged` follow applies and drops, each step
//! passes the strict reader, `review_context.filesystem_view` says what was refreshed and
//! what the saved bundle said, and the saved `run-bundle.json` stays byte for byte the
//! capture-time record. On the sealed and the scoped tier.

use crate::apply::sealed_host;
use crate::common::{Sandbox, json_of, landlock_abi_independently, require};
use serde_json::Value;
use std::path::PathBuf;

/// The tiers the stage exists on, with the host features each needs.
fn tiers() -> Vec<&'static [&'static str]> {
    let mut out: Vec<&'static [&'static str]> = Vec::new();
    if sealed_host() {
        out.push(&[]);
    }
    if require("Landlock", landlock_abi_independently() > 0) {
        out.push(&["--tier", "scoped"]);
    }
    out
}

/// A run that adds `a` and `b` and deletes the host's `old`.
fn staged_run(s: &Sandbox, tier: &[&str]) {
    s.write("old", "old\n");
    let run = s
        .cmd()
        .arg("run")
        .args(tier)
        .args(["--", "sh", "-c", "echo a > a; echo b > b; rm old"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{tier:?}: {run:?}");
}

/// The review JSON of the last job, checked by `bundle verify` from a file.
pub(crate) fn review(s: &Sandbox, step: &str) -> Value {
    let out = s
        .cmd()
        .args(["--json", "status", "--review", "last"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{step}: {out:?}");
    let name: String = step.chars().filter(char::is_ascii_alphanumeric).collect();
    let file = s.home.path().join(format!("review-{name}.json"));
    std::fs::write(&file, &out.stdout).unwrap();
    let v = s
        .cmd()
        .args(["--json", "bundle", "verify"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(json_of(&v)["valid"], true, "{step}: {}", json_of(&v));
    json_of(&out)
}

fn ok(s: &Sandbox, args: &[&str]) {
    let out = s.cmd().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

fn paths(v: &Value) -> Vec<String> {
    let mut p: Vec<String> = v["filesystem"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect();
    p.sort();
    p
}

/// The filesystem fields a reviewer reads: state, count, whiteouts, staged flag.
fn view(v: &Value) -> (String, u64, u64, bool) {
    let fs = &v["filesystem"];
    (
        fs["state"].as_str().unwrap().to_owned(),
        fs["changed_files"].as_u64().unwrap(),
        fs["whiteouts"].as_u64().unwrap(),
        v["safety"]["filesystem_changes_staged"].as_bool().unwrap(),
    )
}

/// `review_context.filesystem_view` names the refresh and keeps the saved bundle's word.
fn assert_context(v: &Value, step: &str, bundle: &std::path::Path) {
    let fv = &v["review_context"]["filesystem_view"];
    assert_eq!(fv["filesystem"], "refreshed", "{step}: {fv}");
    assert!(fv["refreshed_at_unix_ms"].as_u64().unwrap() > 0, "{step}");
    let sources: Vec<&str> = fv["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        sources.iter().any(|p| p.ends_with("apply-ledger.json"))
            && sources.iter().any(|p| p.ends_with("job.json")),
        "{step}: {sources:?}"
    );
    assert!(
        fv["refreshed_fields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "filesystem.state"),
        "{step}: {fv}"
    );
    let saved = &fv["saved_bundle"];
    assert_eq!(saved["path"].as_str().unwrap(), bundle.to_str().unwrap());
    assert_eq!(saved["filesystem_state"], "staged", "{step}: {saved}");
    assert_eq!(saved["changed_files"], 3, "{step}: {saved}");
    assert_eq!(saved["filesystem_changes_staged"], true, "{step}: {saved}");
}

fn bundle_path(v: &Value) -> PathBuf {
    PathBuf::from(v["review_context"]["bundle_path"].as_str().unwrap())
}

#[test]
fn the_review_json_follows_a_partial_then_a_full_apply() {
    for tier in tiers() {
        let s = Sandbox::new();
        staged_run(&s, tier);
        let fresh = review(&s, "staged");
        let bundle = bundle_path(&fresh);
        let saved = std::fs::read(&bundle).unwrap();
        assert_eq!(view(&fresh), ("staged".into(), 3, 1, true), "{tier:?}");
        assert_eq!(paths(&fresh), ["a", "b", "old"], "{tier:?}");
        assert_context(&fresh, "staged", &bundle);

        ok(&s, &["apply", "--path", "a", "last"]);
        let partial = review(&s, "partial");
        assert_eq!(view(&partial), ("staged".into(), 2, 1, true), "{tier:?}");
        assert_eq!(paths(&partial), ["b", "old"], "{tier:?}");
        assert_context(&partial, "partial", &bundle);
        assert_eq!(std::fs::read(&bundle).unwrap(), saved, "{tier:?}: partial");

        ok(&s, &["apply", "--path", "old", "last"]);
        let no_deletion = review(&s, "no-deletion");
        assert_eq!(
            view(&no_deletion),
            ("staged".into(), 1, 0, true),
            "{tier:?}"
        );
        assert_eq!(paths(&no_deletion), ["b"], "{tier:?}");

        ok(&s, &["apply", "last"]);
        let applied = review(&s, "applied");
        assert_eq!(view(&applied), ("applied".into(), 0, 0, false), "{tier:?}");
        assert!(paths(&applied).is_empty(), "{tier:?}");
        assert_eq!(applied["filesystem"]["sample_paths"], serde_json::json!([]));
        assert_context(&applied, "applied", &bundle);
        assert_eq!(std::fs::read(&bundle).unwrap(), saved, "{tier:?}: applied");
        // The saved record itself still says what the seal found.
        let on_disk: Value = serde_json::from_slice(&saved).unwrap();
        assert_eq!(view(&on_disk), ("staged".into(), 3, 1, true), "{tier:?}");
        // Outside the review too, `status --json` prints the same refreshed view.
        let plain = s.cmd().args(["--json", "status", "last"]).output().unwrap();
        assert_eq!(view(&json_of(&plain)), view(&applied), "{tier:?}");
    }
}

#[test]
fn the_review_json_of_a_dropped_job_is_discarded() {
    for tier in tiers() {
        for partly_applied in [false, true] {
            let s = Sandbox::new();
            staged_run(&s, tier);
            let fresh = review(&s, "staged");
            let bundle = bundle_path(&fresh);
            let saved = std::fs::read(&bundle).unwrap();
            if partly_applied {
                ok(&s, &["apply", "--path", "b", "last"]);
            }
            ok(&s, &["drop", "last"]);
            let dropped = review(&s, "dropped");
            assert_eq!(
                view(&dropped),
                ("discarded".into(), 0, 0, false),
                "{tier:?} partly applied {partly_applied}"
            );
            assert!(paths(&dropped).is_empty());
            assert_eq!(dropped["review_context"]["job_state"], "discarded");
            assert_context(&dropped, "dropped", &bundle);
            assert_eq!(
                std::fs::read(&bundle).unwrap(),
                saved,
                "{tier:?}: the drop rewrote the saved bundle"
            );
        }
    }
}

/// `review JOB --comment` keeps comments on a file and on a hunk's line in the job
/// (`review-comments.json`), refuses what breaks the bounds, and `status --review` lists
/// them, escaped, as text and as `review_comments` in the JSON (which still passes
/// `bundle verify`); the saved Run Bundle, which has no place for them, is not rewritten.
#[test]
fn review_comments_are_kept_listed_and_bounded() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("f.txt", "l1\nl2\nl3\n");
    let id = crate::apply::run(
        &s,
        "sed -i 's/^l2$/L2/' f.txt && echo new > g.txt && echo odd > \"$(printf '\\377fo')\"",
    );
    let bundle_before = std::fs::read(
        review(&s, "before")
            .pointer("/review_context/bundle_path")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .unwrap(),
    )
    .unwrap();
    let diff = json_of(&s.cmd().args(["diff", &id, "--json"]).output().unwrap());
    let hunk = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "f.txt")
        .unwrap()["hunks"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(
        &s,
        &[
            "review",
            &id,
            "--comment",
            "why <b>this</b>?",
            "--path",
            "g.txt",
        ],
    );
    let out = s
        .cmd()
        .args(["--json", "review", &id, "--comment=-1: say L2\n\tplease"])
        .args(["--path", "f.txt", "--hunk", &hunk, "--line", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json_of(&out)["comments"], 2);
    // A name that is not UTF-8, by its bytes.
    ok(
        &s,
        &[
            "review",
            &id,
            "--comment",
            "odd name",
            "--path-bytes",
            "ff666f",
        ],
    );
    // Refused, and nothing kept: no file, an unknown one, empty, too long, control
    // characters, line 0, a line without a hunk, a hunk id that is an option.
    let long = "x".repeat(4097);
    for bad in [
        vec!["--comment", "t"],
        vec!["--comment", "t", "--path", "nope.txt"],
        vec!["--comment", "  ", "--path", "g.txt"],
        vec!["--comment", &long, "--path", "g.txt"],
        vec!["--comment", "a\x1b[2Jb", "--path", "g.txt"],
        vec![
            "--comment",
            "t",
            "--path",
            "f.txt",
            "--hunk",
            &hunk,
            "--line",
            "0",
        ],
        vec!["--comment", "t", "--path", "f.txt", "--line", "2"],
        vec!["--comment", "t", "--path", "f.txt", "--hunk=--force"],
        vec!["--comment", "t", "--path", "g.txt", "--hunk", &hunk],
        vec!["--comment", "t", "--path", "f.txt", "--hunk", "h0"],
        vec![
            "--comment",
            "t",
            "--path",
            "f.txt",
            "--hunk",
            &hunk,
            "--line",
            "9",
        ],
        vec!["--comment", "t", "--path-bytes", "ff66"],
    ] {
        let out = s.cmd().arg("review").arg(&id).args(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
    }

    let v = review(&s, "comments");
    let c = v["review_comments"].as_array().unwrap();
    assert_eq!(c.len(), 3, "{c:?}");
    assert_eq!(c[2]["path"], "\\xfffo");
    assert_eq!(c[2]["path_bytes"], serde_json::json!([255, 102, 111]));
    assert_eq!(c[0]["path"], "g.txt");
    assert_eq!(c[0]["text"], "why <b>this</b>?");
    assert!(
        c[0].get("hunk").is_none()
            && c[0].get("line").is_none()
            && c[0].get("path_bytes").is_none()
    );
    assert_eq!(c[1]["path"], "f.txt");
    assert_eq!(c[1]["hunk"], hunk.as_str());
    assert_eq!(c[1]["line"], 2);
    assert_eq!(c[1]["text"], "-1: say L2\n\tplease");
    assert!(c[1]["at_unix_ms"].as_u64().unwrap() >= c[0]["at_unix_ms"].as_u64().unwrap());
    let out = s
        .cmd()
        .args(["--color", "never", "status", "--review", &id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("review comments (3)"), "{text}");
    assert!(text.contains("  \\xfffo\n    odd name\n"), "{text}");
    assert!(text.contains("why <b>this</b>?"), "{text}");
    assert!(
        text.contains(&format!("f.txt (hunk {hunk}, line 2)")),
        "{text}"
    );
    assert!(text.contains("    -1: say L2\n    \tplease\n"), "{text}");
    // Kept beside the ledger, not in the Run Bundle.
    let job_dir = s.store.path().join("jobs").join(&id);
    assert!(job_dir.join("review-comments.json").is_file());
    let bundle_path = PathBuf::from(v["review_context"]["bundle_path"].as_str().unwrap());
    assert_eq!(std::fs::read(&bundle_path).unwrap(), bundle_before);
    // A job without comments has no `review_comments`.
    let other = Sandbox::new();
    staged_run(&other, &[]);
    assert!(review(&other, "none").get("review_comments").is_none());
}
