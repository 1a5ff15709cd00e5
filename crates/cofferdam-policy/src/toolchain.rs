//! Toolchain lending (issue 19): which trees of an install under HOME the command needs to
//! start, lent read-only. The caller follows the program's symlinks and `#!` interpreter on
//! the disk and passes every file it met; this decides what to lend of each and adds it to
//! the [`Policy`], credited to [`GrantSource::Toolchain`]. Pure.
//!
//! How narrow: the unit an installer writes, and no wider. A file in a `bin/` directory
//! lends that directory's parent (a venv, a pyenv version, an nvm node version, a cargo
//! home): interpreters find their libraries relative to themselves, so less breaks imports.
//! A file in a `node_modules/PKG/` lends that package (npm nests its dependencies in it).
//! Where that parent is HOME itself or `~/.local` (whose `share/` and `state/` hold other
//! programs' data), only the file's own directory is lent (`~/bin`, `~/.local/bin`). HOME is
//! never lent whole; trees inside or around the workdir are left alone (it is staged).
//! Some installs run code from a second tree ([`companions`]: rustup proxies, pyenv shims,
//! `pip --user` scripts); that tree is lent too, when it exists.

use crate::manifest::MountMode;
use crate::policy::{Mount, Policy};
use cofferdam_record::scope::{GrantSource, GrantSourceReport};
use std::path::{Component, Path, PathBuf};

/// The origin of a toolchain mount in records.
pub const ORIGIN: &str = crate::policy::TOOLCHAIN_ORIGIN;

/// The tree to lend for `file`, when it lives under `home`.
pub fn install_tree(file: &Path, home: &Path) -> Option<PathBuf> {
    let rel = file.strip_prefix(home).ok()?;
    if rel.as_os_str().is_empty() || rel.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    let too_wide = |p: &Path| p == home || p == home.join(".local");
    let names: Vec<&std::ffi::OsStr> = file.iter().collect();
    if let Some(i) = names.iter().rposition(|n| *n == "node_modules") {
        let take = match names.get(i + 1) {
            Some(n) if n.to_string_lossy().starts_with('@') => i + 3,
            Some(_) => i + 2,
            None => 0,
        };
        if take > 0 && take < names.len() {
            let pkg: PathBuf = names[..take].iter().collect();
            if pkg.starts_with(home) && !too_wide(&pkg) {
                return Some(pkg);
            }
        }
    }
    let dir = file.parent()?;
    if dir.file_name().is_some_and(|n| n == "bin")
        && let Some(prefix) = dir.parent()
        && prefix.starts_with(home)
        && !too_wide(prefix)
    {
        return Some(prefix.to_path_buf());
    }
    Some(if too_wide(dir) && dir == home {
        file.to_path_buf()
    } else {
        dir.to_path_buf()
    })
}

/// The trees to lend for the files `chain` (program, symlink hops, interpreters): one per
/// install, none inside another, none inside or around `workdir`.
pub fn trees(chain: &[PathBuf], home: &Path, workdir: &Path) -> Vec<PathBuf> {
    distinct(chain.iter().filter_map(|f| install_tree(f, home)), workdir)
}

/// [`trees`] and the [`companions`] they need, among what `exists` says is there.
pub fn needed(
    chain: &[PathBuf],
    home: &Path,
    workdir: &Path,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let own = chain.iter().filter_map(|f| install_tree(f, home));
    distinct(own.chain(companions(chain, home, exists)), workdir)
}

/// `candidates` with none inside another, none inside or around `workdir`.
fn distinct(candidates: impl Iterator<Item = PathBuf>, workdir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for t in candidates {
        if t.starts_with(workdir) || workdir.starts_with(&t) {
            continue;
        }
        if out.iter().any(|o| t.starts_with(o)) {
            continue;
        }
        out.retain(|o| !o.starts_with(&t));
        out.push(t);
    }
    out
}

/// What an install in `chain` needs at run time beyond its own tree, among what `exists`
/// says is there; each lent whole, read-only, like a tree:
/// - a rustup proxy (a file in `~/.cargo/bin` beside `rustup`) runs its toolchain from
///   `~/.rustup`;
/// - a pyenv shim (a file in `~/.pyenv/shims`) runs pyenv itself (`libexec/`), which picks
///   a version in `versions/` at run time: the pyenv root;
/// - a `pip install --user` script (a file in `~/.local/bin`) run by `pythonX.Y` imports from
///   `~/.local/lib/pythonX.Y`.
///
/// Only the default places under `home`: `CARGO_HOME`, `RUSTUP_HOME` and `PYENV_ROOT` are not
/// passed into the run, so inside the tools look there.
pub fn companions(chain: &[PathBuf], home: &Path, exists: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let cargo_bin = home.join(".cargo/bin");
    let shims = home.join(".pyenv/shims");
    let local_bin = home.join(".local/bin");
    let in_dir = |d: &Path| chain.iter().any(|f| f.parent() == Some(d));
    let mut out = Vec::new();
    if in_dir(&cargo_bin) && exists(&cargo_bin.join("rustup")) {
        out.push(home.join(".rustup"));
    }
    if in_dir(&shims) {
        out.push(home.join(".pyenv"));
    }
    if in_dir(&local_bin) {
        for f in chain {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            if let Some(v) = name.as_deref().and_then(|n| n.strip_prefix("python"))
                && v.contains('.')
                && v.chars().all(|c| c.is_ascii_digit() || c == '.')
            {
                out.push(home.join(format!(".local/lib/python{v}")));
            }
        }
    }
    out.retain(|p| exists(p));
    out.dedup();
    out
}

/// Why a bare command `name` was not found inside when the host's PATH has it at `found`:
/// its directory is under `home` (private inside) and none of `lent` (the run's mount
/// targets) covers it. The message names the path and the mount that lends its install;
/// `None` when it should have been visible (the plain error stands).
pub fn unlent_path_entry(
    name: &str,
    found: &Path,
    home: &Path,
    lent: &[PathBuf],
) -> Option<String> {
    let dir = found.parent()?;
    if !dir.starts_with(home) || lent.iter().any(|t| dir.starts_with(t)) {
        return None;
    }
    let tree = install_tree(found, home).unwrap_or_else(|| dir.to_path_buf());
    Some(format!(
        "{name}: command not found in the sandbox; the host's PATH has it at {}, whose          directory {} is under HOME, which is private inside and not lent: lend it read-only          with `--mount {}:read` (or `[[filesystem.mounts]]` in the user config; toolchain          lending does it for the program a run starts, unless `--no-agent-defaults`)",
        found.display(),
        dir.display(),
        tree.display()
    ))
}

/// Lend `trees` read-only, recorded like any lent path; one a mount already covers (a flag,
/// the config, a profile) is left to it.
pub fn apply(policy: &mut Policy, trees: &[PathBuf], home: &Path) {
    for t in trees {
        if policy.mounts.iter().any(|m| t.starts_with(&m.target)) {
            continue;
        }
        let written = match t.strip_prefix(home) {
            Ok(rel) => format!("~/{}", rel.display()),
            Err(_) => t.display().to_string(),
        };
        let m = Mount {
            source: t.clone(),
            target: t.clone(),
            mode: MountMode::Read,
            origin: ORIGIN.to_owned(),
            written,
            optional: true,
        };
        policy.grant_sources.push(GrantSourceReport {
            grant: "filesystem.mounts".to_owned(),
            value: crate::policy::provenance::mount_value(&m),
            source: GrantSource::Toolchain,
            profile: None,
        });
        policy.mounts.push(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(f: &str) -> Option<String> {
        install_tree(Path::new(f), Path::new("/h/u")).map(|p| p.display().to_string())
    }

    #[test]
    fn an_install_lends_its_prefix_and_never_home_or_dot_local() {
        assert_eq!(
            tree("/h/u/.pyenv/versions/3.12.1/bin/python3.12").as_deref(),
            Some("/h/u/.pyenv/versions/3.12.1")
        );
        assert_eq!(
            tree("/h/u/p/.venv/bin/aider").as_deref(),
            Some("/h/u/p/.venv")
        );
        assert_eq!(
            tree("/h/u/.nvm/versions/node/v20.1.0/lib/node_modules/@openai/codex/bin/codex.js")
                .as_deref(),
            Some("/h/u/.nvm/versions/node/v20.1.0/lib/node_modules/@openai/codex")
        );
        assert_eq!(
            tree("/h/u/.npm-global/lib/node_modules/left-pad/index.js").as_deref(),
            Some("/h/u/.npm-global/lib/node_modules/left-pad")
        );
        assert_eq!(
            tree("/h/u/.local/bin/tool").as_deref(),
            Some("/h/u/.local/bin")
        );
        assert_eq!(tree("/h/u/bin/tool").as_deref(), Some("/h/u/bin"));
        assert_eq!(tree("/h/u/tool").as_deref(), Some("/h/u/tool"));
        assert_eq!(tree("/usr/bin/python3"), None);
        assert_eq!(tree("/h/u"), None);
        assert_eq!(tree("/h/u/../etc/x"), None);
    }

    #[test]
    fn trees_are_deduplicated_and_keep_off_the_workdir() {
        let chain: Vec<PathBuf> = [
            "/h/u/.local/bin/tool",
            "/h/u/.pyenv/versions/3.12/bin/tool",
            "/h/u/.pyenv/versions/3.12/bin/python3",
            "/h/u/work/.venv/bin/python",
            "/usr/bin/env",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        let t = trees(&chain, Path::new("/h/u"), Path::new("/h/u/work"));
        assert_eq!(
            t,
            vec![
                PathBuf::from("/h/u/.local/bin"),
                PathBuf::from("/h/u/.pyenv/versions/3.12")
            ]
        );
    }

    #[test]
    fn rustup_pyenv_and_pip_user_installs_bring_what_they_run_from_when_it_exists() {
        let home = Path::new("/h/u");
        let chain = |fs: &[&str]| fs.iter().map(PathBuf::from).collect::<Vec<_>>();
        let all = |_: &Path| true;
        let rustup = chain(&["/h/u/.cargo/bin/cargo"]);
        assert_eq!(
            companions(&rustup, home, &all),
            [PathBuf::from("/h/u/.rustup")]
        );
        // A cargo home without rustup (cargo installed otherwise) needs nothing more; nor
        // does a rustup home that is not there.
        let no_rustup = |p: &Path| p != Path::new("/h/u/.cargo/bin/rustup");
        assert!(companions(&rustup, home, &no_rustup).is_empty());
        let no_home = |p: &Path| p != Path::new("/h/u/.rustup");
        assert!(companions(&rustup, home, &no_home).is_empty());
        assert_eq!(
            companions(&chain(&["/h/u/.pyenv/shims/python"]), home, &all),
            [PathBuf::from("/h/u/.pyenv")]
        );
        let pip = chain(&[
            "/h/u/.local/bin/black",
            "/usr/bin/python3",
            "/usr/bin/python3.11",
        ]);
        assert_eq!(
            companions(&pip, home, &all),
            [PathBuf::from("/h/u/.local/lib/python3.11")]
        );
        // The same interpreter for a program elsewhere lends no user site.
        let elsewhere = chain(&["/opt/x/bin/black", "/usr/bin/python3.11"]);
        assert!(companions(&elsewhere, home, &all).is_empty());
        assert!(
            companions(
                &chain(&["/h/u/.local/bin/x", "/usr/bin/python3-config"]),
                home,
                &all
            )
            .is_empty()
        );
        // Lent as named, never widened to their parent (`~/.local/lib`); a pyenv shim's
        // own directory is inside the root it brings.
        let shim = chain(&["/h/u/.pyenv/shims/python"]);
        assert_eq!(
            needed(&shim, home, Path::new("/w"), &all),
            [PathBuf::from("/h/u/.pyenv")]
        );
        assert_eq!(
            needed(&pip, home, Path::new("/w"), &all),
            [
                PathBuf::from("/h/u/.local/bin"),
                PathBuf::from("/h/u/.local/lib/python3.11")
            ]
        );
    }

    #[test]
    fn a_command_on_an_unlent_path_entry_under_home_names_it_and_the_mount() {
        let home = Path::new("/h/u");
        let found = Path::new("/h/u/.local/bin/tool");
        let m = unlent_path_entry("tool", found, home, &[]).unwrap();
        assert!(m.contains("at /h/u/.local/bin/tool"), "{m}");
        assert!(m.contains("--mount /h/u/.local/bin:read"), "{m}");
        let cargo = unlent_path_entry("cargo", Path::new("/h/u/.cargo/bin/cargo"), home, &[]);
        assert!(cargo.unwrap().contains("--mount /h/u/.cargo:read"));
        // Lent, or outside HOME (visible, or missing for another reason): the plain error.
        assert!(unlent_path_entry("tool", found, home, &[PathBuf::from("/h/u/.local")]).is_none());
        assert!(unlent_path_entry("sh", Path::new("/usr/bin/sh"), home, &[]).is_none());
    }

    #[test]
    fn lent_trees_are_read_only_mounts_credited_to_the_toolchain() {
        let places = crate::policy::Places {
            cwd: "/w".into(),
            home: "/h/u".into(),
        };
        let mut p =
            crate::policy::resolve_policy(None, &crate::policy::RunFlags::default(), &places)
                .unwrap();
        let t = vec![PathBuf::from("/h/u/.pyenv/versions/3.12")];
        apply(&mut p, &t, Path::new("/h/u"));
        apply(&mut p, &t, Path::new("/h/u"));
        let lent: Vec<_> = p.mounts.iter().filter(|m| m.origin == ORIGIN).collect();
        assert_eq!(lent.len(), 1);
        assert_eq!(lent[0].mode, MountMode::Read);
        assert_eq!(lent[0].written, "~/.pyenv/versions/3.12");
        assert!(
            p.grant_sources
                .iter()
                .any(|g| g.source == GrantSource::Toolchain && g.value.contains(".pyenv"))
        );
    }
}
