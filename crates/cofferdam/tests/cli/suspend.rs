//! Ctrl-Z in a real terminal: `cofferdam run` in a tmux pane running an interactive bash.
//! The key suspends the whole run (bash's prompt comes back, `jobs` shows it stopped), `fg`
//! continues it, and the command ends normally with exit 0 in the bundle. tmux runs as
//! whatever user runs this test binary, on a private socket.

use crate::common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) struct Tmux {
    pub(crate) socket: std::path::PathBuf,
    pub(crate) _dir: tempfile::TempDir,
}

impl Tmux {
    pub(crate) fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    /// The session `t`, `width`x`height`, running `shell`.
    pub(crate) fn new_session(&self, width: u16, height: u16, shell: &str) {
        let (x, y) = (width.to_string(), height.to_string());
        let st = self
            .tmux()
            .args(["new-session", "-d", "-s", "t", "-x", &x, "-y", &y, shell])
            .status()
            .unwrap();
        assert!(st.success());
    }

    pub(crate) fn send(&self, keys: &[&str]) {
        let st = self
            .tmux()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap();
        assert!(st.success());
    }

    pub(crate) fn screen(&self) -> String {
        let out = self
            .tmux()
            .args(["capture-pane", "-p", "-J", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until the pane shows `what` (counted `n` times); the screen.
    fn expect(&self, what: &str, n: usize) -> String {
        self.expect_for(what, n, Duration::from_secs(30))
    }

    /// [`Tmux::expect`], waiting at most `limit`.
    pub(crate) fn expect_for(&self, what: &str, n: usize, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.matches(what).count() >= n {
                return screen;
            }
            assert!(
                start.elapsed() < limit,
                "waited for {what:?} x{n}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}

#[test]
fn ctrl_z_suspends_the_run_and_fg_continues_it_to_a_normal_end() {
    suspend_and_continue(&[]);
}

#[test]
fn ctrl_z_suspends_a_scoped_run_and_fg_continues_it() {
    suspend_and_continue(&["--tier", "scoped"]);
}

fn suspend_and_continue(tier: &[&str]) {
    if !require("unprivileged user namespaces", userns_independently())
        || !require("Landlock", landlock_abi_independently() > 0)
        || !require("tmux", Command::new("tmux").arg("-V").output().is_ok())
        || !require("/bin/bash", Path::new("/bin/bash").exists())
    {
        return;
    }
    let s = Sandbox::new();
    let dir = tempfile::tempdir().unwrap();
    let t = Tmux {
        socket: dir.path().join("sock"),
        _dir: dir,
    };
    let shell = format!(
        "cd '{}' && exec env -i HOME='{}' COFFERDAM_HOME='{}' PATH='{}' TERM=xterm \
         PS1='PROMPT$ ' /bin/bash --norc --noprofile -i",
        s.work.path().display(),
        s.home.path().display(),
        s.store.path().display(),
        std::env::var("PATH").unwrap_or_default(),
    );
    t.new_session(120, 40, &shell);
    t.expect("PROMPT$ ", 1);
    let program = "for i in 1 2 3 4 5 6; do echo tick$i; sleep 0.5; done; echo all-$((6*7))";
    t.send(&[
        &format!(
            "{} run -q {} -- sh -c '{program}'",
            env!("CARGO_BIN_EXE_cofferdam"),
            tier.join(" ")
        ),
        "Enter",
    ]);
    t.expect("tick2", 1);
    t.send(&["C-z"]);
    t.expect("Stopped", 1);
    t.send(&["jobs", "Enter"]);
    let screen = t.expect("Stopped", 2);
    // Suspended: the counter does not go on.
    std::thread::sleep(Duration::from_secs(2));
    let later = t.screen();
    let ticks = |s: &str| s.lines().filter(|l| l.starts_with("tick")).count();
    assert_eq!(ticks(&later), ticks(&screen), "the run went on:\n{later}");
    assert!(!later.contains("all-42"), "{later}");
    t.send(&["fg", "Enter"]);
    t.expect("all-42", 1);
    t.send(&["echo rc=$?", "Enter"]);
    let end = t.expect("rc=0", 1);
    for i in 1..=6 {
        assert!(end.lines().any(|l| l == format!("tick{i}")), "{end}");
    }
    let out = s.cmd().args(["status", "--json", "last"]).output().unwrap();
    let b = json_of(&out);
    assert_eq!(b["run"]["exit_code"], 0, "{b}");
    if !tier.is_empty() {
        assert_eq!(
            b["executor_observations"]["tier"], "landlock+seccomp",
            "{b}"
        );
    }
}
