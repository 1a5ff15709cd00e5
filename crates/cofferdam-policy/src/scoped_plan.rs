//! The plan for the two tiers without namespaces (DESIGN.md §2–3): `landlock+seccomp`
//! (scoped) and `none` (advisory). Both run the command as a plain host process in a copy of
//! the workdir inside the job, with HOME and TMPDIR pointing at private directories of the
//! job; the scoped tier adds Landlock (read+execute on the system directories, read/write
//! only on the copy, the HOME stage and the temp directory; TCP connect and bind denied),
//! `no_new_privs` and the seccomp filter.
//!
//! Pure: built from the policy, the host facts, the decision and the job's paths, reusing
//! [`build_plan`] for everything the tiers share (environment projection, rlimits, hidden
//! paths) and replacing what differs. Without a mount namespace nothing can be mounted at the
//! workdir's own path, so the command's working directory is the copy's path (`fs.workdir`
//! of the returned plan): the sandbox init `chdir`s there and never composes a root.

use crate::allow::NetworkMode;
use crate::controls::control_requirements;
use crate::plan::{Invoker, JobPaths, SYSTEM_DIRS, SandboxPlan, TcpRules, build_plan};
use crate::policy::Policy;
use crate::tier::ContainmentDecision;
use cofferdam_record::HostFacts;
use std::path::{Path, PathBuf};

/// The device files the scoped tier's Landlock ruleset grants (read, write, ioctl): the
/// sealed tier's harmless devices (`git add` reads `/dev/urandom` for its temporary names;
/// writing it only mixes bytes in, crediting entropy needs `CAP_SYS_ADMIN`).
pub const SCOPED_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The job's directories a copy-staged run uses.
#[derive(Debug, Clone)]
pub struct CopyPaths {
    /// The job's paths shared with the sealed tier (run id, storage root, upper).
    pub job: JobPaths,
    /// The copy of the workdir the command runs in.
    pub copy: PathBuf,
    /// The directory given to the command as HOME.
    pub home: PathBuf,
    /// The directory given to the command as TMPDIR.
    pub tmp: PathBuf,
}

/// Where in the copy the command starts: the caller's directory mapped into the copy when
/// it lies inside the workdir, else the copy's root.
pub fn cwd_in_copy(workdir: &Path, cwd: &Path, copy: &Path) -> PathBuf {
    match cwd.strip_prefix(workdir) {
        Ok(rel) if rel.as_os_str().is_empty() => copy.to_path_buf(),
        Ok(rel) => copy.join(rel),
        Err(_) => copy.to_path_buf(),
    }
}

/// The hidden paths that lie inside `workdir`, relative to it (never the workdir itself).
pub fn secrets_in_workdir(workdir: &Path, hidden: &[PathBuf]) -> Vec<PathBuf> {
    hidden
        .iter()
        .filter_map(|h| h.strip_prefix(workdir).ok())
        .filter(|rel| !rel.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect()
}

/// Build the plan of a copy-staged run (`decision.tier` is `landlock+seccomp` or `none`).
pub fn build_copy_plan(
    policy: &Policy,
    facts: &HostFacts,
    inv: &Invoker,
    decision: &ContainmentDecision,
    paths: &CopyPaths,
    cwd: PathBuf,
    argv: Vec<String>,
) -> SandboxPlan {
    let mut plan = build_plan(policy, facts, inv, &paths.job, argv);
    plan.tier = decision.tier;
    plan.requirements = control_requirements(plan.tier, plan.network_confined());
    plan.watch_files = crate::plan::files_observable(plan.tier, facts).is_ok();
    for (name, value) in plan.env.iter_mut() {
        match name.as_str() {
            "HOME" => *value = paths.home.to_string_lossy().into_owned(),
            "TMPDIR" => *value = paths.tmp.to_string_lossy().into_owned(),
            _ => {}
        }
    }
    // A secret inside the workdir (a workdir that is home holds ~/.ssh) is left out of the
    // copy; its place in the copy joins the paths the init checks cannot be opened.
    let in_copy: Vec<PathBuf> = secrets_in_workdir(&policy.workdir, &plan.fs.hidden)
        .into_iter()
        .map(|rel| paths.copy.join(rel))
        .collect();
    plan.fs.hidden.extend(in_copy);
    plan.fs.workdir = cwd;
    plan.fs.home = paths.home.clone();
    plan.fs.read_only = Vec::new();
    plan.fs.mounts = Vec::new();
    let ll = &mut plan.landlock;
    ll.read_exec = SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .chain([PathBuf::from("/proc")])
        .collect();
    ll.read_write = vec![paths.copy.clone(), paths.home.clone(), paths.tmp.clone()];
    // The host's /dev, not a private one: of its terminals only the run's own pty (its
    // slave is added by the init once allocated) and /dev/tty (the caller's controlling
    // terminal, which the command, in a session of its own, has not). No /dev/pts (the
    // user's other terminals), no /dev/ptmx (a new pty's slave could not be opened without
    // /dev/pts), no /dev/shm: the host's is shared by every process of the user, and without
    // a mount namespace the run cannot have its own (Landlock cannot tell one creator's
    // files from another's), so POSIX shared memory fails here (the scope report says so).
    ll.devices = SCOPED_DEVICES.iter().map(PathBuf::from).collect();
    // Network mode `none` on a host without a network namespace: no TCP connect or bind at
    // all (loopback included); other socket families are the seccomp socket filter's.
    ll.tcp = (policy.network.mode == NetworkMode::None).then(|| TcpRules {
        connect: Vec::new(),
        bind: Vec::new(),
    });
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Places, RunFlags, resolve_policy};
    use crate::tier::decide_containment_capped;
    use cofferdam_record::{ContainmentClass, EnforcementTier};

    fn setup() -> (Policy, HostFacts, Invoker, CopyPaths) {
        let policy = resolve_policy(
            None,
            &RunFlags::default(),
            &Places {
                cwd: "/home/u/proj".into(),
                home: "/home/u".into(),
            },
        )
        .unwrap();
        let mut facts = HostFacts::capable_example();
        facts.userns.can_create = false;
        let inv = Invoker {
            uid: 1000,
            gid: 1000,
            user: "u".into(),
            home: "/home/u".into(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            ssh_host_keys: Vec::new(),
        };
        let job = JobPaths {
            run_id: "run-1".into(),
            new_root: "/s/jobs/run-1/root".into(),
            upper: "/s/jobs/run-1/upper".into(),
            overlay_work: "/s/jobs/run-1/work".into(),
            inherited: None,
            storage_root: "/s".into(),
        };
        let paths = CopyPaths {
            job,
            copy: "/s/jobs/run-1/copy".into(),
            home: "/s/jobs/run-1/home".into(),
            tmp: "/s/jobs/run-1/tmp".into(),
        };
        (policy, facts, inv, paths)
    }

    #[test]
    fn the_copy_plan_grants_writes_only_to_the_job_and_denies_tcp() {
        let (policy, facts, inv, paths) = setup();
        let d = decide_containment_capped(&facts, ContainmentClass::Scoped, None);
        assert_eq!(d.tier, EnforcementTier::LandlockSeccomp);
        let plan = build_copy_plan(
            &policy,
            &facts,
            &inv,
            &d,
            &paths,
            paths.copy.clone(),
            vec!["true".into()],
        );
        assert_eq!(plan.tier, EnforcementTier::LandlockSeccomp);
        assert_eq!(
            plan.landlock.read_write,
            vec![paths.copy.clone(), paths.home.clone(), paths.tmp.clone()]
        );
        assert!(!plan.landlock.read_exec.iter().any(|p| p == Path::new("/")));
        assert!(
            !plan
                .landlock
                .read_exec
                .iter()
                .any(|p| Path::new("/home/u").starts_with(p))
        );
        assert_eq!(
            plan.landlock.tcp,
            Some(TcpRules {
                connect: vec![],
                bind: vec![]
            })
        );
        assert_eq!(plan.fs.workdir, paths.copy);
        assert!(
            plan.env
                .contains(&("HOME".into(), "/s/jobs/run-1/home".into()))
        );
        assert!(
            plan.env
                .contains(&("TMPDIR".into(), "/s/jobs/run-1/tmp".into()))
        );
        assert!(plan.fs.hidden.contains(&PathBuf::from("/home/u/.ssh")));
        assert!(
            !plan.fs.hidden.iter().any(|h| h.starts_with(&paths.copy)),
            "the workdir holds no secret here"
        );
        // No other terminal of the host's, and no shared /dev/shm.
        for d in ["/dev/pts", "/dev/ptmx", "/dev/shm"] {
            assert!(
                !plan.landlock.devices.iter().any(|p| p.starts_with(d)),
                "{d} granted: {:?}",
                plan.landlock.devices
            );
        }
        assert!(plan.landlock.devices.contains(&PathBuf::from("/dev/tty")));
    }

    #[test]
    fn secrets_of_a_workdir_that_is_home_are_checked_at_their_place_in_the_copy() {
        let (mut policy, facts, inv, paths) = setup();
        policy.workdir = "/home/u".into();
        let d = decide_containment_capped(&facts, ContainmentClass::Scoped, None);
        let plan = build_copy_plan(
            &policy,
            &facts,
            &inv,
            &d,
            &paths,
            paths.copy.clone(),
            vec!["true".into()],
        );
        for p in [".ssh", ".npmrc", ".config/git/credentials"] {
            assert!(plan.fs.hidden.contains(&paths.copy.join(p)), "{p}");
        }
        assert_eq!(
            secrets_in_workdir(Path::new("/w"), &["/w".into(), "/w/a".into(), "/x".into()]),
            vec![PathBuf::from("a")]
        );
    }

    #[test]
    fn the_start_directory_maps_into_the_copy() {
        let w = Path::new("/w");
        let c = Path::new("/j/copy");
        assert_eq!(cwd_in_copy(w, Path::new("/w"), c), PathBuf::from("/j/copy"));
        assert_eq!(
            cwd_in_copy(w, Path::new("/w/src/a"), c),
            PathBuf::from("/j/copy/src/a")
        );
        assert_eq!(
            cwd_in_copy(w, Path::new("/elsewhere"), c),
            PathBuf::from("/j/copy")
        );
        assert_eq!(
            cwd_in_copy(w, Path::new("/wx"), c),
            PathBuf::from("/j/copy")
        );
    }
}
