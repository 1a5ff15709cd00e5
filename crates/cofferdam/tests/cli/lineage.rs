//! Forks and inspect (issue 21), driven through the real binary on the sealed tier:
//! run → checkpoint → fork → inspect → apply of the fork, and a sibling fork from the same
//! checkpoint whose apply then conflicts; a host edit made after the parent looked is a
//! conflict for the fork (inherited fingerprints); a parent applied after its child, a
//! parent dropped with a live child; usage errors.

use crate::common::*;
use crate::housekeeping::run_in;
use cofferdam_testkit::require;
use serde_json::Value;
use std::path::Path;

fn sealed() -> bool {
    require("user namespaces (sealed tier)", userns_independently())
}

fn err(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `cofferdam --json ARGS…`, which must succeed; its JSON.
fn ok_json(s: &Sandbox, args: &[&str]) -> Value {
    let out = s.cmd().arg("--json").args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", err(&out));
    json_of(&out)
}

/// `fork`/`inspect` (`verb`) of `parent` with `extra` flags running `script`: the exit code
/// and the JSON summary.
fn fork(s: &Sandbox, verb: &str, parent: &str, extra: &[&str], script: &str) -> (i32, Value) {
    let out = s
        .cmd()
        .arg("--json")
        .args([verb, parent])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || verb == "inspect",
        "{verb} {parent} {extra:?}: {}",
        err(&out)
    );
    (code, json_of(&out))
}

fn bundle(s: &Sandbox, job: &str) -> Value {
    ok_json(s, &["status", "--review", job])
}

fn changed_paths(review: &Value) -> Vec<String> {
    let mut v: Vec<String> = review["filesystem"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

fn read(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

fn apply(s: &Sandbox, job: &str) -> std::process::Output {
    s.cmd().args(["apply", job]).output().unwrap()
}

#[test]
fn run_checkpoint_fork_inspect_apply_and_a_sibling_conflicts() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    s.write("a.txt", "host\n");
    s.write("k.txt", "kept by the host\n");
    let parent = run_in(
        &s,
        w,
        "echo parent > a.txt; echo p > p.txt; rm k.txt; mkdir d; echo x > d/x",
    );
    let made = ok_json(&s, &["checkpoint", "create", &parent, "--name", "base"]);
    let ckpt = made["id"].as_str().unwrap().to_owned();

    // The fork sees the parent's staged result over the host.
    let (_, f1) = fork(
        &s,
        "fork",
        &parent,
        &["--checkpoint", "base"],
        "test \"$(cat a.txt)\" = parent && test -f p.txt && test ! -e k.txt && \
         test -f d/x && echo f1 > f1.txt",
    );
    let f1 = f1["job"].as_str().unwrap().to_owned();
    let b = bundle(&s, &f1);
    assert_eq!(b["lineage"]["parent_run_id"], parent.as_str(), "{b}");
    assert_eq!(b["lineage"]["checkpoint_id"], ckpt.as_str(), "{b}");
    assert_eq!(b["run"]["parent_run_id"], parent.as_str(), "{b}");
    // Reviewed against the host: the parent's changes are part of what applying brings.
    assert_eq!(
        changed_paths(&b),
        ["a.txt", "d", "d/x", "f1.txt", "k.txt", "p.txt"],
        "{b}"
    );
    // The parent is untouched by its fork.
    assert_eq!(
        changed_paths(&bundle(&s, &parent)),
        ["a.txt", "d", "d/x", "k.txt", "p.txt"]
    );

    // Inspect the fork: its view, the command's exit code, and its writes discarded.
    let (code, ins) = fork(
        &s,
        "inspect",
        &f1,
        &[],
        "test \"$(cat f1.txt)\" = f1 && test \"$(cat a.txt)\" = parent && echo junk > junk \
         && rm f1.txt && exit 7",
    );
    assert_eq!(code, 7, "{ins}");
    assert_eq!(ins["discarded"], true, "{ins}");
    let inspected = ins["job"].as_str().unwrap();
    let st = ok_json(&s, &["status", inspected]);
    assert_eq!(st["review_context"]["job_state"], "discarded");
    assert_eq!(
        changed_paths(&bundle(&s, &f1)),
        ["a.txt", "d", "d/x", "f1.txt", "k.txt", "p.txt"],
        "the inspection changed the fork"
    );
    // Inspect made its own checkpoint of the fork and removed it with its stage.
    let left = ok_json(&s, &["checkpoint", "list", &f1]);
    assert_eq!(left.as_array().unwrap().len(), 0, "{left}");
    assert!(read(w, "junk").is_none());

    // The second fork from the same checkpoint.
    let (_, f2) = fork(
        &s,
        "fork",
        &parent,
        &["--checkpoint", &ckpt],
        "echo f2 > f2.txt",
    );
    let f2 = f2["job"].as_str().unwrap().to_owned();

    // Apply of the fork brings what it inherits.
    let out = apply(&s, &f1);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(read(w, "a.txt").as_deref(), Some("parent\n"));
    assert_eq!(read(w, "p.txt").as_deref(), Some("p\n"));
    assert_eq!(read(w, "d/x").as_deref(), Some("x\n"));
    assert_eq!(read(w, "f1.txt").as_deref(), Some("f1\n"));
    assert!(read(w, "k.txt").is_none());

    // The sibling's apply checks the host as any apply does, and refuses, writing nothing.
    let out = apply(&s, &f2);
    assert_eq!(out.status.code(), Some(3), "{}", err(&out));
    assert!(err(&out).contains("conflict a.txt"), "{}", err(&out));
    assert!(read(w, "f2.txt").is_none());

    // The parent, applied after its child: its changes are on the host already (with other
    // content under them than it saw), so it refuses like any apply whose host moved.
    let out = apply(&s, &parent);
    assert_eq!(out.status.code(), Some(3), "{}", err(&out));
    assert!(err(&out).contains("conflict a.txt"), "{}", err(&out));
}

#[test]
fn a_host_edit_after_the_parent_ran_is_a_conflict_for_the_fork() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    s.write("a.txt", "host\n");
    let parent = run_in(&s, w, "echo parent > a.txt");
    // The host moves on after the parent looked, before the fork runs.
    s.write("a.txt", "edited on the host\n");
    // `run --on` forks from a new checkpoint of the parent's stage.
    let out = s
        .cmd()
        .args(["--json", "run", "--on", &parent, "--", "sh", "-c"])
        .arg("test \"$(cat a.txt)\" = parent && echo b > b.txt")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", err(&out));
    let child = json_of(&out)["job"].as_str().unwrap().to_owned();
    assert_eq!(
        ok_json(&s, &["checkpoint", "list", &parent])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let out = apply(&s, &child);
    assert_eq!(out.status.code(), Some(3), "{}", err(&out));
    assert!(err(&out).contains("conflict a.txt"), "{}", err(&out));
    assert_eq!(read(w, "a.txt").as_deref(), Some("edited on the host\n"));
    assert!(read(w, "b.txt").is_none());
}

#[test]
fn a_parent_dropped_with_a_live_child_leaves_the_child_whole() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    let parent = run_in(&s, w, "echo p > p.txt");
    let (_, child) = fork(&s, "fork", &parent, &[], "echo c > c.txt");
    let child = child["job"].as_str().unwrap().to_owned();
    let out = s.cmd().args(["drop", &parent]).output().unwrap();
    assert!(out.status.success(), "{}", err(&out));
    assert!(
        err(&out).contains(&child),
        "the drop names the live fork: {}",
        err(&out)
    );
    let out = apply(&s, &child);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(read(w, "p.txt").as_deref(), Some("p\n"));
    assert_eq!(read(w, "c.txt").as_deref(), Some("c\n"));
    // A dropped parent cannot be forked again but for its checkpoints.
    let out = s
        .cmd()
        .args(["fork", &parent, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    assert!(err(&out).contains("--checkpoint"), "{}", err(&out));
}

#[test]
fn inspect_keep_keeps_a_fork() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let parent = run_in(&s, s.work.path(), "echo p > p.txt");
    let (code, kept) = fork(&s, "inspect", &parent, &["--keep"], "echo t > t.txt");
    assert_eq!(code, 0, "{kept}");
    let kept = kept["job"].as_str().unwrap().to_owned();
    let b = bundle(&s, &kept);
    assert_eq!(b["lineage"]["parent_run_id"], parent.as_str(), "{b}");
    assert_eq!(changed_paths(&b), ["p.txt", "t.txt"], "{b}");
}

#[test]
fn fork_usage_errors_exit_2_before_anything_runs() {
    let s = Sandbox::new();
    let code = |args: &[&str]| {
        let out = s.cmd().args(args).output().unwrap();
        (out.status.code().unwrap(), err(&out))
    };
    let (c, e) = code(&["run", "--checkpoint", "x", "--", "true"]);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("--on"), "{e}");
    // An unknown parent is "not found", as for every command that takes a job.
    let (c, e) = code(&["fork", "no-such-job", "--", "true"]);
    assert_eq!(c, 4, "{e}");
    if !sealed() {
        return;
    }
    let parent = run_in(&s, s.work.path(), "echo p > p.txt");
    let (c, e) = code(&["fork", &parent, "--keep", "--", "true"]);
    assert_eq!(c, 2, "{e}");
    let (c, e) = code(&["fork", &parent, "--on", &parent, "--", "true"]);
    assert_eq!(c, 2, "{e}");
    let (c, e) = code(&["fork", &parent, "--checkpoint", "nope", "--", "true"]);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("checkpoint list"), "{e}");
    let other = tempfile::tempdir().unwrap();
    let dir = other.path().to_str().unwrap();
    let (c, e) = code(&["fork", &parent, "--workdir", dir, "--", "true"]);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("parent's workdir"), "{e}");
    assert_eq!(ok_json(&s, &["jobs"]).as_array().map(Vec::len), Some(1));
}

#[test]
fn diff_against_parent_lists_only_what_the_fork_did() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    for name in ["a.txt", "h.txt"] {
        s.write(name, "host\n");
    }
    let parent = run_in(
        &s,
        s.work.path(),
        "echo parent > a.txt; echo p > p.txt; echo same > s.txt",
    );
    let (_, child) = fork(
        &s,
        "fork",
        &parent,
        &[],
        "echo child > a.txt; rm p.txt; echo new > n.txt; rm h.txt",
    );
    let child = child["job"].as_str().unwrap().to_owned();
    let d = ok_json(&s, &["diff", "--against-parent", &child]);
    assert_eq!(d["parent"], parent.as_str(), "{d}");
    let got: Vec<(String, String)> = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["against_parent"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = [
        ("a.txt", "changed"),
        ("h.txt", "new"),
        ("n.txt", "new"),
        ("p.txt", "reverted"),
    ];
    assert_eq!(got, want.map(|(p, k)| (p.to_owned(), k.to_owned())), "{d}");
    // A job that is no fork has no parent to compare with.
    let out = s
        .cmd()
        .args(["diff", "--against-parent", &parent])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
}

/// `cofferdam --json ARGS… -- sh -c SCRIPT` in the workdir: the output.
fn cli(s: &Sandbox, args: &[&str], script: &str) -> std::process::Output {
    s.cmd()
        .current_dir(s.work.path())
        .arg("--json")
        .args(args)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// The run bundle an `inspect --json` summary names.
fn inspected_bundle(summary: &Value) -> Value {
    let path = summary["bundle"].as_str().unwrap();
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn jobs_count(s: &Sandbox) -> usize {
    ok_json(s, &["jobs"]).as_array().map_or(0, Vec::len)
}

#[test]
fn inspect_runs_with_the_jobs_grants_and_its_flags_only_narrow() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let lent = tempfile::tempdir().unwrap();
    std::fs::write(lent.path().join("f"), "lent\n").unwrap();
    let mount = format!("{}:/mnt/lent:read", lent.path().display());
    let out = cli(
        &s,
        &[
            "run",
            "--mount",
            &mount,
            "--allow-net",
            "example.org:443",
            "--memory",
            "1GiB",
        ],
        "cat /mnt/lent/f > seen",
    );
    assert!(out.status.success(), "{}", err(&out));
    let parent = json_of(&out)["job"].as_str().unwrap().to_owned();

    // No flags: the job's mount, allowlist and limit, not `run`'s defaults.
    let out = cli(&s, &["inspect", &parent], "cat /mnt/lent/f");
    assert!(out.status.success(), "{}", err(&out));
    let b = inspected_bundle(&json_of(&out));
    assert_eq!(b["network"]["policy"]["mode"], "allow", "{b}");
    assert_eq!(
        b["network"]["policy"]["allow"],
        serde_json::json!(["example.org:443"]),
        "{b}"
    );
    let mounts = &b["filesystem"]["access_policy"]["mounts"];
    assert_eq!(mounts.as_array().map(Vec::len), Some(1), "{b}");
    assert_eq!(mounts[0]["target"], "/mnt/lent", "{b}");
    assert_eq!(mounts[0]["mode"], "read", "{b}");
    assert_eq!(
        b["resources"]["requested"]["memory_bytes"],
        1u64 << 30,
        "{b}"
    );
    // `inspect --keep` too.
    let out = cli(&s, &["inspect", "--keep", &parent], "cat /mnt/lent/f");
    assert!(out.status.success(), "{}", err(&out));
    let kept = json_of(&out)["job"].as_str().unwrap().to_owned();
    let b = bundle(&s, &kept);
    assert_eq!(b["network"]["policy"]["mode"], "allow", "{b}");
    assert_eq!(
        b["filesystem"]["access_policy"]["mounts"][0]["target"], "/mnt/lent",
        "{b}"
    );

    // A narrowing flag is honoured; the rest stays the job's.
    let out = cli(
        &s,
        &[
            "inspect",
            &parent,
            "--network",
            "none",
            "--memory",
            "512MiB",
        ],
        "cat /mnt/lent/f",
    );
    assert!(out.status.success(), "{}", err(&out));
    let b = inspected_bundle(&json_of(&out));
    assert_eq!(b["network"]["policy"]["mode"], "none", "{b}");
    assert_eq!(
        b["resources"]["requested"]["memory_bytes"],
        512u64 << 20,
        "{b}"
    );
    assert_eq!(
        b["filesystem"]["access_policy"]["mounts"][0]["target"], "/mnt/lent",
        "{b}"
    );

    // Widening flags are refused, by key, before anything is made.
    let before = jobs_count(&s);
    let checkpoints = || {
        ok_json(&s, &["checkpoint", "list", &parent])
            .as_array()
            .map_or(0, Vec::len)
    };
    // The one `inspect --keep`'s fork starts from.
    let kept_checkpoints = checkpoints();
    let other = tempfile::tempdir().unwrap();
    let wider = format!("{}:/mnt/other:read", other.path().display());
    let write = format!("{}:/mnt/lent:write", lent.path().display());
    for (flags, key) in [
        (vec!["--allow-net", "other.org"], "--allow-net"),
        (vec!["--mount", wider.as_str()], "--mount"),
        (vec!["--mount", write.as_str()], "--mount"),
        (vec!["--memory", "2GiB"], "--memory"),
        (vec!["--network", "host"], "--network"),
    ] {
        let mut args = vec!["inspect", parent.as_str()];
        args.extend(flags.iter().copied());
        let out = cli(&s, &args, "true");
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {}", err(&out));
        let e = err(&out);
        assert!(e.contains(&format!("  {key}: ")), "{flags:?}: {e}");
        assert!(e.contains("fix:"), "{e}");
    }
    assert_eq!(jobs_count(&s), before, "a refused inspect made no job");
    assert_eq!(checkpoints(), kept_checkpoints, "nor a checkpoint");
}

#[test]
fn a_job_run_without_network_is_not_inspected_with_it() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let out = cli(&s, &["run", "--network", "none"], "echo p > p.txt");
    assert!(out.status.success(), "{}", err(&out));
    let parent = json_of(&out)["job"].as_str().unwrap().to_owned();
    let out = cli(
        &s,
        &[
            "inspect",
            &parent,
            "--network",
            "allow",
            "--allow-net",
            "example.org",
        ],
        "true",
    );
    assert_eq!(out.status.code(), Some(2), "{}", err(&out));
    let e = err(&out);
    assert!(
        e.contains("  --network: opens the network to `allow` where job"),
        "{e}"
    );
    assert!(
        e.contains("  --allow-net: adds destinations example.org:80,443"),
        "{e}"
    );
    assert!(e.contains(&format!("cofferdam fork {parent}")), "{e}");
    // `fork` is a run of the user's own: its flags may widen.
    let out = cli(
        &s,
        &["fork", &parent, "--allow-net", "example.org"],
        "test -f p.txt",
    );
    assert!(out.status.success(), "{}", err(&out));
    let b = bundle(&s, json_of(&out)["job"].as_str().unwrap());
    assert_eq!(b["network"]["policy"]["mode"], "allow", "{b}");
}

/// `cofferdam status --review JOB` as text (no colour, no pager).
fn review_text(s: &Sandbox, job: &str) -> String {
    let out = s
        .cmd()
        .args(["--color", "never", "status", "--review", "--no-pager", job])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", err(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_review_shows_lineage_and_observations_and_unknown_for_null_counters() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let out = cli(&s, &["run", "--allow-net", "example.org:443"], "echo p > p");
    assert!(out.status.success(), "{}", err(&out));
    let summary = json_of(&out);
    let parent = summary["job"].as_str().unwrap().to_owned();
    let (_, child) = fork(&s, "fork", &parent, &["--network", "none"], "echo c > c");
    let child = child["job"].as_str().unwrap().to_owned();

    // The parent: no lineage; the network observed by the driver, the filesystem by the
    // file watch as root (`file_watch.rs`), not as a user.
    let root = rustix::process::geteuid().is_root();
    let v = bundle(&s, &parent);
    assert_eq!(v["review_context"]["lineage"], Value::Null, "{v}");
    let obs = &v["review_context"]["observations"];
    assert_eq!(obs["recorded"], true, "{obs}");
    assert_eq!(obs["network"]["observed"], true, "{obs}");
    assert!(obs["network"]["allowed"].is_u64(), "{obs}");
    if root {
        assert_eq!(obs["filesystem"]["observed"], true, "{obs}");
        assert_eq!(obs["filesystem"]["denied"], Value::Null, "{obs}");
    } else {
        assert_eq!(
            obs["filesystem"],
            serde_json::json!({"observed": false, "allowed": null, "denied": null}),
            "{obs}"
        );
    }
    let text = review_text(&s, &parent);
    assert!(text.contains("\nObservations\n"), "{text}");
    assert!(
        text.contains("  network    0 allowed, 0 denied\n"),
        "{text}"
    );
    if root {
        assert!(
            text.contains("  filesystem 1 allowed, unknown denied\n    p (write)\n"),
            "{text}"
        );
    } else {
        assert!(text.contains("  filesystem not observed\n"), "{text}");
    }
    assert!(!text.contains("  parent    "), "{text}");

    // The fork: its parent and checkpoint, and what the store says of them now.
    let v = bundle(&s, &child);
    let l = &v["review_context"]["lineage"];
    assert_eq!(l["parent_run_id"], parent.as_str(), "{l}");
    assert_eq!(l["checkpoint_id"], v["lineage"]["checkpoint_id"], "{l}");
    assert_eq!(l["parent_state"], "staged", "{l}");
    assert_eq!(l["checkpoint_kept"], true, "{l}");
    assert_eq!(v["review_context"]["observations"]["recorded"], root, "{v}");
    let text = review_text(&s, &child);
    assert!(
        text.contains(&format!("  parent    {parent} (stage staged)\n")),
        "{text}"
    );
    let ckpt = l["checkpoint_id"].as_str().unwrap();
    assert!(
        text.contains(&format!("  from      checkpoint {ckpt} (kept)\n")),
        "{text}"
    );
    assert_eq!(text.contains("none recorded"), !root, "{text}");

    // A counter the mechanism could not keep is `unknown`, never 0.
    let path = summary["bundle"].as_str().unwrap();
    let mut doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    doc["run_observation"]["network"]["allowed"] = Value::Null;
    std::fs::write(path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let text = review_text(&s, &parent);
    assert!(
        text.contains("  network    unknown allowed, 0 denied\n"),
        "{text}"
    );
    let v = bundle(&s, &parent);
    assert_eq!(
        v["review_context"]["observations"]["network"]["allowed"],
        Value::Null
    );
}

/// `checkpoint show --json ID`: whether the checkpoint still has its digest.
fn intact(s: &Sandbox, ckpt: &str) -> bool {
    let out = s
        .cmd()
        .args(["--json", "checkpoint", "show", ckpt])
        .output()
        .unwrap();
    json_of(&out)["intact"] == true
}

fn inode(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p).unwrap().ino()
}

/// A checkpoint's entries are hard links to the stage's (no data copied), and nothing done
/// later changes them: a fork that rewrites, chmods and removes inherited files (they reach
/// it through a read-only overlay layer), the parent's apply (a staged file with other names
/// is copied out, never linked), and the user editing the applied files in place.
#[test]
fn a_checkpoint_shares_the_stages_inodes_and_nothing_later_changes_it() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    s.write("a.txt", "host\n");
    s.write("k.txt", "kept by the host\n");
    let parent = run_in(
        &s,
        w,
        "echo parent >> a.txt; echo n > n.txt; rm k.txt; mkdir d; echo x > d/x; \
         ln -s n.txt l",
    );
    let made = ok_json(&s, &["checkpoint", "create", &parent, "--name", "base"]);
    let ckpt = made["id"].as_str().unwrap().to_owned();
    let counts = &ok_json(&s, &["checkpoint", "show", &ckpt])["counts"];
    assert_eq!(counts["linked_files"], 3, "{counts}");
    assert_eq!(counts["copied_files"], 0, "{counts}");
    let job_dir = s.store.path().join("jobs").join(&parent);
    let ck_upper = job_dir.join("checkpoints").join(&ckpt).join("upper");
    assert_eq!(
        inode(&ck_upper.join("a.txt")),
        inode(&job_dir.join("upper/a.txt"))
    );

    let (_, f) = fork(
        &s,
        "fork",
        &parent,
        &["--checkpoint", "base"],
        "test \"$(cat l)\" = n && echo fork >> a.txt && chmod 600 n.txt && \
         echo more >> n.txt && rm d/x && echo y > d/y",
    );
    let f = f["job"].as_str().unwrap().to_owned();
    assert!(intact(&s, &ckpt), "the fork changed its checkpoint");
    assert_eq!(read(&ck_upper, "a.txt").as_deref(), Some("host\nparent\n"));
    let b = bundle(&s, &f);
    // `d/x` the parent added and the fork removed: no change, and no whiteout left over
    // that would hide nothing.
    assert_eq!(
        changed_paths(&b),
        ["a.txt", "d", "d/y", "k.txt", "l", "n.txt"],
        "{b}"
    );
    assert_eq!(b["run"]["warnings"], serde_json::json!([]), "{b}");
    let overlay = b["executor_observations"]["controls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["mechanism"] == "overlay")
        .unwrap();
    assert!(
        overlay["details"]["inherited"]
            .as_str()
            .unwrap()
            .ends_with("/inherited"),
        "{overlay}"
    );
    assert!(
        !s.store
            .path()
            .join("jobs")
            .join(&f)
            .join("inherited")
            .exists(),
        "the layer was taken into the stage"
    );

    // The parent's apply copies what its checkpoint shares; the user's edits of the
    // applied files then reach neither the checkpoint nor the fork's stage.
    let out = apply(&s, &parent);
    assert!(out.status.success(), "{}", err(&out));
    assert_ne!(inode(&w.join("n.txt")), inode(&ck_upper.join("n.txt")));
    s.write("n.txt", "edited by the user\n");
    let mut a = std::fs::OpenOptions::new()
        .append(true)
        .open(w.join("a.txt"))
        .unwrap();
    std::io::Write::write_all(&mut a, b"appended in place\n").unwrap();
    drop(a);
    assert!(
        intact(&s, &ckpt),
        "an edit of an applied file changed the checkpoint"
    );
    let fork_upper = s.store.path().join("jobs").join(&f).join("upper");
    assert_eq!(read(&fork_upper, "n.txt").as_deref(), Some("n\nmore\n"));
    assert_eq!(read(&fork_upper, "d/x"), None);
}

/// A fork whose supervisor is killed mid-run leaves its inherited layer; the on-demand seal
/// of the interrupted job takes it into the stage, and the fork applies whole.
#[test]
fn an_interrupted_fork_is_sealed_with_what_it_inherited() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    s.write("a.txt", "host\n");
    let parent = run_in(&s, w, "echo parent > a.txt; mkdir d; echo x > d/x");
    let mut child = crate::limits::start(
        &s,
        &[
            "fork",
            &parent,
            "-q",
            "--",
            "sh",
            "-c",
            "echo f > f.txt; sleep 3519",
        ],
        "3519",
    );
    crate::limits::kill(&child, libc::SIGKILL);
    child.wait().unwrap();
    crate::limits::assert_gone("3519", 2);
    let jobs = ok_json(&s, &["jobs"]);
    let f = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .find(|id| *id != parent)
        .unwrap();
    assert!(
        s.store
            .path()
            .join("jobs")
            .join(&f)
            .join("inherited")
            .is_dir()
    );
    let out = apply(&s, &f);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(read(w, "a.txt").as_deref(), Some("parent\n"));
    assert_eq!(read(w, "d/x").as_deref(), Some("x\n"));
    assert_eq!(read(w, "f.txt").as_deref(), Some("f\n"));
    assert!(
        !s.store
            .path()
            .join("jobs")
            .join(&f)
            .join("inherited")
            .exists()
    );
}

fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Read-only directories, the parent's and the fork's own, do not stop the fork's stage
/// from taking in what it inherits (as a user, moving entries needs write on them), and
/// keep their modes through the fork's apply.
#[test]
fn a_fork_over_read_only_directories_seals_and_applies_with_their_modes() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    let parent = run_in(
        &s,
        w,
        "mkdir -p d/e r; echo x > d/e/x; echo a > r/a; echo b > r/b; chmod 555 d/e d",
    );
    let (_, f) = fork(&s, "fork", &parent, &[], "echo forked > f && chmod 555 r");
    let f = f["job"].as_str().unwrap().to_owned();
    assert_eq!(
        changed_paths(&bundle(&s, &f)),
        ["d", "d/e", "d/e/x", "f", "r", "r/a", "r/b"]
    );
    let out = apply(&s, &f);
    assert!(out.status.success(), "{}", err(&out));
    assert_eq!(read(w, "d/e/x").as_deref(), Some("x\n"));
    assert_eq!(read(w, "r/b").as_deref(), Some("b\n"));
    assert_eq!(
        [
            mode_of(&w.join("d")),
            mode_of(&w.join("d/e")),
            mode_of(&w.join("r"))
        ],
        [0o555, 0o555, 0o555]
    );
    for d in ["d/e", "d", "r"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(w.join(d), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A path discarded with `drop --path` stays discarded in a fork: the fork's checkpoint
/// leaves it out, so the fork sees the host's and does not stage it again.
#[test]
fn a_fork_does_not_bring_back_what_drop_path_discarded() {
    if !sealed() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    s.write("h.txt", "host\n");
    let parent = run_in(&s, w, "echo a > a.txt; echo b > b.txt; echo staged > h.txt");
    let out = s
        .cmd()
        .args(["drop", &parent, "--path", "b.txt", "--path", "h.txt"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", err(&out));
    let (_, f) = fork(
        &s,
        "fork",
        &parent,
        &[],
        "test -f a.txt && test ! -e b.txt && test \"$(cat h.txt)\" = host",
    );
    let f = f["job"].as_str().unwrap().to_owned();
    assert_eq!(changed_paths(&bundle(&s, &f)), ["a.txt"]);
}
