//! The control vocabulary: which kernel mechanism a control is and which boundary
//! dimension it speaks for.
//!
//! Owns `ControlMechanism` and `ControlDimension`, the closed sets both the executor's
//! records (`executor`) and the per-tier requirement tables (`requirements`) are written
//! in. It may not hold records or rules: only the names and their wire forms.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The kernel mechanisms cofferdam installs (DESIGN.md §3, §6, §7). A closed vocabulary: a
/// reader that meets a mechanism it does not know rejects the bundle rather than guess.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ControlMechanism {
    /// A new user namespace with a single-id map and `setgroups` denied.
    Userns,
    /// A new mount namespace with private propagation.
    Mountns,
    /// A new pid namespace; pid 1 is cofferdam's reaper.
    Pidns,
    /// A new network namespace (loopback only unless the network mode allows more).
    Netns,
    /// A new IPC namespace.
    Ipcns,
    /// A new UTS namespace.
    Utsns,
    /// A new cgroup namespace.
    Cgroupns,
    /// The composed read-only root, entered with `pivot_root`, old root detached.
    PivotRoot,
    /// The workdir as an overlay whose upper layer is the stage.
    Overlay,
    /// The workdir as a copy in the job directory (scoped tier).
    WorkdirCopy,
    /// A new `/proc` with sensitive entries masked.
    ProcMask,
    /// A minimal `/dev`.
    MinimalDev,
    /// Credentials and host secrets not visible.
    SecretsHidden,
    /// Every inherited file descriptor closed.
    CloseFds,
    /// All capabilities dropped, bounding set included.
    Capabilities,
    /// `no_new_privs` set.
    NoNewPrivs,
    /// A Landlock ruleset at the host's ABI.
    Landlock,
    /// A seccomp filter.
    Seccomp,
    /// Resource limits (`setrlimit`).
    Rlimit,
    /// cgroup (v2 delegated, or v1 as root) membership and limits.
    Cgroup,
    /// A size-limited tmpfs for `/tmp`.
    Tmpfs,
    /// The wall-clock timeout kill.
    WallClock,
    /// The supervisor's DNS listener and egress proxy for `allow` mode.
    EgressProxy,
}

impl ControlMechanism {
    /// Every mechanism, in declaration order.
    pub const ALL: [ControlMechanism; 23] = [
        Self::Userns,
        Self::Mountns,
        Self::Pidns,
        Self::Netns,
        Self::Ipcns,
        Self::Utsns,
        Self::Cgroupns,
        Self::PivotRoot,
        Self::Overlay,
        Self::WorkdirCopy,
        Self::ProcMask,
        Self::MinimalDev,
        Self::SecretsHidden,
        Self::CloseFds,
        Self::Capabilities,
        Self::NoNewPrivs,
        Self::Landlock,
        Self::Seccomp,
        Self::Rlimit,
        Self::Cgroup,
        Self::Tmpfs,
        Self::WallClock,
        Self::EgressProxy,
    ];

    /// The wire name, e.g. `pivot_root`.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Userns => "userns",
            Self::Mountns => "mountns",
            Self::Pidns => "pidns",
            Self::Netns => "netns",
            Self::Ipcns => "ipcns",
            Self::Utsns => "utsns",
            Self::Cgroupns => "cgroupns",
            Self::PivotRoot => "pivot_root",
            Self::Overlay => "overlay",
            Self::WorkdirCopy => "workdir_copy",
            Self::ProcMask => "proc_mask",
            Self::MinimalDev => "minimal_dev",
            Self::SecretsHidden => "secrets_hidden",
            Self::CloseFds => "close_fds",
            Self::Capabilities => "capabilities",
            Self::NoNewPrivs => "no_new_privs",
            Self::Landlock => "landlock",
            Self::Seccomp => "seccomp",
            Self::Rlimit => "rlimit",
            Self::Cgroup => "cgroup",
            Self::Tmpfs => "tmpfs",
            Self::WallClock => "wall_clock",
            Self::EgressProxy => "egress_proxy",
        }
    }
}

impl fmt::Display for ControlMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

/// The boundary dimensions a control can speak for. `Ord` is the declaration order, which
/// is also the order of `summary` keys.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ControlDimension {
    /// What the workload can read and execute.
    FilesystemRead,
    /// Where the workload's writes land.
    FilesystemWrite,
    /// Where the workload can connect.
    Network,
    /// Isolation from host processes and privilege gain.
    Process,
    /// The kernel interfaces the workload can reach (syscalls, capabilities, `/proc`).
    KernelSurface,
    /// Memory, processes, CPU, time, disk.
    Resources,
}

impl ControlDimension {
    /// Every dimension, in order.
    pub const ALL: [ControlDimension; 6] = [
        Self::FilesystemRead,
        Self::FilesystemWrite,
        Self::Network,
        Self::Process,
        Self::KernelSurface,
        Self::Resources,
    ];

    /// The wire name.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::FilesystemRead => "filesystem_read",
            Self::FilesystemWrite => "filesystem_write",
            Self::Network => "network",
            Self::Process => "process",
            Self::KernelSurface => "kernel_surface",
            Self::Resources => "resources",
        }
    }
}

impl fmt::Display for ControlDimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}
