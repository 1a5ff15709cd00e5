//! Which cgroup mechanism enforces which requested limit (DESIGN.md §7): a delegated cgroup
//! v2 subtree with the controller, else a cgroup v1 hierarchy when running as root, else
//! none (the rlimit fallback and the honest limitation are the caller's). Pure: decided from
//! the request and the probed [`CgroupFacts`]; `cofferdam_sandbox::cgroup` carries it out
//! and reports what it installed.
//!
//! `io_bps` is planned for the whole disks behind the workdir and the stage ([`IoDevices`],
//! resolved by `cofferdam_sandbox::blockdev`): `io.max` `MAJ:MIN rbps=N wbps=N` in a
//! delegated v2 subtree with the `io` controller, else `blkio.throttle.read_bps_device` and
//! `write_bps_device` on v1 as root. Without a block device (overlay, tmpfs, network
//! filesystems) it is not planned, with the reason. A systemd transient scope with `Delegate=yes` is not requested over D-Bus
//! either: the caller's own cgroup is used when delegated, and the limitation says how to
//! get one (`systemd-run --user --scope -p Delegate=yes cofferdam …`).

use crate::policy::ResourceRequest;
use cofferdam_record::bundle::ResourceDimension;
use cofferdam_record::{CgroupFacts, EnforcementTier};

/// A cgroup version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// The unified hierarchy, a delegated subtree.
    V2,
    /// A per-controller v1 hierarchy (root only).
    V1,
}

impl CgroupVersion {
    /// 1 or 2.
    pub fn number(self) -> u8 {
        match self {
            Self::V2 => 2,
            Self::V1 => 1,
        }
    }
}

/// One value to write into the run's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLimit {
    /// The limit it enforces.
    pub dimension: ResourceDimension,
    /// Which version's hierarchy.
    pub version: CgroupVersion,
    /// The controller (`memory`, `pids`, `cpu`).
    pub controller: &'static str,
    /// Files and values, written in order and read back; the first is the limit itself
    /// (named in the observation), the rest complete it (swap, the CFS period).
    pub writes: Vec<(&'static str, String)>,
}

/// The whole disks behind the run's files, for `io_bps` (resolved by the caller).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoDevices {
    /// Whole-disk devices `(major, minor)`, without duplicates.
    pub devices: Vec<(u32, u32)>,
    /// The paths with no block device behind them, each with the reason.
    pub unresolved: Vec<String>,
}

/// The run's cgroup, decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupPlan {
    /// The limits to install, in order.
    pub limits: Vec<CgroupLimit>,
    /// Requested limits no cgroup will enforce here, and why.
    pub not_planned: Vec<(ResourceDimension, String)>,
}

impl CgroupPlan {
    /// Whether `dimension` is planned.
    pub fn covers(&self, dimension: ResourceDimension) -> bool {
        self.limits.iter().any(|l| l.dimension == dimension)
    }
}

/// Where controller `ctrl` would come from on this host: a delegated v2 subtree that has
/// it, else a v1 hierarchy when running as root (`io`: [`io_source`], v1's `blkio`).
pub fn controller_source(facts: &CgroupFacts, is_root: bool, ctrl: &str) -> Option<CgroupVersion> {
    if ctrl == "io" {
        return io_source(facts, is_root);
    }
    let has = |v: &[String]| v.iter().any(|c| c == ctrl);
    if facts.v2_delegated && has(&facts.v2_delegated_controllers) {
        Some(CgroupVersion::V2)
    } else if is_root && has(&facts.v1_controllers) {
        Some(CgroupVersion::V1)
    } else {
        None
    }
}

/// Why cofferdam's default pids limit ([`crate::policy::DEFAULT_PIDS`]) is left out of a
/// run: no cgroup enforces it and [`default_pids_by_rlimit`] is false.
pub const DEFAULT_PIDS_SKIPPED: &str = "cofferdam's default pids limit is not applied: no \
     cgroup pids controller is usable and this tier runs without its own user namespace, \
     where RLIMIT_NPROC would count every process of your user on the host (a user who \
     already runs that many could not start the run's processes); give `--pids N` to apply \
     RLIMIT_NPROC anyway";

/// Whether `RLIMIT_NPROC` may carry cofferdam's *default* pids limit on `tier` when no
/// cgroup does: only on the sealed tier, where the init sets it inside the run's own user
/// namespace and the kernel counts the tasks of that namespace only (per-namespace
/// `ucounts`), not the user's other processes. A pids limit asked for explicitly is
/// applied on every tier (the scope report says what it counts).
pub fn default_pids_by_rlimit(tier: EnforcementTier) -> bool {
    tier == EnforcementTier::MountnsPivotRootLandlockSeccomp
}

/// The CFS period cofferdam uses, microseconds.
pub const CPU_PERIOD_US: u64 = 100_000;

/// Where the `io_bps` limit would come from: a delegated v2 subtree with `io`, else the v1
/// `blkio` hierarchy as root.
pub fn io_source(facts: &CgroupFacts, is_root: bool) -> Option<CgroupVersion> {
    let has = |v: &[String], c: &str| v.iter().any(|x| x == c);
    if facts.v2_delegated && has(&facts.v2_delegated_controllers, "io") {
        Some(CgroupVersion::V2)
    } else if is_root && has(&facts.v1_controllers, "blkio") {
        Some(CgroupVersion::V1)
    } else {
        None
    }
}

/// Plan the run's cgroup for `r` on a host with `facts` (`is_root`: the effective uid is
/// 0); `io` are the disks behind the run's files, used for `io_bps` only.
pub fn plan_cgroup(
    r: &ResourceRequest,
    facts: &CgroupFacts,
    is_root: bool,
    io: &IoDevices,
) -> CgroupPlan {
    let mut plan = CgroupPlan::default();
    let why_not = |ctrl: &str| {
        let v1_hint = if !is_root && facts.v1_controllers.iter().any(|c| c == ctrl) {
            " (the cgroup v1 controller needs root)"
        } else {
            ""
        };
        format!(
            "no delegated cgroup v2 subtree with the {ctrl} controller{v1_hint}; a systemd \
             transient scope was not requested (this build does not use D-Bus): run under \
             `systemd-run --user --scope -p Delegate=yes cofferdam …` to get one"
        )
    };
    let mut add = |dimension, ctrl: &'static str, writes: Vec<(&'static str, String)>| {
        match controller_source(facts, is_root, ctrl) {
            Some(version) => plan.limits.push(CgroupLimit {
                dimension,
                version,
                controller: ctrl,
                writes,
            }),
            None => plan.not_planned.push((dimension, why_not(ctrl))),
        }
    };
    let v2 = |ctrl| controller_source(facts, is_root, ctrl) == Some(CgroupVersion::V2);
    if let Some(m) = r.memory {
        let writes = if v2("memory") {
            vec![
                ("memory.max", m.0.to_string()),
                ("memory.swap.max", "0".into()),
            ]
        } else {
            // memsw after the memory limit (it may not be below it): no escape into swap.
            vec![
                ("memory.limit_in_bytes", m.0.to_string()),
                ("memory.memsw.limit_in_bytes", m.0.to_string()),
            ]
        };
        add(ResourceDimension::MemoryBytes, "memory", writes);
    }
    if let Some(n) = r.pids {
        add(
            ResourceDimension::Pids,
            "pids",
            vec![("pids.max", n.to_string())],
        );
    }
    if let Some(c) = r.cpus {
        let quota = cpu_quota_us(c);
        let writes = if v2("cpu") {
            vec![("cpu.max", format!("{quota} {CPU_PERIOD_US}"))]
        } else {
            vec![
                ("cpu.cfs_quota_us", quota.to_string()),
                ("cpu.cfs_period_us", CPU_PERIOD_US.to_string()),
            ]
        };
        add(ResourceDimension::Cpus, "cpu", writes);
    }
    if let Some(bps) = r.io_bps {
        plan_io(&mut plan, bps.0, facts, is_root, io);
    }
    plan
}

fn plan_io(plan: &mut CgroupPlan, bps: u64, facts: &CgroupFacts, is_root: bool, io: &IoDevices) {
    let dim = ResourceDimension::IoBytesPerSec;
    let missing = || io.unresolved.join("; ");
    if io.devices.is_empty() {
        plan.not_planned.push((
            dim,
            format!(
                "no block device to throttle: {}; disk bandwidth is not limited",
                missing()
            ),
        ));
        return;
    }
    let (controller, writes) = match io_source(facts, is_root) {
        Some(CgroupVersion::V2) => (
            "io",
            io.devices
                .iter()
                .map(|(maj, min)| ("io.max", format!("{maj}:{min} rbps={bps} wbps={bps}")))
                .collect(),
        ),
        Some(CgroupVersion::V1) => (
            "blkio",
            io.devices
                .iter()
                .flat_map(|(maj, min)| {
                    [
                        (
                            "blkio.throttle.read_bps_device",
                            format!("{maj}:{min} {bps}"),
                        ),
                        (
                            "blkio.throttle.write_bps_device",
                            format!("{maj}:{min} {bps}"),
                        ),
                    ]
                })
                .collect(),
        ),
        None => {
            let v1_hint = if !is_root && facts.v1_controllers.iter().any(|c| c == "blkio") {
                " (the cgroup v1 blkio controller needs root)"
            } else {
                ""
            };
            plan.not_planned.push((
                dim,
                format!(
                    "no delegated cgroup v2 subtree with the io controller{v1_hint}: run under \
                     `systemd-run --user --scope -p Delegate=yes cofferdam …` to get one; disk \
                     bandwidth is not limited"
                ),
            ));
            return;
        }
    };
    let version = io_source(facts, is_root).unwrap_or(CgroupVersion::V2);
    plan.limits.push(CgroupLimit {
        dimension: dim,
        version,
        controller,
        writes,
    });
    if !io.unresolved.is_empty() {
        plan.not_planned.push((
            dim,
            format!("not throttled, no block device: {}", missing()),
        ));
    }
}

/// The CFS quota for `cpus` CPUs, microseconds per [`CPU_PERIOD_US`] (at least 1 ms, the
/// kernel's minimum).
pub fn cpu_quota_us(cpus: f64) -> u64 {
    // `cpus` is validated positive and finite by the policy; the cast saturates anyway.
    let q = (cpus * CPU_PERIOD_US as f64).round();
    (q as u64).max(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::ByteSize;

    fn facts(v2: &[&str], v1: &[&str]) -> CgroupFacts {
        CgroupFacts {
            v2_mount: Some("/sys/fs/cgroup".into()),
            v2_own_cgroup: Some("/user.slice/x".into()),
            v2_controllers: v2.iter().map(|s| s.to_string()).collect(),
            v2_delegated: !v2.is_empty(),
            v2_delegated_controllers: v2.iter().map(|s| s.to_string()).collect(),
            v1_controllers: v1.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn request() -> ResourceRequest {
        ResourceRequest {
            memory: Some(ByteSize(64 << 20)),
            pids: Some(64),
            cpus: Some(0.5),
            io_bps: Some(ByteSize(1 << 20)),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_sealed_tier_carries_the_default_pids_by_rlimit() {
        assert!(default_pids_by_rlimit(
            EnforcementTier::MountnsPivotRootLandlockSeccomp
        ));
        assert!(!default_pids_by_rlimit(EnforcementTier::LandlockSeccomp));
        assert!(!default_pids_by_rlimit(EnforcementTier::None));
    }

    fn no_disk() -> IoDevices {
        IoDevices {
            devices: vec![],
            unresolved: vec!["the workdir (/w): device 0:45 is not a block device".into()],
        }
    }

    fn disks() -> IoDevices {
        IoDevices {
            devices: vec![(254, 0), (8, 0)],
            unresolved: vec![],
        }
    }

    #[test]
    fn delegated_v2_takes_every_controller_it_has() {
        let host = facts(&["memory", "pids", "cpu", "io"], &[]);
        let p = plan_cgroup(&request(), &host, false, &no_disk());
        assert!(p.limits.iter().all(|l| l.version == CgroupVersion::V2));
        assert_eq!(p.limits.len(), 3);
        let cpu = p.limits.iter().find(|l| l.controller == "cpu").unwrap();
        assert_eq!(cpu.writes, vec![("cpu.max", "50000 100000".to_string())]);
        assert_eq!(p.not_planned.len(), 1, "no block device, no io");
        assert!(p.not_planned[0].1.contains("0:45"), "{:?}", p.not_planned);

        let p = plan_cgroup(&request(), &host, false, &disks());
        assert_eq!(p.limits.len(), 4);
        assert!(p.not_planned.is_empty());
        let io = p.limits.iter().find(|l| l.controller == "io").unwrap();
        assert_eq!(io.dimension, ResourceDimension::IoBytesPerSec);
        assert_eq!(
            io.writes,
            vec![
                ("io.max", "254:0 rbps=1048576 wbps=1048576".to_string()),
                ("io.max", "8:0 rbps=1048576 wbps=1048576".to_string()),
            ]
        );
    }

    #[test]
    fn io_on_v1_is_blkio_throttle_as_root_only_and_partial_devices_are_said() {
        let host = facts(&[], &["blkio"]);
        let one = IoDevices {
            devices: vec![(254, 0)],
            unresolved: vec!["the stage (/s): device 0:50 is not a block device".into()],
        };
        let p = plan_cgroup(&request(), &host, true, &one);
        let io = p.limits.iter().find(|l| l.controller == "blkio").unwrap();
        assert_eq!(io.version, CgroupVersion::V1);
        assert_eq!(
            io.writes,
            vec![
                (
                    "blkio.throttle.read_bps_device",
                    "254:0 1048576".to_string()
                ),
                (
                    "blkio.throttle.write_bps_device",
                    "254:0 1048576".to_string()
                ),
            ]
        );
        let io_gap: Vec<_> = p
            .not_planned
            .iter()
            .filter(|(d, _)| *d == ResourceDimension::IoBytesPerSec)
            .collect();
        assert_eq!(io_gap.len(), 1);
        assert!(io_gap[0].1.contains("0:50"), "{io_gap:?}");

        let user = plan_cgroup(&request(), &host, false, &disks());
        assert!(!user.covers(ResourceDimension::IoBytesPerSec));
        let why = &user
            .not_planned
            .iter()
            .find(|(d, _)| *d == ResourceDimension::IoBytesPerSec)
            .unwrap()
            .1;
        assert!(why.contains("blkio controller needs root"), "{why}");
        assert_eq!(
            io_source(&facts(&["io"], &["blkio"]), true),
            Some(CgroupVersion::V2)
        );
    }

    #[test]
    fn v1_only_as_root_and_the_reason_says_so() {
        let host = facts(&[], &["memory", "pids", "cpu"]);
        let root = plan_cgroup(&request(), &host, true, &no_disk());
        assert_eq!(root.limits.len(), 3);
        assert!(root.limits.iter().all(|l| l.version == CgroupVersion::V1));
        let mem = &root.limits[0];
        assert_eq!(mem.writes[0], ("memory.limit_in_bytes", "67108864".into()));
        let user = plan_cgroup(&request(), &host, false, &no_disk());
        assert!(user.limits.is_empty());
        assert_eq!(user.not_planned.len(), 4);
        assert!(user.not_planned[0].1.contains("needs root"));
        assert!(!user.covers(ResourceDimension::MemoryBytes));
    }

    #[test]
    fn nothing_requested_plans_nothing() {
        let p = plan_cgroup(
            &ResourceRequest::default(),
            &facts(&["memory"], &[]),
            true,
            &disks(),
        );
        assert_eq!(p, CgroupPlan::default());
    }

    #[test]
    fn cpu_quota_has_a_floor() {
        assert_eq!(cpu_quota_us(1.5), 150_000);
        assert_eq!(cpu_quota_us(0.001), 1000);
    }
}
