//! The sandbox's network namespace starts with `lo` down; this brings it up so loopback
//! works inside (DESIGN.md §6, mode `none`). Owns only that interface flag; the row it
//! reports is the namespace's inode reading (`userns::netns_reading`).

use crate::setup_error::{SetupError, StepContext};
use cofferdam_record::bundle::{ControlObservation, ControlStatus};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use serde_json::json;
use std::os::fd::AsRawFd;

fn ifreq_lo() -> libc::ifreq {
    // SAFETY: `ifreq` is a plain C struct for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    req
}

/// Bring `lo` up in the current network namespace and report the namespace as the network
/// control (loopback only). The row is the namespace read back by inode against the host's
/// (`userns::netns_reading`): one that is not new is returned `failed` before anything is
/// touched, and the caller refuses the run.
pub fn loopback_up() -> Result<ControlObservation, SetupError> {
    let mut o = crate::userns::netns_reading();
    if o.status != ControlStatus::Enforced {
        return Ok(o);
    }
    bring_lo_up()?;
    o.details.insert("interfaces".into(), json!(["lo"]));
    o.details.insert("mode".into(), json!("none"));
    Ok(o)
}

/// Set `IFF_UP | IFF_RUNNING` on `lo` of the current network namespace.
pub(crate) fn bring_lo_up() -> Result<(), SetupError> {
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .step(|| "socket for SIOCSIFFLAGS".into())?;
    let mut req = ifreq_lo();
    // SAFETY: `req` is a valid ifreq naming "lo"; SIOCGIFFLAGS fills `ifru_flags`.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) };
    if r != 0 {
        return Err(last_errno()).step(|| "read lo flags (SIOCGIFFLAGS)".into());
    }
    // SAFETY: the union member `ifru_flags` was just filled by the kernel.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: `req` is a valid ifreq naming "lo" with the flags to set.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) };
    if r != 0 {
        return Err(last_errno()).step(|| "bring lo up (SIOCSIFFLAGS)".into());
    }
    Ok(())
}

fn last_errno() -> Errno {
    Errno::from_raw_os_error(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}
