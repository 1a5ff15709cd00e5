//! `network`: the base policy and whatever interception evidence exists.
//!
//! Owns `NetworkSummary`, the interception driver's identity (`InterceptionProfile`) and its
//! final counters (`InterceptionSnapshot`). A counter that could not be observed is `None`
//! (written `null`), never `0`. It may not open sockets or count anything itself:
//! `cofferdam-net` fills these values.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `network`: base policy and interception evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NetworkSummary {
    /// The serialized base network policy. cofferdam writes
    /// `{"mode": "none" | "allow" | "host", "allow": [...]}`, and with `--publish` also
    /// `"publish": [{host, port, accepted, relayed, refused, bytes_in, bytes_out}]` (the
    /// mappings, inbound only, with what the forwarder counted).
    pub policy: serde_json::Value,
    /// The interception driver, when one ran (`allow` mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interception: Option<InterceptionProfile>,
    /// The driver's final counters, when it reported them. Absent is not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intercepted: Option<InterceptionSnapshot>,
}

/// `network.interception`: which driver intercepted the workload's traffic, and what it
/// covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InterceptionProfile {
    /// The driver, e.g. `cofferdam-net`.
    pub driver: String,
    /// The traffic it intercepts; everything else (other UDP, raw sockets, QUIC) gets
    /// nothing.
    pub covers: Vec<InterceptedProtocol>,
    /// The sandbox-side DNS listener, e.g. `127.0.0.1:53`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_listen: Option<String>,
    /// The sandbox-side HTTP CONNECT proxy, e.g. `127.0.0.1:3128`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_listen: Option<String>,
}

/// Traffic an interception driver can cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterceptedProtocol {
    /// DNS queries to the sandbox's resolver.
    Dns,
    /// TCP connections to allowed ports (checked by SNI / Host / the DNS answer given).
    Tcp,
    /// HTTP CONNECT through the proxy.
    HttpConnect,
}

/// `network.intercepted`: the driver's final counters. Every counter is written, as `null`
/// when it could not be observed; a missing key reads as `null` too. `Default` is "nothing
/// observed", not "zero traffic".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InterceptionSnapshot {
    /// Connections and requests the driver saw.
    pub requests: Option<u64>,
    /// Of those, allowed.
    pub allowed: Option<u64>,
    /// Of those, denied.
    pub denied: Option<u64>,
    /// Bytes from the sandbox to upstream.
    pub bytes_sent: Option<u64>,
    /// Bytes from upstream to the sandbox.
    pub bytes_received: Option<u64>,
    /// DNS answers given and refused.
    #[serde(default)]
    pub dns: DnsCounters,
    /// Input the driver dropped as malformed or empty: DNS messages that are no query (an
    /// empty datagram among them), proxy or HTTP request heads it refused (a bare LF, a
    /// second `Host`, whitespace before a colon, a `Host` other than the target) or that
    /// never completed.
    #[serde(default)]
    pub malformed_dropped: Option<u64>,
    /// Connections the driver refused (reset at once) because it was at a limit: its
    /// descriptors, or the most connections it serves at once. Service resumes when
    /// connections end.
    #[serde(default)]
    pub refused_at_limit: Option<u64>,
    /// TCP connection attempts inside the sandbox that its kernel refused because nothing
    /// listened on the port (a port no entry allows, or an in-sandbox port without a
    /// server). Read from the sandbox's network namespace counters: the destinations of
    /// these attempts are not observable, only their number.
    #[serde(default)]
    pub tcp_refused_unlistened: Option<u64>,
    /// UDP datagrams inside the sandbox to ports nothing listens on (UDP other than DNS:
    /// they reach nobody). Counted like `tcp_refused_unlistened`.
    #[serde(default)]
    pub udp_unlistened: Option<u64>,
    /// Per-destination counters, one entry per destination seen.
    #[serde(default)]
    pub destinations: Vec<DestinationCounters>,
}

/// DNS counters; `null` when not observed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DnsCounters {
    /// Queries answered (the name was allowed).
    pub answered: Option<u64>,
    /// Queries refused.
    pub refused: Option<u64>,
}

/// Counters for one destination, as checked by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DestinationCounters {
    /// The destination name (DNS name, SNI, Host or CONNECT target).
    pub host: String,
    /// The destination port, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Connections allowed.
    pub allowed: Option<u64>,
    /// Connections denied.
    pub denied: Option<u64>,
    /// Bytes from the sandbox to this destination.
    pub bytes_sent: Option<u64>,
    /// Bytes from this destination to the sandbox.
    pub bytes_received: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unobserved_counters_are_written_as_null_not_zero() {
        let json = serde_json::to_value(InterceptionSnapshot::default()).unwrap();
        assert_eq!(json["requests"], serde_json::Value::Null);
        assert_eq!(json["dns"]["answered"], serde_json::Value::Null);
        assert!(json.as_object().unwrap().contains_key("bytes_sent"));
    }

    #[test]
    fn missing_counters_read_as_unknown() {
        let snap: InterceptionSnapshot = serde_json::from_str(r#"{"allowed": 0}"#).unwrap();
        assert_eq!(snap.allowed, Some(0));
        assert_eq!(snap.denied, None);
        assert_eq!(snap.dns.refused, None);
    }
}
