//! `resources`: requested and effective limits, the mechanisms behind them, and every
//! limitation, stated plainly (DESIGN.md §7).
//!
//! Owns `ResourceSummary`, `ResourceLimits` and the `ResourceDimension` names shared with
//! `run.failure.limit` and the `limit_hit` trace event. It may not set limits or read
//! cgroups: the sandbox reports, the orchestration fills these values.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `resources`: requested/effective budgets, mechanisms, limitations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceSummary {
    /// What the run asked for (flags and manifest).
    pub requested: ResourceLimits,
    /// What the installed mechanisms actually enforce, as observed. A dimension that was
    /// requested but is absent here was not enforced (see `limitations`).
    pub effective: ResourceLimits,
    /// Installed resource mechanisms, e.g. `cgroup2:memory.max`, `rlimit:RLIMIT_DATA`,
    /// `tmpfs:/tmp`, `wall_clock`.
    #[serde(default)]
    pub mechanisms: Vec<String>,
    /// Requested limits that are not enforced, or enforced only partly, and why.
    #[serde(default)]
    pub limitations: Vec<String>,
}

/// A set of resource limits. Every dimension is optional; an absent one means "no limit".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceLimits {
    /// Memory, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Processes and threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// CPUs (fractional: `1.5` is one and a half CPUs of bandwidth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Wall-clock timeout, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// CPU time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    /// Largest file the workload may write, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_file_size_bytes: Option<u64>,
    /// Open file descriptors per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
    /// Block I/O bandwidth, bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_bytes_per_sec: Option<u64>,
    /// Size of the private `/tmp`, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_size_bytes: Option<u64>,
    /// Size of the stage (upper layer), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_size_bytes: Option<u64>,
}

/// The name of one `ResourceLimits` dimension (same spelling as the field).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ResourceDimension {
    /// `memory_bytes`.
    MemoryBytes,
    /// `pids`.
    Pids,
    /// `cpus`.
    Cpus,
    /// `timeout_ms`.
    TimeoutMs,
    /// `cpu_time_ms`.
    CpuTimeMs,
    /// `max_file_size_bytes`.
    MaxFileSizeBytes,
    /// `open_files`.
    OpenFiles,
    /// `io_bytes_per_sec`.
    IoBytesPerSec,
    /// `tmp_size_bytes`.
    TmpSizeBytes,
    /// `stage_size_bytes`.
    StageSizeBytes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimension_names_match_limit_fields() {
        let all = ResourceLimits {
            memory_bytes: Some(1),
            pids: Some(1),
            cpus: Some(1.0),
            timeout_ms: Some(1),
            cpu_time_ms: Some(1),
            max_file_size_bytes: Some(1),
            open_files: Some(1),
            io_bytes_per_sec: Some(1),
            tmp_size_bytes: Some(1),
            stage_size_bytes: Some(1),
        };
        let fields: Vec<String> = serde_json::to_value(&all)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let dims = [
            ResourceDimension::MemoryBytes,
            ResourceDimension::Pids,
            ResourceDimension::Cpus,
            ResourceDimension::TimeoutMs,
            ResourceDimension::CpuTimeMs,
            ResourceDimension::MaxFileSizeBytes,
            ResourceDimension::OpenFiles,
            ResourceDimension::IoBytesPerSec,
            ResourceDimension::TmpSizeBytes,
            ResourceDimension::StageSizeBytes,
        ];
        let mut names: Vec<String> = dims
            .iter()
            .map(|d| {
                serde_json::to_value(d)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        names.sort();
        assert_eq!(names, fields);
    }

    #[test]
    fn no_limits_is_an_empty_object() {
        assert_eq!(
            serde_json::to_string(&ResourceLimits::default()).unwrap(),
            "{}"
        );
    }
}
