//! The process entry: what runs before `main`'s work in every `cofferdam` process, the
//! supervisor and the re-executed sandbox init alike, in place of std's own wrapper.
//!
//! std's wrapper (`lang_start`) reads `/proc/self/maps` to find the main thread's stack,
//! maps an alternate signal stack and installs SIGSEGV/SIGBUS handlers, only to print
//! "stack overflow" before the process dies of one: 45 µs here, paid twice by every sealed
//! run. The binary is built with `no_main` and starts at [`prepare`] instead, which keeps
//! what of that wrapper matters:
//!
//! - standard descriptors 0, 1 and 2 that are closed are opened on `/dev/null`, so a file
//!   the process opens later never takes their numbers (and never receives what is meant
//!   for stdout or stderr);
//! - SIGPIPE is ignored, so a closed reader shows up as `EPIPE` on the write;
//! - the exit goes through `std::process::exit`, which flushes stdout; a panic is caught
//!   and ends the process with 101, after the panic hook has printed it.
//!
//! Left out: the stack-overflow message (the guard page still stops the overflow; the
//! process dies of SIGSEGV without the sentence) and the main thread's name in panic
//! messages (`<unnamed>` instead of `main`). Arguments come from glibc's `.init_array`
//! hook, as with the wrapper.
//!
//! Owns only that start-up; it may not touch anything else of the process.

// std fills `std::env::args` before `main` through glibc's `.init_array` only; elsewhere
// (musl, other systems) it needs the wrapper this binary leaves out.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
compile_error!("cofferdam's entry (no_main) relies on glibc: build for a *-linux-gnu target");

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::os::fd::AsFd;

/// The exit code of a process whose `main` panicked (std's, kept).
pub const PANICKED: i32 = 101;

/// Open `/dev/null` on any of descriptors 0-2 that is closed, and ignore SIGPIPE.
pub fn prepare() {
    // std's handles name 0, 1 and 2 whether or not they are open; they are only polled here,
    // and a closed one reads as POLLNVAL.
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let std_fds = [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()];
    let mut fds = std_fds.map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::empty()));
    let closed = match poll(&mut fds, Some(&Timespec::default())) {
        Ok(_) => fds
            .iter()
            .filter(|p| p.revents().contains(PollFlags::NVAL))
            .count(),
        // Without an answer, leave the descriptors as they are, as std does.
        Err(_) => 0,
    };
    for _ in 0..closed {
        // The lowest free number is taken: the closed ones, lowest first.
        let opened = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR,
            rustix::fs::Mode::empty(),
        );
        match opened {
            // The descriptor stays open for the life of the process.
            Ok(null) => std::mem::forget(null),
            // Nothing safe to write to: std aborts here too.
            Err(_) => std::process::abort(),
        }
    }
    let _ = cofferdam_sandbox::sigaction::ignore(libc::SIGPIPE);
}
