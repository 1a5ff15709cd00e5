//! The one walk of a staged tree that checkpoints make: copy it (a checkpoint's `upper/`, a
//! fork's seed), digest it (`show`), or both at once (`create`). Owns the walk order, the
//! copy of one entry and the digest's encoding of an entry; may not choose the trees (the
//! caller, [`super`], does) or touch anything outside the two it is given. Its errors are
//! [`CheckpointError`]s, the module's own.
//!
//! Every directory is read through a descriptor and every entry reached by its name in it
//! (`fstatat`, `openat`, `mkdirat`, `f*xattr`), so no path is resolved more than one name
//! deep and none through a symlink. Directories more than [`OPEN_DEPTH`] below the root give
//! their descriptors back while their subtree is walked and open again beneath the root
//! afterwards (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), so no depth exhausts
//! the descriptor table.
//!
//! # Order
//!
//! The digest is defined over walkdir's order with `sort_by_file_name`, which the first
//! implementation used: a directory, then its entries by name bytes, each subtree whole
//! before the next name. This walk keeps it (a test compares both on one tree).
//!
//! # Cost
//!
//! Per staged regular file: one `fstatat`, two `openat`, `flistxattr`, one `lseek` (whether it
//! has holes), one `pread` and one `pwrite`, `fchmod`, two `close`. The digest hashes the bytes
//! as they are copied rather than reading the copy back: a plain write of a file without holes
//! makes a copy without holes, whose content hash ([`crate::sparse::hash_file`]) is the BLAKE3
//! of those bytes. A file with holes, or larger than [`SMALL`], is copied by
//! [`crate::sparse::copy_file`] and hashed from the copy, as the first implementation did.
//! A reflink (`FICLONE`) is tried first for every file, until the filesystem says it has none.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, SeekFrom, XattrFlags};
use rustix::io::Errno;

use super::{CheckpointError, Counts, DIR_MODE, FILE_MODE};
use crate::fsops::{DIR_READ as DIR_FLAGS, read_names};

/// Files without holes up to this size are copied through one buffer and hashed from it.
pub(super) const SMALL: u64 = 1 << 20;
/// How many directory levels keep their descriptors open during the walk.
pub(super) const OPEN_DEPTH: usize = 64;
/// The digest's BLAKE3 key-derivation context.
const DIGEST_CONTEXT: &str = "cofferdam checkpoint digest v1";

/// A test of a path below the walk's root (whether its entry may be linked, or walked).
pub(super) type PathTest<'a> = dyn Fn(&[u8]) -> bool + 'a;

/// An extended attribute: its name and value.
pub(super) type Xattr = (Vec<u8>, Vec<u8>);

/// One entry as the digest sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen<'a> {
    /// A directory; the root's mode is given as 0.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Its length.
        len: u64,
        /// Its content hash, hex.
        content: &'a str,
    },
    /// A symlink.
    Symlink {
        /// Its target.
        target: &'a [u8],
    },
    /// Anything else (whiteouts, fifos).
    Node {
        /// Permission bits.
        mode: u32,
        /// The type bits (`st_mode & S_IFMT`).
        kind: u32,
        /// The device number.
        rdev: u64,
    },
}

/// The checkpoint digest being computed (see the module docs of [`super`]).
pub(super) struct Digest(blake3::Hasher);

impl Digest {
    pub(super) fn new() -> Self {
        Self(blake3::Hasher::new_derive_key(DIGEST_CONTEXT))
    }

    fn field(&mut self, bytes: &[u8]) {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }

    /// Add one entry: its path below the root, what it is, its overlay xattrs (sorted;
    /// ignored for a symlink).
    pub(super) fn entry(&mut self, rel: &[u8], seen: &Seen<'_>, xattrs: &[Xattr]) {
        self.field(rel);
        match *seen {
            Seen::Dir { mode } => {
                self.field(b"d");
                self.0.update(&mode.to_le_bytes());
            }
            Seen::File { mode, len, content } => {
                self.field(b"f");
                self.0.update(&mode.to_le_bytes());
                self.0.update(&len.to_le_bytes());
                self.field(content.as_bytes());
            }
            Seen::Symlink { target } => {
                self.field(b"l");
                self.field(target);
                return;
            }
            Seen::Node { mode, kind, rdev } => {
                self.field(b"n");
                self.0.update(&mode.to_le_bytes());
                self.0.update(&kind.to_le_bytes());
                self.0.update(&rdev.to_le_bytes());
            }
        }
        for (name, value) in xattrs {
            self.field(name);
            self.field(value);
        }
    }

    /// The digest, after the fingerprints file's bytes (`None`: the checkpoint has none).
    pub(super) fn finish(mut self, fingerprints: Option<&[u8]>) -> String {
        self.field(b"fingerprints");
        self.field(fingerprints.unwrap_or(b"none"));
        format!("blake3:{}", self.0.finalize().to_hex())
    }
}

/// Copy the tree `from` to `to` (which must not exist); with `hash`, the digest of the copy
/// too (else the returned digest holds nothing of it).
#[cfg(test)]
pub(super) fn copy(
    from: &Path,
    to: &Path,
    hash: bool,
) -> Result<(Counts, Digest), CheckpointError> {
    Walk::new(from, Some(to), hash, None).run()
}

/// Rebuild the tree `from` at `to` (which must not exist), leaving out every entry (a
/// directory with all below it) that `keep` refuses, with every non-directory that
/// `linkable` accepts (both by path below the root) hard-linked rather than copied, and a
/// copy where the filesystem refuses the link. Directories are always new. Only for trees
/// whose non-directories nothing changes in place afterwards (see [`super`], "Cost and
/// independence").
pub(super) fn link(
    from: &Path,
    to: &Path,
    hash: bool,
    linkable: &PathTest<'_>,
    keep: &PathTest<'_>,
) -> Result<(Counts, Digest), CheckpointError> {
    let mut walk = Walk::new(from, Some(to), hash, Some(linkable));
    walk.keep = Some(keep);
    walk.run()
}

/// [`link`] of every entry, for an overlay lower layer: a copy-tier stage's xattr
/// whiteouts (empty files, [`crate::copystage::WHITEOUT_XATTR`]) become the 0:0 devices the
/// kernel honours in a lower layer (it takes the xattr form only in directories marked for
/// it), so the layer hides what the stage deleted.
pub(super) fn layer(from: &Path, to: &Path) -> Result<Counts, CheckpointError> {
    let all = |_: &[u8]| true;
    let mut walk = Walk::new(from, Some(to), false, Some(&all));
    walk.kernel_whiteouts = true;
    walk.run().map(|(counts, _)| counts)
}

/// The digest of the tree `from` (read only).
pub(super) fn digest(from: &Path) -> Result<(Counts, Digest), CheckpointError> {
    Walk::new(from, None, true, None).run()
}

/// A directory being walked.
struct Frame {
    /// Its path below the root.
    rel: Vec<u8>,
    /// Its entries' names, sorted; taken as they are visited.
    names: Vec<Vec<u8>>,
    /// The next name to visit.
    next: usize,
    /// The source directory (`None` while given back).
    src: Option<OwnedFd>,
    /// The copy's directory (`None` while given back, or when not copying).
    dst: Option<OwnedFd>,
    /// The copy's mode, set once its entries are written.
    mode: u32,
}

struct Walk<'a> {
    from: &'a Path,
    to: Option<&'a Path>,
    hash: bool,
    digest: Digest,
    counts: Counts,
    /// Whether `FICLONE` is still worth trying.
    clone: bool,
    /// Which entries may be hard-linked, by path below the root; `None`: none.
    linkable: Option<&'a PathTest<'a>>,
    /// Make xattr whiteouts 0:0 devices ([`layer`]).
    kernel_whiteouts: bool,
    /// Which entries are walked at all, by path below the root; `None`: all.
    keep: Option<&'a PathTest<'a>>,
    buf: Vec<u8>,
}

/// The error of `action` on `rel` below `root`.
fn fail<'a>(
    action: &'static str,
    root: &'a Path,
    rel: &'a [u8],
) -> impl FnOnce(Errno) -> CheckpointError + 'a {
    move |e| io_fail(action, root, rel)(e.into())
}

fn io_fail<'a>(
    action: &'static str,
    root: &'a Path,
    rel: &'a [u8],
) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io {
        action,
        path: below(root, rel),
        source,
    }
}

fn below(root: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(OsStr::from_bytes(rel))
    }
}

fn os(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

impl<'a> Walk<'a> {
    fn new(
        from: &'a Path,
        to: Option<&'a Path>,
        hash: bool,
        linkable: Option<&'a PathTest<'a>>,
    ) -> Self {
        Self {
            from,
            to,
            hash,
            digest: Digest::new(),
            counts: Counts::default(),
            clone: true,
            linkable,
            kernel_whiteouts: false,
            keep: None,
            buf: Vec::new(),
        }
    }

    /// Hard-link the non-directory `name` of `src` into `dst` when the walk links it;
    /// whether it did. A filesystem (or a `protected_hardlinks` rule) that refuses links
    /// ends the tries; a file at its link limit is copied.
    fn linked(
        &mut self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        name: &[u8],
        rel: &[u8],
    ) -> Result<bool, CheckpointError> {
        let Some(linkable) = self.linkable else {
            return Ok(false);
        };
        if !linkable(rel) {
            return Ok(false);
        }
        match rustix::fs::linkat(src, os(name), dst, os(name), AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::XDEV | Errno::PERM | Errno::ACCESS | Errno::OPNOTSUPP | Errno::NOSYS) => {
                self.linkable = None;
                Ok(false)
            }
            Err(Errno::MLINK) => Ok(false),
            Err(e) => Err(fail("link", self.to.unwrap_or(self.from), rel)(e)),
        }
    }

    fn run(mut self) -> Result<(Counts, Digest), CheckpointError> {
        let (from, to) = (self.from, self.to);
        let src_root = rustix::fs::openat(rustix::fs::CWD, from, DIR_FLAGS, Mode::empty())
            .map_err(fail("open", from, b""))?;
        let xattrs = overlay_xattrs(src_root.as_fd()).map_err(fail("list xattrs of", from, b""))?;
        let dst_root = match to {
            Some(to) => {
                rustix::fs::mkdirat(rustix::fs::CWD, to, Mode::from_raw_mode(DIR_MODE))
                    .map_err(fail("create", to, b""))?;
                let fd = rustix::fs::openat(rustix::fs::CWD, to, DIR_FLAGS, Mode::empty())
                    .map_err(fail("open", to, b""))?;
                set_xattrs(fd.as_fd(), &xattrs).map_err(fail("set xattrs on", to, b""))?;
                Some(fd)
            }
            None => None,
        };
        if self.hash {
            self.digest.entry(b"", &Seen::Dir { mode: 0 }, &xattrs);
        }
        let names = read_names(src_root.as_fd()).map_err(fail("read", from, b""))?;
        let mut stack = vec![Frame {
            rel: Vec::new(),
            names,
            next: 0,
            src: None,
            dst: None,
            mode: DIR_MODE,
        }];
        while let Some(top) = stack.last_mut() {
            // A frame given back is opened again beneath the roots (the root frame's are
            // the roots themselves).
            if top.src.is_none() && !top.rel.is_empty() {
                let fd = crate::fsops::open_beneath(src_root.as_fd(), &top.rel, DIR_FLAGS)
                    .map_err(fail("open", from, &top.rel))?;
                top.src = Some(fd);
            }
            if let (None, Some(root), Some(to), false) =
                (&top.dst, &dst_root, to, top.rel.is_empty())
            {
                let fd = crate::fsops::open_beneath(root.as_fd(), &top.rel, DIR_FLAGS)
                    .map_err(fail("open", to, &top.rel))?;
                top.dst = Some(fd);
            }
            let src = top.src.as_ref().map_or(src_root.as_fd(), AsFd::as_fd);
            let dst = top.dst.as_ref().or(dst_root.as_ref()).map(AsFd::as_fd);
            let Some(name) = top.names.get_mut(top.next).map(std::mem::take) else {
                // Every entry is written: the copy's directory gets its mode.
                if let (Some(fd), Some(to)) = (dst, to) {
                    crate::fsops::chmod_fd(fd, top.mode).map_err(fail("chmod", to, &top.rel))?;
                }
                stack.pop();
                continue;
            };
            top.next += 1;
            let mut rel = Vec::with_capacity(top.rel.len() + 1 + name.len());
            if !top.rel.is_empty() {
                rel.extend_from_slice(&top.rel);
                rel.push(b'/');
            }
            rel.extend_from_slice(&name);
            let Some(frame) = self.entry(src, dst, &name, rel)? else {
                continue;
            };
            if let Some(deep) = stack
                .len()
                .checked_sub(OPEN_DEPTH)
                .and_then(|k| stack.get_mut(k))
            {
                deep.src = None;
                deep.dst = None;
            }
            stack.push(frame);
        }
        Ok((self.counts, self.digest))
    }

    /// Visit (and copy) the entry `name` of `src` (into `dst`); a directory's frame.
    fn entry(
        &mut self,
        src: BorrowedFd<'_>,
        dst: Option<BorrowedFd<'_>>,
        name: &[u8],
        rel: Vec<u8>,
    ) -> Result<Option<Frame>, CheckpointError> {
        let (from, to) = (self.from, self.to.unwrap_or(self.from));
        if self.keep.is_some_and(|keep| !keep(&rel)) {
            return Ok(None);
        }
        let st = rustix::fs::statat(src, os(name), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(fail("inspect", from, &rel))?;
        let mode = st.st_mode & 0o7777;
        self.counts.entries += 1;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                let sfd = rustix::fs::openat(src, os(name), DIR_FLAGS, Mode::empty())
                    .map_err(fail("open", from, &rel))?;
                let xattrs =
                    overlay_xattrs(sfd.as_fd()).map_err(fail("list xattrs of", from, &rel))?;
                let names = read_names(sfd.as_fd()).map_err(fail("read", from, &rel))?;
                let dfd = match dst {
                    Some(d) => {
                        rustix::fs::mkdirat(d, os(name), Mode::from_raw_mode(DIR_MODE))
                            .map_err(fail("create", to, &rel))?;
                        let fd = rustix::fs::openat(d, os(name), DIR_FLAGS, Mode::empty())
                            .map_err(fail("open", to, &rel))?;
                        set_xattrs(fd.as_fd(), &xattrs).map_err(fail("set xattrs on", to, &rel))?;
                        Some(fd)
                    }
                    None => None,
                };
                self.counts.directories += 1;
                if is_opaque(&xattrs) {
                    self.counts.opaque_directories += 1;
                }
                if self.hash {
                    self.digest.entry(&rel, &Seen::Dir { mode }, &xattrs);
                }
                Ok(Some(Frame {
                    rel,
                    names,
                    next: 0,
                    src: Some(sfd),
                    dst: dfd,
                    mode,
                }))
            }
            FileType::RegularFile => {
                self.file(
                    src,
                    dst,
                    name,
                    &rel,
                    mode,
                    u64::try_from(st.st_size).unwrap_or(0),
                )?;
                Ok(None)
            }
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(src, os(name), Vec::new())
                    .map_err(fail("read", from, &rel))?;
                if let Some(d) = dst
                    && !self.linked(src, d, name, &rel)?
                {
                    rustix::fs::symlinkat(target.as_c_str(), d, os(name))
                        .map_err(fail("create", to, &rel))?;
                }
                self.counts.symlinks += 1;
                if self.hash {
                    let target = target.as_bytes();
                    self.digest.entry(&rel, &Seen::Symlink { target }, &[]);
                }
                Ok(None)
            }
            ft => {
                let whiteout = ft == FileType::CharacterDevice && st.st_rdev == 0;
                let (mode, xattrs) = match dst {
                    Some(d) => {
                        if !whiteout && ft != FileType::Fifo {
                            return Err(CheckpointError::Unsupported {
                                path: PathBuf::from(os(&rel)),
                                what: match ft {
                                    FileType::Socket => "socket",
                                    FileType::BlockDevice => "block device",
                                    _ => "device node",
                                },
                            });
                        }
                        // An overlay whiteout (unprivileged users may make a 0:0 device,
                        // Linux 5.8+), or a fifo. The mode is what the umask left.
                        if !self.linked(src, d, name, &rel)? {
                            rustix::fs::mknodat(d, os(name), ft, Mode::from_raw_mode(mode), 0)
                                .map_err(fail("create", to, &rel))?;
                        }
                        let made = rustix::fs::statat(d, os(name), AtFlags::SYMLINK_NOFOLLOW)
                            .map_err(fail("inspect", to, &rel))?;
                        (made.st_mode & 0o7777, path_xattrs(&below(to, &rel))?)
                    }
                    None => (mode, path_xattrs(&below(from, &rel))?),
                };
                if whiteout {
                    self.counts.whiteouts += 1;
                } else if ft == FileType::Fifo {
                    self.counts.fifos += 1;
                }
                if self.hash {
                    let kind = st.st_mode & 0o170000;
                    let rdev = st.st_rdev;
                    self.digest
                        .entry(&rel, &Seen::Node { mode, kind, rdev }, &xattrs);
                }
                Ok(None)
            }
        }
    }

    /// Visit (and copy) the regular file `name` of `src`, `len` bytes by its `fstatat`.
    fn file(
        &mut self,
        src: BorrowedFd<'_>,
        dst: Option<BorrowedFd<'_>>,
        name: &[u8],
        rel: &[u8],
        mode: u32,
        len: u64,
    ) -> Result<(), CheckpointError> {
        let (from, to) = (self.from, self.to.unwrap_or(self.from));
        // Linked without a digest: nothing to read (a link shares the inode's xattrs), unless
        // it is empty and may be an xattr whiteout, which is counted apart.
        if let Some(d) = dst
            && !self.hash
            && len > 0
            && self.linked(src, d, name, rel)?
        {
            self.counts.linked_files += 1;
            self.counts.files += 1;
            self.counts.bytes += len;
            return Ok(());
        }
        let read = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
        let sfd = File::from(
            rustix::fs::openat(src, os(name), read, Mode::empty())
                .map_err(fail("open", from, rel))?,
        );
        let xattrs = overlay_xattrs(sfd.as_fd()).map_err(fail("list xattrs of", from, rel))?;
        let whiteout = len == 0
            && xattrs.iter().any(|(n, v)| {
                n.as_slice() == crate::copystage::WHITEOUT_XATTR.as_bytes() && v.len() <= 8
            });
        if let (Some(d), true, true) = (dst, whiteout, self.kernel_whiteouts) {
            rustix::fs::mknodat(
                d,
                os(name),
                FileType::CharacterDevice,
                Mode::from_raw_mode(0o600),
                0,
            )
            .map_err(fail("create", to, rel))?;
            self.counts.whiteouts += 1;
            return Ok(());
        }
        let (size, content, mode) = match dst {
            Some(d) if self.linked(src, d, name, rel)? => {
                // The same inode: its mode, xattrs and content are the source's.
                if !whiteout {
                    self.counts.linked_files += 1;
                }
                let content = self.content_of(&sfd).map_err(io_fail("read", from, rel))?;
                (len, content, mode)
            }
            Some(d) => {
                let write = OFlags::RDWR
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC;
                let dfd = File::from(
                    rustix::fs::openat(d, os(name), write, Mode::from_raw_mode(FILE_MODE))
                        .map_err(fail("create", to, rel))?,
                );
                let (reflinked, size, content) = self
                    .copy_data(&sfd, &dfd, len)
                    .map_err(io_fail("copy", from, rel))?;
                rustix::fs::fchmod(&dfd, Mode::from_raw_mode(mode))
                    .map_err(fail("chmod", to, rel))?;
                // The set-id bits may not survive a chmod by their owner: record what holds.
                let mode = if mode & 0o7000 == 0 {
                    mode
                } else {
                    rustix::fs::fstat(&dfd)
                        .map_err(fail("inspect", to, rel))?
                        .st_mode
                        & 0o7777
                };
                set_xattrs(dfd.as_fd(), &xattrs).map_err(fail("set xattrs on", to, rel))?;
                if !whiteout {
                    if reflinked {
                        self.counts.reflinked_files += 1;
                    } else {
                        self.counts.copied_files += 1;
                    }
                }
                (size, content, mode)
            }
            None => {
                let content = crate::sparse::hash_file(&sfd).map_err(io_fail("read", from, rel))?;
                (len, Some(content), mode)
            }
        };
        if whiteout {
            self.counts.whiteouts += 1;
        } else {
            self.counts.files += 1;
            self.counts.bytes += len;
        }
        if let Some(content) = content.as_deref() {
            let seen = Seen::File {
                mode,
                len: size,
                content,
            };
            self.digest.entry(rel, &seen, &xattrs);
        }
        Ok(())
    }

    /// Copy `src`'s data into the new, empty `dst`: a reflink while the filesystem has
    /// them (`true`), else a copy. Returns the copy's length and, when hashing, its content
    /// hash.
    fn copy_data(
        &mut self,
        src: &File,
        dst: &File,
        len: u64,
    ) -> io::Result<(bool, u64, Option<String>)> {
        if self.clone {
            match rustix::fs::ioctl_ficlone(dst, src) {
                Ok(()) => {
                    let content = self.content_of(dst)?;
                    return Ok((true, dst.metadata()?.len(), content));
                }
                // The filesystem has no reflinks: no more tries.
                Err(Errno::OPNOTSUPP | Errno::NOTTY | Errno::XDEV | Errno::NOSYS) => {
                    self.clone = false;
                }
                Err(_) => {}
            }
        }
        if len <= SMALL && dense(src, len) {
            let want = usize::try_from(len).unwrap_or(0);
            self.buf.clear();
            self.buf.resize(want, 0);
            let mut got = 0;
            while let Some(slot) = self.buf.get_mut(got..).filter(|s| !s.is_empty()) {
                let n = src.read_at(slot, got as u64)?;
                if n == 0 {
                    break; // shrank meanwhile: what is there is what is copied
                }
                got += n;
            }
            let bytes = self.buf.get(..got).unwrap_or_default();
            dst.write_all_at(bytes, 0)?;
            let content = self.hash.then(|| blake3::hash(bytes).to_hex().to_string());
            return Ok((false, got as u64, content));
        }
        crate::sparse::copy_file(src, dst)?;
        let content = self.content_of(dst)?;
        Ok((false, dst.metadata()?.len(), content))
    }

    fn content_of(&self, file: &File) -> io::Result<Option<String>> {
        if self.hash {
            crate::sparse::hash_file(file).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Whether `file` (`len` bytes) has no hole: its first hole is its end, as
/// [`crate::sparse::hash_file`] decides it. A filesystem that cannot tell, or an error, is
/// answered `false`, so the general copy decides.
fn dense(file: &File, len: u64) -> bool {
    len == 0 || rustix::fs::seek(file, SeekFrom::Hole(0)).is_ok_and(|hole| hole >= len)
}

/// The overlay xattrs of the open `fd`, names sorted, with their values; none where the
/// caller may not list them.
fn overlay_xattrs(fd: BorrowedFd<'_>) -> Result<Vec<Xattr>, Errno> {
    let names = match crate::fsops::xattr_names(fd) {
        Ok(names) => names,
        Err(Errno::PERM) => Vec::new(),
        Err(e) => return Err(e),
    };
    values(
        names
            .into_iter()
            .filter(|n| crate::xattrs::is_overlay(n))
            .collect(),
        |name, buf| rustix::fs::fgetxattr(fd, name, buf),
        |name| rustix::fs::fgetxattr_query(fd, name),
    )
}

/// [`overlay_xattrs`] of a path (not followed): for nodes, which cannot be opened.
fn path_xattrs(path: &Path) -> Result<Vec<Xattr>, CheckpointError> {
    let err = |e: Errno| CheckpointError::Io {
        action: "read xattrs of",
        path: path.to_path_buf(),
        source: e.into(),
    };
    let names = match crate::xattrs::overlay_names(path) {
        Ok(names) => names,
        Err(Errno::PERM) => Vec::new(),
        Err(e) => return Err(err(e)),
    };
    values(
        names,
        |name, buf| rustix::fs::lgetxattr(path, name, buf),
        |name| rustix::fs::lgetxattr_query(path, name),
    )
    .map_err(err)
}

/// `names`, sorted, each with its value (`get`, growing the buffer on `ERANGE`).
fn values(
    mut names: Vec<Vec<u8>>,
    mut get: impl FnMut(&OsStr, &mut [u8]) -> Result<usize, Errno>,
    mut query: impl FnMut(&OsStr) -> Result<usize, Errno>,
) -> Result<Vec<Xattr>, Errno> {
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let os = os(&name);
        let mut value = vec![0u8; 256];
        let len = loop {
            match get(os, &mut value[..]) {
                Ok(len) => break len,
                Err(Errno::RANGE) => {
                    let want = query(os)?;
                    value.resize(want.max(value.len() * 2), 0);
                }
                Err(e) => return Err(e),
            }
        };
        value.truncate(len);
        out.push((name, value));
    }
    Ok(out)
}

fn set_xattrs(fd: BorrowedFd<'_>, xattrs: &[Xattr]) -> Result<(), Errno> {
    for (name, value) in xattrs {
        rustix::fs::fsetxattr(fd, os(name), value, XattrFlags::empty())?;
    }
    Ok(())
}

/// Whether a directory's xattrs make it opaque (as [`crate::seal::is_opaque`] reads them).
fn is_opaque(xattrs: &[Xattr]) -> bool {
    xattrs.iter().any(|(name, value)| {
        crate::seal::OPAQUE_XATTRS
            .iter()
            .any(|o| o.as_bytes() == name.as_slice())
            && value.as_slice() == b"y"
    })
}
