//! Hunk-level apply and merging (issue 22), against jobs made by real sealed runs: `diff
//! --json` lists hunks with ids, `apply --hunks` writes only those and leaves the rest
//! staged under the same ids, `apply --interactive` chooses on a real terminal,
//! `apply --merge` merges a host edit into a staged file cleanly, refuses a conflicting
//! merge showing the lines and writes it with markers under `--merge=markers`; the trace
//! says which paths were partly applied or merged.

use crate::apply::{ok, run};
use crate::common::*;
use crate::pty::Term;
use serde_json::Value;

fn sealed_host() -> bool {
    crate::apply::sealed_host()
}

const TWELVE: &str = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\n";

/// A job whose run changed lines 2 and 11 of f.txt (two hunks): the sandbox, the job, the
/// hunk ids.
fn two_hunks() -> (Sandbox, String, Vec<String>) {
    let s = Sandbox::new();
    s.write("f.txt", TWELVE);
    let id = run(&s, "sed -i 's/^l2$/L2/; s/^l11$/L11/' f.txt");
    let ids = hunk_ids(&s, &id, "f.txt");
    assert_eq!(ids.len(), 2, "{ids:?}");
    (s, id, ids)
}

/// The hunk ids `diff --json` lists for `path`.
fn hunk_ids(s: &Sandbox, id: &str, path: &str) -> Vec<String> {
    let d = json_of(&s.cmd().args(["diff", id, "--json"]).output().unwrap());
    d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["path"] == path)
        .flat_map(|c| c["hunks"].as_array().cloned().unwrap_or_default())
        .map(|h| h["id"].as_str().unwrap().to_owned())
        .collect()
}

fn read(s: &Sandbox, name: &str) -> String {
    std::fs::read_to_string(s.work.path().join(name)).unwrap()
}

/// The `apply_path` outcomes of the job's trace, as `path outcome`.
fn apply_paths(s: &Sandbox, id: &str) -> Vec<String> {
    let dir = s.store.path().join("jobs").join(id);
    let text = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"]["type"] == "apply_path")
        .map(|e| {
            format!(
                "{} {}",
                e["event"]["path"].as_str().unwrap(),
                e["event"]["outcome"].as_str().unwrap()
            )
        })
        .collect()
}

/// `status --review` of the job, as text.
fn review(s: &Sandbox, id: &str) -> String {
    ok(&s
        .cmd()
        .args(["status", "--review", id, "--no-pager"])
        .output()
        .unwrap())
}

fn state(s: &Sandbox, id: &str) -> String {
    let jobs = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
    jobs.as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .unwrap()["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn hunks_apply_by_id_the_rest_stays_staged_under_the_same_ids() {
    if !sealed_host() {
        return;
    }
    let (s, id, ids) = two_hunks();

    // A wrong id is a usage error, and nothing is written.
    let out = s
        .cmd()
        .args(["apply", &id, "--hunks", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no staged hunk"));
    assert_eq!(read(&s, "f.txt"), TWELVE);

    // The second hunk only.
    let text = ok(&s
        .cmd()
        .args(["apply", &id, "--hunks", &ids[1]])
        .output()
        .unwrap());
    assert!(text.contains("1 of 2 hunks applied"), "{text}");
    assert_eq!(read(&s, "f.txt"), TWELVE.replace("l11\n", "L11\n"));
    assert_eq!(state(&s, &id), "staged");
    // What remains is the first hunk, with the id it had.
    assert_eq!(hunk_ids(&s, &id, "f.txt"), vec![ids[0].clone()]);
    let diff = ok(&s.cmd().args(["diff", &id, "--no-pager"]).output().unwrap());
    assert!(
        diff.contains("-l2\n+L2\n") && !diff.contains("L11"),
        "{diff}"
    );
    assert!(!diff.contains("conflict"), "{diff}");
    let text = review(&s, &id);
    assert!(
        text.contains("f.txt  (1 hunk(s) applied, the rest staged)"),
        "{text}"
    );

    // The rest: the file is the staged one, the job applied.
    ok(&s
        .cmd()
        .args(["apply", &id, "--hunks", &ids[0]])
        .output()
        .unwrap());
    assert_eq!(
        read(&s, "f.txt"),
        TWELVE.replace("l2\n", "L2\n").replace("l11\n", "L11\n")
    );
    assert_eq!(state(&s, &id), "applied");
    assert_eq!(
        apply_paths(&s, &id),
        vec!["f.txt partial".to_owned(), "f.txt applied".to_owned()]
    );
}

#[test]
fn a_partly_applied_file_edited_on_the_host_conflicts() {
    if !sealed_host() {
        return;
    }
    let (s, id, ids) = two_hunks();
    ok(&s
        .cmd()
        .args(["apply", &id, "--hunks", &ids[0]])
        .output()
        .unwrap());
    let edited = read(&s, "f.txt").replace("l6\n", "host6\n");
    s.write("f.txt", &edited);
    let out = s.cmd().args(["apply", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(read(&s, "f.txt"), edited);
    // Merged against what the hunk apply wrote: all three edits.
    ok(&s.cmd().args(["apply", &id, "--merge"]).output().unwrap());
    assert_eq!(
        read(&s, "f.txt"),
        TWELVE
            .replace("l2\n", "L2\n")
            .replace("l6\n", "host6\n")
            .replace("l11\n", "L11\n")
    );
}

#[test]
fn interactive_apply_asks_per_hunk_on_a_terminal() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("f.txt", TWELVE);
    let id = run(&s, "sed -i 's/^l2$/L2/; s/^l5$/L5/; s/^l11$/L11/' f.txt");
    // The three hunks are close enough to be shown as one; split it, take the first and
    // the last.
    let term = Term::new(40, 120);
    let mut session = term.spawn(&s, &["apply", &id, "--interactive"]);
    session.expect("[y,n,s,q,?]? ");
    session.type_in("?\n");
    session.expect("s - split");
    session.type_in("s\n");
    session.expect("split into 3 hunks");
    session.type_in("y\n");
    session.expect("+L5");
    session.type_in("n\n");
    session.expect("+L11");
    session.type_in("y\n");
    let (status, screen) = session.finish();
    assert!(status.success(), "{screen}");
    assert!(screen.contains("2 of 3 hunks applied"), "{screen}");
    assert_eq!(
        read(&s, "f.txt"),
        TWELVE.replace("l2\n", "L2\n").replace("l11\n", "L11\n")
    );
    // Without a terminal it refuses with the non-interactive way.
    let out = s.cmd().args(["apply", &id, "-i"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hunks"));
}

#[test]
fn merge_applies_a_clean_merge_and_refuses_or_marks_a_conflicting_one() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("clean.txt", TWELVE);
    s.write("clash.txt", TWELVE);
    let id = run(&s, "sed -i 's/^l2$/L2/' clean.txt clash.txt");
    // The host edits both files after the run: another line of one, the same line of the
    // other.
    let clean_host = TWELVE.replace("l11\n", "host11\n");
    let clash_host = TWELVE.replace("l2\n", "host2\n");
    s.write("clean.txt", &clean_host);
    s.write("clash.txt", &clash_host);

    let plain = s.cmd().args(["apply", &id]).output().unwrap();
    assert_eq!(plain.status.code(), Some(3));
    // A conflicting merge refuses the batch, shows the lines, writes nothing.
    let out = s.cmd().args(["apply", &id, "--merge"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not merged clash.txt"), "{err}");
    assert!(err.contains("< host2") && err.contains("> L2"), "{err}");
    assert_eq!(read(&s, "clean.txt"), clean_host);
    assert_eq!(read(&s, "clash.txt"), clash_host);
    let j = json_of(
        &s.cmd()
            .args(["--json", "apply", &id, "--merge"])
            .output()
            .unwrap(),
    );
    assert_eq!(j["not_merged"][0]["path"], "clash.txt", "{j}");

    // The clean one alone merges.
    let text = ok(&s
        .cmd()
        .args(["apply", &id, "--merge", "--exclude", "clash.txt"])
        .output()
        .unwrap());
    assert!(text.contains("merged with the host's edits"), "{text}");
    assert_eq!(
        read(&s, "clean.txt"),
        TWELVE.replace("l2\n", "L2\n").replace("l11\n", "host11\n")
    );
    // The review of what remains says how the merged path went in.
    let text = review(&s, &id);
    assert!(
        text.contains("clean.txt  (merged with the host's edits)"),
        "{text}"
    );
    // Markers: both sides written, the job done.
    ok(&s
        .cmd()
        .args(["apply", &id, "--merge=markers"])
        .output()
        .unwrap());
    assert_eq!(
        read(&s, "clash.txt"),
        TWELVE.replace("l2\n", "<<<<<<< host\nhost2\n=======\nL2\n>>>>>>> staged\n")
    );
    assert_eq!(state(&s, &id), "applied");
    let trace = apply_paths(&s, &id);
    assert!(trace.contains(&"clean.txt merged".to_owned()), "{trace:?}");
    assert!(
        trace.contains(&"clash.txt merged_with_markers".to_owned()),
        "{trace:?}"
    );
}

#[test]
fn binary_files_and_mode_changes_still_refuse_a_merge() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    std::fs::write(s.work.path().join("b.bin"), b"\0one\n").unwrap();
    s.write("m.txt", TWELVE);
    let id = run(&s, "printf '\\0two\\n' > b.bin; sed -i 's/^l2$/L2/' m.txt");
    std::fs::write(s.work.path().join("b.bin"), b"\0host\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        s.work.path().join("m.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let out = s
        .cmd()
        .args(["apply", &id, "--merge=markers"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not merged b.bin"), "{err}");
    assert!(err.contains("not merged m.txt"), "{err}");
    assert_eq!(
        std::fs::read(s.work.path().join("b.bin")).unwrap(),
        b"\0host\n"
    );
}

#[test]
fn a_hunk_apply_killed_at_any_step_leaves_the_file_old_or_new_and_the_record_right() {
    if !sealed_host() {
        return;
    }
    let half = TWELVE.replace("l11\n", "L11\n");
    for (at, written) in [
        ("prepare:1", false),
        ("committing", false),
        ("commit:1", true),
        ("synced", true),
    ] {
        let (s, id, ids) = two_hunks();
        let out = s
            .cmd()
            .env("COFFERDAM_TEST_APPLY_KILL_AT", at)
            .args(["apply", &id, "--hunks", &ids[1]])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{at}: the hook did not kill it");
        let now = read(&s, "f.txt");
        assert!(now == TWELVE || now == half, "{at}: torn file {now:?}");
        // The next command finishes the batch's bookkeeping: the hunk is recorded as
        // applied exactly when it was written, and the rest is still staged.
        ok(&s.cmd().args(["apply", &id, "--dry-run"]).output().unwrap());
        ok(&s
            .cmd()
            .args(["apply", &id, "--hunks", &ids[0], "--dry-run"])
            .output()
            .unwrap());
        let text = ok(&s
            .cmd()
            .args(["apply", &id, "--hunks", &ids[0]])
            .output()
            .unwrap());
        let left = hunk_ids(&s, &id, "f.txt");
        if written {
            assert_eq!(
                read(&s, "f.txt"),
                half.replace("l2\n", "L2\n"),
                "{at}: {text}"
            );
            assert!(left.is_empty(), "{at}: {left:?}");
            assert_eq!(state(&s, &id), "applied", "{at}");
        } else {
            assert_eq!(
                read(&s, "f.txt"),
                TWELVE.replace("l2\n", "L2\n"),
                "{at}: {text}"
            );
            assert_eq!(left, vec![ids[1].clone()], "{at}");
        }
    }
}
