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
use std::os::unix::net::UnixStream;

/// The driver of a run in `allow` mode.
pub struct Egress {
    interceptor: Interceptor,
}

/// The socket pair the driver and pid 1 share, when the policy's mode is `allow`: this
/// side (for [`start`]) and the sandbox's end (the init's `cofferdam_sandbox::fds::NET`).
pub fn socket(policy: &Policy) -> Result<Option<(UnixStream, OwnedFd)>, String> {
    if policy.network.mode != NetworkMode::Allow {
        return Ok(None);
    }
    let (ours, theirs) = UnixStream::pair()
        .map_err(|e| format!("cannot create the network socket for the sandbox: {e}"))?;
    Ok(Some((ours, OwnedFd::from(theirs))))
}

/// Start the driver on `ours`, this side of the socket from [`socket`].
pub fn start(policy: &Policy, ours: UnixStream) -> Egress {
    let interceptor = Interceptor::start(
        policy.network.allow.clone(),
        Resolver::from_env(),
        OwnedFd::from(ours),
    );
    Egress { interceptor }
}

impl Egress {
    /// Tell the driver the init's pid (called once it runs).
    pub fn started(&self, pid: u32) {
        self.interceptor
            .sandbox_pid()
            .store(pid, std::sync::atomic::Ordering::SeqCst);
    }

    /// Stop the driver (the sandbox has ended): its observation joins `controls`, each
    /// decision goes to the trace.
    pub fn finish(
        self,
        controls: &mut Vec<ControlObservation>,
        trace: &mut TraceLog,
    ) -> InterceptReport {
        let mut report = self.interceptor.finish();
        controls.push(report.observation.clone());
        let mut events = vec![(
            crate::now_ms(),
            TraceEventKind::ControlInstalled(report.observation.clone()),
        )];
        events.extend(report.decisions.iter().map(|d| {
            let decision = TraceEventKind::NetworkDecision {
                protocol: d.protocol,
                host: d.host.clone(),
                port: d.port,
                decision: d.verdict,
                rule: d.rule.clone(),
                reason: d.reason.clone(),
            };
            (d.at_unix_ms, decision)
        }));
        // The report's warnings reach the bundle (`record`): a lost decision is told there too.
        let what = "the network driver's decisions";
        report
            .warnings
            .extend(crate::trace_append::append(trace, events, what));
        report
    }
}

/// Put the driver's profile, counters, decisions by rule (`run_observation.network`) and
/// warnings into the bundle.
pub fn record(bundle: &mut RunBundle, report: InterceptReport) {
    bundle.network.interception = Some(report.profile);
    bundle.network.intercepted = report.snapshot;
    // What the driver saw (the filesystem dimension is the file watch's: `supervise`).
    if let Some(network) = report.network_observation {
        bundle
            .run_observation
            .get_or_insert_with(Default::default)
            .network = Some(network);
    }
    bundle.run.warnings.extend(report.warnings);
}

/// The review's network section: the mode, the counters, and every denied destination.
pub fn render_review(o: &mut String, b: &RunBundle, s: crate::style::Style) {
    use cofferdam_record::shown::escape;
    use std::fmt::Write as _;
    let n = &b.network;
    let mode = n
        .policy
        .get("mode")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("unknown");
    let _ = writeln!(o, "\n{}", s.heading("Network"));
    let _ = writeln!(o, "  mode      {}", escape(mode));
    crate::publish::render_review(o, n);
    let Some(c) = &n.intercepted else {
        if mode == "allow" {
            let _ = writeln!(o, "  {}", s.bad("no counters: the driver did not report"));
        }
        return;
    };
    let num = |v: Option<u64>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    let _ = writeln!(
        o,
        "  seen      {} connection(s): {} allowed, {} denied; DNS {} answered, {} refused",
        num(c.requests),
        num(c.allowed),
        num(c.denied),
        num(c.dns.answered),
        num(c.dns.refused)
    );
    if let Some(r) = c.tcp_refused_unlistened.filter(|r| *r > 0) {
        let _ = writeln!(
            o,
            "  refused   {r} TCP attempt(s) on ports nothing listens on (destinations not observable)"
        );
    }
    if let Some(m) = c.malformed_dropped.filter(|m| *m > 0) {
        let _ = writeln!(
            o,
            "  dropped   {m} malformed DNS message(s) or request head(s)"
        );
    }
    if let Some(l) = c.refused_at_limit.filter(|l| *l > 0) {
        let _ = writeln!(
            o,
            "  {} {l} connection(s) refused at the driver's limit (descriptors or connections at once)",
            s.bad("at limit ")
        );
    }
    for d in c.destinations.iter().filter(|d| d.denied.unwrap_or(0) > 0) {
        let port = d.port.map_or(String::new(), |p| format!(":{p}"));
        let _ = writeln!(
            o,
            "  {} {}{port} ({}×)",
            s.bad("denied   "),
            escape(&d.host),
            num(d.denied)
        );
    }
}
