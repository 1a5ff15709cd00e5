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
use cofferdam_policy::{ScopeInputs, build_scope_report};
use cofferdam_record::bundle::{
    BundleArtifact, CapturedStream, ControlObservation, FailureKind, ProcessOutput, RunBundle,
};
use cofferdam_record::trace::TraceEventKind;
use cofferdam_record::{EnforcementTier, write_bundle_json};
use cofferdam_sandbox::init::EarlyNamespaces;
use cofferdam_sandbox::launch::{CAPTURE_LIMIT, CaptureSpec, SealedOutcome, Streams, spawn_init};
use cofferdam_sandbox::relay::{Captured, CapturedOutput};
use cofferdam_sandbox::status::StatusMessage;
use cofferdam_stage::job::{Durability, JobStore, StageState};
use cofferdam_stage::trace_log::TraceLog;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

mod copy;

pub(crate) fn now_ms() -> u64 {
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
    let mut policy = context::policy(&args.policy, &env, args.command.first().map(String::as_str))?;
    policy.orchestration =
        cofferdam_policy::orchestration::parse(&args.labels, args.task_id.as_deref())
            .map_err(Failure::usage)?;
    let skipped = super::preflight::skip_missing_optional(&mut policy);
    for warning in skipped
        .into_iter()
        .chain(super::preflight::check(&policy, args.stage.as_deref())?)
    {
        eprintln!("cofferdam: warning: {}", crate::shown_text(&warning));
    }
    cofferdam_stage::store::check_outside_workdir(&env.storage_root, &policy.workdir)
        .map_err(Failure::setup)?;
    // The store first: one another user owns or can write is refused before anything of
    // it (the host facts cache below included) is read, and before anything runs.
    let store = JobStore::open(&env.storage_root).map_err(Failure::setup)?;
    // The namespace facts are cached per boot and settings: the init re-attempts every
    // mechanism anyway, so a stale cache can only make the setup fail, never weaken it.
    // The cgroup layout is read once the init is started (`with_cgroups`, below).
    let early_facts =
        cofferdam_sandbox::probe::probe_host_cached(&store.root().join("host-facts.json"));
    let decision = early_facts.decide(policy.floor, args.tier);
    // The one decision `scope` reports too: what this tier cannot carry is refused here.
    cofferdam_policy::refusal::check_run(&policy, &decision)
        .map_err(|r| Failure::setup(format!("refusing to run: {r}")))?;
    if policy.network.mode == cofferdam_net::NetworkMode::Host {
        eprintln!(
            "cofferdam: warning: network mode host: the command shares the host's network; \
             egress is neither filtered nor recorded"
        );
    }
    // Scoped and advisory: the workdir is staged by a copy (`copy`), not an overlay.
    let copy_tier = decision.tier != EnforcementTier::MountnsPivotRootLandlockSeccomp;

    // The init starts now: on the sealed tier it makes its namespaces at once, then waits
    // for its plan and the go, so its start-up overlaps the job's creation here; it touches
    // nothing of the job before the go (`PendingInit`), and it is killed if the setup stops
    // first. The terminal's SIGINT/SIGQUIT are ignored from here on (with a pty they go to
    // the command; without, to the sandbox's process group), and the supervisor must live
    // to restore the terminal and write the records.
    let quiet = crate::signals::IgnoreTerminalSignals::new();
    // Terminals on stdin and stdout (or --tty): the command gets its own pseudo-terminal,
    // relayed to the caller's; otherwise three pipes. Never a descriptor of the caller's.
    let force_tty = match (args.tty, args.no_tty) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let terminal = cofferdam_sandbox::pty::caller_terminal(force_tty);
    let (net_ours, net_theirs) = crate::egress::socket(&policy)
        .map_err(Failure::setup)?
        .unzip();
    let early = (!copy_tier).then_some(EarlyNamespaces {
        uid: early_facts.uid(),
        gid: early_facts.gid(),
        host_network: policy.network.mode == cofferdam_net::NetworkMode::Host,
    });
    let exe = PathBuf::from("/proc/self/exe");
    let mut init = spawn_init(
        &exe,
        Streams {
            terminal: terminal.is_some(),
            capture: args.capture,
        },
        early,
        net_theirs,
    )
    .map_err(Failure::setup)?;
    let facts = early_facts.with_cgroups();

    // What `status` shows of a live job: the command line, and the supervisor's pid
    // (`cofferdam kill` signals it; the lock proves it). The start time is the job's
    // until the records give the run's own.
    let (job, lock) = store
        .create_locked_with(&policy.workdir, args.stage.as_deref(), |s| {
            s.command = args.command.clone();
            s.pid = Some(std::process::id());
            s.started_at_unix_ms = Some(s.created_at_unix_ms);
            s.labels.clone_from(&policy.orchestration.labels);
            s.task_id.clone_from(&policy.orchestration.task_id);
        })
        .map_err(Failure::setup)?;
    let run_id = job.id().to_owned();
    let mut trace = TraceLog::open(&job.trace_path()).map_err(Failure::setup)?;

    let inv = Invoker {
        uid: facts.uid,
        gid: facts.gid,
        user: std::env::var("USER").unwrap_or_else(|_| facts.uid.to_string()),
        home: env.places.home.clone(),
        env: std::env::vars().collect(),
        ssh_host_keys: cofferdam_sandbox::probe::ssh::host_keys(),
    };
    let job_paths = JobPaths {
        run_id: run_id.clone(),
        new_root: job.new_root(),
        upper: job.upper(),
        overlay_work: job.overlay_work(),
        storage_root: env.storage_root.clone(),
    };
    let copy_paths = copy_tier.then(|| copy::paths(&job, job_paths.clone()));
    let mut plan = match &copy_paths {
        None => build_plan(&policy, &facts, &inv, &job_paths, args.command.clone()),
        Some(paths) => copy::plan(
            &policy,
            &facts,
            &inv,
            &decision,
            paths,
            &env.places.cwd,
            args.command.clone(),
        ),
    };
    plan.terminal = terminal;
    // Cgroup, timeout and stage cap; the cgroup is removed when `limits` drops, at the end.
    // On the copy tiers the changes reach `upper/` only when the run ends, so the stage cap
    // is checked then, not polled.
    let limits = super::limits::prepare(&policy, &facts, &mut plan, &job.upper(), !copy_tier);
    for warning in &limits.warnings {
        eprintln!("cofferdam: warning: {}", crate::shown_text(warning));
    }
    // Moving the init into the run's cgroups waits for the kernel, in the background, while
    // the rest happens here. The go comes after both.
    init.send_plan(&plan).map_err(Failure::setup)?;
    init.join_cgroups(limits.watch.cgroup_procs.clone());
    let scope = build_scope_report(&ScopeInputs {
        policy: &policy,
        facts: &facts,
        storage_root: &env.storage_root,
        home: &env.places.home,
        ssh_host_keys: &inv.ssh_host_keys,
        cap: args.tier,
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
    // After the start time: a host edit after the copy is newer than the run's start, so
    // the apply-time conflict check catches it.
    // Trace writes that failed: told at once, and carried into the bundle's warnings.
    let mut trace_lost: Vec<String> = Vec::new();
    let copy_stage = match copy_paths {
        Some(paths) => Some(copy::prepare(&policy.workdir, paths, &plan)?),
        None => None,
    };
    if let Some(stage) = &copy_stage {
        let o = TraceEventKind::ControlInstalled(stage.observation.clone());
        trace_lost.extend(crate::trace_append::append(
            &mut trace,
            vec![(now_ms(), o)],
            "the workdir copy's control",
        ));
    }

    let capture = args.capture.then(|| CaptureSpec {
        dir: job.dir().join("output"),
        limit: CAPTURE_LIMIT,
    });

    // What `status --review`/`apply` seal an interrupted job from if this process dies.
    if let Err(e) = super::recover::write_provisional(&super::recover::Start {
        policy: &policy,
        plan: &plan,
        decision: &decision,
        job: &job,
        started,
        argv: &args.command,
        controls: &limits.controls,
    }) {
        eprintln!("cofferdam: warning: {e}; if cofferdam dies mid-run the job cannot be sealed");
    }
    let egress = net_ours.map(|ours| crate::egress::start(&policy, ours));
    let outcome = init
        .start(capture.as_ref(), limits.watch.clone(), |pid| {
            if let Some(e) = &egress {
                e.started(pid);
            }
        })
        .map_err(Failure::setup)?;
    drop(quiet);
    let finished = now_ms();
    let (store_full, reserve_released) = store_full_warning(&job);

    let mut controls: Vec<ControlObservation> = limits.controls.clone();
    // What the run reported goes to the trace in one write (`TraceLog::append_all`).
    let mut events: Vec<(u64, TraceEventKind)> = controls
        .iter()
        .map(|o| (started, TraceEventKind::ControlInstalled(o.clone())))
        .collect();
    let mut warnings: Vec<String> = store_full.into_iter().collect();
    let mut ending: Option<Ending> = None;
    let mut command_started = false;
    let SealedOutcome {
        messages,
        init,
        output,
        terminal: _,
        warnings: relay_warnings,
        stop,
    } = outcome;
    let mut init = Some(init);
    for m in messages {
        match m {
            Ok(StatusMessage::Control { observation }) => {
                events.push((
                    finished,
                    TraceEventKind::ControlInstalled(observation.clone()),
                ));
                controls.push(observation);
            }
            Ok(StatusMessage::SetupFailed { step, error }) => {
                ending.get_or_insert(Ending::SetupFailed { step, error });
            }
            Ok(StatusMessage::ExecFailed { error, code }) => {
                ending.get_or_insert(Ending::ExecFailed { error, code });
            }
            Ok(StatusMessage::Started { pid }) => {
                command_started = true;
                events.push((
                    finished,
                    TraceEventKind::ProcessStarted {
                        pid: u32::try_from(pid).unwrap_or(0),
                    },
                ));
            }
            Ok(StatusMessage::Exited { code, signal }) => {
                events.push((
                    finished,
                    TraceEventKind::ProcessExited {
                        exit_code: code,
                        signal,
                        duration_ms: finished.saturating_sub(started),
                    },
                ));
                ending.get_or_insert(Ending::Exited { code, signal });
            }
            Ok(StatusMessage::Ready | StatusMessage::Stopped { .. }) => {}
            Err(line) => warnings.push(line),
        }
    }
    trace_lost.extend(crate::trace_append::append(
        &mut trace,
        events,
        "the run's controls and process events",
    ));
    let egress = egress.map(|e| e.finish(&mut controls, &mut trace));
    let ending = match ending {
        Some(e) => e,
        None => {
            let status = init.take().map(|i| i.wait());
            match status {
                // The command ran: whatever ended the init (the workload killing it on a
                // copy tier, an OOM kill) is judged like the command's end, never as setup.
                Some(Ok(st)) if command_started => {
                    use std::os::unix::process::ExitStatusExt;
                    Ending::InitLost {
                        code: st.code(),
                        signal: st.signal(),
                    }
                }
                status => {
                    let status = match status {
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
            }
        }
    };

    if let Some(stage) = copy_stage {
        if decision.tier == EnforcementTier::None {
            warnings.insert(0, copy::ADVISORY_WARNING.to_owned());
        }
        warnings.extend(stage.warnings.iter().cloned());
        controls.insert(0, stage.observation.clone());
        stage.finish(&job.upper())?;
    }
    let (ending, hits) = limits.conclude(stop, ending, &controls);
    for (limit, message) in hits {
        let hit = vec![(finished, TraceEventKind::LimitHit { limit, message })];
        trace_lost.extend(crate::trace_append::append(&mut trace, hit, "a limit hit"));
    }
    if let Some(f) = cofferdam_policy::outcome::failure_of(&ending)
        && matches!(
            f.kind,
            FailureKind::Timeout | FailureKind::Cancelled | FailureKind::Oom | FailureKind::Limit
        )
    {
        eprintln!("cofferdam: {}", f.message);
    }
    // The end of the status stream says every process of the run is gone; the init may
    // still be tearing its namespaces down (the overlay's unmount among them). It is waited
    // for only when the run's cgroups, removed when `limits` drops, must be empty first;
    // the overlay's work directory stays until `drop` (`Job::remove_stage`). While the
    // stage is sealed and the records written, another thread releases the records reserve
    // (when it is not needed for them: `store_full_warning`) and does that wait.
    let init = init.take();
    let wait_for_init = limits.has_cgroup();
    let (bundle, code) = std::thread::scope(|scope| -> Result<_, Failure> {
        scope.spawn(|| {
            if !reserve_released {
                job.release_reserve();
            }
            if let Some(init) = init.filter(|_| wait_for_init) {
                let _ = init.wait();
            }
        });
        // The records of the end of the run: their writeback is started at once (see
        // "Durability" in `cofferdam_stage::job`); then the provisional bundle goes. The
        // scope joins the cleanup thread on every way out.
        let sealed =
            cofferdam_stage::seal::seal(&job.upper(), &policy.workdir).map_err(Failure::setup)?;
        let mut fingerprints = sealed.fingerprints;
        fingerprints.run_started_at_unix_ms = Some(started);
        cofferdam_stage::fingerprint::write_fingerprints_with(
            &job.fingerprints_path(),
            &fingerprints,
            Durability::Prompt,
        )
        .map_err(Failure::setup)?;
        warnings.extend(sealed.warnings);
        let sealed_event = TraceEventKind::StageSealed {
            changed_files: sealed.changes.len(),
            whiteouts: sealed.whiteouts,
        };
        trace_lost.extend(crate::trace_append::append(
            &mut trace,
            vec![(now_ms(), sealed_event)],
            "the stage's seal",
        ));
        warnings.append(&mut trace_lost);
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
        if let Some(report) = egress {
            crate::egress::record(&mut bundle, report);
        }
        bundle.run.warnings.extend(relay_warnings);
        let text = write_bundle_json(&bundle).map_err(Failure::setup)?;
        cofferdam_stage::write_atomic_with(
            &job.bundle_path(),
            text.as_bytes(),
            0o600,
            Durability::Prompt,
        )
        .map_err(|e| {
            Failure::setup(format!("cannot write {}: {e}", job.bundle_path().display()))
        })?;
        super::recover::remove_provisional(&job);
        Ok((bundle, exit_code_of(&ending)))
    })?;
    // `staged` is the last change under the lock, which goes right after: a job listed as
    // staged can be applied at once (`apply` waits a moment for a lock held on a job that
    // is not active; the load test applies jobs the moment they are listed staged).
    job.update_with(Durability::Prompt, |s| {
        s.pid = None;
        s.state = StageState::Staged;
        s.started_at_unix_ms = Some(started);
        s.run_state = Some(bundle.run.state);
        s.exit_code = bundle.run.exit_code;
        s.finished_at_unix_ms = Some(finished);
        s.changed_files = bundle.filesystem.as_ref().map(|f| f.changed_files);
    })
    .map_err(Failure::setup)?;
    drop(lock);

    if let Ending::SetupFailed { error, .. } = &ending {
        eprintln!(
            "cofferdam: the sandbox could not be set up: {}",
            crate::shown_text(&error.to_string())
        );
    }
    if let Ending::ExecFailed { error, .. } = &ending {
        eprintln!("cofferdam: {}", crate::shown_text(&error.to_string()));
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

/// The command has ended: release the space reserved for its job's records now, unless
/// the job's filesystem has room to spare (then the caller releases it in the background;
/// the second value is whether it is released), and say so when the filesystem was full
/// (the command's writes may have failed).
fn store_full_warning(job: &cofferdam_stage::Job) -> (Option<String>, bool) {
    use cofferdam_stage::reserve;
    let Some(free) = reserve::available(job.dir()) else {
        job.release_reserve();
        return (None, true);
    };
    if reserve::is_roomy(free) {
        // The records fit without it: it goes in the background, while they are written.
        return (None, false);
    }
    job.release_reserve();
    if !reserve::is_full(free) {
        return (None, true);
    }
    let w = format!(
        "the filesystem holding the job ({}) was full when the command ended ({free} bytes \
         free): its writes may have failed with \"No space left on device\"; the stage keeps \
         what was written. Free space there, then review and apply",
        job.dir().display()
    );
    eprintln!("cofferdam: warning: {w}");
    (Some(w), true)
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
