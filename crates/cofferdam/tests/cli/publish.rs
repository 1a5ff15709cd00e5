//! `run --publish`: a dev server inside the sealed sandbox reached from the host through the
//! supervisor's forwarder, on loopback only (host ports the test picked free, a canary
//! server of the test's own for the outbound check). Each test drives the real binary and
//! checks what the bundle and the scope report say.

use crate::common::*;
use crate::net::sealed_host;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A port free on the host's loopback right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The workload: a threaded HTTP server on 127.0.0.1:`port` inside serving the workdir;
/// it prints `listening` once it listens and ends (exit 0) when its stdin gets a line.
/// Before that it tries `connect_out` (a host port) and prints the outcome as `out=...`.
fn server_script(port: u16, connect_out: Option<u16>) -> String {
    let out = connect_out.map_or(String::new(), |p| {
        format!(
            "try:\n  socket.create_connection(('127.0.0.1', {p}), timeout=5); print('out=CONNECTED')\n\
             except OSError as e:\n  print('out=' + type(e).__name__)\n\
             import os\n\
             print('fd7=' + ('open' if os.path.exists('/proc/self/fd/7') else 'absent'))\n"
        )
    });
    format!(
        "import http.server, socket, sys, threading\n{out}\
         srv = http.server.ThreadingHTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler)\n\
         threading.Thread(target=srv.serve_forever, daemon=True).start()\n\
         print('listening', flush=True)\n\
         sys.stdin.readline()\n\
         srv.shutdown()\n"
    )
}

struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

fn start(s: &Sandbox, args: &[&str], script: &str) -> Running {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("cofferdam"));
    c.env_clear()
        .env("HOME", s.home.path())
        .env("COFFERDAM_HOME", s.store.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(s.work.path())
        .args(["run", "-q", "--no-tty"])
        .args(args)
        .args(["--", "python3", "-u", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    Running {
        child,
        stdin,
        stdout,
    }
}

impl Running {
    /// The workload's next line of output (panics at its end).
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        assert!(!l.is_empty(), "the run ended early: {:?}", self.stop());
        l.trim_end().to_owned()
    }

    /// Tell the workload to end; its exit status and stderr.
    fn stop(&mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take().map(|mut i| i.write_all(b"stop\n")));
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err).unwrap();
        }
        (status, err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl(port: u16, path: &str) -> std::process::Output {
    std::process::Command::new("curl")
        .args(["-sS", "--noproxy", "*", "-m", "10"])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap()
}

fn last_bundle(s: &Sandbox) -> Value {
    json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap())
}

#[test]
fn a_published_dev_server_serves_the_host_two_connections_at_once_and_is_recorded() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    s.write("index.html", "hello from the sandbox\n");
    let host = free_port();
    let spec = format!("{host}:8000");
    // Before the workload listens a connection is closed at once, never left hanging.
    let mut run = start(&s, &["--publish", &spec], &server_script(8000, None));
    let t = Instant::now();
    let early = curl(host, "/index.html");
    assert!(t.elapsed() < Duration::from_secs(8), "{early:?}");
    assert_eq!(run.line(), "listening");
    let got = curl(host, "/index.html");
    assert!(got.status.success(), "{got:?}");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "hello from the sandbox\n"
    );
    // Two at once: A's request is held open, half written, while B is served whole.
    let mut a = TcpStream::connect(("127.0.0.1", host)).unwrap();
    a.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    a.write_all(b"GET /index.html HTTP/1.0\r\n").unwrap();
    let b = curl(host, "/index.html");
    assert_eq!(
        String::from_utf8_lossy(&b.stdout),
        "hello from the sandbox\n",
        "{b:?}"
    );
    a.write_all(b"\r\n").unwrap();
    let mut resp = String::new();
    a.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.0 200"), "{resp}");
    assert!(resp.ends_with("hello from the sandbox\n"), "{resp}");
    let (status, err) = run.stop();
    assert!(status.success(), "{status:?} {err}");
    assert!(
        err.contains(&format!("publishing 127.0.0.1:{host} -> port 8000")),
        "{err}"
    );
    let bundle = last_bundle(&s);
    let p = &bundle["network"]["policy"]["publish"][0];
    assert_eq!(p["host"], format!("127.0.0.1:{host}"), "{p}");
    assert_eq!(p["port"], 8000);
    assert!(p["relayed"].as_u64().unwrap() >= 3, "{p}");
    assert_eq!(
        p["accepted"].as_u64().unwrap(),
        p["relayed"].as_u64().unwrap() + p["refused"].as_u64().unwrap(),
        "{p}"
    );
    assert!(p["bytes_out"].as_u64().unwrap() > 0, "{p}");
    assert_eq!(bundle["network"]["policy"]["mode"], "none");
    let review = s
        .cmd()
        .args(["status", "--review", "last"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&review.stdout);
    assert!(
        text.contains(&format!("publish   127.0.0.1:{host} -> port 8000: ")),
        "{text}"
    );
    // The port is released with the run.
    assert!(TcpListener::bind(("127.0.0.1", host)).is_ok());
}

#[test]
fn publish_opens_nothing_outbound_and_without_it_the_server_is_unreachable() {
    if !sealed_host() {
        return;
    }
    // A canary server on the host's loopback, counting what reaches it.
    let canary = TcpListener::bind("127.0.0.1:0").unwrap();
    let cport = canary.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for c in canary.incoming() {
            if c.is_ok() {
                h.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let s = Sandbox::new();
    let host = free_port();
    let spec = format!("{host}:8000");
    let mut run = start(&s, &["--publish", &spec], &server_script(8000, Some(cport)));
    assert_eq!(run.line(), "out=ConnectionRefusedError");
    // The publish socket never reaches the command (pid 1 closes its copy; the init serving
    // it is outside the command's pid namespace).
    assert_eq!(run.line(), "fd7=absent");
    assert_eq!(run.line(), "listening");
    assert!(curl(host, "/").status.success());
    // The inside port is not the host's: nothing listens on it there.
    assert!(TcpStream::connect(("127.0.0.1", 8000)).is_err() || port_is_someone_elses(8000));
    let (status, err) = run.stop();
    assert!(status.success(), "{err}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the canary was reached");

    // Without --publish, the server inside listens on a port free on the host, which
    // stays unreachable from here.
    let inside = free_port();
    let mut run = start(&s, &[], &server_script(inside, None));
    assert_eq!(run.line(), "listening");
    let refused = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], inside)),
        Duration::from_secs(5),
    );
    assert!(
        refused.is_err(),
        "the sandbox's port {inside} was reachable"
    );
    let (status, err) = run.stop();
    assert!(status.success(), "{err}");
    let bundle = last_bundle(&s);
    assert!(
        bundle["network"]["policy"].get("publish").is_none(),
        "{}",
        bundle["network"]
    );
}

/// Whether something other than cofferdam listens on `port` on this host (the check above
/// cannot tell it from a leak then).
fn port_is_someone_elses(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_err()
}

#[test]
fn a_busy_host_port_is_a_usage_error_before_any_job() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = s
        .cmd()
        .args(["run", "--publish", &format!("{port}:8000"), "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port} is in use")),
        "{err}"
    );
    let jobs = json_of(&s.cmd().args(["jobs", "--json"]).output().unwrap());
    assert_eq!(jobs.as_array().map_or(usize::MAX, Vec::len), 0, "{jobs}");
    // A malformed value is a usage error too, naming the form.
    let out = s
        .cmd()
        .args(["run", "--publish", "8000", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("[HOST_ADDR:]HOST_PORT:PORT"));
}

/// A published run capped at the scoped tier.
const SCOPED_PUBLISH: &[&str] = &[
    "--tier",
    "scoped",
    "--containment",
    "advisory",
    "--publish",
    "8080:8000",
    "--",
    "true",
];

#[test]
fn scope_names_the_mapping_and_the_tiers_without_a_network_namespace_refuse_it() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["scope", "--json", "--publish", "8080:8000"])
        .output()
        .unwrap();
    let r = json_of(&out);
    let p = &r["network_publish"][0];
    assert_eq!(p["host"], "127.0.0.1:8080", "{r}");
    assert_eq!(p["port"], 8000);
    assert_eq!(p["exposed"], false);
    let route = r["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["route"] == "publish")
        .cloned()
        .unwrap_or_default();
    assert_eq!(route["mechanism"], "host-process", "{r}");
    if r["enforcement_tier"] == "mountns+pivot_root+landlock+seccomp" {
        assert!(p["effect"].as_str().unwrap().contains("relays"), "{p}");
        assert_eq!(r["floor_met"], true);
    }
    // A non-loopback host address is reported as exposed.
    let r = json_of(
        &s.cmd()
            .args(["scope", "--json", "--publish", "0.0.0.0:8080:8000"])
            .output()
            .unwrap(),
    );
    assert_eq!(r["network_publish"][0]["exposed"], true, "{r}");
    // The scoped tier has no network namespace: scope and run agree on the refusal.
    let r = json_of(
        &s.cmd()
            .args(["run", "--explain-scope", "--json"])
            .args(SCOPED_PUBLISH)
            .output()
            .unwrap(),
    );
    assert_eq!(r["floor_met"], false, "{r}");
    assert!(
        r["shortfall_reason"]
            .as_str()
            .unwrap()
            .contains("--publish"),
        "{r}"
    );
    let out = s.cmd().arg("run").args(SCOPED_PUBLISH).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("drop --publish"));
}

#[test]
fn a_non_loopback_host_address_warns() {
    if !sealed_host() {
        return;
    }
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--publish", "0.0.0.0:0:8000", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: --publish 0.0.0.0:0:8000") && err.contains("not loopback"),
        "{err}"
    );
}
