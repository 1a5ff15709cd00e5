//! The copy stage of the tiers without a mount namespace (scoped and advisory, DESIGN.md
//! §2–3): copy the workdir into the job, snapshot the copy, and after the run turn what the
//! command changed in the copy into an overlay-style upper directory that [`mod@crate::seal`]
//! classifies exactly as it does the sealed tier's stage.
//!
//! Owns [`copy_workdir`] (the copy and its [`Snapshot`]), [`compare`] (the [`Delta`] between
//! the copy and the snapshot, pure over two listings) and [`materialize`] (moving the
//! changed entries into the upper). It may not touch the host workdir beyond reading it.
//!
//! # Cost
//!
//! Unlike the overlay, this is O(tree), said in the docs: the copy reads the whole workdir
//! (`.git` included), the snapshot and the comparison each `lstat` every entry of the copy.
//! Regular files are cloned with `FICLONE` where the filesystem can (btrfs, XFS, bcachefs:
//! no data is copied), else copied by data range, holes kept ([`crate::sparse::copy_file`]).
//!
//! # What is copied
//!
//! Directories, regular files (permission bits and timestamps kept), symlinks (recreated,
//! never followed), and hard links (a second name of an already copied inode becomes a link
//! to the copy). Device nodes, fifos and sockets are skipped with a warning, and so are
//! entries that cannot be read; skipped paths are remembered so that their absence in the
//! copy is not reported as a deletion. Owners are not copied: everything in the copy belongs
//! to the caller.
//!
//! # Why an upper directory
//!
//! Review, diff, apply and drop read the stage as an overlay upper directory plus the change
//! list and fingerprints the seal records. Rather than teach each of them a second stage
//! format, [`materialize`] builds that upper: changed and new entries are *renamed* from the
//! copy into `upper/` (same filesystem, no data copied), parents are created with the copy's
//! modes, and deletions become whiteouts. An unprivileged process cannot create overlayfs's
//! usual whiteout (a character device 0:0), so a deletion is an empty regular file carrying
//! the `user.overlay.whiteout` extended attribute (overlayfs's own xattr-whiteout marker,
//! which the seal recognises), or the 0:0 device when the xattr cannot be set and `mknod`
//! can. The seal then classifies the upper against the host and records fingerprints as for
//! any run. The snapshot decides what is a *candidate*: a regular file counts as touched
//! when its inode, size, mode, mtime or ctime moved (the workload cannot set ctime); the
//! seal then drops candidates whose content equals the host's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

/// The extended attribute that marks an empty regular file of the upper as a whiteout.
pub const WHITEOUT_XATTR: &str = "user.overlay.whiteout";

/// The copy stage failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A filesystem operation failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A deletion could not be recorded in the upper.
    #[error(
        "cannot record the deletion of {} in the stage: the job's filesystem refuses the \
         `user.overlay.whiteout` xattr ({xattr}) and a whiteout device ({mknod}); put the \
         storage root (COFFERDAM_HOME) on a filesystem with user xattrs (ext4, xfs, btrfs, \
         tmpfs on Linux 6.6+)",
        .path.display()
    )]
    Whiteout {
        /// The deleted path.
        path: PathBuf,
        /// Why the xattr failed.
        xattr: String,
        /// Why mknod failed.
        mknod: String,
    },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CopyError + use<> {
    let path = path.to_path_buf();
    move |source| CopyError::Io {
        action,
        path,
        source,
    }
}

/// One entry's state in the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryState {
    /// A directory and its permission bits.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Inode number.
        ino: u64,
        /// Size in bytes.
        size: u64,
        /// Permission bits.
        mode: u32,
        /// mtime, ns.
        mtime: i128,
        /// ctime, ns.
        ctime: i128,
    },
    /// A symlink and its target.
    Symlink {
        /// Inode number.
        ino: u64,
        /// Target bytes.
        target: Vec<u8>,
    },
    /// Anything else (never in a snapshot: the copy skips them; may appear after the run).
    Other,
}

impl EntryState {
    fn of(path: &Path, meta: &fs::Metadata) -> io::Result<Self> {
        let ft = meta.file_type();
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Ok(if ft.is_dir() {
            EntryState::Dir {
                mode: meta.mode() & 0o7777,
            }
        } else if ft.is_file() {
            EntryState::File {
                ino: meta.ino(),
                size: meta.size(),
                mode: meta.mode() & 0o7777,
                mtime: ns(meta.mtime(), meta.mtime_nsec()),
                ctime: ns(meta.ctime(), meta.ctime_nsec()),
            }
        } else if ft.is_symlink() {
            EntryState::Symlink {
                ino: meta.ino(),
                target: fs::read_link(path)?.into_os_string().into_encoded_bytes(),
            }
        } else {
            EntryState::Other
        })
    }

    fn same_kind(&self, other: &EntryState) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// The copy's state right after copying: path (relative to the copy) → state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Every entry of the copy, the root excluded.
    pub entries: BTreeMap<PathBuf, EntryState>,
    /// Workdir paths not copied (special files, unreadable entries), relative.
    pub skipped: BTreeSet<PathBuf>,
}

/// What the copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// The snapshot of the copy.
    pub snapshot: Snapshot,
    /// Regular files cloned with `FICLONE`.
    pub reflinked: u64,
    /// Regular files copied byte by byte.
    pub copied: u64,
    /// Bytes in copied (not cloned) files.
    pub copied_bytes: u64,
    /// Names made as hard links to an already copied inode.
    pub hard_links: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symlinks recreated.
    pub symlinks: u64,
    /// Things skipped, one line each.
    pub warnings: Vec<String>,
}

/// Copy the tree at `src` into `dst` (created, must not exist) and snapshot the copy. See
/// the module docs for what is copied.
pub fn copy_workdir(src: &Path, dst: &Path) -> Result<CopyReport, CopyError> {
    copy_workdir_excluding(src, dst, &BTreeSet::new())
}

/// [`copy_workdir`], leaving out the entries at the relative paths `exclude` (and all
/// below them): the secrets that lie in the workdir (a workdir that is home holds
/// `~/.ssh`). They are remembered as skipped, so their absence is no deletion and nothing
/// the command writes there is staged; they are not warned about (that is their purpose).
pub fn copy_workdir_excluding(
    src: &Path,
    dst: &Path,
    exclude: &BTreeSet<PathBuf>,
) -> Result<CopyReport, CopyError> {
    copy_workdir_with(src, dst, exclude, &mut crate::progress::Silent)
}

/// [`copy_workdir_excluding`], telling `progress` of every entry copied.
pub fn copy_workdir_with(
    src: &Path,
    dst: &Path,
    exclude: &BTreeSet<PathBuf>,
    progress: &mut dyn crate::progress::Progress,
) -> Result<CopyReport, CopyError> {
    progress.begin("copying the workdir", None);
    let report = copy_tree(src, dst, exclude, progress);
    progress.end();
    report
}

fn copy_tree(
    src: &Path,
    dst: &Path,
    exclude: &BTreeSet<PathBuf>,
    progress: &mut dyn crate::progress::Progress,
) -> Result<CopyReport, CopyError> {
    let mut report = CopyReport::default();
    let root_mode = fs::metadata(src).map_err(io_err("read", src))?.mode() & 0o7777;
    DirBuilder::new()
        .mode(0o700)
        .create(dst)
        .map_err(io_err("create", dst))?;
    // (dev, ino) of a multiply linked source file → its first name in the copy.
    let mut linked: HashMap<(u64, u64), PathBuf> = HashMap::new();
    // Directory modes are set last, deepest first, so a read-only directory can be filled.
    let mut dir_modes: Vec<(PathBuf, u32)> = vec![(dst.to_path_buf(), root_mode)];
    let mut excluded = Vec::new();
    let walk = WalkDir::new(src)
        .follow_links(false)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            let rel = e.path().strip_prefix(src).unwrap_or(e.path());
            let keep = !exclude.contains(rel);
            if !keep {
                excluded.push(rel.to_path_buf());
            }
            keep
        });
    for entry in walk {
        progress.advance(1);
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e.path().unwrap_or(src).to_path_buf();
                let rel = path.strip_prefix(src).unwrap_or(&path).to_path_buf();
                report.warnings.push(format!(
                    "{}: not copied into the stage ({e})",
                    rel.display()
                ));
                report.snapshot.skipped.insert(rel);
                continue;
            }
        };
        let rel = entry
            .path()
            .strip_prefix(src)
            .map_err(|_| io_err("copy", entry.path())(io::ErrorKind::InvalidData.into()))?
            .to_path_buf();
        let to = dst.join(&rel);
        let meta = entry
            .metadata()
            .map_err(|e| io_err("read", entry.path())(e.into()))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            DirBuilder::new()
                .mode(0o700)
                .create(&to)
                .map_err(io_err("create", &to))?;
            dir_modes.push((to, meta.mode() & 0o7777));
            report.dirs += 1;
        } else if ft.is_symlink() {
            let target = fs::read_link(entry.path()).map_err(io_err("read", entry.path()))?;
            std::os::unix::fs::symlink(&target, &to).map_err(io_err("create", &to))?;
            report.symlinks += 1;
        } else if ft.is_file() {
            if meta.nlink() > 1
                && let Some(first) = linked.get(&(meta.dev(), meta.ino()))
            {
                fs::hard_link(first, &to).map_err(io_err("link", &to))?;
                report.hard_links += 1;
                continue;
            }
            match copy_file(entry.path(), &to, &meta) {
                Ok(true) => report.reflinked += 1,
                Ok(false) => {
                    report.copied += 1;
                    report.copied_bytes += meta.size();
                }
                Err(CopyError::Io { source, .. })
                    if source.kind() == io::ErrorKind::PermissionDenied =>
                {
                    report.warnings.push(format!(
                        "{}: not copied into the stage (cannot be read: {source})",
                        rel.display()
                    ));
                    report.snapshot.skipped.insert(rel);
                    continue;
                }
                Err(e) => return Err(e),
            }
            if meta.nlink() > 1 {
                linked.insert((meta.dev(), meta.ino()), to);
            }
        } else {
            report.warnings.push(format!(
                "{}: a device, fifo or socket, not copied into the stage",
                rel.display()
            ));
            report.snapshot.skipped.insert(rel);
        }
    }
    report.snapshot.skipped.extend(excluded);
    for (dir, mode) in dir_modes.iter().rev() {
        fs::set_permissions(dir, fs::Permissions::from_mode(*mode))
            .map_err(io_err("chmod", dir))?;
    }
    report.snapshot.entries = list(dst)?;
    Ok(report)
}

/// Copy one regular file: `FICLONE` first, a plain copy when the filesystem cannot clone.
/// Keeps the permission bits and the timestamps. Returns whether it was cloned.
fn copy_file(src: &Path, dst: &Path, meta: &fs::Metadata) -> Result<bool, CopyError> {
    let from = OpenOptions::new()
        .read(true)
        .custom_flags(libc_nofollow())
        .open(src)
        .map_err(io_err("read", src))?;
    let to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dst)
        .map_err(io_err("create", dst))?;
    let cloned = crate::sparse::clone_or_copy(&from, &to).map_err(io_err("copy", src))?;
    set_meta(&to, dst, meta)?;
    Ok(cloned)
}

fn libc_nofollow() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0)
}

fn set_meta(file: &File, path: &Path, meta: &fs::Metadata) -> Result<(), CopyError> {
    file.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(io_err("chmod", path))?;
    let ts = |s: i64, n: i64| rustix::fs::Timespec {
        tv_sec: s,
        tv_nsec: n as _,
    };
    rustix::fs::futimens(
        file,
        &rustix::fs::Timestamps {
            last_access: ts(meta.atime(), meta.atime_nsec()),
            last_modification: ts(meta.mtime(), meta.mtime_nsec()),
        },
    )
    .map_err(|e| io_err("set the times of", path)(e.into()))
}

/// Every entry below `root` (not following symlinks), relative path → state.
pub fn list(root: &Path) -> Result<BTreeMap<PathBuf, EntryState>, CopyError> {
    list_with(root, false)
}

/// Give the owner the permission bits `need` on every directory beneath `root` (nested
/// too) that lacks them — a stage or copy the command `chmod 0`ed — before a walk that must
/// read it as the job's own user. Returns each such directory's own mode, for the records
/// (apply writes that mode, never the inode's). A directory the caller does not own (and
/// cannot change) is left as it is, and the walk reports it.
pub(crate) fn lend_dirs(root: &Path, need: u32) -> io::Result<HashMap<PathBuf, u32>> {
    let mut locked = HashMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let path = entry?.path();
            let meta = fs::symlink_metadata(&path)?;
            if !meta.is_dir() {
                continue;
            }
            let mode = meta.mode() & 0o7777;
            if mode & need != need && chmod_nofollow(&path, mode | need, true).is_ok() {
                locked.insert(path.clone(), mode);
            }
            todo.push(path);
        }
    }
    Ok(locked)
}

/// `chmod` of the entry at `path` itself, never through a symlink: the entry is opened
/// `O_PATH|O_NOFOLLOW`, its type checked on that descriptor (a directory when `dir`, else a
/// regular file), and the mode set through the descriptor's `/proc/self/fd` link, so a
/// workload still running cannot swap the entry for a symlink to a host path in between.
pub(crate) fn chmod_nofollow(path: &Path, mode: u32, dir: bool) -> io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    let want = if dir {
        FileType::Directory
    } else {
        FileType::RegularFile
    };
    if kind != want {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    fs::set_permissions(link, fs::Permissions::from_mode(mode))
}

/// [`list`] of the copy after the run: a directory the command left without owner read,
/// write or search permission (`chmod 0`) is lent it, so it can be listed and its entries
/// moved, and is listed with the mode the command gave it; [`compare`] keeps those modes
/// ([`Delta::locked`]) for [`materialize`] to put back in the upper. The root itself is
/// listed too, under the empty path, with its own mode (lent like the others), so that a
/// `chmod` of the workdir reaches the upper's root. The copy is the run's scratch, consumed
/// by [`materialize`].
pub fn list_after_run(root: &Path) -> Result<BTreeMap<PathBuf, EntryState>, CopyError> {
    list_with(root, true)
}

fn list_with(root: &Path, lend: bool) -> Result<BTreeMap<PathBuf, EntryState>, CopyError> {
    let mut out = BTreeMap::new();
    let locked = if lend {
        let mode = fs::symlink_metadata(root)
            .map_err(io_err("read", root))?
            .mode()
            & 0o7777;
        if mode & 0o700 != 0o700 {
            chmod_nofollow(root, mode | 0o700, true).map_err(io_err("chmod", root))?;
        }
        out.insert(PathBuf::new(), EntryState::Dir { mode });
        lend_dirs(root, 0o700).map_err(io_err("read", root))?
    } else {
        HashMap::new()
    };
    for entry in WalkDir::new(root).follow_links(false).min_depth(1) {
        let entry = entry.map_err(|e| {
            let p = e.path().unwrap_or(root).to_path_buf();
            CopyError::Io {
                action: "read",
                path: p,
                source: e.into(),
            }
        })?;
        let meta = entry
            .metadata()
            .map_err(|e| io_err("read", entry.path())(e.into()))?;
        let state = match locked.get(entry.path()) {
            Some(mode) => EntryState::Dir { mode: *mode },
            None => EntryState::of(entry.path(), &meta).map_err(io_err("read", entry.path()))?,
        };
        let rel = entry
            .path()
            .strip_prefix(root)
            .map_err(|_| io_err("read", entry.path())(io::ErrorKind::InvalidData.into()))?;
        out.insert(rel.to_path_buf(), state);
    }
    Ok(out)
}

/// What the run changed in the copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// Entries that are new, replaced, or touched: moved whole into the upper (a directory
    /// with everything below it).
    pub put: Vec<PathBuf>,
    /// Directories that stayed but whose permission bits changed.
    pub dir_modes: Vec<(PathBuf, u32)>,
    /// Entries of the snapshot that are gone (the topmost of a deleted tree only).
    pub deleted: Vec<PathBuf>,
    /// Directories of the copy whose own mode lacks owner read, write or search, with that
    /// mode ([`list_after_run`] lent them the permission in the copy).
    pub locked: BTreeMap<PathBuf, u32>,
    /// The copy's root's own mode after the run, when the listing holds the root
    /// ([`list_after_run`]): the upper's root gets it, so the seal sees the workdir's mode
    /// as the command left it (changed or not).
    pub root_mode: Option<u32>,
}

impl Delta {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.put.is_empty() && self.dir_modes.is_empty() && self.deleted.is_empty()
    }
}

/// Compare the copy's listing `now` with the snapshot. Pure.
pub fn compare(snapshot: &Snapshot, now: &BTreeMap<PathBuf, EntryState>) -> Delta {
    let mut delta = Delta::default();
    // Directories present in both as directories: the only places a deletion or a change
    // below is looked for (the rest moves whole).
    let mut kept: BTreeSet<&Path> = BTreeSet::new();
    kept.insert(Path::new(""));
    for (rel, state) in now {
        if rel.as_os_str().is_empty() {
            if let EntryState::Dir { mode } = state {
                delta.root_mode = Some(*mode);
            }
            continue;
        }
        if let EntryState::Dir { mode } = state
            && mode & 0o700 != 0o700
        {
            delta.locked.insert(rel.clone(), *mode);
        }
        let parent = rel.parent().unwrap_or(Path::new(""));
        if !kept.contains(parent) {
            continue; // below a new or replaced directory: moved with it
        }
        if snapshot.skipped.contains(rel) {
            continue;
        }
        match (snapshot.entries.get(rel), state) {
            (Some(EntryState::Dir { mode: old }), EntryState::Dir { mode }) => {
                if old != mode {
                    delta.dir_modes.push((rel.clone(), *mode));
                }
                kept.insert(rel);
            }
            (Some(old), new) if old.same_kind(new) && old == new => {}
            _ => delta.put.push(rel.clone()),
        }
    }
    for rel in snapshot.entries.keys() {
        let parent = rel.parent().unwrap_or(Path::new(""));
        if kept.contains(parent) && !now.contains_key(rel) {
            delta.deleted.push(rel.clone());
        }
    }
    delta
}

/// Build the upper directory `upper` (existing, empty) from `delta`: entries are renamed out
/// of `copy` (so the copy is consumed), parents are created with the copy's modes, and
/// deletions become whiteouts. See the module docs.
pub fn materialize(copy: &Path, upper: &Path, delta: &Delta) -> Result<(), CopyError> {
    // Directories made here get their final mode last (deepest first), so a read-only one
    // can still be filled.
    let mut modes: Vec<(PathBuf, u32)> = Vec::new();
    for rel in &delta.put {
        ensure_parents(copy, upper, rel, &delta.locked, &mut modes)?;
        let from = copy.join(rel);
        let to = upper.join(rel);
        // Moving a directory to another parent rewrites its `..`, which needs write
        // permission on it (for anyone but root): a directory the command left read-only
        // is lent the permission and gets its mode back with the others, last.
        let meta = fs::symlink_metadata(&from).map_err(io_err("read", &from))?;
        let now_mode = meta.mode() & 0o7777;
        let mode = delta.locked.get(rel).copied().unwrap_or(now_mode);
        if meta.is_dir() && (mode & 0o300 != 0o300 || mode != now_mode) {
            if now_mode & 0o300 != 0o300 {
                fs::set_permissions(&from, fs::Permissions::from_mode(now_mode | 0o700))
                    .map_err(io_err("chmod", &from))?;
            }
            modes.push((to.clone(), mode));
        }
        // Locked directories inside it, lent permission in the copy: their own modes back.
        if meta.is_dir() {
            for (sub, m) in delta
                .locked
                .range(rel.clone()..)
                .skip_while(|(p, _)| *p == rel)
                .take_while(|(p, _)| p.starts_with(rel))
            {
                modes.push((upper.join(sub), *m));
            }
        }
        fs::rename(&from, &to).map_err(io_err("move into the stage", &from))?;
        strip_overlay_xattrs(&to)?;
    }
    for (rel, mode) in &delta.dir_modes {
        ensure_parents(copy, upper, rel, &delta.locked, &mut modes)?;
        let to = upper.join(rel);
        match DirBuilder::new().mode(0o700).create(&to) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(io_err("create", &to)(e));
            }
            _ => {}
        }
        modes.push((to, *mode));
    }
    for rel in &delta.deleted {
        ensure_parents(copy, upper, rel, &delta.locked, &mut modes)?;
        whiteout(&upper.join(rel))?;
    }
    modes.sort_by(|a, b| b.0.cmp(&a.0));
    // The root last: a mode without owner write must not stop the rest.
    if let Some(mode) = delta.root_mode {
        modes.push((upper.to_path_buf(), mode));
    }
    for (dir, mode) in modes {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .map_err(io_err("chmod", &dir))?;
    }
    Ok(())
}

/// Create the missing parents of `upper/rel` (writable for now), recording for each the
/// mode of its counterpart in the copy, so the seal sees them unchanged.
fn ensure_parents(
    copy: &Path,
    upper: &Path,
    rel: &Path,
    locked: &BTreeMap<PathBuf, u32>,
    modes: &mut Vec<(PathBuf, u32)>,
) -> Result<(), CopyError> {
    let Some(parent) = rel.parent() else {
        return Ok(());
    };
    let mut built = PathBuf::new();
    for c in parent.components() {
        built.push(c);
        let dir = upper.join(&built);
        if fs::symlink_metadata(&dir).is_ok() {
            continue;
        }
        let mode = match locked.get(&built) {
            Some(m) => *m,
            None => fs::symlink_metadata(copy.join(&built))
                .map(|m| m.mode() & 0o7777)
                .unwrap_or(0o755),
        };
        DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io_err("create", &dir))?;
        modes.push((dir, mode));
    }
    Ok(())
}

/// Remove overlayfs's extended attributes from `path` and everything below it: they were
/// set by the command in its copy, and left in the upper they would steer the seal (an
/// empty file carrying `user.overlay.whiteout` would be recorded, and applied, as a
/// deletion). The sealed tier's overlay escapes such names itself; here the only markers
/// in the upper must be [`materialize`]'s own whiteouts, made after this. A permission the
/// command took away (a read-only file or directory, its own) is lent back for the
/// removal; a marker that cannot be removed fails the stage rather than forge it.
fn strip_overlay_xattrs(path: &Path) -> Result<(), CopyError> {
    let meta = fs::symlink_metadata(path).map_err(io_err("read", path))?;
    if meta.file_type().is_symlink() {
        // `user.*` names cannot be set on a symlink, and `trusted.*` ones are not read
        // through one by the seal.
        return Ok(());
    }
    let names = overlay_xattrs(path)?;
    let is_dir = meta.is_dir();
    let mode = meta.mode() & 0o7777;
    let need = if is_dir { 0o700 } else { 0o200 };
    let lend = (is_dir || !names.is_empty()) && mode & need != need;
    if lend {
        fs::set_permissions(path, fs::Permissions::from_mode(mode | need))
            .map_err(io_err("chmod", path))?;
    }
    for name in &names {
        rustix::fs::lremovexattr(path, name.as_slice())
            .map_err(|e| io_err("remove an overlay attribute from", path)(e.into()))?;
    }
    if is_dir {
        for entry in fs::read_dir(path).map_err(io_err("read", path))? {
            strip_overlay_xattrs(&entry.map_err(io_err("read", path))?.path())?;
        }
    }
    if lend {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .map_err(io_err("chmod", path))?;
    }
    Ok(())
}

/// The overlayfs attribute names on `path` (not following a symlink); a filesystem without
/// extended attributes has none to forge.
fn overlay_xattrs(path: &Path) -> Result<Vec<Vec<u8>>, CopyError> {
    crate::xattrs::overlay_names(path).map_err(|e| io_err("list the attributes of", path)(e.into()))
}

/// Create a whiteout at `path`: an empty file with [`WHITEOUT_XATTR`], else a 0:0 device.
fn whiteout(path: &Path) -> Result<(), CopyError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(path)
        .map_err(io_err("create", path))?;
    let xattr = rustix::fs::fsetxattr(&file, WHITEOUT_XATTR, b"y", rustix::fs::XattrFlags::CREATE);
    drop(file);
    let Err(xattr) = xattr else {
        return Ok(());
    };
    fs::remove_file(path).map_err(io_err("remove", path))?;
    let mknod = rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::empty(),
        0,
    );
    match mknod {
        Ok(()) => Ok(()),
        Err(m) => Err(CopyError::Whiteout {
            path: path.to_path_buf(),
            xattr: xattr.to_string(),
            mknod: m.to_string(),
        }),
    }
}

/// Whether `path` (an entry of an upper directory, already `lstat`ed as `meta`) is an
/// xattr whiteout: an empty regular file carrying [`WHITEOUT_XATTR`].
pub fn is_xattr_whiteout(path: &Path, meta: &fs::Metadata) -> bool {
    if !meta.file_type().is_file() || meta.size() != 0 {
        return false;
    }
    let mut buf = [0u8; 8];
    rustix::fs::lgetxattr(path, WHITEOUT_XATTR, &mut buf[..]).is_ok()
}

/// Remove a directory tree made by the run (the copy's leftovers, the HOME stage, the temp
/// directory), making its directories writable first. Absent is fine.
pub fn remove_tree(path: &Path) -> Result<(), CopyError> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    for entry in WalkDir::new(path).follow_links(false).into_iter().flatten() {
        if entry.file_type().is_dir() {
            let _ = fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o700));
        }
    }
    fs::remove_dir_all(path).map_err(io_err("remove", path))
}

/// Display form of a relative path (lossy), for warnings.
pub fn shown(rel: &Path) -> String {
    String::from_utf8_lossy(rel.as_os_str().as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        fs::create_dir_all(p.join("src/deep")).unwrap();
        fs::create_dir_all(p.join(".git/objects")).unwrap();
        fs::write(p.join("src/a.rs"), "fn a() {}\n").unwrap();
        fs::write(p.join("src/deep/b.rs"), "b\n").unwrap();
        fs::write(p.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(p.join("keep"), "same\n").unwrap();
        fs::hard_link(p.join("keep"), p.join("keep-link")).unwrap();
        symlink("src/a.rs", p.join("ln")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p.join("fifo").as_path(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        d
    }

    /// The test tree, a job directory, the copy's path and the copy's report.
    fn copied() -> (tempfile::TempDir, tempfile::TempDir, PathBuf, CopyReport) {
        let src = tree();
        let jobs = tempfile::tempdir().unwrap();
        let dst = jobs.path().join("copy");
        let r = copy_workdir(src.path(), &dst).unwrap();
        (src, jobs, dst, r)
    }

    /// Materialize `delta` into a new upper in `jobs` and seal it against `src`.
    fn seal_delta(src: &Path, jobs: &Path, dst: &Path, delta: &Delta) -> crate::SealResult {
        let upper = jobs.join("upper");
        fs::create_dir(&upper).unwrap();
        materialize(dst, &upper, delta).unwrap();
        crate::seal::seal(&upper, src).unwrap()
    }

    /// `(path, kind)` of each sealed change.
    fn kinds_of(sealed: &crate::SealResult) -> Vec<(String, String)> {
        sealed
            .changes
            .iter()
            .map(|c| (c.path.clone(), format!("{:?}", c.kind)))
            .collect()
    }

    #[test]
    fn overlay_markers_the_command_set_do_not_reach_the_upper() {
        let (src, jobs, dst, r) = copied();
        // An empty file posing as a whiteout (it would be sealed, and applied, as a
        // deletion), read-only so the removal needs a permission lent back; a new opaque
        // directory with a forged whiteout inside.
        let forged = |p: &Path, name: &str| {
            rustix::fs::lsetxattr(p, name, b"y", rustix::fs::XattrFlags::empty()).is_ok()
        };
        fs::write(dst.join("keep"), "").unwrap();
        if !forged(&dst.join("keep"), WHITEOUT_XATTR) {
            cofferdam_testkit::skip_host("no user xattrs on the temp filesystem");
            return;
        }
        fs::set_permissions(dst.join("keep"), fs::Permissions::from_mode(0o444)).unwrap();
        fs::create_dir(dst.join("new")).unwrap();
        fs::write(dst.join("new/ghost"), "").unwrap();
        assert!(forged(&dst.join("new/ghost"), WHITEOUT_XATTR));
        assert!(forged(&dst.join("new"), "user.overlay.opaque"));
        fs::set_permissions(dst.join("new"), fs::Permissions::from_mode(0o555)).unwrap();
        let delta = compare(&r.snapshot, &list(&dst).unwrap());
        let sealed = seal_delta(src.path(), jobs.path(), &dst, &delta);
        let kinds = kinds_of(&sealed);
        let upper = jobs.path().join("upper");
        for p in ["keep", "new", "new/ghost"] {
            assert_eq!(
                overlay_xattrs(&upper.join(p)).unwrap(),
                Vec::<Vec<u8>>::new(),
                "{p}"
            );
        }
        assert_eq!(
            fs::metadata(upper.join("keep")).unwrap().mode() & 0o777,
            0o444,
            "the mode the command left"
        );
        assert_eq!(
            fs::metadata(upper.join("new")).unwrap().mode() & 0o777,
            0o555
        );
        assert!(
            kinds.iter().any(|(p, k)| p == "keep" && k == "Modified"),
            "an emptied file is modified, not deleted: {kinds:?}"
        );
        assert!(
            kinds.iter().any(|(p, k)| p == "new/ghost" && k == "Added"),
            "{kinds:?}"
        );
    }

    #[test]
    fn excluded_entries_are_not_copied_and_not_deleted_or_staged() {
        let src = tree();
        fs::create_dir_all(src.path().join(".ssh")).unwrap();
        fs::write(src.path().join(".ssh/id"), "key").unwrap();
        fs::write(src.path().join(".npmrc"), "token").unwrap();
        let jobs = tempfile::tempdir().unwrap();
        let dst = jobs.path().join("copy");
        let exclude: BTreeSet<PathBuf> = [".ssh", ".npmrc"].map(PathBuf::from).into();
        let r = copy_workdir_excluding(src.path(), &dst, &exclude).unwrap();
        assert!(!dst.join(".ssh").exists() && !dst.join(".npmrc").exists());
        assert!(dst.join("src/a.rs").exists());
        assert!(
            !r.warnings
                .iter()
                .any(|w| w.contains("ssh") || w.contains("npmrc")),
            "{:?}",
            r.warnings
        );
        assert!(r.snapshot.skipped.contains(Path::new(".ssh")));
        // Written there by the command: neither a deletion nor a staged change.
        fs::create_dir(dst.join(".ssh")).unwrap();
        fs::write(dst.join(".ssh/planted"), "x").unwrap();
        fs::write(dst.join(".npmrc"), "x").unwrap();
        let delta = compare(&r.snapshot, &list(&dst).unwrap());
        assert!(delta.is_empty(), "{delta:?}");
    }

    #[test]
    fn the_copy_keeps_git_links_and_symlinks_and_skips_fifos() {
        let (_src, _jobs, dst, r) = copied();
        assert_eq!(
            fs::read_to_string(dst.join(".git/HEAD")).unwrap(),
            "ref: refs/heads/main\n"
        );
        assert_eq!(
            fs::read_link(dst.join("ln")).unwrap(),
            PathBuf::from("src/a.rs")
        );
        let (a, b) = (
            fs::metadata(dst.join("keep")).unwrap(),
            fs::metadata(dst.join("keep-link")).unwrap(),
        );
        assert_eq!(a.ino(), b.ino(), "hard links stay links");
        assert_eq!(r.hard_links, 1);
        assert!(fs::symlink_metadata(dst.join("fifo")).is_err());
        assert!(r.snapshot.skipped.contains(Path::new("fifo")));
        assert!(
            r.warnings.iter().any(|w| w.contains("fifo")),
            "{:?}",
            r.warnings
        );
        assert_eq!(r.reflinked + r.copied, 4);
        // Nothing touched: no change.
        assert!(compare(&r.snapshot, &list(&dst).unwrap()).is_empty());
    }

    #[test]
    fn changes_are_found_and_materialized_as_an_upper() {
        let (src, jobs, dst, r) = copied();
        fs::write(dst.join("src/a.rs"), "fn a() { changed }\n").unwrap();
        fs::write(dst.join("src/new.rs"), "new\n").unwrap();
        fs::remove_dir_all(dst.join("src/deep")).unwrap();
        fs::remove_file(dst.join("ln")).unwrap();
        fs::create_dir(dst.join("ln")).unwrap();
        fs::write(dst.join("ln/inside"), "x").unwrap();
        fs::set_permissions(dst.join(".git"), fs::Permissions::from_mode(0o700)).unwrap();
        let delta = compare(&r.snapshot, &list(&dst).unwrap());
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(delta.put, vec![p("ln"), p("src/a.rs"), p("src/new.rs")]);
        assert_eq!(delta.deleted, vec![p("src/deep")]);
        assert_eq!(delta.dir_modes, vec![(p(".git"), 0o700)]);

        let sealed = seal_delta(src.path(), jobs.path(), &dst, &delta);
        let kinds = kinds_of(&sealed);
        let want = |a: &str, k: &str| (a.to_owned(), k.to_owned());
        assert_eq!(
            kinds,
            vec![
                want(".git", "Modified"),
                want("ln", "TypeChanged"),
                want("ln/inside", "Added"),
                want("src/a.rs", "Modified"),
                want("src/deep", "Deleted"),
                want("src/new.rs", "Added"),
            ]
        );
    }

    #[test]
    fn a_touched_but_identical_file_is_no_change_after_the_seal() {
        let (src, jobs, dst, r) = copied();
        fs::write(dst.join("keep"), "same\n").unwrap();
        let delta = compare(&r.snapshot, &list(&dst).unwrap());
        assert!(delta.put.contains(&PathBuf::from("keep")));
        let sealed = seal_delta(src.path(), jobs.path(), &dst, &delta);
        assert!(sealed.changes.is_empty(), "{:?}", sealed.changes);
    }
}
