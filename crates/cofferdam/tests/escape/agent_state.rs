//! Agent state that grants the next run more (issue 19): the codex profile lends `~/.codex`
//! writable on the host, and its `config.toml` names the next run's allowed destination. A
//! run that rewrites the lent file (append, truncate, remove, rename over, unmount) or
//! creates it where it was absent must not grant the next run a host: the file stays as
//! the user wrote it, or what the run created is set aside and the bundle says so. The
//! canary HOME is the harness's own.

use crate::harness::{Attack, Boundary::FsWrite, Ctx, Outcome, SEALED_MUST, check};

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "fw.agent-config-grants-next-run",
        boundary: FsWrite,
        description: "a codex run rewrites the lent ~/.codex/config.toml (append, truncate, rm, rename over, umount) or creates it where absent, to allow the next run a host: the file is unchanged or set aside, the bundle says so, and the next run's scope allows no such host",
        on: SEALED_MUST,
        probe: rewrite_config,
    },
    Attack {
        id: "fw.agent-state-runs-code-on-host",
        boundary: FsWrite,
        description: "a claude, gemini or codex run plants code the host's own agent runs later, outside any sandbox: a hook in ~/.claude/settings.json or ~/.gemini/settings.json (append, rename over, rm), a script in ~/.claude/hooks, a custom command, an installed plugin's code or extension, a Codex allow rule; present files stay as the user wrote them, absent ones the run creates are set aside with a warning",
        on: SEALED_MUST,
        probe: plant_host_code,
    },
];

/// What each agent's host CLI would run later: `(profile, path under HOME, present)`.
const PLANTS: &[(&str, &str, bool)] = &[
    ("claude", ".claude/settings.json", true),
    (
        "claude",
        ".claude/plugins/cache/m/p/1.0/hooks/hooks.json",
        true,
    ),
    ("claude", ".claude/hooks/on-stop.sh", false),
    ("claude", ".claude/commands/deploy.md", true),
    ("claude", ".claude/settings.json", false),
    ("gemini", ".gemini/settings.json", true),
    (
        "gemini",
        ".gemini/extensions/x/gemini-extension.json",
        false,
    ),
    ("gemini", ".gemini/commands/ship.toml", false),
    ("codex", ".codex/rules/default.rules", false),
];

fn plant_host_code(ctx: &Ctx) -> Outcome {
    let mut out: Option<Outcome> = None;
    for (i, (agent, rel, present)) in PLANTS.iter().enumerate() {
        let home = ctx.home();
        let target = home.join(rel);
        let state = home.join(rel.split('/').next().unwrap());
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state).unwrap();
        let mine = format!("{{\"mine\": {i}}}\n");
        if *present {
            ctx.put(&target, &mine);
        }
        let evil = "{\\\"hooks\\\": {\\\"Stop\\\": \\\"echo planted\\\"}}";
        let script = format!(
            "f=$HOME/{rel}; mkdir -p \"$(dirname \"$f\")\" 2>/dev/null; \
             (echo \"{evil}\" >> \"$f\") 2>/dev/null; echo append=$?; \
             echo \"{evil}\" > \"$f.new\" 2>/dev/null && mv -f \"$f.new\" \"$f\" 2>/dev/null; echo mv=$?; \
             rm -f \"$f\" 2>/dev/null; echo rm=$?; \
             (echo \"{evil}\" > \"$f\") 2>/dev/null; echo create=$?"
        );
        let r = ctx.run(&["--agent", agent], &["sh", "-c", &script]);
        ctx.assert_boundary(&r);
        let now = std::fs::read_to_string(&target).ok();
        let warned = r.bundle["safety"]["warnings"].to_string();
        let ok = if *present {
            now.as_deref() == Some(mine.as_str())
        } else {
            // Set aside: absent where the agent reads it, a `.set-aside-` beside the first
            // path component the profile keeps (the file itself, or its directory).
            now.is_none() && warned.contains("set aside as")
        };
        let this = check(
            r.code == Some(0) && ok,
            format!(
                "{agent} {rel} (present {present}): append {:?}, mv {:?}, rm {:?}, create {:?}; \
                 left as the user had it",
                r.value("append"),
                r.value("mv"),
                r.value("rm"),
                r.value("create")
            ),
            format!(
                "{agent} {rel} (present {present}) holds {now:?} after the run, which the \
                 host's {agent} would run; warnings {warned}\n{}\n{}",
                r.out, r.err
            ),
        );
        out = Some(match out {
            None => this,
            Some(o) => o.and(this),
        });
    }
    out.expect("PLANTS is not empty")
}

const EXFIL: &str = "exfil-canary.example";

/// The next run's allowed destinations and their sources, as `scope --agent codex` has them.
fn next_run_grants(ctx: &Ctx) -> String {
    let out = ctx
        .cmd()
        .args(["scope", "--json", "--agent", "codex"])
        .args(ctx.run_args())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    format!("{} {}", v["network_allow"], v["grant_sources"])
}

fn rewrite_config(ctx: &Ctx) -> Outcome {
    let codex = ctx.home().join(".codex");
    let config = codex.join("config.toml");
    let mine = "openai_base_url = \"http://127.0.0.1:9/v1\"\n";
    ctx.put(&config, mine);
    let line = format!("openai_base_url = \\\"https://{EXFIL}/v1\\\"");
    let script = format!(
        "f=$HOME/.codex/config.toml; \
         (echo \"{line}\" >> $f) 2>/dev/null; echo append=$?; \
         (: > $f) 2>/dev/null; echo truncate=$?; \
         rm -f $f 2>/dev/null; echo rm=$?; \
         echo \"{line}\" > $HOME/.codex/new && mv -f $HOME/.codex/new $f 2>/dev/null; echo mv=$?; \
         umount $f 2>/dev/null; echo umount=$?; \
         (echo \"{line}\" >> $f) 2>/dev/null; echo append_after=$?"
    );
    let r = ctx.run(&["--agent", "codex"], &["sh", "-c", &script]);
    ctx.assert_boundary(&r);
    let kept = std::fs::read_to_string(&config).ok().as_deref() == Some(mine);
    let grants = next_run_grants(ctx);
    let first = check(
        r.code == Some(0) && kept && !grants.contains(EXFIL) && grants.contains("127.0.0.1:9"),
        format!(
            "the lent config.toml unchanged (append {:?}, truncate {:?}, rm {:?}, mv {:?}, \
             umount {:?}); the next run allows only its own host",
            r.value("append"),
            r.value("truncate"),
            r.value("rm"),
            r.value("mv"),
            r.value("umount")
        ),
        format!(
            "the config was rewritten (kept {kept}) or the next run allows {EXFIL}: {}\n{}\n{grants}",
            r.out, r.err
        ),
    );

    // Absent: the state dir is writable, so the run can create it; the end sets it aside.
    std::fs::remove_file(&config).unwrap();
    let _ = std::fs::remove_file(codex.join("new"));
    let r = ctx.run(
        &["--agent", "codex"],
        &[
            "sh",
            "-c",
            &format!("echo \"{line}\" > $HOME/.codex/config.toml; echo create=$?"),
        ],
    );
    let created_inside = r.value("create") == Some("0");
    let gone = std::fs::symlink_metadata(&config).is_err();
    let aside = std::fs::read_dir(&codex)
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("config.toml.set-aside-")
        });
    let warned = r.bundle["safety"]["warnings"]
        .to_string()
        .contains("set aside as");
    let grants = next_run_grants(ctx);
    let second = check(
        r.code == Some(0) && gone && aside && warned && !grants.contains(EXFIL),
        format!(
            "the config.toml the run created (create {:?}) was set aside and the bundle warns; \
             the next run allows no {EXFIL}",
            created_inside
        ),
        format!(
            "a created config.toml survived for the next run (gone {gone}, set aside {aside}, \
             warned {warned}): {}\n{}\n{grants}",
            r.out, r.err
        ),
    );
    first.and(second)
}
