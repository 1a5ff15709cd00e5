//! The records reserve: every new job directory holds `reserve`, [`RESERVE_BYTES`] of
//! allocated space, released once the command has ended (by `run`, before it seals) or when
//! any later command takes the job's lock (the run is then gone). A command that fills the
//! filesystem of the job store thereby still leaves room for its job's fingerprints, trace,
//! bundle and `job.json`, so the run ends `staged` and reviewable instead of stuck
//! `interrupted` with a torn trace.
//!
//! A second, small file, `reserve.drop` ([`DROP_RESERVE_BYTES`]), stays until `drop`
//! releases it ([`release_for_drop`]) just before writing the `discarded` state: a store
//! filled later (by anything) can still be freed with `cofferdam drop`, whose state write
//! comes before the stage's removal.
//!
//! Owns only those files. Best effort by design: a filesystem that cannot allocate it (or a
//! store already too full for it) gets no reserve, and everything else works as before.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The reserve's size: room for the records of a run with some thousands of changes.
pub const RESERVE_BYTES: u64 = 1 << 20;

/// The reserve's file name in the job directory.
pub const RESERVE_FILE: &str = "reserve";

/// The drop reserve's size: a `job.json` rewrite and a trace line, with room to spare.
pub const DROP_RESERVE_BYTES: u64 = 16 * 1024;

/// The drop reserve's file name in the job directory.
pub const DROP_RESERVE_FILE: &str = "reserve.drop";

/// Allocate both reserves in a new job directory `dir`.
pub fn make(dir: &Path) {
    make_file(&dir.join(RESERVE_FILE), RESERVE_BYTES);
    make_file(&dir.join(DROP_RESERVE_FILE), DROP_RESERVE_BYTES);
}

/// Allocate `len` bytes at `path` (blocks really allocated: `fallocate`, or zeros where that
/// is not supported). On any failure nothing is left behind.
fn make_file(path: &Path, len: u64) {
    let made = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| {
            match rustix::fs::fallocate(f.as_fd(), rustix::fs::FallocateFlags::empty(), 0, len) {
                Ok(()) => Ok(()),
                Err(rustix::io::Errno::NOSPC) => Err(std::io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                )),
                Err(_) => {
                    let zeros = vec![0u8; 64 * 1024];
                    let mut left = len;
                    while left > 0 {
                        let n = usize::try_from(left.min(zeros.len() as u64)).unwrap_or(0);
                        f.write_all(zeros.get(..n).unwrap_or_default())?;
                        left -= n as u64;
                    }
                    f.sync_data()
                }
            }
        });
    if made.is_err() {
        let _ = fs::remove_file(path);
    }
}

/// Release the drop reserve of job directory `dir` (absent is fine).
pub fn release_for_drop(dir: &Path) {
    let _ = fs::remove_file(dir.join(DROP_RESERVE_FILE));
}

/// Release the reserve of job directory `dir` (absent is fine). Returns the bytes that were
/// available on its filesystem just before, when the filesystem says.
pub fn release(dir: &Path) -> Option<u64> {
    let free = available(dir);
    let _ = fs::remove_file(dir.join(RESERVE_FILE));
    free
}

/// The bytes available on the filesystem of `dir`, when the filesystem says.
pub fn available(dir: &Path) -> Option<u64> {
    rustix::fs::statvfs(dir)
        .ok()
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
}

/// Whether `available` bytes leave room to spare for a run's records (64 MiB, far more
/// than they take) without the reserve: it may then be released after them.
pub fn is_roomy(available: u64) -> bool {
    available >= 64 * 1024 * 1024
}

/// Whether `available` bytes mean the filesystem is, for practical purposes, full.
pub fn is_full(available: u64) -> bool {
    available < 64 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn make_then_release() {
        let t = tempfile::tempdir().unwrap();
        make(t.path());
        let len = fs::metadata(t.path().join(RESERVE_FILE)).unwrap().len();
        assert_eq!(len, RESERVE_BYTES);
        let drop_len = fs::metadata(t.path().join(DROP_RESERVE_FILE))
            .unwrap()
            .len();
        assert_eq!(drop_len, DROP_RESERVE_BYTES);
        assert!(release(t.path()).is_some());
        assert!(!t.path().join(RESERVE_FILE).exists());
        assert!(t.path().join(DROP_RESERVE_FILE).exists(), "kept until drop");
        release_for_drop(t.path());
        assert!(!t.path().join(DROP_RESERVE_FILE).exists());
        // Releasing twice is fine.
        release(t.path());
        assert!(is_full(0) && !is_full(1 << 20));
    }
}
