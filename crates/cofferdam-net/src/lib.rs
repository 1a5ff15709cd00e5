//! cofferdam's egress policy.
//!
//! Owns the meaning of a network allowlist (parsing `--allow-net` / `[network] allow`
//! entries and deciding whether a destination is allowed), the hand-over of the sandbox's
//! listening sockets to the supervisor (`handover`), and the supervisor's driver that serves
//! them in `allow` mode (`proxy`: DNS answerer, transparent TCP and HTTP proxy, counters;
//! DESIGN.md §6). It may not decide containment or touch the sandbox's setup.

pub mod allow;
pub mod handover;
pub mod proxy;

pub use allow::{AllowEntry, AllowError, HostPattern, NetworkMode};
