//! Merge bases: the host's content of each modified text file as the seal found it, kept in
//! the job (`bases/`) so that a later `apply --merge` has the common ancestor of the host's
//! edits and the stage's, and hunk apply has the fixed text its hunk ids are computed from
//! (issue 22).
//!
//! Owns the `bases/` directory of a job: [`keep_at_seal`] copies, for each `modified`
//! change whose host side is a text file of at most [`BASE_MAX_BYTES`], that file's bytes
//! into `bases/<blake3>` (named by the content hash the seal recorded, so equal files are
//! kept once), until the job holds [`BASES_TOTAL_MAX`]; [`load`] reads one back and checks
//! its hash, so a torn or edited copy is never used (it counts as not kept, and a merge of
//! that path is refused, naming why). The cost follows the bytes of the changed files, not
//! the tree. Copies, not links: a hard link would share the host's inode, which the host
//! may edit in place. It reads the host workdir beneath its root without following
//! symlinks and writes only `bases/` (mode 0700, files 0600); `drop` removes it with the
//! stage.

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cofferdam_record::bundle::{ChangeEntry, ChangeEntryType, ChangeKind};
use rustix::fs::{Mode, OFlags};

use crate::diff::{Content, is_binary, read_file};
use crate::fingerprint::{Fingerprints, HostState};
use crate::review::change_path_bytes;

/// The largest file whose base is kept: 1 MiB, the size above which review shows no text
/// diff either ([`crate::diff::LARGE_BYTES`]).
pub const BASE_MAX_BYTES: u64 = crate::diff::LARGE_BYTES;

/// The most a job keeps in bases: 64 MiB. Files past it have no base (their merge is
/// refused; a whole-file apply is unaffected).
pub const BASES_TOTAL_MAX: u64 = 64 << 20;

/// The `bases/` directory of the job at `job_dir`.
pub fn dir(job_dir: &Path) -> PathBuf {
    job_dir.join("bases")
}

fn name_ok(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Keep `bytes` (whose BLAKE3 is `hash`) as a base of the job at `job_dir`, unless kept.
pub fn keep(job_dir: &Path, hash: &str, bytes: &[u8]) -> io::Result<()> {
    if !name_ok(hash) || blake3::hash(bytes).to_hex().as_str() != hash {
        return Err(io::Error::other("the content does not match its hash"));
    }
    let d = dir(job_dir);
    let path = d.join(hash);
    if load(job_dir, hash).is_some() {
        return Ok(());
    }
    // Owner-only: these are copies of the user's files.
    match fs::DirBuilder::new().mode(0o700).create(&d) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    // No fsync: a copy lost or torn by a crash fails its hash check in `load`.
    let tmp = d.join(format!("{hash}.tmp"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    io::Write::write_all(&mut f, bytes)?;
    drop(f);
    fs::rename(&tmp, &path)
}

/// The base with content hash `hash`, when kept and intact.
pub fn load(job_dir: &Path, hash: &str) -> Option<Vec<u8>> {
    if !name_ok(hash) {
        return None;
    }
    let bytes = fs::read(dir(job_dir).join(hash)).ok()?;
    (blake3::hash(&bytes).to_hex().as_str() == hash).then_some(bytes)
}

/// The host side of a change, when it is a base worth keeping: (hash, size).
fn wanted(c: &ChangeEntry, host: &HostState) -> Option<(String, u64)> {
    let text_change = c.kind == ChangeKind::Modified
        && c.old_type == Some(ChangeEntryType::File)
        && c.new_type == Some(ChangeEntryType::File);
    match host {
        HostState::File {
            size,
            blake3: Some(h),
            ..
        } if text_change && *size <= BASE_MAX_BYTES => Some((h.clone(), *size)),
        _ => None,
    }
}

/// What [`keep_at_seal`] kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// Bases kept (or already there).
    pub kept: usize,
    /// Files that would have had a base but did not fit in [`BASES_TOTAL_MAX`].
    pub over_budget: usize,
}

/// Keep the bases of the sealed `changes` (their host sides in `fps`, read from the
/// workdir `lower`) in the job at `job_dir` (see the module docs). A file that is binary,
/// changed since its fingerprint, or unreadable is skipped: its merge is refused later,
/// naming that no base was kept. A file that no longer fits in the budget is skipped too
/// and counted, and smaller ones after it are still kept.
pub fn keep_at_seal(
    job_dir: &Path,
    lower: &Path,
    changes: &[ChangeEntry],
    fps: &Fingerprints,
) -> io::Result<Kept> {
    keep_within(job_dir, lower, changes, fps, BASES_TOTAL_MAX)
}

fn keep_within(
    job_dir: &Path,
    lower: &Path,
    changes: &[ChangeEntry],
    fps: &Fingerprints,
    budget: u64,
) -> io::Result<Kept> {
    let root = rustix::fs::open(
        lower,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut total = 0u64;
    let mut out = Kept::default();
    for c in changes {
        let path = change_path_bytes(c);
        let Some(e) = fps.get(path) else { continue };
        let Some((hash, size)) = wanted(c, &e.fingerprint.host) else {
            continue;
        };
        if total + size > budget {
            out.over_budget += 1;
            continue;
        }
        let Ok(Content::Bytes(bytes)) = read_file(root.as_fd(), path) else {
            continue;
        };
        if is_binary(&bytes) {
            continue;
        }
        if keep(job_dir, &hash, &bytes).is_ok() {
            total += size;
            out.kept += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_text_bases_by_hash_and_checks_them() {
        let job = tempfile::tempdir().unwrap();
        let text = b"one\ntwo\n";
        let hash = blake3::hash(text).to_hex().to_string();
        keep(job.path(), &hash, text).unwrap();
        assert_eq!(load(job.path(), &hash).as_deref(), Some(&text[..]));
        // A wrong hash is refused; a damaged copy is not used.
        assert!(keep(job.path(), &"0".repeat(64), text).is_err());
        fs::write(dir(job.path()).join(&hash), b"edited").unwrap();
        assert_eq!(load(job.path(), &hash), None);
        assert_eq!(load(job.path(), "../x"), None);
    }

    /// A file past the budget loses its base; a smaller one after it still gets one.
    #[test]
    fn a_file_over_the_budget_does_not_stop_later_ones() {
        let job = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let files: [(&str, &[u8]); 3] = [("a", b"1234567890\n"), ("b", b"x\n"), ("c", b"y\n")];
        let mut entries = Vec::new();
        let mut changes = Vec::new();
        for (name, text) in files {
            fs::write(work.path().join(name), text).unwrap();
            entries.push(crate::fingerprint::FingerprintEntry {
                path: name.into(),
                path_bytes: name.as_bytes().to_vec(),
                fingerprint: crate::fingerprint::Fingerprint {
                    host: HostState::File {
                        size: text.len() as u64,
                        mode: 0o644,
                        blake3: Some(blake3::hash(text).to_hex().to_string()),
                    },
                    ctime: None,
                },
            });
            changes.push(
                serde_json::from_value::<ChangeEntry>(serde_json::json!({
                    "path": name, "kind": "modified", "old_type": "file", "new_type": "file"
                }))
                .unwrap(),
            );
        }
        let fps = Fingerprints {
            entries,
            ..Fingerprints::default()
        };
        let kept = keep_within(job.path(), work.path(), &changes, &fps, 6).unwrap();
        assert_eq!(
            kept,
            Kept {
                kept: 2,
                over_budget: 1
            }
        );
        assert!(load(job.path(), &blake3::hash(b"x\n").to_hex()).is_some());
        assert!(load(job.path(), &blake3::hash(b"y\n").to_hex()).is_some());
        assert!(load(job.path(), &blake3::hash(b"1234567890\n").to_hex()).is_none());
    }
}
