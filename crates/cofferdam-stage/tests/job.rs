#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Job store tests: layout and modes, `job.json` updates, the lock, listing order with a
//! broken job, addressing (`last`, id prefixes, paths), `--stage` directories, and removal
//! of an overlay workdir whose `work/work` is mode 000.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use cofferdam_record::bundle::RunState;
use cofferdam_stage::job::{ID_PREFIX, JobError, JobStore, JobSummary, StageState};

struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    work_a: PathBuf,
    work_b: PathBuf,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let work_a = tmp.path().join("proj-a");
    let work_b = tmp.path().join("proj-b");
    fs::create_dir(&work_a).unwrap();
    fs::create_dir(&work_b).unwrap();
    Env {
        _tmp: tmp,
        root,
        work_a,
        work_b,
    }
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn create_lays_out_a_job() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    assert_eq!(mode(&e.root.join("jobs")), 0o700);
    JobStore::open(&e.root).unwrap(); // idempotent

    let job = store.create(&e.work_a, None).unwrap();
    let uuid_text = job.id().strip_prefix(ID_PREFIX).unwrap();
    let uuid = uuid::Uuid::parse_str(uuid_text).unwrap();
    assert_eq!(uuid.get_version_num(), 7);
    assert_eq!(
        uuid.hyphenated().to_string(),
        uuid_text,
        "lowercase hyphenated"
    );

    assert_eq!(
        job.dir(),
        fs::canonicalize(e.root.join("jobs").join(job.id())).unwrap()
    );
    assert_eq!(mode(job.dir()), 0o700);
    for d in [job.upper(), job.overlay_work(), job.new_root()] {
        assert!(d.is_dir(), "{}", d.display());
        assert_eq!(fs::read_dir(&d).unwrap().count(), 0);
    }
    assert_eq!(mode(&job.state_path()), 0o600);
    assert_eq!(job.bundle_path(), job.dir().join("run-bundle.json"));
    assert_eq!(job.trace_path(), job.dir().join("trace.jsonl"));
    assert_eq!(job.fingerprints_path(), job.dir().join("fingerprints.json"));

    let state = job.state().unwrap();
    assert_eq!(state.id, job.id());
    assert_eq!(state.workdir, e.work_a);
    assert_eq!(state.state, StageState::Active);
    assert_eq!(state.run_state, None);
    assert!(state.created_at_unix_ms > 0);

    // Nothing but the job itself in jobs/ (no half-made or temporary entries).
    let names: Vec<String> = fs::read_dir(e.root.join("jobs"))
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![job.id().to_owned()]);

    // The documented shape.
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(job.state_path()).unwrap()).unwrap();
    for key in [
        "version",
        "id",
        "created_at_unix_ms",
        "workdir",
        "state",
        "run_state",
        "exit_code",
        "command",
        "pid",
    ] {
        assert!(v.get(key).is_some(), "job.json lacks {key}: {v}");
    }
    assert_eq!(v["state"], "active");
}

#[test]
fn a_job_can_start_with_its_command_and_keeps_its_own_id_state_and_workdir() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let (job, _lock) = store
        .create_locked_with(&e.work_a, None, |s| {
            s.command = vec!["claude".into()];
            s.pid = Some(4242);
            s.started_at_unix_ms = Some(s.created_at_unix_ms);
            s.id = "run-hijack".into();
            s.state = StageState::Staged;
            s.workdir = "/elsewhere".into();
        })
        .unwrap();
    let s = job.state().unwrap();
    assert_eq!(s.id, job.id());
    assert_eq!(s.state, StageState::Active);
    assert_eq!(s.workdir, e.work_a);
    assert_eq!(s.command, vec!["claude".to_owned()]);
    assert_eq!(s.pid, Some(4242));
    assert_eq!(s.started_at_unix_ms, Some(s.created_at_unix_ms));
}

#[test]
fn update_rewrites_atomically() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let (job, _lock) = store.create_locked(&e.work_a, None).unwrap();
    let new = job
        .update(|s| {
            s.command = vec!["claude".into(), "--flag".into()];
            s.pid = Some(4242);
            s.id = "run-hijack".into(); // ignored
        })
        .unwrap();
    assert_eq!(new.id, job.id());
    job.update(|s| {
        s.state = StageState::Staged;
        s.run_state = Some(RunState::Completed);
        s.exit_code = Some(0);
        s.changed_files = Some(3);
    })
    .unwrap();
    let s = job.state().unwrap();
    assert_eq!(s.command, vec!["claude", "--flag"]);
    assert_eq!(s.pid, Some(4242));
    assert_eq!(s.state, StageState::Staged);
    assert_eq!(s.run_state, Some(RunState::Completed));
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(job.state_path()).unwrap()).unwrap();
    assert_eq!(v["run_state"], "completed");
    // No temporary files left beside job.json.
    let stray: Vec<_> = fs::read_dir(job.dir())
        .unwrap()
        .map(|d| d.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    assert_eq!(mode(&job.state_path()), 0o600);
}

#[test]
fn the_lock_excludes() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let (job, lock) = store.create_locked(&e.work_a, None).unwrap();
    assert_eq!(lock.job_id(), job.id());
    assert!(matches!(job.try_lock(), Err(JobError::Busy { id }) if id == job.id()));
    assert!(job.is_locked().unwrap());

    // A blocking lock waits until the holder lets go.
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let job = job.clone();
        std::thread::spawn(move || {
            let got = job.lock_exclusive().unwrap();
            tx.send(()).unwrap();
            drop(got);
        })
    };
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "must wait"
    );
    drop(lock);
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    waiter.join().unwrap();

    assert!(!job.is_locked().unwrap());
    let again = job.try_lock().unwrap();
    drop(again);
}

#[test]
fn probing_the_lock_has_no_effect_and_names_its_holder() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let (job, lock) = store.create_locked(&e.work_a, None).unwrap();
    let me = std::process::id();
    // The holder is found by pid (when /proc/locks is readable), nobody else is.
    assert_ne!(job.lock_held_by(me).unwrap(), Some(false));
    assert_ne!(job.lock_held_by(me + 1).unwrap(), Some(true));
    let reserve = job.dir().join("reserve");
    assert!(reserve.exists(), "a new job has its records reserve");
    drop(lock);
    assert_ne!(job.lock_held_by(me).unwrap(), Some(true));
    // A free lock probed: still free, and the records reserve is still there.
    assert!(!job.is_locked().unwrap());
    assert!(!job.is_locked().unwrap());
    assert!(reserve.exists(), "a probe released the records reserve");
    // A real lock releases it.
    drop(job.try_lock().unwrap());
    assert!(!reserve.exists());
}

#[test]
fn list_is_newest_first_and_survives_a_broken_job() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let jobs: Vec<_> = (0..4)
        .map(|i| {
            let w = if i % 2 == 0 { &e.work_a } else { &e.work_b };
            store.create(w, None).unwrap()
        })
        .collect();
    fs::write(jobs[1].state_path(), b"{ not json").unwrap();
    // Something that is not a job is ignored.
    fs::create_dir(e.root.join("jobs/not-a-job")).unwrap();

    let listed = store.list().unwrap();
    let ids: Vec<&str> = listed.iter().map(JobSummary::id).collect();
    let want: Vec<&str> = jobs.iter().rev().map(|j| j.id()).collect();
    assert_eq!(ids, want);
    match &listed[2] {
        JobSummary::Unreadable { id, error, .. } => {
            assert_eq!(id, jobs[1].id());
            assert!(error.contains("not a valid job state file"), "{error}");
        }
        other => panic!("expected unreadable, got {other:?}"),
    }
    assert!(matches!(&listed[0], JobSummary::Readable { state, .. } if state.workdir == e.work_b));
}

#[test]
fn resolve_addresses() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let a1 = store.create(&e.work_a, None).unwrap();
    let b1 = store.create(&e.work_b, None).unwrap();
    let a2 = store.create(&e.work_a, None).unwrap();

    // last: newest job of this directory.
    assert_eq!(store.resolve("last", &e.work_a).unwrap(), a2);
    assert_eq!(store.resolve("last", &e.work_b).unwrap(), b1);
    assert!(matches!(
        store.resolve("last", &e.root),
        Err(JobError::NotFound { address }) if address == "last"
    ));

    // Full ids, prefixes with and without run-, any case.
    assert_eq!(store.resolve(a1.id(), &e.root).unwrap(), a1);
    let bare = a1.id().strip_prefix(ID_PREFIX).unwrap();
    assert_eq!(store.resolve(bare, &e.root).unwrap(), a1);
    assert_eq!(
        store.resolve(&bare.to_ascii_uppercase(), &e.root).unwrap(),
        a1
    );
    // The common prefix of ids made in the same instant is ambiguous.
    match store.resolve("run-0", &e.root) {
        Err(JobError::Ambiguous {
            address,
            candidates,
        }) => {
            assert_eq!(address, "run-0");
            assert_eq!(candidates, vec![a2.id(), b1.id(), a1.id()]);
        }
        other => panic!("expected ambiguous, got {other:?}"),
    }
    // The shortest unique prefix works.
    let unique = (1..=bare.len())
        .map(|n| &bare[..n])
        .find(|p| {
            [&a2, &b1]
                .iter()
                .all(|j| !j.id().strip_prefix(ID_PREFIX).unwrap().starts_with(p))
        })
        .unwrap();
    assert_eq!(store.resolve(unique, &e.root).unwrap(), a1);
    assert!(matches!(
        store.resolve("zzzz", &e.root),
        Err(JobError::NotFound { .. })
    ));
    assert!(matches!(
        store.resolve("run-", &e.root),
        Err(JobError::NotFound { .. })
    ));

    // Paths: absolute, relative to cwd, and not a job.
    assert_eq!(
        store.resolve(a1.dir().to_str().unwrap(), &e.root).unwrap(),
        a1
    );
    let rel = format!("./jobs/{}", b1.id());
    assert_eq!(store.resolve(&rel, &e.root).unwrap(), b1);
    assert!(matches!(
        store.resolve("./nowhere", &e.root),
        Err(JobError::NotFound { .. })
    ));
    assert!(matches!(
        store.resolve(e.work_a.to_str().unwrap(), &e.root),
        Err(JobError::NotFound { .. })
    ));
}

#[test]
fn stage_directories() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let outside = e.root.parent().unwrap().join("stages");
    fs::create_dir(&outside).unwrap();

    // Absent: created.
    let fresh = outside.join("fresh");
    let job = store.create(&e.work_a, Some(&fresh)).unwrap();
    assert_eq!(job.dir(), fs::canonicalize(&fresh).unwrap());
    assert_eq!(mode(&fresh), 0o700);
    assert!(job.upper().is_dir() && job.overlay_work().is_dir() && job.new_root().is_dir());
    // Listed and addressable like any job.
    assert!(
        fs::symlink_metadata(e.root.join("jobs").join(job.id()))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(store.resolve("last", &e.work_a).unwrap(), job);
    assert_eq!(store.resolve(job.id(), &e.root).unwrap(), job);
    assert_eq!(
        store.resolve(fresh.to_str().unwrap(), &e.root).unwrap(),
        job
    );
    assert!(matches!(&store.list().unwrap()[0], JobSummary::Readable { job: j, .. } if *j == job));

    // Empty: used.
    let empty = outside.join("empty");
    fs::create_dir(&empty).unwrap();
    store.create(&e.work_a, Some(&empty)).unwrap();

    // Not empty, not a directory: refused, untouched.
    let full = outside.join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("mine"), b"keep").unwrap();
    assert!(matches!(
        store.create(&e.work_a, Some(&full)),
        Err(JobError::StageNotEmpty { .. })
    ));
    assert_eq!(fs::read_dir(&full).unwrap().count(), 1);
    let plain = outside.join("plain");
    fs::write(&plain, b"x").unwrap();
    assert!(matches!(
        store.create(&e.work_a, Some(&plain)),
        Err(JobError::StageNotDirectory { .. })
    ));

    // Inside the workdir: refused, and what was created for it is gone again.
    let inside = e.work_a.join(".stage");
    assert!(matches!(
        store.create(&e.work_a, Some(&inside)),
        Err(JobError::StageInsideWorkdir { .. })
    ));
    assert!(!inside.exists());
    assert_eq!(store.list().unwrap().len(), 2);

    // A store inside the workdir would put the job there too.
    let nested = JobStore::open(&e.work_b.join(".cofferdam")).unwrap();
    assert!(matches!(
        nested.create(&e.work_b, None),
        Err(JobError::StageInsideWorkdir { .. })
    ));
    assert_eq!(nested.list().unwrap().len(), 0);
}

#[test]
fn overlay_work_with_a_mode_000_directory_is_removed() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    let job = store.create(&e.work_a, None).unwrap();
    let ww = job.overlay_work().join("work");
    fs::create_dir(&ww).unwrap();
    fs::create_dir(ww.join("inner")).unwrap();
    fs::write(ww.join("inner/#123"), b"left over").unwrap();
    fs::set_permissions(ww.join("inner"), fs::Permissions::from_mode(0o000)).unwrap();
    fs::set_permissions(&ww, fs::Permissions::from_mode(0o000)).unwrap();
    job.remove_overlay_work().unwrap();
    assert!(!job.overlay_work().exists());
    assert!(job.upper().is_dir(), "only work/ goes");
    job.remove_overlay_work().unwrap(); // absent is fine
}

#[test]
fn only_the_callers_own_store_and_jobs_are_used() {
    let e = env();
    let store = JobStore::open(&e.root).unwrap();
    assert_eq!(mode(&e.root.join("jobs")), 0o700);
    let outside = e.root.parent().unwrap().join("stages");
    fs::create_dir(&outside).unwrap();

    // A --stage directory others can write: refused, left as it is.
    let open = outside.join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(
        store.create(&e.work_a, Some(&open)),
        Err(JobError::NotOwned(_))
    ));
    assert_eq!(mode(&open), 0o777);
    assert_eq!(fs::read_dir(&open).unwrap().count(), 0);

    // A job directory others can write: listed as refused, never `last`, refused by id.
    let job = store.create(&e.work_a, None).unwrap();
    fs::set_permissions(job.dir(), fs::Permissions::from_mode(0o770)).unwrap();
    match &store.list().unwrap()[0] {
        JobSummary::Unreadable { error, .. } => assert!(error.contains("mode 0770"), "{error}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.resolve("last", &e.work_a),
        Err(JobError::NotFound { .. })
    ));
    assert!(matches!(
        store.resolve(job.id(), &e.root),
        Err(JobError::NotOwned(_))
    ));
    // A record that is a symlink: refused too.
    fs::set_permissions(job.dir(), fs::Permissions::from_mode(0o700)).unwrap();
    fs::remove_file(job.dir().join("job.json")).unwrap();
    std::os::unix::fs::symlink("/dev/null", job.dir().join("job.json")).unwrap();
    let err = store.resolve(job.id(), &e.root).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");

    // A --stage directory removed since: unreadable, not refused.
    let gone = outside.join("gone");
    let staged = store.create(&e.work_b, Some(&gone)).unwrap();
    fs::remove_dir_all(&gone).unwrap();
    let listed = store.list().unwrap();
    let row = listed.iter().find(|s| s.id() == staged.id()).unwrap();
    match row {
        JobSummary::Unreadable { error, .. } => {
            assert!(!error.contains("refusing"), "{error}");
        }
        other => panic!("{other:?}"),
    }

    // A store root others can write, or that is a symlink: refused.
    fs::set_permissions(&e.root, fs::Permissions::from_mode(0o775)).unwrap();
    let err = JobStore::open(&e.root).unwrap_err().to_string();
    assert!(err.contains("chmod go-w"), "{err}");
    fs::set_permissions(&e.root, fs::Permissions::from_mode(0o700)).unwrap();
    let link = outside.join("link");
    std::os::unix::fs::symlink(&e.root, &link).unwrap();
    assert!(matches!(JobStore::open(&link), Err(JobError::NotOwned(_))));
}
