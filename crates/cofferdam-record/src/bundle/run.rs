//! `run`: execution identity and outcome (who ran what, how it ended, its output).
//!
//! Owns `BundleRun`, the terminal `RunState`, the typed `RunFailure` with its exit-status
//! mapping (DESIGN.md §7), captured output and result artifact references. It may not
//! observe processes or read clocks: the orchestration passes every value in.

use super::executor::ExecutorIdentity;
use super::resources::ResourceDimension;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `run`: execution outcome and identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BundleRun {
    /// Run identity (`run-<uuid v7>` for cofferdam jobs).
    pub run_id: String,
    /// Parent run identity when supplied (forks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Task identity when an orchestrator supplied one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Attempt identity (cofferdam makes one attempt per run).
    pub attempt_id: String,
    /// Session identity.
    pub session_id: String,
    /// Agent label, e.g. `claude`, or the command's base name.
    pub agent: String,
    /// The exact argument vector that was executed.
    pub command: Vec<String>,
    /// The executor that was selected. Not installation evidence: see
    /// `executor_observations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<ExecutorIdentity>,
    /// How execution ended. Distinct from the stage's `filesystem.state`.
    pub state: RunState,
    /// Execution start, Unix milliseconds.
    pub started_at_unix_ms: u64,
    /// Execution finish, Unix milliseconds.
    pub finished_at_unix_ms: u64,
    /// Execution duration in milliseconds (monotonic, so not always finish minus start).
    pub duration_ms: u64,
    /// The workload's exit status, when it exited (absent when it was killed by a signal or
    /// never started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why execution failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// Execution warnings.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Captured stdout/stderr; `{}` when output went straight to the terminal.
    #[serde(default)]
    pub output: ProcessOutput,
    /// Named numeric metrics, e.g. `setup_ms`, `cpu_user_ms`, `max_rss_bytes`.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// References to result files the executor produced.
    #[serde(default)]
    pub result_artifacts: Vec<ArtifactRef>,
    /// Reference to the trace event stream (`trace.jsonl`) when supplied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_stream_ref: Option<String>,
}

/// How execution ended. A bundle is written once, when the run is over, so every state is
/// terminal: there is no `running` (a live job is described by its `job.json`, not by a
/// bundle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// The workload ran and exited with status 0. No `failure`.
    Completed,
    /// Anything else except a cancellation: non-zero exit, signal, timeout, OOM, a
    /// resource limit, or a setup failure. `failure` says which.
    Failed,
    /// The user cancelled the run (e.g. Ctrl-C). `failure.kind` is `cancelled`.
    Cancelled,
}

impl RunState {
    /// The terminal state that goes with `failure` (`None`: the workload exited 0).
    pub fn from_failure(failure: Option<&RunFailure>) -> Self {
        match failure.map(|f| f.kind) {
            None => Self::Completed,
            Some(FailureKind::Cancelled) => Self::Cancelled,
            Some(_) => Self::Failed,
        }
    }
}

/// The class of an execution failure (DESIGN.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The workload exited with a non-zero status (`exit_code`).
    ProcessExit,
    /// The workload was killed by a signal (`signal`) nobody else is blamed for.
    Signal,
    /// The wall-clock timeout expired and the workload was killed (cofferdam exits 124).
    Timeout,
    /// The kernel's out-of-memory killer ended the workload (`limit` = `memory_bytes`).
    Oom,
    /// Another resource limit ended the workload (`limit` names which, e.g. `cpu_time_ms`).
    Limit,
    /// The user cancelled the run (cofferdam exits 130).
    Cancelled,
    /// The sandbox could not be set up or the command could not be executed (`step` names
    /// the step; cofferdam exits 125, or 126/127 when `execve` failed).
    Setup,
}

/// `run.failure`: a typed execution failure. Only the fields that apply to `kind` are
/// present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunFailure {
    /// What kind of failure this is.
    pub kind: FailureKind,
    /// A one-line human explanation.
    pub message: String,
    /// The workload's exit status (`process_exit`; `setup` with 126/127 for exec failures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The terminating signal number (`signal`, `oom`, `limit`, `timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The resource dimension that was exceeded (`oom`, `limit`, `timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<ResourceDimension>,
    /// The setup step that failed (`setup`), e.g. `userns`, `pivot_root`, `landlock`, `exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

impl RunFailure {
    /// The status `cofferdam run` exits with for this failure (DESIGN.md §7): the workload's
    /// own status for `process_exit`, 128 + signal for deaths by signal, 124 for `timeout`,
    /// 130 for `cancelled`, 125 for `setup` (126/127 when the exec itself failed), and for a
    /// `limit` the workload's non-zero status, else `LIMIT_AFTER_EXIT`.
    pub fn exit_status(&self) -> i32 {
        let by_signal = self.signal.map(|s| 128 + s).or(self.exit_code);
        match self.kind {
            FailureKind::ProcessExit => self.exit_code.unwrap_or(1),
            FailureKind::Signal => by_signal.unwrap_or(1),
            // A limit found only after a clean exit (a stage over its cap at the seal) must
            // not read as success.
            FailureKind::Limit => by_signal
                .filter(|&code| code != 0)
                .unwrap_or(LIMIT_AFTER_EXIT),
            FailureKind::Oom => by_signal.unwrap_or(128 + 9),
            FailureKind::Timeout => 124,
            FailureKind::Cancelled => 130,
            FailureKind::Setup => self
                .exit_code
                .filter(|code| matches!(code, 126 | 127))
                .unwrap_or(125),
        }
    }
}

/// The exit status of a run whose workload exited 0 but which still failed a limit (a
/// stage found over `stage_size` when it was sealed).
pub const LIMIT_AFTER_EXIT: i32 = 123;

/// `run.output`: what was captured of the workload's stdout and stderr. A stream that was
/// not captured (passed through to the terminal) is absent, so the default `{}` means
/// "nothing captured", not "no output".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessOutput {
    /// Captured standard output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<CapturedStream>,
    /// Captured standard error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<CapturedStream>,
}

/// One captured output stream: inline text, a file in the job directory, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CapturedStream {
    /// The kept text (lossy UTF-8), when it is embedded in the bundle. May contain secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The capture file, when the stream was written to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Every byte the stream produced while it was captured, kept or not.
    pub total_bytes: u64,
    /// Whether `text`/`path` hold less than `total_bytes`.
    pub truncated: bool,
}

/// `run.result_artifacts[]`: a local file the executor produced. Contents are never
/// embedded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactRef {
    /// The artifact's role, e.g. `stdout-capture`, `trace`.
    pub kind: String,
    /// Where it is; resolve and retain it separately.
    pub path: PathBuf,
    /// Its size when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(kind: FailureKind) -> RunFailure {
        RunFailure {
            kind,
            message: String::new(),
            exit_code: None,
            signal: None,
            limit: None,
            step: None,
        }
    }

    #[test]
    fn exit_statuses_follow_design_section_7() {
        let exited = RunFailure {
            exit_code: Some(3),
            ..failure(FailureKind::ProcessExit)
        };
        assert_eq!(exited.exit_status(), 3);
        let killed = RunFailure {
            signal: Some(15),
            ..failure(FailureKind::Signal)
        };
        assert_eq!(killed.exit_status(), 143);
        assert_eq!(failure(FailureKind::Timeout).exit_status(), 124);
        let over_cap_after_success = RunFailure {
            exit_code: Some(0),
            ..failure(FailureKind::Limit)
        };
        assert_eq!(over_cap_after_success.exit_status(), LIMIT_AFTER_EXIT);
        let over_cap_after_failure = RunFailure {
            exit_code: Some(2),
            ..failure(FailureKind::Limit)
        };
        assert_eq!(over_cap_after_failure.exit_status(), 2);
        assert_eq!(failure(FailureKind::Cancelled).exit_status(), 130);
        assert_eq!(failure(FailureKind::Setup).exit_status(), 125);
        assert_eq!(failure(FailureKind::Oom).exit_status(), 137);
        let not_found = RunFailure {
            exit_code: Some(127),
            step: Some("exec".into()),
            ..failure(FailureKind::Setup)
        };
        assert_eq!(not_found.exit_status(), 127);
        let odd_setup = RunFailure {
            exit_code: Some(1),
            ..failure(FailureKind::Setup)
        };
        assert_eq!(odd_setup.exit_status(), 125);
    }

    #[test]
    fn state_follows_failure() {
        assert_eq!(RunState::from_failure(None), RunState::Completed);
        assert_eq!(
            RunState::from_failure(Some(&failure(FailureKind::Cancelled))),
            RunState::Cancelled
        );
        assert_eq!(
            RunState::from_failure(Some(&failure(FailureKind::Timeout))),
            RunState::Failed
        );
    }

    #[test]
    fn enums_use_snake_case_wire_names() {
        let json = serde_json::to_string(&failure(FailureKind::ProcessExit)).unwrap();
        assert_eq!(json, r#"{"kind":"process_exit","message":""}"#);
        assert_eq!(
            serde_json::to_string(&RunState::Cancelled).unwrap(),
            r#""cancelled""#
        );
    }
}
