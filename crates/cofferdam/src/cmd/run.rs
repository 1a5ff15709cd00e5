//! `cofferdam run -- COMMAND`: the sealed run, in order: decide (refusing below the floor
//! before touching anything), create the job, hand the plan to the sandbox init, collect its
//! observations, seal the stage, and write the records (trace, fingerprints, bundle,
//! job.json). Every decision is a call into `cofferdam-policy`; every effect into
//! `cofferdam-sandbox` or `cofferdam-stage`.

use crate::cli::RunArgs;
use crate::context;
use crate::exit::Failure;
use cofferdam_policy::outcome::{Ending, RunReport, assemble_bundle, exit_code_of};
use cofferdam_policy::plan::{Invoker, JobPaths, build_plan};
use cofferdam_policy::{ScopeInputs, build_scope_report, decide_containment};
use cofferdam_record::bundle::{
    BundleArtifact, CapturedStream, ControlObservation, ProcessOutput, RunBundle,
};
use cofferdam_record::trace::TraceEventKind;
use cofferdam_record::{EnforcementTier, write_bundle_json};
use cofferdam_sandbox::launch::{CAPTURE_LIMIT, CaptureSpec, SealedOutcome, run_sealed};
use cofferdam_sandbox::relay::{Captured, CapturedOutput};
use cofferdam_sandbox::status::StatusMessage;
use cofferdam_stage::job::{JobStore, StageState};
use cofferdam_stage::trace_log::TraceLog;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Run the command; returns the exit code (the command's, or 125/126/127).
pub fn run(args: &RunArgs, json: bool) -> Result<u8, Failure> {
    if args.command.is_empty() {
        return Err(Failure::usage(
            "give the command to run after `--`, e.g. `cofferdam run -- bash`",
        ));
    }
    let env = context::env()?;
    let policy = context::policy(&args.policy, &env)?;
    // The namespace facts are cached per boot and settings: the init re-attempts every
    // mechanism anyway, so a stale cache can only make the setup fail, never weaken it.
    let facts =
        cofferdam_sandbox::probe::probe_host_cached(&env.storage_root.join("host-facts.json"));
    let decision = decide_containment(&facts, policy.floor);
    if let Some(reason) = &decision.shortfall_reason {
        return Err(Failure::setup(format!("refusing to run: {reason}")));
    }
    if decision.tier != EnforcementTier::MountnsPivotRootLandlockSeccomp {
        return Err(Failure::setup(format!(
            "refusing to run: this host offers the {} tier, and this build runs commands only \
             on the sealed tier; `cofferdam doctor` shows what is missing",
            decision.tier
        )));
    }
    cofferdam_stage::store::check_outside_workdir(&env.storage_root, &policy.workdir)
        .map_err(Failure::setup)?;
    refuse_unsupported(&policy)?;
    for warning in unenforced_limits(&policy) {
        eprintln!("cofferdam: warning: {warning}");
    }

    let store = JobStore::open(&env.storage_root).map_err(Failure::setup)?;
    let (job, lock) = store
        .create_locked(&policy.workdir, args.stage.as_deref())
        .map_err(Failure::setup)?;
    let run_id = job.id().to_owned();
    let mut trace = TraceLog::open(&job.trace_path()).map_err(Failure::setup)?;

    let inv = Invoker {
        uid: facts.uid,
        gid: facts.gid,
        user: std::env::var("USER").unwrap_or_else(|_| facts.uid.to_string()),
        home: env.places.home.clone(),
        env: std::env::vars().collect(),
    };
    let mut plan = build_plan(
        &policy,
        &facts,
        &inv,
        &JobPaths {
            run_id: run_id.clone(),
            new_root: job.new_root(),
            upper: job.upper(),
            overlay_work: job.overlay_work(),
            storage_root: env.storage_root.clone(),
        },
        args.command.clone(),
    );
    let scope = build_scope_report(&ScopeInputs {
        policy: &policy,
        facts: &facts,
        storage_root: &env.storage_root,
        home: &env.places.home,
    });
    let started = now_ms();
    trace
        .append(
            started,
            TraceEventKind::SessionStart {
                run_id: run_id.clone(),
                command: args.command.clone(),
                effective_grants: serde_json::to_value(&scope).unwrap_or_default(),
            },
        )
        .map_err(Failure::setup)?;

    // A terminal on stdin: the command gets its own pseudo-terminal, relayed to it.
    plan.terminal = cofferdam_sandbox::pty::caller_terminal();
    let capture = args.capture.then(|| CaptureSpec {
        dir: job.dir().join("output"),
        limit: CAPTURE_LIMIT,
    });

    let exe = PathBuf::from("/proc/self/exe");
    let outcome = {
        // Still right with a pty: the caller's terminal is cooked until the command's
        // terminal exists, and the supervisor must live to restore it and write the records.
        let _quiet = crate::signals::IgnoreTerminalSignals::new();
        run_sealed(&exe, &plan, capture.as_ref(), |pid| {
            // Runs while the sandbox sets itself up. A failure only costs `status` the
            // command line of a live job; the records at the end are written regardless.
            let _ = job.update(|s| {
                s.command = args.command.clone();
                s.started_at_unix_ms = Some(started);
                s.pid = Some(pid);
            });
        })
        .map_err(Failure::setup)?
    };
    let finished = now_ms();

    let mut controls: Vec<ControlObservation> = Vec::new();
    let mut warnings = Vec::new();
    let mut ending: Option<Ending> = None;
    let SealedOutcome {
        messages,
        init,
        output,
        terminal: _,
        warnings: relay_warnings,
    } = outcome;
    let mut init = Some(init);
    for m in messages {
        match m {
            Ok(StatusMessage::Control { observation }) => {
                let _ = trace.append(
                    finished,
                    TraceEventKind::ControlInstalled(observation.clone()),
                );
                controls.push(observation);
            }
            Ok(StatusMessage::SetupFailed { step, error }) => {
                ending.get_or_insert(Ending::SetupFailed { step, error });
            }
            Ok(StatusMessage::ExecFailed { error, code }) => {
                ending.get_or_insert(Ending::ExecFailed { error, code });
            }
            Ok(StatusMessage::Started { pid }) => {
                let _ = trace.append(
                    finished,
                    TraceEventKind::ProcessStarted {
                        pid: u32::try_from(pid).unwrap_or(0),
                    },
                );
            }
            Ok(StatusMessage::Exited { code, signal }) => {
                let _ = trace.append(
                    finished,
                    TraceEventKind::ProcessExited {
                        exit_code: code,
                        signal,
                        duration_ms: finished.saturating_sub(started),
                    },
                );
                ending.get_or_insert(Ending::Exited { code, signal });
            }
            Ok(StatusMessage::Ready | StatusMessage::Stopped { .. }) => {}
            Err(line) => warnings.push(line),
        }
    }
    let ending = match ending {
        Some(e) => e,
        None => {
            let status = match init.take().map(|i| i.wait()) {
                Some(Ok(st)) => st.to_string(),
                Some(Err(e)) => e.to_string(),
                None => "unknown".into(),
            };
            Ending::SetupFailed {
                step: "sandbox init".into(),
                error: format!(
                    "the sandbox ended ({status}) without reporting how the command ended"
                ),
            }
        }
    };

    let sealed =
        cofferdam_stage::seal::seal(&job.upper(), &policy.workdir).map_err(Failure::setup)?;
    let mut fingerprints = sealed.fingerprints;
    fingerprints.run_started_at_unix_ms = Some(started);
    cofferdam_stage::fingerprint::write_fingerprints(&job.fingerprints_path(), &fingerprints)
        .map_err(Failure::setup)?;
    warnings.extend(sealed.warnings);
    let _ = trace.append(
        now_ms(),
        TraceEventKind::StageSealed {
            changed_files: sealed.changes.len(),
            whiteouts: sealed.whiteouts,
        },
    );
    let report = RunReport {
        run_id: run_id.clone(),
        started_at_unix_ms: started,
        finished_at_unix_ms: finished,
        argv: args.command.clone(),
        controls,
        ending: ending.clone(),
        changes: sealed.changes,
        whiteouts: sealed.whiteouts,
        upper: job.upper(),
        trace_path: job.trace_path(),
        warnings,
        version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    let mut bundle = assemble_bundle(&policy, &plan, &decision, &report);
    record_output(&mut bundle, &output);
    bundle.run.warnings.extend(relay_warnings);
    let text = write_bundle_json(&bundle).map_err(Failure::setup)?;
    cofferdam_stage::write_atomic(&job.bundle_path(), text.as_bytes(), 0o600).map_err(|e| {
        Failure::setup(format!("cannot write {}: {e}", job.bundle_path().display()))
    })?;
    let code = exit_code_of(&ending);
    // The overlay's work directory can go only once the init has released the mount.
    if let Some(init) = init.take() {
        let _ = init.wait();
    }
    job.remove_overlay_work().ok();
    // `staged` is the last change under the lock, which goes right after: a job listed as
    // staged can be applied at once (the load test applies jobs the moment they are).
    job.update(|s| {
        s.pid = None;
        s.state = StageState::Staged;
        s.run_state = Some(bundle.run.state);
        s.exit_code = bundle.run.exit_code;
        s.finished_at_unix_ms = Some(finished);
        s.changed_files = bundle.filesystem.as_ref().map(|f| f.changed_files);
    })
    .map_err(Failure::setup)?;
    drop(lock);

    if let Ending::SetupFailed { error, .. } = &ending {
        eprintln!("cofferdam: the sandbox could not be set up: {error}");
    }
    if let Ending::ExecFailed { error, .. } = &ending {
        eprintln!("cofferdam: {error}");
    }
    if json {
        crate::print_json(&serde_json::json!({
            "job": run_id, "exit_code": code, "bundle": job.bundle_path(),
            "changes": bundle.filesystem.as_ref().map_or(0, |f| f.changed_files),
        }))?;
    } else if !args.quiet {
        match bundle.filesystem.as_ref().map_or(0, |f| f.changed_files) {
            0 => eprintln!("cofferdam: job {run_id}: no changes"),
            n => eprintln!(
                "cofferdam: job {run_id}: {n} staged change(s); review with `cofferdam status --review {run_id}`"
            ),
        }
    }
    Ok(u8::try_from(code).unwrap_or(1))
}

/// Refuse what this build cannot honour, before anything is created: a run must never get
/// silently less (or more) than it asked for.
fn refuse_unsupported(policy: &cofferdam_policy::Policy) -> Result<(), Failure> {
    use cofferdam_net::NetworkMode;
    if policy.network.mode != NetworkMode::None {
        return Err(Failure::setup(format!(
            "refusing to run: network mode `{}` is not available in this build; only `none` \
             (loopback inside the sandbox) is. Drop --network/--allow-net and [network] from \
             the manifest",
            policy.network.mode
        )));
    }
    if let Some(m) = policy
        .mounts
        .iter()
        .find(|m| m.mode == cofferdam_policy::MountMode::Stage)
    {
        return Err(Failure::setup(format!(
            "refusing to run: {} ({}) asks for mode `stage`, which this build does not support \
             yet; use `read`, `write` or `hide`",
            m.written, m.origin
        )));
    }
    Ok(())
}

/// Requested limits this build does not enforce, as warnings printed before the run (the
/// bundle's `resources.limitations` says the same afterwards).
fn unenforced_limits(policy: &cofferdam_policy::Policy) -> Vec<String> {
    let r = &policy.resources;
    [
        (r.cpus.is_some(), "cpus"),
        (r.timeout.is_some(), "timeout"),
        (r.io_bps.is_some(), "io_bps"),
        (r.stage_size.is_some(), "stage_size"),
    ]
    .into_iter()
    .filter(|(asked, _)| *asked)
    .map(|(_, name)| {
        format!("`{name}` was requested but this build does not enforce it yet; the run goes on without it")
    })
    .collect()
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
