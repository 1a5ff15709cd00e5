//! What every command needs from the process: the current directory, HOME, the storage
//! root, the manifest's text, and the host facts (probed once, or read from a file saved by
//! `doctor --json`). This is the only place the CLI reads the environment.

use crate::cli::PolicyArgs;
use crate::exit::Failure;
use anyhow::Context as _;
use cofferdam_policy::{LoadedManifest, Places, Policy, RunFlags, parse_manifest};
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

/// Resolve the policy from the manifest (given, or `cofferdam.toml` in the workdir) and flags.
pub fn policy(args: &PolicyArgs, env: &Env) -> Result<Policy, Failure> {
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
    let flags = RunFlags {
        workdir,
        containment: args.containment,
        mounts: args.mounts.clone(),
        read_only: args.read_only.clone(),
        env: args.env.clone(),
        network: args.network.clone(),
        allow_net: args.allow_net.clone(),
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
    };
    cofferdam_policy::resolve_policy(manifest.as_ref(), &flags, &env.places).map_err(Failure::usage)
}

fn load_manifest(
    args: &PolicyArgs,
    workdir: &Path,
    env: &Env,
) -> Result<Option<LoadedManifest>, Failure> {
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
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Failure::usage(format!("{shown}: cannot read the manifest: {e}")))?;
    let manifest = parse_manifest(&shown, &text).map_err(Failure::usage)?;
    Ok(Some(LoadedManifest {
        path: cofferdam_policy::policy::normalize(&path),
        manifest,
    }))
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
