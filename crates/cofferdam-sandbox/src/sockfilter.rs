//! The socket filter of the tiers without a network namespace: seccomp filters on
//! `socket(2)` and on the TCP calls Landlock does not see, reporting one `network`
//! observation.
//!
//! Landlock's network rules (ABI 4+) cover TCP `bind` and `connect` only. Without a network
//! namespace, UDP, raw, SCTP, DCCP, vsock, packet and other families would reach the network
//! untouched, and two TCP paths skip Landlock's hooks: TCP Fast Open (`sendto`/`sendmsg`
//! with `MSG_FASTOPEN` connects through `tcp_sendmsg_fastopen`, never calling the
//! `socket_connect` hook) and `listen(2)` on an unbound socket (it autobinds an ephemeral
//! port on 0.0.0.0 without the `socket_bind` hook: an inbound server). So:
//!
//! 1. **families** (`EAFNOSUPPORT`): `socket(2)` is an allowlist —
//!    - `AF_UNIX` (pathname sockets are Landlock's at ABI 9; abstract ones are scoped at ABI
//!      6) and `AF_NETLINK` (talks to the local kernel only; glibc's `getaddrinfo` uses it),
//!      any type (the kernel-surface filter, [`crate::seccomp`], installed on every tier,
//!      narrows netlink to `NETLINK_ROUTE` and every family to its own allowlist);
//!    - `AF_INET` / `AF_INET6` only when the plan grants some TCP port, and then only with
//!      type exactly `SOCK_STREAM` (optionally `| SOCK_NONBLOCK | SOCK_CLOEXEC`) and
//!      protocol 0 or `IPPROTO_TCP`. When no port is granted (network `none`: every connect
//!      and bind refused) no TCP socket can be made at all, which closes Fast Open and the
//!      autobinding `listen` at the root while `listen` on unix sockets keeps working.
//! 2. **tcp ops** (`EPERM`): `sendto` / `sendmmsg` (arg 3) and `sendmsg` (arg 2) with the
//!    `MSG_FASTOPEN` bit (the kernel takes it from that argument, not from `msg_flags`),
//!    `setsockopt(IPPROTO_TCP, TCP_FASTOPEN | TCP_FASTOPEN_CONNECT)`, and — only when TCP
//!    sockets are allowed — `listen` on every socket (seccomp cannot see a descriptor's
//!    family, so unix-socket servers cannot listen then; no plan grants TCP ports today).
//!
//! `socketpair(2)` only makes connected pairs that reach nothing outside and is left alone.
//! Owns the rule set and its installation; whether the run needs it is the plan's
//! (`landlock.tcp` is set) and what the observation means is the policy's.

use std::collections::BTreeMap;

use cofferdam_policy::plan::TcpRules;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use seccompiler::{BpfProgram, SeccompAction, SeccompCmpOp, SeccompFilter, SeccompRule};
use serde_json::json;

use crate::seccomp::{SeccompError, dword, target};

/// Families left to `socket(2)` whatever the plan.
pub const LOCAL_FAMILIES: &[(&str, u64)] = &[
    ("AF_UNIX", libc::AF_UNIX as u64),
    ("AF_NETLINK", libc::AF_NETLINK as u64),
];

/// The IP families, allowed as plain TCP only when the plan grants a TCP port.
pub const IP_FAMILIES: &[(&str, u64)] = &[
    ("AF_INET", libc::AF_INET as u64),
    ("AF_INET6", libc::AF_INET6 as u64),
];

/// The only `socket(2)` type values allowed for an IP family: `SOCK_STREAM` with any of
/// `SOCK_NONBLOCK` and `SOCK_CLOEXEC` (the kernel refuses other bits with `EINVAL`).
pub const STREAM_TYPES: [u64; 4] = [
    libc::SOCK_STREAM as u64,
    (libc::SOCK_STREAM | libc::SOCK_NONBLOCK) as u64,
    (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64,
    (libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) as u64,
];

/// `MSG_FASTOPEN` (linux/socket.h).
pub const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `TCP_FASTOPEN` (linux/tcp.h): server-side Fast Open queue.
pub const TCP_FASTOPEN: u64 = 23;
/// `TCP_FASTOPEN_CONNECT` (linux/tcp.h): Fast Open on the next `connect`/`write`.
pub const TCP_FASTOPEN_CONNECT: u64 = 30;

/// Whether the plan lets any TCP socket exist.
pub fn tcp_sockets_allowed(tcp: &TcpRules) -> bool {
    !tcp.connect.is_empty() || !tcp.bind.is_empty()
}

/// The compiled filters.
#[derive(Debug, Clone)]
pub struct SocketFilters {
    families: BpfProgram,
    tcp_ops: BpfProgram,
}

/// Build both filters for the native architecture. Pure: no syscall.
pub fn build(tcp: &TcpRules) -> Result<SocketFilters, SeccompError> {
    let (arch, _) = target()?;
    let ip = tcp_sockets_allowed(tcp);
    let allowed: Vec<u64> = LOCAL_FAMILIES
        .iter()
        .chain(if ip { IP_FAMILIES } else { &[] })
        .map(|&(_, f)| f)
        .collect();
    let mut rules = vec![SeccompRule::new(
        allowed
            .iter()
            .map(|&f| dword(0, SeccompCmpOp::Ne, f))
            .collect::<Result<Vec<_>, _>>()?,
    )?];
    if ip {
        for &(_, family) in IP_FAMILIES {
            // Any type value but the four plain-stream ones.
            let mut not_stream = vec![dword(0, SeccompCmpOp::Eq, family)?];
            for t in STREAM_TYPES {
                not_stream.push(dword(1, SeccompCmpOp::Ne, t)?);
            }
            rules.push(SeccompRule::new(not_stream)?);
            // A stream protocol other than TCP (SCTP, MPTCP, …).
            rules.push(SeccompRule::new(vec![
                dword(0, SeccompCmpOp::Eq, family)?,
                dword(2, SeccompCmpOp::Ne, 0)?,
                dword(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
            ])?);
        }
    }
    let errno = |e: i32| SeccompAction::Errno(u32::try_from(e).unwrap_or(1));
    let families: BpfProgram = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_socket, rules)]),
        SeccompAction::Allow,
        errno(libc::EAFNOSUPPORT),
        arch,
    )?
    .try_into()?;

    let fastopen = |arg: u8| -> Result<Vec<SeccompRule>, SeccompError> {
        Ok(vec![SeccompRule::new(vec![dword(
            arg,
            SeccompCmpOp::MaskedEq(MSG_FASTOPEN),
            MSG_FASTOPEN,
        )?])?])
    };
    let mut ops = BTreeMap::from([
        (libc::SYS_sendto, fastopen(3)?),
        (libc::SYS_sendmmsg, fastopen(3)?),
        (libc::SYS_sendmsg, fastopen(2)?),
        (
            libc::SYS_setsockopt,
            [TCP_FASTOPEN, TCP_FASTOPEN_CONNECT]
                .iter()
                .map(|&opt| {
                    SeccompRule::new(vec![
                        dword(1, SeccompCmpOp::Eq, libc::IPPROTO_TCP as u64)?,
                        dword(2, SeccompCmpOp::Eq, opt)?,
                    ])
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    ]);
    if ip {
        ops.insert(libc::SYS_listen, Vec::new());
    }
    let tcp_ops: BpfProgram =
        SeccompFilter::new(ops, SeccompAction::Allow, errno(libc::EPERM), arch)?.try_into()?;
    Ok(SocketFilters { families, tcp_ops })
}

/// Build and install both filters on the calling thread (after `no_new_privs`), reporting
/// a `network` observation: `enforced` when the kernel accepted both, `failed` otherwise.
pub fn install(tcp: &TcpRules) -> ControlObservation {
    let ip = tcp_sockets_allowed(tcp);
    let mut o = ControlObservation::new(
        ControlMechanism::Seccomp,
        ControlDimension::Network,
        ControlStatus::Enforced,
    );
    o.details.insert("filter".into(), json!("socket_families"));
    o.details.insert(
        "allowed".into(),
        if ip {
            json!(["AF_UNIX", "AF_NETLINK", "AF_INET/AF_INET6 SOCK_STREAM TCP"])
        } else {
            json!(["AF_UNIX", "AF_NETLINK"])
        },
    );
    let mut refused = vec!["MSG_FASTOPEN", "TCP_FASTOPEN", "TCP_FASTOPEN_CONNECT"];
    if ip {
        refused.push("listen");
    }
    o.details.insert("refused".into(), json!(refused));
    let before = crate::seccomp::filters_in_force();
    let failure = match build(tcp) {
        Err(e) => Some(e.to_string()),
        Ok(_) if crate::mutant::active(crate::mutant::SOCKET_FILTER) => None,
        Ok(f) => seccompiler::apply_filter(&f.families)
            .and_then(|()| seccompiler::apply_filter(&f.tcp_ops))
            .err()
            .map(|e| e.to_string()),
    };
    if let Some(e) = failure {
        o.status = ControlStatus::Failed;
        o.reason = Some(format!("install the socket filter: {e}"));
        return o;
    }
    let probe = "socket(AF_INET, SOCK_DGRAM) = EAFNOSUPPORT";
    if let Err(why) = crate::seccomp::read_back_install(&mut o, before, 2, probe, probe_udp) {
        o.status = ControlStatus::Failed;
        o.reason = Some(why);
    }
    o
}

/// The probe call: a UDP socket, which no plan grants; the families filter must refuse it
/// with `EAFNOSUPPORT`. A socket that is made anyway is closed at once, unused.
fn probe_udp() -> Result<(), String> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    match rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    ) {
        Err(rustix::io::Errno::AFNOSUPPORT) => Ok(()),
        Ok(fd) => {
            drop(fd);
            Err("the probe socket(AF_INET, SOCK_DGRAM) succeeded after the socket filter".into())
        }
        Err(e) => Err(format!(
            "the probe socket(AF_INET, SOCK_DGRAM) failed with {e}, not the filter's \
             EAFNOSUPPORT"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> TcpRules {
        TcpRules {
            connect: vec![],
            bind: vec![],
        }
    }

    fn granted() -> TcpRules {
        TcpRules {
            connect: vec![443],
            bind: vec![],
        }
    }

    #[test]
    fn the_filters_build_and_are_small() {
        for t in [none(), granted()] {
            let f = build(&t).unwrap();
            for p in [&f.families, &f.tcp_ops] {
                assert!(!p.is_empty() && p.len() < 400, "{}", p.len());
            }
        }
    }

    fn in_child(tcp: &TcpRules, f: impl FnOnce() -> i32) -> i32 {
        let filters = build(tcp).unwrap();
        crate::seccomp::in_filtered_child(&[&filters.families, &filters.tcp_ops], f)
    }

    fn errno() -> i32 {
        // SAFETY: reading errno right after a call.
        unsafe { *libc::__errno_location() }
    }

    /// With no TCP port granted: no IP socket at all; unix sockets still bind and listen.
    #[test]
    fn network_none_refuses_every_ip_socket_and_keeps_unix_listen() {
        let dir = tempfile::tempdir().unwrap();
        let sock =
            std::ffi::CString::new(dir.path().join("s").as_os_str().as_encoded_bytes()).unwrap();
        let code = in_child(&none(), || {
            // SAFETY: plain socket calls; the fds are closed or left to _exit.
            unsafe {
                for (fam, ty) in [
                    (libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC),
                    (libc::AF_INET6, libc::SOCK_STREAM),
                    (libc::AF_INET, libc::SOCK_DGRAM),
                    (libc::AF_PACKET, libc::SOCK_RAW),
                ] {
                    if libc::socket(fam, ty, 0) >= 0 || errno() != libc::EAFNOSUPPORT {
                        return 11;
                    }
                }
                let u = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                if u < 0 {
                    return 12;
                }
                let mut addr: libc::sockaddr_un = std::mem::zeroed();
                addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
                for (d, s) in addr.sun_path.iter_mut().zip(sock.as_bytes()) {
                    *d = *s as libc::c_char;
                }
                let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                if libc::bind(u, (&raw const addr).cast(), len) != 0 || libc::listen(u, 1) != 0 {
                    return 13;
                }
                if libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0) < 0 {
                    return 14;
                }
                if libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0) < 0 {
                    return 15;
                }
            }
            0
        });
        assert_eq!(code, 0);
    }

    /// With a TCP port granted: plain TCP only (an allowlist of types), no Fast Open, no
    /// listen.
    #[test]
    fn granted_tcp_is_plain_stream_without_fast_open_or_listen() {
        let code = in_child(&granted(), || {
            // SAFETY: plain socket calls on sockets this child made.
            unsafe {
                for ty in [libc::SOCK_DGRAM, libc::SOCK_RAW, 7, 8, 9, 11, 15] {
                    if libc::socket(libc::AF_INET, ty, 0) >= 0 || errno() != libc::EAFNOSUPPORT {
                        return 21;
                    }
                }
                if libc::socket(libc::AF_INET6, libc::SOCK_STREAM, 132) >= 0 {
                    return 22;
                }
                let tcp = libc::socket(
                    libc::AF_INET,
                    libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                );
                if tcp < 0 {
                    return 23;
                }
                if libc::listen(tcp, 1) == 0 || errno() != libc::EPERM {
                    return 24;
                }
                let mut addr: libc::sockaddr_in = std::mem::zeroed();
                addr.sin_family = libc::AF_INET as libc::sa_family_t;
                addr.sin_port = 9u16.to_be();
                addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
                let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                let r = libc::sendto(
                    tcp,
                    c"x".as_ptr().cast(),
                    1,
                    libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL,
                    (&raw const addr).cast(),
                    len,
                );
                if r >= 0 || errno() != libc::EPERM {
                    return 25;
                }
                let one: libc::c_int = 1;
                for opt in [TCP_FASTOPEN, TCP_FASTOPEN_CONNECT] {
                    let r = libc::setsockopt(
                        tcp,
                        libc::IPPROTO_TCP,
                        opt as libc::c_int,
                        (&raw const one).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    );
                    if r == 0 || errno() != libc::EPERM {
                        return 26;
                    }
                }
                let msg: libc::msghdr = std::mem::zeroed();
                if libc::sendmsg(tcp, &msg, libc::MSG_FASTOPEN) >= 0 || errno() != libc::EPERM {
                    return 27;
                }
            }
            0
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn the_probe_socket_tells_the_filter_from_no_filter() {
        assert!(probe_udp().is_err(), "unfiltered, a UDP socket is made");
        for tcp in [none(), granted()] {
            assert_eq!(in_child(&tcp, || i32::from(probe_udp().is_ok())), 1);
        }
    }

    #[test]
    fn msg_fastopen_matches_libc() {
        assert_eq!(MSG_FASTOPEN, libc::MSG_FASTOPEN as u64);
        assert!(tcp_sockets_allowed(&granted()));
        assert!(!tcp_sockets_allowed(&none()));
    }
}
