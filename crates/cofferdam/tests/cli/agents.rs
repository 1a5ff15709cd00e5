//! Agent profiles (issue 19): a program named like an agent gets its profile's grants (env
//! names, env values, network, its state dir written on the host), each credited to
//! `profile:<name>`; `--no-agent-defaults` removes them; `cofferdam agents` lists them.
//! The agent here is a fake: a script named `claude` on PATH.

use crate::common::{Sandbox, json_of, require, userns_independently};
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;

/// A `claude` script in its own folder: it writes agent state into `~/.claude`, echoes
/// what the profile set, and edits the workdir.
fn fake_claude() -> (tempfile::TempDir, PathBuf) {
    let bin = tempfile::tempdir().unwrap();
    let p = bin.path().join("claude");
    std::fs::write(
        &p,
        "#!/bin/sh\n\
         echo \"base=$ANTHROPIC_BASE_URL cfg=$CLAUDE_CONFIG_DIR quiet=$CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC\"\n\
         echo rotated > \"$HOME/.claude/state\" || echo state-write-failed\n\
         echo edit > edited.txt\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The temp folders are not under the sandbox's view of /tmp: lend the folders read-only.
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = bin.path().to_path_buf();
    (bin, dir)
}

fn agent_run(s: &Sandbox, bin: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let lend = format!("{}:{}:read", bin.display(), bin.display());
    let mut c = s.cmd();
    c.env("PATH", path)
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .args(["run", "--mount", &lend])
        .args(extra)
        .args(["--", "claude"]);
    c.output().unwrap()
}

fn readable(s: &Sandbox) {
    // The unprivileged run must reach the temp folders.
    for d in [s.home.path(), s.work.path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn bundle(s: &Sandbox) -> serde_json::Value {
    json_of(&s.cmd().args(["status", "--json", "last"]).output().unwrap())
}

fn profile_grants(v: &serde_json::Value) -> Vec<(String, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .filter(|g| g["source"] == "profile")
        .map(|g| {
            assert_eq!(g["profile"], "claude", "{g}");
            (
                g["grant"].as_str().unwrap().to_owned(),
                g["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The trace's session start carries the effective grants (the scope report).
fn traced_grants(s: &Sandbox) -> serde_json::Value {
    let mut found = None;
    for e in walkdir(s.store.path()) {
        if e.file_name().and_then(|n| n.to_str()) == Some("trace.jsonl") {
            found = Some(e);
        }
    }
    let text = std::fs::read_to_string(found.expect("a trace")).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Some(g) = find_key(&v, "effective_grants") {
            return g["grant_sources"].clone();
        }
    }
    panic!("no session start in the trace: {text}");
}

fn find_key(v: &serde_json::Value, key: &str) -> Option<serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m
            .get(key)
            .cloned()
            .or_else(|| m.values().find_map(|x| find_key(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_key(x, key)),
        _ => None,
    }
}

fn walkdir(root: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_claude_run_gets_its_profile_and_its_state_persists_on_the_host() {
    // The profile's write mount and `allow` network need the sealed tier.
    if !require("user namespaces (sealed tier)", userns_independently()) {
        return;
    }
    let s = Sandbox::new();
    readable(&s);
    std::fs::create_dir(s.home.path().join(".claude")).unwrap();
    let (_keep, bin) = fake_claude();
    let out = agent_run(&s, &bin, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let cfg = s.home.path().join(".claude");
    assert!(
        stdout.contains(&format!(
            "base=http://127.0.0.1:9 cfg={} quiet=1",
            cfg.display()
        )),
        "{stdout}\n{stderr}"
    );
    // The state write is on the host already, outside the stage.
    assert_eq!(
        std::fs::read_to_string(cfg.join("state")).unwrap(),
        "rotated\n"
    );
    let b = bundle(&s);
    let changes = b["filesystem"]["changes"].to_string();
    assert!(changes.contains("edited.txt"), "{changes}");
    assert!(!changes.contains(".claude"), "{changes}");
    let warnings = b["safety"]["warnings"].to_string();
    assert!(
        warnings.contains("profile:claude") && warnings.contains(&cfg.display().to_string()),
        "{warnings}"
    );
    let env = &b["environment"];
    assert!(
        env["projected_keys"]
            .to_string()
            .contains("ANTHROPIC_BASE_URL"),
        "{env}"
    );
    assert!(
        env["runtime_injected_keys"]
            .to_string()
            .contains("CLAUDE_CONFIG_DIR"),
        "{env}"
    );
    let mounts = b["filesystem"]["access_policy"]["mounts"].to_string();
    assert!(mounts.contains(&cfg.display().to_string()), "{mounts}");

    let grants = profile_grants(&traced_grants(&s));
    for want in [
        ("network.mode", "allow".to_owned()),
        ("network.allow", "127.0.0.1:9".to_owned()),
        ("env.allow", "ANTHROPIC_BASE_URL".to_owned()),
        ("env.set", "CLAUDE_CONFIG_DIR".to_owned()),
        (
            "filesystem.mounts",
            format!("{} -> {} (write)", cfg.display(), cfg.display()),
        ),
    ] {
        assert!(
            grants.iter().any(|(g, v)| g == want.0 && *v == want.1),
            "{want:?} not in {grants:?}"
        );
    }
}

#[test]
fn no_agent_defaults_removes_the_profile() {
    // The profile's write mount and `allow` network need the sealed tier.
    if !require("user namespaces (sealed tier)", userns_independently()) {
        return;
    }
    let s = Sandbox::new();
    readable(&s);
    std::fs::create_dir(s.home.path().join(".claude")).unwrap();
    let (_keep, bin) = fake_claude();
    let out = agent_run(&s, &bin, &["--no-agent-defaults"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("base= cfg= quiet="), "{stdout}");
    assert!(stdout.contains("state-write-failed"), "{stdout}");
    assert!(!s.home.path().join(".claude/state").exists());
    assert!(profile_grants(&traced_grants(&s)).is_empty());
    let b = bundle(&s);
    assert!(!b["safety"]["warnings"].to_string().contains("profile:"));
}

/// `scope --agent claude`, checking the profile allows `dest`; with its grants.
fn claude_scope_allows(s: &Sandbox, dest: &str) -> (serde_json::Value, Vec<(String, String)>) {
    let out = s
        .cmd()
        .args(["scope", "--json", "--agent", "claude"])
        .output()
        .unwrap();
    let v = json_of(&out);
    let grants = profile_grants(&v["grant_sources"]);
    assert!(
        grants.contains(&("network.allow".into(), dest.into())),
        "{grants:?}"
    );
    (v, grants)
}

#[test]
fn scope_with_agent_lists_the_profile_grants_and_state_stores() {
    let s = Sandbox::new();
    std::fs::create_dir(s.home.path().join(".claude")).unwrap();
    let (v, _) = claude_scope_allows(&s, "api.anthropic.com:443");
    // Where a claude.ai login's OAuth token is refreshed.
    claude_scope_allows(&s, "platform.claude.com:443");
    assert_eq!(v["network_mode"], "allow", "{}", v["network_mode"]);
    let stores = v["state_stores"].to_string();
    assert!(stores.contains("profile:claude"), "{stores}");
    let cfg = s.home.path().join(".claude").display().to_string();
    assert!(v["host_paths"].to_string().contains(&cfg));
    // A user's explicit mode wins; a profile never widens it.
    let v = json_of(
        &s.cmd()
            .args(["scope", "--json", "--agent", "claude", "--network", "none"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["network_mode"], "none");
    let out = s.cmd().args(["scope", "--agent", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cofferdam agents"));
}

#[test]
fn agents_lists_each_profile_with_what_it_grants_here() {
    let s = Sandbox::new();
    std::fs::create_dir(s.home.path().join(".codex")).unwrap();
    let v = json_of(&s.cmd().args(["agents", "--json"]).output().unwrap());
    let names: Vec<&str> = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["claude", "codex", "gemini", "aider"]);
    let codex = &v["profiles"][1];
    let state = &codex["paths"][0];
    assert_eq!(state["present"], true, "{codex}");
    assert_eq!(state["mode"], "write");
    assert_eq!(v["profiles"][0]["paths"][0]["present"], false);
    let text = s.cmd().arg("agents").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("outside review; present"), "{text}");
}

#[test]
fn user_config_profiles_override_builtins_and_a_workdir_manifest_cannot_define_them() {
    let s = Sandbox::new();
    let cfg = s.home.path().join(".config/cofferdam/config.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        "[profiles.claude]\nprograms = [\"claude\"]\nhosts = [\"llm.corp.example:8443\"]\n\
         [profiles.mine]\nprograms = [\"my-agent\"]\nenv_pass = [\"MINE_KEY\"]\n",
    )
    .unwrap();
    let (_, grants) = claude_scope_allows(&s, "llm.corp.example:8443");
    assert!(
        !grants.iter().any(|(_, v)| v.contains("anthropic")),
        "{grants:?}"
    );
    let listed = json_of(&s.cmd().args(["agents", "--json"]).output().unwrap());
    assert_eq!(listed["profiles"][4]["name"], "mine", "{listed}");
    assert_eq!(listed["profiles"][4]["env_pass"][0], "MINE_KEY");

    s.write("cofferdam.toml", "[profiles.evil]\nprograms = [\"sh\"]\n");
    let out = s.cmd().args(["scope", "--json"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("profiles.evil") && err.contains("fix:"),
        "{err}"
    );
}

/// A user logged in on the host keeps Claude Code's settings in `~/.claude.json`; the
/// profile points `CLAUDE_CONFIG_DIR` at `~/.claude`, so the first run copies that file in
/// once (recorded), later runs keep their own copy, the host file is never written, and
/// `scope` says so beforehand.
#[test]
fn claude_gets_the_hosts_claude_json_copied_into_its_config_dir_once() {
    if !require("user namespaces (sealed tier)", userns_independently()) {
        return;
    }
    let s = Sandbox::new();
    readable(&s);
    let cfg = s.home.path().join(".claude");
    std::fs::create_dir(&cfg).unwrap();
    let host = s.home.path().join(".claude.json");
    std::fs::write(&host, "{\"hasCompletedOnboarding\":true}\n").unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = bin.path().join("claude");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"seen=$(cat \"$CLAUDE_CONFIG_DIR/.claude.json\")\"\n\
         echo '{\"numStartups\":2}' > \"$CLAUDE_CONFIG_DIR/.claude.json\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();

    let scope = json_of(
        &s.cmd()
            .args(["scope", "--json", "--agent", "claude"])
            .output()
            .unwrap(),
    );
    let seed_row = scope["grant_sources"].to_string();
    assert!(
        seed_row.contains("filesystem.seed")
            && seed_row.contains("~/.claude.json -> ~/.claude/.claude.json"),
        "{seed_row}"
    );

    let out = agent_run(&s, bin.path(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stdout.contains("seen={\"hasCompletedOnboarding\":true}"),
        "{stdout}"
    );
    let warnings = bundle(&s)["safety"]["warnings"].to_string();
    assert!(
        warnings.contains("copied ~/.claude.json -> ~/.claude/.claude.json"),
        "{warnings}"
    );
    let copy = cfg.join(".claude.json");
    assert_eq!(
        std::fs::read_to_string(&copy).unwrap(),
        "{\"numStartups\":2}\n"
    );
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // The next run keeps the agent's copy; the host file was never written.
    let out = agent_run(&s, bin.path(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("seen={\"numStartups\":2}"), "{stdout}");
    let warnings = bundle(&s)["safety"]["warnings"].to_string();
    assert!(!warnings.contains("copied ~/.claude.json"), "{warnings}");
    assert_eq!(
        std::fs::read_to_string(&host).unwrap(),
        "{\"hasCompletedOnboarding\":true}\n"
    );
    // Nothing left beside it from the copy.
    let stray: Vec<_> = std::fs::read_dir(&cfg)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".cofferdam-seed-")
        })
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}
