//! The end of a process tree on the tiers without a pid namespace (scoped, advisory): the
//! init there is a child subreaper, so every orphan of the command becomes its child, and
//! ending the tree means killing and reaping the init's children until none is left.
//!
//! Two ways in: [`kill_descendants`] when the command's main process has ended, and the
//! [`END_TREE`] signal, which the init receives when its supervisor dies (it is the init's
//! parent-death signal, [`end_tree_with_parent`]) or when the supervisor stops the run
//! (`crate::watch`). The signal's handler kills the tree and exits the init: without it a
//! supervisor's death would kill only the init and leave the command running as a host
//! process.
//!
//! Each round lists the children once, SIGKILLs them (a child not yet reaped keeps its pid,
//! so none can be a recycled one) and reaps every ended child without waiting, so a round
//! costs the number of children, not its square, and zombies never pile up; the rounds stop
//! when no child is left or after [`KILL_BOUND_MS`]. Everything here is async-signal-safe
//! (raw system calls, buffers on the stack, no allocation), because it runs in the handler.
//!
//! Owns only the killing and reaping; it may not report (the status channel is the
//! init's) and never signals anything but the init's own children.

use crate::sigaction;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rustix::process::{Pid, Signal};

/// The signal that makes the init end its whole tree and exit (its parent-death signal on
/// these tiers). Not among the signals the init forwards to the command.
pub const END_TREE: libc::c_int = libc::SIGPWR;

/// How long [`kill_descendants`] keeps killing before it gives up, milliseconds.
pub const KILL_BOUND_MS: i64 = 20_000;

/// Install the [`END_TREE`] handler and make it the init's parent-death signal. A parent
/// that died before this took effect is caught by comparing the parent pid before and
/// after: the tree is ended at once.
pub fn end_tree_with_parent() {
    let parent = rustix::process::getppid();
    // SAFETY: `end_tree` makes only async-signal-safe calls (raw system calls through
    // rustix, buffers on the stack, no allocation, no lock) and never returns (it exits),
    // so errno and the interrupted code's state do not matter; every signal is blocked
    // while it runs and no call is restarted.
    let _ = unsafe { sigaction::set_handler(END_TREE, end_tree, sigaction::Mask::Full, false) };
    let _ = rustix::process::set_parent_process_death_signal(Signal::from_named_raw(END_TREE));
    if rustix::process::getppid() != parent {
        end_tree(END_TREE);
    }
}

/// Make the calling process (the command, between its fork and its exec) die with its
/// parent, the init: when the init is SIGKILLed (by the command itself, which runs as the
/// same user) its handler cannot run, and the command would go on as a host process. Kept
/// across the exec unless the program is set-user-ID (not under `no_new_privs`).
/// Async-signal-safe.
pub fn die_with_init(init: libc::pid_t) {
    // Raw system calls (rustix's prctl and getppid): async-signal-safe.
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(init) {
        // SAFETY: _exit is async-signal-safe and ends only this process (std's exit would
        // run atexit handlers inherited from the parent).
        unsafe { libc::_exit(137) }
    }
}

extern "C" fn end_tree(sig: libc::c_int) {
    kill_descendants();
    // SAFETY: _exit is async-signal-safe; the init's records are the supervisor's, and
    // nothing here must be flushed.
    unsafe { libc::_exit(128 + sig) }
}

fn monotonic_ms() -> i64 {
    // The vDSO's (or the raw system call's) clock_gettime: async-signal-safe.
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec / 1_000_000)
}

/// Reap every child that has ended, without waiting; `false` when no child is left.
fn reap_ended() -> bool {
    loop {
        // SAFETY: waitpid with a null status pointer is allowed and async-signal-safe.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL) };
        if r > 0 {
            continue;
        }
        if r == 0 {
            return true;
        }
        if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return false; // ECHILD
    }
}

/// Call `f` with each pid in `/proc/thread-self/children` (the init is single-threaded, so
/// these are all its children), read in pieces into a stack buffer; how many there were.
fn for_each_child(mut f: impl FnMut(libc::pid_t)) -> usize {
    // The raw open(2) of a C string: no allocation, async-signal-safe.
    let Ok(fd) = rustix::fs::open(
        c"/proc/thread-self/children",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let mut buf = [0u8; 4096];
    let mut n = 0usize;
    let mut cur: Option<libc::pid_t> = None;
    loop {
        let got = match rustix::io::read(&fd, &mut buf) {
            Ok(got) => got,
            Err(Errno::INTR) => continue,
            Err(_) => break,
        };
        if got == 0 {
            break;
        }
        for &b in &buf[..got.min(buf.len())] {
            if b.is_ascii_digit() {
                let d = libc::pid_t::from(b - b'0');
                cur = Some(cur.unwrap_or(0).saturating_mul(10).saturating_add(d));
            } else if let Some(pid) = cur.take() {
                n += 1;
                f(pid);
            }
        }
    }
    if let Some(pid) = cur {
        n += 1;
        f(pid);
    }
    drop(fd);
    n
}

/// Kill every process below the caller (a child subreaper: orphans reparent to it) until it
/// has no child left; `false` when some were still there after [`KILL_BOUND_MS`].
pub fn kill_descendants() -> bool {
    let start = monotonic_ms();
    loop {
        if !reap_ended() {
            return true;
        }
        for_each_child(|pid| {
            if pid > 0 {
                // A child of this process that is not reaped yet (only this process reaps
                // its children), so the pid is still that child's.
                if let Some(pid) = Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, Signal::KILL);
                }
            }
        });
        if monotonic_ms().saturating_sub(start) > KILL_BOUND_MS {
            return !reap_ended();
        }
        // Let the kills land (or, with nothing listed, a child end); the next round reaps
        // every ended child at once.
        let _ = rustix::thread::nanosleep(&rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_are_listed_from_proc() {
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut seen = Vec::new();
        for_each_child(|p| seen.push(p));
        let _ = c.kill();
        let _ = c.wait();
        assert!(
            seen.contains(&(c.id() as libc::pid_t)),
            "{seen:?} lacks {}",
            c.id()
        );
    }
}
