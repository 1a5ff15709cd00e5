//! `cofferdam review JOB --comment TEXT --path P [--hunk ID --line N]`: keep a review comment
//! on a change of the job, and the comments' part of `status --review` (text and JSON).
//! The store and its bounds are `cofferdam_stage::comments`'; this module resolves the
//! path to one of the job's changes, takes the job's lock for the write and renders. It
//! may not touch the stage, the ledger or the workdir.

use crate::cli::ReviewArgs;
use crate::cmd::jobrules::{job_failure, lock, normalize_paths};
use crate::exit::{Failure, OK};
use crate::style::Style;
use cofferdam_record::shown::{escape, escape_text};
use cofferdam_stage::comments::{self, Comment, CommentError};
use cofferdam_stage::job::Job;
use cofferdam_stage::review::change_path_bytes;
use serde_json::json;
use std::fmt::Write as _;

fn failure(e: CommentError) -> Failure {
    match e {
        CommentError::Refused(_) => Failure::usage(e),
        CommentError::Io { .. } | CommentError::Invalid { .. } => Failure::setup(e),
    }
}

/// `cofferdam review JOB --comment TEXT …`.
pub fn comment(a: &ReviewArgs, json: bool) -> Result<u8, Failure> {
    let text = a.comment.clone().unwrap_or_default();
    let (env, job) = crate::cmd::jobref::open(&a.job)?;
    let state = job.state().map_err(job_failure)?;
    let wanted = match (&a.path, &a.path_bytes) {
        (Some(p), _) => normalize_paths(std::slice::from_ref(p), &state.workdir, &env.places.cwd)?,
        (None, Some(hex)) => {
            crate::cmd::drop::hex_paths(std::slice::from_ref(hex), &state.workdir)?
        }
        (None, None) => {
            return Err(Failure::usage(
                "a comment is on a file: name it with --path PATH (or --path-bytes HEX)",
            ));
        }
    };
    let wanted = wanted.into_iter().next().unwrap_or_default();
    let bundle = std::fs::read(job.bundle_path())
        .ok()
        .and_then(|b| cofferdam_record::read_bundle(&b).ok())
        .ok_or_else(|| {
            Failure::usage(format!(
                "job {} has no sealed stage to comment on (no Run Bundle yet)",
                job.id()
            ))
        })?;
    let change = bundle
        .filesystem
        .as_ref()
        .and_then(|f| f.changes.iter().find(|c| change_path_bytes(c) == wanted))
        .ok_or_else(|| {
            Failure::usage(format!(
                "{} is not a change of job {}; comments are on the paths `cofferdam diff {} \
                 --stat` lists",
                cofferdam_stage::seal::display_path(&wanted).0,
                job.id(),
                job.id()
            ))
        })?;
    if let Some(h) = &a.hunk {
        check_hunk(&job, &state.workdir, &wanted, h, a.line)?;
    }
    let c = Comment {
        path: change.path.clone(),
        path_bytes: change.path_bytes.clone(),
        hunk: a.hunk.clone(),
        line: a.line,
        text,
        at_unix_ms: crate::cmd::jobrules::now_ms(),
    };
    let _lock = lock(&job, "comment on")?;
    let count = comments::add(job.dir(), c.clone(), cofferdam_stage::Durability::Durable)
        .map_err(failure)?;
    if json {
        crate::print_json(&json!({"job": job.id(), "comment": c, "comments": count}))?;
    } else {
        crate::write_stdout(
            format!(
                "comment {count} kept on {}{} of job {}\n",
                escape(&c.path),
                place(&c),
                job.id()
            )
            .as_bytes(),
        )?;
    }
    Ok(OK)
}

/// Whether `hunk` is one of the remaining hunks `diff --json` lists for the change at
/// `path`, and `line`, if given, a line of the staged file that hunk shows.
fn check_hunk(
    job: &Job,
    workdir: &std::path::Path,
    path: &[u8],
    hunk: &str,
    line: Option<u64>,
) -> Result<(), Failure> {
    let stage = cofferdam_stage::review::Stage::load(job).map_err(Failure::setup)?;
    let shown = cofferdam_stage::seal::display_path(path).0;
    let listed = stage
        .changes
        .iter()
        .position(|c| c.path == path)
        .and_then(|i| crate::cmd::apply_hunks::hunks_json(job, &stage, workdir, i));
    let found = listed.as_ref().and_then(|v| {
        v["hunks"]
            .as_array()?
            .iter()
            .find(|h| h["id"].as_str() == Some(hunk))
            .cloned()
    });
    let Some(found) = found else {
        return Err(Failure::usage(format!(
            "{} is not a hunk of {shown} that is still staged; `cofferdam diff {} --json` \
             lists the ids",
            escape(hunk),
            job.id()
        )));
    };
    let Some(line) = line else { return Ok(()) };
    let (first, count) = new_side(found["header"].as_str().unwrap_or_default()).unwrap_or((0, 0));
    if line < first || line >= first + count {
        return Err(Failure::usage(format!(
            "line {line} is not one the hunk shows of the staged {shown} (it shows {})",
            if count == 0 {
                "none".to_owned()
            } else {
                format!("lines {first} to {}", first + count - 1)
            }
        )));
    }
    Ok(())
}

/// The staged side of a hunk header `@@ -a,b +c,d @@`: (first line, count).
fn new_side(header: &str) -> Option<(u64, u64)> {
    let plus = header
        .split_whitespace()
        .find_map(|w| w.strip_prefix('+'))?;
    let (start, count) = match plus.split_once(',') {
        Some((s, c)) => (s.parse().ok()?, c.parse().ok()?),
        None => (plus.parse().ok()?, 1),
    };
    Some((start, count))
}

/// ` (hunk H, line N)` or nothing.
fn place(c: &Comment) -> String {
    match (&c.hunk, c.line) {
        (Some(h), Some(l)) => format!(" (hunk {}, line {l})", escape(h)),
        (Some(h), None) => format!(" (hunk {})", escape(h)),
        (None, Some(l)) => format!(" (line {l})"),
        (None, None) => String::new(),
    }
}

/// The job's comments for the review JSON (`review_comments`); an unreadable file reads as
/// none, with a warning on stderr.
pub(crate) fn of_job(job: &Job) -> Vec<Comment> {
    comments::load(job.dir()).unwrap_or_else(|e| {
        eprintln!("cofferdam: warning: the review comments are not shown: {e}");
        Vec::new()
    })
}

/// The `comments` block of `status --review`: each comment, its place and text, escaped.
pub(crate) fn render(o: &mut String, job: &Job, s: Style) {
    let list = of_job(job);
    if list.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n{} ({})", s.heading("review comments"), list.len());
    for c in &list {
        let _ = writeln!(o, "  {}{}", escape(&c.path), s.dim(&place(c)));
        for line in escape_text(&c.text).lines() {
            let _ = writeln!(o, "    {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_staged_side_of_a_hunk_header() {
        assert_eq!(new_side("@@ -1,5 +1,6 @@"), Some((1, 6)));
        assert_eq!(new_side("@@ -3 +4 @@"), Some((4, 1)));
        assert_eq!(new_side("@@ -1,2 +0,0 @@"), Some((0, 0)));
        assert_eq!(new_side("nonsense"), None);
    }

    #[test]
    fn places_read_as_words() {
        let mut c = Comment {
            path: "f".into(),
            path_bytes: None,
            hunk: None,
            line: None,
            text: "t".into(),
            at_unix_ms: 0,
        };
        assert_eq!(place(&c), "");
        c.hunk = Some("h1".into());
        assert_eq!(place(&c), " (hunk h1)");
        c.line = Some(4);
        assert_eq!(place(&c), " (hunk h1, line 4)");
    }
}
