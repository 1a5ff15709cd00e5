//! `cofferdam kill JOB`: stop a live job from another terminal. Signals the job's
//! supervisor with SIGTERM, which cancels the run as Ctrl-C would (the workload gets
//! SIGTERM, a grace period, then the sandbox's pid namespace is killed) and writes the
//! records: the run ends `cancelled`, exit 130.
//!
//! A recycled pid is never signalled: the pid from `job.json` is pinned with a pidfd first,
//! then checked to be the supervisor's: `job.json` still names it on a live job, that very
//! process holds the job's lock (the kernel's lock table, `/proc/locks`; not merely "someone
//! holds it", which after a supervisor's crash may be any other cofferdam command on the
//! job), and it started before the run did (`/proc/PID/stat`). A process that got the pid
//! of a dead supervisor fails the last two; the pidfd keeps the pid from changing hands
//! between the checks and the signal.

use crate::cli::KillArgs;
use crate::cmd::jobref;
use crate::cmd::jobrules::job_failure;
use crate::exit::{Failure, INVALID, OK};
use cofferdam_stage::job::{Job, StageState};

fn not_live(job: &Job, why: &str) -> Failure {
    Failure {
        code: INVALID,
        message: format!(
            "job {} is not running ({why}); `cofferdam status {}` shows how it ended",
            job.id(),
            job.id()
        ),
    }
}

/// `cofferdam kill`.
pub fn kill(a: &KillArgs, json: bool) -> Result<u8, Failure> {
    let (_env, job) = jobref::open(&a.job)?;
    let state = job.state().map_err(job_failure)?;
    if state.state != StageState::Active {
        return Err(not_live(&job, "its run has ended"));
    }
    let Some(pid) = state.pid.and_then(|p| libc::pid_t::try_from(p).ok()) else {
        return Err(not_live(&job, "no supervisor is recorded"));
    };
    let opened = rustix::process::Pid::from_raw(pid)
        .map(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()));
    let Some(Ok(fd)) = opened else {
        return Err(not_live(&job, "its supervisor is gone"));
    };
    let still = job.state().map_err(job_failure)?;
    let recorded = still.state == StageState::Active
        && still.pid.and_then(|p| libc::pid_t::try_from(p).ok()) == Some(pid);
    let holds_lock = match job.lock_held_by(pid.unsigned_abs()).map_err(job_failure)? {
        Some(held) => held,
        // No lock table to read: the weaker "someone holds it" plus the start time.
        None => job.is_locked().map_err(job_failure)?,
    };
    let live = recorded && holds_lock && started_by(pid.unsigned_abs(), still.started_at_unix_ms);
    if !live {
        return Err(not_live(&job, "its supervisor is gone"));
    }
    if let Err(e) = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::TERM) {
        return Err(Failure::setup(format!(
            "cannot signal job {}'s supervisor (pid {pid}): {}",
            job.id(),
            std::io::Error::from(e)
        )));
    }
    if json {
        crate::print_json(&serde_json::json!({ "job": job.id(), "signalled": pid }))?;
    } else {
        eprintln!(
            "cofferdam: asked job {} to stop (SIGTERM to its supervisor, pid {pid}); it stops \
             the sandbox and writes the record",
            job.id()
        );
    }
    Ok(OK)
}

/// How far a supervisor's start may seem to lie after the run's recorded start: the two
/// clocks read differ (boot time against wall time) and `/proc` counts in clock ticks.
const START_SLACK_MS: u64 = 5_000;

/// Whether process `pid` started no later than `run_started_ms` (Unix ms, recorded by the
/// supervisor after it started); true when the run recorded no start. A process that took
/// over the pid of a dead supervisor started after it. False when `/proc/PID/stat` cannot
/// be read.
fn started_by(pid: u32, run_started_ms: Option<u64>) -> bool {
    let Some(run_started) = run_started_ms else {
        return true;
    };
    process_start_unix_ms(pid)
        .is_some_and(|start| start <= run_started.saturating_add(START_SLACK_MS))
}

/// When process `pid` started, Unix milliseconds: field 22 of `/proc/PID/stat` (clock ticks
/// since boot) against `CLOCK_BOOTTIME` and the wall clock read now.
fn process_start_unix_ms(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses) start at 3.
    let ticks: u64 = stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()?;
    let hz = rustix::param::clock_ticks_per_second();
    let since_boot = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let boot_ms = u64::try_from(since_boot.tv_sec).ok()?.saturating_mul(1000)
        + u64::try_from(since_boot.tv_nsec).ok()? / 1_000_000;
    let age_ms = boot_ms.saturating_sub(ticks.saturating_mul(1000) / hz.max(1));
    Some(crate::cmd::jobrules::now_ms().saturating_sub(age_ms))
}
