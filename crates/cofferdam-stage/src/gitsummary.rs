//! A staged `.git` change in git's terms (DESIGN.md §5): which branches, tags and other
//! refs were added, moved or deleted, whether HEAD changed, and how many object files were
//! written — so a reviewer sees "branch main moved 1a2b3c4..5d6e7f8" instead of a hundred
//! `.git/objects/…` lines.
//!
//! Owns [`GitSummary`] and [`summarize`] (pure: the caller hands in a reader for the two
//! sides) and [`summarize_stage`] (the thin effect: reads refs beneath the workdir and the
//! upper, never following a symlink, nothing over [`crate::diff::LARGE_BYTES`]). Refs are
//! parsed here rather than by running git: the staged `.git` is the workload's and its
//! config may name programs git would run (`core.fsmonitor`, hooks), and parsing loose
//! refs and `packed-refs` needs nothing else. New loose objects are inflated (at most
//! [`OBJECT_HEAD_BYTES`] of each) only to find the commits among them and their subjects;
//! packs are counted, not read. It may not change anything.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::BorrowedFd;

use cofferdam_record::bundle::{ChangeEntryType, ChangeKind};

use crate::conflict::git_dir_of;
use crate::review::StagedChange;
use crate::sensitive::Side;

/// One ref whose value differs between the host and the stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefChange {
    /// The full name, `refs/heads/main`.
    pub name: String,
    /// The host's value (an object id, or `ref: …`), `None` when absent.
    pub old: Option<String>,
    /// The staged value, `None` when deleted.
    pub new: Option<String>,
}

/// The git side of the changes beneath one `.git` directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GitSummary {
    /// The `.git` directory, relative to the target (`.git`, `vendor/x/.git`).
    pub git_dir: Vec<u8>,
    /// HEAD, when the stage changes it: (host, staged).
    pub head: Option<(Option<String>, Option<String>)>,
    /// Refs that differ, by name.
    pub refs: Vec<RefChange>,
    /// Loose object files added.
    pub loose_objects: usize,
    /// Pack files added.
    pub packs: usize,
    /// The subjects of the commits among the loose objects added (in path order: git's
    /// graph is not walked).
    pub commits: Vec<String>,
}

/// How much of a loose object is inflated to read a commit's header and subject.
pub const OBJECT_HEAD_BYTES: usize = 64 * 1024;

/// The subject of a loose object's inflated bytes when it is a commit: the first line
/// of the message, `None` for other objects.
pub fn commit_subject(object: &[u8]) -> Option<String> {
    let body = object.strip_prefix(b"commit ")?;
    let nul = body.iter().position(|&b| b == 0)?;
    let body = body.get(nul + 1..)?;
    let message = body
        .windows(2)
        .position(|w| w == b"\n\n")
        .and_then(|at| body.get(at + 2..))
        .unwrap_or_default();
    let line = message.split(|&b| b == b'\n').next().unwrap_or_default();
    Some(String::from_utf8_lossy(line).trim().to_owned())
}

/// Inflate the head of a loose object file (a zlib stream), up to [`OBJECT_HEAD_BYTES`].
fn inflate_head(file: &[u8]) -> Option<Vec<u8>> {
    match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(file, OBJECT_HEAD_BYTES) {
        Ok(v) => Some(v),
        // Longer than the limit: what was inflated holds the header and subject.
        Err(e) if e.status == miniz_oxide::inflate::TINFLStatus::HasMoreOutput => Some(e.output),
        Err(_) => None,
    }
}

/// The value of a loose ref (or HEAD) file: its first line, trimmed.
fn ref_value(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

/// `packed-refs`: name → object id (peeled `^` lines and comments skipped).
pub fn parse_packed_refs(bytes: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| {
            let (id, name) = l.split_once(' ')?;
            Some((name.trim().to_owned(), id.trim().to_owned()))
        })
        .collect()
}

/// Whether `rest` (beneath `.git/objects/`) is a loose object file: `xx/` and 38 or 62
/// more hex digits.
fn is_loose_object(rest: &[u8]) -> bool {
    match rest.split(|&b| b == b'/').collect::<Vec<_>>().as_slice() {
        [dir, file] => {
            dir.len() == 2
                && (file.len() == 38 || file.len() == 62)
                && dir.iter().chain(file.iter()).all(u8::is_ascii_hexdigit)
        }
        _ => false,
    }
}

/// A reader for one side: a regular file's bytes, `None` when there is none.
pub type ReadSide<'a> = &'a dyn Fn(Side, &[u8]) -> Option<Vec<u8>>;

/// Summarise every `.git` directory the changes touch. `read(side, path)`: a regular
/// file's bytes on that side, `None` when there is none (or it cannot be read). The staged
/// side of a path the stage does not change is the host's.
pub fn summarize(changes: &[StagedChange], read: ReadSide<'_>) -> Vec<GitSummary> {
    let mut by_dir: BTreeMap<Vec<u8>, Vec<&StagedChange>> = BTreeMap::new();
    for c in changes {
        if let Some(d) = git_dir_of(&c.path).filter(|d| d.len() < c.path.len()) {
            by_dir.entry(d.to_vec()).or_default().push(c);
        }
    }
    let mut out = Vec::new();
    for (dir, list) in by_dir {
        let join = |rel: &[u8]| [dir.as_slice(), b"/", rel].concat();
        let changed: BTreeMap<Vec<u8>, &StagedChange> =
            list.iter().map(|c| (c.path.clone(), *c)).collect();
        // The staged side of a path: the stage's when it changes it, else the host's.
        let staged = |path: &[u8]| match changed.get(path) {
            Some(c) if c.kind == ChangeKind::Deleted => None,
            Some(_) => read(Side::Staged, path),
            None => read(Side::Host, path),
        };
        let packed_path = join(b"packed-refs");
        let host_packed = read(Side::Host, &packed_path)
            .map(|b| parse_packed_refs(&b))
            .unwrap_or_default();
        let staged_packed = staged(&packed_path)
            .map(|b| parse_packed_refs(&b))
            .unwrap_or_default();
        let mut names: BTreeSet<String> = BTreeSet::new();
        if changed.contains_key(&packed_path) {
            names.extend(host_packed.keys().cloned());
            names.extend(staged_packed.keys().cloned());
        }
        let mut s = GitSummary {
            git_dir: dir.clone(),
            ..GitSummary::default()
        };
        let refs_prefix = join(b"refs/");
        let objects_prefix = join(b"objects/");
        for c in &list {
            if let Some(rest) = c.path.strip_prefix(refs_prefix.as_slice()) {
                let is_file =
                    c.kind == ChangeKind::Deleted || c.new_type == Some(ChangeEntryType::File);
                if is_file && !rest.is_empty() {
                    names.insert(format!("refs/{}", String::from_utf8_lossy(rest)));
                }
            } else if let Some(rest) = c.path.strip_prefix(objects_prefix.as_slice())
                && c.kind == ChangeKind::Added
                && c.new_type == Some(ChangeEntryType::File)
            {
                if is_loose_object(rest) {
                    s.loose_objects += 1;
                    if let Some(subject) = read(Side::Staged, &c.path)
                        .and_then(|f| inflate_head(&f))
                        .and_then(|o| commit_subject(&o))
                    {
                        s.commits.push(subject);
                    }
                } else if rest.starts_with(b"pack/") && rest.ends_with(b".pack") {
                    s.packs += 1;
                }
            }
        }
        for name in names {
            let loose = join(name.as_bytes());
            let old = read(Side::Host, &loose)
                .and_then(|b| ref_value(&b))
                .or_else(|| host_packed.get(&name).cloned());
            let new = staged(&loose)
                .and_then(|b| ref_value(&b))
                .or_else(|| staged_packed.get(&name).cloned());
            if old != new {
                s.refs.push(RefChange { name, old, new });
            }
        }
        let head = join(b"HEAD");
        if changed.contains_key(&head) {
            let old = read(Side::Host, &head).and_then(|b| ref_value(&b));
            let new = staged(&head).and_then(|b| ref_value(&b));
            if old != new {
                s.head = Some((old, new));
            }
        }
        out.push(s);
    }
    out
}

/// [`summarize`] over the host workdir (`target`) and the stage's `upper`.
pub fn summarize_stage(
    target: BorrowedFd<'_>,
    upper: BorrowedFd<'_>,
    changes: &[StagedChange],
) -> Vec<GitSummary> {
    let read = |side: Side, path: &[u8]| {
        let root = match side {
            Side::Host => target,
            Side::Staged => upper,
        };
        match crate::diff::read_file(root, path) {
            Ok(crate::diff::Content::Bytes(b)) => Some(b),
            _ => None,
        }
    };
    summarize(changes, &read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Fingerprint;

    fn ch(path: &str, kind: ChangeKind) -> StagedChange {
        StagedChange {
            path: path.as_bytes().to_vec(),
            display: path.to_owned(),
            kind,
            old_type: None,
            new_type: (kind != ChangeKind::Deleted).then_some(ChangeEntryType::File),
            size: Some(41),
            mode: Some(0o644),
            recorded: Fingerprint::ABSENT,
        }
    }

    #[test]
    fn refs_added_moved_and_deleted_with_packed_refs_and_objects_counted() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let c = "c".repeat(40);
        let host: BTreeMap<&str, String> = BTreeMap::from([
            (".git/refs/heads/main", format!("{a}\n")),
            (".git/HEAD", "ref: refs/heads/main\n".to_owned()),
            (
                ".git/packed-refs",
                format!("# pack-refs with: peeled\n{a} refs/tags/old\n^{c}\n{a} refs/heads/gone\n"),
            ),
        ]);
        let upper: BTreeMap<&str, String> = BTreeMap::from([
            (".git/refs/heads/main", format!("{b}\n")),
            (".git/refs/heads/feature", format!("{c}\n")),
            (".git/HEAD", "ref: refs/heads/feature\n".to_owned()),
            (".git/packed-refs", format!("{a} refs/tags/old\n")),
        ]);
        let read = |side: Side, path: &[u8]| {
            let path = std::str::from_utf8(path).ok()?;
            match side {
                Side::Host => host.get(path),
                Side::Staged => upper.get(path),
            }
            .map(|t| t.as_bytes().to_vec())
        };
        let changes = [
            ch("README", ChangeKind::Modified),
            ch(".git/HEAD", ChangeKind::Modified),
            ch(".git/index", ChangeKind::Modified),
            ch(
                ".git/objects/ab/cdef0123456789abcdef0123456789abcdef01",
                ChangeKind::Added,
            ),
            ch(
                ".git/objects/12/3456789abcdef0123456789abcdef012345678",
                ChangeKind::Added,
            ),
            ch(".git/objects/pack/pack-1.pack", ChangeKind::Added),
            ch(".git/objects/pack/pack-1.idx", ChangeKind::Added),
            ch(".git/packed-refs", ChangeKind::Modified),
            ch(".git/refs/heads/feature", ChangeKind::Added),
            ch(".git/refs/heads/main", ChangeKind::Modified),
        ];
        let got = summarize(&changes, &read);
        assert_eq!(got.len(), 1);
        let g = &got[0];
        assert_eq!(g.git_dir, b".git");
        assert_eq!((g.loose_objects, g.packs), (2, 1));
        assert_eq!(
            g.head,
            Some((
                Some("ref: refs/heads/main".to_owned()),
                Some("ref: refs/heads/feature".to_owned())
            ))
        );
        let refs: Vec<(&str, Option<&str>, Option<&str>)> = g
            .refs
            .iter()
            .map(|r| (r.name.as_str(), r.old.as_deref(), r.new.as_deref()))
            .collect();
        assert_eq!(
            refs,
            vec![
                ("refs/heads/feature", None, Some(c.as_str())),
                ("refs/heads/gone", Some(a.as_str()), None),
                ("refs/heads/main", Some(a.as_str()), Some(b.as_str())),
            ]
        );
        assert!(g.commits.is_empty());
        // Nothing beneath a .git: no summary.
        assert!(summarize(&[ch("src/a", ChangeKind::Added)], &read).is_empty());
    }

    #[test]
    fn commit_subjects_of_inflated_objects() {
        assert_eq!(
            commit_subject(b"commit 50\0tree 1\nparent 2\nauthor a\n\nfix the thing\n\nbody\n"),
            Some("fix the thing".to_owned())
        );
        assert_eq!(commit_subject(b"blob 3\0abc"), None);
        assert_eq!(commit_subject(b"commit 9\0tree 1\n"), Some(String::new()));
        let z = miniz_oxide::deflate::compress_to_vec_zlib(b"commit 20\0tree 1\n\nhello\n", 6);
        assert_eq!(
            inflate_head(&z).and_then(|o| commit_subject(&o)),
            Some("hello".to_owned())
        );
        let big: Vec<u8> = b"commit 99\0tree 1\n\nbig\n"
            .iter()
            .copied()
            .chain(std::iter::repeat_n(b'x', 3 * OBJECT_HEAD_BYTES))
            .collect();
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&big, 6);
        assert_eq!(
            inflate_head(&z).and_then(|o| commit_subject(&o)),
            Some("big".to_owned())
        );
        assert_eq!(inflate_head(b"not zlib"), None);
    }
}
