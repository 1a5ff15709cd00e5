//! `cofferdam checkpoint` (issue 21): a checkpoint of a staged job keeps its content and
//! digest whatever is done to the job afterwards; list, show, delete; bad ids and names;
//! `gc` keeps a job that holds checkpoints unless `--force`.

use crate::common::*;
use crate::housekeeping::run_in;
use serde_json::Value;
use std::path::PathBuf;

fn ok_json(s: &Sandbox, args: &[&str]) -> Value {
    let out = s.cmd().arg("--json").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_of(&out)
}

fn code(s: &Sandbox, args: &[&str]) -> (i32, String) {
    let out = s.cmd().args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_checkpoint_is_unchanged_by_apply_and_drop_of_its_job() {
    let s = Sandbox::new();
    s.write("gone.txt", "host\n");
    let job = run_in(
        &s,
        s.work.path(),
        "echo a > a.txt; echo b > b.txt; rm gone.txt; mkdir d; ln -s ../a.txt d/l; chmod 0750 d",
    );
    let made = ok_json(&s, &["checkpoint", "create", &job, "--name", "first"]);
    let id = made["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ckpt-"), "{made}");
    assert_eq!(made["job"], job.as_str());
    assert_eq!(made["run_id"], job.as_str());
    assert_eq!(made["name"], "first");
    let c = &made["counts"];
    assert_eq!(
        (
            &c["files"],
            &c["whiteouts"],
            &c["symlinks"],
            &c["directories"]
        ),
        (&2.into(), &1.into(), &1.into(), &1.into()),
        "{made}"
    );
    let upper = PathBuf::from(made["path"].as_str().unwrap()).join("upper");
    assert_eq!(std::fs::read_to_string(upper.join("b.txt")).unwrap(), "b\n");

    // Change the job: apply one path, drop the rest.
    let out = s
        .cmd()
        .args(["apply", &job, "--path", "a.txt"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(s.work.path().join("a.txt"), "edited on the host\n").unwrap();
    let out = s.cmd().args(["drop", &job]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let shown = ok_json(&s, &["checkpoint", "show", "first"]);
    assert_eq!(shown["digest"], made["digest"], "{shown}");
    assert_eq!(shown["current_digest"], made["digest"], "{shown}");
    assert_eq!(shown["intact"], true);
    assert_eq!(std::fs::read_to_string(upper.join("a.txt")).unwrap(), "a\n");
    assert_eq!(std::fs::read_to_string(upper.join("b.txt")).unwrap(), "b\n");
    assert_eq!(
        std::fs::read_link(upper.join("d/l")).unwrap(),
        PathBuf::from("../a.txt")
    );
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(upper.join("gone.txt")).unwrap();
    assert!(meta.file_type().is_char_device(), "the whiteout is kept");
    assert_eq!(
        std::fs::metadata(upper.join("d"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o750
    );

    // `show` really re-reads: a change behind cofferdam's back is caught (exit 1).
    std::fs::write(upper.join("b.txt"), "tampered\n").unwrap();
    let (rc, _) = code(&s, &["checkpoint", "show", &id]);
    assert_eq!(rc, 1);
    let out = s
        .cmd()
        .args(["--json", "checkpoint", "show", &id])
        .output()
        .unwrap();
    assert_eq!(json_of(&out)["intact"], false);
}

#[test]
fn list_delete_bad_ids_names_and_states() {
    let s = Sandbox::new();
    let one = run_in(&s, s.work.path(), "echo 1 > one");
    let two = run_in(&s, s.work.path(), "echo 2 > two");
    let a = ok_json(&s, &["checkpoint", "create", &one]);
    let b = ok_json(&s, &["checkpoint", "create", &two, "--name", "x.1"]);
    let c = ok_json(&s, &["checkpoint", "create", &two]);
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = ok_json(&s, &["checkpoint", "list"]);
    assert_eq!(
        ids(&all),
        [&a["id"], &b["id"], &c["id"]].map(|v| v.as_str().unwrap().to_owned())
    );
    let of_two = ok_json(&s, &["checkpoint", "list", &two]);
    assert_eq!(ids(&of_two).len(), 2);

    // Names: bad ones and a taken one are usage errors, made before anything.
    for bad in ["", "-x", "a/b", "ckpt-1", "a b"] {
        let flag = format!("--name={bad}");
        let (rc, err) = code(&s, &["checkpoint", "create", &two, &flag]);
        assert_eq!(rc, 2, "{bad}: {err}");
        assert!(err.contains("--name"), "{err}");
    }
    let (rc, err) = code(&s, &["checkpoint", "create", &two, "--name", "x.1"]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("already has a checkpoint named"), "{err}");
    // Ids: unknown, too short, a job id.
    for bad in ["ckpt-ffffffff", "01", &one, "nope"] {
        let (rc, err) = code(&s, &["checkpoint", "show", bad]);
        assert_eq!(rc, 4, "{bad}: {err}");
        assert!(err.contains("no checkpoint matches"), "{err}");
    }
    let (rc, _) = code(&s, &["checkpoint", "create", "run-ffff"]);
    assert_eq!(rc, 4);

    // gc keeps a job with checkpoints unless --force.
    let out = s.cmd().args(["drop", &one]).output().unwrap();
    assert!(out.status.success());
    let (rc, err) = code(&s, &["checkpoint", "create", &one]);
    assert_eq!(rc, 2, "a dropped job has no stage: {err}");
    assert!(err.contains("cannot be checkpointed"), "{err}");
    let gc = ok_json(&s, &["gc"]);
    assert_eq!(gc["removed"].as_array().unwrap().len(), 0, "{gc}");
    assert!(
        gc["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("checkpoint"),
        "{gc}"
    );

    // delete by name and by prefix; then list no longer has them.
    let deleted = ok_json(&s, &["checkpoint", "delete", "x.1"]);
    assert_eq!(deleted["deleted"], b["id"]);
    let prefix = &a["id"].as_str().unwrap()["ckpt-".len()..];
    let prefix = &prefix[..prefix.len() - 2];
    let (rc, err) = code(&s, &["checkpoint", "delete", prefix]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        ids(&ok_json(&s, &["checkpoint", "list"])),
        [c["id"].as_str().unwrap()]
    );
    let gc = ok_json(&s, &["gc"]);
    assert_eq!(gc["removed"][0]["id"], one.as_str(), "{gc}");
    let gc = ok_json(&s, &["gc", "--state", "staged", "--force"]);
    assert_eq!(gc["removed"][0]["id"], two.as_str(), "{gc}");
    assert_eq!(ok_json(&s, &["checkpoint", "list"]), Value::Array(vec![]));
}
