//! The run's cgroup: carries out a [`CgroupPlan`] (create one cgroup per hierarchy under
//! the supervisor's own, write the limits and read them back), reports one observation per
//! limit, reads the kernel's counters after the run (OOM kills, denied forks) and removes
//! the cgroup.
//!
//! Owns every cgroupfs write cofferdam makes but the placement. It may not decide which
//! mechanism enforces what (`cofferdam_policy::cgroup_plan` does) nor place processes
//! (`crate::launch` does, before pid 1 starts): in the v1 hierarchies the init is born
//! inside ([`RunCgroup::v1_dirs`]: the thread that starts it moves itself in first), in the
//! unified one the supervisor writes its pid into [`RunCgroup::v2_procs_files`].
//!
//! v1: the directory of the supervisor's own cgroup in each controller's hierarchy is
//! found from `/proc/self/cgroup` and `/proc/self/mountinfo`; the run's cgroup is a child of
//! it (so any limit on the caller still applies). v2: a child of the caller's own delegated
//! cgroup, with the controllers enabled in the parent's `cgroup.subtree_control`; this fails
//! when the parent has processes of its own (the kernel's no-internal-processes rule), and
//! the observation says so.

use crate::probe::cgroup::{CgroupMount, own_cgroup_dir, parse_mountinfo};
use cofferdam_policy::cgroup_plan::{CgroupLimit, CgroupPlan, CgroupVersion};
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus, ResourceDimension,
};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Files that exist only with swap accounting; their absence is not a failure.
const SWAP_FILES: &[&str] = &["memory.swap.max", "memory.memsw.limit_in_bytes"];

/// The cgroup directories made for one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCgroup {
    /// (controller, directory), one per controller installed.
    dirs: Vec<(&'static str, CgroupVersion, PathBuf)>,
}

/// What the kernel counted in the run's cgroup (`None`: no such cgroup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// OOM kills (v1 `memory.oom_control` `oom_kill`, v2 `memory.events` `oom_kill`).
    pub oom_kills: Option<u64>,
    /// Forks refused at `pids.max` (`pids.events` `max`).
    pub pids_denied: Option<u64>,
}

fn observation(
    limit: &CgroupLimit,
    status: ControlStatus,
    reason: Option<String>,
    dir: Option<&Path>,
) -> ControlObservation {
    let mut o = ControlObservation::new(
        ControlMechanism::Cgroup,
        ControlDimension::Resources,
        status,
    );
    o.reason = reason;
    let dimension = serde_json::to_value(limit.dimension).unwrap_or_default();
    o.details.insert("dimension".into(), dimension);
    o.details
        .insert("version".into(), json!(limit.version.number()));
    o.details
        .insert("controller".into(), json!(limit.controller));
    if let Some((file, value)) = limit.writes.first() {
        o.details.insert("file".into(), json!(file));
        o.details.insert("value".into(), json!(value));
    }
    if limit.dimension == ResourceDimension::IoBytesPerSec {
        let mut devices: Vec<&str> = limit
            .writes
            .iter()
            .filter_map(|(_, v)| v.split_whitespace().next())
            .collect();
        devices.dedup();
        o.details.insert("devices".into(), json!(devices));
    }
    if let Some(d) = dir {
        o.details
            .insert("path".into(), json!(d.display().to_string()));
    }
    o
}

/// The supervisor's own cgroup directory in the v1 hierarchy of `controller`.
fn v1_own_dir(mountinfo: &str, proc_cgroup: &str, controller: &str) -> Option<PathBuf> {
    let own = proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(id), Some(ctrls), Some(path))
                if id != "0" && ctrls.split(',').any(|c| c == controller) =>
            {
                Some(path.to_owned())
            }
            _ => None,
        }
    })?;
    crate::probe::mountinfo::parse(mountinfo)
        .into_iter()
        .filter(|m| m.fstype == "cgroup" && m.has_option(controller))
        .find_map(|m| {
            let mount = CgroupMount {
                mount_point: m.point.to_string_lossy().into_owned(),
                root: m.root,
                read_only: false,
            };
            own_cgroup_dir(&mount, &own)
        })
}

/// The supervisor's own cgroup directory in the unified hierarchy.
fn v2_own_dir(mountinfo: &str, proc_cgroup: &str) -> Option<PathBuf> {
    let own = crate::probe::cgroup::parse_own_v2_cgroup(proc_cgroup)?;
    parse_mountinfo(mountinfo)
        .v2
        .iter()
        .find_map(|m| own_cgroup_dir(m, &own))
}

/// Install `plan` for run `run_id`: one observation per planned limit (enforced only when
/// the value read back is the value written), and the cgroup to join, when any limit took.
pub fn install(plan: &CgroupPlan, run_id: &str) -> (RunCgroup, Vec<ControlObservation>) {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let name = format!("cofferdam-{run_id}");
    let mut cg = RunCgroup::default();
    let mut obs = Vec::new();
    for limit in &plan.limits {
        match install_one(limit, &name, &mountinfo, &proc_cgroup, &mut cg) {
            Ok(dir) => obs.push(observation(
                limit,
                ControlStatus::Enforced,
                None,
                Some(&dir),
            )),
            Err(reason) => obs.push(observation(
                limit,
                ControlStatus::Failed,
                Some(reason),
                None,
            )),
        }
    }
    (cg, obs)
}

fn install_one(
    limit: &CgroupLimit,
    name: &str,
    mountinfo: &str,
    proc_cgroup: &str,
    cg: &mut RunCgroup,
) -> Result<PathBuf, String> {
    let dir = match cg
        .dirs
        .iter()
        .find(|(c, v, _)| {
            *v == limit.version && (*c == limit.controller || limit.version == CgroupVersion::V2)
        })
        .map(|(_, _, d)| d.clone())
    {
        Some(d) => d,
        None => {
            let parent = match limit.version {
                CgroupVersion::V1 => v1_own_dir(mountinfo, proc_cgroup, limit.controller),
                CgroupVersion::V2 => v2_own_dir(mountinfo, proc_cgroup),
            }
            .ok_or_else(|| {
                format!(
                    "cannot find this process's cgroup in the {} hierarchy of {}",
                    limit.controller,
                    if limit.version == CgroupVersion::V1 {
                        "cgroup v1"
                    } else {
                        "cgroup v2"
                    }
                )
            })?;
            let dir = parent.join(name);
            std::fs::create_dir(&dir)
                .map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
            dir
        }
    };
    if !cg
        .dirs
        .iter()
        .any(|(c, _, d)| *c == limit.controller && *d == dir)
    {
        cg.dirs.push((limit.controller, limit.version, dir.clone()));
    }
    if limit.version == CgroupVersion::V2 {
        let parent = dir.parent().unwrap_or(&dir);
        let ctl = parent.join("cgroup.subtree_control");
        let enable = || std::fs::write(&ctl, format!("+{}", limit.controller));
        enable()
            .or_else(|e| {
                // No internal processes: when cofferdam is alone in its delegated cgroup
                // (`systemd-run --user --scope -p Delegate=yes cofferdam …`), it steps
                // into a leaf of its own so the parent can hand controllers down.
                if e.raw_os_error() == Some(libc::EBUSY) && leave_for_leaf(parent)? {
                    enable()
                } else {
                    Err(e)
                }
            })
            .map_err(|e| {
                format!(
                    "cannot enable the {} controller in {}: {e} (a cgroup with processes of its \
                 own cannot give controllers to a child; start cofferdam in a delegated scope \
                 of its own, e.g. `systemd-run --user --scope -p Delegate=yes cofferdam …`)",
                    limit.controller,
                    ctl.display()
                )
            })?;
    }
    for (file, value) in &limit.writes {
        let path = dir.join(file);
        match std::fs::write(&path, value) {
            Ok(()) => {}
            // Swap accounting is optional: without it there is no swap file to limit.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && SWAP_FILES.contains(file) => {
                continue;
            }
            Err(e) => return Err(format!("cannot write {value} to {}: {e}", path.display())),
        }
        {
            let back = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read back {}: {e}", path.display()))?;
            if !same_value(back.trim(), value) {
                return Err(format!(
                    "{} reads {} after writing {value}",
                    path.display(),
                    back.trim()
                ));
            }
        }
    }
    Ok(dir)
}

/// Move this process out of `parent` into a new leaf child, but only when it is the only
/// process there (so nobody else's cgroup changes); whether it moved.
fn leave_for_leaf(parent: &Path) -> std::io::Result<bool> {
    let me = std::process::id();
    let procs = std::fs::read_to_string(parent.join("cgroup.procs"))?;
    if !only_pid(&procs, me) {
        return Ok(false);
    }
    let leaf = parent.join(format!("cofferdam-supervisor-{me}"));
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    std::fs::write(leaf.join("cgroup.procs"), me.to_string())?;
    Ok(true)
}

/// Whether a `cgroup.procs` listing is exactly `pid`.
fn only_pid(procs: &str, pid: u32) -> bool {
    let mut pids = procs.lines().filter_map(|l| l.trim().parse::<u32>().ok());
    pids.next() == Some(pid) && pids.next().is_none()
}

/// Whether the value read back is the one written (v1 rounds memory limits to pages; a
/// per-device file such as `io.max` lists every device, one line each, with the fields not
/// written shown at their defaults).
fn same_value(back: &str, written: &str) -> bool {
    if back == written {
        return true;
    }
    let mut want = written.split_whitespace();
    if let Some(dev) = want.next().filter(|d| d.contains(':')) {
        let want: Vec<&str> = want.collect();
        return back.lines().any(|line| {
            let mut got = line.split_whitespace();
            got.next() == Some(dev) && {
                let got: Vec<&str> = got.collect();
                want.iter().all(|w| got.contains(w))
            }
        });
    }
    match (back.parse::<u64>(), written.parse::<u64>()) {
        (Ok(b), Ok(w)) => b <= w && w - b < 4096 * 16,
        _ => false,
    }
}

impl RunCgroup {
    /// Whether no cgroup was made.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// The `cgroup.procs` file of each directory made (one per v1 hierarchy, one for v2).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .dirs
            .iter()
            .map(|(_, _, d)| d.join("cgroup.procs"))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The run's directories in the v1 hierarchies, one per hierarchy (`crate::launch`
    /// starts the init from a thread that moved itself into each through its `tasks` file:
    /// a thread moving itself skips the kernel's global lock, and its wait for an RCU grace
    /// period, that moving a process by pid takes).
    pub fn v1_dirs(&self) -> Vec<PathBuf> {
        self.dirs_of(CgroupVersion::V1)
    }

    /// The `cgroup.procs` file of the run's directory in the unified hierarchy, if any: the
    /// init is moved there by pid once started (a v2 domain cgroup takes no single thread).
    pub fn v2_procs_files(&self) -> Vec<PathBuf> {
        self.dirs_of(CgroupVersion::V2)
            .into_iter()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    fn dirs_of(&self, version: CgroupVersion) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .dirs
            .iter()
            .filter(|(_, v, _)| *v == version)
            .map(|(_, _, d)| d.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn dir_of(&self, controller: &str) -> Option<(CgroupVersion, &Path)> {
        self.dirs
            .iter()
            .find(|(c, _, _)| *c == controller)
            .map(|(_, v, d)| (*v, d.as_path()))
    }

    /// The kernel's counters, read after the run (before [`RunCgroup::remove`]).
    pub fn counters(&self) -> Counters {
        let key = |path: PathBuf, key: &str| -> Option<u64> {
            let text = std::fs::read_to_string(path).ok()?;
            keyed(&text, key)
        };
        Counters {
            oom_kills: self.dir_of("memory").and_then(|(v, d)| match v {
                CgroupVersion::V1 => key(d.join("memory.oom_control"), "oom_kill"),
                CgroupVersion::V2 => key(d.join("memory.events"), "oom_kill"),
            }),
            pids_denied: self
                .dir_of("pids")
                .and_then(|(_, d)| key(d.join("pids.events"), "max")),
        }
    }

    /// Remove the run's cgroups (every process in them must be gone); the errors, if any.
    pub fn remove(self) -> Vec<String> {
        let mut errors = Vec::new();
        let mut dirs: Vec<PathBuf> = self.dirs.into_iter().map(|(_, _, d)| d).collect();
        dirs.sort();
        dirs.dedup();
        for d in dirs {
            if let Err(e) = remove_dir(&d) {
                errors.push(format!(
                    "cannot remove the run's cgroup {}: {e}",
                    d.display()
                ));
            }
        }
        errors
    }
}

/// Remove one empty cgroup directory (already gone is fine), retrying for up to a second:
/// a dying task keeps it busy for a moment after its parent reaped it, or after the
/// supervisor whose parent-death signal killed it was itself reaped.
pub fn remove_dir(dir: &Path) -> std::io::Result<()> {
    let mut last = None;
    for _ in 0..50 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    last.map_or(Ok(()), Err)
}

/// The value of `key` in a flat keyed file (`key value` lines).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The dimension a cgroup observation speaks for.
pub fn dimension_of(o: &ControlObservation) -> Option<ResourceDimension> {
    serde_json::from_value(o.details.get("dimension")?.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
        39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    const PROC: &str = "8:pids:/\n4:memory:/process_api/abc\n0::/user.slice\n";

    #[test]
    fn own_dirs_come_from_the_hierarchy_of_each_controller() {
        assert_eq!(
            v1_own_dir(MOUNTINFO, PROC, "memory"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"))
        );
        assert_eq!(
            v1_own_dir(MOUNTINFO, PROC, "pids"),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(v1_own_dir(MOUNTINFO, PROC, "cpu"), None);
        assert_eq!(
            v2_own_dir(MOUNTINFO, PROC),
            Some(PathBuf::from("/sys/fs/cgroup/unified/user.slice"))
        );
    }

    /// Mountinfo as the kernel writes it: optional fields between the options and the `-`,
    /// escaped path fields, a controller named only in the superblock options, a bind of a
    /// sub-cgroup, and lines that merely look like the controller (another filesystem with
    /// the same option, a truncated line).
    #[test]
    fn v1_dirs_are_read_with_the_one_mountinfo_parser() {
        let mountinfo = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,memory\n\
            35 31 0:32 / /sys/fs/cgroup/mem\\040ory rw,nosuid shared:12 master:3 - cgroup cgroup rw,memory\n\
            36 31 0:33 /outer /sys/fs/cgroup/pids rw shared:13 - cgroup none rw,pids\n\
            37 31 0:34 / /sys/fs/cgroup/cpu rw - cgroup\n\
            38 31 0:35 /a /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n";
        let proc = "9:blkio:/elsewhere\n8:pids:/outer/job\n4:memory:/api/abc\n0::/\n";
        assert_eq!(
            v1_own_dir(mountinfo, proc, "memory"),
            Some(PathBuf::from("/sys/fs/cgroup/mem ory/api/abc"))
        );
        // The bind mount shows /outer at its mount point: the own cgroup is below it.
        assert_eq!(
            v1_own_dir(mountinfo, proc, "pids"),
            Some(PathBuf::from("/sys/fs/cgroup/pids/job"))
        );
        // A line without its source and options names no controller.
        assert_eq!(v1_own_dir(mountinfo, proc, "cpu"), None);
        // The own cgroup is not under what the only blkio mount shows.
        assert_eq!(v1_own_dir(mountinfo, proc, "blkio"), None);
    }

    #[test]
    fn each_version_is_placed_its_own_way() {
        let cg = RunCgroup {
            dirs: vec![
                ("memory", CgroupVersion::V1, PathBuf::from("/m/r")),
                ("pids", CgroupVersion::V1, PathBuf::from("/p/r")),
                ("memory", CgroupVersion::V2, PathBuf::from("/u/r")),
                ("pids", CgroupVersion::V2, PathBuf::from("/u/r")),
            ],
        };
        assert_eq!(cg.v1_dirs(), [PathBuf::from("/m/r"), PathBuf::from("/p/r")]);
        assert_eq!(cg.v2_procs_files(), [PathBuf::from("/u/r/cgroup.procs")]);
        assert_eq!(cg.procs_files().len(), 3);
    }

    #[test]
    fn the_supervisor_steps_aside_only_when_alone() {
        assert!(only_pid("42\n", 42));
        assert!(!only_pid("42\n43\n", 42));
        assert!(!only_pid("43\n", 42));
        assert!(!only_pid("", 42));
    }

    #[test]
    fn counters_are_read_from_keyed_files() {
        let t = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(keyed(t, "oom_kill"), Some(2));
        assert_eq!(keyed("max 7\n", "max"), Some(7));
        assert_eq!(keyed("", "max"), None);
    }

    #[test]
    fn memory_limits_read_back_rounded_to_pages_are_the_same() {
        assert!(same_value("67108864", "67108864"));
        assert!(same_value("67104768", "67108863"));
        assert!(!same_value("9223372036854771712", "67108864"));
        assert!(same_value("50000 100000", "50000 100000"));
        let io_max = "8:0 rbps=1048576 wbps=1048576 riops=max wiops=max\n254:0 rbps=2 wbps=max riops=max wiops=max";
        assert!(same_value(io_max, "8:0 rbps=1048576 wbps=1048576"));
        assert!(!same_value(io_max, "254:0 rbps=2 wbps=2"));
        assert!(!same_value(io_max, "7:0 rbps=1048576 wbps=1048576"));
        assert!(same_value("254:0 1048576\n8:0 5", "254:0 1048576"));
        assert!(!same_value("254:0 1048576", "254:0 1048577"));
    }
}
