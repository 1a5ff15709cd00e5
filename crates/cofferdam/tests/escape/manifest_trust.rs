//! Policy from the workdir (issue 19): a `cofferdam.toml` shipped in a cloned repo asks for
//! more than the user allowed (the host network, a write mount of a harness-made outside
//! directory, weaker containment, a host variable). `run` must refuse it naming each
//! widening key, with nothing run and no job left, until the user trusts that exact file
//! (`cofferdam trust`, its state in the harness's home); an edit untrusts it. A manifest
//! that only narrows runs without trust.

use crate::harness::{Attack, BOTH_MUST, Boundary::FsWrite, Ctx, Outcome, Tier, both, check};
use std::process::Stdio;

pub const ATTACKS: &[Attack] = &[
    Attack {
        id: "fw.manifest-widens-untrusted",
        boundary: FsWrite,
        description: "a workdir cofferdam.toml grants itself network host, a write mount outside, containment advisory and a host variable: refused until `cofferdam trust`, untrusted again by an edit",
        on: BOTH_MUST,
        probe: widening_manifest,
    },
    Attack {
        id: "fw.manifest-narrows-runs",
        boundary: FsWrite,
        description: "a workdir cofferdam.toml that only narrows (smaller limits, a read-only path, no network) runs without trust and its narrowing applies",
        on: BOTH_MUST,
        probe: narrowing_manifest,
    },
    Attack {
        id: "fw.manifest-symlink-outside",
        boundary: FsWrite,
        description: "a workdir cofferdam.toml names an outside directory through a symlink inside the workdir (workdir = \"inner\", a read mount of \"vendor\"): refused as widening, the canary there unread",
        on: BOTH_MUST,
        probe: symlinked_outside,
    },
];

/// The widening manifest; the write mount only where lent paths exist (sealed).
fn widening_text(ctx: &Ctx) -> (String, Vec<&'static str>) {
    let mut text = String::from(
        "containment = \"advisory\"\n[network]\nmode = \"host\"\n[env]\nallow = [\"CANARY_TOKEN\"]\n",
    );
    // The sealed runs ask `--containment sealed`, which the manifest's floor cannot lower.
    let mut keys = vec!["network.mode", "env.allow"];
    if ctx.tier() != Tier::Sealed {
        keys.insert(0, "containment");
    } else {
        text.push_str(&format!(
            "[[filesystem.mounts]]\nsource = \"{}\"\nmode = \"write\"\n",
            ctx.outside().display()
        ));
        keys.push("filesystem.mounts[0]");
    }
    (text, keys)
}

/// The command the manifest's author wants run: it leaves a marker in the workdir and, where
/// the write mount exists, on the host outside.
const MARK: &str =
    "echo ran > ran-marker; [ -d \"$OUTSIDE\" ] && echo ran > \"$OUTSIDE/marker\"; true";

/// `run` as the harness asks it, but without expecting a summary.
fn raw_run(ctx: &Ctx) -> std::process::Output {
    let mut c = ctx.cmd();
    c.env("CANARY_TOKEN", "canary")
        .args(["--color", "never", "run", "--json"])
        .args(ctx.run_args())
        .args(["--env", "OUTSIDE"])
        .args(["--", "sh", "-c", MARK])
        .stdin(Stdio::null());
    c.output().unwrap()
}

fn jobs(ctx: &Ctx) -> usize {
    let out = ctx.cmd().args(["jobs", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array().map_or(0, Vec::len)
}

/// Refused before anything ran: exit 2, every key named, no marker, no job.
fn refused(ctx: &Ctx, keys: &[&str], changed: bool) -> Result<String, String> {
    let out = raw_run(ctx);
    let text = both(&out);
    let ran = ctx.work().join("ran-marker").exists() || ctx.outside().join("marker").exists();
    let named = keys.iter().all(|k| text.contains(&format!("  {k}: ")));
    let said_changed = !changed || text.contains("changed since you trusted it");
    if out.status.code() == Some(2) && !ran && jobs(ctx) == 0 && named && said_changed {
        assert!(text.contains("cofferdam trust"), "the fix is named: {text}");
        Ok(format!("refused (exit 2) naming {}", keys.join(", ")))
    } else {
        Err(format!(
            "not refused as it must be (exit {:?}, ran {ran}, named {named}, changed said \
             {said_changed}): {text}",
            out.status.code()
        ))
    }
}

fn widening_manifest(ctx: &Ctx) -> Outcome {
    let (text, keys) = widening_text(ctx);
    let manifest = ctx.work().join("cofferdam.toml");
    ctx.put(&manifest, &text);
    let first = match refused(ctx, &keys, false) {
        Ok(e) => e,
        Err(what) => return Outcome::Escaped(what),
    };
    // `scope` refuses it the same way: nothing reports a policy the user did not grant.
    let scope = ctx.cmd().args(["scope", "--json"]).output().unwrap();
    assert_eq!(scope.status.code(), Some(2), "{}", both(&scope));

    // The user reads it and trusts it: the run goes ahead as the manifest asks.
    let t = ctx.cmd().args(["trust"]).output().unwrap();
    let shown = both(&t);
    assert!(t.status.success(), "{shown}");
    for k in &keys {
        assert!(
            shown.contains(&format!("  {k}: ")),
            "trust shows {k}: {shown}"
        );
    }
    let state = ctx.home().join(".local/state/cofferdam");
    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join("trusted.toml")), 0o600);
    let out = raw_run(ctx);
    assert_eq!(out.status.code(), Some(0), "trusted: {}", both(&out));
    assert_eq!(jobs(ctx), 1);
    // The trace's session_start records where each grant came from.
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = summary.rfind("{\n  \"bundle\"").unwrap();
    let v: serde_json::Value = serde_json::from_str(&summary[at..]).unwrap();
    let bundle = std::path::PathBuf::from(v["bundle"].as_str().unwrap());
    let sources = grant_sources(&bundle);
    assert_eq!(
        source_of(&sources, "network.mode"),
        "trusted_manifest",
        "{sources:?}"
    );
    assert_eq!(source_of(&sources, "env.allow"), "trusted_manifest");
    if ctx.tier() == Tier::Sealed {
        assert!(
            ctx.outside().join("marker").exists(),
            "the trusted write mount applies"
        );
        std::fs::remove_file(ctx.outside().join("marker")).unwrap();
    }
    let _ = std::fs::remove_file(ctx.work().join("ran-marker"));

    // Any edit untrusts it: refused again, and the message says it changed.
    ctx.put(&manifest, &format!("{text}# edited\n"));
    let before = jobs(ctx);
    let out = raw_run(ctx);
    let text = both(&out);
    let ran = ctx.outside().join("marker").exists();
    let second = check(
        out.status.code() == Some(2)
            && !ran
            && jobs(ctx) == before
            && text.contains("changed since you trusted it"),
        "an edited trusted manifest is refused again",
        format!(
            "an edit kept the trust (exit {:?}): {text}",
            out.status.code()
        ),
    );
    Outcome::Denied(first).and(second)
}

/// The `grant_sources` of the run's session_start scope report.
fn grant_sources(bundle: &std::path::Path) -> Vec<serde_json::Value> {
    let trace = std::fs::read_to_string(bundle.with_file_name("trace.jsonl")).unwrap();
    let start: serde_json::Value = serde_json::from_str(trace.lines().next().unwrap()).unwrap();
    start["event"]["effective_grants"]["grant_sources"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn source_of(sources: &[serde_json::Value], grant: &str) -> String {
    sources
        .iter()
        .find(|g| g["grant"] == grant)
        .and_then(|g| g["source"].as_str())
        .unwrap_or("absent")
        .to_owned()
}

fn narrowing_manifest(ctx: &Ctx) -> Outcome {
    // Read-only paths exist on the sealed tier only (the copy tier refuses them).
    let sealed = ctx.tier() == Tier::Sealed;
    let read_only = if sealed {
        "[filesystem]\nread_only = [\"locked\"]\n"
    } else {
        ""
    };
    ctx.put(
        &ctx.work().join("cofferdam.toml"),
        &format!(
            "containment = \"scoped\"\n{read_only}[network]\nmode = \"none\"\n[resources]\npids = 64\nmax_file_size = \"1MiB\"\n"
        ),
    );
    ctx.put(&ctx.work().join("locked/f"), "orig");
    let r = ctx.sh("echo new > locked/f 2>/dev/null; echo wrote=$?");
    ctx.assert_boundary(&r);
    let pids = &r.bundle["resources"]["requested"]["pids"];
    let sources = grant_sources(&r.bundle_path);
    assert_eq!(
        source_of(&sources, "resources.pids"),
        "manifest",
        "{sources:?}"
    );
    let locked = !sealed || r.value("wrote") != Some("0");
    check(
        r.code == Some(0) && locked && pids == 64,
        "a narrowing manifest runs untrusted and applies (pids 64 requested; read-only path \
         refused on sealed)",
        format!("narrowing did not apply: {} pids {pids}", r.out),
    )
}

fn symlinked_outside(ctx: &Ctx) -> Outcome {
    let secret = "CANARY-9d41-symlinked-outside";
    ctx.put(&ctx.outside().join("secret"), secret);
    std::os::unix::fs::symlink(ctx.outside(), ctx.work().join("inner")).unwrap();
    std::os::unix::fs::symlink(ctx.outside(), ctx.work().join("vendor")).unwrap();
    let mut text = String::from("[filesystem]\nworkdir = \"inner\"\n");
    let mut keys = vec!["filesystem.workdir"];
    if ctx.tier() == Tier::Sealed {
        text.push_str("[[filesystem.mounts]]\nsource = \"vendor\"\nmode = \"read\"\n");
        keys.push("filesystem.mounts[0]");
    }
    ctx.put(&ctx.work().join("cofferdam.toml"), &text);
    let mut c = ctx.cmd();
    c.args(["--color", "never", "run", "--json"])
        .args(ctx.run_args())
        .args([
            "--",
            "sh",
            "-c",
            "cat secret vendor/secret 2>/dev/null; true",
        ])
        .stdin(Stdio::null());
    let out = c.output().unwrap();
    let text = both(&out);
    let named = keys.iter().all(|k| text.contains(&format!("  {k}: ")));
    check(
        out.status.code() == Some(2) && named && !text.contains(secret) && jobs(ctx) == 0,
        format!("refused (exit 2) naming {}", keys.join(", ")),
        format!(
            "an outside directory passed for an inside one (exit {:?}): {text}",
            out.status.code()
        ),
    )
}
