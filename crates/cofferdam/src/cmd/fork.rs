//! `cofferdam fork JOB -- CMD`, `cofferdam run --on JOB -- CMD` and `cofferdam inspect JOB
//! [-- CMD]`: a run whose stage starts as a checkpoint of another job's (issue 21). Owns
//! picking the parent and its checkpoint (a new one of the parent's stage unless
//! `--checkpoint` names one), the workdir rule, and what `inspect` does after the run
//! (discard the stage, or keep it with `--keep`). The run itself is `lifecycle::run`'s
//! with [`RunRequest::fork`] set; the stage's seeding is `cofferdam_stage::fork`'s.
//!
//! The policy: every run on a job starts from the policy the job ran with, read back from
//! its bundle (`cofferdam_policy::inherit`); a policy flag replaces the job's value of its
//! dimension. `inspect` (and `inspect --keep`) runs with the job's grants alone, and a flag
//! may only narrow them: anything wider is refused before anything is made. `fork` and
//! `run --on` are runs of the user's own, reviewed as any: the job's grants are added to
//! what `run` would give the command (its agent profile's included), and flags may widen.

use crate::cli::{ForkArgs, RunArgs};
use crate::cmd::jobref;
use crate::cmd::jobrules::{job_failure, lock, now_ms};
use crate::cmd::recover::settled_state;
use crate::exit::Failure;
use crate::lifecycle::{self, RunRequest};
use cofferdam_policy::inherit;
use cofferdam_record::bundle::RunLineage;
use cofferdam_stage::checkpoint::{self, Checkpoint};
use cofferdam_stage::job::{Job, StageState};
use std::path::Path;

/// What the run on a parent is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `fork` / `run --on`: a new staged job.
    Fork,
    /// `inspect`: its writes are discarded.
    Inspect,
    /// `inspect --keep`: kept as a fork.
    InspectKept,
}

/// `cofferdam fork` (`inspect` when `inspect`).
pub fn fork(a: &ForkArgs, inspect: bool, json: bool) -> Result<u8, Failure> {
    if a.run.on.is_some() {
        return Err(Failure::usage(
            "`fork JOB` and `inspect JOB` name the parent already; leave out --on",
        ));
    }
    let mode = match (inspect, a.keep) {
        (false, false) => Mode::Fork,
        (false, true) => {
            return Err(Failure::usage(
                "--keep is `inspect`'s (a fork's stage is always kept)",
            ));
        }
        (true, false) => Mode::Inspect,
        (true, true) => Mode::InspectKept,
    };
    let mut run = a.run.clone();
    if run.command.is_empty() && inspect {
        // Inspect's default: the caller's shell, on the staged view.
        run.command = vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".to_owned())];
    }
    run_on(&a.job, &run, mode, json)
}

/// The parent and the checkpoint a fork starts from.
struct Origin {
    /// The parent job.
    parent: Job,
    /// The checkpoint.
    checkpoint: Checkpoint,
    /// Made for this run (no `--checkpoint`).
    made: bool,
}

/// Run `args` on top of `parent` (an address).
pub fn run_on(parent: &str, args: &RunArgs, mode: Mode, json: bool) -> Result<u8, Failure> {
    let (req, origin) = prepare(parent, args, mode, json)?;
    let finished = lifecycle::run(&req);
    let discard = mode == Mode::Inspect;
    if discard && origin.made {
        // The checkpoint was only this inspection's view.
        forget_checkpoint(&origin);
    }
    let finished = finished?;
    if discard {
        discard_stage(&finished.run_id)?;
        if !args.quiet && !json {
            eprintln!(
                "cofferdam: inspect of job {}: the command's writes were discarded (`inspect \
                 --keep` keeps them as a fork)",
                origin.parent.id()
            );
        }
        if json {
            crate::print_json(&serde_json::json!({
                "job": finished.run_id, "exit_code": finished.exit_code,
                "bundle": finished.bundle_path, "discarded": true,
                "parent": origin.parent.id(), "checkpoint": origin.checkpoint.manifest.id,
            }))?;
        }
        return Ok(u8::try_from(finished.exit_code).unwrap_or(1));
    }
    if !args.quiet && !json {
        eprintln!(
            "cofferdam: job {} is a fork of job {} (checkpoint {}); `cofferdam diff --against-parent {}` shows what it added",
            finished.run_id,
            origin.parent.id(),
            origin.checkpoint.manifest.id,
            finished.run_id
        );
    }
    super::run::render(&finished, args.quiet, json)
}

/// The request of a run on `address` and where it starts: the parent found and locked, its
/// recorded policy read back, the run's policy started from it (and, for `inspect`, refused
/// if it is wider), and only then the checkpoint found (`--checkpoint`, in any state of the
/// parent: a checkpoint outlives its job's stage) or made of the parent's stage, which must
/// then be staged. A refusal leaves nothing behind.
fn prepare(
    address: &str,
    args: &RunArgs,
    mode: Mode,
    json: bool,
) -> Result<(RunRequest, Origin), Failure> {
    let (env, parent) = jobref::open(address)?;
    let held = lock(&parent, "fork")?;
    let state = settled_state(&parent, &held)?;
    let found = match args.checkpoint.as_deref() {
        Some(wanted) => Some(named_checkpoint(&parent, wanted)?),
        None => {
            staged_or_refuse(&parent, state.state)?;
            None
        }
    };
    let bundle = std::fs::read(parent.bundle_path())
        .map_err(|e| e.to_string())
        .and_then(|b| cofferdam_record::reader::read_bundle(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            Failure::setup(format!(
                "cannot read job {}'s policy from its run bundle {}: {e}; a run on a job \
                 starts from the policy it ran with",
                parent.id(),
                parent.bundle_path().display()
            ))
        })?;
    let job = inherit::recorded(&bundle).map_err(|e| {
        Failure::setup(format!(
            "cannot read job {}'s policy from its run bundle: {e}",
            parent.id()
        ))
    })?;
    let mut args = args.clone();
    set_workdir(&mut args, &parent, &state.workdir)?;
    let flags = crate::context::run_flags(&args.policy, None);
    let mut req: RunRequest = super::run::request_with(&args, json, |p| {
        let how = match mode {
            Mode::Fork => inherit::Start::Fork,
            Mode::Inspect | Mode::InspectKept => inherit::Start::Inspect,
        };
        inherit::start_from(&job, p, &flags, how);
        inherit::drop_unlent_secrets(
            p,
            &cofferdam_policy::secrets::secret_paths(&env.places.home, &[]),
        );
        let wider = inherit::wider(&job, p, &flags, args.tier);
        if mode == Mode::Fork || wider.is_empty() {
            return Ok(());
        }
        Err(Failure::usage(format!(
            "refusing to inspect job {id}: inspect runs with the policy job {id} ran with, \
             and its flags may only narrow it; these widen it:\n{}  fix: leave those flags \
             out (or give values within the job's); to run with more, fork it with them \
             (`cofferdam fork {id} FLAGS -- CMD`), a run of your own that is reviewed as any",
            crate::context::widening_lines(&wider),
            id = parent.id()
        )))
    })?;
    let (checkpoint, made) = match found {
        Some(c) => (c, false),
        None => {
            let c =
                checkpoint::create(&parent, &bundle.run.run_id, None, now_ms()).map_err(|e| {
                    Failure::setup(format!("cannot checkpoint job {}: {e}", parent.id()))
                })?;
            (c, true)
        }
    };
    drop(held);
    req.policy.orchestration.lineage = Some(RunLineage {
        parent_run_id: checkpoint.manifest.run_id.clone(),
        checkpoint_id: checkpoint.manifest.id.clone(),
    });
    req.fork = Some(checkpoint.clone());
    Ok((
        req,
        Origin {
            parent,
            checkpoint,
            made,
        },
    ))
}

/// The fork works on its parent's workdir: its stage is a stage of that tree.
fn set_workdir(args: &mut RunArgs, parent: &Job, workdir: &Path) -> Result<(), Failure> {
    match &args.policy.workdir {
        None => args.policy.workdir = Some(workdir.to_path_buf()),
        Some(w) => {
            let given = std::fs::canonicalize(w).unwrap_or_else(|_| w.clone());
            let theirs = std::fs::canonicalize(workdir).unwrap_or_else(|_| workdir.to_path_buf());
            if given != theirs {
                return Err(Failure::usage(format!(
                    "--workdir {}: job {} stages {}, and a fork works on its parent's workdir; \
                     leave out --workdir",
                    w.display(),
                    parent.id(),
                    workdir.display()
                )));
            }
        }
    }
    Ok(())
}

/// The one checkpoint of `parent` that `wanted` names.
fn named_checkpoint(parent: &Job, wanted: &str) -> Result<Checkpoint, Failure> {
    let all = checkpoint::list(parent).map_err(Failure::setup)?;
    let found: Vec<Checkpoint> = all
        .into_iter()
        .filter(|c| checkpoint::matches(&c.manifest, wanted))
        .collect();
    match <[Checkpoint; 1]>::try_from(found) {
        Ok([checkpoint]) => Ok(checkpoint),
        Err(v) if v.is_empty() => Err(Failure::usage(format!(
            "--checkpoint {wanted}: job {} has no such checkpoint; list them with \
             `cofferdam checkpoint list {}`",
            parent.id(),
            parent.id()
        ))),
        Err(_) => Err(Failure::usage(format!(
            "--checkpoint {wanted}: more than one checkpoint of job {} matches; give more \
             of its id",
            parent.id()
        ))),
    }
}

/// A fork without `--checkpoint` checkpoints the parent's stage, which must be staged.
fn staged_or_refuse(parent: &Job, state: StageState) -> Result<(), Failure> {
    if state == StageState::Staged {
        return Ok(());
    }
    let why = match state {
        StageState::Active => "its run is still going",
        StageState::Applied => "every change was applied, so its stage is spent",
        StageState::Discarded => "it was dropped, so it has no stage",
        _ => "it was interrupted before its stage was sealed",
    };
    Err(Failure::usage(format!(
        "cannot fork job {}: {why}; fork a staged job, or one of its checkpoints with \
         --checkpoint (`cofferdam checkpoint list {}`)",
        parent.id(),
        parent.id()
    )))
}

/// Remove the checkpoint an inspection made; a failure is only told.
fn forget_checkpoint(origin: &Origin) {
    let removed = lock(&origin.parent, "remove the inspection's checkpoint of")
        .map_err(|f| f.message)
        .and_then(|_held| checkpoint::delete(&origin.checkpoint).map_err(|e| e.to_string()));
    if let Err(e) = removed {
        eprintln!(
            "cofferdam: warning: the checkpoint {} made for this inspection stays ({e}); \
             `cofferdam checkpoint delete {}` removes it",
            origin.checkpoint.manifest.id, origin.checkpoint.manifest.id
        );
    }
}

/// Drop an inspection's stage: the job's records stay (`discarded`), its writes go.
fn discard_stage(run_id: &str) -> Result<(), Failure> {
    let (_env, job) = jobref::open(run_id)?;
    let _held = lock(&job, "discard the inspection of")?;
    job.update(|st| st.state = StageState::Discarded)
        .map_err(job_failure)?;
    job.remove_stage().map_err(job_failure)
}

/// The forks of `parent` (a job id) whose stage is live (running or staged), by id.
pub(crate) fn live_forks(store: &cofferdam_stage::job::JobStore, parent: &str) -> Vec<String> {
    use cofferdam_stage::job::JobSummary;
    let Ok(list) = store.list() else {
        return Vec::new();
    };
    list.into_iter()
        .filter_map(|s| match s {
            JobSummary::Readable { job, state }
                if matches!(state.state, StageState::Active | StageState::Staged)
                    && state.parent.as_ref().is_some_and(|p| p.run_id == parent) =>
            {
                Some(job.id().to_owned())
            }
            _ => None,
        })
        .collect()
}
