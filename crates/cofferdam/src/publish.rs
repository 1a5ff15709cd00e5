//! `run --publish`, from the CLI's side: bind the host ports before anything exists (a busy
//! port is a usage error naming it), the socket pair whose sandbox end the init serves
//! sockets on (`cofferdam_sandbox::fds::PUBLISH`), the forwarder started with the run, and what it counted in the
//! bundle's `network.policy.publish`. Nothing happens without `--publish`.

use crate::exit::Failure;
use cofferdam_net::forward::{self, Bound, Forwarder};
use cofferdam_policy::Policy;
use cofferdam_record::RunBundle;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

/// The bound host ports and the publish socket, before the run.
pub struct Published {
    bound: Bound,
    ours: UnixStream,
    theirs: Option<OwnedFd>,
}

/// Bind every `--publish` host side; `None` without any. Says on stderr where each mapping
/// listens, and warns for one other machines can reach.
pub fn bind(policy: &Policy) -> Result<Option<Published>, Failure> {
    let entries = &policy.network.publish;
    if entries.is_empty() {
        return Ok(None);
    }
    let bound = forward::bind(entries).map_err(Failure::usage)?;
    let (ours, theirs) = UnixStream::pair()
        .map_err(|e| Failure::setup(format!("cannot create the publish socket: {e}")))?;
    for (entry, at) in bound.addresses() {
        if let Some(w) = entry.exposure_warning() {
            eprintln!("cofferdam: warning: {}", crate::shown_text(&w));
        }
        eprintln!(
            "cofferdam: publishing {at} -> port {} inside the sandbox",
            entry.port
        );
    }
    Ok(Some(Published {
        bound,
        ours,
        theirs: Some(OwnedFd::from(theirs)),
    }))
}

impl Published {
    /// The sandbox's end of the publish socket, for `spawn_init` (once).
    pub fn sandbox_end(&mut self) -> Option<OwnedFd> {
        self.theirs.take()
    }

    /// Start relaying (the init is running).
    pub fn start(self) -> Forwarder {
        self.bound.start(OwnedFd::from(self.ours))
    }
}

/// Stop the forwarder (the sandbox has ended) and put what each mapping saw into the
/// bundle's `network.policy.publish`, which holds the mappings already.
pub fn record(bundle: &mut RunBundle, forwarder: Option<Forwarder>) {
    let Some(f) = forwarder else {
        return;
    };
    let reports: Vec<serde_json::Value> = f.finish().iter().map(|r| r.to_json()).collect();
    bundle.network.policy["publish"] = serde_json::Value::Array(reports);
}

/// The review's lines for the published ports: each mapping and what the relay counted.
pub fn render_review(o: &mut String, n: &cofferdam_record::bundle::NetworkSummary) {
    use cofferdam_record::shown::escape;
    use std::fmt::Write as _;
    let Some(list) = n
        .policy
        .get("publish")
        .and_then(serde_json::Value::as_array)
    else {
        return;
    };
    let num = |p: &serde_json::Value, k: &str| {
        p.get(k)
            .and_then(serde_json::Value::as_u64)
            .map_or_else(|| "unknown".to_owned(), |v| v.to_string())
    };
    for p in list {
        let host = p
            .get("host")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?");
        let _ = writeln!(
            o,
            "  publish   {} -> port {}: {} relayed, {} refused",
            escape(host),
            num(p, "port"),
            num(p, "relayed"),
            num(p, "refused")
        );
    }
}
