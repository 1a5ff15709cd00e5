//! The sandbox plan: every decision the sandbox init needs, resolved in advance, so the init
//! (a single-threaded re-executed process) decides nothing and only turns each part into an
//! observation. Built by [`build_plan`] as a pure function of the policy, the host facts and
//! the job's paths; serialized to the init over an inherited pipe (it carries environment
//! values, so it is never written to disk).

use crate::allow::NetworkMode;
use crate::controls::{ControlRequirement, SetupStep, control_requirements};
use crate::manifest::MountMode;
use crate::policy::{DEFAULT_PROJECTED_ENV, PROXY_ENV, Policy};
use crate::secrets::secret_paths;
use crate::tier::decide_containment;
use cofferdam_record::{EnforcementTier, HostFacts};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The newest Landlock ABI cofferdam's ruleset is built for; the kernel's ABI is capped at it.
pub const LANDLOCK_TARGET_ABI: u32 = 7;

/// System directories bound read-only into the composed root (those that exist).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt",
];

/// Everything the init does, decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxPlan {
    /// The tier to install.
    pub tier: EnforcementTier,
    /// The run id (`run-<uuid>`), injected as `COFFERDAM_RUN_ID`.
    pub run_id: String,
    /// Host uid mapped to itself inside the user namespace.
    pub uid: u32,
    /// Host gid mapped to itself inside the user namespace.
    pub gid: u32,
    /// The command: `argv[0]` is looked up in the sandbox's `PATH` when it has no `/`.
    pub argv: Vec<String>,
    /// The workload's environment, names and values (never recorded).
    pub env: Vec<(String, String)>,
    /// Filesystem composition.
    pub fs: FsPlan,
    /// Landlock rules.
    pub landlock: LandlockPlan,
    /// Resource limits applied with `setrlimit`.
    pub rlimits: RlimitPlan,
    /// The UTS hostname inside.
    pub hostname: String,
    /// When set, the command runs on a new pseudo-terminal of the sandbox's own devpts, of
    /// this initial size, whose master pid 1 hands to the supervisor over the terminal
    /// socket (`cofferdam_sandbox::fds::TERMINAL`); when `None` the command inherits the init's stdin, stdout and stderr
    /// (pipes the supervisor relays). Not decided by [`build_plan`]: the supervisor sets it
    /// when [`wants_terminal`] says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalPlan>,
    /// The network (DESIGN.md §6).
    #[serde(default)]
    pub network: NetworkPlan,
    /// How the tier depends on each control row the init reads back
    /// ([`control_requirements`] of the tier): a row that does not hold its requirement
    /// refuses the run. No default: a plan without it would refuse nothing.
    pub requirements: Vec<ControlRequirement>,
    /// Whether the supervisor watches the workdir's overlay for the run's file accesses
    /// (`run_observation.filesystem`): pid 1 asks for the watch once the overlay is mounted
    /// and waits until it is placed ([`SetupStep::AwaitFileWatch`]). Set by
    /// [`build_plan`] where [`files_observable`] says the host allows it.
    #[serde(default)]
    pub watch_files: bool,
}

/// Whether the run's file accesses can be observed on `tier` with these host facts, and if
/// not, why. The only mechanism is a fanotify mark on the sealed tier's workdir overlay
/// mount: the copy tiers have no mount of their own to mark, and a mount mark needs
/// `CAP_SYS_ADMIN` in the initial user namespace (an unprivileged fanotify group may only
/// mark single inodes, which would mean walking the tree). Pure.
pub fn files_observable(tier: EnforcementTier, facts: &HostFacts) -> Result<(), &'static str> {
    if tier != EnforcementTier::MountnsPivotRootLandlockSeccomp {
        return Err("only the sealed tier has a workdir mount to watch");
    }
    if !facts.is_root {
        return Err(
            "watching a mount with fanotify needs root (CAP_SYS_ADMIN in the \
                    initial user namespace)",
        );
    }
    Ok(())
}

impl SandboxPlan {
    /// Whether the network is confined (any mode but `host`).
    pub fn network_confined(&self) -> bool {
        self.network.mode != PlanNetworkMode::Host
    }

    /// The init's setup steps, in order (DESIGN.md §3), after the namespaces: the sealed
    /// tier's pid 1 composes its root and hardens itself; the scoped tier hardens the host
    /// process in the copy; the advisory tier sets only the environment and the rlimits.
    pub fn setup_program(&self) -> Vec<SetupStep> {
        use SetupStep as S;
        let memfd = (!self.fs.workdir_exec).then_some(S::MemfdNoexec);
        let steps: Vec<Option<SetupStep>> = match self.tier {
            EnforcementTier::MountnsPivotRootLandlockSeccomp => vec![
                memfd,
                Some(S::ComposeRoot),
                Some(S::Hostname),
                Some(S::Network),
                self.watch_files.then_some(S::AwaitFileWatch),
                Some(S::Rlimits),
                Some(S::BuildSeccomp),
                Some(S::CloseFds),
                Some(S::StatusCloexec),
                Some(S::NotDumpable),
                Some(S::DropCapabilities),
                Some(S::NoNewPrivs),
                Some(S::Landlock),
                Some(S::Seccomp),
            ],
            EnforcementTier::LandlockSeccomp => vec![
                Some(S::EnterWorkdir),
                Some(S::NoPidNamespace),
                Some(S::Rlimits),
                Some(S::BuildSeccomp),
                Some(S::CloseFds),
                Some(S::StatusCloexec),
                self.terminal.is_some().then_some(S::Terminal),
                Some(S::NotDumpable),
                Some(S::DropCapabilities),
                Some(S::NoNewPrivs),
                Some(S::Landlock),
                Some(S::MetadataFilter),
                self.landlock.tcp.is_some().then_some(S::SocketFilter),
                Some(S::HiddenPaths),
                memfd,
                Some(S::Seccomp),
            ],
            EnforcementTier::None => vec![
                Some(S::EnterWorkdir),
                Some(S::NoPidNamespace),
                Some(S::Rlimits),
                Some(S::CloseFds),
                Some(S::StatusCloexec),
                Some(S::AdvisoryAbsences),
            ],
        };
        steps.into_iter().flatten().collect()
    }
}

/// The network mode as the init sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanNetworkMode {
    /// A new network namespace with loopback only.
    #[default]
    None,
    /// A new network namespace whose every destination is local, served by the supervisor
    /// through sockets pid 1 hands over.
    Allow,
    /// No network namespace: the host's network.
    Host,
}

/// What pid 1 sets up for the network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPlan {
    /// The mode.
    pub mode: PlanNetworkMode,
    /// `allow`: the ports that get a transparent listener on every address (the allowed
    /// entries' ports), ascending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp_ports: Vec<u16>,
    /// `allow`: the HTTP proxy's port on 127.0.0.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_port: Option<u16>,
    /// The ports published on the host (`--publish`): the init serves the supervisor a new
    /// TCP socket of this namespace per connection over the publish socket (`cofferdam_sandbox::fds::PUBLISH`, `cofferdam_net::forward`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publish: Vec<u16>,
}

/// The HTTP proxy's port inside the sandbox in `allow` mode.
pub const PROXY_PORT: u16 = 3128;

/// The sandbox's `/etc/resolv.conf` in `allow` mode: the resolver pid 1 hands over.
pub const ALLOW_RESOLV_CONF: &str = "nameserver 127.0.0.1\noptions attempts:1\n";

/// The network plan of a policy.
pub fn network_plan(policy: &Policy) -> NetworkPlan {
    let mut plan = mode_plan(policy);
    plan.publish = policy.network.publish.iter().map(|e| e.port).collect();
    plan
}

fn mode_plan(policy: &Policy) -> NetworkPlan {
    match policy.network.mode {
        NetworkMode::None => NetworkPlan::default(),
        NetworkMode::Host => NetworkPlan {
            mode: PlanNetworkMode::Host,
            ..NetworkPlan::default()
        },
        NetworkMode::Allow => {
            let mut ports: Vec<u16> = policy
                .network
                .allow
                .iter()
                .flat_map(|e| e.ports.iter().copied())
                .collect();
            ports.sort_unstable();
            ports.dedup();
            NetworkPlan {
                mode: PlanNetworkMode::Allow,
                tcp_ports: ports,
                proxy_port: Some(PROXY_PORT),
                publish: Vec::new(),
            }
        }
    }
}

/// The command's pseudo-terminal: its initial window size (0 when the caller's is unknown).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalPlan {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// Whether the command gets its own pseudo-terminal: `force` (`--tty` / `--no-tty`) when
/// given, else only when the caller's stdin and stdout are both terminals. Otherwise its
/// stdin, stdout and stderr are three pipes the supervisor relays, so output redirected to a
/// file keeps its bytes as written (no CR from a terminal's output processing) and stderr
/// stays apart from stdout.
pub fn wants_terminal(stdin_is_tty: bool, stdout_is_tty: bool, force: Option<bool>) -> bool {
    force.unwrap_or(stdin_is_tty && stdout_is_tty)
}

/// How the root is composed (sealed tier).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsPlan {
    /// An empty directory in the job, the mount point of the new root's tmpfs.
    pub new_root: PathBuf,
    /// System directories to bind read-only (or recreate as symlinks).
    pub system_ro: Vec<PathBuf>,
    /// The workdir: overlay lower, mounted at the same path inside.
    pub workdir: PathBuf,
    /// The overlay upper directory (the stage).
    pub upper: PathBuf,
    /// The overlay work directory (same filesystem as `upper`).
    pub overlay_work: PathBuf,
    /// A fork's inherited layer (its checkpoint's staged tree, hard-linked): the lower
    /// layer between `upper` and the workdir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherited: Option<PathBuf>,
    /// Absolute paths inside the workdir made read-only by a read-only bind.
    pub read_only: Vec<PathBuf>,
    /// The home directory: a private tmpfs inside.
    pub home: PathBuf,
    /// Lent host paths.
    pub mounts: Vec<MountPlan>,
    /// Paths never visible: masked when they fall inside a visible tree.
    pub hidden: Vec<PathBuf>,
    /// The size of /tmp's tmpfs, bytes.
    pub tmp_size: Option<u64>,
    /// The size of the private HOME's and `/dev/shm`'s tmpfs each, bytes
    /// ([`private_tmpfs_size`]): never the kernel's default of half the RAM.
    pub private_tmpfs_size: u64,
    /// Whether the workdir, HOME, /tmp and /dev/shm allow exec.
    pub workdir_exec: bool,
    /// When set, `/etc/resolv.conf` inside shows this text (`allow` mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolv_conf: Option<String>,
}

/// One lent host path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPlan {
    /// Host path.
    pub source: PathBuf,
    /// Path inside.
    pub target: PathBuf,
    /// `read`, `stage`, `write` or `hide`.
    pub mode: PlanMountMode,
}

/// The mount modes, as the init sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanMountMode {
    /// Read-only bind.
    Read,
    /// Overlay with its own upper in the job.
    Stage,
    /// Writable bind.
    Write,
    /// Masked.
    Hide,
}

/// The Landlock ruleset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockPlan {
    /// The highest ABI to build the ruleset at (the kernel's, capped).
    pub abi: u32,
    /// Trees granted read and execute.
    pub read_exec: Vec<PathBuf>,
    /// Trees granted read, write (create, remove, rename, truncate…), and execute when
    /// `exec_in_read_write` is set.
    pub read_write: Vec<PathBuf>,
    /// Whether `read_write` trees also grant execute.
    pub exec_in_read_write: bool,
    /// Device files granted read and write (`/dev/null`, `/dev/tty`, …) and ioctl on them.
    pub devices: Vec<PathBuf>,
    /// TCP port rules; `None` leaves TCP to the network namespace.
    pub tcp: Option<TcpRules>,
    /// Scope signals to the sandbox (ABI 6).
    pub scope_signals: bool,
    /// Scope abstract unix sockets to the sandbox (ABI 6).
    pub scope_abstract_unix: bool,
}

/// Landlock TCP rules (ABI 4): the only ports that may be bound and connected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpRules {
    /// Ports `connect(2)` may reach.
    pub connect: Vec<u16>,
    /// Ports `bind(2)` may take.
    pub bind: Vec<u16>,
}

/// `setrlimit` values; `None` leaves the inherited limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlimitPlan {
    /// `RLIMIT_DATA`, bytes.
    pub data: Option<u64>,
    /// `RLIMIT_NPROC`.
    pub nproc: Option<u64>,
    /// `RLIMIT_CPU`, seconds.
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_FSIZE`, bytes.
    pub fsize: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub nofile: Option<u64>,
    /// `RLIMIT_CORE` = 0.
    pub core_zero: bool,
    /// `RLIMIT_RTPRIO` = 0 and `RLIMIT_NICE` = 0: no real-time scheduling policy and no
    /// priority above the inherited one, even for a process that regains `CAP_SYS_NICE`
    /// in its own namespace (the kernel checks the capability in the initial one anyway).
    pub priority_zero: bool,
}

/// The job paths the plan refers to.
#[derive(Debug, Clone)]
pub struct JobPaths {
    /// The run id.
    pub run_id: String,
    /// Mount point for the new root.
    pub new_root: PathBuf,
    /// Overlay upper.
    pub upper: PathBuf,
    /// Overlay work.
    pub overlay_work: PathBuf,
    /// A fork's inherited layer, when the job is one.
    pub inherited: Option<PathBuf>,
    /// The storage root (hidden).
    pub storage_root: PathBuf,
}

/// The invoking process's identity and environment.
#[derive(Debug, Clone)]
pub struct Invoker {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// User name for `USER`.
    pub user: String,
    /// Home directory.
    pub home: PathBuf,
    /// The host environment (names and values).
    pub env: Vec<(String, String)>,
    /// The host's SSH private keys to hide (`crate::secrets::ssh_host_keys`, from what the
    /// probe read of `/etc/ssh`).
    pub ssh_host_keys: Vec<PathBuf>,
}

/// Whether `name` is projected by the default list or `allow` (`LC_*` is a prefix pattern).
pub fn is_projected(name: &str, allow: &[String]) -> bool {
    DEFAULT_PROJECTED_ENV
        .iter()
        .copied()
        .chain(allow.iter().map(String::as_str))
        .any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
}

/// The workload's environment: projected host variables, then the injected ones.
pub fn project_env(policy: &Policy, inv: &Invoker, run_id: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = inv
        .env
        .iter()
        .filter(|(k, _)| is_projected(k, &policy.env_allow))
        .filter(|(k, _)| !matches!(k.as_str(), "HOME" | "USER" | "TMPDIR" | "COFFERDAM_RUN_ID"))
        .filter(|(k, _)| policy.network.mode != NetworkMode::Allow || !is_proxy_name(k))
        .cloned()
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push((
            "PATH".into(),
            "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin".into(),
        ));
    }
    for (k, v) in &policy.env_set {
        env.retain(|(n, _)| n != k);
        env.push((k.clone(), v.clone()));
    }
    env.push(("HOME".into(), inv.home.to_string_lossy().into_owned()));
    env.push(("USER".into(), inv.user.clone()));
    env.push(("TMPDIR".into(), "/tmp".into()));
    env.push(("COFFERDAM_RUN_ID".into(), run_id.to_owned()));
    if policy.network.mode == NetworkMode::Allow {
        let proxy = format!("http://127.0.0.1:{PROXY_PORT}");
        env.extend(PROXY_ENV.iter().map(|k| {
            let v = if k.eq_ignore_ascii_case("no_proxy") {
                NO_PROXY.to_owned()
            } else {
                proxy.clone()
            };
            ((*k).to_owned(), v)
        }));
    }
    env
}

/// Loopback stays the sandbox's own: a proxy-aware client talks to a server it started
/// inside directly (the proxy, outside, could only reach the host's loopback).
const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// Whether `name` is a proxy variable (set by cofferdam in `allow` mode, whatever the host
/// has).
fn is_proxy_name(name: &str) -> bool {
    PROXY_ENV.iter().any(|p| p.eq_ignore_ascii_case(name))
}

/// The size of the sealed tier's private `/tmp`, HOME and `/dev/shm` when `--tmp-size` is not
/// given: bounded, so a workload cannot fill half the host's RAM through them (a tmpfs
/// without `size=` gets half of it), and large enough for a build's caches and Chromium's
/// or Python multiprocessing's shared memory.
pub const DEFAULT_PRIVATE_TMPFS_BYTES: u64 = 1 << 30;

/// The size of the private `/tmp`, HOME and `/dev/shm` tmpfs: `--tmp-size` when given (the one
/// size knob for the run's scratch space), else [`DEFAULT_PRIVATE_TMPFS_BYTES`].
pub fn private_tmpfs_size(tmp_size: Option<u64>) -> u64 {
    tmp_size.unwrap_or(DEFAULT_PRIVATE_TMPFS_BYTES)
}

/// Build the sealed tier's plan.
pub fn build_plan(
    policy: &Policy,
    facts: &HostFacts,
    inv: &Invoker,
    job: &JobPaths,
    argv: Vec<String>,
) -> SandboxPlan {
    let decision = decide_containment(facts, policy.floor);
    let mut hidden = secret_paths(&inv.home, &inv.ssh_host_keys);
    let lent = crate::policy::lent_secrets(policy);
    hidden.retain(|h| !lent.contains(h));
    hidden.push(job.storage_root.clone());
    hidden.extend(
        policy
            .mounts
            .iter()
            .filter(|m| m.mode == MountMode::Hide)
            .map(|m| m.source.clone()),
    );
    let mounts = policy
        .mounts
        .iter()
        .map(|m| MountPlan {
            source: m.source.clone(),
            target: m.target.clone(),
            mode: match m.mode {
                MountMode::Read => PlanMountMode::Read,
                MountMode::Stage => PlanMountMode::Stage,
                MountMode::Write => PlanMountMode::Write,
                MountMode::Hide => PlanMountMode::Hide,
            },
        })
        .collect::<Vec<_>>();
    // /dev/shm is the run's own tmpfs: writable like /tmp (shm_open creates files there).
    let mut read_write = vec![
        policy.workdir.clone(),
        inv.home.clone(),
        PathBuf::from("/tmp"),
        PathBuf::from("/dev/shm"),
    ];
    read_write.extend(
        mounts
            .iter()
            .filter(|m| matches!(m.mode, PlanMountMode::Stage | PlanMountMode::Write))
            .map(|m| m.target.clone()),
    );
    let r = &policy.resources;
    SandboxPlan {
        tier: decision.tier,
        run_id: job.run_id.clone(),
        uid: inv.uid,
        gid: inv.gid,
        argv,
        env: project_env(policy, inv, &job.run_id),
        fs: FsPlan {
            new_root: job.new_root.clone(),
            system_ro: SYSTEM_DIRS.iter().map(PathBuf::from).collect(),
            workdir: policy.workdir.clone(),
            upper: job.upper.clone(),
            overlay_work: job.overlay_work.clone(),
            inherited: job.inherited.clone(),
            read_only: policy
                .read_only
                .iter()
                .map(|p| policy.workdir.join(p))
                .collect(),
            home: inv.home.clone(),
            mounts,
            hidden,
            tmp_size: r.tmp_size.map(|s| s.0),
            private_tmpfs_size: private_tmpfs_size(r.tmp_size.map(|s| s.0)),
            workdir_exec: policy.workdir_exec,
            resolv_conf: (policy.network.mode == NetworkMode::Allow)
                .then(|| ALLOW_RESOLV_CONF.to_owned()),
        },
        landlock: LandlockPlan {
            abi: facts.landlock_abi.min(LANDLOCK_TARGET_ABI),
            read_exec: vec![PathBuf::from("/")],
            read_write,
            exec_in_read_write: policy.workdir_exec,
            devices: [
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/tty",
                "/dev/ptmx",
                "/dev/pts",
                "/dev/shm",
            ]
            .map(PathBuf::from)
            .to_vec(),
            tcp: None,
            scope_signals: true,
            scope_abstract_unix: true,
        },
        rlimits: RlimitPlan {
            data: r.memory.map(|s| s.0),
            nproc: r.pids,
            cpu_seconds: r.cpu_time.map(|t| t.0.as_secs().max(1)),
            fsize: r.max_file_size.map(|s| s.0),
            nofile: r.open_files,
            core_zero: true,
            priority_zero: true,
        },
        hostname: "cofferdam".into(),
        terminal: None,
        network: network_plan(policy),
        requirements: control_requirements(decision.tier, policy.network.mode != NetworkMode::Host),
        watch_files: files_observable(decision.tier, facts).is_ok(),
    }
}

/// Whether `path` lies inside `dir` (component-wise).
pub fn is_within(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

#[cfg(test)]
pub(crate) mod tests {
    #[test]
    fn a_terminal_only_when_stdin_and_stdout_are_both_terminals_unless_forced() {
        use super::wants_terminal;
        assert!(wants_terminal(true, true, None));
        assert!(!wants_terminal(true, false, None));
        assert!(!wants_terminal(false, true, None));
        assert!(!wants_terminal(false, false, None));
        assert!(wants_terminal(false, false, Some(true)));
        assert!(!wants_terminal(true, true, Some(false)));
    }

    use super::*;
    use crate::policy::{Places, RunFlags, resolve_policy};

    pub(crate) fn inv() -> Invoker {
        Invoker {
            uid: 1000,
            gid: 1000,
            user: "u".into(),
            home: "/home/u".into(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("LC_ALL".into(), "C.UTF-8".into()),
                ("SECRET_TOKEN".into(), "hunter2".into()),
                ("ANTHROPIC_API_KEY".into(), "k".into()),
                ("HOME".into(), "/elsewhere".into()),
            ],
            ssh_host_keys: vec!["/etc/ssh/ssh_host_test_key".into()],
        }
    }

    pub(crate) fn job() -> JobPaths {
        JobPaths {
            run_id: "run-1".into(),
            new_root: "/s/jobs/run-1/root".into(),
            upper: "/s/jobs/run-1/upper".into(),
            overlay_work: "/s/jobs/run-1/work".into(),
            inherited: None,
            storage_root: "/s".into(),
        }
    }

    pub(crate) fn policy(flags: RunFlags) -> Policy {
        let places = Places {
            cwd: "/home/u/proj".into(),
            home: "/home/u".into(),
        };
        resolve_policy(None, &flags, &places).unwrap()
    }

    #[test]
    fn a_lent_secret_is_mounted_and_not_masked_and_the_rest_stay_masked() {
        let p = policy(RunFlags {
            lend_secrets: vec!["~/.config/gcloud".into()],
            ..RunFlags::default()
        });
        let plan = build_plan(
            &p,
            &HostFacts::capable_example(),
            &inv(),
            &job(),
            vec!["true".into()],
        );
        let gcloud = PathBuf::from("/home/u/.config/gcloud");
        assert!(!plan.fs.hidden.contains(&gcloud));
        assert!(plan.fs.hidden.contains(&PathBuf::from("/home/u/.ssh")));
        assert!(
            plan.fs
                .mounts
                .iter()
                .any(|m| m.source == gcloud && m.target == gcloud && m.mode == PlanMountMode::Read)
        );
        // Without the flag it is masked.
        let plan = build_plan(
            &policy(RunFlags::default()),
            &HostFacts::capable_example(),
            &inv(),
            &job(),
            vec!["true".into()],
        );
        assert!(plan.fs.hidden.contains(&gcloud));
    }

    #[test]
    fn env_projects_only_allowed_names_and_injects_ours() {
        let p = policy(RunFlags {
            env: vec!["ANTHROPIC_API_KEY".into()],
            ..RunFlags::default()
        });
        let env = project_env(&p, &inv(), "run-1");
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "PATH",
                "LC_ALL",
                "ANTHROPIC_API_KEY",
                "HOME",
                "USER",
                "TMPDIR",
                "COFFERDAM_RUN_ID"
            ]
        );
        assert!(!env.iter().any(|(_, v)| v == "hunter2"));
        assert!(env.contains(&("HOME".into(), "/home/u".into())));
    }

    #[test]
    fn allow_mode_plans_listeners_resolver_and_proxy_variables() {
        let mut i = inv();
        i.env
            .push(("HTTPS_PROXY".into(), "http://corp:8080".into()));
        let p = policy(RunFlags {
            allow_net: vec!["api.example.com".into(), "127.0.0.1:8080".into()],
            env: vec!["HTTPS_PROXY".into()],
            ..RunFlags::default()
        });
        let plan = build_plan(&p, &HostFacts::capable_example(), &i, &job(), vec![]);
        assert_eq!(plan.network.mode, PlanNetworkMode::Allow);
        assert_eq!(plan.network.tcp_ports, vec![80, 443, 8080]);
        assert_eq!(plan.network.proxy_port, Some(PROXY_PORT));
        assert_eq!(plan.fs.resolv_conf.as_deref(), Some(ALLOW_RESOLV_CONF));
        let get = |k: &str| {
            plan.env
                .iter()
                .filter(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        // The host's proxy never reaches inside in allow mode, even when projected.
        assert_eq!(get("HTTPS_PROXY"), vec!["http://127.0.0.1:3128"]);
        assert_eq!(get("all_proxy"), vec!["http://127.0.0.1:3128"]);
        assert_eq!(get("NO_PROXY"), vec!["localhost,127.0.0.1,::1"]);
    }

    #[test]
    fn none_and_host_plan_no_listeners() {
        let none = build_plan(
            &policy(RunFlags::default()),
            &HostFacts::capable_example(),
            &inv(),
            &job(),
            vec![],
        );
        assert_eq!(none.network, NetworkPlan::default());
        assert!(none.fs.resolv_conf.is_none());
        assert!(!none.env.iter().any(|(k, _)| k.ends_with("PROXY")));
        let host = build_plan(
            &policy(RunFlags {
                network: Some("host".into()),
                ..RunFlags::default()
            }),
            &HostFacts::capable_example(),
            &inv(),
            &job(),
            vec![],
        );
        assert_eq!(host.network.mode, PlanNetworkMode::Host);
        assert!(host.network.tcp_ports.is_empty() && host.fs.resolv_conf.is_none());
    }

    #[test]
    fn files_are_watched_only_on_the_sealed_tier_as_root_and_before_the_hardening() {
        use crate::controls::SetupStep as S;
        let mut root = HostFacts::capable_example();
        root.is_root = true;
        let mut user = root.clone();
        user.is_root = false;
        let sealed = EnforcementTier::MountnsPivotRootLandlockSeccomp;
        assert!(files_observable(sealed, &root).is_ok());
        assert!(
            files_observable(sealed, &user)
                .unwrap_err()
                .contains("root")
        );
        assert!(files_observable(EnforcementTier::LandlockSeccomp, &root).is_err());
        assert!(files_observable(EnforcementTier::None, &root).is_err());
        let build = |facts: &HostFacts| {
            build_plan(
                &policy(RunFlags::default()),
                facts,
                &inv(),
                &job(),
                vec!["true".into()],
            )
        };
        assert!(!build(&user).watch_files);
        assert!(!build(&user).setup_program().contains(&S::AwaitFileWatch));
        let plan = build(&root);
        assert!(plan.watch_files);
        let steps = plan.setup_program();
        let at = |s: S| steps.iter().position(|x| *x == s).unwrap();
        // After the workdir is mounted, before any descriptor is closed or right dropped.
        assert!(at(S::ComposeRoot) < at(S::AwaitFileWatch));
        assert!(at(S::AwaitFileWatch) < at(S::CloseFds));
        assert!(at(S::AwaitFileWatch) < at(S::DropCapabilities));
        // The copy tiers have no mount to watch.
        let mut scoped = plan.clone();
        scoped.tier = EnforcementTier::LandlockSeccomp;
        assert!(!scoped.setup_program().contains(&S::AwaitFileWatch));
    }

    #[test]
    fn the_setup_program_hardens_in_order_and_installs_seccomp_last() {
        use crate::controls::SetupStep as S;
        let mut plan = build_plan(
            &policy(RunFlags::default()),
            &HostFacts::capable_example(),
            &inv(),
            &job(),
            vec!["true".into()],
        );
        // `--no-exec` (workdir_exec false) raises memfd_noexec first.
        plan.fs.workdir_exec = false;
        assert_eq!(
            plan.setup_program(),
            vec![
                S::MemfdNoexec,
                S::ComposeRoot,
                S::Hostname,
                S::Network,
                S::Rlimits,
                S::BuildSeccomp,
                S::CloseFds,
                S::StatusCloexec,
                S::NotDumpable,
                S::DropCapabilities,
                S::NoNewPrivs,
                S::Landlock,
                S::Seccomp,
            ]
        );
        plan.tier = EnforcementTier::LandlockSeccomp;
        plan.terminal = Some(TerminalPlan { rows: 24, cols: 80 });
        plan.landlock.tcp = Some(TcpRules {
            connect: Vec::new(),
            bind: Vec::new(),
        });
        plan.fs.workdir_exec = true;
        let scoped = plan.setup_program();
        assert_eq!(
            scoped,
            vec![
                S::EnterWorkdir,
                S::NoPidNamespace,
                S::Rlimits,
                S::BuildSeccomp,
                S::CloseFds,
                S::StatusCloexec,
                S::Terminal,
                S::NotDumpable,
                S::DropCapabilities,
                S::NoNewPrivs,
                S::Landlock,
                S::MetadataFilter,
                S::SocketFilter,
                S::HiddenPaths,
                S::Seccomp,
            ]
        );
        plan.tier = EnforcementTier::None;
        assert_eq!(
            plan.setup_program(),
            vec![
                S::EnterWorkdir,
                S::NoPidNamespace,
                S::Rlimits,
                S::CloseFds,
                S::StatusCloexec,
                S::AdvisoryAbsences,
            ]
        );
        // Every tier that builds a seccomp filter installs it, as its last step.
        for tier in EnforcementTier::ALL {
            plan.tier = tier;
            let steps = plan.setup_program();
            assert_eq!(
                steps.contains(&S::BuildSeccomp),
                steps.last() == Some(&S::Seccomp),
                "{tier}"
            );
        }
    }

    #[test]
    fn the_plan_carries_the_requirements_of_its_tier_and_network() {
        use crate::controls::control_requirements;
        let facts = HostFacts::capable_example();
        let none = build_plan(&policy(RunFlags::default()), &facts, &inv(), &job(), vec![]);
        assert_eq!(
            none.requirements,
            control_requirements(EnforcementTier::MountnsPivotRootLandlockSeccomp, true)
        );
        let host = build_plan(
            &policy(RunFlags {
                network: Some("host".into()),
                ..RunFlags::default()
            }),
            &facts,
            &inv(),
            &job(),
            vec![],
        );
        assert!(!host.network_confined());
        assert_eq!(
            host.requirements,
            control_requirements(EnforcementTier::MountnsPivotRootLandlockSeccomp, false)
        );
        assert!(host.requirements.len() < none.requirements.len());
    }

    #[test]
    fn plan_hides_secrets_and_the_store_and_limits_from_policy() {
        let p = policy(RunFlags {
            read_only: vec![".git".into()],
            memory: Some("1GiB".into()),
            ..RunFlags::default()
        });
        let plan = build_plan(
            &p,
            &HostFacts::capable_example(),
            &inv(),
            &job(),
            vec!["true".into()],
        );
        assert_eq!(plan.tier, EnforcementTier::MountnsPivotRootLandlockSeccomp);
        assert!(plan.fs.hidden.contains(&PathBuf::from("/home/u/.ssh")));
        assert!(plan.fs.hidden.contains(&PathBuf::from("/s")));
        assert_eq!(plan.fs.read_only, vec![PathBuf::from("/home/u/proj/.git")]);
        assert_eq!(plan.rlimits.data, Some(1 << 30));
        assert!(plan.rlimits.core_zero);
        assert!(plan.rlimits.priority_zero);
        assert_eq!(plan.landlock.abi, 7);
        assert!(
            plan.landlock
                .read_write
                .contains(&PathBuf::from("/home/u/proj"))
        );
        let json = serde_json::to_string(&plan).unwrap();
        let back: SandboxPlan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plan);
    }
}
