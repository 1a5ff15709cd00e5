//! The init's socket service for `--publish` (sealed tier): the init — inside the sandbox's
//! network namespace, outside its pid namespace, so the command can neither see nor signal
//! it — answers the supervisor's requests on fd [`fds::PUBLISH`] with fresh, unconnected
//! IPv4 TCP sockets of this namespace (`cofferdam_net::forward` owns the wire format and
//! the relay). It makes a socket only when asked and keeps no copy.
//!
//! The init cannot start a thread (after `unshare(CLONE_NEWPID)` the kernel refuses
//! `CLONE_THREAD`), so it serves while it waits: it polls the publish socket and a pidfd of
//! pid 1 until pid 1 has ended, which the caller then reaps.
//!
//! Owns taking fd [`fds::PUBLISH`] and that loop; may not connect, read or decide anything.

use crate::fds;
use cofferdam_net::forward::tcp_socket;
use rustix::event::{PollFd, PollFlags, poll};
use rustix::fd::AsFd;
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, pidfd_open};

/// When the plan publishes ports (the supervisor then placed the publish socket at fd
/// [`fds::PUBLISH`]), serve it until `pid` (pid 1) has ended or the supervisor closed its
/// end; return at once otherwise. Pid 1 is not reaped here.
pub(crate) fn serve_until_exit(publish: &[u16], pid: i32) {
    if publish.is_empty() {
        return;
    }
    // Taken once, here, and closed on return.
    let channel = fds::take_publish();
    // Without a pidfd (a kernel before 5.3) nothing is served: each connection finds no
    // socket and is closed at once (the forwarder counts it refused).
    let Some(pidfd) = Pid::from_raw(pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
    else {
        return;
    };
    loop {
        let mut fds = [
            PollFd::new(&channel, PollFlags::IN),
            PollFd::new(&pidfd, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Err(Errno::INTR) => continue,
            Err(_) => return,
            Ok(_) => {}
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        if !fds[0].revents().is_empty()
            && !cofferdam_net::forward::serve_one(channel.as_fd(), &tcp_socket)
        {
            // The supervisor closed its end: nothing more to serve.
            return;
        }
    }
}
