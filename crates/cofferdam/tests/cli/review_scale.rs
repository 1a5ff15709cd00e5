//! Review at scale: a directory added whole is one line in `status --review` and `diff
//! --stat` (count and size), `--all` expands it, a change inside it that runs code stays
//! listed, and `--json` stays complete.

use crate::common::{Sandbox, json_of};

/// A scoped run that adds `venv/` with 30 files (one an `.envrc`, which runs code) and
/// edits `notes`; returns the job id.
fn venv_job(s: &Sandbox) -> String {
    s.write("notes", "one\n");
    let script = "mkdir -p venv/lib venv/bin && \
        for i in $(seq 1 29); do printf 'x%.0s' $(seq 1 100) > venv/lib/m$i.py; done && \
        echo 'source bin/activate' > venv/bin/.envrc && \
        echo two >> notes";
    run_job(s, "scoped", script)
}

/// Run `sh -c SCRIPT` on `tier` (git without the system config); the job id.
pub(crate) fn run_job(s: &Sandbox, tier: &str, script: &str) -> String {
    let out = s
        .cmd()
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["run", "--json", "--tier", tier, "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out)["job"].as_str().unwrap().to_owned()
}

fn stdout_of(s: &Sandbox, args: &[&str]) -> String {
    let out = s.cmd().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_directory_added_whole_is_one_line_unless_all_and_never_hides_code() {
    let s = Sandbox::new();
    let job = venv_job(&s);

    let review = stdout_of(&s, &["status", "--review", &job]);
    let line = review
        .lines()
        .find(|l| l.contains("venv/ "))
        .unwrap_or_else(|| panic!("no rollup line:\n{review}"));
    assert!(
        line.contains("added")
            && line.contains("(30 file(s), 2 dir(s), 2.9 KiB; --all lists them)"),
        "{line}"
    );
    assert!(!review.contains("venv/lib/m1.py"), "{review}");
    // The executable is listed on its own, in the changes and as runs code.
    assert!(review.contains("added        venv/bin/.envrc"), "{review}");
    assert!(review.contains("! venv/bin/.envrc: runs code"), "{review}");
    assert!(review.contains("notes"), "{review}");

    let all = stdout_of(&s, &["status", "--review", "--all", &job]);
    assert!(
        all.contains("venv/lib/m17.py") && !all.contains("--all lists them"),
        "{all}"
    );

    let stat = stdout_of(&s, &["diff", "--stat", &job]);
    assert!(
        stat.lines()
            .any(|l| l.contains("venv/ ") && l.contains("(30 file(s), 2 dir(s), 2.9 KiB;")),
        "{stat}"
    );
    assert!(!stat.contains("venv/lib/m1.py"), "{stat}");
    assert!(
        stat.lines()
            .any(|l| l.contains("venv/bin/.envrc") && l.contains("! runs code")),
        "{stat}"
    );
    assert!(stat.contains("34 path(s) changed"), "{stat}");
    let stat_all = stdout_of(&s, &["diff", "--stat", "--all", &job]);
    assert!(stat_all.contains("venv/lib/m29.py"), "{stat_all}");

    // JSON is never rolled up.
    let out = s.cmd().args(["--json", "diff", &job]).output().unwrap();
    assert_eq!(json_of(&out)["changes"].as_array().unwrap().len(), 34);
    let out = s.cmd().args(["--json", "status", &job]).output().unwrap();
    let v = json_of(&out);
    assert_eq!(v["filesystem"]["changes"].as_array().unwrap().len(), 34);
}

/// git on the host side of a test: no system or user config, a fixed identity.
fn host_git(s: &Sandbox, args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=host", "-c", "user.email=host@test"])
        .args(args)
        .current_dir(s.work.path())
        .env_clear()
        .env("HOME", s.home.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out
}

/// A repository with one commit (`first`, adding `a`), and a sealed run in it that commits
/// a new file `b` like an agent would; `None` (skipped) without the sealed tier.
fn agent_commits() -> Option<(Sandbox, String)> {
    if !crate::apply::sealed_host() {
        return None;
    }
    let s = Sandbox::new();
    s.write("a", "one\n");
    host_git(&s, &["init", "-q"]);
    host_git(&s, &["add", "a"]);
    host_git(&s, &["commit", "-qm", "first"]);
    let script = "echo b > b && git add b && \
        git -c user.name=agent -c user.email=agent@test commit -qm 'agent adds b'";
    let job = run_job(&s, "sealed", script);
    Some((s, job))
}

#[test]
fn a_git_status_on_the_host_during_review_does_not_block_applying_commits() {
    let Some((s, job)) = agent_commits() else {
        return;
    };
    // The user looks at the repository meanwhile: `a`'s stat data changed, so `git
    // status` rewrites the index.
    let index = s.work.path().join(".git/index");
    let before = std::fs::read(&index).unwrap();
    let a = std::fs::File::options()
        .write(true)
        .open(s.work.path().join("a"))
        .unwrap();
    a.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
        .unwrap();
    drop(a);
    host_git(&s, &["status", "--porcelain"]);
    assert_ne!(
        std::fs::read(&index).unwrap(),
        before,
        "git status did not rewrite the index"
    );

    // The review says so before the apply.
    let stat = stdout_of(&s, &["diff", "--stat", &job]);
    assert!(
        stat.lines().any(|l| l.contains(".git/index")
            && l.contains("host rewrote this git index: apply takes the staged one")),
        "{stat}"
    );
    let diff = stdout_of(&s, &["diff", &job]);
    assert!(
        diff.contains("so apply takes the staged one and warns") && !diff.contains("refuse"),
        "{diff}"
    );
    let out = s.cmd().args(["apply", &job]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("git index .git/index:") && text.contains("was taken"),
        "{text}"
    );
    // The repository is the agent's: its commit on HEAD, a clean status.
    let log = host_git(&s, &["log", "--format=%s"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "agent adds b\nfirst\n"
    );
    let status = host_git(&s, &["status", "--porcelain"]);
    assert_eq!(String::from_utf8_lossy(&status.stdout), "", "{status:?}");
}

#[test]
fn a_ref_moved_on_the_host_keeps_the_git_index_a_conflict() {
    let Some((s, job)) = agent_commits() else {
        return;
    };
    // The user commits on the same branch meanwhile.
    s.write("c", "c\n");
    host_git(&s, &["add", "c"]);
    host_git(&s, &["commit", "-qm", "host adds c"]);

    let diff = stdout_of(&s, &["diff", &job]);
    assert!(
        diff.contains("apply would refuse it") && !diff.contains("takes the staged"),
        "{diff}"
    );
    let out = s.cmd().args(["--json", "apply", &job]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(".git/index"), "{text}");
    let log = host_git(&s, &["log", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "host adds c\nfirst\n");
}

#[test]
fn a_git_change_is_summarised_as_refs_and_counted_objects() {
    let Some((s, _)) = agent_commits() else {
        return;
    };
    host_git(&s, &["tag", "old"]);
    host_git(&s, &["branch", "gone"]);
    host_git(&s, &["pack-refs", "--all"]);
    let first = host_git(&s, &["rev-parse", "--short=7", "HEAD"]);
    let first = String::from_utf8(first.stdout).unwrap().trim().to_owned();
    let branch = host_git(&s, &["symbolic-ref", "--short", "HEAD"]);
    let branch = String::from_utf8(branch.stdout).unwrap().trim().to_owned();
    // The agent commits on the branch, tags it, starts a branch, deletes one (from packed-refs).
    let script = "echo c > c && git add c && \
        git -c user.name=agent -c user.email=agent@test commit -qm 'agent adds c' && \
        git tag v1 && git branch feature && git branch -D gone -q && \
        printf 'x\\033]0;t\\007\\n' > \".git/refs/tags/$(printf 'e\\033[2J')\"";
    let job = run_job(&s, "sealed", script);
    let after = s.cmd().args(["status", "--review", &job]).output().unwrap();
    let review = String::from_utf8_lossy(&after.stdout);
    assert!(after.status.success(), "{after:?}");
    let new = review
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(&format!("branch    {branch} moved {first}.."))
        })
        .unwrap_or_else(|| panic!("{branch} not moved from {first}:\n{review}"))
        .to_owned();
    assert_eq!(new.len(), 7, "{review}");
    assert!(
        review.contains(&format!("tag       v1 added at {new}")),
        "{review}"
    );
    assert!(
        review.contains(&format!("branch    feature added at {new}")),
        "{review}"
    );
    assert!(
        review.contains(&format!("branch    gone deleted (was {first})")),
        "{review}"
    );
    assert!(!review.contains("tag       old"), "{review}");
    assert!(
        review.contains("objects   3 loose object file(s), 0 pack(s) added"),
        "{review}"
    );
    assert!(
        review.contains("commits   1 new\n    - agent adds c\n"),
        "{review}"
    );
    assert!(!review.contains(".git/objects/"), "{review}");
    // A ref name and value the workload wrote by hand reach the terminal escaped.
    assert!(
        review.contains("tag       e\\u{1b}[2J added at x\\u{1b}]0;t\\u{7}"),
        "{review}"
    );
    let raw = crate::common::raw_controls(&after.stdout);
    assert!(raw.is_empty(), "{raw:?}");
    let all = s
        .cmd()
        .args(["status", "--review", "--all", &job])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&all.stdout).contains(".git/objects/"));
}
