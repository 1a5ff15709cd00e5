//! `diff`, `apply` and `drop` against jobs made by real sealed runs: the host after apply
//! equals what the command would have made, conflicts refuse with nothing written, nothing
//! is written through a symlink, a SIGKILL at any instant leaves every file wholly old or
//! wholly new and the next apply finishes, and the job lock keeps commands apart.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command as StdCommand, Output, Stdio};
use std::time::Duration;

/// `Sandbox::cmd` as a plain `std::process::Command`, for spawning.
fn spawnable(s: &Sandbox) -> StdCommand {
    let mut c = StdCommand::new(assert_cmd::cargo::cargo_bin("cofferdam"));
    c.env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path());
    c
}

pub(crate) fn sealed_host() -> bool {
    require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0)
}

/// Type, permission bits (setuid/setgid dropped: apply strips them) and content or link
/// target of every entry, keyed by path bytes.
pub(crate) type Tree = BTreeMap<Vec<u8>, (char, u32, Vec<u8>)>;

pub(crate) fn tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .as_os_str()
                .as_bytes()
                .to_vec();
            let m = e.path().symlink_metadata().unwrap();
            let ft = m.file_type();
            let mode = m.mode() & 0o1777;
            let v = if ft.is_dir() {
                stack.push(e.path());
                ('d', mode, Vec::new())
            } else if ft.is_symlink() {
                (
                    'l',
                    0,
                    std::fs::read_link(e.path())
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else if ft.is_fifo() {
                ('p', mode, Vec::new())
            } else {
                ('f', mode, std::fs::read(e.path()).unwrap())
            };
            out.insert(rel, v);
        }
    }
    out
}

pub(crate) fn shown(t: &Tree) -> Vec<String> {
    t.iter()
        .map(|(k, v)| {
            format!(
                "{} {} {:o} {}",
                String::from_utf8_lossy(k),
                v.0,
                v.1,
                String::from_utf8_lossy(&v.2)
            )
        })
        .collect()
}

pub(crate) fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run `script` in the sandbox; the job id.
pub(crate) fn run(s: &Sandbox, script: &str) -> String {
    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let jobs = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
    jobs[0]["id"].as_str().unwrap().to_owned()
}

fn job_json(s: &Sandbox, id: &str) -> Value {
    let jobs = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
    jobs.as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .unwrap()
        .clone()
}

fn trace_events(s: &Sandbox, id: &str) -> Vec<String> {
    let text =
        std::fs::read_to_string(s.store.path().join("jobs").join(id).join("trace.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// What the script makes of the workdir when run directly on a copy of it.
fn expected(s: &Sandbox, script: &str) -> Tree {
    let copy = tempfile::tempdir().unwrap();
    let st = StdCommand::new("cp")
        .arg("-a")
        .arg(format!("{}/.", s.work.path().display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(st.success());
    let st = StdCommand::new("sh")
        .args(["-c", script])
        .current_dir(copy.path())
        .status()
        .unwrap();
    assert!(st.success());
    tree(copy.path())
}

const SETUP: &[(&str, &str)] = &[
    ("keep", "keep\n"),
    ("mod", "one\ntwo\nthree\n"),
    ("del", "delete me\n"),
    ("deldir/a", "a\n"),
    ("deldir/sub/b", "b\n"),
    ("op/z", "z\n"),
    ("op/y", "y\n"),
    ("f2d", "file\n"),
    ("d2f/q", "q\n"),
    ("src/lib.rs", "fn main() {}\n"),
    ("src/old.rs", "old\n"),
    ("dmode/inner", "i\n"),
];

fn setup(s: &Sandbox) {
    for (p, text) in SETUP {
        let path = s.work.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

const AGENT: &str = r#"
printf 'one\nTWO\nthree\nfour\n' > mod
rm del
rm -rf deldir
rm -rf op && mkdir op && echo n > op/n && echo y2 > op/y
rm f2d && mkdir f2d && echo in > f2d/in
rm -rf d2f && echo now-a-file > d2f
chmod 700 dmode && echo x > dmode/new
mkdir -p new/deep/er && echo 1 > new/deep/er/f && ln -s ../keep new/link
ln -s /etc/shadow shadow-link
printf nl > "$(printf 'line\nbreak')"
echo dash > ./-rf
printf b > "$(printf 'bad\377name')"
echo s > suid && chmod 4755 suid
echo 'pub fn f() {}' >> src/lib.rs
rm src/old.rs
"#;

#[test]
fn apply_makes_the_host_what_the_command_made_and_records_it() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    setup(&s);
    let want = expected(&s, AGENT);
    let before = tree(s.work.path());
    let id = run(&s, AGENT);
    assert_eq!(tree(s.work.path()), before, "the run wrote to the host");

    // diff: text as a unified diff, the rest in one line each.
    let d = ok(&s
        .cmd()
        .args(["--color", "never", "diff", &id])
        .output()
        .unwrap());
    for needle in [
        "--- a/mod\n+++ b/mod\n",
        "-two\n+TWO\n",
        "+four\n",
        "new symlink → /etc/shadow",
        "deleted directory, with everything in it",
        "directory replaced whole",
        "setuid/setgid: stripped when applied",
        "diff line\\nbreak",
        "diff bad\\xffname",
    ] {
        assert!(d.contains(needle), "`{needle}` missing from diff:\n{d}");
    }
    let stat = ok(&s
        .cmd()
        .args(["--color", "never", "diff", &id, "--stat"])
        .output()
        .unwrap());
    assert!(
        stat.contains(" mod ") && stat.contains("path(s) changed"),
        "{stat}"
    );
    let dj = json_of(
        &s.cmd()
            .args(["diff", &id, "--json", "--path", "src"])
            .output()
            .unwrap(),
    );
    let paths: Vec<&str> = dj["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, vec!["src/lib.rs", "src/old.rs"]);

    // A dry run writes nothing.
    let dry = ok(&s
        .cmd()
        .args([
            "--color",
            "never",
            "apply",
            &id,
            "--dry-run",
            "--allow-sensitive",
        ])
        .output()
        .unwrap());
    assert!(dry.contains("would apply"), "{dry}");
    assert_eq!(tree(s.work.path()), before);

    let out = s
        .cmd()
        .args(["--color", "never", "apply", &id, "--allow-sensitive"])
        .output()
        .unwrap();
    let text = ok(&out);
    assert!(
        text.contains("suid: setuid/setgid not carried over (4755 → 0755)"),
        "{text}"
    );
    assert!(text.contains("is now `applied`"), "{text}");
    let got = tree(s.work.path());
    assert_eq!(shown(&got), shown(&want));
    assert_eq!(
        std::fs::read_link(s.work.path().join("shadow-link")).unwrap(),
        Path::new("/etc/shadow")
    );
    assert_eq!(
        std::fs::metadata(s.work.path().join("suid"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o755
    );
    assert_eq!(job_json(&s, &id)["state"], "applied");
    let events = trace_events(&s, &id);
    for e in ["apply_started", "apply_path", "apply_finished"] {
        assert!(events.iter().any(|x| x == e), "{e} missing: {events:?}");
    }
    // Nothing left: a second apply says so and succeeds.
    let again = ok(&s.cmd().args(["apply", &id]).output().unwrap());
    assert!(again.contains("nothing left to apply"), "{again}");
}

/// A path that starts with `-` is a value of `--path`, not an option.
#[test]
fn a_path_starting_with_a_dash_is_taken_as_a_path() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    run(&s, "echo a > -n; echo b > other");
    let diff = ok(&s
        .cmd()
        .args(["diff", "last", "--stat", "--path", "-n"])
        .output()
        .unwrap());
    assert!(diff.contains("-n") && !diff.contains("other"), "{diff}");
    ok(&s
        .cmd()
        .args(["apply", "last", "--path", "-n", "--exclude", "-x"])
        .output()
        .unwrap());
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("-n")).unwrap(),
        "a\n"
    );
    assert!(!s.work.path().join("other").exists());
}

#[test]
fn a_path_subset_applies_only_it_then_the_rest() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    setup(&s);
    let want = expected(&s, AGENT);
    let id = run(&s, AGENT);
    let out = s
        .cmd()
        .args(["--color", "never", "apply", "last", "--path", "src"])
        .output()
        .unwrap();
    let text = ok(&out);
    assert!(text.contains("applied 2 path(s)"), "{text}");
    assert!(text.contains("remain staged"), "{text}");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("src/lib.rs")).unwrap(),
        "fn main() {}\npub fn f() {}\n"
    );
    assert!(!s.work.path().join("src/old.rs").exists());
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("mod")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert!(!s.work.path().join("new").exists());
    assert_eq!(job_json(&s, &id)["state"], "staged");

    // A new file deep in a new directory brings its new parents (only).
    let j = json_of(
        &s.cmd()
            .args(["apply", "last", "--json", "--path", "new/deep/er/f"])
            .output()
            .unwrap(),
    );
    let deps: Vec<&str> = j["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(deps, vec!["new", "new/deep", "new/deep/er"]);
    assert!(!s.work.path().join("new/link").exists());
    // A path that is already applied, or was never staged, is a usage error.
    let again = s
        .cmd()
        .args(["apply", "last", "--path", "src"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    let none = s
        .cmd()
        .args(["apply", "last", "--path", "no/such"])
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(
        stderr(&none).contains("no staged change"),
        "{}",
        stderr(&none)
    );

    // --exclude, then the rest.
    ok(&s
        .cmd()
        .args(["apply", "last", "--exclude", "*.rs", "--exclude", "suid"])
        .output()
        .unwrap());
    assert!(!s.work.path().join("suid").exists());
    ok(&s
        .cmd()
        .args(["apply", "last", "--allow-sensitive"])
        .output()
        .unwrap());
    assert_eq!(shown(&tree(s.work.path())), shown(&want));
    assert_eq!(job_json(&s, &id)["state"], "applied");
}

#[test]
fn host_edits_since_the_run_refuse_with_exit_3_and_force_overrides_named_paths() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("edited", "v1\n");
    s.write("removed-by-agent", "original\n");
    let id = run(
        &s,
        "echo agent > edited; rm removed-by-agent; echo agent > created-by-both; echo fine > other",
    );
    std::thread::sleep(Duration::from_millis(30));
    s.write("edited", "user edit\n");
    s.write("removed-by-agent", "user edit\n");
    s.write("created-by-both", "user's own\n");
    let before = tree(s.work.path());

    let out = s
        .cmd()
        .args(["--color", "never", "apply", &id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    for needle in [
        "nothing was written",
        "edited: content changed on the host since the run",
        "removed-by-agent: content changed on the host since the run",
        "created-by-both: a file was created on the host since the run",
        "--force PATH",
    ] {
        assert!(err.contains(needle), "`{needle}` missing:\n{err}");
    }
    assert_eq!(
        tree(s.work.path()),
        before,
        "a refused apply wrote something"
    );
    let j = json_of(&s.cmd().args(["apply", &id, "--json"]).output().unwrap());
    assert_eq!(j["conflicts"].as_array().unwrap().len(), 3);

    // A touch that changes nothing visible is still caught (ctime after the run's start).
    let s2 = Sandbox::new();
    s2.write("same", "same\n");
    run(&s2, "echo changed > same");
    std::thread::sleep(Duration::from_millis(30));
    let p = s2.work.path().join("same");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = s2.cmd().args(["apply", "last"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("after the run started"),
        "{}",
        stderr(&out)
    );

    // --force overrides the named paths only.
    let out = s
        .cmd()
        .args(["apply", &id, "--force", "edited"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(tree(s.work.path()), before);
    let out = s
        .cmd()
        .args([
            "--color",
            "never",
            "apply",
            &id,
            "--force",
            "edited",
            "--force",
            "removed-by-agent",
            "--exclude",
            "created-by-both",
        ])
        .output()
        .unwrap();
    let text = ok(&out);
    assert!(text.contains("forced"), "{text}");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("edited")).unwrap(),
        "agent\n"
    );
    assert!(!s.work.path().join("removed-by-agent").exists());
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("created-by-both")).unwrap(),
        "user's own\n"
    );
    assert_eq!(job_json(&s, &id)["state"], "staged");
}

#[test]
fn a_directory_swapped_for_a_symlink_is_never_written_through() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("keep", "k\n");
    std::fs::create_dir(s.work.path().join("dir")).unwrap();
    s.write("dir/file", "old\n");
    let id = run(
        &s,
        "echo new > dir/file; echo added > dir/added; mkdir dir/sub; echo x > dir/sub/x",
    );
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::rename(s.work.path().join("dir"), elsewhere.path().join("dir")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("dir"), s.work.path().join("dir")).unwrap();
    let outside_before = tree(elsewhere.path());
    let before = tree(s.work.path());
    for extra in [&[][..], &["--force", "dir"][..]] {
        let out = s
            .cmd()
            .args(["--color", "never", "apply", &id])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert!(stderr(&out).contains("symlink"), "{}", stderr(&out));
        assert_eq!(
            tree(elsewhere.path()),
            outside_before,
            "written outside the target"
        );
        assert_eq!(tree(s.work.path()), before);
    }
}

#[test]
fn setuid_is_stripped_a_fifo_is_refused_and_a_shadow_symlink_stays_a_symlink() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    run(
        &s,
        "echo s > tool; chmod 6755 tool; mkfifo pipe; ln -s /etc/shadow link",
    );
    let out = s
        .cmd()
        .args(["--color", "never", "apply", "last"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pipe: a staged fifo"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("--allow-special"));
    assert!(
        !s.work.path().join("tool").exists(),
        "a refused apply wrote something"
    );

    let text = ok(&s
        .cmd()
        .args([
            "--color",
            "never",
            "apply",
            "last",
            "--allow-special",
            "--allow-sensitive",
        ])
        .output()
        .unwrap());
    assert!(
        text.contains("tool: setuid/setgid not carried over (6755 → 0755)"),
        "{text}"
    );
    let m = std::fs::metadata(s.work.path().join("tool")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    assert!(
        std::fs::symlink_metadata(s.work.path().join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    let link = std::fs::symlink_metadata(s.work.path().join("link")).unwrap();
    assert!(link.file_type().is_symlink());
    assert_eq!(
        std::fs::read_link(s.work.path().join("link")).unwrap(),
        Path::new("/etc/shadow")
    );
}

const FILES: usize = 1200;

fn old_text(i: usize) -> String {
    format!("old {i}\n")
}
fn new_text(i: usize) -> String {
    format!("new {i} {}\n", "x".repeat(3000))
}

/// 1,200 modified files, 10 added in a new directory, 5 deleted.
fn many(s: &Sandbox) -> String {
    for i in 0..FILES {
        s.write(&format!("f{i:04}"), &old_text(i));
    }
    for i in 0..5 {
        s.write(&format!("gone{i}"), "gone\n");
    }
    run(
        s,
        &format!(
            "pad=$(printf '%3000s' | tr ' ' x); i=0; while [ $i -lt {FILES} ]; do printf 'new %d %s\\n' $i \"$pad\" > $(printf 'f%04d' $i); i=$((i+1)); done; mkdir -p nd/sub; for j in 0 1 2 3 4 5 6 7 8 9; do echo $j > nd/sub/n$j; done; rm gone*"
        ),
    )
}

/// Every file wholly old or wholly new; the new directory whole or absent; no stray names
/// but cofferdam's hidden temporaries (allowed only while a batch is unfinished).
fn no_torn_file(s: &Sandbox, temporaries_allowed: bool) -> usize {
    let mut new = 0;
    for i in 0..FILES {
        let text = std::fs::read_to_string(s.work.path().join(format!("f{i:04}"))).unwrap();
        if text == new_text(i) {
            new += 1;
        } else {
            assert_eq!(text, old_text(i), "f{i:04} is torn");
        }
    }
    let nd = s.work.path().join("nd");
    if nd.exists() {
        let n = std::fs::read_dir(nd.join("sub")).unwrap().count();
        assert_eq!(n, 10, "the new directory is partial");
    }
    for e in std::fs::read_dir(s.work.path()).unwrap() {
        let name = e.unwrap().file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".cofferdam-") {
            assert!(temporaries_allowed, "leftover {name}");
            continue;
        }
        assert!(
            name.starts_with('f') || name == "nd" || name.starts_with("gone"),
            "stray {name}"
        );
    }
    new
}

fn all_new(s: &Sandbox) {
    assert_eq!(no_torn_file(s, false), FILES);
    assert!(s.work.path().join("nd/sub/n9").exists());
    assert!(!s.work.path().join("gone0").exists());
}

#[test]
fn a_sigkill_at_each_step_of_a_batch_is_finished_by_the_next_apply() {
    if !sealed_host() || !cfg!(debug_assertions) {
        return;
    }
    for at in [
        "prepare:400",
        "committing",
        "commit:1",
        "commit:600",
        "commit:1206",
        "synced",
        "cleaned",
    ] {
        let s = Sandbox::new();
        let id = many(&s);
        let out = s
            .cmd()
            .env("COFFERDAM_TEST_APPLY_KILL_AT", at)
            .args(["apply", &id])
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(9),
            "not killed at {at}: {}",
            stderr(&out)
        );
        let written = no_torn_file(&s, true);
        if at.starts_with("prepare") || at == "committing" {
            assert_eq!(written, 0, "visible writes before the commit ({at})");
        }
        // The next command on the job reports the interrupted batch.
        let d = s.cmd().args(["diff", &id, "--stat"]).output().unwrap();
        assert!(
            stderr(&d).contains("was interrupted"),
            "{at}: {}",
            stderr(&d)
        );
        let out = s.cmd().args(["apply", &id]).output().unwrap();
        ok(&out);
        assert!(
            stderr(&out).contains("was interrupted"),
            "{at}: {}",
            stderr(&out)
        );
        all_new(&s);
        assert_eq!(job_json(&s, &id)["state"], "applied", "{at}");
    }
}

#[test]
fn sigkills_at_random_instants_never_tear_a_file() {
    if !sealed_host() {
        return;
    }
    use std::hash::{BuildHasher, Hasher};
    let s = Sandbox::new();
    let id = many(&s);
    let mut rng = std::collections::hash_map::RandomState::new().build_hasher();
    let mut kills = 0;
    let mut seen: Vec<usize> = Vec::new();
    for round in 0..40 {
        rng.write_usize(round);
        let delay = rng.finish() % 120;
        let mut child = spawnable(&s)
            .args(["apply", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let st = child.wait().unwrap();
        if st.success() {
            break;
        }
        kills += 1;
        seen.push(no_torn_file(&s, true));
    }
    ok(&s.cmd().args(["apply", &id]).output().unwrap());
    all_new(&s);
    println!("{kills} apply processes killed at random instants; files new after each: {seen:?}");
}

#[test]
fn drop_discards_and_a_later_apply_says_why() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("a", "a\n");
    let id = run(&s, "echo changed > a; echo new > b");
    let before = tree(s.work.path());
    let text = ok(&s
        .cmd()
        .args(["--color", "never", "drop", &id])
        .output()
        .unwrap());
    assert!(text.contains("2 staged change(s) discarded"), "{text}");
    assert_eq!(tree(s.work.path()), before);
    assert_eq!(job_json(&s, &id)["state"], "discarded");
    assert!(!s.store.path().join("jobs").join(&id).join("upper").exists());
    assert!(trace_events(&s, &id).iter().any(|e| e == "dropped"));
    let out = s.cmd().args(["apply", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("was dropped"), "{}", stderr(&out));
    // diff answers: nothing is staged (issue 20).
    let out = s.cmd().args(["diff", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("nothing staged"));
    for cmd in ["apply", "drop", "diff"] {
        let out = s.cmd().args([cmd, "run-0000nope"]).output().unwrap();
        assert_eq!(out.status.code(), Some(4), "{cmd}: {}", stderr(&out));
    }
}

#[test]
fn a_live_run_or_another_apply_holds_the_job_exit_5() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let mut live = spawnable(&s)
        .args(["run", "-q", "--", "sh", "-c", "echo x > f; sleep 30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut id = String::new();
    for _ in 0..200 {
        let jobs = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
        if let Some(j) = jobs.as_array().unwrap().first() {
            id = j["id"].as_str().unwrap().to_owned();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!id.is_empty(), "the run never showed up");
    for cmd in ["apply", "drop", "diff"] {
        let out = s.cmd().args([cmd, &id]).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{cmd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("still running") || stderr(&out).contains("still going"),
            "{}",
            stderr(&out)
        );
    }
    let _ = live.kill();
    let _ = live.wait();
    // The supervisor was killed: the job is interrupted; apply seals it on demand from the
    // provisional bundle the run wrote at its start (`cmd/recover.rs`), then applies it.
    let out = s.cmd().args(["apply", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(job_json(&s, &id)["run_state"], "failed");
    ok(&s.cmd().args(["drop", &id]).output().unwrap());

    if !cfg!(debug_assertions) {
        return;
    }
    // An apply in progress holds the job against another apply and a drop.
    let s = Sandbox::new();
    s.write("a", "a\n");
    let id = run(&s, "echo b > a");
    let mut paused = spawnable(&s)
        .env("COFFERDAM_TEST_APPLY_PAUSE_AT", "committing")
        .args(["apply", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = paused.stderr.take().unwrap();
    let mut buf = [0u8; 64];
    let n = std::io::Read::read(&mut err, &mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("paused"));
    for cmd in ["apply", "drop"] {
        let out = s.cmd().args([cmd, &id]).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{cmd}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("another cofferdam command"),
            "{}",
            stderr(&out)
        );
    }
    paused.kill().unwrap();
    paused.wait().unwrap();
    ok(&s.cmd().args(["apply", &id]).output().unwrap());
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("a")).unwrap(),
        "b\n"
    );
}

#[test]
fn drop_after_an_interrupted_apply_cleans_up_and_keeps_what_was_written() {
    if !sealed_host() || !cfg!(debug_assertions) {
        return;
    }
    let s = Sandbox::new();
    let id = many(&s);
    let out = s
        .cmd()
        .env("COFFERDAM_TEST_APPLY_KILL_AT", "commit:300")
        .args(["apply", &id])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = s.cmd().args(["drop", &id]).output().unwrap();
    ok(&out);
    assert!(stderr(&out).contains("was interrupted"), "{}", stderr(&out));
    let written = no_torn_file(&s, false);
    assert!(written >= 299, "{written}");
    assert_eq!(job_json(&s, &id)["state"], "discarded");
}

#[test]
fn new_modes_show_before_apply_and_a_sparse_file_applies_sparse() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    // `sp` is setuid, so apply copies it (the bit is dropped) rather than linking it.
    run(
        &s,
        "echo a > open; chmod 0777 open; truncate -s 1T sp; chmod 4755 sp; mkdir pub; chmod 1777 pub",
    );
    let json: Value = serde_json::from_str(&ok(&s
        .cmd()
        .args(["diff", "last", "--json"])
        .output()
        .unwrap()))
    .unwrap();
    let of = |p: &str| {
        json["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == p)
            .cloned()
            .unwrap()
    };
    assert_eq!(of("open")["mode"], "0777");
    assert_eq!(
        of("open")["mode_flags"],
        serde_json::json!(["world-writable", "executable"])
    );
    assert_eq!(of("sp")["mode"], "4755");
    assert_eq!(of("pub")["mode"], "1777");
    assert!(of("sp")["summary"].as_str().unwrap().contains("large file"));
    let review = ok(&s
        .cmd()
        .args(["--color", "never", "status", "--review", "last"])
        .output()
        .unwrap());
    assert!(
        review
            .lines()
            .any(|l| l.contains("open") && l.contains("mode 0777 (world-writable")),
        "{review}"
    );
    assert!(
        review
            .lines()
            .any(|l| l.contains("sp") && l.contains("4755 (setuid")),
        "{review}"
    );
    let diff = ok(&s
        .cmd()
        .args(["--color", "never", "diff", "last"])
        .output()
        .unwrap());
    assert!(
        diff.contains("new file mode 100777 (world-writable, executable)"),
        "{diff}"
    );
    ok(&s
        .cmd()
        .args(["apply", "last", "--allow-sensitive"])
        .output()
        .unwrap());
    let m = std::fs::metadata(s.work.path().join("sp")).unwrap();
    assert_eq!(m.len(), 1 << 40);
    assert!(
        m.blocks() * 512 < 1 << 20,
        "{} blocks allocated",
        m.blocks()
    );
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
}

#[test]
fn changes_that_run_code_are_marked_and_held_until_named() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let w = s.work.path();
    std::fs::create_dir(w.join(".git")).unwrap();
    let config = "[core]\n\tbare = false\n";
    std::fs::write(w.join(".git/config"), config).unwrap();
    std::fs::write(w.join("notes"), "before\n").unwrap();
    let id = run(
        &s,
        "mkdir pkg && echo hi > pkg/a && echo 'eval x' > pkg/.envrc && \
         printf '[alias]\\n\\tst = !sh -c x\\n[user]\\n\\tname = n\\n' >> .git/config && \
         echo after > notes",
    );
    let review = ok(&s
        .cmd()
        .args(["--color", "never", "status", "--review", &id])
        .output()
        .unwrap());
    assert!(
        review.contains("! .git/config: runs code: alias.st added"),
        "{review}"
    );
    assert!(
        review.contains("! pkg/.envrc: runs code: direnv"),
        "{review}"
    );
    let diff = ok(&s
        .cmd()
        .args(["--color", "never", "diff", &id])
        .output()
        .unwrap());
    assert!(diff.contains("! runs code: alias.st added"), "{diff}");
    let stat = ok(&s
        .cmd()
        .args(["--color", "never", "diff", &id, "--stat"])
        .output()
        .unwrap());
    assert!(stat.contains("! runs code: direnv"), "{stat}");

    let dry = json_of(
        &s.cmd()
            .args(["apply", &id, "--dry-run", "--json"])
            .output()
            .unwrap(),
    );
    let held: Vec<&str> = dry["held_sensitive"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap())
        .collect();
    assert_eq!(held, vec![".git/config", "pkg/.envrc"], "{dry}");

    // A bare apply takes the rest (the new directory too) and says why the two stay.
    let text = ok(&s
        .cmd()
        .args(["--color", "never", "apply", &id])
        .output()
        .unwrap());
    assert!(text.contains("held back: 2 path(s)"), "{text}");
    assert!(text.contains("--allow-sensitive"), "{text}");
    assert_eq!(std::fs::read_to_string(w.join("notes")).unwrap(), "after\n");
    assert!(w.join("pkg/a").exists());
    assert!(!w.join("pkg/.envrc").exists());
    assert_eq!(
        std::fs::read_to_string(w.join(".git/config")).unwrap(),
        config
    );
    assert_eq!(job_json(&s, &id)["state"], "staged");

    ok(&s
        .cmd()
        .args(["apply", &id, "--path", "pkg/.envrc"])
        .output()
        .unwrap());
    assert!(w.join("pkg/.envrc").exists());
    assert_eq!(
        std::fs::read_to_string(w.join(".git/config")).unwrap(),
        config
    );
    ok(&s
        .cmd()
        .args(["apply", &id, "--allow-sensitive"])
        .output()
        .unwrap());
    assert!(
        std::fs::read_to_string(w.join(".git/config"))
            .unwrap()
            .contains("!sh -c x")
    );
    assert_eq!(job_json(&s, &id)["state"], "applied");
}

/// `cofferdam <args>` with the file-size limit at one block and SIGXFSZ ignored: a write past
/// it fails with EFBIG, as on a full disk, while small new files (the workdir's, job.json)
/// are still written.
fn with_tiny_file_limit(s: &Sandbox, args: &[&str]) -> Output {
    let bin = assert_cmd::cargo::cargo_bin("cofferdam");
    let c = spawnable(s);
    let mut sh = StdCommand::new("sh");
    sh.env_clear()
        .envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(s.work.path())
        .args(["-c", "trap '' XFSZ; ulimit -f 1 && exec \"$0\" \"$@\""])
        .arg(bin)
        .args(args)
        .stdin(Stdio::null());
    sh.output().unwrap()
}

#[test]
fn a_trace_that_cannot_be_written_is_told_not_dropped() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("a", "a\n");
    let id = run(&s, "echo changed > a");
    let trace = s.store.path().join("jobs").join(&id).join("trace.jsonl");
    let before = std::fs::read(&trace).unwrap();
    assert!(before.len() > 1024, "the trace must outgrow the limit");
    let out = with_tiny_file_limit(&s, &["--color", "never", "apply", &id]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("a")).unwrap(),
        "changed\n"
    );
    assert!(
        err.contains("cofferdam: warning: the job's trace could not record")
            && err.contains("the trace of this job is incomplete"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        before,
        "no torn line is left"
    );
}
