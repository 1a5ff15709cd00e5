//! `cofferdam trust [FILE]`, `--list`, `--remove`: the user pins a manifest's exact content
//! so that it may grant more than their flags and user config (issue 19).
//!
//! Shows what the manifest widens before pinning it. The trust list's format is
//! `cofferdam_policy::trust`; its files are `crate::config_files`.

use crate::cli::TrustArgs;
use crate::config_files::{read_manifest, read_trust, write_trust};
use crate::context;
use crate::exit::{self, Failure};
use cofferdam_policy::trust::TrustState;
use cofferdam_policy::{LoadedManifest, RunFlags, parse_manifest};
use std::path::PathBuf;

/// Run the subcommand.
pub fn trust(args: &TrustArgs, json: bool) -> Result<u8, Failure> {
    let env = context::env()?;
    let home = &env.places.home;
    if args.list {
        return list(&env, json);
    }
    let given = args
        .file
        .clone()
        .unwrap_or_else(|| PathBuf::from("cofferdam.toml"));
    let shown = given.display().to_string();
    let path = env.places.cwd.join(&given);
    let mut store = read_trust(home)?;
    if args.remove {
        let key = std::fs::canonicalize(&path)
            .unwrap_or_else(|_| cofferdam_policy::policy::normalize(&path));
        let removed = store.remove(&key.to_string_lossy());
        if removed {
            write_trust(home, &store)?;
        }
        return report(
            json,
            &serde_json::json!({ "path": key.to_string_lossy(), "removed": removed }),
            &if removed {
                format!("{shown}: no longer trusted")
            } else {
                format!("{shown}: was not trusted")
            },
        );
    }
    let file = read_manifest(&path, &shown)?;
    let manifest = parse_manifest(&shown, &file.text).map_err(Failure::usage)?;
    let loaded = LoadedManifest {
        path: cofferdam_policy::policy::normalize(&path),
        manifest,
    };
    // The baseline `run` would have from the manifest's folder without flags.
    let flags = RunFlags {
        workdir: file.canonical.parent().map(PathBuf::from),
        ..RunFlags::default()
    };
    let user = crate::config_files::load_user_config(home)?;
    let widening = context::widening_keys(user.as_ref(), &loaded, &flags, &env.places)?;
    let key = file.canonical.to_string_lossy().into_owned();
    store.pin(&key, &file.hash);
    let written = write_trust(home, &store)?;
    let text = if widening.is_empty() {
        format!(
            "{shown}: trusted ({key}, blake3 {}); it grants nothing beyond your user config",
            file.hash
        )
    } else {
        format!(
            "{shown}: trusted ({key}, blake3 {}); it may now grant, beyond your flags and user \
             config:\n{}any change to the file untrusts it; `cofferdam trust --remove {shown}` \
             forgets it",
            file.hash,
            context::widening_lines(&widening)
        )
    };
    let keys: Vec<_> = widening
        .iter()
        .map(|w| serde_json::json!({ "key": w.key, "why": w.why }))
        .collect();
    report(
        json,
        &serde_json::json!({
            "path": key,
            "blake3": file.hash,
            "widening": keys,
            "trust_file": written.to_string_lossy(),
        }),
        &text,
    )
}

fn list(env: &context::Env, json: bool) -> Result<u8, Failure> {
    let store = read_trust(&env.places.home)?;
    let rows: Vec<_> = store
        .manifests
        .iter()
        .map(|e| {
            let now = std::fs::read(&e.path)
                .ok()
                .map(|b| blake3::hash(&b).to_hex().to_string());
            let state = match now {
                None => "missing",
                Some(h) => match store.state(&e.path, &h) {
                    TrustState::Trusted => "unchanged",
                    _ => "changed (untrusted)",
                },
            };
            (e, state)
        })
        .collect();
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(e, s)| serde_json::json!({ "path": e.path, "blake3": e.blake3, "state": s }))
            .collect();
        crate::print_json(&v)?;
        return Ok(exit::OK);
    }
    let mut text = String::new();
    for (e, s) in &rows {
        text.push_str(&format!("{}  {s}\n", e.path));
    }
    if rows.is_empty() {
        text.push_str("no manifest is trusted\n");
    }
    crate::write_stdout(crate::shown_text(&text).as_bytes())?;
    Ok(exit::OK)
}

fn report(json: bool, value: &serde_json::Value, text: &str) -> Result<u8, Failure> {
    if json {
        crate::print_json(value)?;
    } else {
        crate::write_stdout(format!("{}\n", crate::shown_text(text)).as_bytes())?;
    }
    Ok(exit::OK)
}
