//! The portable job archive (`cofferdam export` / `cofferdam import`, issue 24): one
//! zstd-compressed tar of a sealed job's records and stage, with a manifest that says what
//! every entry is and its digest.
//!
//! Owns the format ([`Manifest`], [`FORMAT`], [`VERSION`], the entry names) and the pure
//! check of a manifest against the rules an importer needs ([`check_manifest`]); the
//! effects are in [`export`] (reads a job, writes an archive) and [`import`] (reads an
//! archive, writes one new job directory and nothing else). It may not touch a workdir.
//!
//! # Layout
//!
//! ```text
//! cofferdam-export.json      the manifest (always the first entry)
//! records/run-bundle.json    the job's records, as regular files
//! records/fingerprints.json
//! records/trace.jsonl
//! stage/…                    the upper directory, parents before children, sorted by
//!                            name bytes: directories, regular files, symlinks, and
//!                            whiteouts (empty regular entries)
//! ```
//!
//! The manifest is the authority; the tar framing only carries it (GNU long names, so any
//! path bytes fit, newlines and non-UTF-8 included). A file entry's tar data is the file's
//! data ranges concatenated; the manifest gives its length and the ranges, so holes stay
//! holes. Whiteouts and opaque directories, which overlayfs marks with a device node or an
//! extended attribute, are manifest types, so the archive holds no device and needs no
//! xattr support to be read. Owners and timestamps are not carried (the seal ignores them).
//!
//! # What an importer refuses
//!
//! A path that is empty, absolute, or has `.`, `..` or empty components; a path given
//! twice; an entry whose parent is not a directory of the archive listed before it (so
//! nothing is reached through a symlink, a file or a whiteout); a tar entry that is not a
//! regular file, directory or symlink (hard links, devices, fifos, GNU sparse entries); a tar
//! entry that is not the next one the manifest lists, or whose size differs; an entry
//! larger than the limits below; a digest that does not match; an archive that ends before
//! the manifest's last entry or has entries after it; a manifest of another format or
//! version. The importer writes only beneath the new job's directory, with `*at` calls on
//! directories it made itself, never following a symlink (`crate::fsops`).

pub mod export;
pub mod import;

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io;
use std::path::PathBuf;

use crate::job::JobState;

/// The manifest's `format`.
pub const FORMAT: &str = "cofferdam-export";
/// The manifest's `version` this build writes and reads.
pub const VERSION: u32 = 1;
/// The manifest's tar name.
pub const MANIFEST_NAME: &str = "cofferdam-export.json";
/// The records' tar directory.
pub const RECORDS_DIR: &str = "records/";
/// The stage's tar directory.
pub const STAGE_DIR: &str = "stage/";
/// The record files an archive may carry, and whether each must be there.
pub const RECORDS: [(&str, bool); 3] = [
    ("run-bundle.json", true),
    ("fingerprints.json", true),
    ("trace.jsonl", false),
];
/// The largest manifest an importer reads.
pub const MAX_MANIFEST: u64 = 64 << 20;
/// The largest record file an importer reads.
pub const MAX_RECORD: u64 = 1 << 30;
/// The largest staged file (its length, holes included) an importer makes.
pub const MAX_FILE: u64 = 1 << 42;
/// The largest symlink target.
pub const MAX_TARGET: usize = 4096;
/// The most stage entries an importer makes.
pub const MAX_ENTRIES: usize = 4_000_000;

/// The archive's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// The exported job's `job.json` as it was (id, workdir, command, how the run ended).
    pub origin: JobState,
    /// The record files, in archive order.
    pub records: Vec<Record>,
    /// The stage's entries, in archive order.
    pub stage: Vec<StageEntry>,
}

/// One record file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Its name in the job directory (one of [`RECORDS`]).
    pub name: String,
    /// Its length.
    pub size: u64,
    /// BLAKE3 of its bytes, lowercase hex.
    pub blake3: String,
}

/// One entry of the stage (unknown fields are refused by [`EntryKind`]: `flatten` lets
/// only the inner type deny them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageEntry {
    /// The path below the upper directory, as bytes.
    pub path_bytes: Vec<u8>,
    /// What it is.
    #[serde(flatten)]
    pub kind: EntryKind,
}

/// What a stage entry is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum EntryKind {
    /// A directory; `opaque` when it hides the host directory's entries.
    Dir {
        /// Permission bits.
        mode: u32,
        /// Marked opaque (`user.overlay.opaque`).
        opaque: bool,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Its length, holes included.
        size: u64,
        /// Its data ranges `[start, end)`, in order; the tar data is their bytes in turn.
        data: Vec<(u64, u64)>,
        /// BLAKE3 of the tar data, lowercase hex.
        blake3: String,
    },
    /// A symbolic link.
    Symlink {
        /// The target, as bytes.
        target_bytes: Vec<u8>,
    },
    /// A whiteout: the host path is deleted.
    Whiteout,
}

impl EntryKind {
    /// The length of the entry's tar data.
    pub fn data_len(&self) -> u64 {
        match self {
            EntryKind::File { data, .. } => data.iter().map(|(s, e)| e.saturating_sub(*s)).sum(),
            _ => 0,
        }
    }
}

/// An archive could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A filesystem operation failed.
    #[error("cannot {action} {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The archive is not one this build imports, or is damaged or hostile.
    #[error("the archive is refused: {reason}")]
    Refused {
        /// What is wrong with it, naming the entry.
        reason: String,
    },
    /// The stage holds something an archive does not carry.
    #[error(
        "the stage holds {what} at {path}; an export carries directories, files, symlinks and \
         deletions only: drop that path from the stage or apply the job on this machine"
    )]
    Unsupported {
        /// The path (display form).
        path: String,
        /// What is there.
        what: &'static str,
    },
    /// The stage changed while it was being exported.
    #[error("{path} changed while the stage was exported; export again")]
    Changed {
        /// The path (display form).
        path: String,
    },
    /// The workdir to apply onto is not a directory here.
    #[error(
        "the workdir {} is not a directory on this machine: give the tree to apply onto with \
         --workdir DIR", .path.display()
    )]
    NoWorkdir {
        /// The path.
        path: PathBuf,
    },
    /// The job's own files.
    #[error(transparent)]
    Job(#[from] crate::job::JobError),
}

/// A refusal, for `?`.
pub(crate) fn refuse(reason: impl Into<String>) -> ArchiveError {
    ArchiveError::Refused {
        reason: reason.into(),
    }
}

/// The display form of an archive path.
pub(crate) fn shown(bytes: &[u8]) -> String {
    crate::seal::display_path(bytes).0
}

/// Whether `p` is a plain relative path: non-empty components that are not `.` or `..`,
/// no NUL.
pub fn plain_relative(p: &[u8]) -> bool {
    !p.is_empty()
        && !p.contains(&0)
        && p.split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b"..")
}

/// Check a manifest against the rules an importer needs (see the module docs); everything
/// that can be decided before reading an entry's data.
pub fn check_manifest(m: &Manifest) -> Result<(), ArchiveError> {
    if m.format != FORMAT {
        return Err(refuse(format!(
            "its manifest's format is `{}`, not `{FORMAT}`",
            m.format
        )));
    }
    if m.version != VERSION {
        return Err(refuse(format!(
            "it has format version {}; this cofferdam reads version {VERSION} (import it \
             with the cofferdam that exported it, or export it again)",
            m.version
        )));
    }
    let mut seen_records: Vec<&str> = Vec::new();
    for r in &m.records {
        if !RECORDS.iter().any(|(n, _)| *n == r.name) {
            return Err(refuse(format!(
                "record `{}` is not one cofferdam writes",
                r.name
            )));
        }
        if seen_records.contains(&r.name.as_str()) {
            return Err(refuse(format!("record `{}` is listed twice", r.name)));
        }
        if r.size > MAX_RECORD {
            return Err(refuse(format!(
                "record `{}` is {} bytes, over the limit of {MAX_RECORD}",
                r.name, r.size
            )));
        }
        seen_records.push(&r.name);
    }
    if let Some((name, _)) = RECORDS
        .iter()
        .find(|(n, needed)| *needed && !seen_records.contains(n))
    {
        return Err(refuse(format!("record `{name}` is missing")));
    }
    if m.stage.len() > MAX_ENTRIES {
        return Err(refuse(format!(
            "its stage has {} entries, over the limit of {MAX_ENTRIES}",
            m.stage.len()
        )));
    }
    // path → whether it is a directory, for every entry listed so far.
    let mut listed: HashMap<&[u8], bool> = HashMap::with_capacity(m.stage.len());
    for e in &m.stage {
        let p = e.path_bytes.as_slice();
        let at = shown(p);
        if !plain_relative(p) {
            return Err(refuse(format!(
                "stage entry `{at}` is not a plain relative path (absolute, empty, or with \
                 `.`, `..` or empty components)"
            )));
        }
        let (parent, _) = crate::fsops::split(p);
        if !parent.is_empty() && listed.get(parent) != Some(&true) {
            return Err(refuse(format!(
                "stage entry `{at}` is not below a directory listed before it (it would be \
                 reached through a link, a file or nothing)"
            )));
        }
        match &e.kind {
            EntryKind::File {
                size, data, mode, ..
            } => {
                check_mode(*mode, &at)?;
                if *size > MAX_FILE {
                    return Err(refuse(format!(
                        "stage file `{at}` is {size} bytes, over the limit of {MAX_FILE}"
                    )));
                }
                let mut end = 0;
                for (s, e) in data {
                    if s < &end || e <= s || e > size {
                        return Err(refuse(format!(
                            "stage file `{at}` has data ranges out of order or outside its \
                             length"
                        )));
                    }
                    end = *e;
                }
            }
            EntryKind::Dir { mode, .. } => check_mode(*mode, &at)?,
            EntryKind::Symlink { target_bytes } => {
                if target_bytes.is_empty()
                    || target_bytes.len() > MAX_TARGET
                    || target_bytes.contains(&0)
                {
                    return Err(refuse(format!(
                        "stage symlink `{at}` has an empty, NUL-holding or overlong target"
                    )));
                }
            }
            EntryKind::Whiteout => {}
        }
        if listed
            .insert(p, matches!(e.kind, EntryKind::Dir { .. }))
            .is_some()
        {
            return Err(refuse(format!("stage entry `{at}` is listed twice")));
        }
    }
    Ok(())
}

fn check_mode(mode: u32, at: &str) -> Result<(), ArchiveError> {
    if mode & !0o7777 != 0 {
        return Err(refuse(format!(
            "stage entry `{at}` has mode {mode:o}, which is not permission bits"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::StageState;

    fn origin() -> JobState {
        serde_json::from_value(serde_json::json!({
            "version": 1, "id": "run-x", "created_at_unix_ms": 1, "workdir": "/w",
            "state": "staged"
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn manifest(stage: Vec<StageEntry>) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            version: VERSION,
            origin: origin(),
            records: ["run-bundle.json", "fingerprints.json"]
                .iter()
                .map(|n| Record {
                    name: (*n).into(),
                    size: 1,
                    blake3: String::new(),
                })
                .collect(),
            stage,
        }
    }

    fn e(p: &str, kind: EntryKind) -> StageEntry {
        StageEntry {
            path_bytes: p.as_bytes().to_vec(),
            kind,
        }
    }

    fn dir() -> EntryKind {
        EntryKind::Dir {
            mode: 0o755,
            opaque: false,
        }
    }

    fn reason(m: &Manifest) -> String {
        match check_manifest(m) {
            Err(ArchiveError::Refused { reason }) => reason,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_plain_stage_passes() {
        let m = manifest(vec![
            e("d", dir()),
            e("d/f\nx", EntryKind::Whiteout),
            e(
                "l",
                EntryKind::Symlink {
                    target_bytes: b"/etc/passwd".to_vec(),
                },
            ),
        ]);
        assert!(check_manifest(&m).is_ok());
        assert_eq!(m.origin.state, StageState::Staged);
    }

    #[test]
    fn hostile_paths_and_layouts_are_refused() {
        for p in ["", "/abs", "a/../b", "./a", "a//b", "..", "a/"] {
            assert!(
                reason(&manifest(vec![e(p, EntryKind::Whiteout)])).contains("plain relative"),
                "{p:?}"
            );
        }
        let link = EntryKind::Symlink {
            target_bytes: b"/".to_vec(),
        };
        let through = manifest(vec![e("l", link), e("l/x", EntryKind::Whiteout)]);
        assert!(reason(&through).contains("not below a directory"));
        let orphan = manifest(vec![e("nowhere/x", EntryKind::Whiteout)]);
        assert!(reason(&orphan).contains("not below a directory"));
        let twice = manifest(vec![e("d", dir()), e("d", dir())]);
        assert!(reason(&twice).contains("listed twice"));
        let ranges = manifest(vec![e(
            "f",
            EntryKind::File {
                mode: 0o644,
                size: 10,
                data: vec![(4, 8), (2, 3)],
                blake3: String::new(),
            },
        )]);
        assert!(reason(&ranges).contains("data ranges"));
        let huge = manifest(vec![e(
            "f",
            EntryKind::File {
                mode: 0o644,
                size: MAX_FILE + 1,
                data: vec![],
                blake3: String::new(),
            },
        )]);
        assert!(reason(&huge).contains("over the limit"));
        let device = manifest(vec![e(
            "f",
            EntryKind::Dir {
                mode: 0o20_644,
                opaque: false,
            },
        )]);
        assert!(reason(&device).contains("not permission bits"));
    }

    #[test]
    fn format_version_and_records_are_checked() {
        let mut m = manifest(vec![]);
        m.version = 2;
        assert!(reason(&m).contains("format version 2"));
        let mut m = manifest(vec![]);
        m.records.pop();
        assert!(reason(&m).contains("fingerprints.json` is missing"));
        let mut m = manifest(vec![]);
        m.records[0].name = "../../x".into();
        assert!(reason(&m).contains("not one cofferdam writes"));
    }
}
