//! The sandbox init: the hidden re-executed process that installs the sealed tier in the
//! order of DESIGN.md §3, reporting each control over the status channel, then runs the
//! command as the child of its own pid 1.
//!
//! Process tree: the supervisor (`cofferdam run`) re-executes itself as the init; the init
//! creates the user namespace and the other namespaces, then forks pid 1 of the new pid
//! namespace. Pid 1 composes the root and pivots into it, brings up loopback, applies
//! rlimits, closes inherited descriptors, drops capabilities, sets no_new_privs, installs
//! Landlock and seccomp (last), sends the ready marker, then forks and execs the command. It
//! reaps every process in the namespace, forwards termination signals, and exits with the
//! command's status; its exit kills everything left in the namespace. Each of the three dies
//! with its parent (`PR_SET_PDEATHSIG`), so the sandbox never outlives the supervisor.
//!
//! Owns the order of effects only: every decision is in the plan, every mechanism in its own
//! module. It must stay single-threaded.

use crate::setup_error::SetupError;
use crate::status::{PLAN_FD, STATUS_FD, StatusMessage, send};
use crate::{caps, landlock, mounts, netif, rlimit, seccomp, userns};
use cofferdam_policy::plan::SandboxPlan;
use cofferdam_record::bundle::{ControlObservation, ControlStatus};
use rustix::process::{Pid, Signal, WaitOptions};
use std::ffi::CString;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The hidden first argument that makes the binary run as the sandbox init.
pub const INIT_ARG: &str = "__cofferdam-sandbox-init";

/// Exit code for a setup failure before the command started.
pub const SETUP_FAILED: i32 = 125;

/// The process the forwarding handlers signal (pid 1's command, or init's pid 1).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; `pid` is a child of this process.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Install `handler` for `sigs` (with SA_RESTART) or reset them to the default.
fn set_handlers(sigs: &[libc::c_int], handler: libc::sighandler_t) {
    for &sig in sigs {
        // SAFETY: a zeroed sigaction with an empty mask and a valid handler (SIG_DFL,
        // SIG_IGN or `forward`, which only calls async-signal-safe kill) is valid.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Signals a parent in the tree passes on to its child. SIGINT and SIGQUIT are not among
/// them: the terminal sends those to the whole foreground process group, the command
/// included.
const FORWARDED: &[libc::c_int] = &[libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2];

fn status_fd() -> BorrowedFd<'static> {
    // SAFETY: the supervisor hands the init the status pipe as fd STATUS_FD, open for the
    // life of the process (closed only by exec, being close-on-exec in pid 1's command).
    unsafe { BorrowedFd::borrow_raw(STATUS_FD) }
}

fn report(o: ControlObservation) {
    send(status_fd(), &StatusMessage::Control { observation: o });
}

fn fail(e: &SetupError) -> i32 {
    send(
        status_fd(),
        &StatusMessage::SetupFailed {
            step: e.step.clone(),
            error: e.to_string(),
        },
    );
    SETUP_FAILED
}

fn read_plan() -> Result<SandboxPlan, String> {
    // SAFETY: the supervisor hands the plan pipe's read end as fd PLAN_FD; we take
    // ownership here and it is closed when `fd` drops.
    let fd = unsafe { OwnedFd::from_raw_fd(PLAN_FD) };
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("read the plan: {e}")),
        }
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("parse the plan: {e}"))
}

/// The init's entry point: never returns.
pub fn init_main() -> ! {
    let code = match read_plan() {
        Ok(plan) => run_init(&plan),
        Err(e) => {
            send(
                status_fd(),
                &StatusMessage::SetupFailed {
                    step: "receive the plan".into(),
                    error: e,
                },
            );
            SETUP_FAILED
        }
    };
    std::process::exit(code)
}

fn die_with_parent() {
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
}

fn run_init(plan: &SandboxPlan) -> i32 {
    die_with_parent();
    match userns::enter_user_namespace(plan.uid, plan.gid) {
        Ok(o) => report(o),
        Err(e) => return fail(&e),
    }
    match userns::enter_namespaces() {
        Ok(obs) => obs.into_iter().for_each(report),
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
        let code = pid1(plan);
        std::process::exit(code);
    }
    FORWARD_TO.store(pid, Ordering::SeqCst);
    set_handlers(FORWARDED, forward as *const () as libc::sighandler_t);
    set_handlers(&[libc::SIGINT, libc::SIGQUIT], libc::SIG_IGN);
    wait_for(pid)
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

/// A control that must be enforced for the sealed tier to hold: anything else is a setup
/// failure (the command does not run).
fn require(o: ControlObservation, step: &str) -> Result<(), i32> {
    let ok = o.status == ControlStatus::Enforced;
    let reason = o
        .reason
        .clone()
        .unwrap_or_else(|| format!("{:?}", o.status));
    report(o);
    if ok {
        Ok(())
    } else {
        send(
            status_fd(),
            &StatusMessage::SetupFailed {
                step: step.into(),
                error: reason,
            },
        );
        Err(SETUP_FAILED)
    }
}

fn pid1(plan: &SandboxPlan) -> i32 {
    die_with_parent();
    match pid1_setup(plan) {
        Ok(()) => {}
        Err(code) => return code,
    }
    run_command(plan)
}

fn pid1_setup(plan: &SandboxPlan) -> Result<(), i32> {
    mounts::compose_and_pivot(&plan.fs)
        .map_err(|e| fail(&e))?
        .into_iter()
        .for_each(report);
    rustix::system::sethostname(plan.hostname.as_bytes()).map_err(|e| {
        fail(&SetupError {
            step: "sethostname".into(),
            errno: e,
        })
    })?;
    report(netif::loopback_up().map_err(|e| fail(&e))?);
    for o in rlimit::apply(&plan.rlimits) {
        report(o);
    }
    // Built before any restriction: building allocates and may fail on its own terms.
    let filters = seccomp::build_filters().map_err(|e| {
        fail(&SetupError {
            step: format!("build the seccomp filter: {e}"),
            errno: rustix::io::Errno::INVAL,
        })
    })?;
    require(
        caps::close_fds(&[STATUS_FD]),
        "close inherited file descriptors",
    )?;
    // The status channel must not reach the command; pid 1 itself must not be readable
    // through /proc/1 (fd, mem, environ) by the command, which runs as the same uid.
    rustix::io::fcntl_setfd(status_fd(), rustix::io::FdFlags::CLOEXEC).map_err(|e| {
        fail(&SetupError {
            step: "mark the status channel close-on-exec".into(),
            errno: e,
        })
    })?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| {
            fail(&SetupError {
                step: "make pid 1 non-dumpable".into(),
                errno: e,
            })
        })?;
    require(caps::drop_all(), "drop capabilities")?;
    require(caps::no_new_privs(), "set no_new_privs")?;
    for o in landlock::install(&plan.landlock) {
        // Landlock is best effort on the sealed tier: its status is recorded as observed.
        report(o);
    }
    require(seccomp::install(&filters), "install the seccomp filter")?;
    send(status_fd(), &StatusMessage::Ready);
    Ok(())
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

fn run_command(plan: &SandboxPlan) -> i32 {
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
        send(
            status_fd(),
            &StatusMessage::ExecFailed {
                error: "the command or an argument contains a NUL byte".into(),
                code: 127,
            },
        );
        return 127;
    }
    let paths = candidates(&plan.argv[0], &plan.env);
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());

    // SAFETY: pid 1 is single-threaded; the child only execs, writes a status line and exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        send(
            status_fd(),
            &StatusMessage::ExecFailed {
                error: "fork the command failed".into(),
                code: 126,
            },
        );
        return 126;
    }
    if child == 0 {
        set_handlers(FORWARDED, libc::SIG_DFL);
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
        let error = if err == libc::ENOENT && !plan.argv[0].contains('/') {
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
        send(status_fd(), &StatusMessage::ExecFailed { error, code });
        // SAFETY: _exit is always safe; it skips atexit handlers inherited from pid 1.
        unsafe { libc::_exit(code) }
    }
    FORWARD_TO.store(child, Ordering::SeqCst);
    set_handlers(FORWARDED, forward as *const () as libc::sighandler_t);
    send(status_fd(), &StatusMessage::Started { pid: child });
    reap(child)
}

/// Reap every process in the namespace until the command's main process ends; return its
/// status as an exit code. Pid 1's exit then kills whatever is left.
fn reap(main: i32) -> i32 {
    loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, st))) if pid.as_raw_nonzero().get() == main => {
                let code = st.exit_status();
                let signal = st.terminating_signal();
                send(status_fd(), &StatusMessage::Exited { code, signal });
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
