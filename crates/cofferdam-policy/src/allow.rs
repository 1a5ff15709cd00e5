//! Allowlist entries: `HOST`, `HOST:PORT`, `*.DOMAIN[:PORT]`, `127.0.0.1:PORT`,
//! `[::1]:PORT`, and the network mode. Pure parsing and matching: the egress relay
//! (`cofferdam_net::proxy`) enforces them; this module may not touch a socket.
//!
//! A bare host means ports 443 and 80 (HTTPS and HTTP: what agents' model APIs and package
//! registries use). `*.example.com` matches every name below `example.com`, not
//! `example.com` itself: list both when both are wanted, as with TLS wildcard certificates.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// The network mode of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkMode {
    /// Loopback only inside the sandbox's own network namespace.
    #[default]
    None,
    /// Only the allowlisted destinations, enforced outside the sandbox.
    Allow,
    /// The host's network, unfiltered (bypassable by design).
    Host,
}

impl NetworkMode {
    /// The stable wire name.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Allow => "allow",
            Self::Host => "host",
        }
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl FromStr for NetworkMode {
    type Err = AllowError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "allow" => Ok(Self::Allow),
            "host" => Ok(Self::Host),
            other => Err(AllowError::Mode(other.to_owned())),
        }
    }
}

/// Which hosts an entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// One DNS name, lowercased, without a trailing dot.
    Name(String),
    /// Every name strictly below this domain (`*.example.com` → `example.com`).
    Below(String),
    /// One IP address (loopback services on the host, typically).
    Addr(IpAddr),
}

/// One allowlist entry: a host pattern and the ports it opens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowEntry {
    /// The hosts.
    pub host: HostPattern,
    /// The ports, ascending; a bare host gives `[80, 443]`.
    pub ports: Vec<u16>,
}

/// An allowlist entry or mode that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowError {
    /// Not a word the mode knows.
    #[error("unknown network mode `{0}`: expected none, allow or host")]
    Mode(String),
    /// A URL was given where a host is expected.
    #[error(
        "`{0}` looks like a URL: give the host (and port), e.g. api.example.com or api.example.com:8443"
    )]
    Url(String),
    /// The host part is not a DNS name, a wildcard or an address.
    #[error("`{0}` is not a host name, `*.domain` wildcard or IP address")]
    Host(String),
    /// The port part is not 1–65535.
    #[error("`{0}` has an invalid port: use 1-65535")]
    Port(String),
}

impl FromStr for AllowEntry {
    type Err = AllowError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let t = text.trim();
        if t.contains("://") || t.contains('/') {
            return Err(AllowError::Url(text.to_owned()));
        }
        let (host, port) = split_host_port(t).ok_or_else(|| AllowError::Host(text.to_owned()))?;
        let ports = match port {
            None => vec![80, 443],
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => vec![n],
                _ => return Err(AllowError::Port(text.to_owned())),
            },
        };
        let host = parse_host(host).ok_or_else(|| AllowError::Host(text.to_owned()))?;
        Ok(AllowEntry { host, ports })
    }
}

/// Split `host[:port]`, `[v6]` or `[v6]:port`. A bare IPv6 address without brackets is
/// taken whole as a host.
fn split_host_port(t: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = t.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        return match after {
            "" => Some((addr, None)),
            _ => Some((addr, Some(after.strip_prefix(':')?))),
        };
    }
    if t.matches(':').count() > 1 {
        return Some((t, None));
    }
    match t.split_once(':') {
        Some((h, p)) => Some((h, Some(p))),
        None => Some((t, None)),
    }
}

fn parse_host(h: &str) -> Option<HostPattern> {
    if let Ok(addr) = h.parse::<IpAddr>() {
        return Some(HostPattern::Addr(addr));
    }
    let lower = h.trim_end_matches('.').to_ascii_lowercase();
    match lower.strip_prefix("*.") {
        Some(domain) if is_dns_name(domain) => Some(HostPattern::Below(domain.to_owned())),
        Some(_) => None,
        None if is_dns_name(&lower) => Some(HostPattern::Name(lower)),
        None => None,
    }
}

fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl AllowEntry {
    /// Whether this entry allows `name` (a DNS name or an address literal) on `port`.
    pub fn allows(&self, name: &str, port: u16) -> bool {
        if !self.ports.contains(&port) {
            return false;
        }
        let lower = name.trim_end_matches('.').to_ascii_lowercase();
        match &self.host {
            HostPattern::Name(n) => *n == lower,
            HostPattern::Below(domain) => lower
                .strip_suffix(domain.as_str())
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.')),
            HostPattern::Addr(a) => lower.parse::<IpAddr>().is_ok_and(|x| x == *a),
        }
    }

    /// Whether the entry reaches the host's own loopback (a deliberate grant).
    pub fn is_host_loopback(&self) -> bool {
        match &self.host {
            HostPattern::Addr(a) => a.is_loopback(),
            HostPattern::Name(n) => n == "localhost",
            HostPattern::Below(_) => false,
        }
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(n) => f.write_str(n)?,
            HostPattern::Below(d) => write!(f, "*.{d}")?,
            HostPattern::Addr(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            HostPattern::Addr(a) => write!(f, "{a}")?,
        }
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        write!(f, ":{}", ports.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str) -> AllowEntry {
        s.parse().unwrap()
    }

    #[test]
    fn bare_host_means_https_and_http() {
        let a = e("API.Anthropic.com");
        assert_eq!(a.host, HostPattern::Name("api.anthropic.com".into()));
        assert_eq!(a.ports, vec![80, 443]);
        assert!(a.allows("api.anthropic.com", 443));
        assert!(a.allows("api.anthropic.com.", 80));
        assert!(!a.allows("api.anthropic.com", 22));
        assert!(!a.allows("evil-api.anthropic.com", 443));
        assert_eq!(a.to_string(), "api.anthropic.com:80,443");
    }

    #[test]
    fn wildcard_matches_below_only() {
        let w = e("*.pypi.org:443");
        assert!(w.allows("files.pypi.org", 443));
        assert!(w.allows("a.b.pypi.org", 443));
        assert!(!w.allows("pypi.org", 443));
        assert!(!w.allows("evilpypi.org", 443));
        assert!(!w.allows("files.pypi.org", 80));
    }

    #[test]
    fn addresses_and_loopback() {
        let l = e("127.0.0.1:8080");
        assert!(l.allows("127.0.0.1", 8080));
        assert!(!l.allows("127.0.0.2", 8080));
        assert!(l.is_host_loopback());
        assert!(e("localhost:3000").is_host_loopback());
        let v6 = e("[::1]:9000");
        assert_eq!(v6.host, HostPattern::Addr("::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "[::1]:9000");
        assert_eq!(e("::1").ports, vec![80, 443]);
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        assert!(matches!(
            "https://x.com".parse::<AllowEntry>(),
            Err(AllowError::Url(_))
        ));
        for bad in ["", "*", "*.", "a..b", "-a.com", "x.com:", "*x.com", "a b"] {
            assert!(bad.parse::<AllowEntry>().is_err(), "{bad:?}");
        }
        for bad in ["x.com:0", "x.com:65536", "x.com:http"] {
            assert!(
                matches!(bad.parse::<AllowEntry>(), Err(AllowError::Port(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            "open".parse::<NetworkMode>(),
            Err(AllowError::Mode(_))
        ));
    }
}
