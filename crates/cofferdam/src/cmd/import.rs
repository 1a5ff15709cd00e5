//! `cofferdam import FILE [--workdir DIR]`: make an archive from `cofferdam export` a local
//! job. The checks (every refusal of a hostile or damaged archive, the strict bundle
//! reader) and the writes beneath the new job are `cofferdam_stage::archive::import`'s;
//! this module opens the file and the store and reports. The job then reviews and applies
//! like any other: its apply checks the local tree against the fingerprints taken at seal.

use crate::cli::ImportArgs;
use crate::cmd::export::archive_failure;
use crate::cmd::jobrules::{job_failure, now_ms};
use crate::exit::{Failure, OK};
use cofferdam_stage::archive::import::import as read_archive;
use cofferdam_stage::job::JobStore;
use serde_json::json;

/// `cofferdam import`.
pub fn import(a: &ImportArgs, json: bool) -> Result<u8, Failure> {
    let env = crate::context::env()?;
    let store = JobStore::open(&env.storage_root).map_err(job_failure)?;
    let file = std::fs::File::open(&a.file).map_err(|e| {
        Failure::usage(format!(
            "cannot read {}: {e}; give an archive written by `cofferdam export`",
            crate::shown_path(&a.file)
        ))
    })?;
    let workdir = a.workdir.as_ref().map(|w| env.places.cwd.join(w));
    let imported = read_archive(
        &store,
        std::io::BufReader::new(file),
        workdir.as_deref(),
        now_ms(),
    )
    .map_err(archive_failure)?;
    let state = imported.job.state().map_err(job_failure)?;
    let id = imported.job.id();
    if json {
        crate::print_json(&json!({
            "job": id, "origin_job": imported.manifest.origin.id,
            "workdir": state.workdir, "state": "staged",
            "stage_entries": imported.manifest.stage.len(),
        }))?;
    } else {
        let text = format!(
            "imported job {} (exported as {}) for {}\nreview it with `cofferdam status --review \
             {id}` and `cofferdam diff {id}`; `cofferdam apply {id}` checks this tree first\n",
            id,
            imported.manifest.origin.id,
            crate::shown_path(&state.workdir),
        );
        crate::write_stdout(text.as_bytes())?;
    }
    Ok(OK)
}
