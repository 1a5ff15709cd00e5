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
    /// An HTTP/1 request head that is refused: nothing goes upstream.
    Malformed(HeadError),
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

/// The most header fields a request head may carry.
const MAX_FIELDS: usize = 100;

/// Why a request head is refused (answered `400`, counted as malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// A line ends in a bare LF, or a CR stands without its LF.
    #[error("a line of the request head ends without CRLF (a bare LF or CR)")]
    BareLineEnd,
    /// Not HTTP/1 request syntax (the parser's reason: whitespace before a colon is a bad
    /// header name).
    #[error("the request head is not HTTP/1 syntax ({0})")]
    Syntax(&'static str),
    /// More than [`MAX_FIELDS`] header fields.
    #[error("the request head has more than {MAX_FIELDS} header fields")]
    TooManyFields,
    /// Two `Host` fields (RFC 9112 §3.2).
    #[error("the request has more than one Host header")]
    DuplicateHost,
    /// A `Host` value that is no `host[:port]`.
    #[error("the Host header is not host[:port]")]
    BadHost,
    /// More than one `Content-Length`, or one that is not a number.
    #[error("the request's Content-Length is repeated or not a number")]
    BadLength,
    /// A `Transfer-Encoding` body, whose end only a chunked parser finds: not forwarded.
    #[error("a request body with Transfer-Encoding is not forwarded; send a Content-Length")]
    TransferEncoding,
    /// The absolute-form target and `Host` name different destinations.
    #[error("the request target and the Host header name different destinations")]
    HostMismatch,
}

/// A parsed HTTP/1 request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The method, as sent.
    pub method: String,
    /// The request target, as sent.
    pub target: String,
    /// The minor version (HTTP/1.x).
    pub minor: u8,
    /// The `Host` value, when there is one.
    pub host: Option<String>,
    /// The body's length (`Content-Length`; 0 without one).
    pub body: u64,
    /// The header fields other than `Host` and the hop-by-hop ones, in order.
    pub fields: Vec<(String, Vec<u8>)>,
    /// The head's length in bytes, blank line included.
    pub len: usize,
}

/// Hop-by-hop fields that are never forwarded (the driver writes its own `Connection`).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "te",
    "upgrade",
];

/// Parse a request head strictly: `Ok(None)` while incomplete. Every line must end in CRLF,
/// at most one `Host` and one numeric `Content-Length`, no `Transfer-Encoding`.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    let scan = &buf[..buf.len().min(HEAD_SCAN)];
    for (i, &b) in scan.iter().enumerate() {
        let bare_lf = b == b'\n' && (i == 0 || scan[i - 1] != b'\r');
        let bare_cr = b == b'\r' && scan.get(i + 1).is_some_and(|&n| n != b'\n');
        if bare_lf || bare_cr {
            return Err(HeadError::BareLineEnd);
        }
        if i >= 3 && &scan[i - 3..=i] == b"\r\n\r\n" {
            break;
        }
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyFields),
        Err(e) => return Err(HeadError::Syntax(syntax(e))),
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Ok(None);
    };
    let mut head = Head {
        method: method.to_owned(),
        target: target.to_owned(),
        minor,
        host: None,
        body: 0,
        fields: Vec::new(),
        len,
    };
    let mut length = None;
    for f in req.headers.iter() {
        let name = f.name.to_ascii_lowercase();
        match name.as_str() {
            "host" => {
                if head.host.is_some() {
                    return Err(HeadError::DuplicateHost);
                }
                let v = std::str::from_utf8(f.value).map_err(|_| HeadError::BadHost)?;
                head.host = Some(v.trim().to_owned());
            }
            "content-length" => {
                let v = std::str::from_utf8(f.value).map_err(|_| HeadError::BadLength)?;
                let v = v.trim();
                if length.is_some() || v.is_empty() || !v.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(HeadError::BadLength);
                }
                length = Some(v.parse::<u64>().map_err(|_| HeadError::BadLength)?);
                head.fields.push((f.name.to_owned(), f.value.to_vec()));
            }
            "transfer-encoding" => return Err(HeadError::TransferEncoding),
            n if HOP_BY_HOP.contains(&n) => {}
            _ => head.fields.push((f.name.to_owned(), f.value.to_vec())),
        }
    }
    // Room for the `Host` and `Connection` the rebuilt head adds.
    if head.fields.len() > MAX_FIELDS - 2 {
        return Err(HeadError::TooManyFields);
    }
    head.body = length.unwrap_or(0);
    Ok(Some(head))
}

/// What httparse's error means, for the record.
fn syntax(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "a bad header name, e.g. whitespace before its colon",
        httparse::Error::HeaderValue => "a control byte in a header value",
        httparse::Error::NewLine => "a bad line end",
        httparse::Error::Token => "a bad method or request target",
        httparse::Error::Version => "not HTTP/1.0 or HTTP/1.1",
        httparse::Error::Status | httparse::Error::TooManyHeaders => "bad syntax",
    }
}

/// How far the line-end check looks (a head longer than this is refused by its reader).
const HEAD_SCAN: usize = 64 * 1024;

impl Head {
    /// The head as it goes upstream: `target` on the request line, `host` as the one
    /// `Host`, the other fields as sent, and `Connection: close`: one request per
    /// connection, so a second request on it is never relayed unchecked.
    pub fn rebuild(&self, target: &str, host: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len + 64);
        out.extend_from_slice(
            format!(
                "{} {} HTTP/1.{}\r\nHost: {host}\r\n",
                self.method, target, self.minor
            )
            .as_bytes(),
        );
        for (name, value) in &self.fields {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        out
    }
}

/// The end of an HTTP request head (`\r\n\r\n`), as the index after it.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Whether the first line (complete or not) reads as an HTTP/1 request line; `None` while
/// no line end has arrived.
fn looks_like_http(buf: &[u8]) -> Option<bool> {
    let i = buf.iter().position(|&b| b == b'\n' || b == b'\r')?;
    Some(String::from_utf8_lossy(&buf[..i]).contains(" HTTP/"))
}

/// The name an HTTP/1 request on a transparent connection goes to: the absolute-form
/// target's host when it has one (origin servers route by it, RFC 9112 §3.2.2), else the
/// `Host` header's. Both present and different is a mismatch.
pub fn request_claim(head: &Head) -> Result<Option<String>, HeadError> {
    let host = match &head.host {
        Some(h) => Some(split_authority(h, 80).ok_or(HeadError::BadHost)?),
        None => None,
    };
    match absolute_authority(&head.target) {
        Some(Ok((name, port))) => match host {
            Some(h) if h != (name.clone(), port) => Err(HeadError::HostMismatch),
            _ => Ok(Some(name)),
        },
        Some(Err(())) => Err(HeadError::BadHost),
        None => Ok(host.map(|(h, _)| h)),
    }
}

fn http_host(buf: &[u8]) -> Sniffed {
    match looks_like_http(buf) {
        None => return Sniffed::Incomplete,
        // A complete first line that is no request line: another protocol (SSH's banner).
        Some(false) => return Sniffed::Other,
        Some(true) => {}
    }
    match parse_head(buf) {
        Ok(None) => Sniffed::Incomplete,
        Ok(Some(head)) => match request_claim(&head) {
            Ok(name) => Sniffed::Http(name),
            Err(e) => Sniffed::Malformed(e),
        },
        Err(e) => Sniffed::Malformed(e),
    }
}

/// The `host[:port]` of an absolute-form `http://` target: `None` when the target is not
/// absolute-form, `Err` when it is but its authority is unusable (userinfo, no host, a bad
/// port).
fn absolute_authority(target: &str) -> Option<Result<(String, u16), ()>> {
    let scheme_end = target.find("://")?;
    if !target[..scheme_end].eq_ignore_ascii_case("http") {
        return Some(Err(()));
    }
    let rest = &target[scheme_end + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if authority.contains('@') {
        return Some(Err(()));
    }
    Some(split_authority(authority, 80).ok_or(()))
}

/// `host[:port]` or `[v6][:port]` → (lowercased host without brackets, port). `None` for
/// anything else: a host of other characters than a name's, a bracketed one that is no
/// IPv6 address, a port that is not 1–65535.
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
    let host = host.trim_end_matches('.');
    if a.starts_with('[') {
        // An IP literal: only an IPv6 address (RFC 3986 §3.2.2).
        host.parse::<std::net::Ipv6Addr>().ok()?;
    } else if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    {
        // A name or an IPv4 address: nothing a DNS name cannot hold.
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
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
    /// An absolute-form request (`GET http://host:port/path HTTP/1.1`), forwarded in origin
    /// form with the target's authority as its one `Host`.
    Forward {
        /// The target host.
        host: String,
        /// The target port.
        port: u16,
        /// The target in origin form (path and query).
        path: String,
        /// The authority as it goes upstream in `Host`.
        authority: String,
    },
}

/// Why a proxy request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// The head itself is refused.
    #[error(transparent)]
    Head(#[from] HeadError),
    /// A target that is neither `CONNECT host:port` nor an absolute `http://` URI without
    /// userinfo.
    #[error("the proxy takes CONNECT host:port or an absolute http:// URI without userinfo")]
    Target,
}

/// The proxy request a parsed head asks for. The `Host` of a forwarded request must name
/// the target's host and port (RFC 9112 §3.2.2: the target wins; a different `Host` is
/// refused rather than passed on to another virtual host).
pub fn proxy_request(head: &Head) -> Result<ProxyRequest, ProxyError> {
    if head.method.eq_ignore_ascii_case("CONNECT") {
        if head.target.contains(['@', '/']) {
            return Err(ProxyError::Target);
        }
        let (host, port) = split_authority(&head.target, 443).ok_or(ProxyError::Target)?;
        return Ok(ProxyRequest::Connect { host, port });
    }
    let (host, port) = match absolute_authority(&head.target) {
        Some(Ok(hp)) => hp,
        _ => return Err(ProxyError::Target),
    };
    if let Some(h) = &head.host
        && split_authority(h, 80) != Some((host.clone(), port))
    {
        return Err(HeadError::HostMismatch.into());
    }
    let rest = &head.target[head.target.find("://").map_or(0, |i| i + 3)..];
    let path = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => format!("/{}", &rest[i..]),
        Some(i) => rest[i..].to_owned(),
        None => "/".to_owned(),
    };
    let shown = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let authority = if port == 80 {
        shown
    } else {
        format!("{shown}:{port}")
    };
    Ok(ProxyRequest::Forward {
        host,
        port,
        path,
        authority,
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

    fn proxy(head: &[u8]) -> Result<ProxyRequest, ProxyError> {
        proxy_request(&parse_head(head)?.ok_or(ProxyError::Target)?)
    }

    #[test]
    fn proxy_requests_parse() {
        assert_eq!(
            proxy(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(ProxyRequest::Connect {
                host: "api.example.com".into(),
                port: 443
            })
        );
        assert_eq!(
            proxy(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"),
            Ok(ProxyRequest::Connect {
                host: "::1".into(),
                port: 8443
            })
        );
        assert_eq!(
            proxy(b"GET http://svc.test:8080/a?b HTTP/1.1\r\nHost: SVC.test:8080\r\n\r\n"),
            Ok(ProxyRequest::Forward {
                host: "svc.test".into(),
                port: 8080,
                path: "/a?b".into(),
                authority: "svc.test:8080".into(),
            })
        );
        assert_eq!(
            proxy(b"GET http://svc.test HTTP/1.1\r\n\r\n"),
            Ok(ProxyRequest::Forward {
                host: "svc.test".into(),
                port: 80,
                path: "/".into(),
                authority: "svc.test".into(),
            })
        );
        assert_eq!(
            proxy(b"GET http://[::1]:81?q HTTP/1.1\r\n\r\n"),
            Ok(ProxyRequest::Forward {
                host: "::1".into(),
                port: 81,
                path: "/?q".into(),
                authority: "[::1]:81".into(),
            })
        );
        for bad in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"CONNECT host:0 HTTP/1.1\r\n\r\n",
            b"CONNECT host:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT user@host:443 HTTP/1.1\r\n\r\n",
            b"CONNECT host:443/x HTTP/1.1\r\n\r\n",
            b"GET http://user@svc.test/ HTTP/1.1\r\n\r\n",
            b"GET http://svc.test@other.test/ HTTP/1.1\r\n\r\n",
            b"GET https://svc.test/ HTTP/1.1\r\n\r\n",
            b"GET http://svc.test:x/ HTTP/1.1\r\n\r\n",
            b"GET http://./ HTTP/1.1\r\n\r\n",
            b"CONNECT ..:443 HTTP/1.1\r\n\r\n",
            b"CONNECT [[v.x]:443 HTTP/1.1\r\n\r\n",
            b"CONNECT [v.x]:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a%2fb:443 HTTP/1.1\r\n\r\n",
            b"GET http://[[v.x]?q HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(proxy(bad), Err(ProxyError::Target), "{bad:?}");
        }
    }

    #[test]
    fn a_host_other_than_the_target_is_refused() {
        for head in [
            &b"GET http://svc.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n"[..],
            b"GET http://svc.test/ HTTP/1.1\r\nHost: svc.test:81\r\n\r\n",
            b"GET http://svc.test:81/ HTTP/1.1\r\nHost: svc.test\r\n\r\n",
        ] {
            assert_eq!(
                proxy(head),
                Err(ProxyError::Head(HeadError::HostMismatch)),
                "{head:?}"
            );
        }
        let t = b"GET http://other.test/ HTTP/1.1\r\nHost: svc.test\r\n\r\n";
        assert_eq!(sniff(t), Sniffed::Malformed(HeadError::HostMismatch));
        let t = b"GET http://other.test/ HTTP/1.1\r\n\r\n";
        assert_eq!(sniff(t), Sniffed::Http(Some("other.test".into())));
    }

    #[test]
    fn heads_are_parsed_strictly() {
        let bad: &[(&[u8], HeadError)] = &[
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                HeadError::DuplicateHost,
            ),
            (
                b"GET / HTTP/1.1\r\nhost: a\r\nHOST: a\r\n\r\n",
                HeadError::DuplicateHost,
            ),
            (b"GET / HTTP/1.1\nHost: a\n\n", HeadError::BareLineEnd),
            (b"GET / HTTP/1.1\r\nHost: a\n\r\n", HeadError::BareLineEnd),
            (
                b"GET /\r HTTP/1.1\r\nHost: a\r\n\r\n",
                HeadError::BareLineEnd,
            ),
            (
                b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                HeadError::BadLength,
            ),
            (
                b"GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
                HeadError::BadLength,
            ),
            (
                b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                HeadError::TransferEncoding,
            ),
        ];
        for (head, want) in bad {
            assert_eq!(parse_head(head), Err(*want), "{head:?}");
        }
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"),
            Err(HeadError::Syntax(_))
        ));
        assert!(matches!(
            sniff(b"GET / HTTP/1.1\r\nHost : other\r\n\r\n"),
            Sniffed::Malformed(HeadError::Syntax(_))
        ));
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_FIELDS + 1)
        );
        assert_eq!(parse_head(many.as_bytes()), Err(HeadError::TooManyFields));
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None));
    }

    #[test]
    fn a_rebuilt_head_has_one_host_and_closes() {
        let h = parse_head(
            b"POST http://a/x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nProxy-Authorization: s\r\nContent-Length: 3\r\nX-A: b\r\n\r\nabcGET",
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.body, 3);
        assert_eq!(
            String::from_utf8(h.rebuild("/x", "a")).unwrap(),
            "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nX-A: b\r\nConnection: close\r\n\r\n"
        );
    }
}
