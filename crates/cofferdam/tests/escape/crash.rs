//! SIGKILL of `cofferdam apply` at seeded random instants (`CRASH_SEED=N` replays a run;
//! the seed is printed). A stage of every kind of change: after each kill every host path is
//! wholly old or wholly new, the only extra names are cofferdam's hidden temporaries, the
//! job stays reviewable, and the next apply finishes with the host equal to what the command
//! made.

use crate::common::{landlock_abi_independently, require, userns_independently};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const FILES: usize = 600;

/// xorshift64*: small, seedable, good enough to spread kill delays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// One entry: 'f' file (mode, bytes), 'd' dir, 'l' symlink (target).
type Tree = BTreeMap<String, (char, u32, Vec<u8>)>;

fn tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = p.symlink_metadata().unwrap();
            let mode = m.permissions().mode() & 0o777;
            let v = if m.is_dir() {
                stack.push(p.clone());
                ('d', mode, Vec::new())
            } else if m.file_type().is_symlink() {
                (
                    'l',
                    0,
                    std::fs::read_link(&p)
                        .unwrap()
                        .display()
                        .to_string()
                        .into_bytes(),
                )
            } else {
                ('f', mode, std::fs::read(&p).unwrap())
            };
            out.insert(rel, v);
        }
    }
    out
}

fn setup(work: &Path) {
    for i in 0..FILES {
        std::fs::write(work.join(format!("f{i:04}")), format!("old {i}\n")).unwrap();
    }
    std::fs::create_dir_all(work.join("src/deep")).unwrap();
    std::fs::write(work.join("src/deep/lib.rs"), "fn old() {}\n").unwrap();
    std::fs::create_dir(work.join("becomes-file")).unwrap();
    std::fs::write(work.join("becomes-file/x"), "x\n").unwrap();
    std::fs::write(work.join("becomes-link"), "plain\n").unwrap();
    std::fs::write(work.join("script.sh"), "echo hi\n").unwrap();
    for i in 0..5 {
        std::fs::write(work.join(format!("gone{i}")), "gone\n").unwrap();
    }
}

/// The agent's work: modify every file (3 KB each), add a tree, delete, replace a directory
/// by a file and a file by a symlink, chmod.
const SCRIPT: &str = r#"pad=$(printf '%3000s' | tr ' ' x)
for f in f*; do printf 'new %s %s\n' "$f" "$pad" > "$f"; done
mkdir -p added/a/b; for j in 0 1 2 3 4 5 6 7; do echo "added $j" > added/a/b/n$j; done
echo 'fn new() {}' > src/deep/lib.rs
rm -rf becomes-file; echo 'now a file' > becomes-file
rm becomes-link; ln -s src/deep/lib.rs becomes-link
chmod 755 script.sh
rm gone*"#;

fn cmd(cofferdam_env: &[(&str, PathBuf)], work: &Path) -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("cofferdam"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(work);
    for (k, v) in cofferdam_env {
        c.env(k, v);
    }
    c
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Each path wholly in `old` or wholly in `new`; any other name must be a hidden cofferdam
/// temporary; a path in both is never missing. Returns how many paths are new.
fn check_not_torn(now: &Tree, old: &Tree, new: &Tree) -> usize {
    let mut n = 0;
    for (path, v) in now {
        if path.split('/').any(|c| c.starts_with(".cofferdam-")) {
            continue;
        }
        let is_old = old.get(path) == Some(v);
        let is_new = new.get(path) == Some(v);
        // A directory's entry is "old or new" whatever its mode is mid-batch.
        let dir_ok = v.0 == 'd' && (old.contains_key(path) || new.contains_key(path));
        assert!(
            is_old || is_new || dir_ok,
            "{path} is torn or unknown: {:?}",
            (v.0, v.1, String::from_utf8_lossy(&v.2))
        );
        if is_new && !is_old {
            n += 1;
        }
    }
    // A path that exists before and after is replaced in one rename: never missing.
    for path in old.keys().filter(|p| new.contains_key(*p)) {
        assert!(now.contains_key(path), "{path} vanished mid-apply");
    }
    n
}

/// A fresh workdir and store with the agent's work staged: (base dir, env, job, old, new).
struct Round {
    _base: tempfile::TempDir,
    work: PathBuf,
    env: [(&'static str, PathBuf); 2],
    job: String,
    old: Tree,
    new: Tree,
}

fn staged_round() -> Round {
    let base = tempfile::tempdir().unwrap();
    let (work, store, home, expect) = (
        base.path().join("work"),
        base.path().join("store"),
        base.path().join("home"),
        base.path().join("expect"),
    );
    for d in [&work, &store, &home, &expect] {
        std::fs::create_dir(d).unwrap();
    }
    let env = [("HOME", home), ("COFFERDAM_HOME", store)];
    setup(&work);
    setup(&expect);
    let st = Command::new("sh")
        .args(["-c", SCRIPT])
        .current_dir(&expect)
        .status()
        .unwrap();
    assert!(st.success());
    let out = cmd(&env, &work)
        .args(["run", "--json", "--", "sh", "-c", SCRIPT])
        .output()
        .unwrap();
    ok(&out);
    Round {
        job: crate::harness::job_of(&out),
        old: tree(&work),
        new: tree(&expect),
        work,
        env,
        _base: base,
    }
}

impl Round {
    /// Start `apply`, SIGKILL it after `delay`; whether it had already finished.
    fn apply_killed_after(&self, delay: Duration) -> bool {
        let mut child = cmd(&self.env, &self.work)
            .args(["apply", &self.job, "--allow-sensitive"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        child.wait().unwrap().success()
    }

    fn reviewable(&self) {
        for args in [
            &["status", "--json", &self.job][..],
            &["status", "--review", &self.job][..],
            &["diff", &self.job, "--stat"][..],
        ] {
            ok(&cmd(&self.env, &self.work).args(args).output().unwrap());
        }
    }

    /// The next apply finishes and the host is what the command made.
    fn finish(&self) {
        ok(&cmd(&self.env, &self.work)
            .args(["apply", &self.job, "--allow-sensitive"])
            .output()
            .unwrap());
        let done = tree(&self.work);
        let leftovers: Vec<&String> = done.keys().filter(|k| k.contains(".cofferdam-")).collect();
        assert!(leftovers.is_empty(), "temporaries left: {leftovers:?}");
        assert_eq!(
            done.keys().collect::<Vec<_>>(),
            self.new.keys().collect::<Vec<_>>()
        );
        // Content, types, symlink targets, and file modes (minus setuid) are carried.
        for (k, v) in &self.new {
            let d = &done[k];
            assert_eq!((d.0, &d.2), (v.0, &v.2), "{k}");
            if v.0 == 'f' {
                assert_eq!(d.1, v.1, "mode of {k}");
            }
        }
        let st = cmd(&self.env, &self.work)
            .args(["status", "--json", &self.job])
            .output()
            .unwrap();
        let b: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
        assert_eq!(b["review_context"]["job_state"], "applied");
    }
}

#[test]
fn sigkill_of_apply_at_seeded_random_instants() {
    if !(require("unprivileged user namespaces", userns_independently())
        && require("Landlock", landlock_abi_independently() > 0))
    {
        return;
    }
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("crash test seed: CRASH_SEED={seed}");
    let mut rng = Rng(seed | 1);
    // Calibrate: how long one whole apply takes here (an upper bound for the kill delay).
    let r = staged_round();
    let t0 = std::time::Instant::now();
    r.finish();
    let whole = t0.elapsed().as_millis().max(20) as u64;
    let mut kills = Vec::new();
    for _ in 0..5 {
        let r = staged_round();
        // One kill inside the first apply, one maybe inside the recovering apply.
        for _ in 0..2 {
            let delay = rng.next() % whole;
            if r.apply_killed_after(Duration::from_millis(delay)) {
                break;
            }
            let written = check_not_torn(&tree(&r.work), &r.old, &r.new);
            kills.push((delay, written));
            r.reviewable();
        }
        r.finish();
    }
    println!(
        "an apply takes ~{whole} ms here; killed {} time(s) (delay ms, paths new at the kill): {kills:?}",
        kills.len()
    );
}
