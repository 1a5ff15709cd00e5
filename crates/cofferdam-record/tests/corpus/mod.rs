//! The corpus of good and bad Run Bundles that the strict reader and the committed JSON
//! Schema are both run on (`tests/forged.rs`, `tests/schema_agreement.rs`).

#![allow(dead_code)]

use std::path::PathBuf;

/// The bytes of `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Which checker can see the rule a bad bundle breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Shape: a type, a required field, a closed vocabulary, a constant, an integer width.
    /// The JSON Schema rejects it too.
    Shape,
    /// A rule across fields (the rows against the tier, the summary and safety against the
    /// rows, internal consistency): only the reader checks it; the schema accepts the file.
    ReaderOnly,
}

/// Every bundle that must be accepted.
pub const GOOD: [&str; 7] = [
    "unknown_fields.json",
    "good_observed_files.json",
    "good_sealed.json",
    "good_scoped.json",
    "good_advisory.json",
    "full.json",
    "minimal.json",
];

/// Every forgery, the JSON path its error names, and a word the message must contain.
pub const FORGED: [(&str, &str, &str, Rule); 38] = [
    // Scoped: the non-enforced rows deleted, summary and safety set to true.
    (
        "forged_scoped_rows_deleted.json",
        "executor_observations.summary.filesystem_read",
        "no row for secrets_hidden",
        Rule::ReaderOnly,
    ),
    // The same rows deleted, summary and safety as the rule derives them from what is left:
    // the tier's completeness catches it.
    (
        "forged_scoped_rows_deleted_honest_summary.json",
        "executor_observations.controls",
        "no row for pidns (process)",
        Rule::ReaderOnly,
    ),
    // `tier: none` with the sealed tier's controls.
    (
        "forged_none_tier_sealed_controls.json",
        "executor_observations.controls[1].status",
        "does not install",
        Rule::ReaderOnly,
    ),
    (
        "forged_safety_array.json",
        "safety",
        "expected a JSON object",
        Rule::Shape,
    ),
    (
        "forged_lineage_array.json",
        "lineage",
        "expected a JSON object",
        Rule::Shape,
    ),
    // An unknown key in the closed `lineage` (issue 21).
    (
        "forged_lineage_unknown_key.json",
        "lineage.fork_reason",
        "unknown key `fork_reason`",
        Rule::Shape,
    ),
    // A run that names another parent than its lineage.
    (
        "forged_parent_mismatch.json",
        "run.parent_run_id",
        "lineage.parent_run_id",
        Rule::ReaderOnly,
    ),
    // Observations: fewer denials counted than listed; a counter that is not a number.
    (
        "forged_observation_undercount.json",
        "run_observation.network.denied",
        "2 denial(s) are listed",
        Rule::ReaderOnly,
    ),
    // The file watch's paths: kinds out of order, fewer accesses counted than listed.
    (
        "forged_observation_paths_access.json",
        "run_observation.filesystem.paths[0].access",
        "each once and in that order",
        Rule::ReaderOnly,
    ),
    (
        "forged_observation_paths_undercount.json",
        "run_observation.filesystem.allowed",
        "the paths list 2",
        Rule::ReaderOnly,
    ),
    // agentctl (issue 21): a request the protocol does not have, by a client the snapshot
    // does not list, counters that count less than is listed, a counter that is no count.
    (
        "forged_agentctl_request_unknown.json",
        "agentctl.requests[0].request",
        "unknown value `exec`",
        Rule::Shape,
    ),
    (
        "forged_agentctl_client_unlisted.json",
        "agentctl.requests[0].client",
        "not listed in agentctl.clients",
        Rule::ReaderOnly,
    ),
    (
        "forged_agentctl_argument_long.json",
        "agentctl.requests[0].argument",
        "longer than the 4096 bytes",
        Rule::ReaderOnly,
    ),
    (
        "forged_agentctl_undercount.json",
        "agentctl.counters.requests_accepted",
        "1 request(s) are listed",
        Rule::ReaderOnly,
    ),
    (
        "forged_agentctl_counter_type.json",
        "agentctl.counters.connections_refused",
        "invalid value",
        Rule::Shape,
    ),
    (
        "forged_observation_counter_type.json",
        "run_observation.network.allowed",
        "invalid type",
        Rule::Shape,
    ),
    (
        "forged_run_executor_array.json",
        "run.executor",
        "expected a JSON object",
        Rule::Shape,
    ),
    // A setup failure after the namespaces claims the write boundary from them alone.
    (
        "forged_setup_failure_claims_write.json",
        "safety.filesystem_write_non_bypassable",
        "give `false`",
        Rule::ReaderOnly,
    ),
    (
        "forged_completed_with_failure.json",
        "run.state",
        "completed",
        Rule::ReaderOnly,
    ),
    (
        "forged_finished_before_started.json",
        "run.finished_at_unix_ms",
        "before run.started_at_unix_ms",
        Rule::ReaderOnly,
    ),
    (
        "forged_changed_files.json",
        "filesystem.changed_files",
        "filesystem.changes lists 0",
        Rule::ReaderOnly,
    ),
    (
        "forged_staged_after_apply.json",
        "safety.filesystem_changes_staged",
        "filesystem.state",
        Rule::ReaderOnly,
    ),
    (
        "forged_summary_unknown_key.json",
        "executor_observations.summary.filesystem_writes",
        "unknown key",
        Rule::Shape,
    ),
    (
        "forged_summary_unknown_status.json",
        "executor_observations.summary.filesystem_write",
        "unknown value `total`",
        Rule::Shape,
    ),
    (
        "forged_schema_version.json",
        "schema_version",
        "exactly 4",
        Rule::Shape,
    ),
    (
        "forged_contract.json",
        "executor_observations.contract",
        "executor-observations.v0",
        Rule::Shape,
    ),
    (
        "forged_details_restriction.json",
        "executor_observations.controls[21].details.restriction",
        "partially_enforced",
        Rule::ReaderOnly,
    ),
    // A row claiming `enforced` whose read-back was not read (`null`: it is `unknown`).
    (
        "forged_details_read_back_null.json",
        "executor_observations.controls[13].details.read_back",
        "is null",
        Rule::ReaderOnly,
    ),
    (
        "forged_hard_control_failed.json",
        "executor_observations.controls[7].status",
        "instead of being refused",
        Rule::ReaderOnly,
    ),
    (
        "forged_uid_width.json",
        "filesystem.host_uid",
        "u32",
        Rule::Shape,
    ),
    (
        "overclaiming_safety.json",
        "safety.network_non_bypassable",
        "give `false`",
        Rule::ReaderOnly,
    ),
    ("schema_v3.json", "schema_version", "exactly 4", Rule::Shape),
    ("schema_v5.json", "schema_version", "exactly 4", Rule::Shape),
    ("missing_run_id.json", "run.run_id", "missing", Rule::Shape),
    (
        "missing_change_kind.json",
        "filesystem.changes[2].kind",
        "missing",
        Rule::Shape,
    ),
    (
        "missing_observation_contract.json",
        "executor_observations.contract",
        "missing",
        Rule::Shape,
    ),
    (
        "missing_executor_observations.json",
        "executor_observations",
        "missing",
        Rule::Shape,
    ),
    (
        "overclaiming_summary.json",
        "executor_observations.summary.resources",
        "combine to `partial`",
        Rule::ReaderOnly,
    ),
];
