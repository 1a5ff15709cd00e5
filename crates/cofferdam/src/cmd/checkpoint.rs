//! `cofferdam checkpoint create|list|show|delete`: immutable savepoints of a stopped job's
//! stage (`cofferdam_stage::checkpoint` makes and reads them). Creating and deleting hold
//! the job lock; listing and showing read only. `show` re-reads the checkpoint and says
//! whether it still has the digest it was made with.

use crate::cli::CheckpointCommand;
use crate::cmd::jobref;
use crate::cmd::jobrules::{job_failure, lock, now_ms};
use crate::cmd::recover::settled_state;
use crate::context;
use crate::exit::{BUSY, Failure, NOT_FOUND, OK, USAGE};
use cofferdam_stage::checkpoint::{self, Checkpoint, CheckpointError};
use cofferdam_stage::job::{Job, JobStore, JobSummary, StageState};
use serde_json::{Value, json};

/// `cofferdam checkpoint …`.
pub fn checkpoint(c: &CheckpointCommand, json: bool) -> Result<u8, Failure> {
    match c {
        CheckpointCommand::Create { job, name } => create(job, name.as_deref(), json),
        CheckpointCommand::List { job } => list(job.as_deref(), json),
        CheckpointCommand::Show { id } => show(id, json),
        CheckpointCommand::Delete { id } => delete(id, json),
    }
}

fn failure(e: CheckpointError) -> Failure {
    let code = match e {
        CheckpointError::BadName(_) | CheckpointError::NameTaken { .. } => USAGE,
        CheckpointError::NoStage { .. } | CheckpointError::Unsupported { .. } => USAGE,
        _ => crate::exit::SETUP,
    };
    Failure {
        code,
        message: e.to_string(),
    }
}

fn create(address: &str, name: Option<&str>, json: bool) -> Result<u8, Failure> {
    if let Some(n) = name {
        checkpoint::check_name(n).map_err(failure)?;
    }
    let (_env, job) = jobref::open(address)?;
    let held = lock(&job, "checkpoint")?;
    let state = settled_state(&job, &held)?;
    let id = job.id();
    match state.state {
        StageState::Staged => {}
        StageState::Active => {
            return Err(Failure {
                code: BUSY,
                message: format!("job {id} is still running; checkpoint it when it has ended"),
            });
        }
        other => {
            let why = match other {
                StageState::Applied => "every change was applied, so its stage is spent",
                StageState::Discarded => "it was dropped, so it has no stage",
                _ => "it was interrupted before its stage was sealed",
            };
            return Err(Failure::usage(format!(
                "job {id} cannot be checkpointed: {why}; a checkpoint is taken of a job whose \
                 run ended and whose changes are staged (`cofferdam jobs --state staged`)"
            )));
        }
    }
    let run_id = crate::cmd::jobrules::bundle_run_id(&job);
    let made = checkpoint::create(&job, &run_id, name, now_ms()).map_err(failure)?;
    drop(held);
    if json {
        crate::print_json(&describe(&made, None))?;
    } else {
        let m = &made.manifest;
        println!(
            "checkpoint {} of job {id}{}: {} entries ({} files, {}), {}",
            m.id,
            m.name.as_ref().map_or(String::new(), |n| format!(" ({n})")),
            m.counts.entries,
            m.counts.files,
            crate::cmd::status::human_bytes(m.counts.bytes),
            m.digest
        );
    }
    Ok(OK)
}

fn list(address: Option<&str>, json: bool) -> Result<u8, Failure> {
    let found: Vec<Checkpoint> = match address {
        Some(a) => {
            let (_env, job) = jobref::open(a)?;
            checkpoint::list(&job).map_err(failure)?
        }
        None => every()?.into_iter().collect(),
    };
    if json {
        let docs: Vec<Value> = found.iter().map(|c| describe(c, None)).collect();
        crate::print_json(&docs)?;
        return Ok(OK);
    }
    if found.is_empty() {
        println!("no checkpoints; make one with `cofferdam checkpoint create JOB`");
    }
    for c in &found {
        let m = &c.manifest;
        println!(
            "{}  {}  {:<16} {} entries  {}",
            m.id,
            m.job_id,
            m.name.as_deref().unwrap_or("-"),
            m.counts.entries,
            crate::cmd::status::human_bytes(m.counts.bytes)
        );
    }
    Ok(OK)
}

fn show(address: &str, json: bool) -> Result<u8, Failure> {
    let c = find(address)?;
    let current = c.current_digest().map_err(failure)?;
    let intact = current == c.manifest.digest;
    if json {
        crate::print_json(&describe(&c, Some(&current)))?;
    } else {
        let m = &c.manifest;
        println!("checkpoint {}", m.id);
        if let Some(n) = &m.name {
            println!("  name        {n}");
        }
        println!("  job         {}", m.job_id);
        println!("  run         {}", m.run_id);
        println!("  created     {} (unix ms)", m.created_at_unix_ms);
        println!(
            "  holds       {} entries: {} files ({}), {} directories ({} opaque), {} symlinks, \
             {} whiteouts",
            m.counts.entries,
            m.counts.files,
            crate::cmd::status::human_bytes(m.counts.bytes),
            m.counts.directories,
            m.counts.opaque_directories,
            m.counts.symlinks,
            m.counts.whiteouts
        );
        println!(
            "  data        {} linked to the stage's, {} reflinked, {} copied",
            m.counts.linked_files, m.counts.reflinked_files, m.counts.copied_files
        );
        println!("  digest      {}", m.digest);
        println!(
            "  intact      {}",
            if intact {
                "yes (re-read now)".to_owned()
            } else {
                format!("NO: it now reads {current}")
            }
        );
    }
    Ok(if intact { OK } else { crate::exit::INVALID })
}

fn delete(address: &str, json: bool) -> Result<u8, Failure> {
    let c = find(address)?;
    let env = context::env()?;
    let store = JobStore::open(&env.storage_root).map_err(job_failure)?;
    let job = store
        .resolve(&c.manifest.job_id, &env.places.cwd)
        .map_err(job_failure)?;
    let _held = lock(&job, "delete a checkpoint of")?;
    checkpoint::delete(&c).map_err(failure)?;
    if json {
        crate::print_json(&json!({"deleted": c.manifest.id, "job": c.manifest.job_id}))?;
    } else {
        println!(
            "deleted checkpoint {} of job {}",
            c.manifest.id, c.manifest.job_id
        );
    }
    Ok(OK)
}

/// The `--json` form of a checkpoint; with `current`, the digest re-read now.
fn describe(c: &Checkpoint, current: Option<&str>) -> Value {
    let mut v = json!({
        "id": c.manifest.id,
        "name": c.manifest.name,
        "job": c.manifest.job_id,
        "run_id": c.manifest.run_id,
        "created_at_unix_ms": c.manifest.created_at_unix_ms,
        "counts": c.manifest.counts,
        "digest": c.manifest.digest,
        "path": c.dir,
    });
    if let (Some(cur), Value::Object(o)) = (current, &mut v) {
        o.insert("current_digest".into(), json!(cur));
        o.insert("intact".into(), json!(cur == c.manifest.digest));
    }
    v
}

/// Every checkpoint of every readable job, oldest first.
fn every() -> Result<Vec<Checkpoint>, Failure> {
    let env = context::env()?;
    let store = JobStore::open(&env.storage_root).map_err(job_failure)?;
    let mut out = Vec::new();
    for s in store.list().map_err(job_failure)? {
        if let JobSummary::Readable { job, .. } = s {
            out.extend(checkpoint::list(&job).map_err(failure)?);
        }
    }
    out.sort_by(|a, b| a.manifest.id.cmp(&b.manifest.id));
    Ok(out)
}

/// The one checkpoint `address` picks (id, id prefix, or name), or exit 4 / 2.
fn find(address: &str) -> Result<Checkpoint, Failure> {
    let mut hits: Vec<Checkpoint> = every()?
        .into_iter()
        .filter(|c| checkpoint::matches(&c.manifest, address))
        .collect();
    match hits.len() {
        1 => Ok(hits.remove(0)),
        0 => Err(Failure {
            code: NOT_FOUND,
            message: format!(
                "no checkpoint matches `{}`; `cofferdam checkpoint list` lists them (give an id, \
                 at least 4 characters of one, or a name)",
                crate::shown_text(address)
            ),
        }),
        _ => Err(Failure {
            code: NOT_FOUND,
            message: format!(
                "`{}` matches several checkpoints ({}); give more of the id",
                crate::shown_text(address),
                hits.iter()
                    .map(|c| c.manifest.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// How many checkpoints `job` holds (for `gc`, which keeps such jobs unless `--force`); a
/// job whose checkpoints cannot be listed counts as holding one, so it is kept.
pub(crate) fn count(job: &Job) -> usize {
    checkpoint::count(job).unwrap_or(1)
}
