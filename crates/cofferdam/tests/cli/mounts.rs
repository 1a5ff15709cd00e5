//! Optional mounts (`--mount SRC[:TGT][:MODE]?`, `optional = true`): a missing source is
//! skipped and recorded (a warning, the bundle's warnings, the scope report), never an
//! error; one that exists is lent as usual; a missing source of a mount that is not
//! optional stays a usage error before any job (`usage.rs`).

use crate::common::*;

fn sealed_host() -> bool {
    require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0)
}

#[test]
fn a_missing_optional_mount_is_skipped_and_recorded_and_a_present_one_is_lent() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let lent = tempfile::tempdir().unwrap();
    std::fs::write(lent.path().join("f"), "lent\n").unwrap();
    let missing = s.home.path().join("no-such-cache");
    let out = s
        .cmd()
        .args(["run", "-q", "--mount"])
        .arg(format!("{}:/mnt/cache:write?", missing.display()))
        .arg("--mount")
        .arg(format!("{}:/mnt/lent:read?", lent.path().display()))
        .args([
            "--",
            "sh",
            "-c",
            "cat /mnt/lent/f; test -e /mnt/cache && echo CACHE; echo done",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "lent\ndone\n",
        "{err}"
    );
    let line = format!(
        "optional mount {} (--mount) skipped: its source {} does not exist",
        missing.display(),
        missing.display()
    );
    assert!(err.contains(&format!("warning: {line}")), "{err}");
    assert!(!missing.exists(), "the skipped source was created");

    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let warnings = b["run"]["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str() == Some(line.as_str())),
        "{warnings:?}"
    );
    let mounts = b["filesystem"]["access_policy"]["mounts"]
        .as_array()
        .unwrap();
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    assert_eq!(mounts[0]["target"], "/mnt/lent");
}

#[test]
fn the_scope_report_shows_a_missing_optional_mount_as_skipped() {
    let s = Sandbox::new();
    let missing = s.home.path().join("no-such-cache");
    let out = s
        .cmd()
        .args(["scope", "--json", "--mount"])
        .arg(format!("{}:/mnt/cache:write?", missing.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = json_of(&out);
    let paths = r["host_paths"].as_array().unwrap();
    assert_eq!(paths.len(), 1, "{paths:?}");
    assert_eq!(paths[0]["mode"], "write");
    assert_eq!(
        paths[0]["effect"],
        "skipped: optional, and the source does not exist"
    );
    // Skipped, it writes nothing on the host: no state store.
    assert_eq!(r["state_stores"], serde_json::json!([]), "{r}");
}

#[test]
fn a_manifest_mount_marked_optional_is_skipped_when_missing() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let missing = s.home.path().join("no-such-dir");
    let manifest = s.write(
        "cofferdam.toml",
        &format!(
            "[[filesystem.mounts]]\nsource = \"{}\"\ntarget = \"/mnt/x\"\nmode = \"read\"\noptional = true\n",
            missing.display()
        ),
    );
    // The grant is outside the workdir: the manifest must be trusted, skipped or not.
    let out = s.cmd().arg("trust").arg(&manifest).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c", "echo ran"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("(filesystem.mounts[0]) skipped: its source"),
        "{err}"
    );
    // Without `optional`, the same missing source is a usage error before any job.
    s.write(
        "cofferdam.toml",
        &format!(
            "[[filesystem.mounts]]\nsource = \"{}\"\ntarget = \"/mnt/x\"\nmode = \"read\"\n",
            missing.display()
        ),
    );
    let out = s.cmd().arg("trust").arg(&manifest).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = s.cmd().args(["run", "-q", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("make it optional"), "{err}");
    let jobs = std::fs::read_dir(s.store.path().join("jobs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(jobs, 1, "only the first run made a job");
}
