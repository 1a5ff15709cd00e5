//! cgroup layout facts: which v1 controllers are mounted, where the unified (v2) hierarchy
//! is, the prober's own v2 cgroup, its controllers, and whether that cgroup is delegated to
//! the prober.
//!
//! Owns the parsers for the cgroup mounts of `/proc/self/mountinfo` (its lines read by
//! `probe::mountinfo`), `/proc/self/cgroup` and `cgroup.controllers` (pure functions over file contents) and [`cgroup_facts`], which
//! composes them with injected readers so the whole decision is testable without a
//! particular host. It may not create, remove or write any cgroup: delegation is judged by
//! `access(W_OK)` alone.

use std::path::{Path, PathBuf};

use cofferdam_record::CgroupFacts;
use rustix::fs::{Access, AtFlags, CWD};

/// cgroup v1 controller names recognised in a v1 mount's options. Anything else in the
/// options (`rw`, `relatime`, `name=systemd`, `clone_children`, `xattr`, …) is not a
/// controller.
pub const V1_CONTROLLERS: &[&str] = &[
    "blkio",
    "cpu",
    "cpuacct",
    "cpuset",
    "debug",
    "devices",
    "freezer",
    "hugetlb",
    "io",
    "memory",
    "misc",
    "net_cls",
    "net_prio",
    "perf_event",
    "pids",
    "rdma",
];

/// One mount of the unified (v2) hierarchy, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// The cgroup (in the prober's cgroup namespace) shown at the mount point: field 4 of
    /// mountinfo, `/` for a whole-hierarchy mount.
    pub root: String,
    /// Where it is mounted.
    pub mount_point: String,
    /// Mounted read-only (mount option `ro`).
    pub read_only: bool,
}

/// The cgroup mounts found in `/proc/self/mountinfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    /// Every `cgroup2` mount, in mount order.
    pub v2: Vec<CgroupMount>,
    /// Controllers of the `cgroup` (v1) mounts, sorted and deduplicated.
    pub v1_controllers: Vec<String>,
}

pub use super::mountinfo::unescape_mount_field;

/// Parse `/proc/self/mountinfo` for cgroup mounts.
///
/// Line format (proc(5)): `id parent maj:min root mount_point mount_options [optional…] -
/// fstype source super_options`. v1 controllers are read from both option lists (the kernel
/// puts them in the super options; `/proc/mounts` merges the two).
pub fn parse_mountinfo(text: &str) -> CgroupMounts {
    let mut mounts = CgroupMounts::default();
    for m in super::mountinfo::parse(text) {
        match m.fstype.as_str() {
            "cgroup2" => mounts.v2.push(CgroupMount {
                read_only: m.has_option("ro"),
                mount_point: m.point.to_string_lossy().into_owned(),
                root: m.root,
            }),
            "cgroup" => {
                for opt in m.options.split(',').chain(m.super_options.split(',')) {
                    if V1_CONTROLLERS.contains(&opt) {
                        mounts.v1_controllers.push(opt.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    mounts.v1_controllers.sort();
    mounts.v1_controllers.dedup();
    mounts
}

/// The prober's own cgroup in the unified hierarchy: the path of the `0::` line of
/// `/proc/self/cgroup` (`hierarchy-id:controllers:path`; the path may itself contain `:`).
pub fn parse_own_v2_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("0"), Some(""), Some(path)) if !path.is_empty() => Some(path.to_owned()),
            _ => None,
        }
    })
}

/// Parse a `cgroup.controllers` (or `cgroup.subtree_control`) file: space-separated names.
pub fn parse_controllers(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

/// The directory of cgroup `own` under `mount`, when that mount shows it: the mount's root
/// must be `own` or an ancestor of it. `None` for a cgroup outside the mount (including
/// `/..`-paths of a cgroup outside the prober's cgroup namespace).
pub fn own_cgroup_dir(mount: &CgroupMount, own: &str) -> Option<PathBuf> {
    if !own.starts_with('/') || own.split('/').any(|c| c == "..") {
        return None;
    }
    let root = mount.root.trim_end_matches('/');
    let rest = if root.is_empty() {
        own
    } else if own == root {
        ""
    } else {
        match own.strip_prefix(root) {
            Some(rest) if rest.starts_with('/') => rest,
            _ => return None,
        }
    };
    let rest = rest.trim_start_matches('/');
    let base = Path::new(&mount.mount_point);
    Some(if rest.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rest)
    })
}

/// Choose the v2 mount to use: the first one that shows the prober's own cgroup, else the
/// first one.
pub fn select_v2_mount<'a>(
    mounts: &'a [CgroupMount],
    own: Option<&str>,
) -> Option<&'a CgroupMount> {
    own.and_then(|own| mounts.iter().find(|m| own_cgroup_dir(m, own).is_some()))
        .or_else(|| mounts.first())
}

/// Effects [`cgroup_facts`] needs, injectable for tests.
pub trait CgroupHost {
    /// The contents of a file, `None` when unreadable.
    fn read(&self, path: &Path) -> Option<String>;
    /// Whether the prober may write `path` (`access(W_OK)` with the effective ids).
    fn writable(&self, path: &Path) -> bool;
}

/// The live host: `std::fs` reads and `faccessat(AT_EACCESS)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveCgroupHost;

impl CgroupHost for LiveCgroupHost {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn writable(&self, path: &Path) -> bool {
        rustix::fs::accessat(CWD, path, Access::WRITE_OK, AtFlags::EACCESS).is_ok()
    }
}

/// Assemble [`CgroupFacts`] from `/proc/self/mountinfo` and `/proc/self/cgroup` (either
/// may be unreadable), reading `cgroup.controllers` and checking write access through
/// `host`.
///
/// Delegated means: the own cgroup directory, its `cgroup.procs` and its
/// `cgroup.subtree_control` are all writable by the prober (so it can create a child, move
/// processes into it and enable controllers for it), and the mount is not read-only.
pub fn cgroup_facts(
    mountinfo: Option<&str>,
    proc_self_cgroup: Option<&str>,
    host: &impl CgroupHost,
) -> CgroupFacts {
    let mounts = mountinfo.map(parse_mountinfo).unwrap_or_default();
    let own = proc_self_cgroup.and_then(parse_own_v2_cgroup);
    let mount = select_v2_mount(&mounts.v2, own.as_deref());
    let own_dir = match (mount, own.as_deref()) {
        (Some(m), Some(own)) => own_cgroup_dir(m, own).map(|d| (m, d)),
        _ => None,
    };
    let mut facts = CgroupFacts {
        v2_mount: mount.map(|m| m.mount_point.clone()),
        v2_own_cgroup: own.clone(),
        v2_controllers: Vec::new(),
        v2_delegated: false,
        v2_delegated_controllers: Vec::new(),
        v1_controllers: mounts.v1_controllers,
    };
    if let Some((m, dir)) = own_dir {
        facts.v2_controllers = host
            .read(&dir.join("cgroup.controllers"))
            .as_deref()
            .map(parse_controllers)
            .unwrap_or_default();
        facts.v2_delegated = !m.read_only
            && host.writable(&dir)
            && host.writable(&dir.join("cgroup.procs"))
            && host.writable(&dir.join("cgroup.subtree_control"));
        if facts.v2_delegated {
            facts.v2_delegated_controllers = facts.v2_controllers.clone();
        }
    }
    facts
}

/// Probe this host's cgroup layout (read-only).
pub fn probe_cgroup() -> CgroupFacts {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok();
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok();
    cgroup_facts(mountinfo.as_deref(), cgroup.as_deref(), &LiveCgroupHost)
}
