//! The real agent CLIs (issue 19) inside `cofferdam run` with no cofferdam flags: only the
//! agent's own environment (a dummy key, its base URL or provider config pointing at a
//! scripted model server on 127.0.0.1, `tests/agents/model_server.py`). Each completes a
//! turn that writes one file and runs one shell command; both are staged (not in the tree)
//! and applied, and the bundle shows the model server allowed through the proxy by the
//! profile. A CLI that is not installed
//! is a `SKIP-HOST`, unless `COFFERDAM_TEST_REQUIRE` is set (CI installs them in .ci/run).

use crate::common::{Sandbox, json_of, network_decisions, require, userns_independently};
use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The model server, killed when dropped; its request log in a temp dir.
struct ModelServer {
    child: Child,
    port: u16,
    _log_dir: tempfile::TempDir,
    log: PathBuf,
}

impl ModelServer {
    fn start() -> Self {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/agents/model_server.py"
        );
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("requests.jsonl");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the model server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .expect("the model server prints its port");
        ModelServer {
            child,
            port,
            _log_dir: log_dir,
            log,
        }
    }

    fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `program` is on PATH; absent is a skip, or a failure when CI requires it.
fn installed(program: &str) -> bool {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join(program).is_file());
    if found {
        return true;
    }
    if std::env::var_os("COFFERDAM_TEST_REQUIRE").is_some() {
        panic!("COFFERDAM_TEST_REQUIRE is set but `{program}` is not on PATH; .ci/run installs it");
    }
    println!("SKIP-HOST {program} is not installed");
    false
}

fn ready(program: &str) -> Option<Sandbox> {
    sealed().filter(|_| installed(program))
}

/// A sandbox whose HOME and workdir the sealed tier can lend; `None` (a skip) without it:
/// the profile's `allow` network and state mount need that tier.
fn sealed() -> Option<Sandbox> {
    if !require("user namespaces (sealed tier)", userns_independently()) {
        return None;
    }
    let s = Sandbox::new();
    for d in [s.home.path(), s.work.path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Some(s)
}

/// The prompt naming the file the scripted model asks the agent to write.
fn prompt(s: &Sandbox) -> (PathBuf, String) {
    let file = s.work.path().join("agent-wrote.txt");
    let p = format!("Write FILE={} TEXT=cofferdam", file.display());
    (file, p)
}

/// The edit is staged, not in the tree; the model server's address was allowed.
fn assert_staged_and_allowed(s: &Sandbox, out: &std::process::Output, srv: &ModelServer) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!(
        "stdout:\n{stdout}\nstderr:\n{stderr}\nrequests:\n{}",
        srv.requests()
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        !s.work.path().join("agent-wrote.txt").exists(),
        "the edit landed in the tree: {said}"
    );
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let changes = b["filesystem"]["changes"].to_string();
    assert!(changes.contains("agent-wrote.txt"), "{changes}\n{said}");
    let review = s.cmd().args(["diff", "last"]).output().unwrap();
    let review = String::from_utf8_lossy(&review.stdout);
    assert!(review.contains("+cofferdam"), "{review}");
    let ds = network_decisions(&b);
    assert!(
        ds.iter().any(|d| d["host"] == "127.0.0.1"
            && d["port"] == srv.port
            && d["decision"] == "allowed"),
        "{ds:?}\n{said}"
    );
    assert!(
        !ds.iter()
            .any(|d| d["decision"] == "allowed" && d["host"] != "127.0.0.1"),
        "{ds:?}"
    );
    assert_eq!(
        b["network"]["policy"]["allow"],
        serde_json::json!([format!("127.0.0.1:{}", srv.port)]),
        "{}",
        b["network"]
    );
    // The agent's own start writes none of the state its profile keeps read-only (hooks,
    // plugins' code, settings): a real turn has nothing set aside.
    let warnings = b["safety"]["warnings"].to_string();
    assert!(!warnings.contains("set aside"), "{warnings}");
}

/// `cofferdam run -- ARGV` with only the agent's `env` added; the turn's edit staged.
fn agent_turn(s: &Sandbox, srv: &ModelServer, env: &[(&str, String)], argv: &[&str]) {
    agent_turn_answering(s, srv, env, argv, "");
}

/// [`agent_turn`] with `answers` on the agent's standard input (its confirmation prompts).
fn agent_turn_answering(
    s: &Sandbox,
    srv: &ModelServer,
    env: &[(&str, String)],
    argv: &[&str],
    answers: &str,
) {
    agent_turn_with(s, srv, env, &[], argv, answers);
}

/// [`agent_turn_answering`] with cofferdam `flags` before the `--`.
fn agent_turn_with(
    s: &Sandbox,
    srv: &ModelServer,
    env: &[(&str, String)],
    flags: &[&str],
    argv: &[&str],
    answers: &str,
) {
    let mut c = s.cmd();
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .write_stdin(answers)
        .arg("run")
        .args(flags)
        .arg("--")
        .args(argv)
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    assert_staged_and_allowed(s, &out, srv);
}

/// The turn's shell command wrote `ran`: staged, not in the tree. Returns the bundle.
fn ran_staged(s: &Sandbox, srv: &ModelServer, ran: &std::path::Path) -> serde_json::Value {
    assert!(!ran.exists(), "the shell command's file landed in the tree");
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let changes = b["filesystem"]["changes"].to_string();
    assert!(
        changes.contains("agent-ran.txt"),
        "{changes}\n{}",
        srv.requests()
    );
    b
}

/// `apply last` brings the turn's files into the tree: `wrote` (and `ran`, when the turn
/// ran a shell command) hold what the agent wrote.
fn apply_brings(s: &Sandbox, ran: Option<&std::path::Path>) {
    let out = s.cmd().args(["apply", "last"]).output().unwrap();
    let said = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    let wrote = std::fs::read_to_string(s.work.path().join("agent-wrote.txt")).unwrap();
    assert!(wrote.contains("cofferdam"), "{wrote:?}\n{said}");
    if let Some(ran) = ran {
        assert!(
            ran.exists(),
            "the shell command's file was not applied: {said}"
        );
    }
}

#[test]
fn claude_code_writes_a_file_into_the_stage_with_no_cofferdam_flags() {
    let Some(s) = ready("claude") else { return };
    // A user who has used Claude Code has its state dir; the profile lends it writable.
    std::fs::create_dir(s.home.path().join(".claude")).unwrap();
    let srv = ModelServer::start();
    let (_, p) = prompt(&s);
    // Then a shell command through its Bash tool, which fails when its state is read-only.
    let ran = s.work.path().join("agent-ran.txt");
    let p = format!("{p} RUN={}", ran.display());
    let env = [
        (
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", srv.port),
        ),
        ("ANTHROPIC_API_KEY", "dummy-key".to_owned()),
    ];
    agent_turn(
        &s,
        &srv,
        &env,
        &["claude", "-p", &p, "--dangerously-skip-permissions"],
    );
    ran_staged(&s, &srv, &ran);
    // Its state persisted on the host, outside review.
    let state: Vec<_> = std::fs::read_dir(s.home.path().join(".claude"))
        .unwrap()
        .collect();
    assert!(!state.is_empty(), "nothing saved in ~/.claude");
    apply_brings(&s, Some(&ran));
}

#[test]
fn codex_writes_a_file_into_the_stage_with_its_provider_from_its_own_config() {
    let Some(s) = ready("codex") else { return };
    let srv = ModelServer::start();
    // `codex exec` ignores OPENAI_BASE_URL; a custom endpoint is a provider in its config.
    let codex = s.home.path().join(".codex");
    std::fs::create_dir(&codex).unwrap();
    std::fs::write(
        codex.join("config.toml"),
        format!(
            "model_provider = \"mock\"\nmodel = \"mock-model\"\n\
             [model_providers.mock]\nname = \"mock\"\n\
             base_url = \"http://127.0.0.1:{}/v1\"\nenv_key = \"MOCK_API_KEY\"\n\
             wire_api = \"responses\"\n",
            srv.port
        ),
    )
    .unwrap();
    let (_, p) = prompt(&s);
    // Then a shell command: Codex's own sandbox cannot nest inside ours, and without the
    // profile's argument patch (its sandbox off) this tool call fails while the turn exits 0.
    let ran = s.work.path().join("agent-ran.txt");
    let p = format!("{p} RUN={}", ran.display());
    let argv = ["codex", "exec", "--skip-git-repo-check", &p];
    agent_turn(&s, &srv, &[("MOCK_API_KEY", "dummy-key".to_owned())], &argv);
    let b = ran_staged(&s, &srv, &ran);
    // The patch is recorded: the command as it ran, why, and the review says so.
    let ran_argv = b["run"]["command"].as_array().unwrap().clone();
    assert_eq!(ran_argv[1], "-c", "{ran_argv:?}");
    assert_eq!(ran_argv[2], "sandbox_mode=\"danger-full-access\"");
    assert_eq!(ran_argv[3..5], ["-c", "allow_login_shell=false"]);
    assert_eq!(
        b["orchestration"]["argument_patches"][0]["profile"], "codex",
        "{}",
        b["orchestration"]
    );
    let review = s
        .cmd()
        .args(["status", "--review", "last"])
        .output()
        .unwrap();
    let review = String::from_utf8_lossy(&review.stdout);
    assert!(
        review.contains(
            "profile:codex added `-c 'sandbox_mode=\"danger-full-access\"' \
             -c allow_login_shell=false`"
        ),
        "{review}"
    );
    // Its session state persisted on the host, outside review.
    assert!(codex.join("sessions").exists(), "no ~/.codex/sessions");
    apply_brings(&s, Some(&ran));
}

#[test]
fn gemini_cli_writes_a_file_into_the_stage_with_no_cofferdam_flags() {
    let Some(s) = ready("gemini") else { return };
    let srv = ModelServer::start();
    // A user who logged in with an API key has this in its settings; with a base URL and no
    // auth type the CLI exits 41.
    let gemini = s.home.path().join(".gemini");
    std::fs::create_dir(&gemini).unwrap();
    std::fs::write(
        gemini.join("settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
    )
    .unwrap();
    let (_, p) = prompt(&s);
    // Then a shell command through its run_shell_command tool (offered under --yolo).
    let ran = s.work.path().join("agent-ran.txt");
    let p = format!("{p} RUN={}", ran.display());
    let env = [
        (
            "GOOGLE_GEMINI_BASE_URL",
            format!("http://127.0.0.1:{}", srv.port),
        ),
        ("GEMINI_API_KEY", "dummy-key".to_owned()),
    ];
    agent_turn(&s, &srv, &env, &["gemini", "--yolo", "-p", &p]);
    assert!(
        srv.requests().contains("run_shell_command"),
        "{}",
        srv.requests()
    );
    ran_staged(&s, &srv, &ran);
    apply_brings(&s, Some(&ran));
}

#[test]
fn aider_writes_a_file_into_the_stage_with_no_cofferdam_flags() {
    let Some(s) = ready("aider") else { return };
    let srv = ModelServer::start();
    // aider works in a git repository (it commits each edit; the commit is staged too).
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(s.work.path())
        .status()
        .unwrap();
    assert!(git.success());
    let (_, p) = prompt(&s);
    // Then the shell command the model suggests in a ```bash block (only its `diff` edit
    // format carries them). aider runs a suggested command only on an explicit yes, which
    // `--yes-always` never gives: the user's answers come on standard input instead.
    let ran = s.work.path().join("agent-ran.txt");
    let p = format!("{p} RUN={}", ran.display());
    let env = [
        (
            "OPENAI_API_BASE",
            format!("http://127.0.0.1:{}/v1", srv.port),
        ),
        ("OPENAI_API_KEY", "dummy-key".to_owned()),
    ];
    let argv = [
        "aider",
        "--model",
        "openai/mock",
        "--edit-format",
        "diff",
        "--no-fancy-input",
        "--no-check-update",
        "--no-show-model-warnings",
        "--message",
        &p,
    ];
    agent_turn_answering(&s, &srv, &env, &argv, &"y\n".repeat(20));
    ran_staged(&s, &srv, &ran);
    apply_brings(&s, Some(&ran));
}

/// No real CLI needed: the codex profile lends `~/.codex` writable but its `config.toml`
/// (which names the next run's allowed destination) read-only over it, so a run cannot
/// grant the run after it a new host.
#[test]
fn a_codex_run_cannot_rewrite_the_config_that_names_its_next_destination() {
    let Some(s) = sealed() else { return };
    let cfg_text = "openai_base_url = \"http://127.0.0.1:9/v1\"\n";
    let codex = s.home.path().join(".codex");
    std::fs::create_dir(&codex).unwrap();
    std::fs::write(codex.join("config.toml"), cfg_text).unwrap();
    let script = "echo 'openai_base_url = \"https://exfil.example/v1\"' >> ~/.codex/config.toml; \
                  echo appended=$?; mv ~/.codex/config.toml ~/.codex/old; echo moved=$?; \
                  echo s > ~/.codex/state; echo state=$?";
    let out = s
        .cmd()
        .args(["run", "--agent", "codex", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("appended=2") && stdout.contains("moved=1"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("state=0"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(codex.join("config.toml")).unwrap(),
        cfg_text
    );
    assert!(codex.join("state").exists());
    let v = json_of(
        &s.cmd()
            .args(["scope", "--json", "--agent", "codex"])
            .output()
            .unwrap(),
    );
    let grants = v["grant_sources"].to_string();
    assert!(grants.contains("127.0.0.1:9"), "{grants}");
    assert!(!grants.contains("exfil.example"), "{grants}");
}

/// No real CLI needed: the codex profile's optional `~/.codex/config.toml` is absent (a user
/// on the default provider); that is no warning the user can act on, so stderr stays quiet,
/// while the bundle's `run.warnings` and the scope report's `host_paths` still record it.
/// A skipped mount the user wrote (`--mount X?`) still warns.
#[test]
fn a_profile_mount_whose_source_is_absent_is_recorded_but_not_warned_about() {
    let Some(s) = sealed() else { return };
    std::fs::create_dir(s.home.path().join(".codex")).unwrap();
    let mine = s.home.path().join("no-such-cache");
    let out = s
        .cmd()
        .args(["run", "--agent", "codex", "--mount"])
        .arg(format!("{}:read?", mine.display()))
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("config.toml"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: optional mount {} (--mount) skipped",
            mine.display()
        )),
        "{stderr}"
    );
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let warnings = b["run"]["warnings"].to_string();
    assert!(
        warnings.contains("optional mount ~/.codex/config.toml (profile:codex) skipped"),
        "{warnings}"
    );
    let v = json_of(
        &s.cmd()
            .args(["scope", "--json", "--agent", "codex"])
            .output()
            .unwrap(),
    );
    let cfg = s.home.path().join(".codex/config.toml");
    assert!(
        v["host_paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["source"] == cfg.display().to_string()
                && h["effect"].as_str().unwrap_or("").starts_with("skipped")),
        "{}",
        v["host_paths"]
    );
}

/// Claude Code's interactive TUI in a real terminal (tmux): the prompt typed in, the edit
/// staged, `/exit` ends the run with 0. The user's `~/.claude.json` says what a logged-in
/// user's does: onboarding done, this key approved, this folder trusted; the profile copies
/// it into `~/.claude` (where `CLAUDE_CONFIG_DIR` points) before the first run, so no
/// first-run screen stands in the way.
#[test]
fn claude_code_tui_under_tmux_stages_the_edit_typed_in() {
    if !require("tmux", Command::new("tmux").arg("-V").output().is_ok()) {
        return;
    }
    let Some(s) = ready("claude") else { return };
    let srv = ModelServer::start();
    let key = "dummy-key-for-the-tui-test";
    let claude = s.home.path().join(".claude");
    std::fs::create_dir(&claude).unwrap();
    std::fs::write(
        s.home.path().join(".claude.json"),
        serde_json::json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            // Claude Code keeps the last 20 characters of an approved key.
            "customApiKeyResponses": {"approved": [&key[key.len() - 20..]], "rejected": []},
            "projects": {
                s.work.path().display().to_string():
                    {"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}
            },
        })
        .to_string(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let t = crate::suspend::Tmux {
        socket: dir.path().join("sock"),
        _dir: dir,
    };
    let shell = format!(
        "cd '{}' && env -i HOME='{}' COFFERDAM_HOME='{}' PATH='{}' TERM=xterm-256color \
         ANTHROPIC_BASE_URL=http://127.0.0.1:{} ANTHROPIC_API_KEY={key} \
         {} run -- claude --permission-mode acceptEdits; echo EXITED rc=$?; sleep 600",
        s.work.path().display(),
        s.home.path().display(),
        s.store.path().display(),
        std::env::var("PATH").unwrap_or_default(),
        srv.port,
        env!("CARGO_BIN_EXE_cofferdam"),
    );
    t.new_session(150, 45, &shell);
    let slow = std::time::Duration::from_secs(120);
    t.expect_for("accept edits on", 1, slow);
    let (file, p) = prompt(&s);
    // Keys typed while the TUI is still starting can be lost: type until the input shows.
    let shown = |what: &str| {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_secs(10) {
            if t.screen().contains(what) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        false
    };
    for _ in 0..5 {
        t.send(&["-l", &p]);
        if shown("TEXT=cofferdam") {
            break;
        }
        t.send(&["C-u"]);
    }
    t.send(&["Enter"]);
    t.expect_for("Wrote 1 line", 1, slow);
    t.send(&["-l", "/exit"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    t.send(&["Enter"]);
    let end = t.expect_for("EXITED rc=", 1, slow);
    assert!(end.contains("EXITED rc=0"), "{end}\n{}", srv.requests());
    assert!(
        claude.join(".claude.json").is_file(),
        "the host's ~/.claude.json was not copied into ~/.claude"
    );
    assert!(!file.exists(), "the edit landed in the tree");
    let b = json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap());
    let changes = b["filesystem"]["changes"].to_string();
    assert!(changes.contains("agent-wrote.txt"), "{changes}");
    let review = s.cmd().args(["diff", "last"]).output().unwrap();
    assert!(String::from_utf8_lossy(&review.stdout).contains("+cofferdam"));
    let ds = network_decisions(&b);
    assert!(
        ds.iter().any(|d| d["host"] == "127.0.0.1"
            && d["port"] == srv.port
            && d["decision"] == "allowed"),
        "{ds:?}"
    );
}

/// The program the lent-tool turns run, installed only in the test HOME's `~/.local/bin`.
const LENT_TOOL: &str = "cofferdam-lent-tool";

/// `LENT_TOOL` in `~/.local/bin` of `s`'s HOME: it prints a line, then tries to write into
/// its own directory and says whether it could. Returns the `PATH` the agent is started
/// with (that directory first, then the test's own) and the directory.
fn local_bin_tool(s: &Sandbox) -> (String, PathBuf) {
    let local = s.home.path().join(".local");
    let bin = local.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for d in [&local, &bin] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let tool = bin.join(LENT_TOOL);
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\necho lent-tool ran\n\
             if echo x > '{}' 2>/dev/null; then echo planted; else echo plant-refused; fi\n",
            bin.join("planted").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (path, bin)
}

/// The lines `last`'s review adds (what the turn's files hold in the stage).
fn staged_lines(s: &Sandbox) -> String {
    let out = s.cmd().args(["diff", "last"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The host paths `b`'s access policy mounts, with their modes.
fn bundle_mounts(b: &serde_json::Value) -> Vec<(String, String)> {
    b["filesystem"]["access_policy"]["mounts"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["source"].as_str().unwrap_or_default().to_owned(),
                m["mode"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The agent's turn runs `LENT_TOOL` from `~/.local/bin` through its shell tool, twice: with
/// the profile's toolchain lending (the default) the directory is lent read-only, credited
/// to `toolchain` in `scope --json` and listed with the bundle's mounts, the tool runs, its
/// output is staged and its write into its own directory is refused; with
/// `--no-lend-path-toolchains` the same command is not found (exit 127), and the run's
/// warning names the PATH entry that is not lent and how to lend it.
fn lent_tool_turns(
    s: &Sandbox,
    srv: &ModelServer,
    agent: &str,
    env: &[(&str, String)],
    argv: &[&str],
) {
    let bin = s.home.path().join(".local/bin");
    let ran = s.work.path().join("agent-ran.txt");
    let shown = bin.display().to_string();
    let path = env
        .iter()
        .find(|(k, _)| *k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap();

    agent_turn(s, srv, env, argv);
    let b = ran_staged(s, srv, &ran);
    let lines = staged_lines(s);
    for want in ["+lent-tool ran", "+plant-refused", "+rc=0"] {
        assert!(lines.contains(want), "{want}:\n{lines}\n{}", srv.requests());
    }
    assert!(
        !bin.join("planted").exists(),
        "the tool wrote into ~/.local/bin"
    );
    assert!(
        bundle_mounts(&b).contains(&(shown.clone(), "read".to_owned())),
        "{}",
        b["filesystem"]["access_policy"]
    );
    // The run's own record of its grants (the trace's session start) credits the toolchain.
    let value = format!("{shown} -> {shown} (read)");
    let trace = std::fs::read_to_string(b["run"]["event_stream_ref"].as_str().unwrap()).unwrap();
    let start: serde_json::Value = trace
        .lines()
        .find(|l| l.contains("effective_grants"))
        .map(|l| serde_json::from_str(l).unwrap())
        .expect("the session start");
    let traced = start.to_string();
    assert!(
        find_rows(&start).iter().any(|g| {
            g["grant"] == "filesystem.mounts" && g["value"] == value && g["source"] == "toolchain"
        }),
        "{traced}"
    );
    let v = json_of(
        &s.cmd()
            .env("PATH", &path)
            .args(["scope", "--json", "--agent", agent])
            .output()
            .unwrap(),
    );
    assert!(
        v["grant_sources"].as_array().unwrap().iter().any(|g| {
            g["grant"] == "filesystem.mounts" && g["value"] == value && g["source"] == "toolchain"
        }),
        "{}",
        v["grant_sources"]
    );
    assert!(
        v["host_paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["source"] == shown && h["mode"] == "read"),
        "{}",
        v["host_paths"]
    );

    // Off: the same turn's command is not found, and the run says which entry is not lent.
    let mut c = s.cmd();
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .args(["run", "--no-lend-path-toolchains", "--"])
        .args(argv)
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{}", srv.requests());
    let b = ran_staged(s, srv, &ran);
    let lines = staged_lines(s);
    assert!(
        lines.contains("+rc=127") && lines.contains(LENT_TOOL) && lines.contains("not found"),
        "{lines}\n{}",
        srv.requests()
    );
    assert!(!lines.contains("+lent-tool ran"), "{lines}");
    assert!(
        !bundle_mounts(&b).iter().any(|(src, _)| *src == shown),
        "{}",
        b["filesystem"]["access_policy"]
    );
    let why = format!(
        "PATH entry {shown} is under HOME, private inside, and not lent \
         (--no-lend-path-toolchains): its programs are not found in the run (exit 127)"
    );
    assert!(stderr.contains(&why), "{stderr}");
    let warnings = b["run"]["warnings"].to_string();
    assert!(
        warnings.contains(&why) && warnings.contains(&format!("--mount {shown}:read")),
        "{warnings}"
    );
}

#[test]
fn claude_code_runs_a_tool_from_local_bin_lent_read_only() {
    let Some(s) = ready("claude") else { return };
    std::fs::create_dir(s.home.path().join(".claude")).unwrap();
    let (path, _) = local_bin_tool(&s);
    let srv = ModelServer::start();
    let (_, p) = prompt(&s);
    let ran = s.work.path().join("agent-ran.txt");
    let p = format!("{p} RUN={} TOOL={LENT_TOOL}", ran.display());
    let env = [
        (
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", srv.port),
        ),
        ("ANTHROPIC_API_KEY", "dummy-key".to_owned()),
        ("PATH", path),
    ];
    let argv = ["claude", "-p", &p, "--dangerously-skip-permissions"];
    lent_tool_turns(&s, &srv, "claude", &env, &argv);
}

#[test]
fn gemini_cli_runs_a_tool_from_local_bin_lent_read_only() {
    let Some(s) = ready("gemini") else { return };
    let gemini = s.home.path().join(".gemini");
    std::fs::create_dir(&gemini).unwrap();
    std::fs::write(
        gemini.join("settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
    )
    .unwrap();
    let (path, _) = local_bin_tool(&s);
    let srv = ModelServer::start();
    let (_, p) = prompt(&s);
    let ran = s.work.path().join("agent-ran.txt");
    let p = format!("{p} RUN={} TOOL={LENT_TOOL}", ran.display());
    let env = [
        (
            "GOOGLE_GEMINI_BASE_URL",
            format!("http://127.0.0.1:{}", srv.port),
        ),
        ("GEMINI_API_KEY", "dummy-key".to_owned()),
        ("PATH", path),
    ];
    lent_tool_turns(&s, &srv, "gemini", &env, &["gemini", "--yolo", "-p", &p]);
}

/// Codex runs its commands in a login shell, which resets PATH; the profile's
/// `-c allow_login_shell=false` keeps the run's PATH, lent toolchains and all.
#[test]
fn codex_runs_a_tool_from_local_bin_lent_read_only() {
    let Some(s) = ready("codex") else { return };
    let srv = ModelServer::start();
    let codex = s.home.path().join(".codex");
    std::fs::create_dir(&codex).unwrap();
    std::fs::write(
        codex.join("config.toml"),
        format!(
            "model_provider = \"mock\"\nmodel = \"mock-model\"\n\
             [model_providers.mock]\nname = \"mock\"\n\
             base_url = \"http://127.0.0.1:{}/v1\"\nenv_key = \"MOCK_API_KEY\"\n\
             wire_api = \"responses\"\n",
            srv.port
        ),
    )
    .unwrap();
    let (path, _) = local_bin_tool(&s);
    let (_, p) = prompt(&s);
    let ran = s.work.path().join("agent-ran.txt");
    let p = format!("{p} RUN={} TOOL={LENT_TOOL}", ran.display());
    let env = [("MOCK_API_KEY", "dummy-key".to_owned()), ("PATH", path)];
    let argv = ["codex", "exec", "--skip-git-repo-check", &p];
    lent_tool_turns(&s, &srv, "codex", &env, &argv);
}

/// Every `grant_sources` row anywhere in `v`.
fn find_rows(v: &serde_json::Value) -> Vec<serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => {
            let mut out: Vec<serde_json::Value> = m
                .get("grant_sources")
                .and_then(|g| g.as_array())
                .cloned()
                .unwrap_or_default();
            out.extend(m.values().flat_map(find_rows));
            out
        }
        serde_json::Value::Array(a) => a.iter().flat_map(find_rows).collect(),
        _ => Vec::new(),
    }
}
