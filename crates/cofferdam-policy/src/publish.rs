//! `--publish [HOST_ADDR:]HOST_PORT:PORT`: a TCP port the workload listens on inside the
//! sandbox, made reachable from the host on HOST_ADDR:HOST_PORT (127.0.0.1 unless another
//! address is written out). Inbound only: a mapping never widens what the workload may
//! reach.
//!
//! Owns the mapping's syntax, its checks (one mapping per host address and port, a
//! non-loopback address only when written out, which warns) and its wire form in the plan,
//! the bundle and the scope report. Pure: it binds nothing (the supervisor's forwarder,
//! `cofferdam_net::forward`, does).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

/// One published port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishEntry {
    /// The host address the supervisor listens on.
    pub host_addr: IpAddr,
    /// The host port the supervisor listens on (0: one the kernel picks, told at the start).
    pub host_port: u16,
    /// The port the workload listens on inside the sandbox, on 127.0.0.1.
    pub port: u16,
}

/// Why a `--publish` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// Not `[HOST_ADDR:]HOST_PORT:PORT`.
    #[error(
        "expected [HOST_ADDR:]HOST_PORT:PORT, e.g. 8080:8000 or 127.0.0.1:8080:8000 \
         ([::1]:8080:8000 for IPv6)"
    )]
    Syntax,
    /// A port that is no number from 1 to 65535 (the host port may be 0).
    #[error("`{0}` is not a port: give a number from 1 to 65535")]
    Port(String),
    /// A host address that is no IP address.
    #[error("`{0}` is not an IP address: give one such as 127.0.0.1 or [::1] (no names)")]
    Address(String),
    /// Two mappings on one host address and port.
    #[error("{0} is published twice: give each host address and port once")]
    Twice(String),
}

impl PublishEntry {
    /// The host socket address.
    pub fn host(&self) -> SocketAddr {
        SocketAddr::new(self.host_addr, self.host_port)
    }

    /// Whether only this host's own processes can reach the host side.
    pub fn is_loopback(&self) -> bool {
        self.host_addr.is_loopback()
    }

    /// The warning for a mapping other hosts can reach, when it is one.
    pub fn exposure_warning(&self) -> Option<String> {
        (!self.is_loopback()).then(|| {
            format!(
                "--publish {self}: the sandbox's port {} is reachable from other machines on \
                 {} (not loopback); anyone who can reach that address talks to the workload",
                self.port,
                self.host()
            )
        })
    }
}

impl fmt::Display for PublishEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host(), self.port)
    }
}

fn port(s: &str, zero_ok: bool) -> Result<u16, PublishError> {
    match s.parse::<u16>() {
        Ok(0) if !zero_ok => Err(PublishError::Port(s.to_owned())),
        Ok(p) if s.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(PublishError::Port(s.to_owned())),
    }
}

impl FromStr for PublishEntry {
    type Err = PublishError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, rest) = if let Some(v6) = s.strip_prefix('[') {
            let (a, rest) = v6.split_once("]:").ok_or(PublishError::Syntax)?;
            (Some(a), rest)
        } else {
            match s.matches(':').count() {
                1 => (None, s),
                2 => {
                    let (a, rest) = s.split_once(':').ok_or(PublishError::Syntax)?;
                    (Some(a), rest)
                }
                _ => return Err(PublishError::Syntax),
            }
        };
        let (host_port, inner) = rest.split_once(':').ok_or(PublishError::Syntax)?;
        let host_addr = match addr {
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(a) => a
                .parse::<IpAddr>()
                .map_err(|_| PublishError::Address(a.to_owned()))?,
        };
        Ok(PublishEntry {
            host_addr,
            host_port: port(host_port, true)?,
            port: port(inner, false)?,
        })
    }
}

/// Parse every `--publish` value; one host address and port (other than 0) may be
/// published once.
pub fn parse_all(values: &[String]) -> Result<Vec<PublishEntry>, (String, PublishError)> {
    let mut out: Vec<PublishEntry> = Vec::new();
    for v in values {
        let e: PublishEntry = v.parse().map_err(|e| (v.clone(), e))?;
        if e.host_port != 0 && out.iter().any(|o| o.host() == e.host()) {
            return Err((v.clone(), PublishError::Twice(e.host().to_string())));
        }
        out.push(e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn e(s: &str) -> Result<PublishEntry, PublishError> {
        s.parse()
    }

    #[test]
    fn the_forms_and_their_defaults() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(
            e("8080:8000"),
            Ok(PublishEntry {
                host_addr: lo,
                host_port: 8080,
                port: 8000
            })
        );
        let any = e("0.0.0.0:80:8000").unwrap();
        assert_eq!(any.host_addr, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert!(!any.is_loopback());
        assert!(any.exposure_warning().unwrap().contains("0.0.0.0:80"));
        let v6 = e("[::1]:8080:80").unwrap();
        assert_eq!(v6.host_addr, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(v6.is_loopback() && v6.exposure_warning().is_none());
        assert_eq!(v6.to_string(), "[::1]:8080:80");
        assert_eq!(e("0:8000").unwrap().host_port, 0);
    }

    #[test]
    fn bad_values_name_what_is_wrong() {
        assert_eq!(e("8000"), Err(PublishError::Syntax));
        assert_eq!(e("a:b:c:d"), Err(PublishError::Syntax));
        assert_eq!(e("8080:0"), Err(PublishError::Port("0".into())));
        assert_eq!(e("8080:70000"), Err(PublishError::Port("70000".into())));
        assert_eq!(e("8080:+80"), Err(PublishError::Port("+80".into())));
        assert_eq!(
            e("localhost:8080:80"),
            Err(PublishError::Address("localhost".into()))
        );
        assert_eq!(e("[::1:8080:80"), Err(PublishError::Syntax));
        let twice = parse_all(&["8080:80".into(), "127.0.0.1:8080:81".into()]);
        assert!(matches!(twice, Err((_, PublishError::Twice(_)))));
        assert_eq!(
            parse_all(&["8080:80".into(), "8081:80".into()])
                .unwrap()
                .len(),
            2
        );
    }
}
