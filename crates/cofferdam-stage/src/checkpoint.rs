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
//!                                        modes, symlinks, the overlay's xattrs; not what
//!                                        `drop --path` discarded
//!         fingerprints.json              the host fingerprints the conflict check needs
//! ```
//!
//! # Cost and independence
//!
//! Only the stage is walked (the host workdir never is). Directories are made new; every
//! other entry is a hard link to the stage's inode, so a checkpoint costs a directory entry
//! per change, with no data copied and no inode allocated (inode allocation is what a copy
//! of many small files pays on ext4). A checkpoint is still immutable, because nothing
//! changes a stage's entries in place once its run is over:
//! - the seal lends owner read permission during the seal of the run that made the entry,
//!   before any checkpoint of it can exist;
//! - no run mounts a stopped stage as its upper: a fork's overlay shows a checkpoint's
//!   entries as a lower layer ([`restore`]), which the kernel never writes (it copies an
//!   entry up before changing it), and takes them over only after its run ([`crate::fork`]);
//! - apply links a staged file into the host only when its inode is the stage's alone
//!   (link count 1), and removes xattrs only from a file it links; others are copied out;
//! - a path that an apply did link into the host is copied, not linked, into a checkpoint
//!   ([`host_shared`]), since the user may edit the host's file in place;
//! - removal (drop, delete, gc) unlinks, and chmods directories only, which are never shared.
//!
//! Where the filesystem refuses a link (`EXDEV`, `protected_hardlinks`) the entry is copied,
//! a regular file's data shared with `FICLONE` where the filesystem has reflinks. `show`
//! re-reads the digest to prove that nothing changed a checkpoint.
//!
//! One walk ([`walk`]) links or copies the stage and digests the result as it goes, through
//! directory descriptors; `show` re-reads the checkpoint with the same walk, read only.
//!
//! # The digest
//!
//! `blake3:<hex>` over, for each entry of `upper/` in path-byte order: the path bytes, the
//! type, the permission bits, the content hash ([`crate::sparse::hash_file`]) for a file,
//! the target bytes for a symlink, the device number for a node, and the overlay xattrs
//! (name and value, sorted); then the bytes of `fingerprints.json`. Owners and times are not
//! part of it (the seal does not compare them either).

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use walkdir::WalkDir;

use crate::job::{Durability, Job, write_atomic_with};

#[cfg(test)]
mod reference;
mod walk;

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

#[cfg(test)]
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
    /// Files hard-linked to the stage's own inode (none in checkpoints made before links).
    #[serde(default)]
    pub linked_files: u64,
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
    // One walk links (or copies) the stage and digests the result (see `walk`); a path an
    // apply wrote to the host may share its inode with the host's file, so it is copied,
    // and a path `drop --path` discarded is no longer part of the stage's result.
    let ledger = crate::ledger::Ledger::load(&job.ledger_path()).ok();
    let host_shared = host_shared(ledger.as_ref().filter(|l| l.batch.is_none()));
    let linkable = |rel: &[u8]| !host_shared(rel);
    let keep = |rel: &[u8]| !ledger.as_ref().is_some_and(|l| l.is_dropped(rel));
    let (counts, digest) = walk::link(upper, &tmp.join("upper"), true, &linkable, &keep)?;
    let fp = job.fingerprints_path();
    let fingerprints = match fs::read(&fp) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("read", &fp)(e)),
    };
    if let Some(bytes) = &fingerprints {
        let to = tmp.join(FINGERPRINTS);
        write_atomic_with(&to, bytes, FILE_MODE, Durability::Volatile)
            .map_err(io_err("write", &to))?;
    }
    let digest = digest.finish(fingerprints.as_deref());
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

/// Which stage paths may share their inode with a file in the host workdir: those an
/// apply wrote (it links a staged file into place when the inode is the stage's alone,
/// [`crate::apply`]), or all of them while an apply batch is unfinished or the ledger
/// cannot be read (`ledger` is then `None`). Such a path is copied into a checkpoint, as a host edit of the applied
/// file would otherwise reach it.
fn host_shared(ledger: Option<&crate::ledger::Ledger>) -> impl Fn(&[u8]) -> bool + '_ {
    move |rel: &[u8]| {
        let Some(l) = ledger else { return true };
        // The path or a directory above it (an added directory is applied whole).
        let mut end = rel.len();
        loop {
            if rel.get(..end).is_some_and(|p| l.is_applied(p)) {
                return true;
            }
            match rel
                .get(..end)
                .and_then(|p| p.iter().rposition(|&b| b == b'/'))
            {
                Some(slash) => end = slash,
                None => return false,
            }
        }
    }
}

/// The checkpoint's staged tree at `to`, which must not exist yet: a fork's inherited
/// layer ([`crate::fork`]), the lower layer its overlay shows over the host workdir.
/// Directories are new; every other entry is a hard link to the checkpoint's (a copy where
/// the filesystem refuses links; an xattr whiteout becomes a 0:0 device, which the kernel
/// honours in a lower layer), so it costs O(staged entries) without copying data. The
/// overlay never writes a lower layer, and the fork's stage takes the entries over only
/// when its run has ended ([`crate::fork::flatten`]), under the rule that no stage entry is
/// changed in place once its run is over.
pub fn restore(c: &Checkpoint, to: &Path) -> Result<Counts, CheckpointError> {
    walk::layer(&c.upper(), to)
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

/// The digest of the checkpoint in `dir` (its `upper/` and fingerprints) and what it holds.
fn digest(dir: &Path) -> Result<(String, Counts), CheckpointError> {
    let (counts, digest) = walk::digest(&dir.join("upper"))?;
    let fp = dir.join(FINGERPRINTS);
    let fingerprints = match fs::read(&fp) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err("read", &fp)(e)),
    };
    Ok((digest.finish(fingerprints.as_deref()), counts))
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

    fn ino(p: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::symlink_metadata(p).unwrap().ino()
    }

    /// A job of a fresh store in `tmp`, for the workdir `tmp/w`.
    fn new_job(tmp: &Path) -> Job {
        let w = tmp.join("w");
        fs::create_dir(&w).unwrap();
        let store = crate::job::JobStore::open(&tmp.join("s")).unwrap();
        store.create(&w, None).unwrap()
    }

    /// A fork's layer turns a copy-tier stage's xattr whiteout into a 0:0 device, the form
    /// the kernel honours in a lower layer; the checkpoint keeps it as it was.
    #[test]
    fn a_layer_has_kernel_whiteouts() {
        use std::os::unix::fs::FileTypeExt;
        let tmp = tempfile::tempdir().unwrap();
        let job = new_job(tmp.path());
        let gone = job.upper().join("gone");
        fs::write(&gone, "").unwrap();
        rustix::fs::setxattr(
            &gone,
            crate::copystage::WHITEOUT_XATTR,
            b"y",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let c = create(&job, "run-x", None, 1).unwrap();
        assert_eq!(c.manifest.counts.whiteouts, 1);
        assert!(
            fs::symlink_metadata(c.upper().join("gone"))
                .unwrap()
                .is_file()
        );
        let layer = tmp.path().join("layer");
        let counts = restore(&c, &layer).unwrap();
        assert_eq!((counts.whiteouts, counts.files), (1, 0));
        let st = rustix::fs::lstat(layer.join("gone")).unwrap();
        assert!(
            fs::symlink_metadata(layer.join("gone"))
                .unwrap()
                .file_type()
                .is_char_device()
        );
        assert_eq!(st.st_rdev, 0);
    }

    /// What `drop --path` discarded (the ledger's `dropped`) is no part of a checkpoint.
    #[test]
    fn a_checkpoint_leaves_out_what_was_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let job = new_job(tmp.path());
        let up = job.upper();
        fs::write(up.join("kept"), "k").unwrap();
        fs::write(up.join("gone"), "g").unwrap();
        fs::create_dir(up.join("d")).unwrap();
        fs::write(up.join("d/x"), "x").unwrap();
        let mut ledger = crate::ledger::Ledger::default();
        for p in ["gone", "d", "d/x"] {
            ledger
                .dropped
                .insert(crate::ledger::RelPath(p.as_bytes().to_vec()));
        }
        ledger.store(&job.ledger_path()).unwrap();
        let c = create(&job, "run-x", None, 1).unwrap();
        let names: Vec<_> = fs::read_dir(c.upper())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["kept"]);
        assert_eq!(c.manifest.counts.entries, 1);
        let (digest, _) = super::digest(&c.dir).unwrap();
        assert_eq!(digest, c.manifest.digest);
    }

    /// A checkpoint links the stage's entries, but copies a path an apply wrote to the
    /// host (it may share the host file's inode); a fork's layer links the checkpoint's.
    #[test]
    fn a_checkpoint_links_the_stage_but_copies_what_apply_linked() {
        let tmp = tempfile::tempdir().unwrap();
        let job = new_job(tmp.path());
        let up = job.upper();
        fs::write(up.join("a"), "a").unwrap();
        fs::write(up.join("e"), "").unwrap();
        std::os::unix::fs::symlink("a", up.join("l")).unwrap();
        fs::create_dir(up.join("d")).unwrap();
        fs::write(up.join("d/x"), "x").unwrap();
        let mut ledger = crate::ledger::Ledger::default();
        ledger.applied.insert(crate::ledger::RelPath(b"d".to_vec()));
        ledger.store(&job.ledger_path()).unwrap();

        let c = create(&job, "run-x", None, 1).unwrap();
        assert_eq!(
            (
                c.manifest.counts.linked_files,
                c.manifest.counts.copied_files
            ),
            (2, 1)
        );
        assert_eq!(ino(&c.upper().join("a")), ino(&up.join("a")));
        assert_eq!(ino(&c.upper().join("l")), ino(&up.join("l")));
        assert_ne!(ino(&c.upper().join("d/x")), ino(&up.join("d/x")));
        assert_eq!(fs::read_to_string(c.upper().join("d/x")).unwrap(), "x");
        let (digest, _) = super::digest(&c.dir).unwrap();
        assert_eq!(digest, c.manifest.digest);

        let layer = tmp.path().join("layer");
        let counts = restore(&c, &layer).unwrap();
        assert_eq!((counts.linked_files, counts.copied_files), (3, 0));
        assert_eq!((counts.files, counts.symlinks), (3, 1));
        for p in ["a", "e", "l", "d/x"] {
            assert_eq!(ino(&layer.join(p)), ino(&c.upper().join(p)), "{p}");
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
    fn the_walk_copies_and_digests_the_fixed_tree_as_pinned() {
        let t = tempfile::tempdir().unwrap();
        let from = t.path().join("from");
        fixed_tree(&from);
        let ck = t.path().join("ck");
        fs::create_dir(&ck).unwrap();
        let (counts, d) = walk::copy(&from, &ck.join("upper"), true).unwrap();
        assert_eq!(
            (counts.entries, counts.files, counts.directories),
            (8, 4, 3)
        );
        let fp = b"{\"version\":1}\n";
        fs::write(ck.join(FINGERPRINTS), fp).unwrap();
        let pinned = "blake3:33a946403e13bfe3c30104897533784a1e1504e913624377cab676d6b3d17fa4";
        assert_eq!(d.finish(Some(fp)), pinned, "the copy walk's digest");
        assert_eq!(
            digest(&ck).unwrap().0,
            pinned,
            "the read-only walk's digest"
        );
        assert_eq!(
            reference::digest(&ck).unwrap().0,
            pinned,
            "the copy as walkdir reads it"
        );
        remove_tree(&ck).unwrap();
    }

    /// Whether user xattrs can be set here (tmpfs before 6.6 has none).
    fn user_xattrs(dir: &Path) -> bool {
        let p = dir.join(".probe");
        fs::write(&p, b"").unwrap();
        let ok =
            rustix::fs::lsetxattr(&p, "user.probe", b"1", rustix::fs::XattrFlags::empty()).is_ok();
        fs::remove_file(&p).unwrap();
        ok
    }

    /// Everything a stage holds: overlay xattrs, opaque directories, both whiteout forms,
    /// a fifo, a file with holes, a file larger than the buffered copy takes, names that
    /// sort differently as paths than as names, and a chain deeper than the walk keeps
    /// open.
    fn rich_tree(up: &Path, xattrs: bool) {
        use std::os::unix::fs::FileExt;
        let set = |p: &Path, n: &str, v: &[u8]| {
            rustix::fs::lsetxattr(p, n, v, rustix::fs::XattrFlags::empty()).unwrap();
        };
        fs::create_dir_all(up.join("o/p")).unwrap();
        fs::create_dir_all(up.join("o-x")).unwrap();
        fs::write(up.join("o/p/f"), b"in an opaque dir").unwrap();
        fs::write(up.join("o.txt"), b"dot").unwrap();
        fs::write(up.join("o-x/a"), vec![7u8; 3000]).unwrap();
        fs::write(up.join("big"), vec![b'b'; (walk::SMALL as usize) + 4097]).unwrap();
        let sparse = fs::File::create(up.join("sparse")).unwrap();
        sparse.write_all_at(b"head", 0).unwrap();
        sparse.write_all_at(b"tail", 8 << 20).unwrap();
        sparse.set_len(16 << 20).unwrap();
        drop(sparse);
        let hole_first = fs::File::create(up.join("hole-first")).unwrap();
        hole_first.write_all_at(b"late", 1 << 20).unwrap();
        drop(hole_first);
        std::os::unix::fs::symlink("/nowhere/at/all", up.join("dangling")).unwrap();
        for (name, kind, mode) in [
            ("gone", rustix::fs::FileType::CharacterDevice, 0o600),
            ("pipe", rustix::fs::FileType::Fifo, 0o640),
        ] {
            let mode = rustix::fs::Mode::from_raw_mode(mode);
            rustix::fs::mknodat(rustix::fs::CWD, up.join(name), kind, mode, 0).unwrap();
        }
        let mut deep = up.join("deep");
        for i in 0..(walk::OPEN_DEPTH + 6) {
            deep.push(format!("l{i}"));
        }
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("leaf"), b"leaf").unwrap();
        fs::create_dir(up.join("deep/l0/side")).unwrap();
        fs::write(up.join("deep/l0/side/after"), b"after the deep chain").unwrap();
        if xattrs {
            set(&up.join("o"), "user.overlay.opaque", b"y");
            set(&up.join("o/p/f"), "user.overlay.metacopy", b"");
            set(&up.join("o/p/f"), "user.other", b"not copied");
            fs::write(up.join("xgone"), b"").unwrap();
            set(&up.join("xgone"), "user.overlay.whiteout", b"y");
            set(up, "user.overlay.origin", &[1u8; 300]);
        }
        fs::set_permissions(up.join("o/p"), fs::Permissions::from_mode(0o555)).unwrap();
        fs::set_permissions(up.join("big"), fs::Permissions::from_mode(0o751)).unwrap();
    }

    #[test]
    fn the_walk_agrees_with_the_walkdir_implementation() {
        let t = tempfile::tempdir().unwrap();
        let xattrs = user_xattrs(t.path());
        if !xattrs {
            println!(
                "SKIP-HOST part of it: no user xattrs on {}",
                t.path().display()
            );
        }
        let from = t.path().join("from");
        fs::create_dir(&from).unwrap();
        rich_tree(&from, xattrs);
        let (old, new) = (t.path().join("old"), t.path().join("new"));
        fs::create_dir(&old).unwrap();
        fs::create_dir(&new).unwrap();
        let old_counts = reference::copy_tree(&from, &old.join("upper")).unwrap();
        let (new_counts, d) = walk::copy(&from, &new.join("upper"), true).unwrap();
        let (old_digest, seen) = reference::digest(&old).unwrap();
        assert_eq!(
            Counts {
                entries: seen.entries,
                ..old_counts
            },
            new_counts
        );
        assert_eq!(
            d.finish(None),
            old_digest,
            "the copy walk's digest of its copy"
        );
        assert_eq!(
            reference::digest(&new).unwrap().0,
            old_digest,
            "the copies differ"
        );
        assert_eq!(digest(&new).unwrap().0, old_digest, "the read-only walk");
        assert_eq!(digest(&old).unwrap().0, old_digest);
        if xattrs {
            assert_eq!(new_counts.opaque_directories, 1);
            assert_eq!(new_counts.whiteouts, 2);
        }
        // A fork's seed (no hashing) makes the same tree.
        let seed = t.path().join("seed");
        fs::create_dir(&seed).unwrap();
        walk::copy(&new.join("upper"), &seed.join("upper"), false).unwrap();
        assert_eq!(digest(&seed).unwrap().0, old_digest, "the seed differs");
        for d in [&old, &new, &seed] {
            remove_tree(d).unwrap();
        }
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
        let (counts, _) = walk::copy(&from, &ck.join("upper"), false).unwrap();
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
