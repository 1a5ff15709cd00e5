//! The workdir's own mode (issue 20): it is kept inside the run on every tier, and a
//! `chmod` of the workdir itself is staged as the change `.`, shown by diff, applied, and
//! refused when the host's mode moved meanwhile. Also: `git init && git add` works in a
//! scoped run (it reads `/dev/urandom`).

use crate::common::{Sandbox, landlock_abi_independently, require, userns_independently};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn text(o: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The chmod of `.` inside a run on the tier `tier`: the mode seen before and after.
fn chmod_root(s: &Sandbox, tier: &[&str]) -> std::process::Output {
    s.cmd()
        .arg("run")
        .args(tier)
        .args([
            "-q",
            "--",
            "sh",
            "-c",
            "stat -c %a .; chmod 0700 . ; stat -c %a .",
        ])
        .output()
        .unwrap()
}

fn root_mode_on(tier: &[&str]) {
    let s = Sandbox::new();
    s.write("a", "a\n");
    let work = s.work.path();
    set_mode(work, 0o750);
    // The scoped tier's metadata filter refuses every chmod of a root caller (a seccomp
    // filter cannot tell the copy from /etc): there the mode is kept and nothing is staged.
    let scoped_root = tier.contains(&"scoped") && rustix::process::geteuid().is_root();

    // A run whose chmod meets a host that moved: refused, the host keeps its mode.
    let out = chmod_root(&s, tier);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    let seen: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(
        seen.first(),
        Some(&"750"),
        "the workdir keeps its mode inside: {t}"
    );
    if scoped_root {
        assert_eq!(seen, ["750", "750"], "{t}");
        assert!(t.contains("Operation not permitted"), "{t}");
        let diff = s.cmd().arg("diff").output().unwrap();
        assert!(
            String::from_utf8_lossy(&diff.stdout).contains("no staged changes"),
            "{}",
            text(&diff)
        );
        return;
    }
    assert_eq!(seen, ["750", "700"], "{t}");
    assert_eq!(
        mode_of(work),
        0o750,
        "the run changed the host workdir: {t}"
    );
    let diff = s.cmd().arg("diff").output().unwrap();
    let d = text(&diff);
    assert_eq!(diff.status.code(), Some(0), "{d}");
    assert!(d.contains("diff . (modified)"), "{d}");
    assert!(d.contains("0750 → 0700"), "{d}");
    let review = s.cmd().args(["status", "--review"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&review.stdout).contains("modified     ."),
        "{}",
        text(&review)
    );
    set_mode(work, 0o755);
    let apply = s.cmd().arg("apply").output().unwrap();
    let a = text(&apply);
    assert_eq!(apply.status.code(), Some(3), "{a}");
    assert!(
        a.contains("conflict .: permissions changed on the host"),
        "{a}"
    );
    assert_eq!(mode_of(work), 0o755, "a refused apply wrote: {a}");
    assert!(
        s.cmd()
            .args(["drop", "last"])
            .output()
            .unwrap()
            .status
            .success()
    );

    // The same on a host left alone, with a new file: applied in two steps (the first
    // apply's own write into the workdir is no host change to the second).
    set_mode(work, 0o750);
    let out = s
        .cmd()
        .arg("run")
        .args(tier)
        .args(["-q", "--", "sh", "-c", "chmod 0700 . && echo n > new"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let first = s.cmd().args(["apply", "--exclude", "."]).output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(work.join("new").is_file(), "{}", text(&first));
    assert_eq!(mode_of(work), 0o750, "{}", text(&first));
    let apply = s.cmd().arg("apply").output().unwrap();
    let a = text(&apply);
    assert_eq!(apply.status.code(), Some(0), "{a}");
    assert!(a.contains("modified     ."), "{a}");
    assert_eq!(mode_of(work), 0o700, "{a}");
}

#[test]
fn root_mode_sealed() {
    if require("user namespaces (sealed tier)", userns_independently()) {
        root_mode_on(&[]);
    }
}

#[test]
fn root_mode_scoped() {
    if require("Landlock", landlock_abi_independently() > 0) {
        root_mode_on(&["--tier", "scoped"]);
    }
}

#[test]
fn root_mode_advisory() {
    root_mode_on(&["--tier", "advisory", "--containment", "advisory"]);
}

/// `git add` in a scoped run: git reads `/dev/urandom` for its temporary object names, and
/// the scoped ruleset grants it like the sealed tier's `/dev`. (A root caller's `git init`
/// fails there for another reason: the metadata filter refuses its `chmod` of
/// `.git/config.lock`; so for root the repository is made on the host first.)
#[test]
fn git_add_works_in_a_scoped_run() {
    if !require("Landlock", landlock_abi_independently() > 0) {
        return;
    }
    let s = Sandbox::new();
    s.write("a", "a\n");
    let script = if rustix::process::geteuid().is_root() {
        let init = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(s.work.path())
            .status()
            .unwrap();
        assert!(init.success());
        "head -c 8 /dev/urandom | wc -c && git add a"
    } else {
        "head -c 8 /dev/urandom | wc -c && git init -q && git add a"
    };
    let out = s
        .cmd()
        .args(["run", "--tier", "scoped", "-q", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "8", "{t}");
    let diff = s.cmd().args(["diff", "--json"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&diff.stdout).contains(".git/index"),
        "git add staged no index: {}",
        text(&diff)
    );
}
