//! The effective policy of one run: the manifest combined with the command-line flags.
//!
//! Owns the combination rules: scalar flags override the manifest, list flags add to it, and
//! the containment floor is the strongest of the manifest's `containment` and
//! `--containment`, or the default `scoped` when neither declares one (so
//! `--containment advisory` is how a host without Landlock runs at all). Paths are resolved lexically (`~`, relative to the manifest's
//! folder or the current directory, `.` and `..` folded) without touching the filesystem;
//! the caller canonicalizes the workdir before handing it in.

use crate::allow::{AllowEntry, NetworkMode};
pub use crate::lexical::normalize;
use crate::manifest::{Ceiling, Manifest, MountMode, is_env_name, is_relative_subpath, valid_cpus};
use crate::units::{ByteSize, Span, parse_duration, parse_size};
use cofferdam_record::ContainmentClass;
use cofferdam_record::bundle::ResourceDimension;
use cofferdam_record::scope::{GrantSource, GrantSourceReport};
use std::path::{Path, PathBuf};

pub mod provenance;

/// The default floor when neither the manifest nor a flag declares one.
pub const DEFAULT_FLOOR: ContainmentClass = ContainmentClass::Scoped;

/// The process and thread ceiling of a run that declares none (`--pids none` removes it).
///
/// Why this limit and this value: a fork bomb, or a runaway build spawning without end, takes
/// the whole machine down (the host's pid space and memory are shared); 4096 tasks leave room
/// for large parallel builds (`make -j`, cargo, test runners with many threads: threads count
/// too) while stopping a runaway long before the host's `pid_max`. It is enforced by a cgroup
/// `pids.max` for the whole run, else by `RLIMIT_NPROC` in the run's own user namespace
/// (sealed tier), where the kernel counts only the run's tasks. Without either (a copy tier
/// without a cgroup) it is not applied: `RLIMIT_NPROC` there would count every process of the
/// user on the host and could fail a user who already runs many; the bundle says so.
///
/// Why the other limits have no default: memory, CPU, CPU time and the wall clock depend on
/// the workload (a build may need 8 GiB and an hour; a default small enough to protect a
/// laptop would fail real work silently); file size, open files, `/tmp` (a tmpfs, by default
/// at most half of RAM) and the stage keep the host's own limits; I/O bandwidth needs a
/// block device. Core dumps are always off (`RLIMIT_CORE` = 0, not a resource row), and so
/// are real-time scheduling and raised priority (`RLIMIT_RTPRIO` = `RLIMIT_NICE` = 0).
pub const DEFAULT_PIDS: u64 = 4096;

/// The origin of a mount toolchain lending adds (`crate::toolchain`).
pub const TOOLCHAIN_ORIGIN: &str = "toolchain";

/// Host variables projected into every run (DESIGN.md §8).
pub const DEFAULT_PROJECTED_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LC_*",
    "TERM",
    "TZ",
    "COLORTERM",
    "NO_COLOR",
];

/// Variables cofferdam sets inside every run (`COFFERDAM_CTL`: the agentctl socket,
/// [`crate::agentctl`]).
pub const INJECTED_ENV: &[&str] = &[
    "HOME",
    "USER",
    "TMPDIR",
    "COFFERDAM_RUN_ID",
    "COFFERDAM_CTL",
];

/// Proxy variables set inside when the network mode is `allow`.
pub const PROXY_ENV: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// Run flags as given on the command line, before parsing their values. The CLI fills this;
/// [`resolve_policy`] validates it, so every flag error is reported the same way.
#[derive(Debug, Clone, Default)]
pub struct RunFlags {
    /// `--workdir`, already absolute (the caller canonicalizes it).
    pub workdir: Option<PathBuf>,
    /// `--containment`.
    pub containment: Option<ContainmentClass>,
    /// `--mount SRC[:TGT][:MODE][?]`, repeatable.
    pub mounts: Vec<String>,
    /// `--lend-secret PATH`, repeatable: an entry of the secret list lent read-only.
    pub lend_secrets: Vec<String>,
    /// `--read-only PATH`, repeatable.
    pub read_only: Vec<String>,
    /// `--env NAME`, repeatable.
    pub env: Vec<String>,
    /// `--network none|allow|host`.
    pub network: Option<String>,
    /// `--allow-net HOST[:PORT]`, repeatable.
    pub allow_net: Vec<String>,
    /// `--publish [HOST_ADDR:]HOST_PORT:PORT`, repeatable.
    pub publish: Vec<String>,
    /// `--memory SIZE`.
    pub memory: Option<String>,
    /// `--pids N|none`.
    pub pids: Option<String>,
    /// `--cpus FLOAT`.
    pub cpus: Option<f64>,
    /// `--timeout DURATION`.
    pub timeout: Option<String>,
    /// `--cpu-time DURATION`.
    pub cpu_time: Option<String>,
    /// `--max-file-size SIZE`.
    pub max_file_size: Option<String>,
    /// `--open-files N`.
    pub open_files: Option<u64>,
    /// `--io-bps SIZE`.
    pub io_bps: Option<String>,
    /// `--tmp-size SIZE`.
    pub tmp_size: Option<String>,
    /// `--stage-size SIZE`.
    pub stage_size: Option<String>,
}

/// A manifest that was read, with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedManifest {
    /// The manifest's path (absolute).
    pub path: PathBuf,
    /// Its parsed content.
    pub manifest: Manifest,
}

/// Where the run is, for resolving paths.
#[derive(Debug, Clone)]
pub struct Places {
    /// The current directory (absolute).
    pub cwd: PathBuf,
    /// The invoking user's home directory (absolute).
    pub home: PathBuf,
}

/// A host path lent to the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Resolved host path.
    pub source: PathBuf,
    /// Path inside the sandbox.
    pub target: PathBuf,
    /// What the command may do there.
    pub mode: MountMode,
    /// Where it was declared: `--mount` or `filesystem.mounts[N]`.
    pub origin: String,
    /// The source as written.
    pub written: String,
    /// Skipped, not refused, when its source does not exist (`--mount …?`, `optional =
    /// true`).
    pub optional: bool,
}

impl Mount {
    /// Why this optional mount was skipped, for the warning, the bundle and the scope report.
    pub fn skipped_line(&self) -> String {
        format!(
            "optional mount {} ({}) skipped: its source {} does not exist",
            self.written,
            self.origin,
            self.source.display()
        )
    }

    /// Whether the user wrote this mount (a flag, the user config, a manifest), not
    /// cofferdam on their behalf (an agent profile's optional paths, toolchain lending). A
    /// skipped mount the user did not write is no warning they can act on: it stays in the
    /// bundle's `run.warnings` and the scope report's `host_paths`, off stderr.
    pub fn named_by_user(&self) -> bool {
        !(self.origin.starts_with("profile:") || self.origin == TOOLCHAIN_ORIGIN)
    }
}

/// Requested resource limits; `None` is "no limit requested". [`Default`] is no limit at
/// all; [`resolve_policy`] adds cofferdam's defaults ([`DEFAULT_PIDS`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceRequest {
    /// The dimensions whose value is cofferdam's default, not asked for by a flag or the
    /// manifest.
    pub defaults: Vec<ResourceDimension>,
    /// Bytes.
    pub memory: Option<ByteSize>,
    /// Processes and threads.
    pub pids: Option<u64>,
    /// CPUs.
    pub cpus: Option<f64>,
    /// Wall clock.
    pub timeout: Option<Span>,
    /// CPU time.
    pub cpu_time: Option<Span>,
    /// Bytes.
    pub max_file_size: Option<ByteSize>,
    /// Descriptors.
    pub open_files: Option<u64>,
    /// Bytes per second.
    pub io_bps: Option<ByteSize>,
    /// Bytes.
    pub tmp_size: Option<ByteSize>,
    /// Bytes.
    pub stage_size: Option<ByteSize>,
}

impl ResourceRequest {
    /// Whether `dimension` carries cofferdam's default rather than a requested value.
    pub fn is_default(&self, dimension: ResourceDimension) -> bool {
        self.defaults.contains(&dimension)
    }
}

/// The network part of the policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkPolicy {
    /// The mode.
    pub mode: NetworkMode,
    /// Allowed destinations (mode `allow`).
    pub allow: Vec<AllowEntry>,
    /// Ports of the sandbox published on the host (`--publish`): inbound only.
    pub publish: Vec<crate::publish::PublishEntry>,
}

/// A host file an agent profile copies into its writable state dir before a run, once
/// (`crate::profiles`, [`crate::profiles::Profile::seeds`]): a host write outside review,
/// made by cofferdam before the command starts, and recorded as such.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSeed {
    /// The host file.
    pub from: PathBuf,
    /// Its copy, inside the state dir (absent when the policy was made).
    pub to: PathBuf,
    /// `from -> to` as the profile writes them (`~/…`), for the records.
    pub written: String,
    /// The profile.
    pub profile: String,
    /// What the file is and why it is copied.
    pub why: String,
}

/// The effective policy of one run.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The containment floor.
    pub floor: ContainmentClass,
    /// The workdir (absolute).
    pub workdir: PathBuf,
    /// Whether workdir files may be executed.
    pub workdir_exec: bool,
    /// Workdir-relative read-only subtrees.
    pub read_only: Vec<String>,
    /// Lent host paths.
    pub mounts: Vec<Mount>,
    /// Optional mounts whose source did not exist when the run was checked: not lent, and
    /// recorded as skipped ([`Policy::skip_absent_optional`]).
    pub skipped_mounts: Vec<Mount>,
    /// Network.
    pub network: NetworkPolicy,
    /// Extra projected variable names.
    pub env_allow: Vec<String>,
    /// Variables set inside, names and values (an agent profile's; values never recorded).
    pub env_set: Vec<(String, String)>,
    /// `[exec] allow`.
    pub exec_allow: Vec<String>,
    /// Resource limits.
    pub resources: ResourceRequest,
    /// The manifest, when one was used.
    pub manifest_path: Option<PathBuf>,
    /// Where each grant came from ([`provenance`]); the manifest's grants are labelled
    /// narrowing until the caller marks them trusted ([`Policy::mark_manifest_trusted`]).
    pub grant_sources: Vec<GrantSourceReport>,
    /// Arguments an agent profile adds to the command (`crate::profiles::apply`).
    pub command_patch: Option<CommandPatch>,
    /// Host files an agent profile copies into its state dir before the run.
    pub state_seeds: Vec<StateSeed>,
    /// `run --label` and `--task-id` ([`crate::orchestration`]); recorded, never a grant.
    pub orchestration: crate::orchestration::Orchestration,
    /// What the caller should know about this policy before the run (printed as warnings,
    /// kept in the bundle's `run.warnings`): e.g. a `PATH` entry that is not lent.
    pub warnings: Vec<String>,
}

/// Arguments an agent profile adds after the program (issue 19, "argument patches"): the
/// run executes the patched command and records it, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPatch {
    /// The profile's name.
    pub profile: String,
    /// The arguments added after `argv[0]`.
    pub insert: Vec<String>,
    /// Them as one would type them.
    pub shown: String,
    /// Why the profile adds them.
    pub why: String,
}

impl CommandPatch {
    /// `argv` with the arguments after its program.
    pub fn apply(&self, argv: &[String]) -> Vec<String> {
        let mut out: Vec<String> = argv.iter().take(1).cloned().collect();
        out.extend(self.insert.iter().cloned());
        out.extend(argv.iter().skip(1).cloned());
        out
    }

    /// One line for records and reviews.
    pub fn line(&self) -> String {
        format!(
            "profile:{} added `{}` after the program: {} (--no-agent-defaults turns it off)",
            self.profile, self.shown, self.why
        )
    }
}

impl Policy {
    /// Move every optional mount whose source `absent` says does not exist from `mounts` to
    /// `skipped_mounts`; the mounts skipped by this call. A missing source of a mount that
    /// is not optional stays, for the caller to refuse.
    pub fn skip_absent_optional(&mut self, absent: impl Fn(&Path) -> bool) -> &[Mount] {
        let before = self.skipped_mounts.len();
        let (skip, keep): (Vec<Mount>, Vec<Mount>) = std::mem::take(&mut self.mounts)
            .into_iter()
            .partition(|m| m.optional && absent(&m.source));
        self.mounts = keep;
        self.skipped_mounts.extend(skip);
        &self.skipped_mounts[before..]
    }

    /// Label the manifest's grants as coming from a manifest the user trusted to widen.
    pub fn mark_manifest_trusted(&mut self) {
        for g in &mut self.grant_sources {
            if g.source == GrantSource::Manifest {
                g.source = GrantSource::TrustedManifest;
            }
        }
    }
}

pub use crate::flag::FlagError;

/// Why `--env NAME=VALUE` may not set `name`, or `None` when it may: cofferdam sets these
/// itself in every run (or, for the proxy variables, in network `allow` mode), and a second
/// value beside its own would leave which one a program reads to the program.
fn reserved_env_name(name: &str) -> Option<String> {
    if INJECTED_ENV.contains(&name) || name.starts_with("COFFERDAM_") {
        return Some(format!(
            "cofferdam sets `{name}` in every run; set another name, or for HOME use a profile's \
             state directory"
        ));
    }
    if PROXY_ENV.iter().any(|p| p.eq_ignore_ascii_case(name)) {
        return Some(format!(
            "`{name}` is cofferdam's own proxy setting in network `allow` mode; allow \
             destinations with --allow-net instead"
        ));
    }
    None
}

fn flag_err(flag: &'static str, value: &str, message: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        value: value.to_owned(),
        message: message.into(),
    }
}

/// Combine `manifest` and `flags` into the run's policy.
pub fn resolve_policy(
    manifest: Option<&LoadedManifest>,
    flags: &RunFlags,
    places: &Places,
) -> Result<Policy, FlagError> {
    resolve_layered(None, manifest, flags, places)
}

/// The origin prefix of a grant from the user config (`config:filesystem.mounts[0]`).
pub const USER_CONFIG_ORIGIN: &str = "config:";

/// Combine the user config, the manifest and the flags, lowest first: each layer's scalars
/// override the one below, lists add up. Whether the manifest may do so is
/// `crate::widen`'s decision; this only combines. The user config's `filesystem.workdir`
/// is ignored (the caller refuses it).
pub fn resolve_layered(
    user: Option<&LoadedManifest>,
    manifest: Option<&LoadedManifest>,
    flags: &RunFlags,
    places: &Places,
) -> Result<Policy, FlagError> {
    let empty = Manifest::default();
    let merged;
    let m = match (user, manifest) {
        (None, _) => manifest.map_or(&empty, |l| &l.manifest),
        (Some(u), m) => {
            merged = overlay(&u.manifest, m.map_or(&empty, |l| &l.manifest));
            &merged
        }
    };
    let manifest_dir = manifest
        .and_then(|l| l.path.parent())
        .map_or_else(|| places.cwd.clone(), Path::to_path_buf);

    let floor = [m.containment, flags.containment]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(DEFAULT_FLOOR);

    let workdir = match (&flags.workdir, &m.filesystem.workdir) {
        (Some(w), _) => normalize(&places.cwd.join(w)),
        (None, Some(w)) => resolve_path(w, &manifest_dir, &places.home),
        (None, None) => places.cwd.clone(),
    };

    let mut read_only = m.filesystem.read_only.clone();
    for p in &flags.read_only {
        let rel = p.trim_end_matches('/');
        if !is_relative_subpath(rel) {
            return Err(flag_err(
                "--read-only",
                p,
                "give a path inside the workdir, relative to it, without `..`",
            ));
        }
        push_unique(&mut read_only, rel.to_owned());
    }

    let mut mounts = Vec::new();
    if let Some(u) = user {
        let dir = u.path.parent().unwrap_or(Path::new("/"));
        mounts.extend(file_mounts(&u.manifest, dir, USER_CONFIG_ORIGIN, places));
    }
    if let Some(l) = manifest {
        mounts.extend(file_mounts(&l.manifest, &manifest_dir, "", places));
    }
    for spec in &flags.mounts {
        mounts.push(parse_mount_flag(spec, places)?);
    }
    for spec in &flags.lend_secrets {
        mounts.push(parse_lend_secret(spec, places)?);
    }
    refuse_secret_mounts(&mounts, places)?;
    let lent_warnings: Vec<String> = mounts
        .iter()
        .filter(|m| m.origin == LEND_SECRET)
        .map(|m| {
            format!(
                "--lend-secret {}: a path on the secret list is lent read-only; the command \
                 can read it (and send it anywhere the network lets it)",
                m.source.display()
            )
        })
        .collect();

    let mut env_allow = m.env.allow.clone();
    let mut env_set: Vec<(String, String)> = Vec::new();
    for n in &flags.env {
        match n.split_once('=') {
            Some((name, value)) => {
                // The value may be a secret: an error shows the name only.
                let shown = format!("{name}=…");
                if !is_env_name(name) {
                    return Err(flag_err(
                        "--env",
                        &shown,
                        "give NAME=VALUE with a variable name of letters, digits and `_`",
                    ));
                }
                if let Some(why) = reserved_env_name(name) {
                    return Err(flag_err("--env", &shown, why));
                }
                env_set.retain(|(k, _)| k != name);
                env_set.push((name.to_owned(), value.to_owned()));
            }
            None => {
                if !is_env_name(n) {
                    return Err(flag_err(
                        "--env",
                        n,
                        "give a variable name (letters, digits and `_`) to pass the host's \
                         value, or NAME=VALUE to set one",
                    ));
                }
                push_unique(&mut env_allow, n.clone());
            }
        }
    }

    let network = resolve_network(m, flags)?;
    let resources = resolve_resources(m, flags)?;

    let mut policy = Policy {
        floor,
        workdir,
        workdir_exec: m.filesystem.workdir_exec.unwrap_or(true),
        read_only,
        mounts,
        skipped_mounts: Vec::new(),
        network,
        env_allow,
        env_set,
        exec_allow: m.exec.allow.clone(),
        resources,
        manifest_path: manifest.map(|l| l.path.clone()),
        grant_sources: Vec::new(),
        command_patch: None,
        state_seeds: Vec::new(),
        orchestration: Default::default(),
        warnings: lent_warnings,
    };
    policy.grant_sources = provenance::grant_sources(
        user.map(|l| &l.manifest),
        manifest.map(|l| &l.manifest),
        flags,
        &policy,
        GrantSource::Manifest,
    );
    Ok(policy)
}

/// The `[[filesystem.mounts]]` of one file, paths resolved against its folder.
fn file_mounts(m: &Manifest, dir: &Path, prefix: &str, places: &Places) -> Vec<Mount> {
    m.filesystem
        .mounts
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let source = resolve_path(&e.source, dir, &places.home);
            let target = e
                .target
                .as_deref()
                .map_or_else(|| source.clone(), |t| resolve_path(t, dir, &places.home));
            Mount {
                source,
                target,
                mode: e.mode,
                origin: format!("{prefix}filesystem.mounts[{i}]"),
                written: e.source.clone(),
                optional: e.optional,
            }
        })
        .collect()
}

/// `top` over `base`: scalars of `top` win, lists add up (mounts excepted: each file's are
/// resolved against its own folder), the workdir is `top`'s alone.
fn overlay(base: &Manifest, top: &Manifest) -> Manifest {
    fn union<T: Clone + PartialEq>(a: &[T], b: &[T]) -> Vec<T> {
        let mut v = a.to_vec();
        for x in b {
            if !v.contains(x) {
                v.push(x.clone());
            }
        }
        v
    }
    let (b, t) = (&base.resources, &top.resources);
    Manifest {
        containment: top.containment.or(base.containment),
        filesystem: crate::manifest::FilesystemSection {
            workdir: top.filesystem.workdir.clone(),
            read_only: union(&base.filesystem.read_only, &top.filesystem.read_only),
            workdir_exec: top.filesystem.workdir_exec.or(base.filesystem.workdir_exec),
            mounts: Vec::new(),
        },
        network: crate::manifest::NetworkSection {
            mode: top.network.mode.or(base.network.mode),
            allow: union(&base.network.allow, &top.network.allow),
        },
        env: crate::manifest::EnvSection {
            allow: union(&base.env.allow, &top.env.allow),
        },
        resources: crate::manifest::ResourcesSection {
            memory: t.memory.or(b.memory),
            pids: t.pids.or(b.pids),
            cpus: t.cpus.or(b.cpus),
            timeout: t.timeout.or(b.timeout),
            cpu_time: t.cpu_time.or(b.cpu_time),
            max_file_size: t.max_file_size.or(b.max_file_size),
            open_files: t.open_files.or(b.open_files),
            io_bps: t.io_bps.or(b.io_bps),
            tmp_size: t.tmp_size.or(b.tmp_size),
            stage_size: t.stage_size.or(b.stage_size),
        },
        exec: crate::manifest::ExecSection {
            allow: union(&base.exec.allow, &top.exec.allow),
        },
        profiles: base.profiles.clone(),
        lend_path_toolchains: top.lend_path_toolchains.or(base.lend_path_toolchains),
    }
}

fn push_unique(v: &mut Vec<String>, s: String) {
    if !v.contains(&s) {
        v.push(s);
    }
}

fn resolve_network(m: &Manifest, flags: &RunFlags) -> Result<NetworkPolicy, FlagError> {
    let flag_mode = match &flags.network {
        Some(w) => Some(
            w.parse::<NetworkMode>()
                .map_err(|e| flag_err("--network", w, e.to_string()))?,
        ),
        None => None,
    };
    let mut allow = m.network.allow.clone();
    for w in &flags.allow_net {
        let entry: AllowEntry = w
            .parse()
            .map_err(|e: crate::allow::AllowError| flag_err("--allow-net", w, e.to_string()))?;
        if !allow.contains(&entry) {
            allow.push(entry);
        }
    }
    let mode = match (flag_mode, flags.allow_net.is_empty()) {
        (Some(NetworkMode::Allow) | None, false) => NetworkMode::Allow,
        (Some(other), false) => {
            return Err(flag_err(
                "--network",
                other.wire_name(),
                "conflicts with --allow-net, which implies --network allow: drop one of them",
            ));
        }
        (Some(mode), true) => mode,
        (None, true) => m.network.mode.unwrap_or(if allow.is_empty() {
            NetworkMode::None
        } else {
            NetworkMode::Allow
        }),
    };
    if mode != NetworkMode::Allow {
        allow.clear();
    }
    let publish = crate::publish::parse_all(&flags.publish)
        .map_err(|(v, e)| flag_err("--publish", &v, e.to_string()))?;
    Ok(NetworkPolicy {
        mode,
        allow,
        publish,
    })
}

fn resolve_resources(m: &Manifest, f: &RunFlags) -> Result<ResourceRequest, FlagError> {
    let r = &m.resources;
    let size = |flag: &'static str, v: &Option<String>, base: Option<ByteSize>| match v {
        Some(t) => parse_size(t)
            .map(Some)
            .map_err(|e| flag_err(flag, t, e.to_string())),
        None => Ok(base),
    };
    let span = |flag: &'static str, v: &Option<String>, base: Option<Span>| match v {
        Some(t) => parse_duration(t)
            .map(Some)
            .map_err(|e| flag_err(flag, t, e.to_string())),
        None => Ok(base),
    };
    let positive = |flag: &'static str, v: Option<u64>, base: Option<u64>| match v {
        Some(0) => Err(flag_err(
            flag,
            "0",
            "must be above zero; leave the flag out for no limit",
        )),
        Some(n) => Ok(Some(n)),
        None => Ok(base),
    };
    let cpus = match f.cpus {
        Some(c) if !valid_cpus(c) => {
            return Err(flag_err(
                "--cpus",
                &c.to_string(),
                "must be above 0 and at most 4096",
            ));
        }
        Some(c) => Some(c),
        None => r.cpus,
    };
    let pids = match &f.pids {
        Some(t) => Some(Ceiling::parse(t).map_err(|e| flag_err("--pids", t, e))?),
        None => r.pids,
    };
    let mut defaults = Vec::new();
    let pids = match pids {
        Some(c) => c.limit(),
        None => {
            defaults.push(ResourceDimension::Pids);
            Some(DEFAULT_PIDS)
        }
    };
    Ok(ResourceRequest {
        defaults,
        memory: size("--memory", &f.memory, r.memory)?,
        pids,
        cpus,
        timeout: span("--timeout", &f.timeout, r.timeout)?,
        cpu_time: span("--cpu-time", &f.cpu_time, r.cpu_time)?,
        max_file_size: size("--max-file-size", &f.max_file_size, r.max_file_size)?,
        open_files: positive("--open-files", f.open_files, r.open_files)?,
        io_bps: size("--io-bps", &f.io_bps, r.io_bps)?,
        tmp_size: size("--tmp-size", &f.tmp_size, r.tmp_size)?,
        stage_size: size("--stage-size", &f.stage_size, r.stage_size)?,
    })
}

/// The origin of a mount `--lend-secret` makes.
pub const LEND_SECRET: &str = "--lend-secret";

/// The entries of the secret list under `places`' HOME and on the host (the SSH host keys
/// aside, which only the plan knows), as `--lend-secret` names them.
fn secret_entries(places: &Places) -> Vec<PathBuf> {
    crate::secrets::secret_paths(&places.home, &[])
}

/// `--lend-secret PATH`: an entry of the secret list, exactly, lent read-only at its own
/// path; the plan then leaves it unmasked ([`lent_secrets`]).
fn parse_lend_secret(spec: &str, places: &Places) -> Result<Mount, FlagError> {
    let source = resolve_path(spec, &places.cwd, &places.home);
    let entries = secret_entries(places);
    if !entries.contains(&source) {
        let within = entries.iter().find(|e| source.starts_with(e));
        return Err(flag_err(
            "--lend-secret",
            spec,
            match within {
                Some(e) => format!(
                    "name the entry of the secret list itself, {}: it is lent whole, or not \
                     at all",
                    e.display()
                ),
                None => "it is not on the secret list (`cofferdam scope` shows it as \
                         hidden_paths); lend other paths with --mount"
                    .to_owned(),
            },
        ));
    }
    Ok(Mount {
        target: source.clone(),
        source,
        mode: MountMode::Read,
        origin: LEND_SECRET.to_owned(),
        written: spec.to_owned(),
        optional: false,
    })
}

/// A mount (not a hide) of a path on the secret list, or inside an entry of it, that
/// `--lend-secret` did not make is refused: the entry is masked inside every run, so the
/// mount would be silently unreadable. The error names the entry and the flag.
fn refuse_secret_mounts(mounts: &[Mount], places: &Places) -> Result<(), FlagError> {
    let entries = secret_entries(places);
    for m in mounts
        .iter()
        .filter(|m| m.mode != MountMode::Hide && m.origin != LEND_SECRET)
    {
        if let Some(e) = entries.iter().find(|e| m.source.starts_with(e)) {
            return Err(FlagError {
                flag: if m.origin == "--mount" {
                    "--mount"
                } else {
                    "filesystem.mounts"
                },
                value: m.written.clone(),
                message: format!(
                    "{} is on the secret list, masked inside every run, so this mount would \
                     be unreadable; lend it read-only by name with `--lend-secret {}` (a \
                     flag only: no file can lend a secret), or leave it out",
                    e.display(),
                    e.display()
                ),
            });
        }
    }
    Ok(())
}

/// The secret-list entries `policy` lends by `--lend-secret`: the plan and the scope
/// report leave them out of the hidden paths.
pub fn lent_secrets(policy: &Policy) -> Vec<PathBuf> {
    policy
        .mounts
        .iter()
        .filter(|m| m.origin == LEND_SECRET && m.mode == MountMode::Read)
        .map(|m| m.source.clone())
        .collect()
}

/// Parse `--mount SRC[:TGT][:MODE][?]`. The mode, when present, is the last field; the
/// default mode is `read`. A trailing `?` makes the mount optional: a missing source skips
/// it. Paths containing `:` (or ending in `?`) must be declared in the manifest instead.
pub fn parse_mount_flag(spec: &str, places: &Places) -> Result<Mount, FlagError> {
    let (body, optional) = match spec.strip_suffix('?') {
        Some(b) => (b, true),
        None => (spec, false),
    };
    let mut parts: Vec<&str> = body.split(':').collect();
    let mode = match parts.last().and_then(|w| MountMode::parse(w)) {
        Some(mode) if parts.len() > 1 => {
            parts.pop();
            mode
        }
        _ => MountMode::Read,
    };
    let (src, tgt) = match parts.as_slice() {
        [s] => (*s, None),
        [s, t] => (*s, Some(*t)),
        _ => {
            return Err(flag_err(
                "--mount",
                spec,
                "expected SRC[:TGT][:MODE][?] with MODE one of read, stage, write, hide (a \
                 trailing ? makes it optional); declare paths containing `:` in cofferdam.toml \
                 [filesystem] mounts",
            ));
        }
    };
    if src.is_empty() || tgt.is_some_and(str::is_empty) {
        return Err(flag_err(
            "--mount",
            spec,
            "the source and target must not be empty",
        ));
    }
    if tgt.is_some_and(|t| !t.starts_with('/')) {
        return Err(flag_err(
            "--mount",
            spec,
            "the target must be an absolute path",
        ));
    }
    let source = resolve_path(src, &places.cwd, &places.home);
    let target = tgt.map_or_else(|| source.clone(), |t| normalize(Path::new(t)));
    Ok(Mount {
        source,
        target,
        mode,
        origin: "--mount".to_owned(),
        written: src.to_owned(),
        optional,
    })
}

/// Resolve `written` (absolute, `~`, `~/…` or relative to `base`) lexically.
pub fn resolve_path(written: &str, base: &Path, home: &Path) -> PathBuf {
    let joined = if written == "~" {
        home.to_path_buf()
    } else if let Some(rest) = written.strip_prefix("~/") {
        home.join(rest)
    } else {
        base.join(written)
    };
    normalize(&joined)
}

/// How `written` resolves: `absolute`, `home` or `manifest-folder`.
pub fn resolved_from(written: &str) -> &'static str {
    if written.starts_with('/') {
        "absolute"
    } else if written == "~" || written.starts_with("~/") {
        "home"
    } else {
        "manifest-folder"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{NO_LIMIT, parse_manifest};

    fn places() -> Places {
        Places {
            cwd: "/work/proj".into(),
            home: "/home/u".into(),
        }
    }

    fn loaded(text: &str) -> LoadedManifest {
        LoadedManifest {
            path: "/work/proj/cofferdam.toml".into(),
            manifest: parse_manifest("cofferdam.toml", text).unwrap(),
        }
    }

    #[test]
    fn defaults_without_manifest_or_flags() {
        let p = resolve_policy(None, &RunFlags::default(), &places()).unwrap();
        assert_eq!(p.floor, ContainmentClass::Scoped);
        assert_eq!(p.workdir, PathBuf::from("/work/proj"));
        assert!(p.workdir_exec);
        assert_eq!(p.network.mode, NetworkMode::None);
        assert_eq!(
            p.resources,
            ResourceRequest {
                defaults: vec![ResourceDimension::Pids],
                pids: Some(DEFAULT_PIDS),
                ..ResourceRequest::default()
            }
        );
    }

    #[test]
    fn the_pids_default_can_be_changed_or_removed_by_flag_or_manifest() {
        let pids = |m: Option<&str>, flag: Option<&str>| {
            let l = m.map(|t| loaded(&format!("[resources]\npids = {t}")));
            let flags = RunFlags {
                pids: flag.map(String::from),
                ..RunFlags::default()
            };
            let p = resolve_policy(l.as_ref(), &flags, &places()).unwrap();
            let default = p.resources.is_default(ResourceDimension::Pids);
            (p.resources.pids, default)
        };
        assert_eq!(pids(None, None), (Some(DEFAULT_PIDS), true));
        assert_eq!(pids(None, Some("64")), (Some(64), false));
        assert_eq!(pids(None, Some("100000")), (Some(100_000), false));
        assert_eq!(pids(None, Some("none")), (None, false));
        assert_eq!(pids(None, Some("NONE")), (None, false));
        assert_eq!(pids(Some("512"), None), (Some(512), false));
        assert_eq!(pids(Some("\"none\""), None), (None, false));
        assert_eq!(pids(Some("\"none\""), Some("32")), (Some(32), false));
        assert_eq!(pids(Some("512"), Some("none")), (None, false));
        for bad in ["0", "-1", "many", "", "1.5", "unlimited"] {
            let flags = RunFlags {
                pids: Some(bad.into()),
                ..RunFlags::default()
            };
            let e = resolve_policy(None, &flags, &places()).unwrap_err();
            assert_eq!(e.flag, "--pids", "{e}");
            assert!(e.message.contains(NO_LIMIT), "{bad}: {e}");
        }
    }

    #[test]
    fn floor_is_the_strongest_declared_else_the_default() {
        let cases = [
            (None, None, ContainmentClass::Scoped),
            (Some("advisory"), None, ContainmentClass::Advisory),
            (
                None,
                Some(ContainmentClass::Advisory),
                ContainmentClass::Advisory,
            ),
            (Some("sealed"), None, ContainmentClass::Sealed),
            (
                Some("sealed"),
                Some(ContainmentClass::Advisory),
                ContainmentClass::Sealed,
            ),
            (
                None,
                Some(ContainmentClass::Sealed),
                ContainmentClass::Sealed,
            ),
            (
                Some("scoped"),
                Some(ContainmentClass::Advisory),
                ContainmentClass::Scoped,
            ),
        ];
        for (manifest, flag, want) in cases {
            let m = manifest.map(|w| loaded(&format!("containment = \"{w}\"")));
            let flags = RunFlags {
                containment: flag,
                ..RunFlags::default()
            };
            let p = resolve_policy(m.as_ref(), &flags, &places()).unwrap();
            assert_eq!(p.floor, want, "{manifest:?} {flag:?}");
        }
    }

    #[test]
    fn flags_override_scalars_and_extend_lists() {
        let m = loaded(
            "[resources]\nmemory = \"1GiB\"\npids = 100\n[filesystem]\nread_only = [\".git\"]\n[env]\nallow = [\"A\"]",
        );
        let flags = RunFlags {
            memory: Some("2GiB".into()),
            read_only: vec!["docs/".into(), ".git".into()],
            env: vec!["B".into()],
            ..RunFlags::default()
        };
        let p = resolve_policy(Some(&m), &flags, &places()).unwrap();
        assert_eq!(p.resources.memory, Some(ByteSize(2 << 30)));
        assert_eq!(p.resources.pids, Some(100));
        assert_eq!(p.read_only, vec![".git", "docs"]);
        assert_eq!(p.env_allow, vec!["A", "B"]);
    }

    #[test]
    fn env_name_value_sets_a_value_the_last_one_wins_and_errors_hide_it() {
        let flags = RunFlags {
            env: vec![
                "PASS".into(),
                "TOKEN=s3cret=x".into(),
                "EMPTY=".into(),
                "TOKEN=second".into(),
            ],
            ..RunFlags::default()
        };
        let p = resolve_policy(None, &flags, &places()).unwrap();
        assert_eq!(p.env_allow, vec!["PASS"]);
        assert_eq!(
            p.env_set,
            vec![
                ("EMPTY".to_owned(), String::new()),
                ("TOKEN".to_owned(), "second".to_owned())
            ]
        );
        let set: Vec<_> = p
            .grant_sources
            .iter()
            .filter(|g| g.grant == "env.set")
            .map(|g| (g.value.as_str(), g.source))
            .collect();
        assert_eq!(
            set,
            vec![("EMPTY", GrantSource::Flag), ("TOKEN", GrantSource::Flag)]
        );
        assert!(
            !format!("{:?}", p.grant_sources).contains("second"),
            "a value reached the grant report"
        );
        for bad in [
            "1A=s3cret",
            "HOME=s3cret",
            "no_proxy=s3cret",
            "COFFERDAM_CTL=s3cret",
        ] {
            let flags = RunFlags {
                env: vec![bad.into()],
                ..RunFlags::default()
            };
            let e = resolve_policy(None, &flags, &places()).unwrap_err();
            assert!(!e.to_string().contains("s3cret"), "{e}");
            assert!(
                e.to_string().contains(bad.split('=').next().unwrap()),
                "{e}"
            );
        }
    }

    #[test]
    fn allow_net_implies_allow_and_conflicts_are_refused() {
        let flags = RunFlags {
            allow_net: vec!["api.example.com".into()],
            ..RunFlags::default()
        };
        let p = resolve_policy(None, &flags, &places()).unwrap();
        assert_eq!(p.network.mode, NetworkMode::Allow);
        assert_eq!(p.network.allow.len(), 1);
        let flags = RunFlags {
            network: Some("none".into()),
            allow_net: vec!["api.example.com".into()],
            ..RunFlags::default()
        };
        let e = resolve_policy(None, &flags, &places()).unwrap_err();
        assert_eq!(e.flag, "--network");
        let m = loaded("[network]\nmode = \"allow\"\nallow = [\"x.com\"]");
        let flags = RunFlags {
            network: Some("none".into()),
            ..RunFlags::default()
        };
        let p = resolve_policy(Some(&m), &flags, &places()).unwrap();
        assert_eq!(p.network.mode, NetworkMode::None);
        assert!(p.network.allow.is_empty());
    }

    #[test]
    fn bad_flag_values_name_the_flag() {
        let cases: Vec<(RunFlags, &str)> = vec![
            (
                RunFlags {
                    memory: Some("lots".into()),
                    ..Default::default()
                },
                "--memory",
            ),
            (
                RunFlags {
                    timeout: Some("30".into()),
                    ..Default::default()
                },
                "--timeout",
            ),
            (
                RunFlags {
                    pids: Some("0".into()),
                    ..Default::default()
                },
                "--pids",
            ),
            (
                RunFlags {
                    cpus: Some(f64::NAN),
                    ..Default::default()
                },
                "--cpus",
            ),
            (
                RunFlags {
                    env: vec!["1A=B".into()],
                    ..Default::default()
                },
                "--env",
            ),
            (
                RunFlags {
                    env: vec!["HOME=/elsewhere".into()],
                    ..Default::default()
                },
                "--env",
            ),
            (
                RunFlags {
                    env: vec!["https_proxy=http://x".into()],
                    ..Default::default()
                },
                "--env",
            ),
            (
                RunFlags {
                    env: vec!["COFFERDAM_RUN_ID=forged".into()],
                    ..Default::default()
                },
                "--env",
            ),
            (
                RunFlags {
                    read_only: vec!["/etc".into()],
                    ..Default::default()
                },
                "--read-only",
            ),
            (
                RunFlags {
                    allow_net: vec!["http://x".into()],
                    ..Default::default()
                },
                "--allow-net",
            ),
            (
                RunFlags {
                    network: Some("open".into()),
                    ..Default::default()
                },
                "--network",
            ),
            (
                RunFlags {
                    mounts: vec!["a:b:c:d".into()],
                    ..Default::default()
                },
                "--mount",
            ),
            (
                RunFlags {
                    mounts: vec!["a:rel".into()],
                    ..Default::default()
                },
                "--mount",
            ),
        ];
        for (flags, flag) in cases {
            let e = resolve_policy(None, &flags, &places()).unwrap_err();
            assert_eq!(e.flag, flag, "{e}");
        }
    }

    #[test]
    fn a_trailing_question_mark_makes_a_mount_optional_and_absent_ones_are_skipped() {
        let p = places();
        let m = parse_mount_flag("~/.cache/pip:write?", &p).unwrap();
        assert_eq!((m.mode, m.optional), (MountMode::Write, true));
        assert_eq!(m.written, "~/.cache/pip");
        let m = parse_mount_flag("/s?", &p).unwrap();
        assert_eq!(
            (m.source.as_path(), m.mode, m.optional),
            (Path::new("/s"), MountMode::Read, true)
        );
        assert!(!parse_mount_flag("/s:/t", &p).unwrap().optional);
        assert!(parse_mount_flag("?", &p).is_err());

        let l = LoadedManifest {
            path: "/cfg/cofferdam.toml".into(),
            manifest: parse_manifest(
                "cofferdam.toml",
                "[[filesystem.mounts]]\nsource = \"/a\"\nmode = \"read\"\noptional = true\n\
                 [[filesystem.mounts]]\nsource = \"/b\"\nmode = \"read\"\n",
            )
            .unwrap(),
        };
        let flags = RunFlags {
            mounts: vec!["/c:/c:write?".into(), "/d?".into()],
            ..Default::default()
        };
        let mut pol = resolve_policy(Some(&l), &flags, &p).unwrap();
        // Everything is "absent": only the optional mounts move; /d stays, it exists.
        let skipped: Vec<String> = pol
            .skip_absent_optional(|s| s != Path::new("/d"))
            .iter()
            .map(|m| m.origin.clone())
            .collect();
        assert_eq!(skipped, ["filesystem.mounts[0]", "--mount"]);
        let kept: Vec<&Path> = pol.mounts.iter().map(|m| m.source.as_path()).collect();
        assert_eq!(kept, [Path::new("/b"), Path::new("/d")]);
        assert_eq!(
            pol.skipped_mounts[1].skipped_line(),
            "optional mount /c (--mount) skipped: its source /c does not exist"
        );
        assert!(pol.skipped_mounts.iter().all(Mount::named_by_user));
        let by = |origin: &str| Mount {
            origin: origin.to_owned(),
            ..pol.skipped_mounts[0].clone()
        };
        assert!(by("config:filesystem.mounts[0]").named_by_user());
        assert!(!by("profile:codex").named_by_user());
        assert!(!by(TOOLCHAIN_ORIGIN).named_by_user());
    }

    #[test]
    fn a_secret_is_lent_only_by_name_and_never_silently_masked_under_a_mount() {
        let p = places();
        let flags = |mounts: &[&str], lend: &[&str]| RunFlags {
            mounts: mounts.iter().map(|s| (*s).to_owned()).collect(),
            lend_secrets: lend.iter().map(|s| (*s).to_owned()).collect(),
            ..RunFlags::default()
        };
        // --mount of an entry, or of a path inside one: refused, naming the entry and the flag.
        for spec in [
            "~/.config/gcloud",
            "~/.ssh/config:/c:read",
            "/etc/shadow",
            "~/.aws:write",
        ] {
            let e = resolve_policy(None, &flags(&[spec], &[]), &p).unwrap_err();
            assert_eq!(e.flag, "--mount", "{spec}");
            assert!(e.message.contains("--lend-secret"), "{spec}: {}", e.message);
        }
        // Hiding one, or lending a tree that holds one (masked inside it), is fine.
        assert!(resolve_policy(None, &flags(&["~/.ssh:hide", "~/.config:read"], &[]), &p).is_ok());
        // A file's mount of one is refused too: no file lends a secret.
        let l = loaded("[[filesystem.mounts]]\nsource = \"~/.kube\"\nmode = \"read\"\n");
        let e = resolve_policy(Some(&l), &RunFlags::default(), &p).unwrap_err();
        assert_eq!(e.flag, "filesystem.mounts");
        // --lend-secret: exactly an entry, read-only at its own path, with a warning.
        let pol = resolve_policy(None, &flags(&[], &["~/.config/gcloud"]), &p).unwrap();
        let m = &pol.mounts[0];
        assert_eq!(
            (
                m.source.as_path(),
                m.target.as_path(),
                m.mode,
                m.origin.as_str()
            ),
            (
                Path::new("/home/u/.config/gcloud"),
                Path::new("/home/u/.config/gcloud"),
                MountMode::Read,
                LEND_SECRET
            )
        );
        assert_eq!(
            lent_secrets(&pol),
            [PathBuf::from("/home/u/.config/gcloud")]
        );
        assert!(
            pol.warnings
                .iter()
                .any(|w| w.contains("--lend-secret /home/u/.config/gcloud"))
        );
        assert!(
            pol.grant_sources
                .iter()
                .any(|g| g.grant == "filesystem.mounts"
                    && g.source == GrantSource::Flag
                    && g.value.contains("/home/u/.config/gcloud"))
        );
        for bad in ["~/.ssh/id_ed25519", "~/notes"] {
            let e = resolve_policy(None, &flags(&[], &[bad]), &p).unwrap_err();
            assert_eq!(e.flag, "--lend-secret", "{bad}");
        }
        // A plain --mount never counts as lent.
        let pol = resolve_policy(None, &flags(&["~/.config:read"], &[]), &p).unwrap();
        assert!(lent_secrets(&pol).is_empty());
    }

    #[test]
    fn mount_flags_and_manifest_mounts_resolve() {
        let p = places();
        let m = parse_mount_flag("~/.cache/pip:write", &p).unwrap();
        assert_eq!(m.source, PathBuf::from("/home/u/.cache/pip"));
        assert_eq!(m.target, m.source);
        assert_eq!(m.mode, MountMode::Write);
        let m = parse_mount_flag("data:/data", &p).unwrap();
        assert_eq!(m.source, PathBuf::from("/work/proj/data"));
        assert_eq!(m.target, PathBuf::from("/data"));
        assert_eq!(m.mode, MountMode::Read);
        let m = parse_mount_flag("/s:/t:hide", &p).unwrap();
        assert_eq!(m.mode, MountMode::Hide);

        let l = LoadedManifest {
            path: "/cfg/cofferdam.toml".into(),
            manifest: parse_manifest(
                "m",
                "[filesystem]\nworkdir = \"../proj\"\nmounts = [{source = \"cache\", mode = \"stage\"}]",
            )
            .unwrap(),
        };
        let pol = resolve_policy(Some(&l), &RunFlags::default(), &p).unwrap();
        assert_eq!(pol.workdir, PathBuf::from("/proj"));
        assert_eq!(pol.mounts[0].source, PathBuf::from("/cfg/cache"));
        assert_eq!(pol.mounts[0].origin, "filesystem.mounts[0]");
    }

    #[test]
    fn normalize_folds_dots() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(resolved_from("~/x"), "home");
        assert_eq!(resolved_from("/x"), "absolute");
        assert_eq!(resolved_from("x"), "manifest-folder");
    }
}
