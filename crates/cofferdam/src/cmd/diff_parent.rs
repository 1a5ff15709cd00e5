//! `cofferdam diff --against-parent JOB`: what a fork changed on top of the checkpoint it
//! started from. Finds the checkpoint through the fork's `job.json` and the parent's job
//! (a checkpoint outlives its job's stage, not the job's removal by `gc`); the comparison
//! is `cofferdam_stage::against_parent`'s. Reads only.

use crate::cmd::jobref;
use crate::cmd::jobrules::job_failure;
use crate::exit::NOT_FOUND;
use crate::exit::{Failure, OK, USAGE};
use cofferdam_stage::against_parent::{Difference, against_parent};
use cofferdam_stage::checkpoint;
use cofferdam_stage::job::JobStore;
use serde_json::json;

/// Print the fork's differences from its parent's checkpoint.
pub fn diff(address: &str, json: bool) -> Result<u8, Failure> {
    let (env, job) = jobref::open(address)?;
    let state = job.state().map_err(job_failure)?;
    let Some(parent) = state.parent.as_deref() else {
        return Err(Failure {
            code: USAGE,
            message: format!(
                "job {} is no fork, so it has no parent to compare with; `cofferdam diff {}` \
                 shows its changes against the host",
                job.id(),
                job.id()
            ),
        });
    };
    if !job.has_stage() {
        return Err(Failure::usage(format!(
            "job {} has no stage any more (applied or dropped): nothing to compare",
            job.id()
        )));
    }
    let gone = |why: String| Failure {
        code: NOT_FOUND,
        message: format!(
            "the checkpoint {} job {} was forked from is gone ({why}); `cofferdam diff {}` still \
             shows the fork against the host",
            parent.checkpoint_id,
            job.id(),
            job.id()
        ),
    };
    let store = JobStore::open(&env.storage_root).map_err(job_failure)?;
    let parent_job = store
        .resolve(&parent.run_id, &env.places.cwd)
        .map_err(|e| gone(e.to_string()))?;
    let ckpt = checkpoint::list(&parent_job)
        .map_err(|e| gone(e.to_string()))?
        .into_iter()
        .find(|c| c.manifest.id == parent.checkpoint_id)
        .ok_or_else(|| gone(format!("job {} no longer has it", parent.run_id)))?;
    let found =
        against_parent(&job.upper(), &ckpt.upper(), &state.workdir).map_err(Failure::setup)?;
    if json {
        crate::print_json(&json!({
            "job": job.id(), "parent": parent.run_id, "checkpoint": parent.checkpoint_id,
            "changes": found,
        }))?;
        return Ok(OK);
    }
    let mut out = format!(
        "job {} against its parent {} (checkpoint {}): {} path(s) differ\n",
        job.id(),
        parent.run_id,
        parent.checkpoint_id,
        found.len()
    );
    for d in &found {
        let word = |k| crate::cmd::jobrules::kind_word(k);
        let what = match &d.difference {
            Difference::New { kind } => format!("{:<12} ", word(*kind)),
            Difference::Changed { kind } => {
                format!("{:<12} (changed again after the parent) ", word(*kind))
            }
            Difference::Reverted { parent_kind } => {
                format!(
                    "{:<12} (the parent's {} undone: as on the host) ",
                    "reverted",
                    word(*parent_kind)
                )
            }
        };
        out.push_str(&format!("  {what}{}\n", crate::shown_text(&d.path)));
    }
    crate::write_stdout(out.as_bytes())?;
    Ok(OK)
}
