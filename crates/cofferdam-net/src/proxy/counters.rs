//! The driver's tallies while the run lasts, and their final form as record types.

use cofferdam_record::bundle::{
    AccessDenial, AccessObservation, ControlMechanism, DENIALS_MAX, DestinationCounters,
    DnsCounters, InterceptedProtocol, InterceptionSnapshot, RULES_MAX, RuleCounter,
};
use cofferdam_record::trace::NetworkVerdict;
use std::collections::{BTreeMap, HashSet};

/// The most destinations counted one by one; further ones count in the totals only, so a
/// scan from inside cannot grow the supervisor's memory or the bundle without bound.
pub const MAX_DESTINATIONS: usize = 4096;
/// The most decisions kept for the trace; later ones count in the totals only.
pub const MAX_DECISIONS: usize = 10_000;
/// The most rules counted one by one. Rules are the allowlist's entries (and `default`), so
/// the workload cannot add any; the cap only bounds a huge allowlist.
pub const MAX_RULES: usize = 1024;
/// The rule of a denial no allowlist entry matched: the deny that ends every allowlist.
pub const DEFAULT_RULE: &str = "default";

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
    /// Allowed and denied decisions by rule (at most [`MAX_RULES`] rules).
    rules: BTreeMap<String, (u64, u64)>,
    /// Decisions of rules past [`MAX_RULES`].
    rules_overflow: u64,
    /// The first [`DENIALS_MAX`] denials, for `run_observation`.
    denials: Vec<AccessDenial>,
    /// Denials past those.
    denials_omitted: u64,
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
        self.observe(&d);
        self.trace(d);
    }

    /// Count `d` by its rule and keep it among the first denials.
    fn observe(&mut self, d: &Decision) {
        let rule = match (&d.rule, d.verdict) {
            (Some(r), _) => r.clone(),
            (None, NetworkVerdict::Denied) => DEFAULT_RULE.to_owned(),
            // An allowed decision always names its entry; one that does not is counted in
            // the totals only.
            (None, NetworkVerdict::Allowed) => {
                self.rules_overflow += 1;
                String::new()
            }
        };
        if !rule.is_empty() {
            if !self.rules.contains_key(&rule) && self.rules.len() >= MAX_RULES {
                self.rules_overflow += 1;
            } else {
                let counts = self.rules.entry(rule).or_default();
                match d.verdict {
                    NetworkVerdict::Allowed => counts.0 += 1,
                    NetworkVerdict::Denied => counts.1 += 1,
                }
            }
        }
        if d.verdict == NetworkVerdict::Denied {
            if self.denials.len() < DENIALS_MAX {
                let (target, access) = match (d.protocol, d.port) {
                    (InterceptedProtocol::Dns, _) => (d.host.clone(), "resolve"),
                    (_, Some(port)) => (format!("{}:{port}", d.host), "connect"),
                    (_, None) => (d.host.clone(), "connect"),
                };
                self.denials.push(AccessDenial {
                    target,
                    access: access.into(),
                    mechanism: Some(ControlMechanism::EgressProxy),
                    at_unix_ms: Some(d.at_unix_ms),
                });
            } else {
                self.denials_omitted += 1;
            }
        }
    }

    /// The network dimension of `run_observation`: every decision of the proxy and the DNS
    /// answerer, allowed and denied, by rule (the busiest [`RULES_MAX`]) and the first
    /// [`DENIALS_MAX`] denials. Every counter is observed: the driver sees each connection
    /// and query it is handed.
    pub fn observation(&self) -> AccessObservation {
        let mut rules: Vec<RuleCounter> = self
            .rules
            .iter()
            .map(|(rule, (allowed, denied))| RuleCounter {
                rule: rule.clone(),
                allowed: *allowed,
                denied: *denied,
            })
            .collect();
        rules.sort_by(|a, b| {
            (b.allowed + b.denied)
                .cmp(&(a.allowed + a.denied))
                .then_with(|| a.rule.cmp(&b.rule))
        });
        let left_out: u64 = rules
            .iter()
            .skip(RULES_MAX)
            .map(|r| r.allowed + r.denied)
            .sum();
        rules.truncate(RULES_MAX);
        let rules_omitted = left_out + self.rules_overflow;
        AccessObservation {
            allowed: Some(self.allowed + self.dns_answered),
            denied: Some(self.denied + self.dns_refused),
            denials: self.denials.clone(),
            denials_omitted: (self.denials_omitted > 0).then_some(self.denials_omitted),
            rules,
            rules_omitted: (rules_omitted > 0).then_some(rules_omitted),
            ..Default::default()
        }
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
        self.observe(&d);
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

    fn allowed_by(host: &str, rule: &str) -> Decision {
        Decision {
            rule: Some(rule.into()),
            ..d(host, NetworkVerdict::Allowed, InterceptedProtocol::Tcp)
        }
    }

    #[test]
    fn the_observation_counts_every_decision_by_rule_within_bounds() {
        let mut t = Tally::default();
        assert_eq!(
            t.observation(),
            AccessObservation {
                allowed: Some(0),
                denied: Some(0),
                ..Default::default()
            },
            "observed zeros are zeros, not null"
        );
        for _ in 0..3 {
            t.decide(allowed_by("a.example", "a.example:80"));
        }
        t.decide(allowed_by("b.example", "*.example:80"));
        t.dns(Decision {
            rule: Some("a.example:80".into()),
            ..d(
                "a.example",
                NetworkVerdict::Allowed,
                InterceptedProtocol::Dns,
            )
        });
        for i in 0..DENIALS_MAX + 3 {
            t.decide(d(
                &format!("x{i}.evil"),
                NetworkVerdict::Denied,
                InterceptedProtocol::Tcp,
            ));
        }
        t.dns(d(
            "y.evil",
            NetworkVerdict::Denied,
            InterceptedProtocol::Dns,
        ));
        let o = t.observation();
        assert_eq!(o.allowed, Some(5));
        assert_eq!(o.denied, Some(DENIALS_MAX as u64 + 4));
        assert_eq!(o.denials.len(), DENIALS_MAX);
        assert_eq!(o.denials[0].target, "x0.evil:80");
        assert_eq!(o.denials[0].access, "connect");
        assert_eq!(o.denials_omitted, Some(4));
        let rules: Vec<(&str, u64, u64)> = o
            .rules
            .iter()
            .map(|r| (r.rule.as_str(), r.allowed, r.denied))
            .collect();
        assert_eq!(
            rules,
            [
                (DEFAULT_RULE, 0, DENIALS_MAX as u64 + 4),
                ("a.example:80", 4, 0),
                ("*.example:80", 1, 0)
            ]
        );
        assert_eq!(o.rules_omitted, None);
    }

    #[test]
    fn rules_past_the_bound_are_counted_as_omitted_decisions() {
        let mut t = Tally::default();
        for i in 0..RULES_MAX + 2 {
            t.decide(allowed_by("h", &format!("r{i:03}:80")));
        }
        t.decide(allowed_by("h", "r000:80"));
        let o = t.observation();
        assert_eq!(o.rules.len(), RULES_MAX);
        assert_eq!(o.rules[0].rule, "r000:80", "the busiest first");
        assert_eq!(o.rules_omitted, Some(2));
        assert_eq!(o.allowed, Some(RULES_MAX as u64 + 3));
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
