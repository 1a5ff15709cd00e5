//! The run's network driver, from the CLI's side: in `allow` mode, the socket pair whose
//! sandbox end pid 1 sends its listeners over, and the supervisor's driver
//! (`cofferdam_net::proxy`) started on the other end before the sandbox; after the run, its
//! observation, decisions (trace), profile and counters (bundle). Nothing is started in the
//! other modes.

use cofferdam_net::NetworkMode;
use cofferdam_net::proxy::{InterceptReport, Interceptor, Resolver};
use cofferdam_policy::Policy;
use cofferdam_record::RunBundle;
use cofferdam_record::bundle::ControlObservation;
use cofferdam_record::trace::TraceEventKind;
use cofferdam_stage::trace_log::TraceLog;
use std::os::fd::OwnedFd;

/// The driver of a run in `allow` mode.
pub struct Egress {
    interceptor: Interceptor,
}

/// Start the driver when the policy's mode is `allow`: returns it and the sandbox's end of
/// the socket (for the init's fd 6).
pub fn start(policy: &Policy) -> Result<Option<(Egress, OwnedFd)>, String> {
    if policy.network.mode != NetworkMode::Allow {
        return Ok(None);
    }
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| format!("cannot create the network socket for the sandbox: {e}"))?;
    let interceptor = Interceptor::start(
        policy.network.allow.clone(),
        Resolver::from_env(),
        OwnedFd::from(ours),
    );
    Ok(Some((Egress { interceptor }, OwnedFd::from(theirs))))
}

impl Egress {
    /// Stop the driver (the sandbox has ended): its observation joins `controls`, each
    /// decision goes to the trace.
    pub fn finish(
        self,
        controls: &mut Vec<ControlObservation>,
        trace: &mut TraceLog,
    ) -> InterceptReport {
        let report = self.interceptor.finish();
        controls.push(report.observation.clone());
        let _ = trace.append(
            crate::cmd::run::now_ms(),
            TraceEventKind::ControlInstalled(report.observation.clone()),
        );
        for d in &report.decisions {
            let _ = trace.append(
                d.at_unix_ms,
                TraceEventKind::NetworkDecision {
                    protocol: d.protocol,
                    host: d.host.clone(),
                    port: d.port,
                    decision: d.verdict,
                    rule: d.rule.clone(),
                },
            );
        }
        report
    }
}

/// Put the driver's profile, counters and warnings into the bundle.
pub fn record(bundle: &mut RunBundle, report: InterceptReport) {
    bundle.network.interception = Some(report.profile);
    bundle.network.intercepted = report.snapshot;
    bundle.run.warnings.extend(report.warnings);
}
