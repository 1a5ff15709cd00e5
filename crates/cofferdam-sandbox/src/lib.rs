//! cofferdam's kernel mechanisms.
//!
//! Owns every syscall that probes or restricts the host: the host probe (`probe`) today, and
//! one module per mechanism (user namespace, mounts and overlay, Landlock, seccomp, rlimits
//! and cgroups, init and reaper) as they land, each turning a resolved plan into an
//! observation. It may not decide policy: which tier to use, what to allow and what a result
//! means are decided in `cofferdam-policy` from the values this crate returns.

pub mod probe;

pub use probe::probe_host;
