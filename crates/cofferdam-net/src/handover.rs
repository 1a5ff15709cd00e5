//! The hand-over of the sandbox's listening sockets: pid 1 creates them inside the sandbox's
//! network namespace and sends them to the supervisor in one `SCM_RIGHTS` message over the
//! network socket (`cofferdam_sandbox::fds::NET` in the init, the one declaration of the
//! descriptor table); a socket keeps its namespace when it crosses, so the
//! supervisor accepts on it directly, with no bridge process inside.
//!
//! Owns the message (a JSON list naming each descriptor's role, in descriptor order, in one
//! `cofferdam_channel` frame that carries the descriptors) and the two ends of the exchange.
//! It creates no sockets and decides nothing.

use cofferdam_channel::{Cause, ChannelError, Step};
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

/// The most descriptors one hand-over carries (one channel frame's bound).
pub const MAX_SOCKETS: usize = cofferdam_channel::MAX_FDS;

/// The channel's name in its errors.
pub const CHANNEL: &str = "network";

/// What one handed-over socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum SocketRole {
    /// The DNS listener, UDP.
    DnsUdp,
    /// The DNS listener, TCP.
    DnsTcp,
    /// The HTTP proxy (CONNECT and absolute-form requests).
    Proxy,
    /// A transparent TCP listener on every address for one allowed port.
    Tcp {
        /// The port.
        port: u16,
    },
    /// The catch-all: the TCP connections to ports nothing listens on, diverted to it by the
    /// sandbox's nf_tables rule; an accepted socket's local address is the destination the
    /// connection was meant for. Every one is denied.
    CatchAll,
}

/// One handed-over socket's description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketInfo {
    /// Its role.
    #[serde(flatten)]
    pub role: SocketRole,
}

/// Send `fds`, described by `infos` (same order), in one message.
pub fn send_sockets(
    socket: BorrowedFd<'_>,
    infos: &[SocketInfo],
    fds: &[BorrowedFd<'_>],
) -> Result<(), Errno> {
    if infos.len() != fds.len() || fds.len() > MAX_SOCKETS {
        return Err(Errno::INVAL);
    }
    cofferdam_channel::send(socket, CHANNEL, &infos, fds).map_err(|e| e.errno())
}

/// Receive the sockets: `Ok(None)` at end of stream (the sandbox ended without sending).
pub fn recv_sockets(
    socket: BorrowedFd<'_>,
) -> Result<Option<Vec<(SocketInfo, OwnedFd)>>, ChannelError> {
    let Some((infos, fds)) = cofferdam_channel::recv::<Vec<SocketInfo>>(socket, CHANNEL)? else {
        return Ok(None);
    };
    if infos.len() != fds.len() {
        return Err(ChannelError::new(
            CHANNEL,
            Step::Receive,
            Cause::Descriptors {
                declared: infos.len(),
                got: fds.len(),
            },
        ));
    }
    Ok(Some(infos.into_iter().zip(fds).collect()))
}

/// Read a hand-over's payload (a frame's JSON, decoded as [`recv_sockets`] decodes it), which
/// came with `fds` descriptors: one description per descriptor, at most [`MAX_SOCKETS`];
/// anything else is `PROTO`. The fuzz target's entry point.
pub fn parse_payload(payload: &[u8], fds: usize) -> Result<Vec<SocketInfo>, Errno> {
    let infos: Vec<SocketInfo> = serde_json::from_slice(payload).map_err(|_| Errno::PROTO)?;
    if infos.len() != fds || fds > MAX_SOCKETS {
        return Err(Errno::PROTO);
    }
    Ok(infos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;
    use rustix::net::{AddressFamily, SocketFlags, SocketType};

    #[test]
    fn sockets_cross_with_their_roles_and_end_of_stream_is_none() {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let infos = [SocketInfo {
            role: SocketRole::Tcp { port },
        }];
        send_sockets(a.as_fd(), &infos, &[l.as_fd()]).unwrap();
        let got = recv_sockets(b.as_fd()).unwrap().unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.role, SocketRole::Tcp { port });
        let listener = std::net::TcpListener::from(got[0].1.try_clone().unwrap());
        assert_eq!(listener.local_addr().unwrap().port(), port);
        drop(a);
        assert!(recv_sockets(b.as_fd()).unwrap().is_none());
    }
}
