//! What the review page reads and does, by running this binary's own subcommands on the
//! job: `status --review` (JSON and text) and `diff --json` for what is shown, `apply` and
//! `drop` for the buttons. So the page shows exactly what the command line shows and applies
//! through the same engine (conflict check, symlink safety, ledger, trace events), and an
//! apply the page starts is crash-safe the same way. It may not read or write the stage
//! itself.

use crate::exit::Failure;
use cofferdam_stage::job::Job;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

/// The job the server reviews.
#[derive(Debug)]
pub struct Target {
    /// This binary.
    exe: PathBuf,
    /// The job's directory (the address every command is given: no `last` that could move).
    job_dir: PathBuf,
    /// The job's id.
    job_id: String,
    /// The workdir it applies to (the commands run there, so `--path` is relative to it).
    workdir: PathBuf,
}

/// What the page asks to apply or drop: whole paths (relative to the workdir), paths by
/// their bytes (for names that are not UTF-8: hex of `diff --json`'s `path_bytes`), and
/// hunk ids as `diff --json` lists them (apply only).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// Whole changes, by path.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Whole changes, by the hex of their path's bytes.
    #[serde(default)]
    pub path_bytes: Vec<String>,
    /// Single hunks, by id.
    #[serde(default)]
    pub hunks: Vec<String>,
}

impl Selection {
    /// Why the paths of this selection cannot be passed on, if they cannot.
    fn bad_paths(&self) -> Option<String> {
        if self.paths.iter().any(|p| p.is_empty() || p.contains('\0')) {
            return Some("an empty path or one with a NUL byte was selected".into());
        }
        let hex = |h: &String| {
            !h.is_empty() && h.len().is_multiple_of(2) && h.bytes().all(|b| b.is_ascii_hexdigit())
        };
        if let Some(bad) = self.path_bytes.iter().find(|h| !hex(h)) {
            return Some(format!("{bad:?} is not the hex of a path's bytes"));
        }
        None
    }

    /// `--path P` and `--path-bytes HEX` for each selected path.
    fn path_args(&self) -> Vec<String> {
        let mut c = Vec::new();
        for p in &self.paths {
            c.push("--path".to_owned());
            c.push(p.clone());
        }
        for h in &self.path_bytes {
            c.push("--path-bytes".to_owned());
            c.push(h.clone());
        }
        c
    }
}

/// One command run for the page: its arguments after the binary, exit code and output.
fn outcome(args: &[String], code: Option<i32>, stdout: &[u8], stderr: &[u8]) -> Value {
    let mut text = String::from_utf8_lossy(stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(stderr));
    json!({"command": args.join(" "), "code": code, "output": text})
}

/// Whether `id` can be a hunk id (what `diff --json` prints: no separator, no option).
fn plausible_hunk_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':' | b'.'))
}

/// The commands that apply `sel`: hunks first (they leave the rest of their files staged),
/// then whole paths; or why the selection is refused.
pub fn apply_commands(job: &str, sel: &Selection) -> Result<Vec<Vec<String>>, String> {
    if sel.paths.is_empty() && sel.path_bytes.is_empty() && sel.hunks.is_empty() {
        return Err("nothing selected: tick files or hunks first".into());
    }
    if let Some(bad) = sel.hunks.iter().find(|h| !plausible_hunk_id(h)) {
        return Err(format!("{bad:?} is not a hunk id `diff --json` lists"));
    }
    if let Some(bad) = sel.bad_paths() {
        return Err(bad);
    }
    let base = || -> Vec<String> {
        ["--color", "never", "apply", job]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    };
    let mut out = Vec::new();
    if !sel.hunks.is_empty() {
        let mut c = base();
        for h in &sel.hunks {
            c.push("--hunks".to_owned());
            c.push(h.clone());
        }
        out.push(c);
    }
    if !sel.paths.is_empty() || !sel.path_bytes.is_empty() {
        let mut c = base();
        c.extend(sel.path_args());
        out.push(c);
    }
    Ok(out)
}

/// The command that drops `sel`: whole files only (a hunk cannot be dropped on its own:
/// the page says so); or why the selection is refused. An empty selection drops the whole
/// stage.
pub fn drop_command(job: &str, sel: &Selection) -> Result<Vec<String>, String> {
    if !sel.hunks.is_empty() {
        return Err(
            "Drop works on whole files: tick the file (a single hunk cannot be dropped; apply \
             the hunks you want and drop the file)"
                .into(),
        );
    }
    if let Some(bad) = sel.bad_paths() {
        return Err(bad);
    }
    let mut c: Vec<String> = ["--color", "never", "drop", job]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    c.extend(sel.path_args());
    Ok(c)
}

/// A comment the page asks to keep: on a file (by path, or by the hex of its bytes), or on
/// one line of one of its hunks.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommentRequest {
    /// The file, by path.
    #[serde(default)]
    pub path: Option<String>,
    /// The file, by the hex of its path's bytes.
    #[serde(default)]
    pub path_bytes: Option<String>,
    /// The hunk, by id.
    #[serde(default)]
    pub hunk: Option<String>,
    /// The staged file's line.
    #[serde(default)]
    pub line: Option<u64>,
    /// What the reviewer wrote.
    pub text: String,
}

/// The command that keeps `c` (`review JOB --comment=TEXT …`), or why it is refused. The
/// bounds on the text are the store's, checked by that command.
pub fn comment_command(job: &str, c: &CommentRequest) -> Result<Vec<String>, String> {
    let sel = Selection {
        paths: c.path.iter().cloned().collect(),
        path_bytes: c.path_bytes.iter().cloned().collect(),
        hunks: Vec::new(),
    };
    if sel.paths.len() + sel.path_bytes.len() != 1 {
        return Err("a comment is on one file: give its path or its path_bytes".into());
    }
    if let Some(bad) = sel.bad_paths() {
        return Err(bad);
    }
    if c.text.contains('\0') {
        return Err("a comment cannot hold a NUL character".into());
    }
    // The store's bound, checked here too so an over-long text never becomes an argument
    // the kernel refuses.
    if c.text.len() > cofferdam_stage::comments::MAX_TEXT_BYTES {
        return Err(format!(
            "the comment is {} bytes; at most {} are kept",
            c.text.len(),
            cofferdam_stage::comments::MAX_TEXT_BYTES
        ));
    }
    let mut out: Vec<String> = ["--color", "never", "review", job]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    // One argument, `=` joined: a text that starts with `-` is still the text.
    out.push(format!("--comment={}", c.text));
    out.extend(sel.path_args());
    if let Some(h) = &c.hunk {
        if !plausible_hunk_id(h) {
            return Err(format!("{h:?} is not a hunk id `diff --json` lists"));
        }
        out.push("--hunk".to_owned());
        out.push(h.clone());
    }
    if let Some(l) = c.line {
        out.push(format!("--line={l}"));
    }
    Ok(out)
}

impl Target {
    /// The target for `job`, applying to `workdir`.
    pub fn new(job: &Job, workdir: PathBuf) -> Result<Self, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::setup(format!("cannot find this program's file: {e}")))?;
        Ok(Target {
            exe,
            job_dir: job.dir().to_path_buf(),
            job_id: job.id().to_owned(),
            workdir,
        })
    }

    fn job_arg(&self) -> String {
        self.job_dir.to_string_lossy().into_owned()
    }

    /// Run `cofferdam ARGS` in the workdir: its exit code (`None`: killed) and output.
    fn run(&self, args: &[String]) -> (Option<i32>, Vec<u8>, Vec<u8>) {
        match Command::new(&self.exe)
            .args(args)
            .current_dir(&self.workdir)
            .env("PAGER", "cat")
            .stdin(std::process::Stdio::null())
            .output()
        {
            Ok(o) => (o.status.code(), o.stdout, o.stderr),
            Err(e) => (
                None,
                Vec::new(),
                format!("cannot run {}: {e}\n", self.exe.display()).into_bytes(),
            ),
        }
    }

    /// `args` run and its stdout parsed as JSON (null, with the error, when it is not).
    fn run_json(&self, args: &[&str], errors: &mut Vec<String>) -> Value {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let (code, stdout, stderr) = self.run(&args);
        match serde_json::from_slice(&stdout) {
            Ok(v) => v,
            Err(_) => {
                errors.push(format!(
                    "`cofferdam {}` (exit {code:?}): {}",
                    args.join(" "),
                    String::from_utf8_lossy(&stderr).trim()
                ));
                Value::Null
            }
        }
    }

    /// What the page shows: the review (JSON, and the text `status --review` prints) and
    /// every remaining change with its diff and hunks.
    pub fn review(&self) -> Value {
        let job = self.job_arg();
        let mut errors = Vec::new();
        let review = self.run_json(
            &["--json", "status", "--review", &job, "--no-pager"],
            &mut errors,
        );
        let (_, text, _) = self.run(&[
            "--color".into(),
            "never".into(),
            "status".into(),
            "--review".into(),
            job.clone(),
            "--no-pager".into(),
        ]);
        let diff = self.run_json(&["--json", "diff", &job], &mut errors);
        json!({
            "job": self.job_id,
            "workdir": self.workdir.to_string_lossy(),
            "review": review,
            "review_text": String::from_utf8_lossy(&text),
            "diff": diff,
            "errors": errors,
        })
    }

    /// Apply `sel` with `cofferdam apply`, as the command line would.
    pub fn apply(&self, sel: &Selection) -> Value {
        let commands = match apply_commands(&self.job_arg(), sel) {
            Ok(c) => c,
            Err(why) => return json!({"ok": false, "steps": [], "error": why}),
        };
        let mut steps = Vec::new();
        let mut ok = true;
        for c in commands {
            let (code, stdout, stderr) = self.run(&c);
            steps.push(outcome(&c, code, &stdout, &stderr));
            if code != Some(0) {
                ok = false;
                break;
            }
        }
        json!({"ok": ok, "steps": steps})
    }

    /// Keep the comment `c` with `cofferdam review JOB --comment`, as the command line would.
    pub fn comment(&self, c: &CommentRequest) -> Value {
        let cmd = match comment_command(&self.job_arg(), c) {
            Ok(cmd) => cmd,
            Err(why) => return json!({"ok": false, "steps": [], "error": why}),
        };
        let (code, stdout, stderr) = self.run(&cmd);
        // The text is the reviewer's own; the step shows the command without it.
        let shown: Vec<String> = cmd
            .iter()
            .map(|a| {
                if a.starts_with("--comment=") {
                    "--comment=…".to_owned()
                } else {
                    a.clone()
                }
            })
            .collect();
        json!({"ok": code == Some(0), "steps": [outcome(&shown, code, &stdout, &stderr)]})
    }

    /// Discard the selected files, or the whole stage when nothing is selected, with
    /// `cofferdam drop`.
    pub fn drop_selected(&self, sel: &Selection) -> Value {
        let c = match drop_command(&self.job_arg(), sel) {
            Ok(c) => c,
            Err(why) => return json!({"ok": false, "steps": [], "error": why}),
        };
        let (code, stdout, stderr) = self.run(&c);
        json!({"ok": code == Some(0), "steps": [outcome(&c, code, &stdout, &stderr)]})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(paths: &[&str], hunks: &[&str]) -> Selection {
        Selection {
            paths: paths.iter().map(|s| (*s).to_owned()).collect(),
            path_bytes: Vec::new(),
            hunks: hunks.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn paths_by_bytes_pass_as_hex_and_drop_takes_files_only() {
        let mut s = sel(&["a"], &[]);
        s.path_bytes.push("62ff".into());
        let c = apply_commands("/j", &s).unwrap();
        assert_eq!(
            c[0],
            [
                "--color",
                "never",
                "apply",
                "/j",
                "--path",
                "a",
                "--path-bytes",
                "62ff"
            ]
        );
        assert_eq!(
            drop_command("/j", &s).unwrap(),
            [
                "--color",
                "never",
                "drop",
                "/j",
                "--path",
                "a",
                "--path-bytes",
                "62ff"
            ]
        );
        assert_eq!(
            drop_command("/j", &sel(&[], &[])).unwrap(),
            ["--color", "never", "drop", "/j"]
        );
        assert!(drop_command("/j", &sel(&[], &["h1"])).is_err());
        s.path_bytes = vec!["--force".into()];
        assert!(apply_commands("/j", &s).is_err());
        assert!(drop_command("/j", &s).is_err());
        s.path_bytes = vec!["6".into()];
        assert!(drop_command("/j", &s).is_err());
    }

    #[test]
    fn hunks_go_first_then_paths() {
        let c = apply_commands("/j", &sel(&["a b", "-x"], &["h1", "h2"])).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0],
            [
                "--color", "never", "apply", "/j", "--hunks", "h1", "--hunks", "h2"
            ]
        );
        assert_eq!(
            c[1],
            [
                "--color", "never", "apply", "/j", "--path", "a b", "--path", "-x"
            ]
        );
        assert_eq!(apply_commands("/j", &sel(&["f"], &[])).unwrap().len(), 1);
    }

    #[test]
    fn bad_selections_are_refused() {
        assert!(apply_commands("/j", &sel(&[], &[])).is_err());
        assert!(apply_commands("/j", &sel(&[], &["a,b"])).is_err());
        assert!(apply_commands("/j", &sel(&[], &["--force"])).is_err());
        assert!(apply_commands("/j", &sel(&[""], &[])).is_err());
        assert!(apply_commands("/j", &sel(&["a\0b"], &[])).is_err());
    }

    #[test]
    fn a_comment_is_one_argument_on_one_file() {
        let c: CommentRequest =
            serde_json::from_str(r#"{"path":"-f.txt","hunk":"h1","line":3,"text":"--force me"}"#)
                .unwrap();
        assert_eq!(
            comment_command("/j", &c).unwrap(),
            [
                "--color",
                "never",
                "review",
                "/j",
                "--comment=--force me",
                "--path",
                "-f.txt",
                "--hunk",
                "h1",
                "--line=3"
            ]
        );
        let by_bytes: CommentRequest =
            serde_json::from_str(r#"{"path_bytes":"ff666f","text":"t"}"#).unwrap();
        assert_eq!(
            comment_command("/j", &by_bytes).unwrap()[5..],
            ["--path-bytes", "ff666f"]
        );
        let none: CommentRequest = serde_json::from_str(r#"{"text":"t"}"#).unwrap();
        assert!(comment_command("/j", &none).is_err());
        let bad_hunk: CommentRequest =
            serde_json::from_str(r#"{"path":"f","hunk":"--x","text":"t"}"#).unwrap();
        assert!(comment_command("/j", &bad_hunk).is_err());
        assert!(serde_json::from_str::<CommentRequest>(r#"{"text":"t","force":1}"#).is_err());
        let long = CommentRequest {
            path: Some("f".into()),
            text: "x".repeat(cofferdam_stage::comments::MAX_TEXT_BYTES + 1),
            ..CommentRequest::default()
        };
        assert!(comment_command("/j", &long).is_err());
    }

    #[test]
    fn a_selection_takes_no_other_fields() {
        assert!(serde_json::from_str::<Selection>(r#"{"paths":["a"],"force":true}"#).is_err());
        let s: Selection = serde_json::from_str(r#"{"hunks":["x"]}"#).unwrap();
        assert_eq!(s.hunks, ["x"]);
    }
}
