//! The run's file accesses (`run_observation.filesystem`, issue 21): as root the supervisor
//! watches the sealed tier's workdir mount with fanotify and the bundle lists what the run
//! read, wrote and executed there; as a user no mechanism can, and the dimension is absent
//! (never zeros). The watch's mark is read back: with it skipped (a test switch) the bundle
//! claims no observation.

use crate::apply::sealed_host;
use crate::common::*;
use cofferdam_sandbox::mutant;
use serde_json::Value;
use std::os::unix::ffi::OsStrExt;

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `cofferdam --json run -- sh -c SCRIPT`, which must succeed; its bundle.
fn run(s: &Sandbox, script: &str, env: Option<(&str, &str)>) -> Value {
    let mut c = s.cmd();
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let out = c
        .args(["--json", "run", "--", "sh", "-c", script])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = json_of(&out)["bundle"].as_str().unwrap().to_owned();
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The listed paths and their kinds.
fn paths(b: &Value) -> Vec<(String, Vec<String>)> {
    b["run_observation"]["filesystem"]["paths"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|p| {
            let kinds = p["access"].as_array().unwrap();
            (
                p["target"].as_str().unwrap().to_owned(),
                kinds
                    .iter()
                    .map(|k| k.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

fn kinds_of(b: &Value, target: &str) -> Option<Vec<String>> {
    paths(b)
        .into_iter()
        .find(|(t, _)| t == target)
        .map(|(_, k)| k)
}

#[test]
fn the_file_watch_lists_what_the_run_read_wrote_and_ran_in_the_workdir() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("a.txt", "hello\n");
    let script = s.write("s.sh", "#!/bin/sh\necho ran\n");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::create_dir(s.work.path().join("d")).unwrap();
    std::fs::write(s.work.path().join("d/in.txt"), "x").unwrap();
    // A name that is not UTF-8, shown escaped.
    let odd = std::ffi::OsStr::from_bytes(b"odd\xff");
    std::fs::write(s.work.path().join(odd), "o").unwrap();
    // A FIFO: the kernel opens only regular files and directories for the watch, so a
    // workload that opens one cannot block the supervisor's reader.
    let fifo = std::ffi::CString::new(s.work.path().join("ff").as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let b = run(
        &s,
        "cat a.txt >/dev/null; echo x > new.txt; ./s.sh >/dev/null; ls d >/dev/null; \
         cat \"$(printf 'odd\\377')\" >/dev/null; echo t > gone.txt; rm gone.txt; \
         (cat ff >/dev/null &); echo y > ff; wait",
        None,
    );
    let fs = &b["run_observation"]["filesystem"];
    if !root() {
        assert_eq!(
            *fs,
            Value::Null,
            "a user's run observes no file access: {b}"
        );
        assert!(
            !b["run"]["warnings"].to_string().contains("file accesses"),
            "{}",
            b["run"]["warnings"]
        );
        return;
    }
    assert_eq!(
        fs["denied"],
        Value::Null,
        "denials are not seen: unknown, never 0"
    );
    assert_eq!(kinds_of(&b, "a.txt").unwrap(), ["read"], "{fs}");
    assert_eq!(kinds_of(&b, "new.txt").unwrap(), ["write"], "{fs}");
    assert_eq!(kinds_of(&b, "s.sh").unwrap(), ["read", "execute"], "{fs}");
    assert_eq!(kinds_of(&b, "d").unwrap(), ["read"], "{fs}");
    assert_eq!(kinds_of(&b, "odd\\xff").unwrap(), ["read"], "{fs}");
    // Removed before the watch's reader named it: still by the name it had.
    assert_eq!(kinds_of(&b, "gone.txt").unwrap(), ["write"], "{fs}");
    assert!(kinds_of(&b, "ff").is_none(), "a FIFO is not reported: {fs}");
    assert!(
        kinds_of(&b, "d/in.txt").is_none(),
        "listed, never opened: {fs}"
    );
    let listed: u64 = paths(&b).iter().map(|(_, k)| k.len() as u64).sum();
    assert_eq!(fs["allowed"].as_u64(), Some(listed), "{fs}");
    assert_eq!(fs["paths_omitted"], Value::Null, "{fs}");
    // The observation is evidence of accesses, never of a control.
    let rows = b["executor_observations"]["controls"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| !r["mechanism"].as_str().unwrap().contains("fanotify")),
        "{rows:?}"
    );
    // The review shows it.
    let out = s
        .cmd()
        .args([
            "--color",
            "never",
            "status",
            "--review",
            "--no-pager",
            "last",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("  filesystem {listed} allowed, unknown denied\n")),
        "{text}"
    );
    assert!(text.contains("    a.txt (read)\n"), "{text}");
}

#[test]
fn past_sixty_four_paths_the_bundle_counts_the_rest() {
    if !sealed_host() || !root() {
        return;
    }
    let s = Sandbox::new();
    let b = run(
        &s,
        "i=0; while [ $i -lt 70 ]; do echo > f$i; i=$((i+1)); done",
        None,
    );
    let fs = &b["run_observation"]["filesystem"];
    assert_eq!(paths(&b).len(), 64, "{fs}");
    assert_eq!(paths(&b)[0].0, "f0", "first seen first: {fs}");
    assert_eq!(fs["paths_omitted"], 6, "{fs}");
    assert_eq!(fs["allowed"], 70, "{fs}");
}

#[test]
fn a_watch_whose_mark_does_not_read_back_claims_nothing() {
    if !sealed_host() || !root() || !mutant::COMPILED_IN {
        return;
    }
    let s = Sandbox::new();
    s.write("a.txt", "hello\n");
    let b = run(
        &s,
        "cat a.txt >/dev/null",
        Some((mutant::ENV, mutant::FILE_WATCH_UNMARKED)),
    );
    assert_eq!(b["run_observation"]["filesystem"], Value::Null, "{b}");
    let warnings = b["run"]["warnings"].to_string();
    assert!(
        warnings.contains("file accesses were not observed")
            && warnings.contains("did not read back"),
        "{warnings}"
    );
}

/// Two names that look alike once shown (a newline is shown as `\n`, a backslash as it is)
/// are one entry with both kinds, and the bundle is still written.
#[test]
fn names_shown_alike_are_one_entry_and_the_bundle_stands() {
    if !sealed_host() || !root() {
        return;
    }
    let s = Sandbox::new();
    let b = run(
        &s,
        "printf x > \"$(printf 'n\\nx')\"; printf y > 'n\\nx'; cat n* >/dev/null",
        None,
    );
    let fs = &b["run_observation"]["filesystem"];
    assert_eq!(kinds_of(&b, "n\\nx").unwrap(), ["read", "write"], "{fs}");
    // The glob read the workdir too.
    assert_eq!(kinds_of(&b, ".").unwrap(), ["read"], "{fs}");
    assert_eq!(paths(&b).len(), 2, "{fs}");
    assert_eq!(fs["allowed"], 5, "two names, each read and written: {fs}");
}

/// Events still queued when the run's last process is gone are named from the run's
/// mount namespace, which the watch holds until it has read them: none is lost or named
/// from a detached mount.
#[test]
fn accesses_at_the_very_end_of_a_run_are_all_named() {
    if !sealed_host() || !root() {
        return;
    }
    let s = Sandbox::new();
    let seg = "d".repeat(200);
    let mut deep = s.work.path().to_path_buf();
    for _ in 0..12 {
        deep.push(&seg);
    }
    std::fs::create_dir_all(&deep).unwrap();
    for i in 0..1500 {
        std::fs::write(deep.join(format!("f{i}")), "x").unwrap();
    }
    let rel = deep
        .strip_prefix(s.work.path())
        .unwrap()
        .display()
        .to_string();
    let b = run(
        &s,
        &format!(
            "exec /usr/bin/python3 -c \"import os\nfor n in os.listdir('{rel}'):\n open('{rel}/'+n).read()\""
        ),
        None,
    );
    let fs = &b["run_observation"]["filesystem"];
    let warnings = b["run"]["warnings"].to_string();
    assert!(!warnings.contains("file"), "{warnings}");
    // The 1500 files, and the directory listed.
    assert_eq!(fs["allowed"], 1501, "{fs}");
    assert_eq!(fs["paths_omitted"], 1501 - 64, "{fs}");
}
