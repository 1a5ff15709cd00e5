//! The sandbox side of the network (DESIGN.md §6), run by pid 1 after the root is composed
//! and before anything is restricted:
//! - `none`: loopback only (`crate::netif`);
//! - `allow`: loopback, then a route making every IPv4 destination local
//!   (`local 0.0.0.0/0 dev lo` in the local table), so any `connect(2)` lands on a listener
//!   in this namespace or is refused at once; then the listeners (DNS on 127.0.0.1:53 UDP
//!   and TCP, the HTTP proxy on 127.0.0.1, one transparent TCP listener per allowed port on
//!   every address, IPv4 and IPv6, and the catch-all: an nf_tables rule, `nft`, diverting
//!   every TCP connection nothing in the namespace listens for to one more listener per IP
//!   family, so the supervisor sees, names and refuses it) are created and handed to the
//!   supervisor over the network socket ([`fds::NET`]) and pid 1's copies closed: nothing
//!   inside holds them. Without the catch-all (a kernel lacking nf_tables' socket/tproxy)
//!   those connections are refused by the namespace's kernel, unseen, and the observation
//!   says so;
//! - `host`: no network namespace was made (`userns::enter_namespaces`); this reports so.
//!
//! Owns the route, the catch-all rule and the listeners; the supervisor
//! (`cofferdam_net::proxy`) serves them.

mod nft;

use crate::fds;
use crate::netif;
use crate::setup_error::{SetupError, StepContext};
use cofferdam_net::handover::{SocketInfo, SocketRole, send_sockets};
use cofferdam_policy::plan::{NetworkPlan, PlanNetworkMode};
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrV4, SocketAddrV6, SocketFlags, SocketType};
use serde_json::json;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// Set up the network of `plan` in the current (new) network namespace, or report the
/// host's network in `host` mode.
pub fn configure(plan: &NetworkPlan) -> Result<ControlObservation, SetupError> {
    match plan.mode {
        PlanNetworkMode::None => netif::loopback_up(),
        PlanNetworkMode::Host => Ok(host_network()),
        PlanNetworkMode::Allow => allow(plan),
    }
}

fn host_network() -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::Netns,
        ControlDimension::Network,
        ControlStatus::Unavailable,
    );
    o.reason = Some(
        "network mode host: no network namespace, the command shares the host's network \
         (by request)"
            .into(),
    );
    o.details.insert("mode".into(), json!("host"));
    o
}

fn allow(plan: &NetworkPlan) -> Result<ControlObservation, SetupError> {
    let mut o = netif::loopback_up()?;
    if o.status != ControlStatus::Enforced {
        // Not a namespace of its own: nothing is routed or listened on (the run refuses).
        return Ok(o);
    }
    add_local_default_route().step(|| "route every IPv4 destination to lo (netlink)".into())?;
    let (mut infos, mut fds, v6) = listeners(plan)?;
    match catch_all(v6) {
        Ok(caught) => {
            let ports: Vec<String> = caught.iter().map(|(_, a)| a.to_string()).collect();
            o.details.insert("catch_all".into(), json!(true));
            o.details.insert("catch_all_listen".into(), json!(ports));
            o.details.insert(
                "catch_all_rule".into(),
                json!(format!(
                    "table inet {}: prerouting, a TCP packet no socket in the namespace \
                     takes -> tproxy to {}",
                    nft::TABLE,
                    ports.join(" / ")
                )),
            );
            for (fd, _) in caught {
                infos.push(SocketInfo {
                    role: SocketRole::CatchAll,
                });
                fds.push(fd);
            }
        }
        Err(e) => {
            o.details.insert("catch_all".into(), json!(false));
            o.details.insert(
                "catch_all_error".into(),
                json!(format!(
                    "{e}; TCP connections to ports nothing listens on are refused by the \
                     sandbox's kernel unseen (counted in aggregate only)"
                )),
            );
        }
    }
    // Taken once, here, and closed on return.
    let socket = fds::take_network();
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
    send_sockets(socket.as_fd(), &infos, &borrowed)
        .step(|| "hand the network listeners to the supervisor".into())?;
    drop(fds);
    drop(socket);
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    o.details.insert("mode".into(), json!("allow"));
    o.details
        .insert("local_route".into(), json!("local 0.0.0.0/0 dev lo"));
    o.details.insert(
        "listeners".into(),
        serde_json::to_value(&infos).unwrap_or_default(),
    );
    o.details.insert("ipv6_listeners".into(), json!(v6));
    o.details.insert(
        "resolv_conf_local".into(),
        json!(resolv.lines().any(|l| l.trim() == "nameserver 127.0.0.1")),
    );
    Ok(o)
}

type Listeners = (Vec<SocketInfo>, Vec<OwnedFd>, bool);

/// The catch-all listeners (transparent, on 127.0.0.1 and, when `v6`, on `::1`, ports the
/// kernel picks) and the nf_tables rule diverting to them every TCP connection nothing else
/// listens for ([`nft`]); what failed, when it did.
fn catch_all(v6: bool) -> Result<Vec<(OwnedFd, SocketAddr)>, String> {
    let listener = |addr: SocketAddr| -> Result<(OwnedFd, SocketAddr), String> {
        let family = if addr.is_ipv6() {
            AddressFamily::INET6
        } else {
            AddressFamily::INET
        };
        let fd = rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)
            .map_err(|e| format!("catch-all socket: {e}"))?;
        nft::set_transparent(fd.as_fd(), addr.is_ipv6())
            .map_err(|e| format!("IP_TRANSPARENT: {e}"))?;
        rustix::net::bind(&fd, &addr).map_err(|e| format!("bind the catch-all on {addr}: {e}"))?;
        rustix::net::listen(&fd, 256).map_err(|e| format!("listen: {e}"))?;
        let l = std::net::TcpListener::from(fd);
        let at = l.local_addr().map_err(|e| format!("getsockname: {e}"))?;
        Ok((OwnedFd::from(l), at))
    };
    let mut caught = vec![listener(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?];
    if v6 && let Ok(l) = listener(SocketAddr::from((Ipv6Addr::LOCALHOST, 0))) {
        caught.push(l);
    }
    let port6 = caught.get(1).map(|(_, a)| a.port());
    nft::install(caught[0].1.port(), port6).map_err(|e| {
        format!(
            "the kernel refused the nf_tables catch-all rule ({e}; needs nf_tables with the \
             socket and tproxy expressions)"
        )
    })?;
    Ok(caught)
}

/// Create every listener: the resolver (UDP and TCP) and the proxy on 127.0.0.1, one
/// transparent listener per allowed port on every IPv4 address and one on every IPv6 address
/// (`V6ONLY`). A resolver or proxy port that is also allowed listens on every address
/// instead (two listeners cannot share a port); the supervisor serves what arrives there on
/// another address than 127.0.0.1 as a transparent connection.
fn listeners(plan: &NetworkPlan) -> Result<Listeners, SetupError> {
    let lo = Ipv4Addr::LOCALHOST;
    let v4 = AddressFamily::INET;
    let only_loopback = |port: u16| !plan.tcp_ports.contains(&port);
    let mut want = vec![
        (SocketRole::DnsUdp, SocketType::DGRAM, v4, 53, true),
        (
            SocketRole::DnsTcp,
            SocketType::STREAM,
            v4,
            53,
            only_loopback(53),
        ),
    ];
    if let Some(p) = plan.proxy_port {
        want.push((
            SocketRole::Proxy,
            SocketType::STREAM,
            v4,
            p,
            only_loopback(p),
        ));
    }
    for &port in &plan.tcp_ports {
        let role = SocketRole::Tcp { port };
        if port != 53 && Some(port) != plan.proxy_port {
            want.push((role, SocketType::STREAM, v4, port, false));
        }
        want.push((role, SocketType::STREAM, AddressFamily::INET6, port, false));
    }
    let mut infos = Vec::new();
    let mut fds = Vec::new();
    let mut v6 = false;
    for (role, ty, family, port, loopback) in want {
        let what = || format!("listener {role:?} on port {port}");
        let fd = match rustix::net::socket_with(family, ty, SocketFlags::CLOEXEC, None) {
            Ok(fd) => fd,
            // A host without IPv6: the IPv4 listeners cover the port.
            Err(Errno::AFNOSUPPORT) if family == AddressFamily::INET6 => continue,
            Err(e) => return Err(e).step(what),
        };
        rustix::net::sockopt::set_socket_reuseaddr(&fd, true).step(what)?;
        if family == AddressFamily::INET6 {
            rustix::net::sockopt::set_ipv6_v6only(&fd, true).step(what)?;
            rustix::net::bind(&fd, &SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0))
                .step(what)?;
            v6 = true;
        } else {
            let ip = if loopback { lo } else { Ipv4Addr::UNSPECIFIED };
            rustix::net::bind(&fd, &SocketAddrV4::new(ip, port)).step(what)?;
        }
        infos.push(SocketInfo { role });
        fds.push((fd, ty));
    }
    for (fd, ty) in &fds {
        if *ty == SocketType::STREAM {
            rustix::net::listen(fd, 256).step(|| "listen".into())?;
        }
    }
    Ok((infos, fds.into_iter().map(|(fd, _)| fd).collect(), v6))
}

const NLMSG_ERROR: u16 = 2;
const RTM_NEWROUTE: u16 = 24;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const RT_TABLE_LOCAL: u8 = 255;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_HOST: u8 = 254;
const RTN_LOCAL: u8 = 2;
const RTA_OIF: u16 = 4;

/// The `RTM_NEWROUTE` message for `local 0.0.0.0/0 dev <ifindex> table local`.
fn local_default_route_msg(ifindex: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(36);
    m.extend_from_slice(&36u32.to_ne_bytes()); // nlmsg_len
    m.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    // struct rtmsg
    m.extend_from_slice(&[
        libc::AF_INET as u8,
        0, // dst_len: the default route
        0,
        0,
        RT_TABLE_LOCAL,
        RTPROT_BOOT,
        RT_SCOPE_HOST,
        RTN_LOCAL,
    ]);
    m.extend_from_slice(&0u32.to_ne_bytes()); // rtm_flags
    // RTA_OIF
    m.extend_from_slice(&8u16.to_ne_bytes());
    m.extend_from_slice(&RTA_OIF.to_ne_bytes());
    m.extend_from_slice(&ifindex.to_ne_bytes());
    m
}

/// A netlink socket of `protocol` (`None`: `NETLINK_ROUTE`, which is protocol 0;
/// `rustix::net::netlink::NETFILTER`).
fn netlink_socket(protocol: Option<rustix::net::Protocol>) -> Result<OwnedFd, Errno> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        protocol,
    )
}

fn add_local_default_route() -> Result<(), Errno> {
    let sock = netlink_socket(None)?;
    // SIOCGIFINDEX works on any socket (a netlink one passes it on to the device layer).
    let ifindex = rustix::net::netdevice::name_to_index(&sock, "lo")?;
    if ifindex == 0 {
        return Err(Errno::NODEV);
    }
    let msg = local_default_route_msg(ifindex);
    rustix::io::write(&sock, &msg)?;
    let mut buf = [0u8; 512];
    let n = rustix::io::read(&sock, &mut buf)?;
    // The acknowledgement: an NLMSG_ERROR whose error is 0.
    if n < 20 || u16::from_ne_bytes([buf[4], buf[5]]) != NLMSG_ERROR {
        return Err(Errno::PROTO);
    }
    match i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]) {
        0 => Ok(()),
        e => Err(Errno::from_raw_os_error(-e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_message_is_well_formed() {
        let m = local_default_route_msg(1);
        assert_eq!(m.len(), 36);
        assert_eq!(u32::from_ne_bytes([m[0], m[1], m[2], m[3]]), 36);
        assert_eq!(m[16], libc::AF_INET as u8);
        assert_eq!(
            &m[20..24],
            &[RT_TABLE_LOCAL, RTPROT_BOOT, RT_SCOPE_HOST, RTN_LOCAL]
        );
        assert_eq!(&m[32..36], &1u32.to_ne_bytes());
    }
}
