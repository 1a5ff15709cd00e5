//! The user's own files: the user config (`$XDG_CONFIG_HOME/cofferdam/config.toml`) and the
//! trusted-manifest list (`$XDG_STATE_HOME/cofferdam/trusted.toml`).
//!
//! Owns reading them safely (no symlinks followed at the last component, owner and mode
//! checked on the open descriptor) and writing the trust list atomically (0600 in a 0700
//! directory). What they mean is `cofferdam_policy`'s (`parse_manifest`, `trust`, `widen`).

use crate::exit::Failure;
use cofferdam_policy::trust::TrustStore;
use cofferdam_policy::{LoadedManifest, parse_manifest};
use cofferdam_stage::owned::{self, Why};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::io::{Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// `$NAME` when it is absolute, else `$HOME/<fallback>` (the XDG rule).
fn xdg_dir(var: Option<&OsStr>, home: &Path, fallback: &str) -> PathBuf {
    var.map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(fallback))
}

/// Where the user config lives.
pub fn user_config_path(home: &Path) -> PathBuf {
    xdg_dir(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        home,
        ".config",
    )
    .join("cofferdam/config.toml")
}

/// The folder of the trust list.
pub fn state_dir(home: &Path) -> PathBuf {
    xdg_dir(
        std::env::var_os("XDG_STATE_HOME").as_deref(),
        home,
        ".local/state",
    )
    .join("cofferdam")
}

/// Refuse `st` unless it is a regular file (or `want_dir`: a directory) of the caller that
/// nobody else may write.
fn check_owned(fd: &OwnedFd, shown: &Path, want_dir: bool) -> Result<(), Failure> {
    let st = rustix::fs::fstat(fd)
        .map_err(|e| Failure::setup(format!("{}: cannot stat: {e}", shown.display())))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    let want = if want_dir {
        FileType::Directory
    } else {
        FileType::RegularFile
    };
    let me = owned::me();
    // The store's rule for a path of its own (`owned::judge`, no parent leniency).
    let why = owned::judge(kind, st.st_uid, st.st_mode, want, me, None).map(|why| match why {
        Why::Kind | Why::Symlink => format!(
            "is not a {}",
            if want_dir {
                "directory"
            } else {
                "regular file"
            }
        ),
        Why::Owner { uid, me } => format!("is owned by uid {uid}, not by you (uid {me})"),
        Why::Writable { mode } => format!("is writable by others (mode {mode:o})"),
    });
    match why {
        None => Ok(()),
        Some(why) => Err(Failure::usage(format!(
            "{}: {why}: another user could change your policy through it\n  fix: make it \
             yours and private (`chown {me} {p}; chmod go-w {p}`), or remove it",
            shown.display(),
            p = shown.display()
        ))),
    }
}

/// Open `path` read-only without following a symlink there; `None` when absent.
fn open_nofollow(dir: Option<&OwnedFd>, path: &Path) -> Result<Option<OwnedFd>, Failure> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    let opened = match dir {
        Some(d) => rustix::fs::openat(d, path, flags, Mode::empty()),
        None => rustix::fs::open(path, flags, Mode::empty()),
    };
    match opened {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::LOOP) => Err(Failure::usage(format!(
            "{}: is a symlink, which cofferdam does not follow for policy files\n  fix: \
             replace the link with the file itself",
            path.display()
        ))),
        Err(e) => Err(Failure::usage(format!(
            "{}: cannot open: {e}",
            path.display()
        ))),
    }
}

fn read_all(fd: OwnedFd, shown: &Path) -> Result<String, Failure> {
    let mut text = String::new();
    std::fs::File::from(fd)
        .read_to_string(&mut text)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", shown.display())))?;
    Ok(text)
}

/// The user config, when there is one: checked (owner, mode, no symlink), parsed with the
/// manifest's parser, `filesystem.workdir` refused (a workdir is per run, not a default).
pub fn load_user_config(home: &Path) -> Result<Option<LoadedManifest>, Failure> {
    let path = user_config_path(home);
    let Some(fd) = open_nofollow(None, &path)? else {
        return Ok(None);
    };
    check_owned(&fd, &path, false)?;
    let text = read_all(fd, &path)?;
    let shown = path.display().to_string();
    let manifest = parse_manifest(&shown, &text).map_err(Failure::usage)?;
    if manifest.filesystem.workdir.is_some() {
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with("workdir"))
            .map_or(1, |i| i + 1);
        return Err(Failure::usage(format!(
            "{shown}:{line}:1: filesystem.workdir: the user config cannot set a workdir\n  \
             fix: remove the key; pass --workdir DIR or run from the folder"
        )));
    }
    Ok(Some(LoadedManifest { path, manifest }))
}

/// The state directory opened without following symlinks, created 0700 when `create`;
/// `None` when absent and not created.
fn open_state_dir(home: &Path, create: bool) -> Result<Option<(OwnedFd, PathBuf)>, Failure> {
    let dir = state_dir(home);
    let parent = dir.parent().unwrap_or(Path::new("/"));
    if create {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::setup(format!("{}: cannot create: {e}", parent.display())))?;
        match rustix::fs::mkdir(&dir, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => {
                return Err(Failure::setup(format!(
                    "{}: cannot create: {e}",
                    dir.display()
                )));
            }
        }
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(&dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) if !create => return Ok(None),
        Err(Errno::LOOP | Errno::NOTDIR) => {
            return Err(Failure::usage(format!(
                "{}: is a symlink or not a directory\n  fix: remove it; cofferdam recreates it",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(Failure::setup(format!(
                "{}: cannot open: {e}",
                dir.display()
            )));
        }
    };
    check_owned(&fd, &dir, true)?;
    Ok(Some((fd, dir)))
}

const TRUST_FILE: &str = "trusted.toml";

/// The trust list (empty when there is none yet).
pub fn read_trust(home: &Path) -> Result<TrustStore, Failure> {
    let Some((dir, dir_path)) = open_state_dir(home, false)? else {
        return Ok(TrustStore::default());
    };
    let path = dir_path.join(TRUST_FILE);
    let Some(fd) = open_nofollow(Some(&dir), Path::new(TRUST_FILE))? else {
        return Ok(TrustStore::default());
    };
    check_owned(&fd, &path, false)?;
    let text = read_all(fd, &path)?;
    TrustStore::parse(&path.display().to_string(), &text).map_err(Failure::usage)
}

/// Replace the trust list atomically; returns its path.
pub fn write_trust(home: &Path, store: &TrustStore) -> Result<PathBuf, Failure> {
    let Some((dir, dir_path)) = open_state_dir(home, true)? else {
        return Err(Failure::setup(
            "the state directory vanished while it was created",
        ));
    };
    let path = dir_path.join(TRUST_FILE);
    let fail = |e: &dyn std::fmt::Display| {
        Failure::setup(format!("{}: cannot write: {e}", path.display()))
    };
    let tmp = format!(".{TRUST_FILE}.{}", std::process::id());
    // A leftover of a crashed write by a process that had our pid: nobody else can write here.
    let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    let fd = rustix::fs::openat(
        &dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| fail(&e))?;
    let mut file = std::fs::File::from(fd);
    let written = file
        .write_all(store.render().as_bytes())
        .and_then(|()| file.sync_all());
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        return Err(fail(&e));
    }
    rustix::fs::renameat(&dir, tmp.as_str(), &dir, TRUST_FILE).map_err(|e| fail(&e))?;
    Ok(path)
}

/// A manifest read once: its text, canonical path and BLAKE3 content hash.
pub struct ManifestFile {
    /// The text (what is parsed is what was hashed).
    pub text: String,
    /// Canonical path (symlinks resolved), the trust list's key.
    pub canonical: PathBuf,
    /// BLAKE3 of `text`, lowercase hex.
    pub hash: String,
}

/// Read the manifest at `path` (shown as `shown` in errors).
pub fn read_manifest(path: &Path, shown: &str) -> Result<ManifestFile, Failure> {
    let canonical = std::fs::canonicalize(path)
        .map_err(|e| Failure::usage(format!("{shown}: cannot read the manifest: {e}")))?;
    let text = std::fs::read_to_string(&canonical)
        .map_err(|e| Failure::usage(format!("{shown}: cannot read the manifest: {e}")))?;
    let hash = blake3::hash(text.as_bytes()).to_hex().to_string();
    Ok(ManifestFile {
        text,
        canonical,
        hash,
    })
}
