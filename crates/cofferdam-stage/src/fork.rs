//! A fork's stage (issue 21): a new job that starts from a checkpoint of another job's
//! stage. Owns the fork's inherited layer (made from the checkpoint, taken into the stage
//! when the run ends) and the fingerprints the fork inherits; may not decide containment,
//! run processes, or touch the parent job or the checkpoint (both are only read).
//!
//! The checkpoint's staged tree becomes the fork's `inherited/` ([`seed`]): its entries
//! hard-linked, its directories new, so it costs O(staged entries) with no data copied.
//! The overlay shows it as a lower layer between the fork's empty `upper/` and the host
//! workdir, so the run sees the parent's staged result, and the kernel copies an inherited
//! entry up into `upper/` before changing it: nothing the run does reaches the checkpoint.
//! When the run has ended, before the seal, [`flatten`] moves every inherited entry the run
//! did not replace into `upper/`, which then holds the net result against the host,
//! parent's changes included, as if it had started as a copy: review, apply and drop treat
//! it as any stage. A crash during the move leaves what is left in `inherited/`, and the
//! next seal (the interrupted job's recovery) finishes it.
//!
//! The conflict check must still see a host edit made after the parent looked: the
//! checkpoint's fingerprints are kept as `inherited-fingerprints.json`, and at the seal
//! every change the parent had already made keeps the parent's fingerprint ([`merge`]),
//! and the run's start becomes the earlier of the two.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, XattrFlags};
use rustix::io::Errno;

use crate::checkpoint::{Checkpoint, CheckpointError, Counts, restore};
use crate::fingerprint::{FingerprintError, Fingerprints, read_fingerprints};
use crate::fsops;
use crate::fsops::{DIR_READ as DIR_FLAGS, read_names};
use crate::job::{INHERITED_LAYER, Job};
use crate::ledger::RelPath;
use crate::seal::OPAQUE_XATTRS;

/// The fork's copy of its checkpoint's fingerprints, in the job directory.
pub const INHERITED: &str = "inherited-fingerprints.json";

/// The fork's stage could not be made or sealed.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The fresh job's `upper/` could not be replaced.
    #[error("cannot prepare the fork's stage {}: {source}; check the store's disk", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The checkpoint could not be linked or copied.
    #[error("cannot make the fork's layer of its checkpoint: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// The inherited fingerprints could not be read or written.
    #[error("the fork's inherited fingerprints: {0}")]
    Fingerprints(#[from] FingerprintError),
}

/// Give `job` (new, its `upper/` empty) the checkpoint `c` as its inherited layer
/// ([`Job::inherited`]); returns what it holds.
pub fn seed(job: &Job, c: &Checkpoint) -> Result<Counts, ForkError> {
    let counts = restore(c, &job.inherited())?;
    // The checkpoint's bytes as they are (one entry per change the parent staged): parsed
    // once, at the seal ([`inherit`]), not here as well.
    let from = c.fingerprints_path();
    match fs::read(&from) {
        Ok(bytes) => {
            let to = job.dir().join(INHERITED);
            crate::job::write_atomic_with(&to, &bytes, 0o600, crate::job::Durability::Durable)
                .map_err(|source| ForkError::Io { path: to, source })?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(ForkError::Io { path: from, source }),
    }
    Ok(counts)
}

/// The bases directory of `job`'s parent when `job` is a fork whose parent is in the same
/// store (`jobs/<parent run id>/bases`), for [`crate::base::keep_at_seal`]; `None`
/// otherwise, or when it is gone (the parent dropped).
pub fn parent_bases(job: &Job) -> Option<PathBuf> {
    // A fork has its checkpoint's fingerprints: one stat, not a read of `job.json`, at the
    // end of every run.
    fs::symlink_metadata(job.dir().join(INHERITED)).ok()?;
    let parent = job.state().ok()?.parent?;
    // A job id names one directory of the store, never a path.
    if parent.run_id.contains('/') || !parent.run_id.starts_with(crate::job::ID_PREFIX) {
        return None;
    }
    let dir = crate::base::dir(&job.dir().parent()?.join(&parent.run_id));
    fs::symlink_metadata(&dir)
        .is_ok_and(|m| m.is_dir())
        .then_some(dir)
}

/// What [`flatten`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flattened {
    /// Inherited entries moved into the stage whole (a directory with all below it).
    pub moved: u64,
    /// Inherited entries the run had replaced or removed, left out.
    pub shadowed: u64,
    /// Whiteouts of the run's that hid only an inherited entry, removed with it.
    pub whiteouts_dropped: u64,
}

/// Take `job`'s inherited layer into its stage, after its run and before the seal; `None`
/// when it has none (not a fork, or already taken). `workdir` is the host workdir.
///
/// The result is what the overlay showed. For each inherited entry, by name, in a
/// directory both hold (the run's `upper/` over `inherited/`):
/// - absent from `upper/`: renamed into it (a directory whole);
/// - a whiteout in `upper/` (the run removed it): left out, and the whiteout removed too
///   when the host workdir has no such path (it hides nothing once the inherited entry is
///   part of the stage; a copy-seeded stage would have had none);
/// - a directory in both, not opaque in `upper/`: the same, one level down; and when the
///   inherited one is opaque (it hid the host's entries) the stage's becomes opaque;
/// - anything else in `upper/`: it replaced the inherited entry, which is left out.
///
/// Then `inherited/` is removed. Every step leaves a state from which running this again
/// finishes the job (an entry is removed from `inherited/` before the whiteout that hides
/// it, opaque marks come after the entries), so a crash is recovered by the next seal. The
/// run's processes are gone; the entries are still reached by descriptors, never through
/// a symlink.
pub fn flatten(job: &Job, workdir: &Path) -> Result<Option<Flattened>, ForkError> {
    let layer = job.inherited();
    if fs::symlink_metadata(&layer).is_err() {
        return Ok(None);
    }
    let upper = job.upper();
    let err = |path: &Path, rel: &[u8]| {
        let path = if rel.is_empty() {
            path.to_path_buf()
        } else {
            path.join(fsops::os(rel))
        };
        move |e: Errno| ForkError::Io {
            path,
            source: e.into(),
        }
    };
    let open = |p: &Path| {
        rustix::fs::open(p, DIR_FLAGS, Mode::empty()).map_err(|e| ForkError::Io {
            path: p.to_path_buf(),
            source: e.into(),
        })
    };
    let (l_root, u_root) = (open(&layer)?, open(&upper)?);
    // A workdir that cannot be opened has nothing for a whiteout to hide.
    let host = rustix::fs::open(workdir, DIR_FLAGS, Mode::empty()).ok();
    // The directories a move goes out of and into, and a directory moved to another, must
    // let their owner change them; the parent's or the run's mode may not (`chmod 555`).
    // The stage's own get their modes back at the end (journaled, for a resumed flatten).
    let mut lent = Lent::load(job.dir().join(LENT_JOURNAL))?;
    let mut done = Flattened::default();
    let mut opaque_later: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = stack.pop() {
        let ldir = lend_dir(l_root.as_fd(), &rel, None).map_err(err(&layer, &rel))?;
        let udir = lend_dir(u_root.as_fd(), &rel, Some(&mut lent)).map_err(err(&upper, &rel))?;
        for name in read_names(ldir.as_fd()).map_err(err(&layer, &rel))? {
            let path = join(&rel, &name);
            let Some(l) = fsops::stat_name(ldir.as_fd(), &name).map_err(err(&layer, &path))? else {
                continue;
            };
            let Some(u) = fsops::stat_name(udir.as_fd(), &name).map_err(err(&upper, &path))? else {
                if fsops::is_dir(&l) && l.st_mode & 0o700 != 0o700 {
                    // Its `..` changes: it must be writable, and it lands in the stage.
                    lent.record(&path, l.st_mode & 0o7777)
                        .map_err(err(&layer, &path))?;
                    let h = rustix::fs::openat(&ldir, fsops::os(&name), HANDLE, Mode::empty())
                        .map_err(err(&layer, &path))?;
                    fsops::chmod_fd(h.as_fd(), (l.st_mode & 0o7777) | 0o700)
                        .map_err(err(&layer, &path))?;
                }
                rustix::fs::renameat_with(
                    &ldir,
                    fsops::os(&name),
                    &udir,
                    fsops::os(&name),
                    RenameFlags::NOREPLACE,
                )
                .map_err(err(&upper, &path))?;
                done.moved += 1;
                continue;
            };
            if is_whiteout(&u) {
                done.shadowed += 1;
                if !is_whiteout(&l) && !host_has(host.as_ref(), &path) {
                    fsops::remove_tree_at(ldir.as_fd(), &name).map_err(err(&layer, &path))?;
                    rustix::fs::unlinkat(&udir, fsops::os(&name), AtFlags::empty())
                        .map_err(err(&upper, &path))?;
                    done.whiteouts_dropped += 1;
                }
                continue;
            }
            if !(fsops::is_dir(&l) && fsops::is_dir(&u)) {
                done.shadowed += 1;
                continue;
            }
            // Lent first: a mark is read only with owner read.
            let usub =
                lend_dir(u_root.as_fd(), &path, Some(&mut lent)).map_err(err(&upper, &path))?;
            if opaque_mark(usub.as_fd()).is_some() {
                done.shadowed += 1;
                continue;
            }
            let lsub = lend_dir(l_root.as_fd(), &path, None).map_err(err(&layer, &path))?;
            if let Some(mark) = opaque_mark(lsub.as_fd()) {
                opaque_later.push((path.clone(), mark));
            }
            stack.push(path);
        }
    }
    for (rel, mark) in &opaque_later {
        // Lent when its frame was visited: the owner may set the mark.
        let fd = fsops::open_beneath(u_root.as_fd(), rel, DIR_FLAGS).map_err(err(&upper, rel))?;
        rustix::fs::fsetxattr(&fd, fsops::os(mark), b"y", XattrFlags::empty())
            .map_err(err(&upper, rel))?;
    }
    lent.give_back(u_root.as_fd()).map_err(err(&upper, b""))?;
    drop((l_root, u_root));
    let parent = job.dir();
    let dir = rustix::fs::open(parent, DIR_FLAGS, Mode::empty()).map_err(err(parent, b""))?;
    fsops::remove_tree_at(dir.as_fd(), INHERITED_LAYER.as_bytes()).map_err(err(&layer, b""))?;
    lent.forget()?;
    Ok(Some(done))
}

/// The journal of the stage directories [`flatten`] lent owner rwx, with their modes.
const LENT_JOURNAL: &str = "inherited-lent.json";

/// An `O_PATH` handle: needs no permission on the object itself.
const HANDLE: OFlags = OFlags::PATH
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Open the directory `rel` beneath `root` for reading, after giving it owner rwx when it
/// lacks any of them (recorded in `journal` first, when given). Its ancestors were lent
/// before it (the walk goes down from the root).
fn lend_dir(
    root: BorrowedFd<'_>,
    rel: &[u8],
    journal: Option<&mut Lent>,
) -> Result<OwnedFd, Errno> {
    let h = fsops::open_beneath(root, rel, OFlags::PATH | OFlags::DIRECTORY)?;
    let mode = rustix::fs::fstat(&h)?.st_mode & 0o7777;
    if mode & 0o700 != 0o700 {
        if let Some(j) = journal {
            j.record(rel, mode)?;
        }
        fsops::chmod_fd(h.as_fd(), mode | 0o700)?;
    }
    fsops::open_beneath(root, rel, DIR_FLAGS)
}

/// The stage directories lent owner rwx during a flatten, by path, with the modes they had
/// (the first recorded wins: a resumed flatten finds them lent already).
struct Lent {
    path: PathBuf,
    modes: std::collections::BTreeMap<Vec<u8>, u32>,
}

impl Lent {
    fn load(path: PathBuf) -> Result<Lent, ForkError> {
        let io = |source| ForkError::Io {
            path: path.clone(),
            source,
        };
        let modes = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Vec<(RelPath, u32)>>(&bytes)
                .map_err(|e| io(io::Error::new(io::ErrorKind::InvalidData, e)))?
                .into_iter()
                .map(|(rel, mode)| (rel.0, mode))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(io(e)),
        };
        Ok(Lent { path, modes })
    }

    /// Note `rel`'s `mode` before it is lent, on disk first (the journal's path names it
    /// in no error: the caller's names the directory being lent).
    fn record(&mut self, rel: &[u8], mode: u32) -> Result<(), Errno> {
        if self.modes.contains_key(rel) {
            return Ok(());
        }
        self.modes.insert(rel.to_vec(), mode);
        let list: Vec<(RelPath, u32)> = self
            .modes
            .iter()
            .map(|(r, m)| (RelPath(r.clone()), *m))
            .collect();
        let bytes = serde_json::to_vec(&list).map_err(|_| Errno::INVAL)?;
        crate::job::write_atomic_with(&self.path, &bytes, 0o600, crate::job::Durability::Volatile)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
    }

    /// Give every lent directory its mode back, deepest first (an ancestor is still
    /// searchable while its descendants are done).
    fn give_back(&self, upper: BorrowedFd<'_>) -> Result<(), Errno> {
        let mut all: Vec<_> = self.modes.iter().collect();
        all.sort_by_key(|(rel, _)| std::cmp::Reverse(rel.len()));
        for (rel, mode) in all {
            match fsops::open_beneath(upper, rel, OFlags::PATH | OFlags::DIRECTORY) {
                Ok(h) => fsops::chmod_fd(h.as_fd(), *mode)?,
                // Gone or replaced: nothing of it to give back.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn forget(&self) -> Result<(), ForkError> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(ForkError::Io {
                path: self.path.clone(),
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

/// The name of the opaque mark the directory `fd` carries, if any ([`OPAQUE_XATTRS`]).
fn opaque_mark(fd: BorrowedFd<'_>) -> Option<Vec<u8>> {
    OPAQUE_XATTRS.iter().find_map(|name| {
        let mut buf = [0u8; 8];
        matches!(rustix::fs::fgetxattr(fd, *name, &mut buf[..]), Ok(1) if buf[0] == b'y')
            .then(|| name.as_bytes().to_vec())
    })
}

fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(rel.len() + 1 + name.len());
    if !rel.is_empty() {
        p.extend_from_slice(rel);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// An overlay whiteout: a 0:0 character device (the sealed tier's only kind).
fn is_whiteout(st: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice && st.st_rdev == 0
}

/// Whether the host workdir has `rel` (not followed; one below a symlink it has not).
fn host_has(host: Option<&OwnedFd>, rel: &[u8]) -> bool {
    let Some(host) = host else { return false };
    let (dir, name) = fsops::split(rel);
    fsops::open_beneath(host.as_fd(), dir, OFlags::PATH | OFlags::DIRECTORY)
        .ok()
        .and_then(|d| fsops::stat_name(d.as_fd(), name).ok().flatten())
        .is_some()
}

/// The fingerprints the seal of `job_dir`'s stage found (`fresh`), with what the job
/// inherited merged in ([`merge`]); `fresh` unchanged when the job is no fork.
pub fn inherit(job_dir: &Path, fresh: Fingerprints) -> Result<Fingerprints, ForkError> {
    let path = job_dir.join(INHERITED);
    if fs::symlink_metadata(&path).is_err() {
        return Ok(fresh);
    }
    Ok(merge(fresh, read_fingerprints(&path)?))
}

/// A fork's fingerprints: each changed path (`fresh`'s entries, one per change) keeps the
/// parent's fingerprint when the parent had changed it too (the host as the parent saw it,
/// so a host edit since is a conflict), else the fork's own; the run's start is the
/// earlier one, so a host path changed after the parent started is caught. Paths the
/// parent changed and the fork put back as the host has them are no change and drop out.
/// Pure.
pub fn merge(fresh: Fingerprints, inherited: Fingerprints) -> Fingerprints {
    let started = match (
        fresh.run_started_at_unix_ms,
        inherited.run_started_at_unix_ms,
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut parent: HashMap<Vec<u8>, _> = inherited
        .entries
        .into_iter()
        .map(|e| (e.path_bytes.clone(), e))
        .collect();
    let entries = fresh
        .entries
        .into_iter()
        .map(|e| parent.remove(&e.path_bytes).unwrap_or(e))
        .collect();
    Fingerprints {
        run_started_at_unix_ms: started,
        ..Fingerprints::from_entries(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{Fingerprint, FingerprintEntry, HostState};

    fn entry(path: &str, size: u64) -> FingerprintEntry {
        FingerprintEntry {
            path: path.to_owned(),
            path_bytes: path.as_bytes().to_vec(),
            fingerprint: Fingerprint {
                host: HostState::File {
                    size,
                    mode: 0o644,
                    blake3: Some(format!("h{size}")),
                },
                ctime: None,
            },
        }
    }

    fn fps(started: Option<u64>, entries: Vec<FingerprintEntry>) -> Fingerprints {
        Fingerprints {
            run_started_at_unix_ms: started,
            ..Fingerprints::from_entries(entries)
        }
    }

    #[test]
    fn inherited_paths_keep_the_parents_view_of_the_host() {
        let fresh = fps(Some(200), vec![entry("a", 2), entry("b", 2)]);
        let inherited = fps(Some(100), vec![entry("a", 1), entry("gone", 1)]);
        let m = merge(fresh, inherited);
        assert_eq!(m.run_started_at_unix_ms, Some(100));
        // `a` the parent changed: its fingerprint; `b` only the fork: its own; `gone` the
        // fork put back: no change, no fingerprint.
        assert_eq!(m.entries, vec![entry("a", 1), entry("b", 2)]);
    }

    /// A job of a fresh store (in `tmp`) for the workdir `tmp/w`, with its inherited layer.
    fn forked(tmp: &Path) -> (Job, PathBuf) {
        let w = tmp.join("w");
        fs::create_dir(&w).unwrap();
        let store = crate::job::JobStore::open(&tmp.join("s")).unwrap();
        let job = store.create(&w, None).unwrap();
        fs::create_dir(job.inherited()).unwrap();
        (job, w)
    }

    fn whiteout(at: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            at,
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o600),
            0,
        )
        .expect("a 0:0 device (Linux 5.8+ lets any user make one)");
    }

    fn opaque(at: &Path) {
        rustix::fs::setxattr(at, OPAQUE_XATTRS[0], b"y", XattrFlags::empty()).unwrap();
    }

    fn is_opaque(at: &Path) -> bool {
        crate::seal::is_opaque(at)
    }

    fn is_wh(at: &Path) -> bool {
        rustix::fs::lstat(at).is_ok_and(|st| is_whiteout(&st))
    }

    #[test]
    fn flatten_takes_in_what_the_run_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let (job, w) = forked(tmp.path());
        let (l, u) = (job.inherited(), job.upper());
        // The host: what whiteouts may hide.
        fs::write(w.join("gone"), "h").unwrap();
        fs::write(w.join("removed_host"), "h").unwrap();
        fs::create_dir(w.join("o")).unwrap();
        fs::write(w.join("o/host"), "h").unwrap();
        // The parent's stage, as the fork's layer.
        fs::write(l.join("a"), "added").unwrap();
        fs::create_dir_all(l.join("d/deep")).unwrap();
        fs::write(l.join("d/x"), "x").unwrap();
        fs::write(l.join("d/deep/z"), "z").unwrap();
        whiteout(&l.join("gone"));
        fs::create_dir(l.join("o")).unwrap();
        opaque(&l.join("o"));
        fs::write(l.join("o/n"), "n").unwrap();
        fs::write(l.join("shadowed"), "parent").unwrap();
        fs::write(l.join("removed_added"), "parent").unwrap();
        fs::write(l.join("removed_host"), "parent").unwrap();
        fs::create_dir(l.join("replaced")).unwrap();
        fs::write(l.join("replaced/old"), "old").unwrap();
        let a_ino = rustix::fs::lstat(l.join("a")).unwrap().st_ino;
        // What the fork's run left in its upper.
        fs::write(u.join("shadowed"), "fork").unwrap();
        whiteout(&u.join("removed_added"));
        whiteout(&u.join("removed_host"));
        fs::create_dir(u.join("o")).unwrap(); // copied up, not opaque
        fs::write(u.join("o/mine"), "m").unwrap();
        fs::create_dir(u.join("d")).unwrap();
        fs::write(u.join("d/y"), "y").unwrap();
        fs::create_dir(u.join("replaced")).unwrap(); // rm -rf, mkdir: opaque
        opaque(&u.join("replaced"));
        fs::write(u.join("replaced/new"), "new").unwrap();

        let done = flatten(&job, &w).unwrap().unwrap();
        assert!(fs::symlink_metadata(&l).is_err(), "the layer is gone");
        // Moved, the same inode: no copy.
        assert_eq!(fs::read_to_string(u.join("a")).unwrap(), "added");
        assert_eq!(rustix::fs::lstat(u.join("a")).unwrap().st_ino, a_ino);
        assert_eq!(fs::read_to_string(u.join("d/x")).unwrap(), "x");
        assert_eq!(fs::read_to_string(u.join("d/deep/z")).unwrap(), "z");
        assert_eq!(fs::read_to_string(u.join("d/y")).unwrap(), "y");
        assert!(is_wh(&u.join("gone")));
        // The parent's opaque directory stays opaque with both sides' entries.
        assert!(is_opaque(&u.join("o")));
        assert_eq!(fs::read_to_string(u.join("o/n")).unwrap(), "n");
        assert_eq!(fs::read_to_string(u.join("o/mine")).unwrap(), "m");
        // What the fork replaced or removed.
        assert_eq!(fs::read_to_string(u.join("shadowed")).unwrap(), "fork");
        assert!(fs::symlink_metadata(u.join("removed_added")).is_err());
        assert!(is_wh(&u.join("removed_host")));
        assert!(fs::symlink_metadata(u.join("replaced/old")).is_err());
        assert_eq!(fs::read_to_string(u.join("replaced/new")).unwrap(), "new");
        assert_eq!(
            done,
            Flattened {
                moved: 5, // a, gone, d/x, d/deep (whole), o/n
                shadowed: 4,
                whiteouts_dropped: 1,
            }
        );
        // Taken once: a second seal finds no layer.
        assert_eq!(flatten(&job, &w).unwrap(), None);
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn chmod(p: &Path, m: u32) {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    }

    /// Directories their owner may not write (the parent's `chmod 555`, the run's) are lent
    /// for the moves and get their modes back; as a user, a move would fail without it.
    #[test]
    fn flatten_moves_through_read_only_directories_and_keeps_their_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let (job, w) = forked(tmp.path());
        let (l, u) = (job.inherited(), job.upper());
        fs::create_dir_all(l.join("ro/e")).unwrap();
        fs::write(l.join("ro/e/x"), "x").unwrap();
        fs::create_dir(l.join("both")).unwrap();
        fs::write(l.join("both/a"), "a").unwrap();
        fs::create_dir(u.join("both")).unwrap();
        fs::write(u.join("both/b"), "b").unwrap();
        for d in ["ro/e", "ro", "both"] {
            chmod(&l.join(d), 0o555);
        }
        chmod(&u.join("both"), 0o500);
        chmod(&u, 0o555);
        let done = flatten(&job, &w).unwrap().unwrap();
        assert_eq!(done.moved, 2, "{done:?}");
        assert_eq!(fs::read_to_string(u.join("ro/e/x")).unwrap(), "x");
        assert_eq!(fs::read_to_string(u.join("both/a")).unwrap(), "a");
        assert_eq!(fs::read_to_string(u.join("both/b")).unwrap(), "b");
        assert_eq!(
            [
                mode(&u),
                mode(&u.join("ro")),
                mode(&u.join("ro/e")),
                mode(&u.join("both"))
            ],
            [0o555, 0o555, 0o555, 0o500]
        );
        assert!(!job.dir().join(LENT_JOURNAL).exists());
        assert!(!l.exists());
        chmod(&u, 0o755);
    }

    /// A flatten cut short after lending a directory is resumed by the next seal, which
    /// gives it the mode the journal recorded, not the lent one.
    #[test]
    fn a_resumed_flatten_gives_back_the_recorded_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let (job, w) = forked(tmp.path());
        let (l, u) = (job.inherited(), job.upper());
        fs::create_dir(l.join("d")).unwrap();
        fs::write(l.join("d/x"), "x").unwrap();
        fs::create_dir(u.join("d")).unwrap(); // lent already: 0700, was 0555
        let mut lent = Lent::load(job.dir().join(LENT_JOURNAL)).unwrap();
        lent.record(b"d", 0o555).unwrap();
        flatten(&job, &w).unwrap().unwrap();
        assert_eq!(fs::read_to_string(u.join("d/x")).unwrap(), "x");
        assert_eq!(mode(&u.join("d")), 0o555);
        chmod(&u.join("d"), 0o755);
    }

    #[test]
    fn flatten_never_follows_the_runs_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let (job, w) = forked(tmp.path());
        let (l, u) = (job.inherited(), job.upper());
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::create_dir(l.join("d")).unwrap();
        fs::write(l.join("d/x"), "x").unwrap();
        // The run replaced the inherited directory by a symlink out of the stage.
        std::os::unix::fs::symlink(&outside, u.join("d")).unwrap();
        let done = flatten(&job, &w).unwrap().unwrap();
        assert_eq!(done.shadowed, 1);
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
        assert!(
            fs::symlink_metadata(u.join("d"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn a_missing_start_takes_the_other() {
        let m = merge(fps(None, vec![]), fps(Some(7), vec![]));
        assert_eq!(m.run_started_at_unix_ms, Some(7));
        let m = merge(fps(Some(9), vec![]), fps(None, vec![]));
        assert_eq!(m.run_started_at_unix_ms, Some(9));
    }
}
