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
//!
//! The programs an agent's shell tool runs later (`cargo test`, `pytest`) are not known
//! before the run: with an agent profile (or `--lend-path-toolchains`) the caller's `PATH`
//! entries that are known install roots under HOME are lent the same way ([`path_trees`]).
//! The places honour `CARGO_HOME`, `RUSTUP_HOME`, `PYENV_ROOT`, `NVM_DIR`, `GOPATH` and
//! `BUN_INSTALL` ([`Roots`]). What the secret list hides stays hidden inside a lent tree.
//! May not touch the disk or the environment: the caller reads them and passes values in.

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
    roots: &Roots,
    workdir: &Path,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let own = chain.iter().filter_map(|f| install_tree(f, home));
    distinct(own.chain(companions(chain, home, roots, exists)), workdir)
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

/// Where the installers under HOME put their trees: the defaults, or the variable that moves
/// each (`CARGO_HOME`, `RUSTUP_HOME`, `PYENV_ROOT`, `NVM_DIR`, `GOPATH` (its first entry),
/// `BUN_INSTALL`) when the caller set it to an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The cargo home (`~/.cargo`): `bin/`, the registry cache, and credentials to hide.
    pub cargo_home: PathBuf,
    /// The rustup home (`~/.rustup`): the toolchains a rustup proxy runs.
    pub rustup_home: PathBuf,
    /// The pyenv root (`~/.pyenv`): `bin/`, `shims/`, `versions/`.
    pub pyenv_root: PathBuf,
    /// The nvm dir (`~/.nvm`): one node per `versions/node/VERSION`.
    pub nvm_dir: PathBuf,
    /// The Go path (`~/go`): `bin/` holds `go install`ed programs, `src/` may hold the
    /// user's sources, so only `bin/` is lent.
    pub gopath: PathBuf,
    /// Bun's install root (`~/.bun`).
    pub bun: PathBuf,
    /// The variables of these the caller set (passed into the run when their tree is lent,
    /// so that the tools inside look where the tree is).
    pub set: Vec<(&'static str, PathBuf)>,
}

/// The variables that move a toolchain's tree, and the tree each defaults to under HOME.
pub const ROOT_VARS: [(&str, &str); 6] = [
    ("CARGO_HOME", ".cargo"),
    ("RUSTUP_HOME", ".rustup"),
    ("PYENV_ROOT", ".pyenv"),
    ("NVM_DIR", ".nvm"),
    ("GOPATH", "go"),
    ("BUN_INSTALL", ".bun"),
];

impl Roots {
    /// The roots for a user whose home is `home`, with `var` reading the caller's
    /// environment. A relative or empty value is ignored (the tool would not use it either).
    pub fn new(home: &Path, var: &dyn Fn(&str) -> Option<String>) -> Self {
        let mut set = Vec::new();
        let mut at = |name: &'static str, default: &str| {
            let given = var(name)
                .and_then(|v| v.split(':').next().map(PathBuf::from))
                .filter(|p| p.is_absolute())
                .map(|p| crate::policy::normalize(&p));
            match given {
                Some(p) => {
                    set.push((name, p.clone()));
                    p
                }
                None => home.join(default),
            }
        };
        let [cargo_home, rustup_home, pyenv_root, nvm_dir, gopath, bun] =
            ROOT_VARS.map(|(n, d)| at(n, d));
        Self {
            cargo_home,
            rustup_home,
            pyenv_root,
            nvm_dir,
            gopath,
            bun,
            set,
        }
    }

    /// The defaults under `home`, as when no variable is set.
    pub fn default_for(home: &Path) -> Self {
        Self::new(home, &|_| None)
    }

    /// The secrets of these trees that the fixed list ([`crate::secrets::HOME_SECRETS`])
    /// does not name: a moved cargo home's registry tokens.
    pub fn secrets(&self, home: &Path) -> Vec<PathBuf> {
        ["credentials", "credentials.toml"]
            .iter()
            .map(|f| self.cargo_home.join(f))
            .filter(|p| {
                !crate::secrets::HOME_SECRETS
                    .iter()
                    .any(|s| home.join(s) == *p)
            })
            .collect()
    }
}

/// What an install in `chain` needs at run time beyond its own tree, among what `exists`
/// says is there; each lent whole, read-only, like a tree:
/// - a rustup proxy (a file in the cargo home's `bin/` beside `rustup`) runs its toolchain
///   from the rustup home;
/// - a pyenv shim (a file in the pyenv root's `shims/`) runs pyenv itself (`libexec/`), which
///   picks a version in `versions/` at run time: the pyenv root;
/// - a `pip install --user` script (a file in `~/.local/bin`) run by `pythonX.Y` imports from
///   `~/.local/lib/pythonX.Y`.
///
/// The places are `roots`' (the caller's `CARGO_HOME`, `RUSTUP_HOME`, `PYENV_ROOT` honoured);
/// [`apply`] passes a variable that moved a lent tree into the run.
pub fn companions(
    chain: &[PathBuf],
    home: &Path,
    roots: &Roots,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let cargo_bin = roots.cargo_home.join("bin");
    let shims = roots.pyenv_root.join("shims");
    let local_bin = home.join(".local/bin");
    let in_dir = |d: &Path| chain.iter().any(|f| f.parent() == Some(d));
    let mut out = Vec::new();
    if in_dir(&cargo_bin) && exists(&cargo_bin.join("rustup")) {
        out.push(roots.rustup_home.clone());
    }
    if in_dir(&shims) {
        out.push(roots.pyenv_root.clone());
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
    out.retain(|p| p.starts_with(home) && exists(p));
    out.dedup();
    out
}

/// One entry of the caller's `PATH`, as the caller read it from the disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathEntry {
    /// The directory, as `PATH` names it.
    pub dir: PathBuf,
    /// When `dir/../pyvenv.cfg` exists (a venv's `bin/`): its `home =` value, the directory
    /// of the interpreter the venv was made from.
    pub venv_home: Option<PathBuf>,
}

/// The `home =` of a venv's `pyvenv.cfg` text: the directory of its base interpreter.
pub fn venv_home(pyvenv_cfg: &str) -> Option<PathBuf> {
    pyvenv_cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        let v = v.trim();
        (k.trim() == "home" && v.starts_with('/')).then(|| PathBuf::from(v))
    })
}

/// What to lend for one `PATH` entry that is a known install root under `home` (private
/// inside); nothing for any other entry (outside HOME it is visible; an unknown directory
/// under HOME is not lent, and exit 127 names it: [`unlent_path_entry`]):
/// - the cargo home's `bin/`: the cargo home (its registry cache builds offline; its
///   credentials stay hidden), and the rustup home when `rustup` is beside (proxies);
/// - the pyenv root's `bin/` or `shims/`: the pyenv root; a pyenv version's `bin/`: that
///   version;
/// - an nvm node's `bin/`: that node version (its global packages are inside);
/// - `~/.local/bin` and the Go path's `bin/`: that directory only (`~/.local` holds other
///   programs' data, the Go path the user's sources);
/// - Bun's `bin/`: Bun's root (global packages in `install/global`);
/// - a venv's `bin/`: the venv, and its base interpreter's install when that is under HOME.
///
/// The narrowness is [`install_tree`]'s; HOME itself is never a tree.
pub fn path_entry_trees(e: &PathEntry, home: &Path, roots: &Roots) -> Vec<PathBuf> {
    let dir = crate::policy::normalize(&e.dir);
    if !dir.starts_with(home) || dir == home {
        return Vec::new();
    }
    let probe = dir.join("x");
    let bin_of = |root: &Path| dir == root.join("bin");
    let mut out = Vec::new();
    if bin_of(&roots.cargo_home) {
        out.push(roots.cargo_home.clone());
        out.push(roots.rustup_home.clone());
    } else if bin_of(&roots.pyenv_root) || dir == roots.pyenv_root.join("shims") {
        out.push(roots.pyenv_root.clone());
    } else if dir == home.join(".local/bin") || bin_of(&roots.gopath) {
        out.push(dir.clone());
    } else if bin_of(&roots.bun) {
        out.push(roots.bun.clone());
    } else if (dir.starts_with(roots.pyenv_root.join("versions"))
        || dir.starts_with(roots.nvm_dir.join("versions")))
        && dir.file_name().is_some_and(|n| n == "bin")
    {
        out.extend(install_tree(&probe, home));
    } else if let Some(base) = &e.venv_home
        && dir.file_name().is_some_and(|n| n == "bin")
    {
        out.extend(install_tree(&probe, home));
        out.extend(install_tree(&base.join("python"), home));
    }
    out.retain(|t| t.starts_with(home) && t != home && t != &home.join(".local"));
    out
}

/// The trees to lend for the caller's `PATH` (`entries`), among what `exists` says is there,
/// none inside another, none inside or around `workdir`. A rustup home is lent only beside a
/// `rustup` in the cargo home's `bin/`.
pub fn path_trees(
    entries: &[PathEntry],
    home: &Path,
    roots: &Roots,
    workdir: &Path,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<PathBuf> {
    let rustup = exists(&roots.cargo_home.join("bin/rustup"));
    let all = entries
        .iter()
        .flat_map(|e| path_entry_trees(e, home, roots))
        .filter(|t| (rustup || *t != roots.rustup_home) && exists(t))
        .collect::<Vec<_>>();
    distinct(all.into_iter(), workdir)
}

/// Whether the programs in `dir` (a lent `PATH` entry) may lead elsewhere under HOME:
/// `~/.local/bin`, where pipx, uv and `pip --user` put links and scripts into trees of their
/// own. The caller follows each entry's chain ([`needed`]) and lends those too.
pub fn follows_entries(dir: &Path, home: &Path) -> bool {
    crate::policy::normalize(dir) == home.join(".local/bin")
}

/// Why a bare command `name` was not found inside when the host's PATH has it at `found`:
/// its directory is under `home` (private inside) and none of `lent` (the run's mount
/// targets) covers it. The message names the path, the mount that lends its install, and
/// `--lend-path-toolchains` when that directory is a known install root
/// ([`path_entry_trees`]; `venv_home` as for a [`PathEntry`]); `None` when it should have
/// been visible (the plain error stands).
pub fn unlent_path_entry(
    name: &str,
    found: &Path,
    venv_home: Option<&Path>,
    home: &Path,
    roots: &Roots,
    lent: &[PathBuf],
) -> Option<String> {
    let dir = found.parent()?;
    if !dir.starts_with(home) || lent.iter().any(|t| dir.starts_with(t)) {
        return None;
    }
    let tree = install_tree(found, home).unwrap_or_else(|| dir.to_path_buf());
    let entry = PathEntry {
        dir: dir.to_path_buf(),
        venv_home: venv_home.map(Path::to_path_buf),
    };
    let known = !path_entry_trees(&entry, home, roots).is_empty();
    Some(format!(
        "{name}: command not found in the sandbox; the host's PATH has it at {}, whose \
         directory {} is under HOME, which is private inside and not lent: lend it read-only \
         with `--mount {}:read` (or `[[filesystem.mounts]]` in the user config){}",
        found.display(),
        dir.display(),
        tree.display(),
        if known {
            ", or every known toolchain on PATH with `--lend-path-toolchains` (on with an \
             agent profile, off with `--no-agent-defaults`)"
        } else {
            "; toolchain lending lends the install of the program a run starts, unless \
             `--no-agent-defaults`"
        }
    ))
}

/// Lend `trees` read-only, recorded like any lent path; one a mount already covers (a flag,
/// the config, a profile) is left to it. A variable of `roots` that moved a lent tree is
/// passed into the run, so that the tools inside look there; a secret of a lent tree that
/// the fixed list does not name ([`Roots::secrets`]) is hidden by a mount of its own.
pub fn apply(policy: &mut Policy, trees: &[PathBuf], home: &Path, roots: &Roots) {
    let shown = |t: &Path| match t.strip_prefix(home) {
        Ok(rel) => format!("~/{}", rel.display()),
        Err(_) => t.display().to_string(),
    };
    let mut lent = Vec::new();
    for t in trees {
        if policy.mounts.iter().any(|m| t.starts_with(&m.target)) {
            continue;
        }
        lent.push(t.clone());
        push_mount(policy, t, MountMode::Read, shown(t));
    }
    let covered = |p: &Path| lent.iter().any(|t| p.starts_with(t) || t.starts_with(p));
    for (var, path) in &roots.set {
        if covered(path) && !policy.env_allow.iter().any(|n| n == var) {
            policy.env_allow.push((*var).to_owned());
            policy.grant_sources.push(GrantSourceReport {
                grant: "env.allow".to_owned(),
                value: (*var).to_owned(),
                source: GrantSource::Toolchain,
                profile: None,
                absent: false,
            });
        }
    }
    for secret in roots.secrets(home) {
        let hidden = policy
            .mounts
            .iter()
            .any(|m| m.mode == MountMode::Hide && secret.starts_with(&m.target));
        if !hidden && lent.iter().any(|t| secret.starts_with(t)) {
            push_mount(policy, &secret, MountMode::Hide, shown(&secret));
        }
    }
}

fn push_mount(policy: &mut Policy, t: &Path, mode: MountMode, written: String) {
    let m = Mount {
        source: t.to_path_buf(),
        target: t.to_path_buf(),
        mode,
        origin: ORIGIN.to_owned(),
        written,
        optional: true,
    };
    policy.grant_sources.push(GrantSourceReport {
        grant: "filesystem.mounts".to_owned(),
        value: crate::policy::provenance::mount_value(&m),
        source: GrantSource::Toolchain,
        profile: None,
        absent: false,
    });
    policy.mounts.push(m);
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
            companions(&rustup, home, &Roots::default_for(home), &all),
            [PathBuf::from("/h/u/.rustup")]
        );
        // A cargo home without rustup (cargo installed otherwise) needs nothing more; nor
        // does a rustup home that is not there.
        let no_rustup = |p: &Path| p != Path::new("/h/u/.cargo/bin/rustup");
        assert!(companions(&rustup, home, &Roots::default_for(home), &no_rustup).is_empty());
        let no_home = |p: &Path| p != Path::new("/h/u/.rustup");
        assert!(companions(&rustup, home, &Roots::default_for(home), &no_home).is_empty());
        assert_eq!(
            companions(
                &chain(&["/h/u/.pyenv/shims/python"]),
                home,
                &Roots::default_for(home),
                &all
            ),
            [PathBuf::from("/h/u/.pyenv")]
        );
        let pip = chain(&[
            "/h/u/.local/bin/black",
            "/usr/bin/python3",
            "/usr/bin/python3.11",
        ]);
        assert_eq!(
            companions(&pip, home, &Roots::default_for(home), &all),
            [PathBuf::from("/h/u/.local/lib/python3.11")]
        );
        // The same interpreter for a program elsewhere lends no user site.
        let elsewhere = chain(&["/opt/x/bin/black", "/usr/bin/python3.11"]);
        assert!(companions(&elsewhere, home, &Roots::default_for(home), &all).is_empty());
        assert!(
            companions(
                &chain(&["/h/u/.local/bin/x", "/usr/bin/python3-config"]),
                home,
                &Roots::default_for(home),
                &all
            )
            .is_empty()
        );
        // Lent as named, never widened to their parent (`~/.local/lib`); a pyenv shim's
        // own directory is inside the root it brings.
        let shim = chain(&["/h/u/.pyenv/shims/python"]);
        assert_eq!(
            needed(
                &shim,
                home,
                &Roots::default_for(home),
                Path::new("/w"),
                &all
            ),
            [PathBuf::from("/h/u/.pyenv")]
        );
        assert_eq!(
            needed(&pip, home, &Roots::default_for(home), Path::new("/w"), &all),
            [
                PathBuf::from("/h/u/.local/bin"),
                PathBuf::from("/h/u/.local/lib/python3.11")
            ]
        );
    }

    #[test]
    fn a_command_on_an_unlent_path_entry_under_home_names_it_and_the_mount() {
        let home = Path::new("/h/u");
        let roots = Roots::default_for(home);
        let found = Path::new("/h/u/.local/bin/tool");
        let m = unlent_path_entry("tool", found, None, home, &roots, &[]).unwrap();
        assert!(m.contains("at /h/u/.local/bin/tool"), "{m}");
        assert!(m.contains("--mount /h/u/.local/bin:read"), "{m}");
        let cargo = unlent_path_entry(
            "cargo",
            Path::new("/h/u/.cargo/bin/cargo"),
            None,
            home,
            &roots,
            &[],
        );
        assert!(cargo.unwrap().contains("--mount /h/u/.cargo:read"));
        // Lent, or outside HOME (visible, or missing for another reason): the plain error.
        assert!(
            unlent_path_entry(
                "tool",
                found,
                None,
                home,
                &roots,
                &[PathBuf::from("/h/u/.local")]
            )
            .is_none()
        );
        assert!(
            unlent_path_entry("sh", Path::new("/usr/bin/sh"), None, home, &roots, &[]).is_none()
        );
    }

    fn default_policy() -> Policy {
        let places = crate::policy::Places {
            cwd: "/w".into(),
            home: "/h/u".into(),
        };
        crate::policy::resolve_policy(None, &crate::policy::RunFlags::default(), &places).unwrap()
    }

    #[test]
    fn lent_trees_are_read_only_mounts_credited_to_the_toolchain() {
        let mut p = default_policy();
        let t = vec![PathBuf::from("/h/u/.pyenv/versions/3.12")];
        apply(
            &mut p,
            &t,
            Path::new("/h/u"),
            &Roots::default_for(Path::new("/h/u")),
        );
        apply(
            &mut p,
            &t,
            Path::new("/h/u"),
            &Roots::default_for(Path::new("/h/u")),
        );
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

    fn roots_with(vars: &[(&str, &str)]) -> Roots {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Roots::new(Path::new("/h/u"), &|n| {
            vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn the_variables_that_move_a_toolchain_are_honoured_when_absolute() {
        let d = Roots::default_for(Path::new("/h/u"));
        assert_eq!(d.cargo_home, PathBuf::from("/h/u/.cargo"));
        assert_eq!(d.rustup_home, PathBuf::from("/h/u/.rustup"));
        assert_eq!(d.pyenv_root, PathBuf::from("/h/u/.pyenv"));
        assert_eq!(d.nvm_dir, PathBuf::from("/h/u/.nvm"));
        assert_eq!(d.gopath, PathBuf::from("/h/u/go"));
        assert!(d.set.is_empty());
        let r = roots_with(&[
            ("CARGO_HOME", "/h/u/.local/share/cargo/"),
            ("RUSTUP_HOME", "/h/u/rs"),
            ("PYENV_ROOT", "relative/ignored"),
            ("GOPATH", "/h/u/gp:/h/u/other"),
            ("NVM_DIR", ""),
        ]);
        assert_eq!(r.cargo_home, PathBuf::from("/h/u/.local/share/cargo"));
        assert_eq!(r.rustup_home, PathBuf::from("/h/u/rs"));
        assert_eq!(r.pyenv_root, PathBuf::from("/h/u/.pyenv"));
        assert_eq!(r.nvm_dir, PathBuf::from("/h/u/.nvm"));
        assert_eq!(r.gopath, PathBuf::from("/h/u/gp"));
        let names: Vec<&str> = r.set.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["CARGO_HOME", "RUSTUP_HOME", "GOPATH"]);
        // A moved cargo home's tokens are not on the fixed list: named here.
        assert_eq!(
            r.secrets(Path::new("/h/u")),
            [
                PathBuf::from("/h/u/.local/share/cargo/credentials"),
                PathBuf::from("/h/u/.local/share/cargo/credentials.toml")
            ]
        );
        assert!(d.secrets(Path::new("/h/u")).is_empty());
    }

    #[test]
    fn companions_follow_a_moved_cargo_rustup_and_pyenv() {
        let home = Path::new("/h/u");
        let r = roots_with(&[
            ("CARGO_HOME", "/h/u/c"),
            ("RUSTUP_HOME", "/h/u/r"),
            ("PYENV_ROOT", "/h/u/py"),
        ]);
        let all = |_: &Path| true;
        let cargo = [PathBuf::from("/h/u/c/bin/cargo")];
        assert_eq!(
            companions(&cargo, home, &r, &all),
            [PathBuf::from("/h/u/r")]
        );
        // The default places mean nothing once moved.
        let old = [PathBuf::from("/h/u/.cargo/bin/cargo")];
        assert!(companions(&old, home, &r, &all).is_empty());
        let shim = [PathBuf::from("/h/u/py/shims/python")];
        assert_eq!(
            needed(&shim, home, &r, Path::new("/w"), &all),
            [PathBuf::from("/h/u/py")]
        );
        // A companion outside HOME is visible anyway: not lent.
        let out = roots_with(&[("RUSTUP_HOME", "/opt/rustup")]);
        assert!(companions(&old, home, &out, &all).is_empty());
    }

    fn entry(dir: &str) -> PathEntry {
        PathEntry {
            dir: PathBuf::from(dir),
            venv_home: None,
        }
    }

    fn lent_for(e: &PathEntry, r: &Roots) -> Vec<String> {
        path_entry_trees(e, Path::new("/h/u"), r)
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    #[test]
    fn each_known_install_root_on_path_lends_its_unit_and_no_more() {
        let d = Roots::default_for(Path::new("/h/u"));
        assert_eq!(
            lent_for(&entry("/h/u/.cargo/bin"), &d),
            ["/h/u/.cargo", "/h/u/.rustup"]
        );
        assert_eq!(lent_for(&entry("/h/u/.pyenv/shims"), &d), ["/h/u/.pyenv"]);
        assert_eq!(lent_for(&entry("/h/u/.pyenv/bin"), &d), ["/h/u/.pyenv"]);
        assert_eq!(
            lent_for(&entry("/h/u/.pyenv/versions/3.12.1/bin"), &d),
            ["/h/u/.pyenv/versions/3.12.1"]
        );
        assert_eq!(
            lent_for(&entry("/h/u/.nvm/versions/node/v20.1.0/bin"), &d),
            ["/h/u/.nvm/versions/node/v20.1.0"]
        );
        assert_eq!(lent_for(&entry("/h/u/.local/bin"), &d), ["/h/u/.local/bin"]);
        assert_eq!(
            lent_for(&entry("/h/u/.local/bin/"), &d),
            ["/h/u/.local/bin"]
        );
        assert_eq!(lent_for(&entry("/h/u/go/bin"), &d), ["/h/u/go/bin"]);
        assert_eq!(lent_for(&entry("/h/u/.bun/bin"), &d), ["/h/u/.bun"]);
        // Unknown entries under HOME, HOME itself, and what is outside HOME: nothing.
        for dir in [
            "/h/u",
            "/h/u/bin",
            "/h/u/projects/x/scripts",
            "/h/u/.nvm",
            "/h/u/.local",
            "/usr/local/bin",
            "/h/u/../etc",
        ] {
            assert!(lent_for(&entry(dir), &d).is_empty(), "{dir}");
        }
        // A venv: itself and its base interpreter's install under HOME.
        let venv = PathEntry {
            dir: PathBuf::from("/h/u/p/.venv/bin"),
            venv_home: Some(PathBuf::from("/h/u/.pyenv/versions/3.12.1/bin")),
        };
        assert_eq!(
            lent_for(&venv, &d),
            ["/h/u/p/.venv", "/h/u/.pyenv/versions/3.12.1"]
        );
        let system = PathEntry {
            venv_home: Some(PathBuf::from("/usr/bin")),
            ..venv.clone()
        };
        assert_eq!(lent_for(&system, &d), ["/h/u/p/.venv"]);
        // A moved cargo home is known where it is.
        let r = roots_with(&[("CARGO_HOME", "/h/u/c")]);
        assert_eq!(
            lent_for(&entry("/h/u/c/bin"), &r),
            ["/h/u/c", "/h/u/.rustup"]
        );
        assert!(lent_for(&entry("/h/u/.cargo/bin"), &r).is_empty());
    }

    #[test]
    fn path_trees_keep_what_exists_off_the_workdir_and_rustup_only_beside_its_proxy() {
        let home = Path::new("/h/u");
        let d = Roots::default_for(home);
        let entries = [
            entry("/h/u/.cargo/bin"),
            entry("/h/u/.local/bin"),
            entry("/h/u/work/.venv/bin"),
            entry("/h/u/.bun/bin"),
            entry("/usr/bin"),
        ];
        let without =
            |p: &Path| p != Path::new("/h/u/.bun") && p != Path::new("/h/u/.cargo/bin/rustup");
        assert_eq!(
            path_trees(&entries, home, &d, Path::new("/h/u/work"), &without),
            [
                PathBuf::from("/h/u/.cargo"),
                PathBuf::from("/h/u/.local/bin")
            ]
        );
        let all = |_: &Path| true;
        assert_eq!(
            path_trees(&entries, home, &d, Path::new("/h/u/work"), &all),
            [
                PathBuf::from("/h/u/.cargo"),
                PathBuf::from("/h/u/.rustup"),
                PathBuf::from("/h/u/.local/bin"),
                PathBuf::from("/h/u/.bun")
            ]
        );
        assert!(follows_entries(Path::new("/h/u/.local/bin/"), home));
        assert!(!follows_entries(Path::new("/h/u/.cargo/bin"), home));
    }

    #[test]
    fn a_venv_names_its_base_interpreter_in_pyvenv_cfg() {
        let cfg = "home = /h/u/.pyenv/versions/3.12.1/bin\ninclude-system-site-packages = false\nversion = 3.12.1\n";
        assert_eq!(
            venv_home(cfg),
            Some(PathBuf::from("/h/u/.pyenv/versions/3.12.1/bin"))
        );
        assert_eq!(venv_home("version = 3\nhome = relative\n"), None);
        assert_eq!(venv_home(""), None);
    }

    #[test]
    fn a_moved_tree_passes_its_variable_and_hides_its_secrets() {
        let mut p = default_policy();
        let home = Path::new("/h/u");
        let r = roots_with(&[("CARGO_HOME", "/h/u/c"), ("PYENV_ROOT", "/h/u/py")]);
        apply(&mut p, &[PathBuf::from("/h/u/c")], home, &r);
        assert!(p.env_allow.contains(&"CARGO_HOME".to_owned()));
        // PYENV_ROOT's tree is not lent: its variable stays out.
        assert!(!p.env_allow.contains(&"PYENV_ROOT".to_owned()));
        let hidden: Vec<_> = p
            .mounts
            .iter()
            .filter(|m| m.mode == MountMode::Hide)
            .map(|m| m.target.display().to_string())
            .collect();
        assert_eq!(hidden, ["/h/u/c/credentials", "/h/u/c/credentials.toml"]);
        assert!(p.grant_sources.iter().any(|g| g.grant == "env.allow"
            && g.value == "CARGO_HOME"
            && g.source == GrantSource::Toolchain));
        // The message for a command on a known root names the flag too.
        let m = unlent_path_entry("cargo", Path::new("/h/u/c/bin/cargo"), None, home, &r, &[]);
        assert!(m.unwrap().contains("--lend-path-toolchains"));
        let m = unlent_path_entry("x", Path::new("/h/u/scripts/x"), None, home, &r, &[]);
        assert!(!m.unwrap().contains("--lend-path-toolchains"));
    }
}
