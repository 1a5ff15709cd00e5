//! A full disk during a run and during an apply, on a small tmpfs. Mounting needs a mount
//! namespace: the outer tests re-run this binary under `unshare -m` (root) or
//! `unshare -Urm` (an unprivileged user becomes root of a new user namespace, where it may
//! mount a tmpfs), selecting one `in_namespace_*` test; those return at once when not
//! started that way.

use crate::common::{require, userns_independently};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const INNER: &str = "COFFERDAM_ESCAPE_FULL_DISK";

/// Run test `name` of this binary inside a new mount namespace; assert it passed there.
fn in_namespace(name: &str) {
    if !require("unprivileged user namespaces", userns_independently()) {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ns: &[&str] = if root { &["-m"] } else { &["-U", "-r", "-m"] };
    let out = Command::new("unshare")
        .args(ns)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .output()
        .unwrap();
    let text = crate::harness::both(&out);
    assert!(out.status.success(), "{name} in a mount namespace:\n{text}");
    assert!(
        text.contains("1 passed"),
        "{name} did not run in the namespace:\n{text}"
    );
    print!("{text}");
}

struct World {
    _base: tempfile::TempDir,
    work: PathBuf,
    store: PathBuf,
    home: PathBuf,
}

impl World {
    /// [`World::new`] when started by [`in_namespace`], else `None`.
    fn inside(small: &str, size: &str) -> Option<World> {
        std::env::var_os(INNER).map(|_| World::new(small, size))
    }

    /// `work`, `store` and `home` under one temp dir; `small` (one of them) becomes a tmpfs
    /// of `size`.
    fn new(small: &str, size: &str) -> World {
        let base = tempfile::tempdir().unwrap();
        let p = |n: &str| base.path().join(n);
        for n in ["work", "store", "home"] {
            std::fs::create_dir(p(n)).unwrap();
        }
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "none",
            ])
            .arg(p(small))
            .status()
            .unwrap();
        assert!(st.success(), "mount a tmpfs");
        World {
            work: p("work"),
            store: p("store"),
            home: p("home"),
            _base: base,
        }
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("cofferdam"));
        c.env_clear()
            .env("HOME", &self.home)
            .env("COFFERDAM_HOME", &self.store)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&self.work);
        c
    }

    fn out(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// `run --json -- sh -c script`.
    fn run(&self, script: &str) -> Output {
        self.out(&["run", "--json", "--", "sh", "-c", script])
    }

    fn status(&self, job: &str) -> Value {
        let out = self.out(&["status", "--json", job]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every line of `trace.jsonl` is a whole JSON object.
fn trace_is_whole(job_dir: &Path) {
    let text = std::fs::read_to_string(job_dir.join("trace.jsonl")).unwrap();
    let tail: String = text
        .chars()
        .rev()
        .take(300)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    assert!(text.ends_with('\n'), "torn trace tail: …{tail}");
    for l in text.lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("torn trace line {l}: {e}"));
    }
}

#[test]
fn full_disk_during_a_run() {
    in_namespace("full_disk::in_namespace_full_store_during_a_run");
}

#[test]
fn full_store_after_a_run() {
    in_namespace("full_disk::in_namespace_full_store_after_a_run");
}

#[test]
fn full_disk_during_an_apply() {
    in_namespace("full_disk::in_namespace_full_workdir_during_an_apply");
}

/// The command fills the job store's filesystem: it sees ENOSPC, the run still ends
/// `staged` with whole records (the reserve), says why, exits with the command's code, and
/// the stage is reviewable and appliable.
#[test]
fn in_namespace_full_store_during_a_run() {
    let Some(w) = World::inside("store", "3m") else {
        return;
    };
    std::fs::write(w.work.join("a"), "old\n").unwrap();
    let out = w.run("echo new > a; echo keep > keep; head -c 8000000 /dev/zero > big || exit 28");
    let err = stderr(&out);
    // README: `run` exits with the command's own code.
    assert_eq!(out.status.code(), Some(28), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        err.contains("was full when the command ended"),
        "no clear cause: {err}"
    );
    assert_eq!(std::fs::read_to_string(w.work.join("a")).unwrap(), "old\n");
    let job = crate::harness::job_of(&out);
    let b = w.status(&job);
    assert_eq!(b["review_context"]["job_state"], "staged", "{b}");
    assert_eq!(b["run"]["exit_code"], 28);
    assert!(b["run"]["warnings"].to_string().contains("was full"), "{b}");
    let mut paths: Vec<&str> = b["filesystem"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    paths.sort_unstable();
    assert_eq!(paths, vec!["a", "big", "keep"], "nothing staged is lost");
    let job_dir = PathBuf::from(b["review_context"]["job_dir"].as_str().unwrap());
    trace_is_whole(&job_dir);
    assert!(
        !job_dir.join("reserve").exists(),
        "the reserve was not released"
    );
    let verify = w.out(&[
        "bundle",
        "verify",
        b["review_context"]["bundle_path"].as_str().unwrap(),
    ]);
    assert!(verify.status.success(), "{verify:?}");
    let review = w.out(&["status", "--review", &job]);
    assert!(review.status.success(), "{review:?}");
    // The workdir is on another filesystem with room: apply finishes.
    let apply = w.out(&["apply", &job]);
    assert!(apply.status.success(), "{}", stderr(&apply));
    assert_eq!(std::fs::read_to_string(w.work.join("a")).unwrap(), "new\n");
    assert_eq!(
        std::fs::read_to_string(w.work.join("keep")).unwrap(),
        "keep\n"
    );
    println!("full store during a run: exit 28, staged, records whole, applied afterwards");
}

/// The store fills after a run (something else wrote it full): a new run exits 125 naming
/// the cause and leaves no job; the staged job stays reviewable, and `drop` still works (its
/// state write has the drop reserve) and frees the stage.
#[test]
fn in_namespace_full_store_after_a_run() {
    let Some(w) = World::inside("store", "3m") else {
        return;
    };
    let out = w.run("head -c 300000 /dev/urandom > staged");
    assert!(out.status.success(), "{}", stderr(&out));
    let job = crate::harness::job_of(&out);
    let filler = w.store.join("filler");
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!("head -c 8000000 /dev/zero > {}", filler.display()))
        .status();
    let st = free_bytes(&w.store);
    assert!(st < 64 * 1024, "the store is not full: {st} bytes free");

    let out = w.out(&["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(stderr(&out).contains("No space left on device"), "{out:?}");
    let jobs: Value = serde_json::from_slice(&w.out(&["jobs", "--json"]).stdout).unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs}");

    assert!(w.out(&["status", "--review", &job]).status.success());
    let drop = w.out(&["drop", &job]);
    assert!(
        drop.status.success(),
        "drop on a full store: {}",
        stderr(&drop)
    );
    assert_eq!(w.status(&job)["review_context"]["job_state"], "discarded");
    assert!(free_bytes(&w.store) > st, "the drop freed nothing");
    println!("full store after a run: run refused with 125, drop worked and freed the stage");
}

/// Bytes available on the filesystem holding `dir` (`df` in 1K blocks).
fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["-k", "--output=avail"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// The workdir's filesystem fills during apply: exit 125 naming the cause, nothing written
/// (every file wholly old), no temporaries left, the job still staged and reviewable; with
/// space freed, the next apply finishes.
#[test]
fn in_namespace_full_workdir_during_an_apply() {
    let Some(w) = World::inside("work", "4m") else {
        return;
    };
    std::fs::write(w.work.join("a"), "old\n").unwrap();
    std::fs::write(w.work.join("gone"), "gone\n").unwrap();
    std::fs::write(w.work.join("filler"), vec![0u8; 2_600_000]).unwrap();
    let out =
        w.run("echo new > a; rm gone; mkdir d; echo c > d/c; head -c 2000000 /dev/urandom > big");
    assert!(out.status.success(), "{}", stderr(&out));
    let job = crate::harness::job_of(&out);

    let apply = w.out(&["apply", &job]);
    let err = stderr(&apply);
    assert_eq!(
        apply.status.code(),
        Some(125),
        "README: a failed write is 125: {err}"
    );
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("run `cofferdam apply` again"), "{err}");
    let mut names: Vec<String> = std::fs::read_dir(&w.work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["a", "filler", "gone"], "stray or partial names");
    assert_eq!(std::fs::read_to_string(w.work.join("a")).unwrap(), "old\n");
    assert_eq!(
        std::fs::read_to_string(w.work.join("gone")).unwrap(),
        "gone\n"
    );
    let b = w.status(&job);
    assert_eq!(b["review_context"]["job_state"], "staged", "{b}");
    assert!(w.out(&["status", "--review", &job]).status.success());
    assert!(w.out(&["diff", &job, "--stat"]).status.success());

    std::fs::remove_file(w.work.join("filler")).unwrap();
    let again = w.out(&["apply", &job]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(w.work.join("a")).unwrap(), "new\n");
    assert_eq!(std::fs::read_to_string(w.work.join("d/c")).unwrap(), "c\n");
    assert_eq!(
        std::fs::metadata(w.work.join("big")).unwrap().len(),
        2_000_000
    );
    assert!(!w.work.join("gone").exists());
    assert_eq!(w.status(&job)["review_context"]["job_state"], "applied");
    println!("full workdir during apply: exit 125, nothing written, finished after freeing space");
}

/// A trace append that fails part-way (here RLIMIT_FSIZE stands in for a full disk: the
/// write stops at the limit, deterministically mid-line) is cut back off, so the trace
/// stays whole lines and later appends stay readable.
#[test]
fn a_trace_line_written_part_way_is_cut_back() {
    if !require("unprivileged user namespaces", userns_independently()) {
        return;
    }
    let ctx = crate::harness::Ctx::new(&crate::harness::TIERS[0]);
    std::fs::write(ctx.work().join("a"), "old\n").unwrap();
    let r = ctx.sh("echo new > a; echo b > b");
    let job_dir = r.bundle_path.parent().unwrap().to_path_buf();
    let len = std::fs::metadata(job_dir.join("trace.jsonl"))
        .unwrap()
        .len();
    // SIGXFSZ ignored (kept across exec): the write returns EFBIG after the partial write.
    let base = ctx.cmd();
    let exe = base.get_program().to_owned();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; exec prlimit --fsize={} \"$0\" apply {}",
            len + 50,
            r.job
        ))
        .arg(&exe)
        .env_clear()
        .envs(
            base.get_envs()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned()))),
        )
        .current_dir(ctx.work())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::harness::both(&out));
    let after = std::fs::metadata(job_dir.join("trace.jsonl"))
        .unwrap()
        .len();
    assert!(after <= len + 50, "the limit did not hold");
    trace_is_whole(&job_dir);
    // Without the limit, appends go on after the last whole line and stay readable.
    let again = ctx.cmd().args(["drop", &r.job]).output().unwrap();
    assert!(again.status.success(), "{}", crate::harness::both(&again));
    trace_is_whole(&job_dir);
}
