//! The driver's tallies while the run lasts, and their final form as record types.

use cofferdam_record::bundle::{
    DestinationCounters, DnsCounters, InterceptedProtocol, InterceptionSnapshot,
};
use cofferdam_record::trace::NetworkVerdict;
use std::collections::{BTreeMap, HashSet};

/// The most destinations counted one by one; further ones count in the totals only, so a
/// scan from inside cannot grow the supervisor's memory or the bundle without bound.
pub const MAX_DESTINATIONS: usize = 4096;
/// The most decisions kept for the trace; later ones count in the totals only.
pub const MAX_DECISIONS: usize = 10_000;

/// One decision, for the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// When, Unix milliseconds.
    pub at_unix_ms: u64,
    /// How the request arrived.
    pub protocol: InterceptedProtocol,
    /// The destination as checked.
    pub host: String,
    /// Its port (none for DNS).
    pub port: Option<u16>,
    /// Allowed or denied.
    pub verdict: NetworkVerdict,
    /// The matching entry, when allowed.
    pub rule: Option<String>,
    /// Why, when denied.
    pub reason: Option<String>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Dest {
    allowed: u64,
    denied: u64,
    sent: u64,
    received: u64,
}

/// Every counter, all observed (the driver sees every connection it is handed).
#[derive(Debug, Default)]
pub struct Tally {
    requests: u64,
    allowed: u64,
    denied: u64,
    sent: u64,
    received: u64,
    dns_answered: u64,
    dns_refused: u64,
    dests: BTreeMap<(String, Option<u16>), Dest>,
    /// The decisions, in order (at most [`MAX_DECISIONS`]).
    pub decisions: Vec<Decision>,
    /// The DNS names and outcomes already in `decisions`.
    dns_traced: HashSet<(String, bool)>,
    /// Decisions past [`MAX_DECISIONS`], not traced.
    pub untraced: u64,
    /// Requests and queries for destinations past [`MAX_DESTINATIONS`], in the totals only.
    pub uncounted_destinations: u64,
    /// Input dropped as malformed or empty: DNS messages that are no query, proxy and
    /// transparent HTTP heads that are refused or never complete.
    pub malformed: u64,
    /// Connections refused because the driver was at a limit (its descriptors, or the
    /// most connections at once).
    pub refused_at_limit: u64,
}

impl Tally {
    /// Count a connection or proxy request and its decision.
    pub fn decide(&mut self, d: Decision) {
        self.requests += 1;
        let mut scratch = Dest::default();
        let dest = self.dest(&d.host, d.port).unwrap_or(&mut scratch);
        match d.verdict {
            NetworkVerdict::Allowed => {
                dest.allowed += 1;
                self.allowed += 1;
            }
            NetworkVerdict::Denied => {
                dest.denied += 1;
                self.denied += 1;
            }
        }
        self.trace(d);
    }

    /// The counters of a destination, `None` (and counted as uncounted) once
    /// [`MAX_DESTINATIONS`] others are.
    fn dest(&mut self, host: &str, port: Option<u16>) -> Option<&mut Dest> {
        let key = (host.to_owned(), port);
        if !self.dests.contains_key(&key) && self.dests.len() >= MAX_DESTINATIONS {
            self.uncounted_destinations += 1;
            return None;
        }
        Some(self.dests.entry(key).or_default())
    }

    fn trace(&mut self, d: Decision) {
        if self.decisions.len() < MAX_DECISIONS {
            self.decisions.push(d);
        } else {
            self.untraced += 1;
        }
    }

    /// Count a DNS query: answered (allowed name) or refused. A refused name is also a
    /// denied destination without a port (its count is of queries). Only the first decision
    /// per name and outcome goes to the trace (resolvers repeat and ask for several types).
    pub fn dns(&mut self, d: Decision) {
        match d.verdict {
            NetworkVerdict::Allowed => self.dns_answered += 1,
            NetworkVerdict::Denied => {
                self.dns_refused += 1;
                if let Some(dest) = self.dest(&d.host, None) {
                    dest.denied += 1;
                }
            }
        }
        let key = (d.host.clone(), d.verdict == NetworkVerdict::Allowed);
        if self.dns_traced.contains(&key) {
            return;
        }
        // Past the trace's cap the set stops growing too: queries for ever new names must
        // not grow the supervisor's memory.
        if self.decisions.len() < MAX_DECISIONS {
            self.dns_traced.insert(key);
        }
        self.trace(d);
    }

    /// Count bytes relayed for a destination.
    pub fn bytes(&mut self, host: &str, port: Option<u16>, sent: u64, received: u64) {
        self.sent += sent;
        self.received += received;
        let Some(dest) = self.dest(host, port) else {
            return;
        };
        dest.sent += sent;
        dest.received += received;
    }

    /// The final counters.
    pub fn snapshot(&self) -> InterceptionSnapshot {
        InterceptionSnapshot {
            requests: Some(self.requests),
            allowed: Some(self.allowed),
            denied: Some(self.denied),
            bytes_sent: Some(self.sent),
            bytes_received: Some(self.received),
            dns: DnsCounters {
                answered: Some(self.dns_answered),
                refused: Some(self.dns_refused),
            },
            // Filled from the namespace's counters by the driver, when it could read them.
            malformed_dropped: Some(self.malformed),
            refused_at_limit: Some(self.refused_at_limit),
            tcp_refused_unlistened: None,
            udp_unlistened: None,
            destinations: self
                .dests
                .iter()
                .map(|((host, port), d)| DestinationCounters {
                    host: host.clone(),
                    port: *port,
                    allowed: Some(d.allowed),
                    denied: Some(d.denied),
                    bytes_sent: Some(d.sent),
                    bytes_received: Some(d.received),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(host: &str, verdict: NetworkVerdict, protocol: InterceptedProtocol) -> Decision {
        Decision {
            at_unix_ms: 1,
            protocol,
            host: host.into(),
            port: (protocol != InterceptedProtocol::Dns).then_some(80),
            verdict,
            rule: None,
            reason: None,
        }
    }

    #[test]
    fn a_scan_is_counted_in_the_totals_past_the_caps() {
        let mut t = Tally::default();
        let n = MAX_DECISIONS.max(MAX_DESTINATIONS) + 5;
        for i in 0..n {
            t.decide(d(
                &format!("h{i}"),
                NetworkVerdict::Denied,
                InterceptedProtocol::Tcp,
            ));
        }
        let s = t.snapshot();
        assert_eq!(s.requests, Some(n as u64));
        assert_eq!(s.denied, Some(n as u64));
        assert_eq!(s.destinations.len(), MAX_DESTINATIONS);
        assert_eq!(t.decisions.len(), MAX_DECISIONS);
        assert_eq!(t.untraced, (n - MAX_DECISIONS) as u64);
        assert_eq!(t.uncounted_destinations, (n - MAX_DESTINATIONS) as u64);
    }

    #[test]
    fn dns_names_past_the_trace_cap_are_not_remembered() {
        let mut t = Tally::default();
        for i in 0..MAX_DECISIONS + 50 {
            t.dns(d(
                &format!("n{i}"),
                NetworkVerdict::Denied,
                InterceptedProtocol::Dns,
            ));
        }
        assert_eq!(t.dns_traced.len(), MAX_DECISIONS);
        assert_eq!(t.untraced, 50);
    }

    #[test]
    fn counters_add_up_per_destination() {
        let mut t = Tally::default();
        t.decide(d("a", NetworkVerdict::Allowed, InterceptedProtocol::Tcp));
        t.decide(d(
            "a",
            NetworkVerdict::Allowed,
            InterceptedProtocol::HttpConnect,
        ));
        t.decide(d("b", NetworkVerdict::Denied, InterceptedProtocol::Tcp));
        t.bytes("a", Some(80), 10, 20);
        t.dns(d("a", NetworkVerdict::Allowed, InterceptedProtocol::Dns));
        t.dns(d("a", NetworkVerdict::Allowed, InterceptedProtocol::Dns));
        t.dns(d("x", NetworkVerdict::Denied, InterceptedProtocol::Dns));
        let s = t.snapshot();
        assert_eq!(
            (s.requests, s.allowed, s.denied),
            (Some(3), Some(2), Some(1))
        );
        assert_eq!((s.bytes_sent, s.bytes_received), (Some(10), Some(20)));
        assert_eq!((s.dns.answered, s.dns.refused), (Some(2), Some(1)));
        assert_eq!(s.destinations.len(), 3);
        let x = s.destinations.iter().find(|d| d.host == "x").unwrap();
        assert_eq!((x.port, x.denied, x.allowed), (None, Some(1), Some(0)));
        assert_eq!(s.destinations[0].allowed, Some(2));
        assert_eq!(s.destinations[0].bytes_received, Some(20));
        assert_eq!(
            t.decisions.len(),
            5,
            "one DNS decision per name and outcome"
        );
    }
}
