//! `run --label KEY=VALUE` and `run --task-id ID` (issue 21): they reach the bundle's
//! `orchestration` and `run.task_id` and the job's record; `jobs` shows and filters them;
//! bad keys and values are usage errors made before any job exists.

use crate::common::*;

#[test]
fn labels_and_task_ids_round_trip_into_the_bundle_and_jobs() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args([
            "--json",
            "run",
            "--label",
            "team=infra",
            "--label",
            "ci/step=a=b",
        ])
        .args(["--task-id", "T-42", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = json_of(&out)["job"].as_str().unwrap().to_owned();
    let plain = s
        .cmd()
        .args(["--json", "run", "--", "true"])
        .output()
        .unwrap();
    let other = json_of(&plain)["job"].as_str().unwrap().to_owned();

    let bundle_path = json_of(&out)["bundle"].as_str().unwrap().to_owned();
    let bundle: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&bundle_path).unwrap()).unwrap();
    assert_eq!(
        bundle["orchestration"],
        serde_json::json!({"ci/step": "a=b", "team": "infra"})
    );
    assert_eq!(bundle["run"]["task_id"], "T-42");
    let verified = s
        .cmd()
        .args(["bundle", "verify", &bundle_path])
        .output()
        .unwrap();
    assert!(verified.status.success(), "{verified:?}");
    // A run without them has neither (omitted when empty).
    let plain_bundle: serde_json::Value = serde_json::from_slice(
        &std::fs::read(json_of(&plain)["bundle"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    assert!(plain_bundle.get("orchestration").is_none());
    assert!(plain_bundle["run"].get("task_id").is_none());

    let listed = |args: &[&str]| -> Vec<String> {
        let out = s
            .cmd()
            .args(["--json", "jobs"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        json_of(&out)
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(listed(&[]), [other.as_str(), job.as_str()]);
    assert_eq!(listed(&["--label", "team=infra"]), [job.as_str()]);
    assert_eq!(
        listed(&["--label", "team=infra", "--label", "ci/step=a=b"]),
        [job.as_str()]
    );
    assert_eq!(listed(&["--task-id", "T-42"]), [job.as_str()]);
    assert!(listed(&["--label", "team=other"]).is_empty());
    assert!(listed(&["--task-id", "T-4"]).is_empty());
    let rows = json_of(
        &s.cmd()
            .args(["--json", "jobs", "--task-id", "T-42"])
            .output()
            .unwrap(),
    );
    assert_eq!(rows[0]["labels"]["team"], "infra");
    assert_eq!(rows[0]["task_id"], "T-42");
    let text = s.cmd().args(["jobs", "--color", "never"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("task=T-42  ci/step=a=b  team=infra"),
        "{text}"
    );
}

#[test]
fn bad_labels_and_task_ids_are_usage_errors_before_any_job() {
    let s = Sandbox::new();
    for args in [
        &["--label", "noequals"][..],
        &["--label", "bad key=1"],
        &["--label=-k=1"],
        &["--label", "k=a\u{1b}[2Jb"],
        &["--label", "k=1", "--label", "k=2"],
        &["--task-id", ""],
        &["--task-id", "a\nb"],
    ] {
        let out = s
            .cmd()
            .arg("run")
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--label") || err.contains("--task-id"),
            "{err}"
        );
        assert!(!err.contains('\u{1b}'), "escaped: {err}");
    }
    let out = s.cmd().args(["jobs", "--label", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = s.cmd().args(["--json", "jobs"]).output().unwrap();
    assert_eq!(json_of(&out), serde_json::json!([]), "no job was made");
}

#[test]
fn the_strict_reader_rejects_forged_lineage_and_observations_in_a_real_bundle() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["--json", "run", "--label", "a=1", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let path = json_of(&out)["bundle"].as_str().unwrap().to_owned();
    let real: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let forged = s.work.path().join("forged.json");
    let verify = |doc: &serde_json::Value| {
        std::fs::write(&forged, serde_json::to_vec(doc).unwrap()).unwrap();
        let out = s
            .cmd()
            .args(["bundle", "verify"])
            .arg(&forged)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(verify(&real).0, Some(0));
    let mut doc = real.clone();
    doc["lineage"] = serde_json::json!({
        "parent_run_id": "run-x", "checkpoint_id": "ckpt-y", "verified_by": "agent"
    });
    let (code, err) = verify(&doc);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("lineage.verified_by"), "{err}");
    let mut doc = real.clone();
    doc["run_observation"] = serde_json::json!({"network": {
        "allowed": 0, "denied": 0,
        "denials": [{"target": "evil.example:443", "access": "connect"}]
    }});
    let (code, err) = verify(&doc);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("run_observation.network.denied"), "{err}");
    let mut doc = real;
    doc["run_observation"] = serde_json::json!({"network": {"allowed": -1, "denied": null}});
    let (code, err) = verify(&doc);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("run_observation.network.allowed"), "{err}");
}
