//! Which staged changes a per-path drop (`cofferdam drop JOB --path P`) discards: the same
//! `--path`/`--exclude` semantics as an apply's selection, closed the other way. Pure; no
//! I/O. It may not look at the host or the stage.
//!
//! 1. Each `--path P` takes the remaining change at `P` and every one beneath it (a `P`
//!    that names no remaining change is an error, as for apply); `--exclude` leaves out
//!    what it matches.
//! 2. The closure adds, until nothing changes:
//!    - every remaining *ancestor* that is replaced whole (opaque, deleted, or a directory
//!      that was not one on the host): applying it later would bring the dropped path
//!      back, so it goes too, with everything beneath it;
//!    - every remaining path *beneath* such a directory replaced whole.
//!
//!    A new or mode-changed parent directory is not dropped with its child: it stays staged
//!    and applies on its own. A directory that is not replaced whole stays staged while an
//!    excluded path beneath it does (its parent must be there to apply it).
//!
//! Paths the closure adds are reported with the reason, excluded ones included (a
//! dependency wins over an exclusion, as for apply).

use std::collections::{BTreeMap, BTreeSet};

use super::{Glob, Node, SelectError, ancestors, beneath, take_paths, whole};

/// Why the closure added a path to a drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropBecause {
    /// It is a directory replaced whole that holds this dropped path.
    Holds(Vec<u8>),
    /// It is beneath this dropped directory.
    Inside(Vec<u8>),
}

/// The outcome of a drop's selection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DropSelection {
    /// Indices of the changes to discard, ascending.
    pub indices: Vec<usize>,
    /// Indices the closure added, with why, ascending.
    pub added: Vec<(usize, DropBecause)>,
    /// Of those, the ones an `--exclude` had matched.
    pub excluded_but_required: Vec<usize>,
}

/// Select the changes a drop of `paths` (target-relative, non-empty) discards; see the
/// module docs. `nodes` must be sorted by path bytes.
pub fn select_drop(
    nodes: &[Node<'_>],
    paths: &[Vec<u8>],
    excludes: &[Glob],
) -> Result<DropSelection, SelectError> {
    let index: BTreeMap<&[u8], usize> =
        nodes.iter().enumerate().map(|(i, n)| (n.path, i)).collect();
    let mut chosen: BTreeSet<usize> = BTreeSet::new();
    take_paths(nodes, paths, &mut chosen)?;
    let mut excluded = BTreeSet::new();
    if !excludes.is_empty() {
        chosen.retain(|&i| {
            let hit = excludes.iter().any(|g| g.excludes(nodes[i].path));
            if hit {
                excluded.insert(i);
            }
            !hit
        });
    }
    let initial = chosen.clone();
    let mut added: BTreeMap<usize, DropBecause> = BTreeMap::new();
    let mut work: std::collections::VecDeque<usize> = chosen.iter().copied().collect();
    while let Some(i) = work.pop_front() {
        let n = nodes[i];
        for a in ancestors(n.path) {
            if let Some(&j) = index.get(a)
                && nodes[j].remaining
                && whole(&nodes[j])
                && chosen.insert(j)
            {
                added.insert(j, DropBecause::Holds(n.path.to_vec()));
                work.push_back(j);
            }
        }
        if whole(&n) {
            for j in beneath(nodes, n.path) {
                if j != i && nodes[j].remaining && chosen.insert(j) {
                    added.insert(j, DropBecause::Inside(n.path.to_vec()));
                    work.push_back(j);
                }
            }
        }
    }
    // A directory not replaced whole stays while something beneath it stays staged.
    let keep: Vec<usize> = chosen
        .iter()
        .copied()
        .filter(|&i| {
            nodes[i].new_is_dir
                && !whole(&nodes[i])
                && beneath(nodes, nodes[i].path)
                    .any(|j| j != i && nodes[j].remaining && !chosen.contains(&j))
        })
        .collect();
    for i in keep {
        chosen.remove(&i);
    }
    let added: Vec<(usize, DropBecause)> = added
        .into_iter()
        .filter(|(i, _)| !initial.contains(i))
        .collect();
    let excluded_but_required = added
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| excluded.contains(i))
        .collect();
    Ok(DropSelection {
        indices: chosen.into_iter().collect(),
        added,
        excluded_but_required,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_record::bundle::ChangeKind::{self, *};

    fn nodes(v: &[(&'static str, ChangeKind, bool)]) -> Vec<Node<'static>> {
        v.iter()
            .map(|&(p, kind, new_is_dir)| Node {
                path: p.as_bytes(),
                kind,
                new_is_dir,
                remaining: true,
            })
            .collect()
    }

    fn sample() -> Vec<Node<'static>> {
        nodes(&[
            ("README", Modified, false),
            ("new", Added, true),
            ("new/a", Added, false),
            ("new/b", Added, false),
            ("op", Opaque, true),
            ("op/x", Added, false),
            ("op/y", Added, false),
            ("src", Modified, true),
            ("src/lib.rs", Modified, false),
            ("tc", TypeChanged, true),
            ("tc/z", Added, false),
        ])
    }

    fn dropped(n: &[Node<'_>], p: &[&str], x: &[&str]) -> Result<Vec<String>, SelectError> {
        let p: Vec<Vec<u8>> = p.iter().map(|s| s.as_bytes().to_vec()).collect();
        let x: Vec<Glob> = x.iter().map(|s| Glob::new(s.as_bytes()).unwrap()).collect();
        let s = select_drop(n, &p, &x)?;
        Ok(s.indices
            .iter()
            .map(|&i| String::from_utf8_lossy(n[i].path).into_owned())
            .collect())
    }

    #[test]
    fn a_file_goes_alone_and_its_new_parent_stays() {
        let n = sample();
        assert_eq!(dropped(&n, &["new/a"], &[]).unwrap(), ["new/a"]);
        assert_eq!(dropped(&n, &["src/lib.rs"], &[]).unwrap(), ["src/lib.rs"]);
        assert_eq!(dropped(&n, &["README"], &[]).unwrap(), ["README"]);
    }

    #[test]
    fn a_directory_takes_its_subtree() {
        let n = sample();
        assert_eq!(
            dropped(&n, &["new"], &[]).unwrap(),
            ["new", "new/a", "new/b"]
        );
    }

    #[test]
    fn a_child_of_a_directory_replaced_whole_takes_that_directory() {
        let n = sample();
        let s = select_drop(&n, &[b"op/x".to_vec()], &[]).unwrap();
        assert_eq!(s.indices, [4, 5, 6]);
        assert_eq!(
            s.added,
            [
                (4, DropBecause::Holds(b"op/x".to_vec())),
                (6, DropBecause::Inside(b"op".to_vec()))
            ]
        );
        assert_eq!(dropped(&n, &["tc/z"], &[]).unwrap(), ["tc", "tc/z"]);
    }

    #[test]
    fn excludes_leave_paths_unless_a_dependency_needs_them() {
        let n = sample();
        // The directory stays for the file that stays in it.
        assert_eq!(dropped(&n, &["new"], &["b"]).unwrap(), ["new/a"]);
        let s = select_drop(&n, &[b"op".to_vec()], &[Glob::new(b"y").unwrap()]).unwrap();
        assert_eq!(s.indices, [4, 5, 6]);
        assert_eq!(s.excluded_but_required, [6]);
    }

    #[test]
    fn unknown_and_settled_paths_are_errors() {
        let mut n = sample();
        assert!(matches!(
            dropped(&n, &["nope"], &[]),
            Err(SelectError::NoMatch { .. })
        ));
        n[0].remaining = false;
        assert!(matches!(
            dropped(&n, &["README"], &[]),
            Err(SelectError::AlreadyApplied { .. })
        ));
        n[5].remaining = false;
        // A settled path is not brought back by the closure.
        assert_eq!(dropped(&n, &["op"], &[]).unwrap(), ["op", "op/y"]);
    }
}
