//! `cofferdam kill JOB`: stop a live job from another terminal. Signals the job's
//! supervisor with SIGTERM, which cancels the run as Ctrl-C would (the workload gets
//! SIGTERM, a grace period, then the sandbox's pid namespace is killed) and writes the
//! records: the run ends `cancelled`, exit 130.
//!
//! A recycled pid is never signalled: the pid from `job.json` is pinned with a pidfd first,
//! then the job is checked to be still live (its lock held, `job.json` still naming that
//! pid). The supervisor holds the lock for the whole run and its pid cannot be reused while
//! it lives, so the pidfd can only be the supervisor's.

use crate::cli::KillArgs;
use crate::cmd::apply::{job_failure, resolve};
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
    let (_env, job) = resolve(&a.job)?;
    let state = job.state().map_err(job_failure)?;
    if state.state != StageState::Active {
        return Err(not_live(&job, "its run has ended"));
    }
    let Some(pid) = state.pid.and_then(|p| libc::pid_t::try_from(p).ok()) else {
        return Err(not_live(&job, "no supervisor is recorded"));
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(not_live(&job, "its supervisor is gone"));
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| Failure::setup("pidfd out of range"))?;
    // SAFETY: `fd` was just returned by pidfd_open and is owned here only.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let still = job.state().map_err(job_failure)?;
    let live = job.is_locked().map_err(job_failure)?
        && still.state == StageState::Active
        && still.pid.and_then(|p| libc::pid_t::try_from(p).ok()) == Some(pid);
    if !live {
        return Err(not_live(&job, "its supervisor is gone"));
    }
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    // SAFETY: pidfd_send_signal on a valid pidfd with a null siginfo and no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            raw,
            libc::SIGTERM,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r != 0 {
        return Err(Failure::setup(format!(
            "cannot signal job {}'s supervisor (pid {pid}): {}",
            job.id(),
            std::io::Error::last_os_error()
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
