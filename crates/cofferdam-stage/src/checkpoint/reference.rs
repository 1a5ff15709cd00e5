//! The walkdir implementation of the checkpoint copy and digest as it was before
//! [`super::walk`] replaced it (path joins, a second walk for the digest), kept only to
//! test that the new walk copies the same tree and gives the same digest. Test-only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{self, DirBuilder, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;
use walkdir::WalkDir;

use super::{CheckpointError, Counts, DIR_MODE, FILE_MODE, FINGERPRINTS, errno, io_err};

/// Copy the stage `from` to the new directory `to` (see the module docs).
pub(super) fn copy_tree(from: &Path, to: &Path) -> Result<Counts, CheckpointError> {
    let mut counts = Counts::default();
    // Directory modes are set after their content is written (a 0500 directory of the
    // stage must still take entries here), deepest first.
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    for entry in WalkDir::new(from).follow_links(false).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(from).to_path_buf();
            io_err("read", &path)(io::Error::other(e.to_string()))
        })?;
        let src = entry.path();
        let rel = src.strip_prefix(from).unwrap_or(src);
        let dst = to.join(rel);
        let meta = entry
            .path()
            .symlink_metadata()
            .map_err(io_err("inspect", src))?;
        let ft = meta.file_type();
        let mode = meta.mode() & 0o7777;
        if ft.is_dir() {
            DirBuilder::new()
                .mode(DIR_MODE)
                .create(&dst)
                .map_err(io_err("create", &dst))?;
            copy_xattrs(src, &dst)?;
            if rel.as_os_str().is_empty() {
                dir_modes.push((dst, DIR_MODE));
                continue;
            }
            counts.directories += 1;
            if crate::seal::is_opaque(src) {
                counts.opaque_directories += 1;
            }
            dir_modes.push((dst, mode));
        } else if ft.is_file() {
            let whiteout = crate::copystage::is_xattr_whiteout(src, &meta);
            let reflinked = copy_file(src, &dst, mode)?;
            copy_xattrs(src, &dst)?;
            if whiteout {
                counts.whiteouts += 1;
            } else {
                counts.files += 1;
                counts.bytes += meta.len();
                if reflinked {
                    counts.reflinked_files += 1;
                } else {
                    counts.copied_files += 1;
                }
            }
        } else if ft.is_symlink() {
            let target = fs::read_link(src).map_err(io_err("read", src))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(io_err("create", &dst))?;
            counts.symlinks += 1;
        } else if ft.is_char_device() && meta.rdev() == 0 {
            // An overlay whiteout. Unprivileged users may make a 0:0 device (Linux 5.8+).
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &dst,
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(mode),
                0,
            )
            .map_err(errno("create", &dst))?;
            counts.whiteouts += 1;
        } else if ft.is_fifo() {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                &dst,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(mode),
                0,
            )
            .map_err(errno("create", &dst))?;
            counts.fifos += 1;
        } else {
            let what = if ft.is_socket() {
                "socket"
            } else if ft.is_block_device() {
                "block device"
            } else {
                "device node"
            };
            return Err(CheckpointError::Unsupported {
                path: rel.to_path_buf(),
                what,
            });
        }
    }
    for (dir, mode) in dir_modes.into_iter().rev() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .map_err(io_err("chmod", &dir))?;
    }
    Ok(counts)
}

/// Copy one regular file's data and mode: a reflink when the filesystem shares extents
/// (`true`), else a copy.
fn copy_file(src: &Path, dst: &Path, mode: u32) -> Result<bool, CheckpointError> {
    let from = OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(src)
        .map_err(io_err("open", src))?;
    let to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(dst)
        .map_err(io_err("create", dst))?;
    let reflinked = crate::sparse::clone_or_copy(&from, &to).map_err(io_err("copy", src))?;
    to.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("chmod", dst))?;
    Ok(reflinked)
}

/// An extended attribute: its name and value.
type Xattr = (Vec<u8>, Vec<u8>);

/// The overlay xattrs of `path` (not followed), names sorted, with their values.
fn overlay_xattrs(path: &Path) -> Result<Vec<Xattr>, CheckpointError> {
    let mut names = match crate::xattrs::overlay_names(path) {
        Ok(names) => names,
        Err(rustix::io::Errno::PERM) => Vec::new(),
        Err(e) => return Err(errno("list xattrs of", path)(e)),
    };
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let os = std::ffi::OsStr::from_bytes(&name);
        let mut value = vec![0u8; 256];
        let len = loop {
            match rustix::fs::lgetxattr(path, os, &mut value[..]) {
                Ok(len) => break len,
                Err(rustix::io::Errno::RANGE) => {
                    let want =
                        rustix::fs::lgetxattr_query(path, os).map_err(errno("read", path))?;
                    value.resize(want.max(value.len() * 2), 0);
                }
                Err(e) => return Err(errno("read xattrs of", path)(e)),
            }
        };
        value.truncate(len);
        out.push((name, value));
    }
    Ok(out)
}

fn copy_xattrs(src: &Path, dst: &Path) -> Result<(), CheckpointError> {
    for (name, value) in overlay_xattrs(src)? {
        rustix::fs::lsetxattr(
            dst,
            std::ffi::OsStr::from_bytes(&name),
            &value,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(errno("set xattrs on", dst))?;
    }
    Ok(())
}

/// The digest of the checkpoint in `dir` (its `upper/` and fingerprints) and the entry
/// count it saw.
pub(super) fn digest(dir: &Path) -> Result<(String, Counts), CheckpointError> {
    let upper = dir.join("upper");
    let mut h = blake3::Hasher::new_derive_key("cofferdam checkpoint digest v1");
    let mut counts = Counts::default();
    let field = |h: &mut blake3::Hasher, bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    for entry in WalkDir::new(&upper).follow_links(false).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(&upper).to_path_buf();
            io_err("read", &path)(io::Error::other(e.to_string()))
        })?;
        let path = entry.path();
        let rel = path.strip_prefix(&upper).unwrap_or(path);
        let meta = path.symlink_metadata().map_err(io_err("inspect", path))?;
        if !rel.as_os_str().is_empty() {
            counts.entries += 1;
        }
        field(&mut h, rel.as_os_str().as_bytes());
        let ft = meta.file_type();
        let mode = meta.mode() & 0o7777;
        if ft.is_dir() {
            let mode = if rel.as_os_str().is_empty() { 0 } else { mode };
            field(&mut h, b"d");
            h.update(&mode.to_le_bytes());
        } else if ft.is_file() {
            field(&mut h, b"f");
            h.update(&mode.to_le_bytes());
            h.update(&meta.len().to_le_bytes());
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(OFlags::NOFOLLOW.bits() as i32)
                .open(path)
                .map_err(io_err("read", path))?;
            let content = crate::sparse::hash_file(&file).map_err(io_err("read", path))?;
            field(&mut h, content.as_bytes());
        } else if ft.is_symlink() {
            field(&mut h, b"l");
            let target = fs::read_link(path).map_err(io_err("read", path))?;
            field(&mut h, target.as_os_str().as_bytes());
        } else {
            field(&mut h, b"n");
            h.update(&mode.to_le_bytes());
            h.update(&(meta.mode() & 0o170000).to_le_bytes());
            h.update(&meta.rdev().to_le_bytes());
        }
        if !ft.is_symlink() {
            for (name, value) in overlay_xattrs(path)? {
                field(&mut h, &name);
                field(&mut h, &value);
            }
        }
    }
    field(&mut h, b"fingerprints");
    match fs::read(dir.join(FINGERPRINTS)) {
        Ok(bytes) => field(&mut h, &bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => field(&mut h, b"none"),
        Err(e) => return Err(io_err("read", &dir.join(FINGERPRINTS))(e)),
    }
    Ok((format!("blake3:{}", h.finalize().to_hex()), counts))
}
