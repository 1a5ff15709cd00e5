//! The user namespace and the other namespaces of the sealed tier (DESIGN.md §3 step 1).
//!
//! Owns `unshare` of the user namespace with a single-id map (the caller's uid and gid map to
//! themselves, `setgroups` denied) and of the mount, pid, network, IPC, UTS and cgroup
//! namespaces, each reported as an observation. It must run in a single-threaded process (the
//! re-executed init): `unshare(CLONE_NEWUSER)` refuses multi-threaded callers.

use crate::setup_error::{SetupError, StepContext};
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::thread::UnshareFlags;
use serde_json::json;

fn unshare(flags: UnshareFlags) -> Result<(), Errno> {
    // SAFETY: the hazard of `unshare` is `CLONE_FILES` and thread-shared state; it is never
    // passed here, and the caller (the sandbox init) is single-threaded.
    unsafe { rustix::thread::unshare_unsafe(flags) }
}

fn write_proc(path: &str, data: &str) -> Result<(), SetupError> {
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
        .step(|| format!("open {path}"))?;
    let n = rustix::io::write(&fd, data.as_bytes()).step(|| format!("write {path}"))?;
    if n != data.len() {
        return Err(SetupError {
            step: format!("write {path}"),
            errno: Errno::IO,
        });
    }
    Ok(())
}

/// Create the user namespace and map `uid`/`gid` to themselves.
pub fn enter_user_namespace(uid: u32, gid: u32) -> Result<ControlObservation, SetupError> {
    unshare(UnshareFlags::NEWUSER).step(|| "unshare(CLONE_NEWUSER)".into())?;
    match write_proc("/proc/self/setgroups", "deny") {
        Ok(()) => {}
        Err(e) if e.errno == Errno::NOENT => {}
        Err(e) => return Err(e),
    }
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    let mut o = ControlObservation::new(
        ControlMechanism::Userns,
        ControlDimension::Process,
        ControlStatus::Enforced,
    );
    o.details
        .insert("uid_map".into(), json!(format!("{uid} {uid} 1")));
    o.details
        .insert("gid_map".into(), json!(format!("{gid} {gid} 1")));
    o.details.insert("setgroups".into(), json!("deny"));
    Ok(o)
}

/// Create the mount, pid, network, IPC, UTS and cgroup namespaces (owned by the new user
/// namespace); with `host_network` the network namespace is not made (network mode `host`).
/// The pid namespace applies to the caller's next child, which becomes pid 1.
pub fn enter_namespaces(host_network: bool) -> Result<Vec<ControlObservation>, SetupError> {
    let all = [
        (
            UnshareFlags::NEWNS,
            ControlMechanism::Mountns,
            ControlDimension::FilesystemWrite,
            "CLONE_NEWNS",
        ),
        (
            UnshareFlags::NEWPID,
            ControlMechanism::Pidns,
            ControlDimension::Process,
            "CLONE_NEWPID",
        ),
        // Reported by `netif::loopback_up` once the namespace's loopback is configured.
        (
            UnshareFlags::NEWNET,
            ControlMechanism::Netns,
            ControlDimension::Network,
            "CLONE_NEWNET",
        ),
        (
            UnshareFlags::NEWIPC,
            ControlMechanism::Ipcns,
            ControlDimension::Process,
            "CLONE_NEWIPC",
        ),
        (
            UnshareFlags::NEWUTS,
            ControlMechanism::Utsns,
            ControlDimension::Process,
            "CLONE_NEWUTS",
        ),
        (
            UnshareFlags::NEWCGROUP,
            ControlMechanism::Cgroupns,
            ControlDimension::Process,
            "CLONE_NEWCGROUP",
        ),
    ];
    let mut out = Vec::new();
    for (flag, mechanism, dimension, name) in all {
        if host_network && flag == UnshareFlags::NEWNET {
            continue;
        }
        unshare(flag).step(|| format!("unshare({name})"))?;
        if mechanism != ControlMechanism::Netns {
            out.push(ControlObservation::new(
                mechanism,
                dimension,
                ControlStatus::Enforced,
            ));
        }
    }
    Ok(out)
}
