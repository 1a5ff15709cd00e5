//! `cofferdam gc` / `prune` (issue 20): removes finished jobs by state, age and workdir,
//! `--dry-run` removes nothing, a live job is never removed, and it says what it freed.

use crate::common::*;
use crate::housekeeping::run_in;
use crate::limits::{assert_gone, kill, spawn, start};
use std::process::Output;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ids(s: &Sandbox) -> Vec<String> {
    let v = json_of(&s.cmd().args(["--json", "jobs"]).output().unwrap());
    v.as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

/// `gc --json` of staged and interrupted jobs (never a live one).
fn gc_staged_and_interrupted(s: &Sandbox) -> serde_json::Value {
    let args = [
        "--json",
        "gc",
        "--state",
        "staged",
        "--state",
        "interrupted",
    ];
    json_of(&s.cmd().args(args).output().unwrap())
}

#[test]
fn gc_removes_what_it_is_asked_and_never_a_live_job() {
    let s = Sandbox::new();
    let sub = s.work.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let run = |dir: &std::path::Path, script: &str| run_in(&s, dir, script);
    let applied = run(s.work.path(), "head -c 100000 /dev/urandom > f");
    assert!(
        s.cmd()
            .args(["apply", &applied])
            .output()
            .unwrap()
            .status
            .success()
    );
    let dropped = run(&sub, "echo d > d");
    assert!(
        s.cmd()
            .args(["drop", &dropped])
            .output()
            .unwrap()
            .status
            .success()
    );
    let staged = run(&sub, "echo s > s");
    let outside = tempfile::tempdir().unwrap();
    let kept_in = outside.path().join("stage");
    let out = s
        .cmd()
        .args(["--json", "run", "--stage"])
        .arg(&kept_in)
        .args(["--", "true"])
        .output()
        .unwrap();
    let linked = json_of(&out)["job"].as_str().unwrap().to_owned();
    assert!(
        s.cmd()
            .args(["drop", &linked])
            .output()
            .unwrap()
            .status
            .success()
    );

    // Too young for --older-than: nothing.
    let out = s.cmd().args(["gc", "--older-than", "1h"]).output().unwrap();
    assert!(
        stdout(&out).contains("removed 0 job(s), 0 B freed"),
        "{}",
        stdout(&out)
    );
    // A dry run names what would go and removes nothing.
    let out = s.cmd().args(["gc", "--dry-run"]).output().unwrap();
    let said = stdout(&out);
    for id in [&applied, &dropped, &linked] {
        assert!(said.contains(&format!("would remove {id}")), "{said}");
    }
    assert!(!said.contains(&staged), "{said}");
    assert!(said.contains("would remove 3 job(s)"), "{said}");
    assert_eq!(ids(&s).len(), 4);
    // --workdir: only sub's dropped job.
    let v = json_of(
        &s.cmd()
            .args(["--json", "prune", "--workdir", "sub"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["removed"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["removed"][0]["id"], dropped.as_str());
    assert!(!ids(&s).contains(&dropped));
    // The rest of the finished ones; the --stage directory is left and said so.
    let out = s.cmd().arg("gc").output().unwrap();
    let said = stdout(&out);
    assert!(
        said.contains("removed 2 job(s)") && said.contains("freed"),
        "{said}"
    );
    assert!(said.contains("(--stage)"), "{said}");
    assert!(kept_in.join("job.json").exists());
    assert_eq!(ids(&s), vec![staged.clone()]);

    // A live run is never removed, whatever the states asked for.
    let marker = format!("gc-live-{}", std::process::id());
    let script = format!("sleep 30 # {marker}");
    let child = start(&s, &["run", "-q", "--", "sh", "-c", &script], &marker);
    let v = gc_staged_and_interrupted(&s);
    let removed: Vec<&str> = v["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(removed, vec![staged.as_str()], "{v}");
    assert_eq!(ids(&s).len(), 1, "the live job stays");
    kill(&child, libc::SIGTERM);
    let mut child = child;
    child.wait().unwrap();
    assert_gone(&marker, 10);
    let bad = s.cmd().args(["gc", "--state", "active"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// The fresh copies and the record folder of a batch: a copy goes once its task's job is
/// gone (a staged job keeps its copy), the record folder with the last job; `--dry-run`
/// says so and removes nothing; a running batch is left whole.
#[test]
fn gc_removes_a_batchs_copies_with_their_jobs_and_never_a_running_batchs() {
    let s = Sandbox::new();
    std::fs::create_dir(s.work.path().join("src")).unwrap();
    std::fs::write(s.work.path().join("src/seed"), "seed\n").unwrap();
    let mut lines = String::new();
    for n in 1..=3 {
        lines.push_str(&format!(
            "{{\"copy_of\":\"src\",\"command\":[\"sh\",\"-c\",\"echo {n} > f{n}\"]}}\n"
        ));
    }
    let file = s.write("tasks.jsonl", &lines);
    let out = s
        .cmd()
        .args(["--json", "batch", "-j", "3"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let doc = json_of(&out);
    let id = doc["batch"].as_str().unwrap().to_owned();
    let dir = std::path::PathBuf::from(doc["dir"].as_str().unwrap());
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("batch.json")).unwrap()).unwrap();
    let copies = std::path::PathBuf::from(record["copies"].as_str().unwrap());
    let job = |n: usize| doc["tasks"][n - 1]["job"].as_str().unwrap().to_owned();
    for n in 1..=3 {
        assert!(copies.join(n.to_string()).join("seed").exists(), "copy {n}");
    }
    for n in [2, 3] {
        let out = s.cmd().args(["drop", &job(n)]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let batches = |v: &serde_json::Value| v["batches"].as_array().unwrap().clone();
    // A dry run: the two dropped jobs and their copies would go; task 1's stays, so does
    // the record.
    let v = json_of(
        &s.cmd()
            .args(["--json", "gc", "--dry-run"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["removed"].as_array().unwrap().len(), 2, "{v}");
    let b = batches(&v);
    assert_eq!(b.len(), 1, "{v}");
    assert_eq!(b[0]["id"], id.as_str());
    assert_eq!(b[0]["record_removed"], false, "{v}");
    let want: Vec<String> = [2, 3]
        .iter()
        .map(|n| copies.join(n.to_string()).display().to_string())
        .collect();
    assert_eq!(b[0]["copies"], serde_json::json!(want), "{v}");
    assert!(copies.join("2").exists() && dir.exists());
    // For real.
    let out = s.cmd().arg("gc").output().unwrap();
    assert!(
        stdout(&out).contains(&format!("removed batch {id}: 2 copies")),
        "{}",
        stdout(&out)
    );
    assert!(!copies.join("2").exists() && !copies.join("3").exists());
    assert!(copies.join("1/seed").exists() && dir.exists());
    // Task 1's job applied into its copy, then collected: the last copy and the record go.
    let out = s.cmd().args(["apply", &job(1)]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = json_of(&s.cmd().args(["--json", "gc"]).output().unwrap());
    assert_eq!(batches(&v)[0]["record_removed"], true, "{v}");
    assert!(!copies.exists() && !dir.exists(), "{v}");

    // A running batch: kept whole, whatever the jobs.
    let file = s.write(
        "long.jsonl",
        "{\"copy_of\":\"src\",\"command\":[\"sleep\",\"3542\"]}\n",
    );
    let mut child = spawn(&s, &["--json", "batch", file.to_str().unwrap()]);
    let live = crate::limits::wait_for(std::time::Duration::from_secs(60), || {
        !crate::limits::processes_with("3542").is_empty()
    });
    assert!(live, "the batch's task never ran");
    let v = gc_staged_and_interrupted(&s);
    assert!(batches(&v).is_empty(), "{v}");
    let kept = v["batches_kept"].as_array().unwrap();
    assert_eq!(kept.len(), 1, "{v}");
    assert_eq!(kept[0]["reason"], "the batch is still running", "{v}");
    kill(&child, libc::SIGINT);
    child.wait().unwrap();
    assert_gone("3542", 20);
    // Ended, its cancelled job staged: gc of staged jobs takes the batch with it.
    let v = json_of(
        &s.cmd()
            .args(["--json", "gc", "--state", "staged"])
            .output()
            .unwrap(),
    );
    assert_eq!(batches(&v).len(), 1, "{v}");
    assert_eq!(batches(&v)[0]["record_removed"], true, "{v}");
    assert!(
        std::fs::read_dir(s.store.path().join("batches"))
            .unwrap()
            .next()
            .is_none()
    );
}
