//! cofferdam's pure decisions.
//!
//! Owns the manifest and its parser, the run flags and how they combine with the manifest,
//! the containment floor, the mapping from host facts to tier and class, the scope report
//! builder and the doctor checklist. Everything here is a pure function of values: it may not
//! make syscalls, read files or look at the environment (callers pass text, paths and
//! `HostFacts` in), so every decision is unit-tested without privileges.

pub mod allow;
pub mod manifest;
pub mod units;

pub use allow::{AllowEntry, AllowError, HostPattern, NetworkMode};
pub use manifest::{Manifest, ManifestError, MountMode, parse_manifest};
pub mod tier;

pub use tier::{
    ContainmentDecision, Missing, TierDecision, decide_containment, decide_containment_capped,
    decide_tier,
};
pub mod policy;

pub use policy::{
    LoadedManifest, Mount, Places, Policy, RunFlags, resolve_layered, resolve_policy,
};
pub mod scope;
pub mod secrets;

pub use scope::{ScopeInputs, build_scope_report};
pub mod doctor;

pub use doctor::{CheckStatus, DoctorReport, doctor};
pub mod agentctl;
pub mod cgroup_plan;
pub mod controls;
pub mod flag;
pub mod inherit;
pub mod lexical;
pub mod mount_program;
pub mod orchestration;
pub mod outcome;
pub mod plan;
pub mod profiles;
pub mod publish;
pub mod refusal;
pub mod resources;
pub mod scoped_plan;
pub mod toolchain;
pub mod trust;
pub mod verdict;
pub mod widen;
