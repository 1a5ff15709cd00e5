//! The sandbox init's program as data: the setup steps it runs, in order, and how the tier
//! depends on each control row it reads back (DESIGN.md §3). The init runs the steps in one
//! loop and checks each row against [`ControlRequirement`]s; it decides nothing itself.
//!
//! Owns `SetupStep`, `Level`, `ControlRequirement` and `control_requirements`. The levels are
//! derived from the record crate's `tier_controls` tables (the one source of which rows a tier
//! requires, shared with the strict reader). Pure: no host, no syscall; the order of a
//! plan's steps is `SandboxPlan::setup_program` (`crate::plan`), which builds on this module.

use cofferdam_record::EnforcementTier;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus, Requirement,
    tier_controls,
};
use serde::{Deserialize, Serialize};

/// How the tier depends on a control row (after rust-landlock's compatibility levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The tier holds only when the row reads `enforced`: anything else refuses the run.
    Enforced,
    /// The row may read `partial` (its residual is recorded); `failed`, `unavailable` or
    /// `unknown` refuse the run.
    Installed,
    /// Recorded as read; never refuses the run.
    BestEffort,
}

/// The requirement of one control row: which rows it covers and at which level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlRequirement {
    /// The mechanism of the rows it covers.
    pub mechanism: ControlMechanism,
    /// Their dimension.
    pub dimension: ControlDimension,
    /// Their `details.control`, when the requirement covers only rows that name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    /// The level.
    pub level: Level,
}

impl ControlRequirement {
    /// Whether `o` is a row this requirement covers.
    pub fn covers(&self, o: &ControlObservation) -> bool {
        self.mechanism == o.mechanism
            && self.dimension == o.dimension
            && self
                .control
                .as_deref()
                .is_none_or(|c| o.detail_control() == Some(c))
    }

    /// Whether a row read as `status` satisfies the requirement.
    pub fn holds(&self, status: ControlStatus) -> bool {
        match self.level {
            Level::Enforced => status == ControlStatus::Enforced,
            Level::Installed => matches!(status, ControlStatus::Enforced | ControlStatus::Partial),
            Level::BestEffort => true,
        }
    }
}

/// The requirements of `tier` when the network is (or is not) confined: every row of the
/// tier's table the sandbox init checks, `hard` ones at [`Level::Enforced`] or
/// [`Level::Installed`], the rest (best effort, and the `absent` rows the tier only reports
/// as `unavailable`) at [`Level::BestEffort`].
pub fn control_requirements(
    tier: EnforcementTier,
    network_confined: bool,
) -> Vec<ControlRequirement> {
    tier_controls(tier)
        .init_checks(network_confined)
        .map(|r| ControlRequirement {
            mechanism: r.mechanism,
            dimension: r.dimension,
            control: r.control.map(str::to_owned),
            level: match (r.requirement, r.partial_refuses) {
                (Requirement::Hard, true) => Level::Enforced,
                (Requirement::Hard, false) => Level::Installed,
                (Requirement::BestEffort | Requirement::Absent, _) => Level::BestEffort,
            },
        })
        .collect()
}

/// Why `o` refuses the run under `requirements` (the first that covers it), `None` when it
/// holds or no requirement covers it: the row's own reason, else its status.
pub fn refusal(requirements: &[ControlRequirement], o: &ControlObservation) -> Option<String> {
    let r = requirements.iter().find(|r| r.covers(o))?;
    (!r.holds(o.status)).then(|| o.reason.clone().unwrap_or_else(|| o.status.to_string()))
}

/// One step of the sandbox init's setup, after the namespaces (the sealed tier's pid 1, or
/// the init of a tier without namespaces). Each step applies one effect and reports the rows
/// it reads back; the init checks them against the plan's requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetupStep {
    /// `chdir` into the copy of the workdir (`fs.workdir`; tiers without namespaces).
    EnterWorkdir,
    /// Report the absence of a pid namespace (tiers without namespaces).
    NoPidNamespace,
    /// Raise (sealed: the new pid namespace's) or read (the host's) `memfd_noexec`.
    MemfdNoexec,
    /// Compose the root and pivot into it (sealed).
    ComposeRoot,
    /// Set the UTS hostname (sealed).
    Hostname,
    /// Configure the network namespace (sealed).
    Network,
    /// Ask the supervisor to watch the workdir's overlay for file accesses, and wait until
    /// it has (sealed, [`crate::plan::SandboxPlan::watch_files`]): before the command, so
    /// nothing it opens goes unseen.
    AwaitFileWatch,
    /// Apply the rlimits.
    Rlimits,
    /// Build the seccomp filter, before any restriction (building allocates).
    BuildSeccomp,
    /// Close every inherited descriptor but the status channel (and the terminal socket).
    CloseFds,
    /// Mark the status channel close-on-exec.
    StatusCloexec,
    /// Make the init non-dumpable (no `/proc/<pid>` access by the command, same uid).
    NotDumpable,
    /// Allocate the command's terminal (scoped: before Landlock, which grants its slave).
    Terminal,
    /// Drop every capability.
    DropCapabilities,
    /// Set `no_new_privs`.
    NoNewPrivs,
    /// Install the Landlock ruleset.
    Landlock,
    /// Install the seccomp metadata filter (scoped).
    MetadataFilter,
    /// Report Landlock's unix-socket confinement, then install the socket filter (scoped,
    /// network `none`).
    SocketFilter,
    /// Check that each hidden path cannot be opened (scoped).
    HiddenPaths,
    /// Report what the advisory tier does not install.
    AdvisoryAbsences,
    /// Install the seccomp filter (last).
    Seccomp,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(m: ControlMechanism, d: ControlDimension, s: ControlStatus) -> ControlObservation {
        ControlObservation::new(m, d, s)
    }

    #[test]
    fn the_sealed_tier_refuses_a_partial_seccomp_but_records_a_partial_mount() {
        use ControlDimension as D;
        use ControlMechanism as M;
        use ControlStatus as S;
        let sealed = control_requirements(EnforcementTier::MountnsPivotRootLandlockSeccomp, true);
        let refuses = |m, d, s| refusal(&sealed, &row(m, d, s)).is_some();
        assert!(refuses(M::Seccomp, D::KernelSurface, S::Partial));
        assert!(refuses(M::Capabilities, D::KernelSurface, S::Partial));
        assert!(refuses(M::CloseFds, D::KernelSurface, S::Failed));
        assert!(refuses(M::Mountns, D::FilesystemWrite, S::Partial));
        assert!(refuses(M::Netns, D::Network, S::Failed));
        assert!(!refuses(M::SecretsHidden, D::FilesystemRead, S::Partial));
        assert!(refuses(M::SecretsHidden, D::FilesystemRead, S::Unknown));
        assert!(!refuses(M::Tmpfs, D::FilesystemWrite, S::Partial));
        assert!(refuses(M::Tmpfs, D::FilesystemWrite, S::Failed));
        // Landlock is best effort on the sealed tier; rows no table names never refuse.
        assert!(!refuses(M::Landlock, D::FilesystemWrite, S::Unavailable));
        assert!(!refuses(M::Rlimit, D::Resources, S::Failed));
        assert!(!refuses(M::Pidns, D::KernelSurface, S::Unavailable));
        // With the host's network, no network namespace is required.
        let host = control_requirements(EnforcementTier::MountnsPivotRootLandlockSeccomp, false);
        assert!(refusal(&host, &row(M::Netns, D::Network, S::Unavailable)).is_none());
    }

    #[test]
    fn the_scoped_tier_requires_its_write_boundary_whole_and_its_caps_dropped() {
        use ControlDimension as D;
        use ControlMechanism as M;
        use ControlStatus as S;
        let scoped = control_requirements(EnforcementTier::LandlockSeccomp, true);
        let refuses = |m, d, s| refusal(&scoped, &row(m, d, s)).is_some();
        assert!(refuses(M::Landlock, D::FilesystemWrite, S::Partial));
        assert!(!refuses(M::Landlock, D::FilesystemRead, S::Partial));
        assert!(refuses(M::Landlock, D::FilesystemRead, S::Failed));
        // An unprivileged caller's bounding set is a recorded residual; a capability held
        // is not.
        assert!(!refuses(M::Capabilities, D::KernelSurface, S::Partial));
        assert!(refuses(M::Capabilities, D::KernelSurface, S::Failed));
        assert!(!refuses(M::Seccomp, D::FilesystemWrite, S::Partial));
        assert!(refuses(M::Seccomp, D::FilesystemWrite, S::Failed));
        assert!(refuses(M::Seccomp, D::Network, S::Failed));
        assert!(!refuses(M::SecretsHidden, D::FilesystemRead, S::Partial));
        assert!(!refuses(M::Pidns, D::Process, S::Unavailable));
        let mut unix = row(M::Landlock, D::Network, S::Partial);
        unix.details
            .insert("control".into(), serde_json::json!("unix_connect"));
        assert!(refusal(&scoped, &unix).is_none());
        let host = control_requirements(EnforcementTier::LandlockSeccomp, false);
        assert!(refusal(&host, &row(M::Seccomp, D::Network, S::Failed)).is_none());
    }

    #[test]
    fn the_advisory_tier_refuses_only_descriptors_left_open() {
        let advisory = control_requirements(EnforcementTier::None, true);
        let refusing: Vec<_> = advisory
            .iter()
            .filter(|r| r.level != Level::BestEffort)
            .map(|r| r.mechanism)
            .collect();
        assert_eq!(refusing, vec![ControlMechanism::CloseFds]);
    }

    #[test]
    fn every_hard_row_of_the_record_table_is_a_refusing_requirement() {
        for tier in EnforcementTier::ALL {
            for confined in [false, true] {
                let reqs = control_requirements(tier, confined);
                for r in tier_controls(tier).applicable(confined) {
                    let planned = reqs
                        .iter()
                        .find(|p| {
                            p.mechanism == r.mechanism
                                && p.dimension == r.dimension
                                && p.control.as_deref() == r.control
                        })
                        .unwrap_or_else(|| panic!("{tier}: {} {}", r.mechanism, r.dimension));
                    assert_eq!(
                        planned.level != Level::BestEffort,
                        r.requirement == Requirement::Hard,
                        "{tier}: {} {}",
                        r.mechanism,
                        r.dimension
                    );
                }
            }
        }
    }

    #[test]
    fn the_reason_of_a_refusing_row_is_its_own() {
        let sealed = control_requirements(EnforcementTier::MountnsPivotRootLandlockSeccomp, true);
        let mut o = row(
            ControlMechanism::Seccomp,
            ControlDimension::KernelSurface,
            ControlStatus::Failed,
        );
        assert_eq!(refusal(&sealed, &o).as_deref(), Some("failed"));
        o.reason = Some("Seccomp_filters reads 0".into());
        assert_eq!(
            refusal(&sealed, &o).as_deref(),
            Some("Seccomp_filters reads 0")
        );
        let json = serde_json::to_string(&sealed).unwrap();
        let back: Vec<ControlRequirement> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, sealed);
    }
}
