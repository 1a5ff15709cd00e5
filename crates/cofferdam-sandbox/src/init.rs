//! The sandbox init: the hidden re-executed process that installs the sealed tier in the
//! order of DESIGN.md §3, reporting each control over the status channel, then runs the
//! command as the child of its own pid 1.
//!
//! Process tree: the supervisor (`cofferdam run`) re-executes itself as the init; the init
//! creates the user namespace and the other namespaces (named on its command line, before
//! the job exists: see [`EarlyNamespaces`]), reads its plan, waits for the supervisor's go
//! (the job is in place and the init is in the run's cgroups), makes the cgroup namespace,
//! then forks pid 1 of the new pid namespace. It keeps its copy of the status channel until
//! pid 1 is reaped, so the channel's end tells the supervisor that no process of the run is
//! left. Pid 1 composes the root and pivots into it, brings up loopback, applies
//! rlimits, closes inherited descriptors, drops capabilities, sets no_new_privs, installs
//! Landlock and seccomp (last), sends the ready marker, then forks and execs the command. It
//! reaps every process in the namespace, forwards termination signals, and exits with the
//! command's status; its exit kills everything left in the namespace. Each of the three dies
//! with its parent (`PR_SET_PDEATHSIG`), so the sandbox never outlives the supervisor.
//!
//! Without a `terminal` in the plan the command starts in a new session, so it has no
//! controlling terminal and cannot open the caller's through `/dev/tty`; pid 1 passes the
//! terminal's SIGINT, SIGQUIT, SIGTSTP (as SIGSTOP) and SIGCONT on to its process group.
//!
//! When the plan has a `terminal`, pid 1 keeps the terminal socket (fd 5) through the
//! descriptor sweep, and after the ready marker allocates the command's pseudo-terminal from
//! the sandbox's own devpts, sends the master to the supervisor and closes the socket; the
//! command starts in a new session with the slave as its controlling terminal and on fds
//! 0–2 (`crate::pty`). Pid 1 then also reports a stop of the command (`Stopped`) and passes
//! SIGCONT on to its process group.
//!
//! Owns the order of effects only: every decision is in the plan, every mechanism in its own
//! module. It must stay single-threaded. A plan for a tier without namespaces (scoped,
//! advisory) is run by `crate::scoped`, which reuses the command's exec and reaping here;
//! `crate::entry` chooses between the two, so this module does not import `scoped`.

use crate::fds;
use crate::plan_channel::{NO_GO, PlanChannel};
use crate::setup::{self, check, fail, first_refusal, open_terminal, refuse, report};
use crate::setup_error::SetupError;
use crate::sigaction;
use crate::status::StatusMessage;
use crate::{pty, userns};
use cofferdam_policy::plan::SandboxPlan;
use cofferdam_record::bundle::{ControlObservation, ControlStatus};
use rustix::process::{Pid, Signal, WaitOptions};
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The hidden first argument that makes the binary run as the sandbox init.
pub const INIT_ARG: &str = "__cofferdam-sandbox-init";

pub use crate::setup_error::SETUP_FAILED;

/// The process the forwarding handlers signal (pid 1's command, or init's pid 1).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    // kill(2) is async-signal-safe, and rustix's is the raw system call (errno untouched).
    // `pid` is a child of this process.
    if let (Some(pid), Some(sig)) = (Pid::from_raw(pid), Signal::from_named_raw(sig)) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

extern "C" fn continue_group(_sig: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    // The process group the command leads (its own, in the init's session, or its
    // session's), so a stop of its terminal's foreground group is undone whole; SIGWINCH
    // then asks a full-screen program to redraw the screen the caller's shell used
    // meanwhile. kill(2) is async-signal-safe, as in `forward`.
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(pid, Signal::CONT);
        let _ = rustix::process::kill_process_group(pid, Signal::WINCH);
    }
}

/// Signals a terminal sends its foreground process group. A command that gets no terminal
/// of its own starts in a new session (so it cannot open the caller's terminal through
/// `/dev/tty`), which takes it out of that group: pid 1, still in it, passes these on to
/// the command's process group.
const FROM_CALLERS_TERMINAL: &[libc::c_int] =
    &[libc::SIGINT, libc::SIGQUIT, libc::SIGTSTP, libc::SIGCONT];

extern "C" fn forward_to_group(sig: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    // The command's group is orphaned (its parent is in another session), and the kernel
    // discards terminal stop signals there: a stop is passed on as SIGSTOP.
    let sig = if sig == libc::SIGTSTP {
        libc::SIGSTOP
    } else {
        sig
    };
    // The process group the command leads (it called setsid); kill(2) as in `forward`.
    if let (Some(pid), Some(sig)) = (Pid::from_raw(pid), Signal::from_named_raw(sig)) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

/// Run `handler` on each of `sigs` (SA_RESTART, empty mask). A signal the kernel refuses
/// (none of these) keeps its disposition, as before.
fn set_handlers(sigs: &[libc::c_int], handler: extern "C" fn(libc::c_int)) {
    for &sig in sigs {
        // SAFETY: the handlers of this module (`forward`, `continue_group`,
        // `forward_to_group`) only read an atomic and make the raw kill(2) system call
        // (rustix's, which leaves errno alone): async-signal-safe, no allocation, no lock.
        let _ = unsafe { sigaction::set_handler(sig, handler, sigaction::Mask::Empty, true) };
    }
}

/// Reset each of `sigs` to its default action.
fn reset_handlers(sigs: &[libc::c_int]) {
    for &sig in sigs {
        let _ = sigaction::set_default(sig);
    }
}

/// Signals a parent in the tree passes on to its child. SIGINT and SIGQUIT are not among
/// them: the terminal sends those to the whole foreground process group, the command
/// included.
const FORWARDED: &[libc::c_int] = &[libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];

/// What the supervisor tells the init on its command line, before any plan: the sealed
/// tier's namespaces, which the init makes at once, while the supervisor creates the job
/// and the plan. The plan must then agree (same ids, same network mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlyNamespaces {
    /// The uid mapped to itself in the user namespace.
    pub uid: u32,
    /// The gid mapped to itself.
    pub gid: u32,
    /// Network mode `host`: no network namespace.
    pub host_network: bool,
}

impl EarlyNamespaces {
    /// The command-line form (the argument after [`INIT_ARG`]).
    pub fn to_arg(self) -> String {
        format!(
            "sealed:{}:{}:{}",
            self.uid,
            self.gid,
            if self.host_network { "host" } else { "own" }
        )
    }

    /// Parse [`EarlyNamespaces::to_arg`]'s form.
    pub fn from_arg(arg: &str) -> Option<Self> {
        let mut parts = arg.strip_prefix("sealed:")?.split(':');
        let uid = parts.next()?.parse().ok()?;
        let gid = parts.next()?.parse().ok()?;
        let host_network = match parts.next()? {
            "host" => true,
            "own" => false,
            _ => return None,
        };
        parts.next().is_none().then_some(Self {
            uid,
            gid,
            host_network,
        })
    }

    fn of_plan(plan: &SandboxPlan) -> Self {
        Self {
            uid: plan.uid,
            gid: plan.gid,
            host_network: plan.network.mode == cofferdam_policy::plan::PlanNetworkMode::Host,
        }
    }
}

/// The test switch `init_early_failure`: the init reports a setup failure before the go,
/// so that the supervisor's handling of an init that dies early can be checked.
pub(crate) fn fail_early_on_purpose() -> i32 {
    fds::send_status(&StatusMessage::SetupFailed {
        step: "start the sandbox init".into(),
        error: "failed on purpose before the go (test switch init_early_failure)".into(),
    });
    SETUP_FAILED
}

/// The sealed init's start (see `crate::entry`): the namespace argument the supervisor
/// named, `None` when it cannot be read (reported here, as a setup failure).
pub(crate) fn early_namespaces(arg: &std::ffi::OsStr) -> Option<EarlyNamespaces> {
    let early = arg.to_str().and_then(EarlyNamespaces::from_arg);
    if early.is_none() {
        fds::send_status(&StatusMessage::SetupFailed {
            step: "start the sandbox init".into(),
            error: "unreadable namespace argument".into(),
        });
    }
    early
}

/// A plan without namespaces (scoped, advisory): read it and wait for the go; the plan, or
/// the init's exit code when there is none to run (`crate::scoped` runs it).
pub(crate) fn unsealed_plan() -> Result<SandboxPlan, i32> {
    let mut channel = PlanChannel::open();
    match channel.plan() {
        Ok(plan)
            if plan.tier != cofferdam_record::EnforcementTier::MountnsPivotRootLandlockSeccomp =>
        {
            await_go(&mut channel).map(|()| plan)
        }
        Ok(_) => Err(plan_failed(
            "a sealed plan reached an init started without namespaces".into(),
        )),
        Err(e) => Err(plan_failed(e)),
    }
}

fn plan_failed(error: String) -> i32 {
    refuse("receive the plan".into(), error)
}

/// The sealed tier: the namespaces first, then the plan (which must agree), the go, pid 1.
pub(crate) fn sealed_main(early: EarlyNamespaces) -> i32 {
    die_with_parent();
    // Before the go: only this process's own namespaces, which touch nothing of the job.
    // Each namespace row is a reading, reported at once and checked against the plan's
    // requirements once it arrives; one that does not hold refuses the run, after the go
    // (the supervisor places the init in its cgroups first).
    let mut rows = match userns::enter_user_namespace(early.uid, early.gid) {
        Ok(o) => vec![o],
        Err(e) => return fail(&e),
    };
    rows.iter().cloned().for_each(report);
    // Without a user namespace of its own the others would be the host's to make: none is.
    if rows.iter().all(|o| o.status == ControlStatus::Enforced) {
        match userns::enter_namespaces(early.host_network) {
            Ok(obs) => {
                obs.iter().cloned().for_each(report);
                rows.extend(obs);
            }
            Err(e) => return fail(&e),
        }
    }
    let mut channel = PlanChannel::open();
    let plan = match channel.plan() {
        Ok(plan) => plan,
        Err(e) => return plan_failed(e),
    };
    if plan.tier != cofferdam_record::EnforcementTier::MountnsPivotRootLandlockSeccomp
        || EarlyNamespaces::of_plan(&plan) != early
    {
        return plan_failed(format!(
            "the plan ({:?}) does not match the namespaces the init was started with ({})",
            EarlyNamespaces::of_plan(&plan),
            early.to_arg()
        ));
    }
    if let Some((step, error)) = first_refusal(&plan, &rows, unshare_step) {
        if let Err(code) = await_go(&mut channel) {
            return code;
        }
        return refuse(step, error);
    }
    run_init(&plan, channel)
}

/// The step a namespace row that does not hold names.
fn unshare_step(o: &ControlObservation) -> String {
    format!("unshare ({})", o.mechanism)
}

/// Wait for the supervisor's go (the caller closes the plan pipe); a missing go is not
/// reported (the supervisor that gave up is not listening), anything else is.
fn await_go(channel: &mut PlanChannel) -> Result<(), i32> {
    match channel.go() {
        Ok(()) => Ok(()),
        Err(e) if e == NO_GO => Err(SETUP_FAILED),
        Err(e) => Err(plan_failed(e)),
    }
}

pub(crate) fn die_with_parent() {
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
}

fn run_init(plan: &SandboxPlan, mut channel: PlanChannel) -> i32 {
    // The go also says this process is in the run's cgroups: pid 1 and everything it
    // starts are inside from their first instruction, and the cgroup namespace is rooted
    // at the run's cgroup.
    if let Err(code) = await_go(&mut channel) {
        return code;
    }
    // Pid 1 waits on it for the file watch; otherwise it is closed now.
    let channel = plan.watch_files.then_some(channel);
    match userns::enter_cgroup_namespace() {
        Ok(o) => {
            if let Err(code) = check(plan, vec![o], |_| "unshare(CLONE_NEWCGROUP)".into()) {
                return code;
            }
        }
        Err(e) => return fail(&e),
    }
    // SAFETY: the init is single-threaded (a fresh exec that started no threads), so the
    // child may run arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return fail(&SetupError {
            step: "fork pid 1".into(),
            errno: rustix::io::Errno::from_raw_os_error(
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            ),
        });
    }
    if pid == 0 {
        let code = pid1(plan, channel);
        std::process::exit(code);
    }
    drop(channel);
    FORWARD_TO.store(pid, Ordering::SeqCst);
    set_handlers(FORWARDED, forward);
    if plan.terminal.is_some() {
        // Only pid 1 talks over the terminal socket.
        drop(fds::take_terminal());
        // The supervisor continues a stopped command through here (see `Stopped`).
        set_handlers(&[libc::SIGCONT], forward);
    }
    // Only pid 1 hands the network listeners over.
    fds::close_network();
    // Only pid 1 and the command use the run's stdio: the supervisor's relay sees the
    // output's end when the command's last writer closes, not when this process has torn
    // its address space down at its exit (which comes before its descriptors close).
    release_stdio(true);
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        let _ = sigaction::ignore(sig);
    }
    // Only pid 1 reports from here on. This copy of the status channel is closed once pid 1
    // is reaped, which the kernel allows only after every other process of the pid
    // namespace is gone: the end of the status stream tells the supervisor that nothing of
    // the run is left, and it seals and writes the records while this process tears the
    // namespaces down.
    // `--publish`: this process serves the supervisor sockets of the namespace meanwhile.
    crate::publish::serve_until_exit(&plan.network.publish, pid);
    let code = wait_for(pid);
    // The exit below does not report.
    fds::close_status();
    code
}

/// Let go of descriptors 0 to 2 once a child holds them, so that the run's output ends when
/// the command's last writer closes it. With `null` they become `/dev/null` (the init, which
/// may still make descriptors while it serves `--publish`, so none can take those numbers
/// and be written to as stdio), falling back to closing them when `/dev/null` cannot be
/// opened; without, they are closed (pid 1, which makes no descriptor after the command's
/// fork).
fn release_stdio(null: bool) {
    let dev_null = null
        .then(|| {
            rustix::fs::open(
                "/dev/null",
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .ok()
        })
        .flatten();
    type Dup2 = fn(&OwnedFd) -> rustix::io::Result<()>;
    let dups: [Dup2; 3] = [
        |n| rustix::stdio::dup2_stdin(n),
        |n| rustix::stdio::dup2_stdout(n),
        |n| rustix::stdio::dup2_stderr(n),
    ];
    for (fd, dup) in (0..3).zip(dups) {
        let replaced = dev_null.as_ref().is_some_and(|n| dup(n).is_ok());
        if !replaced {
            // SAFETY: nothing in this process owns descriptors 0 to 2 (no `OwnedFd`, `File`
            // or std handle of them is dropped later); closing one only changes the table.
            unsafe {
                libc::close(fd);
            }
        }
    }
}

/// Wait for `pid` and turn its end into an exit code (128+N for a signal).
fn wait_for(pid: i32) -> i32 {
    let Some(pid) = Pid::from_raw(pid) else {
        return SETUP_FAILED;
    };
    loop {
        match rustix::process::waitpid(Some(pid), WaitOptions::empty()) {
            Ok(Some((_, st))) => {
                if let Some(code) = st.exit_status() {
                    return code;
                }
                if let Some(sig) = st.terminating_signal() {
                    return 128 + sig;
                }
            }
            Ok(None) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return SETUP_FAILED,
        }
    }
}

/// Pid 1: the plan's setup program in the one setup loop (`crate::setup`: the composed
/// root, then the hardening steps, Landlock and seccomp last), then the command.
fn pid1(plan: &SandboxPlan, channel: Option<PlanChannel>) -> i32 {
    die_with_parent();
    match setup::run(plan, channel) {
        Ok(slave) => run_command_on(plan, slave),
        Err(code) => code,
    }
}

/// Candidate paths for `argv[0]`: itself when it has a `/`, else each `PATH` entry.
fn candidates(argv0: &str, env: &[(String, String)]) -> Vec<CString> {
    if argv0.contains('/') {
        return CString::new(argv0).into_iter().collect();
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .map(|d| if d.is_empty() { "." } else { d })
        .filter_map(|d| CString::new(Path::new(d).join(argv0).as_os_str().as_bytes()).ok())
        .collect()
}

/// Fork and exec the command on `slave`, the command's terminal when it was allocated
/// already (the scoped tier allocates it before Landlock, to grant that one terminal
/// alone); `None` allocates it here when the plan has a terminal.
pub(crate) fn run_command_on(plan: &SandboxPlan, slave: Option<OwnedFd>) -> i32 {
    let argv: Vec<CString> = plan
        .argv
        .iter()
        .filter_map(|a| CString::new(a.as_bytes()).ok())
        .collect();
    let envp: Vec<CString> = plan
        .env
        .iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    if argv.len() != plan.argv.len() || argv.is_empty() {
        fds::send_status(&StatusMessage::ExecFailed {
            error: "the command or an argument contains a NUL byte".into(),
            code: 127,
        });
        return 127;
    }
    let paths = candidates(&plan.argv[0], &plan.env);
    let slave = match (slave, plan.terminal) {
        (Some(slave), _) => Some(slave),
        (None, None) => None,
        (None, Some(size)) => match open_terminal(size) {
            Ok(slave) => Some(slave),
            Err(e) => return fail(&e),
        },
    };
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());

    // The init leads the terminal's session when it can (see `pty::lead`); otherwise the
    // command does, and Ctrl-Z is lost as before.
    let led = slave
        .as_ref()
        .is_some_and(|slave| pty::lead(slave.as_fd()).is_ok());
    let parent = rustix::process::getpid().as_raw_nonzero().get();
    // SAFETY: pid 1 is single-threaded; the child only execs, writes a status line and exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        let why = std::io::Error::last_os_error();
        fds::send_status(&StatusMessage::ExecFailed {
            error: format!(
                "fork the command failed: {why}; a process or memory limit of this user or \
                     host is reached (a --pids limit counts every process of the user, not only \
                     this run's): retry when fewer processes run, or raise the limit"
            ),
            code: 126,
        });
        return 126;
    }
    if child == 0 {
        crate::reaper::die_with_init(parent);
        reset_handlers(FORWARDED);
        // The init ignores SIGPIPE, as every Rust program does; the command must start
        // with the default (`yes | head` ends `yes` by SIGPIPE).
        reset_handlers(&[libc::SIGPIPE]);
        if slave.is_none() {
            // No terminal of its own: a new session, without a controlling terminal, so the
            // caller's (inherited through the session) is out of reach.
            // rustix's setsid is the raw system call: async-signal-safe.
            let _ = rustix::process::setsid();
        }
        if let Some(slave) = &slave
            && let Err(e) = pty::attach(slave.as_fd(), led)
        {
            fds::send_status(&StatusMessage::ExecFailed {
                error: format!("cannot attach the command to its terminal: {e}"),
                code: 126,
            });
            // SAFETY: _exit is always safe; it skips atexit handlers inherited from pid 1.
            unsafe { libc::_exit(126) }
        }
        let mut seen_eacces = false;
        let mut last = libc::ENOENT;
        for p in &paths {
            // SAFETY: `p`, `argv_ptrs` and `env_ptrs` are NUL-terminated arrays of valid C
            // strings that outlive the call; execve only returns on failure.
            unsafe {
                libc::execve(p.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr());
            }
            let err = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOENT);
            if err == libc::EACCES {
                seen_eacces = true;
            }
            last = err;
            if !matches!(err, libc::ENOENT | libc::ENOTDIR | libc::EACCES) {
                break;
            }
        }
        let err = if seen_eacces && last == libc::ENOENT {
            libc::EACCES
        } else {
            last
        };
        let code = if err == libc::ENOENT { 127 } else { 126 };
        // ENOENT for a file that is there: its `#!` interpreter is what is missing.
        let script = (err == libc::ENOENT)
            .then(|| {
                let refs: Vec<&std::ffi::CStr> = paths.iter().map(CString::as_c_str).collect();
                crate::shebang::explain_enoent(&refs)
            })
            .flatten();
        let error = if let Some(why) = script {
            why
        } else if err == libc::ENOENT && !plan.argv[0].contains('/') {
            format!(
                "{}: command not found in the sandbox's PATH ({})",
                plan.argv[0],
                plan.env
                    .iter()
                    .find(|(k, _)| k == "PATH")
                    .map_or("", |(_, v)| v.as_str())
            )
        } else {
            format!(
                "{}: {}",
                plan.argv[0],
                std::io::Error::from_raw_os_error(err)
            )
        };
        fds::send_status(&StatusMessage::ExecFailed { error, code });
        // SAFETY: _exit is always safe; it skips atexit handlers inherited from pid 1.
        unsafe { libc::_exit(code) }
    }
    // The command has the terminal now; pid 1 keeps no end of it.
    drop(slave);
    FORWARD_TO.store(child, Ordering::SeqCst);
    set_handlers(FORWARDED, forward);
    if plan.terminal.is_some() {
        set_handlers(&[libc::SIGCONT], continue_group);
    } else {
        set_handlers(FROM_CALLERS_TERMINAL, forward_to_group);
    }
    // The command holds the stdio now; pid 1 keeps none of it (see `release_stdio`).
    release_stdio(false);
    fds::send_status(&StatusMessage::Started { pid: child });
    reap(child, plan.terminal.is_some())
}

/// Reap every process in the namespace until the command's main process ends; return its
/// status as an exit code. Pid 1's exit then kills whatever is left. With a terminal, a stop
/// of the main process is reported (nobody else would see it: the command has its own
/// terminal, and the caller's shell would wait forever).
fn reap(main: i32, terminal: bool) -> i32 {
    let options = if terminal {
        WaitOptions::UNTRACED
    } else {
        WaitOptions::empty()
    };
    loop {
        match rustix::process::wait(options) {
            Ok(Some((pid, st))) if pid.as_raw_nonzero().get() == main && st.stopped() => {
                let signal = st.stopping_signal().unwrap_or(libc::SIGSTOP);
                fds::send_status(&StatusMessage::Stopped { signal });
            }
            Ok(Some((pid, st))) if pid.as_raw_nonzero().get() == main => {
                let code = st.exit_status();
                let signal = st.terminating_signal();
                fds::send_status(&StatusMessage::Exited { code, signal });
                return match (code, signal) {
                    (Some(c), _) => c,
                    (None, Some(s)) => 128 + s,
                    (None, None) => SETUP_FAILED,
                };
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return SETUP_FAILED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_namespaces_round_trip_and_reject_garbage() {
        for e in [
            EarlyNamespaces {
                uid: 0,
                gid: 0,
                host_network: false,
            },
            EarlyNamespaces {
                uid: 1000,
                gid: 100,
                host_network: true,
            },
        ] {
            assert_eq!(EarlyNamespaces::from_arg(&e.to_arg()), Some(e));
        }
        for bad in [
            "",
            "sealed:",
            "sealed:1:2",
            "sealed:1:2:x",
            "sealed:1:2:own:3",
            "x:1:2:own",
        ] {
            assert_eq!(EarlyNamespaces::from_arg(bad), None, "{bad}");
        }
    }
}
