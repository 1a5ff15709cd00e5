//! The command's pseudo-terminal, both ends of it.
//!
//! When the caller's stdin and stdout are both terminals (or `--tty`), the command runs on a
//! new pseudo-terminal rather than on the caller's, so nothing it does to its terminal (modes, `TIOCSTI`, window size, job
//! control) reaches the caller's. The pty comes from the sandbox's own `devpts` instance, so
//! inside it is a real `/dev/pts/N` (`tty`, `ttyname(3)`, tmux and sudo work); pid 1 allocates
//! it after the root is composed and hands the master to the supervisor over the terminal
//! socket ([`crate::fds::TERMINAL`]) with `SCM_RIGHTS`, the way runc's console socket
//! does. The supervisor relays the caller's terminal (in raw mode) to the master
//! (`crate::relay`).
//!
//! Owns the terminal mechanics: detecting the caller's terminal, raw mode and its restoration
//! ([`RawMode`]), allocating the pair inside, attaching the command to the slave as its
//! controlling terminal, and passing the master between processes. It decides nothing: the
//! plan says whether there is a terminal.

use cofferdam_channel::{Cause, ChannelError, Step};
use cofferdam_policy::plan::{TerminalPlan, wants_terminal};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::pty::OpenptFlags;
use rustix::termios::{OptionalActions, Termios, Winsize};
use serde::{Deserialize, Serialize};

/// The command's terminal, when it gets one ([`wants_terminal`]: stdin and stdout both
/// terminals, or `force`): the plan's terminal with the caller's window size (0×0 when the
/// size cannot be read from stdin, stdout or stderr).
pub fn caller_terminal(force: Option<bool>) -> Option<TerminalPlan> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let on = wants_terminal(
        rustix::termios::isatty(stdin.as_fd()),
        rustix::termios::isatty(stdout.as_fd()),
        force,
    );
    if !on {
        return None;
    }
    let size = window_size(stdin.as_fd())
        .or_else(|| window_size(stdout.as_fd()))
        .or_else(|| window_size(std::io::stderr().as_fd()));
    Some(size.map_or_else(TerminalPlan::default, |w| TerminalPlan {
        rows: w.ws_row,
        cols: w.ws_col,
    }))
}

/// The window size of the terminal on `fd`, if it is one.
pub(crate) fn window_size(fd: BorrowedFd<'_>) -> Option<Winsize> {
    rustix::termios::tcgetwinsize(fd).ok()
}

/// The end-of-file character (VEOF) of the terminal whose master is `master`, when it has
/// one set.
pub(crate) fn eof_char(master: BorrowedFd<'_>) -> Option<u8> {
    let t = rustix::termios::tcgetattr(master).ok()?;
    let c = t.special_codes[rustix::termios::SpecialCodeIndex::VEOF];
    (c != 0).then_some(c)
}

/// The caller's terminal in raw mode until dropped; dropping restores the saved attributes
/// exactly (also while unwinding from a panic).
#[derive(Debug)]
pub struct RawMode {
    fd: BorrowedFd<'static>,
    saved: Termios,
    raw: bool,
}

impl RawMode {
    /// Save `fd`'s attributes and switch it to raw mode: no echo, no line editing, no
    /// signal characters (Ctrl-C, Ctrl-Z reach the command's own terminal as bytes), no
    /// output processing (the command's terminal already did it).
    pub fn enter(fd: BorrowedFd<'static>) -> Result<RawMode, Errno> {
        let saved = rustix::termios::tcgetattr(fd)?;
        let mut mode = RawMode {
            fd,
            saved,
            raw: false,
        };
        mode.resume()?;
        Ok(mode)
    }

    /// Give the caller's terminal back (before stopping, or at the end).
    pub fn suspend(&mut self) {
        if self.raw {
            // Nothing useful can be done when the terminal is gone; the attempt is all.
            let _ =
                retry(|| rustix::termios::tcsetattr(self.fd, OptionalActions::Now, &self.saved));
            self.raw = false;
        }
    }

    /// Raw mode again (after being continued).
    pub fn resume(&mut self) -> Result<(), Errno> {
        let mut raw = self.saved.clone();
        raw.make_raw();
        retry(|| rustix::termios::tcsetattr(self.fd, OptionalActions::Now, &raw))?;
        self.raw = true;
        Ok(())
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        self.suspend();
    }
}

fn retry<T>(mut f: impl FnMut() -> Result<T, Errno>) -> Result<T, Errno> {
    loop {
        match f() {
            Err(Errno::INTR) => {}
            other => return other,
        }
    }
}

/// A pseudo-terminal pair allocated inside the sandbox.
#[derive(Debug)]
pub struct Pair {
    /// The master (close-on-exec), for the supervisor.
    pub master: OwnedFd,
    /// The slave (close-on-exec), the command's terminal.
    pub slave: OwnedFd,
}

/// Allocate a pair from `/dev/ptmx` (the sandbox's `devpts` once the root is composed) with
/// the initial window size `size`. Both ends are close-on-exec and neither becomes anyone's
/// controlling terminal here.
pub fn open_pair(size: TerminalPlan) -> Result<Pair, Errno> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    // TIOCGPTPEER opens the peer without a path lookup (Linux 4.13); older kernels: by name.
    let slave = match rustix::pty::ioctl_tiocgptpeer(&master, flags) {
        Ok(fd) => fd,
        Err(_) => {
            let name = rustix::pty::ptsname(&master, Vec::new())?;
            rustix::fs::open(
                name.as_c_str(),
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?
        }
    };
    rustix::termios::tcsetwinsize(
        &slave,
        Winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(Pair { master, slave })
}

/// In the init, before it forks the command: a new session whose controlling terminal is
/// `slave`. The init leads the session so the command's process group has a parent in the
/// same session: the kernel discards terminal stop signals (Ctrl-Z's SIGTSTP) sent to an
/// orphaned group, which a session leader's own group always is.
pub fn lead(slave: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::process::setsid()?;
    rustix::process::ioctl_tiocsctty(slave)
}

/// In the command's process, after fork and before exec: `slave` on stdin, stdout and
/// stderr and, when the init leads the terminal's session (`led`), a process group of its
/// own in the terminal's foreground; otherwise a new session whose controlling terminal is
/// `slave`. The caller closes `slave` (it is close-on-exec).
pub fn attach(slave: BorrowedFd<'_>, led: bool) -> Result<(), Errno> {
    if led {
        rustix::process::setpgid(None, None)?;
        // SIGTTOU is ignored only around tcsetpgrp (a background group taking the
        // foreground would otherwise be stopped), then set to its default before exec.
        crate::sigaction::ignore(libc::SIGTTOU)?;
        let fg = rustix::termios::tcsetpgrp(slave, rustix::process::getpid());
        crate::sigaction::set_default(libc::SIGTTOU)?;
        fg?;
    } else {
        rustix::process::setsid()?;
        rustix::process::ioctl_tiocsctty(slave)?;
    }
    rustix::stdio::dup2_stdin(slave)?;
    rustix::stdio::dup2_stdout(slave)?;
    rustix::stdio::dup2_stderr(slave)?;
    Ok(())
}

/// The terminal channel's name in its errors.
pub const CHANNEL: &str = "terminal";

/// The one message of the terminal channel (fd [`crate::fds::TERMINAL`], pid 1 → the
/// supervisor): the command's master, attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TerminalMessage {
    /// The master of the command's pseudo-terminal, the frame's one descriptor.
    Master,
}

/// Send `master` over the terminal socket.
pub fn send_master(socket: BorrowedFd<'_>, master: BorrowedFd<'_>) -> Result<(), Errno> {
    cofferdam_channel::send(socket, CHANNEL, &TerminalMessage::Master, &[master])
        .map_err(|e| e.errno())
}

/// Receive the master from the terminal socket: `Ok(None)` at end of stream (pid 1 ended
/// without sending one).
pub fn recv_master(socket: BorrowedFd<'_>) -> Result<Option<OwnedFd>, ChannelError> {
    let Some((TerminalMessage::Master, fds)) = cofferdam_channel::recv(socket, CHANNEL)? else {
        return Ok(None);
    };
    // The channel checked the count against the header; the master message declares one.
    let got = fds.len();
    match <[OwnedFd; 1]>::try_from(fds) {
        Ok([master]) => Ok(Some(master)),
        Err(_) => Err(ChannelError::new(
            CHANNEL,
            Step::Receive,
            Cause::Descriptors { declared: 1, got },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{AddressFamily, SocketFlags, SocketType};

    #[test]
    fn a_master_crosses_the_socket_and_end_of_stream_is_none() {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        send_master(a.as_fd(), w.as_fd()).unwrap();
        let got = recv_master(b.as_fd()).unwrap().unwrap();
        drop(w);
        rustix::io::write(&got, b"x").unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(rustix::io::read(&r, &mut buf).unwrap(), 1);
        drop(a);
        assert!(recv_master(b.as_fd()).unwrap().is_none());
    }

    #[test]
    fn a_pair_has_the_planned_size() {
        // /dev/ptmx of the host here: the mechanics are the same as inside.
        let Ok(pair) = open_pair(TerminalPlan {
            rows: 33,
            cols: 101,
        }) else {
            return;
        };
        let w = window_size(pair.master.as_fd()).unwrap();
        assert_eq!((w.ws_row, w.ws_col), (33, 101));
        assert!(rustix::termios::isatty(&pair.slave));
    }
}
