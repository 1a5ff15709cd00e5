//! Agent profiles at the edge of a run: which program it starts (PATH lookup, symlinks
//! resolved), the profile that selects, and what that profile lends on this host. Used by
//! `context` (building a run's policy) and `cmd::agents` (listing profiles); the decisions are
//! `cofferdam_policy::profiles`, this only reads the environment and the disk for them.

use crate::cli::PolicyArgs;
use crate::exit::Failure;
use cofferdam_policy::Policy;
use cofferdam_policy::profiles::{self, Choice, Expansion};
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

/// What profile `p` lends on this host: its paths checked on disk, its variables read from
/// the environment.
pub fn expand(p: &profiles::Profile, home: &Path) -> Expansion {
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
