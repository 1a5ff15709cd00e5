//! The descriptor table across the exec from the supervisor to the sandbox init: which fd
//! number carries what. The one declaration both sides use (`launch` places the
//! descriptors; the init's side takes them only through the functions here), the one place
//! a number of the table becomes an owned descriptor, and the one owner of the status
//! channel inside the init. May not read or write the channels' messages (`status`,
//! `plan_channel`, `pty`, `cofferdam_net::handover` and `cofferdam_net::forward` own those,
//! framed by `cofferdam_channel`). No other module or crate names these numbers.

use crate::status::{StatusMessage, send};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The plan pipe's read end: the plan, then the supervisor's go.
pub const PLAN: RawFd = 3;
/// The status pipe's write end: one JSON status line per message.
pub const STATUS: RawFd = 4;
/// The terminal socket (a unix stream socket, present only when the plan asks for a
/// terminal): pid 1 sends the master of the command's pseudo-terminal over it.
pub const TERMINAL: RawFd = 5;
/// The network socket (present only in network `allow` mode): pid 1 sends its listeners
/// over it.
pub const NET: RawFd = 6;
/// The publish socket (present only when the plan publishes ports): the init serves the
/// supervisor fresh TCP sockets of the sandbox's network namespace over it
/// (`crate::publish`); pid 1 closes its copy with the other inherited descriptors.
pub const PUBLISH: RawFd = 7;
// 8 and up are free: a new channel takes the next number here, its place in `launch`'s
// table and a `take_` function below; `caps::close_fds` closes every number not kept.

/// Take the plan pipe (fd [`PLAN`]). Only the init calls this, once.
pub(crate) fn take_plan() -> OwnedFd {
    // SAFETY: the supervisor hands the plan pipe's read end as fd PLAN, open at the init's
    // start, and nothing else in this process owns it: it is taken once.
    unsafe { OwnedFd::from_raw_fd(PLAN) }
}

/// Take the network socket (fd [`NET`]), present in network `allow` mode. Only pid 1, which
/// sends the listeners over it, calls this, once.
pub(crate) fn take_network() -> OwnedFd {
    // SAFETY: in `allow` mode the supervisor hands the network socket as fd NET and nothing
    // else in this process owns it; each process takes it once.
    unsafe { OwnedFd::from_raw_fd(NET) }
}

/// Close this process's copy of the network socket, if it has one (the init: only pid 1
/// hands the listeners over). Not an owned take, since the number may not be open.
pub(crate) fn close_network() {
    // SAFETY: fd NET is the network socket when present (allow mode), owned by nobody in
    // the calling process; closing a number that is not open is harmless (EBADF).
    unsafe {
        libc::close(NET);
    }
}

/// Take the publish socket (fd [`PUBLISH`]), present when the plan publishes ports. Only
/// the init, which serves it, calls this, once.
pub(crate) fn take_publish() -> OwnedFd {
    // SAFETY: when the plan publishes ports the supervisor hands the publish socket as fd
    // PUBLISH, and nothing else in the init owns that number: it is taken once.
    unsafe { OwnedFd::from_raw_fd(PUBLISH) }
}

/// Take the terminal socket (fd [`TERMINAL`]), present when the plan has a terminal. The
/// caller owns it from here: only the process that sends the command's terminal (or drops
/// its copy) calls this, once.
pub(crate) fn take_terminal() -> OwnedFd {
    // SAFETY: with a terminal in the plan the supervisor hands the terminal socket as fd
    // TERMINAL, and nothing else in this process owns it: each process takes it once.
    unsafe { OwnedFd::from_raw_fd(TERMINAL) }
}

/// The init's status channel over its life: not yet taken from fd [`STATUS`], owned, or
/// closed (after which nothing is sent and the number is never taken again).
enum Status {
    Untaken,
    Open(OwnedFd),
    Closed,
}

static STATUS_CHANNEL: Mutex<Status> = Mutex::new(Status::Untaken);

/// Lend the status channel to `f` for one call; `None` once it is closed. The first call
/// takes fd [`STATUS`] into an owner, so no borrow outlives the descriptor. Only the init
/// (and the processes it forks, each with its own copy) calls this; the init is
/// single-threaded, and no signal handler sends status, so the lock is never contended
/// across a fork or re-entered.
pub(crate) fn with_status<R>(f: impl FnOnce(BorrowedFd<'_>) -> R) -> Option<R> {
    let mut guard = STATUS_CHANNEL.lock().unwrap_or_else(|p| p.into_inner());
    if matches!(*guard, Status::Untaken) {
        // SAFETY: the supervisor hands the init the status pipe as fd STATUS (see
        // `launch`), open at the init's start; this module is the only code that takes
        // the number, and it takes it once (the state moves past `Untaken`).
        *guard = Status::Open(unsafe { OwnedFd::from_raw_fd(STATUS) });
    }
    match &*guard {
        Status::Open(fd) => Some(f(fd.as_fd())),
        Status::Untaken | Status::Closed => None,
    }
}

/// Send one status message; nothing once the channel is closed.
pub(crate) fn send_status(msg: &StatusMessage) {
    with_status(|fd| send(fd, msg));
}

/// Close this process's copy of the status channel (pid 1, once its command is reaped: the
/// end of the stream tells the supervisor that nothing of the run is left).
pub(crate) fn close_status() {
    // Taken first if this process never sent: fd STATUS is closed either way.
    with_status(|_| ());
    let mut guard = STATUS_CHANNEL.lock().unwrap_or_else(|p| p.into_inner());
    // The owned descriptor is dropped (closed) here.
    *guard = Status::Closed;
}

/// Mark the status channel close-on-exec, so it does not reach the command (nothing to do
/// once it is closed).
pub(crate) fn status_cloexec() -> rustix::io::Result<()> {
    with_status(|fd| rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)).unwrap_or(Ok(()))
}
