//! Review comments (issue 22): what a reviewer wrote on a staged file, or on one line of a
//! hunk, kept with the job so `status --review`, its JSON and the review page show it.
//!
//! Owns one file of a job, `review-comments.json` beside the apply ledger: [`load`] reads
//! it (absent: no comments), [`add`] checks one new comment against the bounds below and
//! rewrites the file atomically ([`crate::write_atomic_with`]). The caller holds the job's
//! lock, so two writers never interleave. It reads and writes nothing else: comments are
//! notes for the people reviewing, not part of the stage, the ledger or the Run Bundle
//! (the bundle is written once, at seal, and has no place for them).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file of a job's comments.
pub const FILE_NAME: &str = "review-comments.json";
/// The longest comment text, in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// The most comments a job keeps.
pub const MAX_COMMENTS: usize = 256;
/// The largest comments file read (the bounds above keep a valid one below it: a comment
/// takes at most about 40 KiB of JSON with the longest path).
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// The longest path a comment names, in bytes (Linux's `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;
/// The longest hunk id taken (`diff --json`'s are 64 hex digits and a prefix).
const MAX_HUNK_ID: usize = 128;

/// One comment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// The change's path for display (as `diff --json` shows it).
    pub path: String,
    /// The path's bytes, when `path` is not lossless (as in the bundle's changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// The hunk it is on (`diff --json`'s hunk id), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hunk: Option<String>,
    /// The line it is on (of the staged file, 1-based), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// What the reviewer wrote.
    pub text: String,
    /// When (Unix ms).
    pub at_unix_ms: u64,
}

/// The file: a version and the comments, oldest first.
#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    version: u32,
    comments: Vec<Comment>,
}

const VERSION: u32 = 1;

/// Why comments could not be read or one could not be added.
#[derive(Debug, thiserror::Error)]
pub enum CommentError {
    /// Reading or writing the file failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The comments file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file is not what [`add`] writes.
    #[error("{}: not a comments file cofferdam wrote ({why})", .path.display())]
    Invalid {
        /// The comments file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The comment breaks a bound.
    #[error("{0}")]
    Refused(String),
}

/// The comments file of the job at `job_dir`.
pub fn path(job_dir: &Path) -> PathBuf {
    job_dir.join(FILE_NAME)
}

/// The comments of the job at `job_dir`, oldest first (none when there is no file).
pub fn load(job_dir: &Path) -> Result<Vec<Comment>, CommentError> {
    let p = path(job_dir);
    let io_err = |source| CommentError::Io {
        path: p.clone(),
        source,
    };
    let meta = match std::fs::symlink_metadata(&p) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(e)),
    };
    let invalid = |why: String| CommentError::Invalid {
        path: p.clone(),
        why,
    };
    if !meta.is_file() {
        return Err(invalid("not a regular file".into()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(invalid(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    let bytes = std::fs::read(&p).map_err(io_err)?;
    let file: File = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
    if file.version != VERSION {
        return Err(invalid(format!("version {}", file.version)));
    }
    Ok(file.comments)
}

/// Why `c` cannot be kept, if it cannot.
pub fn check(c: &Comment) -> Result<(), CommentError> {
    let refuse = |s: String| Err(CommentError::Refused(s));
    if c.text.trim().is_empty() {
        return refuse("the comment is empty".into());
    }
    if c.text.len() > MAX_TEXT_BYTES {
        return refuse(format!(
            "the comment is {} bytes; at most {MAX_TEXT_BYTES} are kept",
            c.text.len()
        ));
    }
    if c.text
        .chars()
        .any(|ch| ch.is_control() && ch != '\n' && ch != '\t')
    {
        return refuse(
            "a comment can hold newlines and tabs but no other control characters".into(),
        );
    }
    if c.path.is_empty() {
        return refuse("a comment is on a file: name it with --path".into());
    }
    if c.path.contains('\0')
        || c.path.len() > MAX_PATH_BYTES
        || c.path_bytes
            .as_ref()
            .is_some_and(|b| b.len() > MAX_PATH_BYTES)
    {
        return refuse("the path is not one a change can have".into());
    }
    if let Some(h) = &c.hunk
        && (h.is_empty()
            || h.len() > MAX_HUNK_ID
            || h.starts_with('-')
            || !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.')))
    {
        return refuse(format!(
            "{h:?} is not a hunk id as `cofferdam diff --json` lists them"
        ));
    }
    if c.line == Some(0) {
        return refuse("lines are numbered from 1".into());
    }
    Ok(())
}

/// Add `c` to the comments of the job at `job_dir` (the caller holds the job's lock).
pub fn add(
    job_dir: &Path,
    c: Comment,
    durability: crate::Durability,
) -> Result<usize, CommentError> {
    check(&c)?;
    let mut comments = load(job_dir)?;
    if comments.len() >= MAX_COMMENTS {
        return Err(CommentError::Refused(format!(
            "this job already has {MAX_COMMENTS} comments, the most one keeps"
        )));
    }
    comments.push(c);
    let file = File {
        version: VERSION,
        comments,
    };
    let p = path(job_dir);
    let text = serde_json::to_vec_pretty(&file).map_err(|e| CommentError::Io {
        path: p.clone(),
        source: io::Error::other(e),
    })?;
    crate::write_atomic_with(&p, &text, 0o600, durability)
        .map_err(|source| CommentError::Io { path: p, source })?;
    Ok(file.comments.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(text: &str) -> Comment {
        Comment {
            path: "f.txt".into(),
            path_bytes: None,
            hunk: None,
            line: None,
            text: text.into(),
            at_unix_ms: 1,
        }
    }

    #[test]
    fn comments_are_kept_in_order_and_read_back() {
        let job = tempfile::tempdir().unwrap();
        assert_eq!(load(job.path()).unwrap(), []);
        add(job.path(), c("first"), crate::Durability::Volatile).unwrap();
        let mut second = c("<b>second</b>");
        second.hunk = Some("h-0123".into());
        second.line = Some(3);
        second.path_bytes = Some(vec![0xff, b'f']);
        assert_eq!(
            add(job.path(), second.clone(), crate::Durability::Volatile).unwrap(),
            2
        );
        assert_eq!(load(job.path()).unwrap(), [c("first"), second]);
        let raw = std::fs::read_to_string(path(job.path())).unwrap();
        assert!(!raw.contains("\"line\": null"), "{raw}");
    }

    #[test]
    fn bounds_are_refused_and_nothing_is_written() {
        let job = tempfile::tempdir().unwrap();
        let v = crate::Durability::Volatile;
        for bad in [
            c(""),
            c("  \n"),
            c(&"x".repeat(MAX_TEXT_BYTES + 1)),
            c("a\0b"),
            c("bell\u{7}"),
            c("esc\u{1b}[2J"),
            Comment {
                path: String::new(),
                ..c("t")
            },
            Comment {
                hunk: Some("--force".into()),
                ..c("t")
            },
            Comment {
                hunk: Some("a b".into()),
                ..c("t")
            },
            Comment {
                line: Some(0),
                ..c("t")
            },
        ] {
            assert!(
                matches!(
                    add(job.path(), bad.clone(), v),
                    Err(CommentError::Refused(_))
                ),
                "{bad:?}"
            );
        }
        assert!(!path(job.path()).exists());
        add(job.path(), c(&"x".repeat(MAX_TEXT_BYTES)), v).unwrap();
        for i in 1..MAX_COMMENTS {
            add(job.path(), c(&format!("n{i}")), v).unwrap();
        }
        assert!(matches!(
            add(job.path(), c("one more"), v),
            Err(CommentError::Refused(_))
        ));
        assert_eq!(load(job.path()).unwrap().len(), MAX_COMMENTS);
        assert!(std::fs::metadata(path(job.path())).unwrap().len() < MAX_FILE_BYTES);
    }

    #[test]
    fn a_foreign_file_is_an_error_not_a_panic() {
        let job = tempfile::tempdir().unwrap();
        std::fs::write(path(job.path()), b"[1,2").unwrap();
        assert!(matches!(
            load(job.path()),
            Err(CommentError::Invalid { .. })
        ));
        std::fs::write(path(job.path()), br#"{"version":9,"comments":[]}"#).unwrap();
        assert!(matches!(
            load(job.path()),
            Err(CommentError::Invalid { .. })
        ));
    }
}
