//! How the stage identifies a filesystem object and an inode change: the device and inode
//! pair and the ctime that the ledger records and the fingerprints compare. Plain values
//! with no dependency inside the crate, so the modules that read the filesystem
//! (`fsops`, `fingerprint`) and the ledger that stores them need not import each other.

use serde::{Deserialize, Serialize};

/// A filesystem object's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// An inode change time (`st_ctime`, `st_ctime_nsec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Ctime {
    /// Seconds since the Unix epoch.
    pub sec: i64,
    /// Nanoseconds within the second.
    pub nsec: u32,
}

impl Ctime {
    /// Whether this ctime is strictly later than `unix_ms` (e.g. the run's start): the
    /// host path changed after that instant.
    pub fn is_after_unix_ms(&self, unix_ms: u64) -> bool {
        let this = i128::from(self.sec) * 1_000_000_000 + i128::from(self.nsec);
        this > i128::from(unix_ms) * 1_000_000
    }
}
