//! Agent profiles at the edge of a run: which program it starts (PATH lookup, symlinks
//! resolved), the profile that selects, and what that profile lends on this host. Used by
//! `context` (building a run's policy) and `cmd::agents` (listing profiles); the decisions are
//! `cofferdam_policy::profiles`, this only reads the environment and the disk for them.
//! Also the toolchain the program needs: its symlinks and `#!` interpreters followed on the
//! disk, and under a profile (or `--lend-path-toolchains`) the installs the caller's `PATH`
//! names, for `cofferdam_policy::toolchain` to lend what of them lives under HOME; and the
//! exit-127 explanation of a command on a `PATH` entry that is not lent.

use crate::cli::PolicyArgs;
use crate::exit::Failure;
use cofferdam_policy::Policy;
use cofferdam_policy::profiles::{self, Choice, Expansion};
use cofferdam_policy::toolchain;
use cofferdam_record::scope::{GrantSource, GrantSourceReport};
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
    let env = host_env();
    let config = p
        .provider_config_path(home, &env)
        .and_then(|path| std::fs::read_to_string(path).ok());
    profiles::expand(
        p,
        home,
        &env,
        &|path: &Path| std::fs::symlink_metadata(path).is_ok(),
        config.as_deref(),
    )
}

/// Whether the run lends the installs under HOME on the caller's `PATH`, and the grant row
/// saying what decided it: a flag, then the chosen user profile's `lend_path_toolchains`,
/// then the user config's top-level one (`user`), else on exactly when a profile is chosen.
fn lend_decision(
    args: &PolicyArgs,
    user: Option<bool>,
    chosen: Option<&profiles::Profile>,
) -> (bool, GrantSourceReport) {
    let row = |on: bool, value: String, source: GrantSource, profile: Option<String>| {
        let grant = GrantSourceReport {
            grant: LEND_KEY.to_owned(),
            value,
            source,
            profile,
            absent: false,
        };
        (on, grant)
    };
    let word = |on: bool| if on { "true" } else { "false" }.to_owned();
    if args.lend_path_toolchains || args.no_lend_path_toolchains {
        let on = args.lend_path_toolchains;
        return row(on, word(on), GrantSource::Flag, None);
    }
    if let Some(p) = chosen
        && let Some(on) = p.lend_path_toolchains
    {
        let value = format!("{} (profiles.{})", word(on), p.name);
        return row(on, value, GrantSource::UserConfig, None);
    }
    if let Some(on) = user {
        return row(on, word(on), GrantSource::UserConfig, None);
    }
    match chosen {
        Some(p) => row(true, word(true), GrantSource::Profile, Some(p.name.clone())),
        None => row(false, word(false), GrantSource::Default, None),
    }
}

/// The user-config key (and grant name) of `--lend-path-toolchains`.
pub const LEND_KEY: &str = "lend_path_toolchains";

/// Add the profile the command's program (or `--agent`) selects to `policy`; nothing with
/// `--no-agent-defaults` or for a program no profile names. `command` is empty for `scope`.
/// `user_lend` is the user config's top-level `lend_path_toolchains`.
pub fn apply_profile(
    policy: &mut Policy,
    args: &PolicyArgs,
    table: &[profiles::Profile],
    home: &Path,
    command: &[String],
    user_lend: Option<bool>,
) -> Result<(), Failure> {
    let located = command.first().map(|p| locate(p));
    let chosen = profiles::select(
        table,
        &choice(args),
        located.as_ref().map(|(p, _)| p.as_path()),
        located.as_ref().and_then(|(_, r)| r.as_deref()),
    )
    .map_err(|e| Failure::usage(e.to_string()))?;
    let (lend, lend_row) = lend_decision(args, user_lend, chosen);
    if let Some(p) = chosen {
        let mut x = expand(p, home);
        // Its arguments are the agent's: not added to another program run under its
        // profile (`--agent codex -- sh`).
        let by_program = profiles::select(
            table,
            &Choice::Auto,
            located.as_ref().map(|(p, _)| p.as_path()),
            located.as_ref().and_then(|(_, r)| r.as_deref()),
        )
        .ok()
        .flatten()
        .is_some_and(|q| q.name == p.name);
        if !command.is_empty() && !by_program {
            x.arg_patch = None;
        }
        profiles::apply(policy, &x, command);
    }
    let env = host_env();
    let roots = toolchain::Roots::new(home, &|n: &str| {
        env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
    });
    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let mut trees = Vec::new();
    if !args.no_agent_defaults
        && let Some((invoked, _)) = &located
    {
        trees.extend(toolchain::needed(
            &toolchain_files(invoked),
            home,
            &roots,
            &policy.workdir,
            &exists,
        ));
    }
    if lend {
        trees.extend(path_toolchains(home, &roots, &policy.workdir));
    }
    toolchain::apply(policy, &trees, home, &roots);
    // Turned off where it would be on (a profile's default): its shell tool will not find
    // what the caller's PATH has under HOME, and the run says so before it starts.
    if !lend && chosen.is_some() {
        let off_by = match lend_row.source {
            GrantSource::Flag => "--no-lend-path-toolchains".to_owned(),
            _ => format!(
                "`{LEND_KEY} = false` in {}",
                crate::config_files::user_config_path(home).display()
            ),
        };
        let would = path_toolchains(home, &roots, &policy.workdir);
        policy
            .warnings
            .extend(unlent_path_dirs(policy, home, &would).iter().map(|d| {
                format!(
                    "PATH entry {d} is under HOME, private inside, and not lent ({off_by}): its \
                     programs are not found in the run (exit 127); lend it read-only with \
                     `--mount {d}:read`, or every known toolchain on PATH with \
                     `--lend-path-toolchains`",
                    d = d.display()
                )
            }));
    }
    policy.grant_sources.push(lend_row);
    Ok(())
}

/// The caller's `PATH` directories under HOME (which is private inside) that toolchain
/// lending would lend (`would`, [`path_toolchains`]) and no mount of `policy` lends.
fn unlent_path_dirs(policy: &Policy, home: &Path, would: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for e in path_entries() {
        let dir = cofferdam_policy::policy::normalize(&e.dir);
        let lent = policy.mounts.iter().any(|m| {
            m.mode != cofferdam_policy::manifest::MountMode::Hide && dir.starts_with(&m.target)
        });
        let lendable = would.iter().any(|t| dir.starts_with(t));
        if dir.starts_with(home) && lendable && !lent && !out.contains(&dir) {
            out.push(dir);
        }
    }
    out
}

/// How many entries of a `PATH` directory whose programs may lead elsewhere
/// ([`toolchain::follows_entries`]) are followed; the rest only have that directory.
const ENTRY_LIMIT: usize = 512;

/// The caller's `PATH` entries as [`toolchain::PathEntry`]s (a venv's `pyvenv.cfg` read).
fn path_entries() -> Vec<toolchain::PathEntry> {
    let Some(path) = std::env::var_os("PATH") else {
        return Vec::new();
    };
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|dir| {
            let venv_home = dir
                .parent()
                .and_then(|p| std::fs::read_to_string(p.join("pyvenv.cfg")).ok())
                .and_then(|cfg| toolchain::venv_home(&cfg));
            toolchain::PathEntry { dir, venv_home }
        })
        .collect()
}

/// The installs the caller's `PATH` lends ([`toolchain::path_trees`]), and for a lent
/// directory whose programs may be links into other installs (`~/.local/bin`), what each
/// program's chain needs.
fn path_toolchains(home: &Path, roots: &toolchain::Roots, workdir: &Path) -> Vec<PathBuf> {
    let exists = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let entries = path_entries();
    let mut trees = toolchain::path_trees(&entries, home, roots, workdir, &exists);
    for e in entries
        .iter()
        .filter(|e| toolchain::follows_entries(&e.dir, home))
    {
        let Ok(dir) = std::fs::read_dir(&e.dir) else {
            continue;
        };
        for f in dir.flatten().take(ENTRY_LIMIT) {
            trees.extend(toolchain::needed(
                &toolchain_files(&f.path()),
                home,
                roots,
                workdir,
                &exists,
            ));
        }
    }
    trees
}

/// For a bare command that was not found inside (exit 127): the message naming the host's
/// PATH entry that has it and is not lent, and the flag that lends it, when that is why.
pub fn unlent_path_entry(policy: &Policy, argv: &[String], home: &Path) -> Option<String> {
    let name = argv.first()?;
    if name.contains('/') {
        return None;
    }
    let entry = path_entries()
        .into_iter()
        .find(|e| e.dir.join(name).is_file())?;
    let env = host_env();
    let roots = toolchain::Roots::new(home, &|n: &str| {
        env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
    });
    let lent: Vec<PathBuf> = policy
        .mounts
        .iter()
        .filter(|m| m.mode != cofferdam_policy::manifest::MountMode::Hide)
        .map(|m| m.target.clone())
        .collect();
    toolchain::unlent_path_entry(
        name,
        &entry.dir.join(name),
        entry.venv_home.as_deref(),
        home,
        &roots,
        &lent,
    )
}

/// How many links and interpreters are followed before giving up (a loop, or a chain no
/// install has).
const CHAIN_LIMIT: usize = 16;

/// Every file the kernel meets starting `program`: the path, each symlink hop, the file it
/// leads to, and likewise for its `#!` interpreter (for `#!/usr/bin/env NAME`, NAME on PATH).
fn toolchain_files(program: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut next = Some(program.to_path_buf());
    while let Some(mut f) = next.take() {
        if out.len() > CHAIN_LIMIT {
            break;
        }
        // The hops: each link as named, then where it leads.
        for _ in 0..CHAIN_LIMIT {
            out.push(f.clone());
            match std::fs::read_link(&f) {
                Ok(t) => f = f.parent().unwrap_or(Path::new("/")).join(t),
                Err(_) => break,
            }
        }
        next = shebang(&f);
    }
    out
}

/// The interpreter `file`'s `#!` line runs: the path it names, or for `env NAME` the NAME
/// found on PATH.
fn shebang(file: &Path) -> Option<PathBuf> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line.split(|b| *b == b'\n').next()?).into_owned();
    let mut words = line.split_whitespace();
    let interp = PathBuf::from(words.next()?);
    if interp.file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
        let (found, real) = locate(name);
        return real.map(|_| found);
    }
    Some(interp)
}

/// Before the command starts: copy each of the policy's state seeds (a host file a profile
/// copies once into its writable state dir) where its copy is still absent. The copy is
/// made beside its place and linked there without replacing anything (a file or symlink
/// that appeared since the policy was made wins), so a half copy is never seen. One
/// warning for each copy made or not made, for the run's records.
pub fn seed_state(policy: &Policy) -> Vec<String> {
    policy
        .state_seeds
        .iter()
        .filter_map(|seed| match copy_seed(&seed.from, &seed.to) {
            Ok(true) => Some(format!(
                "copied {} into the agent state lent writable by profile:{} ({}); a host \
                 write outside review",
                seed.written, seed.profile, seed.why
            )),
            Ok(false) => None,
            Err(e) => Some(format!(
                "could not copy {} for profile:{} ({e}); the agent starts without it: copy \
                 it yourself ({})",
                seed.written, seed.profile, seed.why
            )),
        })
        .collect()
}

/// `from` copied to `to`, mode 0600, unless `to` exists; whether a copy was made.
fn copy_seed(from: &Path, to: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::symlink_metadata(to).is_ok() {
        return Ok(false);
    }
    let dir = to
        .parent()
        .ok_or_else(|| std::io::Error::other("the copy's place has no parent"))?;
    let mut src = std::fs::File::open(from)?;
    if !src.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            from.display()
        )));
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".cofferdam-seed-")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    std::io::copy(&mut src, tmp.as_file_mut())?;
    match tmp.persist_noclobber(to) {
        Ok(_) => Ok(true),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e.error),
    }
}

/// After the run: what it created where a profile's read-only file was absent (inside the
/// agent's writable state dir, `profiles::creatable`) is renamed aside, so that it grants
/// the next run nothing; one warning for each, naming it and how to take it back.
pub fn set_aside_created(policy: &Policy, run_id: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    for m in profiles::creatable(policy) {
        if std::fs::symlink_metadata(&m.source).is_err() {
            continue;
        }
        let name = m
            .source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let aside = m
            .source
            .with_file_name(format!("{name}.set-aside-{run_id}"));
        let profile = m.origin.strip_prefix("profile:").unwrap_or(&m.origin);
        let grants = profiles::created_grants(profile, &m.source);
        warnings.push(match std::fs::rename(&m.source, &aside) {
            Ok(()) => format!(
                "the run created {} in the agent state lent writable by {}, where it was \
                 absent; {grants}: set aside as {} (read it; rename it back to use it)",
                m.source.display(),
                m.origin,
                aside.display()
            ),
            Err(e) => format!(
                "the run created {} in the agent state lent writable by {}, where it was \
                 absent; {grants}; it could not be set aside ({e}): read it before the next \
                 run, or remove it",
                m.source.display(),
                m.origin
            ),
        });
    }
    warnings
}
