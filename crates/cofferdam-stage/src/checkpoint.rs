//! Checkpoints: immutable savepoints of a stopped job's stage (issue 21).
//!
//! Owns the checkpoint layout inside a job directory, its manifest (`checkpoint.json`), the
//! copy of the stage into it, its digest, and the rules for names and addresses. It may not
//! change the job's stage, records or state (the caller holds the job lock and checks the
//! job is stopped), run processes or decide containment.
//!
//! # Layout
//!
//! ```text
//! <job dir>/checkpoints/                 mode 0700
//!     ckpt-<uuid v7>/                    one checkpoint, made as `.new-ckpt-…` and renamed
//!         checkpoint.json                the manifest (0600), written last
//!         upper/                         the staged tree: files, whiteouts, opaque dirs,
//!                                        modes, symlinks, the overlay's xattrs
//!         fingerprints.json              the host fingerprints the conflict check needs
//! ```
//!
//! # Cost and independence
//!
//! Only the stage is walked (the host workdir never is), so creating a checkpoint costs
//! O(changed paths) plus the staged bytes. A regular file's data is shared with `FICLONE`
//! (a copy-on-write reflink, on btrfs, xfs, bcachefs…) and copied where the filesystem has
//! none (ext4, tmpfs). Hard links are never used: the job's upper inodes are written in
//! place afterwards (the seal lends owner read permission with `chmod`, a later run on the
//! stage writes through the overlay into the same inode, and apply may move or modify a
//! staged file), and a hard link would carry each of those writes into the checkpoint.
//! A reflink or a copy is a separate inode, so nothing done to the job later (runs,
//! applies, drops) can change a checkpoint; its digest is re-read by `show` to prove it.
//!
//! # The digest
//!
//! `blake3:<hex>` over, for each entry of `upper/` in path-byte order: the path bytes, the
//! type, the permission bits, the content hash ([`crate::sparse::hash_file`]) for a file,
//! the target bytes for a symlink, the device number for a node, and the overlay xattrs
//! (name and value, sorted); then the bytes of `fingerprints.json`. Owners and times are not
//! part of it (the seal does not compare them either).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;
use serde::{Deserialize, Serialize};
use walkdir::WalkDir;

use crate::job::{Durability, Job, write_atomic_with};

/// Every checkpoint id starts with this.
pub const ID_PREFIX: &str = "ckpt-";
/// The `version` written to `checkpoint.json`.
pub const MANIFEST_VERSION: u32 = 1;
/// The longest checkpoint name.
pub const NAME_MAX: usize = 64;

const DIR: &str = "checkpoints";
const MANIFEST: &str = "checkpoint.json";
const FINGERPRINTS: &str = "fingerprints.json";
const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// A checkpoint operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A filesystem operation failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// `checkpoint.json` does not parse.
    #[error("{} is not a valid checkpoint manifest: {source}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The stage holds an entry a checkpoint cannot recreate as the job's own user.
    #[error(
        "cannot checkpoint {}: it is a {what}, which only a privileged user can recreate; \
         drop it from the stage (or apply it) first",
        .path.display()
    )]
    Unsupported {
        /// The stage entry.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// The job has no stage on disk.
    #[error("job {job} has no stage to checkpoint (it was dropped or fully applied)")]
    NoStage {
        /// The job id.
        job: String,
    },
    /// The name is not usable.
    #[error("{0}")]
    BadName(String),
    /// The job already has a checkpoint of that name.
    #[error(
        "job {job} already has a checkpoint named `{name}` ({id}); choose another --name or \
         delete that one"
    )]
    NameTaken {
        /// The job id.
        job: String,
        /// The name.
        name: String,
        /// The checkpoint that has it.
        id: String,
    },
}

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn errno<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(rustix::io::Errno) -> CheckpointError + 'a {
    move |e| io_err(action, path)(io::Error::from(e))
}

/// What a checkpoint holds, counted when it was made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Entries below `upper/` (the root itself not counted).
    pub entries: u64,
    /// Regular files (xattr whiteouts excluded).
    pub files: u64,
    /// Directories.
    pub directories: u64,
    /// Of them, opaque ones.
    pub opaque_directories: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Whiteouts (0:0 devices or xattr whiteouts).
    pub whiteouts: u64,
    /// Fifos.
    pub fifos: u64,
    /// Bytes of regular files.
    pub bytes: u64,
    /// Files whose data was shared with a reflink.
    pub reflinked_files: u64,
    /// Files whose data was copied.
    pub copied_files: u64,
}

/// `checkpoint.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`MANIFEST_VERSION`].
    pub version: u32,
    /// `ckpt-<uuid v7>`.
    pub id: String,
    /// The name given with `--name`.
    #[serde(default)]
    pub name: Option<String>,
    /// The job it was taken of.
    pub job_id: String,
    /// The run whose stage it holds (the bundle's `run.run_id`).
    pub run_id: String,
    /// When it was made, Unix milliseconds.
    pub created_at_unix_ms: u64,
    /// What it holds.
    pub counts: Counts,
    /// See the module docs.
    pub digest: String,
}

/// One checkpoint on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

impl Checkpoint {
    /// The staged tree.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// The fingerprints file (absent when the job had none).
    pub fn fingerprints_path(&self) -> PathBuf {
        self.dir.join(FINGERPRINTS)
    }

    /// The digest of what is on disk now; equal to `manifest.digest` unless the checkpoint
    /// was changed behind cofferdam's back.
    pub fn current_digest(&self) -> Result<String, CheckpointError> {
        digest(&self.dir).map(|(d, _)| d)
    }
}

/// Check a `--name`: 1 to [`NAME_MAX`] ASCII letters, digits, `.`, `_` or `-`, starting with
/// a letter or digit, and not looking like an id.
pub fn check_name(name: &str) -> Result<(), CheckpointError> {
    let bad = |why: &str| {
        Err(CheckpointError::BadName(format!(
            "--name {name:?}: {why}; use 1 to {NAME_MAX} letters, digits, `.`, `_` or `-`, \
             starting with a letter or digit, e.g. `before-tests`"
        )))
    };
    if name.is_empty() || name.len() > NAME_MAX {
        return bad("wrong length");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return bad("it must start with a letter or digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return bad("it holds a character that is not allowed");
    }
    if name.starts_with(ID_PREFIX) {
        return bad("it starts with `ckpt-`, which is reserved for ids");
    }
    Ok(())
}

/// Whether `address` picks the checkpoint `m`: its whole id, a prefix of it (with or
/// without `ckpt-`, at least 4 characters of the uuid), or its name.
pub fn matches(m: &Manifest, address: &str) -> bool {
    if m.name.as_deref() == Some(address) {
        return true;
    }
    let rest = address.strip_prefix(ID_PREFIX).unwrap_or(address);
    let rest = rest.to_ascii_lowercase();
    rest.len() >= 4
        && m.id
            .strip_prefix(ID_PREFIX)
            .is_some_and(|u| u.starts_with(&rest))
}

/// The checkpoints of `job`, oldest first. A directory whose manifest cannot be read is
/// skipped (a half-made one is still under its `.new-` name and never listed).
pub fn list(job: &Job) -> Result<Vec<Checkpoint>, CheckpointError> {
    let root = job.dir().join(DIR);
    let entries = match fs::read_dir(&root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.map_err(io_err("list", &root))?,
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err("list", &root))?;
        let name = entry.file_name();
        if !name.as_bytes().starts_with(ID_PREFIX.as_bytes()) {
            continue;
        }
        if let Ok(c) = open(&entry.path()) {
            out.push(c);
        }
    }
    out.sort_by(|a, b| a.manifest.id.cmp(&b.manifest.id));
    Ok(out)
}

/// How many checkpoint directories `job` has, readable or not (half-made ones excluded).
pub fn count(job: &Job) -> io::Result<usize> {
    match fs::read_dir(job.dir().join(DIR)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
        Ok(rd) => {
            let mut n = 0;
            for entry in rd {
                if entry?
                    .file_name()
                    .as_bytes()
                    .starts_with(ID_PREFIX.as_bytes())
                {
                    n += 1;
                }
            }
            Ok(n)
        }
    }
}

/// Open the checkpoint in `dir`.
pub fn open(dir: &Path) -> Result<Checkpoint, CheckpointError> {
    let path = dir.join(MANIFEST);
    let bytes = fs::read(&path).map_err(io_err("read", &path))?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|source| CheckpointError::Corrupt {
            path: path.clone(),
            source,
        })?;
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        manifest,
    })
}

/// Make a checkpoint of `job`'s stage. The caller holds the job lock and has checked that
/// the job is stopped (`staged`).
pub fn create(
    job: &Job,
    run_id: &str,
    name: Option<&str>,
    now_unix_ms: u64,
) -> Result<Checkpoint, CheckpointError> {
    if let Some(n) = name {
        check_name(n)?;
        if let Some(c) = list(job)?
            .into_iter()
            .find(|c| c.manifest.name.as_deref() == Some(n))
        {
            return Err(CheckpointError::NameTaken {
                job: job.id().to_owned(),
                name: n.to_owned(),
                id: c.manifest.id,
            });
        }
    }
    let upper = job.upper();
    if !fs::symlink_metadata(&upper).is_ok_and(|m| m.is_dir()) {
        return Err(CheckpointError::NoStage {
            job: job.id().to_owned(),
        });
    }
    let root = job.dir().join(DIR);
    make_dir(&root)?;
    let id = format!("{ID_PREFIX}{}", uuid::Uuid::now_v7().hyphenated());
    let tmp = root.join(format!(".new-{id}"));
    let made = fill(job, &upper, &tmp, &id, run_id, name, now_unix_ms).and_then(|manifest| {
        let dir = root.join(&id);
        fs::rename(&tmp, &dir).map_err(io_err("rename", &tmp))?;
        Ok(Checkpoint { dir, manifest })
    });
    if made.is_err() {
        let _ = remove_tree(&tmp);
    }
    made
}

fn fill(
    job: &Job,
    upper: &Path,
    tmp: &Path,
    id: &str,
    run_id: &str,
    name: Option<&str>,
    now_unix_ms: u64,
) -> Result<Manifest, CheckpointError> {
    make_dir(tmp)?;
    let mut counts = copy_tree(upper, &tmp.join("upper"))?;
    let fp = job.fingerprints_path();
    match fs::read(&fp) {
        Ok(bytes) => write_atomic_with(
            &tmp.join(FINGERPRINTS),
            &bytes,
            FILE_MODE,
            Durability::Volatile,
        )
        .map_err(io_err("write", &tmp.join(FINGERPRINTS)))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("read", &fp)(e)),
    }
    let (digest, read) = digest(tmp)?;
    counts.entries = read.entries;
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        id: id.to_owned(),
        name: name.map(str::to_owned),
        job_id: job.id().to_owned(),
        run_id: run_id.to_owned(),
        created_at_unix_ms: now_unix_ms,
        counts,
        digest,
    };
    let path = tmp.join(MANIFEST);
    let mut bytes =
        serde_json::to_vec_pretty(&manifest).map_err(|source| CheckpointError::Corrupt {
            path: path.clone(),
            source,
        })?;
    bytes.push(b'\n');
    write_atomic_with(&path, &bytes, FILE_MODE, Durability::Prompt)
        .map_err(io_err("write", &path))?;
    Ok(manifest)
}

/// Recreate the checkpoint's staged tree at `to`, which must not exist yet (a fork's
/// stage, [`crate::fork`]): the same copy as [`create`] makes, so it costs O(staged
/// entries) and shares data by reflink where the filesystem can. Nothing done to `to`
/// afterwards reaches the checkpoint.
pub fn restore(c: &Checkpoint, to: &Path) -> Result<Counts, CheckpointError> {
    copy_tree(&c.upper(), to)
}

/// Remove a checkpoint. The caller holds the job lock.
pub fn delete(c: &Checkpoint) -> Result<(), CheckpointError> {
    // Renamed first, so a half-removed checkpoint is never listed.
    let parent = c.dir.parent().unwrap_or(&c.dir);
    let gone = parent.join(format!(".gone-{}", c.manifest.id));
    fs::rename(&c.dir, &gone).map_err(io_err("rename", &c.dir))?;
    remove_tree(&gone)
}

fn make_dir(path: &Path) -> Result<(), CheckpointError> {
    match DirBuilder::new().mode(DIR_MODE).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("create", path)(e)),
    }
    let meta = fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
    if !meta.is_dir() {
        return Err(io_err("use", path)(io::Error::from(
            io::ErrorKind::NotADirectory,
        )));
    }
    Ok(())
}

/// Copy the stage `from` to the new directory `to` (see the module docs).
fn copy_tree(from: &Path, to: &Path) -> Result<Counts, CheckpointError> {
    let mut counts = Counts::default();
    // Directory modes are set after their content is written (a 0500 directory of the
    // stage must still take entries here), deepest first.
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    for entry in WalkDir::new(from).follow_links(false).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(from).to_path_buf();
            io_err("read", &path)(io::Error::other(e.to_string()))
        })?;
        let src = entry.path();
        let rel = src.strip_prefix(from).unwrap_or(src);
        let dst = to.join(rel);
        let meta = entry
            .path()
            .symlink_metadata()
            .map_err(io_err("inspect", src))?;
        let ft = meta.file_type();
        let mode = meta.mode() & 0o7777;
        if ft.is_dir() {
            DirBuilder::new()
                .mode(DIR_MODE)
                .create(&dst)
                .map_err(io_err("create", &dst))?;
            copy_xattrs(src, &dst)?;
            if rel.as_os_str().is_empty() {
                dir_modes.push((dst, DIR_MODE));
                continue;
            }
            counts.directories += 1;
            if crate::seal::is_opaque(src) {
                counts.opaque_directories += 1;
            }
            dir_modes.push((dst, mode));
        } else if ft.is_file() {
            let whiteout = crate::copystage::is_xattr_whiteout(src, &meta);
            let reflinked = copy_file(src, &dst, mode)?;
            copy_xattrs(src, &dst)?;
            if whiteout {
                counts.whiteouts += 1;
            } else {
                counts.files += 1;
                counts.bytes += meta.len();
                if reflinked {
                    counts.reflinked_files += 1;
                } else {
                    counts.copied_files += 1;
                }
            }
        } else if ft.is_symlink() {
            let target = fs::read_link(src).map_err(io_err("read", src))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(io_err("create", &dst))?;
            counts.symlinks += 1;
        } else if ft.is_char_device() && meta.rdev() == 0 {
            // An overlay whiteout. Unprivileged users may make a 0:0 device (Linux 5.8+).
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &dst,
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(mode),
                0,
            )
            .map_err(errno("create", &dst))?;
            counts.whiteouts += 1;
        } else if ft.is_fifo() {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &dst,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(mode),
                0,
            )
            .map_err(errno("create", &dst))?;
            counts.fifos += 1;
        } else {
            let what = if ft.is_socket() {
                "socket"
            } else if ft.is_block_device() {
                "block device"
            } else {
                "device node"
            };
            return Err(CheckpointError::Unsupported {
                path: rel.to_path_buf(),
                what,
            });
        }
    }
    for (dir, mode) in dir_modes.into_iter().rev() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .map_err(io_err("chmod", &dir))?;
    }
    Ok(counts)
}

/// Copy one regular file's data and mode: a reflink when the filesystem shares extents
/// (`true`), else a copy.
fn copy_file(src: &Path, dst: &Path, mode: u32) -> Result<bool, CheckpointError> {
    let from = OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(src)
        .map_err(io_err("open", src))?;
    let to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(dst)
        .map_err(io_err("create", dst))?;
    let reflinked = crate::sparse::clone_or_copy(&from, &to).map_err(io_err("copy", src))?;
    to.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("chmod", dst))?;
    Ok(reflinked)
}

/// An extended attribute: its name and value.
type Xattr = (Vec<u8>, Vec<u8>);

/// The overlay xattrs of `path` (not followed), names sorted, with their values.
fn overlay_xattrs(path: &Path) -> Result<Vec<Xattr>, CheckpointError> {
    let mut names = match crate::xattrs::overlay_names(path) {
        Ok(names) => names,
        Err(rustix::io::Errno::PERM) => Vec::new(),
        Err(e) => return Err(errno("list xattrs of", path)(e)),
    };
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let os = std::ffi::OsStr::from_bytes(&name);
        let mut value = vec![0u8; 256];
        let len = loop {
            match rustix::fs::lgetxattr(path, os, &mut value[..]) {
                Ok(len) => break len,
                Err(rustix::io::Errno::RANGE) => {
                    let want =
                        rustix::fs::lgetxattr_query(path, os).map_err(errno("read", path))?;
                    value.resize(want.max(value.len() * 2), 0);
                }
                Err(e) => return Err(errno("read xattrs of", path)(e)),
            }
        };
        value.truncate(len);
        out.push((name, value));
    }
    Ok(out)
}

fn copy_xattrs(src: &Path, dst: &Path) -> Result<(), CheckpointError> {
    for (name, value) in overlay_xattrs(src)? {
        rustix::fs::lsetxattr(
            dst,
            std::ffi::OsStr::from_bytes(&name),
            &value,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(errno("set xattrs on", dst))?;
    }
    Ok(())
}

/// The digest of the checkpoint in `dir` (its `upper/` and fingerprints) and the entry
/// count it saw.
fn digest(dir: &Path) -> Result<(String, Counts), CheckpointError> {
    let upper = dir.join("upper");
    let mut h = blake3::Hasher::new_derive_key("cofferdam checkpoint digest v1");
    let mut counts = Counts::default();
    let field = |h: &mut blake3::Hasher, bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    for entry in WalkDir::new(&upper).follow_links(false).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(&upper).to_path_buf();
            io_err("read", &path)(io::Error::other(e.to_string()))
        })?;
        let path = entry.path();
        let rel = path.strip_prefix(&upper).unwrap_or(path);
        let meta = path.symlink_metadata().map_err(io_err("inspect", path))?;
        if !rel.as_os_str().is_empty() {
            counts.entries += 1;
        }
        field(&mut h, rel.as_os_str().as_bytes());
        let ft = meta.file_type();
        let mode = meta.mode() & 0o7777;
        if ft.is_dir() {
            let mode = if rel.as_os_str().is_empty() { 0 } else { mode };
            field(&mut h, b"d");
            h.update(&mode.to_le_bytes());
        } else if ft.is_file() {
            field(&mut h, b"f");
            h.update(&mode.to_le_bytes());
            h.update(&meta.len().to_le_bytes());
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(OFlags::NOFOLLOW.bits() as i32)
                .open(path)
                .map_err(io_err("read", path))?;
            let content = crate::sparse::hash_file(&file).map_err(io_err("read", path))?;
            field(&mut h, content.as_bytes());
        } else if ft.is_symlink() {
            field(&mut h, b"l");
            let target = fs::read_link(path).map_err(io_err("read", path))?;
            field(&mut h, target.as_os_str().as_bytes());
        } else {
            field(&mut h, b"n");
            h.update(&mode.to_le_bytes());
            h.update(&(meta.mode() & 0o170000).to_le_bytes());
            h.update(&meta.rdev().to_le_bytes());
        }
        if !ft.is_symlink() {
            for (name, value) in overlay_xattrs(path)? {
                field(&mut h, &name);
                field(&mut h, &value);
            }
        }
    }
    field(&mut h, b"fingerprints");
    match fs::read(dir.join(FINGERPRINTS)) {
        Ok(bytes) => field(&mut h, &bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => field(&mut h, b"none"),
        Err(e) => return Err(io_err("read", &dir.join(FINGERPRINTS))(e)),
    }
    Ok((format!("blake3:{}", h.finalize().to_hex()), counts))
}

/// Remove a checkpoint tree, giving its directories owner rwx first. Absent is fine.
fn remove_tree(path: &Path) -> Result<(), CheckpointError> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    for entry in WalkDir::new(path).follow_links(false) {
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_dir() {
            let _ = fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o700));
        }
    }
    fs::remove_dir_all(path).map_err(io_err("remove", path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn manifest(id: &str, name: Option<&str>) -> Manifest {
        Manifest {
            version: MANIFEST_VERSION,
            id: id.into(),
            name: name.map(Into::into),
            job_id: "run-x".into(),
            run_id: "run-x".into(),
            created_at_unix_ms: 0,
            counts: Counts::default(),
            digest: String::new(),
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("before-tests").is_ok());
        assert!(check_name("v1.2_a").is_ok());
        for bad in ["", "-x", ".x", "a b", "a/b", "ckpt-1", "é", &"a".repeat(65)] {
            let e = check_name(bad).unwrap_err();
            assert!(e.to_string().contains("--name"), "{bad}: {e}");
        }
    }

    #[test]
    fn addresses_match_ids_prefixes_and_names() {
        let m = manifest("ckpt-0199d5c8-6f5e", Some("first"));
        assert!(matches(&m, "ckpt-0199d5c8-6f5e"));
        assert!(matches(&m, "0199"));
        assert!(matches(&m, "ckpt-0199D5"));
        assert!(matches(&m, "first"));
        assert!(!matches(&m, "019"), "too short a prefix");
        assert!(!matches(&m, "0198"));
        assert!(!matches(&m, "second"));
    }

    /// A fixed tree (no xattrs, no holes, no nodes: nothing whose layout depends on the
    /// filesystem or the umask).
    fn fixed_tree(up: &Path) {
        fs::create_dir_all(up.join("a/b")).unwrap();
        fs::create_dir_all(up.join("a.d")).unwrap();
        fs::write(up.join("a/x"), b"one\n").unwrap();
        fs::write(up.join("a/b/y"), b"").unwrap();
        fs::write(up.join("a.txt"), b"hello\n".repeat(1000)).unwrap();
        fs::write(up.join("a.d/z"), b"z").unwrap();
        std::os::unix::fs::symlink("a/x", up.join("l")).unwrap();
        for (p, m) in [
            ("a/x", 0o644),
            ("a/b/y", 0o600),
            ("a.txt", 0o755),
            ("a.d/z", 0o640),
        ] {
            fs::set_permissions(up.join(p), fs::Permissions::from_mode(m)).unwrap();
        }
        for (p, m) in [("a", 0o755), ("a.d", 0o700), ("a/b", 0o500)] {
            fs::set_permissions(up.join(p), fs::Permissions::from_mode(m)).unwrap();
        }
    }

    #[test]
    fn the_digest_of_a_fixed_tree_is_pinned() {
        let t = tempfile::tempdir().unwrap();
        let ck = t.path().join("ck");
        fixed_tree(&ck.join("upper"));
        fs::write(ck.join(FINGERPRINTS), b"{\"version\":1}\n").unwrap();
        let (d, seen) = digest(&ck).unwrap();
        assert_eq!(seen.entries, 8);
        assert_eq!(
            d,
            "blake3:33a946403e13bfe3c30104897533784a1e1504e913624377cab676d6b3d17fa4"
        );
        remove_tree(&ck).unwrap();
    }

    #[test]
    fn the_copy_is_independent_and_the_digest_sees_every_change() {
        let t = tempfile::tempdir().unwrap();
        let from = t.path().join("from");
        fs::create_dir_all(from.join("d/e")).unwrap();
        fs::write(from.join("d/e/f"), b"one").unwrap();
        fs::write(from.join("x"), b"").unwrap();
        fs::set_permissions(from.join("x"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("d/e/f", from.join("l")).unwrap();
        fs::set_permissions(from.join("d"), fs::Permissions::from_mode(0o500)).unwrap();
        let ck = t.path().join("ck");
        fs::create_dir(&ck).unwrap();
        let counts = copy_tree(&from, &ck.join("upper")).unwrap();
        assert_eq!(
            (
                counts.files,
                counts.directories,
                counts.symlinks,
                counts.bytes
            ),
            (2, 2, 1, 3)
        );
        let (d1, seen) = digest(&ck).unwrap();
        assert_eq!(seen.entries, 5);
        // The source changes; the copy does not.
        fs::set_permissions(from.join("d"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(from.join("d/e/f"), b"two").unwrap();
        assert_eq!(fs::read(ck.join("upper/d/e/f")).unwrap(), b"one");
        assert_eq!(digest(&ck).unwrap().0, d1);
        // Every change to the copy moves the digest.
        let up = ck.join("upper");
        fs::set_permissions(up.join("x"), fs::Permissions::from_mode(0o644)).unwrap();
        let d2 = digest(&ck).unwrap().0;
        assert_ne!(d2, d1);
        fs::write(ck.join(FINGERPRINTS), b"{}").unwrap();
        assert_ne!(digest(&ck).unwrap().0, d2);
        remove_tree(&ck).unwrap();
        assert!(!ck.exists());
    }
}
