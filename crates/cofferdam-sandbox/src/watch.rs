//! The supervisor's watch over a running sandbox: the wall-clock timeout, cancellation
//! (SIGINT, SIGTERM or SIGHUP to cofferdam, `cofferdam kill`), and the stage-size cap, each
//! ending the run the same way: SIGTERM to the workload (through the init, which forwards it
//! to pid 1, which forwards it to the command), a grace period, then the end of the whole
//! tree ([`crate::reaper::END_TREE`] to the init, SIGKILL of what is left: see
//! `Watch::kill`).
//!
//! Driven by the relay loop (`crate::relay`) on the supervisor's thread: the loop asks
//! [`Watch::wake_in`] how long it may sleep and calls [`Watch::tick`] and
//! [`Watch::on_signal`]; no second thread. Owns the kill (pidfds, so a recycled pid is never
//! signalled) and the stage poll ([`allocated_bytes`]); what a stop means for the record is
//! `cofferdam_policy::verdict`'s business.
//!
//! The stage cap is a poll: the stage's allocated bytes are summed every
//! [`STAGE_POLL_INTERVAL`] (less often when a walk takes longer than a tenth of that), so a burst between two polls can overshoot the cap before the
//! workload is stopped (the check at seal is exact, and fails the run as well).

use crate::reaper::END_TREE;
use crate::spawn::Spawned;
use cofferdam_policy::verdict::{Cause, stage_cause};
use rustix::process::{Pid, PidfdFlags, Signal};
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a stopped workload has between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// How often the stage's size is summed when it has a cap.
pub const STAGE_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What the supervisor watches for; all off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchSpec {
    /// The wall-clock timeout, from the start of the init.
    pub timeout: Option<Duration>,
    /// SIGTERM to SIGKILL ([`DEFAULT_GRACE`] when zero).
    pub grace: Duration,
    /// The stage directory and its cap, bytes.
    pub stage_cap: Option<(PathBuf, u64)>,
    /// `cgroup.procs` files of the run's cgroups: the init is placed in each before it
    /// reads its plan (so everything it starts is inside), and at the kill every process
    /// still listed there is killed too.
    pub cgroup_procs: Vec<PathBuf>,
}

/// The watch's state during one run.
#[derive(Debug)]
pub struct Watch {
    spec: WatchSpec,
    started: Instant,
    stop: Option<Cause>,
    kill_at: Option<Instant>,
    killed: bool,
    next_poll: Option<Instant>,
    warnings: Vec<String>,
}

impl Watch {
    /// Start watching now.
    pub fn new(spec: WatchSpec) -> Watch {
        let now = Instant::now();
        let next_poll = spec.stage_cap.as_ref().map(|_| now + STAGE_POLL_INTERVAL);
        Watch {
            spec,
            started: now,
            stop: None,
            kill_at: None,
            killed: false,
            next_poll,
            warnings: Vec::new(),
        }
    }

    /// Whether the watch needs the loop to wake up on its own (a timeout or a poll).
    pub fn active(&self) -> bool {
        self.spec.timeout.is_some() || self.spec.stage_cap.is_some() || self.kill_at.is_some()
    }

    /// Why the supervisor stopped the run, if it did.
    pub fn stop(&self) -> Option<&Cause> {
        self.stop.as_ref()
    }

    /// Why the run was stopped and the problems met while stopping (a kill that failed).
    /// Called once the init has ended: every process still in the run's cgroups is killed
    /// first. One can be there although the init ends its tree: the command runs as the
    /// caller's user and can SIGKILL its init, whose orphans then go to the host's init.
    ///
    /// Without a cgroup, such orphans reach the supervisor instead, when it is a child
    /// subreaper (the copy tiers, [`become_subreaper`]): every child of this process but the
    /// init (`init_pid`) is one of them, and is killed and reaped here.
    pub fn into_parts(mut self, init_pid: u32) -> (Option<Cause>, Vec<String>) {
        let orphans = sweep_orphans(init_pid);
        if orphans > 0 {
            self.warnings.push(format!(
                "{orphans} process(es) of the run outlived its init (killed by the workload?) \
                 and were killed by cofferdam, their subreaper"
            ));
        }
        // Not counted: the init itself, which may still be exiting (the supervisor's child).
        let me = std::process::id();
        let left: usize = self
            .spec
            .cgroup_procs
            .iter()
            .flat_map(|procs| pids_in(procs))
            .filter(|&pid| parent_of(pid) != Some(me))
            .count();
        if left > 0 {
            sweep_cgroups(&self.spec.cgroup_procs);
            self.warnings.push(format!(
                "{left} process(es) of the run outlived its init (killed by the workload?) \
                 and were killed through the run's cgroup"
            ));
        }
        (self.stop, self.warnings)
    }

    fn grace(&self) -> Duration {
        if self.spec.grace.is_zero() {
            DEFAULT_GRACE
        } else {
            self.spec.grace
        }
    }

    /// How long the loop may sleep before the next thing the watch must do.
    pub fn wake_in(&self, now: Instant) -> Option<Duration> {
        let deadline = match (&self.stop, self.spec.timeout) {
            (None, Some(t)) => Some(self.started + t),
            _ => None,
        };
        [
            deadline,
            self.kill_at.filter(|_| !self.killed),
            self.next_poll,
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|t| t.saturating_duration_since(now))
    }

    /// Act on the clock: the timeout, the end of the grace period, the stage poll.
    pub fn tick(&mut self, now: Instant, init: &mut Spawned) {
        if self.stop.is_none()
            && let Some(t) = self.spec.timeout
            && now >= self.started + t
        {
            let limit_ms = u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
            self.begin(Cause::Timeout { limit_ms }, init);
        }
        if let Some(at) = self.next_poll
            && now >= at
        {
            self.next_poll = Some(now + STAGE_POLL_INTERVAL);
            if self.stop.is_none()
                && let Some((dir, cap)) = &self.spec.stage_cap
            {
                let walk = Instant::now();
                let bytes = allocated_bytes(dir);
                // A large stage makes the walk slow: poll less often rather than spend
                // more than a tenth of the supervisor's time on it (the relay waits).
                let spent = walk.elapsed().saturating_mul(10);
                self.next_poll = Some(Instant::now() + STAGE_POLL_INTERVAL.max(spent));
                if bytes > *cap {
                    let cause = stage_cause(bytes, *cap);
                    self.begin(cause, init);
                }
            }
        }
        if let Some(at) = self.kill_at
            && now >= at
            && !self.killed
        {
            self.kill(init);
        }
    }

    /// cofferdam received `sig` (SIGINT, SIGTERM, SIGHUP): the first one cancels the run
    /// (SIGTERM to the workload, then the grace period), a second one kills it at once.
    pub fn on_signal(&mut self, sig: i32, init: &mut Spawned) {
        if self.stop.is_some() {
            self.kill(init);
        } else {
            self.begin(Cause::Cancelled { signal: sig }, init);
        }
    }

    /// Stop the run for `cause`: SIGTERM to the init (forwarded down to the command), then
    /// SIGKILL when the grace period is over.
    fn begin(&mut self, cause: Cause, init: &mut Spawned) {
        self.stop = Some(cause);
        self.kill_at = Some(Instant::now() + self.grace());
        if let Ok(None) = init.try_wait()
            && let Some(pid) = i32::try_from(init.id()).ok().and_then(Pid::from_raw)
        {
            // The init is our unreaped child (try_wait just said so): its pid is its own.
            let _ = rustix::process::kill_process(pid, Signal::TERM);
        }
    }

    /// End the sandbox: the init's whole tree, the init, then whatever is left in the run's
    /// cgroups.
    ///
    /// The init is sent [`END_TREE`]: on the tiers without a pid namespace its handler
    /// kills and reaps every descendant (orphans reparent to it, a child subreaper) and
    /// exits; on the sealed tier the signal's default action ends the init, and pid 1 and
    /// its namespace die with it. Meanwhile each round SIGKILLs the init's children (one
    /// listing, an O(1) parentage check per pid); the rounds end when the init has exited
    /// or after [`KILL_WAIT`], and only then is the init SIGKILLed (killing it first would
    /// hand its orphans to the host's init). Last, every process still in a run's cgroup
    /// (one that left the init's tree, or outlived an init killed early) is killed: with
    /// `cgroup.kill` on cgroup v2, else by listing `cgroup.procs` round after round.
    fn kill(&mut self, init: &mut Spawned) {
        self.killed = true;
        let deadline = Instant::now() + KILL_WAIT;
        if let Ok(None) = init.try_wait()
            && let Ok(pid) = libc::pid_t::try_from(init.id())
        {
            // Our own unreaped child (try_wait just said so): the pid is still its.
            if let (Some(pid), Some(sig)) = (
                rustix::process::Pid::from_raw(pid),
                rustix::process::Signal::from_named_raw(END_TREE),
            ) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
        let mut failed = None;
        while matches!(init.try_wait(), Ok(None)) && Instant::now() < deadline {
            let parent = init.id();
            for pid in children(parent) {
                if let Err(e) = kill_if(pid, || parent_of(pid) == Some(parent)) {
                    failed = Some(format!("cannot kill the sandbox's process {pid}: {e}"));
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.warnings.extend(failed);
        // `Spawned::kill` does nothing once the child is reaped.
        let _ = init.kill();
        sweep_cgroups(&self.spec.cgroup_procs);
    }
}

/// Kill every process in the run's cgroups: `cgroup.kill` on v2, else `cgroup.procs` listed
/// and killed round after round until empty (bounded).
fn sweep_cgroups(procs_files: &[PathBuf]) {
    for procs in procs_files {
        if cgroup_kill(procs) {
            continue;
        }
        for _ in 0..CGROUP_ROUNDS {
            if !kill_cgroup_members(procs) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Make this process (the supervisor) a child subreaper, so that a process the command
/// detached is handed to it, not to the host's init, when the command kills the init (on the
/// tiers without a pid namespace it runs as the caller's user and can): [`Watch::into_parts`]
/// then ends it. Only for those tiers: with a pid namespace nothing can leave.
pub fn become_subreaper() -> std::io::Result<()> {
    // Any pid sets the flag (the kernel reads it as a boolean).
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(Into::into)
}

/// Kill and reap every child of this process but `init_pid` (orphans of the run handed to
/// the supervisor as their subreaper), round after round until none is left or the bound
/// is reached; how many were killed. A child not yet reaped keeps its pid, so none can be a
/// recycled one; each is reaped by its own pid, never the init.
fn sweep_orphans(init_pid: u32) -> usize {
    let mut killed = 0;
    let deadline = Instant::now() + KILL_WAIT;
    loop {
        let orphans: Vec<u32> = own_children()
            .into_iter()
            .filter(|&p| p != init_pid)
            .collect();
        if orphans.is_empty() || Instant::now() > deadline {
            return killed;
        }
        for &pid in &orphans {
            let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
                continue;
            };
            if rustix::process::kill_process(p, Signal::KILL).is_ok() {
                killed += 1;
            }
        }
        for &pid in &orphans {
            if let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
                let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty());
            }
        }
    }
}

/// The children of every thread of this process.
fn own_children() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir(format!("/proc/{me}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// How many times [`Watch::kill`] lists a v1 cgroup's processes to kill them.
const CGROUP_ROUNDS: usize = 200;

/// How long [`Watch::kill`] lets the init end its tree before SIGKILLing it.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// The children of `pid` (`/proc/PID/task/PID/children`); empty when unreadable.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The parent of `pid` (field 4 of `/proc/PID/stat`, after the command name, which may
/// hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Kill every process in the cgroup of `procs` at once with its `cgroup.kill` (cgroup v2,
/// Linux 5.14+); `false` when there is no such file (v1, older kernels).
fn cgroup_kill(procs: &Path) -> bool {
    procs
        .parent()
        .is_some_and(|dir| std::fs::write(dir.join("cgroup.kill"), "1").is_ok())
}

/// SIGKILL each process listed in a `cgroup.procs` file (one listing); `false` when none
/// is listed. A pid is killed only when, pinned by its pidfd, `/proc/PID/cgroup` still
/// names the run's cgroup, whose directory name is unique to the run.
fn kill_cgroup_members(procs: &Path) -> bool {
    let Some(name) = procs
        .parent()
        .and_then(Path::file_name)
        .map(|n| format!("/{}", n.to_string_lossy()))
    else {
        return false;
    };
    let pids = pids_in(procs);
    for &pid in &pids {
        let _ = kill_if(pid, || {
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| {
                c.lines()
                    .any(|l| l.ends_with(&name) || l.contains(&format!("{name}/")))
            })
        });
    }
    !pids.is_empty()
}

/// The pids listed in a `cgroup.procs` file.
fn pids_in(procs: &Path) -> Vec<u32> {
    std::fs::read_to_string(procs)
        .map(|s| s.lines().filter_map(|p| p.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// SIGKILL `pid` through a pidfd, only when `still_ours` holds after the pidfd is open: the
/// pidfd pins the process, so a pid recycled between the listing and the open is caught by
/// the second listing and never signalled.
fn kill_if(pid: u32, still_ours: impl FnOnce() -> bool) -> rustix::io::Result<()> {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Ok(());
    };
    let fd = match rustix::process::pidfd_open(p, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Ok(()),
        Err(e) => return Err(e),
    };
    if !still_ours() {
        return Ok(());
    }
    match rustix::process::pidfd_send_signal(&fd, Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The bytes allocated to the files under `dir` (`st_blocks` × 512, hard links once),
/// without following symlinks. Entries that vanish or cannot be read are skipped: a
/// directory the workload made unreadable is not counted (see the README's limits).
pub fn allocated_bytes(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut seen = HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(md) = entry.metadata() else { continue };
            if md.nlink() > 1 && !md.is_dir() && !seen.insert((md.dev(), md.ino())) {
                continue;
            }
            total = total.saturating_add(md.blocks().saturating_mul(512));
            if md.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_bytes_counts_files_below_and_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/f"), vec![1u8; 256 * 1024]).unwrap();
        std::fs::hard_link(dir.path().join("a/f"), dir.path().join("g")).unwrap();
        let n = allocated_bytes(dir.path());
        assert!(n >= 256 * 1024, "{n}");
        assert!(n < 2 * 256 * 1024, "a hard link counted twice: {n}");
    }

    #[test]
    fn the_watch_sleeps_until_its_deadline_and_not_without_one() {
        let w = Watch::new(WatchSpec::default());
        assert!(!w.active());
        assert_eq!(w.wake_in(Instant::now()), None);
        let w = Watch::new(WatchSpec {
            timeout: Some(Duration::from_secs(60)),
            ..Default::default()
        });
        assert!(w.active());
        let left = w.wake_in(Instant::now()).unwrap();
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(50));
    }
}
