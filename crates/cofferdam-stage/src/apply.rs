//! The apply engine: write selected staged changes into the host workdir, refusing on
//! conflicts, never through a symlink, and so that a crash at any instant leaves each path
//! wholly old or wholly new (DESIGN.md §5).
//!
//! Owns the check ([`check`]: conflicts, refusals, the plan of [`Unit`]s), the batch
//! ([`execute`]) and crash recovery ([`inspect`], [`recover`]). It reads the stage
//! (`upper/`) and the host through directory fds (`fsops`); it writes only the host
//! workdir (temporary names `.cofferdam-<batch>-<n>` next to their targets) and the
//! job's `apply-ledger.json` (through [`crate::ledger`]). It may not change the stage, the
//! Run Bundle, `job.json` or the trace: the CLI does that with what this module returns.
//!
//! # Units
//!
//! The selected changes are grouped into units, one per top-level target path: a staged
//! directory that is new, replaces a non-directory, or replaces a host directory whole
//! (opaque) is built complete under a temporary name and moved into place in one rename,
//! with every selected staged entry inside it; a file, symlink or special file is one
//! temporary object and one rename; a deletion renames the object aside (it is removed
//! after the commit); a directory whose permission bits changed is one `fchmod`. Replacing
//! an existing object is a `renameat2(RENAME_EXCHANGE)`: the old object then sits at the
//! temporary name and is removed after the commit, so releasing old inodes (which can wait
//! on the device, e.g. online discard) happens outside the commit and on several threads.
//! Where the filesystem cannot exchange, a non-directory is renamed over; a directory on
//! either side is renamed aside first, and recovery moves it back if the crash fell between
//! the two renames.
//!
//! # The batch
//!
//! 1. The ledger records the batch (`preparing`) with every temporary name.
//! 2. Every temporary object is created and filled (content, mode without setuid/setgid,
//!    mtime; for root, the owner of the object it replaces). One `syncfs`.
//! 3. The ledger records `committing` with the identity (dev, inode) of each prepared
//!    object.
//! 4. Renames, unlinks and chmods, in path order (chmods deepest first, last). One
//!    `syncfs`.
//! 5. Displaced old objects are removed, several at once (then a `syncfs` when there were
//!    any), and the ledger records the paths as applied and forgets the batch.
//!
//! A crash before 3 leaves nothing visible: recovery removes the temporary objects. After
//! 3, recovery tells each op's outcome from identities alone (the target is the prepared
//! object: written; the target is still the old object: not written), records the written
//! paths as applied and the rest as pending, removes leftovers, and the next apply redoes
//! the pending paths with a fresh conflict check. A crash after 5 is finished.
//!
//! # What is and is not carried
//!
//! Content, permission bits (setuid/setgid stripped from files and special files;
//! directories keep setgid and sticky), access and modification times, symlink targets
//! verbatim. Not carried: owners (the applying user owns what it writes; root keeps the
//! owner of a replaced object), extended attributes and ACLs. A modified file is replaced
//! by a new inode, so other hard links to the old file keep the old content.
//!
//! Permission bits come from the seal's record (what the review showed), not from the
//! staged inode, which the seal may have lent its owner read access (`chmod 0` stages).
//!
//! When the stage and the workdir are on one filesystem, a staged regular file is
//! hard-linked into place instead of copied (no new inode, no data copy), once every
//! extended attribute on it (the command's `user.*` names, an ACL, a file capability) is
//! removed — one that cannot be removed means a copy — and unless its setuid/setgid bits
//! must be dropped, its inode's mode is not the recorded one or, for root, an owner kept:
//! the applied file then shares its inode with the stage's copy until the job is dropped.
//! Only an inode with no other name is linked: one with more (a checkpoint's or a fork's
//! entry, [`crate::checkpoint`], or the command's own hard links) is copied, so no host file
//! shares an inode with a checkpoint. Elsewhere (`EXDEV`, or a link refused) the content is
//! copied into a new file, by data range so holes stay holes ([`crate::sparse::copy_file`]).

use crate::fsops;

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use cofferdam_record::bundle::{ChangeEntryType, ChangeKind};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Timespec, Timestamps};
use rustix::io::Errno;

use crate::conflict::{ConflictReason, compare, is_forced};
use crate::fingerprint::{Ctime, Fingerprint, FingerprintError, HostRoot, HostState};
use crate::ledger::{
    Action, Batch, FileId, Ledger, LedgerError, LedgerOp, PartialHunks, Phase, RelPath,
};
use crate::review::Stage;
use crate::select::ancestors;

/// setuid and setgid.
const SUID_SGID: u32 = 0o6000;

/// The prefix of every temporary name the engine creates in the workdir.
pub const TMP_PREFIX: &str = ".cofferdam-";

/// How many parent directory handles are kept open at once.
const PARENT_CACHE: usize = 256;

/// Apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The workdir cannot be opened.
    #[error("cannot open the workdir {}: {source}; the job applies to that directory, restore it or drop the job", .path.display())]
    Target {
        /// The workdir.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The stage cannot be opened.
    #[error("cannot open the stage {}: {source}", .path.display())]
    Upper {
        /// The upper directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A staged entry is not what the seal recorded.
    #[error(
        "{path}: the staged entry is {found}, but the seal recorded {expected}; the stage was \
         changed after the run: drop the job"
    )]
    StageChanged {
        /// The change, for display.
        path: String,
        /// What is there.
        found: &'static str,
        /// What the seal recorded.
        expected: &'static str,
    },
    /// Reading a staged entry failed.
    #[error("cannot read the staged {path}: {source}")]
    StageIo {
        /// The change, for display.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A write in the workdir failed.
    #[error("cannot {action} {path} in the workdir: {source}")]
    Write {
        /// What was being done.
        action: &'static str,
        /// The host path, for display.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A directory was replaced while the batch ran.
    #[error(
        "{path}: the directory was moved or replaced on the host while the apply ran; \
         nothing more was written there"
    )]
    Moved {
        /// The directory, for display.
        path: String,
    },
    /// Other content was asked for a change that is not a modified file on its own.
    #[error(
        "{path}: only a modified text file can be applied by hunks or merged; apply it \
         whole"
    )]
    NotRewritable {
        /// The change, for display.
        path: String,
    },
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Inspecting the host failed.
    #[error(transparent)]
    Host(#[from] FingerprintError),
    /// The batch failed part-way; recovery recorded what was written.
    #[error(
        "{cause}; {written} path(s) of this apply were written and {pending} remain staged: \
         fix the cause and run `cofferdam apply` again to finish"
    )]
    Incomplete {
        /// What failed.
        cause: Box<ApplyError>,
        /// Paths written.
        written: usize,
        /// Paths left pending.
        pending: usize,
    },
}

fn write_err<'a>(action: &'static str, path: &'a [u8]) -> impl FnOnce(Errno) -> ApplyError + 'a {
    move |e| ApplyError::Write {
        action,
        path: show(path),
        source: fsops::io_err(e),
    }
}

fn show(path: &[u8]) -> String {
    if path.is_empty() {
        ".".to_owned()
    } else {
        crate::seal::display_path(path).0
    }
}

/// What kind of object a unit writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    /// A regular file.
    File,
    /// A directory (built whole with the selected entries inside).
    Dir,
    /// A symbolic link, recreated verbatim.
    Symlink,
    /// A device node, fifo or socket.
    Special,
}

/// A staged entry as found in the upper at check time.
#[derive(Debug, Clone, Copy)]
struct UpperEntry {
    what: What,
    /// The staged object's type bits with the permission bits the seal recorded (what the
    /// review showed; the seal may have lent the owner read access on the inode since).
    st_mode: u32,
    /// The inode's own permission bits now.
    inode_perm: u32,
    rdev: u64,
    times: (Timespec, Timespec),
}

impl UpperEntry {
    fn perm(&self) -> u32 {
        self.st_mode & 0o7777
    }

    /// The permission bits written: setuid/setgid dropped except on directories.
    fn written_perm(&self) -> u32 {
        match self.what {
            What::Dir => self.perm(),
            _ => self.perm() & !SUID_SGID,
        }
    }
}

/// Options of an apply.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--force` paths (target-relative): conflicts at or beneath them are overridden.
    pub force: Vec<Vec<u8>>,
    /// Recreate device nodes, fifos and sockets.
    pub allow_special: bool,
    /// Modified files written with other content than the staged file, by change index.
    pub rewrite: HashMap<usize, Rewrite>,
}

/// A modified file written with other content than the staged one: the host file with
/// some of the staged hunks (`crate::hunk`), or a merge (`crate::merge`). It is written
/// as a staged file is (a new inode renamed into place, through the ledger), without
/// hard-linking the staged file.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// The content written.
    pub bytes: Vec<u8>,
    /// The host file the content was made from (a merge's "ours"): the conflict check
    /// wants the host in this state instead of the seal's. `None`: the usual check.
    pub against: Option<HostState>,
    /// Hunks: the file keeps the host's permission bits and stays staged with these
    /// applied. `None`: the change counts as applied (a merge) and gets the staged bits.
    pub partial: Option<PartialHunks>,
}

/// A conflict found by [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The change's index in the stage.
    pub index: usize,
    /// The path, for display.
    pub display: String,
    /// Why.
    pub reason: ConflictReason,
    /// Whether `--force` can override it.
    pub forceable: bool,
}

/// A staged entry refused by policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The change's index.
    pub index: usize,
    /// The path, for display.
    pub display: String,
    /// What it is (`fifo`, `socket`, `character device`, …).
    pub what: &'static str,
}

/// A file whose setuid/setgid bits are not carried over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripped {
    /// The change's index.
    pub index: usize,
    /// The path, for display.
    pub display: String,
    /// The staged bits.
    pub from: u32,
    /// The bits written.
    pub to: u32,
}

/// One top-level write of a batch.
#[derive(Debug, Clone)]
pub struct Unit {
    /// The change at the unit's path.
    pub index: usize,
    /// Every change the unit applies: its own first, then (for a directory written whole)
    /// the entries inside it, parents before children.
    pub covers: Vec<usize>,
    /// What happens; `None` when nothing needs doing (a deletion already done on the host).
    pub action: Option<Action>,
    /// What is written (puts only).
    pub what: Option<What>,
    /// The host object acted on, as found by the check.
    old_id: Option<FileId>,
    /// Its owner (uid, gid), for root to keep on a replacement.
    old_owner: Option<(u32, u32)>,
    /// For a chmod: the permission bits.
    mode: Option<u32>,
}

/// The outcome of [`check`]: the plan, and whatever stops it.
#[derive(Debug, Clone, Default)]
pub struct Checked {
    /// The units, in commit order of their paths.
    pub units: Vec<Unit>,
    /// Conflicts that stop the batch.
    pub conflicts: Vec<Conflict>,
    /// Conflicts overridden by `--force`.
    pub forced: Vec<Conflict>,
    /// Git indexes the host rewrote (a `git status` does) that are taken from the stage
    /// instead of conflicting ([`crate::conflict::git_index_taken`]): tell the user.
    pub git_index_taken: Vec<Conflict>,
    /// Staged special files refused (no `--allow-special`).
    pub refusals: Vec<Refusal>,
    /// Files whose setuid/setgid bits are dropped.
    pub stripped: Vec<Stripped>,
    upper: HashMap<usize, UpperEntry>,
    rewrite: HashMap<usize, Rewrite>,
}

impl Checked {
    /// Whether the batch must be refused.
    pub fn refused(&self) -> bool {
        !self.conflicts.is_empty() || !self.refusals.is_empty()
    }

    /// Every change index the plan applies, ascending.
    pub fn indices(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .units
            .iter()
            .flat_map(|u| u.covers.iter().copied())
            .collect();
        v.sort_unstable();
        v
    }
}

/// A point in the batch, for progress and for tests that simulate a crash there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// This many temporary objects are complete.
    Prepared(usize),
    /// The ledger says `committing`.
    Committing,
    /// This many ops took effect.
    Committed(usize),
    /// Everything is flushed; leftovers are next.
    Synced,
    /// Leftovers removed; the ledger is next.
    Cleaned,
}

/// What a finished batch did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The change indices now applied, ascending.
    pub applied: Vec<usize>,
    /// The change indices written with some of their hunks, which stay staged.
    pub partial: Vec<usize>,
}

/// The open roots.
struct Roots {
    target: OwnedFd,
    host: HostRoot,
    upper: Option<OwnedFd>,
    /// Whether staged files may be hard-linked into place (cleared on the first `EXDEV`).
    links: std::cell::Cell<bool>,
}

impl Roots {
    fn open(target: &Path, upper: Option<&Path>) -> Result<Roots, ApplyError> {
        let t = rustix::fs::open(
            target,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| ApplyError::Target {
            path: target.to_path_buf(),
            source: fsops::io_err(e),
        })?;
        let host = HostRoot::open(target).map_err(|e| match e {
            FingerprintError::Io { source, .. } => ApplyError::Target {
                path: target.to_path_buf(),
                source,
            },
            other => ApplyError::Host(other),
        })?;
        let upper = match upper {
            None => None,
            Some(u) => Some(
                rustix::fs::open(
                    u,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| ApplyError::Upper {
                    path: u.to_path_buf(),
                    source: fsops::io_err(e),
                })?,
            ),
        };
        Ok(Roots {
            target: t,
            host,
            upper,
            links: std::cell::Cell::new(true),
        })
    }

    fn upper(&self) -> BorrowedFd<'_> {
        self.upper.as_ref().map_or(self.target.as_fd(), AsFd::as_fd)
    }

    /// `syncfs` of the workdir's filesystem.
    fn sync(&self, target: &Path) -> Result<(), ApplyError> {
        rustix::fs::openat(
            &self.target,
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .and_then(rustix::fs::syncfs)
        .map_err(|e| ApplyError::Write {
            action: "flush",
            path: target.display().to_string(),
            source: fsops::io_err(e),
        })
    }
}

/// Directory handles by relative path, opened beneath the root, a bounded number at once.
struct Parents<'r> {
    root: BorrowedFd<'r>,
    open: HashMap<Vec<u8>, (OwnedFd, FileId)>,
}

impl<'r> Parents<'r> {
    fn new(root: BorrowedFd<'r>) -> Self {
        Parents {
            root,
            open: HashMap::new(),
        }
    }

    fn get(&mut self, rel: &[u8]) -> Result<(BorrowedFd<'_>, FileId), Errno> {
        if !self.open.contains_key(rel) {
            if self.open.len() >= PARENT_CACHE {
                self.open.clear();
            }
            let fd = fsops::open_dir(self.root, rel)?;
            let id = fsops::id_of(fd.as_fd())?;
            self.open.insert(rel.to_vec(), (fd, id));
        }
        match self.open.get(rel) {
            Some((fd, id)) => Ok((fd.as_fd(), *id)),
            None => Err(Errno::NOENT),
        }
    }
}

fn type_word_of(what: What) -> &'static str {
    match what {
        What::File => "file",
        What::Dir => "directory",
        What::Symlink => "symlink",
        What::Special => "special file",
    }
}

fn expected_what(t: Option<ChangeEntryType>) -> Option<What> {
    Some(match t? {
        ChangeEntryType::File => What::File,
        ChangeEntryType::Directory => What::Dir,
        ChangeEntryType::Symlink => What::Symlink,
        ChangeEntryType::Other => What::Special,
    })
}

fn special_word(st_mode: u32) -> &'static str {
    match FileType::from_raw_mode(st_mode) {
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

/// Read one staged entry's facts from the upper, checking it is what the seal recorded.
fn upper_entry(
    upper: BorrowedFd<'_>,
    path: &[u8],
    display: &str,
    expected: Option<ChangeEntryType>,
    recorded_mode: Option<u32>,
) -> Result<UpperEntry, ApplyError> {
    let stage_io = |e: Errno| ApplyError::StageIo {
        path: display.to_owned(),
        source: fsops::io_err(e),
    };
    let fd = fsops::open_beneath(upper, path, OFlags::PATH).map_err(stage_io)?;
    let st = rustix::fs::fstat(&fd).map_err(stage_io)?;
    let what = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => What::File,
        FileType::Directory => What::Dir,
        FileType::Symlink => What::Symlink,
        _ => What::Special,
    };
    let want = expected_what(expected);
    if want != Some(what) {
        return Err(ApplyError::StageChanged {
            path: display.to_owned(),
            found: type_word_of(what),
            expected: want.map_or("a deletion", type_word_of),
        });
    }
    let ts = |sec: i64, nsec: u64| Timespec {
        tv_sec: sec,
        tv_nsec: i64::try_from(nsec).unwrap_or(0),
    };
    let perm = recorded_mode.map_or(st.st_mode & 0o7777, |m| m & 0o7777);
    Ok(UpperEntry {
        what,
        st_mode: (st.st_mode & !0o7777) | perm,
        inode_perm: st.st_mode & 0o7777,
        rdev: st.st_rdev,
        times: (
            ts(st.st_atime, st.st_atime_nsec as u64),
            ts(st.st_mtime, st.st_mtime_nsec as u64),
        ),
    })
}

/// Whether a change is written as a whole directory tree.
fn is_tree(kind: ChangeKind, new_is_dir: bool) -> bool {
    new_is_dir
        && matches!(
            kind,
            ChangeKind::Added | ChangeKind::TypeChanged | ChangeKind::Opaque
        )
}

/// Compare paths component by component (`a/b` before `a.txt`): parents come right before
/// their entries.
fn by_components(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.split(|&c| c == b'/').cmp(b.split(|&c| c == b'/'))
}

/// Group the selected changes into units. `selection` is ascending (path order).
fn units_of(stage: &Stage, selection: &[usize]) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    // Unit roots that swallow the entries beneath them: path → unit position.
    let mut roots: HashMap<&[u8], usize> = HashMap::new();
    for &i in selection {
        let c = &stage.changes[i];
        let owner = ancestors(&c.path).find_map(|a| roots.get(a).copied());
        if let Some(u) = owner {
            units[u].covers.push(i);
            continue;
        }
        if is_tree(c.kind, c.new_is_dir()) || c.kind == ChangeKind::Deleted {
            roots.insert(&c.path, units.len());
        }
        units.push(Unit {
            index: i,
            covers: vec![i],
            action: None,
            what: None,
            old_id: None,
            old_owner: None,
            mode: None,
        });
    }
    for u in &mut units {
        if u.covers.len() > 2 {
            let rest = u.covers.split_off(1);
            let mut rest = rest;
            rest.sort_by(|&a, &b| by_components(&stage.changes[a].path, &stage.changes[b].path));
            u.covers.extend(rest);
        }
    }
    units
}

/// Check a selection against the host as it is now, and plan it (see the module docs).
/// `selection` holds indices into `stage.changes`, ascending. Nothing is written.
pub fn check(
    target: &Path,
    upper: &Path,
    stage: &Stage,
    selection: &[usize],
    opts: &Options,
) -> Result<Checked, ApplyError> {
    let roots = Roots::open(target, Some(upper))?;
    let mut out = Checked {
        units: units_of(stage, selection),
        rewrite: opts.rewrite.clone(),
        ..Checked::default()
    };
    for &i in opts.rewrite.keys() {
        let own_unit = out.units.iter().any(|u| u.index == i && u.covers == [i]);
        let c = stage.changes.get(i);
        let file = c.is_some_and(|c| {
            c.kind == ChangeKind::Modified
                && c.old_type == Some(ChangeEntryType::File)
                && c.new_type == Some(ChangeEntryType::File)
        });
        if !own_unit || !file {
            return Err(ApplyError::NotRewritable {
                path: c.map_or_else(String::new, |c| c.display.clone()),
            });
        }
    }
    let run_start = stage.run_started_at_unix_ms;
    let mut parents = Parents::new(roots.target.as_fd());
    let mut conflicts: Vec<Conflict> = Vec::new();
    let is_root = rustix::process::geteuid().is_root();
    for unit in &mut out.units {
        let c = &stage.changes[unit.index];
        let (parent_rel, name) = fsops::split(&c.path);
        // The parent must be a real directory beneath the root, now.
        let parent = match parents.get(parent_rel) {
            Ok((fd, _)) => fd,
            Err(e) => {
                conflicts.push(Conflict {
                    index: unit.index,
                    display: c.display.clone(),
                    reason: parent_problem(roots.target.as_fd(), parent_rel, e),
                    forceable: false,
                });
                continue;
            }
        };
        let old = fsops::stat_name(parent, name).map_err(|e| ApplyError::Write {
            action: "inspect",
            path: c.display.clone(),
            source: fsops::io_err(e),
        })?;
        if let Some(st) = &old {
            unit.old_id = Some(FileId {
                dev: st.st_dev,
                ino: st.st_ino,
            });
            if is_root {
                unit.old_owner = Some((st.st_uid, st.st_gid));
            }
        }
        // Every covered change: the staged side, then the host side against the record.
        let mut unit_host = HostState::Absent;
        for &i in &unit.covers {
            let ch = &stage.changes[i];
            if ch.kind != ChangeKind::Deleted {
                let up = upper_entry(roots.upper(), &ch.path, &ch.display, ch.new_type, ch.mode)?;
                if up.what == What::Special && !opts.allow_special {
                    out.refusals.push(Refusal {
                        index: i,
                        display: ch.display.clone(),
                        what: special_word(up.st_mode),
                    });
                }
                if up.written_perm() != up.perm() {
                    out.stripped.push(Stripped {
                        index: i,
                        display: ch.display.clone(),
                        from: up.perm(),
                        to: up.written_perm(),
                    });
                }
                out.upper.insert(i, up);
            }
            let now = match roots.host.fingerprint(Path::new(fsops::os(&ch.path))) {
                Ok(fp) => fp,
                // Inside a unit that is moved into place whole, a host path beneath a
                // symlink (or a file) is not there for the unit: the seal recorded it
                // absent, and the unit replaces that object itself, never writing through it.
                Err(FingerprintError::Unstable { .. })
                    if i != unit.index
                        && beneath_a_non_directory(&roots.host, &c.path, &ch.path) =>
                {
                    Fingerprint::ABSENT
                }
                Err(FingerprintError::Unstable { .. }) => {
                    conflicts.push(Conflict {
                        index: i,
                        display: ch.display.clone(),
                        reason: ConflictReason::ThroughSymlink {
                            at: ch.display.clone(),
                        },
                        forceable: false,
                    });
                    continue;
                }
                Err(e) => {
                    conflicts.push(Conflict {
                        index: i,
                        display: ch.display.clone(),
                        reason: ConflictReason::Uninspectable {
                            message: e.to_string(),
                        },
                        forceable: false,
                    });
                    continue;
                }
            };
            if i == unit.index {
                unit_host = now.host.clone();
            }
            // A deletion of what is already gone agrees with the host.
            if ch.kind == ChangeKind::Deleted && now.host == HostState::Absent {
                continue;
            }
            let accepted = stage.ledger.accepted_ctime(&ch.path);
            let against = opts.rewrite.get(&i).and_then(|r| r.against.as_ref());
            let found = match against {
                // A merge: the host must still be the file it was made from.
                Some(h) => (!crate::conflict::same_state(h, &now.host)).then(|| {
                    let size = |h: &HostState| match h {
                        HostState::File { size, .. } => *size,
                        _ => 0,
                    };
                    ConflictReason::ContentChanged {
                        was_size: size(h),
                        now_size: size(&now.host),
                    }
                }),
                None => compare(&ch.recorded, &now, run_start, accepted),
            };
            if let Some(reason) = found {
                conflicts.push(Conflict {
                    index: i,
                    display: ch.display.clone(),
                    forceable: reason.forceable(),
                    reason,
                });
            }
        }
        // The plan, from what is on the host now.
        let up = out.upper.get(&unit.index).copied();
        unit.what = up.map(|u| u.what);
        unit.action = match (c.kind, up) {
            (ChangeKind::Deleted, _) => match unit_host {
                HostState::Absent => None,
                HostState::Dir { .. } => Some(Action::RemoveDir),
                _ => Some(Action::RemoveFile),
            },
            (ChangeKind::Modified, Some(u)) if u.what == What::Dir => {
                unit.mode = Some(u.perm());
                if !matches!(unit_host, HostState::Dir { .. }) {
                    // Only the mode is staged: there is no directory to put back.
                    for cf in conflicts.iter_mut().filter(|cf| cf.index == unit.index) {
                        cf.forceable = false;
                    }
                }
                Some(Action::Chmod)
            }
            (_, Some(u)) => {
                if unit_host == HostState::Absent {
                    Some(Action::Put)
                } else if u.what == What::Dir || matches!(unit_host, HostState::Dir { .. }) {
                    Some(Action::Exchange)
                } else {
                    Some(Action::Replace)
                }
            }
            (_, None) => None,
        };
        // A host directory the apply removes: nothing beneath it may have changed.
        let removes_dir = matches!(unit_host, HostState::Dir { .. })
            && matches!(unit.action, Some(Action::RemoveDir | Action::Exchange));
        if removes_dir {
            let changed = fsops::open_dir(roots.target.as_fd(), &c.path)
                .and_then(|d| fsops::changed_beneath(d.as_fd(), run_start, 1));
            match changed {
                Ok((first, count)) => {
                    if let Some(p) = first.first() {
                        let mut full = c.path.clone();
                        full.push(b'/');
                        full.extend_from_slice(p);
                        conflicts.push(Conflict {
                            index: unit.index,
                            display: c.display.clone(),
                            reason: ConflictReason::SubtreeChanged {
                                path: show(&full),
                                more: count.saturating_sub(1),
                            },
                            forceable: true,
                        });
                    }
                }
                Err(e) => conflicts.push(Conflict {
                    index: unit.index,
                    display: c.display.clone(),
                    reason: ConflictReason::Uninspectable {
                        message: format!("cannot list the directory: {}", fsops::io_err(e)),
                    },
                    forceable: false,
                }),
            }
        }
    }
    let mut left = Vec::new();
    for cf in conflicts {
        if cf.forceable && is_forced(&stage.changes[cf.index].path, &opts.force) {
            out.forced.push(cf);
        } else {
            left.push(cf);
        }
    }
    let taken = crate::conflict::git_index_taken(
        &left
            .iter()
            .map(|cf| {
                let ch = &stage.changes[cf.index];
                crate::conflict::Left {
                    path: &ch.path,
                    reason: &cf.reason,
                    staged_file: ch.kind != ChangeKind::Deleted
                        && ch.new_type == Some(ChangeEntryType::File),
                }
            })
            .collect::<Vec<_>>(),
    );
    for (cf, taken) in left.into_iter().zip(taken) {
        if taken {
            out.git_index_taken.push(cf);
        } else {
            out.conflicts.push(cf);
        }
    }
    Ok(out)
}

/// Whether, on the host now, `path` lies beneath something that is not a directory at or
/// below the unit root `root` (`path` is beneath `root`).
fn beneath_a_non_directory(host: &HostRoot, root: &[u8], path: &[u8]) -> bool {
    ancestors(path)
        .filter(|a| crate::select::is_at_or_beneath(a, root))
        .any(|a| {
            host.fingerprint(Path::new(fsops::os(a)))
                .is_ok_and(|fp| !matches!(fp.host, HostState::Dir { .. }))
        })
}

/// Name what is wrong with a parent directory that could not be opened.
fn parent_problem(root: BorrowedFd<'_>, parent: &[u8], e: Errno) -> ConflictReason {
    // Find the first component that is not a plain directory.
    let mut end = 0;
    let parts: Vec<&[u8]> = parent.split(|&b| b == b'/').collect();
    for part in &parts {
        end += part.len();
        let prefix = parent.get(..end).unwrap_or_default();
        match fsops::open_beneath(root, prefix, OFlags::PATH) {
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd);
                match st {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                        return ConflictReason::ThroughSymlink { at: show(prefix) };
                    }
                    Ok(st) if !fsops::is_dir(&st) => {
                        return ConflictReason::ParentNotDirectory {
                            parent: show(prefix),
                        };
                    }
                    _ => {}
                }
            }
            Err(Errno::NOENT) => {
                return ConflictReason::ParentMissing {
                    parent: show(prefix),
                };
            }
            Err(Errno::LOOP | Errno::XDEV) => {
                return ConflictReason::ThroughSymlink { at: show(prefix) };
            }
            Err(_) => break,
        }
        end += 1;
    }
    match e {
        Errno::NOENT => ConflictReason::ParentMissing {
            parent: show(parent),
        },
        Errno::NOTDIR => ConflictReason::ParentNotDirectory {
            parent: show(parent),
        },
        Errno::LOOP | Errno::XDEV => ConflictReason::ThroughSymlink { at: show(parent) },
        other => ConflictReason::Uninspectable {
            message: format!("cannot open {}: {}", show(parent), fsops::io_err(other)),
        },
    }
}

fn batch_id() -> String {
    let u = uuid::Uuid::now_v7().simple().to_string();
    // The random tail of a v7 uuid.
    u.get(u.len().saturating_sub(16)..).unwrap_or(&u).to_owned()
}

/// Run a checked, unrefused plan (see the module docs). On success the ledger records the
/// paths as applied. `hook` is called at each [`Step`].
pub fn execute(
    target: &Path,
    upper: &Path,
    ledger_path: &Path,
    stage: &mut Stage,
    checked: &Checked,
    hook: &mut dyn FnMut(Step),
) -> Result<Report, ApplyError> {
    let roots = Roots::open(target, Some(upper))?;
    let id = batch_id();
    let mut ops: Vec<LedgerOp> = Vec::new();
    let mut noop_covers: Vec<RelPath> = Vec::new();
    // Position of each unit's op in `ops`.
    let mut op_of: Vec<Option<usize>> = Vec::new();
    for unit in &checked.units {
        let covers: Vec<RelPath> = unit
            .covers
            .iter()
            .map(|&i| RelPath(stage.changes[i].path.clone()))
            .collect();
        let Some(action) = unit.action else {
            noop_covers.extend(covers);
            op_of.push(None);
            continue;
        };
        let n = ops.len();
        let tmp = matches!(action, Action::Put | Action::Replace | Action::Exchange)
            .then(|| RelPath(format!("{TMP_PREFIX}{id}-{n}").into_bytes()));
        let trash = matches!(
            action,
            Action::Exchange | Action::RemoveDir | Action::RemoveFile
        )
        .then(|| RelPath(format!("{TMP_PREFIX}{id}-{n}-old").into_bytes()));
        op_of.push(Some(n));
        ops.push(LedgerOp {
            path: RelPath(stage.changes[unit.index].path.clone()),
            action,
            tmp,
            trash,
            new_id: None,
            old_id: unit.old_id,
            mode: unit.mode,
            covers,
            partial: checked
                .rewrite
                .get(&unit.index)
                .and_then(|r| r.partial.clone()),
        });
    }
    stage.ledger.batch = Some(Batch {
        id,
        phase: Phase::Preparing,
        started_at_unix_ms: now_ms(),
        ops,
    });
    stage.ledger.store(ledger_path)?;

    let result = run_batch(&roots, target, stage, checked, &op_of, ledger_path, hook);
    match result {
        Ok(()) => {
            let mut applied: Vec<RelPath> = Vec::new();
            if let Some(b) = stage.ledger.batch.take() {
                accept_written_parents(roots.target.as_fd(), stage, &b.ops);
                for op in b.ops {
                    match op.partial {
                        Some(hunks) => {
                            record_partial(&roots.host, &mut stage.ledger, &op.path, hunks)?
                        }
                        None => applied.extend(op.covers),
                    }
                }
            }
            applied.extend(noop_covers);
            finish_paths(&mut stage.ledger, applied);
            stage.ledger.store(ledger_path)?;
            let (partial, applied): (Vec<usize>, Vec<usize>) = checked
                .indices()
                .into_iter()
                .partition(|i| checked.rewrite.get(i).is_some_and(|r| r.partial.is_some()));
            Ok(Report { applied, partial })
        }
        Err(cause) => {
            // Record what took effect, set the rest pending, remove leftovers.
            match recover(target, ledger_path, &mut stage.ledger) {
                Ok(Some(r)) => Err(ApplyError::Incomplete {
                    cause: Box::new(cause),
                    written: r.written.len(),
                    pending: r.not_written.len(),
                }),
                _ => Err(cause),
            }
        }
    }
}

/// After a batch: a directory it wrote entries into (the workdir's root `.` included)
/// whose own staged change, a mode, is left for a later apply has its new ctime accepted,
/// so that apply does not take cofferdam's writes for the host's (its mode is still
/// compared).
fn accept_written_parents(root: BorrowedFd<'_>, stage: &mut Stage, ops: &[LedgerOp]) {
    let parents: BTreeSet<&[u8]> = ops
        .iter()
        .map(|op| match fsops::split(op.path.as_bytes()).0 {
            b"" => b".".as_slice(),
            parent => parent,
        })
        .collect();
    for parent in parents {
        let left = stage.changes.iter().any(|c| c.path == parent)
            && !ops.iter().any(|op| op.path.as_bytes() == parent);
        if !left {
            continue;
        }
        if let Ok(fd) = fsops::open_dir(root, parent)
            && let Ok(st) = rustix::fs::fstat(&fd)
        {
            stage.ledger.accept_ctime(
                parent,
                Ctime {
                    sec: st.st_ctime,
                    nsec: u32::try_from(st.st_ctime_nsec).unwrap_or(0),
                },
            );
        }
    }
}

/// Record that the host file at `path` now has `hunks` applied: its fingerprint as
/// written becomes the conflict check's record (`Ledger::partial`).
fn record_partial(
    host: &HostRoot,
    ledger: &mut Ledger,
    path: &RelPath,
    hunks: PartialHunks,
) -> Result<(), ApplyError> {
    let fp = host.fingerprint(path.as_path())?;
    ledger.set_partial(path.as_bytes(), hunks, fp);
    Ok(())
}

/// Mark `paths` applied (and no longer pending or needing an accepted ctime).
fn finish_paths(ledger: &mut Ledger, paths: Vec<RelPath>) {
    let done: BTreeSet<&[u8]> = paths.iter().map(RelPath::as_bytes).collect();
    ledger.partial.retain(|p| !done.contains(p.path.as_bytes()));
    ledger.pending.retain(|p| !done.contains(p.as_bytes()));
    ledger
        .accepted_ctimes
        .retain(|a| !done.contains(a.path.as_bytes()));
    ledger.applied.extend(paths);
}

fn run_batch(
    roots: &Roots,
    target: &Path,
    stage: &mut Stage,
    checked: &Checked,
    op_of: &[Option<usize>],
    ledger_path: &Path,
    hook: &mut dyn FnMut(Step),
) -> Result<(), ApplyError> {
    let is_root = rustix::process::geteuid().is_root();
    // 1. Prepare every temporary object.
    let mut parents = Parents::new(roots.target.as_fd());
    let mut parent_ids: Vec<Option<FileId>> = vec![None; checked.units.len()];
    let mut prepared = 0usize;
    for (u, unit) in checked.units.iter().enumerate() {
        let Some(n) = op_of[u] else { continue };
        let Some(tmp) = stage
            .ledger
            .batch
            .as_ref()
            .and_then(|b| b.ops.get(n))
            .and_then(|op| op.tmp.clone())
        else {
            continue;
        };
        let path = stage.changes[unit.index].path.clone();
        let (parent_rel, _) = fsops::split(&path);
        let (parent, pid) = parents
            .get(parent_rel)
            .map_err(write_err("open", parent_rel))?;
        parent_ids[u] = Some(pid);
        let owner = if is_root { unit.old_owner } else { None };
        let new_id = prepare_unit(roots, parent, tmp.as_bytes(), unit, stage, checked, owner)?;
        if let Some(op) = stage.ledger.batch.as_mut().and_then(|b| b.ops.get_mut(n)) {
            op.new_id = Some(new_id);
        }
        prepared += 1;
        hook(Step::Prepared(prepared));
    }
    roots.sync(target)?;
    if let Some(b) = stage.ledger.batch.as_mut() {
        b.phase = Phase::Committing;
    }
    stage.ledger.store(ledger_path)?;
    hook(Step::Committing);

    // 2. Commit: puts, exchanges and removals in path order, then chmods deepest first.
    let Some(batch) = stage.ledger.batch.clone() else {
        return Ok(());
    };
    let mut parents = Parents::new(roots.target.as_fd());
    let mut committed = 0usize;
    let mut chmods: Vec<usize> = Vec::new();
    for (u, unit) in checked.units.iter().enumerate() {
        let Some(n) = op_of[u] else { continue };
        let op = &batch.ops[n];
        if op.action == Action::Chmod {
            chmods.push(u);
            continue;
        }
        let path = op.path.as_bytes();
        let (parent_rel, name) = fsops::split(path);
        let (parent, pid) = parents
            .get(parent_rel)
            .map_err(write_err("open", parent_rel))?;
        if parent_ids[u].is_some_and(|p| p != pid) {
            return Err(ApplyError::Moved {
                path: show(parent_rel),
            });
        }
        commit_op(parent, op, name, unit.old_id.is_none())?;
        committed += 1;
        hook(Step::Committed(committed));
    }
    chmods.sort_by(|&a, &b| {
        stage.changes[checked.units[b].index]
            .path
            .cmp(&stage.changes[checked.units[a].index].path)
    });
    for u in chmods {
        let Some(n) = op_of[u] else { continue };
        let op = &batch.ops[n];
        let path = op.path.as_bytes();
        let fd = fsops::open_beneath(roots.target.as_fd(), path, OFlags::PATH | OFlags::DIRECTORY)
            .map_err(write_err("open", path))?;
        if op.old_id.is_some() && fsops::id_of(fd.as_fd()).ok() != op.old_id {
            return Err(ApplyError::Moved { path: show(path) });
        }
        fsops::chmod_fd(fd.as_fd(), op.mode.unwrap_or(0o755)).map_err(write_err("chmod", path))?;
        committed += 1;
        hook(Step::Committed(committed));
    }
    roots.sync(target)?;
    hook(Step::Synced);

    // 3. Remove displaced old objects, several at once: releasing an inode can wait on the
    //    device (online discard), and those waits overlap.
    let mut leftovers: Vec<(&[u8], &[u8], &[u8])> = Vec::new();
    for op in &batch.ops {
        let (parent_rel, _) = fsops::split(op.path.as_bytes());
        let names = match op.action {
            Action::Exchange => [op.tmp.as_ref(), op.trash.as_ref()],
            Action::Replace => [op.tmp.as_ref(), None],
            Action::RemoveDir | Action::RemoveFile => [op.trash.as_ref(), None],
            Action::Put | Action::Chmod => [None, None],
        };
        for name in names.into_iter().flatten() {
            leftovers.push((parent_rel, name.as_bytes(), op.path.as_bytes()));
        }
    }
    remove_all(roots.target.as_fd(), &leftovers)?;
    if !leftovers.is_empty() {
        roots.sync(target)?;
    }
    hook(Step::Cleaned);
    Ok(())
}

/// Threads removing displaced objects.
const REMOVERS: usize = 8;

/// Remove `(parent, name, path)` leftovers beneath `root`, with a few threads.
fn remove_all(root: BorrowedFd<'_>, leftovers: &[(&[u8], &[u8], &[u8])]) -> Result<(), ApplyError> {
    if leftovers.is_empty() {
        return Ok(());
    }
    let per = leftovers.len().div_ceil(REMOVERS);
    std::thread::scope(|scope| {
        let workers: Vec<_> = leftovers
            .chunks(per.max(1))
            .map(|chunk| {
                scope.spawn(move || -> Result<(), ApplyError> {
                    let mut parents = Parents::new(root);
                    for (parent_rel, name, path) in chunk {
                        let (parent, _) = parents
                            .get(parent_rel)
                            .map_err(write_err("open", parent_rel))?;
                        fsops::remove_tree_at(parent, name)
                            .map_err(write_err("remove the old version of", path))?;
                    }
                    Ok(())
                })
            })
            .collect();
        let mut first = Ok(());
        for w in workers {
            let r = w.join().unwrap_or_else(|_| {
                Err(ApplyError::Moved {
                    path: "(a removal thread panicked)".to_owned(),
                })
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// Create the temporary object of a put/exchange unit; its identity.
fn prepare_unit(
    roots: &Roots,
    parent: BorrowedFd<'_>,
    tmp: &[u8],
    unit: &Unit,
    stage: &Stage,
    checked: &Checked,
    owner: Option<(u32, u32)>,
) -> Result<FileId, ApplyError> {
    let c = &stage.changes[unit.index];
    let Some(up) = checked.upper.get(&unit.index).copied() else {
        return Err(ApplyError::StageChanged {
            path: c.display.clone(),
            found: "missing",
            expected: "an entry",
        });
    };
    if let Some(r) = checked.rewrite.get(&unit.index) {
        let mode = match (&r.partial, &c.recorded.host) {
            (Some(_), HostState::File { mode, .. }) => *mode & !SUID_SGID,
            _ => up.written_perm(),
        };
        return create_rewritten(parent, tmp, &c.path, &r.bytes, mode, owner);
    }
    if up.what != What::Dir {
        return create_entry(roots, parent, tmp, &c.path, &c.display, up, owner);
    }
    // A directory tree, built under the temporary name.
    let fail = |action| write_err(action, &c.path);
    rustix::fs::mkdirat(parent, fsops::os(tmp), Mode::from_raw_mode(0o700))
        .map_err(fail("create"))?;
    let top = rustix::fs::openat(
        parent,
        fsops::os(tmp),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(fail("open"))?;
    let id = fsops::id_of(top.as_fd()).map_err(fail("inspect"))?;
    if let Some((uid, gid)) = owner {
        let _ = rustix::fs::fchown(
            &top,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        );
    }
    let mut stack: Vec<(&[u8], OwnedFd, UpperEntry)> = vec![(&c.path, top, up)];
    for &i in unit.covers.iter().skip(1) {
        let ch = &stage.changes[i];
        let Some(eup) = checked.upper.get(&i).copied() else {
            continue;
        };
        let (parent_rel, name) = fsops::split(&ch.path);
        while stack.last().is_some_and(|(p, _, _)| *p != parent_rel) {
            if let Some((p, fd, e)) = stack.pop() {
                finish_dir(fd.as_fd(), e, p)?;
            }
        }
        let Some((_, dir, _)) = stack.last() else {
            return Err(ApplyError::StageChanged {
                path: ch.display.clone(),
                found: "an entry without its directory",
                expected: "its directory selected",
            });
        };
        let dir = dir.as_fd();
        if eup.what == What::Dir {
            rustix::fs::mkdirat(dir, fsops::os(name), Mode::from_raw_mode(0o700))
                .map_err(write_err("create", &ch.path))?;
            let sub = rustix::fs::openat(
                dir,
                fsops::os(name),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(write_err("open", &ch.path))?;
            stack.push((&ch.path, sub, eup));
        } else {
            create_entry(roots, dir, name, &ch.path, &ch.display, eup, None)?;
        }
    }
    while let Some((p, fd, e)) = stack.pop() {
        finish_dir(fd.as_fd(), e, p)?;
    }
    Ok(id)
}

/// Create the file `name` in `dir` holding `bytes` with permission bits `mode`.
fn create_rewritten(
    dir: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<FileId, ApplyError> {
    let mut dst = new_file(dir, name, path)?;
    io::Write::write_all(&mut dst, bytes).map_err(|e| ApplyError::Write {
        action: "write",
        path: show(path),
        source: e,
    })?;
    chown_to(&dst, owner);
    rustix::fs::fchmod(&dst, Mode::from_raw_mode(mode)).map_err(write_err("chmod", path))?;
    fsops::id_of(dst.as_fd()).map_err(write_err("inspect", path))
}

/// A new, empty, owner-only file `name` in `dir`, never through a symlink.
fn new_file(dir: BorrowedFd<'_>, name: &[u8], path: &[u8]) -> Result<File, ApplyError> {
    rustix::fs::openat(
        dir,
        fsops::os(name),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map(File::from)
    .map_err(write_err("create", path))
}

/// Give `f` the owner root keeps on a replacement (best effort, as for every object).
fn chown_to(f: &File, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        let _ = rustix::fs::fchown(
            f,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        );
    }
}

/// Give a built directory its final mode and times (after its entries are in).
fn finish_dir(fd: BorrowedFd<'_>, e: UpperEntry, path: &[u8]) -> Result<(), ApplyError> {
    fsops::chmod_fd(fd, e.written_perm()).map_err(write_err("chmod", path))?;
    let _ = rustix::fs::futimens(
        fd,
        &Timestamps {
            last_access: e.times.0,
            last_modification: e.times.1,
        },
    );
    Ok(())
}

/// Create one non-directory object `name` in `dir` from the staged entry at `path`.
fn create_entry(
    roots: &Roots,
    dir: BorrowedFd<'_>,
    name: &[u8],
    path: &[u8],
    display: &str,
    up: UpperEntry,
    owner: Option<(u32, u32)>,
) -> Result<FileId, ApplyError> {
    let stage_io = |e: io::Error| ApplyError::StageIo {
        path: display.to_owned(),
        source: e,
    };
    match up.what {
        What::File => {
            let src = fsops::open_beneath(
                roots.upper(),
                path,
                OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            )
            .map_err(|e| stage_io(fsops::io_err(e)))?;
            let src = File::from(src);
            let meta = src.metadata().map_err(stage_io)?;
            if !meta.is_file() {
                return Err(ApplyError::StageChanged {
                    path: display.to_owned(),
                    found: "not a file",
                    expected: "file",
                });
            }
            // Same filesystem, nothing to change on the inode, and the inode the stage's
            // alone: link the staged file, once its extended attributes (the command's)
            // are gone; one that cannot be removed means a copy, which carries none. An
            // inode with other names may be a checkpoint's or a fork's, which must never
            // change, as a host file in the user's hands can.
            let same_owner = owner.is_none_or(|o| o == (meta.uid(), meta.gid()));
            let same_mode = up.written_perm() == up.perm() && up.inode_perm == up.perm();
            if roots.links.get()
                && meta.nlink() == 1
                && same_owner
                && same_mode
                && fsops::strip_xattrs(src.as_fd()).map_err(|e| stage_io(fsops::io_err(e)))?
            {
                match fsops::link_fd(src.as_fd(), dir, name) {
                    Ok(()) => return fsops::id_of(src.as_fd()).map_err(write_err("inspect", path)),
                    Err(Errno::XDEV | Errno::PERM | Errno::ACCESS | Errno::NOENT) => {
                        roots.links.set(false);
                    }
                    Err(Errno::MLINK) => {}
                    Err(e) => return Err(write_err("link", path)(e)),
                }
            }
            let dst = new_file(dir, name, path)?;
            crate::sparse::copy_file(&src, &dst).map_err(|e| ApplyError::Write {
                action: "write",
                path: display.to_owned(),
                source: e,
            })?;
            chown_to(&dst, owner);
            rustix::fs::fchmod(&dst, Mode::from_raw_mode(up.written_perm()))
                .map_err(write_err("chmod", path))?;
            let _ = rustix::fs::futimens(
                &dst,
                &Timestamps {
                    last_access: up.times.0,
                    last_modification: up.times.1,
                },
            );
            fsops::id_of(dst.as_fd()).map_err(write_err("inspect", path))
        }
        What::Symlink => {
            let link = fsops::open_beneath(roots.upper(), path, OFlags::PATH)
                .map_err(|e| stage_io(fsops::io_err(e)))?;
            let target = rustix::fs::readlinkat(&link, c"", Vec::new())
                .map_err(|e| stage_io(fsops::io_err(e)))?;
            rustix::fs::symlinkat(target.as_c_str(), dir, fsops::os(name))
                .map_err(write_err("create", path))?;
            if let Some((uid, gid)) = owner {
                let _ = rustix::fs::chownat(
                    dir,
                    fsops::os(name),
                    Some(rustix::fs::Uid::from_raw(uid)),
                    Some(rustix::fs::Gid::from_raw(gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            fsops::id_at(dir, name)
                .map_err(write_err("inspect", path))?
                .ok_or_else(|| write_err("create", path)(Errno::NOENT))
        }
        What::Special => {
            rustix::fs::mknodat(
                dir,
                fsops::os(name),
                FileType::from_raw_mode(up.st_mode),
                Mode::from_raw_mode(up.written_perm() & 0o777),
                up.rdev,
            )
            .map_err(write_err("create", path))?;
            let handle = rustix::fs::openat(
                dir,
                fsops::os(name),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(write_err("open", path))?;
            fsops::chmod_fd(handle.as_fd(), up.written_perm()).map_err(write_err("chmod", path))?;
            fsops::id_of(handle.as_fd()).map_err(write_err("inspect", path))
        }
        What::Dir => Err(ApplyError::StageChanged {
            path: display.to_owned(),
            found: "directory",
            expected: "no directory",
        }),
    }
}

/// Make one op take effect.
fn commit_op(
    parent: BorrowedFd<'_>,
    op: &LedgerOp,
    name: &[u8],
    was_absent: bool,
) -> Result<(), ApplyError> {
    let path = op.path.as_bytes();
    let tmp = op.tmp.as_ref().map(RelPath::as_bytes);
    let trash = op.trash.as_ref().map(RelPath::as_bytes);
    let rename = |from: &[u8], to: &[u8], flags: RenameFlags| -> Result<(), Errno> {
        match rustix::fs::renameat_with(parent, fsops::os(from), parent, fsops::os(to), flags) {
            // The filesystem has no RENAME_NOREPLACE: a plain rename.
            Err(Errno::INVAL) if flags == RenameFlags::NOREPLACE => {
                rustix::fs::renameat(parent, fsops::os(from), parent, fsops::os(to))
            }
            other => other,
        }
    };
    match (op.action, tmp) {
        (Action::Put, Some(tmp)) => {
            let flags = if was_absent {
                RenameFlags::NOREPLACE
            } else {
                RenameFlags::empty()
            };
            rename(tmp, name, flags).map_err(write_err("move into place", path))
        }
        (Action::Replace, Some(tmp)) => {
            match rustix::fs::renameat_with(
                parent,
                fsops::os(tmp),
                parent,
                fsops::os(name),
                RenameFlags::EXCHANGE,
            ) {
                // No RENAME_EXCHANGE here: a rename over a non-directory is atomic too.
                Err(Errno::INVAL) => {
                    rustix::fs::renameat(parent, fsops::os(tmp), parent, fsops::os(name))
                        .map_err(write_err("move into place", path))
                }
                other => other.map_err(write_err("exchange", path)),
            }
        }
        (Action::Exchange, Some(tmp)) => {
            match rustix::fs::renameat_with(
                parent,
                fsops::os(tmp),
                parent,
                fsops::os(name),
                RenameFlags::EXCHANGE,
            ) {
                Ok(()) => Ok(()),
                Err(Errno::INVAL) => {
                    // No RENAME_EXCHANGE here: park the old object, then move the new one in.
                    let trash = trash.unwrap_or(b".cofferdam-old");
                    rename(name, trash, RenameFlags::NOREPLACE)
                        .map_err(write_err("move aside", path))?;
                    rename(tmp, name, RenameFlags::NOREPLACE)
                        .map_err(write_err("move into place", path))
                }
                Err(e) => Err(write_err("exchange", path)(e)),
            }
        }
        (Action::RemoveFile | Action::RemoveDir, _) => {
            let trash = trash.unwrap_or(b".cofferdam-old");
            match rename(name, trash, RenameFlags::NOREPLACE) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(write_err("remove", path)(e)),
            }
        }
        _ => Ok(()),
    }
}

/// An interrupted batch, as [`inspect`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchView {
    /// The batch id.
    pub id: String,
    /// How far it had got.
    pub phase: Phase,
    /// When it began.
    pub started_at_unix_ms: u64,
    /// Change paths whose op took effect.
    pub written: Vec<Vec<u8>>,
    /// Change paths whose op did not.
    pub not_written: Vec<Vec<u8>>,
}

/// Whether an op took effect (see the module docs). Read-only.
fn op_done(root: BorrowedFd<'_>, op: &LedgerOp, phase: Phase) -> bool {
    if phase == Phase::Preparing {
        return false;
    }
    let (parent_rel, name) = fsops::split(op.path.as_bytes());
    let Ok(parent) = fsops::open_dir(root, parent_rel) else {
        return false;
    };
    let st = match fsops::stat_name(parent.as_fd(), name) {
        Ok(st) => st,
        Err(_) => return false,
    };
    let id = st.as_ref().map(|s| FileId {
        dev: s.st_dev,
        ino: s.st_ino,
    });
    match op.action {
        Action::Put | Action::Replace | Action::Exchange => id.is_some() && id == op.new_id,
        Action::RemoveFile | Action::RemoveDir => id.is_none() || id != op.old_id,
        Action::Chmod => {
            st.as_ref()
                .is_some_and(|s| Some(s.st_mode & 0o7777) == op.mode)
                && id == op.old_id
        }
    }
}

/// Look at an interrupted batch without changing anything; `None` when there is none.
pub fn inspect(target: &Path, ledger: &Ledger) -> Result<Option<BatchView>, ApplyError> {
    let Some(batch) = &ledger.batch else {
        return Ok(None);
    };
    let roots = Roots::open(target, None)?;
    let mut view = BatchView {
        id: batch.id.clone(),
        phase: batch.phase,
        started_at_unix_ms: batch.started_at_unix_ms,
        written: Vec::new(),
        not_written: Vec::new(),
    };
    for op in &batch.ops {
        let paths = op.covers.iter().map(|p| p.0.clone());
        if op_done(roots.target.as_fd(), op, batch.phase) {
            view.written.extend(paths);
        } else {
            view.not_written.extend(paths);
        }
    }
    Ok(Some(view))
}

/// What [`recover`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The batch as it was found.
    pub batch: BatchView,
    /// Old objects moved back into place (a crash between the two renames of a replace).
    pub restored: Vec<Vec<u8>>,
}

impl Recovery {
    /// Shorthand for `batch.written`.
    pub fn written(&self) -> &[Vec<u8>] {
        &self.batch.written
    }
}

impl std::ops::Deref for Recovery {
    type Target = BatchView;
    fn deref(&self) -> &BatchView {
        &self.batch
    }
}

/// Finish the bookkeeping of an interrupted batch: written paths become applied, the
/// others pending (the next apply redoes them after a fresh conflict check), temporary and
/// displaced objects are removed, and the ledger forgets the batch. `None` when there was
/// no batch. Needs the job lock.
pub fn recover(
    target: &Path,
    ledger_path: &Path,
    ledger: &mut Ledger,
) -> Result<Option<Recovery>, ApplyError> {
    let Some(batch) = ledger.batch.clone() else {
        return Ok(None);
    };
    let roots = Roots::open(target, None)?;
    let root = roots.target.as_fd();
    let mut view = BatchView {
        id: batch.id.clone(),
        phase: batch.phase,
        started_at_unix_ms: batch.started_at_unix_ms,
        written: Vec::new(),
        not_written: Vec::new(),
    };
    let mut restored = Vec::new();
    let mut accept: Vec<Vec<u8>> = Vec::new();
    // Directories whose entries this batch created or renamed: their ctime is ours.
    let touched: BTreeSet<&[u8]> = batch
        .ops
        .iter()
        .flat_map(|op| ancestors(op.path.as_bytes()))
        .collect();
    let mut written_paths = Vec::new();
    let mut not_written_paths: Vec<RelPath> = Vec::new();
    let mut partial_done: Vec<(RelPath, PartialHunks)> = Vec::new();
    for op in &batch.ops {
        let done = op_done(root, op, batch.phase);
        let path = op.path.as_bytes();
        let (parent_rel, name) = fsops::split(path);
        let parent = fsops::open_dir(root, parent_rel).ok();
        if let Some(parent) = &parent {
            let parent = parent.as_fd();
            if !done
                && op.action == Action::Exchange
                && let Some(trash) = &op.trash
                && fsops::stat_name(parent, name).ok().flatten().is_none()
                && fsops::stat_name(parent, trash.as_bytes())
                    .ok()
                    .flatten()
                    .is_some()
            {
                rustix::fs::renameat_with(
                    parent,
                    fsops::os(trash.as_bytes()),
                    parent,
                    fsops::os(name),
                    RenameFlags::NOREPLACE,
                )
                .map_err(write_err("restore", path))?;
                restored.push(path.to_vec());
                accept.push(path.to_vec());
            }
            for leftover in [op.tmp.as_ref(), op.trash.as_ref()].into_iter().flatten() {
                // A displaced old object or an unused prepared one: ours either way.
                fsops::remove_tree_at(parent, leftover.as_bytes())
                    .map_err(write_err("remove a temporary copy of", path))?;
            }
        }
        let paths = op.covers.iter().map(|p| p.0.clone());
        if done {
            view.written.extend(paths);
            match &op.partial {
                // Some hunks written: the file stays staged with them recorded.
                Some(h) => partial_done.push((op.path.clone(), h.clone())),
                None => written_paths.extend(op.covers.iter().cloned()),
            }
        } else {
            if touched.contains(path) {
                accept.push(path.to_vec());
            }
            view.not_written.extend(paths);
            // Hunks not written: nothing to redo, the file is as it was, still staged.
            if op.partial.is_none() {
                not_written_paths.extend(op.covers.iter().cloned());
            }
        }
    }
    for p in &accept {
        let (parent_rel, name) = fsops::split(p);
        if let Ok(parent) = fsops::open_dir(root, parent_rel)
            && let Ok(Some(st)) = fsops::stat_name(parent.as_fd(), name)
        {
            ledger.accept_ctime(
                p,
                Ctime {
                    sec: st.st_ctime,
                    nsec: u32::try_from(st.st_ctime_nsec).unwrap_or(0),
                },
            );
        }
    }
    roots.sync(target)?;
    finish_paths(ledger, written_paths);
    for (p, h) in partial_done {
        record_partial(&roots.host, ledger, &p, h)?;
    }
    ledger.pending.extend(not_written_paths);
    ledger.batch = None;
    ledger.store(ledger_path)?;
    Ok(Some(Recovery {
        batch: view,
        restored,
    }))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
