//! Who may talk to the review server: pure decisions on a parsed request (peer, Host,
//! token, Origin), unit tested here. It owns no socket and reads nothing from the host.
//!
//! The token travels in the URL the user opens (`?t=`) and, for every request that changes
//! something, in the `X-Cofferdam-Token` header, which a page of another origin cannot set
//! without a CORS preflight this server never grants. The Host check stops DNS rebinding
//! (a foreign name resolved to 127.0.0.1 still sends its own name); the Origin check stops a
//! cross-site form post even if the token leaked into that site.

use std::net::IpAddr;

/// The header that carries the token on state-changing requests.
pub const TOKEN_HEADER: &str = "x-cofferdam-token";

/// What the guard needs of one request.
#[derive(Debug, Clone, Default)]
pub struct Seen<'a> {
    /// The peer's address.
    pub peer: Option<IpAddr>,
    /// The method (`GET`, `POST`, …).
    pub method: &'a str,
    /// The `Host` header, if any.
    pub host: Option<&'a str>,
    /// The `Origin` header, if any.
    pub origin: Option<&'a str>,
    /// The `t` query parameter, if any.
    pub query_token: Option<&'a str>,
    /// The token header, if any.
    pub header_token: Option<&'a str>,
}

/// Why a request is refused (each becomes a 403 with this text; none says the token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The peer is not on this machine's loopback.
    #[error("only this machine's loopback may connect")]
    Peer,
    /// The Host header names another host (DNS rebinding) or is missing.
    #[error("the Host header must be this server's loopback address")]
    Host,
    /// No token, or the wrong one.
    #[error("missing or wrong token: open the URL `cofferdam review --web` printed")]
    Token,
    /// A state-changing request from another origin (or with no Origin at all).
    #[error("cross-origin requests are refused")]
    Origin,
    /// A method the server does not take.
    #[error("only GET and POST are served")]
    Method,
}

/// The Host values this server answers to when it listens on `port`.
pub fn allowed_hosts(port: u16) -> [String; 3] {
    [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ]
}

/// Compare two byte strings in time that depends only on their lengths.
fn same_secret(a: &str, b: &str) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.bytes()
        .zip(b.bytes())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Decide on a request to a server on `port` whose token is `token`.
pub fn check(seen: &Seen<'_>, port: u16, token: &str) -> Result<(), Refusal> {
    if !seen.peer.is_some_and(|p| p.is_loopback()) {
        return Err(Refusal::Peer);
    }
    let hosts = allowed_hosts(port);
    let host = seen.host.ok_or(Refusal::Host)?;
    if !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        return Err(Refusal::Host);
    }
    match seen.method {
        "GET" => {
            let given = seen.query_token.or(seen.header_token);
            if !given.is_some_and(|t| same_secret(t, token)) {
                return Err(Refusal::Token);
            }
            Ok(())
        }
        "POST" => {
            // The header, never the URL: a form or an <img> of another page cannot set it.
            if !seen.header_token.is_some_and(|t| same_secret(t, token)) {
                return Err(Refusal::Token);
            }
            let origin = seen.origin.ok_or(Refusal::Origin)?;
            if !origin.eq_ignore_ascii_case(&format!("http://{host}")) {
                return Err(Refusal::Origin);
            }
            Ok(())
        }
        _ => Err(Refusal::Method),
    }
}

/// A new token: 128 bits from the kernel's random source, as 32 hex digits.
pub fn new_token() -> Result<String, std::io::Error> {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        let n = rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty())?;
        filled += n;
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef0123456789abcdef";

    fn get(token: Option<&'static str>) -> Seen<'static> {
        Seen {
            peer: Some(IpAddr::from([127, 0, 0, 1])),
            method: "GET",
            host: Some("127.0.0.1:8080"),
            origin: None,
            query_token: token,
            header_token: None,
        }
    }

    fn post(origin: Option<&'static str>, header: Option<&'static str>) -> Seen<'static> {
        Seen {
            method: "POST",
            origin,
            header_token: header,
            query_token: None,
            ..get(None)
        }
    }

    #[test]
    fn a_get_needs_the_token() {
        assert_eq!(check(&get(Some(T)), 8080, T), Ok(()));
        assert_eq!(check(&get(None), 8080, T), Err(Refusal::Token));
        assert_eq!(
            check(&get(Some("0123456789abcdef0123456789abcdee")), 8080, T),
            Err(Refusal::Token)
        );
        assert_eq!(check(&get(Some("0123")), 8080, T), Err(Refusal::Token));
    }

    #[test]
    fn other_peers_and_foreign_hosts_are_refused() {
        let mut s = get(Some(T));
        s.peer = Some(IpAddr::from([192, 168, 1, 2]));
        assert_eq!(check(&s, 8080, T), Err(Refusal::Peer));
        s.peer = None;
        assert_eq!(check(&s, 8080, T), Err(Refusal::Peer));
        let mut s = get(Some(T));
        s.host = Some("evil.example:8080");
        assert_eq!(check(&s, 8080, T), Err(Refusal::Host));
        s.host = Some("127.0.0.1:8081");
        assert_eq!(check(&s, 8080, T), Err(Refusal::Host));
        s.host = None;
        assert_eq!(check(&s, 8080, T), Err(Refusal::Host));
        s.host = Some("LOCALHOST:8080");
        assert_eq!(check(&s, 8080, T), Ok(()));
        s.peer = Some(IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
        s.host = Some("[::1]:8080");
        assert_eq!(check(&s, 8080, T), Ok(()));
    }

    #[test]
    fn a_post_needs_the_header_and_the_same_origin() {
        let ok = post(Some("http://127.0.0.1:8080"), Some(T));
        assert_eq!(check(&ok, 8080, T), Ok(()));
        // The token in the URL is not enough for a change.
        let mut url_only = post(Some("http://127.0.0.1:8080"), None);
        url_only.query_token = Some(T);
        assert_eq!(check(&url_only, 8080, T), Err(Refusal::Token));
        assert_eq!(
            check(&post(Some("http://evil.example"), Some(T)), 8080, T),
            Err(Refusal::Origin)
        );
        assert_eq!(
            check(&post(Some("null"), Some(T)), 8080, T),
            Err(Refusal::Origin)
        );
        assert_eq!(check(&post(None, Some(T)), 8080, T), Err(Refusal::Origin));
        // Same host, other scheme or port: another origin.
        assert_eq!(
            check(&post(Some("https://127.0.0.1:8080"), Some(T)), 8080, T),
            Err(Refusal::Origin)
        );
        assert_eq!(
            check(&post(Some("http://localhost:8080"), Some(T)), 8080, T),
            Err(Refusal::Origin),
            "the Origin must match the Host the request was sent to"
        );
    }

    #[test]
    fn other_methods_are_refused() {
        let mut s = get(Some(T));
        s.method = "PUT";
        assert_eq!(check(&s, 8080, T), Err(Refusal::Method));
    }

    #[test]
    fn tokens_are_fresh_and_long() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
