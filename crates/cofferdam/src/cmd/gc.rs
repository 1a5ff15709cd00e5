//! `cofferdam gc` (alias `prune`): remove whole jobs (stage and records) picked by state
//! (default: the finished ones, `applied` and `discarded`), age and workdir, or with
//! `--dry-run` say what would go. A live job, or one another command holds (its lock), is
//! never removed; a job kept in a `--stage` directory loses its store entry only (the
//! directory the user named is left, and said so). A job that holds checkpoints is kept
//! (and said so) unless `--force`, which removes it with them. Says what it freed.
//!
//! Then the batches (`cofferdam batch`; not with `--workdir`, whose tree their copies are not
//! in): a finished batch's fresh copies whose tasks have no job left, and its record folder
//! once none of its jobs and copies is left, as `batch::collect` decides; `--older-than`
//! limits this to batches started that long ago. A running batch is never touched.

use crate::batch::collect::{self, Found, Remaining, Verdict};
use crate::batch::spec::{BATCH_LABEL, TASK_LABEL};
use crate::cli::GcArgs;
use crate::cmd::jobrules::job_failure;
use crate::cmd::status::{disk_bytes, human_bytes};
use crate::context;
use crate::exit::{Failure, OK};
use crate::style::Style;
use cofferdam_stage::job::{JobError, JobStore, JobSummary, StageState};
use serde_json::json;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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
    let (mut all, mut unreadable) = (Vec::new(), false);
    for entry in store.list().map_err(job_failure)? {
        let JobSummary::Readable { job, state } = entry else {
            unreadable = true;
            continue;
        };
        if let Some(batch) = state.labels.get(BATCH_LABEL) {
            all.push((
                job.id().to_owned(),
                Remaining {
                    batch: batch.clone(),
                    task: state.labels.get(TASK_LABEL).cloned(),
                },
            ));
        }
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
    let remaining: Vec<Remaining> = all
        .into_iter()
        .filter(|(id, _)| !removed.iter().any(|(r, _)| r == id))
        .map(|(_, r)| r)
        .collect();
    let (batches, batches_kept) = if under.is_none() {
        let ctx = BatchGc {
            root: &env.storage_root.join("batches"),
            remaining: &remaining,
            unreadable,
            now: crate::cmd::jobrules::now_ms(),
            min_age_ms: max_age_ms.map(|m| u64::try_from(m).unwrap_or(u64::MAX)),
            dry_run: a.dry_run,
        };
        collect_batches(&ctx)
    } else {
        (Vec::new(), Vec::new())
    };
    freed += batches.iter().map(|b| b.bytes).sum::<u64>();
    if json {
        crate::print_json(&json!({
            "dry_run": a.dry_run,
            "batches": batches.iter().map(|b| json!({
                "id": b.id, "copies": b.copies, "record_removed": b.record, "disk_bytes": b.bytes,
            })).collect::<Vec<_>>(),
            "batches_kept": batches_kept.iter().map(|(id, why)| json!({"id": id, "reason": why}))
                .collect::<Vec<_>>(),
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
    for b in &batches {
        let _ = writeln!(
            o,
            "{verb} batch {}: {} cop{}{}  {}",
            b.id,
            b.copies.len(),
            if b.copies.len() == 1 { "y" } else { "ies" },
            if b.record { " and its record" } else { "" },
            human_bytes(b.bytes)
        );
    }
    for (id, why) in &batches_kept {
        let _ = writeln!(o, "{} batch {id}: {why}", s.warn("kept"));
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

/// What the batch pass needs.
struct BatchGc<'a> {
    /// `batches/` under the storage root.
    root: &'a Path,
    /// The jobs left once this gc's removals are done (would be, with `--dry-run`).
    remaining: &'a [Remaining],
    /// A job entry could not be read.
    unreadable: bool,
    now: u64,
    min_age_ms: Option<u64>,
    dry_run: bool,
}

/// What went (or would go) of one batch.
struct BatchRemoved {
    id: String,
    /// The copies removed.
    copies: Vec<PathBuf>,
    /// Its record folder too.
    record: bool,
    bytes: u64,
}

/// Every batch folder: decided by `batch::collect`, removed here unless a dry run. A
/// dot-name is a batch being made; a batch of an older cofferdam (no lock) counts as
/// running unless its summary was written.
fn collect_batches(ctx: &BatchGc<'_>) -> (Vec<BatchRemoved>, Vec<(String, String)>) {
    let (mut done, mut kept) = (Vec::new(), Vec::new());
    let Ok(entries) = std::fs::read_dir(ctx.root) else {
        return (done, kept);
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    for id in names {
        let dir = ctx.root.join(&id);
        let (running, _lock) = batch_lock(&dir);
        let copies_root = copies_root(&dir, &id);
        let copies = copies_root
            .as_ref()
            .and_then(|r| std::fs::read_dir(r).ok())
            .map(|it| {
                it.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        let found = Found {
            id: id.clone(),
            running,
            copies,
        };
        let age = collect::started_ms(&id).map(|t| ctx.now.saturating_sub(t));
        match collect::decide(&found, ctx.remaining, ctx.unreadable, age, ctx.min_age_ms) {
            Verdict::Keep(why) => kept.push((id, why)),
            Verdict::Collect { copies, record } => {
                let mut gone = BatchRemoved {
                    id: id.clone(),
                    copies: Vec::new(),
                    record: false,
                    bytes: 0,
                };
                let mut failed = None;
                let Some(root) = copies_root.as_ref() else {
                    // No copies root: nothing but the record to remove.
                    if record {
                        gone.bytes = disk_bytes(&dir);
                        if ctx.dry_run || std::fs::remove_dir_all(&dir).is_ok() {
                            gone.record = true;
                            done.push(gone);
                        } else {
                            kept.push((id, "cannot remove its record folder".into()));
                        }
                    }
                    continue;
                };
                for n in copies {
                    let copy = root.join(&n);
                    let size = disk_bytes(&copy);
                    if !ctx.dry_run
                        && let Err(e) = std::fs::remove_dir_all(&copy)
                    {
                        failed = Some(format!(
                            "cannot remove its copy {}: {e}",
                            crate::shown_path(&copy)
                        ));
                        continue;
                    }
                    gone.bytes += size;
                    gone.copies.push(copy);
                }
                if record && failed.is_none() {
                    gone.bytes += disk_bytes(&dir);
                    if !ctx.dry_run {
                        let _ = std::fs::remove_dir(root);
                        if let Err(e) = std::fs::remove_dir_all(&dir) {
                            failed = Some(format!("cannot remove its record folder: {e}"));
                        }
                    }
                    gone.record = failed.is_none();
                }
                if let Some(why) = failed {
                    kept.push((id, why));
                }
                if !gone.copies.is_empty() || gone.record {
                    done.push(gone);
                }
            }
        }
    }
    (done, kept)
}

/// Whether the batch of `dir` runs (its lock held by another process), and the lock held
/// here while gc works on it. No lock file: a batch of an older cofferdam, finished when
/// its summary exists.
fn batch_lock(dir: &Path) -> (bool, Option<std::fs::File>) {
    let Ok(file) = std::fs::File::open(dir.join(crate::cmd::batch::LOCK)) else {
        return (!dir.join("summary.json").exists(), None);
    };
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => (false, Some(file)),
        Err(_) => (true, None),
    }
}

/// The batch's copies folder, from its record (or where an older cofferdam put it), only
/// when it is a real folder named for this batch and owned by this user: the record is in
/// the store, but a path removed whole is checked anyway.
fn copies_root(dir: &Path, id: &str) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let recorded = std::fs::read(dir.join(crate::cmd::batch::RECORD))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["copies"].as_str().map(PathBuf::from));
    let path =
        recorded.unwrap_or_else(|| std::env::temp_dir().join(format!("cofferdam-batch-{id}")));
    let named = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy() == format!("cofferdam-batch-{id}"));
    let meta = std::fs::symlink_metadata(&path).ok()?;
    (named && meta.is_dir() && meta.uid() == rustix::process::geteuid().as_raw()).then_some(path)
}
