//! The records of a run's end, and the one sequence that writes them: seal the stage,
//! write the fingerprints, trace the seal, write the Run Bundle, drop the provisional
//! bundle, mark the job `staged`. A run ([`write_run_records`]) and the recovery of an
//! interrupted job (`cmd::recover`) both go through [`seal_and_write`] and
//! [`mark_staged`]; the provisional bundle a run leaves for that recovery is written here
//! too. Owns the records' order and durability; may not decide what a bundle says (that is
//! `cofferdam_policy::outcome`'s).

use super::TraceSink;
use super::supervise::Run;
use crate::exit::Failure;
use crate::now_ms;
use cofferdam_policy::outcome::{Ending, RunReport, assemble_bundle};
use cofferdam_policy::plan::SandboxPlan;
use cofferdam_policy::{ContainmentDecision, Policy};
use cofferdam_record::bundle::{
    BundleArtifact, CapturedStream, ChangeEntry, ControlObservation, ProcessOutput, RunBundle,
};
use cofferdam_record::trace::TraceEventKind;
use cofferdam_record::write_bundle_json;
use cofferdam_sandbox::relay::{Captured, CapturedOutput};
use cofferdam_stage::job::{Durability, Job, JobError, JobState, StageState};
use std::path::{Path, PathBuf};

/// Where the provisional bundle lives while the run is live.
pub(crate) fn provisional_path(job: &Job) -> PathBuf {
    job.dir().join("run-bundle.provisional.json")
}

/// What a run knows when it starts, for [`write_provisional`].
pub(crate) struct Start<'a> {
    pub policy: &'a Policy,
    pub plan: &'a SandboxPlan,
    pub decision: &'a ContainmentDecision,
    pub job: &'a Job,
    pub started: u64,
    pub argv: &'a [String],
    /// What the supervisor installed before the launch.
    pub controls: &'a [ControlObservation],
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
        Durability::Volatile,
    )
    .map_err(|e| format!("cannot write the provisional bundle: {e}"))
}

/// What the seal found, for the bundle.
pub(crate) struct Seal {
    /// The classified changes.
    pub changes: Vec<ChangeEntry>,
    /// Deleted plus opaque changes.
    pub whiteouts: usize,
    /// What did not stop the seal.
    pub warnings: Vec<String>,
    /// The trace's loss of the seal event, if it was lost.
    pub lost: Option<String>,
}

/// Seal `job`'s stage against `workdir` and write the records of its end, in this order:
/// a fork's inherited layer taken into the stage, the fingerprints (stamped with the run's
/// start, `started`), the seal's trace event (through `trace`, which returns the warning of
/// a lost write), the bundle `bundle_of` builds from the seal, and the removal of the
/// provisional bundle. Each file is written with `durability`. Returns the bundle written.
pub(crate) fn seal_and_write(
    job: &Job,
    workdir: &Path,
    started: Option<u64>,
    durability: Durability,
    progress: bool,
    trace: impl FnOnce(TraceEventKind) -> Option<String>,
    bundle_of: impl FnOnce(Seal) -> RunBundle,
) -> Result<RunBundle, Failure> {
    // A progress line on a terminal when asked (`crate::progress`), gone once sealed.
    let mut line = crate::progress::Line::new(progress);
    // A fork's inherited layer becomes part of its stage first (also when an interrupted
    // fork is recovered): the seal classifies what the overlay showed.
    cofferdam_stage::fork::flatten(job, workdir).map_err(Failure::setup)?;
    let sealed = cofferdam_stage::seal::seal_with(&job.upper(), workdir, &mut line)
        .map_err(Failure::setup)?;
    drop(line);
    let mut fingerprints = sealed.fingerprints;
    fingerprints.run_started_at_unix_ms = started;
    // A fork keeps its parent's view of the host for what the parent changed.
    let fingerprints =
        cofferdam_stage::fork::inherit(job.dir(), fingerprints).map_err(Failure::setup)?;
    cofferdam_stage::fingerprint::write_fingerprints_with(
        &job.fingerprints_path(),
        &fingerprints,
        durability,
    )
    .map_err(Failure::setup)?;
    // The host side of each modified text file, for `apply --merge` and hunk ids; without
    // it those merges are refused, naming the missing base.
    let mut warnings = sealed.warnings;
    let parent_bases = cofferdam_stage::fork::parent_bases(job);
    match cofferdam_stage::base::keep_at_seal(
        job.dir(),
        workdir,
        &sealed.changes,
        &fingerprints,
        parent_bases.as_deref(),
    ) {
        Err(e) => warnings.push(format!(
            "the host's copies of the modified files were not kept ({e}): `apply --merge` \
             will refuse them"
        )),
        Ok(k) if k.over_budget > 0 => warnings.push(format!(
            "{} modified file(s) have no merge base: the job's {} MiB for the host's copies \
             filled, so `apply --merge` will refuse them (a whole-file apply is unaffected)",
            k.over_budget,
            cofferdam_stage::base::BASES_TOTAL_MAX >> 20
        )),
        Ok(_) => {}
    }
    // The trace before the bundle, so the bundle can say when the trace misses the seal.
    let lost = trace(TraceEventKind::StageSealed {
        changed_files: sealed.changes.len(),
        whiteouts: sealed.whiteouts,
    });
    let bundle = bundle_of(Seal {
        changes: sealed.changes,
        whiteouts: sealed.whiteouts,
        warnings,
        lost,
    });
    let text = write_bundle_json(&bundle).map_err(Failure::setup)?;
    cofferdam_stage::write_atomic_with(&job.bundle_path(), text.as_bytes(), 0o600, durability)
        .map_err(|e| {
            Failure::setup(format!("cannot write {}: {e}", job.bundle_path().display()))
        })?;
    let _ = std::fs::remove_file(provisional_path(job));
    Ok(bundle)
}

/// Mark the job `staged`, with what its bundle says of the run; no supervisor any more.
/// Returns the job's new state.
pub(crate) fn mark_staged(
    job: &Job,
    bundle: &RunBundle,
    durability: Durability,
) -> Result<JobState, JobError> {
    job.update_with(durability, |s| {
        s.pid = None;
        s.state = StageState::Staged;
        s.started_at_unix_ms = Some(bundle.run.started_at_unix_ms);
        s.run_state = Some(bundle.run.state);
        s.exit_code = bundle.run.exit_code;
        s.finished_at_unix_ms = Some(bundle.run.finished_at_unix_ms);
        s.changed_files = bundle.filesystem.as_ref().map(|f| f.changed_files);
    })
}

/// What a run's records are made of, besides what it reported ([`Run`]).
pub(super) struct RunRecords<'a> {
    pub policy: &'a Policy,
    pub plan: &'a SandboxPlan,
    pub decision: &'a ContainmentDecision,
    pub job: &'a Job,
    pub argv: &'a [String],
    pub started: u64,
    pub finished: u64,
    pub ending: &'a Ending,
    /// Whether the init must be reaped before the run's cgroups can go.
    pub wait_for_init: bool,
    /// Show the seal's progress on a terminal.
    pub progress: bool,
}

/// Seal the run's stage and write its records ([`seal_and_write`]). The end of the status
/// stream says every process of the run is gone; the init may still be tearing its
/// namespaces down (the overlay's unmount among them). It is waited for only when the
/// run's cgroups, removed when the limits drop, must be empty first; the overlay's work
/// directory stays until `drop` (`Job::remove_stage`). `agentctl` is what the control
/// socket recorded (`None`: the run did not offer one). While the stage is sealed and the
/// records written, another thread releases the records reserve (when it is not needed for
/// them: see `supervise`) and does that wait; it is joined on every way out.
pub(super) fn write_run_records(
    r: &RunRecords<'_>,
    run: Run,
    mut trace: TraceSink,
    agentctl: Option<super::ctl::Ended>,
) -> Result<RunBundle, Failure> {
    let Run {
        controls,
        mut warnings,
        init,
        reserve_released,
        output,
        relay_warnings,
        egress,
        forwarder,
        files,
        ..
    } = run;
    let job = r.job;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            if !reserve_released {
                job.release_reserve();
            }
            if let Some(init) = init.filter(|_| r.wait_for_init) {
                let _ = init.wait();
            }
        });
        // The records of the end of the run: their writeback is started at once (see
        // "Durability" in `cofferdam_stage::job`).
        let log = &mut trace.log;
        let lost = &mut trace.lost;
        seal_and_write(
            job,
            &r.policy.workdir,
            Some(r.started),
            Durability::Prompt,
            r.progress,
            |e| crate::trace_append::append(log, vec![(now_ms(), e)], "the stage's seal"),
            |seal| {
                warnings.extend(seal.warnings);
                lost.extend(seal.lost);
                warnings.append(lost);
                let report = RunReport {
                    run_id: job.id().to_owned(),
                    started_at_unix_ms: r.started,
                    finished_at_unix_ms: r.finished,
                    argv: r.argv.to_vec(),
                    controls,
                    ending: r.ending.clone(),
                    changes: seal.changes,
                    whiteouts: seal.whiteouts,
                    upper: job.upper(),
                    trace_path: job.trace_path(),
                    warnings,
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                };
                let mut bundle = assemble_bundle(r.policy, r.plan, r.decision, &report);
                record_output(&mut bundle, &output);
                if let Some(report) = egress {
                    crate::egress::record(&mut bundle, report);
                }
                crate::publish::record(&mut bundle, forwarder);
                if let Some(files) = files {
                    bundle
                        .run_observation
                        .get_or_insert_with(Default::default)
                        .filesystem = Some(files);
                }
                bundle.run.warnings.extend(relay_warnings);
                // The stage is sealed and its fingerprints written: the checkpoints clients
                // asked for are taken now (`super::ctl`), never while the workload writes.
                match agentctl {
                    Some(ended) => bundle.agentctl = ended.honour(job),
                    None => bundle
                        .environment
                        .runtime_injected_keys
                        .retain(|k| k != cofferdam_policy::agentctl::ENV),
                }
                bundle
            },
        )
    })
}

/// `run.output` and the `capture` artifacts from what `--capture` saved. In pty mode stdout
/// and stderr shared the terminal: its transcript (`output/terminal`) is `stdout`, and
/// `stderr` is absent.
fn record_output(bundle: &mut RunBundle, output: &CapturedOutput) {
    let stream = |c: &Captured| CapturedStream {
        text: None,
        path: Some(c.path.clone()),
        total_bytes: c.total_bytes,
        truncated: c.truncated,
    };
    bundle.run.output = ProcessOutput {
        stdout: output
            .terminal
            .as_ref()
            .or(output.stdout.as_ref())
            .map(stream),
        stderr: output.stderr.as_ref().map(stream),
    };
    for c in [&output.terminal, &output.stdout, &output.stderr]
        .into_iter()
        .flatten()
    {
        bundle.artifacts.push(BundleArtifact {
            kind: "capture".into(),
            path: c.path.clone(),
        });
    }
}
