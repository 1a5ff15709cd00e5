//! The user namespace and the other namespaces of the sealed tier (DESIGN.md §3 step 1).
//!
//! Owns `unshare` of the user namespace with a single-id map (the caller's uid and gid map to
//! themselves, `setgroups` denied) and of the mount, pid, network, IPC, UTS and cgroup
//! namespaces, each reported as an observation. The cgroup namespace comes last, on its own,
//! after the supervisor has placed the init in the run's cgroups. It must run in a
//! single-threaded process (the re-executed init): `unshare(CLONE_NEWUSER)` refuses
//! multi-threaded callers.

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

/// The namespaces made after the user namespace, in the order they are reported. The
/// cgroup namespace is not among them: see [`enter_cgroup_namespace`].
const NAMESPACES: [(UnshareFlags, ControlMechanism, ControlDimension, &str); 5] = [
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
];

/// Create the mount, pid, network, IPC and UTS namespaces (owned by the new user
/// namespace); with `host_network` the network namespace is not made (network mode `host`).
/// The pid namespace applies to the caller's next child, which becomes pid 1.
///
/// One `unshare` makes them all; when it fails they are made one at a time, so the
/// failure names the namespace the host refused.
pub fn enter_namespaces(host_network: bool) -> Result<Vec<ControlObservation>, SetupError> {
    let wanted: Vec<_> = NAMESPACES
        .iter()
        .filter(|(flag, ..)| !(host_network && *flag == UnshareFlags::NEWNET))
        .collect();
    let all = wanted
        .iter()
        .fold(UnshareFlags::empty(), |acc, (flag, ..)| acc | *flag);
    if unshare(all).is_err() {
        // Nothing was changed by the failed call: find the one the host refuses.
        for (flag, _, _, name) in &wanted {
            unshare(*flag).step(|| format!("unshare({name})"))?;
        }
    }
    Ok(wanted
        .iter()
        .filter(|(_, mechanism, ..)| *mechanism != ControlMechanism::Netns)
        .map(|(_, mechanism, dimension, _)| {
            ControlObservation::new(*mechanism, *dimension, ControlStatus::Enforced)
        })
        .collect())
}

/// Create the cgroup namespace. It is made apart from the others, once the supervisor has
/// moved the init into the run's cgroups: the namespace's root is the cgroup the caller is
/// in when it is made, so the sandbox sees its own cgroup as `/` and nothing above it.
pub fn enter_cgroup_namespace() -> Result<ControlObservation, SetupError> {
    unshare(UnshareFlags::NEWCGROUP).step(|| "unshare(CLONE_NEWCGROUP)".into())?;
    Ok(ControlObservation::new(
        ControlMechanism::Cgroupns,
        ControlDimension::Process,
        ControlStatus::Enforced,
    ))
}
