//! Running a batch's tasks: at most N at once, each a `cofferdam run` child of this same
//! binary, in its own process group, with stdin from /dev/null, its JSON summary (`--json`
//! keeps stdout for it) and its stderr in files of the batch's folder, and the command's
//! output saved in its job (`--capture`). Ctrl-C, SIGTERM or SIGHUP to the batch cancel it:
//! no task starts after, each running child gets SIGTERM (its supervisor cancels the run as
//! Ctrl-C would and writes the records, so the stage stays reviewable; a second signal is
//! passed on too, which kills the workload at once). A task's failure never stops another.
//! If the batch itself dies (even by SIGKILL), each child gets the same SIGTERM from the
//! kernel (`PR_SET_PDEATHSIG`), so no task outlives its batch.
//!
//! Why children and not `lifecycle::run` in threads: a run owns per-process state. It
//! ignores SIGINT/SIGQUIT process-wide while it supervises (`crate::signals`), its relay
//! writes the command's output to descriptors 1 and 2 of the process and may take the
//! terminal (pty, raw mode), its cancel is a signal to the process, and `cmd::kill` finds a
//! run by the supervisor's pid. Threads would share all of that; children each have theirs,
//! and a child that dies takes no other task with it.
//!
//! Owns the scheduling, the children and the cancel; the task file is `batch::spec`'s, the
//! results' rendering `batch::report`'s. `default_jobs` is pure.

use super::report::{FailureKind, TaskResult, failure_of};
use super::spec::{BATCH_LABEL, Place, TASK_LABEL, Task};
use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Memory set aside per concurrent task when choosing the default `-j`.
pub const MEMORY_PER_TASK: u64 = 512 << 20;

/// The default concurrency: one task per CPU, no more than the available memory holds at
/// [`MEMORY_PER_TASK`] each (unknown memory does not limit), at least one.
pub fn default_jobs(cpus: usize, available_memory: Option<u64>) -> usize {
    let by_memory = available_memory.map_or(usize::MAX, |m| {
        usize::try_from(m / MEMORY_PER_TASK).unwrap_or(usize::MAX)
    });
    cpus.min(by_memory).max(1)
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Signals received since the handler was installed (SIGINT, SIGTERM, SIGHUP).
static CANCELS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_cancel(_sig: libc::c_int) {
    // An atomic add is async-signal-safe and touches no errno.
    CANCELS.fetch_add(1, Ordering::SeqCst);
}

/// Counts SIGINT, SIGTERM and SIGHUP into [`CANCELS`] until dropped.
struct CancelOnSignal {
    previous: Vec<cofferdam_sandbox::sigaction::Saved>,
}

impl CancelOnSignal {
    fn new() -> Self {
        let previous = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
            .into_iter()
            .filter_map(|sig| {
                // SAFETY: `on_cancel` only adds to an atomic: async-signal-safe, no
                // allocation, no lock, errno untouched.
                unsafe {
                    cofferdam_sandbox::sigaction::set_handler(
                        sig,
                        on_cancel,
                        cofferdam_sandbox::sigaction::Mask::Empty,
                        true,
                    )
                }
                .ok()
            })
            .collect();
        CancelOnSignal { previous }
    }
}

impl Drop for CancelOnSignal {
    fn drop(&mut self) {
        for old in &self.previous {
            let _ = old.restore();
        }
    }
}

/// What the scheduler needs besides the tasks.
pub struct Batch<'a> {
    /// The batch's id (the `batch` label of every job).
    pub id: &'a str,
    /// Its folder: the children's summaries and logs, the fresh copies.
    pub dir: &'a Path,
    /// Where the fresh copies (`copy_of`) are made: not under the storage root, which a
    /// sandbox cannot see.
    pub copies: &'a Path,
    /// The cofferdam binary the children run.
    pub exe: &'a Path,
    /// At most this many tasks at once.
    pub jobs: usize,
    /// Told each time a task ends: (ended so far, running, total).
    pub on_change: &'a mut dyn FnMut(usize, usize, usize),
}

struct Running {
    index: usize,
    child: Child,
    started: Instant,
    signalled: usize,
}

/// Run every task; the results in task order, and whether the batch was cancelled.
pub fn run(batch: &mut Batch<'_>, tasks: &[Task]) -> (Vec<TaskResult>, bool) {
    let _cancel = CancelOnSignal::new();
    let total = tasks.len();
    let mut results: Vec<Option<TaskResult>> = vec![None; total];
    let mut next = 0;
    let mut running: Vec<Running> = Vec::new();
    let mut ended = 0;
    loop {
        let cancels = CANCELS.load(Ordering::SeqCst);
        if cancels > 0 {
            for r in &mut running {
                // A child signalled once per cancel received: the second one kills.
                while r.signalled < cancels.min(2) {
                    // Our own unreaped child: its pid cannot have been reused.
                    let pid = rustix::process::Pid::from_child(&r.child);
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    r.signalled += 1;
                }
            }
            while next < total {
                results[next] = Some(not_started(&tasks[next]));
                next += 1;
                ended += 1;
            }
        }
        while cancels == 0 && running.len() < batch.jobs && next < total {
            let task = &tasks[next];
            next += 1;
            match start(batch, task) {
                Ok(child) => running.push(Running {
                    index: task.index - 1,
                    child,
                    started: Instant::now(),
                    signalled: 0,
                }),
                Err(message) => {
                    results[task.index - 1] = Some(launch_failed(batch, task, &message));
                    ended += 1;
                }
            }
            (batch.on_change)(ended, running.len(), total);
        }
        let mut i = 0;
        while i < running.len() {
            match running[i].child.try_wait() {
                Ok(None) => i += 1,
                done => {
                    let r = running.swap_remove(i);
                    let code = match done {
                        Ok(Some(status)) => exit_of(status),
                        _ => 1,
                    };
                    let task = &tasks[r.index];
                    results[r.index] = Some(finished(batch, task, code, r.started.elapsed()));
                    ended += 1;
                    (batch.on_change)(ended, running.len(), total);
                }
            }
        }
        if running.is_empty() && next >= total {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancelled = CANCELS.swap(0, Ordering::SeqCst) > 0;
    let out = results
        .into_iter()
        .zip(tasks)
        .map(|(r, t)| r.unwrap_or_else(|| not_started(t)))
        .collect();
    (out, cancelled)
}

/// The exit code a child's status stands for (128 + the signal when killed).
fn exit_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

fn file_of(batch: &Batch<'_>, task: &Task, ext: &str) -> PathBuf {
    batch.dir.join(format!("{}.{ext}", task.index))
}

/// Start `task`'s child: its fresh copy first, when it has `copy_of`.
fn start(batch: &Batch<'_>, task: &Task) -> Result<Child, String> {
    let workdir = match &task.place {
        Place::Workdir(w) => w.clone(),
        Place::CopyOf(src) => fresh_copy(src, &batch.copies.join(task.index.to_string()))?,
    };
    let out = File::create(file_of(batch, task, "json"))
        .map_err(|e| format!("cannot create the task's summary file: {e}"))?;
    let err = File::create(file_of(batch, task, "log"))
        .map_err(|e| format!("cannot create the task's log: {e}"))?;
    let mut cmd = Command::new(batch.exe);
    cmd.args(["--json", "run", "--no-tty", "--capture", "--quiet"])
        .arg(format!("--label={BATCH_LABEL}={}", batch.id))
        .arg(format!("--label={TASK_LABEL}={}", task.index))
        .args(task.labels.iter().map(|l| format!("--label={l}")))
        .args(task.task_id.iter().map(|t| format!("--task-id={t}")))
        .arg("--workdir")
        .arg(&workdir)
        .args(super::spec::run_flags(&task.policy, task.tier))
        .arg("--")
        .args(&task.command)
        .current_dir(&workdir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: the terminal's Ctrl-C reaches the batch alone, which
        // cancels every task the same way.
        .process_group(0);
    let batch_pid = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec. It calls prctl(2) and
    // getppid(2) only, both async-signal-safe, and allocates nothing (the error is a raw
    // OS error), so the other threads' locks (the progress bar's) cannot deadlock it.
    unsafe {
        cmd.pre_exec(move || end_with_the_batch(batch_pid));
    }
    cmd.spawn()
        .map_err(|e| format!("cannot start {}: {e}", batch.exe.display()))
}

/// In a task's child between fork and exec: if the batch dies (SIGKILL included) the child
/// gets SIGTERM, which its supervisor takes as a cancel, as from the batch's own cancel: the
/// workload is stopped and the records written (a child killed before it handles signals
/// leaves its job interrupted, which `recover` seals). The batch may already be gone when
/// this runs (the child was then re-parented and no signal would come): checked after.
fn end_with_the_batch(batch_pid: rustix::process::Pid) -> std::io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))?;
    if rustix::process::getppid() != Some(batch_pid) {
        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// A fresh copy of `src` at `dst` (`cp -a`, reflinked where the file system can), its
/// path.
fn fresh_copy(src: &Path, dst: &Path) -> Result<PathBuf, String> {
    if let Some(parent) = dst.parent() {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| format!("cannot create {}: {e}", crate::shown_path(parent)))?;
    }
    if !src.is_dir() {
        return Err(format!(
            "copy_of {}: not a directory; give the folder to copy",
            crate::shown_path(src)
        ));
    }
    let status = Command::new("cp")
        .args(["-a", "--reflink=auto", "--"])
        .arg(src)
        .arg(dst)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cp for copy_of: {e}; install coreutils"))?;
    if !status.success() {
        return Err(format!(
            "cp -a {} {} failed ({status})",
            crate::shown_path(src),
            crate::shown_path(dst)
        ));
    }
    Ok(dst.to_owned())
}

fn not_started(task: &Task) -> TaskResult {
    TaskResult {
        index: task.index,
        task_id: task.task_id.clone(),
        job: None,
        state: "not_started".into(),
        exit_code: None,
        changes: None,
        duration_ms: 0,
        failure: Some(FailureKind::NotStarted),
        log: None,
        bundle: None,
    }
}

fn launch_failed(batch: &Batch<'_>, task: &Task, message: &str) -> TaskResult {
    let log = file_of(batch, task, "log");
    let _ = std::fs::write(&log, format!("cofferdam batch: {message}\n"));
    TaskResult {
        log: Some(log),
        failure: Some(FailureKind::Launch),
        state: "not_started".into(),
        ..not_started(task)
    }
}

/// A child's end: its summary read back (the job, its bundle and changes) and its job's
/// state.
fn finished(batch: &Batch<'_>, task: &Task, code: i32, took: Duration) -> TaskResult {
    let summary: Option<serde_json::Value> = std::fs::read(file_of(batch, task, "json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let field = |k: &str| summary.as_ref().and_then(|s| s.get(k)).cloned();
    let job = field("job").and_then(|v| v.as_str().map(str::to_owned));
    let bundle = field("bundle").and_then(|v| v.as_str().map(PathBuf::from));
    let state = bundle
        .as_ref()
        .and_then(|b| b.parent())
        .and_then(|d| cofferdam_stage::job::Job::open(d).ok())
        .and_then(|j| j.state().ok())
        .and_then(|s| serde_json::to_value(s.state).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "no_job".into());
    TaskResult {
        index: task.index,
        task_id: task.task_id.clone(),
        job,
        state,
        exit_code: Some(code),
        changes: field("changes").and_then(|v| v.as_u64()),
        duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        failure: failure_of(code),
        log: Some(file_of(batch, task, "log")),
        bundle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_concurrency_follows_cpus_and_memory() {
        assert_eq!(default_jobs(8, None), 8);
        assert_eq!(default_jobs(8, Some(64 << 30)), 8);
        assert_eq!(default_jobs(8, Some(3 * MEMORY_PER_TASK + 1)), 3);
        assert_eq!(default_jobs(8, Some(100)), 1);
        assert_eq!(default_jobs(0, None), 1);
    }
}
