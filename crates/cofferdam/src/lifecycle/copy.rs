//! The run's parts that differ on the tiers without namespaces (scoped `landlock+seccomp`,
//! advisory `none`; what they refuse is `cofferdam_policy::refusal`'s): the workdir copy in the job with its HOME stage
//! and temp directory, the plan, and, after the command, turning the copy into the stage
//! the seal reads. The launch, the observations, the seal and the records are the sealed
//! run's (`super`).
//!
//! Without a mount namespace nothing can appear at the workdir's own path: the command runs
//! in the copy (`<job>/copy`, its start directory mapped there), with HOME at `<job>/home`
//! and TMPDIR at `<job>/tmp`; the three are removed after the seal (the stage keeps only
//! the changed entries, in `<job>/upper`).

use crate::exit::Failure;
use cofferdam_policy::Policy;
use cofferdam_policy::plan::{Invoker, JobPaths, SandboxPlan};
use cofferdam_policy::scoped_plan::{CopyPaths, build_copy_plan, cwd_in_copy, secrets_in_workdir};
use cofferdam_policy::tier::ContainmentDecision;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use cofferdam_record::{EnforcementTier, HostFacts};
use cofferdam_stage::copystage::{self, Snapshot};
use cofferdam_stage::job::Job;
use serde_json::json;
use std::collections::BTreeSet;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The warning an advisory run carries first, in the bundle and in `status --review`.
pub const ADVISORY_WARNING: &str = "advisory tier: the command ran as a host process with \
     nothing enforced; it could read and write anything this user can, reach the network, \
     and see other processes. Only its writes inside the workdir copy were staged";

/// The copy stage of one run.
pub struct CopyStage {
    paths: CopyPaths,
    snapshot: Snapshot,
    /// The `workdir_copy` observation.
    pub observation: ControlObservation,
    /// What the copy skipped.
    pub warnings: Vec<String>,
}

/// The job's copy-stage directories.
pub fn paths(job: &Job, shared: JobPaths) -> CopyPaths {
    CopyPaths {
        job: shared,
        copy: job.dir().join("copy"),
        home: job.dir().join("home"),
        tmp: job.dir().join("tmp"),
    }
}

/// The run's plan on a copy tier.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    policy: &Policy,
    facts: &HostFacts,
    inv: &Invoker,
    decision: &ContainmentDecision,
    paths: &CopyPaths,
    cwd: &Path,
    argv: Vec<String>,
) -> SandboxPlan {
    let start = cwd_in_copy(&policy.workdir, cwd, &paths.copy);
    let mut plan = build_copy_plan(policy, facts, inv, decision, paths, start, argv);
    // A secret that is a symlink (`~/.ssh -> dotfiles/ssh`) has its content where the link
    // points: when that lies in the workdir too, it is left out of the copy as well.
    let real_workdir = std::fs::canonicalize(&policy.workdir).ok();
    let targets: Vec<_> = secrets_in_workdir(&policy.workdir, &plan.fs.hidden)
        .iter()
        .map(|rel| policy.workdir.join(rel))
        .filter(|p| {
            p.symlink_metadata()
                .is_ok_and(|m| m.file_type().is_symlink())
        })
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .filter_map(|real| {
            let rel = real.strip_prefix(real_workdir.as_ref()?).ok()?;
            (!rel.as_os_str().is_empty()).then(|| paths.copy.join(rel))
        })
        .collect();
    for t in targets {
        if !plan.fs.hidden.contains(&t) {
            plan.fs.hidden.push(t);
        }
    }
    plan
}

/// The workdir's entries left out of the copy: every hidden path the plan places in it.
fn left_out(plan: &SandboxPlan, copy: &Path) -> BTreeSet<PathBuf> {
    secrets_in_workdir(copy, &plan.fs.hidden)
        .into_iter()
        .collect()
}

/// Copy the workdir into the job and create the HOME stage and the temp directory;
/// `progress` draws the copy's progress line on a terminal (`crate::progress`).
pub fn prepare(
    workdir: &Path,
    paths: CopyPaths,
    plan: &SandboxPlan,
    progress: bool,
) -> Result<CopyStage, Failure> {
    let tier = plan.tier;
    for dir in [&paths.home, &paths.tmp] {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| Failure::setup(format!("cannot create {}: {e}", dir.display())))?;
    }
    let secrets = left_out(plan, &paths.copy);
    let mut line = crate::progress::Line::new(progress);
    let report = copystage::copy_workdir_with(workdir, &paths.copy, &secrets, &mut line)
        .map_err(Failure::setup)?;
    let mut details = std::collections::BTreeMap::new();
    details.insert("copy".into(), json!(paths.copy));
    details.insert("entries".into(), json!(report.snapshot.entries.len()));
    details.insert("reflinked_files".into(), json!(report.reflinked));
    details.insert("copied_files".into(), json!(report.copied));
    details.insert("copied_bytes".into(), json!(report.copied_bytes));
    details.insert("hard_links".into(), json!(report.hard_links));
    details.insert("skipped".into(), json!(report.snapshot.skipped.len()));
    details.insert("secrets_left_out".into(), json!(secrets.len()));
    let scoped = tier == EnforcementTier::LandlockSeccomp;
    let observation = ControlObservation {
        mechanism: ControlMechanism::WorkdirCopy,
        dimension: ControlDimension::FilesystemWrite,
        // On the scoped tier Landlock keeps the command's writes inside the copy, the HOME
        // stage and the temp directory; on the advisory tier nothing does.
        status: if scoped {
            ControlStatus::Enforced
        } else {
            ControlStatus::Partial
        },
        reason: (!scoped).then(|| {
            "the command is an unconfined host process: its writes inside the copy are \
             staged, but nothing stops writes to the real workdir or elsewhere"
                .to_owned()
        }),
        details,
    };
    Ok(CopyStage {
        paths,
        snapshot: report.snapshot,
        observation,
        warnings: report.warnings,
    })
}

impl CopyStage {
    /// After the command: move what it changed in the copy into `upper` (see
    /// `cofferdam_stage::copystage`), then remove the copy, the HOME stage and the temp
    /// directory. The seal runs on `upper` afterwards, as on the sealed tier.
    pub fn finish(self, upper: &Path) -> Result<(), Failure> {
        let now = copystage::list_after_run(&self.paths.copy).map_err(Failure::setup)?;
        let delta = copystage::compare(&self.snapshot, &now);
        copystage::materialize(&self.paths.copy, upper, &delta).map_err(Failure::setup)?;
        for dir in [&self.paths.copy, &self.paths.home, &self.paths.tmp] {
            copystage::remove_tree(dir).map_err(Failure::setup)?;
        }
        Ok(())
    }
}
