//! cofferdam's kernel mechanisms.
//!
//! Owns every syscall that probes or restricts the host: the host probe (`probe`) today, and
//! one module per mechanism (user namespace, mounts and overlay, Landlock, seccomp, rlimits
//! and cgroups, init and reaper) as they land, each turning a resolved plan into an
//! observation. It may not decide policy: which tier to use, what to allow and what a result
//! means are decided in `cofferdam-policy` from the values this crate returns.

pub mod blockdev;
pub mod caps;
pub mod cgroup;
pub mod egress;
pub mod entry;
pub mod fanotify;
pub mod fds;
pub mod fork;
pub mod init;
pub mod landlock;
pub mod launch;
pub mod memfd;
pub mod metafilter;
pub mod mounts;
pub mod mutant;
pub mod netif;
pub mod plan_channel;
pub mod probe;
pub mod pty;
pub mod publish;
pub mod reaper;
pub mod relay;
pub mod rlimit;
pub mod scoped;
pub mod seccomp;
pub mod setup;
pub mod setup_error;
pub mod shebang;
pub mod sigaction;
pub mod sockfilter;
pub mod spawn;
pub mod status;
pub mod userns;
pub mod watch;

pub use probe::probe_host;
