//! cofferdam's egress policy.
//!
//! Owns the meaning of a network allowlist: parsing `--allow-net` / `[network] allow`
//! entries and deciding whether a destination (a name or address and a port) is allowed.
//! The DNS answerer, the CONNECT proxy and the connection counters of DESIGN.md §6 belong
//! here too as they land. It may not decide containment or touch the sandbox's setup.

pub mod allow;

pub use allow::{AllowEntry, AllowError, HostPattern, NetworkMode};
