//! The run from the go to its judged ending: launch the command under the watch, serve
//! egress, fold what the sandbox reported into controls, trace events and an ending, then
//! settle it (the copy stage's changes, the limits' verdict). Owns the reading of the
//! status stream; the verdict is `cofferdam_policy::verdict`'s (through `super::limits`).

use super::copy::{self, CopyStage};
use super::limits::Limits;
use super::{RunRequest, TraceSink};
use crate::exit::Failure;
use cofferdam_net::proxy::InterceptReport;
use cofferdam_policy::ContainmentDecision;
use cofferdam_policy::outcome::Ending;
use cofferdam_policy::verdict::Cause;
use cofferdam_record::EnforcementTier;
use cofferdam_record::bundle::{ControlObservation, FailureKind};
use cofferdam_record::trace::TraceEventKind;
use cofferdam_sandbox::launch::{
    CAPTURE_LIMIT, CaptureSpec, InitProcess, PendingInit, SealedOutcome,
};
use cofferdam_sandbox::relay::CapturedOutput;
use cofferdam_sandbox::status::StatusMessage;
use cofferdam_stage::job::Job;
use std::os::unix::net::UnixStream;

/// The run once its status stream has ended.
pub(super) struct Ran {
    outcome: SealedOutcome,
    egress: Option<crate::egress::Egress>,
    forwarder: Option<cofferdam_net::forward::Forwarder>,
}

/// Start the egress driver (in `allow` mode), send the go, and supervise the run until
/// its status stream ends: every process of the run is gone then.
pub(super) fn start(
    req: &RunRequest,
    job: &Job,
    net: Option<UnixStream>,
    published: Option<crate::publish::Published>,
    init: PendingInit,
    limits: &Limits,
) -> Result<Ran, Failure> {
    let capture = req.capture.then(|| CaptureSpec {
        dir: job.dir().join("output"),
        limit: CAPTURE_LIMIT,
    });
    let egress = net.map(|ours| crate::egress::start(&req.policy, ours));
    let forwarder = published.map(crate::publish::Published::start);
    let outcome = init
        .start(capture.as_ref(), limits.watch.clone(), |pid| {
            if let Some(e) = &egress {
                e.started(pid);
            }
        })
        .map_err(Failure::setup)?;
    Ok(Ran {
        outcome,
        egress,
        forwarder,
    })
}

/// What the run left for its records.
pub(super) struct Run {
    /// Every control observed, the supervisor's first.
    pub controls: Vec<ControlObservation>,
    /// The bundle's warnings so far.
    pub warnings: Vec<String>,
    /// The init, when it is still to be reaped.
    pub init: Option<InitProcess>,
    /// Whether the records reserve is released already (`store_full_warning`).
    pub reserve_released: bool,
    /// What `--capture` saved.
    pub output: CapturedOutput,
    /// The relay's warnings.
    pub relay_warnings: Vec<String>,
    /// The egress driver's report (in `allow` mode).
    pub egress: Option<InterceptReport>,
    /// The `--publish` forwarder, stopped when the records are written.
    pub forwarder: Option<cofferdam_net::forward::Forwarder>,
    /// What the file watch saw (`run_observation.filesystem`), when one was placed.
    pub files: Option<cofferdam_record::bundle::AccessObservation>,
    /// Why the supervisor stopped the run, if it did.
    stop: Option<Cause>,
}

/// What the status stream said, folded: the sandbox's controls and the trace's events in
/// order, the first ending told, whether the command started, and the unreadable lines.
#[derive(Debug, Default, PartialEq)]
struct Reported {
    controls: Vec<ControlObservation>,
    events: Vec<(u64, TraceEventKind)>,
    ending: Option<Ending>,
    command_started: bool,
    unreadable: Vec<String>,
}

/// Fold the status messages (pure); events are stamped `finished`.
fn fold(messages: Vec<Result<StatusMessage, String>>, started: u64, finished: u64) -> Reported {
    let mut r = Reported::default();
    for m in messages {
        match m {
            Ok(StatusMessage::Control { observation }) => {
                r.events.push((
                    finished,
                    TraceEventKind::ControlInstalled(observation.clone()),
                ));
                r.controls.push(observation);
            }
            Ok(StatusMessage::SetupFailed { step, error }) => {
                r.ending.get_or_insert(Ending::SetupFailed { step, error });
            }
            Ok(StatusMessage::ExecFailed { error, code }) => {
                r.ending.get_or_insert(Ending::ExecFailed { error, code });
            }
            Ok(StatusMessage::Started { pid }) => {
                r.command_started = true;
                r.events.push((
                    finished,
                    TraceEventKind::ProcessStarted {
                        pid: u32::try_from(pid).unwrap_or(0),
                    },
                ));
            }
            Ok(StatusMessage::Exited { code, signal }) => {
                r.events.push((
                    finished,
                    TraceEventKind::ProcessExited {
                        exit_code: code,
                        signal,
                        duration_ms: finished.saturating_sub(started),
                    },
                ));
                r.ending.get_or_insert(Ending::Exited { code, signal });
            }
            Ok(
                StatusMessage::Ready
                | StatusMessage::Stopped { .. }
                | StatusMessage::AwaitFileWatch { .. },
            ) => {}
            Err(line) => r.unreadable.push(line),
        }
    }
    r
}

/// Gather what the run reported: the supervisor's and the sandbox's controls and events
/// to the trace (one write), the egress driver's report, and the ending, reaping the init
/// for it when the status stream told none.
pub(super) fn collect(
    ran: Ran,
    limits: &Limits,
    job: &Job,
    started: u64,
    finished: u64,
    trace: &mut TraceSink,
) -> (Run, Ending) {
    let (store_full, reserve_released) = store_full_warning(job);
    let SealedOutcome {
        messages,
        init,
        output,
        terminal: _,
        warnings: relay_warnings,
        stop,
        files,
    } = ran.outcome;
    let reported = fold(messages, started, finished);
    let mut controls: Vec<ControlObservation> = limits.controls.clone();
    // What the run reported goes to the trace in one write (`TraceLog::append_all`).
    let mut events: Vec<(u64, TraceEventKind)> = controls
        .iter()
        .map(|o| (started, TraceEventKind::ControlInstalled(o.clone())))
        .collect();
    events.extend(reported.events);
    controls.extend(reported.controls);
    let mut warnings: Vec<String> = store_full.into_iter().collect();
    warnings.extend(reported.unreadable);
    let files = match files {
        Some(Ok(tally)) => {
            let (observation, said) = tally.observation(|rel| {
                cofferdam_record::shown::escape_bytes(rel, cofferdam_record::shown::Keep::LINE).0
            });
            warnings.extend(said);
            // What the reader would refuse would cost the whole bundle: left out instead.
            match cofferdam_record::reader::check_observation("filesystem", &observation) {
                Ok(()) => Some(observation),
                Err(e) => {
                    warnings.push(format!(
                        "the run's file accesses are left out of its record: {e}"
                    ));
                    None
                }
            }
        }
        Some(Err(why)) => {
            warnings.push(format!("the run's file accesses were not observed: {why}"));
            None
        }
        None => None,
    };
    trace.append(events, "the run's controls and process events");
    let egress = ran.egress.map(|e| e.finish(&mut controls, &mut trace.log));
    let mut init = Some(init);
    let ending = match reported.ending {
        Some(e) => e,
        None => ending_without_report(init.take(), reported.command_started),
    };
    let run = Run {
        controls,
        warnings,
        init,
        reserve_released,
        output,
        relay_warnings,
        egress,
        forwarder: ran.forwarder,
        files,
        stop,
    };
    (run, ending)
}

/// The ending when the status stream told none: the init's own exit.
fn ending_without_report(init: Option<InitProcess>, command_started: bool) -> Ending {
    let status = init.map(InitProcess::wait);
    match status {
        // The command ran: whatever ended the init (the workload killing it on a copy
        // tier, an OOM kill) is judged like the command's end, never as setup.
        Some(Ok(st)) if command_started => {
            use std::os::unix::process::ExitStatusExt;
            Ending::InitLost {
                code: st.code(),
                signal: st.signal(),
            }
        }
        status => {
            let status = match status {
                Some(Ok(st)) => st.to_string(),
                Some(Err(e)) => e.to_string(),
                None => "unknown".into(),
            };
            Ending::SetupFailed {
                step: "sandbox init".into(),
                error: format!(
                    "the sandbox ended ({status}) without reporting how the command ended"
                ),
            }
        }
    }
}

/// Settle the ending: on the copy tiers move the copy's changes into the stage; let the
/// limits' evidence name the cause (each limit reached goes to the trace), and tell a
/// person an ending the supervisor caused.
#[allow(clippy::too_many_arguments)]
pub(super) fn settle(
    run: &mut Run,
    ending: Ending,
    copy_stage: Option<CopyStage>,
    decision: &ContainmentDecision,
    limits: &Limits,
    job: &Job,
    finished: u64,
    trace: &mut TraceSink,
) -> Result<Ending, Failure> {
    if let Some(stage) = copy_stage {
        if decision.tier == EnforcementTier::None {
            run.warnings.insert(0, copy::ADVISORY_WARNING.to_owned());
        }
        run.warnings.extend(stage.warnings.iter().cloned());
        run.controls.insert(0, stage.observation.clone());
        stage.finish(&job.upper())?;
    }
    let (ending, hits) = limits.conclude(run.stop.take(), ending, &run.controls);
    for (limit, message) in hits {
        let hit = vec![(finished, TraceEventKind::LimitHit { limit, message })];
        trace.append(hit, "a limit hit");
    }
    if let Some(f) = cofferdam_policy::outcome::failure_of(&ending)
        && matches!(
            f.kind,
            FailureKind::Timeout | FailureKind::Cancelled | FailureKind::Oom | FailureKind::Limit
        )
    {
        eprintln!("cofferdam: {}", f.message);
    }
    Ok(ending)
}

/// The command has ended: release the space reserved for its job's records now, unless
/// the job's filesystem has room to spare (then the caller releases it in the background;
/// the second value is whether it is released), and say so when the filesystem was full
/// (the command's writes may have failed).
fn store_full_warning(job: &Job) -> (Option<String>, bool) {
    use cofferdam_stage::reserve;
    let Some(free) = reserve::available(job.dir()) else {
        job.release_reserve();
        return (None, true);
    };
    if reserve::is_roomy(free) {
        // The records fit without it: it goes in the background, while they are written.
        return (None, false);
    }
    job.release_reserve();
    if !reserve::is_full(free) {
        return (None, true);
    }
    let w = format!(
        "the filesystem holding the job ({}) was full when the command ended ({free} bytes \
         free): its writes may have failed with \"No space left on device\"; the stage keeps \
         what was written. Free space there, then review and apply",
        job.dir().display()
    );
    eprintln!("cofferdam: warning: {w}");
    (Some(w), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_record::bundle::{ControlDimension, ControlMechanism, ControlStatus};

    fn control(m: ControlMechanism) -> ControlObservation {
        ControlObservation::new(m, ControlDimension::Process, ControlStatus::Enforced)
    }

    #[test]
    fn the_status_stream_folds_into_controls_events_and_the_first_ending() {
        let messages = vec![
            Ok(StatusMessage::Control {
                observation: control(ControlMechanism::Seccomp),
            }),
            Err("garbled line".to_owned()),
            Ok(StatusMessage::Ready),
            Ok(StatusMessage::Started { pid: 2 }),
            Ok(StatusMessage::Stopped { signal: 20 }),
            Ok(StatusMessage::Exited {
                code: Some(3),
                signal: None,
            }),
            // A later ending never replaces the first one told.
            Ok(StatusMessage::SetupFailed {
                step: "late".into(),
                error: "ignored".into(),
            }),
        ];
        let r = fold(messages, 1_000, 1_500);
        assert_eq!(r.controls, vec![control(ControlMechanism::Seccomp)]);
        assert_eq!(
            r.events,
            vec![
                (
                    1_500,
                    TraceEventKind::ControlInstalled(control(ControlMechanism::Seccomp))
                ),
                (1_500, TraceEventKind::ProcessStarted { pid: 2 }),
                (
                    1_500,
                    TraceEventKind::ProcessExited {
                        exit_code: Some(3),
                        signal: None,
                        duration_ms: 500,
                    }
                ),
            ]
        );
        assert_eq!(
            r.ending,
            Some(Ending::Exited {
                code: Some(3),
                signal: None
            })
        );
        assert!(r.command_started);
        assert_eq!(r.unreadable, vec!["garbled line".to_owned()]);
    }

    #[test]
    fn a_setup_failure_before_the_command_is_the_ending_and_nothing_started() {
        let messages = vec![
            Ok(StatusMessage::SetupFailed {
                step: "mount".into(),
                error: "EPERM".into(),
            }),
            Ok(StatusMessage::ExecFailed {
                error: "not reached".into(),
                code: 127,
            }),
        ];
        let r = fold(messages, 0, 0);
        assert!(matches!(r.ending, Some(Ending::SetupFailed { ref step, .. }) if step == "mount"));
        assert!(!r.command_started);
        assert!(r.events.is_empty() && r.controls.is_empty() && r.unreadable.is_empty());
    }

    #[test]
    fn a_pid_out_of_range_is_recorded_as_zero_never_wrapped() {
        let r = fold(vec![Ok(StatusMessage::Started { pid: -1 })], 0, 0);
        assert_eq!(
            r.events,
            vec![(0, TraceEventKind::ProcessStarted { pid: 0 })]
        );
    }
}
