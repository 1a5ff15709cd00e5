#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Golden tests for the Run Bundle: the fixtures under `tests/fixtures/` against the strict
//! reader and the canonical writer.

use cofferdam_record::bundle::{
    ChangeKind, ControlDimension, ControlStatus, OverlayState, RunState,
};
use cofferdam_record::{BundleError, RunBundle, read_bundle, write_bundle_json};
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn full_value() -> Value {
    serde_json::from_slice(&fixture("full.json")).unwrap()
}

fn read_value(v: &Value) -> Result<RunBundle, BundleError> {
    read_bundle(serde_json::to_string(v).unwrap().as_bytes())
}

/// Removes the member a dotted path (with `[i]` indexes) names; panics if it is not there.
fn remove_path(doc: &mut Value, path: &str) {
    let (parent, last) = match path.rsplit_once('.') {
        Some((p, l)) => (Some(p), l),
        None => (None, path),
    };
    let mut node = doc;
    for segment in parent.into_iter().flat_map(|p| p.split('.')) {
        node = step(node, segment);
    }
    let removed = node.as_object_mut().unwrap().remove(last);
    assert!(removed.is_some(), "{path} is not in the fixture");
}

fn step<'a>(node: &'a mut Value, segment: &str) -> &'a mut Value {
    match segment.split_once('[') {
        Some((key, index)) => {
            let i: usize = index.trim_end_matches(']').parse().unwrap();
            &mut node[key][i]
        }
        None => &mut node[segment],
    }
}

fn rejected(name: &str) -> BundleError {
    match read_bundle(&fixture(name)) {
        Ok(_) => panic!("{name} was accepted"),
        Err(e) => e,
    }
}

#[test]
fn full_bundle_round_trips_byte_for_byte() {
    let bytes = fixture("full.json");
    let bundle = read_bundle(&bytes).unwrap();
    let written = write_bundle_json(&bundle).unwrap();
    assert!(
        written.as_bytes() == bytes.as_slice(),
        "re-serialized full.json differs:\n{written}"
    );
}

#[test]
fn full_bundle_says_what_a_sealed_run_should() {
    let b = read_bundle(&fixture("full.json")).unwrap();
    assert_eq!(b.run.state, RunState::Completed);
    assert_eq!(b.run.exit_code, Some(0));
    // Every boundary dimension is observed; resources only partly (no delegated cgroup).
    for d in ControlDimension::ALL {
        let expected = if d == ControlDimension::Resources {
            ControlStatus::Partial
        } else {
            ControlStatus::Enforced
        };
        assert_eq!(b.executor_observations.status_of(d), Some(expected), "{d}");
    }
    assert!(b.executor_observations.summary_disagreements().is_empty());
    // The stored safety is exactly what the observations derive.
    assert_eq!(b.safety, b.derived_safety());
    assert!(b.safety.filesystem_non_bypassable && b.safety.network_non_bypassable);
    assert!(!b.safety.host_process);
    let fs = b.filesystem.as_ref().unwrap();
    assert_eq!(fs.state, OverlayState::Staged);
    assert_eq!(fs.changes.len(), 4);
    assert_eq!(fs.changed_files, 4);
    let deleted = fs.changes.iter().filter(|c| c.kind == ChangeKind::Deleted);
    assert_eq!(deleted.count(), fs.whiteouts);
    let counters = b.network.intercepted.as_ref().unwrap();
    let dest_allowed: u64 = counters.destinations.iter().filter_map(|d| d.allowed).sum();
    assert_eq!(counters.allowed, Some(dest_allowed));
    assert_eq!(b.network.policy["mode"], "allow");
    assert!(b.lineage.is_some() && b.operation.is_some() && b.run_observation.is_some());
    assert_eq!(b.artifacts.len(), 3);
    assert!(b.resources.effective.cpus.is_none() && b.resources.requested.cpus.is_some());
}

#[test]
fn minimal_bundle_has_only_required_fields_parses_and_round_trips() {
    let bytes = fixture("minimal.json");
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    let schema: Value = serde_json::from_str(&cofferdam_record::run_bundle_schema_json()).unwrap();
    let mut present: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    present.sort_unstable();
    required.sort_unstable();
    assert_eq!(
        present, required,
        "minimal.json must hold exactly the required fields"
    );

    let bundle = read_bundle(&bytes).unwrap();
    assert_eq!(bundle.run.state, RunState::Completed);
    assert!(bundle.run.warnings.is_empty() && bundle.artifacts.is_empty());
    assert!(bundle.filesystem.is_none() && bundle.lineage.is_none());
    // Safety derived from no controls at all: nothing is guaranteed.
    assert!(bundle.safety.host_process);
    let written = write_bundle_json(&bundle).unwrap();
    let again = read_bundle(written.as_bytes()).unwrap();
    assert_eq!(again, bundle);
    assert_eq!(write_bundle_json(&again).unwrap(), written);
    // Defaulted fields are written out; omitted-when-empty ones are not.
    let out: Value = serde_json::from_str(&written).unwrap();
    assert_eq!(out["environment"]["inherits_host"], false);
    assert_eq!(out["artifacts"], Value::Array(vec![]));
    assert!(out.get("lineage").is_none() && out.get("orchestration").is_none());
    assert!(out["run"].get("failure").is_none());
}

#[test]
fn defaulted_fields_may_be_absent() {
    let defaulted = [
        "environment",
        "resources",
        "artifacts",
        "run.warnings",
        "run.output",
        "run.metrics",
        "run.result_artifacts",
        "safety.filesystem_read_non_bypassable",
        "safety.filesystem_write_non_bypassable",
        "safety.warnings",
        "filesystem.root_overlay",
        "filesystem.excluded_paths",
        "filesystem.access_policy",
        "filesystem.sample_paths",
        "filesystem.changes",
        "resources.mechanisms",
        "resources.limitations",
        "environment.inherits_host",
        "environment.projected_keys",
        "environment.runtime_injected_keys",
    ];
    for path in defaulted {
        let mut doc = full_value();
        remove_path(&mut doc, path);
        if path == "filesystem.changes" {
            // No change list is an empty one, and changed_files counts it.
            doc["filesystem"]["changed_files"] = 0.into();
        }
        let bundle = read_value(&doc).unwrap_or_else(|e| panic!("without {path}: {e}"));
        let out = serde_json::to_value(&bundle).unwrap();
        let mut node = &out;
        for segment in path.split('.') {
            node = &node[segment];
        }
        assert!(
            !node.is_null(),
            "{path} is not written back after defaulting"
        );
    }
    let mut doc = full_value();
    for path in defaulted.iter().filter(|p| p.contains('.')) {
        remove_path(&mut doc, path);
    }
    doc["filesystem"]["changed_files"] = 0.into();
    for path in ["environment", "resources", "artifacts"] {
        remove_path(&mut doc, path);
    }
    let bundle = read_value(&doc).unwrap();
    assert!(bundle.environment.projected_keys.is_empty());
    assert!(bundle.resources.requested.memory_bytes.is_none());
    // An absent defaulted safety boolean takes the value the rows derive.
    assert!(bundle.safety.filesystem_read_non_bypassable);
    assert!(bundle.safety.filesystem_write_non_bypassable);
    let written = write_bundle_json(&bundle).unwrap();
    assert_eq!(read_bundle(written.as_bytes()).unwrap(), bundle);
}

#[test]
fn every_required_field_is_named_when_missing() {
    let required = [
        "generated_at_unix_ms",
        "run",
        "run.run_id",
        "run.attempt_id",
        "run.session_id",
        "run.agent",
        "run.command",
        "run.state",
        "run.started_at_unix_ms",
        "run.finished_at_unix_ms",
        "run.duration_ms",
        "lineage.parent_run_id",
        "lineage.checkpoint_id",
        "executor_observations.executor",
        "executor_observations.tier",
        "executor_observations.controls",
        "executor_observations.summary",
        "executor_observations.controls[3].mechanism",
        "executor_observations.controls[3].dimension",
        "executor_observations.controls[3].status",
        "safety",
        "safety.safe_profile_requested",
        "safety.host_process",
        "safety.filesystem_changes_staged",
        "safety.filesystem_non_bypassable",
        "safety.network_non_bypassable",
        "filesystem.state",
        "filesystem.target",
        "filesystem.upper",
        "filesystem.changed_files",
        "filesystem.whiteouts",
        "filesystem.changes[1].path",
        "filesystem.changes[1].kind",
        "network",
        "network.policy",
        "resources.requested",
        "resources.effective",
        "agentctl",
        "artifacts[0].kind",
        "artifacts[0].path",
    ];
    for path in required {
        let mut doc = full_value();
        remove_path(&mut doc, path);
        match read_value(&doc) {
            Ok(_) => panic!("accepted a bundle without {path}"),
            Err(e) => {
                assert_eq!(e.path(), Some(path), "{e}");
                assert_eq!(e.to_string(), format!("missing required field `{path}`"));
            }
        }
    }
}

#[test]
fn schema_v3_is_rejected_by_version_first() {
    let e = rejected("schema_v3.json");
    assert_eq!(
        e.to_string(),
        "unsupported schema_version 3: this reader accepts exactly 4"
    );
    assert_eq!(e.path(), Some("schema_version"));
}

#[test]
fn schema_v5_is_rejected() {
    let e = rejected("schema_v5.json");
    assert_eq!(
        e.to_string(),
        "unsupported schema_version 5: this reader accepts exactly 4"
    );
}

#[test]
fn missing_schema_version_is_named() {
    let mut doc = full_value();
    remove_path(&mut doc, "schema_version");
    let e = read_value(&doc).unwrap_err();
    assert_eq!(e.to_string(), "missing required field `schema_version`");
}

#[test]
fn missing_run_id_is_named_with_its_full_path() {
    let e = rejected("missing_run_id.json");
    assert_eq!(e.path(), Some("run.run_id"));
    assert_eq!(e.to_string(), "missing required field `run.run_id`");
}

#[test]
fn missing_executor_observations_is_named() {
    let e = rejected("missing_executor_observations.json");
    assert_eq!(
        e,
        BundleError::MissingField {
            path: "executor_observations".into()
        }
    );
}

#[test]
fn missing_observation_contract_is_named() {
    let e = rejected("missing_observation_contract.json");
    assert_eq!(e.path(), Some("executor_observations.contract"));
    assert_eq!(
        e.to_string(),
        "missing required field `executor_observations.contract`"
    );
}

#[test]
fn unknown_observation_contract_is_rejected() {
    let mut doc = full_value();
    doc["executor_observations"]["contract"] = "cofferdam.executor-observations.v2".into();
    let e = read_value(&doc).unwrap_err();
    assert!(matches!(e, BundleError::UnsupportedContract { .. }), "{e}");
    assert_eq!(e.path(), Some("executor_observations.contract"));
}

#[test]
fn a_missing_field_inside_an_array_element_is_named_with_its_index() {
    let e = rejected("missing_change_kind.json");
    assert_eq!(
        e.to_string(),
        "missing required field `filesystem.changes[2].kind`"
    );
}

#[test]
fn wrong_types_and_unknown_values_are_named() {
    let mut doc = full_value();
    doc["run"]["state"] = "running".into();
    let e = read_value(&doc).unwrap_err();
    assert_eq!(e.path(), Some("run.state"));
    assert!(e.to_string().contains("unknown value `running`"), "{e}");

    let mut doc = full_value();
    doc["executor_observations"]["controls"][5]["status"] = "probably".into();
    let e = read_value(&doc).unwrap_err();
    assert_eq!(e.path(), Some("executor_observations.controls[5].status"));

    let mut doc = full_value();
    doc["network"]["intercepted"]["denied"] = (-1).into();
    let e = read_value(&doc).unwrap_err();
    assert_eq!(e.path(), Some("network.intercepted.denied"));
}

#[test]
fn safety_that_claims_more_than_the_observations_is_rejected() {
    let e = rejected("overclaiming_safety.json");
    assert_eq!(e.path(), Some("safety.network_non_bypassable"));
    assert!(matches!(e, BundleError::Inconsistent { .. }), "{e}");
}

#[test]
fn a_summary_that_claims_more_than_its_controls_is_rejected() {
    let e = rejected("overclaiming_summary.json");
    assert_eq!(e.path(), Some("executor_observations.summary.resources"));
    assert!(e.to_string().contains("combine to `partial`"), "{e}");
}

#[test]
fn unknown_extra_fields_are_accepted_and_dropped() {
    let bytes = fixture("unknown_fields.json");
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        doc["filesystem"]["changes"][1]
            .get("host_fingerprint")
            .is_some()
    );
    let bundle = read_bundle(&bytes).unwrap();
    let written = write_bundle_json(&bundle).unwrap();
    assert!(!written.contains("host_fingerprint"));
    assert!(!written.contains("review_context"));
    assert!(
        written.as_bytes() == fixture("full.json").as_slice(),
        "dropping the unknown fields should give back full.json"
    );
}

#[test]
fn omitted_when_empty_fields_accept_null() {
    let mut doc = full_value();
    doc["lineage"] = Value::Null;
    doc["run"]["failure"] = Value::Null;
    let bundle = read_value(&doc).unwrap();
    assert!(bundle.lineage.is_none() && bundle.run.failure.is_none());
}

#[test]
fn the_writer_refuses_what_the_reader_would() {
    let mut bundle = read_bundle(&fixture("full.json")).unwrap();
    bundle.run.metrics.insert("setup_ms".into(), f64::NAN);
    let e = write_bundle_json(&bundle).unwrap_err();
    assert_eq!(e.path(), Some("run.metrics.setup_ms"));

    let mut bundle = read_bundle(&fixture("minimal.json")).unwrap();
    bundle.safety.filesystem_non_bypassable = true;
    let e = write_bundle_json(&bundle).unwrap_err();
    assert_eq!(e.path(), Some("safety.filesystem_non_bypassable"));

    let mut bundle = read_bundle(&fixture("minimal.json")).unwrap();
    bundle.schema_version = 3;
    assert!(matches!(
        write_bundle_json(&bundle),
        Err(BundleError::UnsupportedVersion { .. })
    ));
}

#[test]
fn duplicate_fields_are_rejected() {
    let text = String::from_utf8(fixture("minimal.json")).unwrap();
    let text = text.replacen(
        "\"agent\": \"true\",",
        "\"agent\": \"true\", \"agent\": \"x\",",
        1,
    );
    let e = read_bundle(text.as_bytes()).unwrap_err();
    assert_eq!(e.path(), Some("run.agent"), "{e}");
}
