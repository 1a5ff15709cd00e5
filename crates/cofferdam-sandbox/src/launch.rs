//! The supervisor's side of the sealed tier: start the init (this same binary, re-executed
//! with [`crate::init::INIT_ARG`]), hand it the plan over a pipe, relay the command's
//! terminal or output while collecting the init's status messages (`crate::relay`), and wait
//! for it. The supervisor may be multi-threaded; everything that needs a single thread
//! happens in the init.
//!
//! The command's standard streams, by mode:
//! - **pass-through** (no terminal on stdin, no capture): the init inherits the supervisor's
//!   stdin, stdout and stderr, and so does the command;
//! - **pty** (the plan has a `terminal`): the init gets `/dev/null` on all three, so the
//!   caller's terminal never enters the sandbox; pid 1 allocates the command's pty inside and
//!   sends the master over the terminal socket (fd [`TERMINAL_FD`]); the supervisor relays
//!   its terminal (raw) to the master, and with a capture keeps a transcript;
//! - **capture without a pty**: stdin is inherited, stdout and stderr are pipes the
//!   supervisor copies to its own and to the capture files.
//!
//! Owns the process plumbing only: what the messages mean is the caller's business.

use crate::init::INIT_ARG;
use crate::relay::{CANCEL_SIGNALS, CapturedOutput, OutPipe, Relay, SIGNALS, SignalPipe, Sink};
use crate::status::{PLAN_FD, STATUS_FD, StatusMessage, TERMINAL_FD, parse};
use crate::watch::{Watch, WatchSpec};
use cofferdam_policy::plan::SandboxPlan;
use cofferdam_policy::verdict::Cause;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustix::pipe::PipeFlags;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// The default most bytes a capture file keeps (16 MiB); later bytes are counted only.
pub const CAPTURE_LIMIT: u64 = 16 * 1024 * 1024;

/// Where `--capture` saves the command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureSpec {
    /// The directory the capture files are created in (`stdout` and `stderr`, or `terminal`
    /// in pty mode); created 0700 when missing. The files are new (0600).
    pub dir: PathBuf,
    /// The most bytes each file keeps.
    pub limit: u64,
}

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
    /// The terminal socket could not be made.
    #[error("cannot create the terminal socket for the sandbox init: {0}")]
    Terminal(std::io::Error),
    /// A capture file could not be created.
    #[error("cannot create the capture file {path}: {source}")]
    Capture {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The relay loop failed; the sandbox was killed.
    #[error("cannot relay the sandbox's terminal or output: {0}")]
    Relay(std::io::Error),
    /// The init could not be placed in the run's cgroup; the sandbox was killed.
    #[error(
        "cannot place the sandbox in its cgroup ({path}): {source}; the limits it carries would \
         not apply, so the run was stopped before the command started"
    )]
    Cgroup {
        /// The `cgroup.procs` file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What a sealed run reported and how its init ended.
#[derive(Debug)]
pub struct SealedOutcome {
    /// Every status line, in order (unreadable lines as `Err`).
    pub messages: Vec<Result<StatusMessage, String>>,
    /// The init, still tearing the sandbox's namespaces down when the status stream ends;
    /// [`InitProcess::wait`] reaps it.
    pub init: InitProcess,
    /// What `--capture` saved (all `None` without it).
    pub output: CapturedOutput,
    /// Whether the command ran on its own pseudo-terminal relayed to the caller's.
    pub terminal: bool,
    /// Problems with the relay that did not stop the run (raw mode, a capture file).
    pub warnings: Vec<String>,
    /// Why the supervisor stopped the run (timeout, cancellation, stage cap), if it did.
    pub stop: Option<Cause>,
}

/// The sandbox init after the command ended. Reap it with [`InitProcess::wait`]: the status
/// stream ends when pid 1 exits, while the init may still be releasing the namespaces, so
/// the caller can seal and write its records first.
#[derive(Debug)]
pub struct InitProcess(std::process::Child);

impl InitProcess {
    /// Wait for the init: its exit status is the command's, or 125 on a setup failure.
    pub fn wait(mut self) -> Result<ExitStatus, LaunchError> {
        self.0.wait().map_err(LaunchError::Wait)
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(|e| LaunchError::Pipe(e.into()))
}

/// Move `fd` above the standard and hand-over descriptors, so the `dup2` onto 3, 4 and 5 in
/// the child can never clobber another one.
fn raise(fd: OwnedFd) -> Result<OwnedFd, LaunchError> {
    rustix::io::fcntl_dupfd_cloexec(&fd, 10).map_err(|e| LaunchError::Pipe(e.into()))
}

fn create_capture(spec: &CaptureSpec, name: &str) -> Result<Sink, LaunchError> {
    let path = spec.dir.join(name);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|source| LaunchError::Capture {
            path: path.clone(),
            source,
        })?;
    Ok(Sink::new(file, path, spec.limit))
}

/// Run `plan` in the sealed tier with `exe` as the init: on a new pseudo-terminal relayed to
/// this process's stdin and stdout when `plan.terminal` is set (stdin, when a terminal, is in
/// raw mode meanwhile), saving the output when `capture` is given, under `watch` (timeout,
/// cancellation by SIGINT/SIGTERM/SIGHUP, stage cap, cgroups to join). `on_start` is called
/// with the init's pid once it runs.
pub fn run_sealed(
    exe: &Path,
    plan: &SandboxPlan,
    capture: Option<&CaptureSpec>,
    watch: WatchSpec,
    on_start: impl FnOnce(u32),
) -> Result<SealedOutcome, LaunchError> {
    run_sealed_with_network(exe, plan, capture, watch, None, on_start)
}

/// [`run_sealed`], handing the init `network` (the sandbox's end of the network socket) as
/// fd [`cofferdam_net::handover::NET_FD`]: in `allow` mode pid 1 sends its listeners over it.
pub fn run_sealed_with_network(
    exe: &Path,
    plan: &SandboxPlan,
    capture: Option<&CaptureSpec>,
    watch: WatchSpec,
    network: Option<OwnedFd>,
    on_start: impl FnOnce(u32),
) -> Result<SealedOutcome, LaunchError> {
    let network = network.map(raise).transpose()?;
    let nc = network.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    let json = serde_json::to_vec(plan).map_err(LaunchError::Plan)?;
    let (plan_r, plan_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let plan_r = raise(plan_r)?;
    let status_w = raise(status_w)?;
    let (pr, sw) = (plan_r.as_raw_fd(), status_w.as_raw_fd());

    let terminal = plan.terminal.is_some();
    let (socket, socket_child) = if terminal {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| LaunchError::Terminal(e.into()))?;
        (Some(a), Some(raise(b)?))
    } else {
        (None, None)
    };
    let tc = socket_child.as_ref().map_or(-1, AsRawFd::as_raw_fd);

    if let Some(spec) = capture {
        match std::fs::DirBuilder::new().mode(0o700).create(&spec.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(LaunchError::Capture {
                    path: spec.dir.clone(),
                    source: e,
                });
            }
            _ => {}
        }
    }
    let terminal_sink = match capture {
        Some(spec) if terminal => Some(create_capture(spec, "terminal")?),
        _ => None,
    };
    let mut cmd = Command::new(exe);
    cmd.arg(INIT_ARG).env_clear();
    let (mut out, mut err) = (None, None);
    if terminal {
        // The caller's terminal never enters the sandbox: the command gets its own.
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    } else if let Some(spec) = capture {
        for (name, to, slot) in [("stdout", 1, &mut out), ("stderr", 2, &mut err)] {
            let sink = create_capture(spec, name)?;
            let (r, w) = pipe()?;
            if to == 1 {
                cmd.stdout(Stdio::from(w));
            } else {
                cmd.stderr(Stdio::from(w));
            }
            *slot = Some(OutPipe { fd: r, to, sink });
        }
    }
    // Installed before the init starts so a SIGTERM during setup is not lost; restored by
    // the relay after the terminal.
    let mut warnings = Vec::new();
    let signals = match SignalPipe::install(if terminal { SIGNALS } else { CANCEL_SIGNALS }) {
        Ok(s) => Some(s),
        Err(e) => {
            warnings.push(format!(
                "cannot handle signals for the relay ({e}): a cancellation ends the supervisor \
                 and, with it, the sandbox; window size changes are not passed on"
            ));
            None
        }
    };

    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (dup2, signal).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(pr, PLAN_FD) < 0
                || libc::dup2(sw, STATUS_FD) < 0
                || (tc >= 0 && libc::dup2(tc, TERMINAL_FD) < 0)
                || (nc >= 0 && libc::dup2(nc, cofferdam_net::handover::NET_FD) < 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            // The supervisor ignores the terminal's SIGINT/SIGQUIT while it waits; the
            // sandbox must not inherit that.
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
    if plan.tier != cofferdam_record::EnforcementTier::MountnsPivotRootLandlockSeccomp {
        // No pid namespace: what the command detaches must come back to this process if it
        // kills its init (`Watch::into_parts` ends it). prctl with these arguments cannot fail.
        let _ = crate::watch::become_subreaper();
    }
    let mut child = cmd.spawn().map_err(|source| LaunchError::Spawn {
        exe: exe.display().to_string(),
        source,
    })?;
    // The child's ends (and the pipe ends `cmd` holds) close here.
    drop(cmd);
    drop(plan_r);
    drop(status_w);
    drop(socket_child);
    drop(network);

    // Into the run's cgroups before the init reads its plan, so pid 1 and everything it
    // starts are inside from the first instruction on.
    for procs in &watch.cgroup_procs {
        if let Err(source) = std::fs::write(procs, child.id().to_string()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LaunchError::Cgroup {
                path: procs.clone(),
                source,
            });
        }
    }

    // The plan may exceed a pipe's buffer: write it whole, then close so the init sees EOF.
    // A write error means the init died early; its status says why. Written before
    // `on_start`, so the caller's bookkeeping overlaps the sandbox's setup.
    let mut plan_w = std::fs::File::from(plan_w);
    let _ = plan_w.write_all(&json);
    drop(plan_w);
    on_start(child.id());

    let relay = Relay {
        status: status_r,
        socket,
        terminal_sink,
        out,
        err,
        signals,
        watch: Watch::new(watch),
    };
    let relayed = match relay.run(&mut child) {
        Ok(r) => r,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LaunchError::Relay(e.into()));
        }
    };
    warnings.extend(relayed.warnings);
    Ok(SealedOutcome {
        messages: parse(&relayed.stream),
        init: InitProcess(child),
        output: relayed.output,
        terminal: relayed.terminal,
        warnings,
        stop: relayed.stop,
    })
}
