//! Host-side fingerprints: what each changed path looked like on the host (the overlay's
//! lower, i.e. the user's real workdir) when the stage was sealed (DESIGN.md §5).
//!
//! Owns the [`Fingerprint`] value (`absent` | `file {size, mode, blake3}` | `dir {mode}` |
//! `symlink {target_bytes}` | `other {st_mode, rdev}`, plus the host's ctime), the
//! `fingerprints.json` file ([`Fingerprints`], [`write_fingerprints`],
//! [`read_fingerprints`]) and the two ways of taking a fingerprint: [`fingerprint_of`] for
//! one absolute path, and [`HostRoot::fingerprint`] for a path relative to a target root,
//! resolved beneath it without following any symlink (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`, or component by component with `O_NOFOLLOW` where `openat2` is
//! missing). Taking a fingerprint only `stat`s, reads a link or reads a file's bytes: it
//! never changes the host. It may not decide whether a recorded fingerprint still matches
//! well enough to apply: that is the apply engine's call (compare [`Fingerprint::host`]
//! for equality, and check [`Ctime::is_after_unix_ms`] against the run's start).
//!
//! `fingerprints.json` (version 1), entries sorted by path bytes:
//!
//! ```json
//! { "version": 1, "run_started_at_unix_ms": 1764477000000,
//!   "entries": [
//!     { "path": "b", "path_bytes": [98],
//!       "host": { "type": "file", "size": 2, "mode": 420, "blake3": "<64 hex>" },
//!       "ctime": { "sec": 1764476000, "nsec": 123 } },
//!     { "path": "d", "path_bytes": [100], "host": { "type": "absent" } } ] }
//! ```
//!
//! `mode` is the permission bits including setuid/setgid/sticky (`st_mode & 0o7777`);
//! `other.st_mode` is the whole `st_mode`, file type bits included. `blake3` is the content
//! hash of [`crate::sparse::hash_file`] (plain BLAKE3 for a file without holes; a file with
//! holes is read by its data ranges only, so a huge sparse file is quick). It is omitted
//! when the file could not be read (permission denied); a recheck that cannot read it
//! either then matches on size, mode and ctime alone. `ctime` is omitted for `absent`.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

/// The `version` written to and accepted from `fingerprints.json`.
pub const FINGERPRINTS_VERSION: u32 = 1;

/// Permission bits, setuid/setgid/sticky included.
pub(crate) const PERM_MASK: u32 = 0o7777;

/// A fingerprint could not be taken, written or read.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintError {
    /// A system call on `path` failed.
    #[error("cannot inspect {}: {source}", .path.display())]
    Io {
        /// The path (on the host, or the fingerprints file).
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A directory on the way to `path` is a symlink (or was replaced while it was being
    /// read): nothing beneath the target root is followed through a symlink.
    #[error("{} is reached through a symlink or changed while it was read", .path.display())]
    Unstable {
        /// The path.
        path: PathBuf,
    },
    /// A relative path that is absolute or has `.`/`..` components.
    #[error("{} is not a plain relative path", .path.display())]
    NotRelative {
        /// The path.
        path: PathBuf,
    },
    /// `fingerprints.json` is not valid.
    #[error("{} is not a valid fingerprints file: {source}", .path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// `fingerprints.json` has a version this build does not read.
    #[error("{} has fingerprints version {found}; this cofferdam reads version {FINGERPRINTS_VERSION}", .path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
}

/// What a host path is, without its ctime.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostState {
    /// Nothing at the path.
    Absent,
    /// A regular file.
    File {
        /// Size in bytes.
        size: u64,
        /// Permission bits (`st_mode & 0o7777`).
        mode: u32,
        /// The content hash ([`crate::sparse::hash_file`]), lowercase hex; absent when the
        /// file could not be read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blake3: Option<String>,
    },
    /// A directory (its entries are not part of its fingerprint).
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link.
    Symlink {
        /// The link's target, as bytes.
        target_bytes: Vec<u8>,
    },
    /// A device node, fifo or socket.
    Other {
        /// The whole `st_mode`, file type bits included.
        st_mode: u32,
        /// The device number (0 for fifos and sockets).
        rdev: u64,
    },
}

impl HostState {
    /// The record's type for this state (`None` for absent).
    pub fn entry_type(&self) -> Option<cofferdam_record::bundle::ChangeEntryType> {
        use cofferdam_record::bundle::ChangeEntryType as T;
        match self {
            HostState::Absent => None,
            HostState::File { .. } => Some(T::File),
            HostState::Dir { .. } => Some(T::Directory),
            HostState::Symlink { .. } => Some(T::Symlink),
            HostState::Other { .. } => Some(T::Other),
        }
    }
}

pub use crate::ident::Ctime;

/// One host path's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// What is at the path.
    pub host: HostState,
    /// Its ctime; `None` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctime: Option<Ctime>,
}

impl Fingerprint {
    /// Nothing at the path.
    pub const ABSENT: Fingerprint = Fingerprint {
        host: HostState::Absent,
        ctime: None,
    };
}

/// One entry of `fingerprints.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FingerprintEntry {
    /// Display path relative to the target (as `ChangeEntry.path`).
    pub path: String,
    /// The exact path bytes relative to the target: the entry's identity.
    pub path_bytes: Vec<u8>,
    /// The host side at seal time.
    #[serde(flatten)]
    pub fingerprint: Fingerprint,
}

impl FingerprintEntry {
    /// The relative path, from its bytes.
    pub fn rel_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.path_bytes))
    }
}

/// The content of `fingerprints.json`: one entry per changed path, sorted by path bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprints {
    /// Always [`FINGERPRINTS_VERSION`].
    pub version: u32,
    /// The run's start, Unix milliseconds. [`crate::seal::seal`] does not know it: the
    /// caller sets it before writing the file. A host path whose ctime is later than this
    /// changed during (or after) the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_started_at_unix_ms: Option<u64>,
    /// The entries, sorted by `path_bytes`.
    pub entries: Vec<FingerprintEntry>,
}

impl Default for Fingerprints {
    fn default() -> Self {
        Fingerprints {
            version: FINGERPRINTS_VERSION,
            run_started_at_unix_ms: None,
            entries: Vec::new(),
        }
    }
}

impl Fingerprints {
    /// Fingerprints from entries in any order (they are sorted by path bytes).
    pub fn from_entries(mut entries: Vec<FingerprintEntry>) -> Self {
        entries.sort_by(|a, b| a.path_bytes.cmp(&b.path_bytes));
        Fingerprints {
            entries,
            ..Fingerprints::default()
        }
    }

    /// The entry for `path_bytes` (relative to the target), if recorded.
    pub fn get(&self, path_bytes: &[u8]) -> Option<&FingerprintEntry> {
        self.entries
            .binary_search_by(|e| e.path_bytes.as_slice().cmp(path_bytes))
            .ok()
            .and_then(|i| self.entries.get(i))
    }
}

/// Write `fingerprints.json` atomically (temp file, fsync, rename, directory fsync), mode
/// 0600.
pub fn write_fingerprints(
    path: &Path,
    fingerprints: &Fingerprints,
) -> Result<(), FingerprintError> {
    write_fingerprints_with(path, fingerprints, crate::job::Durability::Durable)
}

/// [`write_fingerprints`] with the flushes `durability` asks for.
pub fn write_fingerprints_with(
    path: &Path,
    fingerprints: &Fingerprints,
    durability: crate::job::Durability,
) -> Result<(), FingerprintError> {
    let mut bytes = serde_json::to_vec(fingerprints).map_err(|source| FingerprintError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    crate::job::write_atomic_with(path, &bytes, 0o600, durability).map_err(|source| {
        FingerprintError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Read `fingerprints.json`; only version [`FINGERPRINTS_VERSION`] is accepted.
pub fn read_fingerprints(path: &Path) -> Result<Fingerprints, FingerprintError> {
    let bytes = std::fs::read(path).map_err(|source| FingerprintError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut fps: Fingerprints =
        serde_json::from_slice(&bytes).map_err(|source| FingerprintError::Json {
            path: path.to_path_buf(),
            source,
        })?;
    if fps.version != FINGERPRINTS_VERSION {
        return Err(FingerprintError::Version {
            path: path.to_path_buf(),
            found: fps.version,
        });
    }
    fps.entries.sort_by(|a, b| a.path_bytes.cmp(&b.path_bytes));
    Ok(fps)
}

/// The fingerprint of one absolute (or cwd-relative) path as it is now. The path's parent
/// is resolved as usual (symlinks followed); the final component is not followed. A
/// missing path, or one below a non-directory, is [`HostState::Absent`].
pub fn fingerprint_of(path: &Path) -> Result<Fingerprint, FingerprintError> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            match HostRoot::open(parent) {
                Ok(root) => root.fingerprint(Path::new(name)),
                Err(FingerprintError::Io { source, .. }) if is_absent(&source) => {
                    Ok(Fingerprint::ABSENT)
                }
                Err(e) => Err(e),
            }
        }
        // `/`, or a path ending in `..`: a directory we open (following it) and describe.
        _ => {
            let root = HostRoot::open(path)?;
            let meta = File::from(root.fd.try_clone().map_err(|source| FingerprintError::Io {
                path: path.to_path_buf(),
                source,
            })?)
            .metadata()
            .map_err(|source| FingerprintError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            Ok(Fingerprint {
                host: HostState::Dir {
                    mode: meta.mode() & PERM_MASK,
                },
                ctime: Some(ctime_of(&meta)),
            })
        }
    }
}

/// A target root (the host workdir) that paths are resolved beneath, never through a
/// symlink and never outside it.
#[derive(Debug)]
pub struct HostRoot {
    fd: OwnedFd,
    path: PathBuf,
}

impl HostRoot {
    /// Open the root directory (the path itself is resolved as usual).
    pub fn open(path: &Path) -> Result<HostRoot, FingerprintError> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FingerprintError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })?;
        Ok(HostRoot {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The root's path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fingerprint of `rel` (a plain relative path) beneath the root, as it is now.
    /// Absent when it (or a parent) does not exist or a parent is not a directory; an
    /// [`FingerprintError::Unstable`] error when a parent is a symlink.
    pub fn fingerprint(&self, rel: &Path) -> Result<Fingerprint, FingerprintError> {
        check_relative(rel)?;
        let full = self.path.join(rel);
        let io_err = |source: io::Error| FingerprintError::Io {
            path: full.clone(),
            source,
        };
        let fd = match self.open_beneath(rel, OFlags::PATH) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR) => return Ok(Fingerprint::ABSENT),
            Err(Errno::LOOP | Errno::XDEV) => {
                return Err(FingerprintError::Unstable { path: full });
            }
            Err(e) => return Err(io_err(e.into())),
        };
        let file = File::from(fd);
        let meta = file.metadata().map_err(io_err)?;
        let ft = meta.file_type();
        let host = if ft.is_file() {
            return self.file_fingerprint(rel, &full, &meta);
        } else if ft.is_dir() {
            HostState::Dir {
                mode: meta.mode() & PERM_MASK,
            }
        } else if ft.is_symlink() {
            let target =
                rustix::fs::readlinkat(&file, c"", Vec::new()).map_err(|e| io_err(e.into()))?;
            HostState::Symlink {
                target_bytes: target.into_bytes(),
            }
        } else {
            HostState::Other {
                st_mode: meta.mode(),
                rdev: meta.rdev(),
            }
        };
        Ok(Fingerprint {
            host,
            ctime: Some(ctime_of(&meta)),
        })
    }

    /// A regular file: reopen it for reading (still beneath, still no symlinks, never
    /// blocking on a fifo swapped in meanwhile) and hash it.
    fn file_fingerprint(
        &self,
        rel: &Path,
        full: &Path,
        path_meta: &std::fs::Metadata,
    ) -> Result<Fingerprint, FingerprintError> {
        let unstable = || FingerprintError::Unstable {
            path: full.to_path_buf(),
        };
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let file = match self.open_beneath(rel, flags) {
            Ok(fd) => File::from(fd),
            Err(Errno::ACCESS | Errno::PERM) => {
                // Unreadable: size, mode and ctime only.
                return Ok(Fingerprint {
                    host: HostState::File {
                        size: path_meta.size(),
                        mode: path_meta.mode() & PERM_MASK,
                        blake3: None,
                    },
                    ctime: Some(ctime_of(path_meta)),
                });
            }
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV | Errno::NXIO) => {
                return Err(unstable());
            }
            Err(e) => {
                return Err(FingerprintError::Io {
                    path: full.to_path_buf(),
                    source: e.into(),
                });
            }
        };
        let io_err = |source: io::Error| FingerprintError::Io {
            path: full.to_path_buf(),
            source,
        };
        let meta = file.metadata().map_err(io_err)?;
        if !meta.file_type().is_file()
            || (meta.dev(), meta.ino()) != (path_meta.dev(), path_meta.ino())
        {
            return Err(unstable());
        }
        let hash = crate::sparse::hash_file(&file).map_err(io_err)?;
        Ok(Fingerprint {
            host: HostState::File {
                size: meta.size(),
                mode: meta.mode() & PERM_MASK,
                blake3: Some(hash),
            },
            ctime: Some(ctime_of(&meta)),
        })
    }

    /// `openat2(root, rel, flags | O_NOFOLLOW | O_CLOEXEC, RESOLVE_BENEATH |
    /// RESOLVE_NO_SYMLINKS)`, or the same component by component where `openat2` is
    /// missing: the apply engine's resolution (`fsops`), so the conflict check and
    /// the writes can never resolve a path differently.
    fn open_beneath(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        crate::fsops::open_beneath(self.fd.as_fd(), &rel_bytes(rel)?, flags)
    }

    #[cfg(test)]
    fn open_by_components(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        crate::fsops::open_by_components(self.fd.as_fd(), &rel_bytes(rel)?, flags)
    }
}

/// `rel` as the `a/b/c` bytes the resolver takes: plain components only, never empty.
fn rel_bytes(rel: &Path) -> Result<Vec<u8>, Errno> {
    if rel == Path::new(".") {
        return Ok(b".".to_vec()); // the root itself (`fsops::open_beneath`)
    }
    let mut bytes = Vec::new();
    for part in rel.components() {
        let Component::Normal(name) = part else {
            return Err(Errno::INVAL);
        };
        if !bytes.is_empty() {
            bytes.push(b'/');
        }
        bytes.extend_from_slice(name.as_bytes());
    }
    if bytes.is_empty() {
        return Err(Errno::INVAL);
    }
    Ok(bytes)
}

/// Reject absolute paths and `.`/`..` components.
fn check_relative(rel: &Path) -> Result<(), FingerprintError> {
    // `.` is the root itself (the change path of the workdir's own mode).
    let plain = rel == Path::new(".")
        || (!rel.as_os_str().is_empty()
            && rel.components().all(|c| matches!(c, Component::Normal(_))));
    if plain {
        Ok(())
    } else {
        Err(FingerprintError::NotRelative {
            path: rel.to_path_buf(),
        })
    }
}

/// `ENOENT` or `ENOTDIR`: nothing there.
pub(crate) fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// The ctime of `meta`.
pub(crate) fn ctime_of(meta: &std::fs::Metadata) -> Ctime {
    Ctime {
        sec: meta.ctime(),
        nsec: u32::try_from(meta.ctime_nsec()).unwrap_or(0),
    }
}

/// Whether `ft` is a device node, fifo or socket.
pub(crate) fn is_other(ft: &std::fs::FileType) -> bool {
    ft.is_block_device() || ft.is_char_device() || ft.is_fifo() || ft.is_socket()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctime_against_run_start() {
        let c = Ctime {
            sec: 10,
            nsec: 500_000_000,
        };
        assert!(c.is_after_unix_ms(10_499));
        assert!(!c.is_after_unix_ms(10_500));
        assert!(!c.is_after_unix_ms(11_000));
    }

    #[test]
    fn entry_json_shape() {
        let e = FingerprintEntry {
            path: "b".into(),
            path_bytes: b"b".to_vec(),
            fingerprint: Fingerprint {
                host: HostState::File {
                    size: 2,
                    mode: 0o644,
                    blake3: Some("00".into()),
                },
                ctime: Some(Ctime { sec: 1, nsec: 2 }),
            },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"path": "b", "path_bytes": [98],
                "host": {"type": "file", "size": 2, "mode": 420, "blake3": "00"},
                "ctime": {"sec": 1, "nsec": 2}})
        );
        let back: FingerprintEntry = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
        let absent = serde_json::to_value(FingerprintEntry {
            path: "d".into(),
            path_bytes: b"d".to_vec(),
            fingerprint: Fingerprint::ABSENT,
        })
        .unwrap();
        assert_eq!(
            absent,
            serde_json::json!({"path": "d", "path_bytes": [100], "host": {"type": "absent"}})
        );
    }

    #[test]
    fn relative_paths_only() {
        for bad in ["", "/a", "a/../b", "./a", ".."] {
            assert!(check_relative(Path::new(bad)).is_err(), "{bad}");
        }
        assert!(check_relative(Path::new("a/b")).is_ok());
    }

    /// The fallback used where `openat2` is missing resolves the same way: beneath the
    /// root, never through a symlinked directory, a final symlink itself (not its target).
    #[test]
    fn component_walk_fallback() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        std::fs::create_dir_all(base.join("root/d/e")).unwrap();
        std::fs::write(base.join("root/d/e/f"), b"x").unwrap();
        std::fs::create_dir(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/s"), b"secret").unwrap();
        std::os::unix::fs::symlink(base.join("outside"), base.join("root/esc")).unwrap();
        let root = HostRoot::open(&base.join("root")).unwrap();
        let stat = |fd: OwnedFd| File::from(fd).metadata().unwrap();

        let f = root
            .open_by_components(Path::new("d/e/f"), OFlags::PATH | OFlags::NOFOLLOW)
            .unwrap();
        assert!(stat(f).is_file());
        let link = root
            .open_by_components(Path::new("esc"), OFlags::PATH | OFlags::NOFOLLOW)
            .unwrap();
        assert!(stat(link).file_type().is_symlink());
        assert_eq!(
            root.open_by_components(Path::new("esc/s"), OFlags::PATH | OFlags::NOFOLLOW)
                .map(drop),
            Err(Errno::NOTDIR)
        );
        assert_eq!(
            root.open_by_components(Path::new("d/missing"), OFlags::PATH)
                .map(drop),
            Err(Errno::NOENT)
        );
        assert_eq!(
            root.open_by_components(Path::new("../outside/s"), OFlags::PATH)
                .map(drop),
            Err(Errno::INVAL)
        );
    }

    #[test]
    fn lookup_sorted() {
        let mk = |p: &[u8]| FingerprintEntry {
            path: String::from_utf8_lossy(p).into_owned(),
            path_bytes: p.to_vec(),
            fingerprint: Fingerprint::ABSENT,
        };
        let f = Fingerprints::from_entries(vec![mk(b"z"), mk(b"a/b"), mk(b"a.txt")]);
        let order: Vec<&[u8]> = f.entries.iter().map(|e| e.path_bytes.as_slice()).collect();
        assert_eq!(order, vec![&b"a.txt"[..], b"a/b", b"z"]);
        assert!(f.get(b"a/b").is_some());
        assert!(f.get(b"a").is_none());
    }
}
