//! Landlock: turns a [`LandlockPlan`] into one ruleset, restricts the calling process with it,
//! and reports what the kernel accepted, once per boundary dimension the ruleset covers.
//!
//! Owns the ruleset's construction (which access rights are handled, which trees get which
//! rights, TCP port rules, scopes) with the official `landlock` crate in best-effort mode, and
//! the pure mapping from the crate's `RestrictionStatus` to [`ControlObservation`]s. It may
//! not decide which trees, ports or ABI to use: that is the plan's; and it owns no other
//! mechanism (`no_new_privs` is `caps::no_new_privs`'s, although the crate re-sets it).
//!
//! # Contract
//!
//! - Call from the single-threaded sandbox init, after `no_new_privs` is set (Landlock
//!   requires it, or `CAP_SYS_ADMIN` in the current user namespace). The `landlock` crate
//!   also sets `no_new_privs` itself before `landlock_restrict_self` (idempotent).
//! - The ruleset is built at `ABI::from(plan.abi)`; the crate caps an ABI above what it knows
//!   at its newest one, and best-effort mode drops what the running kernel lacks. Every
//!   handled right is derived from that one ABI, so a newer crate never silently handles more.
//! - `read_exec` trees get read-file, read-dir and execute; `read_write` trees get every
//!   handled right, execute only when `exec_in_read_write`; `devices` get read-file,
//!   write-file and ioctl-dev. Grants are the union of the rules on a path's ancestors, so a
//!   `read_write` tree beneath a `read_exec` tree (e.g. beneath `/`) gets execute anyway:
//!   such trees are listed in the `filesystem_read` details as `execute_reaches_read_write`
//!   (a noexec mount is what withholds execute there). Rights that do not apply to a non-directory are masked off for
//!   files (so a file rule never degrades the ruleset to "partially enforced").
//! - A path that does not exist is skipped and listed in `details.missing_paths`; a path that
//!   cannot be opened for another reason is skipped and listed in `details.unopenable_paths`.
//!   Skipping a path only withholds a grant: the sandbox gets stricter, never looser.
//! - `tcp: Some(rules)` handles TCP bind and connect (ABI 4) and allows only the listed
//!   ports; UDP and other protocols are not Landlock's at ABI ≤ 8.
//! - `scope_signals` / `scope_abstract_unix` scope signals and abstract unix sockets to the
//!   sandbox's domain (ABI 6).
//!
//! # Observations
//!
//! [`install`] is infallible: a failure is itself evidence, so it returns `failed`
//! observations (with `reason`) instead of an error. One observation per dimension, in this
//! order: `filesystem_read`, `filesystem_write`, then `network` when `plan.tcp` is set, then
//! `process` when a scope is asked for (signals to, and abstract unix sockets of, processes
//! outside the sandbox). Each carries `{"abi", "requested_abi", "kernel_abi", "restriction"}`
//! where `abi` is the ABI the ruleset is in force at (the lower of the plan's and the
//! kernel's) and `restriction` is the crate's overall `fully_enforced` /
//! `partially_enforced` / `not_enforced`. A dimension is `enforced` when the kernel handles
//! every right of that dimension the plan asked for, `partial` when it handles some,
//! `unavailable` when it handles none (or Landlock is not enforced at all), `failed` when
//! building or restricting failed. An overall "partially enforced" that no dimension explains
//! downgrades every dimension to `partial`.
//!
//! The crate's status is what `landlock_restrict_self` returned, not a reading: after it,
//! the domain is read back by probe accesses that must be refused with `EACCES` (see
//! [`probe_write`], [`probe_read`]; recorded as `write_probe` / `read_probe`). A probe that
//! succeeds makes the rows `failed`, one that cannot be made leaves none `enforced`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, LandlockStatus, NetPort, PathBeneath, PathFd,
    PathFdError, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope,
    make_bitflags,
};
use cofferdam_policy::plan::LandlockPlan;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use serde_json::{Value, json};

/// Why the ruleset could not be built or enforced.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The `landlock` crate rejected a step (handling rights, adding a rule, restricting).
    #[error("landlock ruleset: {0}")]
    Ruleset(#[from] RulesetError),
}

/// Rights that apply to a non-directory (the kernel rejects the others on a file rule).
const FILE_RIGHTS: BitFlags<AccessFs> = make_bitflags!(AccessFs::{
    ReadFile | WriteFile | Execute | Truncate | IoctlDev | ResolveUnix
});

/// Names of the filesystem rights, for `details`.
const FS_RIGHT_NAMES: &[(AccessFs, &str)] = &[
    (AccessFs::Execute, "execute"),
    (AccessFs::WriteFile, "write_file"),
    (AccessFs::ReadFile, "read_file"),
    (AccessFs::ReadDir, "read_dir"),
    (AccessFs::RemoveDir, "remove_dir"),
    (AccessFs::RemoveFile, "remove_file"),
    (AccessFs::MakeChar, "make_char"),
    (AccessFs::MakeDir, "make_dir"),
    (AccessFs::MakeReg, "make_reg"),
    (AccessFs::MakeSock, "make_sock"),
    (AccessFs::MakeFifo, "make_fifo"),
    (AccessFs::MakeBlock, "make_block"),
    (AccessFs::MakeSym, "make_sym"),
    (AccessFs::Refer, "refer"),
    (AccessFs::Truncate, "truncate"),
    (AccessFs::IoctlDev, "ioctl_dev"),
    (AccessFs::ResolveUnix, "resolve_unix"),
];

/// The access rights and scopes a plan asks the kernel to handle, per dimension, all derived
/// from one ABI. Pure: computing it makes no syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handled {
    /// The ABI the rights are taken from.
    pub abi: ABI,
    /// Filesystem rights of the read side (`AccessFs::from_read`).
    pub fs_read: BitFlags<AccessFs>,
    /// Filesystem rights of the write side (`AccessFs::from_write`).
    pub fs_write: BitFlags<AccessFs>,
    /// TCP rights (empty when the plan has no TCP rules or the ABI has none).
    pub net: BitFlags<AccessNet>,
    /// Scopes (empty when none is asked for or the ABI has none).
    pub scope: BitFlags<Scope>,
}

impl Handled {
    /// What `plan` asks to handle at `abi`.
    pub fn for_plan(plan: &LandlockPlan, abi: ABI) -> Self {
        let net = if plan.tcp.is_some() {
            (AccessNet::BindTcp | AccessNet::ConnectTcp) & AccessNet::from_all(abi)
        } else {
            BitFlags::EMPTY
        };
        let mut scope = BitFlags::<Scope>::EMPTY;
        if plan.scope_signals {
            scope |= Scope::Signal;
        }
        if plan.scope_abstract_unix {
            scope |= Scope::AbstractUnixSocket;
        }
        Self {
            abi,
            fs_read: AccessFs::from_read(abi),
            fs_write: AccessFs::from_write(abi),
            net,
            scope: scope & Scope::from_all(abi),
        }
    }

    /// Every filesystem right handled.
    pub fn fs(&self) -> BitFlags<AccessFs> {
        self.fs_read | self.fs_write
    }

    /// Rights granted beneath a `read_exec` tree.
    pub fn read_exec_rights(&self) -> BitFlags<AccessFs> {
        (AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute) & self.fs()
    }

    /// Rights granted beneath a `read_write` tree.
    pub fn read_write_rights(&self, exec: bool) -> BitFlags<AccessFs> {
        if exec {
            self.fs()
        } else {
            self.fs() & !AccessFs::Execute
        }
    }

    /// Rights granted on a device path.
    pub fn device_rights(&self) -> BitFlags<AccessFs> {
        (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev) & self.fs()
    }
}

/// The ABI a plan's `abi` number names (0 → unsupported; above the crate's newest → newest).
pub fn plan_abi(abi: u32) -> ABI {
    ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))
}

/// The number of a known ABI (0 for unsupported).
pub fn abi_number(abi: ABI) -> u32 {
    match abi {
        ABI::Unsupported => 0,
        ABI::V1 => 1,
        ABI::V2 => 2,
        ABI::V3 => 3,
        ABI::V4 => 4,
        ABI::V5 => 5,
        ABI::V6 => 6,
        ABI::V7 => 7,
        ABI::V8 => 8,
        ABI::V9 => 9,
        _ => 10,
    }
}

/// Wire name of the crate's overall restriction status.
pub fn restriction_name(status: &RulesetStatus) -> &'static str {
    match status {
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
        RulesetStatus::NotEnforced => "not_enforced",
    }
}

fn fs_names(rights: BitFlags<AccessFs>) -> Vec<&'static str> {
    FS_RIGHT_NAMES
        .iter()
        .filter(|(r, _)| rights.contains(*r))
        .map(|(_, n)| *n)
        .collect()
}

fn net_names(rights: BitFlags<AccessNet>) -> Vec<&'static str> {
    let mut out = Vec::new();
    if rights.contains(AccessNet::BindTcp) {
        out.push("bind_tcp");
    }
    if rights.contains(AccessNet::ConnectTcp) {
        out.push("connect_tcp");
    }
    out
}

fn scope_names(scope: BitFlags<Scope>) -> Vec<&'static str> {
    let mut out = Vec::new();
    if scope.contains(Scope::Signal) {
        out.push("signal");
    }
    if scope.contains(Scope::AbstractUnixSocket) {
        out.push("abstract_unix_socket");
    }
    out
}

/// How much of one dimension's requested rights the kernel handles. Pure.
///
/// `requested` and `supported` are names of rights (requested at the plan's ABI, supported
/// at the kernel's effective ABI).
pub fn dimension_status(
    restriction: &RulesetStatus,
    requested: &[&'static str],
    supported: &[&'static str],
) -> (ControlStatus, Vec<&'static str>) {
    let missing: Vec<&'static str> = requested
        .iter()
        .copied()
        .filter(|r| !supported.contains(r))
        .collect();
    let status = if *restriction == RulesetStatus::NotEnforced
        || requested.is_empty()
        || missing.len() == requested.len()
    {
        ControlStatus::Unavailable
    } else if missing.is_empty() {
        ControlStatus::Enforced
    } else {
        ControlStatus::Partial
    };
    (status, missing)
}

/// `read_write` trees that get execute anyway although `exec_in_read_write` is off, because
/// they lie beneath a `read_exec` tree (Landlock grants are the union of every rule on a
/// path's ancestors: a rule cannot take back what a rule above it grants). Pure.
pub fn exec_reaches_read_write(plan: &LandlockPlan) -> Vec<PathBuf> {
    if plan.exec_in_read_write {
        return Vec::new();
    }
    plan.read_write
        .iter()
        .filter(|rw| plan.read_exec.iter().any(|re| rw.starts_with(re)))
        .cloned()
        .collect()
}

/// Paths skipped while adding rules.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Paths that do not exist.
    pub missing: Vec<PathBuf>,
    /// Paths that exist but could not be opened, with the error.
    pub unopenable: Vec<(PathBuf, String)>,
}

/// The dimensions a plan's ruleset speaks for, in report order.
pub fn dimensions(plan: &LandlockPlan) -> Vec<ControlDimension> {
    let mut d = vec![
        ControlDimension::FilesystemRead,
        ControlDimension::FilesystemWrite,
    ];
    if plan.tcp.is_some() {
        d.push(ControlDimension::Network);
    }
    if plan.scope_signals || plan.scope_abstract_unix {
        d.push(ControlDimension::Process);
    }
    d
}

fn obs(
    dimension: ControlDimension,
    status: ControlStatus,
    reason: Option<String>,
    details: BTreeMap<String, Value>,
) -> ControlObservation {
    ControlObservation {
        mechanism: ControlMechanism::Landlock,
        dimension,
        status,
        reason,
        details,
    }
}

/// One observation per dimension with the same status and reason.
fn uniform(
    plan: &LandlockPlan,
    status: ControlStatus,
    reason: String,
    details: &BTreeMap<String, Value>,
) -> Vec<ControlObservation> {
    dimensions(plan)
        .into_iter()
        .map(|d| obs(d, status, Some(reason.clone()), details.clone()))
        .collect()
}

/// Build the ruleset for `plan` and restrict the calling process with it; see the module
/// documentation for the contract and the observations. Never panics, never returns early
/// without observations.
pub fn install(plan: &LandlockPlan) -> Vec<ControlObservation> {
    let abi = plan_abi(plan.abi);
    let mut base = BTreeMap::new();
    base.insert("requested_abi".to_owned(), json!(plan.abi));
    if abi == ABI::Unsupported {
        base.insert("abi".to_owned(), json!(0));
        base.insert("restriction".to_owned(), json!("not_enforced"));
        return uniform(
            plan,
            ControlStatus::Unavailable,
            "the plan's Landlock ABI is 0: the host has no usable Landlock".to_owned(),
            &base,
        );
    }
    let handled = Handled::for_plan(plan, abi);
    let mut skipped = Skipped::default();
    match restrict(plan, &handled, &mut skipped) {
        Ok(status) => {
            let mut out = observe(plan, &handled, &status, &skipped);
            read_back(plan, &mut out);
            out
        }
        Err(e) => {
            insert_skipped(&mut base, &skipped);
            uniform(plan, ControlStatus::Failed, e.to_string(), &base)
        }
    }
}

fn insert_skipped(details: &mut BTreeMap<String, Value>, skipped: &Skipped) {
    if !skipped.missing.is_empty() {
        details.insert(
            "missing_paths".to_owned(),
            json!(
                skipped
                    .missing
                    .iter()
                    .map(|p| p.to_string_lossy())
                    .collect::<Vec<_>>()
            ),
        );
    }
    if !skipped.unopenable.is_empty() {
        details.insert(
            "unopenable_paths".to_owned(),
            json!(
                skipped
                    .unopenable
                    .iter()
                    .map(|(p, e)| json!({"path": p.to_string_lossy(), "error": e}))
                    .collect::<Vec<_>>()
            ),
        );
    }
}

/// Open `path` and, when it exists, return a rule granting `rights` (masked to file rights
/// for a non-directory). `None` when skipped (recorded in `skipped`) or nothing remains.
fn path_rule(
    path: &Path,
    rights: BitFlags<AccessFs>,
    skipped: &mut Skipped,
) -> Option<PathBeneath<PathFd>> {
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(PathFdError::OpenCall { source, .. })
            if source.raw_os_error() == Some(libc::ENOENT) =>
        {
            skipped.missing.push(path.to_owned());
            return None;
        }
        Err(e) => {
            skipped.unopenable.push((path.to_owned(), e.to_string()));
            return None;
        }
    };
    let is_dir = match rustix::fs::fstat(&fd) {
        Ok(st) => {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
        }
        Err(e) => {
            skipped
                .unopenable
                .push((path.to_owned(), format!("fstat: {e}")));
            return None;
        }
    };
    let rights = if is_dir { rights } else { rights & FILE_RIGHTS };
    (!rights.is_empty()).then(|| PathBeneath::new(fd, rights))
}

/// Build, fill and enforce the ruleset.
fn restrict(
    plan: &LandlockPlan,
    handled: &Handled,
    skipped: &mut Skipped,
) -> Result<Restriction, LandlockError> {
    let mut ruleset = Ruleset::default().handle_access(handled.fs())?;
    if !handled.net.is_empty() {
        ruleset = ruleset.handle_access(handled.net)?;
    }
    if !handled.scope.is_empty() {
        ruleset = ruleset.scope(handled.scope)?;
    }
    let mut created = ruleset.create()?;
    let groups: [(&[PathBuf], BitFlags<AccessFs>); 3] = [
        (&plan.read_exec, handled.read_exec_rights()),
        (
            &plan.read_write,
            handled.read_write_rights(plan.exec_in_read_write),
        ),
        (&plan.devices, handled.device_rights()),
    ];
    for (paths, rights) in groups {
        for path in paths {
            if let Some(rule) = path_rule(path, rights, skipped) {
                created = created.add_rule(rule)?;
            }
        }
    }
    if let (Some(tcp), false) = (&plan.tcp, handled.net.is_empty()) {
        let mut ports: BTreeMap<u16, BitFlags<AccessNet>> = BTreeMap::new();
        for &p in &tcp.connect {
            *ports.entry(p).or_default() |= AccessNet::ConnectTcp;
        }
        for &p in &tcp.bind {
            *ports.entry(p).or_default() |= AccessNet::BindTcp;
        }
        for (port, rights) in ports {
            let rights = rights & handled.net;
            if !rights.is_empty() {
                created = created.add_rule(NetPort::new(port, rights))?;
            }
        }
    }
    if crate::mutant::active(crate::mutant::LANDLOCK_RESTRICT) {
        // The mutant: the ruleset is built and never enforced; the status is what
        // `restrict_self` says on success, so only the probe can tell.
        drop(created);
        return Ok(Restriction {
            ruleset: RulesetStatus::FullyEnforced,
            landlock: LandlockStatus::Available {
                effective_abi: handled.abi,
                kernel_abi: None,
            },
            no_new_privs: true,
        });
    }
    let status = created.restrict_self()?;
    Ok(Restriction {
        ruleset: status.ruleset,
        landlock: status.landlock,
        no_new_privs: status.no_new_privs,
    })
}

/// What `landlock_restrict_self` reported.
struct Restriction {
    ruleset: RulesetStatus,
    landlock: LandlockStatus,
    no_new_privs: bool,
}

/// The kernel's effective ABI as the crate saw it, and its raw number when newer.
fn kernel_abi(status: &LandlockStatus) -> (ABI, Value) {
    match status {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => (
            *effective_abi,
            json!(kernel_abi.map_or(i64::from(abi_number(*effective_abi)), i64::from)),
        ),
        LandlockStatus::NotEnabled => (ABI::Unsupported, json!("not_enabled")),
        LandlockStatus::NotImplemented => (ABI::Unsupported, json!("not_implemented")),
    }
}

/// Map the crate's status to one observation per dimension.
fn observe(
    plan: &LandlockPlan,
    handled: &Handled,
    status: &Restriction,
    skipped: &Skipped,
) -> Vec<ControlObservation> {
    let (kabi, kabi_value) = kernel_abi(&status.landlock);
    let supported = Handled::for_plan(plan, kabi);
    let in_force = abi_number(handled.abi).min(abi_number(kabi));
    let mut base = BTreeMap::new();
    base.insert("abi".to_owned(), json!(in_force));
    base.insert("requested_abi".to_owned(), json!(plan.abi));
    base.insert("kernel_abi".to_owned(), kabi_value);
    base.insert(
        "restriction".to_owned(),
        json!(restriction_name(&status.ruleset)),
    );
    base.insert("no_new_privs".to_owned(), json!(status.no_new_privs));

    let not_enforced_reason = || match status.landlock {
        LandlockStatus::NotEnabled => {
            "Landlock is built into the kernel but not enabled".to_owned()
        }
        LandlockStatus::NotImplemented => "the kernel has no Landlock".to_owned(),
        LandlockStatus::Available { .. } => "Landlock did not enforce the ruleset".to_owned(),
    };

    let mut out = Vec::new();
    let mut explained = false;
    let mut push = |dimension: ControlDimension,
                    requested: Vec<&'static str>,
                    supported: Vec<&'static str>,
                    mut details: BTreeMap<String, Value>,
                    unrequested_reason: Option<String>| {
        let (st, missing) = dimension_status(&status.ruleset, &requested, &supported);
        details.insert("handled".to_owned(), json!(requested));
        let reason = match st {
            ControlStatus::Enforced => None,
            _ if status.ruleset == RulesetStatus::NotEnforced => Some(not_enforced_reason()),
            _ if requested.is_empty() => unrequested_reason,
            _ => {
                explained = true;
                details.insert("missing".to_owned(), json!(missing));
                Some(format!(
                    "the kernel's Landlock ABI {} does not handle: {}",
                    abi_number(kabi),
                    missing.join(", ")
                ))
            }
        };
        out.push(obs(dimension, st, reason, details));
    };

    let mut fs_details = base.clone();
    insert_skipped(&mut fs_details, skipped);
    let mut read_details = fs_details.clone();
    read_details.insert(
        "read_exec".to_owned(),
        json!(
            plan.read_exec
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
        ),
    );
    let shadowed = exec_reaches_read_write(plan);
    if !shadowed.is_empty() {
        read_details.insert(
            "execute_reaches_read_write".to_owned(),
            json!(
                shadowed
                    .iter()
                    .map(|p| p.to_string_lossy())
                    .collect::<Vec<_>>()
            ),
        );
    }
    push(
        ControlDimension::FilesystemRead,
        fs_names(handled.fs_read),
        fs_names(supported.fs_read),
        read_details,
        None,
    );
    let mut write_details = fs_details;
    write_details.insert(
        "read_write".to_owned(),
        json!(
            plan.read_write
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
        ),
    );
    write_details.insert(
        "exec_in_read_write".to_owned(),
        json!(plan.exec_in_read_write),
    );
    write_details.insert(
        "devices".to_owned(),
        json!(
            plan.devices
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
        ),
    );
    push(
        ControlDimension::FilesystemWrite,
        fs_names(handled.fs_write),
        fs_names(supported.fs_write),
        write_details,
        None,
    );
    if let Some(tcp) = &plan.tcp {
        let mut d = base.clone();
        d.insert("connect_ports".to_owned(), json!(tcp.connect));
        d.insert("bind_ports".to_owned(), json!(tcp.bind));
        d.insert("protocols".to_owned(), json!(["tcp"]));
        push(
            ControlDimension::Network,
            net_names(handled.net),
            net_names(supported.net),
            d,
            Some(format!(
                "the plan's Landlock ABI {} has no TCP rules (ABI 4)",
                plan.abi
            )),
        );
    }
    if plan.scope_signals || plan.scope_abstract_unix {
        let d = base.clone();
        push(
            ControlDimension::Process,
            scope_names(handled.scope),
            scope_names(supported.scope),
            d,
            Some(format!(
                "the plan's Landlock ABI {} has no scopes (ABI 6)",
                plan.abi
            )),
        );
    }
    if status.ruleset == RulesetStatus::PartiallyEnforced && !explained {
        for o in &mut out {
            if o.status == ControlStatus::Enforced {
                o.status = ControlStatus::Partial;
                o.reason = Some(
                    "Landlock reported the ruleset partially enforced for a reason no \
                     dimension accounts for"
                        .to_owned(),
                );
            }
        }
    }
    out
}

/// What one probe access read back after `restrict_self`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The access was refused with `EACCES` at `path`: the ruleset is in force there.
    Denied(PathBuf),
    /// The access succeeded at `path` (and was undone): the ruleset is not in force.
    Allowed(PathBuf),
    /// No path outside the grants could be tried, or every try failed for another reason.
    Inconclusive(String),
}

impl Probe {
    fn details(&self) -> Value {
        match self {
            Probe::Denied(p) => json!({"result": "denied", "path": p.to_string_lossy()}),
            Probe::Allowed(p) => json!({"result": "allowed", "path": p.to_string_lossy()}),
            Probe::Inconclusive(why) => json!({"result": "inconclusive", "why": why}),
        }
    }
}

/// The write probe's first path (see [`probe_write`]).
const COMM_PROBE: &str = "/proc/thread-self/comm";

fn beneath(path: &Path, trees: &[PathBuf]) -> bool {
    trees.iter().any(|t| path.starts_with(t))
}

/// Directories to probe from, in order: the parents of the `read_write` trees (the job
/// directory on the scoped tier), then `/dev/shm` (a device grant: files only, no new
/// entries). Pure.
pub fn probe_dirs(plan: &LandlockPlan) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let parents = plan.read_write.iter().filter_map(|p| p.parent());
    for d in parents.chain([Path::new("/dev/shm")]) {
        if !dirs.iter().any(|x| x == d) {
            dirs.push(d.to_owned());
        }
    }
    dirs
}

/// The write probe: `mkdir` of a fresh name in a directory outside the `read_write` grants
/// that the process could write to without Landlock (`access(2)`, which Landlock does not
/// restrict, says so; `EROFS` and other errors move on to the next). Landlock checks
/// `make_dir` before the permission bits, so `EACCES` here is Landlock's.
///
/// First of all, an open for writing (no write follows) of this thread's `comm` in
/// `/proc`: procfs is mounted read-write on both tiers and the file is the caller's own, so
/// only Landlock's `write_file` (checked after the mount and the permission bits) refuses.
pub fn probe_write(plan: &LandlockPlan) -> Probe {
    let mut tried = Vec::new();
    let comm = Path::new(COMM_PROBE);
    if !beneath(comm, &plan.read_write) && !beneath(comm, &plan.devices) {
        let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC;
        match rustix::fs::open(comm, flags, rustix::fs::Mode::empty()) {
            Err(rustix::io::Errno::ACCESS) => return Probe::Denied(comm.to_owned()),
            Ok(fd) => {
                drop(fd);
                return Probe::Allowed(comm.to_owned());
            }
            Err(e) => tried.push(format!("{COMM_PROBE}: {e}")),
        }
    }
    for dir in probe_dirs(plan) {
        if beneath(&dir, &plan.read_write) {
            continue;
        }
        let ok = rustix::fs::access(
            &dir,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        );
        if let Err(e) = ok {
            tried.push(format!("{}: {e}", dir.display()));
            continue;
        }
        let name = dir.join(format!(".cofferdam-landlock-probe-{}", std::process::id()));
        match rustix::fs::mkdir(&name, rustix::fs::Mode::from_raw_mode(0o700)) {
            Err(rustix::io::Errno::ACCESS) => return Probe::Denied(name),
            Ok(()) => {
                let _ =
                    rustix::fs::unlinkat(rustix::fs::CWD, &name, rustix::fs::AtFlags::REMOVEDIR);
                return Probe::Allowed(name);
            }
            Err(e) => tried.push(format!("{}: {e}", name.display())),
        }
    }
    Probe::Inconclusive(if tried.is_empty() {
        "no directory outside the write grants to try".to_owned()
    } else {
        tried.join("; ")
    })
}

/// The read probe: open for reading a directory granted neither read nor write (only the
/// device grant, which has no `read_dir`), readable by its permission bits. `None` when
/// every candidate is granted read (the sealed tier grants `/`).
pub fn probe_read(plan: &LandlockPlan) -> Option<Probe> {
    let mut tried = Vec::new();
    let mut any = false;
    for dir in probe_dirs(plan) {
        if beneath(&dir, &plan.read_write) || beneath(&dir, &plan.read_exec) {
            continue;
        }
        any = true;
        if let Err(e) = rustix::fs::access(&dir, rustix::fs::Access::READ_OK) {
            tried.push(format!("{}: {e}", dir.display()));
            continue;
        }
        let flags = rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::CLOEXEC;
        match rustix::fs::open(&dir, flags, rustix::fs::Mode::empty()) {
            Err(rustix::io::Errno::ACCESS) => return Some(Probe::Denied(dir)),
            Ok(fd) => {
                drop(fd);
                return Some(Probe::Allowed(dir));
            }
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    any.then(|| Probe::Inconclusive(tried.join("; ")))
}

/// Read the ruleset back with the probes and weaken the observations to what was read: a
/// write probe that succeeded fails every dimension (no domain is in force), one that could
/// not be made leaves none `enforced`; a read probe that succeeded fails `filesystem_read`.
fn read_back(plan: &LandlockPlan, out: &mut [ControlObservation]) {
    if out.iter().all(|o| o.status == ControlStatus::Unavailable) {
        return;
    }
    let write = probe_write(plan);
    let read = probe_read(plan);
    let read_value = read.as_ref().map_or_else(
        || json!({"result": "not_probed", "why": "every candidate is granted read"}),
        Probe::details,
    );
    for o in out.iter_mut() {
        o.details.insert("write_probe".to_owned(), write.details());
        o.details
            .insert("read_probe".to_owned(), read_value.clone());
        let weaker = match (&write, &read, o.dimension) {
            (Probe::Allowed(p), _, _) => Some((
                ControlStatus::Failed,
                format!(
                    "the write probe {} succeeded after restrict_self: no Landlock domain is \
                     in force",
                    p.display()
                ),
            )),
            (_, Some(Probe::Allowed(p)), ControlDimension::FilesystemRead) => Some((
                ControlStatus::Failed,
                format!(
                    "the read probe {} succeeded after restrict_self: reads are not confined",
                    p.display()
                ),
            )),
            (Probe::Inconclusive(why), _, _) => Some((
                ControlStatus::Partial,
                format!("the ruleset could not be read back with a probe: {why}"),
            )),
            _ => None,
        };
        if let Some((status, reason)) = weaker
            && (o.status == ControlStatus::Enforced
                || (status == ControlStatus::Failed && o.status != ControlStatus::Unavailable))
        {
            o.status = status;
            o.reason = Some(reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_policy::plan::TcpRules;

    fn plan(abi: u32) -> LandlockPlan {
        LandlockPlan {
            abi,
            read_exec: vec!["/".into()],
            read_write: vec!["/tmp".into()],
            exec_in_read_write: false,
            devices: vec!["/dev/null".into()],
            tcp: None,
            scope_signals: true,
            scope_abstract_unix: true,
        }
    }

    #[test]
    fn abi_numbers_round_trip_and_cap() {
        for n in 0..=10 {
            assert_eq!(abi_number(plan_abi(n)), n);
        }
        assert_eq!(abi_number(plan_abi(99)), 10);
        assert_eq!(abi_number(plan_abi(u32::MAX)), 10);
    }

    #[test]
    fn rights_per_tree_kind_at_abi_7() {
        let h = Handled::for_plan(&plan(7), ABI::V7);
        assert_eq!(
            fs_names(h.read_exec_rights()),
            ["execute", "read_file", "read_dir"]
        );
        let rw = h.read_write_rights(false);
        assert!(!rw.contains(AccessFs::Execute));
        for r in [
            AccessFs::WriteFile,
            AccessFs::ReadFile,
            AccessFs::ReadDir,
            AccessFs::RemoveDir,
            AccessFs::RemoveFile,
            AccessFs::MakeReg,
            AccessFs::MakeDir,
            AccessFs::MakeSym,
            AccessFs::Refer,
            AccessFs::Truncate,
            AccessFs::IoctlDev,
        ] {
            assert!(rw.contains(r), "{r:?}");
        }
        assert!(h.read_write_rights(true).contains(AccessFs::Execute));
        assert_eq!(
            fs_names(h.device_rights()),
            ["write_file", "read_file", "ioctl_dev"]
        );
        assert_eq!(scope_names(h.scope), ["signal", "abstract_unix_socket"]);
        assert!(h.net.is_empty());
    }

    #[test]
    fn older_abis_handle_less() {
        let mut p = plan(3);
        p.tcp = Some(TcpRules {
            connect: vec![443],
            bind: vec![],
        });
        let h = Handled::for_plan(&p, plan_abi(3));
        assert!(!h.fs().contains(AccessFs::IoctlDev));
        assert!(h.fs().contains(AccessFs::Truncate));
        assert!(h.net.is_empty(), "no TCP rules before ABI 4");
        assert!(h.scope.is_empty(), "no scopes before ABI 6");
        assert_eq!(fs_names(h.device_rights()), ["write_file", "read_file"]);
        let h4 = Handled::for_plan(&p, plan_abi(4));
        assert_eq!(net_names(h4.net), ["bind_tcp", "connect_tcp"]);
    }

    #[test]
    fn dimension_status_maps_coverage() {
        let full = RulesetStatus::FullyEnforced;
        let part = RulesetStatus::PartiallyEnforced;
        let none = RulesetStatus::NotEnforced;
        let req = ["a", "b"];
        assert_eq!(
            dimension_status(&full, &req, &["a", "b"]).0,
            ControlStatus::Enforced
        );
        assert_eq!(
            dimension_status(&part, &req, &["a", "b"]).0,
            ControlStatus::Enforced
        );
        let (s, missing) = dimension_status(&part, &req, &["a"]);
        assert_eq!(s, ControlStatus::Partial);
        assert_eq!(missing, ["b"]);
        assert_eq!(
            dimension_status(&part, &req, &[]).0,
            ControlStatus::Unavailable
        );
        assert_eq!(
            dimension_status(&none, &req, &["a", "b"]).0,
            ControlStatus::Unavailable
        );
        assert_eq!(
            dimension_status(&full, &[], &["a"]).0,
            ControlStatus::Unavailable
        );
    }

    #[test]
    fn dimensions_follow_the_plan() {
        let mut p = plan(7);
        assert_eq!(
            dimensions(&p),
            [
                ControlDimension::FilesystemRead,
                ControlDimension::FilesystemWrite,
                ControlDimension::Process
            ]
        );
        p.tcp = Some(TcpRules {
            connect: vec![],
            bind: vec![],
        });
        p.scope_signals = false;
        p.scope_abstract_unix = false;
        assert_eq!(
            dimensions(&p),
            [
                ControlDimension::FilesystemRead,
                ControlDimension::FilesystemWrite,
                ControlDimension::Network
            ]
        );
    }

    #[test]
    fn execute_beneath_read_exec_is_flagged() {
        let mut p = plan(7);
        p.read_exec = vec!["/".into()];
        p.read_write = vec!["/tmp".into(), "/home/u/proj".into()];
        assert_eq!(exec_reaches_read_write(&p), p.read_write);
        p.read_exec = vec!["/usr".into(), "/tmpfoo".into()];
        assert!(exec_reaches_read_write(&p).is_empty());
        p.read_exec = vec!["/".into()];
        p.exec_in_read_write = true;
        assert!(exec_reaches_read_write(&p).is_empty());
    }

    #[test]
    fn the_probes_succeed_without_a_ruleset_and_skip_granted_paths() {
        // This test process is not restricted: the write probe opens its own comm.
        let p = plan(1);
        assert_eq!(probe_write(&p), Probe::Allowed(PathBuf::from(COMM_PROBE)));
        let mut granted = plan(1);
        granted.read_write = vec![PathBuf::from("/")];
        assert!(matches!(probe_write(&granted), Probe::Inconclusive(_)));
        let mut everything = plan(1);
        everything.read_exec = vec![PathBuf::from("/")];
        assert_eq!(probe_read(&everything), None);
    }

    #[test]
    fn abi_zero_is_unavailable_without_a_syscall() {
        let obs = install(&plan(0));
        assert_eq!(obs.len(), 3);
        for o in obs {
            assert_eq!(o.status, ControlStatus::Unavailable);
            assert!(o.reason.is_some());
            assert_eq!(o.details["abi"], 0);
        }
    }
}
