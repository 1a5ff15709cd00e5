//! Which cgroup mechanism enforces which requested limit (DESIGN.md §7): a delegated cgroup
//! v2 subtree with the controller, else a cgroup v1 hierarchy when running as root, else
//! none (the rlimit fallback and the honest limitation are the caller's). Pure: decided from
//! the request and the probed [`CgroupFacts`]; `cofferdam_sandbox::cgroup` carries it out
//! and reports what it installed.
//!
//! `io_bps` is never planned: `io.max` (and v1 `blkio.throttle.*`) take the block device
//! behind the workdir, which this build does not resolve, so disk bandwidth is a stated
//! limitation. A systemd transient scope with `Delegate=yes` is not requested over D-Bus
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
/// it, else a v1 hierarchy when running as root (never `io`, see the module docs).
pub fn controller_source(facts: &CgroupFacts, is_root: bool, ctrl: &str) -> Option<CgroupVersion> {
    let has = |v: &[String]| v.iter().any(|c| c == ctrl);
    if facts.v2_delegated && has(&facts.v2_delegated_controllers) {
        Some(CgroupVersion::V2)
    } else if is_root && has(&facts.v1_controllers) && ctrl != "io" {
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

/// Plan the run's cgroup for `r` on a host with `facts` (`is_root`: the effective uid is 0).
pub fn plan_cgroup(r: &ResourceRequest, facts: &CgroupFacts, is_root: bool) -> CgroupPlan {
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
    if r.io_bps.is_some() {
        plan.not_planned.push((
            ResourceDimension::IoBytesPerSec,
            "io.max and blkio throttling need the block device behind the workdir, which this \
             build does not resolve: disk bandwidth is not limited"
                .into(),
        ));
    }
    plan
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

    #[test]
    fn delegated_v2_takes_every_controller_it_has() {
        let p = plan_cgroup(
            &request(),
            &facts(&["memory", "pids", "cpu", "io"], &[]),
            false,
        );
        assert!(p.limits.iter().all(|l| l.version == CgroupVersion::V2));
        assert_eq!(p.limits.len(), 3);
        let cpu = p.limits.iter().find(|l| l.controller == "cpu").unwrap();
        assert_eq!(cpu.writes, vec![("cpu.max", "50000 100000".to_string())]);
        assert_eq!(p.not_planned.len(), 1, "io is never planned");
    }

    #[test]
    fn v1_only_as_root_and_the_reason_says_so() {
        let host = facts(&[], &["memory", "pids", "cpu"]);
        let root = plan_cgroup(&request(), &host, true);
        assert_eq!(root.limits.len(), 3);
        assert!(root.limits.iter().all(|l| l.version == CgroupVersion::V1));
        let mem = &root.limits[0];
        assert_eq!(mem.writes[0], ("memory.limit_in_bytes", "67108864".into()));
        let user = plan_cgroup(&request(), &host, false);
        assert!(user.limits.is_empty());
        assert_eq!(user.not_planned.len(), 4);
        assert!(user.not_planned[0].1.contains("needs root"));
        assert!(!user.covers(ResourceDimension::MemoryBytes));
    }

    #[test]
    fn nothing_requested_plans_nothing() {
        let p = plan_cgroup(&ResourceRequest::default(), &facts(&["memory"], &[]), true);
        assert_eq!(p, CgroupPlan::default());
    }

    #[test]
    fn cpu_quota_has_a_floor() {
        assert_eq!(cpu_quota_us(1.5), 150_000);
        assert_eq!(cpu_quota_us(0.001), 1000);
    }
}
