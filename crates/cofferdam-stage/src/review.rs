//! The sealed stage as review and apply see it: each change of the Run Bundle joined with
//! its host fingerprint, and whether it was applied (DESIGN.md §5).
//!
//! Owns [`StagedChange`], [`Stage`] (loaded from a job's `run-bundle.json`,
//! `fingerprints.json` and `apply-ledger.json`) and the rule that pairs a change with its
//! fingerprint (by exact path bytes). It reads only those three files: no host or stage
//! file is opened here. It may not change anything. [`refresh_filesystem`] derives, without
//! reading anything, the filesystem view `status --review --json` prints.

use std::collections::HashMap;
use std::path::PathBuf;

use cofferdam_record::bundle::{
    ChangeEntry, ChangeEntryType, ChangeKind, FilesystemSummary, OverlayState,
};

use crate::fingerprint::{Fingerprint, FingerprintError, Fingerprints, read_fingerprints};
use crate::job::{Job, StageState};
use crate::ledger::{Ledger, LedgerError};

/// The stage of a job cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// `run-bundle.json` is missing or unreadable.
    #[error(
        "cannot read the Run Bundle {}: {message}; the run did not finish sealing its stage, \
         so there is nothing to review or apply (`cofferdam drop` discards it)",
        .path.display()
    )]
    Bundle {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The bundle has no `filesystem` section: the run wrote nothing through a stage.
    #[error("the Run Bundle {} records no staged filesystem", .path.display())]
    NoFilesystem {
        /// The file.
        path: PathBuf,
    },
    /// `fingerprints.json` cannot be read.
    #[error(transparent)]
    Fingerprints(#[from] FingerprintError),
    /// A change has no fingerprint.
    #[error(
        "{path}: the change has no host fingerprint in {}; the job's records disagree \
         (was fingerprints.json edited?): drop the job and run again",
        .file.display()
    )]
    Unfingerprinted {
        /// The change's display path.
        path: String,
        /// The fingerprints file.
        file: PathBuf,
    },
    /// The fingerprints have no run start.
    #[error(
        "{} has no run_started_at_unix_ms: without it an edit made during the run cannot be \
         told apart; drop the job and run again",
        .file.display()
    )]
    NoRunStart {
        /// The fingerprints file.
        file: PathBuf,
    },
    /// The ledger cannot be read.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// One staged change with its host fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedChange {
    /// The path relative to the target, as bytes: the change's identity.
    pub path: Vec<u8>,
    /// The display form (escaped when not printable UTF-8).
    pub display: String,
    /// How it changed.
    pub kind: ChangeKind,
    /// The type on the host before the run.
    pub old_type: Option<ChangeEntryType>,
    /// The type in the stage.
    pub new_type: Option<ChangeEntryType>,
    /// Staged size (files, symlinks).
    pub size: Option<u64>,
    /// Staged permission bits.
    pub mode: Option<u32>,
    /// The host side when the stage was sealed.
    pub recorded: Fingerprint,
}

impl StagedChange {
    /// From a bundle change and its fingerprint.
    pub fn new(change: &ChangeEntry, recorded: Fingerprint) -> Self {
        StagedChange {
            path: change_path_bytes(change).to_vec(),
            display: change.path.clone(),
            kind: change.kind,
            old_type: change.old_type,
            new_type: change.new_type,
            size: change.size_bytes,
            mode: change.mode,
            recorded,
        }
    }

    /// Whether the staged object is a directory.
    pub fn new_is_dir(&self) -> bool {
        self.new_type == Some(ChangeEntryType::Directory)
    }

    /// The facts `crate::sensitive` classifies.
    pub fn facts(&self) -> crate::sensitive::Change {
        crate::sensitive::Change {
            kind: self.kind,
            new_type: self.new_type,
            mode: self.mode,
            old_file_mode: match self.recorded.host {
                crate::fingerprint::HostState::File { mode, .. } => Some(mode),
                _ => None,
            },
        }
    }
}

/// The exact path bytes of a bundle change.
pub fn change_path_bytes(c: &ChangeEntry) -> &[u8] {
    c.path_bytes.as_deref().unwrap_or(c.path.as_bytes())
}

/// Pair every change with its fingerprint (by path bytes); sorted by path bytes.
pub fn join(
    changes: &[ChangeEntry],
    fingerprints: &Fingerprints,
    file: &std::path::Path,
) -> Result<Vec<StagedChange>, ReviewError> {
    let by_path: HashMap<&[u8], &Fingerprint> = fingerprints
        .entries
        .iter()
        .map(|e| (e.path_bytes.as_slice(), &e.fingerprint))
        .collect();
    let mut out = Vec::with_capacity(changes.len());
    for c in changes {
        let fp = by_path
            .get(change_path_bytes(c))
            .ok_or_else(|| ReviewError::Unfingerprinted {
                path: c.path.clone(),
                file: file.to_path_buf(),
            })?;
        out.push(StagedChange::new(c, (*fp).clone()));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A job's sealed stage: its changes, the run's start, and the apply ledger.
#[derive(Debug, Clone)]
pub struct Stage {
    /// Every change the seal found, sorted by path bytes.
    pub changes: Vec<StagedChange>,
    /// The run's start, Unix milliseconds.
    pub run_started_at_unix_ms: u64,
    /// The apply ledger.
    pub ledger: Ledger,
}

impl Stage {
    /// Load the stage of `job` from its records.
    pub fn load(job: &Job) -> Result<Stage, ReviewError> {
        let bundle_path = job.bundle_path();
        let bundle_err = |message: String| ReviewError::Bundle {
            path: bundle_path.clone(),
            message,
        };
        let bytes = std::fs::read(&bundle_path).map_err(|e| bundle_err(e.to_string()))?;
        let bundle =
            cofferdam_record::read_bundle(&bytes).map_err(|e| bundle_err(e.to_string()))?;
        let fs = bundle.filesystem.ok_or_else(|| ReviewError::NoFilesystem {
            path: bundle_path.clone(),
        })?;
        let fp_path = job.fingerprints_path();
        let fps = read_fingerprints(&fp_path)?;
        let run_started_at_unix_ms =
            fps.run_started_at_unix_ms
                .ok_or_else(|| ReviewError::NoRunStart {
                    file: fp_path.clone(),
                })?;
        let changes = join(&fs.changes, &fps, &fp_path)?;
        let ledger = Ledger::load(&job.ledger_path())?;
        let mut stage = Stage {
            changes,
            run_started_at_unix_ms,
            ledger,
        };
        stage.take_partial_records();
        Ok(stage)
    }

    /// A file with some hunks applied is checked against what that apply wrote (the
    /// ledger's `partial`), not the seal's record: call again after the ledger changed
    /// (a recovered batch).
    pub fn take_partial_records(&mut self) {
        for c in &mut self.changes {
            if let Some(p) = self.ledger.partial(&c.path) {
                c.recorded = p.host.clone();
            }
        }
    }

    /// Whether change `i` is still staged (neither applied nor dropped).
    pub fn is_remaining(&self, i: usize) -> bool {
        self.changes
            .get(i)
            .is_some_and(|c| !self.ledger.is_settled(&c.path))
    }

    /// The changes still staged.
    pub fn remaining(&self) -> impl Iterator<Item = &StagedChange> {
        self.changes
            .iter()
            .filter(|c| !self.ledger.is_settled(&c.path))
    }

    /// Number of applied changes (of this stage's changes).
    pub fn applied_count(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| self.ledger.is_applied(&c.path))
            .count()
    }

    /// The changes as selection sees them (`crate::select`), in the same order.
    pub fn nodes(&self) -> Vec<crate::select::Node<'_>> {
        self.changes
            .iter()
            .enumerate()
            .map(|(i, c)| crate::select::Node {
                path: &c.path,
                kind: c.kind,
                new_is_dir: c.new_is_dir(),
                remaining: self.is_remaining(i),
            })
            .collect()
    }

    /// Number of changes a per-path drop discarded (of this stage's changes).
    pub fn dropped_count(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| self.ledger.is_dropped(&c.path) && !self.ledger.is_applied(&c.path))
            .count()
    }
}

/// The saved `filesystem` section brought up to date with what happened to the stage since
/// the seal: the review's refreshed view (`spec/run-bundle-format.txt`: the saved bundle is
/// the capture-time record, the review refreshes the filesystem view).
///
/// `changes` keeps only what is still staged, the net staged result the field describes:
/// changes the ledger records as applied leave it, and a stage that was dropped or fully
/// applied holds none. `changed_files` is its length and `whiteouts` its `deleted` plus
/// `opaque` entries (as the seal counts them); `sample_paths` keeps the saved samples still
/// staged. `state` is `discarded` after a drop, `applied` once nothing remains after an
/// apply, otherwise the saved one (a partial apply stays `staged`). Every other field is the
/// saved one.
pub fn refresh_filesystem(
    saved: &FilesystemSummary,
    ledger: &Ledger,
    job_state: StageState,
) -> FilesystemSummary {
    let applied = |c: &ChangeEntry| ledger.is_applied(change_path_bytes(c));
    let settled = |c: &ChangeEntry| ledger.is_settled(change_path_bytes(c));
    let changes: Vec<ChangeEntry> = match job_state {
        StageState::Discarded | StageState::Applied => Vec::new(),
        StageState::Active | StageState::Interrupted | StageState::Staged => saved
            .changes
            .iter()
            .filter(|c| !settled(c))
            .cloned()
            .collect(),
    };
    let state = match job_state {
        StageState::Discarded => OverlayState::Discarded,
        StageState::Applied => OverlayState::Applied,
        StageState::Staged if changes.is_empty() && saved.changes.iter().any(applied) => {
            OverlayState::Applied
        }
        StageState::Staged | StageState::Active | StageState::Interrupted => saved.state,
    };
    let sample_paths = saved
        .sample_paths
        .iter()
        .filter(|p| changes.iter().any(|c| &c.path == *p))
        .cloned()
        .collect();
    FilesystemSummary {
        state,
        changed_files: changes.len(),
        whiteouts: changes
            .iter()
            .filter(|c| matches!(c.kind, ChangeKind::Deleted | ChangeKind::Opaque))
            .count(),
        sample_paths,
        changes,
        ..saved.clone()
    }
}

/// A directory added whole rolls up in a review once it holds at least this many entries;
/// a smaller one is listed entry by entry.
pub const ROLLUP_MIN_ENTRIES: usize = 4;

/// One change as the review's rollup sees it.
#[derive(Debug, Clone, Copy)]
pub struct RollupItem<'a> {
    /// The path relative to the target, as bytes.
    pub path: &'a [u8],
    /// How it changed.
    pub kind: ChangeKind,
    /// The staged type.
    pub new_type: Option<ChangeEntryType>,
    /// The staged size.
    pub size: Option<u64>,
    /// Never hidden inside a rollup (it runs code, changes policy, or conflicts).
    pub keep: bool,
}

/// One line of a rolled-up review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollupRow {
    /// Item `i`, listed on its own.
    One(usize),
    /// Item `i` is a directory added whole, shown as one line for everything beneath it.
    Dir {
        /// The directory's item.
        index: usize,
        /// Entries beneath it that are not directories.
        files: usize,
        /// Directories beneath it.
        dirs: usize,
        /// The staged size of everything beneath it.
        bytes: u64,
    },
}

/// Roll up directories added whole: each topmost added directory with at least
/// [`ROLLUP_MIN_ENTRIES`] added entries beneath becomes one [`RollupRow::Dir`] in its
/// place, and the entries beneath it are left out, except those marked `keep`, which stay
/// listed (a rollup never hides a change that runs code). A directory that is itself
/// `keep`, or holds anything but added entries, is not rolled up. Rows keep the items'
/// order.
pub fn rollup(items: &[RollupItem<'_>]) -> Vec<RollupRow> {
    let roots: HashMap<&[u8], usize> = items
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.kind == ChangeKind::Added && c.new_type == Some(ChangeEntryType::Directory) && !c.keep
        })
        .map(|(i, c)| (c.path, i))
        .collect();
    // The topmost rollup candidate above each item, if any.
    let root_of = |path: &[u8]| {
        path.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .find_map(|(at, _)| roots.get(&path[..at]).copied())
    };
    let mut under: HashMap<usize, (usize, usize, u64, bool)> = HashMap::new();
    let owner: Vec<Option<usize>> = items.iter().map(|c| root_of(c.path)).collect();
    for (c, root) in items.iter().zip(&owner) {
        let Some(root) = root else { continue };
        let e = under.entry(*root).or_insert((0, 0, 0, true));
        if c.new_type == Some(ChangeEntryType::Directory) {
            e.1 += 1;
        } else {
            e.0 += 1;
            e.2 += c.size.unwrap_or(0);
        }
        e.3 &= c.kind == ChangeKind::Added;
    }
    let rolled = |root: usize| {
        under
            .get(&root)
            .filter(|(files, dirs, _, all_added)| *all_added && files + dirs >= ROLLUP_MIN_ENTRIES)
    };
    let mut rows = Vec::with_capacity(items.len());
    for (i, c) in items.iter().enumerate() {
        if let Some(&(files, dirs, bytes, _)) = rolled(i) {
            rows.push(RollupRow::Dir {
                index: i,
                files,
                dirs,
                bytes,
            });
        } else if c.keep || owner[i].and_then(rolled).is_none() {
            rows.push(RollupRow::One(i));
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{FingerprintEntry, HostState};

    fn change(path: &[u8], kind: ChangeKind) -> ChangeEntry {
        let (display, lossless) = crate::seal::display_path(path);
        ChangeEntry {
            path: display,
            path_bytes: (!lossless).then(|| path.to_vec()),
            kind,
            old_type: None,
            new_type: Some(ChangeEntryType::File),
            size_bytes: Some(1),
            mode: Some(0o644),
        }
    }

    #[test]
    fn joins_by_path_bytes_and_sorts() {
        let fps = Fingerprints::from_entries(vec![
            FingerprintEntry {
                path: "b".into(),
                path_bytes: b"b".to_vec(),
                fingerprint: Fingerprint::ABSENT,
            },
            FingerprintEntry {
                path: "a\\nx".into(),
                path_bytes: b"a\nx".to_vec(),
                fingerprint: Fingerprint {
                    host: HostState::Dir { mode: 0o755 },
                    ctime: None,
                },
            },
        ]);
        let joined = join(
            &[
                change(b"b", ChangeKind::Added),
                change(b"a\nx", ChangeKind::Modified),
            ],
            &fps,
            std::path::Path::new("f"),
        )
        .unwrap();
        assert_eq!(joined[0].path, b"a\nx");
        assert_eq!(joined[0].display, "a\\nx");
        assert_eq!(joined[0].recorded.host, HostState::Dir { mode: 0o755 });
        assert_eq!(joined[1].path, b"b");
        let missing = join(
            &[change(b"c", ChangeKind::Added)],
            &fps,
            std::path::Path::new("f"),
        );
        assert!(matches!(missing, Err(ReviewError::Unfingerprinted { .. })));
    }

    fn saved() -> FilesystemSummary {
        FilesystemSummary {
            state: OverlayState::Staged,
            target: "/w".into(),
            upper: "/j/upper".into(),
            changed_files: 3,
            whiteouts: 1,
            root_overlay: false,
            excluded_paths: vec![],
            access_policy: Default::default(),
            host_root_device: None,
            host_root_inode: None,
            host_uid: None,
            host_gid: None,
            sample_paths: vec!["a".into(), "gone".into(), "x\\ny".into()],
            changes: vec![
                change(b"a", ChangeKind::Added),
                change(b"gone", ChangeKind::Deleted),
                change(b"x\ny", ChangeKind::Modified),
            ],
        }
    }

    fn ledger(applied: &[&[u8]]) -> Ledger {
        let mut l = Ledger::default();
        for p in applied {
            l.applied.insert(crate::ledger::RelPath(p.to_vec()));
        }
        l
    }

    fn paths(fs: &FilesystemSummary) -> Vec<&str> {
        fs.changes.iter().map(|c| c.path.as_str()).collect()
    }

    #[test]
    fn a_fresh_stage_is_the_saved_view() {
        let fs = refresh_filesystem(&saved(), &Ledger::default(), StageState::Staged);
        assert_eq!(fs, saved());
    }

    #[test]
    fn a_partial_apply_leaves_the_remainder_staged() {
        let fs = refresh_filesystem(&saved(), &ledger(&[b"gone", b"x\ny"]), StageState::Staged);
        assert_eq!(fs.state, OverlayState::Staged);
        assert_eq!(paths(&fs), ["a"]);
        assert_eq!((fs.changed_files, fs.whiteouts), (1, 0));
        assert_eq!(fs.sample_paths, ["a"]);
        assert_eq!((fs.target, fs.upper), (saved().target, saved().upper));
    }

    #[test]
    fn nothing_left_after_applies_is_applied() {
        let all: [&[u8]; 3] = [b"a", b"gone", b"x\ny"];
        for job_state in [StageState::Staged, StageState::Applied] {
            let fs = refresh_filesystem(&saved(), &ledger(&all), job_state);
            assert_eq!(fs.state, OverlayState::Applied, "{job_state:?}");
            assert!(fs.changes.is_empty() && fs.sample_paths.is_empty());
            assert_eq!((fs.changed_files, fs.whiteouts), (0, 0));
        }
        // The job says applied even when the ledger is lost: nothing is staged.
        let fs = refresh_filesystem(&saved(), &Ledger::default(), StageState::Applied);
        assert_eq!((fs.state, fs.changed_files), (OverlayState::Applied, 0));
    }

    #[test]
    fn a_drop_discards_what_remained() {
        let fs = refresh_filesystem(&saved(), &ledger(&[b"a"]), StageState::Discarded);
        assert_eq!(fs.state, OverlayState::Discarded);
        assert_eq!((fs.changed_files, fs.whiteouts), (0, 0));
        assert!(fs.changes.is_empty());
    }

    #[test]
    fn a_run_without_changes_stays_staged() {
        let empty = FilesystemSummary {
            changed_files: 0,
            whiteouts: 0,
            sample_paths: vec![],
            changes: vec![],
            ..saved()
        };
        let fs = refresh_filesystem(&empty, &Ledger::default(), StageState::Staged);
        assert_eq!(fs.state, OverlayState::Staged);
    }

    fn item(path: &[u8], kind: ChangeKind, dir: bool, keep: bool) -> RollupItem<'_> {
        RollupItem {
            path,
            kind,
            new_type: Some(if dir {
                ChangeEntryType::Directory
            } else {
                ChangeEntryType::File
            }),
            size: (!dir).then_some(10),
            keep,
        }
    }

    #[test]
    fn rollup_folds_added_trees_but_never_a_kept_entry() {
        use ChangeKind::{Added, Modified};
        let items = [
            item(b"README", Modified, false, false),
            item(b"venv", Added, true, false),
            item(b"venv-notes", Added, false, false),
            item(b"venv/bin", Added, true, false),
            item(b"venv/bin/activate", Added, false, true),
            item(b"venv/lib", Added, true, false),
            item(b"venv/lib/a.py", Added, false, false),
            item(b"venv/lib/b.py", Added, false, false),
            item(b"small", Added, true, false),
            item(b"small/x", Added, false, false),
        ];
        let rows = rollup(&items);
        assert_eq!(
            rows,
            vec![
                RollupRow::One(0),
                RollupRow::Dir {
                    index: 1,
                    files: 3,
                    dirs: 2,
                    bytes: 30
                },
                RollupRow::One(2),
                RollupRow::One(4),
                RollupRow::One(8),
                RollupRow::One(9),
            ]
        );
        // A kept directory is not rolled up: its entries are listed (the nested added
        // directories may roll up on their own).
        let mut kept = items;
        kept[1].keep = true;
        let rows = rollup(&kept);
        assert!(rows.contains(&RollupRow::One(1)));
        assert!(rows.contains(&RollupRow::One(6)));
        assert!(!rows.iter().any(|r| matches!(r, RollupRow::Dir { .. })));
        // A tree holding anything but additions is listed whole.
        let mixed = [
            item(b"d", Added, true, false),
            item(b"d/a", Added, false, false),
            item(b"d/b", Added, false, false),
            item(b"d/c", Added, false, false),
            item(b"d/e", Modified, false, false),
        ];
        assert_eq!(rollup(&mixed).len(), 5);
    }
}
