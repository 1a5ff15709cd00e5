//! A job whose supervisor died (SIGKILL, a crash, a power cut): its sandbox died with it
//! through parent-death signals (sealed tier: the init and pid 1 are SIGKILLed and the pid
//! namespace ends with pid 1; copy tiers: the init's parent-death signal is
//! `cofferdam_sandbox::reaper::END_TREE`, whose handler kills and reaps every descendant,
//! orphans included, before the init exits, and the command dies with the init). One
//! residual on the copy tiers: a process detached after its init was SIGKILLed (the command
//! runs as the same user and can do that) belongs to the supervisor, a child subreaper, and
//! when the supervisor dies as well it is handed to the host's init and is not found this
//! way. Its stage is intact but was never sealed, and it has no Run Bundle.
//! `status --review` and `apply` seal it on demand with [`seal_interrupted`]: the
//! stage is classified and fingerprinted as at the end of a run, and the provisional bundle
//! the run wrote when it started (`lifecycle::records::write_provisional`: the policy, the plan, what the
//! supervisor itself installed) becomes the Run Bundle, with the filesystem filled in and a
//! `run.failure` that says the supervisor ended abruptly and nothing is known about how the
//! command ended. The sandbox's own observations never reached the supervisor, so none are
//! claimed: the safety booleans derived from them are false.

use crate::cmd::jobrules::{job_failure, now_ms};
use crate::exit::Failure;
use crate::lifecycle::records::{self, provisional_path};
use cofferdam_record::bundle::{
    ControlMechanism, FailureKind, RunBundle, RunFailure, RunState, SafetySummary,
};
use cofferdam_record::read_bundle;
use cofferdam_stage::job::{Durability, Job, JobLock, JobState, StageState};
use cofferdam_stage::trace_log::TraceLog;

/// Read `job.json`; with the lock held, an `active` job has lost its supervisor: mark it
/// `interrupted`, and seal an interrupted job on demand ([`seal_interrupted`]).
pub(crate) fn settled_state(job: &Job, lock: &JobLock) -> Result<JobState, Failure> {
    let mut state = job.state().map_err(job_failure)?;
    if state.state == StageState::Active {
        state = job
            .update(|s| {
                s.state = StageState::Interrupted;
                s.pid = None;
            })
            .map_err(job_failure)?;
    }
    // Sealed on demand from the provisional bundle, when the run left one.
    seal_interrupted(job, lock, state)
}

/// Seal an interrupted job (the caller holds its lock and found it `interrupted`): returns
/// its new state, `staged`, or the state unchanged when there is nothing to seal it from.
pub(crate) fn seal_interrupted(
    job: &Job,
    _lock: &JobLock,
    state: JobState,
) -> Result<JobState, Failure> {
    if state.state != StageState::Interrupted || job.bundle_path().exists() {
        return Ok(state);
    }
    let Ok(bytes) = std::fs::read(provisional_path(job)) else {
        return Ok(state);
    };
    let bundle = read_bundle(&bytes).map_err(|e| {
        Failure::setup(format!(
            "{}: invalid provisional bundle: {e}",
            provisional_path(job).display()
        ))
    })?;
    // The overlay's work directory is left over by the dead sandbox, and so is the run's
    // cgroup (empty now: its processes died with the supervisor; rmdir refuses otherwise).
    job.remove_overlay_work().ok();
    for o in &bundle.executor_observations.controls {
        if o.mechanism == ControlMechanism::Cgroup
            && let Some(path) = o.details.get("path").and_then(|p| p.as_str())
            && std::path::Path::new(path)
                .file_name()
                .is_some_and(|n| n.to_string_lossy() == format!("cofferdam-{}", job.id()))
        {
            let _ = cofferdam_sandbox::cgroup::remove_dir(std::path::Path::new(path));
        }
    }
    let now = now_ms();
    let started = state
        .started_at_unix_ms
        .or(Some(bundle.run.started_at_unix_ms));
    let record_seal = |sealed_event| match TraceLog::open(&job.trace_path()) {
        Ok(mut trace) => {
            crate::trace_append::append(&mut trace, vec![(now, sealed_event)], RECOVERED_SEAL)
        }
        Err(e) => {
            let w = format!(
                "the job's trace could not record {RECOVERED_SEAL}: {e}; the trace is incomplete"
            );
            eprintln!("cofferdam: warning: {}", crate::shown_text(&w));
            Some(w)
        }
    };
    let bundle = records::seal_and_write(
        job,
        &state.workdir,
        started,
        Durability::Durable,
        false,
        record_seal,
        |seal| {
            let mut b = interrupted_bundle(bundle, seal, now);
            // What a cooperating agent said before the supervisor died, from the journal
            // its control socket kept.
            if let Some(kept) = crate::lifecycle::ctl::recovered(job) {
                b.agentctl = kept;
            }
            b
        },
    )?;
    crate::lifecycle::ctl::forget_journal(job);
    records::mark_staged(job, &bundle, Durability::Durable).map_err(job_failure)
}

/// What the trace calls the seal of an interrupted job.
const RECOVERED_SEAL: &str = "the recovered seal";

/// The provisional `bundle` completed by the on-demand seal at `now`: the filesystem, and a
/// failure that says the supervisor died and nothing is known of the command's end.
fn interrupted_bundle(mut bundle: RunBundle, seal: records::Seal, now: u64) -> RunBundle {
    let failure = RunFailure {
        kind: FailureKind::Signal,
        message: "the supervisor ended abruptly (killed or crashed) before recording how the \
                  run ended; the sandbox was killed with it. The stage was sealed afterwards; \
                  how the command ended is unknown"
            .into(),
        exit_code: None,
        signal: None,
        limit: None,
        step: None,
    };
    bundle.run.state = RunState::from_failure(Some(&failure));
    bundle.run.failure = Some(failure);
    bundle.run.exit_code = None;
    bundle.run.finished_at_unix_ms = now;
    bundle.run.duration_ms = now.saturating_sub(bundle.run.started_at_unix_ms);
    bundle.generated_at_unix_ms = now;
    bundle
        .run
        .warnings
        .push("interrupted: sealed on demand after the supervisor died".into());
    bundle.run.warnings.extend(seal.warnings);
    if let Some(fs) = &mut bundle.filesystem {
        fs.changed_files = seal.changes.len();
        fs.whiteouts = seal.whiteouts;
        fs.sample_paths = seal
            .changes
            .iter()
            .take(10)
            .map(|c| c.path.clone())
            .collect();
        fs.changes = seal.changes;
    }
    let mut safety = SafetySummary::derive(
        &bundle.executor_observations,
        bundle.executor_plan.as_ref(),
        bundle.filesystem.as_ref(),
    );
    safety
        .warnings
        .push("the sandbox's observations were lost with its supervisor: none is claimed".into());
    bundle.safety = safety;
    bundle.run.warnings.extend(seal.lost);
    bundle
}
