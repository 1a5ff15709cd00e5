//! The bundle's `resources`: each requested limit, the effective value only when an
//! observation says a mechanism installed it, the mechanisms, and a limitation for every
//! limit that is not enforced or only partly (DESIGN.md §7). Pure over the observations.
//!
//! Observations it reads: `rlimit` (details `resource` = `RLIMIT_*`, `soft`), `cgroup`
//! (details `dimension`, `version`, `file`, `value`), `tmpfs` (`tmp_size_bytes`) and
//! `wall_clock` (details `resource` = `timeout` or `stage_size`, from the supervisor's
//! watch). A `cgroup` observation that is not enforced carries the reason a cgroup does not
//! enforce its dimension, which the limitation repeats.

use crate::policy::Policy;
use cofferdam_record::bundle::{
    ControlMechanism, ControlObservation, ControlStatus, ResourceDimension, ResourceLimits,
    ResourceSummary,
};
use serde_json::Value;

fn enforced(o: &ControlObservation, m: ControlMechanism) -> bool {
    o.mechanism == m && o.status == ControlStatus::Enforced
}

fn detail_str<'a>(o: &'a ControlObservation, key: &str) -> Option<&'a str> {
    o.details.get(key).and_then(Value::as_str)
}

fn dimension(o: &ControlObservation) -> Option<ResourceDimension> {
    serde_json::from_value(o.details.get("dimension")?.clone()).ok()
}

/// The soft value of the enforced rlimit `name`.
fn rlimit(controls: &[ControlObservation], name: &str) -> Option<u64> {
    controls
        .iter()
        .filter(|o| {
            enforced(o, ControlMechanism::Rlimit) && detail_str(o, "resource") == Some(name)
        })
        .find_map(|o| o.details.get("soft").and_then(Value::as_u64))
}

/// The devices of the enforced io cgroup observation (`details.devices`), for the
/// mechanism line.
fn io_devices(controls: &[ControlObservation]) -> String {
    cgroup(controls, ResourceDimension::IoBytesPerSec)
        .and_then(|o| o.details.get("devices"))
        .and_then(Value::as_array)
        .map(|d| {
            let names: Vec<&str> = d.iter().filter_map(Value::as_str).collect();
            format!("devices {}", names.join(", "))
        })
        .unwrap_or_else(|| "the run's disks".into())
}

/// Why the rlimit `name` is not enforced (its non-enforced observation's reason).
fn rlimit_reason(controls: &[ControlObservation], name: &str) -> Option<String> {
    controls
        .iter()
        .find(|o| {
            o.mechanism == ControlMechanism::Rlimit
                && o.status != ControlStatus::Enforced
                && detail_str(o, "resource") == Some(name)
        })
        .and_then(|o| o.reason.clone())
}

/// The enforced cgroup observation for `dim`.
fn cgroup(controls: &[ControlObservation], dim: ResourceDimension) -> Option<&ControlObservation> {
    controls
        .iter()
        .find(|o| enforced(o, ControlMechanism::Cgroup) && dimension(o) == Some(dim))
}

/// Why no cgroup enforces `dim` (from its non-enforced cgroup observation).
fn cgroup_reason(controls: &[ControlObservation], dim: ResourceDimension) -> Option<String> {
    controls
        .iter()
        .find(|o| {
            o.mechanism == ControlMechanism::Cgroup
                && o.status != ControlStatus::Enforced
                && dimension(o) == Some(dim)
        })
        .and_then(|o| o.reason.clone())
}

fn cgroup_name(o: &ControlObservation) -> String {
    format!(
        "cgroup v{} {}",
        o.details
            .get("version")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        detail_str(o, "file").unwrap_or("?")
    )
}

/// The supervisor's watch observation for `resource` (`timeout`, `stage_size`).
fn watch<'a>(controls: &'a [ControlObservation], resource: &str) -> Option<&'a ControlObservation> {
    controls.iter().find(|o| {
        o.mechanism == ControlMechanism::WallClock
            && matches!(o.status, ControlStatus::Enforced | ControlStatus::Partial)
            && detail_str(o, "resource") == Some(resource)
    })
}

/// A limit only an rlimit enforces: name, requested, rlimit, effective slot, unit scale.
type RlimitRow<'a> = (&'a str, Option<u64>, &'a str, &'a mut Option<u64>, u64);

/// Requested, effective, mechanisms and limitations for `policy`'s request.
pub fn summarize(policy: &Policy, controls: &[ControlObservation]) -> ResourceSummary {
    let r = &policy.resources;
    let requested = ResourceLimits {
        memory_bytes: r.memory.map(|s| s.0),
        pids: r.pids,
        cpus: r.cpus,
        timeout_ms: r.timeout.map(|t| t.as_millis_u64()),
        cpu_time_ms: r.cpu_time.map(|t| t.as_millis_u64()),
        max_file_size_bytes: r.max_file_size.map(|s| s.0),
        open_files: r.open_files,
        io_bytes_per_sec: r.io_bps.map(|s| s.0),
        tmp_size_bytes: r.tmp_size.map(|s| s.0),
        stage_size_bytes: r.stage_size.map(|s| s.0),
    };
    let mut effective = ResourceLimits::default();
    let mut mechanisms = Vec::new();
    let mut limitations = Vec::new();
    let no_cgroup = |dim| {
        cgroup_reason(controls, dim).map_or_else(String::new, |r| format!(" (no cgroup: {r})"))
    };

    // memory
    if let Some(want) = requested.memory_bytes {
        if let Some(o) = cgroup(controls, ResourceDimension::MemoryBytes) {
            effective.memory_bytes = Some(want);
            mechanisms.push(format!("memory: {} (the whole run)", cgroup_name(o)));
        } else if let Some(v) = rlimit(controls, "RLIMIT_DATA") {
            effective.memory_bytes = Some(v);
            mechanisms.push("memory: RLIMIT_DATA".into());
            limitations.push(format!(
                "memory is limited per process by RLIMIT_DATA only (data segment and private \
                 mappings): several processes together, and files written to the private tmpfs \
                 (/tmp, HOME, /dev/shm), can exceed it, and an allocation past it fails \
                 instead of ending the run as `oom`{}",
                no_cgroup(ResourceDimension::MemoryBytes)
            ));
        } else {
            limitations.push(format!(
                "memory was requested but nothing enforces it here{}",
                no_cgroup(ResourceDimension::MemoryBytes)
            ));
        }
    }
    // pids
    if let Some(want) = requested.pids {
        let default = if r.is_default(ResourceDimension::Pids) {
            " (cofferdam's default for every run; `--pids N` changes it, `--pids none` removes it)"
        } else {
            ""
        };
        if let Some(o) = cgroup(controls, ResourceDimension::Pids) {
            effective.pids = Some(want);
            mechanisms.push(format!("pids: {} (the whole run){default}", cgroup_name(o)));
        } else if let Some(v) = rlimit(controls, "RLIMIT_NPROC") {
            effective.pids = Some(v);
            mechanisms.push(format!("pids: RLIMIT_NPROC{default}"));
            limitations.push(format!(
                "pids is limited by RLIMIT_NPROC, which counts every task of the user in the \
                 run's user namespace{}",
                no_cgroup(ResourceDimension::Pids)
            ));
        } else {
            let why = rlimit_reason(controls, "RLIMIT_NPROC")
                .unwrap_or_else(|| "RLIMIT_NPROC does not bind the host's root user".to_owned());
            limitations.push(format!(
                "pids {want}{default} is not enforced here ({why}){}",
                no_cgroup(ResourceDimension::Pids)
            ));
        }
    }
    // cpus
    if let Some(want) = requested.cpus {
        if let Some(o) = cgroup(controls, ResourceDimension::Cpus) {
            effective.cpus = Some(want);
            mechanisms.push(format!("cpus: {}", cgroup_name(o)));
        } else {
            limitations.push(format!(
                "cpus was requested but is not enforced: only a cgroup cpu controller can \
                 limit CPU bandwidth{}",
                no_cgroup(ResourceDimension::Cpus)
            ));
        }
    }
    // timeout
    if let Some(want) = requested.timeout_ms {
        if watch(controls, "timeout").is_some_and(|o| o.status == ControlStatus::Enforced) {
            effective.timeout_ms = Some(want);
            mechanisms
                .push("timeout: wall clock, SIGTERM then SIGKILL of the pid namespace".into());
        } else {
            limitations.push("timeout was requested but the supervisor did not arm it".into());
        }
    }
    // the rlimit-only dimensions
    let rl: [RlimitRow<'_>; 3] = [
        (
            "cpu_time",
            requested.cpu_time_ms,
            "RLIMIT_CPU",
            &mut effective.cpu_time_ms,
            1000,
        ),
        (
            "max_file_size",
            requested.max_file_size_bytes,
            "RLIMIT_FSIZE",
            &mut effective.max_file_size_bytes,
            1,
        ),
        (
            "open_files",
            requested.open_files,
            "RLIMIT_NOFILE",
            &mut effective.open_files,
            1,
        ),
    ];
    for (name, asked, limit, slot, scale) in rl {
        if asked.is_none() {
            continue;
        }
        match rlimit(controls, limit) {
            Some(v) => {
                *slot = Some(v.saturating_mul(scale));
                mechanisms.push(format!("{name}: {limit} (per process)"));
            }
            None => limitations.push(format!(
                "{name} was requested but {limit} was not installed as asked"
            )),
        }
    }
    if let Some(want) = requested.io_bytes_per_sec {
        let dim = ResourceDimension::IoBytesPerSec;
        match cgroup(controls, dim) {
            Some(o) => {
                effective.io_bytes_per_sec = Some(want);
                let devices = io_devices(controls);
                let name = if o.details.get("version").and_then(Value::as_u64) == Some(1) {
                    "cgroup v1 blkio.throttle.{read,write}_bps_device".to_owned()
                } else {
                    cgroup_name(o)
                };
                mechanisms.push(format!("io_bps: {name} ({devices})"));
                if o.details.get("version").and_then(Value::as_u64) == Some(1) {
                    limitations.push(
                        "io_bps on cgroup v1 throttles reads and direct (O_DIRECT) writes: \
                         buffered writes reach the disk by the kernel's writeback, which v1 \
                         does not charge to the run's cgroup"
                            .into(),
                    );
                }
                if let Some(gap) = cgroup_reason(controls, dim) {
                    limitations.push(format!("io_bps: {gap}"));
                }
            }
            None => limitations.push(format!(
                "io_bps was requested but is not enforced{}",
                no_cgroup(dim)
            )),
        }
    }
    if let Some(want) = requested.tmp_size_bytes {
        let tmpfs = controls.iter().any(|o| {
            enforced(o, ControlMechanism::Tmpfs)
                && o.details
                    .get("tmp_size_bytes")
                    .and_then(Value::as_u64)
                    .is_some()
        });
        if tmpfs {
            effective.tmp_size_bytes = Some(want);
            mechanisms.push("tmp_size: tmpfs size= on /tmp".into());
        } else {
            limitations.push("tmp_size was requested but /tmp was not mounted with it".into());
        }
    }
    if let Some(want) = requested.stage_size_bytes {
        match watch(controls, "stage_size") {
            Some(o) => {
                effective.stage_size_bytes = Some(want);
                mechanisms
                    .push("stage_size: supervisor poll of the stage's allocated bytes".into());
                if let Some(reason) = &o.reason {
                    limitations.push(format!("stage_size: {reason}"));
                }
            }
            None => limitations
                .push("stage_size was requested but the supervisor did not watch it".into()),
        }
    }
    if rlimit(controls, "RLIMIT_CORE").is_some() {
        mechanisms.push("core dumps: RLIMIT_CORE=0".into());
    }
    if rlimit(controls, "RLIMIT_RTPRIO") == Some(0) && rlimit(controls, "RLIMIT_NICE") == Some(0) {
        mechanisms.push(
            "priority: RLIMIT_RTPRIO=0, RLIMIT_NICE=0 (no real-time scheduling, no raised \
             priority)"
                .into(),
        );
    }
    ResourceSummary {
        requested,
        effective,
        mechanisms,
        limitations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_record::bundle::ControlDimension;
    use serde_json::json;

    fn all_requested() -> Policy {
        let places = crate::policy::Places {
            cwd: "/w".into(),
            home: "/h".into(),
        };
        let flags = crate::policy::RunFlags {
            memory: Some("64MiB".into()),
            pids: Some("64".into()),
            cpus: Some(1.5),
            timeout: Some("1s".into()),
            cpu_time: Some("2s".into()),
            max_file_size: Some("1MiB".into()),
            open_files: Some(64),
            io_bps: Some("1MiB".into()),
            tmp_size: Some("1MiB".into()),
            stage_size: Some("1MiB".into()),
            ..Default::default()
        };
        crate::policy::resolve_policy(None, &flags, &places).unwrap()
    }

    fn obs(
        m: ControlMechanism,
        status: ControlStatus,
        details: &[(&str, Value)],
    ) -> ControlObservation {
        let mut o = ControlObservation::new(m, ControlDimension::Resources, status);
        for (k, v) in details {
            o.details.insert((*k).into(), v.clone());
        }
        o
    }

    /// Every observation that could back a limit, all enforced.
    fn everything() -> Vec<ControlObservation> {
        let cg = |dim: &str, file: &str| {
            obs(
                ControlMechanism::Cgroup,
                ControlStatus::Enforced,
                &[
                    ("dimension", json!(dim)),
                    ("version", json!(1)),
                    ("file", json!(file)),
                ],
            )
        };
        let rl = |name: &str, soft: u64| {
            obs(
                ControlMechanism::Rlimit,
                ControlStatus::Enforced,
                &[("resource", json!(name)), ("soft", json!(soft))],
            )
        };
        let wc = |resource: &str, status| {
            obs(
                ControlMechanism::WallClock,
                status,
                &[("resource", json!(resource))],
            )
        };
        let mut stage = wc("stage_size", ControlStatus::Partial);
        stage.reason = Some("polled".into());
        vec![
            cg("memory_bytes", "memory.limit_in_bytes"),
            cg("pids", "pids.max"),
            cg("cpus", "cpu.cfs_quota_us"),
            wc("timeout", ControlStatus::Enforced),
            rl("RLIMIT_CPU", 2),
            rl("RLIMIT_FSIZE", 1 << 20),
            rl("RLIMIT_NOFILE", 64),
            obs(
                ControlMechanism::Tmpfs,
                ControlStatus::Enforced,
                &[("tmp_size_bytes", json!(1 << 20))],
            ),
            stage,
        ]
    }

    fn effective_keys(r: &ResourceSummary) -> Vec<String> {
        serde_json::to_value(&r.effective)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    #[test]
    fn with_every_mechanism_every_row_but_io_is_effective() {
        let r = summarize(&all_requested(), &everything());
        assert_eq!(effective_keys(&r).len(), 9, "{:?}", r.effective);
        assert!(r.effective.io_bytes_per_sec.is_none());
        assert_eq!(r.effective.cpu_time_ms, Some(2000));
        assert!(
            r.mechanisms
                .iter()
                .any(|m| m.contains("cgroup v1 pids.max"))
        );
        // io is not implemented; the stage poll's overshoot is a stated limitation.
        assert_eq!(r.limitations.len(), 2, "{:?}", r.limitations);
    }

    #[test]
    fn each_row_is_absent_and_a_limitation_when_its_mechanism_is_taken_away() {
        let all = everything();
        let full = summarize(&all_requested(), &all);
        for i in 0..all.len() {
            let mut fewer = all.clone();
            let gone = fewer.remove(i);
            let r = summarize(&all_requested(), &fewer);
            assert_eq!(
                effective_keys(&r).len(),
                effective_keys(&full).len() - 1,
                "removing {gone:?} left {:?}",
                r.effective
            );
            assert!(r.limitations.len() > full.limitations.len() - 1, "{gone:?}");
        }
        // Taken away by status rather than absence: not enforced is not effective.
        for i in 0..all.len() {
            let mut weaker = all.clone();
            weaker[i].status = ControlStatus::Failed;
            let r = summarize(&all_requested(), &weaker);
            assert_eq!(effective_keys(&r).len(), 8, "{:?}", weaker[i]);
        }
    }

    #[test]
    fn the_default_pids_limit_is_named_as_default_and_its_gap_explained() {
        let p = crate::policy::resolve_policy(
            None,
            &crate::policy::RunFlags::default(),
            &crate::policy::Places {
                cwd: "/w".into(),
                home: "/h".into(),
            },
        )
        .unwrap();
        let cg = everything().remove(1);
        let r = summarize(&p, &[cg]);
        assert_eq!(r.requested.pids, Some(crate::policy::DEFAULT_PIDS));
        assert_eq!(r.effective.pids, Some(crate::policy::DEFAULT_PIDS));
        assert!(
            r.mechanisms[0].contains("pids.max") && r.mechanisms[0].contains("default"),
            "{:?}",
            r.mechanisms
        );
        let mut skipped = obs(
            ControlMechanism::Rlimit,
            ControlStatus::Unavailable,
            &[("resource", json!("RLIMIT_NPROC"))],
        );
        skipped.reason = Some("not applied on this tier".into());
        let r = summarize(&p, &[skipped]);
        assert_eq!(r.effective.pids, None);
        assert!(
            r.limitations[0].contains("default") && r.limitations[0].contains("this tier"),
            "{:?}",
            r.limitations
        );
    }

    #[test]
    fn io_bps_is_effective_only_under_an_enforced_cgroup_and_v1_says_what_it_misses() {
        let p = all_requested();
        let io = |version: u64, status| {
            obs(
                ControlMechanism::Cgroup,
                status,
                &[
                    ("dimension", json!("io_bytes_per_sec")),
                    ("version", json!(version)),
                    ("file", json!("blkio.throttle.read_bps_device")),
                    ("devices", json!(["254:0"])),
                ],
            )
        };
        let r = summarize(&p, &[io(1, ControlStatus::Enforced)]);
        assert_eq!(r.effective.io_bytes_per_sec, Some(1 << 20));
        assert!(
            r.mechanisms
                .iter()
                .any(|m| m.starts_with("io_bps: cgroup v1") && m.contains("254:0")),
            "{:?}",
            r.mechanisms
        );
        assert!(r.limitations.iter().any(|l| l.contains("buffered writes")));
        let r = summarize(&p, &[io(2, ControlStatus::Enforced)]);
        assert!(!r.limitations.iter().any(|l| l.contains("buffered writes")));
        let mut gap = io(1, ControlStatus::Unavailable);
        gap.reason = Some("not throttled, no block device: the stage".into());
        let r = summarize(&p, &[io(1, ControlStatus::Enforced), gap.clone()]);
        assert!(r.limitations.iter().any(|l| l.contains("the stage")));
        let r = summarize(&p, &[gap, io(1, ControlStatus::Failed)]);
        assert_eq!(r.effective.io_bytes_per_sec, None);
        assert!(
            r.limitations
                .iter()
                .any(|l| l.starts_with("io_bps was requested"))
        );
    }

    #[test]
    fn the_priority_line_needs_both_rlimits_at_zero() {
        let rl = |name: &str, soft: u64| {
            obs(
                ControlMechanism::Rlimit,
                ControlStatus::Enforced,
                &[("resource", json!(name)), ("soft", json!(soft))],
            )
        };
        let p = all_requested();
        let line = |c: &[ControlObservation]| {
            summarize(&p, c)
                .mechanisms
                .iter()
                .any(|m| m.starts_with("priority:"))
        };
        assert!(line(&[rl("RLIMIT_RTPRIO", 0), rl("RLIMIT_NICE", 0)]));
        assert!(!line(&[rl("RLIMIT_RTPRIO", 0)]));
        assert!(!line(&[rl("RLIMIT_RTPRIO", 0), rl("RLIMIT_NICE", 5)]));
        let mut failed = rl("RLIMIT_NICE", 0);
        failed.status = ControlStatus::Failed;
        assert!(!line(&[rl("RLIMIT_RTPRIO", 0), failed]));
    }

    #[test]
    fn without_a_cgroup_memory_falls_back_to_rlimit_data_and_says_why() {
        let mut failed = obs(
            ControlMechanism::Cgroup,
            ControlStatus::Unavailable,
            &[("dimension", json!("memory_bytes"))],
        );
        failed.reason = Some("no delegated subtree".into());
        let data = obs(
            ControlMechanism::Rlimit,
            ControlStatus::Enforced,
            &[
                ("resource", json!("RLIMIT_DATA")),
                ("soft", json!(64 << 20)),
            ],
        );
        let r = summarize(&all_requested(), &[failed, data]);
        assert_eq!(r.effective.memory_bytes, Some(64 << 20));
        let memory = r
            .limitations
            .iter()
            .find(|l| l.starts_with("memory"))
            .unwrap();
        assert!(
            memory.contains("RLIMIT_DATA") && memory.contains("no delegated subtree"),
            "{memory}"
        );
    }
}
