//! The job store: where jobs live, their mutable `job.json`, the job lock, and how a job
//! is addressed (DESIGN.md §4).
//!
//! Owns the layout below the storage root (`jobs/` and each job's directory), the
//! [`JobState`] file format, atomic small-file writes ([`write_atomic`]), the job lock and
//! the addressing rules of [`JobStore::resolve`]. It may not run processes, mount
//! anything or decide containment: the CLI and the sandbox use the paths it hands out.
//!
//! # Layout
//!
//! ```text
//! <root>/jobs/                       mode 0700
//! <root>/jobs/run-<uuid v7>/         mode 0700: the job directory, or a symlink to the
//!                                    `--stage PATH` directory that holds the same files
//!     job.json                       JobState, rewritten atomically (0600)
//!     lock                           the job lock (flock via File::lock)
//!     upper/  work/                  the overlay's upperdir and workdir (`work/` stays
//!                                    until `drop`: the run does not wait for the unmount)
//!     root/                          empty mount point for the sandbox's new root
//!     inherited/                     a fork's layer of its checkpoint, during its run
//!                                    (`crate::fork`); taken into `upper/` at the seal
//!     run-bundle.json  trace.jsonl  fingerprints.json  apply-ledger.json
//!     reserve  reserve.drop          space held for the records until the command ends,
//!                                    and for `drop`'s state write (`crate::reserve`)
//!     checkpoints/                   savepoints of the stage (`crate::checkpoint`); kept by
//!                                    `drop`, removed with the job by `gc --force` only
//! ```
//!
//! Every directory here is made mode 0700 and every file 0600 whatever the umask, and each
//! is checked to be the caller's alone before it is used (`crate::owned`): a store, `jobs/`
//! or job another user owns or can write is refused ([`JobError::NotOwned`]), and listed
//! as unreadable (so `last` never picks it).
//!
//! A job directory is populated under a hidden temporary name and renamed into `jobs/`
//! only once `job.json` is written and the creator holds the lock, so a listing never sees
//! a half-made job.
//!
//! # Durability
//!
//! Every small-file write is atomic (a reader sees the old file or the new one, also after
//! the writer is killed), but only the records that must survive a power loss are flushed
//! and waited for ([`Durability`]): those of `apply` and `drop`, which change the user's
//! tree or give a stage up. A job's records are not: the stage they describe is not
//! flushed either, so a flushed record could only describe changes a power loss had
//! already lost. Its creation and in-run updates are left to the kernel; the records
//! written when a run ends (fingerprints, bundle, `job.json`) have their writeback started
//! at once ([`Durability::Prompt`]) without the run waiting for the disk. A power loss in
//! that moment can lose the job's last records: a listing then shows the job unreadable or
//! interrupted, never staged with a bundle it does not have. Ids are `run-<uuid v7>` (lowercase, hyphenated): their text sorts by
//! creation time, which is how [`JobStore::list`] orders jobs without reading them.
//!
//! # `job.json`
//!
//! ```json
//! {
//!   "version": 1,
//!   "id": "run-0199d5c8-6f5e-7b3a-9c1d-2e4f6a8b0c1d",
//!   "created_at_unix_ms": 1764477000000,
//!   "workdir": "/home/me/project",
//!   "state": "staged",
//!   "run_state": "completed",
//!   "exit_code": 0,
//!   "command": ["claude"],
//!   "pid": 41234,
//!   "started_at_unix_ms": 1764477000012,
//!   "finished_at_unix_ms": 1764477093001,
//!   "changed_files": 7
//! }
//! ```
//!
//! - `state`: the stage's lifecycle, `active` → `staged` → `applied` | `discarded`; or
//!   `interrupted`: the job was left `active` by a supervisor that is gone (see below).
//! - `run_state`: `null` while running, then `completed` | `failed` | `cancelled` (the
//!   bundle's `run.state`). `exit_code`: the workload's status when it exited.
//! - `command`: the argument vector (lossy UTF-8). `pid`: the supervisor's pid while the
//!   run is live, for display and signals; liveness itself is decided by the lock.
//! - `workdir` is a string, or an array of bytes when the path is not UTF-8.
//! - `started_at_unix_ms` / `finished_at_unix_ms` / `changed_files`: filled by the CLI as
//!   the run progresses and at seal, so `jobs`/`status` need not open the bundle.
//! - `labels` (an object of strings) / `task_id`: `run --label` / `--task-id`, absent when
//!   not given; `jobs` shows and filters them.
//!
//! Every field after `state` may be absent in the file (read as `null`/empty).
//!
//! # The lock
//!
//! Every mutating command holds the job's exclusive lock ([`Job::lock_exclusive`] or
//! [`Job::try_lock`], which fails with [`JobError::Busy`]) while it mutates, and the
//! supervisor holds it for the whole run (it is taken before the job is visible:
//! [`JobStore::create_locked`]). So an `active` job whose lock is free
//! ([`Job::is_locked`] is `false`) has lost its supervisor: a command that finds one
//! may mark it `interrupted`. [`Job::update`] does not lock (locks are per open file: a
//! second lock from the holder itself would wait forever); call it while holding the lock.

use std::ffi::OsString;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::owned::{self, Role};
use cofferdam_record::bundle::{OverlayState, RunState};
use serde::{Deserialize, Serialize};

/// The `version` written to `job.json`.
pub const JOB_STATE_VERSION: u32 = 1;

/// Every job id starts with this.
pub const ID_PREFIX: &str = "run-";

/// The id of a job not created yet: a fresh `run-<uuid v7>`, for a caller that must name
/// things after the job before it exists (a run's cgroup, made before its init starts).
/// Only [`NewJobId::new`] makes one, and [`JobStore::create_locked_as`] uses it up.
#[derive(Debug, PartialEq, Eq)]
pub struct NewJobId(String);

impl NewJobId {
    /// A fresh id.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self(format!("{ID_PREFIX}{}", uuid::Uuid::now_v7().hyphenated()))
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A fork's inherited layer in its job directory ([`Job::inherited`]).
pub const INHERITED_LAYER: &str = "inherited";
const JOBS_DIR: &str = "jobs";
const JOB_FILE: &str = "job.json";
const LOCK_FILE: &str = "lock";
const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// A job-store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A filesystem operation failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done, e.g. `create`, `read`.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// `job.json` does not parse.
    #[error("{} is not a valid job state file: {source}", .path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// `--stage PATH` names a directory that is not empty.
    #[error("the stage directory {} is not empty: give an empty or new directory", .path.display())]
    StageNotEmpty {
        /// The path.
        path: PathBuf,
    },
    /// `--stage PATH` names something that is not a directory.
    #[error("the stage path {} exists and is not a directory", .path.display())]
    StageNotDirectory {
        /// The path.
        path: PathBuf,
    },
    /// The job directory would be inside the workdir the command writes.
    #[error(
        "the stage directory {} is inside the workdir {}: the command could reach its own \
         stage; choose a directory outside the workdir",
        .stage.display(), .workdir.display()
    )]
    StageInsideWorkdir {
        /// The job (stage) directory.
        stage: PathBuf,
        /// The workdir.
        workdir: PathBuf,
    },
    /// No job matches the address.
    #[error("no job matches `{address}`")]
    NotFound {
        /// The address as given.
        address: String,
    },
    /// Several jobs match an id prefix.
    #[error("`{address}` matches several jobs ({}); give more of the id", .candidates.join(", "))]
    Ambiguous {
        /// The address as given.
        address: String,
        /// The matching ids, newest first.
        candidates: Vec<String>,
    },
    /// Another command holds the job's lock.
    #[error("job {id} is in use by another cofferdam command")]
    Busy {
        /// The job id.
        id: String,
    },
    /// A store path is not the caller's alone (`crate::owned`).
    #[error(transparent)]
    NotOwned(#[from] crate::owned::OwnedError),
}

/// Whether `/proc/locks` text `table` has a `FLOCK` lock owned by `pid` on inode `ino`.
/// Lines look like `1: FLOCK  ADVISORY  WRITE 41234 08:02:1311 0 EOF` (blocked waiters
/// have `->` before the type and are not holders). The device is not compared: its
/// numbers there are the superblock's, which differ from `st_dev` on some filesystems
/// (btrfs subvolumes); the owner and the inode together are what identifies the lock.
fn flock_held(table: &str, pid: u32, ino: u64) -> bool {
    table.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&"FLOCK")
            && f.get(4).and_then(|p| p.parse::<u32>().ok()) == Some(pid)
            && f.get(5)
                .and_then(|d| d.rsplit(':').next())
                .and_then(|i| i.parse::<u64>().ok())
                == Some(ino)
    })
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> JobError + 'a {
    move |source| JobError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// The stage's lifecycle as kept in `job.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageState {
    /// The workload is (or was, until sealed) writing into the stage.
    Active,
    /// Sealed, waiting for review; a partial apply leaves the rest here.
    Staged,
    /// Every change was applied.
    Applied,
    /// The stage was dropped.
    Discarded,
    /// Left `active` by a supervisor that is gone (crash, kill -9): never sealed.
    Interrupted,
}

impl StageState {
    /// The bundle's `filesystem.state` for this state; `None` for `interrupted`, which a
    /// bundle cannot express.
    pub fn overlay_state(self) -> Option<OverlayState> {
        match self {
            StageState::Active => Some(OverlayState::Active),
            StageState::Staged => Some(OverlayState::Staged),
            StageState::Applied => Some(OverlayState::Applied),
            StageState::Discarded => Some(OverlayState::Discarded),
            StageState::Interrupted => None,
        }
    }
}

/// The content of `job.json` (see the module docs for the shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobState {
    /// Always [`JOB_STATE_VERSION`].
    #[serde(default = "state_version")]
    pub version: u32,
    /// `run-<uuid v7>`.
    pub id: String,
    /// When the job was created, Unix milliseconds.
    pub created_at_unix_ms: u64,
    /// The workdir (the overlay's lower, the apply target), absolute.
    #[serde(with = "lossless_path")]
    pub workdir: PathBuf,
    /// The stage's lifecycle.
    pub state: StageState,
    /// How execution ended; `None` while running (or never started).
    #[serde(default)]
    pub run_state: Option<RunState>,
    /// The workload's exit status, when it exited.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The argument vector.
    #[serde(default)]
    pub command: Vec<String>,
    /// The supervisor's pid while the run is live.
    #[serde(default)]
    pub pid: Option<u32>,
    /// Execution start, Unix milliseconds.
    #[serde(default)]
    pub started_at_unix_ms: Option<u64>,
    /// Execution finish, Unix milliseconds.
    #[serde(default)]
    pub finished_at_unix_ms: Option<u64>,
    /// Number of changed paths found at seal.
    #[serde(default)]
    pub changed_files: Option<usize>,
    /// `run --label KEY=VALUE`, by key (absent when none).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// `run --task-id ID` (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// For a fork (`fork`, `run --on`, `inspect --keep`): where its stage started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Box<JobParent>>,
}

/// A fork's origin, in `job.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobParent {
    /// The run it was forked from.
    pub run_id: String,
    /// The checkpoint of that run's stage it started from.
    pub checkpoint_id: String,
}

fn state_version() -> u32 {
    JOB_STATE_VERSION
}

/// A path as a JSON string when it is UTF-8, else as an array of its bytes.
mod lossless_path {
    use super::*;
    use serde::{Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
        match path.to_str() {
            Some(text) => s.serialize_str(text),
            None => s.collect_seq(path.as_os_str().as_bytes()),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(match Repr::deserialize(d)? {
            Repr::Text(t) => PathBuf::from(t),
            Repr::Bytes(b) => PathBuf::from(OsString::from_vec(b)),
        })
    }
}

/// One job: its id and directory. Cheap to clone; holds no open files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    id: String,
    dir: PathBuf,
}

impl Job {
    /// Open the job whose directory is `dir` (its `job.json` is read for the id).
    /// The directory, its parents and its records must be the caller's (`crate::owned`).
    pub fn open(dir: &Path) -> Result<Job, JobError> {
        let dir = fs::canonicalize(dir).map_err(io_err("open", dir))?;
        owned::check_job_dir(&dir, true)?;
        let state = read_state(&dir.join(JOB_FILE))?;
        Ok(Job { id: state.id, dir })
    }

    /// The id, `run-<uuid v7>`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The job directory (for a `--stage` job, the stage directory itself).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The overlay's upperdir: the stage.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// The overlay's workdir (same filesystem as the upper).
    pub fn overlay_work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// An empty directory to mount the sandbox's new root on.
    pub fn new_root(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// `run-bundle.json`.
    pub fn bundle_path(&self) -> PathBuf {
        self.dir.join("run-bundle.json")
    }

    /// `trace.jsonl`.
    pub fn trace_path(&self) -> PathBuf {
        self.dir.join("trace.jsonl")
    }

    /// `fingerprints.json`.
    pub fn fingerprints_path(&self) -> PathBuf {
        self.dir.join("fingerprints.json")
    }

    /// `inherited/`: a fork's layer of its checkpoint while its run goes
    /// ([`crate::fork`]); gone once the seal has taken it into the stage.
    pub fn inherited(&self) -> PathBuf {
        self.dir.join(INHERITED_LAYER)
    }

    /// `apply-ledger.json`.
    pub fn ledger_path(&self) -> PathBuf {
        self.dir.join("apply-ledger.json")
    }

    /// `job.json`.
    pub fn state_path(&self) -> PathBuf {
        self.dir.join(JOB_FILE)
    }

    /// The lock file.
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    /// Read `job.json`.
    pub fn state(&self) -> Result<JobState, JobError> {
        read_state(&self.state_path())
    }

    /// Read `job.json`, let `f` change it, and rewrite it atomically and durably; the new
    /// state. The id cannot be changed (it is restored). Call it while holding the job lock.
    pub fn update(&self, f: impl FnOnce(&mut JobState)) -> Result<JobState, JobError> {
        self.update_with(Durability::Durable, f)
    }

    /// [`Job::update`] with the flushes `durability` asks for.
    pub fn update_with(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut JobState),
    ) -> Result<JobState, JobError> {
        let mut state = self.state()?;
        f(&mut state);
        state.id.clone_from(&self.id);
        write_state(&self.state_path(), &state, durability)?;
        Ok(state)
    }

    /// Release the records reserve (see `crate::reserve`); the bytes that were available
    /// on the job's filesystem just before, when known.
    pub fn release_reserve(&self) -> Option<u64> {
        crate::reserve::release(&self.dir)
    }

    /// Release the small reserve kept for `drop` (see `crate::reserve`).
    pub fn release_drop_reserve(&self) {
        crate::reserve::release_for_drop(&self.dir);
    }

    /// Take the job's exclusive lock, waiting for it. Holding it means the run is over, so
    /// the records reserve is released.
    pub fn lock_exclusive(&self) -> Result<JobLock, JobError> {
        let file = self.open_lock_file()?;
        file.lock().map_err(io_err("lock", &self.lock_path()))?;
        self.release_reserve();
        Ok(JobLock {
            _file: file,
            id: self.id.clone(),
        })
    }

    /// Take the job's exclusive lock, or fail with [`JobError::Busy`] when it is held (the
    /// records reserve is released when it is taken).
    pub fn try_lock(&self) -> Result<JobLock, JobError> {
        let file = self.open_lock_file()?;
        match file.try_lock() {
            Ok(()) => {
                self.release_reserve();
                Ok(JobLock {
                    _file: file,
                    id: self.id.clone(),
                })
            }
            Err(fs::TryLockError::WouldBlock) => Err(JobError::Busy {
                id: self.id.clone(),
            }),
            Err(fs::TryLockError::Error(e)) => Err(io_err("lock", &self.lock_path())(e)),
        }
    }

    /// Whether some process holds the lock right now (for an `active` job: whether its
    /// supervisor is alive). A probe without effect on the job: when the lock is free it is
    /// taken and let go at once on a descriptor of its own, and nothing else happens (the
    /// records reserve stays; only a real lock releases it).
    pub fn is_locked(&self) -> Result<bool, JobError> {
        let file = self.open_lock_file()?;
        match file.try_lock() {
            Ok(()) => Ok(false),
            Err(fs::TryLockError::WouldBlock) => Ok(true),
            Err(fs::TryLockError::Error(e)) => Err(io_err("lock", &self.lock_path())(e)),
        }
    }

    /// Whether process `pid` itself holds the job's lock, from the kernel's table of file
    /// locks (`/proc/locks`: a `FLOCK` entry on the lock file's inode whose owner is `pid`);
    /// `None` when that table cannot be read. Without effect on the lock.
    pub fn lock_held_by(&self, pid: u32) -> Result<Option<bool>, JobError> {
        let ino = fs::metadata(self.lock_path())
            .map_err(io_err("inspect", &self.lock_path()))?
            .ino();
        let Ok(table) = fs::read_to_string("/proc/locks") else {
            return Ok(None);
        };
        Ok(Some(flock_held(&table, pid, ino)))
    }

    fn open_lock_file(&self) -> Result<File, JobError> {
        let path = self.lock_path();
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .map_err(io_err("open", &path))
    }

    /// Remove the overlay's workdir (`work/`) once the overlay is unmounted. The kernel
    /// creates `work/work` with mode 000, so directories are made accessible first. Absent
    /// is fine.
    pub fn remove_overlay_work(&self) -> Result<(), JobError> {
        let work = self.overlay_work();
        match fs::symlink_metadata(&work) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("inspect", &work)(e)),
            Ok(m) if !m.is_dir() => {
                return fs::remove_file(&work).map_err(io_err("remove", &work));
            }
            Ok(_) => {}
        }
        make_removable(&work)?;
        fs::remove_dir_all(&work).map_err(io_err("remove", &work))
    }
}

impl Job {
    /// Remove the stage (`upper/`), the overlay's `work/` and a copy-tier run's leftovers
    /// (`copy/`, `home/`, `tmp/`), for `drop`: the records
    /// (`job.json`, the bundle, the trace, fingerprints, the ledger) stay. Directories are
    /// made accessible first; absent is fine. Call it while holding the job lock.
    pub fn remove_stage(&self) -> Result<(), JobError> {
        self.remove_overlay_work()?;
        // A copy-tier run interrupted before its seal leaves its copy, HOME stage and temp
        // directory behind (`cofferdam_stage::copystage`).
        // `bases/`: the host's copies of modified files kept for merges (`crate::base`).
        // `inherited/`: a fork's layer, left by a run interrupted before its seal.
        for name in ["copy", "home", "tmp", "bases", INHERITED_LAYER] {
            let dir = self.dir.join(name);
            if fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                make_removable(&dir)?;
                fs::remove_dir_all(&dir).map_err(io_err("remove", &dir))?;
            }
        }
        let upper = self.upper();
        match fs::symlink_metadata(&upper) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("inspect", &upper)(e)),
            Ok(m) if !m.is_dir() => fs::remove_file(&upper).map_err(io_err("remove", &upper)),
            Ok(_) => {
                make_removable(&upper)?;
                fs::remove_dir_all(&upper).map_err(io_err("remove", &upper))
            }
        }
    }

    /// Whether the stage (`upper/`) is still on disk.
    pub fn has_stage(&self) -> bool {
        fs::symlink_metadata(self.upper()).is_ok()
    }
}

/// Give every directory under `dir` (itself included) owner rwx, top-down, so that it can
/// be listed and emptied. Symlinks are not followed.
fn make_removable(dir: &Path) -> Result<(), JobError> {
    let meta = fs::symlink_metadata(dir).map_err(io_err("inspect", dir))?;
    if !meta.is_dir() {
        return Ok(());
    }
    if meta.mode() & 0o700 != 0o700 {
        let mode = (meta.mode() & 0o7777) | 0o700;
        fs::set_permissions(dir, fs::Permissions::from_mode(mode)).map_err(io_err("chmod", dir))?;
    }
    for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        let is_dir = entry
            .file_type()
            .map_err(io_err("inspect", &entry.path()))?
            .is_dir();
        if is_dir {
            make_removable(&entry.path())?;
        }
    }
    Ok(())
}

/// The job's exclusive lock; released when dropped.
#[derive(Debug)]
pub struct JobLock {
    _file: File,
    id: String,
}

impl JobLock {
    /// The locked job's id.
    pub fn job_id(&self) -> &str {
        &self.id
    }
}

/// One line of a job listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobSummary {
    /// A job whose `job.json` was read.
    Readable {
        /// The job.
        job: Job,
        /// Its state.
        state: JobState,
    },
    /// A job directory whose `job.json` could not be read: listed, not fatal.
    Unreadable {
        /// The directory's name (the id).
        id: String,
        /// The directory.
        dir: PathBuf,
        /// Why, for display.
        error: String,
    },
}

impl JobSummary {
    /// The id.
    pub fn id(&self) -> &str {
        match self {
            JobSummary::Readable { job, .. } => job.id(),
            JobSummary::Unreadable { id, .. } => id,
        }
    }

    /// The job directory.
    pub fn dir(&self) -> &Path {
        match self {
            JobSummary::Readable { job, .. } => job.dir(),
            JobSummary::Unreadable { dir, .. } => dir,
        }
    }
}

/// The jobs below a storage root.
#[derive(Debug, Clone)]
pub struct JobStore {
    root: PathBuf,
    jobs: PathBuf,
}

impl JobStore {
    /// Open the store at `root` (from [`crate::storage_root`]), creating `root` (and its
    /// missing parents) and `root/jobs`, mode 0700 whatever the umask, when absent. Both
    /// must then be the caller's (`crate::owned`): a store another user owns or can write,
    /// or one below a parent they could swap it in, is refused. The store is kept by its
    /// canonical path.
    pub fn open(root: &Path) -> Result<JobStore, JobError> {
        let root = own_dir(root, Role::StoreRoot, true)?;
        let jobs = own_dir(&root.join(JOBS_DIR), Role::JobsDir, false)?;
        Ok(JobStore { root, jobs })
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `root/jobs`.
    pub fn jobs_dir(&self) -> &Path {
        &self.jobs
    }

    /// Create a job for `workdir` (absolute), in `jobs/<id>/` or in `stage_dir` (which
    /// must be empty or absent; `jobs/<id>` is then a symlink to it). The job starts
    /// `active` with an empty command: set the rest with [`Job::update`].
    pub fn create(&self, workdir: &Path, stage_dir: Option<&Path>) -> Result<Job, JobError> {
        self.create_locked(workdir, stage_dir)
            .map(|(job, _lock)| job)
    }

    /// [`JobStore::create`], returning the job's lock too: it is taken before the job
    /// becomes visible, so no other command can act on the job before the caller lets go.
    pub fn create_locked(
        &self,
        workdir: &Path,
        stage_dir: Option<&Path>,
    ) -> Result<(Job, JobLock), JobError> {
        self.create_locked_with(workdir, stage_dir, |_| {})
    }

    /// [`JobStore::create_locked`], with `init` filling in the first `job.json` (a run's
    /// command line and pid, known before the job exists: one write of `job.json` fewer
    /// than an [`Job::update`] right after). The id, workdir and `active` state are kept.
    pub fn create_locked_with(
        &self,
        workdir: &Path,
        stage_dir: Option<&Path>,
        init: impl FnOnce(&mut JobState),
    ) -> Result<(Job, JobLock), JobError> {
        self.create_locked_as(NewJobId::new(), workdir, stage_dir, init)
    }

    /// [`JobStore::create_locked_with`], the job taking the id `id` chosen beforehand.
    pub fn create_locked_as(
        &self,
        id: NewJobId,
        workdir: &Path,
        stage_dir: Option<&Path>,
        init: impl FnOnce(&mut JobState),
    ) -> Result<(Job, JobLock), JobError> {
        let id = id.0;
        let entry = self.jobs.join(&id);
        let workdir_canon = fs::canonicalize(workdir).unwrap_or_else(|_| workdir.to_path_buf());
        let mut state = JobState {
            version: JOB_STATE_VERSION,
            id: id.clone(),
            created_at_unix_ms: now_unix_ms(),
            workdir: workdir.to_path_buf(),
            state: StageState::Active,
            run_state: None,
            exit_code: None,
            command: Vec::new(),
            pid: None,
            started_at_unix_ms: None,
            finished_at_unix_ms: None,
            changed_files: None,
            labels: Default::default(),
            task_id: None,
            parent: None,
        };
        init(&mut state);
        state.id.clone_from(&id);
        state.workdir = workdir.to_path_buf();
        state.state = StageState::Active;
        match stage_dir {
            None => {
                let root_canon =
                    fs::canonicalize(&self.jobs).map_err(io_err("open", &self.jobs))?;
                check_outside(&root_canon.join(&id), &workdir_canon)?;
                // Populate under a hidden name, then rename into place.
                let tmp = self.jobs.join(format!(".new-{id}"));
                DirBuilder::new()
                    .mode(DIR_MODE)
                    .create(&tmp)
                    .map_err(io_err("create", &tmp))?;
                // Not flushed: see "Durability" in the module docs.
                let made = populate(&tmp, &id, &state).and_then(|lock| {
                    fs::rename(&tmp, &entry).map_err(io_err("rename", &tmp))?;
                    Ok(lock)
                });
                match made {
                    Ok(lock) => {
                        let dir = root_canon.join(&id);
                        Ok((Job { id, dir }, lock))
                    }
                    Err(e) => {
                        let _ = remove_tree(&tmp);
                        Err(e)
                    }
                }
            }
            Some(stage) => {
                let created = prepare_stage_dir(stage)?;
                let cleanup = |stage: &Path| {
                    if created {
                        let _ = remove_tree(stage);
                    } else if let Ok(rd) = fs::read_dir(stage) {
                        for e in rd.flatten() {
                            let _ = remove_tree(&e.path());
                        }
                    }
                };
                let stage_canon = match fs::canonicalize(stage) {
                    Ok(p) => p,
                    Err(e) => {
                        cleanup(stage);
                        return Err(io_err("open", stage)(e));
                    }
                };
                if let Err(e) = check_outside(&stage_canon, &workdir_canon) {
                    cleanup(&stage_canon);
                    return Err(e);
                }
                // A directory another user owns or could change is refused, and left as
                // it is (it is not ours to empty).
                if let Err(e) = owned::check_parents(&stage_canon)
                    .and_then(|()| owned::check_dir(&stage_canon, Role::JobDir))
                {
                    if created {
                        cleanup(&stage_canon);
                    }
                    return Err(e.into());
                }
                let made = populate(&stage_canon, &id, &state).and_then(|lock| {
                    std::os::unix::fs::symlink(&stage_canon, &entry)
                        .map_err(io_err("link", &entry))?;
                    Ok(lock)
                });
                match made {
                    Ok(lock) => Ok((
                        Job {
                            id,
                            dir: stage_canon,
                        },
                        lock,
                    )),
                    Err(e) => {
                        cleanup(&stage_canon);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Every job, newest first. Only each `job.json` is read; one that cannot be read is
    /// listed as [`JobSummary::Unreadable`]. Fails only when `jobs/` cannot be listed.
    pub fn list(&self) -> Result<Vec<JobSummary>, JobError> {
        let mut out: Vec<JobSummary> = self
            .job_names()?
            .into_iter()
            .map(|id| {
                let entry = self.jobs.join(&id);
                let canon = fs::canonicalize(&entry);
                let found = canon.is_ok();
                let dir = canon.unwrap_or(entry);
                // Only a `--stage` job lives elsewhere: its parents are checked too. A
                // dangling entry (a `--stage` directory removed since) is unreadable below.
                let elsewhere = dir.parent() != Some(self.jobs.as_path());
                if found && let Err(e) = owned::check_job_dir(&dir, elsewhere) {
                    return JobSummary::Unreadable {
                        id,
                        dir,
                        error: e.to_string(),
                    };
                }
                match read_state(&dir.join(JOB_FILE)) {
                    Ok(state) if state.id == id => JobSummary::Readable {
                        job: Job { id, dir },
                        state,
                    },
                    Ok(state) => JobSummary::Unreadable {
                        error: format!("its job.json names another job, {}", state.id),
                        id,
                        dir,
                    },
                    Err(e) => JobSummary::Unreadable {
                        id,
                        dir,
                        error: e.to_string(),
                    },
                }
            })
            .collect();
        out.sort_by(|a, b| b.id().cmp(a.id()));
        Ok(out)
    }

    /// Find a job by address: `last` (the newest job whose workdir is `cwd`), a unique
    /// prefix of an id (with or without `run-`), or the path of a job directory (anything
    /// with a `/`, `.` or `..`; a bare name that is no id prefix is tried as a path too).
    pub fn resolve(&self, address: &str, cwd: &Path) -> Result<Job, JobError> {
        let not_found = || JobError::NotFound {
            address: address.to_owned(),
        };
        if address == "last" {
            let cwd_canon = fs::canonicalize(cwd).ok();
            return self
                .list()?
                .into_iter()
                .find_map(|s| match s {
                    JobSummary::Readable { job, state }
                        if state.workdir == cwd
                            || cwd_canon.as_deref() == Some(state.workdir.as_path()) =>
                    {
                        Some(job)
                    }
                    _ => None,
                })
                .ok_or_else(not_found);
        }
        let open_path = |p: &Path| match Job::open(&cwd.join(p)) {
            Err(JobError::Io { source, .. })
                if matches!(
                    source.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Err(not_found())
            }
            other => other,
        };
        if address.contains('/') || address == "." || address == ".." {
            return open_path(Path::new(address));
        }
        let prefix = address
            .strip_prefix(ID_PREFIX)
            .unwrap_or(address)
            .to_ascii_lowercase();
        if prefix.is_empty() {
            return Err(not_found());
        }
        let mut matches: Vec<String> = self
            .job_names()?
            .into_iter()
            .filter(|id| {
                id.strip_prefix(ID_PREFIX)
                    .is_some_and(|rest| rest.starts_with(&prefix))
            })
            .collect();
        matches.sort_by(|a, b| b.cmp(a));
        match matches.as_slice() {
            [one] => Job::open(&self.jobs.join(one)),
            [] => open_path(Path::new(address)),
            _ => Err(JobError::Ambiguous {
                address: address.to_owned(),
                candidates: matches,
            }),
        }
    }

    /// The names in `jobs/` that look like job ids.
    fn job_names(&self) -> Result<Vec<String>, JobError> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.jobs).map_err(io_err("list", &self.jobs))? {
            let entry = entry.map_err(io_err("list", &self.jobs))?;
            if let Some(name) = entry.file_name().to_str()
                && name.starts_with(ID_PREFIX)
            {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
}

/// Fill a fresh job directory: `upper/`, `work/`, `root/`, the lock (taken) and `job.json`.
fn populate(dir: &Path, id: &str, state: &JobState) -> Result<JobLock, JobError> {
    chmod_dir_nofollow(dir, DIR_MODE)?;
    for sub in ["upper", "work", "root"] {
        let p = dir.join(sub);
        DirBuilder::new()
            .mode(DIR_MODE)
            .create(&p)
            .map_err(io_err("create", &p))?;
        chmod_dir_nofollow(&p, DIR_MODE)?;
    }
    // The upper's root stands for the workdir itself (the seal compares their modes): it
    // starts with the workdir's mode, so a run that never got to its mount stages nothing.
    if let Ok(meta) = fs::metadata(&state.workdir) {
        let upper = dir.join("upper");
        // Owner rwx kept: the copy tiers fill it as the user (and set its mode last).
        chmod_dir_nofollow(&upper, (meta.mode() & 0o7777) | 0o700)?;
    }
    let lock_path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(&lock_path)
        .map_err(io_err("create", &lock_path))?;
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))
        .map_err(io_err("chmod", &lock_path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            return Err(JobError::Busy { id: id.to_owned() });
        }
        Err(fs::TryLockError::Error(e)) => return Err(io_err("lock", &lock_path)(e)),
    }
    crate::reserve::make(dir);
    write_state(&dir.join(JOB_FILE), state, Durability::Volatile)?;
    Ok(JobLock {
        _file: file,
        id: id.to_owned(),
    })
}

/// Make sure `--stage PATH` is usable: absent (created, mode 0700; `true`) or an empty
/// directory (`false`).
fn prepare_stage_dir(stage: &Path) -> Result<bool, JobError> {
    match fs::symlink_metadata(stage) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new()
                .mode(DIR_MODE)
                .create(stage)
                .map_err(io_err("create", stage))?;
            Ok(true)
        }
        Err(e) => Err(io_err("inspect", stage)(e)),
        Ok(m) if !m.is_dir() => Err(JobError::StageNotDirectory {
            path: stage.to_path_buf(),
        }),
        Ok(_) => {
            let mut entries = fs::read_dir(stage).map_err(io_err("list", stage))?;
            if entries.next().is_some() {
                return Err(JobError::StageNotEmpty {
                    path: stage.to_path_buf(),
                });
            }
            Ok(false)
        }
    }
}

/// Refuse a job directory inside (or equal to) the workdir; both canonical.
fn check_outside(stage: &Path, workdir: &Path) -> Result<(), JobError> {
    if stage.starts_with(workdir) {
        return Err(JobError::StageInsideWorkdir {
            stage: stage.to_path_buf(),
            workdir: workdir.to_path_buf(),
        });
    }
    Ok(())
}

fn read_state(path: &Path) -> Result<JobState, JobError> {
    let bytes = fs::read(path).map_err(io_err("read", path))?;
    serde_json::from_slice(&bytes).map_err(|source| JobError::Corrupt {
        path: path.to_path_buf(),
        source,
    })
}

fn write_state(path: &Path, state: &JobState, durability: Durability) -> Result<(), JobError> {
    let mut bytes = serde_json::to_vec_pretty(state).map_err(|source| JobError::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    write_atomic_with(path, &bytes, FILE_MODE, durability).map_err(io_err("write", path))
}

/// Make the directory `path` when absent (mode 0700 whatever the umask; with `parents`, its
/// missing parents too), then check it is the caller's (`crate::owned`); its canonical
/// path. The last component is never followed: a symlink there is refused.
fn own_dir(path: &Path, role: Role, parents: bool) -> Result<PathBuf, JobError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if parents && let Some(up) = path.parent() {
                DirBuilder::new()
                    .recursive(true)
                    .mode(DIR_MODE)
                    .create(up)
                    .map_err(io_err("create", up))?;
            }
            match DirBuilder::new().mode(DIR_MODE).create(path) {
                Ok(()) => {
                    chmod_dir_nofollow(path, DIR_MODE)?;
                    if let Some(up) = path.parent() {
                        sync_dir(up)?;
                    }
                }
                // Made by someone else meanwhile: the check below judges it.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create", path)(e)),
            }
        }
        Err(e) => return Err(io_err("inspect", path)(e)),
        Ok(_) => {}
    }
    let canon = match (path.parent(), path.file_name()) {
        (Some(up), Some(name)) => fs::canonicalize(up).map_err(io_err("open", up))?.join(name),
        _ => fs::canonicalize(path).map_err(io_err("open", path))?,
    };
    owned::check_parents(&canon)?;
    owned::check_dir(&canon, role)?;
    Ok(canon)
}

/// Set the mode of the directory `path` through a descriptor opened without following a
/// symlink (the umask cannot take bits away from it, and nothing else is changed).
fn chmod_dir_nofollow(path: &Path, mode: u32) -> Result<(), JobError> {
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io_err("open", path)(e.into()))?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(mode))
        .map_err(|e| io_err("chmod", path)(e.into()))
}

fn sync_dir(dir: &Path) -> Result<(), JobError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync", dir))
}

fn remove_tree(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    }
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How much of an atomic write must survive a power loss (every level survives the writer
/// being killed: readers see the old file or the new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The file and its rename are flushed (file fsync, directory fsync).
    Durable,
    /// The file's writeback is started (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) but not
    /// waited for, nor is the rename flushed: the kernel writes it out at once, in the
    /// background, and a power loss in that moment can lose the write.
    Prompt,
    /// Nothing is flushed.
    Volatile,
}

/// Write `bytes` to `path` atomically and durably: a temporary file beside it (created
/// exclusively, with `mode`), fsync, rename over `path`, fsync of the directory. A crash
/// leaves either the old file or the new one, never a mix; a stray temporary file
/// (`.<name>.tmp-*`) at worst.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomic_with(path, bytes, mode, Durability::Durable)
}

/// [`write_atomic`] with the flushes `durability` asks for.
pub fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        match durability {
            Durability::Durable => file.sync_all()?,
            Durability::Prompt => {
                // Only a hint: a filesystem that cannot start writeback here loses nothing
                // but the promptness.
                use std::os::fd::AsRawFd;
                // SAFETY: sync_file_range reads no memory of ours; `file` is open for the
                // whole call.
                let _ = unsafe {
                    libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE)
                };
            }
            Durability::Volatile => {}
        }
        drop(file);
        fs::rename(&tmp, path)?;
        match durability {
            Durability::Durable => File::open(dir)?.sync_all(),
            Durability::Prompt | Durability::Volatile => Ok(()),
        }
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::flock_held;

    #[test]
    fn a_flock_holder_is_found_by_owner_and_inode_and_a_waiter_is_not() {
        let table = "1: FLOCK  ADVISORY  WRITE 41234 08:02:1311 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 555 08:02:1311 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 777 00:1f:99 0 EOF\n";
        assert!(flock_held(table, 41234, 1311));
        assert!(!flock_held(table, 41234, 1312));
        assert!(!flock_held(table, 555, 1311));
        assert!(!flock_held(table, 777, 99));
        assert!(!flock_held("garbage\n\n1:", 1, 1));
    }

    use super::*;

    #[test]
    fn every_durability_replaces_the_file_whole_with_its_mode_and_no_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        for (i, d) in [
            Durability::Durable,
            Durability::Prompt,
            Durability::Volatile,
        ]
        .into_iter()
        .enumerate()
        {
            let text = format!("{{\"n\": {i}}}\n");
            write_atomic_with(&path, text.as_bytes(), 0o600, d).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), text, "{d:?}");
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o600, "{d:?}");
        }
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("record.json")]);
    }

    #[test]
    fn non_utf8_workdir_round_trips() {
        let state = JobState {
            version: JOB_STATE_VERSION,
            id: "run-x".into(),
            created_at_unix_ms: 1,
            workdir: PathBuf::from(OsString::from_vec(b"/w/\xff".to_vec())),
            state: StageState::Active,
            run_state: None,
            exit_code: None,
            command: vec![],
            pid: None,
            started_at_unix_ms: None,
            finished_at_unix_ms: None,
            changed_files: None,
            labels: Default::default(),
            task_id: None,
            parent: None,
        };
        let v = serde_json::to_value(&state).unwrap();
        assert_eq!(v["workdir"], serde_json::json!([47, 119, 47, 255]));
        assert_eq!(v["run_state"], serde_json::Value::Null);
        let back: JobState = serde_json::from_value(v).unwrap();
        assert_eq!(back, state);
    }

    #[test]
    fn minimal_job_json_reads() {
        let s: JobState = serde_json::from_str(
            r#"{"id":"run-1","created_at_unix_ms":5,"workdir":"/w","state":"interrupted"}"#,
        )
        .unwrap();
        assert_eq!(s.version, JOB_STATE_VERSION);
        assert_eq!(s.state, StageState::Interrupted);
        assert_eq!(s.state.overlay_state(), None);
        assert!(s.command.is_empty());
    }

    #[test]
    fn stage_inside_workdir_is_refused() {
        assert!(check_outside(Path::new("/w/.stage"), Path::new("/w")).is_err());
        assert!(check_outside(Path::new("/w"), Path::new("/w")).is_err());
        assert!(check_outside(Path::new("/wx/s"), Path::new("/w")).is_ok());
    }
}
