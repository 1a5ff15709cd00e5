//! The supervisor's part of a run's resource limits: before the launch, install the run's
//! cgroup (`cofferdam_policy::cgroup_plan` decides, `cofferdam_sandbox::cgroup` writes),
//! drop the rlimits a cgroup replaces, and arm the watch (timeout, stage cap); after it,
//! gather the evidence (the watch's stop, the cgroup's counters, the stage's size) and let
//! `cofferdam_policy::verdict` name the cause. The cgroup is removed when this is dropped,
//! after the init has been reaped.

use cofferdam_policy::Policy;
use cofferdam_policy::cgroup_plan::{
    DEFAULT_PIDS_SKIPPED, IoDevices, default_pids_by_rlimit, plan_cgroup,
};
use cofferdam_policy::outcome::Ending;
use cofferdam_policy::plan::SandboxPlan;
use cofferdam_policy::verdict::{Cause, Evidence, judge, limits_hit};
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus, ResourceDimension,
};
use cofferdam_sandbox::cgroup::{RunCgroup, dimension_of};
use cofferdam_sandbox::watch::{STAGE_POLL_INTERVAL, WatchSpec, allocated_bytes};
use serde_json::json;
use std::path::{Path, PathBuf};

/// What the supervisor installed for one run.
pub struct Limits {
    cgroup: Option<RunCgroup>,
    /// The watch to run the sandbox under.
    pub watch: WatchSpec,
    /// Observations of what the supervisor installed (cgroup, wall clock, stage poll), and
    /// of the cgroup limits it could not, with the reason.
    pub controls: Vec<ControlObservation>,
    /// Limits requested but not enforced at all, for a warning before the run.
    pub warnings: Vec<String>,
    stage: Option<(PathBuf, u64)>,
}

fn watch_observation(resource: &str, status: ControlStatus, value: u64) -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::WallClock,
        ControlDimension::Resources,
        status,
    );
    o.details.insert("resource".into(), json!(resource));
    o.details.insert("value".into(), json!(value));
    o
}

/// The observation of cofferdam's default pids limit left out of a run (see
/// `cofferdam_policy::cgroup_plan::default_pids_by_rlimit`).
fn default_pids_skipped() -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::Rlimit,
        ControlDimension::Resources,
        ControlStatus::Unavailable,
    );
    o.reason = Some(DEFAULT_PIDS_SKIPPED.into());
    o.details.insert("resource".into(), json!("RLIMIT_NPROC"));
    o.details.insert("default".into(), json!(true));
    o
}

/// The run's cgroup, installed before its init starts (the init is born inside its v1
/// directories: `cofferdam_sandbox::launch::spawn_init`), with one observation per limit.
pub struct CgroupSetup {
    cgroup: Option<RunCgroup>,
    controls: Vec<ControlObservation>,
    not_planned: Vec<(ResourceDimension, String)>,
}

impl CgroupSetup {
    /// The v1 directories the init is to be born in.
    pub fn v1_dirs(&self) -> Vec<PathBuf> {
        self.cgroup
            .as_ref()
            .map(RunCgroup::v1_dirs)
            .unwrap_or_default()
    }
}

/// Plan and install the cgroup of run `run_id` (named after the job it will be). `stage`
/// is where the job's directory will be made (its stage's disk, for `io_bps`).
pub fn install_cgroup(
    policy: &Policy,
    facts: &cofferdam_record::HostFacts,
    run_id: &str,
    stage: &Path,
) -> CgroupSetup {
    let r = &policy.resources;
    // The disks behind what the workload reads (the workdir, the overlay's lower layer) and
    // writes (the stage), only when disk bandwidth is limited.
    let io = match r.io_bps {
        Some(_) => cofferdam_sandbox::blockdev::resolve_all(&[
            ("workdir", &policy.workdir),
            ("stage", stage),
        ]),
        None => IoDevices::default(),
    };
    let cplan = plan_cgroup(r, &facts.cgroup, facts.is_root, &io);
    let mut controls = Vec::new();
    let cgroup = (!cplan.limits.is_empty()).then(|| {
        let (cg, obs) = cofferdam_sandbox::cgroup::install(&cplan, run_id);
        controls.extend(obs);
        cg
    });
    CgroupSetup {
        cgroup,
        controls,
        not_planned: cplan.not_planned,
    }
}

/// Arm the watch around the run's cgroup `setup` (from [`install_cgroup`]); adjusts
/// `plan.rlimits` where a cgroup enforces the same limit for the whole run (so an
/// allocation past the memory limit ends in the cgroup's OOM kill, which is recorded,
/// rather than a failed `malloc`). With `poll_stage` false (the copy tiers: the changes
/// reach `upper` only when the run ends) the stage cap is checked at the end only.
pub fn prepare(
    setup: CgroupSetup,
    policy: &Policy,
    plan: &mut SandboxPlan,
    upper: &Path,
    poll_stage: bool,
) -> Limits {
    let r = &policy.resources;
    let CgroupSetup {
        cgroup,
        controls: installed,
        not_planned,
    } = setup;
    let mut controls = Vec::new();
    for (dim, reason) in &not_planned {
        let mut o = ControlObservation::new(
            ControlMechanism::Cgroup,
            ControlDimension::Resources,
            ControlStatus::Unavailable,
        );
        o.reason = Some(reason.clone());
        o.details.insert(
            "dimension".into(),
            serde_json::to_value(dim).unwrap_or_default(),
        );
        controls.push(o);
    }
    controls.extend(installed);
    let by_cgroup = |dim| {
        controls.iter().any(|o| {
            o.mechanism == ControlMechanism::Cgroup
                && o.status == ControlStatus::Enforced
                && dimension_of(o) == Some(dim)
        })
    };
    if by_cgroup(ResourceDimension::MemoryBytes) {
        plan.rlimits.data = None;
    }
    let pids_by_cgroup = by_cgroup(ResourceDimension::Pids);
    if pids_by_cgroup {
        plan.rlimits.nproc = None;
    }
    let cpus_by_cgroup = by_cgroup(ResourceDimension::Cpus);
    let io_by_cgroup = by_cgroup(ResourceDimension::IoBytesPerSec);
    if !pids_by_cgroup
        && r.is_default(ResourceDimension::Pids)
        && !default_pids_by_rlimit(plan.tier)
    {
        plan.rlimits.nproc = None;
        controls.push(default_pids_skipped());
    }
    let mut warnings = Vec::new();
    for o in &controls {
        // A default the host cannot carry is recorded, not warned about on every run.
        let defaulted = dimension_of(o).is_some_and(|d| r.is_default(d));
        if o.status == ControlStatus::Failed && !defaulted {
            warnings.push(format!(
                "a cgroup limit could not be installed: {}",
                o.reason.as_deref().unwrap_or("unknown")
            ));
        }
    }
    if !cpus_by_cgroup && r.cpus.is_some() {
        warnings.push("`cpus` is not enforced on this host (no usable cgroup cpu controller); the run goes on without it".into());
    }
    if r.io_bps.is_some() && !io_by_cgroup {
        let why = not_planned
            .iter()
            .find(|(d, _)| *d == ResourceDimension::IoBytesPerSec)
            .map_or("the cgroup could not be installed", |(_, w)| w.as_str());
        warnings.push(format!(
            "`io_bps` is not enforced here ({why}); the run goes on without it"
        ));
    }
    let mut watch = WatchSpec {
        timeout: r.timeout.map(|t| t.0),
        cgroup_procs: cgroup
            .as_ref()
            .map(RunCgroup::procs_files)
            .unwrap_or_default(),
        ..Default::default()
    };
    if let Some(t) = r.timeout {
        controls.push(watch_observation(
            "timeout",
            ControlStatus::Enforced,
            t.as_millis_u64(),
        ));
    }
    let stage = r.stage_size.map(|s| (upper.to_path_buf(), s.0));
    if let Some((dir, cap)) = &stage {
        let mut o = watch_observation("stage_size", ControlStatus::Partial, *cap);
        if poll_stage {
            watch.stage_cap = Some((dir.clone(), *cap));
            o.reason = Some(format!(
                "a poll every {} ms of the stage's allocated bytes: a burst between two polls \
                 can overshoot the cap before the workload is stopped (the exact check at seal \
                 fails the run as well); a directory the workload makes unreadable is not counted",
                STAGE_POLL_INTERVAL.as_millis()
            ));
        } else {
            o.reason = Some(
                "checked once the run has ended (the copy tiers stage the changes then): the \
                 run fails as over the cap, but the workload is not stopped when it passes it"
                    .into(),
            );
        }
        controls.push(o);
    }
    Limits {
        cgroup: cgroup.filter(|c| !c.is_empty()),
        watch,
        controls,
        warnings,
        stage,
    }
}

impl Limits {
    /// The run's v2 `cgroup.procs` files, where the init is moved by pid.
    pub fn v2_procs_files(&self) -> Vec<PathBuf> {
        self.cgroup
            .as_ref()
            .map(RunCgroup::v2_procs_files)
            .unwrap_or_default()
    }

    /// Whether the run has cgroups of its own (removed when this drops: they must be empty).
    pub fn has_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// The ending with its cause, and every limit the evidence shows was reached.
    pub fn conclude(
        &self,
        stop: Option<Cause>,
        ending: Ending,
        controls: &[ControlObservation],
    ) -> (Ending, Vec<(ResourceDimension, String)>) {
        let counters = self
            .cgroup
            .as_ref()
            .map(RunCgroup::counters)
            .unwrap_or_default();
        let rlimit = |name: &str| {
            controls.iter().any(|o| {
                o.mechanism == ControlMechanism::Rlimit
                    && o.status == ControlStatus::Enforced
                    && o.details.get("resource").and_then(|v| v.as_str()) == Some(name)
            })
        };
        let ev = Evidence {
            intervention: stop,
            oom_kills: counters.oom_kills,
            pids_denied: counters.pids_denied,
            stage_over: self.stage.as_ref().and_then(|(dir, cap)| {
                let bytes = allocated_bytes(dir);
                (bytes > *cap).then_some((bytes, *cap))
            }),
            fsize_limited: rlimit("RLIMIT_FSIZE"),
            cpu_time_limited: rlimit("RLIMIT_CPU"),
        };
        let hits = limits_hit(&ending, &ev);
        (judge(ending, &ev), hits)
    }
}

impl Drop for Limits {
    fn drop(&mut self) {
        if let Some(cg) = self.cgroup.take() {
            for e in cg.remove() {
                eprintln!("cofferdam: warning: {e}");
            }
        }
    }
}
