//! The attack table's types, the per-attack context (a fresh workdir, home, store and an
//! "outside" directory under one temporary base; on demand the canaries and a sentinel
//! process an attack targets instead of the host's own, see main.rs's "attacks target
//! canaries"), the runner that drives the real binary, and the result table.

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
    /// Landlock and seccomp on a host process working in a copy of the workdir (what a
    /// user without user namespaces gets; asked here with `--tier scoped`).
    Scoped,
    /// Nothing enforced: a host process in a copy of the workdir. Its bundle must claim no
    /// boundary; attacks on it are documented by the scope report's "nothing is enforced".
    Advisory,
}

/// How to get a tier from `cofferdam run` and how the scope report names it.
pub struct TierSpec {
    pub tier: Tier,
    /// `achieved_containment` in the scope report when the host offers it.
    pub containment: &'static str,
    /// Extra `run` arguments selecting it; `cofferdam scope` takes the same.
    pub run_args: &'static [&'static str],
    /// The name in the table (and in `ESCAPE_TIER`).
    pub label: &'static str,
    /// Run every cofferdam command on a simulated host without user namespaces (see
    /// [`NO_USERNS`]) instead of asking for the tier with a flag.
    pub no_userns: bool,
    /// Only the attacks with these ids (all that run on `tier` when empty).
    pub only: &'static [&'static str],
    /// Every attack run is a fork (`run --on PARENT`) of a job staged first in the same
    /// workdir ([`FORK_PARENT`]): the stage the attack works in starts as another's.
    pub fork: bool,
}

/// The parent run of a fork row: it stages a file, a directory and a whiteout (of the
/// host's `.fork-gone`), so the fork's stage starts with each kind of entry.
pub const FORK_PARENT: &str =
    "echo parent > .fork-parent && mkdir -p .fork-dir && touch .fork-dir/x && rm .fork-gone";

/// What a fork of [`FORK_PARENT`] inherits, as its review lists it (a fork is reviewed
/// against the host, its parent's changes included): every fork row's run must list these,
/// and [`Run::changes`] leaves them out, so an attack's assertions on its own changes hold
/// on a fork as on any run.
pub const FORK_INHERITED: &[(&str, &str)] = &[
    (".fork-dir", "added"),
    (".fork-dir/x", "added"),
    (".fork-gone", "deleted"),
    (".fork-parent", "added"),
];

/// Runs its arguments where nested user namespaces are impossible: inside `unshare -U -r`
/// with `user.max_user_namespaces` 0, so cofferdam's probe finds none and the host offers
/// the scoped tier, as for a user whose distribution withholds user namespaces.
pub const NO_USERNS: &str = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"";

/// Every tier, strongest first. A tier the host does not offer is skipped (SKIP-HOST).
pub const TIERS: &[TierSpec] = &[
    TierSpec {
        tier: Tier::Sealed,
        containment: "sealed",
        run_args: &["--containment", "sealed"],
        label: "sealed",
        no_userns: false,
        only: &[],
        fork: false,
    },
    TierSpec {
        tier: Tier::Scoped,
        containment: "scoped",
        run_args: &["--tier", "scoped"],
        label: "scoped",
        no_userns: false,
        only: &[],
        fork: false,
    },
    // The same tier reached the way a user without user namespaces gets it: a sample of
    // every boundary, to show `--tier scoped` is that tier.
    TierSpec {
        tier: Tier::Scoped,
        containment: "scoped",
        run_args: &[],
        label: "scoped/no-userns",
        no_userns: true,
        only: &[
            "fw.absolute-outside",
            "fw.usr",
            "fw.job-store",
            "fw.overlay-xattr",
            "fr.ssh-key",
            "fr.job-store",
            "ps.kill-host-pid",
            "ps.see-host-pids",
            "ps.unshare-userns",
            "ks.bpf",
            "ks.mount-syscall",
            "net.tcp-host-loopback",
            "net.udp-host",
            "net.raw-packet-socket",
            "net.vsock",
            "tty.other-pts",
            "rec.forge-status",
            "res.timeout-outlive",
        ],
        fork: false,
    },
    // The sealed tier again, every run a fork of a staged job: every filesystem-write
    // attack (each applies to a fork: its stage is a stage like any, seeded from a
    // checkpoint of another job's, and `Run::changes` leaves out what the fork inherits),
    // and a sample of the other boundaries, with the attacks on the stage, its records and
    // apply.
    TierSpec {
        tier: Tier::Sealed,
        containment: "sealed",
        run_args: &["--containment", "sealed"],
        label: "sealed/fork",
        no_userns: false,
        only: &[
            "fw.absolute-outside",
            "fw.agent-config-grants-next-run",
            "fw.dotdot",
            "fw.etc-passwd",
            "fw.exec-written-file",
            "fw.hardlink-in-workdir",
            "fw.hardlink-system-file",
            "fw.host-dev-shm",
            "fw.inherited-layer",
            "fw.host-tmp-and-home",
            "fw.job-store",
            "fw.kernel-knobs",
            "fw.lent-read-mount",
            "fw.lent-target-through-symlink",
            "fw.manifest-narrows-runs",
            "fw.manifest-symlink-outside",
            "fw.manifest-widens-untrusted",
            "fw.metadata-own-file",
            "fw.metadata-system-file",
            "fw.metadata-xattr",
            "fw.mknod",
            "fw.mount-over",
            "fw.overlay-xattr",
            "fw.proc-self-root",
            "fw.read-only-subtree",
            "fw.rename-out",
            "fw.sensitive-executable",
            "fw.sensitive-fsmonitor",
            "fw.sensitive-git-hook",
            "fw.sensitive-manifest",
            "fw.setuid-apply",
            "fw.symlink-out",
            "fw.usr",
            "fr.ssh-key",
            "fr.job-store",
            "fr.symlink-to-store",
            "ps.kill-host-pid",
            "ps.unshare-userns",
            "ks.bpf",
            "ks.mount-syscall",
            "net.tcp-host-loopback",
            "rec.forge-status",
            "rec.earlier-job",
            "rec.own-job",
            "rec.stage-chmod-0",
            "rec.apply-xattrs",
        ],
        fork: true,
    },
    TierSpec {
        tier: Tier::Advisory,
        containment: "advisory",
        run_args: &["--tier", "advisory", "--containment", "advisory"],
        label: "advisory",
        no_userns: false,
        only: &[],
        fork: false,
    },
];

/// Shorthand for the attack rows that must be refused on the sealed tier only (they need
/// what only it has: `--mount`, `--read-only`, its namespaces).
pub const SEALED_MUST: &[(Tier, Verdict)] = &[(Tier::Sealed, Verdict::Must)];

/// Must be refused on the sealed and the scoped tier.
pub const BOTH_MUST: &[(Tier, Verdict)] =
    &[(Tier::Sealed, Verdict::Must), (Tier::Scoped, Verdict::Must)];

/// The advisory tier's verdict: everything is admitted by the scope report's first line.
pub const ADVISORY: (Tier, Verdict) = (Tier::Advisory, Verdict::Documented("nothing is enforced"));

/// Must on sealed and scoped, documented on advisory (the representative advisory subset).
pub const ALL_THREE: &[(Tier, Verdict)] = &[
    (Tier::Sealed, Verdict::Must),
    (Tier::Scoped, Verdict::Must),
    ADVISORY,
];

/// Must be refused on every tier: what even the advisory tier applies (rlimits).
pub const EVERY_TIER_MUST: &[(Tier, Verdict)] = &[
    (Tier::Sealed, Verdict::Must),
    (Tier::Scoped, Verdict::Must),
    (Tier::Advisory, Verdict::Must),
];

/// The scoped tier's "no pid, ipc or uts namespace" line.
pub const NO_PIDNS: &str = "no pid, ipc or uts namespace";

/// The scoped tier's read line (Landlock grants the system directories and the copy).
pub const SCOPED_READS: &str = "reads: Landlock grants read access";

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

/// A number no other probe run of this process gets: for host-side names (abstract
/// sockets, SysV keys, process markers), since tiers run the same attack in parallel.
pub fn unique() -> u32 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    u32::try_from(NEXT.fetch_add(1, Ordering::SeqCst)).unwrap_or(0)
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
    /// The command's stdout (as `--capture` saved it: `run --json` relays it to stderr).
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
    /// Statuses of every observation of `mechanism` (but the pid namespace's
    /// `memfd_noexec` row, present only with `workdir_exec = false`: `sockets.rs` checks it).
    pub fn control(&self, mechanism: &str) -> Vec<String> {
        controls(&self.bundle)
            .iter()
            .filter(|c| c["mechanism"] == mechanism && c["details"]["control"] != "memfd_noexec")
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

    /// Staged changes as `(path, kind)`, but what a fork row's run inherits
    /// ([`FORK_INHERITED`]).
    pub fn changes(&self) -> Vec<(String, String)> {
        self.all_changes()
            .into_iter()
            .filter(|(p, k)| !FORK_INHERITED.contains(&(p.as_str(), k.as_str())))
            .collect()
    }

    /// Every staged change as `(path, kind)`.
    pub fn all_changes(&self) -> Vec<(String, String)> {
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

/// A host process the attack tries to reach (a `sleep` the harness started, leader of its
/// own process group, so a signal to its group reaches nothing else); killed on drop.
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

/// The prefix of every canary's name (in `/etc`, `/usr/lib` or a temp dir); `.ci/run`
/// checks none is left behind.
pub const CANARY_PREFIX: &str = "cofferdam-escape-canary-";

/// What an attack on a system file targets instead of the real one, so an attack that gets
/// through changes a file the harness made and nothing else.
///
/// As root: `etc` is `/etc/cofferdam-escape-canary-<pid>-<n>`, a root-owned 0644 file, and
/// `usr` is `/usr/lib/cofferdam-escape-canary-<pid>-<n>`, a root-owned 0755 directory
/// holding `file` (0644), where an attack may try to create, rename or delete entries. As a
/// user (or a root that may not write `/etc`, e.g. mapped root in a user namespace) no
/// root-owned file can be made: the same two live in a temp dir of the caller's, which the
/// sandbox must refuse just as well (a write the caller could make itself). Removed on drop,
/// also when the attack panics; a set left by a killed test process (its pid gone) is
/// removed by the next one.
pub struct Canaries {
    /// The file standing in for `/etc/passwd`, `/etc/hostname`.
    pub etc: PathBuf,
    /// The directory standing in for `/usr`, `/usr/bin`.
    pub usr: PathBuf,
    /// Whether they are root-owned files in `/etc` and `/usr/lib`.
    pub system: bool,
    before: Vec<String>,
    _temp: Option<tempfile::TempDir>,
}

const CANARY_TEXT: &str =
    "cofferdam escape-suite canary: an attack that changes this got through\n";

impl Canaries {
    fn new() -> Self {
        let name = format!("{CANARY_PREFIX}{}-{}", std::process::id(), unique());
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            sweep_stale_canaries();
            let (etc, usr) = (
                Path::new("/etc").join(&name),
                Path::new("/usr/lib").join(&name),
            );
            if make_canaries(&etc, &usr).is_ok() {
                return Self::taken(etc, usr, true, None);
            }
            remove_canary(&etc);
            remove_canary(&usr);
        }
        let temp = tempfile::Builder::new()
            .prefix(CANARY_PREFIX)
            .tempdir()
            .unwrap();
        let (etc, usr) = (temp.path().join("etc"), temp.path().join("usr"));
        make_canaries(&etc, &usr).unwrap();
        Self::taken(etc, usr, false, Some(temp))
    }

    fn taken(etc: PathBuf, usr: PathBuf, system: bool, temp: Option<tempfile::TempDir>) -> Self {
        let before = canary_state(&etc, &usr);
        Canaries {
            etc,
            usr,
            system,
            before,
            _temp: temp,
        }
    }

    /// What changed since they were made (empty when nothing did): each entry whose state
    /// is new, then each that is gone.
    pub fn changed(&self) -> String {
        let now = canary_state(&self.etc, &self.usr);
        let new: Vec<&String> = now.iter().filter(|l| !self.before.contains(l)).collect();
        let gone: Vec<&String> = self.before.iter().filter(|l| !now.contains(l)).collect();
        if new.is_empty() && gone.is_empty() {
            String::new()
        } else {
            format!("canary changed: now {new:?}; was {gone:?}")
        }
    }

    /// The root-owned canaries are in the sandbox's view on every tier (the system
    /// directories are), so the attack's `seen=$(head -c 9 <canary>)` must have read one:
    /// a denial of a file the command cannot even see would prove nothing. (The caller's
    /// temp-dir canaries are outside the sealed tier's view, by its mount namespace.)
    pub fn assert_seen(&self, r: &Run) {
        if self.system {
            assert_eq!(
                r.value("seen"),
                Some("cofferdam"),
                "the command did not see the canary: {}{}",
                r.out,
                r.err
            );
        }
    }

    /// Where they are, for the evidence.
    pub fn kind(&self) -> &'static str {
        if self.system {
            "root-owned canaries in /etc and /usr/lib"
        } else {
            "the caller's canaries in a temp dir (not root)"
        }
    }
}

impl Drop for Canaries {
    fn drop(&mut self) {
        if self.system {
            remove_canary(&self.etc);
            remove_canary(&self.usr);
        }
    }
}

fn make_canaries(etc: &Path, usr: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(etc, CANARY_TEXT)?;
    std::fs::set_permissions(etc, std::fs::Permissions::from_mode(0o644))?;
    std::fs::create_dir(usr)?;
    std::fs::set_permissions(usr, std::fs::Permissions::from_mode(0o755))?;
    let file = usr.join("file");
    std::fs::write(&file, CANARY_TEXT)?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
}

/// Remove a canary without following a symlink an attack may have put in its place.
fn remove_canary(p: &Path) {
    match p.symlink_metadata() {
        Ok(m) if m.is_dir() => drop(std::fs::remove_dir_all(p)),
        Ok(_) => drop(std::fs::remove_file(p)),
        Err(_) => {}
    }
}

/// Remove the system canaries of test processes that no longer run (killed before their
/// drop could).
fn sweep_stale_canaries() {
    for dir in ["/etc", "/usr/lib"] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix(CANARY_PREFIX)
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                remove_canary(&e.path());
            }
        }
    }
}

/// Type, mode, owner, mtime, size and content of each canary and entry, one line each.
fn canary_state(etc: &Path, usr: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let one = |p: &Path| match p.symlink_metadata() {
        Err(e) => format!("{}: {e}", p.display()),
        Ok(m) => format!(
            "{}: {:o} {}:{} {}.{} {}B {:?}",
            p.display(),
            m.mode(),
            m.uid(),
            m.gid(),
            m.mtime(),
            m.mtime_nsec(),
            m.size(),
            if m.is_file() {
                std::fs::read(p)
                    .ok()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
            } else {
                None
            }
        ),
    };
    let mut parts = vec![one(etc), one(usr)];
    if let Ok(entries) = std::fs::read_dir(usr) {
        let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        names.sort();
        parts.extend(names.iter().map(|p| one(p)));
    }
    parts
}

/// A fresh world for one attack: `base/{work,home,store,outside}`, and on demand its
/// [`Canaries`] and a sentinel [`HostProcess`].
pub struct Ctx {
    base: tempfile::TempDir,
    tier: &'static TierSpec,
    vars: RefCell<Vec<(String, String)>>,
    /// The resource-limit flags of the last run, which the scope report is asked with.
    limits: RefCell<Vec<String>>,
    canaries: std::cell::OnceCell<Canaries>,
    /// A fork row's parent job, made on the first run.
    fork_parent: std::cell::OnceCell<String>,
    private_mounts: std::cell::Cell<bool>,
}

/// The `run` flags (each with a value) that request a resource limit.
const LIMIT_FLAGS: &[&str] = &[
    "--timeout",
    "--stage-size",
    "--tmp-size",
    "--memory",
    "--pids",
    "--cpus",
    "--cpu-time",
    "--max-file-size",
    "--open-files",
];

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
            limits: RefCell::new(Vec::new()),
            canaries: std::cell::OnceCell::new(),
            fork_parent: std::cell::OnceCell::new(),
            private_mounts: std::cell::Cell::new(false),
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
        let bin = assert_cmd::cargo::cargo_bin("cofferdam");
        let mut c = if self.tier.no_userns {
            let mut c = Command::new("unshare");
            c.args(["-U", "-r", "sh", "-c", NO_USERNS, "sh"]).arg(bin);
            c
        } else if self.private_mounts.get() {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "--"])
                .arg(bin);
            c
        } else {
            Command::new(bin)
        };
        c.env_clear()
            .env("HOME", self.home())
            .env("COFFERDAM_HOME", self.store())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(self.work());
        // A debug build's mutant (`.ci/mutants-escape`) reaches the binary under test.
        if let Some(m) = std::env::var_os(cofferdam_sandbox::mutant::ENV) {
            c.env(cofferdam_sandbox::mutant::ENV, m);
        }
        for (k, v) in self.vars.borrow().iter() {
            c.env(k, v);
        }
        c
    }

    /// [`Ctx::cmd`] in a session of its own: whatever the command does to "its" terminal
    /// cannot reach the terminal the suite runs in (`/dev/tty` inside has none to open).
    pub fn detached_cmd(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = self.cmd();
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            c.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c
    }

    /// `cofferdam run --json` on this tier with `extra` flags and the command `argv`, in a
    /// session of its own ([`Ctx::detached_cmd`]).
    pub fn run(&self, extra: &[&str], argv: &[&str]) -> Run {
        self.run_with(extra, argv, |_| {})
    }

    /// [`Ctx::run`], with `tweak` applied to the command before it starts (e.g. lower
    /// limits for cofferdam itself).
    pub fn run_with(&self, extra: &[&str], argv: &[&str], tweak: impl FnOnce(&mut Command)) -> Run {
        let parent = self
            .tier
            .fork
            .then(|| self.fork_parent.get_or_init(|| self.make_fork_parent()));
        let mut c = self.detached_cmd();
        tweak(&mut c);
        c.args(["--color", "never", "run", "--json", "--capture"])
            .args(self.tier.run_args);
        if let Some(p) = &parent {
            c.args(["--on", p]);
        }
        for (k, _) in self.vars.borrow().iter() {
            c.args(["--env", k]);
        }
        c.args(extra).arg("--").args(argv).stdin(Stdio::null());
        *self.limits.borrow_mut() = extra
            .windows(2)
            .filter(|w| LIMIT_FLAGS.contains(&w[0]))
            .flat_map(|w| [w[0].to_owned(), w[1].to_owned()])
            .collect();
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        // Under `run --json` stdout is cofferdam's JSON summary alone (the command's stdout
        // is relayed to stderr); the command's stdout alone is what `--capture` saved.
        let summary: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "no run summary ({e}, exit {:?}): {stdout}\n{err}",
                out.status
            )
        });
        let bundle_path = PathBuf::from(summary["bundle"].as_str().unwrap());
        let bundle: Value = serde_json::from_slice(&std::fs::read(&bundle_path).unwrap()).unwrap();
        let command_out = bundle["run"]["output"]["stdout"]["path"]
            .as_str()
            .map(|p| bundle_path.parent().unwrap().join(p))
            .and_then(|p| std::fs::read(p).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let run = Run {
            code: out.status.code(),
            out: command_out,
            err,
            job: summary["job"].as_str().unwrap().to_owned(),
            bundle_path,
            bundle,
        };
        if parent.is_some() && run.bundle["filesystem"]["changes"].is_array() {
            let all = run.all_changes();
            for (path, kind) in FORK_INHERITED {
                assert!(
                    all.iter().any(|(p, k)| p == path && k == kind),
                    "the fork's review lists {path} {kind}, inherited: {all:?}"
                );
            }
        }
        if parent.is_some() {
            self.assert_checkpoint_intact(&run);
        }
        run
    }

    /// A fork's checkpoint shares its entries' inodes with the parent's stage and shows
    /// them to the fork as an overlay layer: whatever the attack did, re-reading it must
    /// give the digest it was made with (`checkpoint show` exits 1 otherwise).
    fn assert_checkpoint_intact(&self, run: &Run) {
        let Some(ckpt) = run.bundle["lineage"]["checkpoint_id"].as_str() else {
            return; // refused before the fork existed
        };
        let out = self
            .cmd()
            .args(["--json", "checkpoint", "show", ckpt])
            .output()
            .unwrap();
        assert!(
            out.status.success() && json_of(&out)["intact"] == true,
            "the fork's checkpoint {ckpt} changed: {out:?}"
        );
    }

    /// A fork row's parent, one for every run of the attack: a job staged by
    /// [`FORK_PARENT`] in the workdir; its id.
    pub fn make_fork_parent(&self) -> String {
        std::fs::write(self.work().join(".fork-gone"), "host\n").unwrap();
        let out = self
            .detached_cmd()
            .args(["--color", "never", "run", "--json"])
            .args(self.tier.run_args)
            .args(["--", "sh", "-c", FORK_PARENT])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "the fork's parent run: {out:?}");
        json_of(&out)["job"].as_str().unwrap().to_owned()
    }

    /// `sh -c script`.
    pub fn sh(&self, script: &str) -> Run {
        self.run(&[], &["sh", "-c", script])
    }

    /// `/usr/bin/python3 -c script`.
    pub fn py(&self, script: &str) -> Run {
        self.run(&[], &["/usr/bin/python3", "-c", script])
    }

    /// A host `sleep` the attack may try to signal: its pid in `$HOSTPID`, and its own
    /// process group (`$HOSTPGID`, the same number) for an attack on a group: the canary
    /// that stands in for every process the caller may signal (never `kill(-1)`).
    pub fn host_process(&self) -> HostProcess {
        use std::os::unix::process::CommandExt;
        let child = Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        self.var("HOSTPID", child.id().to_string());
        self.var("HOSTPGID", child.id().to_string());
        HostProcess { child }
    }

    /// This attack's canaries (made on first use; `$ETC_CANARY`, `$USR_CANARY` inside).
    pub fn canaries(&self) -> &Canaries {
        self.canaries.get_or_init(|| {
            let c = Canaries::new();
            self.var("ETC_CANARY", c.etc.display().to_string());
            self.var("USR_CANARY", c.usr.display().to_string());
            c
        })
    }

    /// Run every later cofferdam command of this attack, when the suite is root, in a
    /// private mount namespace of the harness's own: a mount attack that gets through on a
    /// tier without one lands there and dies with the run, not in the host's mount table.
    /// (As a user the kernel refuses any mount on such a tier anyway.)
    pub fn private_mounts(&self) {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            self.private_mounts.set(true);
        }
    }

    /// `cofferdam scope --json` for this context.
    pub fn scope(&self) -> Value {
        let out = self
            .cmd()
            .args(["scope", "--json"])
            .args(self.tier.run_args)
            .args(self.limits.borrow().iter())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        json_of(&out)
    }

    /// The `run` flags that ask for this context's tier.
    pub fn run_args(&self) -> &'static [&'static str] {
        self.tier.run_args
    }

    /// Which tier this context runs on.
    pub fn tier(&self) -> Tier {
        self.tier.tier
    }

    /// Whether every run of this row is a fork ([`TierSpec::fork`]).
    pub fn forks(&self) -> bool {
        self.tier.fork
    }

    /// The common claims every run on this tier must make, whatever the attack.
    pub fn assert_boundary(&self, r: &Run) {
        // The trace's session_start carries the scope report of the tier the run took
        // (with `--tier`, the lowered one), not the host's best.
        let trace = std::fs::read_to_string(r.bundle_path.with_file_name("trace.jsonl")).unwrap();
        let start: Value = serde_json::from_str(trace.lines().next().unwrap()).unwrap();
        assert_eq!(
            start["event"]["effective_grants"]["enforcement_tier"],
            r.bundle["run"]["executor"]["tier"],
            "session_start's grants are the run's tier"
        );
        assert_eq!(
            start["event"]["effective_grants"]["achieved_containment"],
            self.tier.containment
        );
        match self.tier.tier {
            Tier::Scoped => {
                // Landlock keeps writes inside the copy, HOME and TMPDIR. Reads are claimed
                // only when every hidden secret proved unreadable after Landlock (not so
                // for root, whose /etc/shadow lies beneath the granted /etc); pathname unix
                // sockets (below ABI 9) keep the network claim off.
                // Landlock has no right for file metadata: the seccomp metadata filter
                // reports its residual as `partial`, so the write claim stays off.
                assert_eq!(
                    r.safety("filesystem_write_non_bypassable"),
                    false,
                    "{}",
                    r.bundle["safety"]
                );
                let meta: Vec<Value> = controls_of(&r.bundle, "seccomp")
                    .into_iter()
                    .filter(|c| c["details"]["filter"] == "metadata_writes")
                    .collect();
                assert!(
                    meta.len() == 1
                        && meta[0]["status"] == "partial"
                        && meta[0]["dimension"] == "filesystem_write",
                    "the metadata filter: {meta:?}"
                );
                let secrets = r.control("secrets_hidden") == vec!["enforced"];
                assert_eq!(
                    r.safety("filesystem_read_non_bypassable"),
                    secrets,
                    "{}",
                    r.bundle["safety"]
                );
                assert_eq!(r.safety("filesystem_non_bypassable"), false);
                assert_eq!(r.safety("network_non_bypassable"), false);
                assert_eq!(r.safety("host_process"), true);
                // Unprivileged, the bounding set cannot be emptied (no CAP_SETPCAP): the
                // bundle says partial, and no_new_privs is what keeps an exec from gaining.
                let caps = controls_of(&r.bundle, "capabilities");
                assert!(
                    caps.len() == 1
                        && (caps[0]["status"] == "enforced"
                            || caps[0]["status"] == "partial"
                                && caps[0]["details"]["cap_eff"] == "0000000000000000"
                                && caps[0]["details"]["cap_prm"] == "0000000000000000"),
                    "capabilities: {caps:?}"
                );
                for m in ["workdir_copy", "no_new_privs", "seccomp", "close_fds"] {
                    let statuses: Vec<Value> = controls_of(&r.bundle, m)
                        .into_iter()
                        .filter(|c| c["details"]["filter"] != "metadata_writes")
                        .map(|c| c["status"].clone())
                        .collect();
                    assert!(
                        !statuses.is_empty() && statuses.iter().all(|s| s == "enforced"),
                        "control {m}: {statuses:?}"
                    );
                }
                let landlock = r.control("landlock");
                assert!(
                    landlock.iter().filter(|s| *s == "enforced").count() >= 4,
                    "landlock read, write, network and process enforced: {landlock:?}"
                );
                assert_eq!(r.control("pidns"), vec!["unavailable"]);
                for m in ["userns", "netns", "overlay", "pivot_root"] {
                    assert!(r.control(m).iter().all(|s| s != "enforced"), "{m} claimed");
                }
            }
            Tier::Advisory => {
                for f in [
                    "filesystem_non_bypassable",
                    "filesystem_read_non_bypassable",
                    "filesystem_write_non_bypassable",
                    "network_non_bypassable",
                ] {
                    assert_eq!(r.safety(f), false, "{f} in {}", r.bundle["safety"]);
                }
                assert_eq!(r.safety("host_process"), true);
                for m in ["landlock", "seccomp", "userns", "pidns", "netns", "overlay"] {
                    assert!(
                        r.control(m).iter().all(|s| s != "enforced"),
                        "advisory claims {m}: {:?}",
                        r.control(m)
                    );
                }
                assert_eq!(r.control("workdir_copy"), vec!["partial"]);
            }
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
    if spec.tier == Tier::Scoped && !require("Landlock", landlock_abi_independently() > 0) {
        return false;
    }
    if spec.no_userns {
        let sim = Command::new("unshare")
            .args(["-U", "-r", "sh", "-c", NO_USERNS, "sh", "true"])
            .status()
            .is_ok_and(|st| st.success());
        if !require("user namespaces to simulate a host without them", sim) {
            return false;
        }
        let scope = Ctx::new(spec).scope();
        assert_eq!(
            scope["host_containment"], "scoped",
            "the simulated host offers the scoped tier: {scope}"
        );
    }
    // `--tier` lowers: the report says whether this host reaches the tier asked for.
    let scope = Ctx::new(spec).scope();
    require(
        &format!("the {} tier", spec.containment),
        scope["achieved_containment"] == spec.containment,
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

/// The scope report's "not protected here" lines: the filesystem boundary's, and each
/// requested resource limit's stated limitation as `<name>: <limitation>`.
fn not_protected_lines(scope: &Value) -> Vec<String> {
    let mut lines: Vec<String> = scope["filesystem_boundary"]["not_protected"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect();
    for r in scope["resources"].as_array().unwrap() {
        if let (Some(name), Some(limitation)) = (r["name"].as_str(), r["limitation"].as_str()) {
            lines.push(format!("{name}: {limitation}"));
        }
    }
    lines
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
            Verdict::Documented(line) => Some(
                not_protected_lines(&ctx.scope())
                    .iter()
                    .any(|l| l.starts_with(line)),
            ),
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
        tier: spec.label,
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
    let mut tiers: Vec<&str> = Vec::new();
    for r in rows {
        if !tiers.contains(&r.tier) {
            tiers.push(r.tier);
        }
    }
    for tier in tiers.into_iter().map(Some).chain([None]) {
        let of: Vec<&Row> = rows
            .iter()
            .filter(|r| tier.is_none_or(|t| r.tier == t))
            .collect();
        let count = |p: &str| of.iter().filter(|r| r.result.starts_with(p)).count();
        s.push_str(&format!(
            "{}: {} attacks: {} denied, {} documented limitations, {} skipped, {} failed\n",
            tier.unwrap_or("all tiers"),
            of.len(),
            count("denied"),
            count("limitation"),
            count("skip"),
            of.iter().filter(|r| r.failed).count()
        ));
    }
    s
}

/// Run every attack on every tier the host offers, two at a time; print the table; fail if
/// a `must` attack got through or any check failed.
pub fn run_suite(attacks: &[&'static Attack], to_be_added: &[(&str, &str)]) {
    let only = std::env::var("ESCAPE_ONLY").unwrap_or_default();
    let tiers = std::env::var("ESCAPE_TIER").unwrap_or_default();
    let mut jobs: Vec<(&'static Attack, &'static TierSpec, Verdict)> = Vec::new();
    for spec in TIERS {
        if !tiers.is_empty() && !tiers.split(',').any(|t| t == spec.label) {
            continue;
        }
        if !offered(spec) {
            continue;
        }
        for a in attacks {
            let verdict = a.on.iter().find(|(t, _)| *t == spec.tier).map(|(_, v)| *v);
            let sampled = spec.only.is_empty() || spec.only.contains(&a.id);
            let picked = only.split(',').any(|p| a.id.starts_with(p));
            if let Some(v) = verdict.filter(|_| sampled && picked) {
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
