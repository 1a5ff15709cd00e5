//! Review diffs: what applying a staged change would do to the host file, as a unified diff
//! for text and one line for everything else (DESIGN.md §5).
//!
//! Owns [`diff_change`] and [`FileDiff`]. For each change it reads the staged object from
//! `upper/` and the host object from the workdir, both beneath their roots without
//! following symlinks; it never walks either tree, so its cost follows the number of
//! changes shown. Binary content (a NUL byte or bytes that are not UTF-8), files over
//! [`LARGE_BYTES`], symlinks, special files, directories, deletions and mode-only changes
//! are summarized in one line. Control characters in diffed text are shown escaped
//! (`cofferdam_record::shown`: `\u{1b}`, `\u{202e}`, …), so a staged file cannot drive
//! the reviewer's terminal. It may not write anything; colour is the CLI's business.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::time::Duration;

use cofferdam_record::bundle::{ChangeEntryType, ChangeKind};
use rustix::fs::OFlags;
use serde::Serialize;
use similar::{ChangeTag, TextDiff};

use crate::conflict::{ConflictReason, compare};
use crate::fingerprint::{FingerprintError, HostRoot};
use crate::fsops;
use crate::review::StagedChange;

/// Files larger than this (either side) are summarized, not diffed: 1 MiB.
pub const LARGE_BYTES: u64 = 1 << 20;

/// A diff cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// A staged object cannot be read.
    #[error("cannot read the staged {path}: {source}")]
    Stage {
        /// The change, for display.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A host object cannot be read.
    #[error("cannot read {path} in the workdir: {source}")]
    Host {
        /// The change, for display.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// What a change looks like to a reviewer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDiff {
    /// The path, for display.
    pub path: String,
    /// How it changed.
    pub kind: ChangeKind,
    /// One line for changes without a text diff, or a note above one (e.g. a mode change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The unified diff (header lines `--- a/…`, `+++ b/…` included), for text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unified: Option<String>,
    /// Lines added (text only).
    pub insertions: usize,
    /// Lines removed (text only).
    pub deletions: usize,
    /// Whether the content is binary (or too large) and summarized.
    pub binary: bool,
    /// Why applying it now would be refused, when the host changed since the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// The staged permission bits, octal (`"0755"`), for everything that has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The host's permission bits before, octal, when the host had the object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_mode: Option<String>,
    /// What stands out in the staged mode ([`mode_flags`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mode_flags: Vec<&'static str>,
    /// Why applying it runs code or changes policy later ([`sensitivity`]); a bare
    /// `apply` leaves it staged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sensitive: Option<String>,
}

/// Whether change `c` is sensitive (`crate::sensitive`), reading the git config files it
/// asks for from the stage (`upper`) and the host workdir (`target`), beneath their roots
/// without following symlinks. A file over [`LARGE_BYTES`] or unreadable on the staged
/// side is marked (the classifier says so); on the host side it counts as absent.
pub fn sensitivity(
    target: BorrowedFd<'_>,
    upper: BorrowedFd<'_>,
    c: &StagedChange,
) -> Option<crate::sensitive::Reason> {
    use crate::sensitive::{Read, Side};
    let read = |side: Side, path: &[u8]| {
        let root = match side {
            Side::Host => target,
            Side::Staged => upper,
        };
        match read_file(root, path) {
            Ok(Content::Bytes(b)) => Read::Bytes(b),
            Ok(Content::Large(n)) => Read::Failed(format!("{n} bytes, over {LARGE_BYTES}")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Read::Absent,
            Err(e) => Read::Failed(e.to_string()),
        }
    };
    crate::sensitive::sensitive(&c.path, &c.facts(), &read)
}

/// What a reviewer must not miss in permission bits: `setuid`, `setgid` (both stripped
/// from files when applied), `world-writable`, and `executable` for a file.
pub fn mode_flags(mode: u32, is_dir: bool) -> Vec<&'static str> {
    let mut v = Vec::new();
    if mode & 0o4000 != 0 {
        v.push("setuid");
    }
    if mode & 0o2000 != 0 {
        v.push("setgid");
    }
    if mode & 0o002 != 0 {
        v.push("world-writable");
    }
    if !is_dir && mode & 0o111 != 0 {
        v.push("executable");
    }
    v
}

/// The mode a change list shows next to a path: an added or retyped entry's, and any
/// change's whose mode stands out (setuid, setgid, world-writable); `None` otherwise. The
/// flag says whether it stands out (to be painted so it cannot be missed).
pub fn listed_mode(kind: ChangeKind, mode: Option<u32>, is_dir: bool) -> Option<(String, bool)> {
    let m = mode?;
    let loud = mode_flags(m, is_dir).iter().any(|f| *f != "executable");
    let new = matches!(kind, ChangeKind::Added | ChangeKind::TypeChanged);
    (new || loud).then(|| (format!("mode {}", mode_text(m, is_dir)), loud))
}

/// `0755`, or `0777 (world-writable, executable)`.
pub fn mode_text(mode: u32, is_dir: bool) -> String {
    let flags = mode_flags(mode, is_dir);
    if flags.is_empty() {
        format!("{mode:04o}")
    } else {
        format!("{mode:04o} ({})", flags.join(", "))
    }
}

/// The two roots a diff reads from.
pub struct Sides<'a> {
    /// The host workdir, for fingerprints.
    pub host: &'a HostRoot,
    /// The host workdir as a directory fd.
    pub target: BorrowedFd<'a>,
    /// The stage's upper directory as a directory fd.
    pub upper: BorrowedFd<'a>,
    /// The run's start (for the conflict note).
    pub run_started_at_unix_ms: u64,
    /// The apply ledger, for the ctimes cofferdam's own writes caused (a partly applied
    /// file's); `None`: none are accepted.
    pub ledger: Option<&'a crate::ledger::Ledger>,
}

/// Content as read: its bytes when small enough, else only its size.
pub(crate) enum Content {
    Bytes(Vec<u8>),
    Large(u64),
}

impl Content {
    fn size(&self) -> u64 {
        match self {
            Content::Bytes(b) => b.len() as u64,
            Content::Large(n) => *n,
        }
    }
}

pub(crate) fn read_file(root: BorrowedFd<'_>, path: &[u8]) -> io::Result<Content> {
    let fd = fsops::open_beneath(
        root,
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
    )
    .map_err(fsops::io_err)?;
    let mut f = File::from(fd);
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if meta.len() > LARGE_BYTES {
        return Ok(Content::Large(meta.len()));
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    f.by_ref().take(LARGE_BYTES + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > LARGE_BYTES {
        return Ok(Content::Large(buf.len() as u64));
    }
    Ok(Content::Bytes(buf))
}

fn read_link(root: BorrowedFd<'_>, path: &[u8]) -> io::Result<Vec<u8>> {
    let fd = fsops::open_beneath(root, path, OFlags::PATH).map_err(fsops::io_err)?;
    rustix::fs::readlinkat(fd.as_fd(), c"", Vec::new())
        .map(|c| c.into_bytes())
        .map_err(fsops::io_err)
}

fn mode_of(root: BorrowedFd<'_>, path: &[u8]) -> Option<u32> {
    let fd = fsops::open_beneath(root, path, OFlags::PATH).ok()?;
    rustix::fs::fstat(fd.as_fd())
        .ok()
        .map(|s| s.st_mode & 0o7777)
}

/// Whether content is binary for review: a NUL in its first 8000 bytes, or not UTF-8.
pub fn is_binary(b: &[u8]) -> bool {
    b.iter().take(8000).any(|&c| c == 0) || std::str::from_utf8(b).is_err()
}

/// Escape what a terminal would interpret in one line of text: everything
/// `cofferdam_record::shown` escapes, tab kept.
pub fn sanitize(line: &str) -> String {
    cofferdam_record::shown::escape_with(line, cofferdam_record::shown::Keep::TAB)
}

fn bytes_shown(b: &[u8]) -> String {
    crate::seal::display_path(b).0
}

fn type_word(t: Option<ChangeEntryType>) -> &'static str {
    match t {
        Some(ChangeEntryType::File) => "file",
        Some(ChangeEntryType::Directory) => "directory",
        Some(ChangeEntryType::Symlink) => "symlink",
        Some(ChangeEntryType::Other) => "special file",
        None => "nothing",
    }
}

/// The review diff of one change (see the module docs).
pub fn diff_change(sides: &Sides<'_>, c: &StagedChange) -> Result<FileDiff, DiffError> {
    let stage_err = |source| DiffError::Stage {
        path: c.display.clone(),
        source,
    };
    let host_err = |source| DiffError::Host {
        path: c.display.clone(),
        source,
    };
    let mut d = FileDiff {
        path: c.display.clone(),
        kind: c.kind,
        summary: None,
        unified: None,
        insertions: 0,
        deletions: 0,
        binary: false,
        conflict: None,
        mode: c.mode.map(|m| format!("{m:04o}")),
        old_mode: match &c.recorded.host {
            crate::fingerprint::HostState::File { mode, .. }
            | crate::fingerprint::HostState::Dir { mode } => Some(format!("{mode:04o}")),
            _ => None,
        },
        mode_flags: c
            .mode
            .map_or_else(Vec::new, |m| mode_flags(m, c.new_is_dir())),
        sensitive: sensitivity(sides.target, sides.upper, c).map(|r| r.to_string()),
    };
    let rel = Path::new(fsops::os(&c.path));
    match sides.host.fingerprint(rel) {
        Ok(now) => {
            if !(c.kind == ChangeKind::Deleted && now.host == crate::fingerprint::HostState::Absent)
            {
                let accepted = sides.ledger.and_then(|l| l.accepted_ctime(&c.path));
                d.conflict = compare(&c.recorded, &now, sides.run_started_at_unix_ms, accepted)
                    .map(|r| r.to_string());
            }
        }
        Err(FingerprintError::Unstable { .. }) => {
            d.conflict = Some(
                ConflictReason::ThroughSymlink {
                    at: c.display.clone(),
                }
                .to_string(),
            );
        }
        Err(e) => d.conflict = Some(e.to_string()),
    }
    let host_has_file = c.old_type == Some(ChangeEntryType::File);
    match (c.kind, c.new_type) {
        (ChangeKind::Deleted, _) => {
            d.summary = Some(match c.old_type {
                Some(ChangeEntryType::Directory) => {
                    "deleted directory, with everything in it".to_owned()
                }
                Some(ChangeEntryType::File) => match c.recorded.host {
                    crate::fingerprint::HostState::File { size, .. } => {
                        format!("deleted file ({size} bytes)")
                    }
                    _ => "deleted file".to_owned(),
                },
                t => format!("deleted {}", type_word(t)),
            });
            return Ok(d);
        }
        (ChangeKind::Opaque, _) => {
            d.summary = Some(
                "directory replaced whole: host entries that are not in the stage are removed"
                    .to_owned(),
            );
            return Ok(d);
        }
        (_, Some(ChangeEntryType::Directory)) => {
            let mode = c
                .mode
                .map_or(String::new(), |m| format!(", mode {}", mode_text(m, true)));
            d.summary = Some(match c.kind {
                ChangeKind::Added => format!("new directory{mode}"),
                ChangeKind::TypeChanged => {
                    format!("{} replaced by a directory{mode}", type_word(c.old_type))
                }
                _ => {
                    let was = mode_of(sides.target, &c.path);
                    match (was, c.mode) {
                        (Some(a), Some(b)) => {
                            format!("directory mode {a:04o} → {}", mode_text(b, true))
                        }
                        _ => "directory mode changed".to_owned(),
                    }
                }
            });
            return Ok(d);
        }
        (_, Some(ChangeEntryType::Symlink)) => {
            let new = read_link(sides.upper, &c.path).map_err(stage_err)?;
            let was = if c.old_type == Some(ChangeEntryType::Symlink) {
                read_link(sides.target, &c.path).ok()
            } else {
                None
            };
            d.summary = Some(match (c.kind, was) {
                (ChangeKind::Modified, Some(w)) => format!(
                    "symlink → {} (was → {})",
                    bytes_shown(&new),
                    bytes_shown(&w)
                ),
                (ChangeKind::TypeChanged, _) => format!(
                    "{} replaced by a symlink → {}",
                    type_word(c.old_type),
                    bytes_shown(&new)
                ),
                _ => format!("new symlink → {}", bytes_shown(&new)),
            });
            return Ok(d);
        }
        (_, Some(ChangeEntryType::Other)) => {
            let mode = c
                .mode
                .map_or(String::new(), |m| format!(", mode {}", mode_text(m, false)));
            d.summary = Some(match c.kind {
                ChangeKind::Added => {
                    format!("new special file (device node, fifo or socket){mode}")
                }
                _ => "special file changed".to_owned(),
            });
            return Ok(d);
        }
        _ => {}
    }
    // A regular file.
    let new = read_file(sides.upper, &c.path).map_err(stage_err)?;
    let old = if host_has_file {
        match read_file(sides.target, &c.path) {
            Ok(content) => Some(content),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(host_err(e)),
        }
    } else {
        None
    };
    let old_mode = if host_has_file {
        mode_of(sides.target, &c.path)
    } else {
        None
    };
    let mut notes: Vec<String> = Vec::new();
    if c.kind == ChangeKind::TypeChanged {
        notes.push(format!("{} replaced by a file", type_word(c.old_type)));
    }
    // git's header for a new file, with what stands out in the mode.
    if let Some(m) = c.mode
        && (old_mode.is_none() || c.kind != ChangeKind::Modified)
    {
        let flags = mode_flags(m, false);
        let mut note = format!("new file mode {:06o}", 0o100_000 | (m & 0o7777));
        if !flags.is_empty() {
            note.push_str(&format!(" ({})", flags.join(", ")));
        }
        notes.push(note);
    }
    if let (Some(a), Some(b)) = (old_mode, c.mode)
        && a != b
    {
        notes.push(format!("mode {a:04o} → {}", mode_text(b, false)));
    }
    if let Some(m) = c.mode
        && m & 0o6000 != 0
    {
        notes.push("setuid/setgid: stripped when applied".to_owned());
    }
    let empty = Content::Bytes(Vec::new());
    let old_c = old.as_ref().unwrap_or(&empty);
    match (old_c, &new) {
        (Content::Bytes(a), Content::Bytes(b)) if !is_binary(a) && !is_binary(b) => {
            if a == b {
                if notes.is_empty() {
                    notes.push("content unchanged".to_owned());
                }
            } else {
                let a = String::from_utf8_lossy(a);
                let b = String::from_utf8_lossy(b);
                let diff = TextDiff::configure()
                    .timeout(Duration::from_secs(2))
                    .diff_lines(a.as_ref(), b.as_ref());
                for ch in diff.iter_all_changes() {
                    match ch.tag() {
                        ChangeTag::Insert => d.insertions += 1,
                        ChangeTag::Delete => d.deletions += 1,
                        ChangeTag::Equal => {}
                    }
                }
                let from = if old.is_some() {
                    format!("a/{}", c.display)
                } else {
                    "/dev/null".to_owned()
                };
                let text = diff
                    .unified_diff()
                    .context_radius(3)
                    .header(&from, &format!("b/{}", c.display))
                    .to_string();
                let mut clean = String::with_capacity(text.len());
                for line in text.split_inclusive('\n') {
                    let (body, nl) = match line.strip_suffix('\n') {
                        Some(b) => (b, "\n"),
                        None => (line, ""),
                    };
                    clean.push_str(&sanitize(body));
                    clean.push_str(nl);
                }
                d.unified = Some(clean);
            }
        }
        (a, b) => {
            d.binary = true;
            let large = matches!(a, Content::Large(_)) || matches!(b, Content::Large(_));
            let word = if large { "large file" } else { "binary file" };
            notes.push(if old.is_some() {
                format!("{word}: {} → {} bytes", a.size(), b.size())
            } else {
                format!("new {word}: {} bytes", b.size())
            });
        }
    }
    if !notes.is_empty() {
        d.summary = Some(notes.join("; "));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{Fingerprint, HostState};
    use rustix::fs::Mode;
    use std::os::fd::OwnedFd;

    fn dirfd(p: &Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    fn change(
        path: &str,
        kind: ChangeKind,
        old: Option<ChangeEntryType>,
        new: Option<ChangeEntryType>,
        mode: Option<u32>,
    ) -> StagedChange {
        StagedChange {
            path: path.as_bytes().to_vec(),
            display: path.into(),
            kind,
            old_type: old,
            new_type: new,
            size: None,
            mode,
            recorded: Fingerprint::ABSENT,
        }
    }

    #[test]
    fn text_binary_large_and_summaries() {
        let host = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("t"), "a\nb\nc\n").unwrap();
        std::fs::write(upper.path().join("t"), "a\nB\nc\n\x1b[2J\n").unwrap();
        std::fs::write(upper.path().join("bin"), b"\0\x01").unwrap();
        std::fs::write(
            upper.path().join("big"),
            vec![b'x'; (LARGE_BYTES + 1) as usize],
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/shadow", upper.path().join("l")).unwrap();
        let hr = HostRoot::open(host.path()).unwrap();
        let (t, u) = (dirfd(host.path()), dirfd(upper.path()));
        let sides = Sides {
            host: &hr,
            target: t.as_fd(),
            upper: u.as_fd(),
            run_started_at_unix_ms: 0,
            ledger: None,
        };
        use ChangeEntryType as T;
        let mut m = change(
            "t",
            ChangeKind::Modified,
            Some(T::File),
            Some(T::File),
            Some(0o644),
        );
        m.recorded = sides.host.fingerprint(Path::new("t")).unwrap();
        let d = diff_change(&sides, &m).unwrap();
        let text = d.unified.unwrap();
        assert!(text.contains("--- a/t\n+++ b/t\n"), "{text}");
        assert!(text.contains("-b\n+B\n"), "{text}");
        assert!(
            text.contains("+\\u{1b}[2J"),
            "escape not neutralized: {text}"
        );
        assert_eq!((d.insertions, d.deletions), (2, 1));
        // The host file is newer than the run's "start" (0): the conflict is shown.
        assert!(d.conflict.is_some());

        let d = diff_change(
            &sides,
            &change("bin", ChangeKind::Added, None, Some(T::File), Some(0o644)),
        )
        .unwrap();
        assert!(d.binary && d.summary.unwrap().contains("new binary file: 2 bytes"));
        assert!(d.conflict.is_none());
        let d = diff_change(
            &sides,
            &change("big", ChangeKind::Added, None, Some(T::File), Some(0o644)),
        )
        .unwrap();
        assert!(d.summary.unwrap().contains("large file"));
        let d = diff_change(
            &sides,
            &change("l", ChangeKind::Added, None, Some(T::Symlink), None),
        )
        .unwrap();
        assert_eq!(d.summary.as_deref(), Some("new symlink → /etc/shadow"));
        let mut del = change("t", ChangeKind::Deleted, Some(T::File), None, None);
        del.recorded.host = HostState::File {
            size: 6,
            mode: 0o644,
            blake3: None,
        };
        let d = diff_change(&sides, &del).unwrap();
        assert_eq!(d.summary.as_deref(), Some("deleted file (6 bytes)"));
    }

    #[test]
    fn mode_only() {
        let host = tempfile::tempdir().unwrap();
        let upper = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("s"), "x\n").unwrap();
        std::fs::write(upper.path().join("s"), "x\n").unwrap();
        let hr = HostRoot::open(host.path()).unwrap();
        let (t, u) = (dirfd(host.path()), dirfd(upper.path()));
        let sides = Sides {
            host: &hr,
            target: t.as_fd(),
            upper: u.as_fd(),
            run_started_at_unix_ms: u64::MAX / 2,
            ledger: None,
        };
        let mode = std::fs::metadata(host.path().join("s")).unwrap();
        let was = std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o7777;
        let c = change(
            "s",
            ChangeKind::Modified,
            Some(ChangeEntryType::File),
            Some(ChangeEntryType::File),
            Some(0o4755),
        );
        let d = diff_change(&sides, &c).unwrap();
        assert!(d.unified.is_none());
        let s = d.summary.unwrap();
        assert!(s.contains(&format!("mode {was:04o} → 4755")), "{s}");
        assert!(s.contains("setuid"), "{s}");
    }

    #[test]
    fn sanitizing() {
        assert_eq!(sanitize("a\tb"), "a\tb");
        assert_eq!(sanitize("\x1b]0;x\x07"), "\\u{1b}]0;x\\u{7}");
        assert_eq!(sanitize("x\u{202e}y"), "x\\u{202e}y");
    }
}
