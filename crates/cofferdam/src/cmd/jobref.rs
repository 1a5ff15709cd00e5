//! Job addresses as the commands take them: `last` is the newest job of the current
//! directory or, failing that, of the nearest folder above it that has jobs (so `last`
//! works from `src/` of the workdir); an id prefix or a path is the store's. When `last`
//! matches nothing, the message names the folder looked for and the newest job there is.
//! Reads the store only.

use crate::cmd::jobrules::job_failure as failure;
use crate::context;
use crate::exit::{Failure, NOT_FOUND};
use cofferdam_stage::job::{Job, JobState, JobStore, JobSummary};
use std::path::{Path, PathBuf};

/// Open the store and resolve the job address a command was given.
pub(crate) fn open(address: &str) -> Result<(context::Env, Job), Failure> {
    let env = context::env()?;
    let store = JobStore::open(&env.storage_root).map_err(failure)?;
    let job = resolve(&store, address, &env.places.cwd)?;
    Ok((env, job))
}

/// Resolve `address` from `cwd`.
pub fn resolve(store: &JobStore, address: &str, cwd: &Path) -> Result<Job, Failure> {
    if address != "last" {
        return store.resolve(address, cwd).map_err(failure);
    }
    let list = store.list().map_err(failure)?;
    let readable: Vec<(&Job, &JobState)> = list
        .iter()
        .filter_map(|s| match s {
            JobSummary::Readable { job, state } => Some((job, state)),
            JobSummary::Unreadable { .. } => None,
        })
        .collect();
    let canon = std::fs::canonicalize(cwd).ok();
    for place in [Some(cwd.to_path_buf()), canon.clone()]
        .into_iter()
        .flatten()
    {
        for dir in place.ancestors() {
            // Newest first (`list`): the first job of the nearest folder wins.
            if let Some((job, _)) = readable.iter().find(|(_, st)| st.workdir == dir) {
                return Ok((*job).clone());
            }
        }
    }
    let here = canon.unwrap_or_else(|| cwd.to_path_buf());
    Err(Failure {
        code: NOT_FOUND,
        message: not_found_message(&here, readable.first().copied()),
    })
}

fn not_found_message(here: &Path, newest: Option<(&Job, &JobState)>) -> String {
    let looked = format!(
        "no job matches `last`: no job ran in {} or a folder above it",
        crate::shown_path(here)
    );
    match newest {
        None => format!(
            "{looked}, and the store has no jobs yet; start one with `cofferdam run -- COMMAND`"
        ),
        Some((job, state)) => format!(
            "{looked}; the newest job is {} (workdir {}): give its id, e.g. `cofferdam status {}`, \
             or run from its workdir; `cofferdam jobs` lists them all",
            job.id(),
            crate::shown_path(&state.workdir),
            job.id()
        ),
    }
}

/// The bundle file `bundle verify` reads: `arg` itself when it is a file, else the bundle
/// of the job it addresses (`last`, an id prefix, a job directory).
pub fn bundle_file(arg: &Path, store: Option<&JobStore>, cwd: &Path) -> Result<PathBuf, Failure> {
    if arg.is_file() {
        return Ok(arg.to_path_buf());
    }
    let not_readable = |why: String| {
        Failure::usage(format!(
            "{}: cannot read: {why}; give a run-bundle.json, a job id or `last`",
            arg.display()
        ))
    };
    let (Some(store), Some(address)) = (store, arg.to_str()) else {
        return Err(not_readable("no such file".into()));
    };
    match resolve(store, address, cwd) {
        Ok(job) => Ok(job.bundle_path()),
        Err(f) if arg.exists() => Err(not_readable(f.message)),
        Err(f) if address == "last" || f.code != NOT_FOUND => Err(f),
        Err(_) => Err(not_readable(
            "no such file, and no job has that id".to_owned(),
        )),
    }
}
