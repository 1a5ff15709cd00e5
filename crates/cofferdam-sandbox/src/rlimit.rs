//! Resource limits: turns an [`RlimitPlan`] into `setrlimit(2)` calls, one observation per
//! limit set.
//!
//! Owns `RLIMIT_DATA`, `RLIMIT_NPROC`, `RLIMIT_CPU`, `RLIMIT_FSIZE`, `RLIMIT_NOFILE`,
//! `RLIMIT_CORE`, `RLIMIT_RTPRIO` and `RLIMIT_NICE` for the calling process (inherited by the workload across fork and exec),
//! and the pure rule that never raises a hard limit. It may not choose the values (the plan
//! does) nor touch cgroups.
//!
//! Each limit is set with soft = hard = the value (`RLIMIT_CPU`: hard one second more, see
//! [`hard_for`]), so the workload cannot raise it again. A value above the current hard
//! limit cannot be set without `CAP_SYS_RESOURCE` and is never attempted: the hard limit is
//! used instead and the observation is `partial`.
//!
//! Notes for readers of the observations: `RLIMIT_NPROC` counts every task (threads too) of
//! the real uid, and the kernel does not enforce it for a process holding
//! `CAP_SYS_RESOURCE` or `CAP_SYS_ADMIN` (the init drops capabilities right after) nor,
//! ever, for the host's root user (kuid 0, `INIT_USER` in `copy_process`): when the real uid
//! maps to host uid 0 (read from `/proc/self/uid_map`, one level), the `RLIMIT_NPROC`
//! observation is `partial` with that reason. `RLIMIT_CPU` delivers `SIGXCPU` at the soft
//! limit, then `SIGKILL` a second later; `RLIMIT_FSIZE` delivers `SIGXFSZ` (`EFBIG` when
//! ignored).

use std::collections::BTreeMap;

use cofferdam_policy::plan::RlimitPlan;
use cofferdam_record::bundle::{
    ControlDimension, ControlMechanism, ControlObservation, ControlStatus,
};
use rustix::process::{Resource, Rlimit};
use serde_json::{Value, json};

/// The limits cofferdam sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `RLIMIT_DATA`, bytes (data segment and private anonymous mappings).
    Data,
    /// `RLIMIT_NPROC`, tasks of the real uid.
    Nproc,
    /// `RLIMIT_CPU`, seconds of CPU time.
    Cpu,
    /// `RLIMIT_FSIZE`, bytes per file written.
    Fsize,
    /// `RLIMIT_NOFILE`, one more than the highest descriptor number.
    Nofile,
    /// `RLIMIT_CORE`, bytes of core dump.
    Core,
    /// `RLIMIT_RTPRIO`, highest real-time priority `sched_setscheduler` may set (0: none).
    Rtprio,
    /// `RLIMIT_NICE`, ceiling of the nice value as `20 - limit` (0: no raise at all).
    Nice,
}

impl Limit {
    /// The kernel's name, e.g. `RLIMIT_NOFILE`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Data => "RLIMIT_DATA",
            Self::Nproc => "RLIMIT_NPROC",
            Self::Cpu => "RLIMIT_CPU",
            Self::Fsize => "RLIMIT_FSIZE",
            Self::Nofile => "RLIMIT_NOFILE",
            Self::Core => "RLIMIT_CORE",
            Self::Rtprio => "RLIMIT_RTPRIO",
            Self::Nice => "RLIMIT_NICE",
        }
    }

    /// The unit of the value.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Data | Self::Fsize | Self::Core => "bytes",
            Self::Nproc => "tasks",
            Self::Cpu => "seconds",
            Self::Nofile => "descriptors",
            Self::Rtprio | Self::Nice => "priority",
        }
    }

    fn resource(self) -> Resource {
        match self {
            Self::Data => Resource::Data,
            Self::Nproc => Resource::Nproc,
            Self::Cpu => Resource::Cpu,
            Self::Fsize => Resource::Fsize,
            Self::Nofile => Resource::Nofile,
            Self::Core => Resource::Core,
            Self::Rtprio => Resource::Rtprio,
            Self::Nice => Resource::Nice,
        }
    }
}

/// The limits a plan asks for, in a fixed order. Pure.
pub fn requests(plan: &RlimitPlan) -> Vec<(Limit, u64)> {
    [
        (Limit::Data, plan.data),
        (Limit::Nproc, plan.nproc),
        (Limit::Cpu, plan.cpu_seconds),
        (Limit::Fsize, plan.fsize),
        (Limit::Nofile, plan.nofile),
        (Limit::Core, plan.core_zero.then_some(0)),
        (Limit::Rtprio, plan.priority_zero.then_some(0)),
        (Limit::Nice, plan.priority_zero.then_some(0)),
    ]
    .into_iter()
    .filter_map(|(l, v)| v.map(|v| (l, v)))
    .collect()
}

/// The value to set for `requested` under the current hard limit (`None`: unlimited), and
/// whether it had to be lowered to that hard limit. Pure.
pub fn clamp(requested: u64, hard: Option<u64>) -> (u64, bool) {
    match hard {
        Some(h) if requested > h => (h, true),
        _ => (requested, false),
    }
}

/// The hard limit to set with soft limit `value`: the same, except for `RLIMIT_CPU`, whose
/// hard limit is one second more (when the current hard limit allows) so the kernel sends
/// SIGXCPU at the soft limit first: the run ends recognisably as `limit cpu_time_ms`
/// rather than by an anonymous SIGKILL, which still follows a second later. Pure.
pub fn hard_for(limit: Limit, value: u64, current_hard: Option<u64>) -> u64 {
    match limit {
        Limit::Cpu => {
            let up = value.saturating_add(1);
            if current_hard.is_none_or(|h| up <= h) {
                up
            } else {
                value
            }
        }
        _ => value,
    }
}

/// Whether `ruid` maps to uid 0 of the parent user namespace according to `uid_map` (the
/// text of `/proc/self/uid_map`: `inside outside count` lines). Pure.
pub fn maps_to_root(uid_map: &str, ruid: u32) -> bool {
    uid_map.lines().any(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        match f[..] {
            [inside, outside, count] => {
                let r = u64::from(ruid);
                r >= inside && r - inside < count && outside + (r - inside) == 0
            }
            _ => false,
        }
    })
}

/// Whether the kernel exempts this process's real user from `RLIMIT_NPROC` (host root).
fn nproc_exempt() -> bool {
    let ruid = rustix::process::getuid().as_raw();
    match std::fs::read_to_string("/proc/self/uid_map") {
        Ok(map) => maps_to_root(&map, ruid),
        Err(_) => ruid == 0,
    }
}

fn limit_value(v: Option<u64>) -> Value {
    v.map_or_else(|| json!("unlimited"), |v| json!(v))
}

/// Set every limit of `plan` (soft = hard but for [`hard_for`]), one observation each, in the order data,
/// nproc, cpu, fsize, nofile, core, rtprio, nice; an empty plan gives no observation.
///
/// Each observation has mechanism `rlimit`, dimension `resources`, details `{"resource":
/// "RLIMIT_…", "unit", "requested", "soft", "hard", "previous_soft", "previous_hard"}` and
/// status `enforced` (read back as set), `partial` (set, but to the lower current hard
/// limit, or `RLIMIT_NPROC` for the host's root user, which the kernel does not enforce;
/// reason says which) or `failed` (`setrlimit` refused, or the read-back differs).
pub fn apply(plan: &RlimitPlan) -> Vec<ControlObservation> {
    requests(plan)
        .into_iter()
        .map(|(limit, value)| apply_one(limit, value))
        .collect()
}

fn apply_one(limit: Limit, requested: u64) -> ControlObservation {
    let before = rustix::process::getrlimit(limit.resource());
    let (value, clamped) = clamp(requested, before.maximum);
    let mut details = BTreeMap::new();
    details.insert("resource".to_owned(), json!(limit.name()));
    details.insert("unit".to_owned(), json!(limit.unit()));
    details.insert("requested".to_owned(), json!(requested));
    details.insert("previous_soft".to_owned(), limit_value(before.current));
    details.insert("previous_hard".to_owned(), limit_value(before.maximum));
    // u64::MAX is RLIM_INFINITY on Linux: rustix spells it `None`.
    let v = (value != u64::MAX).then_some(value);
    let hard = hard_for(limit, value, before.maximum);
    let new = Rlimit {
        current: v,
        maximum: (hard != u64::MAX).then_some(hard),
    };
    let (status, reason) = match rustix::process::setrlimit(limit.resource(), new) {
        Err(e) => (
            ControlStatus::Failed,
            Some(format!("setrlimit({}, {value}): {e}", limit.name())),
        ),
        Ok(()) => {
            let after = rustix::process::getrlimit(limit.resource());
            details.insert("soft".to_owned(), limit_value(after.current));
            details.insert("hard".to_owned(), limit_value(after.maximum));
            if after != new {
                (
                    ControlStatus::Failed,
                    Some(format!(
                        "{} reads back as {:?}/{:?}, not {value}",
                        limit.name(),
                        after.current,
                        after.maximum
                    )),
                )
            } else if limit == Limit::Nproc && nproc_exempt() {
                (
                    ControlStatus::Partial,
                    Some(
                        "RLIMIT_NPROC is set but the kernel never enforces it for the host's \
                         root user (the real uid maps to uid 0)"
                            .to_owned(),
                    ),
                )
            } else if clamped {
                (
                    ControlStatus::Partial,
                    Some(format!(
                        "{} of {requested} is above the current hard limit {value}: set to \
                         {value}",
                        limit.name()
                    )),
                )
            } else {
                (ControlStatus::Enforced, None)
            }
        }
    };
    ControlObservation {
        mechanism: ControlMechanism::Rlimit,
        dimension: ControlDimension::Resources,
        status,
        reason,
        details,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_follow_the_plan() {
        assert!(requests(&RlimitPlan::default()).is_empty());
        let plan = RlimitPlan {
            data: Some(1 << 30),
            nproc: None,
            cpu_seconds: Some(5),
            fsize: None,
            nofile: Some(64),
            core_zero: true,
            priority_zero: true,
        };
        assert_eq!(
            requests(&plan),
            [
                (Limit::Data, 1 << 30),
                (Limit::Cpu, 5),
                (Limit::Nofile, 64),
                (Limit::Core, 0),
                (Limit::Rtprio, 0),
                (Limit::Nice, 0),
            ]
        );
    }

    #[test]
    fn clamp_never_raises_the_hard_limit() {
        assert_eq!(clamp(10, None), (10, false));
        assert_eq!(clamp(10, Some(20)), (10, false));
        assert_eq!(clamp(20, Some(20)), (20, false));
        assert_eq!(clamp(30, Some(20)), (20, true));
        assert_eq!(clamp(u64::MAX, Some(0)), (0, true));
    }

    #[test]
    fn uid_map_root_detection() {
        let host = "         0          0 4294967295\n";
        assert!(maps_to_root(host, 0));
        assert!(!maps_to_root(host, 1000));
        let single = "      1000       1000          1\n";
        assert!(!maps_to_root(single, 1000));
        let root_mapped = "         0          0          1\n";
        assert!(maps_to_root(root_mapped, 0));
        let shifted = "         0     100000      65536\n";
        assert!(!maps_to_root(shifted, 0));
        assert!(!maps_to_root("", 0));
    }

    #[test]
    fn only_rlimit_cpu_leaves_a_second_between_soft_and_hard() {
        assert_eq!(hard_for(Limit::Cpu, 5, None), 6);
        assert_eq!(
            hard_for(Limit::Cpu, 5, Some(5)),
            5,
            "never above the current hard"
        );
        assert_eq!(hard_for(Limit::Cpu, u64::MAX, None), u64::MAX);
        assert_eq!(hard_for(Limit::Fsize, 5, None), 5);
    }

    #[test]
    fn names_and_units() {
        assert_eq!(Limit::Nofile.name(), "RLIMIT_NOFILE");
        assert_eq!(Limit::Cpu.unit(), "seconds");
        assert_eq!(Limit::Rtprio.name(), "RLIMIT_RTPRIO");
        assert_eq!(Limit::Nice.unit(), "priority");
    }
}
