//! The texts a hunk apply or a merge of one staged change works on (issue 22).
//!
//! Owns [`FileHunks`] and [`file_hunks`]: for a modified or added text file, its base (the
//! host file as the seal found it: [`crate::base`], or the host file now when that is
//! still the sealed one, or nothing for an added file), the staged text, the hunks between
//! them ([`crate::hunk`]) and which of those were applied already (the ledger's
//! `partial`), and [`merge_inputs`] for `apply --merge`. It reads the stage, the host file
//! and the job's bases beneath their roots without following symlinks; it writes nothing.
//! The CLI's `diff --json`, `apply --hunks`/`--interactive` and the review page use it.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use cofferdam_record::bundle::{ChangeEntryType, ChangeKind};

use crate::diff::{Content, is_binary, read_file};
use crate::fingerprint::HostState;
use crate::hunk::{Hunk, apply_hunks, hunks};
use crate::ledger::{Ledger, PartialHunks};
use crate::review::StagedChange;

/// The texts of a change cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TextsError {
    /// Reading the staged or host file failed.
    #[error("cannot read {which} {path}: {source}")]
    Read {
        /// `the staged` or `the host's`.
        which: &'static str,
        /// The change, for display.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A partly applied file's base is gone.
    #[error(
        "{path}: some of its hunks were applied, but the job's copy of the file as sealed \
         (bases/{hash}) is missing or damaged; apply the rest whole with `--path`, or drop \
         the job"
    )]
    BaseLost {
        /// The change, for display.
        path: String,
        /// The base's hash.
        hash: String,
    },
}

/// A text file's hunks (see the module docs).
#[derive(Debug, Clone)]
pub struct FileHunks {
    /// The text the hunks apply to: the host file as sealed (empty for an added file).
    pub base: Vec<u8>,
    /// Its BLAKE3 (what `bases/` names it by).
    pub base_blake3: String,
    /// Whether `base` came from the host file now, not from `bases/` (a hunk apply keeps
    /// it there before writing).
    pub base_from_host: bool,
    /// The staged text.
    pub staged: Vec<u8>,
    /// Every hunk from `base` to `staged`, in order.
    pub hunks: Vec<Hunk>,
    /// The ids of those already applied.
    pub applied: BTreeSet<String>,
}

impl FileHunks {
    /// The hunks not applied yet.
    pub fn remaining(&self) -> impl Iterator<Item = &Hunk> {
        self.hunks.iter().filter(|h| !self.applied.contains(&h.id))
    }

    /// What to write for `chosen` more hunks: `None` when that completes the file (a
    /// whole-file apply), else the content and the ledger's record of it.
    pub fn with(&self, chosen: &BTreeSet<String>) -> Option<(Vec<u8>, PartialHunks)> {
        let all: BTreeSet<String> = self.applied.union(chosen).cloned().collect();
        if self.hunks.iter().all(|h| all.contains(&h.id)) {
            return None;
        }
        let set: BTreeSet<&str> = all.iter().map(String::as_str).collect();
        let bytes = apply_hunks(&self.base, &self.staged, &self.hunks, &set);
        Some((
            bytes,
            PartialHunks {
                base_blake3: self.base_blake3.clone(),
                hunks: all,
            },
        ))
    }

    /// The host text as the applied hunks left it: the base with them applied.
    pub fn current(&self) -> Vec<u8> {
        let set: BTreeSet<&str> = self.applied.iter().map(String::as_str).collect();
        apply_hunks(&self.base, &self.staged, &self.hunks, &set)
    }
}

/// The error of reading `which` side of `c`.
fn read_err<'a>(which: &'static str, c: &'a StagedChange) -> impl Fn(io::Error) -> TextsError + 'a {
    move |source| TextsError::Read {
        which,
        path: c.display.clone(),
        source,
    }
}

/// The content hash the seal recorded for the host file of `c`.
fn sealed_hash(c: &StagedChange) -> Option<&str> {
    match &c.recorded.host {
        HostState::File {
            blake3: Some(h), ..
        } => Some(h),
        _ => None,
    }
}

fn text(root: BorrowedFd<'_>, path: &[u8]) -> io::Result<Option<Vec<u8>>> {
    match read_file(root, path)? {
        Content::Bytes(b) if !is_binary(&b) => Ok(Some(b)),
        _ => Ok(None),
    }
}

/// Whether a change can have hunks: a modified file or an added one, both text.
pub fn has_text(c: &StagedChange) -> bool {
    c.new_type == Some(ChangeEntryType::File)
        && match c.kind {
            ChangeKind::Modified => c.old_type == Some(ChangeEntryType::File),
            ChangeKind::Added => true,
            _ => false,
        }
}

/// The hunks of change `c` (see the module docs); `None` when it is not a text change
/// (binary, over 1 MiB, not a file, or a base that cannot be had because the host file
/// changed since the seal and none was kept).
pub fn file_hunks(
    job_dir: &Path,
    target: BorrowedFd<'_>,
    upper: BorrowedFd<'_>,
    ledger: &Ledger,
    c: &StagedChange,
) -> Result<Option<FileHunks>, TextsError> {
    if !has_text(c) {
        return Ok(None);
    }
    let Some(staged) = text(upper, &c.path).map_err(read_err("the staged", c))? else {
        return Ok(None);
    };
    let partial = ledger.partial(&c.path);
    let (base, from_host) = if c.kind == ChangeKind::Added {
        (Vec::new(), false)
    } else if let Some(p) = partial {
        match crate::base::load(job_dir, &p.hunks.base_blake3) {
            Some(b) => (b, false),
            None => {
                return Err(TextsError::BaseLost {
                    path: c.display.clone(),
                    hash: p.hunks.base_blake3.clone(),
                });
            }
        }
    } else {
        let Some(sealed) = sealed_hash(c) else {
            return Ok(None);
        };
        match crate::base::load(job_dir, sealed) {
            Some(b) => (b, false),
            None => {
                let now = match text(target, &c.path) {
                    Ok(Some(b)) => b,
                    Ok(None) => return Ok(None),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(read_err("the host's", c)(e)),
                };
                if blake3::hash(&now).to_hex().as_str() != sealed {
                    return Ok(None);
                }
                (now, true)
            }
        }
    };
    let hunks = hunks(&c.path, &base, &staged);
    Ok(Some(FileHunks {
        base_blake3: blake3::hash(&base).to_hex().to_string(),
        base,
        base_from_host: from_host,
        staged,
        hunks,
        applied: partial.map(|p| p.hunks.hunks.clone()).unwrap_or_default(),
    }))
}

/// Why a change cannot be merged, or its three texts.
#[derive(Debug, Clone)]
pub enum MergeInputs {
    /// Base, ours (host now) and theirs (staged), and the host state ours was read in.
    Texts {
        /// The host file at the seal (with any applied hunks).
        base: Vec<u8>,
        /// The host file now.
        ours: Vec<u8>,
        /// The staged file.
        theirs: Vec<u8>,
    },
    /// Not mergeable, and why (for the refusal).
    Not(&'static str),
}

/// The texts of a three-way merge of change `c`: base = the host file as sealed (with the
/// hunks applied since), ours = the host file now, theirs = the staged file.
pub fn merge_inputs(
    job_dir: &Path,
    target: BorrowedFd<'_>,
    upper: BorrowedFd<'_>,
    ledger: &Ledger,
    c: &StagedChange,
) -> Result<MergeInputs, TextsError> {
    if c.kind != ChangeKind::Modified
        || c.old_type != Some(ChangeEntryType::File)
        || c.new_type != Some(ChangeEntryType::File)
    {
        return Ok(MergeInputs::Not("only a modified text file can be merged"));
    }
    let Some(theirs) = text(upper, &c.path).map_err(read_err("the staged", c))? else {
        return Ok(MergeInputs::Not("the staged file is binary or over 1 MiB"));
    };
    let ours = match text(target, &c.path) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(MergeInputs::Not("the host file is binary or over 1 MiB")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(MergeInputs::Not("the host file was removed"));
        }
        Err(e) => return Err(read_err("the host's", c)(e)),
    };
    let base = match ledger.partial(&c.path) {
        Some(p) => {
            let Some(b) = crate::base::load(job_dir, &p.hunks.base_blake3) else {
                return Ok(MergeInputs::Not(
                    "the job's copy of the file as sealed is lost",
                ));
            };
            let all = hunks(&c.path, &b, &theirs);
            let set: BTreeSet<&str> = p.hunks.hunks.iter().map(String::as_str).collect();
            apply_hunks(&b, &theirs, &all, &set)
        }
        None => {
            let Some(sealed) = sealed_hash(c) else {
                return Ok(MergeInputs::Not("the seal could not read the host file"));
            };
            let Some(b) = crate::base::load(job_dir, sealed) else {
                return Ok(MergeInputs::Not(
                    "no copy of the file as sealed was kept (binary, over 1 MiB, or past \
                     the job's 64 MiB of bases)",
                ));
            };
            b
        }
    };
    Ok(MergeInputs::Texts { base, ours, theirs })
}
