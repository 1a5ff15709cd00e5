//! The socket-family filter of the tiers without a network namespace: a seccomp filter on
//! `socket(2)` that leaves the command only the sockets Landlock can confine, reporting one
//! `network` observation.
//!
//! Landlock's network rules (ABI 4+) cover TCP `bind` and `connect` only. Without a network
//! namespace, UDP, raw, SCTP, DCCP, vsock, packet and other families would reach the network
//! untouched, so this filter refuses (`EAFNOSUPPORT`) every `socket(2)` except:
//! - `AF_UNIX` (pathname sockets are Landlock's at ABI 9; abstract ones are scoped at ABI 6);
//! - `AF_NETLINK` (talks to the local kernel only; glibc's `getaddrinfo` uses it);
//! - `AF_INET` / `AF_INET6` with type `SOCK_STREAM` and protocol 0 or `IPPROTO_TCP` (6):
//!   plain TCP, which the Landlock TCP rules confine.
//!
//! `socketpair(2)` only makes connected pairs that reach nothing outside and is left alone.
//! Owns the rule set and its installation; whether the run needs it is the plan's
//! (`landlock.tcp` is set) and what the observation means is the policy's.

use std::collections::BTreeMap;

use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use seccompiler::{BpfProgram, SeccompAction, SeccompCmpOp, SeccompFilter, SeccompRule};
use serde_json::json;

use crate::seccomp::{SeccompError, dword, target};

/// Families the filter leaves to `socket(2)` (`AF_INET`/`AF_INET6` only as plain TCP).
pub const ALLOWED_FAMILIES: &[(&str, u64)] = &[
    ("AF_UNIX", libc::AF_UNIX as u64),
    ("AF_NETLINK", libc::AF_NETLINK as u64),
    ("AF_INET", libc::AF_INET as u64),
    ("AF_INET6", libc::AF_INET6 as u64),
];

/// Socket types other than `SOCK_STREAM` (the low 4 bits of `socket`'s type argument).
const NON_STREAM_TYPES: &[u64] = &[
    libc::SOCK_DGRAM as u64,
    libc::SOCK_RAW as u64,
    libc::SOCK_RDM as u64,
    libc::SOCK_SEQPACKET as u64,
    6,  // SOCK_DCCP
    10, // SOCK_PACKET
];

/// Build the filter for the native architecture. Pure: no syscall.
pub fn build() -> Result<BpfProgram, SeccompError> {
    let (arch, _) = target()?;
    let mut rules = Vec::new();
    // Any family not listed.
    rules.push(SeccompRule::new(
        ALLOWED_FAMILIES
            .iter()
            .map(|&(_, f)| dword(0, SeccompCmpOp::Ne, f))
            .collect::<Result<Vec<_>, _>>()?,
    )?);
    for family in [libc::AF_INET as u64, libc::AF_INET6 as u64] {
        // Any type but SOCK_STREAM (flags such as SOCK_CLOEXEC live above the low 4 bits).
        for &ty in NON_STREAM_TYPES {
            rules.push(SeccompRule::new(vec![
                dword(0, SeccompCmpOp::Eq, family)?,
                dword(1, SeccompCmpOp::MaskedEq(0xf), ty)?,
            ])?);
        }
        // A stream protocol other than TCP (SCTP, MPTCP, …).
        rules.push(SeccompRule::new(vec![
            dword(0, SeccompCmpOp::Eq, family)?,
            dword(2, SeccompCmpOp::Ne, 0)?,
            dword(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?);
    }
    let filter = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_socket, rules)]),
        SeccompAction::Allow,
        SeccompAction::Errno(u32::try_from(libc::EAFNOSUPPORT).unwrap_or(1)),
        arch,
    )?;
    Ok(filter.try_into()?)
}

/// Build and install the filter on the calling thread (after `no_new_privs`), reporting a
/// `network` observation: `enforced` when the kernel accepted it, `failed` otherwise.
pub fn install() -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::Seccomp,
        ControlDimension::Network,
        ControlStatus::Enforced,
    );
    o.details.insert("filter".into(), json!("socket_families"));
    o.details.insert(
        "allowed".into(),
        json!(["AF_UNIX", "AF_NETLINK", "AF_INET/AF_INET6 SOCK_STREAM TCP"]),
    );
    let failure = match build() {
        Err(e) => Some(e.to_string()),
        Ok(p) => seccompiler::apply_filter(&p).err().map(|e| e.to_string()),
    };
    if let Some(e) = failure {
        o.status = ControlStatus::Failed;
        o.reason = Some(format!("install the socket-family filter: {e}"));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_builds_and_is_small() {
        let p = build().unwrap();
        assert!(!p.is_empty() && p.len() < 400, "{}", p.len());
    }

    /// The filter really refuses UDP and leaves TCP and unix sockets alone (in a child, so
    /// the test process stays unfiltered).
    #[test]
    fn udp_is_refused_tcp_and_unix_are_not() {
        let prog = build().unwrap();
        // SAFETY: the child only makes syscalls (no allocation: the program is built) and
        // exits with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = (|| {
                let _ = rustix::thread::set_no_new_privs(true);
                if seccompiler::apply_filter(&prog).is_err() {
                    return 10;
                }
                // SAFETY: plain socket(2) calls; the fds are closed right away.
                unsafe {
                    let udp = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
                    if udp >= 0 || *libc::__errno_location() != libc::EAFNOSUPPORT {
                        return 11;
                    }
                    let sctp = libc::socket(libc::AF_INET6, libc::SOCK_STREAM, 132);
                    if sctp >= 0 {
                        return 12;
                    }
                    let packet = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
                    if packet >= 0 {
                        return 13;
                    }
                    let tcp =
                        libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                    if tcp < 0 {
                        return 14;
                    }
                    libc::close(tcp);
                    let unix = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
                    if unix < 0 {
                        return 15;
                    }
                    libc::close(unix);
                }
                0
            })();
            // SAFETY: _exit in the forked child.
            unsafe { libc::_exit(code) }
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
