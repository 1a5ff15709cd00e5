//! `safety`: the booleans a reviewer reads first, and the one pure function that derives
//! them.
//!
//! Owns `SafetySummary` and `SafetySummary::derive`. The enforcement booleans come only from
//! `executor_observations` (never from the plan, the tier name or the requested profile);
//! the plan contributes only `safe_profile_requested` and the stage only
//! `filesystem_changes_staged`. It may not look at the host.

use super::control::ControlDimension;
use super::executor::{ExecutorObservations, ExecutorPlan};
use super::filesystem::{FilesystemSummary, OverlayState};
use crate::containment::ContainmentClass;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `safety`: derived booleans and boundary warnings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SafetySummary {
    /// The run asked for containment above `advisory`. A request, not proof of anything.
    pub safe_profile_requested: bool,
    /// The workload ran without observed process isolation (the `process` dimension is not
    /// `enforced`): it shares the host's process view.
    pub host_process: bool,
    /// A stage currently retains changes (state `active` or `staged`, at least one change).
    pub filesystem_changes_staged: bool,
    /// Both `filesystem_read` and `filesystem_write` are `enforced`.
    pub filesystem_non_bypassable: bool,
    /// The `filesystem_read` dimension is `enforced`.
    #[serde(default)]
    pub filesystem_read_non_bypassable: bool,
    /// The `filesystem_write` dimension is `enforced`.
    #[serde(default)]
    pub filesystem_write_non_bypassable: bool,
    /// The `network` dimension is `enforced`.
    pub network_non_bypassable: bool,
    /// One line per boundary dimension that is not `enforced`, and per summary entry that
    /// claims more than its controls support.
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl SafetySummary {
    /// Derives the summary. Enforcement booleans depend on `observations` alone (a dimension
    /// counts only when it is `enforced` both in the stored summary and by its controls);
    /// `plan` only sets `safe_profile_requested`; `filesystem` only sets
    /// `filesystem_changes_staged`.
    pub fn derive(
        observations: &ExecutorObservations,
        plan: Option<&ExecutorPlan>,
        filesystem: Option<&FilesystemSummary>,
    ) -> Self {
        let read = observations.is_enforced(ControlDimension::FilesystemRead);
        let write = observations.is_enforced(ControlDimension::FilesystemWrite);
        let staged = filesystem.is_some_and(|fs| {
            matches!(fs.state, OverlayState::Active | OverlayState::Staged)
                && (fs.changed_files > 0 || fs.whiteouts > 0 || !fs.changes.is_empty())
        });
        Self {
            safe_profile_requested: plan
                .is_some_and(|p| p.declared_floor > ContainmentClass::Advisory),
            host_process: !observations.is_enforced(ControlDimension::Process),
            filesystem_changes_staged: staged,
            filesystem_non_bypassable: read && write,
            filesystem_read_non_bypassable: read,
            filesystem_write_non_bypassable: write,
            network_non_bypassable: observations.is_enforced(ControlDimension::Network),
            warnings: warnings(observations),
        }
    }

    /// The enforcement claims in `self` that `supported` does not back, as
    /// `(field, claimed value)` pairs. A claim is a `*_non_bypassable` that is `true`, or a
    /// `host_process` that is `false`.
    pub fn overclaims(&self, supported: &SafetySummary) -> Vec<(&'static str, bool)> {
        let mut found = Vec::new();
        let non_bypassable = [
            (
                "filesystem_non_bypassable",
                self.filesystem_non_bypassable,
                supported.filesystem_non_bypassable,
            ),
            (
                "filesystem_read_non_bypassable",
                self.filesystem_read_non_bypassable,
                supported.filesystem_read_non_bypassable,
            ),
            (
                "filesystem_write_non_bypassable",
                self.filesystem_write_non_bypassable,
                supported.filesystem_write_non_bypassable,
            ),
            (
                "network_non_bypassable",
                self.network_non_bypassable,
                supported.network_non_bypassable,
            ),
        ];
        for (field, claimed, backed) in non_bypassable {
            if claimed && !backed {
                found.push((field, claimed));
            }
        }
        if !self.host_process && supported.host_process {
            found.push(("host_process", false));
        }
        found
    }
}

fn warnings(observations: &ExecutorObservations) -> Vec<String> {
    let mut out = Vec::new();
    for dimension in ControlDimension::ALL {
        match observations.status_of(dimension) {
            Some(super::ControlStatus::Enforced) => {}
            None => out.push(format!(
                "{dimension} is not enforced: no control observed for it"
            )),
            Some(status) => {
                let weak: Vec<String> = observations
                    .controls
                    .iter()
                    .filter(|c| c.dimension == dimension)
                    .filter(|c| c.status != super::ControlStatus::Enforced)
                    .map(|c| match &c.reason {
                        Some(reason) => format!("{} {} ({reason})", c.mechanism, c.status),
                        None => format!("{} {}", c.mechanism, c.status),
                    })
                    .collect();
                if weak.is_empty() {
                    out.push(format!("{dimension} is {status}, not enforced"));
                } else {
                    out.push(format!(
                        "{dimension} is {status}, not enforced: {}",
                        weak.join("; ")
                    ));
                }
            }
        }
    }
    for d in observations.summary_disagreements() {
        let supported = d.supported.map_or("no control", |s| s.wire_name());
        out.push(format!(
            "executor_observations.summary.{} claims {} but its controls support {supported}",
            d.dimension, d.claimed
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{ChangeEntry, ChangeKind, ControlMechanism as M, ControlObservation};
    use crate::bundle::{ControlStatus as S, FileAccessPolicy};
    use crate::containment::EnforcementTier;
    use ControlDimension as D;
    use std::path::PathBuf;

    fn observations(controls: &[(M, D, S)]) -> ExecutorObservations {
        ExecutorObservations::new(
            "cofferdam-sealed",
            EnforcementTier::MountnsPivotRootLandlockSeccomp,
            controls
                .iter()
                .map(|&(m, d, s)| ControlObservation::new(m, d, s))
                .collect(),
        )
    }

    /// `controls`, plus every other row the sealed tier's table has, enforced.
    fn complete(controls: &[(M, D, S)]) -> ExecutorObservations {
        let mut all = controls.to_vec();
        for r in
            crate::bundle::tier_controls(EnforcementTier::MountnsPivotRootLandlockSeccomp).required
        {
            if !all
                .iter()
                .any(|&(m, d, _)| m == r.mechanism && d == r.dimension)
            {
                all.push((r.mechanism, r.dimension, S::Enforced));
            }
        }
        observations(&all)
    }

    fn all_enforced() -> ExecutorObservations {
        complete(&[])
    }

    fn stage(state: OverlayState, changed: usize) -> FilesystemSummary {
        FilesystemSummary {
            state,
            target: PathBuf::from("/home/u/p"),
            upper: PathBuf::from("/home/u/.local/share/cofferdam/jobs/run-1/upper"),
            changed_files: changed,
            whiteouts: 0,
            root_overlay: false,
            excluded_paths: vec![],
            access_policy: FileAccessPolicy::default(),
            host_root_device: None,
            host_root_inode: None,
            host_uid: None,
            host_gid: None,
            sample_paths: vec![],
            changes: vec![],
        }
    }

    #[test]
    fn everything_enforced_gives_every_guarantee_and_no_warning() {
        let s = SafetySummary::derive(&all_enforced(), None, None);
        assert!(s.filesystem_read_non_bypassable);
        assert!(s.filesystem_write_non_bypassable);
        assert!(s.filesystem_non_bypassable);
        assert!(s.network_non_bypassable);
        assert!(!s.host_process);
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert!(s.overclaims(&s).is_empty());
    }

    #[test]
    fn filesystem_read_needs_the_read_dimension_enforced() {
        let o = complete(&[
            (M::Mountns, D::FilesystemRead, S::Enforced),
            (M::Landlock, D::FilesystemRead, S::Partial),
            (M::Overlay, D::FilesystemWrite, S::Enforced),
        ]);
        let s = SafetySummary::derive(&o, None, None);
        assert!(!s.filesystem_read_non_bypassable);
        assert!(s.filesystem_write_non_bypassable);
        assert!(!s.filesystem_non_bypassable);
        assert!(
            s.warnings
                .iter()
                .any(|w| w == "filesystem_read is partial, not enforced: landlock partial"),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn filesystem_write_needs_the_write_dimension_enforced() {
        let o = complete(&[
            (M::Mountns, D::FilesystemRead, S::Enforced),
            (M::Overlay, D::FilesystemWrite, S::Failed),
        ]);
        let s = SafetySummary::derive(&o, None, None);
        assert!(s.filesystem_read_non_bypassable);
        assert!(!s.filesystem_write_non_bypassable);
        assert!(!s.filesystem_non_bypassable);
    }

    #[test]
    fn network_needs_the_network_dimension_enforced() {
        let mut o = all_enforced();
        assert!(SafetySummary::derive(&o, None, None).network_non_bypassable);
        o.controls.retain(|c| c.dimension != D::Network);
        // The stale summary still says enforced: the controls do not back it.
        let s = SafetySummary::derive(&o, None, None);
        assert!(!s.network_non_bypassable);
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("summary.network claims enforced")),
            "{:?}",
            s.warnings
        );
        o.summary.remove(&D::Network);
        let s = SafetySummary::derive(&o, None, None);
        assert!(!s.network_non_bypassable);
        assert!(
            s.warnings
                .contains(&"network is not enforced: no control observed for it".to_owned())
        );
    }

    #[test]
    fn host_process_unless_process_isolation_is_enforced() {
        assert!(!SafetySummary::derive(&all_enforced(), None, None).host_process);
        let advisory = observations(&[(M::Rlimit, D::Resources, S::Enforced)]);
        assert!(SafetySummary::derive(&advisory, None, None).host_process);
        let scoped = observations(&[
            (M::NoNewPrivs, D::Process, S::Enforced),
            (M::Pidns, D::Process, S::Unavailable),
        ]);
        assert!(SafetySummary::derive(&scoped, None, None).host_process);
    }

    #[test]
    fn a_setup_failure_claims_nothing_it_did_not_read() {
        // The namespaces and the mount namespace's write row, then setup failed: no
        // overlay, no pivot_root, no Landlock rows.
        let o = observations(&[
            (M::Userns, D::Process, S::Enforced),
            (M::Mountns, D::FilesystemWrite, S::Enforced),
            (M::Mountns, D::FilesystemRead, S::Enforced),
            (M::Netns, D::Network, S::Enforced),
        ]);
        let s = SafetySummary::derive(&o, None, None);
        assert!(!s.filesystem_write_non_bypassable);
        assert!(!s.filesystem_read_non_bypassable);
        assert!(s.host_process);
        // The network dimension has every row the tier has for it.
        assert!(s.network_non_bypassable);
    }

    #[test]
    fn an_unread_control_never_counts_as_holding() {
        let o = complete(&[
            (M::SecretsHidden, D::FilesystemRead, S::Unknown),
            (M::PivotRoot, D::FilesystemWrite, S::Unknown),
        ]);
        let s = SafetySummary::derive(&o, None, None);
        assert!(!s.filesystem_read_non_bypassable);
        assert!(!s.filesystem_write_non_bypassable);
        assert!(!s.filesystem_non_bypassable);
        assert!(s.network_non_bypassable);
        assert!(
            s.warnings.iter().any(|w| w
                .starts_with("filesystem_read is unknown, not enforced: secrets_hidden unknown")),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn nothing_observed_means_nothing_guaranteed() {
        let s = SafetySummary::derive(&observations(&[]), None, None);
        assert!(!s.filesystem_non_bypassable);
        assert!(!s.filesystem_read_non_bypassable);
        assert!(!s.filesystem_write_non_bypassable);
        assert!(!s.network_non_bypassable);
        assert!(s.host_process);
        assert!(!s.safe_profile_requested);
        assert_eq!(s.warnings.len(), ControlDimension::ALL.len());
    }

    #[test]
    fn the_plan_only_sets_the_request() {
        let plan = |floor| ExecutorPlan {
            declared_floor: floor,
            requested_tier: EnforcementTier::MountnsPivotRootLandlockSeccomp,
            requested_class: ContainmentClass::Sealed,
            floor_met: true,
            planned_controls: vec![],
        };
        let empty = observations(&[]);
        let s = SafetySummary::derive(&empty, Some(&plan(ContainmentClass::Sealed)), None);
        assert!(s.safe_profile_requested);
        // A sealed plan is not evidence of anything.
        assert!(!s.filesystem_non_bypassable && !s.network_non_bypassable && s.host_process);
        let s = SafetySummary::derive(&empty, Some(&plan(ContainmentClass::Advisory)), None);
        assert!(!s.safe_profile_requested);
    }

    #[test]
    fn staged_changes_need_a_retaining_stage_with_changes() {
        let o = all_enforced();
        let staged = |fs: &FilesystemSummary| {
            SafetySummary::derive(&o, None, Some(fs)).filesystem_changes_staged
        };
        assert!(staged(&stage(OverlayState::Staged, 2)));
        assert!(staged(&stage(OverlayState::Active, 1)));
        assert!(!staged(&stage(OverlayState::Staged, 0)));
        assert!(!staged(&stage(OverlayState::Applied, 2)));
        assert!(!staged(&stage(OverlayState::Discarded, 2)));
        let mut only_listed = stage(OverlayState::Staged, 0);
        only_listed.changes.push(ChangeEntry {
            path: "a".into(),
            path_bytes: None,
            kind: ChangeKind::Added,
            old_type: None,
            new_type: None,
            size_bytes: None,
            mode: None,
        });
        assert!(staged(&only_listed));
        assert!(!SafetySummary::derive(&o, None, None).filesystem_changes_staged);
    }

    #[test]
    fn overclaims_are_listed_by_field() {
        let supported = SafetySummary::derive(&observations(&[]), None, None);
        let mut claimed = supported.clone();
        assert!(claimed.overclaims(&supported).is_empty());
        claimed.network_non_bypassable = true;
        claimed.host_process = false;
        claimed.filesystem_read_non_bypassable = true;
        assert_eq!(
            claimed.overclaims(&supported),
            vec![
                ("filesystem_read_non_bypassable", true),
                ("network_non_bypassable", true),
                ("host_process", false)
            ]
        );
        // Claiming less than the evidence is allowed.
        let strong = SafetySummary::derive(&all_enforced(), None, None);
        assert!(supported.overclaims(&strong).is_empty());
    }
}
