//! cofferdam's job store and stage.
//!
//! Owns where jobs live and, as they land, the seal scan, the review model, the apply engine
//! with its ledger, and drop (DESIGN.md §4–§5). It may not run processes or decide
//! containment.

pub mod against_parent;
pub mod apply;
pub mod archive;
pub mod base;
pub mod checkpoint;
pub mod comments;
pub mod conflict;
pub mod copystage;
pub mod diff;
pub mod fingerprint;
pub mod fork;
pub(crate) mod fsops;
pub mod gitsummary;
pub mod hunk;
pub mod ident;
pub mod job;
pub mod ledger;
pub mod merge;
pub mod owned;
pub mod progress;
pub mod reserve;
pub mod review;
pub mod seal;
pub mod select;
pub mod sensitive;
pub mod sparse;
pub mod store;
pub mod texts;
pub mod trace_log;
mod xattrs;

pub use fingerprint::{
    Ctime, Fingerprint, FingerprintEntry, FingerprintError, Fingerprints, HostRoot, HostState,
    fingerprint_of, read_fingerprints, write_fingerprints,
};
pub use job::{
    Durability, Job, JobError, JobLock, JobState, JobStore, JobSummary, StageState, write_atomic,
    write_atomic_with,
};
pub use seal::{SealError, SealResult, seal};
pub use store::{StoreError, storage_root};
