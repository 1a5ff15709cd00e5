//! The supervisor's side of the sealed tier: start the init (a fork of this process that
//! runs the init's entry, `crate::fork`; or, when this process has other threads, this same
//! binary re-executed with [`crate::init::INIT_ARG`]) as early as possible
//! ([`spawn_init`]), hand it the plan over a pipe once there is one and the go once the job
//! is in place ([`PendingInit`]), relay the command's terminal or output while collecting
//! the init's status messages (`crate::relay`) until the status stream ends, which is when
//! the last process of the run is gone. The supervisor may be multi-threaded (the init is
//! then exec'd, not forked); everything that needs a single thread happens in the init.
//!
//! The command's standard streams are never the caller's descriptors (a host file on stdout
//! could be `fchmod`ed through `/proc/self/fd/1`; the caller's terminal on stdout could be
//! read and re-moded). By mode:
//! - **pty** (the plan has a `terminal`): the init gets `/dev/null` on all three, so the
//!   caller's terminal never enters the sandbox; pid 1 allocates the command's pty inside and
//!   sends the master over the terminal socket (fd [`fds::TERMINAL`]); the supervisor relays
//!   its terminal (raw) to the master, and with a capture keeps a transcript;
//! - **pipes** (every other run): stdin, stdout and stderr are three pipes made here; the
//!   supervisor copies its stdin into the first and the other two to its own stdout and
//!   stderr (`splice(2)` where the kernel takes it), and to the capture files with
//!   `--capture`. When its own stdout and stderr are one file (`2>&1`, one terminal) and
//!   nothing is captured, the command's stdout and stderr are one pipe, so their order holds.
//!
//! Owns the process plumbing only: what the messages mean is the caller's business.

use crate::fds;
use crate::init::{EarlyNamespaces, INIT_ARG};
use crate::relay::{
    CANCEL_SIGNALS, CapturedOutput, InPipe, OutPipe, Relay, SIGNALS, SignalPipe, Sink,
};
use crate::spawn::{SpawnSpec, Spawned};
use crate::status::{StatusMessage, parse};
use crate::watch::{Watch, WatchSpec};
use cofferdam_policy::plan::SandboxPlan;
use cofferdam_policy::verdict::Cause;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustix::pipe::PipeFlags;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

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
    /// The plan could not be framed (serialized, or over the channel's bound).
    #[error("cannot send the sandbox plan: {0}")]
    Plan(cofferdam_channel::ChannelError),
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
    /// What the file watch saw, for a plan that watches files: `Err` names why no watch
    /// was placed; `None` when pid 1 never asked (no such plan, or it failed first).
    pub files: Option<Result<crate::fanotify::tally::Tally, String>>,
}

/// The sandbox init after the command ended. Reap it with [`InitProcess::wait`]: the status
/// stream ends when pid 1 exits, while the init may still be releasing the namespaces, so
/// the caller can seal and write its records first.
#[derive(Debug)]
pub struct InitProcess(Spawned);

impl InitProcess {
    /// Wait for the init: its exit status is the command's, or 125 on a setup failure.
    pub fn wait(mut self) -> Result<ExitStatus, LaunchError> {
        self.0.wait().map_err(LaunchError::Wait)
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    rustix::pipe::pipe_with(PipeFlags::CLOEXEC).map_err(|e| LaunchError::Pipe(e.into()))
}

/// Move `fd` above the standard and hand-over descriptors (0 to 6), so no `dup2` onto those
/// in the child can clobber another one.
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

/// Whether this process's stdout and stderr are the same file (`2>&1`, or both one
/// terminal): then the command's two are one pipe too.
fn stdout_is_stderr() -> bool {
    let (out, err) = (std::io::stdout(), std::io::stderr());
    match (
        rustix::fs::fstat(out.as_fd()),
        rustix::fs::fstat(err.as_fd()),
    ) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// How the init's standard streams are wired; decided before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streams {
    /// The command gets its own pseudo-terminal, relayed to this process's terminal (stdin
    /// in raw mode meanwhile); the plan then carries a `terminal`. Otherwise pipes.
    pub terminal: bool,
    /// `--capture`: stdout and stderr are also saved in the job (with a terminal, the
    /// transcript).
    pub capture: bool,
}

/// An init that runs but waits: first for its plan ([`PendingInit::send_plan`]), then for
/// the go ([`PendingInit::start`]). Starting it before the job exists lets its start-up
/// and its namespaces overlap the supervisor's own setup (`crate::init`'s plan channel).
/// Dropped without [`PendingInit::start`], it kills and reaps the init.
#[derive(Debug)]
pub struct PendingInit {
    child: Option<Spawned>,
    plan_w: Option<OwnedFd>,
    status_r: Option<OwnedFd>,
    socket: Option<OwnedFd>,
    /// Read ends of the stdout (1) and stderr (2) pipes, without a terminal.
    out_pipes: Vec<(i32, OwnedFd)>,
    /// Write end of the stdin pipe, without a terminal.
    in_pipe: Option<OwnedFd>,
    signals: Option<SignalPipe>,
    warnings: Vec<String>,
    terminal: bool,
    /// Whether the plan is for a tier without a pid namespace.
    copy_tier: bool,
    /// The cgroup placement running in the background, joined before the go.
    joining: Option<Joining>,
    /// Why the init is not in the v1 cgroups it was to be born in, if it is not.
    born_outside: Option<LaunchError>,
    /// The workdir inside the sandbox, when the plan watches files.
    watch_workdir: Option<PathBuf>,
}

/// The init's placement in the run's cgroups ([`PendingInit::join_cgroups`]).
#[derive(Debug)]
enum Joining {
    Thread(std::thread::JoinHandle<Result<(), LaunchError>>),
    Done(Result<(), LaunchError>),
}

/// Start `exe` as the sandbox init (see [`PendingInit`]), its streams wired per `streams`;
/// with `early` (the sealed tier) it makes its namespaces at once, before its plan comes;
/// handing it `network` (the sandbox's end of the network socket) as fd
/// [`fds::NET`]: in `allow` mode pid 1 sends its listeners over it; and `publish` (the
/// sandbox's end of the publish socket) as fd [`fds::PUBLISH`], served by the init.
/// `born_in` are the run's cgroup v1 directories: the init starts inside them
/// ([`spawn_inside`]), and [`PendingInit::start`] refuses the go if it is not listed there.
pub fn spawn_init(
    exe: &Path,
    streams: Streams,
    early: Option<EarlyNamespaces>,
    network: Option<OwnedFd>,
    publish: Option<OwnedFd>,
    born_in: &[PathBuf],
) -> Result<PendingInit, LaunchError> {
    let network = network.map(raise).transpose()?;
    let nc = network.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    let publish = publish.map(raise).transpose()?;
    let uc = publish.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    let (plan_r, plan_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let plan_r = raise(plan_r)?;
    let status_w = raise(status_w)?;
    let (pr, sw) = (plan_r.as_raw_fd(), status_w.as_raw_fd());

    let terminal = streams.terminal;
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

    // Every source below is raised above the targets (0 to 7), so no `dup2` in the child
    // clobbers another source or lands on itself.
    let mut fds = vec![(pr, fds::PLAN), (sw, fds::STATUS)];
    if tc >= 0 {
        fds.push((tc, fds::TERMINAL));
    }
    if nc >= 0 {
        fds.push((nc, fds::NET));
    }
    if uc >= 0 {
        fds.push((uc, fds::PUBLISH));
    }
    let mut out_pipes = Vec::new();
    let mut in_pipe = None;
    // The child's ends of the standard streams, closed here once it has started.
    let mut child_ends = Vec::new();
    if terminal {
        // The caller's terminal never enters the sandbox: the command gets its own.
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(LaunchError::Pipe)?;
        let null = raise(null.into())?;
        fds.extend([0, 1, 2].map(|to| (null.as_raw_fd(), to)));
        child_ends.push(null);
    } else {
        // Pipes made here, relayed by the supervisor: nothing the command does through its
        // standard streams (fchmod, ioctls, reopening /proc/self/fd/N) reaches a host file
        // or terminal.
        let (r, w) = pipe()?;
        let r = raise(r)?;
        fds.push((r.as_raw_fd(), 0));
        child_ends.push(r);
        in_pipe = Some(w);
        if !streams.capture && stdout_is_stderr() {
            // `2>&1`: one pipe on both, relayed to stdout, so the command's writes keep
            // their order (two pipes would be drained in whatever order poll reports them).
            let (r, w) = pipe()?;
            let w = raise(w)?;
            fds.extend([1, 2].map(|to| (w.as_raw_fd(), to)));
            child_ends.push(w);
            out_pipes.push((1, r));
        } else {
            for to in [1, 2] {
                let (r, w) = pipe()?;
                let w = raise(w)?;
                fds.push((w.as_raw_fd(), to));
                child_ends.push(w);
                out_pipes.push((to, r));
            }
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

    let spawn_error = |source| LaunchError::Spawn {
        exe: exe.display().to_string(),
        source,
    };
    let c_string = |bytes: &[u8]| {
        CString::new(bytes)
            .map_err(|e| spawn_error(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))
    };
    let exe_c = c_string(exe.as_os_str().as_bytes())?;
    let mut argv = vec![exe_c.clone(), c_string(INIT_ARG.as_bytes())?];
    if let Some(early) = early {
        argv.push(c_string(early.to_arg().as_bytes())?);
    }
    let spec = SpawnSpec {
        exe: &exe_c,
        argv: &argv,
        fds: &fds,
        // The supervisor ignores the terminal's SIGINT/SIGQUIT while it waits, and SIGPIPE
        // (as every Rust program does; the binary's entry sets it): the sandbox must not
        // inherit that.
        default_signals: &[libc::SIGINT, libc::SIGQUIT, libc::SIGPIPE],
    };
    let (child, born_outside) = spawn_inside(&spec, early, born_in, &spawn_error, &mut warnings)?;
    // The child's ends close here.
    drop(child_ends);
    drop(plan_r);
    drop(status_w);
    drop(socket_child);
    drop(network);
    drop(publish);
    Ok(PendingInit {
        child: Some(child),
        plan_w: Some(plan_w),
        watch_workdir: None,
        status_r: Some(status_r),
        socket,
        out_pipes,
        in_pipe,
        signals,
        warnings,
        terminal,
        copy_tier: false,
        joining: None,
        born_outside,
    })
}

/// Start `spec` inside the cgroup v1 directories `dirs`: this thread moves itself into
/// each (`0` into its `tasks` file), starts the child, which inherits its creator thread's
/// cgroups, and moves itself back into its own (each directory's parent), so the child
/// never runs outside them. A thread moving itself is the one placement the kernel makes
/// without its global threadgroup lock, whose writer waits for an RCU grace period when no
/// other move happened just before (writing a pid into `cgroup.procs`: about 7 ms per run
/// here, traced, on runs 0.3 s apart, against 0.2 ms). This thread, not a short-lived one:
/// the init's parent-death signal fires when the thread that started it ends. What this
/// thread allocates during the spawn may be charged to the run's memory cgroup.
///
/// Returns the child and, when it is not listed in every `cgroup.procs` afterwards (the
/// placement read back), why: the caller must not let it go. A failed move is an error
/// before anything is started; a failed move back, a warning.
fn spawn_inside(
    spec: &SpawnSpec<'_>,
    early: Option<EarlyNamespaces>,
    dirs: &[PathBuf],
    spawn_error: &dyn Fn(std::io::Error) -> LaunchError,
    warnings: &mut Vec<String>,
) -> Result<(Spawned, Option<LaunchError>), LaunchError> {
    // A fork that runs the init's entry without an exec (`crate::fork`), or, when this
    // process has other threads, the exec of `spec`.
    let spawn = || {
        let entry = || crate::entry::forked_main(early);
        match crate::fork::fork_init(spec, &entry).map_err(spawn_error)? {
            Some(child) => Ok(child),
            None => crate::spawn::spawn(spec).map_err(spawn_error),
        }
    };
    if dirs.is_empty() {
        return spawn().map(|c| (c, None));
    }
    let move_back = |warnings: &mut Vec<String>, moved: &[&PathBuf]| {
        for dir in moved {
            let own = dir.parent().unwrap_or(dir).join("tasks");
            if let Err(e) = std::fs::write(&own, "0") {
                warnings.push(format!(
                    "the supervisor could not move back out of the run's cgroup ({}: {e});                      it counts against the run's limits until it ends",
                    own.display()
                ));
            }
        }
    };
    let mut moved = Vec::new();
    for dir in dirs {
        let path = dir.join("tasks");
        if crate::mutant::active(crate::mutant::CGROUP_JOIN) {
            continue;
        }
        if let Err(source) = std::fs::write(&path, "0") {
            move_back(warnings, &moved);
            return Err(LaunchError::Cgroup { path, source });
        }
        moved.push(dir);
    }
    let child = spawn();
    move_back(warnings, &moved);
    let child = child?;
    let pid = child.id().to_string();
    let unlisted = dirs
        .iter()
        .map(|d| d.join("cgroup.procs"))
        .find_map(|path| listed(&pid, &path).err());
    Ok((child, unlisted))
}

/// Move process `pid` into each `cgroup.procs` file of `procs`, each read back.
fn move_by_pid(pid: &str, procs: Vec<PathBuf>) -> Result<(), LaunchError> {
    for path in procs {
        let written = if crate::mutant::active(crate::mutant::CGROUP_JOIN) {
            Ok(())
        } else {
            std::fs::write(&path, pid)
        };
        if let Err(source) = written {
            return Err(LaunchError::Cgroup { path, source });
        }
        listed(pid, &path)?;
    }
    Ok(())
}

/// The placement read back: `pid` must be listed in the `cgroup.procs` file `path`.
fn listed(pid: &str, path: &Path) -> Result<(), LaunchError> {
    let error = |source| LaunchError::Cgroup {
        path: path.to_path_buf(),
        source,
    };
    let list = std::fs::read_to_string(path).map_err(error)?;
    if list.lines().any(|p| p.trim() == pid) {
        Ok(())
    } else {
        Err(error(std::io::Error::other(format!(
            "the init (pid {pid}) is not listed in it after its placement"
        ))))
    }
}

impl PendingInit {
    /// The init's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Spawned::id)
    }

    /// Hand the init its plan; it makes its namespaces, then waits for the go. A write
    /// error means the init died early: its status says why, once the relay reads it.
    pub fn send_plan(&mut self, plan: &SandboxPlan) -> Result<(), LaunchError> {
        debug_assert_eq!(plan.terminal.is_some(), self.terminal);
        self.copy_tier =
            plan.tier != cofferdam_record::EnforcementTier::MountnsPivotRootLandlockSeccomp;
        self.watch_workdir = plan.watch_files.then(|| plan.fs.workdir.clone());
        if let Some(w) = self.plan_w.as_ref() {
            // The plan may exceed a pipe's buffer: this waits for the init to read it. A
            // peer that is gone died early (its status says why); any other failure is
            // the plan's own.
            match crate::plan_channel::send_plan(w.as_fd(), plan) {
                Err(e) if e.step == cofferdam_channel::Step::Send => {}
                other => other.map_err(LaunchError::Plan)?,
            }
        }
        Ok(())
    }

    /// Place the init in the run's cgroups by pid (their `cgroup.procs` files: the unified
    /// hierarchy's, where a domain cgroup takes no single thread; the v1 ones are
    /// [`spawn_init`]'s `born_in`), in the background: such a move waits for the kernel's
    /// RCU grace period, time the supervisor spends on its own setup meanwhile.
    /// [`PendingInit::start`] waits for it before the go, which the init waits for before it
    /// starts pid 1.
    pub fn join_cgroups(&mut self, procs: Vec<PathBuf>) {
        if procs.is_empty() {
            return;
        }
        let pid = self.pid().to_string();
        let place = move || move_by_pid(&pid, procs);
        self.joining = Some(
            match std::thread::Builder::new()
                .name("cgroup-join".into())
                .spawn(place.clone())
            {
                Ok(handle) => Joining::Thread(handle),
                // No thread to spare: place it here, and wait for the RCU grace period.
                Err(_) => Joining::Done(place()),
            },
        );
    }

    fn finish_join(&mut self) -> Result<(), LaunchError> {
        let joined = self.joining.take();
        if let Some(e) = self.born_outside.take() {
            // The other placement is waited for too (its thread must not outlive this).
            if let Some(Joining::Thread(handle)) = joined {
                let _ = handle.join();
            }
            return Err(e);
        }
        match joined {
            None => Ok(()),
            Some(Joining::Done(result)) => result,
            Some(Joining::Thread(handle)) => handle.join().unwrap_or_else(|_| {
                Err(LaunchError::Cgroup {
                    path: PathBuf::from("cgroup.procs"),
                    source: std::io::Error::other("the thread placing the init panicked"),
                })
            }),
        }
    }

    /// Let the init go: relay the command's terminal or output (saving it when `capture`
    /// is given) while collecting its status messages, under `watch` (timeout, cancellation
    /// by SIGINT/SIGTERM/SIGHUP, stage cap; the cgroups must have been joined with
    /// [`PendingInit::join_cgroups`]). `on_start` is called with the init's pid once it may
    /// start the command.
    pub fn start(
        mut self,
        capture: Option<&CaptureSpec>,
        watch: WatchSpec,
        on_start: impl FnOnce(u32),
    ) -> Result<SealedOutcome, LaunchError> {
        // Outside the run's cgroups its limits would not apply: the init is killed (drop).
        // An init that failed before the go has exited, which is why it could not be
        // placed: its own reason is the one to tell, not the placement's.
        if let Err(e) = self.finish_join() {
            return match self.failed_before_go(&e) {
                Some(outcome) => Ok(outcome),
                None => Err(e),
            };
        }
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
            Some(spec) if self.terminal => Some(create_capture(spec, "terminal")?),
            _ => None,
        };
        let (mut out, mut err) = (None, None);
        for (to, fd) in std::mem::take(&mut self.out_pipes) {
            let sink = match capture {
                Some(spec) => Some(create_capture(
                    spec,
                    if to == 1 { "stdout" } else { "stderr" },
                )?),
                None => None,
            };
            let pipe = OutPipe::new(fd, to, sink);
            if to == 1 {
                out = Some(pipe);
            } else {
                err = Some(pipe);
            }
        }
        if self.copy_tier {
            // No pid namespace: what the command detaches must come back to this process if
            // it kills its init (`Watch::into_parts` ends it). prctl with these arguments
            // cannot fail.
            let _ = crate::watch::become_subreaper();
        }
        let plan_w = self.plan_w.take();
        if let Some(w) = &plan_w {
            // A write error means the init died early; its status says why.
            let _ = crate::plan_channel::send_go(w.as_fd());
        }
        let Some(mut child) = self.child.take() else {
            return Err(LaunchError::Wait(std::io::Error::other("the init is gone")));
        };
        on_start(child.id());
        // Pid 1 shares the init's mount namespace, whose root its pivot made the init's
        // too: the workdir's mount is reached through the init's root.
        let file_watch = match (plan_w, self.watch_workdir.take()) {
            (Some(reply), Some(workdir)) => Some(crate::relay::FileWatchRequest {
                init_pid: child.id(),
                workdir,
                reply,
            }),
            _ => None,
        };

        let relay = Relay {
            status: self
                .status_r
                .take()
                .ok_or_else(|| LaunchError::Pipe(std::io::Error::other("no status pipe")))?,
            socket: self.socket.take(),
            terminal_sink,
            out,
            err,
            input: self.in_pipe.take().map(InPipe::new),
            signals: self.signals.take(),
            watch: Watch::new(watch),
            subreaper: self.copy_tier,
            file_watch,
        };
        let relayed = match relay.run(&mut child) {
            Ok(r) => r,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LaunchError::Relay(e.into()));
            }
        };
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.extend(relayed.warnings);
        Ok(SealedOutcome {
            messages: parse(&relayed.stream),
            init: InitProcess(child),
            output: relayed.output,
            terminal: relayed.terminal,
            warnings,
            stop: relayed.stop,
            // Every process of the run is gone: what is queued is all there will be.
            files: relayed
                .file_watch
                .map(|w| w.map(crate::fanotify::FileWatch::finish)),
        })
    }
}

impl PendingInit {
    /// After the placement failed with `placement`: the init is stopped (the plan pipe
    /// closed, then SIGKILL) and reaped, and what it had reported is read without waiting.
    /// When it had reported a setup failure, that is the outcome (the placement's error a
    /// warning after it); otherwise `None` and the placement error stands.
    fn failed_before_go(&mut self, placement: &LaunchError) -> Option<SealedOutcome> {
        drop(self.plan_w.take());
        let mut child = self.child.take()?;
        let _ = child.kill();
        let _ = child.wait();
        let stream = self
            .status_r
            .as_ref()
            .map(|fd| drain(fd.as_fd()))
            .unwrap_or_default();
        let messages = parse(&stream);
        let failed = messages
            .iter()
            .any(|m| matches!(m, Ok(StatusMessage::SetupFailed { .. })));
        if !failed {
            self.child = Some(child);
            return None;
        }
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.push(format!(
            "{placement} (the sandbox init had already failed before the go)"
        ));
        Some(SealedOutcome {
            messages,
            init: InitProcess(child),
            output: CapturedOutput::default(),
            terminal: false,
            warnings,
            stop: None,
            files: None,
        })
    }
}

/// Everything `fd` (a pipe whose writers are gone) holds now, read without blocking.
fn drain(fd: rustix::fd::BorrowedFd<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    if rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).is_err() {
        return out;
    }
    let mut buf = [0u8; 4096];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    out
}

impl Drop for PendingInit {
    fn drop(&mut self) {
        // Closing the plan pipe first: an init still waiting for its plan or the go leaves.
        drop(self.plan_w.take());
        let _ = self.finish_join();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
