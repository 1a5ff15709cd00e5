//! `filesystem`: the stage a run's writes were held in, and its classified net changes.
//!
//! Owns `FilesystemSummary`, the stage lifecycle `OverlayState`, the resolved
//! `FileAccessPolicy`, and `ChangeEntry` with its kinds and types. It may not scan, compare
//! or apply anything: `cofferdam-stage` classifies and fills these values.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `filesystem`: the staged filesystem. Absent for runs that wrote directly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FilesystemSummary {
    /// Where the stage is in its lifecycle; distinct from `run.state`.
    pub state: OverlayState,
    /// The host directory changes are applied to (the workdir).
    pub target: PathBuf,
    /// The stage's backing directory (the overlay upper, or the scoped tier's copy).
    pub upper: PathBuf,
    /// Number of changed paths (not of write syscalls).
    pub changed_files: usize,
    /// Number of deletion/opacity markers (whiteouts and opaque directories).
    pub whiteouts: usize,
    /// Whether the target is `/`. cofferdam never overlays `/`: always `false`.
    #[serde(default)]
    pub root_overlay: bool,
    /// Paths excluded from a root overlay. Always empty for cofferdam.
    #[serde(default)]
    pub excluded_paths: Vec<PathBuf>,
    /// The resolved file policy the run ran under.
    #[serde(default)]
    pub access_policy: FileAccessPolicy,
    /// Host root device identity (root overlays only; never set by cofferdam).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_root_device: Option<u64>,
    /// Host root inode identity (root overlays only; never set by cofferdam).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_root_inode: Option<u64>,
    /// Mirrored host uid (root overlays only; never set by cofferdam).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_uid: Option<u32>,
    /// Mirrored host gid (root overlays only; never set by cofferdam).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_gid: Option<u32>,
    /// A few changed paths for display; not the complete changeset.
    #[serde(default)]
    pub sample_paths: Vec<String>,
    /// The classified net changes.
    #[serde(default)]
    pub changes: Vec<ChangeEntry>,
}

/// The stage's lifecycle: `active` → `staged` → `applied` | `discarded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverlayState {
    /// The workload is still writing into the stage.
    Active,
    /// Sealed and waiting for review; a partial apply leaves the rest here.
    Staged,
    /// Every change was applied to the target.
    Applied,
    /// The stage was dropped.
    Discarded,
}

/// `filesystem.access_policy`: the file policy as resolved for this run. Every list is
/// omitted when empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileAccessPolicy {
    /// Paths visible read-only (bind-mounted read-only on the sealed tier).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<PathBuf>,
    /// Paths never visible to the workload (credentials, host secrets, the job store).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathBuf>,
    /// Explicit mounts from the manifest (`[filesystem] mounts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountGrant>,
}

/// One explicit mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MountGrant {
    /// Host path.
    pub source: PathBuf,
    /// Path inside the sandbox.
    pub target: PathBuf,
    /// How it is mounted.
    pub mode: MountMode,
}

/// How an explicit mount is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MountMode {
    /// Read-only.
    Read,
    /// Writable, with writes held in the stage.
    Stage,
    /// Writable straight through to the host (not staged, not reviewable).
    Write,
    /// Hidden.
    Hide,
}

/// `filesystem.changes[]`: one classified net change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChangeEntry {
    /// Display path, relative to the target.
    pub path: String,
    /// The exact Unix path bytes, when `path` cannot represent them losslessly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// How the path changed.
    pub kind: ChangeKind,
    /// The type before the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_type: Option<ChangeEntryType>,
    /// The type after the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_type: Option<ChangeEntryType>,
    /// The current size, for files and symlinks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// The Unix numeric mode (e.g. 420 is 0644).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// How a path changed (DESIGN.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// New path.
    Added,
    /// Content or mode differs.
    Modified,
    /// Removed (a whiteout in the stage).
    Deleted,
    /// The file type changed (e.g. file → symlink).
    TypeChanged,
    /// A directory replaced as a whole (opaque): its host contents are hidden.
    Opaque,
}

/// A filesystem object type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeEntryType {
    /// Regular file.
    File,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// Device node, fifo or socket.
    Other,
}
