//! The file-descriptor primitives the apply engine writes with. Every path is resolved
//! beneath a directory fd without following any symlink (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, or component by component with
//! `O_NOFOLLOW` where `openat2` is missing), and every change is made with an `*at` call on
//! a single name inside an already-open directory, so nothing is ever created, renamed or
//! removed through a symlink. Names and paths are bytes.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::ident::FileId;

/// `bytes` as an `OsStr` (for rustix's path arguments).
pub(crate) fn os(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

/// Split a relative path into its parent (empty for the root) and its last component.
pub(crate) fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (
            rel.get(..i).unwrap_or_default(),
            rel.get(i + 1..).unwrap_or_default(),
        ),
        None => (&[], rel),
    }
}

/// Open `rel` beneath `root` with `flags` (plus `O_NOFOLLOW | O_CLOEXEC`), never through a
/// symlink; an empty `rel` (or `.`, the change path of the root's mode) opens the root
/// itself again.
pub(crate) fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &[u8],
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if rel.is_empty() || rel == b"." {
        return rustix::fs::openat(root, c".", flags, Mode::empty());
    }
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(root, os(rel), flags, Mode::empty(), resolve) {
            Err(Errno::AGAIN) if tries < 8 => tries += 1,
            Err(Errno::NOSYS) => return open_by_components(root, rel, flags),
            other => return other,
        }
    }
}

/// The `openat2` fallback: one `openat(O_NOFOLLOW)` per component.
pub(crate) fn open_by_components(
    root: BorrowedFd<'_>,
    rel: &[u8],
    flags: OFlags,
) -> Result<OwnedFd, Errno> {
    let mut parts = rel.split(|&b| b == b'/').peekable();
    let mut dir: Option<OwnedFd> = None;
    while let Some(name) = parts.next() {
        if name.is_empty() || name == b"." || name == b".." {
            return Err(Errno::INVAL);
        }
        let last = parts.peek().is_none();
        let here = if last {
            flags
        } else {
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
        };
        let base = dir.as_ref().map_or(root, AsFd::as_fd);
        let fd = rustix::fs::openat(base, os(name), here, Mode::empty())?;
        if last {
            return Ok(fd);
        }
        dir = Some(fd);
    }
    Err(Errno::INVAL)
}

/// A directory opened to be read, never through a symlink.
pub(crate) const DIR_READ: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The names in the directory `fd`, sorted by bytes, without `.` and `..`.
pub(crate) fn read_names(fd: BorrowedFd<'_>) -> Result<Vec<Vec<u8>>, Errno> {
    let mut dir = rustix::fs::Dir::read_from(fd)?;
    let mut names = Vec::new();
    while let Some(entry) = dir.read() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    names.sort_unstable();
    Ok(names)
}

/// Open the directory `rel` beneath `root` as an `O_PATH` handle for `*at` calls.
pub(crate) fn open_dir(root: BorrowedFd<'_>, rel: &[u8]) -> Result<OwnedFd, Errno> {
    open_beneath(root, rel, OFlags::PATH | OFlags::DIRECTORY)
}

/// The identity of an open object.
pub(crate) fn id_of(fd: BorrowedFd<'_>) -> Result<FileId, Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// `lstat` of `name` in `dir`; `None` when absent.
pub(crate) fn stat_name(
    dir: BorrowedFd<'_>,
    name: &[u8],
) -> Result<Option<rustix::fs::Stat>, Errno> {
    match rustix::fs::statat(dir, os(name), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The identity of `name` in `dir`; `None` when absent.
pub(crate) fn id_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Option<FileId>, Errno> {
    Ok(stat_name(dir, name)?.map(|st| FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    }))
}

/// Whether a stat is a directory.
pub(crate) fn is_dir(st: &rustix::fs::Stat) -> bool {
    rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
}

/// Give an open object the permission bits `mode`. Works on `O_PATH` handles too (through
/// `/proc/self/fd`, which names exactly that object).
pub(crate) fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> Result<(), Errno> {
    match rustix::fs::fchmod(fd, Mode::from_raw_mode(mode)) {
        Err(Errno::BADF) => {
            let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
            rustix::fs::chmodat(
                rustix::fs::CWD,
                path.as_str(),
                Mode::from_raw_mode(mode),
                AtFlags::empty(),
            )
        }
        other => other,
    }
}

/// Hard-link the open file `src` as `name` in `dir` (`linkat` with `AT_EMPTY_PATH`, or
/// through `/proc/self/fd` where that needs a privilege). No path is resolved on the
/// source side.
pub(crate) fn link_fd(src: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &[u8]) -> Result<(), Errno> {
    match rustix::fs::linkat(src, c"", dir, os(name), AtFlags::EMPTY_PATH) {
        Err(Errno::NOENT | Errno::PERM) => {
            let path = format!("/proc/self/fd/{}", src.as_raw_fd());
            rustix::fs::linkat(
                rustix::fs::CWD,
                path.as_str(),
                dir,
                os(name),
                AtFlags::SYMLINK_FOLLOW,
            )
        }
        other => other,
    }
}

/// The extended attribute names of the open object `fd` (those the caller may see); none
/// where the filesystem has no extended attributes.
pub(crate) fn xattr_names(fd: BorrowedFd<'_>) -> Result<Vec<Vec<u8>>, Errno> {
    crate::xattrs::list_names(
        |buf| rustix::fs::flistxattr(fd, buf),
        || rustix::fs::flistxattr_query(fd),
    )
}

/// Remove every extended attribute of the open file `fd` (the workload's `user.*` names,
/// an ACL, a file capability, overlayfs's own markers); whether none is left. A name the
/// caller may not remove (`security.capability` without `CAP_SETFCAP`, an LSM label) stays
/// and the answer is `false`: the caller must not let the inode reach the host.
pub(crate) fn strip_xattrs(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
    for name in xattr_names(fd)? {
        match rustix::fs::fremovexattr(fd, os(&name)) {
            Ok(()) | Err(Errno::NODATA) => {}
            Err(Errno::PERM | Errno::ACCESS | Errno::NOTSUP | Errno::ROFS) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(xattr_names(fd)?.is_empty())
}

/// Remove whatever is at `name` in `dir`, a whole directory tree included, without
/// following symlinks. Absent is fine. Directories without owner rwx are given it first.
pub(crate) fn remove_tree_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<(), Errno> {
    match rustix::fs::unlinkat(dir, os(name), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e),
    }
    let st = match stat_name(dir, name)? {
        None => return Ok(()),
        Some(st) => st,
    };
    if !is_dir(&st) {
        return rustix::fs::unlinkat(dir, os(name), AtFlags::empty());
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let sub = match rustix::fs::openat(dir, os(name), flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ACCESS) => {
            let handle = rustix::fs::openat(
                dir,
                os(name),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            chmod_fd(handle.as_fd(), (st.st_mode & 0o7777) | 0o700)?;
            rustix::fs::openat(dir, os(name), flags, Mode::empty())?
        }
        Err(e) => return Err(e),
    };
    if st.st_mode & 0o700 != 0o700 {
        chmod_fd(sub.as_fd(), (st.st_mode & 0o7777) | 0o700)?;
    }
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut entries = rustix::fs::Dir::read_from(&sub)?;
    while let Some(entry) = entries.read() {
        let entry = entry?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(n.to_vec());
        }
    }
    drop(entries);
    for n in &names {
        remove_tree_at(sub.as_fd(), n)?;
    }
    drop(sub);
    match rustix::fs::unlinkat(dir, os(name), AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every entry beneath the directory `dir` (not itself) whose ctime is later than
/// `after_unix_ms`, as paths relative to `dir`; stops collecting after `limit` but counts
/// on. Symlinks are not followed; directories are descended through fds.
pub(crate) fn changed_beneath(
    dir: BorrowedFd<'_>,
    after_unix_ms: u64,
    limit: usize,
) -> Result<(Vec<Vec<u8>>, usize), Errno> {
    let mut found = Vec::new();
    let mut count = 0usize;
    let start = rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut stack: Vec<(OwnedFd, Vec<u8>)> = vec![(start, Vec::new())];
    while let Some((fd, prefix)) = stack.pop() {
        let mut entries = rustix::fs::Dir::read_from(&fd)?;
        let mut subdirs = Vec::new();
        while let Some(entry) = entries.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Some(st) = stat_name(fd.as_fd(), name)? else {
                continue;
            };
            let mut rel = prefix.clone();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(name);
            let ctime = crate::ident::Ctime {
                sec: st.st_ctime,
                nsec: u32::try_from(st.st_ctime_nsec).unwrap_or(0),
            };
            if ctime.is_after_unix_ms(after_unix_ms) {
                count += 1;
                if found.len() < limit {
                    found.push(rel.clone());
                }
            }
            if is_dir(&st) {
                subdirs.push((name.to_vec(), rel));
            }
        }
        drop(entries);
        for (name, rel) in subdirs {
            let sub = rustix::fs::openat(
                fd.as_fd(),
                os(&name),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            match sub {
                Ok(sub) => stack.push((sub, rel)),
                // Unreadable: its own ctime was checked; its entries cannot be listed.
                Err(Errno::ACCESS) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok((found, count))
}

/// An `io::Error` from an `Errno`.
pub(crate) fn io_err(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn root(p: &std::path::Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn splitting() {
        assert_eq!(split(b"a/b/c"), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(split(b"c"), (&b""[..], &b"c"[..]));
    }

    #[test]
    fn never_through_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        std::fs::create_dir_all(base.join("t/d")).unwrap();
        std::fs::create_dir(base.join("out")).unwrap();
        std::os::unix::fs::symlink(base.join("out"), base.join("t/esc")).unwrap();
        let r = root(&base.join("t"));
        assert!(open_dir(r.as_fd(), b"d").is_ok());
        assert!(open_dir(r.as_fd(), b"").is_ok());
        let e = open_dir(r.as_fd(), b"esc").map(drop).unwrap_err();
        assert!(
            matches!(e, Errno::LOOP | Errno::NOTDIR | Errno::XDEV),
            "{e:?}"
        );
        let e = open_beneath(r.as_fd(), b"esc/x", OFlags::PATH)
            .map(drop)
            .unwrap_err();
        assert!(
            matches!(e, Errno::LOOP | Errno::XDEV | Errno::NOTDIR),
            "{e:?}"
        );
        assert!(open_dir(r.as_fd(), b"../out").is_err());
        let e = open_by_components(r.as_fd(), b"esc/x", OFlags::PATH)
            .map(drop)
            .unwrap_err();
        assert_eq!(e, Errno::NOTDIR);
    }

    #[test]
    fn removes_trees_with_locked_directories_and_keeps_symlink_targets() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        std::fs::create_dir_all(base.join("t/x/y")).unwrap();
        std::fs::write(base.join("t/x/y/f"), b"1").unwrap();
        std::fs::create_dir(base.join("keep")).unwrap();
        std::fs::write(base.join("keep/k"), b"k").unwrap();
        std::os::unix::fs::symlink(base.join("keep"), base.join("t/x/link")).unwrap();
        std::fs::set_permissions(base.join("t/x/y"), std::fs::Permissions::from_mode(0o500))
            .unwrap();
        std::fs::set_permissions(base.join("t/x"), std::fs::Permissions::from_mode(0o000)).unwrap();
        let r = root(base);
        remove_tree_at(r.as_fd(), b"t").unwrap();
        assert!(!base.join("t").exists());
        assert!(base.join("keep/k").exists());
        remove_tree_at(r.as_fd(), b"t").unwrap();
    }

    #[test]
    fn strips_every_xattr_it_may() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        std::fs::write(&p, b"1").unwrap();
        let f = std::fs::File::open(&p).unwrap();
        if rustix::fs::fsetxattr(&f, "user.a", b"1", rustix::fs::XattrFlags::empty()).is_err() {
            return; // no user xattrs on this filesystem
        }
        rustix::fs::fsetxattr(&f, "user.b", b"2", rustix::fs::XattrFlags::empty()).unwrap();
        assert_eq!(xattr_names(f.as_fd()).unwrap().len(), 2);
        assert!(strip_xattrs(f.as_fd()).unwrap());
        assert!(xattr_names(f.as_fd()).unwrap().is_empty());
    }

    #[test]
    fn finds_deep_changes() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        std::fs::write(tmp.path().join("a/b/f"), b"1").unwrap();
        let r = root(tmp.path());
        let (found, n) = changed_beneath(r.as_fd(), 0, 10).unwrap();
        assert_eq!(n, 3);
        assert!(found.contains(&b"a/b/f".to_vec()));
        let (found, n) = changed_beneath(r.as_fd(), u64::MAX / 2_000_000, 10).unwrap();
        assert_eq!((found.len(), n), (0, 0));
    }
}
