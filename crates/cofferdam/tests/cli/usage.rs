//! Usage errors of `run` (issue 20): each exits 2 with a message naming the fix, before
//! anything runs and before a job is made; values that run but likely mislead warn.

use crate::common::*;

fn jobs_in(s: &Sandbox) -> usize {
    std::fs::read_dir(s.store.path().join("jobs")).map_or(0, |d| d.count())
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn usage_errors_exit_2_and_leave_no_job() {
    let s = Sandbox::new();
    let outside = tempfile::tempdir().unwrap();
    let full = outside.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("f"), "x").unwrap();
    let file = s.write("a-file", "x");
    let inside = s.work.path().join("st");
    let missing = outside.path().join("missing");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--workdir".into(), file.display().to_string()],
            "not a directory",
        ),
        (
            vec!["--workdir".into(), missing.display().to_string()],
            "No such file",
        ),
        (
            vec!["--stage".into(), full.display().to_string()],
            "is not empty",
        ),
        (
            vec!["--stage".into(), file.display().to_string()],
            "is not a directory",
        ),
        (
            vec!["--stage".into(), inside.display().to_string()],
            "inside the workdir",
        ),
        (vec!["--memory".into(), "4".into()], "at least 16MiB"),
        (vec!["--memory".into(), "15MiB".into()], "at least 16MiB"),
        (vec!["--pids".into(), "1".into()], "at least 8"),
        (vec!["--open-files".into(), "2".into()], "at least 16"),
        (vec!["--tmp-size".into(), "4KiB".into()], "at least 1MiB"),
        (vec!["--stage-size".into(), "1".into()], "at least 1MiB"),
        (
            vec!["--mount".into(), missing.display().to_string()],
            "create it, drop the mount, or make it optional",
        ),
        (
            vec!["--mount".into(), format!("{}:/x:write", missing.display())],
            "cannot be used",
        ),
    ];
    for (args, says) in cases {
        let out = s
            .cmd()
            .arg("run")
            .args(&args)
            .args(["--", "sh", "-c", "echo ran > ran"])
            .output()
            .unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: wants {says:?}: {err}");
        assert_eq!(jobs_in(&s), 0, "{args:?} left a job");
        assert!(!s.work.path().join("ran").exists(), "{args:?} ran");
        assert!(!inside.exists(), "{args:?} created the inside stage");
    }
    // `drop`/`diff` have nothing to be confused by, and a manifest's value is checked too.
    s.write("cofferdam.toml", "[resources]\nmemory = \"1MiB\"\n");
    let out = s.cmd().args(["run", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("16MiB"), "{}", stderr_of(&out));
    assert_eq!(jobs_in(&s), 0);
}

#[test]
fn the_minimums_themselves_run() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--memory", "16MiB", "--pids", "8"])
        .args([
            "--open-files",
            "16",
            "--tmp-size",
            "1MiB",
            "--stage-size",
            "1MiB",
        ])
        .args(["--", "sh", "-c", "echo a | cat > out"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let out = s.cmd().args(["diff", "--stat"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("out"));
}

#[test]
fn misleading_values_warn_and_run() {
    let s = Sandbox::new();
    let cpus = std::thread::available_parallelism().unwrap().get() + 7;
    let out = s
        .cmd()
        .args(["run", "-q", "--cpus", &cpus.to_string()])
        .args(["--read-only", "no-such-sub", "--allow-net", "*.com"])
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("warning: --cpus {cpus}")) && err.contains("never binds"),
        "{err}"
    );
    assert!(
        err.contains("warning: --read-only no-such-sub: no such path"),
        "{err}"
    );
    assert!(err.contains("warning: allow entry *.com"), "{err}");
    // Narrow values say nothing.
    std::fs::create_dir(s.work.path().join("sub")).unwrap();
    let out = s
        .cmd()
        .args(["run", "-q", "--cpus", "1", "--read-only", "sub"])
        .args(["--allow-net", "*.example.com", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = stderr_of(&out);
    for said in ["--cpus 1", "--read-only", "allow entry"] {
        assert!(!err.contains(&format!("warning: {said}")), "{err}");
    }
}

#[test]
fn an_exclude_that_matches_nothing_warns() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c", "echo a > a.txt"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let out = s
        .cmd()
        .args(["apply", "last", "--dry-run", "--exclude", "*.log"])
        .args(["--exclude", "*.txt"])
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert!(
        err.contains("warning: --exclude *.log matches no staged change"),
        "{err}"
    );
    assert!(!err.contains("--exclude *.txt matches"), "{err}");
}

#[test]
fn a_relative_cofferdam_home_is_refused_and_documented() {
    let s = Sandbox::new();
    for args in [&["jobs"][..], &["run", "--", "true"], &["status"]] {
        let out = s
            .cmd()
            .env("COFFERDAM_HOME", "rel/store")
            .args(args)
            .output()
            .unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("COFFERDAM_HOME=rel/store is not an absolute path"),
            "{err}"
        );
        assert!(!s.work.path().join("rel").exists());
    }
    // Documented where the other variables are: --help, the man page, the README.
    let help = s.cmd().arg("--help").output().unwrap();
    let man = s.cmd().arg("man").output().unwrap();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    for (what, text) in [
        ("--help", String::from_utf8_lossy(&help.stdout).into_owned()),
        ("man", String::from_utf8_lossy(&man.stdout).into_owned()),
        ("README", readme),
    ] {
        for var in ["COFFERDAM_HOME", "XDG_DATA_HOME", "NO_COLOR", "TMPDIR"] {
            assert!(text.contains(var), "{what} lacks {var}");
        }
        assert!(text.contains("absolute"), "{what}");
    }
}
