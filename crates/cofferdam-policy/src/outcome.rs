//! From what a run reported to its Run Bundle: the typed outcome, the exit code, and the
//! bundle itself, assembled as a pure function of the policy, the plan and the observations
//! the sandbox sent. Nothing here claims a control the sandbox did not report: safety comes
//! from `SafetySummary::derive` over the observations, and a requested limit is `effective`
//! only when an enforced observation backs it.

use crate::plan::SandboxPlan;
use crate::policy::{INJECTED_ENV, Policy};
use crate::tier::ContainmentDecision;
use cofferdam_record::SCHEMA_VERSION;
use cofferdam_record::bundle::{
    AgentCtlSnapshot, BundleArtifact, BundleRun, ChangeEntry, ControlObservation,
    EnvironmentProjection, ExecutorIdentity, ExecutorObservations, ExecutorPlan, FailureKind,
    FileAccessPolicy, FilesystemSummary, MountGrant, NetworkSummary, OverlayState, ResourceSummary,
    RunBundle, RunFailure, RunState, SafetySummary,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How the sandbox said the run ended (defined with its causes in `crate::verdict`).
pub use crate::verdict::Ending;

/// The typed failure of an ending, if it is one.
pub fn failure_of(ending: &Ending) -> Option<RunFailure> {
    let f = |kind, message: String| RunFailure {
        kind,
        message,
        exit_code: None,
        signal: None,
        limit: None,
        step: None,
    };
    match ending {
        Ending::SetupFailed { step, error } => Some(RunFailure {
            step: Some(step.clone()),
            ..f(
                FailureKind::Setup,
                format!("setup failed before the command started: {error}"),
            )
        }),
        Ending::ExecFailed { error, code } => Some(RunFailure {
            exit_code: Some(*code),
            step: Some("execve".into()),
            ..f(FailureKind::Setup, error.clone())
        }),
        Ending::Exited {
            signal: Some(sig), ..
        } => Some(RunFailure {
            signal: Some(*sig),
            ..f(
                FailureKind::Signal,
                format!("the command was killed by signal {sig}"),
            )
        }),
        Ending::Exited { code: Some(0), .. } => None,
        Ending::Exited { code: Some(c), .. } => Some(RunFailure {
            exit_code: Some(*c),
            ..f(
                FailureKind::ProcessExit,
                format!("the command exited with {c}"),
            )
        }),
        Ending::Exited {
            code: None,
            signal: None,
        } => Some(f(
            FailureKind::Setup,
            "the sandbox ended without reporting the command's status".into(),
        )),
        Ending::InitLost {
            signal: Some(sig), ..
        } => Some(RunFailure {
            signal: Some(*sig),
            ..f(
                FailureKind::Signal,
                format!(
                    "the sandbox's init was killed by signal {sig} after the command started; \
                     the command's own status is unknown"
                ),
            )
        }),
        Ending::InitLost { code, signal: None } => Some(RunFailure {
            exit_code: code.filter(|&c| c != 0),
            ..f(
                FailureKind::ProcessExit,
                format!(
                    "the sandbox's init ended ({}) after the command started without reporting \
                     its status",
                    code.map_or("no status".to_owned(), |c| format!("exit code {c}"))
                ),
            )
        }),
        Ending::Stopped {
            cause,
            code,
            signal,
        } => Some(crate::verdict::failure_of_cause(cause, *code, *signal)),
    }
}

/// The exit code `cofferdam run` returns for an ending.
pub fn exit_code_of(ending: &Ending) -> i32 {
    failure_of(ending).map_or(0, |f| f.exit_status())
}

/// Everything a finished run reported, gathered by the supervisor.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// `run-<uuid>`.
    pub run_id: String,
    /// Start, Unix ms.
    pub started_at_unix_ms: u64,
    /// End, Unix ms.
    pub finished_at_unix_ms: u64,
    /// The command as given.
    pub argv: Vec<String>,
    /// Every observation the sandbox sent, in order.
    pub controls: Vec<ControlObservation>,
    /// How it ended.
    pub ending: Ending,
    /// The sealed changes.
    pub changes: Vec<ChangeEntry>,
    /// Whiteouts and opaque directories.
    pub whiteouts: usize,
    /// The stage directory.
    pub upper: PathBuf,
    /// `trace.jsonl`.
    pub trace_path: PathBuf,
    /// Problems the supervisor met (unreadable status lines, …).
    pub warnings: Vec<String>,
    /// cofferdam's version.
    pub version: String,
}

/// `network.policy`: the mode, the allowlist and, when any, the published ports
/// (`{host, port}`; the forwarder adds what it counted once the run ends).
fn network_policy_json(policy: &Policy) -> serde_json::Value {
    let mut v = json!({
        "mode": policy.network.mode.wire_name(),
        "allow": policy.network.allow.iter().map(ToString::to_string).collect::<Vec<_>>(),
    });
    if !policy.network.publish.is_empty() {
        v["publish"] = policy
            .network
            .publish
            .iter()
            .map(|e| json!({"host": e.host().to_string(), "port": e.port}))
            .collect();
    }
    v
}

/// `controls` with `secrets_hidden` no more than partial when the policy lends a secret by
/// `--lend-secret`: the masks it read back are those of the other entries, and a reader of
/// the row must not take it for the whole secret list.
fn with_lent_secrets(
    mut controls: Vec<cofferdam_record::bundle::ControlObservation>,
    policy: &Policy,
) -> Vec<cofferdam_record::bundle::ControlObservation> {
    use cofferdam_record::bundle::{ControlMechanism, ControlStatus};
    let lent: Vec<String> = crate::policy::lent_secrets(policy)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    if lent.is_empty() {
        return controls;
    }
    for c in controls
        .iter_mut()
        .filter(|c| c.mechanism == ControlMechanism::SecretsHidden)
    {
        if c.status == ControlStatus::Enforced {
            c.status = ControlStatus::Partial;
        }
        let why = format!(
            "secret paths lent by --lend-secret are visible: {}",
            lent.join(", ")
        );
        c.add_reason(why);
        c.details
            .insert("lent_by_flag".into(), serde_json::json!(lent));
    }
    controls
}

/// Assemble the Run Bundle.
pub fn assemble_bundle(
    policy: &Policy,
    plan: &SandboxPlan,
    decision: &ContainmentDecision,
    r: &RunReport,
) -> RunBundle {
    let failure = failure_of(&r.ending);
    let exit_code = match &r.ending {
        Ending::Exited { code, .. }
        | Ending::Stopped { code, .. }
        | Ending::InitLost { code, .. } => *code,
        Ending::ExecFailed { code, .. } => Some(*code),
        Ending::SetupFailed { .. } => None,
    };
    let observations = ExecutorObservations::new(
        format!("cofferdam-{}", decision.tier.class()),
        decision.tier,
        with_lent_secrets(r.controls.clone(), policy),
    );
    let executor_plan = ExecutorPlan {
        declared_floor: decision.declared,
        requested_tier: decision.tier,
        requested_class: decision.achieved,
        floor_met: decision.floor_met,
        planned_controls: Vec::new(),
    };
    let filesystem = FilesystemSummary {
        state: OverlayState::Staged,
        target: policy.workdir.clone(),
        upper: r.upper.clone(),
        changed_files: r.changes.len(),
        whiteouts: r.whiteouts,
        root_overlay: false,
        excluded_paths: Vec::new(),
        access_policy: FileAccessPolicy {
            read_only: plan.fs.read_only.clone(),
            hidden: plan.fs.hidden.clone(),
            mounts: policy
                .mounts
                .iter()
                .map(|m| MountGrant {
                    source: m.source.clone(),
                    target: m.target.clone(),
                    mode: match m.mode {
                        crate::MountMode::Read => cofferdam_record::bundle::MountMode::Read,
                        crate::MountMode::Stage => cofferdam_record::bundle::MountMode::Stage,
                        crate::MountMode::Write => cofferdam_record::bundle::MountMode::Write,
                        crate::MountMode::Hide => cofferdam_record::bundle::MountMode::Hide,
                    },
                })
                .collect(),
        },
        host_root_device: None,
        host_root_inode: None,
        host_uid: None,
        host_gid: None,
        sample_paths: r.changes.iter().take(10).map(|c| c.path.clone()).collect(),
        changes: r.changes.clone(),
    };
    let mut safety = SafetySummary::derive(&observations, Some(&executor_plan), Some(&filesystem));
    safety.warnings.extend(r.warnings.iter().cloned());
    for m in crate::policy::lent_secrets(policy) {
        safety.warnings.push(format!(
            "{} is on the secret list and was lent read-only by --lend-secret: the command \
             could read it",
            m.display()
        ));
    }
    for m in &policy.mounts {
        if let (Some(name), crate::MountMode::Write) = (m.origin.strip_prefix("profile:"), m.mode) {
            safety.warnings.push(format!(
                "{} is agent state lent writable by profile:{name}: what the command wrote \
                 there is on the host now, outside review (--no-agent-defaults turns it off)",
                m.source.display()
            ));
        }
    }
    // The command ran with arguments a profile added (`run.command` is what ran).
    // The run's labels, then cofferdam's own entries (keys a label may not take:
    // `crate::orchestration::RESERVED`).
    let mut orchestration: BTreeMap<String, serde_json::Value> = policy
        .orchestration
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    if let Some(p) = &policy.command_patch {
        safety.warnings.push(p.line());
        orchestration.insert(
            "argument_patches".to_owned(),
            json!([{
                "profile": p.profile,
                "inserted_after_program": p.insert,
                "why": p.why,
            }]),
        );
    }
    let mut injected: Vec<String> = INJECTED_ENV.iter().map(|s| s.to_string()).collect();
    injected.extend(policy.env_set.iter().map(|(k, _)| k.clone()));
    if policy.network.mode == crate::allow::NetworkMode::Allow {
        injected.extend(crate::policy::PROXY_ENV.iter().map(|s| s.to_string()));
    }
    let projected: Vec<String> = plan
        .env
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| !injected.contains(k))
        .collect();
    let duration = r.finished_at_unix_ms.saturating_sub(r.started_at_unix_ms);
    RunBundle {
        schema_version: SCHEMA_VERSION,
        generated_at_unix_ms: r.finished_at_unix_ms,
        run: BundleRun {
            run_id: r.run_id.clone(),
            parent_run_id: policy
                .orchestration
                .lineage
                .as_ref()
                .map(|l| l.parent_run_id.clone()),
            task_id: policy.orchestration.task_id.clone(),
            attempt_id: format!("{}-attempt-1", r.run_id),
            session_id: r.run_id.clone(),
            agent: agent_label(&r.argv),
            command: r.argv.clone(),
            executor: Some(ExecutorIdentity::cofferdam(
                decision.tier,
                Some(r.version.clone()),
            )),
            state: RunState::from_failure(failure.as_ref()),
            started_at_unix_ms: r.started_at_unix_ms,
            finished_at_unix_ms: r.finished_at_unix_ms,
            duration_ms: duration,
            exit_code,
            failure,
            warnings: r
                .warnings
                .iter()
                .cloned()
                .chain(policy.warnings.iter().cloned())
                .chain(policy.skipped_mounts.iter().map(crate::Mount::skipped_line))
                .collect(),
            output: Default::default(),
            metrics: BTreeMap::new(),
            result_artifacts: Vec::new(),
            event_stream_ref: Some(r.trace_path.display().to_string()),
        },
        lineage: policy.orchestration.lineage.clone(),
        executor_observations: observations,
        executor_plan: Some(executor_plan),
        safety,
        filesystem: Some(filesystem),
        network: NetworkSummary {
            policy: network_policy_json(policy),
            interception: None,
            intercepted: None,
        },
        environment: EnvironmentProjection {
            inherits_host: false,
            projected_keys: projected,
            runtime_injected_keys: injected,
        },
        resources: resources(policy, &r.controls),
        agentctl: AgentCtlSnapshot::default(),
        orchestration,
        operation: None,
        run_observation: None,
        artifacts: vec![BundleArtifact {
            kind: "trace".into(),
            path: r.trace_path.clone(),
        }],
    }
}

/// The agent label: the command's program name.
fn agent_label(argv: &[String]) -> String {
    argv.first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_owned())
        .unwrap_or_default()
}

/// Requested limits, and the effective ones backed by an enforced observation
/// (`crate::resources`).
fn resources(policy: &Policy, controls: &[ControlObservation]) -> ResourceSummary {
    crate::resources::summarize(policy, controls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_record::bundle::{ControlMechanism, ControlStatus};

    #[test]
    fn an_init_lost_after_the_start_is_never_a_setup_failure() {
        let killed = Ending::InitLost {
            code: None,
            signal: Some(9),
        };
        let f = failure_of(&killed).unwrap();
        assert_eq!(f.kind, FailureKind::Signal);
        assert_eq!(f.signal, Some(9));
        assert_eq!(exit_code_of(&killed), 137);
        let exited = Ending::InitLost {
            code: Some(0),
            signal: None,
        };
        let f = failure_of(&exited).unwrap();
        assert_eq!(f.kind, FailureKind::ProcessExit);
        assert_ne!(
            exit_code_of(&exited),
            0,
            "an unknown status is not a success"
        );
        assert_ne!(exit_code_of(&exited), 125);
    }

    #[test]
    fn endings_map_to_typed_failures_and_exit_codes() {
        let ok = Ending::Exited {
            code: Some(0),
            signal: None,
        };
        assert_eq!(failure_of(&ok), None);
        assert_eq!(exit_code_of(&ok), 0);
        let code = Ending::Exited {
            code: Some(3),
            signal: None,
        };
        assert_eq!(failure_of(&code).unwrap().kind, FailureKind::ProcessExit);
        assert_eq!(exit_code_of(&code), 3);
        let sig = Ending::Exited {
            code: None,
            signal: Some(9),
        };
        assert_eq!(failure_of(&sig).unwrap().kind, FailureKind::Signal);
        assert_eq!(exit_code_of(&sig), 137);
        let setup = Ending::SetupFailed {
            step: "mount".into(),
            error: "EPERM".into(),
        };
        let f = failure_of(&setup).unwrap();
        assert_eq!(
            (f.kind, f.step.as_deref()),
            (FailureKind::Setup, Some("mount"))
        );
        assert_eq!(exit_code_of(&setup), 125);
        for code in [126, 127] {
            let e = Ending::ExecFailed {
                error: "x".into(),
                code,
            };
            assert_eq!(exit_code_of(&e), code);
        }
    }

    fn rlimit(resource: &str, soft: u64, status: ControlStatus) -> ControlObservation {
        let mut o = ControlObservation::new(
            ControlMechanism::Rlimit,
            cofferdam_record::bundle::ControlDimension::Resources,
            status,
        );
        o.details.insert("resource".into(), json!(resource));
        o.details.insert("soft".into(), json!(soft));
        o
    }

    #[test]
    fn a_limit_is_effective_only_when_an_enforced_observation_backs_it() {
        let places = crate::policy::Places {
            cwd: "/w".into(),
            home: "/h".into(),
        };
        let flags = crate::policy::RunFlags {
            max_file_size: Some("1MiB".into()),
            open_files: Some(64),
            memory: Some("1GiB".into()),
            timeout: Some("1h".into()),
            ..Default::default()
        };
        let policy = crate::policy::resolve_policy(None, &flags, &places).unwrap();
        let controls = vec![
            rlimit("RLIMIT_FSIZE", 1 << 20, ControlStatus::Enforced),
            rlimit("RLIMIT_NOFILE", 64, ControlStatus::Partial),
        ];
        let r = resources(&policy, &controls);
        assert_eq!(r.effective.max_file_size_bytes, Some(1 << 20));
        assert_eq!(
            r.effective.open_files, None,
            "a partial observation is not enforcement"
        );
        assert_eq!(r.effective.memory_bytes, None, "no observation, no claim");
        assert_eq!(r.effective.timeout_ms, None);
        assert_eq!(r.requested.timeout_ms, Some(3_600_000));
        // memory, timeout, open_files, and the default pids (no observation either).
        assert_eq!(r.limitations.len(), 4, "{:?}", r.limitations);
    }
}
