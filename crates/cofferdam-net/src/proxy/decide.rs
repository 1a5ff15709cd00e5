//! The decisions of the egress driver, pure: which names the resolver answers, the synthetic
//! addresses it hands out, and whether a connection (by its destination address, the name the
//! resolver gave for it, and the name the client claims in SNI or `Host`) goes upstream and
//! where to.

use crate::allow::{AllowEntry, HostPattern};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// The first synthetic address (198.18.0.0/15 is reserved for benchmarking, never routed on
/// the internet): every allowed name the resolver answers gets one, so a later connection to
/// it is checked by that name.
pub const SYNTHETIC_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// How many synthetic addresses there are (the /15, less the first).
const SYNTHETIC_COUNT: u32 = (1 << 17) - 2;

/// The entry that allows `host` (a name or an address literal) on `port`. A loopback
/// address also matches a `localhost` entry.
pub fn rule_for<'a>(allow: &'a [AllowEntry], host: &str, port: u16) -> Option<&'a AllowEntry> {
    let loopback = host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback());
    allow
        .iter()
        .find(|e| e.allows(host, port) || (loopback && e.allows("localhost", port)))
}

/// Whether the resolver answers `name`: some entry names it (on any port). Address entries
/// name no host.
pub fn name_allowed(allow: &[AllowEntry], name: &str) -> bool {
    allow.iter().any(|e| match &e.host {
        HostPattern::Addr(_) => false,
        _ => e.ports.first().is_some_and(|&p| e.allows(name, p)),
    })
}

/// The names the resolver answered, and their synthetic addresses.
#[derive(Debug, Default)]
pub struct Synthetic {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
}

impl Synthetic {
    /// The address for `name`, handing out the next one the first time. `None` when the
    /// range is exhausted.
    pub fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        let n = u32::try_from(self.by_name.len()).ok()?;
        if n >= SYNTHETIC_COUNT {
            return None;
        }
        let addr = Ipv4Addr::from(u32::from(SYNTHETIC_BASE) + n);
        self.by_name.insert(name.to_owned(), addr);
        self.by_addr.insert(addr, name.to_owned());
        Some(addr)
    }

    /// The name an address was handed out for.
    pub fn name_of(&self, addr: IpAddr) -> Option<&str> {
        match addr {
            IpAddr::V4(a) => self.by_addr.get(&a).map(String::as_str),
            IpAddr::V6(a) => a
                .to_ipv4_mapped()
                .and_then(|a| self.by_addr.get(&a))
                .map(String::as_str),
        }
    }
}

/// Whether `addr` belongs to the host or to a private network, which a name must never lead
/// to (an address entry may): loopback, unspecified, 0.0.0.0/8, link-local (169.254.0.0/16,
/// where cloud metadata services answer, and fe80::/10), private (10/8, 172.16/12,
/// 192.168/16), shared (100.64.0.0/10, where some clouds put their metadata), unique-local
/// (fc00::/7, AWS's IPv6 metadata among them) and site-local (fec0::/10), multicast and
/// broadcast; IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64 64:ff9b::/96,
/// 6to4 2002::/16) are judged by it, and the local-use NAT64 prefix 64:ff9b:1::/48 and the
/// rest of ::/96 are refused whole. The addresses of the host's own interfaces are checked
/// apart ([`outside_the_host`]).
pub fn host_internal(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_loopback()
                || a.is_unspecified()
                || a.is_link_local()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_private()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(a) => {
            let seg = a.segments();
            let embedded = |hi: u16, lo: u16| {
                IpAddr::V4(Ipv4Addr::new(
                    (hi >> 8) as u8,
                    (hi & 0xff) as u8,
                    (lo >> 8) as u8,
                    (lo & 0xff) as u8,
                ))
            };
            if let Some(v4) = a.to_ipv4_mapped() {
                return host_internal(IpAddr::V4(v4));
            }
            if seg[..6] == [0; 6] {
                // ::/96, IPv4-compatible (deprecated) and :: / ::1 themselves.
                return true;
            }
            if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return host_internal(embedded(seg[6], seg[7]));
            }
            if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1 {
                return true;
            }
            if seg[0] == 0x2002 {
                return host_internal(embedded(seg[1], seg[2]));
            }
            a.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00
                || (seg[0] & 0xffc0) == 0xfe80
                || (seg[0] & 0xffc0) == 0xfec0
        }
    }
}

/// The addresses a name resolved to that it may lead to: not [`host_internal`] and not one
/// of the host's own interface addresses (`local`), unless `explicitly_allowed` says an
/// address entry names that address. `None` when that leaves none of a non-empty answer.
pub fn outside_the_host(
    addrs: Vec<std::net::SocketAddr>,
    local: &std::collections::HashSet<IpAddr>,
    explicitly_allowed: impl Fn(IpAddr) -> bool,
) -> Option<Vec<std::net::SocketAddr>> {
    let had = !addrs.is_empty();
    let kept: Vec<_> = addrs
        .into_iter()
        .filter(|a| {
            let ip = a.ip().to_canonical();
            !(host_internal(ip) || local.contains(&ip)) || explicitly_allowed(ip)
        })
        .collect();
    (!had || !kept.is_empty()).then_some(kept)
}

/// Where an allowed name goes: `localhost` is the host's loopback, deliberately (an entry
/// naming it says so); every other name is resolved on the host, never to a host-internal
/// address ([`outside_the_host`]).
fn upstream_for(name: &str) -> Upstream {
    if name.eq_ignore_ascii_case("localhost") {
        Upstream::Addr(IpAddr::V4(Ipv4Addr::LOCALHOST))
    } else {
        Upstream::Name(name.to_owned())
    }
}

/// Where an allowed connection goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// Resolve this name on the host and connect to it.
    Name(String),
    /// Connect to this address (an address entry: loopback services on the host, typically).
    Addr(IpAddr),
}

/// A decision about one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go upstream.
    Allow {
        /// The destination as checked.
        host: String,
        /// The entry that matched.
        rule: String,
        /// Where to connect.
        upstream: Upstream,
    },
    /// Refuse.
    Deny {
        /// The destination as checked.
        host: String,
        /// Why, for the reviewer.
        reason: &'static str,
    },
}

/// The decision for a transparent connection to `dest`:`port`. `given` is the name the
/// resolver handed `dest` out for (a synthetic address), `claimed` the name the client put
/// in SNI or `Host`, when it sent one.
pub fn decide_transparent(
    allow: &[AllowEntry],
    dest: IpAddr,
    given: Option<&str>,
    port: u16,
    claimed: Option<&str>,
) -> Verdict {
    match given {
        Some(name) => {
            if let Some(c) = claimed
                && !c.eq_ignore_ascii_case(name)
            {
                return Verdict::Deny {
                    host: c.to_owned(),
                    reason: "the name in SNI/Host differs from the name the address was resolved for",
                };
            }
            match rule_for(allow, name, port) {
                Some(rule) => Verdict::Allow {
                    host: name.to_owned(),
                    rule: rule.to_string(),
                    upstream: upstream_for(name),
                },
                None => Verdict::Deny {
                    host: name.to_owned(),
                    reason: "the name is not allowed on this port",
                },
            }
        }
        None => {
            let host = dest.to_canonical().to_string();
            match rule_for(allow, &host, port) {
                Some(rule) => Verdict::Allow {
                    rule: rule.to_string(),
                    upstream: Upstream::Addr(dest.to_canonical()),
                    host,
                },
                None => Verdict::Deny {
                    host,
                    reason: "the address is not allowed on this port",
                },
            }
        }
    }
}

/// The decision for a proxy request to `host`:`port` (a name, an address literal, or a
/// synthetic address the resolver gave).
pub fn decide_proxy(allow: &[AllowEntry], synthetic: &Synthetic, host: &str, port: u16) -> Verdict {
    if let Ok(addr) = host.parse::<IpAddr>() {
        return decide_transparent(allow, addr, synthetic.name_of(addr), port, None);
    }
    match rule_for(allow, host, port) {
        Some(rule) => Verdict::Allow {
            host: host.to_owned(),
            rule: rule.to_string(),
            upstream: upstream_for(host),
        },
        None => Verdict::Deny {
            host: host.to_owned(),
            reason: "the name is not allowed on this port",
        },
    }
}

/// The longest destination a denial line names; longer ones are cut (with `...`).
const DENIAL_HOST_MAX: usize = 255;

/// What a denied workload is told, without the `cofferdam: ` prefix: the destination and
/// the `--allow-net` entry that would allow it. Plain ASCII whatever `host` holds: every
/// byte outside a host name's characters is percent-escaped, so nothing of the workload's
/// own bytes reaches its terminal or an HTTP header unescaped.
pub fn denial_reason(host: &str, port: u16) -> String {
    let mut h = String::new();
    for b in host.bytes().take(DENIAL_HOST_MAX) {
        if b.is_ascii_alphanumeric() || b"-._:*".contains(&b) {
            h.push(char::from(b));
        } else {
            h.push_str(&format!("%{b:02X}"));
        }
    }
    if host.len() > DENIAL_HOST_MAX {
        h.push_str("...");
    }
    let v6 = h.contains(':');
    // A bare entry means ports 80 and 443; any other port is named.
    let entry = match (port, v6) {
        (80 | 443, _) => h.clone(),
        (_, true) => format!("[{h}]:{port}"),
        (_, false) => format!("{h}:{port}"),
    };
    let dest = match port {
        80 | 443 => h,
        _ => entry.clone(),
    };
    format!("{dest} is not in the allowlist; allow it with --allow-net {entry}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> Vec<AllowEntry> {
        entries.iter().map(|e| e.parse().unwrap()).collect()
    }

    #[test]
    fn names_get_stable_synthetic_addresses() {
        let mut s = Synthetic::default();
        let a = s.address_for("svc.test").unwrap();
        assert_eq!(a, SYNTHETIC_BASE);
        assert_eq!(s.address_for("svc.test"), Some(a));
        let b = s.address_for("api.test").unwrap();
        assert_ne!(a, b);
        assert_eq!(s.name_of(IpAddr::V4(b)), Some("api.test"));
        assert_eq!(s.name_of("198.18.9.9".parse().unwrap()), None);
    }

    #[test]
    fn the_resolver_answers_named_entries_only() {
        let a = allow(&["svc.test:8080", "*.pypi.org", "127.0.0.1:9000"]);
        assert!(name_allowed(&a, "svc.test"));
        assert!(name_allowed(&a, "files.pypi.org"));
        assert!(!name_allowed(&a, "pypi.org"));
        assert!(!name_allowed(&a, "other.test"));
        assert!(!name_allowed(&a, "127.0.0.1"));
    }

    #[test]
    fn a_synthetic_address_is_checked_by_its_name_and_the_claim() {
        let a = allow(&["svc.test:8080"]);
        let dest: IpAddr = SYNTHETIC_BASE.into();
        let ok = decide_transparent(&a, dest, Some("svc.test"), 8080, Some("SVC.test"));
        assert!(
            matches!(&ok, Verdict::Allow { upstream: Upstream::Name(n), .. } if n == "svc.test")
        );
        assert!(matches!(
            decide_transparent(&a, dest, Some("svc.test"), 8080, None),
            Verdict::Allow { .. }
        ));
        let fronted = decide_transparent(&a, dest, Some("svc.test"), 8080, Some("other.test"));
        assert!(matches!(&fronted, Verdict::Deny { host, .. } if host == "other.test"));
        assert!(matches!(
            decide_transparent(&a, dest, Some("svc.test"), 9090, None),
            Verdict::Deny { .. }
        ));
    }

    #[test]
    fn names_never_lead_to_host_internal_addresses() {
        use std::collections::HashSet;
        use std::net::SocketAddr;
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let none = HashSet::new();
        let never = |_: IpAddr| false;
        for internal in [
            "127.0.0.1:443",
            "127.9.9.9:443",
            "0.0.0.0:443",
            "0.1.2.3:443",
            "169.254.169.254:80",
            "10.0.0.1:443",
            "172.17.0.1:2375",
            "192.168.1.1:80",
            "100.100.100.200:80",
            "224.0.0.1:443",
            "255.255.255.255:443",
            "[::1]:443",
            "[::]:443",
            "[::127.0.0.1]:443",
            "[fe80::1]:443",
            "[fec0::1]:443",
            "[fd00:ec2::254]:80",
            "[ff02::1]:443",
            "[::ffff:127.0.0.1]:443",
            "[::ffff:169.254.169.254]:80",
            "[64:ff9b::a9fe:a9fe]:80",
            "[64:ff9b:1::1]:80",
            "[2002:a9fe:a9fe::1]:80",
        ] {
            assert!(host_internal(sa(internal).ip()), "{internal}");
            assert_eq!(
                outside_the_host(vec![sa(internal)], &none, never),
                None,
                "{internal}"
            );
        }
        for outside in [
            "93.184.216.34:443",
            "100.128.0.1:443",
            "[2606:4700::1]:443",
            "[64:ff9b::5db8:d822]:443",
            "[2002:5db8:d822::1]:443",
        ] {
            assert!(!host_internal(sa(outside).ip()), "{outside}");
        }
        assert_eq!(
            outside_the_host(
                vec![sa("127.0.0.1:443"), sa("93.184.216.34:443")],
                &none,
                never
            ),
            Some(vec![sa("93.184.216.34:443")])
        );
        assert_eq!(outside_the_host(vec![], &none, never), Some(vec![]));
        // The host's own public address, and an address entry that names one.
        let own: HashSet<IpAddr> = ["203.0.113.7".parse().unwrap()].into();
        assert_eq!(
            outside_the_host(vec![sa("203.0.113.7:443")], &own, never),
            None
        );
        let entry = |ip: IpAddr| ip == "10.0.0.5".parse::<IpAddr>().unwrap();
        assert_eq!(
            outside_the_host(vec![sa("10.0.0.5:443")], &none, entry),
            Some(vec![sa("10.0.0.5:443")])
        );
        // `localhost` is the host's loopback by its entry, not by resolution.
        let a = allow(&["localhost:3000"]);
        let v = decide_proxy(&a, &Synthetic::default(), "localhost", 3000);
        assert!(
            matches!(&v, Verdict::Allow { upstream: Upstream::Addr(ip), .. } if ip.is_loopback()),
            "{v:?}"
        );
    }

    #[test]
    fn addresses_need_an_address_entry_and_loopback_matches_localhost() {
        let a = allow(&["127.0.0.1:8080", "localhost:3000", "svc.test:8080"]);
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(matches!(
            decide_transparent(&a, lo, None, 8080, Some("anything")),
            Verdict::Allow { upstream: Upstream::Addr(x), .. } if x == lo
        ));
        assert!(matches!(
            decide_transparent(&a, lo, None, 3000, None),
            Verdict::Allow { .. }
        ));
        assert!(matches!(
            decide_transparent(&a, lo, None, 8081, None),
            Verdict::Deny { .. }
        ));
        // A real address with an allowed name in SNI is still an unallowed address.
        let real: IpAddr = "93.184.216.34".parse().unwrap();
        assert!(matches!(
            decide_transparent(&a, real, None, 8080, Some("svc.test")),
            Verdict::Deny { .. }
        ));
    }

    #[test]
    fn proxy_targets_are_checked_by_name_or_address() {
        let a = allow(&["svc.test:8080", "127.0.0.1:9000"]);
        let mut s = Synthetic::default();
        let syn = s.address_for("svc.test").unwrap().to_string();
        assert!(matches!(
            decide_proxy(&a, &s, "svc.test", 8080),
            Verdict::Allow { .. }
        ));
        assert!(matches!(
            decide_proxy(&a, &s, &syn, 8080),
            Verdict::Allow { upstream: Upstream::Name(n), .. } if n == "svc.test"
        ));
        assert!(matches!(
            decide_proxy(&a, &s, "other.test", 8080),
            Verdict::Deny { .. }
        ));
        assert!(matches!(
            decide_proxy(&a, &s, "127.0.0.1", 9000),
            Verdict::Allow { .. }
        ));
        assert!(matches!(
            decide_proxy(&a, &s, "127.0.0.1", 9001),
            Verdict::Deny { .. }
        ));
    }

    #[test]
    fn a_denial_names_the_entry_that_allows_it_in_plain_ascii() {
        assert_eq!(
            denial_reason("denied.test", 443),
            "denied.test is not in the allowlist; allow it with --allow-net denied.test"
        );
        assert_eq!(
            denial_reason("127.0.0.1", 8080),
            "127.0.0.1:8080 is not in the allowlist; allow it with --allow-net 127.0.0.1:8080"
        );
        assert_eq!(
            denial_reason("::1", 8080),
            "[::1]:8080 is not in the allowlist; allow it with --allow-net [::1]:8080"
        );
        let hostile = denial_reason("a\x1b[31m\r\nSet-Cookie: x=\"y\"\u{e9}", 80);
        assert!(hostile.starts_with("a%1B%5B31m%0D%0ASet-Cookie:%20x%3D%22y%22%C3%A9 "));
        assert!(
            hostile.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "{hostile}"
        );
        let long = denial_reason(&"a".repeat(1000), 80);
        assert!(long.len() < 600 && long.contains("..."), "{long}");
    }
}
