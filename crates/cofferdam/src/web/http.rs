//! One HTTP/1.1 request read from a socket and one response written back, with `httparse`
//! (already built for cofferdam-net's proxy). Every response closes its connection, so there
//! is no keep-alive state to get wrong. It decides nothing: `guard` and `web` do.

use std::io::{Read, Write};

/// The largest request head taken.
const MAX_HEAD: usize = 32 * 1024;
/// The largest request body taken (a selection of paths and hunk ids).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// A parsed request.
#[derive(Debug, Default)]
pub struct Request {
    /// The method.
    pub method: String,
    /// The path without its query.
    pub path: String,
    /// The query string (after `?`), if any.
    pub query: Option<String>,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The query parameter `name`, if present (values are plain tokens: not percent-decoded).
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == name).then_some(v)
        })
    }
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The socket failed or timed out.
    #[error("reading the request: {0}")]
    Io(#[from] std::io::Error),
    /// Not HTTP, or too large.
    #[error("bad request: {0}")]
    Bad(&'static str),
}

/// Read one request from `s`.
pub fn read_request(s: &mut impl Read) -> Result<Request, ReadError> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(ReadError::Bad(
                "the connection closed before a whole request",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let mut out = Request {
                    method: req.method.unwrap_or_default().to_owned(),
                    ..Request::default()
                };
                let target = req.path.unwrap_or("/");
                let (path, query) = match target.split_once('?') {
                    Some((p, q)) => (p, Some(q.to_owned())),
                    None => (target, None),
                };
                out.path = path.to_owned();
                out.query = query;
                for h in req.headers.iter() {
                    let v = std::str::from_utf8(h.value)
                        .map_err(|_| ReadError::Bad("a header is not UTF-8"))?;
                    out.headers
                        .push((h.name.to_ascii_lowercase(), v.trim().to_owned()));
                }
                let len: usize = match out.header("content-length") {
                    Some(v) => v
                        .parse()
                        .map_err(|_| ReadError::Bad("bad Content-Length"))?,
                    None => 0,
                };
                if len > MAX_BODY {
                    return Err(ReadError::Bad("the body is too large"));
                }
                let mut body = buf.split_off(head_len);
                while body.len() < len {
                    let n = s.read(&mut chunk)?;
                    if n == 0 {
                        return Err(ReadError::Bad("the body ended early"));
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
                body.truncate(len);
                out.body = body;
                return Ok(out);
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => return Err(ReadError::Bad("the head is too large")),
            Err(_) => return Err(ReadError::Bad("not an HTTP request")),
        }
    }
}

/// A response: status, content type, body.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The Content-Type.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// A Content-Security-Policy for an HTML page.
    pub csp: Option<String>,
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, v: &serde_json::Value) -> Self {
        Response {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(v).unwrap_or_default(),
            csp: None,
        }
    }

    /// A plain-text response.
    pub fn text(status: u16, text: impl Into<String>) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: text.into().into_bytes(),
            csp: None,
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        _ => "Error",
    }
}

/// Write `r` to `s` and close the exchange.
pub fn write_response(s: &mut impl Write, r: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
         X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    if let Some(csp) = &r.csp {
        head.push_str(&format!("Content-Security-Policy: {csp}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(&r.body)?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_with_a_body_is_read_whole() {
        let raw = b"POST /api/apply?t=abc&x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\
                    Content-Length: 5\r\nX-Cofferdam-Token: k\r\n\r\nhello";
        let r = read_request(&mut &raw[..]).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/api/apply");
        assert_eq!(r.query_param("t"), Some("abc"));
        assert_eq!(r.query_param("y"), None);
        assert_eq!(r.header("x-cofferdam-token"), Some("k"));
        assert_eq!(r.body, b"hello");
    }

    #[test]
    fn garbage_and_short_bodies_are_errors_not_panics() {
        assert!(read_request(&mut &b"\x00\x01\x02 nonsense\r\n\r\n"[..]).is_err());
        assert!(read_request(&mut &b"GET / HTTP/1.1\r\nHost: x\r\n"[..]).is_err());
        let short = b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc";
        assert!(read_request(&mut &short[..]).is_err());
        let huge = b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n";
        assert!(read_request(&mut &huge[..]).is_err());
    }

    #[test]
    fn a_response_closes_and_carries_its_length() {
        let mut out = Vec::new();
        write_response(&mut out, &Response::text(403, "no")).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
        assert!(text.contains("Content-Length: 2\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        assert!(text.ends_with("\r\n\r\nno"));
    }
}
