//! `cofferdam gc` (alias `prune`): remove whole jobs (stage and records) picked by state
//! (default: the finished ones, `applied` and `discarded`), age and workdir, or with
//! `--dry-run` say what would go. A live job, or one another command holds (its lock), is
//! never removed; a job kept in a `--stage` directory loses its store entry only (the
//! directory the user named is left, and said so). A job that holds checkpoints is kept
//! (and said so) unless `--force`, which removes it with them. Says what it freed.

use crate::cli::GcArgs;
use crate::cmd::jobrules::job_failure;
use crate::cmd::status::{disk_bytes, human_bytes};
use crate::context;
use crate::exit::{Failure, OK};
use crate::style::Style;
use cofferdam_stage::job::{JobError, JobStore, JobSummary, StageState};
use serde_json::json;
use std::fmt::Write as _;

const STATES: [(&str, StageState); 4] = [
    ("staged", StageState::Staged),
    ("applied", StageState::Applied),
    ("discarded", StageState::Discarded),
    ("interrupted", StageState::Interrupted),
];

/// `cofferdam gc`.
pub fn gc(a: &GcArgs, json: bool, s: Style) -> Result<u8, Failure> {
    let env = context::env()?;
    let states: Vec<StageState> = if a.state.is_empty() {
        vec![StageState::Applied, StageState::Discarded]
    } else {
        a.state
            .iter()
            .map(|w| {
                STATES
                    .iter()
                    .find(|(name, _)| name == w)
                    .map(|(_, st)| *st)
                    .ok_or_else(|| {
                        Failure::usage(format!(
                            "--state {w}: gc takes staged, applied, discarded or interrupted \
                             (a live job is never removed)"
                        ))
                    })
            })
            .collect::<Result<_, _>>()?
    };
    let max_age_ms = match &a.older_than {
        None => None,
        Some(t) => Some(
            humantime::parse_duration(t)
                .map_err(|e| {
                    Failure::usage(format!("--older-than {t}: {e}; give e.g. 7d, 12h or 30m"))
                })?
                .as_millis(),
        ),
    };
    let under = match &a.workdir {
        None => None,
        Some(w) => Some(
            std::fs::canonicalize(env.places.cwd.join(w))
                .map_err(|e| Failure::usage(format!("--workdir {}: {e}", w.display())))?,
        ),
    };
    let store = JobStore::open(&env.storage_root).map_err(job_failure)?;
    let now = u128::from(crate::cmd::jobrules::now_ms());
    let (mut removed, mut skipped, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    let mut freed = 0u64;
    for entry in store.list().map_err(job_failure)? {
        let JobSummary::Readable { job, state } = entry else {
            continue;
        };
        let live = state.state == StageState::Active && job.is_locked().ok() != Some(false);
        let effective = if state.state == StageState::Active && !live {
            StageState::Interrupted
        } else {
            state.state
        };
        let when = state
            .finished_at_unix_ms
            .unwrap_or(state.created_at_unix_ms);
        let picked = states.contains(&effective)
            && under.as_ref().is_none_or(|u| state.workdir.starts_with(u))
            && max_age_ms.is_none_or(|age| now.saturating_sub(u128::from(when)) >= age);
        if !picked {
            continue;
        }
        let id = job.id().to_owned();
        if live {
            skipped.push((id, "its run is still going".to_owned()));
            continue;
        }
        let held = crate::cmd::checkpoint::count(&job);
        if held > 0 && !a.force {
            skipped.push((
                id,
                format!(
                    "it holds {held} checkpoint(s); `cofferdam checkpoint delete` them first, or \
                     pass --force to remove the job with them"
                ),
            ));
            continue;
        }
        let lock = match job.try_lock() {
            Ok(l) => l,
            Err(JobError::Busy { .. }) => {
                skipped.push((id, "another cofferdam command holds it".to_owned()));
                continue;
            }
            Err(e) => {
                skipped.push((id, e.to_string()));
                continue;
            }
        };
        let entry_path = store.root().join("jobs").join(&id);
        let linked = std::fs::symlink_metadata(&entry_path).is_ok_and(|m| m.is_symlink());
        let size = if linked { 0 } else { disk_bytes(job.dir()) };
        if !a.dry_run {
            let result = if linked {
                std::fs::remove_file(&entry_path).map_err(|e| e.to_string())
            } else {
                job.remove_stage()
                    .map_err(|e| e.to_string())
                    .and_then(|()| std::fs::remove_dir_all(job.dir()).map_err(|e| e.to_string()))
            };
            if let Err(e) = result {
                skipped.push((id, format!("cannot remove it: {e}")));
                continue;
            }
        }
        drop(lock);
        if linked {
            notes.push(format!(
                "{id} was kept in {} (--stage): its store entry {} but the directory is left; \
                 remove it yourself when done",
                crate::shown_path(job.dir()),
                if a.dry_run { "would go" } else { "is gone" }
            ));
        }
        freed += size;
        removed.push((id, size));
    }
    if json {
        crate::print_json(&json!({
            "dry_run": a.dry_run,
            "removed": removed.iter().map(|(id, b)| json!({"id": id, "disk_bytes": b}))
                .collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|(id, why)| json!({"id": id, "reason": why}))
                .collect::<Vec<_>>(),
            "freed_bytes": freed,
            "notes": notes,
        }))?;
        return Ok(OK);
    }
    let mut o = String::new();
    let verb = if a.dry_run { "would remove" } else { "removed" };
    for (id, size) in &removed {
        let _ = writeln!(o, "{verb} {id}  {}", human_bytes(*size));
    }
    for (id, why) in &skipped {
        let _ = writeln!(o, "{} {id}: {why}", s.warn("kept"));
    }
    for n in &notes {
        let _ = writeln!(o, "note: {n}");
    }
    let _ = writeln!(
        o,
        "{}",
        s.good(&format!(
            "{} {} job(s), {} {}",
            if a.dry_run { "would remove" } else { "removed" },
            removed.len(),
            human_bytes(freed),
            if a.dry_run { "to free" } else { "freed" }
        ))
    );
    crate::write_stdout(o.as_bytes())?;
    Ok(OK)
}
