//! Which controls each enforcement tier installs and how it depends on each: one table per
//! tier, the data the writer's summary, the strict reader and the policy plan share (the
//! plan turns a tier's rows into the requirement levels the sandbox init checks, see
//! `cofferdam_policy::plan::control_requirements`).
//!
//! Owns `TierControls`, `RequiredControl`, `Requirement` and `tier_controls`. It may not look
//! at a host or decide admission: it only says, for a tier, which rows a complete set of
//! observations holds, which ones refuse the run when they do not hold, and which mechanisms
//! the tier cannot install at all.

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
    /// For a `Hard` row: whether a `partial` reading refuses the run too (the control has no
    /// residual the tier can hold with, e.g. a seccomp filter or a namespace). Otherwise a
    /// `partial` reading is recorded with its residual and the run goes on.
    pub partial_refuses: bool,
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
    /// Rows the sandbox init checks as `Hard` too, which `required` leaves out so that the
    /// strict reader's completeness check (and so every bundle it accepts) is unchanged:
    /// a setup step's row that a run always reports but older bundles may lack.
    pub init_only: &'static [RequiredControl],
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

    /// The rows the sandbox init checks when the network is (or is not) confined: the
    /// applicable `required` rows, then the applicable `init_only` ones.
    pub fn init_checks(&self, network_confined: bool) -> impl Iterator<Item = &RequiredControl> {
        self.applicable(network_confined).chain(
            self.init_only
                .iter()
                .filter(move |r| r.applies == Applies::Always || network_confined),
        )
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
        partial_refuses: false,
    }
}

/// A `Hard` row that only an `enforced` reading satisfies.
const fn strict(mechanism: M, dimension: D) -> RequiredControl {
    RequiredControl {
        partial_refuses: true,
        ..req(mechanism, dimension, Hard)
    }
}

use Requirement::{Absent, BestEffort, Hard};

/// The sealed tier: namespaces, composed root, overlay, Landlock (best effort: recorded
/// `unavailable` on a kernel without it), seccomp.
const SEALED: TierControls = TierControls {
    tier: EnforcementTier::MountnsPivotRootLandlockSeccomp,
    required: &[
        strict(M::Userns, D::Process),
        // The propagation row of the composed root (the namespace's own row is
        // `filesystem_write`, see `init_only`).
        req(M::Mountns, D::FilesystemRead, Hard),
        strict(M::Pidns, D::Process),
        strict(M::Ipcns, D::Process),
        strict(M::Utsns, D::Process),
        strict(M::Cgroupns, D::Process),
        // With `--network host` the namespace is not created (its row says `unavailable`).
        RequiredControl {
            applies: Applies::NetworkConfined,
            ..strict(M::Netns, D::Network)
        },
        // The composed root's rows: a mount read back weaker than planned is `partial`
        // (recorded with its residual) or `failed` (refused).
        req(M::Overlay, D::FilesystemWrite, Hard),
        req(M::PivotRoot, D::FilesystemWrite, Hard),
        req(M::ProcMask, D::KernelSurface, Hard),
        req(M::MinimalDev, D::KernelSurface, Hard),
        req(M::SecretsHidden, D::FilesystemRead, Hard),
        strict(M::Capabilities, D::KernelSurface),
        strict(M::NoNewPrivs, D::Process),
        req(M::Landlock, D::FilesystemRead, BestEffort),
        req(M::Landlock, D::FilesystemWrite, BestEffort),
        strict(M::Seccomp, D::KernelSurface),
        req(M::Rlimit, D::Resources, BestEffort),
    ],
    init_only: &[
        // The mount namespace itself (the unshare, read back by inode).
        strict(M::Mountns, D::FilesystemWrite),
        // The private /tmp, HOME and /dev/shm.
        req(M::Tmpfs, D::FilesystemWrite, Hard),
        strict(M::CloseFds, D::KernelSurface),
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
        // `partial` is an unprivileged caller's bounding set, which it cannot empty without
        // CAP_SETPCAP: no_new_privs (strict) keeps an exec from using it.
        req(M::Capabilities, D::KernelSurface, Hard),
        strict(M::NoNewPrivs, D::Process),
        req(M::Landlock, D::FilesystemRead, Hard),
        // The tier's write boundary: a ruleset enforced only in part does not hold it.
        strict(M::Landlock, D::FilesystemWrite),
        // The metadata filter: Landlock has no right for modes, owners, times or xattrs;
        // its residual (descriptor touch for root) is `partial`.
        req(M::Seccomp, D::FilesystemWrite, Hard),
        req(M::SecretsHidden, D::FilesystemRead, BestEffort),
        strict(M::Seccomp, D::KernelSurface),
        req(M::Rlimit, D::Resources, BestEffort),
        // The socket filter and Landlock's (ABI-dependent) unix-socket confinement, when
        // the network is confined.
        RequiredControl {
            applies: Applies::NetworkConfined,
            ..strict(M::Seccomp, D::Network)
        },
        RequiredControl {
            applies: Applies::NetworkConfined,
            control: Some("unix_connect"),
            ..req(M::Landlock, D::Network, BestEffort)
        },
    ],
    init_only: &[strict(M::CloseFds, D::KernelSurface)],
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
    init_only: &[strict(M::CloseFds, D::KernelSurface)],
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
