//! What `run` checks of its resolved policy and `--stage` before anything is started or a
//! job is made: usage errors (exit 2) a person fixes on the command line, and warnings for
//! values that run but likely do not do what was meant. It reads paths (stat, list) and
//! the host's CPU count; it creates nothing. The store and the sandbox check again where
//! they act: this is for the message, not the boundary.

use crate::exit::Failure;
use cofferdam_net::allow::HostPattern;
use cofferdam_policy::Policy;
use std::path::Path;

/// The smallest `memory` a run can use: the sandbox's own init, the dynamic loader and a
/// shell take a few MiB before the command does anything; below this a run dies at setup
/// with an unexplained SIGKILL.
pub const MIN_MEMORY: u64 = 16 << 20;
/// The fewest processes a run can use: the sandbox init, the command, and a shell's
/// first child (`sh -c 'a | b'` needs three).
pub const MIN_PIDS: u64 = 8;
/// The fewest descriptors a run can use: the three standard streams, the dynamic loader's
/// libraries and the sandbox's status pipe.
pub const MIN_OPEN_FILES: u64 = 16;
/// The smallest private /tmp and stage: one page of data is not a usable filesystem.
pub const MIN_FS_SIZE: u64 = 1 << 20;

/// Skip the optional mounts whose source does not exist (moved to `skipped_mounts`, which
/// the bundle and the scope report show); the warnings to print, for the mounts the user
/// wrote (a profile's absent `~/.codex/config.toml` is not theirs to act on). Only a source
/// that is not there is skipped: one that cannot be read for another reason stays, for
/// [`check`] to refuse with its cause.
pub fn skip_missing_optional(policy: &mut Policy) -> Vec<String> {
    policy
        .skip_absent_optional(|p| {
            std::fs::metadata(p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        })
        .iter()
        .filter(|m| m.named_by_user())
        .map(cofferdam_policy::Mount::skipped_line)
        .collect()
}

/// Check `policy` and `stage`; the warnings to print before the run.
pub fn check(policy: &Policy, stage: Option<&Path>) -> Result<Vec<String>, Failure> {
    check_limits(policy)?;
    check_mounts(policy)?;
    if let Some(stage) = stage {
        check_stage(stage, &policy.workdir)?;
    }
    let mut warnings = Vec::new();
    if let Some(cpus) = policy.resources.cpus
        && let Ok(host) = std::thread::available_parallelism()
        && cpus > host.get() as f64
    {
        warnings.push(format!(
            "--cpus {cpus}: this host offers {host} CPU(s), so the limit never binds; give at \
             most {host}"
        ));
    }
    for sub in &policy.read_only {
        if std::fs::symlink_metadata(policy.workdir.join(sub)).is_err() {
            warnings.push(format!(
                "--read-only {sub}: no such path in the workdir {}; nothing is made read-only \
                 for it (a path created during the run is not protected)",
                policy.workdir.display()
            ));
        }
    }
    for entry in &policy.network.allow {
        if let HostPattern::Below(domain) = &entry.host
            && !domain.contains('.')
        {
            warnings.push(format!(
                "allow entry *.{domain} opens every name under the top-level domain `{domain}`: \
                 name the domains you mean, e.g. *.example.{domain}"
            ));
        }
    }
    Ok(warnings)
}

fn too_small(what: &str, value: impl std::fmt::Display, min: impl std::fmt::Display) -> Failure {
    Failure::usage(format!(
        "{what} {value} is below the usable minimum of {min}: the sandbox itself needs that \
         much; give at least {min}"
    ))
}

fn check_limits(policy: &Policy) -> Result<(), Failure> {
    let r = &policy.resources;
    if let Some(m) = r.memory
        && m.0 < MIN_MEMORY
    {
        return Err(too_small("memory", format!("{} bytes", m.0), "16MiB"));
    }
    if let Some(p) = r.pids
        && p < MIN_PIDS
    {
        return Err(too_small("pids", p, MIN_PIDS));
    }
    if let Some(n) = r.open_files
        && n < MIN_OPEN_FILES
    {
        return Err(too_small("open-files", n, MIN_OPEN_FILES));
    }
    for (what, size) in [("tmp-size", r.tmp_size), ("stage-size", r.stage_size)] {
        if let Some(s) = size
            && s.0 < MIN_FS_SIZE
        {
            return Err(too_small(what, format!("{} bytes", s.0), "1MiB"));
        }
    }
    Ok(())
}

fn check_mounts(policy: &Policy) -> Result<(), Failure> {
    for m in &policy.mounts {
        if let Err(e) = std::fs::metadata(&m.source) {
            return Err(Failure::usage(format!(
                "{} ({}): the source {} cannot be used: {e}; create it, drop the mount, or \
                 make it optional (a trailing ? on --mount, optional = true in a manifest)",
                m.written,
                m.origin,
                m.source.display()
            )));
        }
    }
    Ok(())
}

/// `--stage` must be new or an empty directory, and outside the workdir.
fn check_stage(stage: &Path, workdir: &Path) -> Result<(), Failure> {
    let shown = stage.display();
    match std::fs::symlink_metadata(stage) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Failure::usage(format!("--stage {shown}: {e}"))),
        Ok(m) if !m.is_dir() => {
            return Err(Failure::usage(format!(
                "--stage {shown} exists and is not a directory: give an empty or new directory"
            )));
        }
        Ok(_) => {
            let mut entries = std::fs::read_dir(stage)
                .map_err(|e| Failure::usage(format!("--stage {shown}: {e}")))?;
            if entries.next().is_some() {
                return Err(Failure::usage(format!(
                    "--stage {shown} is not empty: give an empty or new directory"
                )));
            }
        }
    }
    // The nearest existing ancestor, canonical, decides where the stage really is.
    let abs = std::path::absolute(stage).unwrap_or_else(|_| stage.to_path_buf());
    let mut probe = abs.as_path();
    let real = loop {
        if let Ok(r) = std::fs::canonicalize(probe) {
            break r.join(abs.strip_prefix(probe).unwrap_or(Path::new("")));
        }
        match probe.parent() {
            Some(p) => probe = p,
            None => break abs.clone(),
        }
    };
    if real.starts_with(workdir) {
        return Err(Failure::usage(format!(
            "--stage {shown} is inside the workdir {}: the command could reach its own stage; \
             choose a directory outside the workdir",
            workdir.display()
        )));
    }
    Ok(())
}
