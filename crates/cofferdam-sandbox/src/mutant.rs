//! Test-only mutants: the one list of controls whose install step a debug build can skip,
//! so the mutation tests can check that the observation of each is a reading and not the
//! return value of the skipped call.
//!
//! Owns [`MUTANTS`], [`EXEMPT`], [`ENV`] and [`active`]. A mutant skips exactly the install
//! step named by its entry and leaves the observation code as it is. The switch is the
//! environment variable [`ENV`], read only under `cfg(debug_assertions)`: in a release build
//! [`active`] is a constant `false` and no mutant code path is compiled. It may not decide
//! anything about a run: the modules call [`active`] at their install step and nowhere else.

use cofferdam_record::bundle::{ControlDimension, ControlMechanism};

/// The environment variable that names the mutant (debug builds only).
pub const ENV: &str = "COFFERDAM_TEST_MUTANT";

/// One control whose install step can be skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mutant {
    /// The value of [`ENV`] that selects it.
    pub name: &'static str,
    /// The observation row that must stop claiming `enforced`.
    pub mechanism: ControlMechanism,
    /// The row's dimension.
    pub dimension: ControlDimension,
    /// Whether the sealed tier installs it.
    pub sealed: bool,
    /// Whether the scoped tier installs it.
    pub scoped: bool,
    /// The step skipped.
    pub skips: &'static str,
}

/// Landlock's `restrict_self`.
pub const LANDLOCK_RESTRICT: &str = "landlock_restrict_self";
/// The main seccomp filter.
pub const SECCOMP_FILTER: &str = "seccomp_filter";
/// The scoped tier's socket filter.
pub const SOCKET_FILTER: &str = "socket_filter";
/// The sealed tier's secret masks.
pub const SECRET_MASKS: &str = "secret_masks";
/// The read-only flag on the sealed tier's system binds.
pub const SYSTEM_READ_ONLY: &str = "system_read_only";
/// The `--read-only` subtree binds.
pub const READ_ONLY_SUBTREE: &str = "read_only_subtree";
/// The capability drop.
pub const CAP_DROP: &str = "cap_drop";
/// `prctl(PR_SET_NO_NEW_PRIVS)`.
pub const NO_NEW_PRIVS: &str = "no_new_privs";

/// The init's join of the run's cgroups (the write of its pid to `cgroup.procs`).
pub const CGROUP_JOIN: &str = "cgroup_join";

/// The IPC namespace (left out of the sealed tier's `unshare`).
pub const IPC_NS: &str = "ipc_namespace";

/// The new /proc's masks and read-only directories (sealed tier).
pub const PROC_MASK: &str = "proc_mask";

/// The scoped tier's metadata filter.
pub const METADATA_FILTER: &str = "metadata_filter";

/// The user namespace (`CLONE_NEWUSER` left out).
pub const USER_NS: &str = "user_namespace";
/// The mount namespace (left out of the sealed tier's `unshare`).
pub const MOUNT_NS: &str = "mount_namespace";
/// The pid namespace (left out of the sealed tier's `unshare`).
pub const PID_NS: &str = "pid_namespace";
/// The network namespace (left out of the sealed tier's `unshare`).
pub const NET_NS: &str = "net_namespace";
/// The UTS namespace (left out of the sealed tier's `unshare`).
pub const UTS_NS: &str = "uts_namespace";
/// The cgroup namespace (its `unshare` skipped).
pub const CGROUP_NS: &str = "cgroup_namespace";

/// Not a control: the read of `/proc/self/mountinfo` after the pivot fails, so the mount
/// rows must say `unknown` (not read back), never `enforced` or `failed`.
pub const MOUNTINFO_UNREAD: &str = "mountinfo_unread";
/// Not a control: `statvfs` of the read-only binds fails (`unknown` as above).
pub const STATVFS_UNREAD: &str = "statvfs_unread";

/// Not a control: the init reports a setup failure and exits at once, before the go, so the
/// supervisor's placement of it in the run's cgroups finds it gone (issue 17: the init's
/// reason, not the placement's, must reach the user and the bundle).
pub const INIT_EARLY_FAILURE: &str = "init_early_failure";

/// Not a control: the supervisor's fanotify mark on the workdir is skipped, so its read-back
/// must find no mark and the bundle must hold no filesystem observation (`crate::fanotify`).
pub const FILE_WATCH_UNMARKED: &str = "file_watch_unmarked";

/// Test switches that are not mutants of a control (no row to take away), handed on to the
/// init like the mutants.
pub const SWITCHES: &[&str] = &[INIT_EARLY_FAILURE, FILE_WATCH_UNMARKED];

/// Every mutant.
pub const MUTANTS: &[Mutant] = &[
    Mutant {
        name: LANDLOCK_RESTRICT,
        mechanism: ControlMechanism::Landlock,
        dimension: ControlDimension::FilesystemWrite,
        sealed: true,
        scoped: true,
        skips: "landlock_restrict_self (the ruleset is built, never enforced)",
    },
    Mutant {
        name: SECCOMP_FILTER,
        mechanism: ControlMechanism::Seccomp,
        dimension: ControlDimension::KernelSurface,
        sealed: true,
        scoped: true,
        skips: "seccomp(SECCOMP_SET_MODE_FILTER) of the main filter",
    },
    Mutant {
        name: SOCKET_FILTER,
        mechanism: ControlMechanism::Seccomp,
        dimension: ControlDimension::Network,
        sealed: false,
        scoped: true,
        skips: "seccomp(SECCOMP_SET_MODE_FILTER) of both socket filters",
    },
    Mutant {
        name: SECRET_MASKS,
        mechanism: ControlMechanism::SecretsHidden,
        dimension: ControlDimension::FilesystemRead,
        sealed: true,
        scoped: false,
        skips: "the mount of each mask",
    },
    Mutant {
        name: SYSTEM_READ_ONLY,
        mechanism: ControlMechanism::PivotRoot,
        dimension: ControlDimension::FilesystemWrite,
        sealed: true,
        scoped: false,
        skips: "MOUNT_ATTR_RDONLY on the system binds",
    },
    Mutant {
        name: READ_ONLY_SUBTREE,
        mechanism: ControlMechanism::PivotRoot,
        dimension: ControlDimension::FilesystemWrite,
        sealed: true,
        scoped: false,
        skips: "the read-only bind of each --read-only subtree",
    },
    Mutant {
        name: CAP_DROP,
        mechanism: ControlMechanism::Capabilities,
        dimension: ControlDimension::KernelSurface,
        sealed: true,
        scoped: true,
        skips: "the bounding, ambient and capset drops",
    },
    Mutant {
        name: NO_NEW_PRIVS,
        mechanism: ControlMechanism::NoNewPrivs,
        dimension: ControlDimension::Process,
        sealed: true,
        scoped: true,
        skips: "prctl(PR_SET_NO_NEW_PRIVS)",
    },
    Mutant {
        name: CGROUP_JOIN,
        mechanism: ControlMechanism::Cgroup,
        dimension: ControlDimension::Resources,
        sealed: true,
        scoped: true,
        skips: "the write of the init's pid to each cgroup.procs",
    },
    Mutant {
        name: IPC_NS,
        mechanism: ControlMechanism::Ipcns,
        dimension: ControlDimension::Process,
        sealed: true,
        scoped: false,
        skips: "CLONE_NEWIPC in the sealed tier's unshare",
    },
    Mutant {
        name: PROC_MASK,
        mechanism: ControlMechanism::ProcMask,
        dimension: ControlDimension::KernelSurface,
        sealed: true,
        scoped: false,
        skips: "the masks and read-only binds of the new /proc",
    },
    Mutant {
        name: METADATA_FILTER,
        mechanism: ControlMechanism::Seccomp,
        dimension: ControlDimension::FilesystemWrite,
        sealed: false,
        scoped: true,
        skips: "seccomp(SECCOMP_SET_MODE_FILTER) of the metadata filter",
    },
    Mutant {
        name: USER_NS,
        mechanism: ControlMechanism::Userns,
        dimension: ControlDimension::Process,
        sealed: true,
        scoped: false,
        skips: "unshare(CLONE_NEWUSER) (and so the uid and gid maps)",
    },
    Mutant {
        name: MOUNT_NS,
        mechanism: ControlMechanism::Mountns,
        dimension: ControlDimension::FilesystemWrite,
        sealed: true,
        scoped: false,
        skips: "CLONE_NEWNS in the sealed tier's unshare",
    },
    Mutant {
        name: PID_NS,
        mechanism: ControlMechanism::Pidns,
        dimension: ControlDimension::Process,
        sealed: true,
        scoped: false,
        skips: "CLONE_NEWPID in the sealed tier's unshare",
    },
    Mutant {
        name: NET_NS,
        mechanism: ControlMechanism::Netns,
        dimension: ControlDimension::Network,
        sealed: true,
        scoped: false,
        skips: "CLONE_NEWNET in the sealed tier's unshare",
    },
    Mutant {
        name: UTS_NS,
        mechanism: ControlMechanism::Utsns,
        dimension: ControlDimension::Process,
        sealed: true,
        scoped: false,
        skips: "CLONE_NEWUTS in the sealed tier's unshare",
    },
    Mutant {
        name: CGROUP_NS,
        mechanism: ControlMechanism::Cgroupns,
        dimension: ControlDimension::Process,
        sealed: true,
        scoped: false,
        skips: "unshare(CLONE_NEWCGROUP)",
    },
    Mutant {
        name: MOUNTINFO_UNREAD,
        mechanism: ControlMechanism::SecretsHidden,
        dimension: ControlDimension::FilesystemRead,
        sealed: true,
        scoped: false,
        skips: "the read of /proc/self/mountinfo after the pivot (it fails)",
    },
    Mutant {
        name: STATVFS_UNREAD,
        mechanism: ControlMechanism::PivotRoot,
        dimension: ControlDimension::FilesystemWrite,
        sealed: true,
        scoped: false,
        skips: "statvfs of each read-only bind (it fails)",
    },
];

/// Mechanisms of the observation vocabulary without a mutant, each with the reason.
pub const EXEMPT: &[(ControlMechanism, &str)] = &[
    (
        ControlMechanism::Overlay,
        "without it the workdir is not mounted and the command cannot start in it",
    ),
    (
        ControlMechanism::WorkdirCopy,
        "without it the command has no workdir to start in",
    ),
    (
        ControlMechanism::MinimalDev,
        "its /dev/shm size is read back from mountinfo",
    ),
    (
        ControlMechanism::CloseFds,
        "its observation reads /proc/self/fd after the sweep",
    ),
    (
        ControlMechanism::Rlimit,
        "its observation is getrlimit after setrlimit",
    ),
    (
        ControlMechanism::Tmpfs,
        "its sizes are read back from mountinfo",
    ),
    (
        ControlMechanism::WallClock,
        "the supervisor's timer, not a kernel control of the sandbox",
    ),
    (
        ControlMechanism::EgressProxy,
        "the supervisor's listener, recorded from its own socket",
    ),
];

/// Whether the mutant `name` is selected (debug builds: [`ENV`] equals `name`).
#[cfg(debug_assertions)]
pub fn active(name: &str) -> bool {
    std::env::var_os(ENV).is_some_and(|v| v == name)
}

/// Whether the mutant `name` is selected: never, in a release build.
#[cfg(not(debug_assertions))]
pub const fn active(_name: &str) -> bool {
    false
}

/// The `NAME=value` entry that hands a selected mutant on to a spawned init (whose
/// environment is otherwise empty); `None` in a release build or when no known mutant is
/// selected.
#[cfg(debug_assertions)]
pub fn handed_on() -> Option<std::ffi::CString> {
    let v = std::env::var(ENV).ok()?;
    (MUTANTS.iter().any(|m| m.name == v) || SWITCHES.contains(&v.as_str()))
        .then(|| std::ffi::CString::new(format!("{ENV}={v}")).ok())
        .flatten()
}

/// Never anything to hand on in a release build.
#[cfg(not(debug_assertions))]
pub const fn handed_on() -> Option<std::ffi::CString> {
    None
}

/// Whether this build honours [`ENV`] at all.
pub const COMPILED_IN: bool = cfg!(debug_assertions);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_mechanism_has_a_mutant_or_a_reason() {
        for (i, m) in MUTANTS.iter().enumerate() {
            assert!(MUTANTS[..i].iter().all(|o| o.name != m.name), "{}", m.name);
            assert!(m.sealed || m.scoped, "{}", m.name);
        }
        for mech in ControlMechanism::ALL {
            let mutant = MUTANTS.iter().any(|m| m.mechanism == mech);
            let exempt = EXEMPT.iter().any(|(e, _)| *e == mech);
            assert!(
                mutant ^ exempt,
                "{mech}: a mutant or an exemption, not both"
            );
        }
    }
}
