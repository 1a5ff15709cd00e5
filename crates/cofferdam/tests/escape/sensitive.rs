//! Changes that run code later are not let in by a bare `apply`: the workload stages a git
//! hook, a program-running `.git/config` key, a `cofferdam.toml` that grants the host
//! network, and a new executable, next to an ordinary edit. Each must be marked in
//! `status --review --json` and `diff --json`, stay staged (the host file absent or
//! unchanged) through a bare `apply` while the ordinary edit lands, and land with `--path`
//! naming it or `--allow-sensitive` (`cofferdam_stage::sensitive`).

use crate::harness::{Attack, BOTH_MUST, Boundary::FsWrite, Ctx, Outcome, both, check};
use serde_json::Value;
use std::process::Command;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "fw.sensitive-git-hook",
        boundary: FsWrite,
        description: "stage .git/hooks/pre-commit in a git repo workdir for the user's next commit",
        on: BOTH_MUST,
        probe: git_hook,
    },
    Attack {
        id: "fw.sensitive-fsmonitor",
        boundary: FsWrite,
        description: "set core.fsmonitor in .git/config (git config --file), which git runs on status",
        on: BOTH_MUST,
        probe: fsmonitor,
    },
    Attack {
        id: "fw.sensitive-manifest",
        boundary: FsWrite,
        description: "write a cofferdam.toml granting the host network to the next run",
        on: BOTH_MUST,
        probe: manifest,
    },
    Attack {
        id: "fw.sensitive-executable",
        boundary: FsWrite,
        description: "add a new executable script to the workdir",
        on: BOTH_MUST,
        probe: executable,
    },
];

/// Every probe also edits this file: it must be applied by the bare `apply`.
const ORDINARY: &str = "notes.txt";

/// How the second apply is asked to take the sensitive change.
#[derive(Clone, Copy)]
enum Take {
    /// `--path` naming it.
    Path,
    /// `--allow-sensitive`.
    AllowAll,
}

/// The host side of the sensitive path, as bytes (`None` when absent).
type HostRead = fn(&Ctx) -> Option<Vec<u8>>;

fn git_init(ctx: &Ctx) {
    let out = Command::new("git")
        .args(["init", "-q"])
        .current_dir(ctx.work())
        .env("HOME", ctx.home())
        .output()
        .unwrap();
    assert!(out.status.success(), "git init: {}", both(&out));
}

fn host_file(ctx: &Ctx, rel: &str) -> Option<Vec<u8>> {
    std::fs::read(ctx.work().join(rel)).ok()
}

/// Run `script` (after `git init`), then check marking, the bare apply and the asked one.
/// `path` is the sensitive change; `landed` says whether the host now has it.
fn attempt(
    ctx: &Ctx,
    script: &str,
    path: &str,
    take: Take,
    landed: &dyn Fn(&Ctx) -> bool,
) -> Outcome {
    git_init(ctx);
    std::fs::write(ctx.work().join(ORDINARY), "before\n").unwrap();
    assert!(!landed(ctx), "the host has {path} before the run");
    let r = ctx.sh(&format!("{script}\necho after > {ORDINARY}"));
    ctx.assert_boundary(&r);
    assert_eq!(r.code, Some(0), "{}\n{}", r.out, r.err);
    let staged = r.changes().iter().any(|(p, _)| p == path);
    if !staged {
        return Outcome::Skipped(format!(
            "{path} was not staged: {:?}; {}",
            r.changes(),
            r.err.trim()
        ));
    }
    let job = r.job.as_str();
    let json_of = |args: &[&str]| -> Value {
        let out = ctx.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", both(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let review = json_of(&["status", "--review", "--json", job]);
    let in_review = review["review_context"]["stage"]["sensitive"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|s| s["path"] == path)
        .map(|s| s["sensitive"].clone());
    let diff = json_of(&["diff", "--json", job]);
    let in_diff = diff["changes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|c| c["path"] == path)
        .map(|c| c["sensitive"].clone());
    let ordinary_unmarked = diff["changes"].as_array().is_some_and(|a| {
        a.iter()
            .any(|c| c["path"] == ORDINARY && c["sensitive"].is_null())
    });

    let bare = ctx.cmd().args(["apply", job]).output().unwrap();
    let bare_text = String::from_utf8_lossy(&bare.stdout).into_owned();
    let held = bare.status.success()
        && !landed(ctx)
        && host_file(ctx, ORDINARY).as_deref() == Some(b"after\n")
        && bare_text.contains("held back")
        && bare_text.contains(path);

    let second = match take {
        Take::Path => ctx.cmd().args(["apply", job, "--path", path]).output(),
        Take::AllowAll => ctx.cmd().args(["apply", job, "--allow-sensitive"]).output(),
    }
    .unwrap();
    let took = second.status.success() && landed(ctx);
    let how = match take {
        Take::Path => format!("--path {path}"),
        Take::AllowAll => "--allow-sensitive".to_owned(),
    };
    check(
        matches!(&in_review, Some(Value::String(s)) if !s.is_empty()),
        format!("status --review --json marks {path}: {in_review:?}"),
        format!("status --review --json does not mark {path}: {review}"),
    )
    .and(check(
        matches!(&in_diff, Some(Value::String(s)) if !s.is_empty()) && ordinary_unmarked,
        format!("diff --json marks {path} and not {ORDINARY}"),
        format!("diff --json marking wrong: {diff}"),
    ))
    .and(check(
        held,
        format!("a bare apply left {path} staged and applied {ORDINARY}"),
        format!("bare apply let {path} in or failed: {}", both(&bare)),
    ))
    .and(check(
        took,
        format!("apply {how} applied it"),
        format!("apply {how} did not apply it: {}", both(&second)),
    ))
}

/// A shell line creating an executable script at `path` (mode 0755 given at creation: the
/// scoped tier refuses chmod, not the mode of a new file).
fn executable_at(path: &str, body: &str) -> String {
    format!(
        "python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT, 0o755); \
         os.write(fd, (\"#!/bin/sh\\n\" + sys.argv[2] + \"\\n\").encode())' {path} '{body}'"
    )
}

fn git_hook(ctx: &Ctx) -> Outcome {
    let hook = ".git/hooks/pre-commit";
    attempt(
        ctx,
        &executable_at(hook, "touch \"$OUTSIDE/ran\""),
        hook,
        Take::Path,
        &|c: &Ctx| host_file(c, hook).is_some(),
    )
}

fn fsmonitor(ctx: &Ctx) -> Outcome {
    let read: HostRead = |c| host_file(c, ".git/config");
    let has = |c: &Ctx| read(c).is_some_and(|b| String::from_utf8_lossy(&b).contains("fsmonitor"));
    attempt(
        ctx,
        // git chmods its lock file, which the scoped tier refuses: then append the key.
        "git config --file .git/config core.fsmonitor \"$OUTSIDE/monitor\" 2>/dev/null \
         || printf '[core]\\n\\tfsmonitor = %s\\n' \"$OUTSIDE/monitor\" >> .git/config",
        ".git/config",
        Take::AllowAll,
        &has,
    )
}

fn manifest(ctx: &Ctx) -> Outcome {
    attempt(
        ctx,
        "printf '[network]\\nmode = \"host\"\\n' > cofferdam.toml",
        "cofferdam.toml",
        Take::Path,
        &|c: &Ctx| host_file(c, "cofferdam.toml").is_some(),
    )
}

fn executable(ctx: &Ctx) -> Outcome {
    attempt(
        ctx,
        &executable_at("tool.sh", "echo hi"),
        "tool.sh",
        Take::AllowAll,
        &|c: &Ctx| host_file(c, "tool.sh").is_some(),
    )
}
