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
    let out = s
        .cmd()
        .args([
            "run", "--json", "--tier", "scoped", "--", "sh", "-c", script,
        ])
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
