//! The seal scan: classify what a run left in its stage against the host (DESIGN.md §5).
//!
//! Owns [`seal`], which walks only the overlay's upper directory and, for each entry there,
//! looks at (never walks) its counterpart in the lower (the host workdir), so its cost
//! follows the number of entries the run touched, not the size of the workdir. It also
//! owns the display form of change paths ([`display_path`]). It may not change either
//! tree, but for one thing: a staged directory or file the command made unreadable to its
//! owner (`chmod 0`) is lent owner read (and search) permission (not a file with other
//! names, which may be a checkpoint's and is never changed), so that the seal, review,
//! diff, apply and drop can read the stage as the job's own user; the change records the
//! command's mode, and apply writes that. It reads the upper, `stat`s / reads links /
//! reads files of the lower beneath the lower's root without following symlinks ([`HostRoot`]), and returns values.
//!
//! Classification of an upper entry (paths are compared as bytes throughout):
//!
//! | upper entry | host counterpart | change |
//! |---|---|---|
//! | whiteout: char device 0:0, or an empty file with `user.overlay.whiteout` (the copy stage's, [`crate::copystage`]) | exists | `deleted` (old type from the host) |
//! | whiteout | absent | none (a warning: it hides nothing) |
//! | anything else | absent | `added`; below an added directory everything is `added` |
//! | directory with `user.overlay.opaque=y` (or `trusted.`) | directory | `opaque`; every entry below it is `added` |
//! | any | a different type | `type_changed`; below a directory that replaced a non-directory everything is `added` |
//! | file | file | `modified` when size, content ([`crate::sparse::hash_file`]) or permission bits differ, else none |
//! | directory | directory | `modified` when the permission bits differ, else none (its entries are still scanned) |
//! | symlink | symlink | `modified` when the target bytes differ |
//! | the upper's root | the workdir | `modified` (path `.`) when the permission bits differ |
//! | device/fifo/socket | same kind | `modified` when mode or device number differ |
//!
//! Owner, timestamps and extended attributes are not compared: a file copied up and left
//! as it was (opened for writing, touched, chmod'ed to the same mode) is no change. Inside
//! an opaque directory or an added one, whiteouts hide nothing and are skipped.
//!
//! For each change the host side is fingerprinted ([`crate::fingerprint`]): entries below
//! an opaque directory are reported `added` but their fingerprint is the host path's real
//! state (it still exists on the host, hidden), so applying over a host file edited
//! meanwhile is caught.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use cofferdam_record::bundle::{ChangeEntry, ChangeEntryType, ChangeKind};
use rustix::fs::OFlags;
use walkdir::WalkDir;

use crate::fingerprint::{
    Fingerprint, FingerprintEntry, FingerprintError, Fingerprints, HostRoot, HostState, PERM_MASK,
    is_other,
};

/// The extended attributes that mark an opaque directory, in the order they are tried:
/// `user.` for overlays mounted with `userxattr` (cofferdam's), `trusted.` for privileged
/// mounts (readable only with `CAP_SYS_ADMIN`).
pub const OPAQUE_XATTRS: [&str; 2] = ["user.overlay.opaque", "trusted.overlay.opaque"];

/// The change path of the workdir's root itself (a change of its mode).
pub const ROOT_PATH: &str = ".";

/// The seal's findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealResult {
    /// The classified net changes, sorted by path bytes.
    pub changes: Vec<ChangeEntry>,
    /// Number of `deleted` plus `opaque` changes (the bundle's `filesystem.whiteouts`).
    pub whiteouts: usize,
    /// The host side of every change, same order as `changes`.
    pub fingerprints: Fingerprints,
    /// Things the user should know that did not stop the seal (e.g. a file that could not
    /// be read to compare, and is listed as modified to be safe).
    pub warnings: Vec<String>,
}

/// The seal could not finish.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The upper is not a directory.
    #[error("the stage {} is not a directory", .path.display())]
    UpperNotDirectory {
        /// The upper path.
        path: PathBuf,
    },
    /// Reading the upper failed.
    #[error("cannot read {} in the stage: {source}", .path.display())]
    Upper {
        /// The upper path that failed.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Inspecting the host side failed.
    #[error(transparent)]
    Host(#[from] FingerprintError),
}

/// How the entries below a directory are classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ctx {
    /// Everything here is reported `added` (below an added, opaque or retyped directory).
    all_added: bool,
    /// The host counterpart of this directory is a directory, so the host counterparts of
    /// the entries are worth looking up.
    host_dir: bool,
}

impl Ctx {
    const NORMAL: Ctx = Ctx {
        all_added: false,
        host_dir: true,
    };
    const NEW: Ctx = Ctx {
        all_added: true,
        host_dir: false,
    };
}

/// An upper entry.
#[derive(Debug)]
enum Upper {
    Whiteout,
    Dir { mode: u32 },
    File { size: u64, mode: u32 },
    Symlink { target: Vec<u8> },
    Other { st_mode: u32, rdev: u64 },
}

impl Upper {
    fn entry_type(&self) -> Option<ChangeEntryType> {
        match self {
            Upper::Whiteout => None,
            Upper::Dir { .. } => Some(ChangeEntryType::Directory),
            Upper::File { .. } => Some(ChangeEntryType::File),
            Upper::Symlink { .. } => Some(ChangeEntryType::Symlink),
            Upper::Other { .. } => Some(ChangeEntryType::Other),
        }
    }

    fn size(&self) -> Option<u64> {
        match self {
            Upper::File { size, .. } => Some(*size),
            Upper::Symlink { target } => u64::try_from(target.len()).ok(),
            _ => None,
        }
    }

    fn mode(&self) -> Option<u32> {
        match self {
            Upper::Dir { mode } | Upper::File { mode, .. } => Some(*mode),
            Upper::Other { st_mode, .. } => Some(st_mode & PERM_MASK),
            Upper::Whiteout | Upper::Symlink { .. } => None,
        }
    }
}

/// Scan `upper` against `lower` and classify every net change (see the module docs).
pub fn seal(upper: &Path, lower: &Path) -> Result<SealResult, SealError> {
    seal_with(upper, lower, &mut crate::progress::Silent)
}

/// [`seal`], telling `progress` of every staged entry scanned.
pub fn seal_with(
    upper: &Path,
    lower: &Path,
    progress: &mut dyn crate::progress::Progress,
) -> Result<SealResult, SealError> {
    progress.begin("sealing the stage", None);
    let sealed = seal_scan(upper, lower, progress);
    progress.end();
    sealed
}

fn seal_scan(
    upper: &Path,
    lower: &Path,
    progress: &mut dyn crate::progress::Progress,
) -> Result<SealResult, SealError> {
    let upper_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SealError::Upper { path, source }
    };
    if !fs::metadata(upper).map_err(upper_err(upper))?.is_dir() {
        return Err(SealError::UpperNotDirectory {
            path: upper.to_path_buf(),
        });
    }
    // The root first: its own mode, lent owner read and search like any directory.
    let root_mode = fs::symlink_metadata(upper)
        .map_err(upper_err(upper))?
        .mode()
        & PERM_MASK;
    if root_mode & 0o500 != 0o500 {
        crate::copystage::chmod_nofollow(upper, root_mode | 0o500, true)
            .map_err(upper_err(upper))?;
    }
    let locked = crate::copystage::lend_dirs(upper, 0o500).map_err(upper_err(upper))?;
    let mut scan = Scan {
        host: HostRoot::open(lower)?,
        upper,
        locked,
        found: Vec::new(),
        whiteouts: 0,
        warnings: Vec::new(),
    };
    scan.root(root_mode)?;
    // stack[i]: how the entries of the directory at depth i are classified.
    let mut stack = vec![Ctx::NORMAL];
    for entry in WalkDir::new(upper)
        .follow_links(false)
        .min_depth(1)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(upper).to_path_buf();
            SealError::Upper {
                path,
                source: e.into(),
            }
        })?;
        progress.advance(1);
        stack.truncate(entry.depth());
        let ctx = stack.last().copied().unwrap_or(Ctx::NORMAL);
        if let Some(below) = scan.visit(&entry, ctx)? {
            stack.push(below);
        }
    }
    let Scan {
        mut found,
        whiteouts,
        warnings,
        ..
    } = scan;
    found.sort_by(|a, b| a.1.path_bytes.cmp(&b.1.path_bytes));
    let (changes, entries): (Vec<ChangeEntry>, Vec<FingerprintEntry>) = found.into_iter().unzip();
    Ok(SealResult {
        changes,
        whiteouts,
        fingerprints: Fingerprints {
            entries,
            ..Fingerprints::default()
        },
        warnings,
    })
}

struct Scan<'a> {
    host: HostRoot,
    upper: &'a Path,
    /// Directories [`crate::copystage::lend_dirs`] lent permission to, with the command's modes.
    locked: HashMap<PathBuf, u32>,
    found: Vec<(ChangeEntry, FingerprintEntry)>,
    whiteouts: usize,
    warnings: Vec<String>,
}

impl Scan<'_> {
    /// The workdir itself: only its permission bits can be staged (change path `.`, a
    /// directory `modified`); the overlay's root (or the copy tiers' upper root) holds the
    /// mode the command left.
    fn root(&mut self, mode: u32) -> Result<(), SealError> {
        let fp = self.host.fingerprint(Path::new(ROOT_PATH))?;
        if let HostState::Dir { mode: host_mode } = fp.host
            && host_mode != mode
        {
            self.record(
                Path::new(ROOT_PATH),
                ChangeKind::Modified,
                Some(ChangeEntryType::Directory),
                &Upper::Dir { mode },
                fp,
            );
        }
        Ok(())
    }

    /// Classify one upper entry; for a directory, how its entries are classified.
    fn visit(&mut self, entry: &walkdir::DirEntry, ctx: Ctx) -> Result<Option<Ctx>, SealError> {
        let path = entry.path();
        let upper_err = |source| SealError::Upper {
            path: path.to_path_buf(),
            source,
        };
        let rel = path
            .strip_prefix(self.upper)
            .map_err(|_| upper_err(io::Error::from(io::ErrorKind::InvalidData)))?;
        let meta = entry.metadata().map_err(|e| upper_err(e.into()))?;
        let up = upper_of(path, &meta).map_err(upper_err)?;
        let is_dir = matches!(up, Upper::Dir { .. });
        let up = match (up, self.locked.get(path)) {
            (Upper::Dir { .. }, Some(mode)) => Upper::Dir { mode: *mode },
            (up, _) => up,
        };
        // An inode with other names may be a checkpoint's (a fork's inherited entry): it
        // is never changed; a file its owner cannot read is then listed as unreadable.
        if std::os::unix::fs::MetadataExt::nlink(&meta) <= 1 {
            lend_file(path, &up).map_err(upper_err)?;
        }

        if matches!(up, Upper::Whiteout) && ctx.all_added {
            return Ok(None); // hides nothing: the host's entries here are already hidden
        }
        let fp = if ctx.host_dir {
            self.host.fingerprint(rel)?
        } else {
            Fingerprint::ABSENT
        };
        let host_is_dir = matches!(fp.host, HostState::Dir { .. });

        if ctx.all_added {
            self.record(rel, ChangeKind::Added, None, &up, fp);
            return Ok(is_dir.then_some(Ctx {
                all_added: true,
                host_dir: ctx.host_dir && host_is_dir,
            }));
        }
        let old_type = fp.host.entry_type();
        let (kind, below) = match (&up, &fp.host) {
            (Upper::Whiteout, HostState::Absent) => {
                self.warnings.push(format!(
                    "{}: deleted in the stage but already absent on the host",
                    display_path(rel.as_os_str().as_bytes()).0
                ));
                (None, None)
            }
            (Upper::Whiteout, _) => (Some(ChangeKind::Deleted), None),
            (_, HostState::Absent) => (Some(ChangeKind::Added), Some(Ctx::NEW)),
            (Upper::Dir { mode }, HostState::Dir { mode: host_mode }) => {
                if is_opaque(path) {
                    let inside = Ctx {
                        all_added: true,
                        host_dir: true,
                    };
                    (Some(ChangeKind::Opaque), Some(inside))
                } else if mode != host_mode {
                    (Some(ChangeKind::Modified), Some(Ctx::NORMAL))
                } else {
                    (None, Some(Ctx::NORMAL))
                }
            }
            (Upper::Dir { .. }, _) => (Some(ChangeKind::TypeChanged), Some(Ctx::NEW)),
            (
                Upper::File { size, mode },
                HostState::File {
                    size: host_size,
                    mode: host_mode,
                    blake3,
                },
            ) => {
                let changed = size != host_size
                    || mode != host_mode
                    || !self.same_content(path, rel, blake3.as_deref())?;
                (changed.then_some(ChangeKind::Modified), None)
            }
            (Upper::Symlink { target }, HostState::Symlink { target_bytes }) => (
                (target != target_bytes).then_some(ChangeKind::Modified),
                None,
            ),
            (
                Upper::Other { st_mode, rdev },
                HostState::Other {
                    st_mode: host_st_mode,
                    rdev: host_rdev,
                },
            ) => {
                let kind = if st_mode & FORMAT_MASK != host_st_mode & FORMAT_MASK {
                    Some(ChangeKind::TypeChanged)
                } else if st_mode != host_st_mode || rdev != host_rdev {
                    Some(ChangeKind::Modified)
                } else {
                    None
                };
                (kind, None)
            }
            _ => (Some(ChangeKind::TypeChanged), None),
        };
        if let Some(kind) = kind {
            if matches!(kind, ChangeKind::Deleted | ChangeKind::Opaque) {
                self.whiteouts += 1;
            }
            self.record(rel, kind, old_type, &up, fp);
        }
        Ok(if is_dir {
            Some(below.unwrap_or(Ctx::NORMAL))
        } else {
            None
        })
    }

    /// Whether the upper file has the content the host file's hash says. Unreadable on
    /// either side: `false` (listed as modified, to be safe) with a warning.
    fn same_content(
        &mut self,
        upper_path: &Path,
        rel: &Path,
        host_hash: Option<&str>,
    ) -> Result<bool, SealError> {
        let shown = || display_path(rel.as_os_str().as_bytes()).0;
        let Some(host_hash) = host_hash else {
            self.warnings.push(format!(
                "{}: the host file cannot be read to compare; listed as modified",
                shown()
            ));
            return Ok(false);
        };
        match hash_upper_file(upper_path) {
            Ok(Some(h)) => Ok(h == host_hash),
            Ok(None) => {
                self.warnings.push(format!(
                    "{}: the staged file cannot be read to compare; listed as modified",
                    shown()
                ));
                Ok(false)
            }
            Err(source) => Err(SealError::Upper {
                path: upper_path.to_path_buf(),
                source,
            }),
        }
    }

    fn record(
        &mut self,
        rel: &Path,
        kind: ChangeKind,
        old_type: Option<ChangeEntryType>,
        up: &Upper,
        fingerprint: Fingerprint,
    ) {
        let bytes = rel.as_os_str().as_bytes();
        let (path, lossless) = display_path(bytes);
        let change = ChangeEntry {
            path: path.clone(),
            path_bytes: (!lossless).then(|| bytes.to_vec()),
            kind,
            old_type,
            new_type: up.entry_type(),
            size_bytes: up.size(),
            mode: up.mode(),
        };
        let fp = FingerprintEntry {
            path,
            path_bytes: bytes.to_vec(),
            fingerprint,
        };
        self.found.push((change, fp));
    }
}

/// `S_IFMT`.
const FORMAT_MASK: u32 = 0o170_000;

fn upper_of(path: &Path, meta: &fs::Metadata) -> io::Result<Upper> {
    let ft = meta.file_type();
    let whiteout = (ft.is_char_device() && meta.rdev() == 0)
        || crate::copystage::is_xattr_whiteout(path, meta);
    Ok(if whiteout {
        Upper::Whiteout
    } else if ft.is_dir() {
        Upper::Dir {
            mode: meta.mode() & PERM_MASK,
        }
    } else if ft.is_file() {
        Upper::File {
            size: meta.size(),
            mode: meta.mode() & PERM_MASK,
        }
    } else if ft.is_symlink() {
        Upper::Symlink {
            target: fs::read_link(path)?.into_os_string().into_encoded_bytes(),
        }
    } else if is_other(&ft) {
        Upper::Other {
            st_mode: meta.mode(),
            rdev: meta.rdev(),
        }
    } else {
        return Err(io::Error::from(io::ErrorKind::Unsupported));
    })
}

/// Give the owner read permission on a staged file the command took it from, as
/// [`crate::copystage::lend_dirs`] does for directories (`up` holds the command's mode, taken first).
fn lend_file(path: &Path, up: &Upper) -> io::Result<()> {
    let Upper::File { mode, .. } = up else {
        return Ok(());
    };
    if mode & 0o400 != 0 {
        return Ok(());
    }
    match crate::copystage::chmod_nofollow(path, mode | 0o400, false) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        other => other,
    }
}

/// Whether the upper directory at `path` is marked opaque.
pub(crate) fn is_opaque(path: &Path) -> bool {
    OPAQUE_XATTRS.iter().any(|name| {
        let mut buf = [0u8; 8];
        // ENODATA, ENOTSUP, EPERM (trusted. without privilege), ERANGE: not opaque.
        matches!(rustix::fs::lgetxattr(path, *name, &mut buf[..]), Ok(1) if buf[0] == b'y')
    })
}

/// BLAKE3 of a staged regular file; `None` when permission is denied.
fn hash_upper_file(path: &Path) -> io::Result<Option<String>> {
    let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => return Err(e),
    };
    if !File::metadata(&file)?.file_type().is_file() {
        return Err(io::Error::other("changed while the stage was sealed"));
    }
    crate::sparse::hash_file(&file).map(Some)
}

/// The display form of a relative path: the text itself when it is UTF-8 without control
/// or bidirectional-override characters (`true`: lossless), else an escaped form (`\n`,
/// `\t`, `\r`, `\u{..}` for other such characters, `\xNN` for bytes that are not UTF-8)
/// and `false`: the path's identity is then its bytes (`ChangeEntry.path_bytes`).
pub fn display_path(bytes: &[u8]) -> (String, bool) {
    cofferdam_record::shown::escape_bytes(bytes, cofferdam_record::shown::Keep::LINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chmod_0_stage_seals_with_the_commands_modes() {
        use std::os::unix::fs::PermissionsExt;
        let upper = tempfile::tempdir().unwrap();
        let lower = tempfile::tempdir().unwrap();
        let u = upper.path();
        fs::create_dir_all(u.join("a/b")).unwrap();
        fs::write(u.join("a/b/f"), "x").unwrap();
        let set = |p: &str, m: u32| {
            fs::set_permissions(u.join(p), fs::Permissions::from_mode(m)).unwrap();
        };
        set("a/b/f", 0);
        set("a/b", 0);
        set("a", 0);
        let sealed = seal(u, lower.path()).unwrap();
        let modes: Vec<(&str, Option<u32>)> = sealed
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c.mode))
            .collect();
        assert_eq!(
            modes,
            [("a", Some(0)), ("a/b", Some(0)), ("a/b/f", Some(0))]
        );
        // Lent to the owner for reading, nothing more.
        let mode = |p: &str| fs::metadata(u.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            (mode("a"), mode("a/b"), mode("a/b/f")),
            (0o500, 0o500, 0o400)
        );
        set("a", 0o700);
        set("a/b", 0o700);
    }

    #[test]
    fn display_paths() {
        assert_eq!(display_path(b"src/main.rs"), ("src/main.rs".into(), true));
        assert_eq!(
            display_path("caf\u{e9}".as_bytes()),
            ("caf\u{e9}".into(), true)
        );
        assert_eq!(display_path(b"-rf"), ("-rf".into(), true));
        assert_eq!(display_path(b"a\nb"), ("a\\nb".into(), false));
        assert_eq!(display_path(b"a\x1bb"), ("a\\u{1b}b".into(), false));
        assert_eq!(
            display_path(b"bad\xff\xfe"),
            ("bad\\xff\\xfe".into(), false)
        );
        assert_eq!(
            display_path("x\u{202e}txt.exe".as_bytes()),
            ("x\\u{202e}txt.exe".into(), false)
        );
    }
}
