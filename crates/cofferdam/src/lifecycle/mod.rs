//! The run lifecycle: one run, from a validated [`RunRequest`] to its sealed records, in
//! the one order of effects that [`run`] holds (each phase is a function of the modules
//! below, with typed inputs and outputs). Owns that order and the supervisor's parts of a
//! run (the copy stage of the copy tiers, the limits, the records of its end, which
//! `cmd::recover` shares); may not parse arguments or render results (the commands in `cmd`
//! do), and may not import `cmd`.

pub mod copy;
pub(crate) mod ctl;
mod decide;
mod launch;
pub mod limits;
pub mod records;
mod supervise;

use crate::context::Env;
use crate::exit::Failure;
use crate::now_ms;
use cofferdam_policy::Policy;
use cofferdam_policy::outcome::{Ending, exit_code_of};
use cofferdam_record::trace::TraceEventKind;
use cofferdam_record::{ContainmentClass, RunBundle};
use cofferdam_stage::job::Durability;
use cofferdam_stage::trace_log::TraceLog;
use std::path::PathBuf;

/// One run, validated: the resolved policy and what the caller asked of the run.
pub struct RunRequest {
    /// The resolved, checked policy (`cmd::preflight`).
    pub policy: Policy,
    /// The caller's places (current directory, home) and the storage root.
    pub env: Env,
    /// The command and its arguments as they run (an agent profile's argument patch
    /// applied); never empty.
    pub argv: Vec<String>,
    /// Keep the job in this directory instead of the store.
    pub stage: Option<PathBuf>,
    /// Run on at most this class's tier.
    pub tier_cap: Option<ContainmentClass>,
    /// A pseudo-terminal forced on (`Some(true)`) or off, or `None`: only when stdin and
    /// stdout are terminals.
    pub force_tty: Option<bool>,
    /// Save the command's output in the job (`--capture`).
    pub capture: bool,
    /// Show progress on long work (the copy, the seal) when stderr is a terminal.
    pub progress: bool,
    /// A fork (`fork`, `run --on`, `inspect`): the stage starts as this checkpoint of the
    /// parent's (`policy.orchestration.lineage` names both).
    pub fork: Option<cofferdam_stage::checkpoint::Checkpoint>,
}

/// A run that reached its records (sealed, bundle written, job `staged`).
#[derive(Debug)]
pub struct Finished {
    /// The job's id.
    pub run_id: String,
    /// Where its Run Bundle is.
    pub bundle_path: PathBuf,
    /// The Run Bundle as written.
    pub bundle: RunBundle,
    /// How the run ended, with its cause.
    pub ending: Ending,
    /// The exit code the run stands for (the command's, or 125/126/127).
    pub exit_code: i32,
}

/// Run `req` to its records. The order of effects is this function's, in three phases:
/// [`prepare`] (decide, refusing below the floor before touching anything; the cgroup, the
/// init, the job, the plan, the other limits, the trace's start, the copy stage, the
/// provisional bundle), the go (the command runs, relayed and supervised until every
/// process of the run is gone), and [`conclude`] (judge the ending, seal, write the
/// records, mark the job staged).
pub fn run(req: &RunRequest) -> Result<Finished, Failure> {
    let decided = decide::decide(req)?;
    // `--publish`: the host ports are bound now, before anything exists.
    let mut published = crate::publish::bind(&req.policy)?;
    // The terminal's SIGINT/SIGQUIT are ignored from here on (with a pty they go to the
    // command; without, to the sandbox's process group): the supervisor must live to
    // restore the terminal and write the records.
    let quiet = crate::signals::IgnoreTerminalSignals::new();
    let (go, prepared) = prepare(req, decided, &mut published)?;
    let ran = supervise::start(
        req,
        &prepared.job,
        go.net,
        published,
        go.init,
        &prepared.limits,
    )?;
    drop(quiet);
    conclude(req, prepared, ran)
}

/// What the go hands to the sandbox: the init waiting for it, and the supervisor's end of
/// the network socket (network `allow`).
struct Go {
    init: cofferdam_sandbox::launch::PendingInit,
    net: Option<std::os::unix::net::UnixStream>,
}

/// What [`prepare`] made that the go and [`conclude`] use.
struct Prepared {
    decision: cofferdam_policy::ContainmentDecision,
    job: cofferdam_stage::job::Job,
    lock: cofferdam_stage::job::JobLock,
    plan: cofferdam_policy::plan::SandboxPlan,
    limits: limits::Limits,
    started: u64,
    trace: TraceSink,
    copy_stage: Option<copy::CopyStage>,
    ctl: Option<ctl::CtlServer>,
    /// Warnings for the bundle from before the go (agentctl's offer, the state seeds).
    warnings: Vec<String>,
}

/// The first phase of [`run`]: everything up to the go, in its order.
fn prepare(
    req: &RunRequest,
    decided: decide::Decided,
    published: &mut Option<crate::publish::Published>,
) -> Result<(Go, Prepared), Failure> {
    let decide::Decided {
        store,
        facts,
        decision,
        copy_tier,
    } = decided;
    // The run's cgroup comes before its init, which is born inside its v1 directories (a
    // move by pid afterwards waits for an RCU grace period: `cofferdam_sandbox::launch`).
    // It is named after the job, whose id is chosen here.
    let facts = facts.with_cgroups();
    let job_id = cofferdam_stage::job::NewJobId::new();
    let stage_parent = req
        .stage
        .as_deref()
        .map_or_else(|| store.root().to_path_buf(), nearest_existing);
    let cgroup = limits::install_cgroup(&req.policy, &facts, job_id.as_str(), &stage_parent);
    // The init starts now: on the sealed tier it makes its namespaces at once, then waits
    // for its plan and the go, so its start-up overlaps the job's creation here; it touches
    // nothing of the job before the go (`PendingInit`), and it is killed if the setup stops
    // first.
    let sandbox_end = published
        .as_mut()
        .and_then(crate::publish::Published::sandbox_end);
    let launch::Spawned {
        mut init,
        terminal,
        net,
    } = launch::spawn(req, &facts, copy_tier, sandbox_end, &cgroup.v1_dirs())?;
    let launch::JobRun {
        job,
        lock,
        mut trace,
    } = launch::create_job(req, &store, job_id)?;
    if let Some(c) = &req.fork {
        launch::seed_fork(&job, c)?;
    }
    let inv = launch::invoker(&req.env, &facts);
    let (mut plan, copy_paths) = launch::plan(req, &facts, &inv, &decision, &job, copy_tier);
    plan.terminal = terminal;
    // agentctl: the control socket, served from now until every process of the run is gone,
    // and lent to the plan (the socket in `COFFERDAM_CTL`, `cofferdam` on `PATH`).
    let (ctl, ctl_warning) = ctl::offer(req, &facts, &inv, &job, &mut plan);
    // Timeout and stage cap around the cgroup; the cgroup is removed when `limits` drops,
    // at the end. On the copy tiers the changes reach `upper/` only when the run ends, so
    // the stage cap is checked then, not polled.
    let limits = limits::prepare(cgroup, &req.policy, &mut plan, &job.upper(), !copy_tier);
    for warning in &limits.warnings {
        eprintln!("cofferdam: warning: {}", crate::shown_text(warning));
    }
    // Moving the init into the run's v2 cgroup waits for the kernel, in the background,
    // while the rest happens here. The go comes after both.
    init.send_plan(&plan).map_err(Failure::setup)?;
    init.join_cgroups(limits.v2_procs_files());
    let started = launch::trace_start(req, &facts, &inv, &job, &mut trace)?;
    let mut trace = TraceSink::new(trace);
    // After the start time: a host edit after the copy is newer than the run's start, so
    // the apply-time conflict check catches it.
    let copy_stage = match copy_paths {
        Some(paths) => Some(launch::copy_stage(req, paths, &plan, &mut trace)?),
        None => None,
    };
    // What `status --review`/`apply` seal an interrupted job from if this process dies.
    if let Err(e) = records::write_provisional(&records::Start {
        policy: &req.policy,
        plan: &plan,
        decision: &decision,
        job: &job,
        started,
        argv: &req.argv,
        controls: &limits.controls,
    }) {
        eprintln!("cofferdam: warning: {e}; if cofferdam dies mid-run the job cannot be sealed");
    }
    // A profile's state seeds (a host file copied once into the agent's state dir), the
    // last thing before the command starts.
    let seeded = crate::profile_apply::seed_state(&req.policy);
    for w in &seeded {
        eprintln!("cofferdam: warning: {}", crate::shown_text(w));
    }
    let go = Go { init, net };
    Ok((
        go,
        Prepared {
            decision,
            job,
            lock,
            plan,
            limits,
            started,
            trace,
            copy_stage,
            ctl,
            warnings: ctl_warning.into_iter().chain(seeded).collect(),
        },
    ))
}

/// The last phase of [`run`], once every process of the run is gone: judge the ending,
/// honour agentctl, set aside what the run created that would grant the next one more,
/// seal and write the records, mark the job staged.
fn conclude(
    req: &RunRequest,
    prepared: Prepared,
    ran: supervise::Ran,
) -> Result<Finished, Failure> {
    let Prepared {
        decision,
        job,
        lock,
        plan,
        limits,
        started,
        mut trace,
        copy_stage,
        ctl,
        warnings,
    } = prepared;
    let finished = now_ms();
    let (mut run, ending) = supervise::collect(ran, &limits, &job, started, finished, &mut trace);
    let agentctl = ctl.map(ctl::CtlServer::stop);
    if let Some(w) = agentctl.as_ref().and_then(|a| a.journal_error.clone()) {
        eprintln!("cofferdam: warning: {}", crate::shown_text(&w));
        run.warnings.push(w);
    }
    run.warnings.extend(warnings);
    // What the run created that would grant the next run more (a profile's absent
    // read-only file, in the agent's writable state) is set aside.
    for w in crate::profile_apply::set_aside_created(&req.policy, job.id()) {
        eprintln!("cofferdam: warning: {}", crate::shown_text(&w));
        run.warnings.push(w);
    }
    let mut ending = supervise::settle(
        &mut run, ending, copy_stage, &decision, &limits, &job, finished, &mut trace,
    )?;
    // A bare command not found because its PATH entry is private and not lent: the
    // record's failure says so and names the flag, as the message on stderr does.
    if let Ending::ExecFailed { error, code: 127 } = &mut ending
        && let Some(why) =
            crate::profile_apply::unlent_path_entry(&req.policy, &req.argv, &req.env.places.home)
    {
        *error = why;
    }
    let bundle = records::write_run_records(
        &records::RunRecords {
            policy: &req.policy,
            plan: &plan,
            decision: &decision,
            job: &job,
            argv: &req.argv,
            started,
            finished,
            ending: &ending,
            wait_for_init: limits.has_cgroup(),
            progress: req.progress,
        },
        run,
        trace,
        agentctl,
    )?;
    // The bundle holds what the agentctl journal kept for a supervisor that might die.
    ctl::forget_journal(&job);
    // `staged` is the last change under the lock, which goes right after: a job listed as
    // staged can be applied at once (`apply` waits a moment for a lock held on a job that
    // is not active; the load test applies jobs the moment they are listed staged).
    records::mark_staged(&job, &bundle, Durability::Prompt).map_err(Failure::setup)?;
    drop(lock);
    Ok(Finished {
        run_id: job.id().to_owned(),
        bundle_path: job.bundle_path(),
        exit_code: exit_code_of(&ending),
        bundle,
        ending,
    })
}

/// `path`, or its nearest ancestor that exists (a `--stage` directory may be made by the
/// run): the disk the job's stage will be on.
fn nearest_existing(path: &std::path::Path) -> PathBuf {
    path.ancestors()
        .find(|p| p.exists())
        .unwrap_or(path)
        .to_path_buf()
}

/// The run's trace once it has started: a write that fails is told at once
/// (`trace_append`) and kept, for the bundle's warnings.
pub(crate) struct TraceSink {
    log: TraceLog,
    lost: Vec<String>,
}

impl TraceSink {
    fn new(log: TraceLog) -> Self {
        Self {
            log,
            lost: Vec::new(),
        }
    }

    /// Append `events` in one write; `what` names them in the warning if it fails.
    fn append(&mut self, events: Vec<(u64, TraceEventKind)>, what: &str) {
        self.lost
            .extend(crate::trace_append::append(&mut self.log, events, what));
    }
}
