//! Builds the scope report (DESIGN.md §10, `spec/scope-report.txt`) as a pure function of
//! the resolved policy, the host facts and where the job store lives. It changes nothing and
//! reads nothing: it says what `cofferdam run` with the same inputs would be allowed to do.
//!
//! Per-tier statements live in small functions here, one per report block, so the human
//! rendering, `--json` and the `session_start` trace event all carry the same words.

use crate::allow::NetworkMode;
use crate::cgroup_plan::DEFAULT_PIDS_SKIPPED;
use crate::manifest::MountMode;
use crate::plan::LANDLOCK_TARGET_ABI;
use crate::policy::{DEFAULT_PROJECTED_ENV, INJECTED_ENV, PROXY_ENV, Policy};
use crate::secrets::secret_paths;
use crate::tier::decide_containment_capped;
use cofferdam_record::bundle::ResourceDimension;
use cofferdam_record::scope::{
    CgroupScopeReport, FilesystemBoundaryReport, GrantSourceReport, HostPathReport, IoMaxReport,
    ManifestFileReport, ProcessViewReport, PublishReport, ResourceLimitReport, RouteReport,
    RuntimeDirReport, ScopeReport, StateStoreReport, TempDirReport, UnconfinedReport,
};
use cofferdam_record::{ContainmentClass, EnforcementTier, HostFacts};
use std::path::{Path, PathBuf};

/// What the report is built from.
#[derive(Debug, Clone)]
pub struct ScopeInputs<'a> {
    /// The resolved policy.
    pub policy: &'a Policy,
    /// The probed (or injected) host.
    pub facts: &'a HostFacts,
    /// The storage root (`$COFFERDAM_HOME`, …).
    pub storage_root: &'a Path,
    /// The invoking user's home.
    pub home: &'a Path,
    /// The host's SSH private keys (`crate::secrets::ssh_host_keys`).
    pub ssh_host_keys: &'a [std::path::PathBuf],
    /// `--tier`: report for at most this class's tier (it only lowers, as in `run`).
    pub cap: Option<ContainmentClass>,
}

/// Build the scope report.
pub fn build_scope_report(inp: &ScopeInputs<'_>) -> ScopeReport {
    let p = inp.policy;
    let f = inp.facts;
    let mut decision = decide_containment_capped(f, p.floor, inp.cap);
    // What `run` refuses is what the report calls a shortfall: one decision for both.
    if let Err(refusal) = crate::refusal::check_run(p, &decision) {
        decision.floor_met = false;
        decision.shortfall_reason = Some(refusal.to_string());
    }
    let tier = decision.tier;
    let abi = match tier {
        EnforcementTier::None => None,
        _ if f.landlock_abi == 0 => None,
        _ => Some(f.landlock_abi.min(LANDLOCK_TARGET_ABI)),
    };
    let allow = p.network.mode == NetworkMode::Allow;
    let mut env_projected: Vec<String> = DEFAULT_PROJECTED_ENV
        .iter()
        .map(|s| s.to_string())
        .collect();
    env_projected.extend(p.env_allow.iter().cloned());
    let mut env_injected: Vec<String> = INJECTED_ENV.iter().map(|s| s.to_string()).collect();
    env_injected.extend(p.env_set.iter().map(|(k, _)| k.clone()));
    if allow {
        env_injected.extend(PROXY_ENV.iter().map(|s| s.to_string()));
    }
    let lent = crate::policy::lent_secrets(p);
    let mut hidden_paths: Vec<String> = secret_paths(inp.home, inp.ssh_host_keys)
        .iter()
        .filter(|x| !lent.contains(x))
        .map(|x| display(x))
        .collect();
    hidden_paths.push(display(inp.storage_root));
    hidden_paths.extend(
        p.mounts
            .iter()
            .filter(|m| m.mode == MountMode::Hide)
            .map(|m| display(&m.source)),
    );
    // The advisory tier hides nothing and filters no network: no grant is listed as holding.
    // The scoped tier cannot hide what lies beneath a system directory Landlock grants (the
    // "reads:" line of Not protected here says so): it is not listed as hidden either.
    match tier {
        EnforcementTier::None => hidden_paths.clear(),
        EnforcementTier::LandlockSeccomp => hidden_paths.retain(|h| {
            !crate::plan::SYSTEM_DIRS
                .iter()
                .any(|d| Path::new(h).starts_with(d))
        }),
        _ => {}
    }
    let network_mode = match tier {
        EnforcementTier::None => NetworkMode::Host,
        _ => p.network.mode,
    };

    ScopeReport {
        declared_containment: decision.declared,
        achieved_containment: decision.achieved,
        host_containment: decision.host,
        floor_met: decision.floor_met,
        shortfall_reason: decision.shortfall_reason.clone(),
        enforcement_tier: tier,
        routes: routes(tier, allow, !p.network.publish.is_empty()),
        userns_grant: f.userns.grant,
        landlock_abi: abi,
        filesystem_scope: Some(display(&p.workdir)),
        workdir_exec: p.workdir_exec,
        read_only_paths: p.read_only.clone(),
        read_only_advisory_for: Vec::new(),
        hidden_paths,
        network_mode: network_mode.wire_name().to_owned(),
        network_allow: p.network.allow.iter().map(ToString::to_string).collect(),
        network_publish: publish_reports(p, tier, decision.floor_met),
        unix_sockets: tier == EnforcementTier::None || abi.is_none_or(|a| a < 9),
        shell_allow: p.exec_allow.clone(),
        env_allow: p.env_allow.clone(),
        env_projected,
        env_injected,
        trust_store: if p.network.mode == NetworkMode::None {
            Vec::new()
        } else {
            f.trust_store.clone()
        },
        name_resolution: match tier {
            EnforcementTier::None => Vec::new(),
            _ => ["/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf"]
                .map(String::from)
                .to_vec(),
        },
        host_paths: p
            .mounts
            .iter()
            .map(|m| HostPathReport {
                source: display(&m.source),
                target: display(&m.target),
                mode: m.mode.wire_name().to_owned(),
                effect: mount_effect(tier, m.mode),
            })
            .chain(p.skipped_mounts.iter().map(|m| HostPathReport {
                source: display(&m.source),
                target: display(&m.target),
                mode: m.mode.wire_name().to_owned(),
                effect: if crate::profiles::creatable(p).contains(&m) {
                    CREATABLE_EFFECT.to_owned()
                } else {
                    SKIPPED_EFFECT.to_owned()
                },
            }))
            .collect(),
        state_stores: p
            .mounts
            .iter()
            .filter(|m| m.mode == MountMode::Write)
            .map(|m| StateStoreReport {
                source: display(&m.source),
                target: display(&m.target),
                note: match m.origin.strip_prefix("profile:") {
                    Some(name) => format!(
                        "agent state lent by profile:{name}: written directly on the host, \
                         persists across runs, bypasses the stage and review"
                    ),
                    None => {
                        "written directly on the host: bypasses the stage and review".to_owned()
                    }
                },
            })
            .collect(),
        runtime_writes: Vec::new(),
        manifest_files: manifest_files(p),
        grant_sources: grant_sources(p),
        resources: resource_rows(p, f, tier),
        io_max: io_max(p, f),
        cgroup_scope: cgroup_scope(p, f),
        filesystem_boundary: FilesystemBoundaryReport {
            not_protected: not_protected(p, tier, abi),
        },
        runtime_dir: runtime_dir(tier, inp.storage_root, &p.workdir),
        records_dir: records_dir(tier, inp.storage_root, &p.workdir),
        temp_dir: temp_dir(tier, p, inp.storage_root),
        process_view: process_view(tier, abi),
        unconfined: (tier == EnforcementTier::None).then(|| UnconfinedReport {
            uid: f.uid,
            gid: f.gid,
            note: format!(
                "the command runs as a host process with uid {} and every right that user has",
                f.uid
            ),
        }),
    }
}

/// `p`'s grant sources, a mount's marked `absent` when it was skipped for a missing source:
/// it lends nothing on this host (`host_paths` lists it as skipped), as the run records.
fn grant_sources(p: &Policy) -> Vec<GrantSourceReport> {
    let skipped: Vec<String> = p
        .skipped_mounts
        .iter()
        .map(crate::policy::provenance::mount_value)
        .collect();
    p.grant_sources
        .iter()
        .map(|g| GrantSourceReport {
            absent: g.absent || (g.grant == "filesystem.mounts" && skipped.contains(&g.value)),
            ..g.clone()
        })
        .collect()
}

fn display(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn routes(tier: EnforcementTier, allow: bool, publish: bool) -> Vec<RouteReport> {
    let mut routes = vec![
        RouteReport {
            route: "command".into(),
            mechanism: match tier {
                EnforcementTier::None => "host-process".into(),
                t => t.wire_name().into(),
            },
            active: true,
            note: "the command and every process it starts".into(),
        },
        RouteReport {
            route: "egress_proxy".into(),
            mechanism: "host-process".into(),
            active: allow,
            note: "cofferdam's supervisor answers DNS and relays allowed connections with the \
                   host's network; it reads only DNS queries, TLS SNI, HTTP Host and CONNECT \
                   lines, and runs no code from the command"
                .into(),
        },
    ];
    if publish {
        routes.push(RouteReport {
            route: "publish".into(),
            mechanism: "host-process".into(),
            active: tier == EnforcementTier::MountnsPivotRootLandlockSeccomp,
            note: "cofferdam's supervisor accepts connections on each --publish host address \
                   and relays their bytes, unread, to the command's port inside the sandbox; \
                   inbound only"
                .into(),
        });
    }
    routes
}

/// What each `--publish` mapping gets: relayed on the sealed tier with a network namespace;
/// refused (with `run`) elsewhere.
fn publish_reports(p: &Policy, tier: EnforcementTier, runs: bool) -> Vec<PublishReport> {
    let netns = tier == EnforcementTier::MountnsPivotRootLandlockSeccomp
        && p.network.mode != NetworkMode::Host;
    p.network
        .publish
        .iter()
        .map(|e| PublishReport {
            host: e.host().to_string(),
            port: e.port,
            exposed: !e.is_loopback(),
            effect: if netns && runs {
                format!(
                    "the supervisor listens on {} (bound before the run starts) and relays each \
                     connection to 127.0.0.1:{} inside the sandbox's network namespace; a \
                     connection made before the command listens is closed at once; inbound \
                     only, the network mode ({}) still governs what the command reaches",
                    e.host(),
                    e.port,
                    p.network.mode.wire_name()
                )
            } else if netns {
                "not published: the run is refused (see shortfall_reason)".to_owned()
            } else {
                "refused on this tier (run exits 125): publishing needs the sealed tier's own \
                 network namespace; without one the command's ports are the host's already"
                    .to_owned()
            },
        })
        .collect()
}

/// The effect of an optional mount whose source does not exist.
pub const SKIPPED_EFFECT: &str = "skipped: optional, and the source does not exist";

/// The effect of a profile's absent read-only file inside its writable state dir
/// (`crate::profiles::creatable`); what creating it grants is its `filesystem.creatable` grant.
pub const CREATABLE_EFFECT: &str = "skipped: optional, and the source does not exist; the run can \
     create it inside the writable agent state around it, and what it creates there is set \
     aside when the run ends (see `filesystem.creatable` for what it would grant)";

/// What a lent path gets on `tier`: only the sealed tier lends host paths, and no tier
/// carries mode `stage` (`crate::refusal` refuses both, and this says so).
fn mount_effect(tier: EnforcementTier, mode: MountMode) -> String {
    let what = match (tier, mode) {
        (EnforcementTier::None | EnforcementTier::LandlockSeccomp, _) => {
            "refused on this tier (run exits 125): lending a host path needs the sealed tier's \
             mount namespace"
        }
        (_, MountMode::Stage) => {
            "refused (run exits 125): mode `stage` is not supported by this build; use `read`, \
             `write` or `hide`"
        }
        (_, MountMode::Read) => "bind-mounted read-only at the target",
        (_, MountMode::Write) => {
            "bind-mounted writable at the target: writes land on the host directly"
        }
        (_, MountMode::Hide) => "masked: invisible inside the sandbox",
    };
    what.to_owned()
}

fn manifest_files(p: &Policy) -> Vec<ManifestFileReport> {
    if p.manifest_path.is_none() {
        return Vec::new();
    }
    p.mounts
        .iter()
        .filter(|m| m.origin != "--mount" && !crate::widen::is_user_config_origin(&m.origin))
        .map(|m| ManifestFileReport {
            key: format!("{}.source", m.origin),
            written: m.written.clone(),
            path: display(&m.source),
            resolved_from: crate::policy::resolved_from(&m.written).to_owned(),
        })
        .collect()
}

use crate::cgroup_plan::CgroupVersion as CgroupSource;

/// Where controller `ctrl` would come from on this host (`crate::cgroup_plan` decides).
fn controller_source(f: &HostFacts, ctrl: &str) -> Option<CgroupSource> {
    crate::cgroup_plan::controller_source(&f.cgroup, f.is_root, ctrl)
}

/// The controllers the requested limits need.
fn needed_controllers(p: &Policy) -> Vec<&'static str> {
    let r = &p.resources;
    [
        (r.memory.is_some(), "memory"),
        (r.pids.is_some(), "pids"),
        (r.cpus.is_some(), "cpu"),
        (r.io_bps.is_some(), "io"),
    ]
    .into_iter()
    .filter_map(|(wanted, c)| wanted.then_some(c))
    .collect()
}

fn cgroup_scope(p: &Policy, f: &HostFacts) -> CgroupScopeReport {
    let needed = needed_controllers(p);
    if needed.is_empty() {
        return CgroupScopeReport {
            status: "not-required".into(),
            parent: None,
            controllers: Vec::new(),
            reason: None,
        };
    }
    let sources: Vec<(&str, Option<CgroupSource>)> = needed
        .iter()
        .map(|c| (*c, controller_source(f, c)))
        .collect();
    let got = |k: CgroupSource| sources.iter().any(|(_, s)| *s == Some(k));
    let (v2, v1) = (got(CgroupSource::V2), got(CgroupSource::V1));
    let status = match (v2, v1) {
        (true, true) => "hybrid",
        (true, false) => "delegated",
        (false, true) => "v1",
        (false, false) => "unavailable",
    };
    let parent = v2.then(|| {
        let c = &f.cgroup;
        format!(
            "{}{}",
            c.v2_mount.as_deref().unwrap_or("").trim_end_matches('/'),
            c.v2_own_cgroup.as_deref().unwrap_or("")
        )
    });
    let controllers = sources
        .iter()
        .filter_map(|(c, s)| match s {
            Some(CgroupSource::V2) => Some(format!("{c} (v2)")),
            Some(CgroupSource::V1) => Some(format!("{c} (v1)")),
            None => None,
        })
        .collect();
    let missing: Vec<&str> = sources
        .iter()
        .filter(|(_, s)| s.is_none())
        .map(|(c, _)| *c)
        .collect();
    let reason = (!missing.is_empty()).then(|| {
        let fallbacks: Vec<&str> = missing
            .iter()
            .map(|c| match *c {
                "memory" => "memory falls back to RLIMIT_DATA",
                "pids" => "pids falls back to RLIMIT_NPROC",
                "cpu" => "cpus is not enforced",
                _ => "io_bps is not enforced",
            })
            .collect();
        format!(
            "no delegated cgroup v2 subtree with {}{}: {}; to get one, run under `systemd-run \
             --user --scope -p Delegate=yes cofferdam …`",
            missing.join(", "),
            if f.is_root || f.cgroup.v1_controllers.is_empty() {
                ""
            } else {
                " (cgroup v1 controllers need root)"
            },
            fallbacks.join(", ")
        )
    });
    CgroupScopeReport {
        status: status.into(),
        parent,
        controllers,
        reason,
    }
}

fn io_max(p: &Policy, f: &HostFacts) -> IoMaxReport {
    let Some(bps) = p.resources.io_bps else {
        return IoMaxReport {
            requested_bytes_per_sec: None,
            status: "not-requested".into(),
            reason: None,
        };
    };
    let (status, reason) = match controller_source(f, "io") {
        Some(v) => (
            "available",
            format!(
                "{} for the disks behind the workdir and the stage, resolved at launch; a \
                 filesystem without a block device (overlay, tmpfs, network, FUSE, btrfs) is \
                 not throttled and the run's bundle says so{}",
                match v {
                    CgroupSource::V2 => "cgroup2 io.max",
                    CgroupSource::V1 => "cgroup1 blkio.throttle.{read,write}_bps_device",
                },
                if v == CgroupSource::V1 {
                    "; v1 does not throttle buffered writes (writeback)"
                } else {
                    ""
                }
            ),
        ),
        None => (
            "unavailable",
            format!(
                "no delegated cgroup v2 subtree with the io controller{}: disk bandwidth is \
                 not limited",
                if !f.is_root && f.cgroup.v1_controllers.iter().any(|c| c == "blkio") {
                    " (the cgroup v1 blkio controller needs root)"
                } else {
                    ""
                }
            ),
        ),
    };
    IoMaxReport {
        requested_bytes_per_sec: Some(bps.0),
        status: status.into(),
        reason: Some(reason),
    }
}

fn resource_rows(p: &Policy, f: &HostFacts, tier: EnforcementTier) -> Vec<ResourceLimitReport> {
    let r = &p.resources;
    let cg = |ctrl: &str, v2_file: &str, v1_file: &str| -> Option<String> {
        match controller_source(f, ctrl)? {
            CgroupSource::V2 => Some(format!("cgroup2 {v2_file}")),
            CgroupSource::V1 => Some(format!("cgroup1 {v1_file}")),
        }
    };
    let sealed = tier == EnforcementTier::MountnsPivotRootLandlockSeccomp;
    let mut rows = Vec::new();
    let mut row =
        |name: &str, requested: f64, mechanism: Option<String>, limitation: Option<&str>| {
            rows.push(ResourceLimitReport {
                name: name.into(),
                requested,
                mechanism,
                limitation: limitation.map(str::to_owned),
                default: false,
            });
        };
    if let Some(m) = r.memory {
        match cg("memory", "memory.max", "memory.limit_in_bytes") {
            Some(mech) => row("memory", m.0 as f64, Some(mech), None),
            None => row(
                "memory",
                m.0 as f64,
                Some("RLIMIT_DATA".into()),
                Some(
                    "per process and data segment only: several processes together, and files written to the private tmpfs (/tmp, HOME, /dev/shm), can exceed it",
                ),
            ),
        }
    }
    if let Some(n) = r.pids {
        let mechanism = cg("pids", "pids.max", "pids.max");
        let default = r.is_default(ResourceDimension::Pids);
        let (mechanism, limitation) = match mechanism {
            Some(m) => (Some(m), None),
            None if f.is_root => (
                None,
                Some(
                    "RLIMIT_NPROC does not bind the host's root user and no cgroup pids controller is usable",
                ),
            ),
            None if sealed => (
                Some("RLIMIT_NPROC".into()),
                Some("counted per user in the run's user namespace"),
            ),
            None if default => (None, Some(DEFAULT_PIDS_SKIPPED)),
            None => (
                Some("RLIMIT_NPROC".into()),
                Some("counts every process of your user on the host, not only the run's"),
            ),
        };
        row("pids", n as f64, mechanism, limitation);
    }
    if let Some(c) = r.cpus {
        match cg("cpu", "cpu.max", "cpu.cfs_quota_us") {
            Some(mech) => row("cpus", c, Some(mech), None),
            None => row(
                "cpus",
                c,
                None,
                Some("no cgroup with the cpu controller on this host"),
            ),
        }
    }
    if let Some(t) = r.timeout {
        row(
            "timeout",
            t.as_millis_u64() as f64,
            Some(if sealed {
                "wall-clock kill of the run's pid namespace".into()
            } else {
                "wall-clock kill of the run's process group".into()
            }),
            (!sealed).then_some("a process that leaves the process group outlives the kill"),
        );
    }
    if let Some(t) = r.cpu_time {
        row(
            "cpu_time",
            t.as_millis_u64() as f64,
            Some("RLIMIT_CPU".into()),
            Some("per process"),
        );
    }
    if let Some(s) = r.max_file_size {
        row(
            "max_file_size",
            s.0 as f64,
            Some("RLIMIT_FSIZE".into()),
            None,
        );
    }
    if let Some(n) = r.open_files {
        row("open_files", n as f64, Some("RLIMIT_NOFILE".into()), None);
    }
    if let Some(b) = r.io_bps {
        match cg("io", "io.max", "blkio.throttle.*_bps_device") {
            Some(mech) => row(
                "io_bps",
                b.0 as f64,
                Some(mech),
                Some(
                    "on the disks behind the workdir and the stage; none for overlay, tmpfs or network filesystems",
                ),
            ),
            None => row(
                "io_bps",
                b.0 as f64,
                None,
                Some("no cgroup with the io controller (v2 delegated, or v1 blkio as root)"),
            ),
        }
    }
    if let Some(s) = r.tmp_size {
        if sealed {
            row(
                "tmp_size",
                s.0 as f64,
                Some("tmpfs size= on /tmp, and on the private HOME and /dev/shm".into()),
                None,
            );
        } else {
            row(
                "tmp_size",
                s.0 as f64,
                None,
                Some("the temp directory lives in the job directory on this tier"),
            );
        }
    }
    if let Some(s) = r.stage_size {
        if sealed {
            row(
                "stage_size",
                s.0 as f64,
                Some("supervisor poll of the stage's allocated bytes, kill on exceed".into()),
                Some(
                    "polled every 250 ms: a burst between polls can overshoot before the kill (the check at seal fails the run as well)",
                ),
            );
        } else {
            // The copy tiers move the changes into the stage only when the command ends.
            row(
                "stage_size",
                s.0 as f64,
                Some("a check of the stage when the run ends".into()),
                Some(
                    "not polled on this tier: the workload is not stopped when its copy passes the cap; the run fails as over the cap when it ends",
                ),
            );
        }
    }
    for row in &mut rows {
        row.default = row.name == "pids" && r.is_default(ResourceDimension::Pids);
    }
    rows
}

/// The scoped tier's metadata line: Landlock has no right for modes, owners, times or
/// extended attributes, and the seccomp metadata filter closes only part of it.
pub const METADATA_RESIDUAL: &str = "metadata: file modes, timestamps and extended \
    attributes of files your user owns outside the copy can still be changed (Landlock has no \
    right for them; a seccomp filter refuses only the path-based extended-attribute writes). \
    When cofferdam runs as root the filter refuses every chmod, chown, extended-attribute and \
    inode-flag write, inside the copy too, and only the times of a file the command can open \
    can be set, to the current time (touch)";

/// inotify is kept (file watchers need it on the workdir) and no layer here can restrict it
/// by path: Landlock has no right for it, seccomp cannot read the path. fanotify is refused.
pub const INOTIFY_SEALED_LINE: &str = "file activity: inotify works on every path the command \
    sees, so it learns when host processes create, change or remove files in the read-only \
    system view and in paths lent with --mount (names and times, not contents); it stays \
    because file watchers need it on the workdir, and neither Landlock nor seccomp can limit \
    it by path (fanotify is refused)";

/// The scoped tier's inotify: the host's whole tree, Landlock's refusals notwithstanding.
pub const INOTIFY_SCOPED_LINE: &str = "file activity: inotify works on every directory your \
    user may read, even one Landlock refuses to list (your home, other projects, /tmp), so the \
    command learns the names of files host processes create, change or remove there, and when \
    (not their contents); it stays because file watchers need it on the workdir, and neither \
    Landlock nor seccomp can limit it by path (fanotify is refused)";

/// What `workdir_exec = false` does not stop (every tier that enforces anything).
pub const WORKDIR_EXEC_LINE: &str = "code the command writes still runs with workdir_exec = \
    false: it refuses execve(2) of files in the workdir, HOME and /tmp, not a script handed to \
    an interpreter, executable memory, or a binary the dynamic loader maps (from a memfd on \
    every tier; on the scoped tier, where Landlock's execute right does not cover mmap, from \
    any file the command wrote); and execve of a memfd is \
    refused only where the pid namespace's vm.memfd_noexec reads 2 (the sealed tier raises it \
    when cofferdam runs as root; the kernel lets no other user write it), which the bundle's \
    memfd_noexec row records";

/// The scoped tier's devices: the host's `/dev`, of which only a few files are granted.
pub const SCOPED_DEVICES_LINE: &str = "shared memory and new terminals: without a mount \
    namespace the run cannot have a /dev/shm or /dev/pts of its own, and the host's are shared \
    with every process of your user, so Landlock grants neither (only /dev/null, zero, full, \
    tty and the run's own terminal): POSIX shared memory and named semaphores (shm_open, \
    sem_open, Python multiprocessing's locks) and new pseudo-terminals (tmux, script, \
    pexpect) fail with EACCES here; the sealed tier has both";

fn not_protected(p: &Policy, tier: EnforcementTier, abi: Option<u32>) -> Vec<String> {
    let mut out = Vec::new();
    if tier == EnforcementTier::None {
        out.push(
            "nothing is enforced: the command runs as a host process with your user's rights; \
             it can read and write every file you can, reach the network and signal your \
             processes. Only the environment is projected and rlimits applied"
                .to_owned(),
        );
        return out;
    }
    let sealed = tier == EnforcementTier::MountnsPivotRootLandlockSeccomp;
    if sealed {
        out.push(
            "reads: the read-only system view (/usr, /bin, /sbin, /lib*, /etc without the \
             hidden secrets, /opt) and the workdir are readable; secrets kept inside the \
             workdir are visible unless hidden with --mount PATH:hide"
                .to_owned(),
        );
        if abi.is_none() {
            out.push(
                "Landlock is unavailable on this kernel: the composed root is the only \
                 filesystem layer"
                    .to_owned(),
            );
        }
    } else {
        out.push(
            "reads: Landlock grants read access to the system directories (/usr, /bin, /sbin, \
             /lib*, /etc, /opt, /proc) and the job's copy of the workdir, so every file there \
             that your user may read stays readable, the hidden secrets beneath them included \
             (e.g. /etc/shadow when cofferdam runs as root), and so does the host's /proc \
             (host processes, their command lines, kernel tables); other host files cannot \
             be opened, but any path's name, size and times can be looked up (stat)"
                .to_owned(),
        );
        out.push(
            "no pid, ipc or uts namespace: host processes are visible, and SysV IPC objects \
             of your user are reachable"
                .to_owned(),
        );
        out.push(METADATA_RESIDUAL.to_owned());
        out.push(SCOPED_DEVICES_LINE.to_owned());
        if abi.is_none_or(|a| a < 6) {
            out.push(
                "signals and abstract unix sockets: Landlock scopes them only from ABI 6, so \
                 the command can signal your other processes and reach abstract sockets"
                    .to_owned(),
            );
        }
        match p.network.mode {
            NetworkMode::Host => {}
            _ if abi.is_some_and(|a| a >= 4) => out.push(
                "network: no network namespace; a seccomp filter refuses every socket but \
                 unix and netlink route (TCP included, so neither TCP Fast Open nor a listen that \
                 binds by itself can reach past Landlock, which refuses every TCP connect \
                 and bind as well), so name resolution fails too"
                    .to_owned(),
            ),
            _ => out.push(
                "network: no network namespace and no Landlock TCP rules (ABI below 4); only \
                 a seccomp filter confines it, refusing every socket but unix and netlink route \
                 (TCP included)"
                    .to_owned(),
            ),
        }
    }
    if abi.is_none_or(|a| a < 9) {
        let at = abi.map_or_else(|| "no ABI".to_owned(), |a| format!("ABI {a}"));
        out.push(if sealed {
            format!(
                "pathname unix sockets inside visible paths: the command can connect to a host \
                 process listening on one (Landlock stops that only from ABI 9; this ruleset is \
                 at {at})"
            )
        } else {
            // Landlock below ABI 9 does not look at connect(2) to a path, whatever the
            // directory's grants, and the socket filter cannot see the path.
            format!(
                "pathname unix sockets anywhere on the host: the command can connect to any \
                 host process listening on a socket file whose path it names (an ssh-agent, a \
                 container runtime), even in a directory it cannot read (Landlock stops that \
                 only from ABI 9; this ruleset is at {at}; the sealed tier shows none that is \
                 not lent)"
            )
        });
    }
    for m in p.mounts.iter().filter(|m| m.mode == MountMode::Write) {
        out.push(format!(
            "{} is writable on the host (mode write): those writes bypass the stage and cannot \
             be reviewed or dropped",
            m.source.display()
        ));
    }
    if p.network.mode == NetworkMode::Host {
        out.push(
            "network mode host: the command shares the host's network; egress is neither \
             filtered nor counted"
                .to_owned(),
        );
    }
    if p.network.mode == NetworkMode::Allow {
        let loopback: Vec<String> = p
            .network
            .allow
            .iter()
            .filter(|e| e.is_host_loopback())
            .map(ToString::to_string)
            .collect();
        if !loopback.is_empty() {
            out.push(format!(
                "network allow reaches services on this host's loopback ({}): whatever \
                 listens there is reachable from the command, by request",
                loopback.join(", ")
            ));
        }
        out.push(
            "network allow: an allowed server can be asked for any site it hosts (nothing is \
             decrypted; the TLS SNI and HTTP Host are checked on the first message only), and \
             what the command sends to an allowed server is not inspected"
                .to_owned(),
        );
    }
    out.push(
        if sealed {
            INOTIFY_SEALED_LINE
        } else {
            INOTIFY_SCOPED_LINE
        }
        .to_owned(),
    );
    if !p.workdir_exec {
        out.push(WORKDIR_EXEC_LINE.to_owned());
    }
    if !p.exec_allow.is_empty() {
        out.push(
            "[exec] allow is recorded, not enforced: the command may run any program it can see"
                .to_owned(),
        );
    }
    out.push(
        "the kernel itself: a kernel bug reachable through the allowed system calls escapes \
         every tier"
            .to_owned(),
    );
    out
}

fn inside(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

fn runtime_dir(tier: EnforcementTier, root: &Path, workdir: &Path) -> RuntimeDirReport {
    let jobs: PathBuf = root.join("jobs");
    dir_report(
        &jobs,
        workdir,
        match tier {
            EnforcementTier::MountnsPivotRootLandlockSeccomp => None,
            EnforcementTier::LandlockSeccomp => Some(
                "the command works in the job's copy of the workdir (jobs/run-<id>/copy), which \
             Landlock grants read and write; the rest of the job store is not granted",
            ),
            EnforcementTier::None => {
                Some("advisory: a host process can read and write the job store")
            }
        },
    )
}

fn records_dir(tier: EnforcementTier, root: &Path, workdir: &Path) -> RuntimeDirReport {
    dir_report(
        root,
        workdir,
        match tier {
            EnforcementTier::None => {
                Some("advisory: a host process can read and write the job store")
            }
            _ => None,
        },
    )
}

fn dir_report(path: &Path, workdir: &Path, open_reason: Option<&str>) -> RuntimeDirReport {
    if inside(path, workdir) {
        return RuntimeDirReport {
            path: display(path),
            visible: true,
            writable: true,
            reason: Some(
                "inside the workdir: cofferdam run refuses this storage root; set \
                 COFFERDAM_HOME outside the workdir"
                    .into(),
            ),
        };
    }
    let open = open_reason.is_some();
    RuntimeDirReport {
        path: display(path),
        visible: open,
        writable: open,
        reason: open_reason.map(str::to_owned),
    }
}

fn temp_dir(tier: EnforcementTier, p: &Policy, root: &Path) -> TempDirReport {
    let job_tmp = display(&root.join("jobs/run-<id>/tmp"));
    match tier {
        EnforcementTier::MountnsPivotRootLandlockSeccomp => TempDirReport {
            path: "/tmp".into(),
            private: true,
            backing: "a fresh tmpfs".into(),
            size_limit_bytes: Some(crate::plan::private_tmpfs_size(
                p.resources.tmp_size.map(|s| s.0),
            )),
            home_and_shm_size_limit_bytes: Some(crate::plan::private_tmpfs_size(
                p.resources.tmp_size.map(|s| s.0),
            )),
        },
        EnforcementTier::LandlockSeccomp => TempDirReport {
            path: job_tmp,
            private: true,
            backing: "the job directory (TMPDIR); Landlock refuses the host's /tmp".into(),
            size_limit_bytes: None,
            home_and_shm_size_limit_bytes: None,
        },
        EnforcementTier::None => TempDirReport {
            path: job_tmp,
            private: false,
            backing: "the job directory (TMPDIR); the host's /tmp stays reachable".into(),
            size_limit_bytes: None,
            home_and_shm_size_limit_bytes: None,
        },
    }
}

fn process_view(tier: EnforcementTier, abi: Option<u32>) -> ProcessViewReport {
    match tier {
        EnforcementTier::MountnsPivotRootLandlockSeccomp => ProcessViewReport {
            pid_namespace: true,
            proc: "a new /proc of the run's pid namespace, sensitive entries masked".into(),
            host_processes_visible: false,
            signals_to_host: false,
        },
        EnforcementTier::LandlockSeccomp => ProcessViewReport {
            pid_namespace: false,
            proc: "the host's /proc".into(),
            host_processes_visible: true,
            signals_to_host: abi.is_none_or(|a| a < 6),
        },
        EnforcementTier::None => ProcessViewReport {
            pid_namespace: false,
            proc: "the host's /proc".into(),
            host_processes_visible: true,
            signals_to_host: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Places, RunFlags, resolve_policy};
    use cofferdam_record::UsernsGrant;

    fn policy(flags: RunFlags) -> Policy {
        let places = Places {
            cwd: "/work/proj".into(),
            home: "/home/u".into(),
        };
        resolve_policy(None, &flags, &places).unwrap()
    }

    fn report(p: &Policy, f: &HostFacts) -> ScopeReport {
        build_scope_report(&ScopeInputs {
            policy: p,
            facts: f,
            storage_root: Path::new("/home/u/.local/share/cofferdam"),
            home: Path::new("/home/u"),
            ssh_host_keys: &[],
            cap: None,
        })
    }

    fn no_userns() -> HostFacts {
        let mut f = HostFacts::capable_example();
        f.userns.can_create = false;
        f.userns.error = Some("EPERM".into());
        f.userns.grant = Some(UsernsGrant::Withheld);
        f.overlay_in_userns = None;
        f.netns = None;
        f.pidns = None;
        f
    }

    #[test]
    fn capable_host_reports_sealed_with_its_landlock_abi() {
        let r = report(&policy(RunFlags::default()), &HostFacts::capable_example());
        assert_eq!(r.achieved_containment, ContainmentClass::Sealed);
        assert_eq!(r.declared_containment, ContainmentClass::Scoped);
        assert!(r.floor_met);
        assert_eq!(r.shortfall_reason, None);
        assert_eq!(r.landlock_abi, Some(7));
        assert!(r.unix_sockets);
        assert!(!r.process_view.host_processes_visible);
        assert!(r.unconfined.is_none());
        assert!(r.hidden_paths.contains(&"/home/u/.ssh".to_owned()));
        assert!(
            r.hidden_paths
                .contains(&"/home/u/.local/share/cofferdam".to_owned())
        );
        assert!(!r.records_dir.visible);
        // The default pids limit needs the pids controller, which this host lacks.
        assert_eq!(r.cgroup_scope.status, "unavailable");
        assert_eq!(r.io_max.status, "not-requested");
        assert!(
            r.trust_store.is_empty(),
            "network none reads no trust store"
        );
        assert_eq!(r.routes.len(), 2);
        assert!(!r.routes[1].active);
    }

    #[test]
    fn every_field_is_always_serialized() {
        let schema = schemars::schema_for!(ScopeReport);
        let props = schema.as_value()["properties"].as_object().unwrap().clone();
        for f in [HostFacts::capable_example(), no_userns()] {
            let r = report(&policy(RunFlags::default()), &f);
            let v = serde_json::to_value(&r).unwrap();
            let keys = v.as_object().unwrap();
            for k in props.keys() {
                assert!(keys.contains_key(k), "{k} missing");
            }
            assert_eq!(keys.len(), props.len());
        }
    }

    #[test]
    fn sealed_floor_without_userns_is_not_met_and_says_why() {
        let flags = RunFlags {
            containment: Some(ContainmentClass::Sealed),
            ..RunFlags::default()
        };
        let r = report(&policy(flags), &no_userns());
        assert!(!r.floor_met);
        assert_eq!(r.achieved_containment, ContainmentClass::Scoped);
        assert_eq!(r.enforcement_tier, EnforcementTier::LandlockSeccomp);
        assert!(r.shortfall_reason.unwrap().contains("user namespaces"));
        assert!(r.process_view.host_processes_visible);
        assert!(!r.process_view.signals_to_host, "ABI 7 scopes signals");
        let v = serde_json::to_value(report(&policy(RunFlags::default()), &no_userns())).unwrap();
        assert!(v["shortfall_reason"].is_null());
    }

    /// Landlock has no right for chmod, utimes or xattrs: the scoped tier says what of that
    /// stays open (and the network line that no TCP socket can be made); sealed does not.
    #[test]
    fn the_scoped_tier_admits_the_metadata_residual() {
        let scoped = report(&policy(RunFlags::default()), &no_userns());
        let np = scoped.filesystem_boundary.not_protected;
        assert!(np.iter().any(|l| l == METADATA_RESIDUAL), "{np:?}");
        assert!(np.iter().any(|l| l == SCOPED_DEVICES_LINE), "{np:?}");
        assert!(np.iter().any(|l| l == INOTIFY_SCOPED_LINE), "{np:?}");
        assert!(
            np.iter()
                .any(|l| l.starts_with("network:") && l.contains("TCP Fast Open")),
            "{np:?}"
        );
        let sealed = report(&policy(RunFlags::default()), &HostFacts::capable_example());
        let np = sealed.filesystem_boundary.not_protected;
        assert!(!np.iter().any(|l| l.starts_with("metadata:")), "{np:?}");
        assert!(!np.iter().any(|l| l == SCOPED_DEVICES_LINE), "{np:?}");
        assert!(!np.iter().any(|l| l == WORKDIR_EXEC_LINE), "{np:?}");
        assert!(np.iter().any(|l| l == INOTIFY_SEALED_LINE), "{np:?}");
    }

    #[test]
    fn workdir_exec_false_says_what_it_does_not_stop() {
        let mut p = policy(RunFlags::default());
        p.workdir_exec = false;
        for facts in [HostFacts::capable_example(), {
            let mut f = HostFacts::capable_example();
            f.userns.can_create = false;
            f
        }] {
            let np = report(&p, &facts).filesystem_boundary.not_protected;
            assert!(np.iter().any(|l| l == WORKDIR_EXEC_LINE), "{np:?}");
        }
    }

    #[test]
    fn the_default_pids_row_says_where_it_holds_and_where_it_is_left_out() {
        let pids = |flags: RunFlags, f: &HostFacts| {
            let r = report(&policy(flags), f);
            let row = r.resources.iter().find(|l| l.name == "pids").cloned();
            (row, r.cgroup_scope.status)
        };
        // Sealed, no cgroup: RLIMIT_NPROC in the run's own user namespace.
        let (row, _) = pids(RunFlags::default(), &HostFacts::capable_example());
        let row = row.unwrap();
        assert_eq!(row.requested, crate::policy::DEFAULT_PIDS as f64);
        assert!(row.default);
        assert_eq!(row.mechanism.as_deref(), Some("RLIMIT_NPROC"));
        let v = serde_json::to_value(&row).unwrap();
        assert_eq!(v["default"], true);
        // A copy tier without a cgroup: the default is left out, and it says why.
        let (row, status) = pids(RunFlags::default(), &no_userns());
        let row = row.unwrap();
        assert_eq!(row.mechanism, None);
        assert!(row.limitation.unwrap().contains("not applied"));
        assert_eq!(status, "unavailable");
        // Asked for there: applied, and what it counts is said.
        let asked = || RunFlags {
            pids: Some("64".into()),
            ..RunFlags::default()
        };
        let (row, _) = pids(asked(), &no_userns());
        let row = row.unwrap();
        assert!(!row.default);
        assert_eq!(row.mechanism.as_deref(), Some("RLIMIT_NPROC"));
        let v = serde_json::to_value(&row).unwrap();
        assert!(v.get("default").is_none(), "absent when not a default");
        // The host's root without a cgroup: nothing binds it.
        let mut f = HostFacts::capable_example();
        f.is_root = true;
        f.cgroup.v1_controllers.clear();
        let (row, _) = pids(asked(), &f);
        assert_eq!(row.unwrap().mechanism, None);
        // Root with cgroup v1 pids (this host).
        let mut f = HostFacts::capable_example();
        f.is_root = true;
        let (row, status) = pids(RunFlags::default(), &f);
        assert_eq!(row.unwrap().mechanism.as_deref(), Some("cgroup1 pids.max"));
        assert_eq!(status, "v1");
        // Removed: no row, no cgroup needed.
        let none = RunFlags {
            pids: Some("none".into()),
            ..RunFlags::default()
        };
        let (row, status) = pids(none, &HostFacts::capable_example());
        assert!(row.is_none());
        assert_eq!(status, "not-required");
    }

    #[test]
    fn old_landlock_on_scoped_tier_discloses_signals_and_network() {
        let mut f = no_userns();
        f.landlock_abi = 3;
        let r = report(&policy(RunFlags::default()), &f);
        assert_eq!(r.landlock_abi, Some(3));
        assert!(r.process_view.signals_to_host);
        let np = r.filesystem_boundary.not_protected.join("\n");
        assert!(np.contains("signals"), "{np}");
        assert!(np.contains("ABI below 4"), "{np}");
    }

    #[test]
    fn a_tier_cap_reports_the_lowered_tier_only() {
        let f = HostFacts::capable_example();
        let p = policy(RunFlags::default());
        let capped = |cap| {
            build_scope_report(&ScopeInputs {
                policy: &p,
                facts: &f,
                storage_root: Path::new("/home/u/.local/share/cofferdam"),
                home: Path::new("/home/u"),
                ssh_host_keys: &[],
                cap: Some(cap),
            })
        };
        let r = capped(ContainmentClass::Scoped);
        assert_eq!(r.enforcement_tier, EnforcementTier::LandlockSeccomp);
        assert_eq!(r.host_containment, ContainmentClass::Sealed);
        assert_eq!(r.landlock_abi, Some(7));
        assert!(r.process_view.host_processes_visible);
        let np = r.filesystem_boundary.not_protected.join("\n");
        assert!(np.contains("no pid, ipc or uts namespace"), "{np}");
        let p_cap = policy(RunFlags {
            stage_size: Some("1MiB".into()),
            ..RunFlags::default()
        });
        let stage = build_scope_report(&ScopeInputs {
            policy: &p_cap,
            facts: &f,
            storage_root: Path::new("/home/u/.local/share/cofferdam"),
            home: Path::new("/home/u"),
            ssh_host_keys: &[],
            cap: Some(ContainmentClass::Scoped),
        });
        let stage_row = stage.resources.iter().find(|r| r.name == "stage_size");
        assert!(
            stage_row
                .and_then(|r| r.limitation.as_deref())
                .is_some_and(|l| l.starts_with("not polled on this tier")),
            "{:?}",
            stage.resources
        );
        let r = capped(ContainmentClass::Advisory);
        assert_eq!(r.enforcement_tier, EnforcementTier::None);
        assert!(r.unconfined.is_some());
        assert!(r.filesystem_boundary.not_protected[0].starts_with("nothing is enforced"));
        let r = capped(ContainmentClass::Sealed);
        assert_eq!(
            r,
            report(&p, &f),
            "a cap at the host's tier changes nothing"
        );
    }

    #[test]
    fn advisory_reports_unconfined_and_no_landlock() {
        let mut f = no_userns();
        f.landlock_abi = 0;
        let r = report(&policy(RunFlags::default()), &f);
        assert_eq!(r.achieved_containment, ContainmentClass::Advisory);
        assert!(!r.floor_met);
        assert_eq!(r.landlock_abi, None);
        assert_eq!(r.unconfined.as_ref().unwrap().uid, 1000);
        assert!(r.records_dir.visible && r.records_dir.writable);
        assert!(r.name_resolution.is_empty());
        assert_eq!(r.routes[0].mechanism, "host-process");
        assert!(r.filesystem_boundary.not_protected[0].contains("nothing is enforced"));
    }

    #[test]
    fn write_mounts_are_state_stores_and_disclosed() {
        let flags = RunFlags {
            mounts: vec!["~/.cache/pip:write".into(), "/opt/x:/x:read".into()],
            ..RunFlags::default()
        };
        let r = report(&policy(flags), &HostFacts::capable_example());
        assert_eq!(r.host_paths.len(), 2);
        assert_eq!(r.state_stores.len(), 1);
        assert_eq!(r.state_stores[0].source, "/home/u/.cache/pip");
        assert!(r.host_paths[1].effect.contains("read-only"));
        assert!(
            r.filesystem_boundary
                .not_protected
                .iter()
                .any(|l| l.contains("/home/u/.cache/pip") && l.contains("bypass"))
        );
    }

    #[test]
    fn resources_name_the_mechanism_the_host_offers() {
        let flags = RunFlags {
            memory: Some("1GiB".into()),
            cpus: Some(2.0),
            io_bps: Some("10MiB".into()),
            ..RunFlags::default()
        };
        let p = policy(flags);
        let r = report(&p, &HostFacts::capable_example());
        assert_eq!(r.cgroup_scope.status, "unavailable");
        assert_eq!(r.resources[0].mechanism.as_deref(), Some("RLIMIT_DATA"));
        assert!(r.resources[0].limitation.is_some());
        assert_eq!(r.resources[1].name, "pids");
        assert_eq!(r.resources[1].mechanism.as_deref(), Some("RLIMIT_NPROC"));
        assert!(r.resources[1].default);
        assert!(!r.resources[0].default);
        assert_eq!(r.resources[2].mechanism, None);
        assert_eq!(r.io_max.status, "unavailable");

        let mut f = HostFacts::capable_example();
        f.cgroup.v2_delegated = true;
        f.cgroup.v2_own_cgroup = Some("/user.slice/u.service".into());
        f.cgroup.v2_delegated_controllers =
            ["cpu", "io", "memory", "pids"].map(String::from).to_vec();
        let r = report(&p, &f);
        assert_eq!(r.cgroup_scope.status, "delegated");
        assert_eq!(
            r.resources[0].mechanism.as_deref(),
            Some("cgroup2 memory.max")
        );
        assert_eq!(
            r.resources[1].mechanism.as_deref(),
            Some("cgroup2 pids.max")
        );
        assert_eq!(r.resources[2].mechanism.as_deref(), Some("cgroup2 cpu.max"));
        assert_eq!(r.io_max.status, "available");
        assert!(r.io_max.reason.as_deref().unwrap().contains("io.max"));
        assert_eq!(r.resources[3].mechanism.as_deref(), Some("cgroup2 io.max"));

        let mut f = HostFacts::capable_example();
        f.is_root = true;
        let r = report(&p, &f);
        assert_eq!(r.cgroup_scope.status, "v1");
        assert!(
            r.cgroup_scope.reason.as_deref().unwrap().contains("io"),
            "no blkio hierarchy: {:?}",
            r.cgroup_scope
        );
        assert_eq!(r.io_max.status, "unavailable");
        f.cgroup.v1_controllers.push("blkio".into());
        let r = report(&p, &f);
        assert_eq!(r.cgroup_scope.reason, None, "{:?}", r.cgroup_scope);
        assert_eq!(r.io_max.status, "available", "v1 blkio as root");
        assert!(
            r.io_max
                .reason
                .as_deref()
                .unwrap()
                .contains("buffered writes")
        );

        // Root on this host: cgroup2 writable but only with hugetlb, v1 has memory.
        let mut f = HostFacts::capable_example();
        f.is_root = true;
        f.cgroup.v2_delegated = true;
        f.cgroup.v2_delegated_controllers = vec!["hugetlb".into()];
        let r = report(&p, &f);
        assert_eq!(r.cgroup_scope.status, "v1");
        assert_eq!(
            r.resources[0].mechanism.as_deref(),
            Some("cgroup1 memory.limit_in_bytes")
        );
        assert_eq!(
            r.resources[0].mechanism.as_deref(),
            Some("cgroup1 memory.limit_in_bytes")
        );
    }

    #[test]
    fn storage_root_inside_the_workdir_is_flagged() {
        let p = policy(RunFlags::default());
        let r = build_scope_report(&ScopeInputs {
            policy: &p,
            facts: &HostFacts::capable_example(),
            storage_root: Path::new("/work/proj/.cofferdam"),
            home: Path::new("/home/u"),
            ssh_host_keys: &[],
            cap: None,
        });
        assert!(r.records_dir.visible);
        assert!(r.records_dir.reason.unwrap().contains("refuses"));
    }

    #[test]
    fn allow_mode_injects_proxy_env_and_reads_the_trust_store() {
        let flags = RunFlags {
            allow_net: vec!["api.anthropic.com".into()],
            env: vec!["ANTHROPIC_API_KEY".into()],
            ..RunFlags::default()
        };
        let r = report(&policy(flags), &HostFacts::capable_example());
        assert_eq!(r.network_mode, "allow");
        assert_eq!(r.network_allow, vec!["api.anthropic.com:80,443"]);
        assert!(r.env_injected.contains(&"HTTPS_PROXY".to_owned()));
        assert!(r.env_projected.contains(&"ANTHROPIC_API_KEY".to_owned()));
        assert_eq!(r.trust_store, vec!["/etc/ssl/certs"]);
        assert!(r.routes[1].active);
        assert!(
            !r.filesystem_boundary
                .not_protected
                .iter()
                .any(|u| u.contains("loopback"))
        );
        let r = report(
            &policy(RunFlags {
                allow_net: vec!["127.0.0.1:8080".into(), "api.anthropic.com".into()],
                ..RunFlags::default()
            }),
            &HostFacts::capable_example(),
        );
        assert!(
            r.filesystem_boundary
                .not_protected
                .iter()
                .any(|u| u.contains("host's loopback (127.0.0.1:8080)")),
            "{:?}",
            r.filesystem_boundary.not_protected
        );
    }
}
