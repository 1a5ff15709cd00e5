//! Shared fixtures: a clean environment per test, and independent host probes.

use assert_cmd::Command;
use serde_json::Value;
use std::path::PathBuf;
use tempfile::TempDir;

pub struct Sandbox {
    pub home: TempDir,
    pub work: TempDir,
    pub store: TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            store: tempfile::tempdir().unwrap(),
        }
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("cofferdam").unwrap();
        c.env_clear()
            .env("HOME", self.home.path())
            .env("COFFERDAM_HOME", self.store.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(self.work.path());
        c
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.work.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

pub fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Skip (or, in CI, fail) when the host lacks what a test needs.
pub use cofferdam_testkit::require;

/// The kernel's Landlock ABI, asked directly (not through cofferdam).
pub fn landlock_abi_independently() -> u32 {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import ctypes;l=ctypes.CDLL(None,use_errno=True);print(max(0,l.syscall(444,None,0,1)))",
        ])
        .output();
    out.ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether `unshare -U -m -n -p -f` works for this user (util-linux, not cofferdam).
pub fn userns_independently() -> bool {
    std::process::Command::new("unshare")
        .args(["-U", "-m", "-n", "-p", "-f", "-r", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// Every C0 control but NUL, DEL, every C1 control, the bidi overrides and isolates, and
/// escape sequences (clear, cursor up, title, OSC 52, CSI as C1): what a workload would
/// put in a name, an argument or a line to steer a reviewer's terminal.
pub fn hostile_text() -> String {
    let mut s: String = (1u32..0x20)
        .chain(0x7f..0xa0)
        .filter_map(char::from_u32)
        .collect();
    s.push_str("\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}");
    s.push_str("\x1b[2J\x1b[1A\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x1b\\\u{9b}2J");
    s
}

/// What in a renderer's output a terminal would interpret, other than cofferdam's own
/// colours (`\e[<n>m` for the codes `Style` paints with) and newline/tab: each raw control
/// byte or character found, described. Empty when the output is inert.
pub fn raw_controls(bytes: &[u8]) -> Vec<String> {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    for code in ["0", "1", "2", "31", "32", "33"] {
        text = text.replace(&format!("\x1b[{code}m"), "");
    }
    text.char_indices()
        .filter(|(_, c)| {
            (c.is_control() && *c != '\n' && *c != '\t')
                || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .map(|(i, c)| {
            let from = text.floor_char_boundary(i.saturating_sub(20));
            format!("U+{:04X} after {:?}", u32::from(c), &text[from..i])
        })
        .collect()
}

/// The `network_decision` events of the trace of bundle `b` (its `run.event_stream_ref`).
pub fn network_decisions(b: &Value) -> Vec<Value> {
    let trace = b["run"]["event_stream_ref"].as_str().unwrap();
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"]["type"] == "network_decision")
        .map(|e| e["event"].clone())
        .collect()
}
