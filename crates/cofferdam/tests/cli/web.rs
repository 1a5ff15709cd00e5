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
use std::os::unix::ffi::OsStrExt;
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

    /// Click the first element matching `css`, waiting for it.
    fn click_css(&self, css: &str) {
        let found = self.wait_for(css);
        self.click(&found[0]);
    }

    /// Type `text` into the element.
    fn type_into(&self, element: &str, text: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            json!({"text": text}),
        );
    }

    /// Accept the `confirm()` dialog the page opened, waiting for it.
    fn accept_dialog(&self) {
        let path = format!("/session/{}/alert/accept", self.session);
        wait_until(20, "no dialog appeared", || {
            http(
                &self.addr,
                "POST",
                &path,
                &[("Content-Type", "application/json")],
                "{}",
            )
            .0 == 200
        });
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

/// Headless chromium under chromedriver, in a profile of its own; the session ends and both
/// stop when this is dropped.
struct Browser {
    driver: Driver,
    _chromedriver: Killed,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let driver_port = free_port();
        let profile = tempfile::tempdir().unwrap();
        let chromedriver = Killed(
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
        Browser {
            driver: Driver {
                addr: daddr,
                session: v["value"]["sessionId"].as_str().unwrap().to_owned(),
            },
            _chromedriver: chromedriver,
            _profile: profile,
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let d = &self.driver;
        let _ = http(
            &d.addr,
            "DELETE",
            &format!("/session/{}", d.session),
            &[],
            "",
        );
    }
}

/// Whether this host can run the browser tests (a sealed run, chromium, chromedriver).
fn browser_host() -> bool {
    crate::apply::sealed_host()
        && require("chromium", on_path("chromium"))
        && require("chromedriver", on_path("chromedriver"))
}

/// Wait up to `secs` seconds for `done`, failing with `what`.
fn wait_until(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
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
    if !browser_host() {
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
    let browser = Browser::start();
    let d = &browser.driver;
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
}

/// The non-UTF-8 name of the drop/apply test: bytes `ff 66 6f`.
const ODD_NAME: &[u8] = b"\xfffo";

/// The paths `diff --json` lists for job `id`, as shown.
fn staged_paths(s: &Sandbox, id: &str) -> Vec<String> {
    let out = s.cmd().args(["--json", "diff", id]).output().unwrap();
    let v = json_of(&out);
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect()
}

/// Record the page's POST bodies (other than heartbeats) in `window.posts`.
const RECORD_POSTS: &str = "window.posts = []; const f = window.fetch; \
    window.fetch = (u, i) => { if (i && i.method === 'POST' && !/heartbeat|close/.test(u)) \
    window.posts.push([u, i.body]); return f(u, i); }; return true;";

#[test]
fn the_review_page_drops_ticked_files_and_applies_a_name_that_is_not_utf8() {
    if !browser_host() {
        return;
    }
    let s = Sandbox::new();
    let id = run(
        &s,
        "echo a > a.txt && echo b > b.txt && echo c > c.txt && printf 'odd\\n' > \"$(printf '\\377fo')\"",
    );
    let odd = s.work.path().join(std::ffi::OsStr::from_bytes(ODD_NAME));
    let (_server, url) = serve(&s, &id);
    let browser = Browser::start();
    let d = &browser.driver;
    d.call("POST", "/url", json!({"url": url}));
    d.wait_for(".file[data-path='c.txt']");
    assert_eq!(d.script(RECORD_POSTS), json!(true));

    // The name that is not UTF-8 is shown escaped, and its identity is its bytes.
    let shown = d.script(
        "const b = document.querySelector(\".pick-file[data-hex='ff666f']\"); \
         return b && b.closest('.file').querySelector('.path').textContent",
    );
    assert_eq!(shown, json!("\\xfffo"), "the escaped name");

    // Tick a.txt and b.txt, press Drop and confirm.
    d.click_css(".pick-file[data-path='a.txt']");
    d.click_css(".pick-file[data-path='b.txt']");
    d.click_css("#drop");
    d.accept_dialog();
    wait_until(60, "the page still shows a dropped file", || {
        d.find_all(".file[data-path='a.txt'], .file[data-path='b.txt']")
            .is_empty()
            && !d.find_all(".file[data-path='c.txt']").is_empty()
    });
    let posts = d.script("return window.posts");
    assert_eq!(
        posts,
        json!([[
            "/api/drop",
            r#"{"paths":["a.txt","b.txt"],"path_bytes":[]}"#
        ]]),
        "{posts}"
    );
    // The host is unchanged; the review no longer lists them; the rest is still staged.
    for name in ["a.txt", "b.txt", "c.txt"] {
        assert!(!s.work.path().join(name).exists(), "{name}");
    }
    assert!(!odd.exists());
    let left = staged_paths(&s, &id);
    assert_eq!(left, ["c.txt", "\\xfffo"], "by path bytes: {left:?}");
    let review = s
        .cmd()
        .args(["--color", "never", "status", "--review", &id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&review.stdout);
    // Its stage part lists them as dropped, not remaining (its `Changes` list is the
    // capture-time one, as the saved bundle has it).
    let listed = |word: &str| -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.trim_start().strip_prefix(word))
            .map(str::trim)
            .collect()
    };
    assert_eq!(listed("remaining "), ["c.txt", "\\xfffo"], "{text}");
    assert_eq!(listed("dropped "), ["a.txt", "b.txt"], "{text}");
    let v = json_of(
        &s.cmd()
            .args(["--json", "status", "--review", &id])
            .output()
            .unwrap(),
    );
    let now: Vec<&str> = v["filesystem"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(now, ["c.txt", "\\xfffo"], "{v}");
    let result = d.script("return document.getElementById('result-steps').textContent");
    assert!(result.as_str().unwrap().contains("exit 0"), "{result}");

    // Tick the odd name and apply it: the page sends its bytes, the host file has them.
    d.click_css(".pick-file[data-hex='ff666f']");
    d.click_css("#apply");
    wait_until(
        60,
        "the file that is not UTF-8 did not reach the host",
        || odd.exists(),
    );
    assert_eq!(std::fs::read(&odd).unwrap(), b"odd\n");
    let names: Vec<Vec<u8>> = std::fs::read_dir(s.work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    assert!(names.contains(&ODD_NAME.to_vec()), "{names:?}");
    let posts = d.script("return window.posts");
    assert_eq!(
        posts[1],
        json!([
            "/api/apply",
            r#"{"paths":[],"path_bytes":["ff666f"],"hunks":[]}"#
        ]),
        "{posts}"
    );
    wait_until(20, "the page still offers the applied file", || {
        d.find_all(".pick-file[data-hex='ff666f']").is_empty()
    });
    assert_eq!(staged_paths(&s, &id), ["c.txt"]);
}

/// Agent notes the review JSON does not carry yet (`agent_notes`, another line's work),
/// injected into what `/api/review` returns before the page's own script runs.
const NOTES: &str = r#"[{"client": "claude<script>", "text": "ran the tests\n<img src=x onerror=window.pwned=4>", "at_unix_ms": 1767225600000},
                        {"client": "codex", "text": "second note", "at_unix_ms": 1767225660000}]"#;

#[test]
fn comments_and_agent_notes_show_on_the_review_page_as_text() {
    if !browser_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("f.txt", TWELVE);
    let id = run(&s, "sed -i 's/^l2$/L2/; s/^l11$/L11/' f.txt");
    let (_server, url) = serve(&s, &id);
    // The comment endpoint has the guard of apply: the token header and the same origin.
    let (addr, query) = url
        .strip_prefix("http://")
        .unwrap()
        .split_once('/')
        .unwrap();
    let token = query.strip_prefix("?t=").unwrap();
    let body = r#"{"path":"f.txt","text":"from elsewhere"}"#;
    for headers in [
        vec![
            ("X-Cofferdam-Token", token),
            ("Origin", "http://evil.example"),
        ],
        vec![("Origin", &*format!("http://{addr}"))],
        vec![("X-Cofferdam-Token", token)],
    ] {
        let r = http(addr, "POST", "/api/comment", &headers, body);
        assert_eq!(r.0, 403, "{headers:?}: {r:?}");
    }
    let job_dir = s.store.path().join("jobs").join(&id);
    assert!(!job_dir.join("review-comments.json").exists());
    let browser = Browser::start();
    let d = &browser.driver;
    d.call("POST", "/url", json!({"url": url}));
    d.wait_for(".file[data-path='f.txt'] .pick-hunk");
    // No notes in the review: the section stays hidden.
    assert_eq!(
        d.script("return document.getElementById('notes').hidden"),
        json!(true)
    );

    // A comment on the file, with markup in it.
    let img = "<img src=x onerror=window.pwned=3> on the file";
    d.click_css(".file[data-path='f.txt'] .comment-file");
    let ta = d.wait_for(".file[data-path='f.txt'] .comment-text");
    d.type_into(&ta[0], img);
    d.click_css(".file[data-path='f.txt'] .comment-save");
    wait_until(60, "the file comment did not appear", || {
        d.script("return [...document.querySelectorAll('.comments .comment .text')].map(e => e.textContent)")
            == json!([img])
    });
    // Each row is numbered as the files are: line 11 of the staged file is `L11`, line
    // 1 of both is the context `l1`.
    let rows = d.script(
        "const n = [...document.querySelectorAll(\".file[data-path='f.txt'] table.diff tr\")] \
           .filter(r => !r.classList.contains('hunkhead')) \
           .map(r => [...r.children].map(c => c.textContent)); return [n[0], n.find(r => r[3] === 'L11')]",
    );
    assert_eq!(rows, json!([["1", "1", "", "l1"], ["", "11", "+", "L11"]]));
    // A comment on line 11 of the staged file (the second hunk): click its number.
    d.click_css(".file[data-path='f.txt'] td.commentable[data-line='11']");
    let ta = d.wait_for("tr.comment-row .comment-text");
    d.type_into(&ta[0], "L11: why upper case?");
    d.click_css("tr.comment-row .comment-save");
    wait_until(60, "the line comment did not appear", || {
        !d.find_all("tr.comment-row .comment").is_empty()
    });

    // Kept in the job: a reload shows both, the line one at its line.
    d.call("POST", "/refresh", json!({}));
    d.wait_for("tr.comment-row .comment");
    let at_line = d.script(
        "const r = document.querySelector('tr.comment-row'); \
         return [r.previousSibling.children[1].textContent, r.previousSibling.children[3].textContent, \
                 r.querySelector('.text').textContent]",
    );
    assert_eq!(at_line, json!(["11", "L11", "L11: why upper case?"]));
    let file_level = d.script(
        "return [...document.querySelectorAll('.comments .comment .text')].map(e => e.textContent)",
    );
    assert_eq!(file_level, json!([img]));
    let v = json_of(
        &s.cmd()
            .args(["--json", "status", "--review", &id])
            .output()
            .unwrap(),
    );
    let c = v["review_comments"].as_array().unwrap();
    assert_eq!(c.len(), 2, "{v}");
    assert_eq!(c[0]["text"], img);
    assert!(c[0].get("hunk").is_none());
    assert_eq!(c[1]["line"], 11);
    let second_hunk = d.script(
        "return document.querySelectorAll(\".file[data-path='f.txt'] .pick-hunk\")[1].dataset.hunk",
    );
    assert_eq!(c[1]["hunk"], second_hunk);
    d.screenshot("review-comments.png");

    // Agent notes, injected into the review the page reads, are shown as text.
    let inject = format!(
        "const of = window.fetch; window.fetch = async (u, i) => {{ const r = await of(u, i); \
         if (!String(u).startsWith('/api/review')) return r; const d = await r.json(); \
         d.review.agent_notes = {NOTES}; return new Response(JSON.stringify(d), \
         {{status: 200, headers: {{'Content-Type': 'application/json'}}}}); }};"
    );
    d.call(
        "POST",
        "/goog/cdp/execute",
        json!({"cmd": "Page.addScriptToEvaluateOnNewDocument", "params": {"source": inject}}),
    );
    d.call("POST", "/refresh", json!({}));
    d.wait_for("#notes-list .agent-note");
    let notes = d.script(
        "return {hidden: document.getElementById('notes').hidden, \
                 notes: [...document.querySelectorAll('#notes-list .agent-note')] \
                   .map(n => [n.querySelector('.who').textContent, n.querySelector('.text').textContent]), \
                 pwned: window.pwned === undefined ? null : window.pwned, \
                 imgs: document.querySelectorAll('img').length, \
                 scripts: document.querySelectorAll('script').length}",
    );
    assert_eq!(
        notes,
        json!({
            "hidden": false,
            "notes": [
                ["claude<script>", "ran the tests\n<img src=x onerror=window.pwned=4>"],
                ["codex", "second note"],
            ],
            "pwned": null, "imgs": 0, "scripts": 2,
        })
    );
    d.screenshot("review-notes.png");

    // Once f.txt is applied its comments are still on the page, under the file's name.
    d.click_css(".pick-file[data-path='f.txt']");
    d.click_css("#apply");
    wait_until(60, "the page still shows f.txt staged", || {
        d.find_all(".file[data-path='f.txt']").is_empty()
    });
    let other = d.script(
        "return {hidden: document.getElementById('other-comments-section').hidden, \
                 texts: [...document.querySelectorAll('#other-comments .comment .text')].map(e => e.textContent), \
                 paths: [...document.querySelectorAll('#other-comments .comment .path')].map(e => e.textContent)}",
    );
    assert_eq!(
        other,
        json!({"hidden": false, "texts": [img, "L11: why upper case?"], "paths": ["f.txt", "f.txt"]})
    );
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("f.txt")).unwrap(),
        TWELVE.replace("l2\n", "L2\n").replace("l11\n", "L11\n")
    );
}
