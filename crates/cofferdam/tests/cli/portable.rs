//! Portable jobs: `export` a sealed job, `import` it onto another workdir, `apply` there.
//! The other workdir ends byte for byte where applying on the original would have left it
//! (a property over the generated stages of `equivalence`, and one case with every odd
//! thing a stage holds: newline and non-UTF-8 names, a sparse file, whiteouts, an opaque
//! directory, modes, symlinks); a workdir that differs conflicts and is not written; a
//! tampered or truncated archive is refused with exit 1 and makes no job.

use crate::apply::{Tree, sealed_host, shown, tree};
use crate::common::*;
use crate::equivalence::{Init, Op, P, build, case, run_case, sealed};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use serde_json::Value;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `cofferdam ARGS --json` in `s`, which must exit `code`; its JSON.
fn json_run(s: &Sandbox, args: &[&OsStr], code: i32) -> Value {
    let out = s.cmd().args(args).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
    json_of(&out)
}

/// Export `job` of `s` to a new archive in its home; the archive's path.
fn export(s: &Sandbox, job: &str) -> std::path::PathBuf {
    let file = s.home.path().join(format!("{job}.tar.zst"));
    let v = json_run(
        s,
        &[
            "export".as_ref(),
            job.as_ref(),
            "-o".as_ref(),
            file.as_os_str(),
        ],
        0,
    );
    assert!(job == "last" || v["job"] == job, "{v}");
    assert!(v["archive_bytes"].as_u64().is_some_and(|n| n > 0), "{v}");
    file
}

/// Import `file` onto `workdir`; the new job's id.
fn import(s: &Sandbox, file: &Path, workdir: &Path) -> String {
    let v = json_run(
        s,
        &[
            "import".as_ref(),
            file.as_os_str(),
            "--workdir".as_ref(),
            workdir.as_os_str(),
        ],
        0,
    );
    assert_eq!(v["state"], "staged", "{v}");
    assert_eq!(v["workdir"].as_str().map(Path::new), Some(workdir), "{v}");
    v["job"].as_str().unwrap().to_owned()
}

fn apply(s: &Sandbox, job: &str, code: i32) -> Value {
    json_run(
        s,
        &["apply".as_ref(), job.as_ref(), "--allow-sensitive".as_ref()],
        code,
    )
}

/// Run `script` sealed in `s` (its workdir already built); the job id.
fn sealed_job(s: &Sandbox, script: &[u8]) -> String {
    let out = s
        .cmd()
        .args(["run", "--json", "--", "sh", "-c"])
        .arg(OsStr::from_bytes(script))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out)["job"].as_str().unwrap().to_owned()
}

/// The property: what the imported job applies onto a fresh copy of the original tree is
/// what the agent saw.
fn moved_apply_equals_what_the_agent_saw(
    init: &[(P, Init)],
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let r = run_case(init, ops)?;
    let file = export(&r.s, "last");
    let other = tempfile::tempdir().unwrap();
    build(other.path(), init);
    let job = import(&r.s, &file, other.path());
    apply(&r.s, &job, 0);
    prop_assert_eq!(shown(&tree(other.path())), shown(&r.seen));
    Ok(())
}

fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(12),
        failure_persistence: None,
        max_shrink_iters: 500,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn prop_export_import_apply_reproduces_the_stage((init, ops) in case()) {
        if !sealed() {
            return Ok(());
        }
        moved_apply_equals_what_the_agent_saw(&init, &ops)?;
    }
}

/// The tree before the run of [`ODD`], on `root`.
fn odd_tree(root: &Path) {
    std::fs::write(root.join("a"), "one\n").unwrap();
    std::fs::write(root.join("gone"), "bye\n").unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::create_dir(root.join("op")).unwrap();
    std::fs::write(root.join("op/old1"), "1").unwrap();
    std::fs::write(root.join("op/old2"), "2").unwrap();
}

/// A run leaving every odd thing in its stage.
const ODD: &[u8] = b"set -e
printf 'two\\n' >> a
chmod 600 a
rm gone
printf 'n\\n' > \"$(printf 'new\\nline')\"
printf 'b\\n' > \"$(printf 'bad\\377name')\"
ln -s ../outside lnk
truncate -s 4M sparse
printf hi | dd of=sparse bs=1 seek=100000 conv=notrunc 2>/dev/null
chmod 750 d
rm -rf op && mkdir op && echo n > op/new
mkdir -p deep/er && echo z > deep/er/f && chmod 700 deep
";

#[test]
fn an_odd_stage_moves_byte_for_byte_holes_and_all() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    odd_tree(s.work.path());
    let job = sealed_job(&s, ODD);
    let file = export(&s, &job);
    // The original applied on its own workdir is the reference.
    let other = tempfile::tempdir().unwrap();
    odd_tree(other.path());
    let moved = import(&s, &file, other.path());
    apply(&s, &job, 0);
    let expect: Tree = tree(s.work.path());
    assert!(
        expect.contains_key(b"bad\xffname".as_slice()),
        "{:?}",
        shown(&expect)
    );
    assert!(expect.contains_key(b"new\nline".as_slice()));
    assert!(!expect.contains_key(b"op/old1".as_slice()));
    assert!(!expect.contains_key(b"gone".as_slice()));
    let v = apply(&s, &moved, 0);
    assert_eq!(v["state"], "applied", "{v}");
    assert_eq!(shown(&tree(other.path())), shown(&expect));
    // The hole stayed a hole: far less than 4 MiB is allocated.
    let m = std::fs::metadata(other.path().join("sparse")).unwrap();
    assert_eq!(m.len(), 4 << 20);
    assert!(m.blocks() * 512 < 1 << 20, "{} blocks", m.blocks());
    // The import's bundle verifies, and `status` reads the job.
    let out = s.cmd().args(["bundle", "verify", &moved]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn importing_onto_a_tree_that_differs_conflicts_and_writes_nothing() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("a", "one\n");
    s.write("b", "same\n");
    let job = sealed_job(&s, b"echo two >> a; echo new > b");
    let file = export(&s, &job);
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("a"), "someone else's\n").unwrap();
    std::fs::write(other.path().join("b"), "same\n").unwrap();
    let before = tree(other.path());
    let moved = import(&s, &file, other.path());
    // The review's next steps name the local job, not the run id it came with.
    let review = s
        .cmd()
        .args(["status", "--review", "--no-pager", &moved])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&review.stdout);
    assert!(
        text.contains(&format!("next: cofferdam diff {moved}"))
            && !text.contains(&format!("diff {job}")),
        "{moved} (from {job}): {text}"
    );
    let v = apply(&s, &moved, 3);
    assert_eq!(v["refused"], true, "{v}");
    assert_eq!(v["conflicts"][0]["path"], "a", "{v}");
    assert_eq!(v["conflicts"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(shown(&tree(other.path())), shown(&before));
    // Excluding the conflict applies the rest.
    let out = s
        .cmd()
        .args(["apply", &moved, "--exclude", "a"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read(other.path().join("b")).unwrap(), b"new\n");
}

#[test]
fn a_tampered_or_truncated_archive_is_refused_and_makes_no_job() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("a", "one\n");
    let job = sealed_job(&s, b"echo two >> a");
    let file = export(&s, &job);
    let bytes = std::fs::read(&file).unwrap();
    let ids = |s: &Sandbox| -> Vec<Value> {
        let v = json_run(s, &["jobs".as_ref()], 0);
        v.as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].clone())
            .collect()
    };
    let jobs_before = ids(&s);
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    for (name, data) in [
        ("flipped", flipped),
        ("truncated", bytes[..bytes.len() * 2 / 3].to_vec()),
        ("empty", Vec::new()),
    ] {
        let bad = s.home.path().join(name);
        std::fs::write(&bad, &data).unwrap();
        let other = tempfile::tempdir().unwrap();
        let out = s
            .cmd()
            .args(["import".as_ref(), bad.as_os_str(), "--workdir".as_ref()])
            .arg(other.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("the archive is refused"), "{name}: {err}");
        let v = json_run(
            &s,
            &[
                "import".as_ref(),
                bad.as_os_str(),
                "--workdir".as_ref(),
                other.path().as_os_str(),
            ],
            1,
        );
        assert_eq!(v["error"]["code"], "invalid", "{v}");
        assert_eq!(std::fs::read_dir(other.path()).unwrap().count(), 0);
    }
    assert_eq!(ids(&s), jobs_before);
    // The export refuses to replace a file.
    let out = s
        .cmd()
        .args([
            "export".as_ref(),
            job.as_ref(),
            "-o".as_ref(),
            file.as_os_str(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
}
