//! The job store belongs to its user: its modes whatever the umask, and stores or jobs of a
//! second user refused (exit 125) with the fix. The two-user test runs cofferdam as
//! `cofferdam-ci` against directories of `cofferdam-other` when the tests run as root; as
//! an unprivileged user it uses directories it makes writable by everyone instead.

use crate::common::Sandbox;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Every directory of the store is 0700 and every file 0600, the stage's contents and the
/// kernel's overlay work directory aside; `upper` has the workdir's mode (`workdir_mode`).
fn assert_modes(dir: &Path, workdir_mode: u32) {
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let name = e.file_name();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            if name == "upper" {
                // The overlay's root shows upper's mode, so upper takes the workdir's (issue
                // 20); the job directory above it is 0700, checked above.
                assert_eq!(mode(&p), workdir_mode, "{}", p.display());
            } else if name == "work" || name == "copy" {
                assert_eq!(mode(&p), 0o700, "{}", p.display());
            } else {
                assert_modes(&p, workdir_mode);
            }
        } else if t.is_file() {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    }
}

#[test]
fn under_umask_000_the_store_jobs_and_records_keep_their_modes() {
    let s = Sandbox::new();
    let bin = assert_cmd::cargo::cargo_bin("cofferdam");
    for tier in [&["--tier", "scoped"][..], &[][..]] {
        // No COFFERDAM_HOME: the default root and its missing parents are made.
        let out = Command::new("sh")
            .args(["-c", "umask 000 && exec \"$@\"", "sh"])
            .arg(&bin)
            .args(["run", "-q", "--capture"])
            .args(tier)
            .args(["--", "sh", "-c", "echo x > f; mkdir -p d/e"])
            .env_clear()
            .env("HOME", s.home.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(s.work.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let root = s.home.path().join(".local/share/cofferdam");
    for p in [
        s.home.path().join(".local"),
        s.home.path().join(".local/share"),
    ] {
        assert_eq!(mode(&p), 0o700, "{}", p.display());
    }
    assert_modes(&root, mode(s.work.path()));
    let jobs: Vec<_> = std::fs::read_dir(root.join("jobs")).unwrap().collect();
    assert_eq!(jobs.len(), 2);
}

fn uid_of(user: &str) -> Option<u32> {
    let out = Command::new("id").args(["-u", user]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

#[test]
fn a_store_or_job_of_another_user_is_refused_with_the_fix() {
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    let (ci, other) = (uid_of("cofferdam-ci"), uid_of("cofferdam-other"));
    let two_users = root && ci.is_some() && other.is_some();
    if !two_users {
        println!("no second user to become (not root): the writable-by-others variants stand in");
    }
    let bin = assert_cmd::cargo::cargo_bin("cofferdam");
    let base = tempfile::tempdir().unwrap();
    chmod(base.path(), 0o755);
    let mk = |name: &str, owner: Option<u32>, m: u32| {
        let p = base.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        if let Some(u) = owner {
            std::os::unix::fs::chown(&p, Some(u), Some(u)).unwrap();
        }
        chmod(&p, m);
        p
    };
    let me = if two_users { ci } else { None };
    let home = mk("home", me, 0o700);
    let work = mk("work", me, 0o700);
    // cofferdam as the victim (cofferdam-ci when we are root, else ourselves).
    let victim = |store: &Path, args: &[&str]| {
        let mut c = if two_users {
            let mut c = Command::new("runuser");
            c.args(["-u", "cofferdam-ci", "--"]).arg(&bin);
            c
        } else {
            Command::new(&bin)
        };
        c.env_clear()
            .env("HOME", &home)
            .env("COFFERDAM_HOME", store)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&work)
            .args(args)
            .output()
            .unwrap()
    };
    let refused = |store: &Path, args: &[&str], why: &str, fix: &str| {
        let out = victim(store, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {out:?}");
        assert!(
            err.contains("refusing") && err.contains(why) && err.contains(fix),
            "{args:?}: {err}"
        );
    };
    // A store root another user owns (as root: cofferdam-other's; else root's own /tmp,
    // which is not ours either).
    let foreign = if two_users {
        mk("their-store", other, 0o755)
    } else {
        std::path::PathBuf::from("/tmp")
    };
    for args in [&["jobs"][..], &["status", "last"], &["run", "--", "true"]] {
        refused(&foreign, args, "belongs to uid", "COFFERDAM_HOME");
    }
    // Ours, but writable by others.
    let open = mk("open-store", me, 0o777);
    refused(&open, &["jobs"], "mode 0777", "chmod go-w");
    // Ours, jobs/ writable by others.
    let store = mk("store", me, 0o700);
    let jobs = mk("store/jobs", me, 0o777);
    refused(&store, &["jobs"], "mode 0777", "chmod go-w");
    chmod(&jobs, 0o700);
    // A job directory of someone else in our jobs/: listed as refused, refused by name.
    let out = victim(&store, &["run", "--json", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    let id = "run-01a20000-0000-7000-8000-000000000000";
    let planted = mk(
        &format!("store/jobs/{id}"),
        if two_users { other } else { me },
        0o755,
    );
    std::fs::write(
        planted.join("job.json"),
        format!(
            r#"{{"id":"{id}","created_at_unix_ms":1,"workdir":"{}","state":"staged"}}"#,
            work.display()
        ),
    )
    .unwrap();
    if !two_users {
        chmod(&planted, 0o777);
    }
    let out = victim(&store, &["jobs"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text
                .lines()
                .any(|l| l.starts_with(id) && l.contains("refusing")),
        "{out:?}"
    );
    let why = if two_users {
        "belongs to uid"
    } else {
        "mode 0777"
    };
    refused(&store, &["status", id], why, "");
    refused(&store, &["apply", &id[4..12]], why, "");
}
