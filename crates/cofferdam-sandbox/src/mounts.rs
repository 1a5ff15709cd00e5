//! The composed root of the sealed tier (DESIGN.md §3 step 2): a fresh tmpfs holding
//! read-only binds of the system, the workdir as an overlay whose upper is the job's stage,
//! a private HOME and /tmp, a minimal /dev, a new /proc with sensitive entries masked, and
//! every secret masked; then `pivot_root` into it and detach the old root.
//!
//! Owns every mount of the sandbox. It runs in the sandbox's pid 1 (a new /proc must be
//! mounted from inside the pid namespace), after the namespaces exist, and decides nothing:
//! the paths come from the plan. Host paths (absolute, `host_path`) are read through the
//! old root before the pivot; paths under the new root are resolved from its tmpfs's
//! descriptor (`Root`), never from the host's `/`, so a symlink in a lower tree cannot make
//! a step land outside it. When something in such a path stands in the way (a symlink that
//! leads nowhere inside, a file where a directory is needed), the refusal names it by its
//! path inside, the one the user wrote, and says what to change (`refusal`). A secret that
//! a lent mount shows, lent on purpose or through a symlinked source, is not masked there
//! but reported: `secrets_hidden` is then partial (`shows_secret`).

use crate::probe::mountinfo::MountLine;
use crate::setup_error::{SetupError, StepContext};
use cofferdam_policy::mount_program::{MountOp, MountRow};
use cofferdam_policy::plan::FsPlan;
use cofferdam_policy::policy::normalize;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MountFlags, MountPropagationFlags, MoveMountFlags,
    OpenTreeFlags, UnmountFlags,
};
use serde_json::json;
use std::ffi::CStr;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

const MOUNT_ATTR_SIZE_VER0: usize = 32;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(2)` (not in rustix): set `attrs` on the mount at `fd` (and, with
/// `recursive`, every mount below it).
fn mount_setattr(fd: BorrowedFd<'_>, attrs: MountAttrFlags, recursive: bool) -> Result<(), Errno> {
    let attr = MountAttr {
        attr_set: u64::from(attrs.bits()),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = libc::AT_EMPTY_PATH;
    if recursive {
        flags |= libc::AT_RECURSIVE;
    }
    // SAFETY: `attr` is a valid, initialized `struct mount_attr` of the size passed, living
    // across the call; the path is an empty C string; the fd is open. The kernel only reads.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            MOUNT_ATTR_SIZE_VER0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ))
    }
}

/// How often a lookup under the new root is retried when `openat2` answers EAGAIN (a rename
/// or mount on the host raced a `..` in it); then the EAGAIN is the step's error.
const RESOLVE_RETRIES: u32 = 16;

/// A host path as a path relative to the new root (`/etc/shadow` -> `etc/shadow`).
fn rel(host: &Path) -> &Path {
    host.strip_prefix("/").unwrap_or(host)
}

/// The new root while it is being composed: its path, for messages a person recognises, and
/// a descriptor of its tmpfs that every path under it is resolved from (short relative
/// walks instead of the job directory's 8-12 components each time). A path of more than one
/// component may cross a tree the host or the user controls (the workdir, a lent path, the
/// system binds): it is resolved with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, so
/// a symlink or `..` in it is resolved as the sandbox will see it after the pivot and can
/// never land outside the new root. [`Root::open`] does not follow the final component (as
/// `lstat` and `move_mount` do not). [`mkdir_p`] and [`touch`] reach the parent so, make the
/// entry by name in it and open it from there ([`Dir::place`]), where it is then mounted.
struct Root<'a> {
    path: &'a Path,
    fd: OwnedFd,
}

impl Root<'_> {
    /// The full host path of `rel` under the new root, for messages.
    fn shown(&self, rel: &Path) -> PathBuf {
        self.path.join(rel)
    }

    /// `rel` itself (a final symlink not followed), as an `O_PATH` descriptor.
    fn open(&self, rel: &Path) -> Result<OwnedFd, Errno> {
        self.resolve(rel, OFlags::NOFOLLOW)
    }

    /// The directory `rel` (symlinks followed, inside the new root), as an `O_PATH`
    /// descriptor.
    fn open_dir(&self, rel: &Path) -> Result<OwnedFd, Errno> {
        self.resolve(rel, OFlags::DIRECTORY)
    }

    /// Whatever `rel` leads to (symlinks followed, inside the new root), as an `O_PATH`
    /// descriptor.
    fn open_follow(&self, rel: &Path) -> Result<OwnedFd, Errno> {
        self.resolve(rel, OFlags::empty())
    }

    fn resolve(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        // EAGAIN: a rename or mount anywhere on the host raced a `..`; the lookup may be
        // retried.
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(
                &self.fd,
                rel,
                OFlags::PATH | OFlags::CLOEXEC | flags,
                Mode::empty(),
                ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
            ) {
                Err(Errno::AGAIN) if tries < RESOLVE_RETRIES => tries += 1,
                r => return r,
            }
        }
    }
}

/// What a path under the new root is for: a refusal names it so and says what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// `/tmp`, `/dev`, `/proc` or a system directory: the host's own layout.
    System,
    Home,
    Workdir,
    ReadOnly,
    Lent,
    /// Where the host's `/etc/resolv.conf` points.
    Resolver,
}

impl Purpose {
    fn noun(self) -> &'static str {
        match self {
            Purpose::System => "system path",
            Purpose::Home => "HOME",
            Purpose::Workdir => "workdir",
            Purpose::ReadOnly => "read-only path",
            Purpose::Lent => "mount target",
            Purpose::Resolver => "resolver file",
        }
    }

    /// What to change when `cause` stands in the way.
    fn fix(self, cause: &Cause) -> String {
        const REPORT: &str = "the host's own layout puts it there: please report this";
        match (self, cause) {
            (
                Purpose::Lent,
                Cause::Symlink {
                    real: Some(real), ..
                },
            ) => format!(
                "lend at the real path (`{}`), or choose a target without symlinks",
                real.display()
            ),
            (Purpose::Lent, Cause::Symlink { .. }) => {
                "lend at the real path, or choose a target without symlinks".into()
            }
            (Purpose::Lent, Cause::Kind { .. }) => "choose another target".into(),
            (Purpose::ReadOnly, _) => {
                "name a path without symlinks with --read-only (or the manifest's read_only)".into()
            }
            (Purpose::Home, Cause::Symlink { .. }) => {
                "set HOME to its real path (`realpath \"$HOME\"`)".into()
            }
            (Purpose::Home, Cause::Kind { .. }) => "set HOME to a directory".into(),
            (Purpose::Workdir, Cause::Symlink { .. }) => {
                "give the workdir by its real path (`realpath`)".into()
            }
            (Purpose::Workdir, Cause::Kind { .. }) => "choose a directory as the workdir".into(),
            (Purpose::System | Purpose::Resolver, _) => REPORT.into(),
        }
    }
}

/// What the final component of a path must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A directory made or found there by [`mkdir_p`] (not a symlink to one).
    Dir,
    /// A file made or found there by [`touch`] (anything but a directory).
    File,
    /// Whatever is there, not followed ([`Root::open`]).
    Any,
}

/// What a symlink on the way leads to inside the new root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leads {
    /// Its resolution as a directory failed with this errno (ENOENT: to nothing, ENOTDIR:
    /// to something else).
    Nowhere(Errno),
    /// A directory, but it is the final component, where a directory is made.
    Final,
}

/// What stands in the way of a path under the new root, found by [`Root::explain`]; `at`
/// is the entry's path inside, as the plan and the user name it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cause {
    /// A symlink whose text is `to`; `real`: where the whole path leads through it, folded
    /// lexically (none when it loops).
    Symlink {
        at: PathBuf,
        to: PathBuf,
        leads: Leads,
        real: Option<PathBuf>,
    },
    /// An entry of another kind than the path needs there.
    Kind {
        at: PathBuf,
        is: &'static str,
        wanted: &'static str,
    },
}

impl Cause {
    /// The kernel's answer that goes with it, when it is a failed resolution.
    fn errno(&self) -> Option<Errno> {
        match self {
            Cause::Symlink {
                leads: Leads::Nowhere(e),
                ..
            } => Some(*e),
            _ => None,
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const INSIDE: &str = "(the path resolves as the sandbox sees it)";
        match self {
            Cause::Symlink { at, to, leads, .. } => {
                write!(f, "`{}` is a symlink to `{}`", at.display(), to.display())?;
                match leads {
                    Leads::Nowhere(Errno::NOENT) => {
                        write!(f, ", which does not exist inside the sandbox {INSIDE}")
                    }
                    Leads::Nowhere(Errno::LOOP) => write!(
                        f,
                        ", which loops (or passes too many symlinks) inside the sandbox {INSIDE}"
                    ),
                    Leads::Nowhere(Errno::NOTDIR) => {
                        write!(f, ", which is not a directory inside the sandbox {INSIDE}")
                    }
                    Leads::Nowhere(e) => write!(
                        f,
                        ", which cannot be resolved inside the sandbox ({}) {INSIDE}",
                        crate::probe::names::errno_name(e.raw_os_error())
                    ),
                    Leads::Final => write!(f, ": a mount point is never reached through a symlink"),
                }
            }
            Cause::Kind { at, is, wanted } => {
                write!(f, "`{}` is a {is}, not a {wanted}", at.display())
            }
        }
    }
}

/// A file type as a person names it.
fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of unknown type",
    }
}

impl Root<'_> {
    /// What stands in the way of `rel` (whose final component must be `want`): the first
    /// symlink on the way that does not lead to a directory inside the new root, or at the
    /// end where a directory or file is made, or an entry of the wrong kind. Walks the
    /// components with `openat(O_PATH | O_NOFOLLOW)`, a symlink read with `readlinkat` and
    /// resolved as [`Root::open_dir`] does. `None` when nothing is found (an entry missing
    /// or unreadable, a `..` in `rel`). Only on the error path.
    fn explain(&self, rel: &Path, want: Want) -> Option<Cause> {
        let names: Vec<&std::ffi::OsStr> = rel
            .components()
            .map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let mut dir = Dir::Root(self.fd.as_fd());
        let mut at = PathBuf::from("/");
        for (i, name) in names.iter().enumerate() {
            at.push(name);
            let last = i + 1 == names.len();
            let fd = rustix::fs::openat(
                dir.fd(),
                *name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()?;
            let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd).ok()?.st_mode);
            if kind == FileType::Symlink {
                // A file mount point may be a symlink ([`make_file`]), an opened path is one.
                if last && want != Want::Dir {
                    return None;
                }
                let prefix: PathBuf = names[..=i].iter().collect();
                let leads = match self.open_dir(&prefix) {
                    Ok(_) if last => Leads::Final,
                    // A directory inside: the walk goes on from there.
                    Ok(resolved) => {
                        dir = Dir::Opened(resolved);
                        continue;
                    }
                    Err(e) => Leads::Nowhere(e),
                };
                let to = rustix::fs::readlinkat(&fd, c"", Vec::new()).ok()?;
                let to = PathBuf::from(std::ffi::OsStr::from_bytes(to.as_bytes()));
                let real = (leads != Leads::Nowhere(Errno::LOOP)).then(|| {
                    let rest: PathBuf = names[i + 1..].iter().collect();
                    let base = at.parent().unwrap_or(Path::new("/"));
                    normalize(&base.join(&to).join(rest))
                });
                return Some(Cause::Symlink {
                    at,
                    to,
                    leads,
                    real,
                });
            } else if !last {
                if kind != FileType::Directory {
                    return Some(Cause::Kind {
                        at,
                        is: kind_name(kind),
                        wanted: "directory",
                    });
                }
                dir = Dir::Opened(fd);
            } else {
                return match (want, kind == FileType::Directory) {
                    (Want::Dir, false) => Some(Cause::Kind {
                        at,
                        is: kind_name(kind),
                        wanted: "directory",
                    }),
                    (Want::File, true) => Some(Cause::Kind {
                        at,
                        is: "directory",
                        wanted: "file",
                    }),
                    _ => None,
                };
            }
        }
        None
    }
}

/// `e`, or, when [`Root::explain`] finds what stands in the way of `rel`, a refusal that
/// names it by its path inside (the plan's, as the user wrote it, not the job directory's)
/// and says what to change. Only the errors that a path's entries cause are explained.
fn refusal(root: &Root<'_>, rel: &Path, purpose: Purpose, want: Want, e: SetupError) -> SetupError {
    if e.errno == Errno::ROFS {
        // Nothing can be made inside the read-only system view (/usr, /etc, /opt…): a lent
        // target there that does not exist on the host cannot get a mount point.
        return SetupError {
            step: format!(
                "{} {}: it lies in the sandbox's read-only system view, where nothing new can \
                 be made; choose a target outside the system directories (for example under \
                 /mnt) or one that already exists on the host",
                purpose.noun(),
                Path::new("/").join(rel).display()
            ),
            errno: e.errno,
        };
    }
    if !matches!(
        e.errno,
        Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::ISDIR
    ) {
        return e;
    }
    let Some(cause) = root.explain(rel, want) else {
        return e;
    };
    SetupError {
        step: format!(
            "{} {}: {cause}; {}",
            purpose.noun(),
            Path::new("/").join(rel).display(),
            purpose.fix(&cause)
        ),
        errno: cause.errno().unwrap_or(e.errno),
    }
}

/// `rel`'s parent and final name (`usr/.`: `""` and `usr`); `None` when it ends in no name
/// (`..`, `/`, empty).
fn split(rel: &Path) -> Option<(&Path, &Path)> {
    Some((rel.parent()?, Path::new(rel.file_name()?)))
}

/// A directory under the new root that an entry is made in: the root itself, or one opened
/// on the way.
enum Dir<'a> {
    Root(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl<'a> Dir<'a> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Root(fd) => *fd,
            Dir::Opened(fd) => fd.as_fd(),
        }
    }

    /// Where to attach a mount at `name` in this directory: named in the root's descriptor
    /// (`move_mount` does not follow a final symlink), else opened here without following
    /// it. The path is not resolved a second time.
    fn place(self, name: &'a Path) -> Result<Place<'a>, Errno> {
        match self {
            Dir::Root(fd) => Ok(Place::Named(fd, name)),
            Dir::Opened(dir) => rustix::fs::openat(
                &dir,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map(Place::Opened),
        }
    }
}

/// A mount point: a directory descriptor and a name in it, or a descriptor of the point
/// itself.
#[derive(Debug)]
enum Place<'a> {
    Named(BorrowedFd<'a>, &'a Path),
    Opened(OwnedFd),
}

impl Place<'_> {
    fn at(&self) -> (BorrowedFd<'_>, &Path) {
        match self {
            Place::Named(dir, name) => (*dir, name),
            Place::Opened(fd) => (fd.as_fd(), Path::new("")),
        }
    }
}

/// `move_mount` the detached mount `mnt` onto `name` in `dir` (`""`: onto `dir` itself).
fn attach(mnt: &OwnedFd, (dir, name): (BorrowedFd<'_>, &Path)) -> Result<(), Errno> {
    let mut flags = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH;
    if name.as_os_str().is_empty() {
        flags |= MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH;
    }
    rustix::mount::move_mount(mnt, c"", dir, name, flags)
}

/// `open_tree(OPEN_TREE_CLONE)` of `name` in `dir` (`""`: `dir` itself) and, with
/// `recursive`, every mount below it.
fn clone_tree((dir, name): (BorrowedFd<'_>, &Path), recursive: bool) -> Result<OwnedFd, Errno> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    if name.as_os_str().is_empty() {
        flags |= OpenTreeFlags::AT_EMPTY_PATH;
    }
    rustix::mount::open_tree(dir, name, flags)
}

/// The directory `rel` under the new root (`""`: the root), made with its missing parents:
/// one [`Root::open_dir`] when it exists, as most mount points' parents do.
fn make_dirs<'r>(root: &'r Root<'_>, rel: &Path) -> Result<Dir<'r>, Errno> {
    if rel.as_os_str().is_empty() {
        return Ok(Dir::Root(root.fd.as_fd()));
    }
    match root.open_dir(rel) {
        Err(Errno::NOENT) => {}
        r => return r.map(Dir::Opened),
    }
    let (parent, name) = split(rel).ok_or(Errno::INVAL)?;
    let dir = make_dirs(root, parent)?;
    make_dir(dir.fd(), name)?;
    rustix::fs::openat(
        dir.fd(),
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(Dir::Opened)
}

/// `mkdirat` `name` in `dir`. A directory there already serves; anything else (a symlink
/// too, even to a directory: a mount point is never reached through one) is ENOTDIR.
fn make_dir(dir: BorrowedFd<'_>, name: &Path) -> Result<(), Errno> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
        Err(Errno::EXIST) => {
            let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                Ok(())
            } else {
                Err(Errno::NOTDIR)
            }
        }
        r => r,
    }
}

/// `rel`'s parent and the name of the entry to make there; a path that ends in no name
/// (`..`: the plan's paths are folded where they enter, HOME too) is refused naming it.
fn named(rel: &Path, purpose: Purpose) -> Result<(&Path, &Path), SetupError> {
    split(rel).ok_or_else(|| SetupError {
        step: format!(
            "{} {}: the path ends in `..` (or names no entry) where a mount point is made; give \
             the directory itself, without `..`",
            purpose.noun(),
            Path::new("/").join(rel).display()
        ),
        errno: Errno::INVAL,
    })
}

/// `mkdir -p` under the new root: the parent is reached (made when missing), the directory
/// made by name in it; returns where to mount on it, opened from that parent. A failure
/// that an entry on the way causes names it ([`refusal`]).
fn mkdir_p<'r>(
    root: &'r Root<'_>,
    rel: &'r Path,
    purpose: Purpose,
) -> Result<Place<'r>, SetupError> {
    mount_point(root, rel, purpose, Want::Dir)
}

/// [`mkdir_p`] and [`touch`]: the missing parents of `rel`, then a directory (`Want::Dir`)
/// or a file (otherwise) at its last component, opened from its parent.
fn mount_point<'r>(
    root: &'r Root<'_>,
    rel: &'r Path,
    purpose: Purpose,
    want: Want,
) -> Result<Place<'r>, SetupError> {
    let dir_wanted = matches!(want, Want::Dir);
    let (parent, name) = named(rel, purpose)?;
    let made = || -> Result<Place<'r>, Errno> {
        let dir = make_dirs(root, parent)?;
        if dir_wanted {
            make_dir(dir.fd(), name)?;
        } else {
            make_file(dir.fd(), name)?;
        }
        dir.place(name)
    };
    made().map_err(|e| {
        let verb = if dir_wanted {
            "mkdir"
        } else {
            "create mount point"
        };
        let e = SetupError {
            step: format!("{verb} {}", root.shown(rel).display()),
            errno: e,
        };
        refusal(root, rel, purpose, want, e)
    })
}

/// Create an empty file named `name` in `dir` to bind a file over (`mknodat(S_IFREG)`: no
/// descriptor to close). One that exists already serves, unless it is a directory.
fn make_file(dir: BorrowedFd<'_>, name: &Path) -> Result<(), Errno> {
    match rustix::fs::mknodat(
        dir,
        name,
        FileType::RegularFile,
        Mode::from_raw_mode(0o644),
        0,
    ) {
        Err(Errno::EXIST) => {
            let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                Err(Errno::ISDIR)
            } else {
                Ok(())
            }
        }
        r => r,
    }
}

/// Create an empty file at `rel` under the new root (and its missing parents) to bind a
/// file over; returns where to mount on it, opened from its parent. A failure that an
/// entry on the way causes names it ([`refusal`]).
fn touch<'r>(root: &'r Root<'_>, rel: &'r Path, purpose: Purpose) -> Result<Place<'r>, SetupError> {
    mount_point(root, rel, purpose, Want::File)
}

/// Mount a new tmpfs at `at`; returns the mount's descriptor (its root directory).
fn tmpfs(
    at: (BorrowedFd<'_>, &Path),
    shown: &Path,
    options: &str,
    attrs: MountAttrFlags,
) -> Result<OwnedFd, SetupError> {
    let what = || format!("mount tmpfs on {}", shown.display());
    let fs = rustix::mount::fsopen(c"tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).step(what)?;
    for opt in options.split(',').filter(|o| !o.is_empty()) {
        let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
        rustix::mount::fsconfig_set_string(&fs, k, v).step(what)?;
    }
    rustix::mount::fsconfig_create(&fs).step(what)?;
    let mnt = rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs).step(what)?;
    attach(&mnt, at).step(what)?;
    Ok(mnt)
}

/// `p`, a host path that the plan passes after the cwd moved into the new root, where a
/// relative path would be resolved (the mount sources, the overlay's layers, the system
/// directories, the hidden paths). The plan holds absolute paths only: a relative one is a
/// bug, asserted in debug builds and refused in release ones.
fn host_path<'p>(p: &'p Path, what: &str) -> Result<&'p Path, SetupError> {
    debug_assert!(p.is_absolute(), "{what} {} is not absolute", p.display());
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(SetupError {
            step: format!(
                "{what} {}: not an absolute path, which would be resolved inside the new root \
                 (the plan holds absolute paths only: please report this)",
                p.display()
            ),
            errno: Errno::INVAL,
        })
    }
}

/// Bind the host's `source` (a whole tree) onto `at` with `attrs` set on every mount in it.
fn bind(
    source: &Path,
    at: (BorrowedFd<'_>, &Path),
    shown: &Path,
    attrs: MountAttrFlags,
) -> Result<(), SetupError> {
    let source = host_path(source, "bind source")?;
    let what = || format!("bind {} on {}", source.display(), shown.display());
    let tree = rustix::mount::open_tree(
        CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE,
    )
    .step(what)?;
    if !attrs.is_empty() {
        mount_setattr(tree.as_fd(), attrs, true).step(what)?;
    }
    attach(&tree, at).step(what)
}

/// The read-only path `rel` under the new root, opened without following it. `None` when
/// there is nothing there to protect: absent from the sandbox's view (ENOENT, ENOTDIR) or a
/// symlink (not followed, as nowhere under the new root). Any other error is a refusal (an
/// entry in the way named, [`refusal`]): a requested protection never vanishes silently.
fn read_only_target(root: &Root<'_>, rel: &Path) -> Result<Option<OwnedFd>, SetupError> {
    let err = |e| SetupError {
        step: format!("make {} read-only", root.shown(rel).display()),
        errno: e,
    };
    let fd = match root.open(rel) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(refusal(root, rel, Purpose::ReadOnly, Want::Any, err(e))),
    };
    let st = rustix::fs::fstat(&fd).map_err(err)?;
    Ok((FileType::from_raw_mode(st.st_mode) != FileType::Symlink).then_some(fd))
}

/// Make the mount tree at `at` read-only in place (a recursive bind onto itself).
fn make_read_only(at: (BorrowedFd<'_>, &Path), shown: &Path) -> Result<(), SetupError> {
    let what = || format!("bind {} on {}", shown.display(), shown.display());
    let tree = clone_tree(at, true).step(what)?;
    mount_setattr(tree.as_fd(), RO, true).step(what)?;
    attach(&tree, at).step(what)
}

const RO: MountAttrFlags = MountAttrFlags::MOUNT_ATTR_RDONLY
    .union(MountAttrFlags::MOUNT_ATTR_NOSUID)
    .union(MountAttrFlags::MOUNT_ATTR_NODEV);

/// The attributes of a mask.
const MASK: MountAttrFlags = RO.union(MountAttrFlags::MOUNT_ATTR_NOEXEC);

/// Hides paths under the new root: an empty file for files, an empty read-only tmpfs for
/// directories.
///
/// The empty file is the host's `/dev/null`, bound with [`MASK`]. The first file masked gets
/// a clone of it with the attributes set; every later one a clone of that first mask, which
/// carries the attributes already (one `open_tree` instead of `open_tree` of `/dev/null` and
/// `mount_setattr`: ~11 µs less for /proc's masks; should the kernel refuse the clone, the
/// mask binds `/dev/null` itself). The source is an attached mount, so this works on any
/// kernel with `open_tree` and closing it costs nothing; a detached clone kept
/// as the source (Linux 6.15 lets one be cloned again) would wait for an RCU grace period
/// when closed (~30 µs here), more than the clones save.
#[derive(Default)]
struct Masker {
    null: Option<OwnedFd>,
}

impl Masker {
    /// Hide `name` in `dir` (`""`: `dir` itself). Returns false when there was nothing to
    /// hide (absent, or a symlink: its target is hidden on its own). With `mutant` (a
    /// test-only mutant, [`crate::mutant`]) nothing is mounted but the answer is the same.
    fn mask(
        &mut self,
        at: (BorrowedFd<'_>, &Path),
        shown: &Path,
        mutant: bool,
    ) -> Result<bool, SetupError> {
        let (dir, name) = at;
        let flags = if name.as_os_str().is_empty() {
            AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH
        } else {
            AtFlags::SYMLINK_NOFOLLOW
        };
        let st = match rustix::fs::statat(dir, name, flags) {
            Ok(st) => st,
            Err(Errno::NOENT) | Err(Errno::NOTDIR) | Err(Errno::ACCESS) => return Ok(false),
            Err(e) => {
                return Err(SetupError {
                    step: format!("stat {}", shown.display()),
                    errno: e,
                });
            }
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => Ok(false),
            _ if mutant => Ok(true),
            FileType::Directory => {
                tmpfs(at, shown, "mode=000,size=4k", MASK)?;
                Ok(true)
            }
            _ => {
                let what = || format!("bind /dev/null on {}", shown.display());
                let clone = self
                    .null
                    .as_ref()
                    .map(|first| clone_tree((first.as_fd(), Path::new("")), false));
                let mnt = match clone {
                    Some(Ok(mnt)) => mnt,
                    // No first mask yet, or the kernel refused to clone it: /dev/null itself.
                    _ => {
                        let mnt = rustix::mount::open_tree(
                            CWD,
                            "/dev/null",
                            OpenTreeFlags::OPEN_TREE_CLONE
                                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                                | OpenTreeFlags::AT_RECURSIVE,
                        )
                        .step(what)?;
                        mount_setattr(mnt.as_fd(), MASK, true).step(what)?;
                        mnt
                    }
                };
                attach(&mnt, at).step(what)?;
                if self.null.is_none() {
                    self.null = Some(mnt);
                }
                Ok(true)
            }
        }
    }

    /// Hide `rel` under the new root, reached through [`Root::open`].
    fn mask_path(&mut self, root: &Root<'_>, rel: &Path) -> Result<bool, SetupError> {
        let fd = match root.open(rel) {
            Ok(fd) => fd,
            Err(Errno::NOENT) | Err(Errno::NOTDIR) | Err(Errno::ACCESS) => return Ok(false),
            Err(e) => {
                return Err(SetupError {
                    step: format!("stat {}", root.shown(rel).display()),
                    errno: e,
                });
            }
        };
        let mutant = crate::mutant::active(crate::mutant::SECRET_MASKS);
        self.mask((fd.as_fd(), Path::new("")), &root.shown(rel), mutant)
    }
}

fn observation(mechanism: ControlMechanism, dimension: ControlDimension) -> ControlObservation {
    ControlObservation::new(mechanism, dimension, ControlStatus::Enforced)
}

/// Compose the new root by running `ops` (the plan's [`mount_program`]) one by one: pivot
/// into it, detach the host's root, and read it back. On return the process's root is the
/// composed tree and its cwd is the workdir; the rows are those the program reports.
pub fn compose_and_pivot(
    plan: &FsPlan,
    ops: &[MountOp],
) -> Result<Vec<ControlObservation>, SetupError> {
    let mut c = Composer {
        plan,
        root: None,
        obs: Vec::new(),
        system: Vec::new(),
        read_only: Vec::new(),
        lent: Vec::new(),
        sources: Vec::new(),
        real_dirs: std::collections::HashMap::new(),
        overlay: None,
        devices: Vec::new(),
        proc: None,
        proc_masked: Vec::new(),
        proc_read_only: Vec::new(),
        masker: Masker::default(),
        masked: Vec::new(),
        secrets: Vec::new(),
    };
    for op in ops {
        c.apply(op)?;
    }
    Ok(c.obs)
}

/// The plan's mount program (`SandboxPlan::mount_program`), or the refusal of what it
/// cannot carry, as the step's error.
pub fn program(plan: &cofferdam_policy::plan::SandboxPlan) -> Result<Vec<MountOp>, SetupError> {
    plan.mount_program().map_err(|e| SetupError {
        step: e.to_string(),
        errno: Errno::NOTSUP,
    })
}

/// What the operations of a mount program carry to the next, and to the rows they report.
struct Composer<'a> {
    plan: &'a FsPlan,
    /// The new root, from [`MountOp::RootTmpfs`] on.
    root: Option<Root<'a>>,
    obs: Vec<ControlObservation>,
    /// The system directories bound (or linked).
    system: Vec<String>,
    /// The read-only paths made so.
    read_only: Vec<String>,
    /// The targets of the lent mounts.
    lent: Vec<String>,
    /// Each lent mount's source, target, and where the source really is.
    sources: Vec<(&'a Path, &'a Path, PathBuf)>,
    /// Canonical parents, shared by the lends and the hidden paths ([`real_path`]).
    real_dirs: std::collections::HashMap<PathBuf, Option<PathBuf>>,
    /// The overlay's lower, upper, whether volatile, and its root's mode read back.
    overlay: Option<(&'a Path, &'a Path, bool, u32)>,
    /// The devices bound into /dev.
    devices: Vec<&'a str>,
    /// The new /proc, from [`MountOp::Proc`] on.
    proc: Option<OwnedFd>,
    proc_masked: Vec<String>,
    proc_read_only: Vec<String>,
    masker: Masker,
    /// The hidden paths masked.
    masked: Vec<String>,
    /// Per hidden path, the paths masked for it ([`shows_secret`]).
    secrets: Vec<Vec<PathBuf>>,
}

/// The new root, or the refusal of an operation the program puts before it.
fn need<'r, T>(v: &'r Option<T>, what: &str) -> Result<&'r T, SetupError> {
    v.as_ref().ok_or_else(|| SetupError {
        step: format!(
            "{what}: the mount program puts it before the new root or /proc it needs (please \
             report this)"
        ),
        errno: Errno::INVAL,
    })
}

impl<'a> Composer<'a> {
    /// Apply one operation.
    fn apply(&mut self, op: &'a MountOp) -> Result<(), SetupError> {
        let plan = self.plan;
        let exec_attr = |exec: bool| {
            if exec {
                MountAttrFlags::empty()
            } else {
                MountAttrFlags::MOUNT_ATTR_NOEXEC
            }
        };
        match op {
            MountOp::PrivatePropagation => rustix::mount::mount_change(
                "/",
                MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
            )
            .step(|| "make / private (MS_REC|MS_PRIVATE)".into())?,
            MountOp::RootTmpfs { at } => {
                // The tmpfs's own descriptor is the new root's: every later step works
                // relative to it. The cwd moves there too, for `mount(2)` (no directory
                // descriptor) and `pivot_root`.
                let root = Root {
                    path: at.as_path(),
                    fd: tmpfs(
                        (CWD, at.as_path()),
                        at,
                        "mode=0755",
                        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV,
                    )?,
                };
                rustix::process::fchdir(&root.fd)
                    .step(|| format!("chdir {}", root.path.display()))?;
                self.root = Some(root);
            }
            MountOp::SystemDir { path } => {
                let root = need(&self.root, "system directory")?;
                if system_dir(root, path)? {
                    self.system.push(path.display().to_string());
                }
            }
            MountOp::PrivateTmpfs {
                at,
                mode,
                size,
                exec,
                home,
            } => {
                let root = need(&self.root, "private tmpfs")?;
                let purpose = if *home {
                    Purpose::Home
                } else {
                    Purpose::System
                };
                let target = rel(at);
                let place = mkdir_p(root, target, purpose)?;
                tmpfs(
                    place.at(),
                    &root.shown(target),
                    &format!("mode={mode:04o},size={size}"),
                    MountAttrFlags::MOUNT_ATTR_NOSUID
                        | MountAttrFlags::MOUNT_ATTR_NODEV
                        | exec_attr(*exec),
                )?;
            }
            MountOp::Overlay {
                lower,
                upper,
                work,
                inherited,
                exec,
            } => {
                let root = need(&self.root, "workdir overlay")?;
                let place = mkdir_p(root, rel(lower), Purpose::Workdir)?;
                let layers = Layers {
                    lower,
                    inherited: inherited.as_deref(),
                    upper,
                    work,
                };
                let (volatile, mode) = overlay(&layers, place.at(), exec_attr(*exec))?;
                self.overlay = Some((lower, upper, volatile, mode));
            }
            MountOp::ReadOnly { path } => {
                let root = need(&self.root, "read-only path")?;
                let target = rel(path);
                if let Some(fd) = read_only_target(root, target)? {
                    if !crate::mutant::active(crate::mutant::READ_ONLY_SUBTREE) {
                        make_read_only((fd.as_fd(), Path::new("")), &root.shown(target))?;
                    }
                    self.read_only.push(path.display().to_string());
                }
            }
            MountOp::Bind {
                source,
                target,
                writable,
            } => {
                // Each source is bound as the host resolves it (through symlinks: a
                // workdir's `cache -> ~/.ssh` lends ~/.ssh), so where it really is, asked
                // just before the bind, is what the secrets are checked against.
                let root = need(&self.root, "mount")?;
                let inside = rel(target);
                host_path(source, "mount source")?;
                let st = rustix::fs::stat(source)
                    .step(|| format!("stat mount source {}", source.display()))?;
                let place = if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                    mkdir_p(root, inside, Purpose::Lent)?
                } else {
                    touch(root, inside, Purpose::Lent)?
                };
                let attrs = if *writable {
                    MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV
                } else {
                    RO
                };
                let real = real_path(source, &mut self.real_dirs).unwrap_or(source.clone());
                bind(source, place.at(), &root.shown(inside), attrs)?;
                self.sources.push((source, target, real));
                self.lent.push(target.display().to_string());
            }
            MountOp::Dev {
                devices,
                shm_size,
                exec,
            } => {
                let root = need(&self.root, "/dev")?;
                self.devices = minimal_dev(root, devices, *shm_size, exec_attr(*exec))?;
            }
            MountOp::Proc => {
                let root = need(&self.root, "/proc")?;
                self.proc = Some(new_proc(root)?);
            }
            MountOp::ProcMask { name } => {
                let root = need(&self.root, "/proc mask")?;
                let proc = need(&self.proc, "/proc mask")?;
                let shown = root.shown(Path::new("proc")).join(name);
                let skip = crate::mutant::active(crate::mutant::PROC_MASK);
                if self
                    .masker
                    .mask((proc.as_fd(), Path::new(name)), &shown, skip)?
                {
                    self.proc_masked.push(format!("/proc/{name}"));
                }
            }
            MountOp::ProcReadOnly { name } => {
                let root = need(&self.root, "/proc read-only")?;
                let proc = need(&self.proc, "/proc read-only")?;
                let shown = root.shown(Path::new("proc")).join(name);
                if rustix::fs::statat(proc.as_fd(), name.as_str(), AtFlags::empty()).is_ok() {
                    if !crate::mutant::active(crate::mutant::PROC_MASK) {
                        make_read_only((proc.as_fd(), Path::new(name)), &shown)?;
                    }
                    self.proc_read_only.push(format!("/proc/{name}"));
                }
            }
            MountOp::Hide { path } => {
                // Masked wherever it is visible. A secret that is a symlink (a dotfile
                // manager's `~/.ssh -> dotfiles/ssh`) is hidden at its host target too,
                // which may lie inside a visible tree such as the workdir; its real path is
                // asked of the host, relative to the cwd.
                let root = need(&self.root, "hidden path")?;
                host_path(path, "hidden path")?;
                let mut targets = vec![path.clone()];
                if let Some(real) = real_path(path, &mut self.real_dirs)
                    && real != *path
                {
                    targets.push(real);
                }
                for t in &targets {
                    if self.masker.mask_path(root, rel(t))? {
                        self.masked.push(t.display().to_string());
                    }
                }
                self.secrets.push(targets);
            }
            MountOp::ResolvConf { text } => {
                resolv_conf(need(&self.root, "resolver file")?, text)?;
            }
            MountOp::Pivot => {
                // Enter it (the cwd is the new root since its tmpfs was mounted).
                need(&self.root, "pivot_root")?;
                // The first mask, kept as the source of the others, is closed first.
                self.masker = Masker::default();
                rustix::process::pivot_root(".", ".").step(|| "pivot_root(., .)".into())?;
                rustix::mount::unmount(".", UnmountFlags::DETACH)
                    .step(|| "detach the old root".into())?;
                rustix::process::chdir("/").step(|| "chdir /".into())?;
            }
            MountOp::RootReadOnly => {
                // The root tmpfs itself holds only mount points.
                let root = need(&self.root, "make / read-only")?;
                mount_setattr(root.fd.as_fd(), RO, false).step(|| "make / read-only".into())?;
            }
            MountOp::EnterWorkdir { path } => {
                rustix::process::chdir(path).step(|| format!("chdir {}", path.display()))?;
            }
            MountOp::Report { row } => {
                let o = self.row(*row);
                self.obs.push(o);
            }
            MountOp::ReadBack => {
                let mountinfo = if crate::mutant::active(crate::mutant::MOUNTINFO_UNREAD) {
                    Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
                } else {
                    std::fs::read_to_string("/proc/self/mountinfo")
                };
                match mountinfo {
                    Ok(text) => read_back(&parse_mountinfo(&text), plan, &mut self.obs),
                    Err(e) => not_read_back(&format!("/proc/self/mountinfo: {e}"), &mut self.obs),
                }
            }
        }
        Ok(())
    }

    /// The control row `row`, with what the operations before it did.
    fn row(&self, row: MountRow) -> ControlObservation {
        let plan = self.plan;
        match row {
            MountRow::Mountns => {
                let mut o =
                    observation(ControlMechanism::Mountns, ControlDimension::FilesystemRead);
                o.details.insert("propagation".into(), json!("private"));
                o
            }
            MountRow::Tmpfs => {
                let mut o = observation(ControlMechanism::Tmpfs, ControlDimension::FilesystemWrite);
                o.details
                    .insert("tmp_size_bytes".into(), json!(plan.tmp_size));
                o.details.insert("home".into(), json!("private tmpfs"));
                o.details
                    .insert("private_tmpfs_size".into(), json!(plan.private_tmpfs_size));
                o
            }
            MountRow::Overlay => {
                let mut o =
                    observation(ControlMechanism::Overlay, ControlDimension::FilesystemWrite);
                let (lower, upper, volatile, mode) =
                    self.overlay
                        .unwrap_or((&plan.workdir, &plan.upper, false, 0));
                o.details.insert("lower".into(), json!(lower));
                // A fork's layer, mounted with the others (the mount took it).
                if let (Some(layer), Some(_)) = (&plan.inherited, &self.overlay) {
                    o.details.insert("inherited".into(), json!(layer));
                }
                o.details.insert("upper".into(), json!(upper));
                o.details
                    .insert("workdir_mode".into(), json!(format!("{mode:04o}")));
                o.details.insert("volatile".into(), json!(volatile));
                o
            }
            MountRow::PivotRoot => {
                let mut o = observation(
                    ControlMechanism::PivotRoot,
                    ControlDimension::FilesystemWrite,
                );
                o.details
                    .insert("system_read_only".into(), json!(self.system));
                o.details.insert("read_only".into(), json!(self.read_only));
                o.details.insert("mounts".into(), json!(self.lent));
                o
            }
            MountRow::MinimalDev => {
                let mut o = observation(
                    ControlMechanism::MinimalDev,
                    ControlDimension::KernelSurface,
                );
                o.details.insert("devices".into(), json!(self.devices));
                o.details.insert("devpts".into(), json!("newinstance"));
                o
            }
            MountRow::ProcMask => {
                let mut o =
                    observation(ControlMechanism::ProcMask, ControlDimension::KernelSurface);
                o.details.insert("masked".into(), json!(self.proc_masked));
                o.details
                    .insert("read_only".into(), json!(self.proc_read_only));
                o
            }
            MountRow::SecretsHidden => self.secrets_row(),
        }
    }

    /// `secrets_hidden`: the masks made, and any secret a lent mount shows.
    fn secrets_row(&self) -> ControlObservation {
        let mut o = observation(
            ControlMechanism::SecretsHidden,
            ControlDimension::FilesystemRead,
        );
        o.details.insert("masked".into(), json!(self.masked));
        o.details
            .insert("hidden".into(), json!(self.plan.hidden.len()));
        // A secret lent on purpose (`--mount ~/.aws:/creds:read`), or through a symlink
        // (`--mount ./cache:/cache` with `cache -> ~/.ssh`), is visible at its target: the
        // control then holds only partly, and says which, and where the source really is.
        let lent: Vec<String> = self
            .sources
            .iter()
            .filter(|(_, target, real)| shows_secret(real, target, &self.secrets))
            .map(|(source, target, real)| {
                let resolves = if real == source {
                    String::new()
                } else {
                    format!(" (resolves to {})", real.display())
                };
                format!("{}{resolves} -> {}", source.display(), target.display())
            })
            .collect();
        if !lent.is_empty() {
            o.status = ControlStatus::Partial;
            o.reason = Some(format!(
                "secret paths lent by a mount are visible: {}",
                lent.join(", ")
            ));
            o.details.insert("lent".into(), json!(lent));
        }
        o
    }
}

/// The host's system directory `dir` in the new root: bound read-only, or a symlink of the
/// same text when the host's is one. False when left out (absent, or of another kind).
fn system_dir(root: &Root<'_>, dir: &Path) -> Result<bool, SetupError> {
    let dir = host_path(dir, "system directory")?;
    let Ok(st) = rustix::fs::lstat(dir) else {
        return Ok(false);
    };
    let target = rel(dir);
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {
            let link = rustix::fs::readlink(dir, Vec::new())
                .step(|| format!("readlink {}", dir.display()))?;
            symlink_in(root, link.as_c_str(), target)
                .step(|| format!("symlink {}", root.shown(target).display()))?;
        }
        FileType::Directory => {
            let place = mkdir_p(root, target, Purpose::System)?;
            let attrs = if crate::mutant::active(crate::mutant::SYSTEM_READ_ONLY) {
                RO.difference(MountAttrFlags::MOUNT_ATTR_RDONLY)
            } else {
                RO
            };
            bind(dir, place.at(), &root.shown(target), attrs)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The detail keys each mount row records its read-back under.
const READ_BACK_KEYS: [(ControlMechanism, &[&str]); 5] = [
    (
        ControlMechanism::Tmpfs,
        &["size_read_back", "home_size_bytes", "tmp_size_read_back"],
    ),
    (
        ControlMechanism::MinimalDev,
        &["size_read_back", "shm_size_bytes"],
    ),
    (ControlMechanism::PivotRoot, &["read_only_read_back"]),
    (ControlMechanism::ProcMask, &["read_back"]),
    (ControlMechanism::SecretsHidden, &["read_back"]),
];

/// The composed root could not be read back (`why`): every row whose evidence is that
/// reading says `unknown` with its read-back keys `null`; a row already `failed` (a secret
/// lent by a mount) stays so. The mounts were made, but nothing shows that they hold.
fn not_read_back(why: &str, obs: &mut [ControlObservation]) {
    for o in obs.iter_mut() {
        let Some((_, keys)) = READ_BACK_KEYS.iter().find(|(m, _)| *m == o.mechanism) else {
            continue;
        };
        for key in *keys {
            o.details.insert((*key).into(), serde_json::Value::Null);
        }
        unknown(
            o,
            format!(
                "not read back ({why}): the mounts were made but nothing shows they hold, so \
                 the run is refused; check that the sandbox's /proc is readable \
                 (`cofferdam doctor`)"
            ),
        );
    }
}

/// Mark `o` as not read back, saying `why` after any reason it has; `failed` stays `failed`.
fn unknown(o: &mut ControlObservation, why: String) {
    if o.status == ControlStatus::Failed {
        return;
    }
    o.status = ControlStatus::Unknown;
    o.add_reason(why);
}

/// The mounts of a `/proc/self/mountinfo` text, in order (the one parser).
fn parse_mountinfo(text: &str) -> Vec<MountLine> {
    crate::probe::mountinfo::parse(text)
}

/// The `size=` of the tmpfs mounted last at `point` (another mount may cover it: a home
/// lent at its own path, the workdir overlay when the workdir is home), in bytes (the
/// kernel shows it with a `k` suffix); `None` when no tmpfs is there or it has no size.
fn tmpfs_size(mounts: &[MountLine], point: &Path) -> Option<u64> {
    let m = mounts
        .iter()
        .rev()
        .find(|m| m.point == point && m.fstype == "tmpfs")?;
    let v = m
        .super_options
        .split(',')
        .find_map(|o| o.strip_prefix("size="))?;
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let n: u64 = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// The composed root as the kernel shows it, read back after the pivot: the tmpfs sizes
/// go into the `tmpfs` and `minimal_dev` observations as read (null when unreadable, and
/// the observation is then partial), every mask must be a mount point, or
/// `secrets_hidden` is failed and names the ones missing, and every read-only bind must
/// read back read-only ([`read_only_back`]).
fn read_back(mounts: &[MountLine], plan: &FsPlan, obs: &mut [ControlObservation]) {
    let home_covered = plan.workdir == plan.home;
    for o in obs.iter_mut() {
        match o.mechanism {
            ControlMechanism::Tmpfs => {
                let home = tmpfs_size(mounts, &plan.home);
                let tmp = tmpfs_size(mounts, Path::new("/tmp"));
                o.details.insert("home_size_bytes".into(), json!(home));
                o.details.insert("tmp_size_read_back".into(), json!(tmp));
                // HOME's tmpfs is under the workdir overlay when the workdir is HOME.
                let home_ok = home_covered || home.is_some();
                let tmp_ok = tmp.is_some();
                if !(home_ok && tmp_ok) {
                    unknown(
                        o,
                        "a private tmpfs's size could not be read back from mountinfo".into(),
                    );
                }
                let home = home.filter(|_| !home_covered);
                let wrong: Vec<String> = [("/tmp", tmp), ("HOME", home)]
                    .into_iter()
                    .filter_map(|(what, read)| size_mismatch(what, read, plan.private_tmpfs_size))
                    .collect();
                fail_unless_read_back(o, "size_read_back", "private tmpfs sizes", wrong);
            }
            ControlMechanism::MinimalDev => {
                let shm = tmpfs_size(mounts, Path::new("/dev/shm"));
                o.details.insert("shm_size_bytes".into(), json!(shm));
                if shm.is_none() {
                    unknown(
                        o,
                        "the private /dev/shm's size could not be read back".into(),
                    );
                }
                let wrong = size_mismatch("/dev/shm", shm, plan.private_tmpfs_size);
                fail_unless_read_back(
                    o,
                    "size_read_back",
                    "/dev/shm size",
                    wrong.into_iter().collect(),
                );
            }
            ControlMechanism::PivotRoot => read_only_back(mounts, o),
            ControlMechanism::ProcMask => proc_mask_back(mounts, o),
            ControlMechanism::SecretsHidden => {
                let masked: Vec<String> = o
                    .details
                    .get("masked")
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default();
                let missing: Vec<String> = masked
                    .into_iter()
                    .filter(|p| !mounts.iter().any(|m| m.point == Path::new(p)))
                    .collect();
                o.details
                    .insert("read_back".into(), json!(missing.is_empty()));
                if !missing.is_empty() {
                    // A secret left visible: the control is not in place (the init refuses).
                    o.status = ControlStatus::Failed;
                    let why = format!(
                        "masks not found in mountinfo after the pivot: {}",
                        missing.join(", ")
                    );
                    o.add_reason(why);
                }
            }
            _ => {}
        }
    }
}

/// What reading a path's mount for read-only found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReadOnly {
    /// `ro` in mountinfo and `ST_RDONLY` in `statvfs`.
    Yes,
    /// It reads back writable: the reading, named.
    Writable(String),
    /// It could not be read (the path, its mount or `statvfs`): why, named.
    Unread(String),
}

/// Whether `path` (inside the new root) lies on a read-only mount, read two ways: the
/// per-mount options of the last mountinfo line whose mount point contains it (its real
/// path: a system symlink such as `/bin` is read where it leads), and `statvfs`'s
/// `ST_RDONLY`.
fn reads_read_only(mounts: &[MountLine], path: &Path) -> ReadOnly {
    let real = match std::fs::canonicalize(path) {
        Ok(real) => real,
        Err(e) => return ReadOnly::Unread(format!("{}: {e}", path.display())),
    };
    let Some(line) = mounts.iter().rev().find(|m| real.starts_with(&m.point)) else {
        return ReadOnly::Unread(format!("{}: no mount in mountinfo", path.display()));
    };
    if !line.options.split(',').any(|o| o == "ro") {
        return ReadOnly::Writable(format!(
            "{} is mounted {} at {} in mountinfo",
            path.display(),
            line.options,
            line.point.display()
        ));
    }
    let statvfs = if crate::mutant::active(crate::mutant::STATVFS_UNREAD) {
        Err(Errno::ACCESS)
    } else {
        rustix::fs::statvfs(&real)
    };
    match statvfs {
        Err(e) => ReadOnly::Unread(format!("statvfs {}: {e}", path.display())),
        Ok(vfs) if !vfs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) => {
            ReadOnly::Writable(format!("statvfs {} lacks ST_RDONLY", path.display()))
        }
        Ok(_) => ReadOnly::Yes,
    }
}

/// The largest page the kernel may round a tmpfs `size=` up to (64 KiB pages on some
/// arm64 and ppc64 kernels).
const MAX_PAGE: u64 = 64 << 10;

/// A tmpfs size read back (`Some`) that is not the planned one (the kernel rounds it up to
/// whole pages: anything from `planned` to less than a largest page more is it); named
/// with both sizes. Nothing read is not a mismatch (the row is `partial` for that already).
fn size_mismatch(what: &str, read: Option<u64>, planned: u64) -> Option<String> {
    read.filter(|r| !(planned..planned.saturating_add(MAX_PAGE)).contains(r))
        .map(|r| format!("{what} reads back {r} bytes in mountinfo, planned {planned}"))
}

/// The paths listed under `key` in an observation's details.
fn detail_paths(o: &ControlObservation, key: &str) -> Vec<String> {
    o.details
        .get(key)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

/// The new /proc's masks read back: every masked path must be a mount point in mountinfo
/// and every read-only directory must read back read-only, or `proc_mask` is `failed`
/// (`unknown` when one could not be read).
fn proc_mask_back(mounts: &[MountLine], o: &mut ControlObservation) {
    let mut wrong: Vec<String> = detail_paths(o, "masked")
        .into_iter()
        .filter(|p| !mounts.iter().any(|m| m.point == Path::new(p)))
        .map(|p| format!("{p} is not a mount point in mountinfo"))
        .collect();
    let (writable, unread) = not_read_only(mounts, o, "read_only");
    wrong.extend(writable);
    unread_read_only(o, unread);
    fail_unless_read_back(o, "read_back", "/proc masks read back missing", wrong);
}

/// The composed root's read-only binds read back: every `system_read_only` and `read_only`
/// path of the `pivot_root` observation must read back read-only, or it is `failed`
/// (`unknown` when one could not be read).
fn read_only_back(mounts: &[MountLine], o: &mut ControlObservation) {
    let (mut wrong, mut unread) = (Vec::new(), Vec::new());
    for key in ["system_read_only", "read_only"] {
        let (w, u) = not_read_only(mounts, o, key);
        wrong.extend(w);
        unread.extend(u);
    }
    unread_read_only(o, unread);
    fail_unless_read_back(
        o,
        "read_only_read_back",
        "read-only binds read back writable",
        wrong,
    );
}

/// Paths whose read-only flag could not be read make `o` `unknown`, naming them.
fn unread_read_only(o: &mut ControlObservation, unread: Vec<String>) {
    if !unread.is_empty() {
        unknown(
            o,
            format!(
                "read-only not read back ({}): nothing shows these binds are read-only, so \
                 the run is refused; check that the sandbox's /proc is readable \
                 (`cofferdam doctor`)",
                unread.join("; ")
            ),
        );
    }
}

/// The paths under `key` in `o`'s details that read back writable, and those that could
/// not be read, each named.
fn not_read_only(
    mounts: &[MountLine],
    o: &ControlObservation,
    key: &str,
) -> (Vec<String>, Vec<String>) {
    let (mut writable, mut unread) = (Vec::new(), Vec::new());
    for p in detail_paths(o, key) {
        match reads_read_only(mounts, Path::new(&p)) {
            ReadOnly::Yes => {}
            ReadOnly::Writable(w) => writable.push(w),
            ReadOnly::Unread(u) => unread.push(u),
        }
    }
    (writable, unread)
}

/// Record the read-back in `o` as `key`; anything `wrong` makes it `failed`, saying `what`.
/// A reading already `unknown` (a size not found) leaves `key` `null` when nothing is wrong.
fn fail_unless_read_back(o: &mut ControlObservation, key: &str, what: &str, wrong: Vec<String>) {
    let read = if o.status == ControlStatus::Unknown && wrong.is_empty() {
        serde_json::Value::Null
    } else {
        json!(wrong.is_empty())
    };
    o.details.insert(key.into(), read);
    if !wrong.is_empty() {
        o.status = ControlStatus::Failed;
        o.reason = Some(format!("{what}: {}", wrong.join("; ")));
    }
}

/// Whether a mount of the host's `real` (a lent source where it really is) at `target`
/// shows a secret that the masks do not cover. `secrets`: per hidden path, the paths
/// masked for it, itself and its real path when that differs (where its content is).
///
/// Both ways: the source lies in a secret (all of the mount is secret), or a secret lies
/// under the source (it shows at the same place under the target). It is covered when it
/// shows at or under a masked path: a secret lent at its own path, or a parent lent at its
/// own. Compared lexically, real paths against real paths: a remapped target, or a source
/// reached through a symlink, is never taken for its own path.
fn shows_secret(real: &Path, target: &Path, secrets: &[Vec<PathBuf>]) -> bool {
    secrets.iter().any(|masked| {
        let covered = |at: &Path| masked.iter().any(|m| at.starts_with(m));
        masked.iter().any(|secret| {
            if real.starts_with(secret) {
                !covered(target)
            } else if let Ok(below) = secret.strip_prefix(real) {
                !covered(&target.join(below))
            } else {
                false
            }
        })
    })
}

/// `symlink` `target` (the link's text) at `rel` under the new root, made by name in its
/// parent.
fn symlink_in(root: &Root<'_>, target: &CStr, rel: &Path) -> Result<(), Errno> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(Errno::INVAL);
    };
    if parent.as_os_str().is_empty() {
        rustix::fs::symlinkat(target, &root.fd, name)
    } else {
        rustix::fs::symlinkat(target, root.open_dir(parent)?, name)
    }
}

/// Where `path` really is (`canonicalize`), with the canonical parent directories
/// remembered in `dirs`: the hidden paths share a few parents (home, `~/.config`, `/etc`), and
/// only a path that is itself a symlink needs resolving whole. `None` when it does not
/// exist.
fn real_path(
    path: &Path,
    dirs: &mut std::collections::HashMap<PathBuf, Option<PathBuf>>,
) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return std::fs::canonicalize(path).ok();
    };
    if meta.file_type().is_symlink() {
        return std::fs::canonicalize(path).ok();
    }
    let real_parent = dirs
        .entry(parent.to_path_buf())
        .or_insert_with(|| std::fs::canonicalize(parent).ok())
        .clone()?;
    Some(real_parent.join(name))
}

/// The name of the resolver file written to the root tmpfs, bound, and unlinked.
const RESOLV_SOURCE: &str = ".cofferdam-resolv.conf";

/// Show `text` as `/etc/resolv.conf` inside (`allow` mode: the sandbox's own resolver).
/// When the host's `/etc/resolv.conf` is a symlink (systemd-resolved's stub), the file is
/// bound where the link points, created in the root's tmpfs when that lies outside the
/// system view. The source is written to the root tmpfs, bound read-only, and unlinked.
fn resolv_conf(root: &Root<'_>, text: &str) -> Result<(), SetupError> {
    let etc = Path::new("/etc/resolv.conf");
    let inside = match rustix::fs::readlink(etc, Vec::new()) {
        Ok(link) => {
            let link = PathBuf::from(std::ffi::OsStr::from_bytes(link.as_bytes()));
            normalize(&Path::new("/etc").join(link))
        }
        Err(_) => etc.to_path_buf(),
    };
    let target = rel(&inside);
    let shown = root.shown(target);
    let source = root.shown(Path::new(RESOLV_SOURCE));
    let what = || format!("bind {} on {}", source.display(), shown.display());
    let place = if root.open_follow(target).is_ok() {
        Place::Opened(root.open(target).step(what)?)
    } else {
        touch(root, target, Purpose::Resolver)?
    };
    let write = || -> std::io::Result<()> {
        let fd = rustix::fs::openat(
            &root.fd,
            RESOLV_SOURCE,
            OFlags::CREATE | OFlags::WRONLY | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )?;
        std::fs::File::from(fd).write_all(text.as_bytes())
    };
    write().map_err(|e| SetupError {
        step: format!("write {}", source.display()),
        errno: Errno::from_io_error(&e).unwrap_or(Errno::IO),
    })?;
    let file = clone_tree((root.fd.as_fd(), Path::new(RESOLV_SOURCE)), true).step(what)?;
    mount_setattr(file.as_fd(), RO, true).step(what)?;
    attach(&file, place.at()).step(what)?;
    rustix::fs::unlinkat(&root.fd, RESOLV_SOURCE, AtFlags::empty())
        .step(|| format!("unlink {}", source.display()))
}

/// Mount the workdir overlay at `at` (its place under the new root); returns whether it is
/// `volatile`, and the mode its root shows (read back).
///
/// The overlay's root shows the upper's attributes, and the job made `upper/` 0700: before
/// the mount the upper gets the lower's permission bits, so the workdir keeps its mode
/// inside, and a `chmod` of the workdir itself lands on the upper's root, where the seal
/// finds it (change path `.`).
///
/// `volatile` (Linux 5.10+; without it the mount goes on as before) skips the overlay's
/// syncs: the unmount at the end of every run would otherwise flush the whole filesystem
/// holding the stage, every dirty page of every program on it (measured: a `/bin/true` run
/// took 160 ms with 400 MB of unrelated dirty data, 6 ms without), and an `fsync` inside
/// the sandbox becomes a no-op. The stage was never durable across a host crash (a crash
/// mid-run leaves the job interrupted), and its work directory, where the kernel marks a
/// volatile overlay, is removed when the run ends and never mounted again.
///
/// A fork's inherited layer goes between the upper and the workdir (`lowerdir+` names the
/// topmost lower layer first): its whiteouts and opaque directories hide the host's entries
/// as they hid them in the parent's stage, and the kernel never writes it.
fn overlay(
    layers: &Layers<'_>,
    at: (BorrowedFd<'_>, &Path),
    exec: MountAttrFlags,
) -> Result<(bool, u32), SetupError> {
    let Layers {
        lower,
        inherited,
        upper,
        work,
    } = *layers;
    let what = || format!("mount workdir overlay on {}", lower.display());
    // Its layers are named by path, resolved from the cwd (the new root) when relative.
    let lower = host_path(lower, "overlay lowerdir")?;
    let inherited = inherited
        .map(|p| host_path(p, "overlay inherited lowerdir"))
        .transpose()?;
    let upper = host_path(upper, "overlay upperdir")?;
    let work = host_path(work, "overlay workdir")?;
    let root_mode = keep_root_mode(lower, upper).step(|| {
        format!(
            "give the stage {} the mode of the workdir {}",
            upper.display(),
            lower.display()
        )
    })?;
    let fs = rustix::mount::fsopen(c"overlay", FsOpenFlags::FSOPEN_CLOEXEC).step(what)?;
    if let Some(layer) = inherited {
        rustix::mount::fsconfig_set_string(&fs, c"lowerdir+", layer).step(what)?;
    }
    rustix::mount::fsconfig_set_string(&fs, c"lowerdir+", lower).step(what)?;
    rustix::mount::fsconfig_set_string(&fs, c"upperdir", upper).step(what)?;
    rustix::mount::fsconfig_set_string(&fs, c"workdir", work).step(what)?;
    rustix::mount::fsconfig_set_flag(&fs, c"userxattr").step(what)?;
    // An unknown option is refused at once (EINVAL), before anything is mounted.
    let volatile = rustix::mount::fsconfig_set_flag(&fs, c"volatile").is_ok();
    rustix::mount::fsconfig_create(&fs).step(what)?;
    let mnt = rustix::mount::fsmount(
        &fs,
        FsMountFlags::FSMOUNT_CLOEXEC,
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV | exec,
    )
    .step(what)?;
    attach(&mnt, at).step(what)?;
    Ok((volatile, root_mode))
}

/// The directories of the workdir overlay.
#[derive(Clone, Copy)]
struct Layers<'a> {
    /// The host workdir, the bottom layer.
    lower: &'a Path,
    /// A fork's inherited layer, above it.
    inherited: Option<&'a Path>,
    /// The stage.
    upper: &'a Path,
    /// The overlay's work directory.
    work: &'a Path,
}

/// Set the permission bits of `upper` (the job's, a directory) to those of `lower`; returns
/// them as read back from `upper`.
fn keep_root_mode(lower: &Path, upper: &Path) -> Result<u32, Errno> {
    let want = rustix::fs::stat(lower)?.st_mode & 0o7777;
    let fd = rustix::fs::open(
        upper,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(want))?;
    Ok(rustix::fs::fstat(&fd)?.st_mode & 0o7777)
}

/// The minimal `/dev`: the harmless devices bound from the host, a new devpts instance,
/// and a private `/dev/shm` of `shm_size` bytes (nosuid, nodev; noexec unless the
/// workdir may execute, `exec`, as /tmp and HOME: an executable shm adds nothing when /tmp
/// is executable, and must not be a way around `workdir_exec = false`).
fn minimal_dev<'d>(
    root: &Root<'_>,
    devices: &'d [String],
    shm_size: u64,
    exec: MountAttrFlags,
) -> Result<Vec<&'d str>, SetupError> {
    let shown = |name: &str| root.shown(Path::new("dev")).join(name);
    mkdir_p(root, Path::new("dev"), Purpose::System)?;
    let dev = tmpfs(
        (root.fd.as_fd(), Path::new("dev")),
        &root.shown(Path::new("dev")),
        "mode=0755",
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
    )?;
    let mut bound = Vec::new();
    for name in devices {
        let name = name.as_str();
        let host = Path::new("/dev").join(name);
        let what = || format!("bind {} on {}", host.display(), shown(name).display());
        // A device the host lacks is left out.
        let tree = match rustix::mount::open_tree(
            CWD,
            &host,
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_RECURSIVE,
        ) {
            Ok(tree) => tree,
            Err(Errno::NOENT) | Err(Errno::NOTDIR) | Err(Errno::ACCESS) => continue,
            Err(e) => return Err(e).step(what),
        };
        make_file(dev.as_fd(), Path::new(name))
            .step(|| format!("create mount point {}", shown(name).display()))?;
        mount_setattr(
            tree.as_fd(),
            MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
            true,
        )
        .step(what)?;
        attach(&tree, (dev.as_fd(), Path::new(name))).step(what)?;
        bound.push(name);
    }
    rustix::fs::mkdirat(&dev, "pts", Mode::from_raw_mode(0o755))
        .step(|| format!("mkdir {}", shown("pts").display()))?;
    // `mount(2)` has no directory descriptor: the path is relative to the cwd, the new root.
    rustix::mount::mount(
        "devpts",
        "dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0666,mode=0620",
    )
    .step(|| "mount devpts".into())?;
    rustix::fs::symlinkat("pts/ptmx", &dev, "ptmx").step(|| "symlink /dev/ptmx".into())?;
    rustix::fs::mkdirat(&dev, "shm", Mode::from_raw_mode(0o755))
        .step(|| format!("mkdir {}", shown("shm").display()))?;
    tmpfs(
        (dev.as_fd(), Path::new("shm")),
        &shown("shm"),
        &format!("mode=1777,size={shm_size}"),
        MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV | exec,
    )?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        rustix::fs::symlinkat(target, &dev, name).step(|| format!("symlink /dev/{name}"))?;
    }
    mount_setattr(dev.as_fd(), MountAttrFlags::MOUNT_ATTR_RDONLY, false)
        .step(|| "make /dev read-only".into())?;
    Ok(bound)
}

/// A new /proc (from inside the pid namespace), opened for its masks.
fn new_proc(root: &Root<'_>) -> Result<OwnedFd, SetupError> {
    mkdir_p(root, Path::new("proc"), Purpose::System)?;
    // `mount(2)` has no directory descriptor: the path is relative to the cwd, the new root.
    rustix::mount::mount(
        "proc",
        "proc",
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        c"",
    )
    .step(|| "mount a new /proc".into())?;
    rustix::fs::openat(
        &root.fd,
        "proc",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .step(|| format!("open {}", root.shown(Path::new("proc")).display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A directory standing in for the new root (no mount needed: only resolution and
    /// creation are exercised), and a directory outside it.
    struct Fixture {
        _tmp: tempfile::TempDir,
        root_path: PathBuf,
        outside: PathBuf,
    }

    impl Fixture {
        fn new() -> Self {
            let tmp = tempfile::tempdir().unwrap();
            let root_path = tmp.path().join("root");
            let outside = tmp.path().join("outside");
            std::fs::create_dir_all(root_path.join("work")).unwrap();
            std::fs::create_dir_all(outside.join("dir")).unwrap();
            std::fs::write(outside.join("secret"), "s").unwrap();
            Fixture {
                _tmp: tmp,
                root_path,
                outside,
            }
        }

        fn root(&self) -> Root<'_> {
            let fd = rustix::fs::open(
                &self.root_path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            Root {
                path: &self.root_path,
                fd,
            }
        }
    }

    #[test]
    fn host_paths_become_relative() {
        assert_eq!(rel(Path::new("/etc/shadow")), Path::new("etc/shadow"));
        assert_eq!(rel(Path::new("tmp")), Path::new("tmp"));
        assert_eq!(normalize(Path::new("/etc/../run/./x")), Path::new("/run/x"));
    }

    #[test]
    fn symlinks_and_dotdot_resolve_inside_the_new_root() {
        let f = Fixture::new();
        // An absolute symlink and a climbing relative one, as a lower tree could hold them.
        symlink(&f.outside, f.root_path.join("work/abs")).unwrap();
        symlink("../../../outside", f.root_path.join("work/rel")).unwrap();
        let root = f.root();
        for p in ["work/abs/secret", "work/rel/secret", "../outside/secret"] {
            assert_eq!(root.open(Path::new(p)).unwrap_err(), Errno::NOENT, "{p}");
        }
        // The absolute link resolves as it will after the pivot: inside the root.
        std::fs::create_dir_all(f.root_path.join(rel(&f.outside))).unwrap();
        std::fs::write(f.root_path.join(rel(&f.outside)).join("secret"), "inside").unwrap();
        let fd = root.open(Path::new("work/abs/secret")).unwrap();
        let inside = rustix::fs::fstat(&fd).unwrap();
        let real = rustix::fs::stat(f.outside.join("secret")).unwrap();
        assert_ne!(inside.st_ino, real.st_ino);
        // The final component is not followed.
        let fd = root.open(Path::new("work/abs")).unwrap();
        let st = rustix::fs::fstat(&fd).unwrap();
        assert_eq!(FileType::from_raw_mode(st.st_mode), FileType::Symlink);
    }

    #[test]
    fn mkdir_p_and_touch_never_create_outside_the_new_root() {
        let f = Fixture::new();
        symlink(f.outside.join("dir"), f.root_path.join("work/link")).unwrap();
        let root = f.root();
        let lent = Purpose::Lent;
        mkdir_p(&root, Path::new("a/b/c"), lent).unwrap();
        assert!(f.root_path.join("a/b/c").is_dir());
        mkdir_p(&root, Path::new("a/b/c"), lent).unwrap();
        touch(&root, Path::new("a/x/file"), lent).unwrap();
        assert!(f.root_path.join("a/x/file").is_file());
        touch(&root, Path::new("a/x/file"), lent).unwrap();
        // Through the link: the target does not exist inside, and nothing appears outside.
        for p in ["work/link/new", "work/link/sub/lent"] {
            assert!(mkdir_p(&root, Path::new(p), lent).is_err(), "{p}");
        }
        assert!(touch(&root, Path::new("work/link/file"), lent).is_err());
        assert_eq!(std::fs::read_dir(f.outside.join("dir")).unwrap().count(), 0);
    }

    #[test]
    fn a_refusal_names_what_stands_in_the_way_by_its_path_inside_and_the_fix() {
        let f = Fixture::new();
        let o = f.outside.display();
        let w = f.root_path.join("work");
        symlink(f.outside.join("dir"), w.join("link")).unwrap();
        symlink("../../../outside", w.join("rel")).unwrap();
        symlink("loop", w.join("loop")).unwrap();
        std::fs::write(w.join("f"), "").unwrap();
        std::fs::create_dir(w.join("real")).unwrap();
        symlink("/work/real", w.join("d")).unwrap();
        std::fs::create_dir(f.root_path.join("a")).unwrap();
        symlink("/a", w.join("ok")).unwrap();
        symlink("/nowhere", f.root_path.join("a/bad")).unwrap();
        let root = f.root();
        let inside = "(the path resolves as the sandbox sees it)";
        let lend = "or choose a target without symlinks";
        let refused = |p: &str, purpose, dir: bool| {
            let e = if dir {
                mkdir_p(&root, Path::new(p), purpose).unwrap_err()
            } else {
                touch(&root, Path::new(p), purpose).unwrap_err()
            };
            (e.step, e.errno)
        };
        // An absolute symlink to a host directory that does not exist inside: named by the
        // path the user wrote, with where it really leads.
        assert_eq!(
            refused("work/link/sub/lent", Purpose::Lent, true),
            (
                format!(
                    "mount target /work/link/sub/lent: `/work/link` is a symlink to `{o}/dir`, \
                     which does not exist inside the sandbox {inside}; lend at the real path \
                     (`{o}/dir/sub/lent`), {lend}"
                ),
                Errno::NOENT
            )
        );
        assert_eq!(
            refused("work/link/lent", Purpose::Lent, false),
            (
                format!(
                    "mount target /work/link/lent: `/work/link` is a symlink to `{o}/dir`, \
                     which does not exist inside the sandbox {inside}; lend at the real path \
                     (`{o}/dir/lent`), {lend}"
                ),
                Errno::NOENT
            )
        );
        // A relative one climbing out, for HOME and the workdir.
        assert_eq!(
            refused("work/rel/x", Purpose::Home, true),
            (
                format!(
                    "HOME /work/rel/x: `/work/rel` is a symlink to `../../../outside`, which \
                     does not exist inside the sandbox {inside}; set HOME to its real path \
                     (`realpath \"$HOME\"`)"
                ),
                Errno::NOENT
            )
        );
        let (step, _) = refused("work/rel", Purpose::Workdir, true);
        assert!(
            step.starts_with("workdir /work/rel: `/work/rel` is a symlink")
                && step.ends_with("give the workdir by its real path (`realpath`)"),
            "{step}"
        );
        // A loop.
        assert_eq!(
            refused("work/loop/x", Purpose::Lent, true),
            (
                format!(
                    "mount target /work/loop/x: `/work/loop` is a symlink to `loop`, which loops \
                     (or passes too many symlinks) inside the sandbox {inside}; lend at the real \
                     path, {lend}"
                ),
                Errno::LOOP
            )
        );
        // A symlink that leads inside is followed on the way; the next one is named.
        let (step, errno) = refused("work/ok/bad/x", Purpose::Lent, true);
        assert!(
            step.starts_with(
                "mount target /work/ok/bad/x: `/work/ok/bad` is a symlink to `/nowhere`, which"
            ) && step.contains("(`/nowhere/x`)"),
            "{step}"
        );
        assert_eq!(errno, Errno::NOENT);
        mkdir_p(&root, Path::new("work/d/x"), Purpose::Lent).unwrap();
        assert!(w.join("real/x").is_dir());
        // At the end, a symlink is never a directory mount point, even to a directory.
        assert_eq!(
            refused("work/d", Purpose::Lent, true),
            (
                format!(
                    "mount target /work/d: `/work/d` is a symlink to `/work/real`: a mount point \
                     is never reached through a symlink; lend at the real path (`/work/real`), \
                     {lend}"
                ),
                Errno::NOTDIR
            )
        );
        // Entries of the wrong kind, at the end or on the way.
        assert_eq!(
            refused("work/f", Purpose::Lent, true),
            (
                "mount target /work/f: `/work/f` is a regular file, not a directory; choose \
                 another target"
                    .to_owned(),
                Errno::NOTDIR
            )
        );
        assert_eq!(
            refused("work/f/x", Purpose::Workdir, true),
            (
                "workdir /work/f/x: `/work/f` is a regular file, not a directory; choose a \
                 directory as the workdir"
                    .to_owned(),
                Errno::NOTDIR
            )
        );
        assert_eq!(
            refused("work/real", Purpose::Lent, false),
            (
                "mount target /work/real: `/work/real` is a directory, not a file; choose \
                 another target"
                    .to_owned(),
                Errno::ISDIR
            )
        );
        // Nothing was made outside, nor through the links.
        assert_eq!(std::fs::read_dir(f.outside.join("dir")).unwrap().count(), 0);
        assert!(!f.root_path.join("nowhere").exists());
    }

    #[test]
    fn a_mount_point_ending_in_dotdot_is_refused_naming_it() {
        let f = Fixture::new();
        let root = f.root();
        let e = mkdir_p(&root, Path::new("work/.."), Purpose::Home).unwrap_err();
        assert_eq!(e.errno, Errno::INVAL);
        assert!(
            e.step.starts_with("HOME /work/..: the path ends in `..`"),
            "{}",
            e.step
        );
        let e = touch(&root, Path::new(""), Purpose::Lent).unwrap_err();
        assert!(e.step.starts_with("mount target /: "), "{}", e.step);
    }

    #[test]
    fn a_read_only_path_is_skipped_only_when_absent_or_a_symlink() {
        let f = Fixture::new();
        let w = f.root_path.join("work");
        symlink(f.outside.join("dir"), w.join("link")).unwrap();
        symlink("loop", w.join("loop")).unwrap();
        std::fs::write(w.join("f"), "").unwrap();
        std::fs::create_dir(w.join("locked")).unwrap();
        let root = f.root();
        for p in ["work/none", "work/link/x", "work/f/x", "work/link"] {
            assert!(
                read_only_target(&root, Path::new(p)).unwrap().is_none(),
                "{p}"
            );
        }
        let fd = read_only_target(&root, Path::new("work/locked")).unwrap();
        let ino = rustix::fs::stat(w.join("locked")).unwrap().st_ino;
        assert_eq!(rustix::fs::fstat(fd.unwrap()).unwrap().st_ino, ino);
        // Any other error refuses the run, naming the cause.
        let e = read_only_target(&root, Path::new("work/loop/x")).unwrap_err();
        assert_eq!(e.errno, Errno::LOOP);
        assert!(
            e.step.starts_with(
                "read-only path /work/loop/x: `/work/loop` is a symlink to `loop`, which loops"
            ) && e.step.ends_with(
                "name a path without symlinks with --read-only (or the manifest's read_only)"
            ),
            "{}",
            e.step
        );
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "bind source usr is not absolute")
    )]
    fn a_relative_host_path_is_never_resolved_inside_the_new_root() {
        let f = Fixture::new();
        let root = f.root();
        assert_eq!(
            host_path(Path::new("/usr"), "x").unwrap(),
            Path::new("/usr")
        );
        // Refused before any syscall (a debug build asserts).
        let e = bind(
            Path::new("usr"),
            (root.fd.as_fd(), Path::new("work")),
            Path::new("/work"),
            RO,
        )
        .unwrap_err();
        assert_eq!(e.errno, Errno::INVAL);
        assert!(
            e.step.starts_with("bind source usr: not an absolute path"),
            "{}",
            e.step
        );
    }

    #[test]
    fn a_lent_secret_is_shown_unless_at_a_masked_path() {
        let p = |s: &str| PathBuf::from(s);
        let secrets = vec![
            vec![p("/h/.aws")],
            // `~/.ssh -> dotfiles/ssh`: masked at both.
            vec![p("/h/.ssh"), p("/h/dotfiles/ssh")],
            vec![p("/store")],
        ];
        let shows =
            |real: &str, target: &str| shows_secret(Path::new(real), Path::new(target), &secrets);
        // A secret lent at another target, or a tree holding one; the store too.
        assert!(shows("/h/.aws", "/creds"));
        assert!(shows("/h/.aws/credentials", "/creds"));
        assert!(shows("/h", "/home-copy"));
        assert!(shows("/h/dotfiles", "/dots"));
        assert!(shows("/", "/host"));
        assert!(shows("/store/jobs", "/jobs"));
        // `./cache -> ~/.ssh` lent as /cache, or at its own (symlink's) path: its real path
        // is the secret's, the target no masked path.
        assert!(shows("/h/dotfiles/ssh", "/cache"));
        assert!(shows("/h/dotfiles/ssh", "/w/cache"));
        // At its own path, or a parent at its own: the masks cover it.
        assert!(!shows("/h/.aws", "/h/.aws"));
        assert!(!shows("/h", "/h"));
        assert!(!shows("/h/dotfiles", "/h/dotfiles"));
        assert!(!shows("/h/dotfiles/ssh", "/h/.ssh"));
        // Nothing secret in it.
        assert!(!shows("/data", "/data"));
        assert!(!shows("/h/project", "/p"));
        assert!(!shows("/h/.aws-not", "/x"));
    }

    #[test]
    fn symlinks_are_made_by_name_in_their_parent() {
        let f = Fixture::new();
        let root = f.root();
        symlink_in(&root, c"usr/bin", Path::new("bin")).unwrap();
        symlink_in(&root, c"/proc/self/fd", Path::new("work/fd")).unwrap();
        assert_eq!(
            std::fs::read_link(f.root_path.join("bin")).unwrap(),
            Path::new("usr/bin")
        );
        assert_eq!(
            std::fs::read_link(f.root_path.join("work/fd")).unwrap(),
            Path::new("/proc/self/fd")
        );
    }

    #[test]
    fn a_single_component_is_named_a_longer_path_opened_from_its_parent() {
        let f = Fixture::new();
        let root = f.root();
        assert!(matches!(
            mkdir_p(&root, Path::new("tmp"), Purpose::System).unwrap(),
            Place::Named(_, n) if n == Path::new("tmp")
        ));
        assert!(matches!(
            mkdir_p(&root, Path::new("work/."), Purpose::System).unwrap(),
            Place::Named(_, n) if n == Path::new("work")
        ));
        assert!(matches!(
            touch(&root, Path::new("file"), Purpose::Lent).unwrap(),
            Place::Named(_, n) if n == Path::new("file")
        ));
        let ino = |p: &str| rustix::fs::stat(f.root_path.join(p)).unwrap().st_ino;
        for (place, made) in [
            (
                mkdir_p(&root, Path::new("a/b"), Purpose::Lent).unwrap(),
                "a/b",
            ),
            (
                mkdir_p(&root, Path::new("work/../work"), Purpose::Lent).unwrap(),
                "work",
            ),
            (
                touch(&root, Path::new("a/b/f"), Purpose::Lent).unwrap(),
                "a/b/f",
            ),
        ] {
            assert_eq!(place.at().1, Path::new(""), "{made}");
            assert_eq!(rustix::fs::fstat(place.at().0).unwrap().st_ino, ino(made));
        }
        // A final symlink is opened, not followed.
        symlink(f.outside.join("secret"), f.root_path.join("work/ln")).unwrap();
        let place = touch(&root, Path::new("work/ln"), Purpose::Lent).unwrap();
        let st = rustix::fs::fstat(place.at().0).unwrap();
        assert_eq!(FileType::from_raw_mode(st.st_mode), FileType::Symlink);
    }

    #[test]
    fn mountinfo_is_read_back_for_sizes_and_masks() {
        let text = "\
22 1 0:20 / / ro,nosuid,nodev - tmpfs none rw,mode=755
23 22 0:21 / /tmp rw,nosuid,nodev - tmpfs none rw,size=1024k,mode=1777
24 22 0:22 / /home/u\\040x rw - tmpfs none rw,size=1048576k,mode=700
25 22 0:5 /null /home/u\\040x/.npmrc ro - devtmpfs udev rw,size=4k
26 22 0:23 / /dev/shm rw - tmpfs none rw,size=2g
garbage line
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 5);
        assert_eq!(m[0].options, "ro,nosuid,nodev");
        assert_eq!(m[1].options, "rw,nosuid,nodev");
        assert_eq!(tmpfs_size(&m, Path::new("/tmp")), Some(1 << 20));
        assert_eq!(tmpfs_size(&m, Path::new("/home/u x")), Some(1 << 30));
        assert_eq!(tmpfs_size(&m, Path::new("/dev/shm")), Some(2 << 30));
        assert_eq!(tmpfs_size(&m, Path::new("/")), None);
        assert_eq!(tmpfs_size(&m, Path::new("/home/u x/.npmrc")), None);
        let tmpfs = observation(ControlMechanism::Tmpfs, ControlDimension::FilesystemWrite);
        let dev = observation(
            ControlMechanism::MinimalDev,
            ControlDimension::KernelSurface,
        );
        let mut o = observation(
            ControlMechanism::SecretsHidden,
            ControlDimension::FilesystemRead,
        );
        o.details.insert(
            "masked".into(),
            json!(["/home/u x/.npmrc", "/home/u x/.vault-token"]),
        );
        let plan = FsPlan {
            new_root: "/r".into(),
            system_ro: vec![],
            workdir: "/w".into(),
            upper: "/u".into(),
            overlay_work: "/o".into(),
            inherited: None,
            read_only: vec![],
            home: "/home/u x".into(),
            mounts: vec![],
            hidden: vec![],
            tmp_size: None,
            private_tmpfs_size: 1 << 30,
            workdir_exec: true,
            resolv_conf: None,
        };
        let mut obs = vec![o, tmpfs, dev];
        read_back(&m, &plan, &mut obs);
        assert_eq!(obs[0].status, ControlStatus::Failed);
        let reason = obs[0].reason.clone().unwrap_or_default();
        assert!(reason.contains("/home/u x/.vault-token"), "{reason}");
        assert!(!reason.contains(".npmrc"), "{reason}");
        // Planned 1 GiB each: /tmp reads 1 MiB and /dev/shm 2 GiB, HOME as planned.
        for (o, bad, good) in [(&obs[1], "/tmp", "HOME"), (&obs[2], "/dev/shm", "")] {
            assert_eq!(o.status, ControlStatus::Failed, "{o:?}");
            let reason = o.reason.clone().unwrap_or_default();
            assert!(reason.contains(bad), "{reason}");
            assert!(good.is_empty() || !reason.contains(good), "{reason}");
        }
        assert_eq!(size_mismatch("x", Some(1 << 30), 1 << 30), None);
        assert_eq!(size_mismatch("x", None, 1 << 30), None);
        assert_eq!(size_mismatch("x", Some(8192), 4097), None);
        assert!(size_mismatch("x", Some(4096), 4097).is_some());
    }

    #[test]
    fn an_unreadable_mountinfo_leaves_every_mount_row_unknown_not_failed() {
        let mut lent = observation(
            ControlMechanism::SecretsHidden,
            ControlDimension::FilesystemRead,
        );
        lent.status = ControlStatus::Failed;
        let mut obs = vec![
            observation(
                ControlMechanism::PivotRoot,
                ControlDimension::FilesystemWrite,
            ),
            observation(ControlMechanism::Tmpfs, ControlDimension::FilesystemWrite),
            observation(ControlMechanism::ProcMask, ControlDimension::KernelSurface),
            lent,
            observation(ControlMechanism::Mountns, ControlDimension::FilesystemRead),
        ];
        not_read_back("/proc/self/mountinfo: EACCES", &mut obs);
        for o in &obs[..3] {
            assert_eq!(o.status, ControlStatus::Unknown, "{o:?}");
            let reason = o.reason.clone().unwrap_or_default();
            assert!(reason.contains("/proc/self/mountinfo: EACCES"), "{reason}");
        }
        assert_eq!(
            obs[0].details["read_only_read_back"],
            serde_json::Value::Null
        );
        assert_eq!(obs[1].details["size_read_back"], serde_json::Value::Null);
        // A reading that had already failed keeps saying so; a row read otherwise is left.
        assert_eq!(obs[3].status, ControlStatus::Failed);
        assert_eq!(obs[4].status, ControlStatus::Enforced);
        // A read-only directory that cannot be read is unknown; one found writable fails.
        let m = parse_mountinfo("22 1 0:5 / / rw - tmpfs none rw\n");
        assert!(matches!(
            reads_read_only(&m, Path::new("/nonexistent-cofferdam-path")),
            ReadOnly::Unread(_)
        ));
        assert!(matches!(
            reads_read_only(&m, Path::new("/")),
            ReadOnly::Writable(_)
        ));
        let mut o = observation(ControlMechanism::ProcMask, ControlDimension::KernelSurface);
        o.details
            .insert("read_only".into(), json!(["/nonexistent-cofferdam-path"]));
        proc_mask_back(&m, &mut o);
        assert_eq!(o.status, ControlStatus::Unknown, "{o:?}");
        assert_eq!(o.details["read_back"], serde_json::Value::Null);
    }

    #[test]
    fn a_proc_mask_missing_from_mountinfo_fails_the_row() {
        let m = parse_mountinfo(
            "22 1 0:5 / /proc rw,nosuid - proc proc rw\n\
             23 22 0:6 / /proc/keys ro,nosuid - devtmpfs udev rw\n",
        );
        let mut o = observation(ControlMechanism::ProcMask, ControlDimension::KernelSurface);
        o.details
            .insert("masked".into(), json!(["/proc/keys", "/proc/kcore"]));
        proc_mask_back(&m, &mut o);
        assert_eq!(o.status, ControlStatus::Failed);
        let reason = o.reason.clone().unwrap_or_default();
        assert!(reason.contains("/proc/kcore"), "{reason}");
        assert!(!reason.contains("/proc/keys"), "{reason}");
        o.details.insert("masked".into(), json!(["/proc/keys"]));
        o.status = ControlStatus::Enforced;
        proc_mask_back(&m, &mut o);
        assert_eq!(o.status, ControlStatus::Enforced);
    }

    #[test]
    fn nothing_to_mask_is_not_masked() {
        let f = Fixture::new();
        symlink(&f.outside, f.root_path.join("work/abs")).unwrap();
        let root = f.root();
        let mut masker = Masker::default();
        // Absent (also behind a link leading nowhere inside), or a symlink: no mount tried.
        for p in ["work/none", "work/abs/secret", "work/abs", "nodir/x"] {
            assert!(!masker.mask_path(&root, Path::new(p)).unwrap(), "{p}");
        }
        assert!(masker.null.is_none());
    }
}
