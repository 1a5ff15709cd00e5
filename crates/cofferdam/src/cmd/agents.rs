//! Agent profiles at the edge: which program a run starts (PATH lookup, symlinks resolved),
//! the profile it selects and what that lends on this host, and `cofferdam agents`, which
//! lists every profile with its grants here. The decisions are `cofferdam_policy::profiles`;
//! this only reads the environment and the disk for them.

use crate::cli::PolicyArgs;
use crate::exit::{Failure, OK};
use cofferdam_policy::Policy;
use cofferdam_policy::profiles::{self, Choice, Expansion};
use cofferdam_record::shown::escape;
use std::path::{Path, PathBuf};

/// Where `program` is: itself when it names a path, else the first executable match on
/// `PATH`; with where it leads after symlinks.
fn locate(program: &str) -> (PathBuf, Option<PathBuf>) {
    let invoked = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(program))
                .find(|c| c.is_file())
        })
    };
    match invoked {
        Some(p) => {
            let real = std::fs::canonicalize(&p).ok();
            (p, real)
        }
        None => (PathBuf::from(program), None),
    }
}

fn host_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

fn choice(args: &PolicyArgs) -> Choice {
    match (&args.agent, args.no_agent_defaults) {
        (_, true) => Choice::Off,
        (Some(n), false) => Choice::Named(n.clone()),
        (None, false) => Choice::Auto,
    }
}

fn expand(p: &profiles::Profile, home: &Path) -> Expansion {
    // The agent's own config, when its profile names one (an unreadable one is the
    // agent's to report; the vendor's host is used then).
    let config = p.provider_config.as_deref().and_then(|w| {
        let path = match w.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => PathBuf::from(w),
        };
        std::fs::read_to_string(path).ok()
    });
    profiles::expand(
        p,
        home,
        &host_env(),
        &|path: &Path| std::fs::symlink_metadata(path).is_ok(),
        config.as_deref(),
    )
}

/// Add the profile `program` (or `--agent`) selects to `policy`; nothing with
/// `--no-agent-defaults` or for a program no profile names.
pub fn apply_profile(
    policy: &mut Policy,
    args: &PolicyArgs,
    table: &[profiles::Profile],
    home: &Path,
    program: Option<&str>,
) -> Result<(), Failure> {
    let located = program.map(locate);
    let chosen = profiles::select(
        table,
        &choice(args),
        located.as_ref().map(|(p, _)| p.as_path()),
        located.as_ref().and_then(|(_, r)| r.as_deref()),
    )
    .map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(p) = chosen {
        profiles::apply(policy, &expand(p, home));
    }
    Ok(())
}

/// One profile as `agents --json` prints it.
#[derive(serde::Serialize)]
struct Listed {
    name: String,
    programs: Vec<String>,
    install_paths: Vec<String>,
    env_pass: Vec<String>,
    /// Names only: values are not shown.
    env_set: Vec<String>,
    network_mode: &'static str,
    network_allow: Vec<String>,
    network_allow_from: String,
    paths: Vec<ListedPath>,
}

#[derive(serde::Serialize)]
struct ListedPath {
    written: String,
    path: String,
    mode: &'static str,
    persists_on_host: bool,
    present: bool,
}

/// `cofferdam agents`: every profile and what it would grant on this host.
pub fn list(json: bool) -> Result<u8, Failure> {
    let home = crate::context::env()?.places.home;
    let user = crate::config_files::load_user_config(&home)?;
    let listed: Vec<Listed> = profiles::with_user(user.as_ref().map(|u| &u.manifest))
        .iter()
        .map(|p| {
            let x = expand(p, &home);
            Listed {
                name: p.name.clone(),
                programs: p.programs.clone(),
                install_paths: p.install_paths.clone(),
                env_pass: x.env_pass.clone(),
                env_set: x.env_set.iter().map(|(k, _)| k.clone()).collect(),
                network_mode: "allow",
                network_allow: x.allow.clone(),
                network_allow_from: x.allow_from.clone(),
                paths: x
                    .paths
                    .iter()
                    .map(|pp| ListedPath {
                        written: pp.written.clone(),
                        path: pp.path.display().to_string(),
                        mode: pp.mode.wire_name(),
                        persists_on_host: pp.mode == cofferdam_policy::MountMode::Write,
                        present: pp.present,
                    })
                    .collect(),
            }
        })
        .collect();
    if json {
        crate::print_json(&serde_json::json!({ "profiles": listed }))?;
        return Ok(OK);
    }
    let mut o = String::new();
    for l in &listed {
        o.push_str(&format!(
            "{} (programs: {}; or --agent {})\n",
            l.name,
            l.programs.join(", "),
            l.name
        ));
        o.push_str(&format!("  env passed:  {}\n", l.env_pass.join(", ")));
        if !l.env_set.is_empty() {
            o.push_str(&format!("  env set:     {}\n", l.env_set.join(", ")));
        }
        o.push_str(&format!(
            "  network:     allow (unless you choose a mode) to {} (from {})\n",
            escape(&l.network_allow.join(", ")),
            l.network_allow_from
        ));
        for pp in &l.paths {
            let how = if pp.persists_on_host {
                "write, on the host, outside review"
            } else {
                "read-only"
            };
            let state = if pp.present {
                "present"
            } else {
                "absent, skipped"
            };
            o.push_str(&format!(
                "  path:        {} ({how}; {state})\n",
                escape(&pp.path)
            ));
        }
    }
    o.push_str("--no-agent-defaults turns profiles off; --agent NAME picks one.\n");
    crate::write_stdout(o.as_bytes())?;
    Ok(OK)
}
