//! Why a run ended, decided from evidence: what the supervisor did (a timeout, a
//! cancellation, a stage-size kill), what the kernel's counters say (cgroup OOM kills,
//! denied forks) and the signal that ended the workload (SIGXFSZ, SIGXCPU under the matching
//! rlimit). Pure: the supervisor gathers the [`Evidence`], this module only judges it. It
//! owns [`Ending`], how the sandbox said the run ended, which `crate::outcome` turns into
//! the bundle.
//!
//! Nothing is guessed: an OOM is claimed only when a cgroup counted an OOM kill, a pids limit
//! only when the cgroup counted a denied fork, a file-size limit only when the workload died
//! of SIGXFSZ with `RLIMIT_FSIZE` installed.

use cofferdam_record::bundle::{FailureKind, ResourceDimension, RunFailure};

/// How the sandbox said the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// A setup step failed before the ready marker: the command never ran.
    SetupFailed {
        /// The step.
        step: String,
        /// The error.
        error: String,
    },
    /// The command could not be executed (126) or found (127).
    ExecFailed {
        /// Why.
        error: String,
        /// 126 or 127.
        code: i32,
    },
    /// The command ran and ended.
    Exited {
        /// Its exit code.
        code: Option<i32>,
        /// The signal that killed it.
        signal: Option<i32>,
    },
    /// The command started, then the sandbox's init ended without reporting the command's
    /// status (on the copy tiers the workload can kill its init, a process of the same
    /// user; a memory limit charged by tmpfs pages can OOM-kill it): `signal` or `code` is
    /// the init's own. Not a setup failure: setup was over when the command started.
    InitLost {
        /// The init's exit code, when it exited.
        code: Option<i32>,
        /// The signal that ended the init, when one did.
        signal: Option<i32>,
    },
    /// The run was stopped or ended by a limit: [`judge`] found the cause.
    Stopped {
        /// Why.
        cause: Cause,
        /// The command's exit code, when it exited.
        code: Option<i32>,
        /// The signal that ended it, when one did.
        signal: Option<i32>,
    },
}

/// The cause the supervisor or the counters blame for the end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The wall-clock timeout expired; the workload was terminated, then killed.
    Timeout {
        /// The timeout, milliseconds.
        limit_ms: u64,
    },
    /// cofferdam was asked to stop (SIGINT, SIGTERM, SIGHUP, `cofferdam kill`).
    Cancelled {
        /// The signal cofferdam received.
        signal: i32,
    },
    /// The cgroup's OOM killer ended a process of the workload.
    Oom {
        /// How many OOM kills the cgroup counted.
        kills: u64,
    },
    /// Another limit ended the workload.
    Limit {
        /// Which.
        dimension: ResourceDimension,
        /// What was observed, for the message.
        detail: String,
    },
}

/// What the supervisor gathered about the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// What the supervisor itself did: timeout, cancellation or a stage-size kill.
    pub intervention: Option<Cause>,
    /// OOM kills counted by the run's memory cgroup (`None`: no memory cgroup).
    pub oom_kills: Option<u64>,
    /// Forks the run's pids cgroup denied (`None`: no pids cgroup).
    pub pids_denied: Option<u64>,
    /// The stage's allocated bytes at seal, with the cap, when it exceeded the cap.
    pub stage_over: Option<(u64, u64)>,
    /// `RLIMIT_FSIZE` was installed.
    pub fsize_limited: bool,
    /// `RLIMIT_CPU` was installed.
    pub cpu_time_limited: bool,
}

/// Every limit the evidence shows was reached, in the order the trace records them (one
/// `limit_hit` event each), whether or not it ended the run.
pub fn limits_hit(ending: &Ending, ev: &Evidence) -> Vec<(ResourceDimension, String)> {
    let mut out = Vec::new();
    match &ev.intervention {
        Some(Cause::Timeout { limit_ms }) => out.push((
            ResourceDimension::TimeoutMs,
            format!("the {limit_ms} ms wall-clock timeout expired: terminated the workload"),
        )),
        Some(Cause::Limit { dimension, detail }) => out.push((*dimension, detail.clone())),
        _ => {}
    }
    if let Some(n @ 1..) = ev.oom_kills {
        out.push((
            ResourceDimension::MemoryBytes,
            format!("the memory cgroup's OOM killer killed {n} process(es)"),
        ));
    }
    if let Some(n @ 1..) = ev.pids_denied {
        out.push((
            ResourceDimension::Pids,
            format!("the pids cgroup refused {n} fork(s)"),
        ));
    }
    if let Some((bytes, cap)) = ev.stage_over
        && !matches!(
            &ev.intervention,
            Some(Cause::Limit {
                dimension: ResourceDimension::StageSizeBytes,
                ..
            })
        )
    {
        out.push((
            ResourceDimension::StageSizeBytes,
            format!("the stage holds {bytes} bytes, over its {cap}-byte cap"),
        ));
    }
    match signal_of(ending) {
        Some(libc_sig::SIGXFSZ) if ev.fsize_limited => out.push((
            ResourceDimension::MaxFileSizeBytes,
            "a write past RLIMIT_FSIZE: the kernel sent SIGXFSZ".into(),
        )),
        Some(libc_sig::SIGXCPU) if ev.cpu_time_limited => out.push((
            ResourceDimension::CpuTimeMs,
            "RLIMIT_CPU exhausted: the kernel sent SIGXCPU".into(),
        )),
        _ => {}
    }
    out
}

/// Signal numbers used here (Linux, every architecture cofferdam runs on).
mod libc_sig {
    pub const SIGXCPU: i32 = 24;
    pub const SIGXFSZ: i32 = 25;
}

fn signal_of(ending: &Ending) -> Option<i32> {
    match ending {
        Ending::Exited { signal, .. }
        | Ending::Stopped { signal, .. }
        | Ending::InitLost { signal, .. } => *signal,
        _ => None,
    }
}

/// Whether the workload ended badly (a signal or a non-zero status, or no status at all).
fn failed(ending: &Ending) -> bool {
    !matches!(
        ending,
        Ending::Exited {
            code: Some(0),
            signal: None
        }
    )
}

/// The ending with its cause: the supervisor's intervention first (it is why the run
/// stopped), then an OOM kill, a denied fork, a signal from an rlimit, and a stage over its
/// cap, each only when the workload did not succeed (except the stage, which is over its cap
/// whatever the status). A setup or exec failure stays as it is.
pub fn judge(ending: Ending, ev: &Evidence) -> Ending {
    let (code, signal) = match &ending {
        Ending::Exited { code, signal } | Ending::InitLost { code, signal } => (*code, *signal),
        Ending::Stopped { .. } | Ending::ExecFailed { .. } => return ending,
        // A setup failure the supervisor caused (killed during setup) is still its cause.
        Ending::SetupFailed { .. } if ev.intervention.is_none() => return ending,
        Ending::SetupFailed { .. } => (None, None),
    };
    let stopped = |cause| Ending::Stopped {
        cause,
        code,
        signal,
    };
    if let Some(cause) = &ev.intervention {
        return stopped(cause.clone());
    }
    if !failed(&ending) {
        return match ev.stage_over {
            Some((bytes, cap)) => stopped(stage_cause(bytes, cap)),
            None => ending,
        };
    }
    if let Some(kills @ 1..) = ev.oom_kills {
        return stopped(Cause::Oom { kills });
    }
    if let Some(n @ 1..) = ev.pids_denied {
        return stopped(Cause::Limit {
            dimension: ResourceDimension::Pids,
            detail: format!("the pids cgroup refused {n} fork(s)"),
        });
    }
    let by_rlimit = match signal {
        Some(libc_sig::SIGXFSZ) if ev.fsize_limited => Some((
            ResourceDimension::MaxFileSizeBytes,
            "a write went past the file-size limit (SIGXFSZ)",
        )),
        Some(libc_sig::SIGXCPU) if ev.cpu_time_limited => Some((
            ResourceDimension::CpuTimeMs,
            "the CPU-time limit ran out (SIGXCPU)",
        )),
        _ => None,
    };
    if let Some((dimension, detail)) = by_rlimit {
        return stopped(Cause::Limit {
            dimension,
            detail: detail.into(),
        });
    }
    match ev.stage_over {
        Some((bytes, cap)) => stopped(stage_cause(bytes, cap)),
        None => ending,
    }
}

/// The stage-size cause.
pub fn stage_cause(bytes: u64, cap: u64) -> Cause {
    Cause::Limit {
        dimension: ResourceDimension::StageSizeBytes,
        detail: format!("the stage grew to {bytes} bytes, over its {cap}-byte cap"),
    }
}

/// The typed `run.failure` for a cause.
pub fn failure_of_cause(cause: &Cause, code: Option<i32>, signal: Option<i32>) -> RunFailure {
    let (kind, limit, message) = match cause {
        Cause::Timeout { limit_ms } => (
            FailureKind::Timeout,
            Some(ResourceDimension::TimeoutMs),
            format!("the {limit_ms} ms wall-clock timeout expired; the workload was stopped"),
        ),
        Cause::Cancelled { signal } => (
            FailureKind::Cancelled,
            None,
            format!("cofferdam received signal {signal}; the workload was stopped"),
        ),
        Cause::Oom { kills } => (
            FailureKind::Oom,
            Some(ResourceDimension::MemoryBytes),
            format!(
                "the memory limit was reached: the cgroup's OOM killer killed {kills} process(es)"
            ),
        ),
        Cause::Limit { dimension, detail } => {
            (FailureKind::Limit, Some(*dimension), detail.clone())
        }
    };
    RunFailure {
        kind,
        message,
        exit_code: code,
        signal,
        limit,
        step: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: Option<i32>, signal: Option<i32>) -> Ending {
        Ending::Exited { code, signal }
    }

    #[test]
    fn the_supervisors_intervention_is_the_cause() {
        let ev = Evidence {
            intervention: Some(Cause::Timeout { limit_ms: 1000 }),
            oom_kills: Some(1),
            ..Default::default()
        };
        let e = judge(exited(None, Some(15)), &ev);
        assert!(matches!(
            e,
            Ending::Stopped {
                cause: Cause::Timeout { limit_ms: 1000 },
                signal: Some(15),
                ..
            }
        ));
        let hits = limits_hit(&exited(None, Some(15)), &ev);
        assert_eq!(hits.len(), 2, "{hits:?}");
    }

    #[test]
    fn a_kill_during_setup_is_still_the_supervisors() {
        let setup = Ending::SetupFailed {
            step: "sandbox init".into(),
            error: "ended".into(),
        };
        assert_eq!(judge(setup.clone(), &Evidence::default()), setup);
        let ev = Evidence {
            intervention: Some(Cause::Cancelled { signal: 2 }),
            ..Default::default()
        };
        assert!(matches!(
            judge(setup, &ev),
            Ending::Stopped {
                cause: Cause::Cancelled { signal: 2 },
                ..
            }
        ));
    }

    #[test]
    fn counters_blame_only_a_failed_workload() {
        let ev = Evidence {
            oom_kills: Some(1),
            pids_denied: Some(3),
            ..Default::default()
        };
        assert_eq!(judge(exited(Some(0), None), &ev), exited(Some(0), None));
        assert!(matches!(
            judge(exited(None, Some(9)), &ev),
            Ending::Stopped {
                cause: Cause::Oom { kills: 1 },
                ..
            }
        ));
        let pids = Evidence {
            pids_denied: Some(3),
            ..Default::default()
        };
        assert!(matches!(
            judge(exited(Some(254), None), &pids),
            Ending::Stopped {
                cause: Cause::Limit {
                    dimension: ResourceDimension::Pids,
                    ..
                },
                ..
            }
        ));
        let none = Evidence {
            oom_kills: Some(0),
            pids_denied: Some(0),
            ..Default::default()
        };
        assert_eq!(judge(exited(None, Some(9)), &none), exited(None, Some(9)));
    }

    #[test]
    fn sigxfsz_is_a_limit_only_under_rlimit_fsize() {
        let with = Evidence {
            fsize_limited: true,
            ..Default::default()
        };
        assert!(matches!(
            judge(exited(None, Some(25)), &with),
            Ending::Stopped {
                cause: Cause::Limit {
                    dimension: ResourceDimension::MaxFileSizeBytes,
                    ..
                },
                ..
            }
        ));
        assert_eq!(
            judge(exited(None, Some(25)), &Evidence::default()),
            exited(None, Some(25))
        );
    }

    #[test]
    fn a_stage_over_its_cap_fails_even_a_successful_run() {
        let ev = Evidence {
            stage_over: Some((10 << 20, 1 << 20)),
            ..Default::default()
        };
        assert!(matches!(
            judge(exited(Some(0), None), &ev),
            Ending::Stopped {
                cause: Cause::Limit {
                    dimension: ResourceDimension::StageSizeBytes,
                    ..
                },
                ..
            }
        ));
        assert_eq!(limits_hit(&exited(Some(0), None), &ev).len(), 1);
    }

    #[test]
    fn an_init_oom_killed_after_the_start_is_an_oom() {
        let ev = Evidence {
            oom_kills: Some(2),
            ..Default::default()
        };
        let lost = Ending::InitLost {
            code: None,
            signal: Some(9),
        };
        assert!(matches!(
            judge(lost.clone(), &ev),
            Ending::Stopped {
                cause: Cause::Oom { kills: 2 },
                signal: Some(9),
                ..
            }
        ));
        assert_eq!(limits_hit(&lost, &ev).len(), 1);
        assert_eq!(judge(lost.clone(), &Evidence::default()), lost);
    }
}
