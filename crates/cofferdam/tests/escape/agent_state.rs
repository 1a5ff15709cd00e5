//! Agent state that grants the next run more (issue 19): the codex profile lends `~/.codex`
//! writable on the host, and its `config.toml` names the next run's allowed destination. A
//! run that rewrites the lent file (append, truncate, remove, rename over, unmount) or
//! creates it where it was absent must not grant the next run a host: the file stays as
//! the user wrote it, or what the run created is set aside and the bundle says so. The
//! canary HOME is the harness's own.

use crate::harness::{Attack, Boundary::FsWrite, Ctx, Outcome, SEALED_MUST, check};

pub const ATTACKS: &[Attack] = &[Attack {
    id: "fw.agent-config-grants-next-run",
    boundary: FsWrite,
    description: "a codex run rewrites the lent ~/.codex/config.toml (append, truncate, rm, rename over, umount) or creates it where absent, to allow the next run a host: the file is unchanged or set aside, the bundle says so, and the next run's scope allows no such host",
    on: SEALED_MUST,
    probe: rewrite_config,
}];

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
