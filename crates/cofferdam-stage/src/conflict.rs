//! Conflict decisions: has a host path changed since the run, so that applying the staged
//! version would overwrite someone's edit? (DESIGN.md §5). Pure: the apply engine takes the
//! fingerprints and hands them here.
//!
//! Owns [`compare`] (a recorded fingerprint against the one taken now, and the ctime rule),
//! [`ConflictReason`] with its wording, which reasons `--force` may override
//! ([`ConflictReason::forceable`]), which paths a `--force` names ([`is_forced`]) and the
//! git index rule ([`git_index_taken`]). It may not open files.
//!
//! The rule: the host path must be in the state recorded at seal (type, size, content
//! hash, permission bits, link target, device number), and its ctime must not be later
//! than the run's start. The second half catches an edit made while the run was going (the
//! seal fingerprinted the edited file) and an edit reverted to the same bytes. A ctime that
//! cofferdam caused itself (recorded in the ledger) is accepted up to the recorded value.
//! When either side's hash is missing (unreadable file), size and mode decide.
//!
//! The git index rule: a repository's index (`.git/index`, a linked worktree's or a
//! submodule's) is a cache git rewrites on a mere `git status`, so a host that ran one
//! during the run would conflict with every staged commit. When the index is the only
//! conflict left in its `.git` and the stage holds a new index file, the staged index is
//! taken and the user warned: it is the one that matches the staged HEAD and refs (the
//! host's describes the tree before the staged commits, so keeping it would show those
//! commits as undone in `git status`), git refreshes its stat data on the next command,
//! and the work tree is untouched, so the only loss is what `git add` staged on the host
//! during the run, which the warning tells the user to redo. With any other conflict in
//! the same `.git` (a ref moved on the host too) the index stays a conflict.

use crate::fingerprint::{Ctime, Fingerprint, HostState};
use crate::select::is_at_or_beneath;

/// Why a path may not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConflictReason {
    /// Nothing was there at the run; now something is.
    Created {
        /// What is there now.
        now: &'static str,
    },
    /// Something was there at the run; now nothing is.
    Removed,
    /// The type differs.
    TypeChanged {
        /// Then.
        was: &'static str,
        /// Now.
        now: &'static str,
    },
    /// A file's bytes differ.
    ContentChanged {
        /// Size then.
        was_size: u64,
        /// Size now.
        now_size: u64,
    },
    /// The permission bits differ.
    ModeChanged {
        /// Then.
        was: u32,
        /// Now.
        now: u32,
    },
    /// A symlink points elsewhere.
    LinkTargetChanged,
    /// A device node's number differs.
    DeviceChanged,
    /// The same state, but the inode changed after the run started (edited during the run,
    /// or edited and changed back, or its metadata touched).
    ChangedAfterRunStart {
        /// The ctime now.
        ctime: Ctime,
        /// How long after the run's start, milliseconds.
        after_ms: u64,
    },
    /// Something beneath a directory the apply would remove changed after the run started.
    SubtreeChanged {
        /// The first such path, for display.
        path: String,
        /// How many more.
        more: usize,
    },
    /// A directory on the way is a symlink now: nothing is followed through it.
    ThroughSymlink {
        /// The directory, for display.
        at: String,
    },
    /// The parent directory is gone from the host.
    ParentMissing {
        /// The directory, for display.
        parent: String,
    },
    /// The parent is not a directory any more.
    ParentNotDirectory {
        /// The parent, for display.
        parent: String,
    },
    /// The host path cannot be inspected.
    Uninspectable {
        /// Why.
        message: String,
    },
}

impl ConflictReason {
    /// Whether `--force PATH` may override it. Safety problems (a symlink on the way, a
    /// missing or retyped parent, an unreadable path) cannot be forced.
    pub fn forceable(&self) -> bool {
        !matches!(
            self,
            ConflictReason::ThroughSymlink { .. }
                | ConflictReason::ParentMissing { .. }
                | ConflictReason::ParentNotDirectory { .. }
                | ConflictReason::Uninspectable { .. }
        )
    }

    /// A stable machine word for JSON output.
    pub fn code(&self) -> &'static str {
        match self {
            ConflictReason::Created { .. } => "created",
            ConflictReason::Removed => "removed",
            ConflictReason::TypeChanged { .. } => "type_changed",
            ConflictReason::ContentChanged { .. } => "content_changed",
            ConflictReason::ModeChanged { .. } => "mode_changed",
            ConflictReason::LinkTargetChanged => "link_target_changed",
            ConflictReason::DeviceChanged => "device_changed",
            ConflictReason::ChangedAfterRunStart { .. } => "changed_after_run_start",
            ConflictReason::SubtreeChanged { .. } => "subtree_changed",
            ConflictReason::ThroughSymlink { .. } => "through_symlink",
            ConflictReason::ParentMissing { .. } => "parent_missing",
            ConflictReason::ParentNotDirectory { .. } => "parent_not_directory",
            ConflictReason::Uninspectable { .. } => "uninspectable",
        }
    }
}

impl std::fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConflictReason::Created { now } => {
                write!(f, "a {now} was created on the host since the run")
            }
            ConflictReason::Removed => write!(f, "removed on the host since the run"),
            ConflictReason::TypeChanged { was, now } => {
                write!(f, "was a {was} at the run, is a {now} on the host now")
            }
            ConflictReason::ContentChanged { was_size, now_size } => write!(
                f,
                "content changed on the host since the run ({was_size} → {now_size} bytes)"
            ),
            ConflictReason::ModeChanged { was, now } => write!(
                f,
                "permissions changed on the host since the run ({was:04o} → {now:04o})"
            ),
            ConflictReason::LinkTargetChanged => {
                write!(f, "the symlink points elsewhere on the host since the run")
            }
            ConflictReason::DeviceChanged => {
                write!(f, "the device node changed on the host since the run")
            }
            ConflictReason::ChangedAfterRunStart { after_ms, .. } => write!(
                f,
                "changed on the host {}.{:03} s after the run started (its content or metadata \
                 was written, even if it now looks the same)",
                after_ms / 1000,
                after_ms % 1000
            ),
            ConflictReason::SubtreeChanged { path, more } => {
                write!(
                    f,
                    "the apply removes this directory, and {path} beneath it changed on the \
                     host after the run started"
                )?;
                if *more > 0 {
                    write!(f, " ({more} more)")?;
                }
                Ok(())
            }
            ConflictReason::ThroughSymlink { at } => write!(
                f,
                "{at} is a symlink on the host now; cofferdam never writes through one (restore \
                 the directory, or exclude the path)"
            ),
            ConflictReason::ParentMissing { parent } => write!(
                f,
                "its directory {parent} no longer exists on the host (recreate it, or exclude \
                 the path)"
            ),
            ConflictReason::ParentNotDirectory { parent } => write!(
                f,
                "{parent} is not a directory on the host now (exclude the path)"
            ),
            ConflictReason::Uninspectable { message } => {
                write!(f, "cannot inspect the host path: {message}")
            }
        }
    }
}

/// A word for a host state's type.
pub fn type_word(h: &HostState) -> &'static str {
    match h {
        HostState::Absent => "nothing",
        HostState::File { .. } => "file",
        HostState::Dir { .. } => "directory",
        HostState::Symlink { .. } => "symlink",
        HostState::Other { st_mode, .. } => match st_mode & 0o170_000 {
            0o010_000 => "fifo",
            0o140_000 => "socket",
            0o020_000 => "character device",
            0o060_000 => "block device",
            _ => "special file",
        },
    }
}

/// Whether two host states are the same for conflict purposes (a missing hash on either
/// side leaves size and mode to decide).
pub fn same_state(a: &HostState, b: &HostState) -> bool {
    match (a, b) {
        (
            HostState::File {
                size: s1,
                mode: m1,
                blake3: h1,
            },
            HostState::File {
                size: s2,
                mode: m2,
                blake3: h2,
            },
        ) => {
            s1 == s2
                && m1 == m2
                && match (h1, h2) {
                    (Some(x), Some(y)) => x == y,
                    _ => true,
                }
        }
        _ => a == b,
    }
}

/// Compare the fingerprint recorded at seal with the one taken now. `accepted`: a ctime
/// cofferdam itself caused on this path (from the ledger), accepted up to that value.
pub fn compare(
    recorded: &Fingerprint,
    now: &Fingerprint,
    run_started_at_unix_ms: u64,
    accepted: Option<Ctime>,
) -> Option<ConflictReason> {
    if same_state(&recorded.host, &now.host) {
        let ctime = now.ctime?;
        let ours = accepted.is_some_and(|a| ctime <= a);
        let ms = i128::from(ctime.sec) * 1000 + i128::from(ctime.nsec / 1_000_000);
        let after_ms = u64::try_from(ms - i128::from(run_started_at_unix_ms)).unwrap_or(0);
        return (ctime.is_after_unix_ms(run_started_at_unix_ms) && !ours)
            .then_some(ConflictReason::ChangedAfterRunStart { ctime, after_ms });
    }
    Some(match (&recorded.host, &now.host) {
        (HostState::Absent, h) => ConflictReason::Created { now: type_word(h) },
        (_, HostState::Absent) => ConflictReason::Removed,
        (
            HostState::File {
                size: s1, mode: m1, ..
            },
            HostState::File {
                size: s2, mode: m2, ..
            },
        ) => {
            let same_bytes = same_state(
                &recorded.host,
                &HostState::File {
                    size: *s2,
                    mode: *m1,
                    blake3: match &now.host {
                        HostState::File { blake3, .. } => blake3.clone(),
                        _ => None,
                    },
                },
            );
            if same_bytes {
                ConflictReason::ModeChanged { was: *m1, now: *m2 }
            } else {
                ConflictReason::ContentChanged {
                    was_size: *s1,
                    now_size: *s2,
                }
            }
        }
        (HostState::Dir { mode: m1 }, HostState::Dir { mode: m2 }) => {
            ConflictReason::ModeChanged { was: *m1, now: *m2 }
        }
        (HostState::Symlink { .. }, HostState::Symlink { .. }) => ConflictReason::LinkTargetChanged,
        (
            HostState::Other {
                st_mode: a,
                rdev: r1,
            },
            HostState::Other {
                st_mode: b,
                rdev: r2,
            },
        ) if a & 0o170_000 == b & 0o170_000 => {
            if r1 == r2 {
                ConflictReason::ModeChanged {
                    was: a & 0o7777,
                    now: b & 0o7777,
                }
            } else {
                ConflictReason::DeviceChanged
            }
        }
        (a, b) => ConflictReason::TypeChanged {
            was: type_word(a),
            now: type_word(b),
        },
    })
}

/// Whether a `--force` argument names `path` (the path itself or a directory above it).
pub fn is_forced(path: &[u8], force: &[Vec<u8>]) -> bool {
    force
        .iter()
        .any(|f| f.is_empty() || is_at_or_beneath(path, f))
}

/// The `.git` directory `path` is in: the path up to its first `.git` component.
pub fn git_dir_of(path: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    for part in path.split(|&b| b == b'/') {
        at += part.len();
        if part == b".git" {
            return path.get(..at);
        }
        at += 1;
    }
    None
}

/// Whether `path` is a git index: `.git/index` at any depth, a linked worktree's
/// (`.git/worktrees/NAME/index`) or a submodule's (`.git/modules/…/index`).
pub fn is_git_index(path: &[u8]) -> bool {
    let Some(dir) = git_dir_of(path) else {
        return false;
    };
    let Some(rest) = path.get(dir.len() + 1..) else {
        return false;
    };
    let parts: Vec<&[u8]> = rest.split(|&b| b == b'/').collect();
    match parts.as_slice() {
        [b"index"] => true,
        [b"worktrees", name, b"index"] => !name.is_empty(),
        [b"modules", middle @ .., b"index"] => {
            !middle.is_empty()
                && middle.iter().all(|p| {
                    !p.is_empty()
                        && !matches!(*p, b"objects" | b"refs" | b"logs" | b"hooks" | b"info")
                })
        }
        _ => false,
    }
}

/// One conflict left in a batch, as the git index rule sees it.
#[derive(Debug, Clone, Copy)]
pub struct Left<'a> {
    /// The path.
    pub path: &'a [u8],
    /// Why it conflicts.
    pub reason: &'a ConflictReason,
    /// Whether the stage holds a regular file there (added or modified).
    pub staged_file: bool,
}

/// For each conflict left in a batch (after `--force`), whether it is a git index that is
/// taken from the stage instead (the module docs give the rule and why): the path is a git
/// index, the stage holds a file there, the host holds a file or nothing there (its bytes,
/// mode or ctime changed), and no other conflict is left in the same `.git`.
pub fn git_index_taken(left: &[Left<'_>]) -> Vec<bool> {
    let eligible = |c: &Left<'_>| {
        c.staged_file
            && is_git_index(c.path)
            && matches!(
                c.reason,
                ConflictReason::Created { now: "file" }
                    | ConflictReason::Removed
                    | ConflictReason::ContentChanged { .. }
                    | ConflictReason::ModeChanged { .. }
                    | ConflictReason::ChangedAfterRunStart { .. }
            )
    };
    let blocked: Vec<&[u8]> = left
        .iter()
        .filter(|c| !eligible(c))
        .filter_map(|c| git_dir_of(c.path))
        .collect();
    left.iter()
        .map(|c| eligible(c) && git_dir_of(c.path).is_some_and(|d| !blocked.contains(&d)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: u64 = 10_000; // 10 s
    fn old() -> Ctime {
        Ctime { sec: 9, nsec: 0 }
    }
    fn new() -> Ctime {
        Ctime { sec: 11, nsec: 0 }
    }
    fn file(size: u64, mode: u32, hash: Option<&str>, ctime: Ctime) -> Fingerprint {
        Fingerprint {
            host: HostState::File {
                size,
                mode,
                blake3: hash.map(str::to_owned),
            },
            ctime: Some(ctime),
        }
    }

    #[test]
    fn unchanged_and_old_is_no_conflict() {
        let f = file(3, 0o644, Some("h"), old());
        assert_eq!(compare(&f, &f, START, None), None);
        assert_eq!(
            compare(&Fingerprint::ABSENT, &Fingerprint::ABSENT, START, None),
            None
        );
    }

    #[test]
    fn same_state_but_touched_after_start() {
        let rec = file(3, 0o644, Some("h"), old());
        let now = file(3, 0o644, Some("h"), new());
        assert_eq!(
            compare(&rec, &now, START, None),
            Some(ConflictReason::ChangedAfterRunStart {
                ctime: new(),
                after_ms: 1000
            })
        );
        // A ctime cofferdam caused is accepted, but not a later one.
        assert_eq!(compare(&rec, &now, START, Some(new())), None);
        assert!(compare(&rec, &now, START, Some(Ctime { sec: 10, nsec: 5 })).is_some());
        // An edit during the run: the seal saw it already, the ctime gives it away.
        assert!(compare(&now, &now, START, None).is_some());
    }

    #[test]
    fn state_differences_name_the_reason() {
        let rec = file(3, 0o644, Some("h"), old());
        assert_eq!(
            compare(&rec, &file(4, 0o644, Some("g"), new()), START, None),
            Some(ConflictReason::ContentChanged {
                was_size: 3,
                now_size: 4
            })
        );
        assert_eq!(
            compare(&rec, &file(3, 0o644, Some("g"), old()), START, None),
            Some(ConflictReason::ContentChanged {
                was_size: 3,
                now_size: 3
            })
        );
        assert_eq!(
            compare(&rec, &file(3, 0o755, Some("h"), new()), START, None),
            Some(ConflictReason::ModeChanged {
                was: 0o644,
                now: 0o755
            })
        );
        assert_eq!(
            compare(&rec, &Fingerprint::ABSENT, START, None),
            Some(ConflictReason::Removed)
        );
        assert_eq!(
            compare(&Fingerprint::ABSENT, &rec, START, None),
            Some(ConflictReason::Created { now: "file" })
        );
        let dir = Fingerprint {
            host: HostState::Dir { mode: 0o755 },
            ctime: Some(new()),
        };
        assert_eq!(
            compare(&rec, &dir, START, None),
            Some(ConflictReason::TypeChanged {
                was: "file",
                now: "directory"
            })
        );
        let link = |t: &[u8]| Fingerprint {
            host: HostState::Symlink {
                target_bytes: t.to_vec(),
            },
            ctime: Some(old()),
        };
        assert_eq!(
            compare(&link(b"a"), &link(b"b"), START, None),
            Some(ConflictReason::LinkTargetChanged)
        );
        let fifo = |mode: u32| Fingerprint {
            host: HostState::Other {
                st_mode: 0o010_000 | mode,
                rdev: 0,
            },
            ctime: Some(old()),
        };
        assert_eq!(
            compare(&fifo(0o644), &fifo(0o600), START, None),
            Some(ConflictReason::ModeChanged {
                was: 0o644,
                now: 0o600
            })
        );
    }

    #[test]
    fn unreadable_files_compare_on_size_and_mode() {
        let rec = file(3, 0o600, None, old());
        assert_eq!(
            compare(&rec, &file(3, 0o600, Some("h"), old()), START, None),
            None
        );
        assert!(compare(&rec, &file(4, 0o600, None, old()), START, None).is_some());
    }

    #[test]
    fn forcing() {
        let force = vec![b"src".to_vec()];
        assert!(is_forced(b"src", &force));
        assert!(is_forced(b"src/a", &force));
        assert!(!is_forced(b"srcx", &force));
        assert!(!is_forced(b"other", &force));
        assert!(ConflictReason::Removed.forceable());
        assert!(!ConflictReason::ThroughSymlink { at: "d".into() }.forceable());
        assert!(
            ConflictReason::ContentChanged {
                was_size: 1,
                now_size: 2
            }
            .to_string()
            .contains("1 → 2 bytes")
        );
    }

    #[test]
    fn git_index_paths() {
        for yes in [
            &b".git/index"[..],
            b"sub/.git/index",
            b".git/worktrees/wt/index",
            b".git/modules/lib/index",
            b".git/modules/a/b/index",
        ] {
            assert!(is_git_index(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"index"[..],
            b".git",
            b".git/index.lock",
            b".git/refs/heads/index",
            b".git/objects/info/index",
            b".git/modules/index",
            b".git/modules/a/refs/index",
            b".git/worktrees/index",
            b"src/index",
            b".github/index",
        ] {
            assert!(!is_git_index(no), "{}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn a_git_index_is_taken_only_when_it_is_the_last_conflict_of_its_git_dir() {
        let changed = ConflictReason::ContentChanged {
            was_size: 1,
            now_size: 2,
        };
        let late = ConflictReason::ChangedAfterRunStart {
            ctime: new(),
            after_ms: 5,
        };
        fn left<'a>(path: &'a [u8], reason: &'a ConflictReason, staged_file: bool) -> Left<'a> {
            Left {
                path,
                reason,
                staged_file,
            }
        }
        let (changed, late) = (&changed, &late);
        // Alone (or beside a work-tree conflict, or another repository's): taken.
        assert_eq!(
            git_index_taken(&[left(b".git/index", changed, true)]),
            [true]
        );
        assert_eq!(
            git_index_taken(&[
                left(b".git/index", late, true),
                left(b"src/a.rs", changed, true),
                left(b"vendor/x/.git/HEAD", changed, true),
            ]),
            [true, false, false]
        );
        // Another conflict in the same .git keeps it a conflict.
        assert_eq!(
            git_index_taken(&[
                left(b".git/index", changed, true),
                left(b".git/refs/heads/main", changed, true),
            ]),
            [false, false]
        );
        // The stage deletes the index, or the host made it something else: a conflict.
        assert_eq!(
            git_index_taken(&[left(b".git/index", changed, false)]),
            [false]
        );
        let dir = ConflictReason::TypeChanged {
            was: "file",
            now: "directory",
        };
        assert_eq!(git_index_taken(&[left(b".git/index", &dir, true)]), [false]);
        let symlink = ConflictReason::ThroughSymlink { at: ".git".into() };
        assert_eq!(
            git_index_taken(&[left(b".git/index", &symlink, true)]),
            [false]
        );
        // Not an index: never.
        assert_eq!(
            git_index_taken(&[left(b".git/ORIG_HEAD", changed, true)]),
            [false]
        );
    }
}
