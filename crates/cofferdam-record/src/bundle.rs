//! The Run Bundle, schema 4: the record a run leaves in `run-bundle.json`.
//!
//! Owns the Rust types for every JSON path of `spec/run-bundle-format.txt` and the nested
//! shapes the spec leaves to cofferdam (documented in `docs/run-bundle.md`), plus the pure
//! derivations that belong to the record itself: the per-dimension observation summary and
//! the safety booleans. It may not touch the operating system and may not decide policy:
//! the sandbox reports observations, the orchestration fills these types, and this module
//! only describes and derives.
//!
//! Presence rules follow the spec: `required` fields have no serde default; `omitted when
//! empty` fields are `#[serde(default, skip_serializing_if = ...)]`; `defaulted` fields are
//! `#[serde(default)]` and always serialized. Unknown extra fields are accepted and dropped
//! (no `deny_unknown_fields`): see `docs/run-bundle.md`, "Unknown fields".

mod context;
mod control;
mod executor;
mod filesystem;
mod network;
mod requirements;
mod resources;
mod run;
mod safety;

pub use context::{
    AccessDenial, AccessObservation, AgentCtlClient, AgentCtlCounters, AgentCtlDirective,
    AgentCtlRequest, AgentCtlSnapshot, BundleArtifact, DENIALS_MAX, EnvironmentProjection,
    Operation, OperationKind, OperationObservation, PATH_ACCESS_WORDS, PATHS_MAX, PathAccess,
    RULES_MAX, RuleCounter, RunLineage,
};
pub use control::{ControlDimension, ControlMechanism};
pub use executor::{
    ControlObservation, ControlStatus, ExecutorIdentity, ExecutorObservations, ExecutorPlan,
    OBSERVATION_CONTRACT, PlannedControl, SummaryDisagreement, missing_rows, summarize_controls,
    summarize_for_tier,
};
pub use filesystem::{
    ChangeEntry, ChangeEntryType, ChangeKind, FileAccessPolicy, FilesystemSummary, MountGrant,
    MountMode, OverlayState,
};
pub use network::{
    DestinationCounters, DnsCounters, InterceptedProtocol, InterceptionProfile,
    InterceptionSnapshot, NetworkSummary,
};
pub use requirements::{Applies, RequiredControl, Requirement, TierControls, tier_controls};
pub use resources::{ResourceDimension, ResourceLimits, ResourceSummary};
pub use run::{
    ArtifactRef, BundleRun, CapturedStream, FailureKind, ProcessOutput, RunFailure, RunState,
};
pub use safety::SafetySummary;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The only schema version this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 4;

/// `run-bundle.json`, schema 4. Fields are in the spec's order, which is also the order
/// they are written in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunBundle {
    /// Format version; exactly 4.
    #[schemars(extend("const" = SCHEMA_VERSION))]
    pub schema_version: u32,
    /// When the bundle was generated, Unix milliseconds (wall clock, passed in by the caller).
    pub generated_at_unix_ms: u64,
    /// Execution outcome and identity.
    pub run: BundleRun,
    /// Parent run and checkpoint identity, when this run was forked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<RunLineage>,
    /// What the executor reported after installing each control: the sole source of
    /// enforcement evidence.
    pub executor_observations: ExecutorObservations,
    /// The admission plan: what was asked for, never evidence of what was installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_plan: Option<ExecutorPlan>,
    /// Booleans derived from the observations and the staging state.
    pub safety: SafetySummary,
    /// The stage; absent for runs that wrote directly (no staging).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<FilesystemSummary>,
    /// Network policy and the interception evidence that exists.
    pub network: NetworkSummary,
    /// Environment variable names (never values).
    #[serde(default)]
    pub environment: EnvironmentProjection,
    /// Requested and effective resource limits, mechanisms and limitations.
    #[serde(default)]
    pub resources: ResourceSummary,
    /// Agent cooperation snapshot; never an installation receipt.
    pub agentctl: AgentCtlSnapshot,
    /// Application-specific metadata; absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub orchestration: BTreeMap<String, serde_json::Value>,
    /// The effective operation contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// Operation outcomes and access observations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_observation: Option<OperationObservation>,
    /// References to local files (never their contents).
    #[serde(default)]
    pub artifacts: Vec<BundleArtifact>,
}

impl RunBundle {
    /// The safety summary this bundle's own observations, plan and stage support. The
    /// stored [`RunBundle::safety`] must never claim more than this (the strict reader
    /// checks it).
    pub fn derived_safety(&self) -> SafetySummary {
        SafetySummary::derive(
            &self.executor_observations,
            self.executor_plan.as_ref(),
            self.filesystem.as_ref(),
        )
    }
}
