//! cofferdam's egress policy.
//!
//! Owns the hand-over of the sandbox's
//! listening sockets to the supervisor (`handover`), and the supervisor's driver that serves
//! them in `allow` mode (`proxy`: DNS answerer, transparent TCP and HTTP proxy, counters;
//! DESIGN.md §6). It may not decide containment or touch the sandbox's setup.
//!
//! The meaning of an allowlist entry and the network mode are pure decisions and live in
//! `cofferdam_policy::allow` (so the policy crate needs no syscall crate); they are
//! re-exported here under their old paths.

pub mod forward;
pub mod handover;
pub mod proxy;

pub use cofferdam_policy::allow;
pub use cofferdam_policy::allow::{AllowEntry, AllowError, HostPattern, NetworkMode};
