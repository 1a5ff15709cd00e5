#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The probe must not hang or lose results when the caller ignores `SIGCHLD` (children are
//! then auto-reaped and `waitpid` fails with `ECHILD`). Its own test binary, because the
//! disposition is process-wide.

use std::time::{Duration, Instant};

use cofferdam_sandbox::probe_host;

#[test]
fn probe_with_sigchld_ignored() {
    let normal = probe_host();
    // SAFETY: setting a signal disposition to SIG_IGN; this test binary runs no other test
    // that spawns children.
    let previous = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    assert_ne!(previous, libc::SIG_ERR);
    let t = Instant::now();
    let ignored = probe_host();
    let elapsed = t.elapsed();
    // SAFETY: restoring the disposition saved above.
    unsafe { libc::signal(libc::SIGCHLD, previous) };
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(normal, ignored);
    println!("probe with SIGCHLD ignored: {elapsed:?}");
}
