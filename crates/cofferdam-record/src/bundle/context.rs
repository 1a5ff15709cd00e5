//! The bundle's smaller sections: environment names, the agent cooperation snapshot,
//! lineage, the operation and its observations, and artifact references.
//!
//! Owns `EnvironmentProjection`, `AgentCtlSnapshot` (and its counters), `RunLineage`, `Operation`,
//! `OperationObservation` and `BundleArtifact`. None of these is enforcement evidence; that
//! lives only in `executor_observations`. It may not read the environment or any file.

use super::control::ControlMechanism;
use crate::containment::ContainmentClass;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `environment`: which variable names the workload got. Values are never recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnvironmentProjection {
    /// Whether the host environment was inherited wholesale. Always `false` for cofferdam.
    #[serde(default)]
    pub inherits_host: bool,
    /// Host variable names passed through (`PATH`, `LANG`, `LC_*`, `TERM`, ..., `--env`).
    #[serde(default)]
    pub projected_keys: Vec<String>,
    /// Names cofferdam set itself (`HOME`, `USER`, `TMPDIR`, `COFFERDAM_RUN_ID`, proxies).
    #[serde(default)]
    pub runtime_injected_keys: Vec<String>,
}

/// `agentctl`: the agent cooperation snapshot (issue 21; `docs/agentctl.md`). A run offers
/// cooperating agents a control socket (`COFFERDAM_CTL`); this lists the clients that
/// spoke on it, the requests they made (a note, a checkpoint, a status query) and the
/// directives cofferdam gave in answer (a deferred checkpoint's id), with the supervisor's
/// counters of what it accepted and refused. A run on which no client spoke writes
/// `{"protocol": …, "clients": [], "directives": [], "counters": {…}}`; a bundle of an older
/// cofferdam has `{"clients": [], "directives": []}`. It is never evidence that anything was
/// installed or enforced: everything a client says is its own claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCtlSnapshot {
    /// The control protocol offered (`cofferdam-agentctl/1`), when the run offered one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Clients that made an accepted request, by their self-reported name and version.
    #[serde(default)]
    pub clients: Vec<AgentCtlClient>,
    /// Requests clients made (a note, a checkpoint, a status query), in order; absent when
    /// none. Only accepted requests are listed; refused ones are counted in `counters`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<AgentCtlRequest>,
    /// Directives sent to clients, or done on their behalf (a deferred checkpoint, with the
    /// id it was made under or why it was not made).
    #[serde(default)]
    pub directives: Vec<AgentCtlDirective>,
    /// What the supervisor accepted and refused on the socket; absent when the run offered
    /// no socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<AgentCtlCounters>,
}

/// The control socket's counters: every connection and every request line is counted once,
/// accepted or refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCtlCounters {
    /// Connections served.
    pub connections_accepted: u64,
    /// Connections closed at once: too many at a time, or too many in the run.
    pub connections_refused: u64,
    /// Request lines accepted (each one listed in `requests`).
    pub requests_accepted: u64,
    /// Request lines refused: malformed, too long, over a limit, or cut off by the read
    /// timeout.
    pub requests_refused: u64,
}

/// A cooperating agent client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCtlClient {
    /// The client's self-reported name.
    pub name: String,
    /// The client's self-reported version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A request a cooperating client made. Its words are the client's, never evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCtlRequest {
    /// The client that made it (its `name`).
    pub client: String,
    /// What it asked for: `note`, `checkpoint` or `status` (a closed vocabulary).
    #[schemars(extend("enum" = ["note", "checkpoint", "status"]))]
    pub request: String,
    /// Its argument as sent (a note's text, a checkpoint's name), when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<String>,
    /// When, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_unix_ms: Option<u64>,
}

/// A directive sent to a cooperating client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCtlDirective {
    /// The client it was sent to (its `name`).
    pub client: String,
    /// The directive.
    pub directive: String,
    /// When it was sent, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_unix_ms: Option<u64>,
}

/// `lineage`: fork ancestry. Closed, unlike the rest of the bundle: an unknown key is
/// refused, because what a run descends from decides what applying it brings, and a key
/// this reader does not know could change that meaning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunLineage {
    /// The run this one was forked from.
    pub parent_run_id: String,
    /// The checkpoint of the parent's stage the fork started from.
    pub checkpoint_id: String,
}

/// `operation`: the operation as the user asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Operation {
    /// What kind of operation.
    pub kind: OperationKind,
    /// The working directory the run targeted.
    pub workdir: PathBuf,
    /// The containment floor declared for it.
    pub containment: ContainmentClass,
    /// The manifest it was read from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<PathBuf>,
}

/// The operations cofferdam performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// `cofferdam run`.
    Run,
    /// A run whose lowers are a parent's stage (`lineage` is set).
    Fork,
}

/// `run_observation`: what the workload actually did at the boundary, where observable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OperationObservation {
    /// File accesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<AccessObservation>,
    /// Network accesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<AccessObservation>,
}

/// At most this many `denials` are listed per dimension; the rest are counted in
/// `denials_omitted`.
pub const DENIALS_MAX: usize = 64;
/// At most this many `rules` are listed per dimension; the decisions of the rest are
/// counted in `rules_omitted`.
pub const RULES_MAX: usize = 64;
/// At most this many `paths` are listed (the filesystem dimension); the rest are counted
/// in `paths_omitted`.
pub const PATHS_MAX: usize = 64;
/// The words of [`PathAccess::access`], in the order they are listed.
pub const PATH_ACCESS_WORDS: [&str; 3] = ["read", "write", "execute"];

/// Access decisions in one dimension. Counters are `null` when not observable (Landlock,
/// for one, does not report denials to cofferdam).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AccessObservation {
    /// Accesses allowed.
    pub allowed: Option<u64>,
    /// Accesses denied.
    pub denied: Option<u64>,
    /// Attributable denials, as far as they were recorded: at most [`DENIALS_MAX`], the
    /// first ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<AccessDenial>,
    /// Denials observed but not listed in `denials` (beyond [`DENIALS_MAX`]); absent when
    /// none were left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denials_omitted: Option<u64>,
    /// Decisions by the rule that made them: at most [`RULES_MAX`], the busiest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleCounter>,
    /// Decisions counted in `allowed`/`denied` but under no rule listed in `rules` (rules
    /// beyond [`RULES_MAX`]); absent when none were left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules_omitted: Option<u64>,
    /// The filesystem dimension: the paths accessed and how, as far as they were listed:
    /// at most [`PATHS_MAX`], in the order they were first seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathAccess>,
    /// Paths accessed but not listed in `paths` (beyond [`PATHS_MAX`]); absent when none
    /// were left out, or when the number is not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths_omitted: Option<u64>,
}

/// One path the run accessed (the filesystem dimension), and the kinds of access seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PathAccess {
    /// The path, relative to the workdir (`.` for the workdir itself), in display form
    /// (escaped where it is not plain UTF-8).
    pub target: String,
    /// The kinds seen, each once, in the order of [`PATH_ACCESS_WORDS`]: `read` (opened
    /// without write access, or read), `write` (written, or opened for writing and
    /// closed), `execute` (opened to be executed).
    pub access: Vec<String>,
}

/// The decisions one rule made. For the network, `rule` is the allowlist entry as written
/// (`github.com:443`), or `default` for the deny that ends every allowlist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RuleCounter {
    /// The rule.
    pub rule: String,
    /// Accesses it allowed.
    pub allowed: u64,
    /// Accesses it denied.
    pub denied: u64,
}

/// One attributable denial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AccessDenial {
    /// The path or `host:port` that was denied.
    pub target: String,
    /// The access, e.g. `read`, `write`, `execute`, `connect`, `resolve`.
    pub access: String,
    /// The mechanism that denied it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mechanism: Option<ControlMechanism>,
    /// When, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_unix_ms: Option<u64>,
}

/// `artifacts[]`: a reference to a local file. Contents are never embedded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BundleArtifact {
    /// The artifact's role, e.g. `run-record`, `trace`, `capture`.
    pub kind: String,
    /// Where it is; resolve and retain it separately.
    pub path: PathBuf,
}
