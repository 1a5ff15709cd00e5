//! What every command needs from the process: the current directory, HOME, the storage
//! root, the manifest's text, and the host facts (probed once, or read from a file saved by
//! `doctor --json`). This is the only place the CLI reads the environment.

use crate::cli::PolicyArgs;
use crate::config_files::ManifestFile;
use crate::exit::Failure;
use anyhow::Context as _;
use cofferdam_policy::trust::TrustState;
use cofferdam_policy::widen::Widening;
use cofferdam_policy::{LoadedManifest, Places, Policy, RunFlags, parse_manifest, resolve_layered};
use cofferdam_record::HostFacts;
use std::path::{Path, PathBuf};

/// Places and roots for this invocation.
pub struct Env {
    /// Current directory and home.
    pub places: Places,
    /// The storage root.
    pub storage_root: PathBuf,
}

/// Read the process environment once.
pub fn env() -> Result<Env, Failure> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .ok_or_else(|| Failure::setup("HOME is not set to an absolute path: set it and retry"))?;
    let home = fold_home(home).map_err(Failure::setup)?;
    check_cofferdam_home(std::env::var_os("COFFERDAM_HOME").as_deref())?;
    let storage_root = cofferdam_stage::storage_root(
        std::env::var_os("COFFERDAM_HOME"),
        std::env::var_os("XDG_DATA_HOME"),
        Some(home.clone().into_os_string()),
    )
    .map_err(Failure::setup)?;
    Ok(Env {
        places: Places { cwd, home },
        storage_root,
    })
}

/// `COFFERDAM_HOME`, when set and not empty, must be absolute: a relative one would name
/// another store from every directory (and was once ignored without a word, so jobs went
/// to the default store).
fn check_cofferdam_home(value: Option<&std::ffi::OsStr>) -> Result<(), Failure> {
    match value {
        Some(v) if !v.is_empty() && !Path::new(v).is_absolute() => Err(Failure::usage(format!(
            "COFFERDAM_HOME={} is not an absolute path: set it to one (e.g. \
             COFFERDAM_HOME=\"$PWD/{}\") or unset it for the default store \
             ($XDG_DATA_HOME/cofferdam, else ~/.local/share/cofferdam)",
            Path::new(v).display(),
            Path::new(v).display()
        ))),
        _ => Ok(()),
    }
}

/// HOME with its `..` folded lexically (`/home/u/..` is `/home`): the sandbox mounts a
/// private HOME at that path, and a path ending in `..` names no entry to mount on. Refused
/// when the fold names another directory than the kernel reaches (a symlink before the
/// `..`): the secrets hidden under HOME would then be looked for in the wrong place.
fn fold_home(home: PathBuf) -> Result<PathBuf, String> {
    if !home
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Ok(home);
    }
    let folded = cofferdam_policy::policy::normalize(&home);
    match std::fs::canonicalize(&home) {
        Ok(real) if std::fs::canonicalize(&folded).ok().as_ref() != Some(&real) => Err(format!(
            "HOME={} passes a symlink before `..`: it is {} on this host, not {}; set HOME to {} \
             and retry",
            home.display(),
            real.display(),
            folded.display(),
            real.display()
        )),
        _ => Ok(folded),
    }
}

/// The host facts: probed, or read from `file`.
pub fn host_facts(file: Option<&Path>) -> Result<HostFacts, Failure> {
    let Some(file) = file else {
        return Ok(cofferdam_sandbox::probe_host());
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::usage(format!("--host-facts {}: {e}", file.display())))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "--host-facts {}: not JSON ({e}); save facts with `cofferdam doctor --json > FILE`",
            file.display()
        ))
    })?;
    let facts = value.get("facts").cloned().unwrap_or(value);
    serde_path_to_error::deserialize(facts).map_err(|e| {
        Failure::usage(format!(
            "--host-facts {}: {} at `{}`; save facts with `cofferdam doctor --json > FILE`",
            file.display(),
            e.inner(),
            e.path()
        ))
    })
}

/// Resolve the policy from the user config, the manifest (given, or `cofferdam.toml` in the
/// workdir) and flags. A manifest that widens what the flags and user config allow is refused
/// unless the user trusted that exact content (`cofferdam trust`).
/// `command` is the run's (empty for `scope`): its program selects the agent profile.
pub fn policy(args: &PolicyArgs, env: &Env, command: &[String]) -> Result<Policy, Failure> {
    let user = crate::config_files::load_user_config(&env.places.home)?;
    let mut policy = layered_policy(args, env, user.as_ref())?;
    let profiles = cofferdam_policy::profiles::with_user(user.as_ref().map(|u| &u.manifest));
    crate::profile_apply::apply_profile(
        &mut policy,
        args,
        &profiles,
        &env.places.home,
        command,
        user.as_ref().and_then(|u| u.manifest.lend_path_toolchains),
    )?;
    Ok(policy)
}

fn layered_policy(
    args: &PolicyArgs,
    env: &Env,
    user: Option<&LoadedManifest>,
) -> Result<Policy, Failure> {
    let workdir = match &args.workdir {
        None => None,
        Some(w) => Some(
            std::fs::canonicalize(env.places.cwd.join(w))
                .map_err(|e| Failure::usage(format!("--workdir {}: {e}", w.display())))?,
        ),
    };
    if let Some(w) = &workdir
        && !w.is_dir()
    {
        return Err(Failure::usage(format!(
            "--workdir {}: not a directory; give the folder the command works in",
            w.display()
        )));
    }
    let manifest = load_manifest(args, workdir.as_deref().unwrap_or(&env.places.cwd), env)?;
    let flags = run_flags(args, workdir);
    let Some((loaded, file, shown)) = manifest else {
        return resolve_layered(user, None, &flags, &env.places).map_err(Failure::usage);
    };
    let widening = widening_keys(user, &loaded, &flags, &env.places)?;
    let mut policy =
        resolve_layered(user, Some(&loaded), &flags, &env.places).map_err(Failure::usage)?;
    if !widening.is_empty() {
        let trust = crate::config_files::read_trust(&env.places.home)?;
        let key = file.canonical.to_string_lossy();
        match trust.state(&key, &file.hash) {
            TrustState::Trusted => policy.mark_manifest_trusted(),
            state => return Err(refuse_widening(&shown, &widening, state)),
        }
    }
    Ok(policy)
}

/// The policy flags of `args` as the policy crate takes them, `workdir` already resolved.
pub fn run_flags(args: &PolicyArgs, workdir: Option<PathBuf>) -> RunFlags {
    RunFlags {
        workdir,
        containment: args.containment,
        mounts: args.mounts.clone(),
        lend_secrets: args.lend_secrets.clone(),
        read_only: args.read_only.clone(),
        env: args.env.clone(),
        network: args.network.clone(),
        allow_net: args.allow_net.clone(),
        publish: args.publish.clone(),
        memory: args.memory.clone(),
        pids: args.pids.clone(),
        cpus: args.cpus,
        timeout: args.timeout.clone(),
        cpu_time: args.cpu_time.clone(),
        max_file_size: args.max_file_size.clone(),
        open_files: args.open_files,
        io_bps: args.io_bps.clone(),
        tmp_size: args.tmp_size.clone(),
        stage_size: args.stage_size.clone(),
    }
}

/// The keys of `loaded` that grant more than `user` and `flags` allow.
pub fn widening_keys(
    user: Option<&LoadedManifest>,
    loaded: &LoadedManifest,
    flags: &RunFlags,
    places: &Places,
) -> Result<Vec<Widening>, Failure> {
    let baseline = resolve_layered(user, None, flags, places).map_err(Failure::usage)?;
    let effective = resolve_layered(user, Some(loaded), flags, places).map_err(Failure::usage)?;
    Ok(cofferdam_policy::widen::widening(
        &loaded.manifest,
        &on_disk(baseline),
        &on_disk(effective),
    ))
}

/// `p` with its workdir and mount sources as the kernel will reach them: a symlink inside
/// the workdir (`vendor -> ~/.ssh`) is where it points, not where it is written, so a
/// manifest cannot pass an outside path off as an inside one. Paths that do not exist
/// stay as written.
fn on_disk(mut p: Policy) -> Policy {
    let real = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    p.workdir = real(&p.workdir);
    for m in &mut p.mounts {
        m.source = real(&m.source);
    }
    p
}

/// One line per widening key, indented.
pub fn widening_lines(widening: &[Widening]) -> String {
    widening
        .iter()
        .map(|w| format!("  {}: {}\n", w.key, w.why))
        .collect()
}

fn refuse_widening(shown: &str, widening: &[Widening], state: TrustState) -> Failure {
    let head = if state == TrustState::Changed {
        format!(
            "refusing to run: {shown} changed since you trusted it, and it grants more than \
             your flags and user config allow:"
        )
    } else {
        format!(
            "refusing to run: {shown} grants more than your flags and user config allow, and \
             you have not trusted it:"
        )
    };
    Failure::usage(format!(
        "{head}\n{}  fix: read the file, then `cofferdam trust {shown}` to let it run as \
         written (any later change untrusts it); or remove those keys, or grant them \
         yourself with flags or in your user config",
        widening_lines(widening)
    ))
}

/// The manifest named by `--manifest` or found in the workdir: parsed, with the file read
/// (canonical path, content hash) and its name as the user sees it.
fn load_manifest(
    args: &PolicyArgs,
    workdir: &Path,
    env: &Env,
) -> Result<Option<(LoadedManifest, ManifestFile, String)>, Failure> {
    let (path, shown) = match &args.manifest {
        Some(p) => (env.places.cwd.join(p), p.display().to_string()),
        None => {
            let p = workdir.join("cofferdam.toml");
            if !p.exists() {
                return Ok(None);
            }
            let shown = p.display().to_string();
            (p, shown)
        }
    };
    let file = crate::config_files::read_manifest(&path, &shown)?;
    let manifest = parse_manifest(&shown, &file.text).map_err(Failure::usage)?;
    if manifest.lend_path_toolchains.is_some() {
        let line = file
            .text
            .lines()
            .position(|l| l.trim_start().starts_with(crate::profile_apply::LEND_KEY))
            .map_or(1, |i| i + 1);
        return Err(Failure::usage(format!(
            "{shown}:{line}:1: {key}: a workdir manifest cannot choose whether your PATH's \
             installs under HOME are lent (that is yours to say)\n  fix: remove the key; pass \
             --lend-path-toolchains or --no-lend-path-toolchains, or set `{key}` in your user \
             config ({})",
            crate::config_files::user_config_path(&env.places.home).display(),
            key = crate::profile_apply::LEND_KEY
        )));
    }
    if let Some(name) = manifest.profiles.keys().next() {
        return Err(Failure::usage(format!(
            "{shown}: profiles.{name}: a workdir manifest cannot define agent profiles (they \
             grant network, env and host paths)\n  fix: remove the [profiles.{name}] table; \
             put profiles in your user config ({})",
            crate::config_files::user_config_path(&env.places.home).display()
        )));
    }
    let loaded = LoadedManifest {
        path: cofferdam_policy::policy::normalize(&path),
        manifest,
    };
    Ok(Some((loaded, file, shown)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_is_folded_where_it_enters_unless_a_symlink_makes_that_another_place() {
        let tmp = tempfile::tempdir().unwrap();
        let t = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(t.join("u")).unwrap();
        std::fs::create_dir_all(t.join("deep/er")).unwrap();
        std::os::unix::fs::symlink(t.join("deep/er"), t.join("link")).unwrap();
        assert_eq!(fold_home(t.join("u")).unwrap(), t.join("u"));
        assert_eq!(fold_home(t.join("u/..")).unwrap(), t);
        assert_eq!(fold_home(t.join("u/../u/./")).unwrap(), t.join("u"));
        assert_eq!(fold_home("/..".into()).unwrap(), Path::new("/"));
        // Absent: nothing to disagree with.
        assert_eq!(fold_home(t.join("none/..")).unwrap(), t);
        // A symlink is not folded away without a word: the kernel goes to deep/.
        let e = fold_home(t.join("link/..")).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "HOME={}/link/.. passes a symlink before `..`: it is {}/deep on this host",
                t.display(),
                t.display()
            )),
            "{e}"
        );
        // A symlink without `..` is HOME as given.
        assert_eq!(fold_home(t.join("link")).unwrap(), t.join("link"));
    }
}
