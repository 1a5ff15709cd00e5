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
//! the run wrote when it started ([`write_provisional`]: the policy, the plan, what the
//! supervisor itself installed) becomes the Run Bundle, with the filesystem filled in and a
//! `run.failure` that says the supervisor ended abruptly and nothing is known about how the
//! command ended. The sandbox's own observations never reached the supervisor, so none are
//! claimed: the safety booleans derived from them are false.

use crate::cmd::jobrules::{job_failure, now_ms};
use crate::exit::Failure;
use cofferdam_policy::outcome::{Ending, RunReport, assemble_bundle};
use cofferdam_record::bundle::{
    ControlMechanism, FailureKind, RunFailure, RunState, SafetySummary,
};
use cofferdam_record::trace::TraceEventKind;
use cofferdam_record::{read_bundle, write_bundle_json};
use cofferdam_stage::job::{Job, JobLock, JobState, StageState};
use cofferdam_stage::trace_log::TraceLog;
use std::path::PathBuf;

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

/// Where the provisional bundle lives while the run is live.
fn provisional_path(job: &Job) -> PathBuf {
    job.dir().join("run-bundle.provisional.json")
}

/// What a run knows when it starts, for [`write_provisional`].
pub(crate) struct Start<'a> {
    pub policy: &'a cofferdam_policy::Policy,
    pub plan: &'a cofferdam_policy::plan::SandboxPlan,
    pub decision: &'a cofferdam_policy::ContainmentDecision,
    pub job: &'a Job,
    pub started: u64,
    pub argv: &'a [String],
    /// What the supervisor installed before the launch.
    pub controls: &'a [cofferdam_record::bundle::ControlObservation],
}

/// Write the bundle a supervisor that dies mid-run leaves behind: the policy, the plan and
/// the supervisor's own controls, no sandbox observation, no change, no ending yet. A
/// failure only costs the on-demand seal; the caller warns.
pub(crate) fn write_provisional(s: &Start<'_>) -> Result<(), String> {
    let report = RunReport {
        run_id: s.job.id().to_owned(),
        started_at_unix_ms: s.started,
        finished_at_unix_ms: s.started,
        argv: s.argv.to_vec(),
        controls: s.controls.to_vec(),
        // Not an ending: the run has not reached its command, so the record must not read as
        // one that completed with every control of its tier installed (the strict reader
        // requires those rows of a completed run). `seal_interrupted` replaces the failure.
        ending: Ending::SetupFailed {
            step: "provisional".into(),
            error: "written when the run started; the run's own Run Bundle replaces it".into(),
        },
        changes: Vec::new(),
        whiteouts: 0,
        upper: s.job.upper(),
        trace_path: s.job.trace_path(),
        warnings: Vec::new(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    let bundle = assemble_bundle(s.policy, s.plan, s.decision, &report);
    let text = write_bundle_json(&bundle).map_err(|e| e.to_string())?;
    // Not flushed, like the job's other in-run records: the stage it describes is not
    // flushed either (see "Durability" in `cofferdam_stage::job`).
    cofferdam_stage::write_atomic_with(
        &provisional_path(s.job),
        text.as_bytes(),
        0o600,
        cofferdam_stage::Durability::Volatile,
    )
    .map_err(|e| format!("cannot write the provisional bundle: {e}"))
}

/// Remove the provisional bundle once the real one is written.
pub(crate) fn remove_provisional(job: &Job) {
    let _ = std::fs::remove_file(provisional_path(job));
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
    let mut bundle = read_bundle(&bytes).map_err(|e| {
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
    let sealed =
        cofferdam_stage::seal::seal(&job.upper(), &state.workdir).map_err(Failure::setup)?;
    let mut fingerprints = sealed.fingerprints;
    fingerprints.run_started_at_unix_ms = state
        .started_at_unix_ms
        .or(Some(bundle.run.started_at_unix_ms));
    cofferdam_stage::fingerprint::write_fingerprints(&job.fingerprints_path(), &fingerprints)
        .map_err(Failure::setup)?;
    // For `apply --merge`; a failure leaves those merges refused, naming the missing base.
    let _ = cofferdam_stage::base::keep_at_seal(
        job.dir(),
        &state.workdir,
        &sealed.changes,
        &fingerprints,
    );
    let now = now_ms();
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
    bundle.run.warnings.extend(sealed.warnings);
    if let Some(fs) = &mut bundle.filesystem {
        fs.changed_files = sealed.changes.len();
        fs.whiteouts = sealed.whiteouts;
        fs.sample_paths = sealed
            .changes
            .iter()
            .take(10)
            .map(|c| c.path.clone())
            .collect();
        fs.changes = sealed.changes;
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
    // The trace before the bundle, so the bundle can say when the trace misses the seal.
    let sealed_event = TraceEventKind::StageSealed {
        changed_files: bundle.filesystem.as_ref().map_or(0, |f| f.changed_files),
        whiteouts: bundle.filesystem.as_ref().map_or(0, |f| f.whiteouts),
    };
    let what = "the recovered seal";
    let lost = match TraceLog::open(&job.trace_path()) {
        Ok(mut trace) => crate::trace_append::append(&mut trace, vec![(now, sealed_event)], what),
        Err(e) => {
            let w =
                format!("the job's trace could not record {what}: {e}; the trace is incomplete");
            eprintln!("cofferdam: warning: {}", crate::shown_text(&w));
            Some(w)
        }
    };
    bundle.run.warnings.extend(lost);
    let text = write_bundle_json(&bundle).map_err(Failure::setup)?;
    cofferdam_stage::write_atomic(&job.bundle_path(), text.as_bytes(), 0o600).map_err(|e| {
        Failure::setup(format!("cannot write {}: {e}", job.bundle_path().display()))
    })?;
    remove_provisional(job);
    job.update(|s| {
        s.state = StageState::Staged;
        s.pid = None;
        s.run_state = Some(bundle.run.state);
        s.finished_at_unix_ms = Some(now);
        s.changed_files = bundle.filesystem.as_ref().map(|f| f.changed_files);
    })
    .map_err(job_failure)
}
