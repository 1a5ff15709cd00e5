//! The supervisor's side of the sealed tier: start the init (this same binary, re-executed
//! with [`crate::init::INIT_ARG`]), hand it the plan over a pipe, collect its status
//! messages, and wait for it. The supervisor may be multi-threaded; everything that needs a
//! single thread happens in the init.
//!
//! Owns the process plumbing only: what the messages mean is the caller's business.

use crate::init::INIT_ARG;
use crate::status::{PLAN_FD, STATUS_FD, StatusMessage, parse};
use cofferdam_policy::plan::SandboxPlan;
use rustix::pipe::PipeFlags;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};

/// The launch itself failed (before any status could be read).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A pipe could not be made.
    #[error("cannot create a pipe for the sandbox init: {0}")]
    Pipe(std::io::Error),
    /// The init could not be started.
    #[error("cannot start the sandbox init {exe}: {source}")]
    Spawn {
        /// The executable.
        exe: String,
        /// Why.
        source: std::io::Error,
    },
    /// The plan could not be serialized.
    #[error("cannot serialize the sandbox plan: {0}")]
    Plan(serde_json::Error),
    /// Waiting for the init failed.
    #[error("cannot wait for the sandbox init: {0}")]
    Wait(std::io::Error),
}

/// What a sealed run reported and how its init ended.
#[derive(Debug)]
pub struct SealedOutcome {
    /// Every status line, in order (unreadable lines as `Err`).
    pub messages: Vec<Result<StatusMessage, String>>,
    /// The init's exit status (the command's status, or 125 on a setup failure).
    pub status: ExitStatus,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(|e| LaunchError::Pipe(e.into()))
}

/// Move `fd` above the standard and hand-over descriptors, so the `dup2` onto 3 and 4 in the
/// child can never clobber the other one.
fn raise(fd: OwnedFd) -> Result<OwnedFd, LaunchError> {
    rustix::io::fcntl_dupfd_cloexec(&fd, 10).map_err(|e| LaunchError::Pipe(e.into()))
}

/// Run `plan` in the sealed tier with `exe` as the init. `on_start` is called with the init's
/// pid once it runs (for cancellation from another thread).
pub fn run_sealed(
    exe: &Path,
    plan: &SandboxPlan,
    on_start: impl FnOnce(u32),
) -> Result<SealedOutcome, LaunchError> {
    let json = serde_json::to_vec(plan).map_err(LaunchError::Plan)?;
    let (plan_r, plan_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let plan_r = raise(plan_r)?;
    let status_w = raise(status_w)?;
    let (pr, sw) = (plan_r.as_raw_fd(), status_w.as_raw_fd());

    let mut cmd = Command::new(exe);
    cmd.arg(INIT_ARG).env_clear();
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (dup2, signal).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(pr, PLAN_FD) < 0 || libc::dup2(sw, STATUS_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The supervisor ignores the terminal's SIGINT/SIGQUIT while it waits; the
            // sandbox must not inherit that.
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
        exe: exe.display().to_string(),
        source,
    })?;
    drop(plan_r);
    drop(status_w);
    on_start(child.id());

    // The plan may exceed a pipe's buffer: write it whole, then close so the init sees EOF.
    // A write error means the init died early; its status says why.
    let mut plan_w = std::fs::File::from(plan_w);
    let _ = plan_w.write_all(&json);
    drop(plan_w);

    let mut stream = Vec::new();
    let mut status_r = std::fs::File::from(status_r);
    let _ = status_r.read_to_end(&mut stream);
    let status = child.wait().map_err(LaunchError::Wait)?;
    Ok(SealedOutcome {
        messages: parse(&stream),
        status,
    })
}
