//! Reading the destination a client names in its first bytes, without terminating anything:
//! the server name of a TLS ClientHello (SNI), the `Host` header of an HTTP/1 request, and
//! the target of a proxy request (`CONNECT host:port` or an absolute-form URL). Pure.

/// What the first bytes of a connection say about its destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// More bytes are needed to tell.
    Incomplete,
    /// A TLS ClientHello; the server name when it carries one.
    Tls(Option<String>),
    /// An HTTP/1 request; its `Host` header's host part when present.
    Http(Option<String>),
    /// Neither (another protocol): nothing to check against.
    Other,
}

/// Look at the first bytes of a transparent connection.
pub fn sniff(buf: &[u8]) -> Sniffed {
    match buf.first() {
        None => Sniffed::Incomplete,
        Some(0x16) => tls_server_name(buf),
        Some(b) if b.is_ascii_uppercase() => http_host(buf),
        Some(_) => Sniffed::Other,
    }
}

fn tls_server_name(buf: &[u8]) -> Sniffed {
    // Record header: type 22, version, length.
    if buf.len() < 5 {
        return Sniffed::Incomplete;
    }
    let rec_len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
    let Some(rec) = buf.get(5..5 + rec_len) else {
        return Sniffed::Incomplete;
    };
    parse_client_hello(rec).map_or(Sniffed::Other, Sniffed::Tls)
}

/// The server name of a ClientHello handshake message (`Some(None)`: a ClientHello without
/// one; `None`: not a ClientHello).
fn parse_client_hello(h: &[u8]) -> Option<Option<String>> {
    let mut r = Reader { b: h, pos: 0 };
    if r.u8()? != 1 {
        return None;
    }
    r.skip(3)?; // handshake length
    r.skip(2 + 32)?; // version, random
    let sid = usize::from(r.u8()?);
    r.skip(sid)?;
    let suites = usize::from(r.u16()?);
    r.skip(suites)?;
    let comp = usize::from(r.u8()?);
    r.skip(comp)?;
    if r.pos == h.len() {
        return Some(None);
    }
    let ext_total = usize::from(r.u16()?);
    let end = r.pos.checked_add(ext_total)?.min(h.len());
    while r.pos + 4 <= end {
        let kind = r.u16()?;
        let len = usize::from(r.u16()?);
        if kind != 0 {
            r.skip(len)?;
            continue;
        }
        let _list = r.u16()?;
        let name_type = r.u8()?;
        let name_len = usize::from(r.u16()?);
        let name = r.take(name_len)?;
        if name_type != 0 {
            return Some(None);
        }
        return Some(Some(
            String::from_utf8_lossy(name)
                .trim_end_matches('.')
                .to_ascii_lowercase(),
        ));
    }
    Some(None)
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_be_bytes([s[0], s[1]]))
    }
}

/// The end of an HTTP request head (`\r\n\r\n`), as the index after it.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn http_host(buf: &[u8]) -> Sniffed {
    let Some(end) = head_end(buf) else {
        // A complete first line that is no request line: another protocol (SSH's banner).
        return match buf.windows(2).position(|w| w == b"\r\n") {
            Some(i) if !String::from_utf8_lossy(&buf[..i]).contains(" HTTP/") => Sniffed::Other,
            _ => Sniffed::Incomplete,
        };
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let Some(request_line) = lines.next() else {
        return Sniffed::Other;
    };
    if !request_line.contains(" HTTP/") {
        return Sniffed::Other;
    }
    let host = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("host"))
        .and_then(|(_, v)| split_authority(v.trim(), 80))
        .map(|(h, _)| h);
    Sniffed::Http(host)
}

/// `host[:port]` or `[v6][:port]` → (lowercased host without brackets, port).
pub fn split_authority(a: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(p) => (h, Some(p)),
            None if after.is_empty() => (h, None),
            None => return None,
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (a, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default_port,
    };
    if host.is_empty() {
        return None;
    }
    Some((host.trim_end_matches('.').to_ascii_lowercase(), port))
}

/// A request to the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRequest {
    /// `CONNECT host:port`: a tunnel.
    Connect {
        /// The target host.
        host: String,
        /// The target port.
        port: u16,
    },
    /// An absolute-form request (`GET http://host:port/path HTTP/1.1`), forwarded with its
    /// request line rewritten to origin-form.
    Forward {
        /// The target host.
        host: String,
        /// The target port.
        port: u16,
        /// The request line in origin form, with its line end.
        request_line: String,
    },
}

/// Parse a proxy request's head (`head` ends at the blank line). `None` when it is not one.
pub fn proxy_request(head: &[u8]) -> Option<ProxyRequest> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/") {
        return None;
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target, 443)?;
        return Some(ProxyRequest::Connect { host, port });
    }
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("HTTP://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let authority = authority.rsplit('@').next()?;
    let (host, port) = split_authority(authority, 80)?;
    Some(ProxyRequest::Forward {
        host,
        port,
        request_line: format!("{method} {path} {version}\r\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello record carrying `name` as SNI.
    pub(crate) fn client_hello(name: &str) -> Vec<u8> {
        let mut sni = Vec::new();
        let n = name.as_bytes();
        sni.extend_from_slice(&u16::try_from(n.len() + 3).unwrap().to_be_bytes());
        sni.push(0);
        sni.extend_from_slice(&u16::try_from(n.len()).unwrap().to_be_bytes());
        sni.extend_from_slice(n);
        let mut ext = vec![0x00, 0x0a, 0x00, 0x00]; // an empty other extension first
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&u16::try_from(sni.len()).unwrap().to_be_bytes());
        ext.extend_from_slice(&sni);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&u16::try_from(ext.len()).unwrap().to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&u16::try_from(hs.len()).unwrap().to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn sni_is_read_from_a_client_hello() {
        let ch = client_hello("API.Example.com");
        assert_eq!(sniff(&ch), Sniffed::Tls(Some("api.example.com".into())));
        assert_eq!(sniff(&ch[..ch.len() - 1]), Sniffed::Incomplete);
        assert_eq!(sniff(&ch[..3]), Sniffed::Incomplete);
    }

    #[test]
    fn http_host_is_read_from_the_head() {
        let req = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nhost: Svc.Test:8080\r\n\r\n";
        assert_eq!(sniff(req), Sniffed::Http(Some("svc.test".into())));
        assert_eq!(sniff(b"GET / HTTP/1.1\r\nHost: x"), Sniffed::Incomplete);
        assert_eq!(sniff(b"GET / HTTP/1.0\r\n\r\n"), Sniffed::Http(None));
        assert_eq!(sniff(b"SSH-2.0-OpenSSH\r\n"), Sniffed::Other);
        assert_eq!(sniff(b"SSH-2.0-Open"), Sniffed::Incomplete);
        assert_eq!(sniff(b"\x00\x01binary"), Sniffed::Other);
    }

    #[test]
    fn proxy_requests_parse() {
        assert_eq!(
            proxy_request(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(ProxyRequest::Connect {
                host: "api.example.com".into(),
                port: 443
            })
        );
        assert_eq!(
            proxy_request(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"),
            Some(ProxyRequest::Connect {
                host: "::1".into(),
                port: 8443
            })
        );
        assert_eq!(
            proxy_request(b"GET http://svc.test:8080/a?b HTTP/1.1\r\n\r\n"),
            Some(ProxyRequest::Forward {
                host: "svc.test".into(),
                port: 8080,
                request_line: "GET /a?b HTTP/1.1\r\n".into()
            })
        );
        assert_eq!(
            proxy_request(b"GET http://svc.test HTTP/1.1\r\n\r\n"),
            Some(ProxyRequest::Forward {
                host: "svc.test".into(),
                port: 80,
                request_line: "GET / HTTP/1.1\r\n".into()
            })
        );
        for bad in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"CONNECT host:0 HTTP/1.1\r\n\r\n",
            b"CONNECT host:99999 HTTP/1.1\r\n\r\n",
            b"garbage",
        ] {
            assert_eq!(proxy_request(bad), None, "{bad:?}");
        }
    }
}
