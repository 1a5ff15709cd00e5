//! What a batch's tasks came to: each task's failure kind from its run's exit code (the
//! stable codes of `run`), the summary table and the `--json` document. Pure: the
//! scheduler (`batch::schedule`) hands in what it saw.

use serde::Serialize;
use std::fmt::Write as _;

/// How a task did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The command exited non-zero (or was killed by a signal of its own).
    Exit,
    /// The `timeout` policy key ended it (exit 124).
    Timeout,
    /// The batch was cancelled (Ctrl-C, SIGTERM) while it ran (exit 130).
    Cancelled,
    /// The sandbox could not be set up, or the policy refused (exit 125, or 2).
    Setup,
    /// The command could not be executed (exit 126 or 127).
    Exec,
    /// The batch was cancelled before the task started: no job exists.
    NotStarted,
    /// The task's fresh copy (`copy_of`) or its run's process could not be made.
    Launch,
}

/// The failure kind a run's exit code stands for; `None` for success.
pub fn failure_of(exit_code: i32) -> Option<FailureKind> {
    match exit_code {
        0 => None,
        124 => Some(FailureKind::Timeout),
        130 => Some(FailureKind::Cancelled),
        2 | 125 => Some(FailureKind::Setup),
        126 | 127 => Some(FailureKind::Exec),
        _ => Some(FailureKind::Exit),
    }
}

/// One task's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskResult {
    /// The task's 1-based position in the file.
    pub index: usize,
    /// Its task id.
    pub task_id: Option<String>,
    /// Its job's id (`None` when it never started or no job was made).
    pub job: Option<String>,
    /// The job's state word (`staged`, ...), or `not_started`.
    pub state: String,
    /// Its run's exit code (`None` when it never started).
    pub exit_code: Option<i32>,
    /// The staged changes (`None` when unknown).
    pub changes: Option<u64>,
    /// Wall-clock time of its run, milliseconds.
    pub duration_ms: u64,
    /// How it failed, or `None`.
    pub failure: Option<FailureKind>,
    /// Its run's own messages (cofferdam's stderr with the command's).
    pub log: Option<std::path::PathBuf>,
    /// Its Run Bundle.
    pub bundle: Option<std::path::PathBuf>,
}

/// The exit code of the batch: 0 when every task succeeded, 130 when it was cancelled,
/// 1 otherwise.
pub fn exit_code(results: &[TaskResult], cancelled: bool) -> u8 {
    if cancelled {
        130
    } else if results.iter().all(|r| r.failure.is_none()) {
        0
    } else {
        1
    }
}

/// The count of results of each failure kind, successes as `ok`.
pub fn counts(results: &[TaskResult]) -> std::collections::BTreeMap<&'static str, usize> {
    let mut out = std::collections::BTreeMap::new();
    for r in results {
        let word = match r.failure {
            None => "ok",
            Some(FailureKind::Exit) => "exit",
            Some(FailureKind::Timeout) => "timeout",
            Some(FailureKind::Cancelled) => "cancelled",
            Some(FailureKind::Setup) => "setup",
            Some(FailureKind::Exec) => "exec",
            Some(FailureKind::NotStarted) => "not_started",
            Some(FailureKind::Launch) => "launch",
        };
        *out.entry(word).or_insert(0) += 1;
    }
    out
}

/// The summary table: one line per task, then the counts.
pub fn table(results: &[TaskResult]) -> String {
    let mut o = format!(
        "{:>3}  {:<16} {:<12} {:>4} {:>7} {:>8}  {:<11} {}\n",
        "#", "task", "state", "exit", "changes", "time", "failure", "job"
    );
    for r in results {
        let failure = r.failure.map_or("-".to_owned(), |f| {
            serde_json::to_value(f)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        });
        let task = r
            .task_id
            .as_deref()
            .map_or("-".to_owned(), crate::shown_text);
        let _ = writeln!(
            o,
            "{:>3}  {:<16} {:<12} {:>4} {:>7} {:>7.1}s  {:<11} {}",
            r.index,
            task,
            r.state,
            r.exit_code.map_or("-".to_owned(), |c| c.to_string()),
            r.changes.map_or("-".to_owned(), |c| c.to_string()),
            r.duration_ms as f64 / 1000.0,
            failure,
            r.job.as_deref().unwrap_or("-"),
        );
    }
    let counts: Vec<String> = counts(results)
        .into_iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let _ = writeln!(o, "{} task(s): {}", results.len(), counts.join(", "));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(index: usize, exit: Option<i32>) -> TaskResult {
        TaskResult {
            index,
            task_id: Some(format!("t{index}")),
            job: exit.map(|_| format!("j{index}")),
            state: if exit.is_some() {
                "staged"
            } else {
                "not_started"
            }
            .into(),
            exit_code: exit,
            changes: exit.map(|_| 1),
            duration_ms: 1500,
            failure: exit.map_or(Some(FailureKind::NotStarted), failure_of),
            log: None,
            bundle: None,
        }
    }

    #[test]
    fn exit_codes_give_failure_kinds() {
        assert_eq!(failure_of(0), None);
        assert_eq!(failure_of(1), Some(FailureKind::Exit));
        assert_eq!(failure_of(124), Some(FailureKind::Timeout));
        assert_eq!(failure_of(130), Some(FailureKind::Cancelled));
        assert_eq!(failure_of(125), Some(FailureKind::Setup));
        assert_eq!(failure_of(127), Some(FailureKind::Exec));
        assert_eq!(failure_of(137), Some(FailureKind::Exit));
    }

    #[test]
    fn the_batch_exit_code_and_table_tell_the_worst() {
        let ok = [result(1, Some(0)), result(2, Some(0))];
        assert_eq!(exit_code(&ok, false), 0);
        let mixed = [result(1, Some(0)), result(2, Some(124)), result(3, None)];
        assert_eq!(exit_code(&mixed, false), 1);
        assert_eq!(exit_code(&mixed, true), 130);
        let t = table(&mixed);
        assert!(t.contains("timeout") && t.contains("not_started"), "{t}");
        assert!(
            t.ends_with("3 task(s): 1 not_started, 1 ok, 1 timeout\n"),
            "{t}"
        );
    }
}
