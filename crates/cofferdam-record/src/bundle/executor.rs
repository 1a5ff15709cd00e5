//! The executor's identity, its plan, and its observations: the one place enforcement
//! evidence lives in a bundle.
//!
//! Owns `ExecutorIdentity`, `ExecutorPlan` (what was asked for: never evidence),
//! `ExecutorObservations` (what the sandbox reported after installing each control, under
//! the contract [`OBSERVATION_CONTRACT`]) and the pure per-dimension summary rule. It may not
//! install or probe anything: the sandbox fills `ControlObservation`s, this module only
//! records and combines them.

use super::control::{ControlDimension, ControlMechanism};
use super::requirements::{RequiredControl, tier_controls};
use crate::containment::{ContainmentClass, EnforcementTier};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The observation contract this crate writes and the strict reader accepts.
pub const OBSERVATION_CONTRACT: &str = "cofferdam.executor-observations.v1";

/// `run.executor`: the executor that was selected. Not installation evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutorIdentity {
    /// `cofferdam-sealed`, `cofferdam-scoped` or `cofferdam-advisory`.
    pub name: String,
    /// The enforcement tier the executor was selected for.
    pub tier: EnforcementTier,
    /// The cofferdam version that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl ExecutorIdentity {
    /// cofferdam's own executor for `tier`: named `cofferdam-<class>`.
    pub fn cofferdam(tier: EnforcementTier, version: Option<String>) -> Self {
        Self {
            name: format!("cofferdam-{}", tier.class()),
            tier,
            version,
        }
    }
}

/// `executor_plan`: the admission plan. It says what was requested and which controls were
/// meant to be installed; it is never evidence that they were (see `executor_observations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutorPlan {
    /// The containment floor the run declared (manifest, flag, default `scoped`).
    pub declared_floor: ContainmentClass,
    /// The tier the plan selected: the strongest the probed host offers.
    pub requested_tier: EnforcementTier,
    /// The class that tier backs.
    pub requested_class: ContainmentClass,
    /// Whether `requested_class >= declared_floor` at admission.
    pub floor_met: bool,
    /// Controls the plan meant to install, in setup order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned_controls: Vec<PlannedControl>,
}

/// One control the plan meant to install.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PlannedControl {
    /// The mechanism.
    pub mechanism: ControlMechanism,
    /// The boundary dimension it was meant to enforce.
    pub dimension: ControlDimension,
}

/// `executor_observations`: the executor's receipt, the sole source of enforcement
/// evidence. Every field is required: a bundle without them is rejected, never read as
/// "nothing was enforced" or "everything was".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutorObservations {
    /// The observation contract, `cofferdam.executor-observations.v1`.
    #[schemars(extend("const" = OBSERVATION_CONTRACT))]
    pub contract: String,
    /// The executor that reported, e.g. `cofferdam-sealed`.
    pub executor: String,
    /// The tier that was actually set up.
    pub tier: EnforcementTier,
    /// One entry per control the executor attempted, per dimension it serves, in setup
    /// order. A mechanism serving several dimensions (Landlock) appears once for each.
    pub controls: Vec<ControlObservation>,
    /// Per-dimension status combined from `controls`: any `failed` gives `failed`, else any
    /// `unknown` gives `unknown`, all `enforced` gives `enforced`, all `unavailable` gives `unavailable`, any other mix gives
    /// `partial`. A dimension that is absent had no control at all.
    #[schemars(extend("propertyNames" = {"$ref": "#/$defs/ControlDimension"}))]
    pub summary: BTreeMap<ControlDimension, ControlStatus>,
}

impl ExecutorObservations {
    /// Observations under the current contract, with the summary computed from `controls`.
    pub fn new(
        executor: impl Into<String>,
        tier: EnforcementTier,
        controls: Vec<ControlObservation>,
    ) -> Self {
        let summary = summarize_for_tier(tier, &controls);
        Self {
            contract: OBSERVATION_CONTRACT.to_owned(),
            executor: executor.into(),
            tier,
            controls,
            summary,
        }
    }

    /// The status of `dimension` that the observations support: the weaker of what the
    /// stored summary says and what the controls combine to. `None` (no control, or the
    /// summary is silent) means not enforced.
    pub fn status_of(&self, dimension: ControlDimension) -> Option<ControlStatus> {
        let claimed = self.summary.get(&dimension).copied()?;
        let supported = summarize_for_tier(self.tier, &self.controls)
            .get(&dimension)
            .copied()?;
        Some(if claimed.rank() <= supported.rank() {
            claimed
        } else {
            supported
        })
    }

    /// Whether `dimension` is `enforced` by the observations.
    pub fn is_enforced(&self, dimension: ControlDimension) -> bool {
        self.status_of(dimension) == Some(ControlStatus::Enforced)
    }

    /// Every dimension whose stored summary claims more than its controls support, in
    /// dimension order. Empty for an honest summary.
    pub fn summary_disagreements(&self) -> Vec<SummaryDisagreement> {
        let supported = summarize_for_tier(self.tier, &self.controls);
        self.summary
            .iter()
            .filter_map(|(&dimension, &claimed)| {
                let backed = supported.get(&dimension).copied();
                let overclaims = backed.is_none_or(|b| claimed.rank() > b.rank());
                overclaims.then_some(SummaryDisagreement {
                    dimension,
                    claimed,
                    supported: backed,
                })
            })
            .collect()
    }
}

/// A summary entry that claims more than the controls support.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryDisagreement {
    /// The dimension.
    pub dimension: ControlDimension,
    /// What the summary says.
    pub claimed: ControlStatus,
    /// What the controls combine to (`None`: no control for the dimension).
    pub supported: Option<ControlStatus>,
}

/// Combines controls into a per-dimension status. For each dimension that has controls:
/// any `failed` → `failed`; else any `unknown` → `unknown`; all `enforced` → `enforced`; all `unavailable` → `unavailable`;
/// any other mix → `partial`. Dimensions without controls are absent.
pub fn summarize_controls(
    controls: &[ControlObservation],
) -> BTreeMap<ControlDimension, ControlStatus> {
    let mut summary = BTreeMap::new();
    for dimension in ControlDimension::ALL {
        let statuses: Vec<ControlStatus> = controls
            .iter()
            .filter(|c| c.dimension == dimension)
            .map(|c| c.status)
            .collect();
        let Some(&first) = statuses.first() else {
            continue;
        };
        let combined = if statuses.contains(&ControlStatus::Failed) {
            ControlStatus::Failed
        } else if statuses.contains(&ControlStatus::Unknown) {
            ControlStatus::Unknown
        } else if statuses.iter().all(|&s| s == first) {
            first
        } else {
            ControlStatus::Partial
        };
        summary.insert(dimension, combined);
    }
    summary
}

/// [`summarize_controls`], then the tier's table: a dimension that has a row `enforced` but
/// lacks a row the tier's table has for it (see [`tier_controls`]; the rows of a confined
/// network included, as a dimension without any row is absent anyway) counts the missing
/// row as not installed, so it is at most `partial`. A run that failed in setup, before
/// installing its remaining controls, thus claims nothing it did not read.
pub fn summarize_for_tier(
    tier: EnforcementTier,
    controls: &[ControlObservation],
) -> BTreeMap<ControlDimension, ControlStatus> {
    let mut summary = summarize_controls(controls);
    for missing in missing_rows(tier, controls, true) {
        if let Some(status) = summary.get_mut(&missing.dimension)
            && *status == ControlStatus::Enforced
        {
            *status = ControlStatus::Partial;
        }
    }
    summary
}

/// The rows of `tier`'s table that `controls` lack, in table order; the rows that apply only
/// to a confined network are included when `network_confined`.
pub fn missing_rows(
    tier: EnforcementTier,
    controls: &[ControlObservation],
    network_confined: bool,
) -> Vec<&'static RequiredControl> {
    tier_controls(tier)
        .applicable(network_confined)
        .filter(|r| {
            !controls
                .iter()
                .any(|c| r.matches(c.mechanism, c.dimension, c.detail_control()))
        })
        .collect()
}

/// `executor_observations.controls[]`: what the executor saw after installing one control.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ControlObservation {
    /// The kernel mechanism.
    pub mechanism: ControlMechanism,
    /// The boundary dimension this entry speaks for.
    pub dimension: ControlDimension,
    /// What was observed after installation.
    pub status: ControlStatus,
    /// Why the control is not `enforced`, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Mechanism-specific facts, e.g. `{"abi": 7, "restriction": "fully_enforced"}` for
    /// Landlock or `{"denied_syscalls": 41}` for seccomp.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, serde_json::Value>,
}

impl ControlObservation {
    /// An observation without reason or details.
    pub fn new(
        mechanism: ControlMechanism,
        dimension: ControlDimension,
        status: ControlStatus,
    ) -> Self {
        Self {
            mechanism,
            dimension,
            status,
            reason: None,
            details: BTreeMap::new(),
        }
    }

    /// Add `why` to the row's reason, after the one it has (`"first; why"`).
    pub fn add_reason(&mut self, why: String) {
        self.reason = Some(match self.reason.take() {
            Some(r) => format!("{r}; {why}"),
            None => why,
        });
    }

    /// `details.control`, the name a mechanism gives one of several rows it reports for
    /// the same dimension.
    pub fn detail_control(&self) -> Option<&str> {
        self.details
            .get("control")
            .and_then(serde_json::Value::as_str)
    }
}

/// What the executor observed after installing a control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ControlStatus {
    /// Installed and fully in force.
    Enforced,
    /// Installed, but weaker than planned (e.g. Landlock partially enforced at this ABI).
    Partial,
    /// The host does not offer the mechanism; nothing was installed.
    Unavailable,
    /// Installing it was attempted and failed.
    Failed,
    /// Installed, but its effect could not be read back (e.g. `/proc/self/mountinfo`
    /// unreadable): not shown to hold, so never counted as enforced, and not shown to have
    /// failed either.
    Unknown,
}

impl ControlStatus {
    /// Strength order: `failed` < `unavailable` < `unknown` < `partial` < `enforced`. An
    /// `unknown` row may hold or not; `partial` is a reading that it holds in part.
    pub fn rank(self) -> u8 {
        match self {
            Self::Failed => 0,
            Self::Unavailable => 1,
            Self::Unknown => 2,
            Self::Partial => 3,
            Self::Enforced => 4,
        }
    }

    /// The wire name.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Enforced => "enforced",
            Self::Partial => "partial",
            Self::Unavailable => "unavailable",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ControlStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ControlDimension as D;
    use ControlMechanism as M;
    use ControlStatus as S;

    fn obs(m: ControlMechanism, d: ControlDimension, s: ControlStatus) -> ControlObservation {
        ControlObservation::new(m, d, s)
    }

    #[test]
    fn summary_combines_each_dimension() {
        let controls = vec![
            obs(M::PivotRoot, D::FilesystemRead, S::Enforced),
            obs(M::Landlock, D::FilesystemRead, S::Enforced),
            obs(M::Overlay, D::FilesystemWrite, S::Enforced),
            obs(M::Landlock, D::FilesystemWrite, S::Partial),
            obs(M::Rlimit, D::Resources, S::Enforced),
            obs(M::Cgroup, D::Resources, S::Unavailable),
            obs(M::Netns, D::Network, S::Unavailable),
            obs(M::Seccomp, D::KernelSurface, S::Enforced),
            obs(M::Capabilities, D::KernelSurface, S::Failed),
        ];
        let summary = summarize_controls(&controls);
        assert_eq!(summary.get(&D::FilesystemRead), Some(&S::Enforced));
        assert_eq!(summary.get(&D::FilesystemWrite), Some(&S::Partial));
        assert_eq!(summary.get(&D::Resources), Some(&S::Partial));
        assert_eq!(summary.get(&D::Network), Some(&S::Unavailable));
        assert_eq!(summary.get(&D::KernelSurface), Some(&S::Failed));
        assert_eq!(summary.get(&D::Process), None);
    }

    #[test]
    fn an_unread_row_makes_its_dimension_unknown_never_enforced() {
        let controls = vec![
            obs(M::Mountns, D::FilesystemRead, S::Enforced),
            obs(M::SecretsHidden, D::FilesystemRead, S::Unknown),
            obs(M::PivotRoot, D::FilesystemWrite, S::Unknown),
            obs(M::Overlay, D::FilesystemWrite, S::Failed),
        ];
        let summary = summarize_controls(&controls);
        assert_eq!(summary.get(&D::FilesystemRead), Some(&S::Unknown));
        assert_eq!(summary.get(&D::FilesystemWrite), Some(&S::Failed));
        // A summary that turns an unread row into a partial reading overclaims.
        let mut o = ExecutorObservations::new(
            "cofferdam-sealed",
            EnforcementTier::MountnsPivotRootLandlockSeccomp,
            controls,
        );
        assert!(!o.is_enforced(D::FilesystemRead));
        o.summary.insert(D::FilesystemRead, S::Partial);
        assert_eq!(o.summary_disagreements().len(), 1);
        assert_eq!(o.status_of(D::FilesystemRead), Some(S::Unknown));
        assert_eq!(S::Unknown.wire_name(), "unknown");
        assert_eq!(
            serde_json::to_value(S::Unknown).ok(),
            Some("unknown".into())
        );
    }

    #[test]
    fn an_overclaiming_summary_is_caught_and_not_believed() {
        let mut o = ExecutorObservations::new(
            "cofferdam-scoped",
            EnforcementTier::LandlockSeccomp,
            vec![obs(M::Landlock, D::Network, S::Partial)],
        );
        assert!(o.summary_disagreements().is_empty());
        o.summary.insert(D::Network, S::Enforced);
        o.summary.insert(D::Process, S::Enforced);
        let found = o.summary_disagreements();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].dimension, D::Network);
        assert_eq!(found[0].supported, Some(S::Partial));
        assert_eq!(found[1].dimension, D::Process);
        assert_eq!(found[1].supported, None);
        assert_eq!(o.status_of(D::Network), Some(S::Partial));
        assert!(!o.is_enforced(D::Process));
    }

    #[test]
    fn a_silent_summary_means_not_enforced() {
        let mut o = ExecutorObservations::new(
            "cofferdam-sealed",
            EnforcementTier::MountnsPivotRootLandlockSeccomp,
            vec![obs(M::Netns, D::Network, S::Enforced)],
        );
        assert!(o.is_enforced(D::Network));
        o.summary.clear();
        assert!(!o.is_enforced(D::Network));
    }

    #[test]
    fn mechanism_wire_names_match_serde() {
        for m in M::ALL {
            assert_eq!(
                serde_json::to_string(&m).unwrap(),
                format!("\"{m}\""),
                "{m:?}"
            );
        }
    }

    #[test]
    fn executor_names_follow_the_class() {
        let id =
            ExecutorIdentity::cofferdam(EnforcementTier::MountnsPivotRootLandlockSeccomp, None);
        assert_eq!(id.name, "cofferdam-sealed");
        assert_eq!(
            ExecutorIdentity::cofferdam(EnforcementTier::None, None).name,
            "cofferdam-advisory"
        );
    }

    #[test]
    fn a_missing_row_of_the_tier_caps_its_dimension_at_partial() {
        let sealed = EnforcementTier::MountnsPivotRootLandlockSeccomp;
        // A setup failure after the namespaces: the mount namespace alone says nothing
        // about where writes land.
        let early = vec![
            obs(M::Userns, D::Process, S::Enforced),
            obs(M::Mountns, D::FilesystemWrite, S::Enforced),
            obs(M::Mountns, D::FilesystemRead, S::Enforced),
        ];
        let summary = summarize_for_tier(sealed, &early);
        assert_eq!(summary.get(&D::FilesystemWrite), Some(&S::Partial));
        assert_eq!(summary.get(&D::FilesystemRead), Some(&S::Partial));
        assert_eq!(summary.get(&D::Network), None);
        let missing = missing_rows(sealed, &early, true);
        assert!(missing.iter().any(|r| r.mechanism == M::Overlay));
        // Every row the tier has: nothing is capped.
        let complete: Vec<ControlObservation> = tier_controls(sealed)
            .required
            .iter()
            .map(|r| obs(r.mechanism, r.dimension, S::Enforced))
            .collect();
        assert!(missing_rows(sealed, &complete, true).is_empty());
        let summary = summarize_for_tier(sealed, &complete);
        assert!(summary.values().all(|&s| s == S::Enforced), "{summary:?}");
        assert_eq!(summary, summarize_controls(&complete));
    }

    #[test]
    fn summary_keys_serialize_as_wire_names() {
        let o = ExecutorObservations::new(
            "cofferdam-sealed",
            EnforcementTier::MountnsPivotRootLandlockSeccomp,
            vec![obs(M::NoNewPrivs, D::Process, S::Enforced)],
        );
        let json = serde_json::to_value(&o).unwrap();
        // The sealed tier's other process rows are missing: at most partial.
        assert_eq!(json["summary"]["process"], "partial");
        assert_eq!(json["controls"][0]["mechanism"], "no_new_privs");
        for d in D::ALL {
            assert_eq!(
                serde_json::to_string(&d).unwrap(),
                format!("\"{}\"", d.wire_name())
            );
        }
    }
}
