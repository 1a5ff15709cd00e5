//! Which staged changes an apply takes: `--path`, `--exclude`, and the closure over
//! dependencies (DESIGN.md §5). Pure functions over path bytes; no I/O.
//!
//! Owns [`select`], [`select_drop`] (which changes a per-path drop discards), the [`Glob`] matcher of `--exclude` and [`normalize_arg`], which turns a
//! `--path` argument into a target-relative path. It may not look at the host or the stage.
//!
//! # Rules
//!
//! 1. The candidates are the changes not applied yet (`remaining`).
//! 2. No `--path`: every candidate. Each `--path P` takes the candidate at `P` and every
//!    candidate beneath it; a `P` that names no candidate is an error (it may name nothing,
//!    or only applied changes). Paths of an interrupted batch (`pending`) are always taken.
//! 3. `--exclude GLOB` drops the candidates it matches (see [`Glob`]).
//! 4. The closure then adds, until nothing changes:
//!    - every staged *ancestor* of a taken path (a new parent directory must exist first;
//!      a parent whose mode changed comes along, so the directory's ctime, which the
//!      child's write changes, is never checked after cofferdam itself changed it);
//!    - every staged path *beneath* a taken directory that is replaced whole: an `opaque`
//!      directory, a `type_changed` one (it was not a directory on the host), or a
//!      `deleted` one.
//!
//! Paths the closure adds are reported with the reason ([`Because`]), including paths the
//! user excluded: a dependency wins over an exclusion, and the user is told.
//!
//! 5. Sensitive changes (`crate::sensitive`: they run code or change policy once applied)
//!    are *held* by [`select_holding`] unless `--allow-sensitive` is given, a non-empty
//!    `--path` names them (at or beneath it; `--path .` does not count), or they belong to
//!    an interrupted batch. Holding closes over the same dependencies, backwards: a
//!    directory that is applied whole holds when anything beneath it is held (applying it
//!    would bring the held path), and everything beneath a held path holds (applying it
//!    would bring that path, its staged parent). A held path's new parent directory is not
//!    held: it applies, the held file stays staged. So the closure of rule 4 never reaches
//!    a held path. Held paths are reported ([`Hold`]), never an error.

use std::collections::{BTreeMap, BTreeSet};

mod dropping;
pub use dropping::{DropBecause, DropSelection, select_drop};

use cofferdam_record::bundle::ChangeKind;

/// The facts about one change that selection needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node<'a> {
    /// The path relative to the target.
    pub path: &'a [u8],
    /// How it changed.
    pub kind: ChangeKind,
    /// Whether the staged object is a directory.
    pub new_is_dir: bool,
    /// Whether it is still staged (not applied).
    pub remaining: bool,
}

/// Why the closure added a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Because {
    /// It is a staged parent of this (selected) path.
    ParentOf(Vec<u8>),
    /// It is inside this directory, which is applied whole.
    InsideWhole(Vec<u8>),
}

/// The outcome of a selection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Indices of the selected changes, ascending (so sorted by path when the input is).
    pub indices: Vec<usize>,
    /// Indices the closure added, with why, ascending.
    pub added: Vec<(usize, Because)>,
    /// Of those, the ones an `--exclude` had matched.
    pub excluded_but_required: Vec<usize>,
    /// Indices that would have been selected but are held back (rule 5), with why,
    /// ascending.
    pub held: Vec<(usize, Hold)>,
}

/// Why a path was held back (rule 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// It is sensitive itself.
    Sensitive,
    /// It is a directory applied whole, and this sensitive path is beneath it.
    Contains(Vec<u8>),
    /// It is beneath this held directory (which taking it would bring).
    InsideHeld(Vec<u8>),
}

/// How [`select_holding`] treats sensitive changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sensitive<'a> {
    /// Per node (same indices): whether the change is sensitive.
    pub marked: &'a [bool],
    /// `--allow-sensitive`: hold nothing.
    pub allow_all: bool,
}

/// The selection cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// A `--path` matches no staged change.
    #[error(
        "--path {shown}: no staged change at or beneath it; `cofferdam status --review` lists \
         the staged paths"
    )]
    NoMatch {
        /// The argument, as shown.
        shown: String,
    },
    /// A `--path` matches only changes that were applied already.
    #[error("--path {shown}: every change at or beneath it was applied or dropped already")]
    AlreadyApplied {
        /// The argument, as shown.
        shown: String,
    },
    /// A `--path` is not inside the target.
    #[error("--path {shown}: not inside the job's workdir {target}; give a path relative to it")]
    OutsideTarget {
        /// The argument, as shown.
        shown: String,
        /// The target, as shown.
        target: String,
    },
    /// A `--path-bytes` argument is not hex.
    #[error(
        "--path-bytes {arg}: not an even number of hex digits; give the path's bytes in hex, \
         e.g. 62ff for the bytes [98, 255] `diff --json` lists as path_bytes"
    )]
    BadHex {
        /// The argument, as shown.
        arg: String,
    },
    /// A glob does not parse.
    #[error("--exclude {pattern}: {problem}")]
    BadGlob {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Whether `path` is `dir` or beneath it (component-wise).
pub fn is_at_or_beneath(path: &[u8], dir: &[u8]) -> bool {
    path == dir || (path.starts_with(dir) && path.get(dir.len()) == Some(&b'/'))
}

/// The proper ancestors of `path`, nearest first (`a/b/c` → `a/b`, `a`).
pub fn ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut end = path.len();
    std::iter::from_fn(move || {
        let slash = path.get(..end)?.iter().rposition(|&b| b == b'/')?;
        end = slash;
        path.get(..slash)
    })
}

/// Whether a change replaces its directory whole (its staged entries beneath come along).
fn whole(n: &Node<'_>) -> bool {
    match n.kind {
        ChangeKind::Opaque | ChangeKind::Deleted => true,
        ChangeKind::TypeChanged => n.new_is_dir,
        ChangeKind::Added | ChangeKind::Modified => false,
    }
}

/// Select changes (see the module docs), holding nothing back. `nodes` must be sorted by
/// path bytes; `paths` are target-relative (from [`normalize_arg`]); `pending` are paths of
/// an interrupted batch.
pub fn select(
    nodes: &[Node<'_>],
    paths: &[Vec<u8>],
    excludes: &[Glob],
    pending: &BTreeSet<Vec<u8>>,
) -> Result<Selection, SelectError> {
    let marked = vec![false; nodes.len()];
    let none = Sensitive {
        marked: &marked,
        allow_all: true,
    };
    select_holding(nodes, paths, excludes, pending, none)
}

/// The paths held back by rule 5 (see the module docs), with why.
fn holds(
    nodes: &[Node<'_>],
    paths: &[Vec<u8>],
    pending: &BTreeSet<Vec<u8>>,
    sensitive: Sensitive<'_>,
) -> BTreeMap<usize, Hold> {
    let mut held: BTreeMap<usize, Hold> = BTreeMap::new();
    if sensitive.allow_all {
        return held;
    }
    let index: BTreeMap<&[u8], usize> =
        nodes.iter().enumerate().map(|(i, n)| (n.path, i)).collect();
    let mut work = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let named = paths
            .iter()
            .any(|p| !p.is_empty() && is_at_or_beneath(n.path, p));
        if sensitive.marked.get(i) == Some(&true)
            && n.remaining
            && !named
            && !pending.contains(n.path)
        {
            held.insert(i, Hold::Sensitive);
            work.push(i);
        }
    }
    while let Some(i) = work.pop() {
        let n = nodes[i];
        for a in ancestors(n.path) {
            if let Some(&j) = index.get(a)
                && nodes[j].remaining
                && whole(&nodes[j])
                && !held.contains_key(&j)
            {
                held.insert(j, Hold::Contains(n.path.to_vec()));
                work.push(j);
            }
        }
        {
            for j in beneath(nodes, n.path) {
                if j != i && nodes[j].remaining && !held.contains_key(&j) {
                    held.insert(j, Hold::InsideHeld(n.path.to_vec()));
                    work.push(j);
                }
            }
        }
    }
    held
}

/// [`select`], holding back sensitive changes (rule 5 of the module docs).
pub fn select_holding(
    nodes: &[Node<'_>],
    paths: &[Vec<u8>],
    excludes: &[Glob],
    pending: &BTreeSet<Vec<u8>>,
    sensitive: Sensitive<'_>,
) -> Result<Selection, SelectError> {
    let index: BTreeMap<&[u8], usize> =
        nodes.iter().enumerate().map(|(i, n)| (n.path, i)).collect();
    let mut chosen: BTreeSet<usize> = BTreeSet::new();
    if paths.is_empty() {
        chosen.extend((0..nodes.len()).filter(|&i| nodes[i].remaining));
    } else {
        take_paths(nodes, paths, &mut chosen)?;
        for p in pending {
            if let Some(&i) = index.get(p.as_slice())
                && nodes[i].remaining
            {
                chosen.insert(i);
            }
        }
    }
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
    let holding = holds(nodes, paths, pending, sensitive);
    let held: Vec<(usize, Hold)> = chosen
        .iter()
        .filter_map(|i| holding.get(i).map(|h| (*i, h.clone())))
        .collect();
    chosen.retain(|i| !holding.contains_key(i));
    let initial = chosen.clone();
    let mut added: BTreeMap<usize, Because> = BTreeMap::new();
    // In path order (parents first), so a reason names the nearest selected path.
    let mut work: std::collections::VecDeque<usize> = chosen.iter().copied().collect();
    while let Some(i) = work.pop_front() {
        let n = nodes[i];
        for a in ancestors(n.path) {
            if let Some(&j) = index.get(a)
                && nodes[j].remaining
                && chosen.insert(j)
            {
                added.insert(j, Because::ParentOf(n.path.to_vec()));
                work.push_back(j);
            }
        }
        if whole(&n) {
            for j in beneath(nodes, n.path) {
                if j != i && nodes[j].remaining && chosen.insert(j) {
                    added.insert(j, Because::InsideWhole(n.path.to_vec()));
                    work.push_back(j);
                }
            }
        }
    }
    let added: Vec<(usize, Because)> = added
        .into_iter()
        .filter(|(i, _)| !initial.contains(i))
        .collect();
    let excluded_but_required = added
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| excluded.contains(i))
        .collect();
    Ok(Selection {
        indices: chosen.into_iter().collect(),
        added,
        excluded_but_required,
        held,
    })
}

/// Rule 2 for each of `paths`: the remaining changes at or beneath it (an empty path: every
/// remaining change), into `chosen`; a path that names none is an error.
fn take_paths(
    nodes: &[Node<'_>],
    paths: &[Vec<u8>],
    chosen: &mut BTreeSet<usize>,
) -> Result<(), SelectError> {
    for p in paths {
        if p.is_empty() {
            chosen.extend((0..nodes.len()).filter(|&i| nodes[i].remaining));
            continue;
        }
        let mut any = false;
        let mut any_remaining = false;
        for i in beneath(nodes, p) {
            any = true;
            if nodes[i].remaining {
                any_remaining = true;
                chosen.insert(i);
            }
        }
        let shown = crate::seal::display_path(p).0;
        if !any {
            return Err(SelectError::NoMatch { shown });
        }
        if !any_remaining {
            return Err(SelectError::AlreadyApplied { shown });
        }
    }
    Ok(())
}

/// Indices of the nodes at or beneath `dir` (a contiguous run of the sorted nodes: every
/// path with the prefix `dir/` sorts between `dir/` and `dir0`).
fn beneath(nodes: &[Node<'_>], dir: &[u8]) -> impl Iterator<Item = usize> {
    let exact = nodes.partition_point(|n| n.path < dir);
    let mut prefix = dir.to_vec();
    prefix.push(b'/');
    let start = nodes.partition_point(|n| n.path < prefix.as_slice());
    let at = nodes.get(exact).filter(|n| n.path == dir).map(|_| exact);
    let rest = nodes
        .iter()
        .enumerate()
        .skip(start)
        .take_while(move |(_, n)| n.path.starts_with(&prefix))
        .map(|(i, _)| i);
    at.into_iter().chain(rest)
}

/// Turn a `--path` argument into a path relative to the target. `cwd_in_target` is the
/// current directory relative to the target when it is inside it (`Some(b"")` at its
/// root), `None` when it is outside; `target` is the target's absolute path. An absolute
/// argument must lie inside the target. `.` components are dropped and `..` resolved
/// lexically; a trailing `/` is ignored. The target itself (`.`) is an empty path, which
/// selects everything.
pub fn normalize_arg(
    arg: &[u8],
    cwd_in_target: Option<&[u8]>,
    target: &[u8],
) -> Result<Vec<u8>, SelectError> {
    let shown = || crate::seal::display_path(arg).0;
    let outside = || SelectError::OutsideTarget {
        shown: shown(),
        target: crate::seal::display_path(target).0,
    };
    let rel: Vec<u8> = if arg.first() == Some(&b'/') {
        let mut t = target.to_vec();
        while t.len() > 1 && t.last() == Some(&b'/') {
            t.pop();
        }
        if arg == t.as_slice() {
            Vec::new()
        } else if arg.starts_with(&t) && (t == b"/" || arg.get(t.len()) == Some(&b'/')) {
            arg.get(t.len()..).unwrap_or_default().to_vec()
        } else {
            return Err(outside());
        }
    } else {
        match cwd_in_target {
            Some(base) if !base.is_empty() => {
                let mut v = base.to_vec();
                v.push(b'/');
                v.extend_from_slice(arg);
                v
            }
            _ => arg.to_vec(),
        }
    };
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in rel.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                if parts.pop().is_none() {
                    return Err(outside());
                }
            }
            p => parts.push(p),
        }
    }
    Ok(parts.join(&b'/'))
}

/// A `--path-bytes HEX` argument: the bytes of a path relative to the target, in hex
/// (either case), then normalized as [`normalize_arg`] does from the target's root.
pub fn path_from_hex(arg: &str, target: &[u8]) -> Result<Vec<u8>, SelectError> {
    let bad = || SelectError::BadHex {
        arg: crate::seal::display_path(arg.as_bytes()).0,
    };
    let digits = arg.as_bytes();
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return Err(bad());
    }
    let nibble = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let bytes = digits
        .chunks(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    normalize_arg(&bytes, Some(b""), target)
}

/// An `--exclude` pattern, matched against path bytes.
///
/// `*` matches any bytes but `/`, `?` one byte but `/`, `[abc]`, `[a-z]` and `[!a]` one
/// byte of (or not of) a set, `**` any bytes including `/` (as a whole component:
/// `**/x`, `a/**`, `a/**/b`), and `\` escapes the next byte. A pattern without `/` is
/// matched against every component of a path (`*.log` excludes `a/b.log`; `target`
/// excludes `target/x` and `a/target`); a pattern with `/` is anchored at the target
/// root and matched against the path and each of its ancestors (`build/out` excludes
/// `build/out/x`). A leading `/` or `./` only anchors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: Vec<u8>,
    anchored: bool,
}

impl Glob {
    /// Parse a pattern.
    pub fn new(pattern: &[u8]) -> Result<Glob, SelectError> {
        let shown = || crate::seal::display_path(pattern).0;
        let mut p = pattern;
        let mut anchored = false;
        while let Some(rest) = p.strip_prefix(b"./").or_else(|| p.strip_prefix(b"/")) {
            p = rest;
            anchored = true;
        }
        while p.len() > 1 && p.last() == Some(&b'/') {
            p = p.get(..p.len() - 1).unwrap_or_default();
        }
        if p.is_empty() {
            return Err(SelectError::BadGlob {
                pattern: shown(),
                problem: "an empty pattern would exclude nothing",
            });
        }
        // A set must be closed.
        let mut i = 0;
        while i < p.len() {
            match p[i] {
                b'\\' => i += 2,
                b'[' => {
                    let mut j = i + 1;
                    if p.get(j) == Some(&b'!') || p.get(j) == Some(&b'^') {
                        j += 1;
                    }
                    if p.get(j) == Some(&b']') {
                        j += 1;
                    }
                    while j < p.len() && p[j] != b']' {
                        j += 1;
                    }
                    if j >= p.len() {
                        return Err(SelectError::BadGlob {
                            pattern: shown(),
                            problem: "a `[` set is not closed with `]` (write `\\[` for a literal `[`)",
                        });
                    }
                    i = j + 1;
                }
                _ => i += 1,
            }
        }
        Ok(Glob {
            anchored: anchored || p.contains(&b'/'),
            pattern: p.to_vec(),
        })
    }

    /// Whether the pattern excludes `path` (see the type docs).
    pub fn excludes(&self, path: &[u8]) -> bool {
        if self.anchored {
            std::iter::once(path)
                .chain(ancestors(path))
                .any(|p| glob_match(&self.pattern, p))
        } else {
            path.split(|&b| b == b'/')
                .any(|c| glob_match(&self.pattern, c))
        }
    }
}

/// Whether `pat` matches all of `s` (see [`Glob`]).
///
/// A star takes one byte at a time, and every (pattern rest, string rest) pair that failed
/// is remembered, so the work is bounded by the pattern length times the path length: a
/// path name chosen by the command (staged names are its choice) cannot make an
/// `--exclude` such as `*a*a*a*a*b` backtrack exponentially.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    Matcher::default().rest(pat, s)
}

/// The failed states of one [`glob_match`]: suffixes are named by their lengths, with
/// what is being matched (a pattern position, or the bytes a `*` or `**` may take).
#[derive(Default)]
struct Matcher {
    failed: std::collections::HashSet<(usize, usize, Mode)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Mode {
    Pattern,
    Star,
    DoubleStar,
}

impl Matcher {
    /// Whether the pattern suffix `pat` matches all of the string suffix `s`.
    fn rest(&mut self, pat: &[u8], s: &[u8]) -> bool {
        if self.failed.contains(&(pat.len(), s.len(), Mode::Pattern)) {
            return false;
        }
        let tail = |n: usize| pat.get(n..).unwrap_or_default();
        let next = s.get(1..).unwrap_or_default();
        let hit = match pat.first() {
            None => s.is_empty(),
            Some(b'*') if pat.get(1) == Some(&b'*') => {
                // `**`: any bytes, `/` included. `**/` also matches nothing at all.
                let rest = tail(2);
                rest.strip_prefix(b"/")
                    .is_some_and(|after| self.rest(after, s))
                    || self.star(rest, s, Mode::DoubleStar)
            }
            Some(b'*') => self.star(tail(1), s, Mode::Star),
            Some(b'?') => match s.first() {
                Some(&c) if c != b'/' => self.rest(tail(1), next),
                _ => false,
            },
            Some(b'[') => match s.first() {
                None | Some(b'/') => false,
                Some(&c) => match match_set(tail(1), c) {
                    Some((true, rest)) => self.rest(rest, next),
                    Some((false, _)) => false,
                    // An unclosed `[` is a literal.
                    None => c == b'[' && self.rest(tail(1), next),
                },
            },
            Some(b'\\') if pat.len() > 1 => s.first() == pat.get(1) && self.rest(tail(2), next),
            Some(&lit) => s.first() == Some(&lit) && self.rest(tail(1), next),
        };
        if !hit {
            self.failed.insert((pat.len(), s.len(), Mode::Pattern));
        }
        hit
    }

    /// Whether a star (`mode`) followed by `rest` matches all of `s`: `rest` matches here,
    /// or the star takes one more byte (never a `/` for a single star).
    fn star(&mut self, rest: &[u8], s: &[u8], mode: Mode) -> bool {
        if self.failed.contains(&(rest.len(), s.len(), mode)) {
            return false;
        }
        let hit = self.rest(rest, s)
            || (s
                .first()
                .is_some_and(|&c| mode == Mode::DoubleStar || c != b'/')
                && self.star(rest, s.get(1..).unwrap_or_default(), mode));
        if !hit {
            self.failed.insert((rest.len(), s.len(), mode));
        }
        hit
    }
}

/// Match byte `c` against the set whose body starts at `body` (after `[`): whether it
/// matched, and the pattern after `]`. `None` when the set is not closed.
fn match_set(body: &[u8], c: u8) -> Option<(bool, &[u8])> {
    let (negate, mut i) = match body.first() {
        Some(b'!' | b'^') => (true, 1),
        _ => (false, 0),
    };
    let mut hit = false;
    let mut first = true;
    loop {
        let b = *body.get(i)?;
        if b == b']' && !first {
            return Some((hit != negate, body.get(i + 1..).unwrap_or_default()));
        }
        first = false;
        if body.get(i + 1) == Some(&b'-') && body.get(i + 2).is_some_and(|&e| e != b']') {
            let hi = *body.get(i + 2)?;
            hit |= (b..=hi).contains(&c);
            i += 3;
        } else {
            hit |= b == c;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChangeKind::*;

    fn nodes<'a>(spec: &[(&'a str, ChangeKind, bool)]) -> Vec<Node<'a>> {
        let mut v: Vec<Node<'a>> = spec
            .iter()
            .map(|&(p, kind, dir)| Node {
                path: p.as_bytes(),
                kind,
                new_is_dir: dir,
                remaining: true,
            })
            .collect();
        v.sort_by(|a, b| a.path.cmp(b.path));
        v
    }

    fn paths<'a>(n: &[Node<'a>], s: &Selection) -> Vec<&'a str> {
        s.indices
            .iter()
            .map(|&i| std::str::from_utf8(n[i].path).unwrap())
            .collect()
    }

    fn sel(n: &[Node<'_>], p: &[&str], x: &[&str]) -> Result<Selection, SelectError> {
        let p: Vec<Vec<u8>> = p.iter().map(|s| s.as_bytes().to_vec()).collect();
        let x: Vec<Glob> = x.iter().map(|s| Glob::new(s.as_bytes()).unwrap()).collect();
        select(n, &p, &x, &BTreeSet::new())
    }

    fn sample() -> Vec<Node<'static>> {
        nodes(&[
            ("README", Modified, false),
            ("new", Added, true),
            ("new/a", Added, false),
            ("new/b", Added, false),
            ("new/sub", Added, true),
            ("new/sub/c", Added, false),
            ("op", Opaque, true),
            ("op/x", Added, false),
            ("op/y", Added, false),
            ("src", Modified, true),
            ("src/lib.rs", Modified, false),
            ("src-old", Deleted, false),
            ("tc", TypeChanged, true),
            ("tc/z", Added, false),
            ("gone", Deleted, true),
            ("gone.log", Added, false),
        ])
    }

    #[test]
    fn hex_paths_decode_and_normalize_from_the_target() {
        assert_eq!(path_from_hex("62ff", b"/w").unwrap(), b"b\xff");
        assert_eq!(path_from_hex("612F2E2F62", b"/w").unwrap(), b"a/b");
        assert!(matches!(
            path_from_hex("2e2e2f78", b"/w"),
            Err(SelectError::OutsideTarget { .. })
        ));
        for bad in ["", "6", "zz", "6 "] {
            assert!(matches!(
                path_from_hex(bad, b"/w"),
                Err(SelectError::BadHex { .. })
            ));
        }
    }

    #[test]
    fn no_path_takes_everything_remaining() {
        let mut n = sample();
        n[0].remaining = false;
        let s = sel(&n, &[], &[]).unwrap();
        assert_eq!(s.indices.len(), n.len() - 1);
        assert!(s.added.is_empty());
    }

    #[test]
    fn a_path_takes_its_subtree_only() {
        let n = sample();
        let s = sel(&n, &["new/sub"], &[]).unwrap();
        // new/sub and new/sub/c, plus the new parent `new` (not its other children).
        assert_eq!(paths(&n, &s), vec!["new", "new/sub", "new/sub/c"]);
        assert_eq!(s.added.len(), 1);
        assert_eq!(s.added[0].1, Because::ParentOf(b"new/sub".to_vec()));
        // `src` does not match `src-old` (component-wise prefix).
        let s = sel(&n, &["src"], &[]).unwrap();
        assert_eq!(paths(&n, &s), vec!["src", "src/lib.rs"]);
    }

    #[test]
    fn a_child_brings_a_modified_parent() {
        let n = sample();
        let s = sel(&n, &["src/lib.rs"], &[]).unwrap();
        assert_eq!(paths(&n, &s), vec!["src", "src/lib.rs"]);
    }

    #[test]
    fn opaque_and_retyped_directories_come_whole() {
        let n = sample();
        let s = sel(&n, &["op/x"], &[]).unwrap();
        assert_eq!(paths(&n, &s), vec!["op", "op/x", "op/y"]);
        let s = sel(&n, &["tc"], &["z"]).unwrap();
        assert_eq!(paths(&n, &s), vec!["tc", "tc/z"]);
        assert_eq!(s.excluded_but_required.len(), 1);
        // An added directory can be applied without some of its entries.
        let s = sel(&n, &["new"], &["b"]).unwrap();
        assert_eq!(paths(&n, &s), vec!["new", "new/a", "new/sub", "new/sub/c"]);
        assert!(s.excluded_but_required.is_empty());
    }

    #[test]
    fn excludes_and_errors() {
        let n = sample();
        let s = sel(&n, &[], &["*.log", "new/sub", "README"]).unwrap();
        let p = paths(&n, &s);
        assert!(!p.contains(&"gone.log") && !p.contains(&"README"));
        assert!(!p.contains(&"new/sub") && !p.contains(&"new/sub/c"));
        assert!(p.contains(&"new/a"));
        assert_eq!(
            sel(&n, &["nope"], &[]),
            Err(SelectError::NoMatch {
                shown: "nope".into()
            })
        );
        let mut done = sample();
        for x in done.iter_mut() {
            if x.path.starts_with(b"src") {
                x.remaining = false;
            }
        }
        assert!(matches!(
            sel(&done, &["src"], &[]),
            Err(SelectError::AlreadyApplied { .. })
        ));
        // An applied parent is not re-selected.
        let s = sel(&done, &["new/a"], &[]).unwrap();
        assert_eq!(paths(&done, &s), vec!["new", "new/a"]);
    }

    #[test]
    fn pending_paths_are_always_taken() {
        let n = sample();
        let pending: BTreeSet<Vec<u8>> = [b"README".to_vec()].into();
        let s = select(&n, &[b"op".to_vec()], &[], &pending).unwrap();
        assert_eq!(paths(&n, &s), vec!["README", "op", "op/x", "op/y"]);
    }

    #[test]
    fn byte_paths() {
        let n: Vec<Node<'_>> = vec![
            Node {
                path: b"-rf",
                kind: Added,
                new_is_dir: false,
                remaining: true,
            },
            Node {
                path: b"a\nb",
                kind: Added,
                new_is_dir: true,
                remaining: true,
            },
            Node {
                path: b"a\nb/\xff",
                kind: Added,
                new_is_dir: false,
                remaining: true,
            },
        ];
        let s = select(&n, &[b"a\nb/\xff".to_vec()], &[], &BTreeSet::new()).unwrap();
        assert_eq!(s.indices, vec![1, 2]);
        let g = Glob::new(b"\xff").unwrap();
        assert!(g.excludes(b"a\nb/\xff"));
    }

    fn held_sel(
        n: &[Node<'_>],
        marked: &[&str],
        p: &[&str],
        allow_all: bool,
    ) -> (Vec<String>, Vec<(String, Hold)>) {
        let m: Vec<bool> = n
            .iter()
            .map(|x| marked.iter().any(|s| s.as_bytes() == x.path))
            .collect();
        let p: Vec<Vec<u8>> = p.iter().map(|s| s.as_bytes().to_vec()).collect();
        let s = select_holding(
            n,
            &p,
            &[],
            &BTreeSet::new(),
            Sensitive {
                marked: &m,
                allow_all,
            },
        )
        .unwrap();
        let name = |i: usize| String::from_utf8(n[i].path.to_vec()).unwrap();
        (
            s.indices.iter().map(|&i| name(i)).collect(),
            s.held.into_iter().map(|(i, h)| (name(i), h)).collect(),
        )
    }

    #[test]
    fn sensitive_paths_are_held_with_their_whole_directories() {
        let n = sample();
        // A sensitive file in a new directory: the directory applies, the file is held.
        let (took, held) = held_sel(&n, &["new/sub/c"], &[], false);
        assert!(took.contains(&"new/sub".to_owned()) && !took.contains(&"new/sub/c".to_owned()));
        assert_eq!(held, vec![("new/sub/c".to_owned(), Hold::Sensitive)]);
        // In an opaque directory: the directory and all of it are held.
        let (took, held) = held_sel(&n, &["op/x"], &[], false);
        assert!(!took.iter().any(|p| p.starts_with("op")));
        assert_eq!(
            held,
            vec![
                ("op".to_owned(), Hold::Contains(b"op/x".to_vec())),
                ("op/x".to_owned(), Hold::Sensitive),
                ("op/y".to_owned(), Hold::InsideHeld(b"op".to_vec())),
            ]
        );
        // Asking for a sibling of the held file takes nothing of `op`.
        let (took, _) = held_sel(&n, &["op/x"], &["op/y"], false);
        assert!(took.is_empty());
        // Naming it (or a directory above it) applies it, and its dependencies.
        let (took, held) = held_sel(&n, &["op/x"], &["op/x"], false);
        assert_eq!(took, vec!["op", "op/x", "op/y"]);
        assert!(held.is_empty());
        let (took, held) = held_sel(&n, &["new/sub/c"], &["new"], false);
        assert!(took.contains(&"new/sub/c".to_owned()) && held.is_empty());
        // `--path .` names everything, and so nothing in particular.
        let (took, held) = held_sel(&n, &["README"], &[""], false);
        assert!(!took.contains(&"README".to_owned()) && held.len() == 1);
        // `--allow-sensitive` holds nothing.
        let (took, held) = held_sel(&n, &["op/x", "README"], &[], true);
        assert_eq!(took.len(), n.len());
        assert!(held.is_empty());
        // A held path outside the selection is not reported.
        let (_, held) = held_sel(&n, &["README"], &["src"], false);
        assert!(held.is_empty());
    }

    #[test]
    fn ancestors_nearest_first() {
        assert_eq!(
            ancestors(b"a/b/c").collect::<Vec<_>>(),
            vec![&b"a/b"[..], b"a"]
        );
        assert_eq!(ancestors(b"a").count(), 0);
        assert!(is_at_or_beneath(b"a/b", b"a"));
        assert!(is_at_or_beneath(b"a", b"a"));
        assert!(!is_at_or_beneath(b"ab", b"a"));
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"*.rs", b"lib.rs"));
        assert!(!glob_match(b"*.rs", b"src/lib.rs"));
        assert!(glob_match(b"src/**", b"src/a/b"));
        assert!(glob_match(b"**/*.rs", b"lib.rs"));
        assert!(glob_match(b"**/*.rs", b"a/b/lib.rs"));
        assert!(glob_match(b"a/**/b", b"a/b"));
        assert!(glob_match(b"a/**/b", b"a/x/y/b"));
        assert!(glob_match(b"?.txt", b"a.txt"));
        assert!(!glob_match(b"?.txt", b"/.txt"));
        assert!(glob_match(b"[a-c]x", b"bx"));
        assert!(!glob_match(b"[!a-c]x", b"bx"));
        assert!(glob_match(b"[]]", b"]"));
        assert!(glob_match(b"\\*", b"*"));
        assert!(!glob_match(b"\\*", b"a"));
        assert!(Glob::new(b"[abc").is_err());
        assert!(Glob::new(b"").is_err());
        let g = Glob::new(b"build/out").unwrap();
        assert!(g.excludes(b"build/out/x"));
        assert!(!g.excludes(b"a/build/out"));
        let g = Glob::new(b"/top").unwrap();
        assert!(g.excludes(b"top/x"));
        assert!(!g.excludes(b"a/top"));
        let g = Glob::new(b"target/").unwrap();
        assert!(g.excludes(b"a/target/x"));
    }

    /// Found while writing the `select` fuzz target, confirmed with the CLI: a staged
    /// name of 200 bytes made `apply --exclude '*a*a*a*a*a*b'` run for minutes
    /// (exponential backtracking). These return at once now.
    #[test]
    fn many_stars_against_a_long_name_do_not_backtrack_forever() {
        let name = vec![b'a'; 4000];
        let stars = b"*a".repeat(30);
        assert!(!glob_match(&[stars.as_slice(), b"b"].concat(), &name));
        assert!(glob_match(&stars, &name));
        let deep = [b"a/".repeat(1000), b"x".to_vec()].concat();
        assert!(!glob_match(&b"**/a".repeat(20), &deep));
        assert!(Glob::new(&b"*a".repeat(20)).unwrap().excludes(&name));
    }

    #[test]
    fn normalizing_arguments() {
        let n = |a: &str, cwd: Option<&str>| {
            normalize_arg(a.as_bytes(), cwd.map(str::as_bytes), b"/w")
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(n("src/", Some("")), Ok("src".into()));
        assert_eq!(n("./a//b", None), Ok("a/b".into()));
        assert_eq!(n("x", Some("sub")), Ok("sub/x".into()));
        assert_eq!(n("../x", Some("sub")), Ok("x".into()));
        assert_eq!(n("/w/a", Some("sub")), Ok("a".into()));
        assert_eq!(n("/w", None), Ok("".into()));
        assert!(n("/wx/a", None).is_err());
        assert!(n("../x", Some("")).is_err());
    }
}
