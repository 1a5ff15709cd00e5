//! Which controls each enforcement tier installs: one table per tier, the data the writer's
//! summary, the strict reader and (later) the policy plan share.
//!
//! Owns `TierControls`, `RequiredControl`, `Requirement` and `tier_controls`. The tables are
//! derived from what the sandbox installs today (`cofferdam-sandbox`'s `init.rs` for the
//! sealed tier, `scoped.rs` for the scoped and advisory tiers). It may not look at a host or
//! decide admission: it only says, for a tier, which rows a complete set of observations
//! holds and which mechanisms the tier cannot install at all.

use super::control::{ControlDimension as D, ControlMechanism as M};
use crate::containment::EnforcementTier;

/// How a tier depends on a control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// The tier does not hold without it: when it is not installed the run is refused, so
    /// a run that reached its command never has it `failed` or `unavailable`.
    Hard,
    /// Installed when the host offers it; recorded as observed (`unavailable` on a kernel
    /// without it), never refuses the run.
    BestEffort,
    /// The tier never installs it and says so with an `unavailable` row, so the dimension
    /// it would serve does not look covered by another control.
    Absent,
}

/// When a requirement applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// On every run of the tier.
    Always,
    /// Only when the network is confined (`network.policy.mode` is not `host`).
    NetworkConfined,
}

/// One row a complete set of observations of a tier holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequiredControl {
    /// The mechanism.
    pub mechanism: M,
    /// The dimension the row speaks for.
    pub dimension: D,
    /// How the tier depends on it.
    pub requirement: Requirement,
    /// The row's `details.control`, when the mechanism reports several rows for the same
    /// dimension and this requirement is one of them.
    pub control: Option<&'static str>,
    /// When it applies.
    pub applies: Applies,
}

impl RequiredControl {
    /// Whether `mechanism`/`dimension`/`details.control` of a row match this requirement.
    pub fn matches(&self, mechanism: M, dimension: D, control: Option<&str>) -> bool {
        self.mechanism == mechanism
            && self.dimension == dimension
            && self.control.is_none_or(|c| control == Some(c))
    }
}

/// What one tier installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierControls {
    /// The tier.
    pub tier: EnforcementTier,
    /// The rows a complete set of observations holds.
    pub required: &'static [RequiredControl],
    /// The mechanisms the tier may install besides those of `required` (other than
    /// `absent` ones). A row of any other mechanism must say `unavailable`: the tier cannot
    /// have attempted it, let alone enforced it.
    pub also_installs: &'static [M],
}

impl TierControls {
    /// The requirements that apply when the network is (or is not) confined.
    pub fn applicable(&self, network_confined: bool) -> impl Iterator<Item = &RequiredControl> {
        self.required
            .iter()
            .filter(move |r| r.applies == Applies::Always || network_confined)
    }

    /// Whether the tier can install `mechanism` at all.
    pub fn installs(&self, mechanism: M) -> bool {
        self.also_installs.contains(&mechanism)
            || self
                .required
                .iter()
                .any(|r| r.mechanism == mechanism && r.requirement != Requirement::Absent)
    }
}

const fn req(mechanism: M, dimension: D, requirement: Requirement) -> RequiredControl {
    RequiredControl {
        mechanism,
        dimension,
        requirement,
        control: None,
        applies: Applies::Always,
    }
}

use Requirement::{Absent, BestEffort, Hard};

/// The sealed tier: namespaces, composed root, overlay, Landlock (best effort: recorded
/// `unavailable` on a kernel without it), seccomp.
const SEALED: TierControls = TierControls {
    tier: EnforcementTier::MountnsPivotRootLandlockSeccomp,
    required: &[
        req(M::Userns, D::Process, Hard),
        req(M::Mountns, D::FilesystemRead, Hard),
        req(M::Pidns, D::Process, Hard),
        req(M::Ipcns, D::Process, Hard),
        req(M::Utsns, D::Process, Hard),
        req(M::Cgroupns, D::Process, Hard),
        // With `--network host` the namespace is not created (its row says `unavailable`).
        RequiredControl {
            applies: Applies::NetworkConfined,
            ..req(M::Netns, D::Network, Hard)
        },
        req(M::Overlay, D::FilesystemWrite, Hard),
        req(M::PivotRoot, D::FilesystemWrite, Hard),
        req(M::ProcMask, D::KernelSurface, Hard),
        req(M::MinimalDev, D::KernelSurface, Hard),
        req(M::SecretsHidden, D::FilesystemRead, Hard),
        req(M::Capabilities, D::KernelSurface, Hard),
        req(M::NoNewPrivs, D::Process, Hard),
        req(M::Landlock, D::FilesystemRead, BestEffort),
        req(M::Landlock, D::FilesystemWrite, BestEffort),
        req(M::Seccomp, D::KernelSurface, Hard),
        req(M::Rlimit, D::Resources, BestEffort),
    ],
    also_installs: &[
        M::CloseFds,
        M::Cgroup,
        M::Tmpfs,
        M::WallClock,
        M::EgressProxy,
    ],
};

/// The scoped tier: Landlock and seccomp on a copy of the workdir, no namespaces (the pid
/// namespace's absence is a row).
const SCOPED: TierControls = TierControls {
    tier: EnforcementTier::LandlockSeccomp,
    required: &[
        req(M::WorkdirCopy, D::FilesystemWrite, Hard),
        req(M::Pidns, D::Process, Absent),
        req(M::Capabilities, D::KernelSurface, Hard),
        req(M::NoNewPrivs, D::Process, Hard),
        req(M::Landlock, D::FilesystemRead, Hard),
        req(M::Landlock, D::FilesystemWrite, Hard),
        // The metadata filter: Landlock has no right for modes, owners, times or xattrs.
        req(M::Seccomp, D::FilesystemWrite, Hard),
        req(M::SecretsHidden, D::FilesystemRead, BestEffort),
        req(M::Seccomp, D::KernelSurface, Hard),
        req(M::Rlimit, D::Resources, BestEffort),
        // The socket filter and Landlock's (ABI-dependent) unix-socket confinement, when
        // the network is confined.
        RequiredControl {
            applies: Applies::NetworkConfined,
            ..req(M::Seccomp, D::Network, Hard)
        },
        RequiredControl {
            applies: Applies::NetworkConfined,
            control: Some("unix_connect"),
            ..req(M::Landlock, D::Network, BestEffort)
        },
    ],
    also_installs: &[M::CloseFds, M::Cgroup, M::WallClock, M::EgressProxy],
};

/// The advisory tier: a host process with rlimits; what it does not install is said as
/// `unavailable` rows.
const ADVISORY: TierControls = TierControls {
    tier: EnforcementTier::None,
    required: &[
        req(M::Pidns, D::Process, Absent),
        req(M::Landlock, D::FilesystemRead, Absent),
        req(M::Landlock, D::FilesystemWrite, Absent),
        req(M::Landlock, D::Network, Absent),
        req(M::Seccomp, D::KernelSurface, Absent),
        req(M::Rlimit, D::Resources, BestEffort),
    ],
    also_installs: &[
        M::WorkdirCopy,
        M::CloseFds,
        M::Cgroup,
        M::WallClock,
        M::EgressProxy,
    ],
};

/// The table of `tier`.
pub fn tier_controls(tier: EnforcementTier) -> &'static TierControls {
    match tier {
        EnforcementTier::MountnsPivotRootLandlockSeccomp => &SEALED,
        EnforcementTier::LandlockSeccomp => &SCOPED,
        EnforcementTier::None => &ADVISORY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tier_has_its_own_table() {
        for tier in EnforcementTier::ALL {
            assert_eq!(tier_controls(tier).tier, tier);
        }
    }

    #[test]
    fn absent_mechanisms_are_not_installed() {
        for tier in EnforcementTier::ALL {
            let t = tier_controls(tier);
            for r in t.required {
                assert_eq!(
                    t.installs(r.mechanism),
                    r.requirement != Requirement::Absent,
                    "{tier}: {} {}",
                    r.mechanism,
                    r.dimension
                );
            }
        }
        let sealed = tier_controls(EnforcementTier::MountnsPivotRootLandlockSeccomp);
        assert!(sealed.installs(M::Overlay) && !sealed.installs(M::WorkdirCopy));
        let scoped = tier_controls(EnforcementTier::LandlockSeccomp);
        assert!(!scoped.installs(M::Overlay) && !scoped.installs(M::Tmpfs));
    }

    #[test]
    fn the_advisory_tier_installs_no_boundary() {
        let t = tier_controls(EnforcementTier::None);
        for m in [M::Userns, M::Mountns, M::Landlock, M::Seccomp, M::Overlay] {
            assert!(!t.installs(m), "{m}");
        }
    }

    #[test]
    fn conditional_rows_apply_only_to_a_confined_network() {
        let t = tier_controls(EnforcementTier::LandlockSeccomp);
        let all = t.applicable(true).count();
        let always = t.applicable(false).count();
        assert_eq!(all - always, 2);
        let sealed = tier_controls(EnforcementTier::MountnsPivotRootLandlockSeccomp);
        assert_eq!(
            sealed.applicable(true).count() - sealed.applicable(false).count(),
            1
        );
        let unix = t.applicable(true).find(|r| r.control.is_some()).unwrap();
        assert!(unix.matches(M::Landlock, D::Network, Some("unix_connect")));
        assert!(!unix.matches(M::Landlock, D::Network, None));
    }
}
