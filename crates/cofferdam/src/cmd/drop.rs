//! `cofferdam drop JOB [--path P]… [--path-bytes HEX]… [--exclude GLOB]…`: discard a job's
//! stage, or only some of its changes. The workdir is not touched, except that the
//! leftovers of an interrupted apply are cleaned up first (paths it had written stay
//! written). The job's records (`job.json` → `discarded`, the bundle, the trace with a
//! `dropped` event) stay, so `jobs` and `status` still describe it.
//!
//! A per-path drop (`cofferdam_stage::select::select_drop` picks the changes) is one atomic
//! write of the apply ledger (its `dropped` set): the files stay in `upper/` until the
//! whole stage goes, so a drop interrupted at any point leaves the old stage or the new
//! one, both of which review and apply accept. A per-path drop that takes everything still
//! staged is the whole drop.

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
use cofferdam_stage::select::{self, DropBecause, DropSelection, Glob};
use cofferdam_stage::trace_log::TraceLog;
use serde_json::json;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `--path-bytes HEX` arguments as target-relative paths.
pub(crate) fn hex_paths(args: &[String], target: &Path) -> Result<Vec<Vec<u8>>, Failure> {
    args.iter()
        .map(|a| select::path_from_hex(a, target.as_os_str().as_bytes()).map_err(Failure::usage))
        .collect()
}

/// What a per-path drop asked for.
struct Wanted {
    /// Target-relative paths (`--path` and `--path-bytes`); everything when only
    /// `--exclude` was given.
    paths: Vec<Vec<u8>>,
    /// `--exclude`.
    excludes: Vec<Glob>,
}

impl Wanted {
    fn of(a: &DropArgs, workdir: &Path, cwd: &Path) -> Result<Option<Wanted>, Failure> {
        if a.paths.is_empty() && a.path_bytes.is_empty() && a.exclude.is_empty() {
            return Ok(None);
        }
        let mut paths = crate::cmd::jobrules::normalize_paths(&a.paths, workdir, cwd)?;
        paths.extend(hex_paths(&a.path_bytes, workdir)?);
        if paths.is_empty() {
            paths.push(Vec::new());
        }
        let excludes = a
            .exclude
            .iter()
            .map(|g| Glob::new(g.as_os_str().as_bytes()).map_err(Failure::usage))
            .collect::<Result<_, _>>()?;
        Ok(Some(Wanted { paths, excludes }))
    }
}

/// The changes of `stage` a drop of `w` discards.
fn drop_selection(stage: &Stage, w: &Wanted) -> Result<DropSelection, Failure> {
    let nodes = stage.nodes();
    select::select_drop(&nodes, &w.paths, &w.excludes).map_err(Failure::usage)
}

/// Why the closure added a path, for display.
fn because_text(b: &DropBecause) -> String {
    match b {
        DropBecause::Holds(p) => format!(
            "replaced whole, and it holds {}",
            cofferdam_stage::seal::display_path(p).0
        ),
        DropBecause::Inside(p) => {
            format!("inside {}", cofferdam_stage::seal::display_path(p).0)
        }
    }
}

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
    let state = settled_state(&job, &lock)?;
    if a.paths.is_empty() && a.path_bytes.is_empty() && a.exclude.is_empty() {
        // Room for the state write that comes before the stage's removal, on a full disk
        // too.
        job.release_drop_reserve();
    }
    let id = job.id().to_owned();
    let mut trace = TraceLog::open(&job.trace_path()).map_err(Failure::setup)?;
    let wanted = Wanted::of(a, &state.workdir, &env.places.cwd)?;
    // A per-path drop that takes everything still staged: the paths it named.
    let mut whole_paths: Option<Vec<String>> = None;

    let (discarded, message) = match state.state {
        StageState::Discarded if wanted.is_some() => {
            return Err(Failure::usage(format!(
                "job {id} was dropped already: nothing of it is staged"
            )));
        }
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
                    .filter(|c| !ledger.is_settled(&c.path))
                    .count(),
                None => state.changed_files.unwrap_or(0),
            };
            if let Some(w) = &wanted {
                let Some(mut st) = stage.clone() else {
                    return Err(Failure::usage(format!(
                        "job {id}'s stage was never sealed, so its changes have no paths to                          pick; `cofferdam drop {id}` discards it whole"
                    )));
                };
                st.ledger = ledger.clone();
                let sel = drop_selection(&st, w)?;
                if sel.indices.is_empty() {
                    return Err(Failure::usage(
                        "nothing selected: every change at those paths matched an --exclude",
                    ));
                }
                if sel.indices.len() < remaining {
                    drop(lock);
                    return per_path(&job, &mut st, &sel, &mut trace, json, s);
                }
                whole_paths = Some(
                    sel.indices
                        .iter()
                        .map(|&i| st.changes[i].display.clone())
                        .collect(),
                );
            }
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
                    paths: None,
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
                    paths: whole_paths,
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

/// Discard the changes `sel` picked: one atomic ledger write, then the trace event.
fn per_path(
    job: &cofferdam_stage::job::Job,
    stage: &mut Stage,
    sel: &DropSelection,
    trace: &mut TraceLog,
    json: bool,
    s: Style,
) -> Result<u8, Failure> {
    let id = job.id();
    let paths: Vec<&[u8]> = sel
        .indices
        .iter()
        .map(|&i| stage.changes[i].path.as_slice())
        .collect();
    stage.ledger.drop_paths(paths);
    stage
        .ledger
        .store(&job.ledger_path())
        .map_err(Failure::setup)?;
    drop_test_hook();
    let shown: Vec<String> = sel
        .indices
        .iter()
        .map(|&i| stage.changes[i].display.clone())
        .collect();
    let dropped = TraceEventKind::Dropped {
        discarded_changes: sel.indices.len(),
        paths: Some(shown.clone()),
    };
    crate::trace_append::append(trace, vec![(now_ms(), dropped)], "the drop");
    let remaining = stage.remaining().count();
    if json {
        let added: Vec<serde_json::Value> = sel
            .added
            .iter()
            .map(|(i, b)| json!({"path": stage.changes[*i].display, "because": because_text(b)}))
            .collect();
        let list: Vec<serde_json::Value> = sel
            .indices
            .iter()
            .map(|&i| {
                let c = &stage.changes[i];
                json!({"path": c.display, "kind": c.kind})
            })
            .collect();
        crate::print_json(&json!({
            "job": id,
            "state": "staged",
            "dropped": list,
            "added": added,
            "discarded_changes": sel.indices.len(),
            "remaining": remaining,
        }))?;
        return Ok(OK);
    }
    let mut o = format!(
        "{}\n",
        s.good(&format!(
            "dropped {} staged change(s) of job {id}; {remaining} stay staged; the workdir was \
             not touched",
            sel.indices.len()
        ))
    );
    for (n, &i) in sel.indices.iter().enumerate() {
        if n == 200 {
            o.push_str(&format!("  … and {} more\n", sel.indices.len() - n));
            break;
        }
        let c = &stage.changes[i];
        let why = sel
            .added
            .iter()
            .find(|(j, _)| *j == i)
            .map(|(_, b)| format!(" ({})", because_text(b)))
            .unwrap_or_default();
        o.push_str(&format!(
            "  - {}{}\n",
            crate::shown_text(&c.display),
            crate::shown_text(&why)
        ));
    }
    crate::write_stdout(o.as_bytes())?;
    Ok(OK)
}

/// Test-only (debug builds): `COFFERDAM_TEST_DROP_KILL_AT=ledger` kills the drop right after
/// its ledger write, before the trace event.
#[cfg(debug_assertions)]
fn drop_test_hook() {
    if std::env::var("COFFERDAM_TEST_DROP_KILL_AT").as_deref() == Ok("ledger") {
        let me = rustix::process::getpid();
        let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
    }
}

#[cfg(not(debug_assertions))]
fn drop_test_hook() {}
