//! `cofferdam review JOB --web`: a page on 127.0.0.1 to review a job's stage like a pull
//! request and apply or drop it. Owns the listening socket, the token, the browser launch
//! and the server's lifetime (Ctrl-C, or the page closed: its heartbeat stops). Who may ask
//! is `guard`'s decision; reading a request is `http`'s; what the page is shown and what
//! Apply, Drop and Comment do is `actions`', which runs this very binary's `status`, `diff`,
//! `apply`, `drop` and `review --comment` so the page can never disagree with the command
//! line. It may not touch the
//! stage or the workdir itself.

mod actions;
mod guard;
mod http;

use crate::cli::ReviewArgs;
use crate::exit::{Failure, OK};
use http::{Request, Response};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the server waits for the next heartbeat once the page has loaded. The page
/// beats every few seconds; browsers slow timers of hidden tabs to one a minute, so this
/// is well above that.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(150);
/// How long after the page says it is closing the server waits for it to come back (a
/// reload closes and reopens it).
const CLOSE_GRACE: Duration = Duration::from_secs(4);
/// How long one connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection's thread shares.
struct Shared {
    /// The token every request must carry.
    token: String,
    /// The port the server listens on (its Host must name it).
    port: u16,
    /// A nonce for the page's inline script and style (the CSP allows nothing else).
    nonce: String,
    /// The job and its workdir.
    target: actions::Target,
    /// When the server stops unless the page beats again; `None` until it first loads.
    deadline: Mutex<Option<Instant>>,
    /// One action or read at a time, so the page never sees an apply half done.
    busy: Mutex<()>,
}

/// `cofferdam review JOB --web`.
pub fn serve(a: &ReviewArgs) -> Result<u8, Failure> {
    let (_env, job) = crate::cmd::jobref::open(&a.job)?;
    let state = job
        .state()
        .map_err(|e| Failure::setup(format!("cannot read job {}'s state: {e}", job.id())))?;
    let listen = a.listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    if !listen.ip().is_loopback() {
        return Err(Failure::usage(format!(
            "--listen {listen}: the review server listens on loopback only (127.0.0.1 or \
             [::1]), since it can apply changes to your workdir; use 127.0.0.1:PORT"
        )));
    }
    let listener = TcpListener::bind(listen).map_err(|e| {
        Failure::setup(format!(
            "cannot listen on {listen}: {e}; pick another port with --listen 127.0.0.1:PORT"
        ))
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::setup(format!("cannot read the listening address: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Failure::setup(format!("cannot set up the listening socket: {e}")))?;
    let random = |what: &str| {
        guard::new_token()
            .map_err(|e| Failure::setup(format!("cannot read random bytes for the {what}: {e}")))
    };
    let shared = Arc::new(Shared {
        token: random("token")?,
        port: bound.port(),
        nonce: random("page nonce")?,
        target: actions::Target::new(&job, state.workdir.clone())?,
        deadline: Mutex::new(None),
        busy: Mutex::new(()),
    });
    let host = match bound {
        SocketAddr::V4(_) => format!("127.0.0.1:{}", bound.port()),
        SocketAddr::V6(_) => format!("[::1]:{}", bound.port()),
    };
    let url = format!("http://{host}/?t={}", shared.token);
    eprintln!(
        "cofferdam: reviewing job {} at the URL below (only this machine can connect; \
         Ctrl-C or closing the page stops the server)",
        job.id()
    );
    crate::write_stdout(format!("{url}\n").as_bytes())?;
    if !a.no_open && has_display() {
        open_browser(&url);
    }
    loop {
        match listener.accept() {
            Ok((conn, peer)) => {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || handle(conn, peer, &shared));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => eprintln!("cofferdam: accepting a connection failed: {e}"),
        }
        let ended = lock(&shared.deadline).is_some_and(|d| Instant::now() >= d);
        if ended {
            // Nothing is half done: an action holds `busy` until its command has ended.
            let _idle = lock(&shared.busy);
            eprintln!("cofferdam: the review page was closed; the server stopped");
            return Ok(OK);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a graphical session is there to open a browser in.
fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// Start `xdg-open URL`, detached; a failure only means the user opens the URL themselves.
fn open_browser(url: &str) {
    use std::process::{Command, Stdio};
    match Command::new("xdg-open")
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!("cofferdam: cannot start xdg-open ({e}); open the URL yourself"),
    }
}

/// Serve one connection: one request, one response.
fn handle(mut conn: TcpStream, peer: SocketAddr, shared: &Shared) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(READ_TIMEOUT));
    let response = match http::read_request(&mut conn) {
        Ok(req) => respond(&req, peer, shared),
        Err(e) => Response::text(400, e.to_string()),
    };
    let _ = http::write_response(&mut conn, &response);
}

fn respond(req: &Request, peer: SocketAddr, shared: &Shared) -> Response {
    let seen = guard::Seen {
        peer: Some(peer.ip()),
        method: &req.method,
        host: req.header("host"),
        origin: req.header("origin"),
        query_token: req.query_param("t"),
        header_token: req.header(guard::TOKEN_HEADER),
    };
    if let Err(refusal) = guard::check(&seen, shared.port, &shared.token) {
        return Response::text(403, format!("refused: {refusal}\n"));
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") => page(shared),
        ("GET", "/api/review") => {
            let _one = lock(&shared.busy);
            Response::json(200, &shared.target.review())
        }
        ("POST", "/api/heartbeat") => {
            *lock(&shared.deadline) = Some(Instant::now() + HEARTBEAT_TIMEOUT);
            Response::json(200, &serde_json::json!({}))
        }
        ("POST", "/api/close") => {
            *lock(&shared.deadline) = Some(Instant::now() + CLOSE_GRACE);
            Response::json(200, &serde_json::json!({}))
        }
        ("POST", "/api/apply") => {
            let selection: actions::Selection = match serde_json::from_slice(&req.body) {
                Ok(s) => s,
                Err(e) => {
                    return Response::text(400, format!("bad selection: {e}\n"));
                }
            };
            let _one = lock(&shared.busy);
            Response::json(200, &shared.target.apply(&selection))
        }
        ("POST", "/api/comment") => {
            let c: actions::CommentRequest = match serde_json::from_slice(&req.body) {
                Ok(c) => c,
                Err(e) => {
                    return Response::text(400, format!("bad comment: {e}\n"));
                }
            };
            let _one = lock(&shared.busy);
            Response::json(200, &shared.target.comment(&c))
        }
        ("POST", "/api/drop") => {
            let selection: actions::Selection = if req.body.is_empty() {
                actions::Selection::default()
            } else {
                match serde_json::from_slice(&req.body) {
                    Ok(s) => s,
                    Err(e) => {
                        return Response::text(400, format!("bad selection: {e}\n"));
                    }
                }
            };
            let _one = lock(&shared.busy);
            Response::json(200, &shared.target.drop_selected(&selection))
        }
        _ => Response::text(404, "not found\n"),
    }
}

/// The page: one HTML document with its script and style inline, under a CSP that allows
/// only those (by nonce) and requests to this server. Data reaches it as JSON and is put
/// into the document as text, never as markup.
fn page(shared: &Shared) -> Response {
    let html = include_str!("assets/index.html")
        .replace("{{STYLE}}", include_str!("assets/app.css"))
        .replace("{{HIGHLIGHT}}", include_str!("assets/highlight.js"))
        .replace("{{SCRIPT}}", include_str!("assets/app.js"))
        .replace("{{NONCE}}", &shared.nonce);
    Response {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: html.into_bytes(),
        csp: Some(format!(
            "default-src 'none'; script-src 'nonce-{n}'; style-src 'nonce-{n}'; \
             connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
            n = shared.nonce
        )),
    }
}
