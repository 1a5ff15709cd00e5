//! The policy of a run on another job (`inspect`, `fork`, `run --on`; issue 21).
//!
//! Owns three decisions: what the job ran with, read back from its Run Bundle
//! ([`recorded`]); a new resolution started from it, each dimension the user gave a flag
//! for taking the flag's value and every other one the job's, or for a fork the job's added
//! to the resolution's ([`start_from`]); and every
//! grant of the result beyond the job's, with the flag that asked for it ([`wider`]), which
//! `inspect` refuses. Pure: it reads no file and starts nothing; whether a wider grant is
//! refused is the caller's decision. What the bundle does not record (`workdir_exec`,
//! `exec.allow`, an agent profile's variables and arguments) stays as the new resolution
//! gives it, as for any run in that workdir.

use crate::allow::{AllowEntry, NetworkMode};
use crate::manifest::MountMode;
use crate::policy::{
    DEFAULT_FLOOR, DEFAULT_PROJECTED_ENV, LEND_SECRET, Mount, Policy, ResourceRequest, RunFlags,
};
use crate::units::{ByteSize, Span};
use crate::widen::{Widening, entry_covers, mount_covered, net_rank, resource_widening};
use cofferdam_record::ContainmentClass;
use cofferdam_record::bundle::{ResourceDimension, RunBundle};
use std::path::PathBuf;
use std::time::Duration;

/// What a job ran with, as its bundle records it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPolicy {
    /// The job's run id.
    pub run_id: String,
    /// The declared containment floor.
    pub floor: ContainmentClass,
    /// The class the job achieved, when recorded.
    pub class: Option<ContainmentClass>,
    /// The workdir.
    pub workdir: PathBuf,
    /// Workdir-relative read-only subtrees.
    pub read_only: Vec<String>,
    /// Lent and hidden host paths (their origin `job:<run id>`).
    pub mounts: Vec<Mount>,
    /// The network mode.
    pub network: NetworkMode,
    /// The allowlist (mode `allow`).
    pub allow: Vec<AllowEntry>,
    /// Published ports as recorded: the host address and port, and the sandbox's port.
    pub publish: Vec<(String, u16)>,
    /// Host variables projected beyond the defaults every run gets.
    pub env: Vec<String>,
    /// Requested resource limits.
    pub resources: ResourceRequest,
}

/// Why a bundle's policy cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// No `filesystem` section (the run never had a stage).
    #[error("its bundle has no `filesystem` section, so its mounts and workdir are unknown")]
    NoFilesystem,
    /// `network.policy.mode` missing or unknown.
    #[error("its bundle's `network.policy.mode` is {0}")]
    Mode(String),
    /// An allowlist entry that does not parse.
    #[error("its bundle's allowlist entry `{0}` does not parse")]
    Allow(String),
}

/// An allowlist entry as the bundle writes it (`HOST:PORT[,PORT…]`).
fn recorded_entry(text: &str) -> Option<AllowEntry> {
    let (host, ports) = text.rsplit_once(':')?;
    let ports: Vec<u16> = ports
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let mut entry: AllowEntry = format!("{host}:{}", ports.first()?).parse().ok()?;
    entry.ports = ports;
    Some(entry)
}

/// Whether every run projects `key` (`PATH`, `LC_*`, …).
fn default_projected(key: &str) -> bool {
    DEFAULT_PROJECTED_ENV
        .iter()
        .any(|p| match p.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => key == *p,
        })
}

/// The policy `bundle`'s run had, as far as the bundle records it.
pub fn recorded(bundle: &RunBundle) -> Result<JobPolicy, RecordError> {
    let fs = bundle
        .filesystem
        .as_ref()
        .ok_or(RecordError::NoFilesystem)?;
    let origin = format!("job:{}", bundle.run.run_id);
    let mounts = fs
        .access_policy
        .mounts
        .iter()
        .map(|g| {
            use cofferdam_record::bundle::MountMode as R;
            Mount {
                source: g.source.clone(),
                target: g.target.clone(),
                mode: match g.mode {
                    R::Read => MountMode::Read,
                    R::Stage => MountMode::Stage,
                    R::Write => MountMode::Write,
                    R::Hide => MountMode::Hide,
                },
                origin: origin.clone(),
                written: g.source.display().to_string(),
                // Gone since: skipped with a warning (narrower), not refused.
                optional: g.mode != cofferdam_record::bundle::MountMode::Hide,
            }
        })
        .collect();
    let read_only = fs
        .access_policy
        .read_only
        .iter()
        .filter_map(|p| p.strip_prefix(&fs.target).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let net = &bundle.network.policy;
    let network = match net.get("mode").and_then(|m| m.as_str()) {
        Some(m) => m
            .parse::<NetworkMode>()
            .map_err(|_| RecordError::Mode(format!("`{m}`")))?,
        None => return Err(RecordError::Mode("missing".to_owned())),
    };
    let allow = net
        .get("allow")
        .and_then(|a| a.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let text = e.as_str().unwrap_or_default();
            recorded_entry(text).ok_or_else(|| RecordError::Allow(text.to_owned()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let publish = net
        .get("publish")
        .and_then(|a| a.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let host = p.get("host")?.as_str()?.to_owned();
            let port = u16::try_from(p.get("port")?.as_u64()?).ok()?;
            Some((host, port))
        })
        .collect();
    let env = bundle
        .environment
        .projected_keys
        .iter()
        .filter(|k| !default_projected(k))
        .cloned()
        .collect();
    let q = &bundle.resources.requested;
    let resources = ResourceRequest {
        defaults: Vec::new(),
        memory: q.memory_bytes.map(ByteSize),
        pids: q.pids,
        cpus: q.cpus,
        timeout: q.timeout_ms.map(|v| Span(Duration::from_millis(v))),
        cpu_time: q.cpu_time_ms.map(|v| Span(Duration::from_millis(v))),
        max_file_size: q.max_file_size_bytes.map(ByteSize),
        open_files: q.open_files,
        io_bps: q.io_bytes_per_sec.map(ByteSize),
        tmp_size: q.tmp_size_bytes.map(ByteSize),
        stage_size: q.stage_size_bytes.map(ByteSize),
    };
    Ok(JobPolicy {
        run_id: bundle.run.run_id.clone(),
        floor: bundle
            .executor_plan
            .as_ref()
            .map_or(DEFAULT_FLOOR, |p| p.declared_floor),
        class: bundle.executor_plan.as_ref().map(|p| p.requested_class),
        workdir: fs.target.clone(),
        read_only,
        mounts,
        network,
        allow,
        publish,
        env,
        resources,
    })
}

/// How a run on a job takes the job's grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `inspect`: the job's grants replace what the new resolution gives for every
    /// dimension without a flag (an agent profile of the new command adds nothing the job
    /// did not have).
    Inspect,
    /// `fork`, `run --on`: the job's grants are added to what the new resolution gives
    /// (the next step of an agent on top of the last keeps its profile's grants).
    Fork,
}

/// Start `p` (a resolution of the new run's flags, config, manifest and agent profile)
/// from `job`, per [`Start`]: a dimension the user gave a flag for keeps the flag's value,
/// and `--allow-net` and `--mount` name their whole list; every other one takes the job's
/// (`Inspect`) or the job's added to the resolution's (`Fork`); a resource limit without a
/// flag is the job's either way. The containment floor is the stronger of both, read-only
/// subtrees and hidden paths always add up, and published ports are never inherited (the
/// job's may be in use: give `--publish` again).
pub fn start_from(job: &JobPolicy, p: &mut Policy, flags: &RunFlags, how: Start) {
    p.floor = p.floor.max(job.floor);
    if flags.network.is_none() && flags.allow_net.is_empty() {
        match how {
            Start::Inspect => {
                p.network.mode = job.network;
                p.network.allow = job.allow.clone();
            }
            Start::Fork => {
                if net_rank(job.network) > net_rank(p.network.mode) {
                    p.network.mode = job.network;
                }
                for e in &job.allow {
                    if !p.network.allow.contains(e) {
                        p.network.allow.push(e.clone());
                    }
                }
                if p.network.mode != NetworkMode::Allow {
                    p.network.allow.clear();
                }
            }
        }
    } else if !flags.allow_net.is_empty() {
        // The flags name the allowlist whole: what the config or manifest adds is not kept.
        p.network.allow = flags
            .allow_net
            .iter()
            .filter_map(|w| w.parse().ok())
            .collect();
    }
    let hidden = |m: &&Mount| m.mode == MountMode::Hide;
    let mut mounts: Vec<Mount> = match (flags.mounts.is_empty(), how) {
        (true, Start::Inspect) => job.mounts.clone(),
        (true, Start::Fork) => {
            // The new resolution's, then each of the job's at a target it does not name.
            let mut v = p.mounts.clone();
            for m in &job.mounts {
                if !v.iter().any(|x| x.target == m.target) {
                    v.push(m.clone());
                }
            }
            v
        }
        (false, _) => p
            .mounts
            .iter()
            .filter(|m| m.origin == "--mount" && m.mode != MountMode::Hide)
            .cloned()
            .collect(),
    };
    // A `--lend-secret` of this resolution's is kept whatever the branch (the job's bundle
    // cannot say it had one: its mounts come back as `job:` ones, which stay masked).
    for m in p.mounts.iter().filter(|m| m.origin == LEND_SECRET) {
        if !mounts
            .iter()
            .any(|x| x.target == m.target && x.origin == LEND_SECRET)
        {
            mounts.push(m.clone());
        }
    }
    let hides: Vec<Mount> = job
        .mounts
        .iter()
        .filter(hidden)
        .chain(p.mounts.iter().filter(hidden))
        .cloned()
        .collect();
    for h in hides {
        if !mounts
            .iter()
            .any(|m| m.mode == MountMode::Hide && m.source == h.source && m.target == h.target)
        {
            mounts.push(h);
        }
    }
    p.mounts = mounts;
    for r in &job.read_only {
        if !p.read_only.contains(r) {
            p.read_only.push(r.clone());
        }
    }
    match (flags.env.is_empty(), how) {
        (true, Start::Inspect) => p.env_allow = job.env.clone(),
        (true, Start::Fork) => {
            for n in &job.env {
                if !p.env_allow.contains(n) {
                    p.env_allow.push(n.clone());
                }
            }
        }
        (false, _) => p.env_allow = flags.env.clone(),
    }
    let (j, r) = (&job.resources, &mut p.resources);
    macro_rules! inherit {
        ($field:ident, $flag:expr, $dim:expr) => {
            if $flag.is_none() && r.$field != j.$field {
                r.$field = j.$field;
                r.defaults.retain(|d| *d != $dim);
            }
        };
    }
    inherit!(memory, flags.memory, ResourceDimension::MemoryBytes);
    inherit!(pids, flags.pids, ResourceDimension::Pids);
    inherit!(cpus, flags.cpus, ResourceDimension::Cpus);
    inherit!(timeout, flags.timeout, ResourceDimension::TimeoutMs);
    inherit!(cpu_time, flags.cpu_time, ResourceDimension::CpuTimeMs);
    inherit!(
        max_file_size,
        flags.max_file_size,
        ResourceDimension::MaxFileSizeBytes
    );
    inherit!(open_files, flags.open_files, ResourceDimension::OpenFiles);
    inherit!(io_bps, flags.io_bps, ResourceDimension::IoBytesPerSec);
    inherit!(tmp_size, flags.tmp_size, ResourceDimension::TmpSizeBytes);
    inherit!(
        stage_size,
        flags.stage_size,
        ResourceDimension::StageSizeBytes
    );
}

/// Every grant of `p` beyond what `job` ran with, keyed by the flag that widens it, in a
/// stable order. `flags` and `tier` (`--tier`) are the new run's, for what `p` cannot show
/// (a weaker `--containment` is folded into the job's floor).
/// The job's mounts of a secret-list entry (`secrets`, [`crate::secrets::secret_paths`]) that
/// this resolution does not lend again by `--lend-secret`: taken out, each with a warning
/// naming the flag. Such a mount can only have been a `--lend-secret` of the job's; inherited
/// as a plain mount it would be masked, an unreadable mount nobody asked for.
pub fn drop_unlent_secrets(p: &mut Policy, secrets: &[PathBuf]) {
    let lent = crate::policy::lent_secrets(p);
    let (dropped, kept): (Vec<Mount>, Vec<Mount>) =
        std::mem::take(&mut p.mounts).into_iter().partition(|m| {
            m.origin.starts_with("job:")
                && m.mode != MountMode::Hide
                && secrets.iter().any(|s| m.source.starts_with(s))
                && !lent.contains(&m.source)
        });
    p.mounts = kept;
    for m in dropped {
        p.warnings.push(format!(
            "{} lent {} (on the secret list); this run does not: pass `--lend-secret {}` to \
             lend it again",
            m.origin,
            m.source.display(),
            m.source.display()
        ));
    }
}

pub fn wider(
    job: &JobPolicy,
    p: &Policy,
    flags: &RunFlags,
    tier: Option<ContainmentClass>,
) -> Vec<Widening> {
    let id = &job.run_id;
    let mut out: Vec<Widening> = Vec::new();
    let mut push = |key: &str, why: String| match out.iter_mut().find(|w| w.key == key) {
        Some(w) => {
            w.why.push_str("; ");
            w.why.push_str(&why);
        }
        None => out.push(Widening {
            key: key.to_owned(),
            why,
        }),
    };
    if let Some(c) = flags.containment
        && c < job.floor
    {
        push(
            "--containment",
            format!(
                "`{}` is weaker than the `{}` job {id} declared",
                c.wire_name(),
                job.floor.wire_name()
            ),
        );
    }
    if let (Some(cap), Some(class)) = (tier, job.class)
        && cap < class
    {
        push(
            "--tier",
            format!(
                "caps the run at `{}`, weaker than the `{}` job {id} ran at",
                cap.wire_name(),
                class.wire_name()
            ),
        );
    }
    if net_rank(p.network.mode) > net_rank(job.network) {
        push(
            "--network",
            format!(
                "opens the network to `{}` where job {id} ran with `{}`",
                p.network.mode.wire_name(),
                job.network.wire_name()
            ),
        );
    }
    if p.network.mode == NetworkMode::Allow && job.network != NetworkMode::Host {
        let extra: Vec<String> = p
            .network
            .allow
            .iter()
            .filter(|e| !job.allow.iter().any(|b| entry_covers(b, e)))
            .map(ToString::to_string)
            .collect();
        if !extra.is_empty() {
            push(
                "--allow-net",
                format!(
                    "adds destinations {} that job {id} could not reach",
                    extra.join(", ")
                ),
            );
        }
    }
    for e in &p.network.publish {
        let host = e.host().to_string();
        if !job
            .publish
            .iter()
            .any(|(h, port)| *h == host && *port == e.port)
        {
            push(
                "--publish",
                format!(
                    "publishes {host} to port {}, which job {id} did not",
                    e.port
                ),
            );
        }
    }
    for m in p.mounts.iter().filter(|m| m.origin == LEND_SECRET) {
        push(
            "--lend-secret",
            format!(
                "unmasks {}, on the secret list, which job {id} could not read",
                m.source.display()
            ),
        );
    }
    for m in &p.mounts {
        if m.mode != MountMode::Hide && m.origin != LEND_SECRET && !mount_covered(m, &job.mounts) {
            push(
                "--mount",
                format!(
                    "lends {} at {} (mode `{}`), more than job {id} was lent",
                    m.source.display(),
                    m.target.display(),
                    mode_name(m.mode)
                ),
            );
        }
    }
    for h in job.mounts.iter().filter(|m| m.mode == MountMode::Hide) {
        if !p
            .mounts
            .iter()
            .any(|m| m.mode == MountMode::Hide && m.source == h.source && m.target == h.target)
        {
            push(
                "--mount",
                format!("shows {}, which job {id} hid", h.source.display()),
            );
        }
    }
    for r in &job.read_only {
        if !p.read_only.contains(r) {
            push(
                "--read-only",
                format!("makes {r} writable, read-only for job {id}"),
            );
        }
    }
    let env: Vec<&str> = p
        .env_allow
        .iter()
        .filter(|n| !job.env.contains(n) && !default_projected(n))
        .map(String::as_str)
        .collect();
    if !env.is_empty() {
        push(
            "--env",
            format!(
                "passes host variables {} that job {id} did not get",
                env.join(", ")
            ),
        );
    }
    for (name, removed) in resource_widening(&job.resources, &p.resources) {
        let verb = if removed { "removes" } else { "raises" };
        push(
            &format!("--{}", name.replace('_', "-")),
            format!("{verb} the limit job {id} ran with"),
        );
    }
    out
}

fn mode_name(mode: MountMode) -> &'static str {
    match mode {
        MountMode::Read => "read",
        MountMode::Stage => "stage",
        MountMode::Write => "write",
        MountMode::Hide => "hide",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Places, resolve_policy};
    use std::path::Path;

    fn places() -> Places {
        Places {
            cwd: "/w/proj".into(),
            home: "/home/u".into(),
        }
    }

    fn resolved(flags: &RunFlags) -> Policy {
        resolve_policy(None, flags, &places()).unwrap()
    }

    /// The job a run with `flags` would record.
    fn job(flags: &RunFlags) -> JobPolicy {
        let p = resolved(flags);
        JobPolicy {
            run_id: "run-1".into(),
            floor: p.floor,
            class: Some(ContainmentClass::Sealed),
            workdir: p.workdir.clone(),
            read_only: p.read_only.clone(),
            mounts: p.mounts.clone(),
            network: p.network.mode,
            allow: p.network.allow.clone(),
            publish: Vec::new(),
            env: p.env_allow.clone(),
            resources: p.resources.clone(),
        }
    }

    /// The keys `inspect` with `flags` would refuse on `job`, and the policy it would run.
    fn inspect(job: &JobPolicy, flags: &RunFlags) -> (Vec<String>, Policy) {
        let mut p = resolved(flags);
        start_from(job, &mut p, flags, Start::Inspect);
        let keys = wider(job, &p, flags, None)
            .into_iter()
            .map(|w| w.key)
            .collect();
        (keys, p)
    }

    fn granting() -> RunFlags {
        RunFlags {
            mounts: vec!["/srv/data:write".into(), "/opt/x:hide".into()],
            read_only: vec![".git".into()],
            allow_net: vec!["api.example.com".into(), "*.pkg.org:443".into()],
            env: vec!["TOKEN".into()],
            memory: Some("2GiB".into()),
            timeout: Some("10m".into()),
            ..RunFlags::default()
        }
    }

    #[test]
    fn without_flags_the_run_has_the_jobs_grants() {
        let j = job(&granting());
        let (keys, p) = inspect(&j, &RunFlags::default());
        assert!(keys.is_empty(), "{keys:?}");
        assert_eq!(p.network.mode, NetworkMode::Allow);
        assert_eq!(p.network.allow, j.allow);
        assert_eq!(p.mounts.len(), 2);
        assert!(
            p.mounts
                .iter()
                .any(|m| m.source == Path::new("/srv/data") && m.mode == MountMode::Write)
        );
        assert_eq!(p.read_only, [".git"]);
        assert_eq!(p.env_allow, ["TOKEN"]);
        assert_eq!(p.resources.memory, Some(ByteSize(2 << 30)));
        assert_eq!(p.resources.timeout, j.resources.timeout);
        assert_eq!(p.resources.pids, j.resources.pids);
    }

    #[test]
    fn narrowing_flags_are_honoured_and_refuse_nothing() {
        let j = job(&granting());
        for flags in [
            RunFlags {
                network: Some("none".into()),
                ..RunFlags::default()
            },
            RunFlags {
                allow_net: vec!["api.example.com:443".into(), "a.pkg.org:443".into()],
                ..RunFlags::default()
            },
            RunFlags {
                mounts: vec!["/srv/data:read".into()],
                ..RunFlags::default()
            },
            RunFlags {
                read_only: vec!["src".into()],
                memory: Some("1GiB".into()),
                timeout: Some("1m".into()),
                pids: Some("10".into()),
                containment: Some(ContainmentClass::Sealed),
                ..RunFlags::default()
            },
        ] {
            let (keys, _) = inspect(&j, &flags);
            assert!(keys.is_empty(), "{flags:?}: {keys:?}");
        }
        let (_, p) = inspect(
            &j,
            &RunFlags {
                network: Some("none".into()),
                ..RunFlags::default()
            },
        );
        assert_eq!(p.network.mode, NetworkMode::None);
        let (_, p) = inspect(
            &j,
            &RunFlags {
                mounts: vec!["/srv/data:read".into()],
                ..RunFlags::default()
            },
        );
        let lent: Vec<_> = p
            .mounts
            .iter()
            .map(|m| (m.source.clone(), m.mode))
            .collect();
        assert_eq!(
            lent,
            [
                (PathBuf::from("/srv/data"), MountMode::Read),
                (PathBuf::from("/opt/x"), MountMode::Hide)
            ],
            "the job's hidden path stays hidden"
        );
        let (_, p) = inspect(
            &j,
            &RunFlags {
                read_only: vec!["src".into()],
                memory: Some("1GiB".into()),
                ..RunFlags::default()
            },
        );
        assert_eq!(p.read_only, ["src", ".git"]);
        assert_eq!(p.resources.memory, Some(ByteSize(1 << 30)));
    }

    #[test]
    fn every_widening_flag_is_named() {
        let none = job(&RunFlags {
            network: Some("none".into()),
            memory: Some("1GiB".into()),
            containment: Some(ContainmentClass::Sealed),
            ..RunFlags::default()
        });
        let cases: Vec<(RunFlags, &[&str])> = vec![
            (
                RunFlags {
                    network: Some("allow".into()),
                    allow_net: vec!["x.org".into()],
                    ..RunFlags::default()
                },
                &["--network", "--allow-net"],
            ),
            (
                RunFlags {
                    network: Some("host".into()),
                    ..RunFlags::default()
                },
                &["--network"],
            ),
            (
                RunFlags {
                    mounts: vec!["/srv:read".into()],
                    ..RunFlags::default()
                },
                &["--mount"],
            ),
            (
                RunFlags {
                    env: vec!["TOKEN".into()],
                    ..RunFlags::default()
                },
                &["--env"],
            ),
            (
                RunFlags {
                    memory: Some("2GiB".into()),
                    pids: Some("none".into()),
                    ..RunFlags::default()
                },
                &["--memory", "--pids"],
            ),
            (
                RunFlags {
                    containment: Some(ContainmentClass::Scoped),
                    ..RunFlags::default()
                },
                &["--containment"],
            ),
            (
                RunFlags {
                    publish: vec!["8080:80".into()],
                    ..RunFlags::default()
                },
                &["--publish"],
            ),
        ];
        for (flags, want) in cases {
            let (keys, _) = inspect(&none, &flags);
            assert_eq!(keys, want, "{flags:?}");
        }
        // A job on an allowlist: another destination, a wider port, a write of a read mount.
        let j = job(&RunFlags {
            allow_net: vec!["x.org:443".into()],
            mounts: vec!["/srv:read".into()],
            ..RunFlags::default()
        });
        let (keys, _) = inspect(
            &j,
            &RunFlags {
                allow_net: vec!["x.org".into()],
                mounts: vec!["/srv:write".into()],
                ..RunFlags::default()
            },
        );
        assert_eq!(keys, ["--allow-net", "--mount"]);
        let p = resolved(&RunFlags::default());
        let w = wider(&j, &p, &RunFlags::default(), Some(ContainmentClass::Scoped));
        assert!(w.iter().any(|w| w.key == "--tier"), "{w:?}");
    }

    #[test]
    fn a_fork_adds_the_jobs_grants_to_its_own() {
        let j = job(&RunFlags {
            mounts: vec!["/srv/data:write".into()],
            allow_net: vec!["x.org".into()],
            memory: Some("1GiB".into()),
            ..RunFlags::default()
        });
        // What an agent profile of the fork's command would add.
        let mut p = resolved(&RunFlags {
            mounts: vec!["/home/u/.agent:write".into()],
            allow_net: vec!["api.agent.com:443".into()],
            ..RunFlags::default()
        });
        start_from(&j, &mut p, &RunFlags::default(), Start::Fork);
        let sources: Vec<_> = p.mounts.iter().map(|m| m.source.clone()).collect();
        assert_eq!(
            sources,
            [PathBuf::from("/home/u/.agent"), PathBuf::from("/srv/data")]
        );
        let allow: Vec<String> = p.network.allow.iter().map(ToString::to_string).collect();
        assert_eq!(allow, ["api.agent.com:443", "x.org:80,443"]);
        assert_eq!(p.resources.memory, Some(ByteSize(1 << 30)));
        // An inspection of the same job keeps the job's alone.
        let mut p = resolved(&RunFlags {
            mounts: vec!["/home/u/.agent:write".into()],
            ..RunFlags::default()
        });
        start_from(&j, &mut p, &RunFlags::default(), Start::Inspect);
        assert_eq!(p.mounts.len(), 1);
        assert_eq!(p.mounts[0].source, Path::new("/srv/data"));
    }

    #[test]
    fn recorded_allowlist_entries_read_back() {
        for text in [
            "api.example.com",
            "*.pkg.org:443",
            "127.0.0.1:8080",
            "[::1]:9",
        ] {
            let e: AllowEntry = text.parse().unwrap();
            assert_eq!(recorded_entry(&e.to_string()), Some(e), "{text}");
        }
        assert_eq!(recorded_entry("nonsense"), None);
        assert!(default_projected("LC_ALL") && default_projected("PATH"));
        assert!(!default_projected("TOKEN"));
    }
}
