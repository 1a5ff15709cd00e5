//! agentctl (issue 21): an agent inside a run talks to its supervisor with `cofferdam ctl`
//! (sealed and scoped): its note is in the review, its requests in the bundle's `agentctl`,
//! its deferred checkpoint in the directives and `checkpoint list`; a hostile client
//! (garbage, an over-long line, 100 connections, a slow writer) is refused and counted, and
//! the run ends normally; outside a run `ctl` fails with its own exit code.

use crate::common::*;
use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// What the agent does inside: a note, a write, a named checkpoint, the status as JSON.
const AGENT: &str = "cofferdam ctl note 'tests pass; docs next' \
    && echo staged > x.txt \
    && cofferdam ctl checkpoint first \
    && cofferdam ctl --json status";

fn bundle_of(s: &Sandbox) -> Value {
    let out = s
        .cmd()
        .args(["--json", "status", "--review", "last"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out)
}

fn text_of(c: &mut Command) -> (i32, String, String) {
    let out = c.timeout(Duration::from_secs(120)).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The JSON document that starts at the first line that is `{` in `stdout`.
fn status_reply(stdout: &str) -> Value {
    let at = stdout.find("\n{").map_or(0, |i| i + 1);
    serde_json::Deserializer::from_str(&stdout[at..])
        .into_iter::<Value>()
        .next()
        .unwrap_or_else(|| panic!("no status reply in {stdout}"))
        .unwrap()
}

/// Everything one cooperating run leaves, on `class`'s tier.
fn assert_cooperation(s: &Sandbox, class: &str, code: i32, stdout: &str, stderr: &str) {
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("noted"), "{stdout}");
    let status = status_reply(stdout);
    assert_eq!(status["ok"], true, "{status}");
    assert_eq!(status["status"]["class"], class, "{status}");
    assert_eq!(status["status"]["evidence"], false, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("not evidence"),
        "{status}"
    );

    let b = bundle_of(s);
    let a = &b["agentctl"];
    assert_eq!(a["protocol"], "cofferdam-agentctl/1", "{a}");
    let reqs: Vec<(&str, Option<&str>)> = a["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["request"].as_str().unwrap(), r["argument"].as_str()))
        .collect();
    assert_eq!(
        reqs,
        vec![
            ("note", Some("tests pass; docs next")),
            ("checkpoint", Some("first")),
            ("status", None)
        ],
        "{a}"
    );
    assert_eq!(a["clients"][0]["name"], "cofferdam-ctl", "{a}");
    assert_eq!(a["counters"]["requests_accepted"], 3, "{a}");
    assert_eq!(a["counters"]["requests_refused"], 0, "{a}");
    // The deferred checkpoint: its id in the directive, and in `checkpoint list`, holding
    // the write made before it was asked for.
    let directive = a["directives"][0]["directive"].as_str().unwrap();
    let id = directive
        .split_whitespace()
        .find(|w| w.starts_with("ckpt-"))
        .unwrap_or_else(|| panic!("no checkpoint id in {directive}"));
    let out = s
        .cmd()
        .args(["--json", "checkpoint", "list", "last"])
        .output()
        .unwrap();
    let list = json_of(&out);
    let listed = list["checkpoints"]
        .as_array()
        .or_else(|| list.as_array())
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {list}"))
        .clone();
    assert_eq!(listed["name"], "first", "{listed}");
    let upper = Path::new(listed["path"].as_str().unwrap()).join("upper");
    assert_eq!(
        std::fs::read_to_string(upper.join("x.txt")).unwrap(),
        "staged\n"
    );
    // The variable is recorded as injected (its value never is).
    let injected: Vec<&str> = b["environment"]["runtime_injected_keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(injected.contains(&"COFFERDAM_CTL"), "{injected:?}");
    // Nothing of it is enforcement evidence.
    let text = b["executor_observations"].to_string();
    assert!(!text.contains("agentctl") && !text.contains("tests pass"));

    // The review shows the note, in text and JSON.
    assert_eq!(
        b["agent_notes"][0]["text"], "tests pass; docs next",
        "{}",
        b["agent_notes"]
    );
    assert_eq!(b["agent_notes"][0]["client"], "cofferdam-ctl");
    assert!(b["agent_notes"][0]["at_unix_ms"].as_u64().unwrap() > 0);
    let (code, review, _) = text_of(
        s.cmd()
            .args(["status", "--review", "--color", "never", "last"]),
    );
    assert_eq!(code, 0);
    assert!(review.contains("Agent notes (1)"), "{review}");
    assert!(review.contains("tests pass; docs next"), "{review}");
    assert!(
        status["status"]["run_id"]
            .as_str()
            .unwrap()
            .starts_with("run-")
    );
}

#[test]
fn an_agent_in_a_sealed_run_leaves_a_note_and_a_deferred_checkpoint() {
    if !require("user namespaces (the sealed tier)", userns_independently()) {
        return;
    }
    let s = Sandbox::new();
    let (code, stdout, stderr) = text_of(s.cmd().args(["run", "--", "sh", "-c", AGENT]));
    assert_cooperation(&s, "sealed", code, &stdout, &stderr);
}

#[test]
fn an_agent_in_a_scoped_run_leaves_a_note_and_a_deferred_checkpoint() {
    if !crate::tiers::scoped_host() {
        return;
    }
    let s = Sandbox::new();
    let mut c = crate::tiers::no_userns(&s);
    let (code, stdout, stderr) = text_of(c.args(["run", "--", "sh", "-c", AGENT]));
    assert_cooperation(&s, "scoped", code, &stdout, &stderr);
}

#[test]
fn outside_a_run_ctl_says_so_with_its_own_exit_code() {
    let s = Sandbox::new();
    let (code, _, stderr) = text_of(s.cmd().args(["ctl", "note", "hi"]));
    assert_eq!(code, 6, "{stderr}");
    assert!(stderr.contains("not inside a cofferdam run"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let out = s
        .cmd()
        .env("COFFERDAM_CTL", dir.path().join("nothing"))
        .args(["--json", "ctl", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6));
    assert_eq!(json_of(&out)["error"]["code"], "no_ctl");
}

/// A hostile client inside the run: garbage, an over-long line, 100 connections held at
/// once, a writer slower than the read timeout; then a well-behaved note.
const HOSTILE: &str = r#"
import os, socket, time
path = os.environ["COFFERDAM_CTL"]
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s
def ask(data):
    s = conn()
    try:
        s.sendall(data)
    except OSError:
        pass
    s.settimeout(10)
    try:
        r = s.makefile("rb").readline()
    except OSError:
        r = b""
    s.close()
    return r
print("before", ask(b'{"request":"note","argument":"before","client":"hostile"}\n'))
print("garbage", ask(b"\xff\x00\x01garbage\n"))
print("long", ask(b"a" * 10000))
held = []
for _ in range(100):
    try:
        held.append(conn())
    except OSError as e:
        print("connect failed", e)
print("held", len(held))
# While all are held (none has reached the 2 s read timeout), at most 8 are served: every
# other one is answered with a refusal at once.
import select
refused, waiting, until = 0, list(held), time.time() + 1.5
while waiting and time.time() < until:
    ready, _, _ = select.select(waiting, [], [], 0.1)
    for s in ready:
        if b"open already" in s.recv(4096):
            refused += 1
        waiting.remove(s)
print("refused-held", refused)
for s in held:
    s.close()
# The closed ones' threads end on their own; until they have, a connection is refused as
# one too many at once (counted, and told apart here).
retries = 0
while True:
    s = conn()
    s.sendall(b'{"request":"no')
    s.settimeout(0.3)
    try:
        s.recv(4096)
    except socket.timeout:
        break
    s.close()
    retries += 1
    time.sleep(0.1)
print("retries", retries)
time.sleep(3)
s.settimeout(10)
print("slow", s.recv(4096))
s.close()
print("after", ask(b'{"request":"note","argument":"after","client":"hostile"}\n'))
"#;

#[test]
fn a_hostile_client_is_refused_and_counted_and_the_run_ends_normally() {
    if !require("user namespaces (the sealed tier)", userns_independently())
        || !require(
            "python3 in /usr/bin",
            Path::new("/usr/bin/python3").exists(),
        )
    {
        return;
    }
    let s = Sandbox::new();
    let (code, stdout, stderr) =
        text_of(
            s.cmd()
                .args(["run", "--", "/usr/bin/python3", "-c", HOSTILE]),
        );
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let line = |w: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(w))
            .unwrap_or_else(|| panic!("no {w} in {stdout}"))
            .to_owned()
    };
    assert!(line("before ").contains(r#""ok":true"#), "{stdout}");
    assert!(line("garbage ").contains("not a request"), "{stdout}");
    assert!(line("long ").contains("at most 4096 bytes"), "{stdout}");
    assert_eq!(line("held "), "held 100", "{stdout}");
    assert_eq!(line("refused-held "), "refused-held 92", "{stdout}");
    assert!(line("slow ").contains("did not end in time"), "{stdout}");
    assert!(line("after ").contains("true"), "{stdout}");

    let a = &bundle_of(&s)["agentctl"];
    let c = &a["counters"];
    let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}"));
    // Every connection is counted once, served or refused; at most 8 at a time are served.
    let retries: u64 = line("retries ")["retries ".len()..].parse().unwrap();
    assert_eq!(
        n("connections_accepted") + n("connections_refused"),
        105 + retries,
        "{c}\n{stdout}"
    );
    assert!(n("connections_refused") >= 92, "{c}");
    assert_eq!(n("requests_accepted"), 2, "{c}");
    assert_eq!(n("requests_refused"), 3, "{c}");
    let notes: Vec<&str> = a["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["argument"].as_str())
        .collect();
    assert_eq!(notes, ["before", "after"], "{a}");
}
