//! `apply-ledger.json`: the apply journal of one job (DESIGN.md §5).
//!
//! Owns the ledger's file format, reading and (atomic) writing it, and the relative-path
//! value [`RelPath`] it is written in. It records three things:
//!
//! - `applied`: every change path that a finished batch wrote to the host. Partial apply
//!   keeps the stage (`upper/`) intact and tracks what is applied here, so the upper stays
//!   the record of what the run produced; "remaining" is the seal's changes minus `applied`.
//! - `batch`: the batch in flight, present only from just before its first temporary file
//!   is created until it is finished (or recovered). Its `phase` says how far it got:
//!   `preparing` (temporary objects are being created next to their targets: nothing is
//!   visible yet) or `committing` (every temporary object is complete and flushed; renames
//!   into place may have happened). Each op names its temporary object (`tmp`), where a
//!   displaced old object is parked (`trash`), and the identities (device, inode) that tell
//!   afterwards whether it took effect.
//! - `pending`: change paths of an interrupted batch that were not written; the next apply
//!   includes them, re-checking their conflicts. `accepted_ctimes`: host paths whose ctime
//!   changed because of cofferdam's own writes (a directory whose entries an interrupted
//!   batch renamed, an object restored from the trash); the conflict check accepts a ctime
//!   up to the recorded one for them.
//! - `dropped`: change paths a per-path drop (`drop JOB --path P`) discarded: they stay in
//!   `upper/` (the record of what the run produced, removed with the whole stage) but are
//!   no longer staged. "Remaining" is the seal's changes minus `applied` and `dropped`; one
//!   atomic write of this file is the whole drop, so an interrupted drop leaves either the
//!   old stage or the new one.
//! - `partial`: files of which only some hunks were applied (`apply --hunks`): the base
//!   the hunks come from, the applied hunk ids, and the host file as that apply wrote it,
//!   which the conflict check uses instead of the seal's record. Such a file is not in
//!   `applied`: the rest of it stays staged. An op that writes one carries `partial`.
//!
//! It may not touch the host or the stage: `crate::apply` does, and calls this module to
//! persist each step. A path is a JSON string when it is UTF-8 (any character, escaped as
//! JSON does), else an array of its bytes.
//!
//! ```json
//! { "version": 1,
//!   "applied": ["src/lib.rs", [98, 255]],
//!   "pending": [],
//!   "accepted_ctimes": [],
//!   "batch": { "id": "1f0c…", "phase": "committing", "started_at_unix_ms": 1764477000000,
//!     "ops": [ { "path": "src/lib.rs", "action": "put", "tmp": ".cofferdam-1f0c…-0",
//!                "new_id": {"dev": 2049, "ino": 131}, "covers": ["src/lib.rs"] } ] } }
//! ```

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ident::Ctime;

/// The `version` written to and accepted from `apply-ledger.json`.
pub const LEDGER_VERSION: u32 = 1;

/// The ledger cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Reading or writing the file failed.
    #[error("cannot {action} the apply ledger {}: {source}", .path.display())]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file does not parse.
    #[error(
        "the apply ledger {} is damaged ({source}); it records which staged paths were \
         applied: restore it from a backup, or drop the job",
        .path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The file has another version.
    #[error(
        "the apply ledger {} has version {found}; this cofferdam reads version \
         {LEDGER_VERSION}: use the cofferdam that wrote it",
        .path.display()
    )]
    Version {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
    },
}

/// A path relative to the target (or a single file name), as bytes. Serialized as a JSON
/// string when it is UTF-8, else as an array of bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RelPath(pub Vec<u8>);

impl RelPath {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As a `Path`.
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }
}

impl From<&[u8]> for RelPath {
    fn from(b: &[u8]) -> Self {
        RelPath(b.to_vec())
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.collect_seq(&self.0),
        }
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            Bytes(Vec<u8>),
        }
        Ok(match Repr::deserialize(d)? {
            Repr::Text(t) => RelPath(t.into_bytes()),
            Repr::Bytes(b) => RelPath(b),
        })
    }
}

pub use crate::ident::FileId;

/// How far a batch got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Temporary objects are being created; nothing is visible on the host yet.
    Preparing,
    /// Every temporary object is complete and flushed; ops may have taken effect.
    Committing,
}

/// What one op does to its target path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Rename the prepared object `tmp` onto the target, which is absent.
    Put,
    /// Replace a non-directory by a non-directory: swap the prepared object with the
    /// target (`RENAME_EXCHANGE`), then remove the old object, now at `tmp`; where the
    /// filesystem cannot exchange, rename `tmp` over the target.
    Replace,
    /// Swap the prepared object with the target (`RENAME_EXCHANGE`; a directory is on one
    /// side), then remove the old object, now at `tmp`. Where the filesystem cannot
    /// exchange: the target is renamed to `trash`, then `tmp` onto the target.
    Exchange,
    /// Rename the target (not a directory) to `trash`, then unlink it.
    RemoveFile,
    /// Rename the target directory to `trash`, then remove that tree.
    RemoveDir,
    /// Change the target directory's permission bits to `mode`.
    Chmod,
}

/// One op of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerOp {
    /// The target path.
    pub path: RelPath,
    /// What happens to it.
    pub action: Action,
    /// The prepared object's name in the target's parent directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<RelPath>,
    /// Where a displaced old object is parked, in the same directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trash: Option<RelPath>,
    /// The prepared object's identity (known once the batch is `committing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_id: Option<FileId>,
    /// The host object the op acts on, as found when the batch was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_id: Option<FileId>,
    /// The permission bits a `chmod` op sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// The change paths this op applies: the target, and for a directory written whole
    /// the staged entries inside it.
    pub covers: Vec<RelPath>,
    /// For a file written with only some of its hunks: which (it stays staged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialHunks>,
}

/// Which hunks of a file an op writes (`crate::hunk`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialHunks {
    /// The content hash of the base the hunks are computed from (`crate::base`).
    pub base_blake3: String,
    /// Every hunk id applied once the op took effect (earlier ones included).
    pub hunks: BTreeSet<String>,
}

/// A file of which only some hunks are applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialFile {
    /// The change path.
    pub path: RelPath,
    /// The base and the applied hunks.
    #[serde(flatten)]
    pub hunks: PartialHunks,
    /// The host file as the apply wrote it: the conflict check's record from then on.
    pub host: crate::fingerprint::Fingerprint,
}

/// The batch in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// Random hex; temporary names carry it.
    pub id: String,
    /// How far it got.
    pub phase: Phase,
    /// When it began.
    pub started_at_unix_ms: u64,
    /// Its ops, in the order they are committed.
    pub ops: Vec<LedgerOp>,
}

/// A ctime cofferdam caused itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedCtime {
    /// The host path.
    pub path: RelPath,
    /// The ctime it had right after cofferdam's own write.
    pub ctime: Ctime,
}

/// The content of `apply-ledger.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Always [`LEDGER_VERSION`].
    pub version: u32,
    /// Change paths written by finished batches.
    #[serde(default)]
    pub applied: BTreeSet<RelPath>,
    /// Change paths of an interrupted batch that were not written.
    #[serde(default)]
    pub pending: BTreeSet<RelPath>,
    /// Host ctimes caused by cofferdam's own writes.
    #[serde(default)]
    pub accepted_ctimes: Vec<AcceptedCtime>,
    /// The batch in flight.
    #[serde(default)]
    pub batch: Option<Batch>,
    /// Files with only some hunks applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial: Vec<PartialFile>,
    /// Change paths discarded by a per-path drop.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub dropped: BTreeSet<RelPath>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            version: LEDGER_VERSION,
            applied: BTreeSet::new(),
            pending: BTreeSet::new(),
            accepted_ctimes: Vec::new(),
            batch: None,
            partial: Vec::new(),
            dropped: BTreeSet::new(),
        }
    }
}

impl Ledger {
    /// Read the ledger at `path`; an absent file is an empty ledger.
    pub fn load(path: &Path) -> Result<Ledger, LedgerError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ledger::default()),
            Err(source) => {
                return Err(LedgerError::Io {
                    action: "read",
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let ledger: Ledger =
            serde_json::from_slice(&bytes).map_err(|source| LedgerError::Corrupt {
                path: path.to_path_buf(),
                source,
            })?;
        if ledger.version != LEDGER_VERSION {
            return Err(LedgerError::Version {
                path: path.to_path_buf(),
                found: ledger.version,
            });
        }
        Ok(ledger)
    }

    /// Write the ledger atomically and durably (temporary file, fsync, rename, directory
    /// fsync), mode 0600.
    pub fn store(&self, path: &Path) -> Result<(), LedgerError> {
        let mut bytes = serde_json::to_vec(self).map_err(|source| LedgerError::Corrupt {
            path: path.to_path_buf(),
            source,
        })?;
        bytes.push(b'\n');
        crate::job::write_atomic(path, &bytes, 0o600).map_err(|source| LedgerError::Io {
            action: "write",
            path: path.to_path_buf(),
            source,
        })
    }

    /// Whether `path` was applied.
    pub fn is_applied(&self, path: &[u8]) -> bool {
        self.applied.contains(&RelPath(path.to_vec()))
    }

    /// Whether `path` was discarded by a per-path drop.
    pub fn is_dropped(&self, path: &[u8]) -> bool {
        self.dropped.contains(&RelPath(path.to_vec()))
    }

    /// Whether `path` is no longer staged: applied, or dropped.
    pub fn is_settled(&self, path: &[u8]) -> bool {
        self.is_applied(path) || self.is_dropped(path)
    }

    /// Record that `paths` were dropped: they leave `pending` and `partial` too (a file with
    /// some hunks applied keeps them on the host; the rest of it is discarded).
    pub fn drop_paths<'a>(&mut self, paths: impl IntoIterator<Item = &'a [u8]>) {
        for p in paths {
            let r = RelPath(p.to_vec());
            self.pending.remove(&r);
            self.partial.retain(|x| x.path != r);
            self.dropped.insert(r);
        }
    }

    /// The partial apply of `path`, if only some of its hunks are applied.
    pub fn partial(&self, path: &[u8]) -> Option<&PartialFile> {
        self.partial.iter().find(|p| p.path.as_bytes() == path)
    }

    /// Record that the host file at `path` is `host`, written with `hunks` applied.
    pub fn set_partial(
        &mut self,
        path: &[u8],
        hunks: PartialHunks,
        host: crate::fingerprint::Fingerprint,
    ) {
        self.partial.retain(|p| p.path.as_bytes() != path);
        if let Some(ctime) = host.ctime {
            self.accept_ctime(path, ctime);
        }
        self.partial.push(PartialFile {
            path: RelPath(path.to_vec()),
            hunks,
            host,
        });
    }

    /// The ctime accepted for `path`, if cofferdam's own write changed it.
    pub fn accepted_ctime(&self, path: &[u8]) -> Option<Ctime> {
        self.accepted_ctimes
            .iter()
            .filter(|a| a.path.as_bytes() == path)
            .map(|a| a.ctime)
            .max()
    }

    /// Record that `path`'s ctime is now `ctime` because of cofferdam's own write.
    pub fn accept_ctime(&mut self, path: &[u8], ctime: Ctime) {
        self.accepted_ctimes.retain(|a| a.path.as_bytes() != path);
        self.accepted_ctimes.push(AcceptedCtime {
            path: RelPath(path.to_vec()),
            ctime,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_as_text_or_bytes() {
        let mut l = Ledger::default();
        l.applied.insert(RelPath(b"a\nb".to_vec()));
        l.applied.insert(RelPath(b"-rf".to_vec()));
        l.applied.insert(RelPath(b"bad\xff".to_vec()));
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(
            v["applied"],
            serde_json::json!(["-rf", "a\nb", [98, 97, 100, 255]])
        );
        let back: Ledger = serde_json::from_value(v).unwrap();
        assert_eq!(back, l);
        assert!(back.is_applied(b"bad\xff"));
        assert!(!back.is_applied(b"bad"));
    }

    #[test]
    fn absent_file_is_empty_and_store_load_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("apply-ledger.json");
        assert_eq!(Ledger::load(&p).unwrap(), Ledger::default());
        let mut l = Ledger {
            batch: Some(Batch {
                id: "ab".into(),
                phase: Phase::Committing,
                started_at_unix_ms: 5,
                ops: vec![LedgerOp {
                    path: RelPath(b"x".to_vec()),
                    action: Action::Put,
                    tmp: Some(RelPath(b".cofferdam-ab-0".to_vec())),
                    trash: None,
                    new_id: Some(FileId { dev: 1, ino: 2 }),
                    old_id: None,
                    mode: None,
                    covers: vec![RelPath(b"x".to_vec())],
                    partial: None,
                }],
            }),
            ..Ledger::default()
        };
        l.accept_ctime(b"d", Ctime { sec: 1, nsec: 0 });
        l.accept_ctime(b"d", Ctime { sec: 2, nsec: 0 });
        assert_eq!(l.accepted_ctime(b"d"), Some(Ctime { sec: 2, nsec: 0 }));
        l.store(&p).unwrap();
        assert_eq!(Ledger::load(&p).unwrap(), l);
        std::fs::write(&p, br#"{"version": 9}"#).unwrap();
        assert!(matches!(
            Ledger::load(&p),
            Err(LedgerError::Version { found: 9, .. })
        ));
        std::fs::write(&p, b"{").unwrap();
        assert!(matches!(Ledger::load(&p), Err(LedgerError::Corrupt { .. })));
    }
}
