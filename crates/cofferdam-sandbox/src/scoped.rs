//! The sandbox init on the tiers without namespaces (DESIGN.md §3, last paragraph): the
//! scoped tier (`landlock+seccomp`) runs steps 4–8 of the sealed order on the host, and the
//! advisory tier (`none`) only the environment and the rlimits. The command runs as a plain
//! host process in the copy of the workdir (`plan.fs.workdir`), the init's child.
//!
//! Scoped order, each step reporting its observation like the sealed tier: `chdir` into the
//! copy; rlimits; close inherited descriptors; non-dumpable; drop capabilities (a caller
//! without `CAP_SETPCAP` cannot empty the bounding set: `partial`, `no_new_privs` covers
//! it); `no_new_privs`; Landlock (its `filesystem_write` must be `enforced`, or the command
//! does not run: that is the tier's write boundary); the metadata filter (`metafilter`:
//! Landlock has no right for chmod, chown, utimes or xattrs); the socket filter when the
//! plan confines TCP; a check that each hidden path really cannot be opened; the seccomp
//! filter; then the ready marker and the command. With a terminal in the plan, the
//! command's pseudo-terminal is allocated from the host's `/dev/ptmx` just before Landlock,
//! and its slave is the one `/dev/pts` entry the ruleset grants. Evidence of absence is
//! reported too: no pid namespace (`process` is not isolated), and at Landlock ABI below 9,
//! pathname unix sockets stay reachable (`network` partial).
//!
//! The init is a child subreaper: when the command's main process ends, every descendant
//! left (daemons, background jobs) is killed before the init exits, so nothing keeps
//! writing to the copy after the stage is sealed; and so it is when the supervisor dies
//! or stops the run (`crate::reaper`).
//!
//! Owns the order only; each mechanism is its own module. Single-threaded, like the init.

use crate::fds;
use crate::init::{SETUP_FAILED, fail, open_terminal, report, require, run_command_on};
use crate::setup_error::SetupError;
use crate::status::StatusMessage;
use crate::{caps, landlock, memfd, metafilter, reaper, rlimit, seccomp, sockfilter};
use cofferdam_policy::plan::SandboxPlan;
use cofferdam_record::EnforcementTier;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use serde_json::json;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The Landlock ABI from which `connect(2)` to a pathname unix socket is a handled right.
pub const UNIX_CONNECT_ABI: u32 = 9;

/// Run the plan on the scoped or advisory tier; returns the init's exit code.
pub fn run_scoped(plan: &SandboxPlan) -> i32 {
    // Not SIGKILL as on the sealed tier: without a pid namespace the init must live to end
    // the command's tree when the supervisor dies (`crate::reaper`).
    reaper::end_tree_with_parent();
    // Any pid sets the flag (the kernel reads it as a boolean).
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let slave = match setup(plan) {
        Ok(slave) => slave,
        Err(code) => return code,
    };
    let code = run_command_on(plan, slave);
    reaper::kill_descendants();
    code
}

fn step_err(step: &str, errno: rustix::io::Errno) -> i32 {
    fail(&SetupError {
        step: step.into(),
        errno,
    })
}

/// Returns the command's terminal when the scoped tier allocated it (before Landlock).
fn setup(plan: &SandboxPlan) -> Result<Option<OwnedFd>, i32> {
    let scoped = plan.tier == EnforcementTier::LandlockSeccomp;
    rustix::process::chdir(&plan.fs.workdir)
        .map_err(|e| step_err(&format!("chdir {}", plan.fs.workdir.display()), e))?;
    report(process_view());
    for o in rlimit::apply(&plan.rlimits) {
        report(o);
    }
    let filter = if scoped {
        Some(seccomp::build_filter().map_err(|e| {
            step_err(
                &format!("build the seccomp filter: {e}"),
                rustix::io::Errno::INVAL,
            )
        })?)
    } else {
        None
    };
    let keep: &[i32] = if plan.terminal.is_some() {
        &[fds::STATUS, fds::TERMINAL]
    } else {
        &[fds::STATUS]
    };
    require(caps::close_fds(keep), "close inherited file descriptors")?;
    fds::status_cloexec().map_err(|e| step_err("mark the status channel close-on-exec", e))?;
    let Some(filter) = filter else {
        // Advisory: a host process with the projected environment and rlimits, nothing else.
        advisory_absences().into_iter().for_each(report);
        fds::send_status(&StatusMessage::Ready);
        return Ok(None);
    };
    // The command's terminal is allocated before Landlock so that its slave, alone of the
    // host's /dev/pts, can be granted: the plan grants no /dev/pts, /dev/ptmx or /dev/shm.
    let slave = match plan.terminal {
        Some(size) => Some(open_terminal(size)?),
        None => None,
    };
    let mut ruleset = plan.landlock.clone();
    if let Some(name) = slave
        .as_ref()
        .and_then(|s| rustix::termios::ttyname(s, Vec::new()).ok())
    {
        ruleset
            .devices
            .push(PathBuf::from(OsStr::from_bytes(name.as_bytes())));
    }
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| step_err("make the init non-dumpable", e))?;
    // A capability left (root's, or an ambient one) refuses the run as on the sealed
    // tier. `partial` is an unprivileged process's bounding set, which it cannot empty
    // without CAP_SETPCAP; no_new_privs, required next, keeps an exec from using it.
    let dropped = caps::drop_all();
    if dropped.status == ControlStatus::Failed {
        require(dropped, "drop capabilities")?;
    } else {
        report(dropped);
    }
    require(caps::no_new_privs(), "set no_new_privs")?;
    let mut write_enforced = false;
    let mut landlock_abi = 0;
    for o in landlock::install(&ruleset) {
        if o.dimension == ControlDimension::FilesystemWrite {
            write_enforced = o.status == ControlStatus::Enforced;
            landlock_abi = o
                .details
                .get("abi")
                .and_then(serde_json::Value::as_u64)
                .and_then(|a| u32::try_from(a).ok())
                .unwrap_or(0);
        }
        report(o);
    }
    if !write_enforced {
        fds::send_status(&StatusMessage::SetupFailed {
            step: "install Landlock".into(),
            error: "Landlock did not enforce the write boundary (see its observation); \
                        the scoped tier cannot hold without it"
                .into(),
        });
        return Err(SETUP_FAILED);
    }
    // Landlock has no right for modes, owners, times or xattrs: the metadata filter closes
    // what it can (everything but descriptor touch for root); its residual is `partial`.
    let meta = metafilter::install(rustix::process::geteuid().is_root());
    let meta_failed = meta.status == ControlStatus::Failed;
    report(meta);
    if meta_failed {
        fds::send_status(&StatusMessage::SetupFailed {
            step: "install the metadata filter".into(),
            error: "the seccomp metadata filter was refused (see its observation); \
                        without it the command could change the modes of host files"
                .into(),
        });
        return Err(SETUP_FAILED);
    }
    if let Some(tcp) = &plan.landlock.tcp {
        report(unix_sockets(landlock_abi));
        require(sockfilter::install(tcp), "install the socket filter")?;
    }
    report(hidden_paths(&plan.fs.hidden));
    if !plan.fs.workdir_exec {
        // No pid namespace: the host's value, read only.
        report(memfd::seal_exec(false));
    }
    require(seccomp::install(&filter), "install the seccomp filter")?;
    fds::send_status(&StatusMessage::Ready);
    Ok(slave)
}

/// What the advisory tier does not install, said as observations so that no dimension is
/// left to look covered by an unrelated control (closing descriptors is not a syscall
/// filter).
fn advisory_absences() -> Vec<ControlObservation> {
    let why = "the advisory tier installs no Landlock ruleset and no seccomp filter";
    [
        (ControlMechanism::Landlock, ControlDimension::FilesystemRead),
        (
            ControlMechanism::Landlock,
            ControlDimension::FilesystemWrite,
        ),
        (ControlMechanism::Landlock, ControlDimension::Network),
        (ControlMechanism::Seccomp, ControlDimension::KernelSurface),
    ]
    .into_iter()
    .map(|(m, d)| {
        let mut o = ControlObservation::new(m, d, ControlStatus::Unavailable);
        o.reason = Some(why.to_owned());
        o
    })
    .collect()
}

/// No pid namespace on these tiers: the command sees and shares the host's process view.
fn process_view() -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::Pidns,
        ControlDimension::Process,
        ControlStatus::Unavailable,
    );
    o.reason = Some(
        "no pid namespace on this tier: the command is a host process and sees the host's \
         processes"
            .into(),
    );
    o
}

/// Whether `connect(2)` to a pathname unix socket outside the sandbox is confined: Landlock
/// handles it from ABI 9; below, a reachable socket file (an ssh-agent, a container
/// runtime's socket) is a way out.
pub fn unix_sockets(abi: u32) -> ControlObservation {
    let enforced = abi >= UNIX_CONNECT_ABI;
    let mut o = ControlObservation::new(
        ControlMechanism::Landlock,
        ControlDimension::Network,
        if enforced {
            ControlStatus::Enforced
        } else {
            ControlStatus::Partial
        },
    );
    o.details.insert("control".into(), json!("unix_connect"));
    o.details.insert("abi".into(), json!(abi));
    if !enforced {
        o.reason = Some(format!(
            "Landlock ABI {abi} does not confine connect(2) to pathname unix sockets (ABI \
             {UNIX_CONNECT_ABI} does) and the socket filter cannot see the path: a socket file \
             anywhere on the host, such as an ssh-agent's or a container runtime's, stays \
             reachable; run on a kernel with Landlock ABI {UNIX_CONNECT_ABI} or use the sealed \
             tier, whose root shows no host socket that is not lent"
        ));
    }
    o
}

/// Try to open each path that must be hidden, after Landlock: any that opens is exposed.
fn hidden_paths(paths: &[PathBuf]) -> ControlObservation {
    let mut exposed = Vec::new();
    for p in paths {
        let flags = rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::CLOEXEC
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::NOCTTY;
        if rustix::fs::open(p, flags, rustix::fs::Mode::empty()).is_ok() {
            exposed.push(p.display().to_string());
        }
    }
    let mut o = ControlObservation::new(
        ControlMechanism::SecretsHidden,
        ControlDimension::FilesystemRead,
        if exposed.is_empty() {
            ControlStatus::Enforced
        } else {
            ControlStatus::Partial
        },
    );
    o.details.insert("checked".into(), json!(paths.len()));
    if !exposed.is_empty() {
        o.reason = Some(format!(
            "readable despite Landlock (they lie beneath a granted system directory and \
             file permissions allow this user): {}",
            exposed.join(", ")
        ));
        o.details.insert("exposed".into(), json!(exposed));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_sockets_are_confined_only_from_abi_9() {
        assert_eq!(unix_sockets(7).status, ControlStatus::Partial);
        assert!(
            unix_sockets(7)
                .reason
                .unwrap_or_default()
                .contains("ssh-agent")
        );
        assert_eq!(unix_sockets(9).status, ControlStatus::Enforced);
    }

    #[test]
    fn a_path_that_cannot_be_opened_counts_as_hidden() {
        let o = hidden_paths(&[PathBuf::from("/nonexistent/cofferdam-test")]);
        assert_eq!(o.status, ControlStatus::Enforced);
        let o = hidden_paths(&[PathBuf::from("/")]);
        assert_eq!(o.status, ControlStatus::Partial);
    }
}
