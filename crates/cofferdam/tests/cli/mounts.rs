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

/// A usage error (exit 2) whose message names `--lend-secret`, the fix.
fn refused_naming_lend_secret(out: &std::process::Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--lend-secret"), "{err}");
}

/// Issue 19: a path the secret list hides is lent only by a flag that names it
/// (`--lend-secret`), never as a mount that is silently unreadable inside. `--mount` of it is
/// a usage error naming the fix; the lent one is readable, out of scope's hidden paths, and
/// the bundle warns; the others stay masked; `inspect` may not add one.
#[test]
fn a_secret_is_lent_by_name_and_a_plain_mount_of_it_is_refused() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    for d in [s.home.path(), s.work.path()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let gcloud = s.home.path().join(".config/gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(gcloud.join("adc.json"), "vertex-token\n").unwrap();
    let aws = s.home.path().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    std::fs::write(aws.join("credentials"), "aws-token\n").unwrap();
    let file = gcloud.join("adc.json").display().to_string();
    let other = aws.join("credentials").display().to_string();

    let out = s
        .cmd()
        .args([
            "run",
            "-q",
            "--mount",
            "~/.config/gcloud:read",
            "--",
            "cat",
            &file,
        ])
        .output()
        .unwrap();
    refused_naming_lend_secret(&out);
    let jobs = s.cmd().args(["jobs", "--json"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&jobs.stdout).contains("run-"),
        "a job was made"
    );

    let scope = json_of(
        &s.cmd()
            .args(["scope", "--json", "--lend-secret", "~/.config/gcloud"])
            .output()
            .unwrap(),
    );
    let hidden = scope["hidden_paths"].to_string();
    assert!(
        !hidden.contains(".config/gcloud") && hidden.contains(".aws"),
        "{hidden}"
    );

    let script = format!("cat {file}; cat {other} 2>/dev/null || echo aws-hidden");
    let out = s
        .cmd()
        .args([
            "run",
            "-q",
            "--lend-secret",
            "~/.config/gcloud",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout, "vertex-token\naws-hidden\n");
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let warnings = b["safety"]["warnings"].to_string();
    assert!(warnings.contains("--lend-secret"), "{warnings}");
    let mounts = b["filesystem"]["access_policy"]["mounts"].to_string();
    assert!(mounts.contains(".config/gcloud"), "{mounts}");
    let lent_job = b["run"]["run_id"].as_str().unwrap().to_owned();

    // A fork does not inherit the secret (it says so, and does not mount it unreadable);
    // naming it again lends it.
    let read = format!("cat {file} 2>/dev/null || echo gcloud-hidden");
    let out = s
        .cmd()
        .args(["fork", &lent_job, "--", "sh", "-c", &read])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "gcloud-hidden\n",
        "{out:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--lend-secret"), "{err}");
    let out = s
        .cmd()
        .args([
            "fork",
            &lent_job,
            "--lend-secret",
            "~/.config/gcloud",
            "--",
            "sh",
            "-c",
            &read,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "vertex-token\n",
        "{out:?}"
    );

    // Inspecting a job that lent nothing may not add a secret.
    let plain = s.cmd().args(["run", "-q", "--", "true"]).output().unwrap();
    assert_eq!(plain.status.code(), Some(0), "{plain:?}");
    let out = s
        .cmd()
        .args([
            "inspect",
            "last",
            "--lend-secret",
            "~/.config/gcloud",
            "--",
            "cat",
            &file,
        ])
        .output()
        .unwrap();
    refused_naming_lend_secret(&out);
}
