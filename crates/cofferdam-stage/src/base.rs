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
//! the tree, and each file is read once: a reflink (`FICLONE`) where the filesystem shares
//! extents, whose copy is then read to hash it, or else one read of the host file that is
//! hashed as it is written (the seal's fingerprint read it before, to hash it, when it was
//! not yet known to be modified). Clones or copies of the host's files, never links: a
//! hard link would share the host's inode, which the host may edit in place, while a
//! clone's blocks are copied on write. A fork links its parent's kept copies instead,
//! which nothing changes ([`keep_at_seal`]). It reads the host workdir beneath its root
//! without following symlinks and writes only `bases/` (mode 0700, files 0600); `drop`
//! removes it with the stage.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cofferdam_record::bundle::{ChangeEntry, ChangeEntryType, ChangeKind};
use rustix::fs::{Mode, OFlags};

use crate::fingerprint::{Fingerprints, HostState};
use crate::fsops;
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
    /// Bases kept.
    pub kept: usize,
    /// Of those, the ones kept as a reflink of the host file.
    pub cloned: usize,
    /// Of those, the ones linked from the parent's bases (a fork's, [`keep_at_seal`]).
    pub inherited: usize,
    /// Files that would have had a base but did not fit in [`BASES_TOTAL_MAX`].
    pub over_budget: usize,
}

/// Whether bytes fed a chunk at a time are text as [`crate::diff::is_binary`] decides it:
/// no NUL in the first 8000 bytes, and UTF-8 throughout (a character split between chunks
/// is carried to the next).
#[derive(Debug, Default)]
struct TextCheck {
    seen: usize,
    carry: Vec<u8>,
    binary: bool,
}

impl TextCheck {
    fn feed(&mut self, chunk: &[u8]) {
        if self.binary {
            return;
        }
        let head = 8000usize.saturating_sub(self.seen).min(chunk.len());
        self.seen = self.seen.saturating_add(chunk.len());
        if chunk.get(..head).is_some_and(|h| h.contains(&0)) {
            self.binary = true;
            return;
        }
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        match std::str::from_utf8(&buf) {
            Ok(_) => {}
            Err(e) if e.error_len().is_none() => {
                self.carry = buf.split_off(e.valid_up_to());
            }
            Err(_) => self.binary = true,
        }
    }

    fn is_text(&self) -> bool {
        !self.binary && self.carry.is_empty()
    }
}

/// Link the base `hash` (`size` bytes) kept in the bases directory `from` into `d`; whether
/// `d` now has it. Only a regular file of that size is taken (the link is not followed).
fn link_kept(from: BorrowedFd<'_>, d: &Path, hash: &str, size: u64) -> bool {
    let regular =
        rustix::fs::statat(from, hash, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
                && u64::try_from(st.st_size).is_ok_and(|n| n == size)
        });
    if !regular {
        return false;
    }
    match rustix::fs::linkat(
        from,
        hash,
        rustix::fs::CWD,
        d.join(hash),
        rustix::fs::AtFlags::empty(),
    ) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => true,
        Err(_) => false,
    }
}

/// The bytes read at a time.
const CHUNK: usize = 64 * 1024;

/// Keep the host file `path` (beneath `root`), whose fingerprint says `size` bytes hashing
/// to `hash`, as the base `bases/<hash>` in `d`: cloned, or copied while it is hashed; in
/// either case its bytes are read once. `Ok(None)`: not kept, since it is binary, or not
/// what its fingerprint says any more (changed since the seal looked).
fn keep_one(
    root: BorrowedFd<'_>,
    d: &Path,
    path: &[u8],
    hash: &str,
    size: u64,
) -> io::Result<Option<bool>> {
    let src = fsops::open_beneath(
        root,
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
    )
    .map(File::from)
    .map_err(fsops::io_err)?;
    let meta = src.metadata()?;
    if !meta.is_file() || meta.len() != size {
        return Ok(None);
    }
    let tmp = d.join(format!("{hash}.tmp"));
    let dst = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let result = (|| -> io::Result<Option<bool>> {
        let cloned = rustix::fs::ioctl_ficlone(&dst, &src).is_ok();
        let mut hasher = blake3::Hasher::new();
        let mut text = TextCheck::default();
        let mut buf = vec![0u8; CHUNK];
        let mut total = 0u64;
        // A clone is read back (it holds what the host file held when cloned); else the
        // host file is read and each chunk written as it is hashed.
        let mut from: &File = if cloned { &dst } else { &src };
        loop {
            let n = match from.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                break;
            }
            let chunk = buf.get(..n).unwrap_or_default();
            total += n as u64;
            if total > size {
                return Ok(None); // it grew since the seal looked
            }
            hasher.update(chunk);
            text.feed(chunk);
            if text.binary {
                return Ok(None);
            }
            if !cloned {
                (&dst).write_all(chunk)?;
            }
        }
        let same = total == size && hasher.finalize().to_hex().as_str() == hash;
        Ok((same && text.is_text()).then_some(cloned))
    })();
    drop(dst);
    match result {
        Ok(Some(cloned)) => {
            // No fsync: a copy lost or torn by a crash fails its hash check in `load`.
            fs::rename(&tmp, d.join(hash))?;
            Ok(Some(cloned))
        }
        other => {
            let _ = fs::remove_file(&tmp);
            other
        }
    }
}

/// Keep the bases of the sealed `changes` (their host sides in `fps`, read from the
/// workdir `lower`) in the job at `job_dir` (see the module docs). A file that is binary,
/// changed since its fingerprint, or unreadable is skipped: its merge is refused later,
/// naming that no base was kept. A file that no longer fits in the budget is skipped too
/// and counted, and smaller ones after it are still kept.
///
/// For a fork, `inherited` is its parent's `bases/`: a base kept there is hard-linked
/// rather than read from the host again. A base is never changed once kept (written under
/// a temporary name, then renamed), and a fork keeps the parent's fingerprint of what the
/// parent changed ([`crate::fork::merge`]), which names the same base, so the link holds
/// the host's content as the parent's seal found it; [`load`] checks its hash all the
/// same. One the parent lacks is kept from the host as usual.
pub fn keep_at_seal(
    job_dir: &Path,
    lower: &Path,
    changes: &[ChangeEntry],
    fps: &Fingerprints,
    inherited: Option<&Path>,
) -> io::Result<Kept> {
    keep_within(job_dir, lower, changes, fps, BASES_TOTAL_MAX, inherited)
}

fn keep_within(
    job_dir: &Path,
    lower: &Path,
    changes: &[ChangeEntry],
    fps: &Fingerprints,
    budget: u64,
    inherited: Option<&Path>,
) -> io::Result<Kept> {
    let root = rustix::fs::open(
        lower,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let d = dir(job_dir);
    // The parent's bases, by descriptor: one lookup of its path, not one per base.
    let inherited_fd = inherited.and_then(|p| {
        rustix::fs::open(
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    });
    let mut made_dir = false;
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
        if !made_dir {
            // Owner-only: these are copies of the user's files.
            match fs::DirBuilder::new().mode(0o700).create(&d) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => made_dir = true,
            }
        }
        if let Some(from) = &inherited_fd
            && link_kept(from.as_fd(), &d, &hash, size)
        {
            total += size;
            out.kept += 1;
            out.inherited += 1;
            continue;
        }
        // Unreadable, binary or changed since the seal: no base (its merge is refused).
        if let Ok(Some(cloned)) = keep_one(root.as_fd(), &d, path, &hash, size) {
            total += size;
            out.kept += 1;
            out.cloned += usize::from(cloned);
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

    /// A stage over `host` whose file `f` the run rewrote: the seal's changes and
    /// fingerprints.
    fn sealed(host: &Path, upper: &Path, staged: &[u8]) -> crate::SealResult {
        fs::write(upper.join("f"), staged).unwrap();
        crate::seal(upper, host).unwrap()
    }

    /// A fork links the base its parent kept, by the fingerprint's hash, rather than read
    /// the host again; a parent's file of another size is not taken.
    #[test]
    fn a_forks_base_is_linked_from_its_parents() {
        use std::os::unix::fs::MetadataExt;
        let (parent, job) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let host = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        let text = b"host text\n";
        fs::write(host.path().join("f"), text).unwrap();
        let s = sealed(host.path(), upper.path(), b"staged\n");
        let hash = blake3::hash(text).to_hex().to_string();
        keep(parent.path(), &hash, text).unwrap();
        let from = dir(parent.path());
        let kept = keep_at_seal(
            job.path(),
            host.path(),
            &s.changes,
            &s.fingerprints,
            Some(&from),
        )
        .unwrap();
        assert_eq!((kept.kept, kept.inherited), (1, 1), "{kept:?}");
        let ino = |p: &Path| fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&dir(job.path()).join(&hash)), ino(&from.join(&hash)));
        assert_eq!(load(job.path(), &hash).as_deref(), Some(&text[..]));
        // A parent's base of the wrong size: the host's is kept instead.
        let other = tempfile::tempdir().unwrap();
        fs::write(from.join(&hash), b"torn").unwrap();
        let kept = keep_at_seal(
            other.path(),
            host.path(),
            &s.changes,
            &s.fingerprints,
            Some(&from),
        )
        .unwrap();
        assert_eq!((kept.kept, kept.inherited), (1, 0), "{kept:?}");
        assert_eq!(load(other.path(), &hash).as_deref(), Some(&text[..]));
    }

    /// The base is the host's content as the seal found it, and stays that when the host
    /// then edits the file in place (a clone's blocks are copied on write; never a link).
    #[test]
    fn the_kept_base_is_the_host_content_at_the_start_and_survives_host_edits() {
        let job = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        // More than one read chunk, with a character split across the chunk boundary.
        let mut start = b"x".to_vec();
        start.extend_from_slice("é".repeat(CHUNK / 2 + 7).as_bytes());
        start.extend_from_slice(b"x\nlast line\n");
        let f = host.path().join("f");
        fs::write(&f, &start).unwrap();
        let s = sealed(host.path(), upper.path(), b"the run's version\n");
        assert_eq!(s.changes.len(), 1);
        let kept =
            keep_at_seal(job.path(), host.path(), &s.changes, &s.fingerprints, None).unwrap();
        assert_eq!((kept.kept, kept.over_budget), (1, 0), "{kept:?}");
        let hash = blake3::hash(&start).to_hex().to_string();
        assert_eq!(load(job.path(), &hash).as_deref(), Some(&start[..]));
        // The host edits the file in place, same inode and size.
        let mut w = fs::OpenOptions::new().write(true).open(&f).unwrap();
        w.write_all(b"EDITED").unwrap();
        drop(w);
        assert_ne!(fs::read(&f).unwrap(), start);
        assert_eq!(load(job.path(), &hash).as_deref(), Some(&start[..]));
        use std::os::unix::fs::MetadataExt;
        let base = fs::metadata(dir(job.path()).join(&hash)).unwrap();
        assert_ne!(base.ino(), fs::metadata(&f).unwrap().ino());
        assert_eq!(base.mode() & 0o777, 0o600);
        let names: Vec<_> = fs::read_dir(dir(job.path()))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            [std::ffi::OsString::from(&hash)],
            "no temporary left"
        );
    }

    /// A host file changed after the seal fingerprinted it, or binary, gets no base, and
    /// leaves no temporary file behind.
    #[test]
    fn a_file_changed_since_the_seal_or_binary_is_not_kept() {
        let job = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        let f = host.path().join("f");
        fs::write(&f, b"one\n").unwrap();
        let s = sealed(host.path(), upper.path(), b"two\n");
        fs::write(&f, b"ONE\n").unwrap(); // same size, other bytes
        let kept =
            keep_at_seal(job.path(), host.path(), &s.changes, &s.fingerprints, None).unwrap();
        assert_eq!(kept.kept, 0);
        fs::write(&f, b"one\nand more\n").unwrap(); // grown
        assert_eq!(
            keep_at_seal(job.path(), host.path(), &s.changes, &s.fingerprints, None)
                .unwrap()
                .kept,
            0
        );
        let bin = tempfile::tempdir().unwrap();
        let up2 = tempfile::tempdir().unwrap();
        fs::write(bin.path().join("f"), b"a\0b\xff\n").unwrap();
        let s = sealed(bin.path(), up2.path(), b"text\n");
        assert_eq!(
            keep_at_seal(job.path(), bin.path(), &s.changes, &s.fingerprints, None)
                .unwrap()
                .kept,
            0
        );
        assert_eq!(fs::read_dir(dir(job.path())).unwrap().count(), 0);
    }

    #[test]
    fn text_is_told_from_binary_across_chunks() {
        let whole = "aé€𝄞z".as_bytes();
        for cut in 0..whole.len() {
            let mut t = TextCheck::default();
            t.feed(&whole[..cut]);
            t.feed(&whole[cut..]);
            assert!(t.is_text(), "cut at {cut}");
        }
        let mut t = TextCheck::default();
        t.feed(&whole[..2]); // ends inside é
        assert!(
            !t.is_text(),
            "a file that ends inside a character is not text"
        );
        let mut t = TextCheck::default();
        t.feed(b"ok\xffno");
        assert!(t.binary);
        let mut t = TextCheck::default();
        t.feed(&vec![b'a'; 7999]);
        t.feed(b"\0");
        assert!(t.binary, "a NUL in the first 8000 bytes");
        let mut t = TextCheck::default();
        t.feed(&vec![b'a'; 8000]);
        t.feed(b"\0");
        assert!(
            t.is_text(),
            "as is_binary: a NUL past 8000 bytes is not looked for"
        );
        assert!(!crate::diff::is_binary(
            &[vec![b'a'; 8000], vec![0]].concat()
        ));
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
        let kept = keep_within(job.path(), work.path(), &changes, &fps, 6, None).unwrap();
        assert_eq!((kept.kept, kept.over_budget), (2, 1));
        assert!(load(job.path(), &blake3::hash(b"x\n").to_hex()).is_some());
        assert!(load(job.path(), &blake3::hash(b"y\n").to_hex()).is_some());
        assert!(load(job.path(), &blake3::hash(b"1234567890\n").to_hex()).is_none());
    }
}
