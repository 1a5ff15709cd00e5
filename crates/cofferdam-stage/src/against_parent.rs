//! `diff --against-parent`: what a fork changed on top of the checkpoint it started from
//! (issue 21). Owns the comparison of the two stages' changes; may not change either stage,
//! the host, or any record. Both stages are sealed against the host workdir as it is now
//! ([`crate::seal`], which reads the host without following links), so the host cancels
//! out: a path differs between parent and fork exactly where their changes differ.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use cofferdam_record::bundle::{ChangeEntry, ChangeKind};
use serde::Serialize;

use crate::seal::{SealError, seal};

/// How one path of the fork differs from its parent's staged view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "against_parent", rename_all = "snake_case")]
pub enum Difference {
    /// The parent left the path as the host has it; the fork changed it (`kind`, against
    /// the host).
    New {
        /// The fork's change.
        kind: ChangeKind,
    },
    /// Both changed it, differently.
    Changed {
        /// The fork's change against the host.
        kind: ChangeKind,
    },
    /// The parent changed it; the fork put back what the host has.
    Reverted {
        /// The parent's change it undid.
        parent_kind: ChangeKind,
    },
}

/// One path of the comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathDifference {
    /// Display path (as `ChangeEntry.path`).
    pub path: String,
    /// How it differs.
    #[serde(flatten)]
    pub difference: Difference,
}

/// Compare the fork's stage `child_upper` with the checkpoint's `parent_upper`, both over
/// `workdir`; sorted by path bytes.
pub fn against_parent(
    child_upper: &Path,
    parent_upper: &Path,
    workdir: &Path,
) -> Result<Vec<PathDifference>, SealError> {
    // A checkpoint does not keep the mode of its stage's root (it is 0700 like every stage
    // root at rest; the mount gives a stage the workdir's), so `.` is compared from the
    // fork's side only.
    let mut parent = seal(parent_upper, workdir)?.changes;
    parent.retain(|c| c.path != crate::seal::ROOT_PATH);
    let child = seal(child_upper, workdir)?.changes;
    Ok(classify(parent, child, |rel| {
        same_entry(
            &child_upper.join(std::ffi::OsStr::from_bytes(rel)),
            &parent_upper.join(std::ffi::OsStr::from_bytes(rel)),
        )
    }))
}

fn key(c: &ChangeEntry) -> Vec<u8> {
    c.path_bytes
        .clone()
        .unwrap_or_else(|| c.path.as_bytes().to_vec())
}

/// The differences, given both stages' changes against the same host and `same(path)`:
/// whether both stages hold the same entry at a path both changed. Pure.
pub fn classify(
    parent: Vec<ChangeEntry>,
    child: Vec<ChangeEntry>,
    same: impl Fn(&[u8]) -> bool,
) -> Vec<PathDifference> {
    let mut parent: BTreeMap<Vec<u8>, ChangeEntry> =
        parent.into_iter().map(|c| (key(&c), c)).collect();
    let mut out: BTreeMap<Vec<u8>, PathDifference> = BTreeMap::new();
    for c in child {
        let k = key(&c);
        let difference = match parent.remove(&k) {
            None => Difference::New { kind: c.kind },
            Some(p) if p.kind == c.kind && p.new_type == c.new_type && same(&k) => continue,
            Some(_) => Difference::Changed { kind: c.kind },
        };
        out.insert(
            k,
            PathDifference {
                path: c.path,
                difference,
            },
        );
    }
    for (k, p) in parent {
        out.insert(
            k,
            PathDifference {
                path: p.path,
                difference: Difference::Reverted {
                    parent_kind: p.kind,
                },
            },
        );
    }
    out.into_values().collect()
}

/// Whether two stage entries are the same: type, permission bits, and content (a file's
/// bytes, a link's target). A whiteout is the same as a whiteout. Unreadable: not the same.
fn same_entry(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (a.symlink_metadata(), b.symlink_metadata()) else {
        return false;
    };
    if ma.file_type() != mb.file_type() || ma.mode() != mb.mode() || ma.rdev() != mb.rdev() {
        return false;
    }
    if ma.is_file() {
        let hash = |p: &Path| {
            File::open(p)
                .and_then(|f| crate::sparse::hash_file(&f))
                .ok()
        };
        return ma.len() == mb.len() && hash(a).is_some_and(|h| Some(h) == hash(b));
    }
    if ma.file_type().is_symlink() {
        return std::fs::read_link(a)
            .ok()
            .is_some_and(|t| Some(t) == std::fs::read_link(b).ok());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, kind: ChangeKind) -> ChangeEntry {
        ChangeEntry {
            path: path.to_owned(),
            path_bytes: None,
            kind,
            old_type: None,
            new_type: None,
            size_bytes: None,
            mode: None,
        }
    }

    #[test]
    fn only_what_the_fork_did_differently_is_listed() {
        use ChangeKind::*;
        let parent = vec![
            change("same", Modified),
            change("edited", Modified),
            change("undone", Added),
        ];
        let child = vec![
            change("same", Modified),
            change("edited", Modified),
            change("mine", Added),
        ];
        let got = classify(parent, child, |p| p == b"same");
        assert_eq!(
            got,
            vec![
                PathDifference {
                    path: "edited".into(),
                    difference: Difference::Changed { kind: Modified },
                },
                PathDifference {
                    path: "mine".into(),
                    difference: Difference::New { kind: Added },
                },
                PathDifference {
                    path: "undone".into(),
                    difference: Difference::Reverted { parent_kind: Added },
                },
            ]
        );
    }

    #[test]
    fn a_change_of_kind_differs_even_with_equal_entries() {
        let got = classify(
            vec![change("p", ChangeKind::Modified)],
            vec![change("p", ChangeKind::Deleted)],
            |_| true,
        );
        assert_eq!(
            got[0].difference,
            Difference::Changed {
                kind: ChangeKind::Deleted
            }
        );
    }
}
