//! The review page (issue 22) in a real headless browser: `cofferdam review --web
//! --no-open` serves a job made by a sealed run, chromium (driven by chromedriver through
//! the W3C WebDriver HTTP API, with a tiny client here) loads it, a hunk is ticked and
//! applied, and the host file has exactly that hunk; a request without the token, a
//! cross-origin POST and a foreign Host header are refused with 403; file names that are
//! markup render as text; closing the page stops the server.
//!
//! With `COFFERDAM_WEB_SCREENSHOTS=DIR` the test also saves the main views as PNGs there
//! (how `docs/review-*.png` are made).

use crate::apply::run;
use crate::common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TWELVE: &str = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\n";
/// Names a careless page would turn into markup (no `/`: a file name cannot hold one).
const IMG_NAME: &str = "<img src=x onerror=window.pwned=1>.txt";
const SCRIPT_NAME: &str = "<script>window.pwned=2<.txt";

/// A child killed when the test ends, however it ends.
struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 exchange on its own connection: status and body. The body is read by its
/// Content-Length (chromedriver says `Connection: close` but keeps the socket open).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).unwrap_or(0);
        if n == 0 {
            return (0, String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&out[..head_end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while out.len() < head_end + len {
        let n = s.read(&mut chunk).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    (
        status,
        String::from_utf8_lossy(&out[head_end..]).into_owned(),
    )
}

/// A WebDriver session.
struct Driver {
    addr: String,
    session: String,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Driver {
    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let (status, text) = http(
            &self.addr,
            method,
            &path,
            &[("Content-Type", "application/json")],
            &body,
        );
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(status, 200, "WebDriver {method} {path}: {text}");
        v["value"].clone()
    }

    fn script(&self, js: &str) -> Value {
        self.call("POST", "/execute/sync", json!({"script": js, "args": []}))
    }

    fn find_all(&self, css: &str) -> Vec<String> {
        let v = self.call(
            "POST",
            "/elements",
            json!({"using": "css selector", "value": css}),
        );
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e[ELEMENT].as_str().unwrap().to_owned())
            .collect()
    }

    /// The elements matching `css`, waiting up to 20 s for the first.
    fn wait_for(&self, css: &str) -> Vec<String> {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let found = self.find_all(css);
            if !found.is_empty() {
                return found;
            }
            assert!(Instant::now() < until, "no element {css} appeared");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn click(&self, element: &str) {
        self.call("POST", &format!("/element/{element}/click"), json!({}));
    }

    fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("COFFERDAM_WEB_SCREENSHOTS") else {
            return;
        };
        let b64 = self.call("GET", "/screenshot", Value::Null);
        let png = base64_decode(b64.as_str().unwrap());
        std::fs::write(Path::new(&dir).join(name), png).unwrap();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            _ => 63,
        }
    };
    let clean: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | (val(c) << (18 - 6 * i)));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn on_path(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `cofferdam review ID --web --no-open` in the sandbox's environment: the child and the
/// URL it printed.
fn serve(s: &Sandbox, id: &str) -> (Killed, String) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("cofferdam"))
        .env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(["review", id, "--web", "--no-open"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("/?t="),
        "{url:?}"
    );
    (Killed(child), url)
}

#[test]
fn the_review_page_applies_a_hunk_in_a_real_browser_and_refuses_strangers() {
    if !crate::apply::sealed_host()
        || !require("chromium", on_path("chromium"))
        || !require("chromedriver", on_path("chromedriver"))
    {
        return;
    }
    let s = Sandbox::new();
    s.write("f.txt", TWELVE);
    std::fs::create_dir(s.work.path().join("src")).unwrap();
    std::fs::write(
        s.work.path().join("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    let id = run(
        &s,
        &format!(
            "sed -i 's/^l2$/L2/; s/^l11$/L11/' f.txt && echo one > '{IMG_NAME}' && echo two > '{SCRIPT_NAME}' \
             && printf 'fn main() {{\\n    let n = 42; // the answer\\n    println!(\"{{n}}\");\\n}}\\n' > src/main.rs \
             && mkdir -p vendor/lib && for i in 1 2 3 4 5 6 7 8 9; do echo $i > vendor/lib/f$i.txt; done"
        ),
    );
    let (mut server, url) = serve(&s, &id);
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, query) = rest.split_once('/').unwrap();
    let token = query.strip_prefix("?t=").unwrap().to_owned();
    let origin = format!("http://{addr}");

    // Strangers: no token, a wrong one, a foreign Host (DNS rebinding), a cross-origin
    // POST, a POST with the token only in the URL.
    assert_eq!(http(addr, "GET", "/", &[], "").0, 403);
    assert_eq!(http(addr, "GET", "/api/review?t=0000", &[], "").0, 403);
    let with_token = format!("/api/review?t={token}");
    assert_eq!(http(addr, "GET", &with_token, &[], "").0, 200);
    let foreign_host = format!("evil.example:{}", addr.rsplit(':').next().unwrap());
    assert_eq!(
        http(addr, "GET", &with_token, &[("Host", &foreign_host)], "").0,
        403
    );
    let all = r#"{"paths":["f.txt"]}"#;
    let cross = http(
        addr,
        "POST",
        "/api/apply",
        &[
            ("X-Cofferdam-Token", &token),
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        all,
    );
    assert_eq!(cross.0, 403, "{cross:?}");
    let no_origin = http(
        addr,
        "POST",
        "/api/apply",
        &[("X-Cofferdam-Token", &token)],
        all,
    );
    assert_eq!(no_origin.0, 403, "{no_origin:?}");
    let url_token = http(
        addr,
        "POST",
        &format!("/api/apply?t={token}"),
        &[("Origin", &origin)],
        all,
    );
    assert_eq!(url_token.0, 403, "{url_token:?}");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("f.txt")).unwrap(),
        TWELVE
    );

    // The browser.
    let driver_port = free_port();
    let profile = tempfile::tempdir().unwrap();
    let _driver = Killed(
        Command::new("chromedriver")
            .arg(format!("--port={driver_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let daddr = format!("127.0.0.1:{driver_port}");
    let until = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&daddr).is_err() {
        assert!(Instant::now() < until, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut args = vec![
        "--headless=new".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--window-size=1280,1100".to_owned(),
        format!("--user-data-dir={}", profile.path().display()),
    ];
    // Chromium refuses to start as root with its own sandbox (it needs an unprivileged
    // user); the page under test is ours, on loopback, so root runs it without.
    if rustix::process::geteuid().is_root() {
        args.push("--no-sandbox".to_owned());
    }
    let caps = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"args": args}}}});
    let (status, text) = http(
        &daddr,
        "POST",
        "/session",
        &[("Content-Type", "application/json")],
        &caps.to_string(),
    );
    assert_eq!(status, 200, "new session: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let d = Driver {
        addr: daddr.clone(),
        session: v["value"]["sessionId"].as_str().unwrap().to_owned(),
    };
    d.call("POST", "/url", json!({"url": url}));
    let hunks = d.wait_for(".file[data-path='f.txt'] .pick-hunk");
    assert_eq!(hunks.len(), 2, "two hunks of f.txt are offered");

    // Markup in names is text: the names are shown as typed, and nothing ran or loaded.
    let names =
        d.script("return [...document.querySelectorAll('.file .path')].map(e => e.textContent)");
    let names: Vec<&str> = names
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names.contains(&IMG_NAME) && names.contains(&SCRIPT_NAME),
        "{names:?}"
    );
    let injected = d.script(
        "return {pwned: window.pwned === undefined ? null : window.pwned, \
                 imgs: document.querySelectorAll('img').length, \
                 scripts: document.querySelectorAll('script').length}",
    );
    assert_eq!(injected, json!({"pwned": null, "imgs": 0, "scripts": 2}));
    // The new directory of nine files is rolled up (closed).
    let vendor =
        d.script("return document.querySelector(\"details.dir[data-path='vendor']\").open");
    assert_eq!(vendor, json!(false));
    d.screenshot("review-unified.png");

    // Tick the first hunk (line 2) and apply it.
    d.click(&hunks[0]);
    let apply = d.find_all("#apply");
    d.click(&apply[0]);
    let f = s.work.path().join("f.txt");
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let now = std::fs::read_to_string(&f).unwrap();
        if now != TWELVE {
            assert_eq!(
                now,
                TWELVE.replace("l2\n", "L2\n"),
                "only the ticked hunk is applied"
            );
            break;
        }
        assert!(
            Instant::now() < until,
            "the apply did not reach the host file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The page then shows what remains: f.txt with one hunk, the other files untouched.
    let until = Instant::now() + Duration::from_secs(20);
    while d.find_all(".file[data-path='f.txt'] .pick-hunk").len() != 1 {
        assert!(
            Instant::now() < until,
            "the page did not show the remaining hunk"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!s.work.path().join(IMG_NAME).exists());
    let result = d.script("return document.getElementById('result-steps').textContent");
    assert!(result.as_str().unwrap().contains("exit 0"), "{result}");
    // Through the same engine: the trace holds the apply's events for f.txt.
    let trace =
        std::fs::read_to_string(s.store.path().join("jobs").join(&id).join("trace.jsonl")).unwrap();
    assert!(
        trace
            .lines()
            .any(|l| l.contains("\"apply_path\"") && l.contains("\"f.txt\"")),
        "no apply_path event for f.txt in the trace"
    );
    d.screenshot("review-applied.png");
    let split = d.find_all("#view-split");
    d.click(&split[0]);
    d.wait_for("table.diff td.empty");
    d.screenshot("review-split.png");

    // Closing the page stops the server.
    d.call("DELETE", "/window", Value::Null);
    let until = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(st) = server.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < until,
            "the server kept running after its page closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(code.success(), "{code:?}");
    let _ = http(
        &daddr,
        "DELETE",
        &format!("/session/{}", d.session),
        &[],
        "",
    );
}
