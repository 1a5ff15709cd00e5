//! The attack table's types, the per-attack context (a fresh workdir, home, store and an
//! "outside" directory under one temporary base), the runner that drives the real binary,
//! and the result table.

use crate::common::{json_of, landlock_abi_independently, require, userns_independently};
use serde_json::Value;
use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Which boundary an attack tries to cross.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    FsWrite,
    FsRead,
    Process,
    Kernel,
    Network,
    Terminal,
    Records,
    Resources,
}

impl Boundary {
    pub fn name(self) -> &'static str {
        match self {
            Self::FsWrite => "filesystem write",
            Self::FsRead => "filesystem read",
            Self::Process => "process/signals",
            Self::Kernel => "kernel surface",
            Self::Network => "network",
            Self::Terminal => "terminal",
            Self::Records => "records",
            Self::Resources => "resources",
        }
    }

    /// Every attack id starts with its boundary's prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::FsWrite => "fw.",
            Self::FsRead => "fr.",
            Self::Process => "ps.",
            Self::Kernel => "ks.",
            Self::Network => "net.",
            Self::Terminal => "tty.",
            Self::Records => "rec.",
            Self::Resources => "res.",
        }
    }
}

/// An enforcement tier the suite knows how to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// User, mount, pid, net, ipc and uts namespaces, pivot_root, Landlock, seccomp.
    Sealed,
}

/// How to get a tier from `cofferdam run` and how the scope report names it.
pub struct TierSpec {
    pub tier: Tier,
    /// `achieved_containment` in the scope report when the host offers it.
    pub containment: &'static str,
    /// Extra `run` arguments selecting it.
    pub run_args: &'static [&'static str],
}

/// Every tier, strongest first. A tier the host does not offer is skipped (SKIP-HOST).
pub const TIERS: &[TierSpec] = &[TierSpec {
    tier: Tier::Sealed,
    containment: "sealed",
    run_args: &["--containment", "sealed"],
}];

/// Shorthand for the attack rows that must be refused on the sealed tier.
pub const SEALED_MUST: &[(Tier, Verdict)] = &[(Tier::Sealed, Verdict::Must)];

/// What the suite requires of an attack.
#[derive(Debug, Clone, Copy)]
pub enum Verdict {
    /// The attack must be refused; getting through fails the suite.
    Must,
    /// A known limitation of the tier: it may get through, and the scope report must carry
    /// a "not protected here" line starting with this text.
    Documented(&'static str),
}

/// What one probe found.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Refused; the evidence.
    Denied(String),
    /// Got through; what happened.
    Escaped(String),
    /// Not meaningful on this host or user; why.
    Skipped(String),
}

impl Outcome {
    /// Both refused (evidence joined), else the first that was not.
    pub fn and(self, next: Outcome) -> Outcome {
        match (self, next) {
            (Outcome::Denied(a), Outcome::Denied(b)) => Outcome::Denied(format!("{a}; {b}")),
            (Outcome::Denied(_), other) => other,
            (other, _) => other,
        }
    }
}

pub type Probe = fn(&Ctx) -> Outcome;

/// One row of the attack table.
pub struct Attack {
    pub id: &'static str,
    pub boundary: Boundary,
    pub description: &'static str,
    /// The tiers it runs on, each with its verdict there.
    pub on: &'static [(Tier, Verdict)],
    pub probe: Probe,
}

/// Denied when `ok`, else escaped with `what`.
pub fn check(ok: bool, evidence: impl Into<String>, what: impl Into<String>) -> Outcome {
    if ok {
        Outcome::Denied(evidence.into())
    } else {
        Outcome::Escaped(what.into())
    }
}

/// One finished `cofferdam run --json`.
#[derive(Debug)]
pub struct Run {
    /// cofferdam's exit code.
    pub code: Option<i32>,
    /// The command's stdout (cofferdam's JSON summary removed).
    pub out: String,
    /// stderr (the command's and cofferdam's).
    pub err: String,
    /// The job id.
    pub job: String,
    /// Where the bundle is.
    pub bundle_path: PathBuf,
    /// The Run Bundle as written.
    pub bundle: Value,
}

impl Run {
    /// Statuses of every observation of `mechanism`.
    pub fn control(&self, mechanism: &str) -> Vec<String> {
        controls(&self.bundle)
            .iter()
            .filter(|c| c["mechanism"] == mechanism)
            .map(|c| c["status"].as_str().unwrap_or("?").to_owned())
            .collect()
    }

    /// The observation of `mechanism` whose details have `key` = `value`.
    pub fn control_with(&self, mechanism: &str, key: &str, value: &str) -> Option<Value> {
        controls_of(&self.bundle, mechanism)
            .into_iter()
            .find(|c| c["details"][key] == value)
    }

    /// A safety boolean (`null` when unknown).
    pub fn safety(&self, field: &str) -> Value {
        self.bundle["safety"][field].clone()
    }

    /// Staged changes as `(path, kind)`.
    pub fn changes(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self.bundle["filesystem"]["changes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| {
                        (
                            c["path"].as_str().unwrap_or("").to_owned(),
                            c["kind"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The lines of the command's stdout.
    pub fn lines(&self) -> Vec<&str> {
        self.out.lines().collect()
    }

    /// The value printed by the probe as `key=value`.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.out
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }
}

fn controls(b: &Value) -> Vec<Value> {
    b["executor_observations"]["controls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Every observation of `mechanism` in bundle `b`.
pub fn controls_of(b: &Value, mechanism: &str) -> Vec<Value> {
    controls(b)
        .into_iter()
        .filter(|c| c["mechanism"] == mechanism)
        .collect()
}

/// A host process the attack tries to reach; killed on drop.
pub struct HostProcess {
    child: Child,
}

impl HostProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running (not exited, not a zombie).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh world for one attack: `base/{work,home,store,outside}`.
pub struct Ctx {
    base: tempfile::TempDir,
    tier: &'static TierSpec,
    vars: RefCell<Vec<(String, String)>>,
}

impl Ctx {
    pub fn new(tier: &'static TierSpec) -> Self {
        let base = tempfile::tempdir().unwrap();
        for d in ["work", "home", "store", "outside"] {
            std::fs::create_dir(base.path().join(d)).unwrap();
        }
        let ctx = Ctx {
            base,
            tier,
            vars: RefCell::new(Vec::new()),
        };
        for (k, v) in [
            ("BASE", ctx.base()),
            ("OUTSIDE", ctx.outside()),
            ("HOSTHOME", ctx.home()),
            ("STORE", ctx.store()),
        ] {
            ctx.var(k, v.display().to_string());
        }
        ctx
    }

    pub fn base(&self) -> PathBuf {
        self.base.path().to_path_buf()
    }
    pub fn work(&self) -> PathBuf {
        self.base.path().join("work")
    }
    pub fn home(&self) -> PathBuf {
        self.base.path().join("home")
    }
    pub fn store(&self) -> PathBuf {
        self.base.path().join("store")
    }
    pub fn outside(&self) -> PathBuf {
        self.base.path().join("outside")
    }

    /// Pass a variable into the sandbox (`--env NAME`).
    pub fn var(&self, k: &str, v: impl Into<String>) {
        self.vars.borrow_mut().push((k.to_owned(), v.into()));
    }

    /// Write a file (parents created).
    pub fn put(&self, path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// `cofferdam` with a clean environment, in the workdir.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("cofferdam"));
        c.env_clear()
            .env("HOME", self.home())
            .env("COFFERDAM_HOME", self.store())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(self.work());
        for (k, v) in self.vars.borrow().iter() {
            c.env(k, v);
        }
        c
    }

    /// `cofferdam run --json` on this tier with `extra` flags and the command `argv`.
    pub fn run(&self, extra: &[&str], argv: &[&str]) -> Run {
        let mut c = self.cmd();
        c.args(["--color", "never", "run", "--json"])
            .args(self.tier.run_args);
        for (k, _) in self.vars.borrow().iter() {
            c.args(["--env", k]);
        }
        c.args(extra).arg("--").args(argv).stdin(Stdio::null());
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        // cofferdam's pretty JSON summary is the last object on stdout.
        let at = stdout
            .rfind("{\n  \"bundle\"")
            .unwrap_or_else(|| panic!("no run summary (exit {:?}): {stdout}\n{err}", out.status));
        let summary: Value = serde_json::from_str(&stdout[at..]).unwrap();
        let bundle_path = PathBuf::from(summary["bundle"].as_str().unwrap());
        let bundle: Value = serde_json::from_slice(&std::fs::read(&bundle_path).unwrap()).unwrap();
        Run {
            code: out.status.code(),
            out: stdout[..at].to_owned(),
            err,
            job: summary["job"].as_str().unwrap().to_owned(),
            bundle_path,
            bundle,
        }
    }

    /// `sh -c script`.
    pub fn sh(&self, script: &str) -> Run {
        self.run(&[], &["sh", "-c", script])
    }

    /// `/usr/bin/python3 -c script`.
    pub fn py(&self, script: &str) -> Run {
        self.run(&[], &["/usr/bin/python3", "-c", script])
    }

    /// A host `sleep` the attack may try to signal (its pid in `$HOSTPID`).
    pub fn host_process(&self) -> HostProcess {
        let child = Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.var("HOSTPID", child.id().to_string());
        HostProcess { child }
    }

    /// `cofferdam scope --json` for this context.
    pub fn scope(&self) -> Value {
        let out = self.cmd().args(["scope", "--json"]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        json_of(&out)
    }

    /// The common claims every run on this tier must make, whatever the attack.
    pub fn assert_boundary(&self, r: &Run) {
        match self.tier.tier {
            Tier::Sealed => {
                for f in [
                    "filesystem_non_bypassable",
                    "filesystem_read_non_bypassable",
                    "filesystem_write_non_bypassable",
                    "network_non_bypassable",
                ] {
                    assert_eq!(r.safety(f), true, "{f} in {}", r.bundle["safety"]);
                }
                assert_eq!(r.safety("host_process"), false);
                for m in [
                    "userns",
                    "pidns",
                    "netns",
                    "overlay",
                    "pivot_root",
                    "capabilities",
                    "no_new_privs",
                    "seccomp",
                    "secrets_hidden",
                ] {
                    assert_eq!(r.control(m), vec!["enforced"], "control {m}");
                }
            }
        }
    }
}

/// stdout then stderr of a finished process, as text.
pub fn both(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The job id from the JSON summary `run --json` prints last on stdout.
pub fn job_of(out: &std::process::Output) -> String {
    let s = String::from_utf8_lossy(&out.stdout);
    let at = s
        .rfind("{\n")
        .unwrap_or_else(|| panic!("no run summary: {}", both(out)));
    let v: Value = serde_json::from_str(&s[at..]).unwrap();
    v["job"].as_str().unwrap().to_owned()
}

/// Whether `path` exists without following a final symlink.
pub fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

/// Whether the host offers `spec`, asked through `cofferdam scope`.
fn offered(spec: &'static TierSpec) -> bool {
    if spec.tier == Tier::Sealed
        && !(require("unprivileged user namespaces", userns_independently())
            && require("Landlock", landlock_abi_independently() > 0))
    {
        return false;
    }
    let scope = Ctx::new(spec).scope();
    require(
        &format!("the {} tier", spec.containment),
        scope["host_containment"] == spec.containment
            || scope["achieved_containment"] == spec.containment,
    )
}

struct Row {
    id: &'static str,
    description: &'static str,
    boundary: &'static str,
    tier: &'static str,
    verdict: String,
    result: String,
    failed: bool,
}

fn verdict_name(v: Verdict) -> String {
    match v {
        Verdict::Must => "must".into(),
        Verdict::Documented(_) => "documented".into(),
    }
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panic".into())
}

fn one(attack: &'static Attack, spec: &'static TierSpec, verdict: Verdict) -> Row {
    let result = std::panic::catch_unwind(|| {
        let ctx = Ctx::new(spec);
        let outcome = (attack.probe)(&ctx);
        let scope_line = match verdict {
            Verdict::Must => None,
            Verdict::Documented(line) => {
                let scope = ctx.scope();
                let lines: Vec<String> = scope["filesystem_boundary"]["not_protected"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|l| l.as_str().map(str::to_owned))
                    .collect();
                Some(lines.iter().any(|l| l.starts_with(line)))
            }
        };
        (outcome, scope_line)
    });
    // A documented limitation that got through must be admitted by the scope report; one
    // that was refused needs no line (a newer kernel may close it and drop the line).
    let (result, failed) = match (result, verdict) {
        (Err(e), _) => (format!("FAIL: {}", panic_text(&*e)), true),
        (Ok((Outcome::Escaped(_), Some(false))), Verdict::Documented(line)) => (
            format!("FAIL: got through, and the scope report has no not-protected line `{line}…`"),
            true,
        ),
        (Ok((Outcome::Denied(ev), _)), _) => (format!("denied: {ev}"), false),
        (Ok((Outcome::Skipped(why), _)), _) => (format!("skip: {why}"), false),
        (Ok((Outcome::Escaped(what), _)), Verdict::Must) => (format!("ESCAPED: {what}"), true),
        (Ok((Outcome::Escaped(what), _)), Verdict::Documented(_)) => {
            (format!("limitation (in the scope report): {what}"), false)
        }
    };
    Row {
        id: attack.id,
        description: attack.description,
        boundary: attack.boundary.name(),
        tier: spec.containment,
        verdict: verdict_name(verdict),
        result,
        failed,
    }
}

/// Print to the real stderr: the test harness captures only the print macros, so a direct
/// write shows the table even when the test passes.
fn show(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

fn table(rows: &[Row]) -> String {
    let w = |f: fn(&Row) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let (wi, wb, wt, wv) = (
        w(|r| r.id.len()).max(6),
        w(|r| r.boundary.len()).max(8),
        w(|r| r.tier.len()).max(4),
        w(|r| r.verdict.len()).max(7),
    );
    let mut s = format!(
        "\n{:wi$}  {:wb$}  {:wt$}  {:wv$}  result\n",
        "attack", "boundary", "tier", "verdict"
    );
    for r in rows {
        let mut result = r.result.replace('\n', " ");
        if result.len() > 140 {
            let cut = (0..=140)
                .rev()
                .find(|i| result.is_char_boundary(*i))
                .unwrap_or(0);
            result.truncate(cut);
            result.push('…');
        }
        s.push_str(&format!(
            "{:wi$}  {:wb$}  {:wt$}  {:wv$}  {result}\n",
            r.id, r.boundary, r.tier, r.verdict
        ));
    }
    let failed = rows.iter().filter(|r| r.failed).count();
    let denied = rows
        .iter()
        .filter(|r| r.result.starts_with("denied"))
        .count();
    let documented = rows
        .iter()
        .filter(|r| r.result.starts_with("limitation"))
        .count();
    s.push_str(&format!(
        "{} attacks: {denied} denied, {documented} documented limitations, {} skipped, {failed} failed\n",
        rows.len(),
        rows.iter().filter(|r| r.result.starts_with("skip")).count()
    ));
    s
}

/// Run every attack on every tier the host offers, two at a time; print the table; fail if
/// a `must` attack got through or any check failed.
pub fn run_suite(attacks: &[&'static Attack], to_be_added: &[(&str, &str)]) {
    let only = std::env::var("ESCAPE_ONLY").unwrap_or_default();
    let mut jobs: Vec<(&'static Attack, &'static TierSpec, Verdict)> = Vec::new();
    for spec in TIERS {
        if !offered(spec) {
            continue;
        }
        for a in attacks {
            let verdict = a.on.iter().find(|(t, _)| *t == spec.tier).map(|(_, v)| *v);
            if let Some(v) = verdict.filter(|_| a.id.starts_with(only.as_str())) {
                jobs.push((a, spec, v));
            }
        }
    }
    let next = AtomicUsize::new(0);
    let rows: Mutex<Vec<(usize, Row)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&(a, spec, verdict)) = jobs.get(i) else {
                        break;
                    };
                    let row = one(a, spec, verdict);
                    rows.lock().unwrap().push((i, row));
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by_key(|(i, _)| *i);
    let rows: Vec<Row> = rows.into_iter().map(|(_, r)| r).collect();
    let mut text = table(&rows);
    text.push_str("to be added with the features being built (not run):\n");
    for (id, what) in to_be_added {
        text.push_str(&format!("  {id}: {what}\n"));
    }
    show(&text);
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.failed)
        .map(|r| format!("{} ({}): {}", r.id, r.description, r.result))
        .collect();
    assert!(
        failed.is_empty(),
        "escape conformance failures:\n{}",
        failed.join("\n")
    );
}
