//! The job rules the job commands share (`apply`, `diff`, `drop`, `kill`, `status`, `gc`,
//! `recover`): the exit codes of a missing or busy job, taking the job lock, which states
//! can be reviewed or applied, `--path` arguments, finishing an interrupted apply's
//! bookkeeping, and the change lists' words. Depends on no other command module, so every
//! command (and `recover`) can import it.

use crate::exit::{BUSY, Failure, NOT_FOUND, SETUP, USAGE};
use crate::style::Style;
use cofferdam_record::bundle::ChangeKind;
use cofferdam_record::trace::{ApplyOutcome, ApplyPathOutcome, TraceEventKind};
use cofferdam_stage::apply::{self, Recovery};
use cofferdam_stage::job::{Job, JobError, JobLock, JobState, StageState};
use cofferdam_stage::review::Stage;
use cofferdam_stage::select;
use cofferdam_stage::sensitive::Reason;
use cofferdam_stage::trace_log::TraceLog;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Map a job-store error to its exit code.
pub(crate) fn job_failure(e: JobError) -> Failure {
    let code = match e {
        JobError::NotFound { .. } | JobError::Ambiguous { .. } => NOT_FOUND,
        JobError::Busy { .. } => BUSY,
        _ => SETUP,
    };
    let message = match &e {
        JobError::NotFound { .. } => {
            format!("{e}; `cofferdam jobs` lists the jobs")
        }
        _ => e.to_string(),
    };
    Failure { code, message }
}

/// How long [`lock`] waits for a job that is not running: its supervisor marks it staged
/// just before it lets go of the lock, and a command started at that moment (a script
/// applying each job the moment it is listed as staged) should not be refused for it.
const SETTLE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Take the job lock, or fail with exit 5 and why. A job that is not `active` is waited for
/// a moment ([`SETTLE_WAIT`]) first.
pub(crate) fn lock(job: &Job, doing: &str) -> Result<JobLock, Failure> {
    let deadline = std::time::Instant::now() + SETTLE_WAIT;
    let mut attempt = job.try_lock();
    while matches!(attempt, Err(JobError::Busy { .. }))
        && std::time::Instant::now() < deadline
        && !matches!(
            job.state(),
            Ok(JobState {
                state: StageState::Active,
                ..
            })
        )
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
        attempt = job.try_lock();
    }
    match attempt {
        Ok(l) => Ok(l),
        Err(JobError::Busy { id }) => {
            let why = match job.state() {
                Ok(JobState {
                    state: StageState::Active,
                    pid,
                    ..
                }) => format!(
                    "its run is still going{}; wait for it to end (or stop it with Ctrl-C in its \
                     terminal), then {doing} it",
                    pid.map_or(String::new(), |p| format!(" (supervisor pid {p})"))
                ),
                _ => format!(
                    "another cofferdam command (an apply or a drop) is working on it; wait for \
                     it to finish, then {doing} it"
                ),
            };
            Err(Failure {
                code: BUSY,
                message: format!("job {id} is busy: {why}"),
            })
        }
        Err(e) => Err(job_failure(e)),
    }
}

/// Refuse jobs whose stage cannot be reviewed or applied.
pub(crate) fn require_sealed(job: &Job, state: &JobState, doing: &str) -> Result<(), Failure> {
    let id = job.id();
    let message = match state.state {
        StageState::Staged | StageState::Applied => return Ok(()),
        StageState::Discarded => format!(
            "job {id} was dropped: its stage is discarded, so there is nothing to {doing}; run \
             the command again with `cofferdam run`"
        ),
        StageState::Interrupted => format!(
            "job {id} was interrupted before its stage was sealed (its supervisor ended \
             abruptly), so its changes were never classified and cannot be {doing}ed; `cofferdam \
             status {id}` shows what is known, `cofferdam drop {id}` discards it"
        ),
        StageState::Active => format!("job {id} is still running; {doing} it when it has ended"),
    };
    Err(Failure {
        code: if state.state == StageState::Active {
            BUSY
        } else {
            USAGE
        },
        message,
    })
}

/// A failure loading the stage's records.
pub(crate) fn stage_failure(e: impl std::fmt::Display) -> Failure {
    Failure::setup(e)
}

/// Where the current directory is inside `target`, as bytes (`Some(b"")` at its root).
pub(crate) fn cwd_in(target: &Path, cwd: &Path) -> Option<Vec<u8>> {
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let target = std::fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
    cwd.strip_prefix(&target)
        .ok()
        .map(|r| r.as_os_str().as_bytes().to_vec())
}

/// Normalize `--path` arguments against the job's target.
pub(crate) fn normalize_paths(
    args: &[PathBuf],
    target: &Path,
    cwd: &Path,
) -> Result<Vec<Vec<u8>>, Failure> {
    let base = cwd_in(target, cwd);
    args.iter()
        .map(|a| {
            select::normalize_arg(
                a.as_os_str().as_bytes(),
                base.as_deref(),
                target.as_os_str().as_bytes(),
            )
            .map_err(Failure::usage)
        })
        .collect()
}

pub(crate) use crate::now_ms;

/// A change list's mode note (`  mode 0777 (world-writable, executable)`), painted loud
/// when the mode stands out; empty when there is none to show
/// (`cofferdam_stage::diff::listed_mode`).
pub(crate) fn painted_mode(k: ChangeKind, mode: Option<u32>, is_dir: bool, s: Style) -> String {
    match cofferdam_stage::diff::listed_mode(k, mode, is_dir) {
        Some((text, true)) => s.bad(&format!("  {text}")),
        Some((text, false)) => s.dim(&format!("  {text}")),
        None => String::new(),
    }
}

pub(crate) fn kind_word(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::TypeChanged => "type changed",
        ChangeKind::Opaque => "replaced",
    }
}

/// Finish an interrupted batch's bookkeeping, telling the user and the trace.
pub(crate) fn finish_interrupted(
    job: &Job,
    workdir: &Path,
    ledger: &mut cofferdam_stage::ledger::Ledger,
    trace: &mut TraceLog,
    kind_of: &dyn Fn(&[u8]) -> ChangeKind,
    finishing: bool,
) -> Result<Option<Recovery>, Failure> {
    if ledger.batch.is_none() {
        return Ok(None);
    }
    let r = apply::recover(workdir, &job.ledger_path(), ledger).map_err(Failure::setup)?;
    if let Some(r) = &r {
        let at = now_ms();
        let mut events: Vec<_> = r
            .written()
            .iter()
            .map(|p| {
                // Written with some hunks: still staged (`Ledger::partial`).
                let partial = ledger.partial(p).is_some() && !ledger.is_applied(p);
                let kind = TraceEventKind::ApplyPath {
                    path: cofferdam_stage::seal::display_path(p).0,
                    kind: kind_of(p),
                    outcome: if partial {
                        ApplyPathOutcome::Partial
                    } else {
                        ApplyPathOutcome::Applied
                    },
                };
                (at, kind)
            })
            .collect();
        events.push((
            at,
            TraceEventKind::ApplyFinished {
                outcome: ApplyOutcome::Failed,
                applied: r.written().len(),
                conflicts: 0,
            },
        ));
        crate::trace_append::append(trace, events, "the interrupted apply's outcome");
        let then = if finishing {
            "applying them now, after a fresh conflict check"
        } else {
            "they stay as they are"
        };
        eprintln!(
            "cofferdam: an earlier apply of job {} was interrupted: {} path(s) had been \
             written, {} had not; {then}",
            job.id(),
            r.written().len(),
            r.not_written.len(),
        );
        for p in &r.restored {
            eprintln!(
                "cofferdam: {} was put back as it was before the interrupted apply",
                cofferdam_stage::seal::display_path(p).0
            );
        }
    }
    Ok(r)
}

/// Each change's kind by path.
pub(crate) fn kinds_of(stage: &Stage) -> std::collections::HashMap<Vec<u8>, ChangeKind> {
    stage
        .changes
        .iter()
        .map(|c| (c.path.clone(), c.kind))
        .collect()
}

/// Why each change of `stage` is sensitive (`None` for most), reading the git config files
/// the classifier asks for from the stage and the workdir. Applied changes are not read.
pub(crate) fn sensitivities(
    stage: &Stage,
    workdir: &Path,
    upper: &Path,
) -> Result<Vec<Option<Reason>>, Failure> {
    use std::os::fd::AsFd;
    let open = |p: &Path| {
        std::fs::File::open(p)
            .map_err(|e| Failure::setup(format!("cannot open {}: {e}", p.display())))
    };
    let target = open(workdir)?;
    let upper = open(upper)?;
    Ok((0..stage.changes.len())
        .map(|i| {
            stage.is_remaining(i).then(|| {
                cofferdam_stage::diff::sensitivity(target.as_fd(), upper.as_fd(), &stage.changes[i])
            })?
        })
        .collect())
}

/// The run id `job`'s bundle records (`run.run_id`), else the job's id. Read by a partial
/// parse that skips everything else: a checkpoint of a 10,000-change stage does not pay
/// for the strict reader's pass over the bundle's change list just for one string.
pub(crate) fn bundle_run_id(job: &Job) -> String {
    #[derive(serde::Deserialize)]
    struct Head {
        run: HeadRun,
    }
    #[derive(serde::Deserialize)]
    struct HeadRun {
        run_id: String,
    }
    std::fs::read(job.bundle_path())
        .ok()
        .and_then(|b| serde_json::from_slice::<Head>(&b).ok())
        .map_or_else(|| job.id().to_owned(), |h| h.run.run_id)
}
