//! The user namespace and the other namespaces of the sealed tier (DESIGN.md §3 step 1).
//!
//! Owns `unshare` of the user namespace with a single-id map (the caller's uid and gid map to
//! themselves, `setgroups` denied) and of the mount, pid, network, IPC, UTS and cgroup
//! namespaces, each reported as an observation. The cgroup namespace comes last, on its own,
//! after the supervisor has placed the init in the run's cgroups. It must run in a
//! single-threaded process (the re-executed init): `unshare(CLONE_NEWUSER)` refuses
//! multi-threaded callers.
//!
//! Every row is a reading (issue 17): the inode of `/proc/self/ns/<kind>` is read before and
//! after the `unshare`, and the row is `enforced` only when the two differ. The pid
//! namespace applies to children, so it is read from `pid_for_children`, which the kernel
//! shows as absent (`ENOENT`) between the `unshare` and the namespace's first process.

use crate::mutant;
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

/// The identity of the namespace `/proc/self/ns/<kind>` names: its nsfs inode, or the errno
/// of the `stat` (`ENOENT` for `pid_for_children` of a pid namespace with no process yet).
fn ns_inode(kind: &str) -> Result<u64, Errno> {
    rustix::fs::stat(format!("/proc/self/ns/{kind}")).map(|st| st.st_ino)
}

/// The row of one namespace from its readings before and after the `unshare`: `enforced`
/// only when the after-reading names another namespace than the before-reading.
fn reading(
    mechanism: ControlMechanism,
    dimension: ControlDimension,
    kind: &str,
    before: Result<u64, Errno>,
    after: Result<u64, Errno>,
) -> ControlObservation {
    let shown = |r: &Result<u64, Errno>| match r {
        Ok(ino) => json!(ino),
        Err(e) => json!(format!("unreadable: {e}")),
    };
    let (status, reason) = match (&before, &after) {
        (Ok(b), Ok(a)) if a != b => (ControlStatus::Enforced, None),
        (Ok(_), Ok(_)) => (
            ControlStatus::Failed,
            Some(format!(
                "/proc/self/ns/{kind} names the same namespace after the unshare as before"
            )),
        ),
        // A pid namespace made by unshare has no process until the first fork; the kernel
        // then reports `pid_for_children` as absent, which the host's namespace never is.
        (Ok(_), Err(e)) if kind == "pid_for_children" && *e == Errno::NOENT => {
            (ControlStatus::Enforced, None)
        }
        _ => (
            ControlStatus::Failed,
            Some(format!(
                "/proc/self/ns/{kind} could not be read, so the namespace is not shown to be new"
            )),
        ),
    };
    let mut o = ControlObservation::new(mechanism, dimension, status);
    o.reason = reason;
    o.details.insert("ns".into(), json!(kind));
    o.details.insert("inode_before".into(), shown(&before));
    o.details.insert("inode_after".into(), shown(&after));
    o
}

/// Create the user namespace and map `uid`/`gid` to themselves.
/// A row that does not read as a new namespace is returned as read, without the maps: the
/// caller refuses the run.
pub fn enter_user_namespace(uid: u32, gid: u32) -> Result<ControlObservation, SetupError> {
    let before = ns_inode("user");
    if !mutant::active(mutant::USER_NS) {
        unshare(UnshareFlags::NEWUSER).step(|| "unshare(CLONE_NEWUSER)".into())?;
    }
    let after = ns_inode("user");
    let read = reading(
        ControlMechanism::Userns,
        ControlDimension::Process,
        "user",
        before,
        after,
    );
    if read.status != ControlStatus::Enforced {
        return Ok(read);
    }
    match write_proc("/proc/self/setgroups", "deny") {
        Ok(()) => {}
        Err(e) if e.errno == Errno::NOENT => {}
        Err(e) => return Err(e),
    }
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    let mut o = read;
    o.details
        .insert("uid_map".into(), json!(format!("{uid} {uid} 1")));
    o.details
        .insert("gid_map".into(), json!(format!("{gid} {gid} 1")));
    o.details.insert("setgroups".into(), json!("deny"));
    Ok(o)
}

/// The namespaces made after the user namespace, in the order they are reported. The
/// cgroup namespace is not among them: see [`enter_cgroup_namespace`].
const NAMESPACES: [(UnshareFlags, ControlMechanism, ControlDimension, &str, &str); 5] = [
    (
        UnshareFlags::NEWNS,
        ControlMechanism::Mountns,
        ControlDimension::FilesystemWrite,
        "CLONE_NEWNS",
        "mnt",
    ),
    (
        UnshareFlags::NEWPID,
        ControlMechanism::Pidns,
        ControlDimension::Process,
        "CLONE_NEWPID",
        "pid_for_children",
    ),
    // Reported by `netif::loopback_up` once the namespace's loopback is configured, read
    // against the inode recorded here (`netns_reading`).
    (
        UnshareFlags::NEWNET,
        ControlMechanism::Netns,
        ControlDimension::Network,
        "CLONE_NEWNET",
        "net",
    ),
    (
        UnshareFlags::NEWIPC,
        ControlMechanism::Ipcns,
        ControlDimension::Process,
        "CLONE_NEWIPC",
        "ipc",
    ),
    (
        UnshareFlags::NEWUTS,
        ControlMechanism::Utsns,
        ControlDimension::Process,
        "CLONE_NEWUTS",
        "uts",
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
    let before: Vec<_> = wanted.iter().map(|(.., kind)| ns_inode(kind)).collect();
    if let Some((_, net)) = wanted.iter().zip(&before).find(|((.., k), _)| *k == "net") {
        // Read against it once the namespace's loopback is configured (`netns_reading`).
        let _ = NET_BEFORE.set(*net);
    }
    let wanted_now: Vec<_> = wanted
        .iter()
        .filter(|(flag, ..)| !skipped_by_mutant(*flag))
        .collect();
    let all = wanted_now
        .iter()
        .fold(UnshareFlags::empty(), |acc, (flag, ..)| acc | *flag);
    if unshare(all).is_err() {
        // Nothing was changed by the failed call: find the one the host refuses.
        for (flag, _, _, name, _) in &wanted_now {
            unshare(*flag).step(|| format!("unshare({name})"))?;
        }
    }
    Ok(wanted
        .iter()
        .zip(before)
        .filter(|((_, mechanism, ..), _)| *mechanism != ControlMechanism::Netns)
        .map(|((_, mechanism, dimension, _, kind), before)| {
            reading(*mechanism, *dimension, kind, before, ns_inode(kind))
        })
        .collect())
}

/// Whether a mutant leaves `flag` out of the `unshare` (debug builds only).
fn skipped_by_mutant(flag: UnshareFlags) -> bool {
    let name = match flag {
        f if f == UnshareFlags::NEWIPC => mutant::IPC_NS,
        f if f == UnshareFlags::NEWNS => mutant::MOUNT_NS,
        f if f == UnshareFlags::NEWPID => mutant::PID_NS,
        f if f == UnshareFlags::NEWNET => mutant::NET_NS,
        f if f == UnshareFlags::NEWUTS => mutant::UTS_NS,
        _ => return false,
    };
    mutant::active(name)
}

/// The host's network namespace, read by [`enter_namespaces`] before its `unshare`.
static NET_BEFORE: std::sync::OnceLock<Result<u64, Errno>> = std::sync::OnceLock::new();

/// The network namespace row read now, against the host's namespace read before the
/// `unshare`: `enforced` only when `/proc/self/ns/net` names another namespace (`failed`
/// when it is the host's, or either reading is missing).
pub fn netns_reading() -> ControlObservation {
    let before = NET_BEFORE.get().copied().unwrap_or(Err(Errno::NOENT));
    reading(
        ControlMechanism::Netns,
        ControlDimension::Network,
        "net",
        before,
        ns_inode("net"),
    )
}

/// Create the cgroup namespace. It is made apart from the others, once the supervisor has
/// moved the init into the run's cgroups: the namespace's root is the cgroup the caller is
/// in when it is made, so the sandbox sees its own cgroup as `/` and nothing above it.
pub fn enter_cgroup_namespace() -> Result<ControlObservation, SetupError> {
    let before = ns_inode("cgroup");
    if !mutant::active(mutant::CGROUP_NS) {
        unshare(UnshareFlags::NEWCGROUP).step(|| "unshare(CLONE_NEWCGROUP)".into())?;
    }
    Ok(reading(
        ControlMechanism::Cgroupns,
        ControlDimension::Process,
        "cgroup",
        before,
        ns_inode("cgroup"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: ControlMechanism = ControlMechanism::Ipcns;
    const D: ControlDimension = ControlDimension::Process;

    #[test]
    fn a_namespace_is_enforced_only_when_the_reading_changed() {
        assert_eq!(
            reading(M, D, "ipc", Ok(1), Ok(2)).status,
            ControlStatus::Enforced
        );
        let same = reading(M, D, "ipc", Ok(1), Ok(1));
        assert_eq!(same.status, ControlStatus::Failed);
        assert!(same.reason.is_some());
        let lost = reading(M, D, "ipc", Ok(1), Err(Errno::NOENT));
        assert_eq!(lost.status, ControlStatus::Failed);
        let unread = reading(M, D, "ipc", Err(Errno::ACCESS), Ok(2));
        assert_eq!(unread.status, ControlStatus::Failed);
    }

    #[test]
    fn a_pid_namespace_without_its_first_process_reads_as_new() {
        let pid = |after| reading(ControlMechanism::Pidns, D, "pid_for_children", Ok(1), after);
        assert_eq!(pid(Err(Errno::NOENT)).status, ControlStatus::Enforced);
        assert_eq!(pid(Ok(1)).status, ControlStatus::Failed);
        assert_eq!(pid(Err(Errno::ACCESS)).status, ControlStatus::Failed);
    }
}
