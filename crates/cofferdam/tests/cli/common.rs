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
pub fn require(feature: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if std::env::var("COFFERDAM_TEST_REQUIRE").as_deref() == Ok("sealed") {
        panic!("COFFERDAM_TEST_REQUIRE=sealed but this host lacks {feature}");
    }
    println!("SKIP-HOST {feature} is not available on this host");
    false
}

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
