//! Whether a path of the job store belongs to the user running cofferdam (DESIGN.md §4).
//!
//! Owns the ownership rules every store path is held to before it is used; [`crate::job`]
//! calls them when it creates or opens the store, `jobs/` and a job. It may not create,
//! change or remove anything.
//!
//! # The rules
//!
//! - The store root, `jobs/`, a job directory (also a `--stage` one) and the records read
//!   from it (`job.json`, `run-bundle.json`, `fingerprints.json`, `apply-ledger.json`,
//!   `trace.jsonl`, `lock`, the provisional bundle, `output/`) are owned by the caller's
//!   effective uid and not writable by group or others, and none of them is a symbolic
//!   link (checked on a descriptor opened with `O_PATH | O_NOFOLLOW`). `upper/` (and a
//!   copy-tier run's `copy/`, `home/`, `tmp/`) is owned by the caller and a real
//!   directory; its mode is not checked: it is the stage's root directory, whose mode the
//!   workload sets (a `chmod` of its workdir), and nobody else can reach it through a job
//!   directory that passed.
//! - Every directory above them (after symlinks are resolved once, by the canonical path)
//!   is owned by root or the caller, and is writable by group or others only with the
//!   sticky bit (as `/tmp` is): whoever can rename entries of a parent could swap the
//!   store for their own between the check and the use. With those parents fixed, nobody
//!   but the caller and root can change what the checked paths name afterwards, so the
//!   store is used by path once checked.
//!
//! A failed rule is a [`Refusal`]: its text says which path, why, and what to do.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, fstat};

/// What a checked path is, for the refusal's wording and its fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The storage root.
    StoreRoot,
    /// `<root>/jobs`.
    JobsDir,
    /// A job directory (or a `--stage` directory).
    JobDir,
    /// A file or directory inside a job directory.
    JobFile,
    /// A directory above one of the others.
    Parent,
}

/// Why a store path is not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// Owned by another uid.
    Owner {
        /// Its owner.
        uid: u32,
        /// The caller.
        me: u32,
    },
    /// Writable by group or others (a parent: without the sticky bit).
    Writable {
        /// Its permission bits.
        mode: u32,
    },
    /// A symbolic link.
    Symlink,
    /// Not the kind of file expected (a directory where a file is, …).
    Kind,
}

/// A store path that may not be used: the path, its role and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The path.
    pub path: PathBuf,
    /// What it is in the store.
    pub role: Role,
    /// The broken rule.
    pub why: Why,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        let what = match self.role {
            Role::StoreRoot => "the job store",
            Role::JobsDir => "the job store's jobs directory",
            Role::JobDir => "the job directory",
            Role::JobFile => "the job record",
            Role::Parent => "a parent directory of the job store",
        };
        let elsewhere = "set COFFERDAM_HOME to a new directory of your own";
        match (&self.why, self.role) {
            (Why::Owner { uid, me }, Role::JobDir | Role::JobFile) => write!(
                f,
                "refusing {what} {p}: it belongs to uid {uid}, not to you (uid {me}), so \
                 another user made it and could have planted its changes; remove it (as \
                 root) and do not use it"
            ),
            (Why::Owner { uid, me }, Role::Parent) => write!(
                f,
                "refusing {what}, {p}: it belongs to uid {uid}, not to you (uid {me}) or \
                 root, so its owner could replace the store; keep the store below \
                 directories only you and root control: {elsewhere}"
            ),
            (Why::Owner { uid, me }, _) => write!(
                f,
                "refusing {what} {p}: it belongs to uid {uid}, not to you (uid {me}), so its \
                 owner could plant jobs in it; {elsewhere}"
            ),
            (Why::Writable { mode }, Role::Parent) => write!(
                f,
                "refusing {what}, {p}: it is writable by others (mode {mode:04o}) without the \
                 sticky bit, so anyone could replace the store; `chmod go-w {p}` (or +t), or \
                 {elsewhere}"
            ),
            (Why::Writable { mode }, _) => write!(
                f,
                "refusing {what} {p}: it is writable by its group or others (mode \
                 {mode:04o}), so another user could plant or change jobs; if nobody did, \
                 `chmod go-w {p}`, or {elsewhere}"
            ),
            (Why::Symlink, Role::StoreRoot | Role::JobsDir) => write!(
                f,
                "refusing {what} {p}: it is a symbolic link, and cofferdam follows none in \
                 its store; name the directory it points to (COFFERDAM_HOME) instead"
            ),
            (Why::Symlink, _) => write!(
                f,
                "refusing {what} {p}: it is a symbolic link, which cofferdam never makes \
                 there, so another hand did; remove the job"
            ),
            (Why::Kind, _) => write!(
                f,
                "refusing {what} {p}: it is not a {}; remove it",
                if matches!(self.role, Role::JobFile) {
                    "regular file"
                } else {
                    "directory"
                }
            ),
        }
    }
}

/// A check could not be made (the path could not be inspected), or it failed.
#[derive(Debug, thiserror::Error)]
pub enum OwnedError {
    /// A rule is broken.
    #[error("{0}")]
    Refused(Refusal),
    /// The path could not be inspected.
    #[error("cannot inspect {}: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// The caller's effective uid: the owner every store path must have.
pub fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The mode bits that let a group or others write.
const OTHERS_WRITE: u32 = 0o022;
/// The sticky bit.
const STICKY: u32 = 0o1000;

/// The uid that owns, as seen from inside a user namespace, what belongs to a user the
/// namespace does not map (`/proc/sys/kernel/overflowuid`); `None` outside one (the initial
/// namespace maps every uid, and there the overflow uid is a real user's).
pub fn unmapped_uid() -> Option<u32> {
    static UID: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *UID.get_or_init(read_unmapped_uid)
}

fn read_unmapped_uid() -> Option<u32> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let initial = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    if initial {
        return None;
    }
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// The pure rule for one path: `None` when it may be used. `parent` is `Some` for a
/// directory above the store (holding [`unmapped_uid`]): then root's ownership is fine and
/// so is being writable by others with the sticky bit; so is an owner the user namespace
/// does not map: inside a user namespace root's `/tmp` looks like that, and it cannot be
/// told from another user's (a limit of running cofferdam inside a user namespace; the
/// store itself must still be the caller's).
pub fn judge(
    file_type: FileType,
    uid: u32,
    mode: u32,
    want: FileType,
    me: u32,
    parent: Option<Option<u32>>,
) -> Option<Why> {
    let trusted = |uid: u32| match parent {
        Some(unmapped) => uid == 0 || Some(uid) == unmapped,
        None => false,
    };
    if file_type == FileType::Symlink {
        return Some(Why::Symlink);
    }
    if file_type != want {
        return Some(Why::Kind);
    }
    if uid != me && !trusted(uid) {
        return Some(Why::Owner { uid, me });
    }
    let mode = mode & 0o7777;
    if mode & OTHERS_WRITE != 0 && !(parent.is_some() && mode & STICKY != 0) {
        return Some(Why::Writable { mode });
    }
    None
}

fn open_path(path: &Path) -> Result<OwnedFd, io::Error> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

fn check_fd(
    fd: impl AsFd,
    path: &Path,
    role: Role,
    want: FileType,
    check_mode: bool,
) -> Result<(), OwnedError> {
    let st = fstat(fd).map_err(|e| OwnedError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let mode = if check_mode { st.st_mode } else { 0 };
    match judge(
        FileType::from_raw_mode(st.st_mode),
        st.st_uid,
        mode,
        want,
        me(),
        (role == Role::Parent).then(unmapped_uid),
    ) {
        None => Ok(()),
        Some(why) => Err(OwnedError::Refused(Refusal {
            path: path.to_path_buf(),
            role,
            why,
        })),
    }
}

/// Check the directory `path` (its last component not followed) against the rules of
/// `role`.
pub fn check_dir(path: &Path, role: Role) -> Result<(), OwnedError> {
    let fd = open_path(path).map_err(|source| OwnedError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    check_fd(fd, path, role, FileType::Directory, true)
}

/// Check every directory above the canonical path `path` (`/` included, `path` itself not):
/// owned by root or the caller, writable by others only with the sticky bit.
pub fn check_parents(path: &Path) -> Result<(), OwnedError> {
    let mut p = path.parent();
    while let Some(dir) = p {
        let fd = open_path(dir).map_err(|source| OwnedError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        check_fd(fd, dir, Role::Parent, FileType::Directory, true)?;
        p = dir.parent();
    }
    Ok(())
}

/// The records of a job directory that are checked when the job is opened (absent ones are
/// fine): name, whether it is a directory, whether its mode is checked.
const JOB_ENTRIES: &[(&str, bool, bool)] = &[
    ("job.json", false, true),
    ("lock", false, true),
    ("run-bundle.json", false, true),
    ("fingerprints.json", false, true),
    ("apply-ledger.json", false, true),
    ("trace.jsonl", false, true),
    ("run-bundle.provisional.json", false, true),
    ("output", true, true),
    ("upper", true, false),
    ("copy", true, false),
    ("home", true, false),
    ("tmp", true, false),
];

/// Check a job directory `dir` (canonical) and the records in it: see the module docs.
/// `parents`: check the directories above it too (a job reached otherwise than through a
/// checked `jobs/`).
pub fn check_job_dir(dir: &Path, parents: bool) -> Result<(), OwnedError> {
    if parents {
        check_parents(dir)?;
    }
    let fd = open_path(dir).map_err(|source| OwnedError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    check_fd(&fd, dir, Role::JobDir, FileType::Directory, true)?;
    let dfd = rustix::fs::openat(
        &fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| OwnedError::Io {
        path: dir.to_path_buf(),
        source: e.into(),
    })?;
    for &(name, is_dir, check_mode) in JOB_ENTRIES {
        let path = dir.join(name);
        match rustix::fs::openat(
            &dfd,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => {
                return Err(OwnedError::Io {
                    path,
                    source: e.into(),
                });
            }
            Ok(f) => {
                let want = if is_dir {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                check_fd(f, &path, Role::JobFile, want, check_mode)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: FileType = FileType::Directory;

    #[test]
    fn the_rules() {
        assert_eq!(judge(D, 7, 0o40700, D, 7, None), None);
        assert_eq!(judge(D, 7, 0o755, D, 7, None), None);
        assert_eq!(
            judge(D, 8, 0o700, D, 7, None),
            Some(Why::Owner { uid: 8, me: 7 })
        );
        assert_eq!(
            judge(D, 0, 0o700, D, 7, None),
            Some(Why::Owner { uid: 0, me: 7 })
        );
        assert_eq!(judge(D, 0, 0o755, D, 7, Some(None)), None);
        assert_eq!(
            judge(D, 7, 0o770, D, 7, None),
            Some(Why::Writable { mode: 0o770 })
        );
        assert_eq!(
            judge(D, 7, 0o1777, D, 7, None),
            Some(Why::Writable { mode: 0o1777 })
        );
        assert_eq!(judge(D, 0, 0o1777, D, 7, Some(None)), None);
        assert_eq!(
            judge(D, 0, 0o777, D, 7, Some(None)),
            Some(Why::Writable { mode: 0o777 })
        );
        assert_eq!(
            judge(D, 8, 0o1777, D, 7, Some(None)),
            Some(Why::Owner { uid: 8, me: 7 })
        );
        assert_eq!(
            judge(FileType::Symlink, 7, 0o777, D, 7, None),
            Some(Why::Symlink)
        );
        assert_eq!(
            judge(FileType::RegularFile, 7, 0o600, D, 7, None),
            Some(Why::Kind)
        );
    }

    #[test]
    fn an_unmapped_parent_owner_is_trusted_only_inside_a_user_namespace() {
        assert_eq!(judge(D, 65534, 0o1777, D, 0, Some(Some(65534))), None);
        assert_eq!(
            judge(D, 65534, 0o1777, D, 0, Some(None)),
            Some(Why::Owner { uid: 65534, me: 0 })
        );
        assert_eq!(
            judge(D, 65534, 0o700, D, 0, None),
            Some(Why::Owner { uid: 65534, me: 0 })
        );
    }

    #[test]
    fn refusals_name_the_path_and_a_fix() {
        let r = Refusal {
            path: "/tmp/s".into(),
            role: Role::StoreRoot,
            why: Why::Writable { mode: 0o777 },
        };
        let t = r.to_string();
        assert!(
            t.contains("/tmp/s") && t.contains("0777") && t.contains("chmod go-w"),
            "{t}"
        );
    }
}
