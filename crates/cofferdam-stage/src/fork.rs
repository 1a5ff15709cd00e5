//! A fork's stage (issue 21): a new job that starts from a checkpoint of another job's
//! stage. Owns the seeding of the new job's `upper/` from the checkpoint and the
//! fingerprints the fork inherits; may not decide containment, run processes, or touch the
//! parent job or the checkpoint (both are only read).
//!
//! The fork's `upper/` starts as a copy of the checkpoint's staged tree (reflinks where the
//! filesystem shares extents, [`crate::checkpoint::restore`]), so the overlay over the host
//! workdir shows the parent's staged result, and what the fork leaves there is the net
//! result against the host, parent's changes included: review, apply and drop treat it as
//! any stage. The conflict check must still see a host edit made after the parent looked:
//! the checkpoint's fingerprints are kept as `inherited-fingerprints.json`, and at the seal
//! every change the parent had already made keeps the parent's fingerprint
//! ([`merge`]), and the run's start becomes the earlier of the two.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint::{Checkpoint, CheckpointError, Counts, restore};
use crate::fingerprint::{FingerprintError, Fingerprints, read_fingerprints};
use crate::job::Job;

/// The fork's copy of its checkpoint's fingerprints, in the job directory.
pub const INHERITED: &str = "inherited-fingerprints.json";

/// The fork's stage could not be made or sealed.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The fresh job's `upper/` could not be replaced.
    #[error("cannot prepare the fork's stage {}: {source}; check the store's disk", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The checkpoint could not be copied.
    #[error("cannot copy the checkpoint into the fork's stage: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// The inherited fingerprints could not be read or written.
    #[error("the fork's inherited fingerprints: {0}")]
    Fingerprints(#[from] FingerprintError),
}

/// Seed `job`'s (new, empty) stage with the checkpoint `c`; returns what was copied.
pub fn seed(job: &Job, c: &Checkpoint) -> Result<Counts, ForkError> {
    let upper = job.upper();
    // The job store made an empty `upper/`; the copy makes its own (mode 0700).
    fs::remove_dir(&upper).map_err(|source| ForkError::Io {
        path: upper.clone(),
        source,
    })?;
    let counts = restore(c, &upper)?;
    // The checkpoint's bytes as they are (one entry per change the parent staged): parsed
    // once, at the seal ([`inherit`]), not here as well.
    let from = c.fingerprints_path();
    match fs::read(&from) {
        Ok(bytes) => {
            let to = job.dir().join(INHERITED);
            crate::job::write_atomic_with(&to, &bytes, 0o600, crate::job::Durability::Durable)
                .map_err(|source| ForkError::Io { path: to, source })?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(ForkError::Io { path: from, source }),
    }
    Ok(counts)
}

/// The fingerprints the seal of `job_dir`'s stage found (`fresh`), with what the job
/// inherited merged in ([`merge`]); `fresh` unchanged when the job is no fork.
pub fn inherit(job_dir: &Path, fresh: Fingerprints) -> Result<Fingerprints, ForkError> {
    let path = job_dir.join(INHERITED);
    if fs::symlink_metadata(&path).is_err() {
        return Ok(fresh);
    }
    Ok(merge(fresh, read_fingerprints(&path)?))
}

/// A fork's fingerprints: each changed path (`fresh`'s entries, one per change) keeps the
/// parent's fingerprint when the parent had changed it too (the host as the parent saw it,
/// so a host edit since is a conflict), else the fork's own; the run's start is the
/// earlier one, so a host path changed after the parent started is caught. Paths the
/// parent changed and the fork put back as the host has them are no change and drop out.
/// Pure.
pub fn merge(fresh: Fingerprints, inherited: Fingerprints) -> Fingerprints {
    let started = match (
        fresh.run_started_at_unix_ms,
        inherited.run_started_at_unix_ms,
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut parent: HashMap<Vec<u8>, _> = inherited
        .entries
        .into_iter()
        .map(|e| (e.path_bytes.clone(), e))
        .collect();
    let entries = fresh
        .entries
        .into_iter()
        .map(|e| parent.remove(&e.path_bytes).unwrap_or(e))
        .collect();
    Fingerprints {
        run_started_at_unix_ms: started,
        ..Fingerprints::from_entries(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{Fingerprint, FingerprintEntry, HostState};

    fn entry(path: &str, size: u64) -> FingerprintEntry {
        FingerprintEntry {
            path: path.to_owned(),
            path_bytes: path.as_bytes().to_vec(),
            fingerprint: Fingerprint {
                host: HostState::File {
                    size,
                    mode: 0o644,
                    blake3: Some(format!("h{size}")),
                },
                ctime: None,
            },
        }
    }

    fn fps(started: Option<u64>, entries: Vec<FingerprintEntry>) -> Fingerprints {
        Fingerprints {
            run_started_at_unix_ms: started,
            ..Fingerprints::from_entries(entries)
        }
    }

    #[test]
    fn inherited_paths_keep_the_parents_view_of_the_host() {
        let fresh = fps(Some(200), vec![entry("a", 2), entry("b", 2)]);
        let inherited = fps(Some(100), vec![entry("a", 1), entry("gone", 1)]);
        let m = merge(fresh, inherited);
        assert_eq!(m.run_started_at_unix_ms, Some(100));
        // `a` the parent changed: its fingerprint; `b` only the fork: its own; `gone` the
        // fork put back: no change, no fingerprint.
        assert_eq!(m.entries, vec![entry("a", 1), entry("b", 2)]);
    }

    #[test]
    fn a_missing_start_takes_the_other() {
        let m = merge(fps(None, vec![]), fps(Some(7), vec![]));
        assert_eq!(m.run_started_at_unix_ms, Some(7));
        let m = merge(fps(Some(9), vec![]), fps(None, vec![]));
        assert_eq!(m.run_started_at_unix_ms, Some(9));
    }
}
