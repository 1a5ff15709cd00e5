//! `cofferdam drop JOB`: discard a job's stage. The workdir is not touched, except that
//! the leftovers of an interrupted apply are cleaned up first (paths it had written stay
//! written). The job's records (`job.json` → `discarded`, the bundle, the trace with a
//! `dropped` event) stay, so `jobs` and `status` still describe it.

use crate::cli::DropArgs;
use crate::cmd::jobref;
use crate::cmd::jobrules::{finish_interrupted, job_failure, kinds_of, lock, now_ms};
use crate::cmd::recover::settled_state;
use crate::exit::{Failure, OK};
use crate::style::Style;
use cofferdam_record::bundle::ChangeKind;
use cofferdam_record::trace::TraceEventKind;
use cofferdam_stage::job::StageState;
use cofferdam_stage::ledger::Ledger;
use cofferdam_stage::review::Stage;
use cofferdam_stage::trace_log::TraceLog;
use serde_json::json;

/// Remove the job's stage, with a spinner on a terminal while it lasts.
fn remove_stage(job: &cofferdam_stage::job::Job, json: bool) -> Result<(), Failure> {
    let _spinner =
        crate::progress::Spinner::start(crate::progress::wanted(json, false), "removing the stage");
    job.remove_stage().map_err(job_failure)
}

/// `cofferdam drop`.
pub fn drop_job(a: &DropArgs, json: bool, s: Style) -> Result<u8, Failure> {
    let (env, job) = jobref::open(&a.job)?;
    let lock = lock(&job, "drop")?;
    // Room for the state write that comes before the stage's removal, on a full disk too.
    job.release_drop_reserve();
    let state = settled_state(&job, &lock)?;
    let id = job.id().to_owned();
    let mut trace = TraceLog::open(&job.trace_path()).map_err(Failure::setup)?;

    let (discarded, message) = match state.state {
        StageState::Discarded => {
            let had = job.has_stage();
            remove_stage(&job, json)?;
            (
                0,
                if had {
                    format!("job {id} was already dropped; removed its leftover stage files")
                } else {
                    format!("job {id} was already dropped")
                },
            )
        }
        StageState::Active | StageState::Interrupted | StageState::Staged | StageState::Applied => {
            // Finish an interrupted apply's bookkeeping so no temporary file stays behind.
            let stage = Stage::load(&job).ok();
            let mut ledger = match &stage {
                Some(st) => st.ledger.clone(),
                None => Ledger::load(&job.ledger_path()).map_err(Failure::setup)?,
            };
            if ledger.batch.is_some() {
                let kinds = stage.as_ref().map(kinds_of).unwrap_or_default();
                finish_interrupted(
                    &job,
                    &state.workdir,
                    &mut ledger,
                    &mut trace,
                    &|p| kinds.get(p).copied().unwrap_or(ChangeKind::Modified),
                    false,
                )?;
            }
            let remaining = match &stage {
                Some(st) => st
                    .changes
                    .iter()
                    .filter(|c| !ledger.is_applied(&c.path))
                    .count(),
                None => state.changed_files.unwrap_or(0),
            };
            if state.state == StageState::Applied && !job.has_stage() {
                (
                    0,
                    format!("job {id} was fully applied; its stage files are already removed"),
                )
            } else if state.state == StageState::Applied || (stage.is_some() && remaining == 0) {
                if state.state != StageState::Applied {
                    job.update(|st| st.state = StageState::Applied)
                        .map_err(job_failure)?;
                }
                let dropped = TraceEventKind::Dropped {
                    discarded_changes: 0,
                };
                crate::trace_append::append(&mut trace, vec![(now_ms(), dropped)], "the drop");
                remove_stage(&job, json)?;
                (
                    0,
                    format!(
                        "job {id} was fully applied; removed its stage files (its records stay)"
                    ),
                )
            } else {
                // The state first: a crash while removing files leaves a dropped job with
                // leftovers (a later drop removes them), never a staged job with holes.
                job.update(|st| st.state = StageState::Discarded)
                    .map_err(job_failure)?;
                let dropped = TraceEventKind::Dropped {
                    discarded_changes: remaining,
                };
                crate::trace_append::append(&mut trace, vec![(now_ms(), dropped)], "the drop");
                remove_stage(&job, json)?;
                (
                    remaining,
                    format!(
                        "dropped job {id}: {remaining} staged change(s) discarded; the workdir \
                         was not touched"
                    ),
                )
            }
        }
    };
    drop(lock);
    // A fork has its own stage (its parent's changes included): it stays whole.
    if let Ok(store) = cofferdam_stage::job::JobStore::open(&env.storage_root) {
        let forks = crate::cmd::fork::live_forks(&store, &id);
        if !forks.is_empty() {
            eprintln!(
                "cofferdam: note: job {id} has live fork(s) {}: each keeps its own stage, with \
                 this job's changes in it, and stays applicable",
                forks.join(", ")
            );
        }
    }
    if json {
        let st = job.state().map_err(job_failure)?;
        crate::print_json(&json!({
            "job": id,
            "state": match st.state {
                StageState::Applied => "applied",
                _ => "discarded",
            },
            "discarded_changes": discarded,
        }))?;
    } else {
        crate::write_stdout(format!("{}\n", s.good(&crate::shown_text(&message))).as_bytes())?;
    }
    Ok(OK)
}
