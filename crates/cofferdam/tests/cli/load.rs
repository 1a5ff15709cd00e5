//! Load: 50 sealed runs at once in one storage root, while other processes list the jobs,
//! show their status and apply the ones that have finished. Afterwards every job is there
//! once, each bundle verifies, each host workdir holds exactly what its run wrote, no job
//! lock is held and no process of the test is left.

use crate::apply::sealed_host;
use crate::common::*;
use crate::equivalence::text as show;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

const RUNS: usize = 50;

/// A `cofferdam` command in `dir` with the shared storage root.
fn cmd_in(s: &Sandbox, dir: &Path) -> StdCommand {
    let mut c = StdCommand::new(assert_cmd::cargo::cargo_bin("cofferdam"));
    c.env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(dir);
    c
}

fn jobs(s: &Sandbox) -> Vec<Value> {
    let out = cmd_in(s, s.work.path())
        .args(["jobs", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "jobs: {}", show(&out));
    json_of(&out).as_array().unwrap().clone()
}

/// Pids of live processes carrying `marker` in their command line or `COFFERDAM_HOME=store`
/// in their environment (only this user's processes are readable, which is all the test
/// starts).
fn leftovers(marker: &str, store: &Path) -> Vec<String> {
    let env_needle = format!("COFFERDAM_HOME={}", store.display()).into_bytes();
    let mut found = Vec::new();
    let me = std::process::id().to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let environ = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
        if has(&cmdline, marker.as_bytes()) || environ.split(|&b| b == 0).any(|v| v == env_needle) {
            found.push(format!(
                "{name}: {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

#[test]
fn fifty_concurrent_runs_with_status_jobs_and_apply_lose_nothing() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let marker = format!("cofferdam-load-{}", std::process::id());
    let dirs: Vec<PathBuf> = (0..RUNS)
        .map(|i| {
            let d = s.work.path().join(format!("w{i:02}"));
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("seed"), format!("seed {i}\n")).unwrap();
            d
        })
        .collect();
    let expected = |i: usize| format!("seed {i}\nrun {i}\n");

    let mut children: Vec<std::process::Child> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            // Varied lengths, so runs end while others start and finish.
            let script = format!(
                ": {marker}; echo run {i} >> seed; mkdir -p out/{i}; echo {i} > out/{i}/f; \
                 sleep 0.{}",
                (i * 7) % 10
            );
            cmd_in(&s, d)
                .args(["run", "-q", "--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();

    let done = AtomicBool::new(false);
    let applied_live = AtomicUsize::new(0);
    let queries = AtomicUsize::new(0);
    let applied_ids: std::sync::Mutex<BTreeSet<String>> = Default::default();
    std::thread::scope(|scope| {
        // `jobs` and `status` while runs start and end: always a valid answer.
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                for j in jobs(&s) {
                    let id = j["id"].as_str().unwrap();
                    let out = cmd_in(&s, s.work.path())
                        .args(["status", "--json", id])
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "status {id}: {}", show(&out));
                    json_of(&out);
                    queries.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // Apply each job as soon as it is staged.
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                for j in jobs(&s) {
                    let id = j["id"].as_str().unwrap().to_owned();
                    if j["state"] != "staged" || applied_ids.lock().unwrap().contains(&id) {
                        continue;
                    }
                    let out = cmd_in(&s, s.work.path())
                        .args(["apply", &id])
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "apply {id}: {}", show(&out));
                    applied_ids.lock().unwrap().insert(id);
                    applied_live.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        for (i, c) in children.iter_mut().enumerate() {
            let st = c.wait().unwrap();
            let mut err = String::new();
            std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(st.success(), "run {i}: {st:?}\n{err}");
        }
        done.store(true, Ordering::Relaxed);
    });

    // Every run is one job, each in its own workdir.
    let all = jobs(&s);
    let ids: BTreeSet<&str> = all.iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(all.len(), RUNS, "{all:?}");
    assert_eq!(ids.len(), RUNS, "duplicate ids");
    let by_dir: BTreeMap<String, &Value> = all
        .iter()
        .map(|j| (j["workdir"].as_str().unwrap().to_owned(), j))
        .collect();
    assert_eq!(by_dir.len(), RUNS, "two jobs share a workdir");

    // The rest applied after the fact.
    for j in &all {
        if j["state"] == "staged" {
            let id = j["id"].as_str().unwrap();
            let out = cmd_in(&s, s.work.path())
                .args(["apply", id])
                .output()
                .unwrap();
            assert!(out.status.success(), "apply {id}: {}", show(&out));
        }
    }
    for (i, d) in dirs.iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(d.join("seed")).unwrap(),
            expected(i)
        );
        assert_eq!(
            std::fs::read_to_string(d.join(format!("out/{i}/f"))).unwrap(),
            format!("{i}\n")
        );
        let j = by_dir[&d.display().to_string()];
        let id = j["id"].as_str().unwrap();
        let job_dir = s.store.path().join("jobs").join(id);
        let out = cmd_in(&s, s.work.path())
            .arg("bundle")
            .arg("verify")
            .arg(job_dir.join("run-bundle.json"))
            .output()
            .unwrap();
        assert!(out.status.success(), "bundle of {id}: {}", show(&out));
        let lock = std::fs::File::open(job_dir.join("lock")).unwrap();
        lock.try_lock()
            .unwrap_or_else(|e| panic!("the lock of {id} is still held: {e}"));
        let state = json_of(
            &cmd_in(&s, d)
                .args(["status", "--json", "last"])
                .output()
                .unwrap(),
        );
        let ctx = &state["review_context"];
        assert!(
            ctx["job_dir"].as_str().unwrap().ends_with(id),
            "`last` in {} is not its job: {ctx}",
            d.display()
        );
        assert_eq!(ctx["job_state"], "applied", "{ctx}");
    }
    let final_states: Vec<Value> = jobs(&s).iter().map(|j| j["state"].clone()).collect();
    assert!(
        final_states.iter().all(|st| st == "applied"),
        "{final_states:?}"
    );

    // Nothing of the test is still running.
    let mut left = leftovers(&marker, s.store.path());
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        left = leftovers(&marker, s.store.path());
    }
    assert!(left.is_empty(), "processes left: {left:#?}");
    println!(
        "{RUNS} concurrent runs: {} applied while others ran, {} status answers meanwhile",
        applied_live.load(Ordering::Relaxed),
        queries.load(Ordering::Relaxed)
    );
}
