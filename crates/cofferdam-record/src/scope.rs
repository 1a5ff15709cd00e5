//! The scope report: the read-only answer to "what would this run be allowed to do on this
//! host?" (`spec/scope-report.txt`, DESIGN.md §10). This module owns the type and its wire
//! shape only; `cofferdam-policy::scope` builds it as a pure function of the policy, the
//! declared floor and the host facts.
//!
//! Every field is always serialized, `null` and `[]` included: a missing key identifies a
//! cofferdam that predates the field, never a host that was not asked. Field names follow the
//! spec wherever the meaning exists in cofferdam; `docs/scope-report.md` lists the spec's
//! fields that have no meaning here (WebAssembly preopens, inference images, artifact
//! installs, peer exports) and the fields cofferdam adds.

use crate::containment::{ContainmentClass, EnforcementTier};
use crate::host::UsernsGrant;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a run would be allowed to do on this host, before launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScopeReport {
    /// The floor: the strongest class any source asked for (manifest `containment`,
    /// `--containment`, default `scoped`).
    pub declared_containment: ContainmentClass,
    /// The class the run's command would run under: the class of `enforcement_tier`.
    pub achieved_containment: ContainmentClass,
    /// The strongest class this host can back. cofferdam always runs on the strongest tier
    /// the host offers, so this equals `achieved_containment`; both are kept for consumers
    /// of the spec.
    pub host_containment: ContainmentClass,
    /// `achieved_containment >= declared_containment` and the tier carries every grant
    /// asked for. `false` means `cofferdam run` refuses (exit 125).
    pub floor_met: bool,
    /// When `floor_met` is false: why `run` refuses (the missing mechanism, or what this tier
    /// cannot carry) and how to fix it. `null` otherwise.
    pub shortfall_reason: Option<String>,
    /// The tier the run would install, by its stable wire name.
    pub enforcement_tier: EnforcementTier,
    /// Every route code could run on, and what holds each.
    pub routes: Vec<RouteReport>,
    /// Where this host's permission to create an unprivileged user namespace comes from;
    /// `null` when it could not be determined.
    pub userns_grant: Option<UsernsGrant>,
    /// The Landlock ABI the run's ruleset would be built at, or `null` when no Landlock
    /// domain would be installed (advisory tier, or a kernel without Landlock).
    pub landlock_abi: Option<u32>,
    /// The workdir: the folder the command sees and whose writes are staged.
    pub filesystem_scope: Option<String>,
    /// Whether files in the workdir, HOME and /tmp may be executed (`[filesystem]
    /// workdir_exec`, default true). Not a class change in cofferdam: the command itself is
    /// arbitrary code already.
    pub workdir_exec: bool,
    /// Workdir subtrees the command may read but not write, verbatim.
    pub read_only_paths: Vec<String>,
    /// Commands against which `read_only_paths` is only advisory. Always empty: cofferdam
    /// enforces read-only paths in the kernel (read-only bind on the sealed tier, Landlock
    /// on the scoped tier).
    pub read_only_advisory_for: Vec<String>,
    /// Host paths that are never visible to the command (secrets, the job store).
    pub hidden_paths: Vec<String>,
    /// The network mode: `none`, `allow` or `host`.
    pub network_mode: String,
    /// Allowed destinations, normalized (`host:ports`), not resolved addresses.
    pub network_allow: Vec<String>,
    /// The sandbox's ports published on the host (`--publish`), inbound only, with what
    /// each gets on this tier.
    #[serde(default)]
    pub network_publish: Vec<PublishReport>,
    /// Whether the command could connect to a host process's unix socket (a pathname
    /// socket inside a visible path; Landlock stops that only from ABI 9).
    pub unix_sockets: bool,
    /// `[exec] allow`, verbatim: the programs the command is meant to run. Recorded, not
    /// enforced on any tier yet (a `not_protected` line says so when non-empty).
    pub shell_allow: Vec<String>,
    /// `[env] allow` and `--env`, verbatim: host variables passed in beyond the defaults.
    pub env_allow: Vec<String>,
    /// Every host variable name that would be projected (defaults plus `env_allow`).
    pub env_projected: Vec<String>,
    /// Variable names cofferdam itself sets inside.
    pub env_injected: Vec<String>,
    /// Host CA trust-store paths readable by the command.
    pub trust_store: Vec<String>,
    /// Host files a command reads to resolve names, readable on the Landlock tiers.
    pub name_resolution: Vec<String>,
    /// Every host path lent by `--mount` / `[filesystem] mounts`, with its effect.
    pub host_paths: Vec<HostPathReport>,
    /// The lent paths written directly on the host (mode `write`): they bypass the stage.
    pub state_stores: Vec<StateStoreReport>,
    /// Paths cofferdam itself writes inside the workdir. Always empty: the stage, records and
    /// copies live in the job directory.
    pub runtime_writes: Vec<RuntimeWriteReport>,
    /// Every path the manifest names, and where it resolves from.
    pub manifest_files: Vec<ManifestFileReport>,
    /// For every grant of the policy, where it came from (issue 19). Absent in reports
    /// written before it existed.
    #[serde(default)]
    pub grant_sources: Vec<GrantSourceReport>,
    /// Each requested resource limit and the mechanism that would enforce it.
    pub resources: Vec<ResourceLimitReport>,
    /// The requested I/O bandwidth ceiling and whether it could be installed.
    pub io_max: IoMaxReport,
    /// Whether the run would get its own cgroup, and of which kind.
    pub cgroup_scope: CgroupScopeReport,
    /// What the tier's filesystem mechanism does not restrict ("Not protected here").
    pub filesystem_boundary: FilesystemBoundaryReport,
    /// The job's stage directory (upper, work, copy) as the command would see it.
    pub runtime_dir: RuntimeDirReport,
    /// The job store (bundles, traces, other jobs) as the command would see it.
    pub records_dir: RuntimeDirReport,
    /// The command's temporary folder.
    pub temp_dir: TempDirReport,
    /// Which processes the command sees and can signal.
    pub process_view: ProcessViewReport,
    /// Who the command runs as when it is not contained; `null` on contained tiers.
    pub unconfined: Option<UnconfinedReport>,
}

/// One `--publish` mapping in the scope report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PublishReport {
    /// The host address and port the supervisor listens on, e.g. `127.0.0.1:8080`.
    pub host: String,
    /// The port the workload listens on inside the sandbox (127.0.0.1).
    pub port: u16,
    /// Whether other machines can reach the host side (a non-loopback address).
    pub exposed: bool,
    /// What the mapping gets on this tier.
    pub effect: String,
}

/// One route code could run on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteReport {
    /// `command` (the workload and its children) or `egress_proxy` (cofferdam's own
    /// network relay in the supervisor).
    pub route: String,
    /// The tier wire name that holds it, or `host-process`.
    pub mechanism: String,
    /// Whether the route is in use for this policy.
    pub active: bool,
    /// What runs there.
    pub note: String,
}

/// A host path lent to the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HostPathReport {
    /// Host path.
    pub source: String,
    /// Path inside the sandbox.
    pub target: String,
    /// `read`, `stage`, `write` or `hide`.
    pub mode: String,
    /// What the tier does with it.
    pub effect: String,
}

/// A path written directly on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StateStoreReport {
    /// Host path.
    pub source: String,
    /// Path inside the sandbox.
    pub target: String,
    /// Why it matters.
    pub note: String,
}

/// A path the runtime writes inside the workdir.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeWriteReport {
    /// Workdir-relative path.
    pub path: String,
    /// Why the runtime writes it.
    pub reason: String,
}

/// Which layer of the policy granted something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrantSource {
    /// cofferdam's built-in default.
    Default,
    /// A command-line flag.
    Flag,
    /// The user config (`$XDG_CONFIG_HOME/cofferdam/config.toml`).
    UserConfig,
    /// An agent profile (`profile` names which).
    Profile,
    /// The workdir's manifest, which only narrows here (no trust needed).
    Manifest,
    /// A manifest the user trusted (`cofferdam trust`) that grants more than flags and config.
    TrustedManifest,
    /// An install under HOME lent read-only: the command's own (its program, symlinks and
    /// `#!` interpreter), so that it can start, or under an agent profile (or
    /// `--lend-path-toolchains`) one the caller's `PATH` names, for the programs it runs.
    Toolchain,
}

impl GrantSource {
    /// The words shown to a person.
    pub fn shown(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Flag => "flag",
            Self::UserConfig => "user config",
            Self::Profile => "profile",
            Self::Manifest => "manifest (narrowing)",
            Self::TrustedManifest => "trusted manifest",
            Self::Toolchain => "toolchain (an install under HOME the command or its PATH needs)",
        }
    }
}

/// One grant and its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GrantSourceReport {
    /// The policy key, e.g. `network.mode`, `filesystem.mounts`, `resources.memory`.
    pub grant: String,
    /// Its value, shown (a path, a name, a limit as written).
    pub value: String,
    /// Where it came from.
    pub source: GrantSource,
    /// The profile's name when `source` is `profile` (shown `profile:<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// `true` when the grant names a path that does not exist on this host (an optional
    /// mount, skipped: `host_paths` lists it as such), so it grants nothing; absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub absent: bool,
}

impl GrantSourceReport {
    /// The source as shown to a person: `profile:claude` for a profile's grant.
    pub fn shown_source(&self) -> String {
        match (&self.source, &self.profile) {
            (GrantSource::Profile, Some(n)) => format!("profile:{n}"),
            (s, _) => s.shown().to_owned(),
        }
    }
}

/// A path named by the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ManifestFileReport {
    /// The manifest key, e.g. `filesystem.mounts[0].source`.
    pub key: String,
    /// As written.
    pub written: String,
    /// Where it resolves to.
    pub path: String,
    /// `absolute`, `home` (`~/…`) or `manifest-folder`.
    pub resolved_from: String,
}

/// One requested resource limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceLimitReport {
    /// The manifest key (`memory`, `pids`, …).
    pub name: String,
    /// As requested, in the unit of the key (bytes, count, milliseconds, CPUs).
    pub requested: f64,
    /// The mechanism that would enforce it, or `null` when none on this host.
    pub mechanism: Option<String>,
    /// Why it would not be enforced, or a qualification; `null` when enforced as asked.
    pub limitation: Option<String>,
    /// `true` when the value is cofferdam's default (not asked for by a flag or the
    /// manifest); absent otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
}

/// The I/O bandwidth ceiling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IoMaxReport {
    /// Requested bytes per second, or `null`.
    pub requested_bytes_per_sec: Option<u64>,
    /// `not-requested`, `available` (a delegated cgroup v2 with the io controller) or
    /// `unavailable`.
    pub status: String,
    /// Why it is unavailable; `null` otherwise.
    pub reason: Option<String>,
}

/// The run's cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CgroupScopeReport {
    /// `delegated` (cgroup v2 subtree), `v1` (cgroup v1 controllers, as root),
    /// `not-required` (no limit needs a cgroup) or `unavailable`.
    pub status: String,
    /// The cgroup the run's own would be created under, when known.
    pub parent: Option<String>,
    /// Controllers the run could use there.
    pub controllers: Vec<String>,
    /// Why it is unavailable, or what falls back to rlimits; `null` otherwise.
    pub reason: Option<String>,
}

/// What the filesystem mechanism of the tier does not restrict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FilesystemBoundaryReport {
    /// One plain sentence each. Empty only when there is nothing to disclaim.
    pub not_protected: Vec<String>,
}

/// A cofferdam-owned directory as the command sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeDirReport {
    /// Host path.
    pub path: String,
    /// Whether the command can see it at its host path.
    pub visible: bool,
    /// Whether the command can write it at its host path.
    pub writable: bool,
    /// Why it is visible or writable; `null` when it is neither.
    pub reason: Option<String>,
}

/// The command's temporary folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TempDirReport {
    /// The path the command uses (`TMPDIR`).
    pub path: String,
    /// Whether `/tmp` is private to the run.
    pub private: bool,
    /// What backs it.
    pub backing: String,
    /// Its size cap in bytes, or `null` when uncapped.
    pub size_limit_bytes: Option<u64>,
    /// The size cap of the private HOME's and `/dev/shm`'s tmpfs each (sealed tier:
    /// `--tmp-size`, else 1 GiB); `null` on the tiers without them.
    #[serde(default)]
    pub home_and_shm_size_limit_bytes: Option<u64>,
}

/// Which processes the command sees and can signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessViewReport {
    /// The command runs in its own pid namespace.
    pub pid_namespace: bool,
    /// Which `/proc` it sees.
    pub proc: String,
    /// Whether host processes are visible in it.
    pub host_processes_visible: bool,
    /// Whether the command can signal processes outside the run.
    pub signals_to_host: bool,
}

/// Who an uncontained command runs as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UnconfinedReport {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// What that means.
    pub note: String,
}
