//! The run's setup, between the decision and the go: start the init, create the job, plan,
//! write the trace's start, make the copy stage. Owns the order inside each of these
//! steps; the order between them is `super::run`'s.

use super::{RunRequest, TraceSink, copy};
use crate::context::Env;
use crate::exit::Failure;
use crate::now_ms;
use cofferdam_policy::plan::{Invoker, JobPaths, SandboxPlan, TerminalPlan, build_plan};
use cofferdam_policy::scoped_plan::CopyPaths;
use cofferdam_policy::{ContainmentDecision, ScopeInputs, build_scope_report};
use cofferdam_record::HostFacts;
use cofferdam_record::trace::TraceEventKind;
use cofferdam_sandbox::init::EarlyNamespaces;
use cofferdam_sandbox::launch::{PendingInit, Streams, spawn_init};
use cofferdam_stage::job::{Job, JobLock, JobStore, NewJobId};
use cofferdam_stage::trace_log::TraceLog;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// The init, started and waiting for its plan.
pub(super) struct Spawned {
    /// The init.
    pub init: PendingInit,
    /// The caller's terminal, when the command gets a pseudo-terminal.
    pub terminal: Option<TerminalPlan>,
    /// In `allow` mode, this side of the network socket (for `crate::egress::start`).
    pub net: Option<UnixStream>,
}

/// Start the init. Terminals on stdin and stdout (or `--tty`): the command gets its own
/// pseudo-terminal, relayed to the caller's; otherwise three pipes. Never a descriptor of
/// the caller's.
/// `publish` is the sandbox's end of the `--publish` socket, when there is one; `born_in`
/// the run's cgroup v1 directories, which the init starts inside.
pub(super) fn spawn(
    req: &RunRequest,
    facts: &HostFacts,
    copy_tier: bool,
    publish: Option<std::os::fd::OwnedFd>,
    born_in: &[PathBuf],
) -> Result<Spawned, Failure> {
    let terminal = cofferdam_sandbox::pty::caller_terminal(req.force_tty);
    let (net, net_theirs) = crate::egress::socket(&req.policy)
        .map_err(Failure::setup)?
        .unzip();
    let early = (!copy_tier).then_some(EarlyNamespaces {
        uid: facts.uid,
        gid: facts.gid,
        host_network: req.policy.network.mode == cofferdam_net::NetworkMode::Host,
    });
    let exe = PathBuf::from("/proc/self/exe");
    let init = spawn_init(
        &exe,
        Streams {
            terminal: terminal.is_some(),
            capture: req.capture,
        },
        early,
        net_theirs,
        publish,
        born_in,
    )
    .map_err(Failure::setup)?;
    Ok(Spawned {
        init,
        terminal,
        net,
    })
}

/// The job of the run, locked, with its trace.
pub(super) struct JobRun {
    /// The job.
    pub job: Job,
    /// Its lock, held until the job is `staged`.
    pub lock: JobLock,
    /// Its trace.
    pub trace: TraceLog,
}

/// Create and lock the job. What `status` shows of a live job: the command line, and the
/// supervisor's pid (`cofferdam kill` signals it; the lock proves it). The start time is
/// the job's until the records give the run's own.
pub(super) fn create_job(
    req: &RunRequest,
    store: &JobStore,
    id: NewJobId,
) -> Result<JobRun, Failure> {
    let (job, lock) = store
        .create_locked_as(id, &req.policy.workdir, req.stage.as_deref(), |s| {
            s.command = req.argv.clone();
            s.pid = Some(std::process::id());
            s.started_at_unix_ms = Some(s.created_at_unix_ms);
            s.labels.clone_from(&req.policy.orchestration.labels);
            s.task_id.clone_from(&req.policy.orchestration.task_id);
            if let Some(l) = &req.policy.orchestration.lineage {
                s.parent = Some(Box::new(cofferdam_stage::job::JobParent {
                    run_id: l.parent_run_id.clone(),
                    checkpoint_id: l.checkpoint_id.clone(),
                }));
            }
        })
        .map_err(Failure::setup)?;
    let trace = TraceLog::open(&job.trace_path()).map_err(Failure::setup)?;
    Ok(JobRun { job, lock, trace })
}

/// A fork's inherited layer: the checkpoint's staged tree, before the init is sent its plan.
pub(super) fn seed_fork(
    job: &Job,
    c: &cofferdam_stage::checkpoint::Checkpoint,
) -> Result<(), Failure> {
    cofferdam_stage::fork::seed(job, c)
        .map(drop)
        .map_err(Failure::setup)
}

/// Who runs the command, as the plan needs it.
pub(super) fn invoker(env: &Env, facts: &HostFacts) -> Invoker {
    Invoker {
        uid: facts.uid,
        gid: facts.gid,
        user: std::env::var("USER").unwrap_or_else(|_| facts.uid.to_string()),
        home: env.places.home.clone(),
        env: std::env::vars().collect(),
        ssh_host_keys: cofferdam_sandbox::probe::ssh::host_keys(),
    }
}

/// The run's plan, and on the copy tiers the copy stage's directories.
pub(super) fn plan(
    req: &RunRequest,
    facts: &HostFacts,
    inv: &Invoker,
    decision: &ContainmentDecision,
    job: &Job,
    copy_tier: bool,
) -> (SandboxPlan, Option<CopyPaths>) {
    let job_paths = JobPaths {
        run_id: job.id().to_owned(),
        new_root: job.new_root(),
        upper: job.upper(),
        overlay_work: job.overlay_work(),
        inherited: req.fork.is_some().then(|| job.inherited()),
        storage_root: req.env.storage_root.clone(),
    };
    if !copy_tier {
        let plan = build_plan(&req.policy, facts, inv, &job_paths, req.argv.clone());
        return (plan, None);
    }
    let paths = copy::paths(job, job_paths);
    let plan = copy::plan(
        &req.policy,
        facts,
        inv,
        decision,
        &paths,
        &req.env.places.cwd,
        req.argv.clone(),
    );
    (plan, Some(paths))
}

/// Write the trace's start, with the grants the scope report lists; the run's start time.
pub(super) fn trace_start(
    req: &RunRequest,
    facts: &HostFacts,
    inv: &Invoker,
    job: &Job,
    trace: &mut TraceLog,
) -> Result<u64, Failure> {
    let scope = build_scope_report(&ScopeInputs {
        policy: &req.policy,
        facts,
        storage_root: &req.env.storage_root,
        home: &req.env.places.home,
        ssh_host_keys: &inv.ssh_host_keys,
        cap: req.tier_cap,
    });
    let started = now_ms();
    trace
        .append(
            started,
            TraceEventKind::SessionStart {
                run_id: job.id().to_owned(),
                command: req.argv.clone(),
                effective_grants: serde_json::to_value(&scope).unwrap_or_default(),
            },
        )
        .map_err(Failure::setup)?;
    Ok(started)
}

/// Copy the workdir into the job (the copy tiers) and record the copy's control.
pub(super) fn copy_stage(
    req: &RunRequest,
    paths: CopyPaths,
    plan: &SandboxPlan,
    trace: &mut TraceSink,
) -> Result<copy::CopyStage, Failure> {
    let stage = copy::prepare(&req.policy.workdir, paths, plan, req.progress)?;
    let o = TraceEventKind::ControlInstalled(stage.observation.clone());
    trace.append(vec![(now_ms(), o)], "the workdir copy's control");
    Ok(stage)
}
