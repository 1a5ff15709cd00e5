//! memfd exec: `vm.memfd_noexec` of the run's pid namespace, set when the plan refuses
//! execution of what the command writes (`workdir_exec = false`), and read back.
//!
//! A memfd lives on the kernel's internal tmpfs mount, which neither a noexec mount nor
//! Landlock's execute right covers (Landlock lets every access to such internal files
//! through), so `memfd_create` + `execve("/proc/self/fd/N")` runs a binary the command
//! wrote. The sysctl (Linux 6.3) is per pid namespace and inherited by child namespaces,
//! which cannot lower it; at 2, `MFD_EXEC` is refused and every other memfd is created
//! `MFD_NOEXEC_SEAL` (no exec bits, sealed so), so such an `execve` fails with `EACCES`.
//! It does not refuse `mmap(PROT_EXEC)` of a memfd, so the dynamic loader still maps one
//! (`ld.so /proc/self/fd/N`): the scope report's workdir_exec line says so.
//!
//! Writing it needs `CAP_SYS_ADMIN` over the pid namespace *and* the host's root uid: the
//! file's permission check (`test_perm` in `proc_sysctl.c`) grants write only to
//! `GLOBAL_ROOT_UID`, so an unprivileged caller's sandbox cannot raise it, and the scoped
//! tier (no pid namespace) may only read the host's value. Either way the observation is
//! the value read back.
//!
//! Owns that sysctl only; whether it is asked for is the plan's. Call from pid 1 of the
//! new pid namespace, before the root is composed (`/proc/sys` is read-only afterwards;
//! the value written through the host's procfs is the writer's own pid namespace's).

use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use serde_json::json;

/// The sysctl's path.
pub const MEMFD_NOEXEC: &str = "/proc/sys/vm/memfd_noexec";

/// The value that refuses execution of every memfd (`MEMFD_NOEXEC_SCOPE_NOEXEC_ENFORCED`).
pub const ENFORCED: u32 = 2;

/// Raise this pid namespace's `vm.memfd_noexec` to 2 (when `write`), then read it back.
pub fn seal_exec(write: bool) -> ControlObservation {
    // Only pid 1 of a new pid namespace writes: anywhere else the value would be the host's
    // own pid namespace's, which a run must never change.
    let write = write && rustix::process::getpid().is_init();
    let written = write.then(|| std::fs::write(MEMFD_NOEXEC, format!("{ENFORCED}\n")));
    let read = std::fs::read_to_string(MEMFD_NOEXEC)
        .map_err(|e| e.to_string())
        .and_then(|s| s.trim().parse::<u32>().map_err(|e| e.to_string()));
    let write_error = match &written {
        Some(Err(e)) => Some(e.to_string()),
        _ => None,
    };
    observation(write, read, write_error)
}

/// The observation for what was read back (pure).
pub fn observation(
    wrote: bool,
    read: Result<u32, String>,
    write_error: Option<String>,
) -> ControlObservation {
    let value = read.as_ref().ok().copied();
    let status = if value.is_some_and(|v| v >= ENFORCED) {
        ControlStatus::Enforced
    } else {
        ControlStatus::Unavailable
    };
    let mut o = ControlObservation::new(
        ControlMechanism::Pidns,
        ControlDimension::KernelSurface,
        status,
    );
    o.details.insert("control".into(), json!("memfd_noexec"));
    o.details.insert("value".into(), json!(value));
    o.details.insert("written".into(), json!(wrote));
    if status != ControlStatus::Enforced {
        let why = match (&read, &write_error, wrote) {
            (Err(e), _, _) => {
                format!("{MEMFD_NOEXEC} cannot be read ({e}; the kernel has it from 6.3)")
            }
            (Ok(v), Some(e), _) => format!(
                "{MEMFD_NOEXEC} could not be raised to {ENFORCED} ({e}: the kernel lets only the \
                 host's root user write it) and reads {v}"
            ),
            (Ok(v), None, true) => format!("{MEMFD_NOEXEC} reads {v} after writing {ENFORCED}"),
            (Ok(v), None, false) => {
                format!("no pid namespace of its own: the host's {MEMFD_NOEXEC} is {v}")
            }
        };
        o.reason = Some(format!(
            "{why}; a memfd the command writes can be executed (memfd_create, then execve of \
             /proc/self/fd/N) although workdir_exec is false"
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_value_read_back_at_2_is_enforced() {
        assert_eq!(
            observation(true, Ok(2), None).status,
            ControlStatus::Enforced
        );
        let o = observation(true, Ok(0), Some("Permission denied".into()));
        assert_eq!(o.status, ControlStatus::Unavailable);
        assert!(o.reason.unwrap().contains("only the host's root"));
        let o = observation(false, Ok(1), None);
        assert_eq!(o.status, ControlStatus::Unavailable);
        assert!(o.reason.unwrap().contains("no pid namespace"));
        let o = observation(true, Err("No such file".into()), None);
        assert_eq!(o.details["value"], serde_json::Value::Null);
        assert!(o.reason.unwrap().contains("6.3"));
        // Written without error but reading lower (another writer, a kernel quirk).
        assert_eq!(
            observation(true, Ok(1), None).status,
            ControlStatus::Unavailable
        );
    }
}
