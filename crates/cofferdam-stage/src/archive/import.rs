//! Reading an archive into a new local job (see [`super`] for the format and what is
//! refused).
//!
//! Owns [`import`]: it reads the manifest first and checks it ([`super::check_manifest`])
//! before anything exists, then creates the job (locked, `active`, through the store),
//! writes each entry the manifest lists in its order with `*at` calls beneath the job's
//! directory (never following a symlink, never replacing anything: `O_EXCL`), checks every
//! digest, verifies the bundle with the strict reader and the records against each other,
//! and only then marks the job `staged`. On any failure the new job directory is removed
//! whole. It may not write anywhere else, and never touches the workdir.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, XattrFlags};

use super::{
    ArchiveError, EntryKind, MANIFEST_NAME, MAX_MANIFEST, Manifest, RECORDS_DIR, STAGE_DIR,
    check_manifest, refuse, shown,
};
use crate::fsops;
use crate::job::{Job, JobStore, StageState};

/// What an import made.
#[derive(Debug)]
pub struct Imported {
    /// The new local job.
    pub job: Job,
    /// The archive's manifest.
    pub manifest: Manifest,
}

/// The workdir the job applies onto: `workdir`, else the exported job's; it must be a
/// directory here.
fn target(workdir: Option<&Path>, m: &Manifest) -> Result<PathBuf, ArchiveError> {
    let chosen = workdir.map_or_else(|| m.origin.workdir.clone(), Path::to_path_buf);
    match std::fs::canonicalize(&chosen) {
        Ok(p) if p.is_dir() => Ok(p),
        _ => Err(ArchiveError::NoWorkdir { path: chosen }),
    }
}

/// Import the archive read from `input` as a new job of `store`, applying onto `workdir`
/// (else the exported job's workdir). `now_ms` becomes the job's conflict-check start (the
/// fingerprints' `run_started_at_unix_ms`): the local files' ctimes say nothing about the
/// exporting machine's run, so a local path counts as changed when its state differs from
/// the one recorded at seal, or when it changes after the import.
pub fn import(
    store: &JobStore,
    input: impl Read,
    workdir: Option<&Path>,
    now_ms: u64,
) -> Result<Imported, ArchiveError> {
    let decoder = zstd::stream::Decoder::new(input)
        .map_err(|e| refuse(format!("it cannot be decompressed: {e}")))?;
    import_tar(store, decoder, workdir, now_ms)
}

/// [`import`] of an archive already decompressed: `input` is the tar stream (the fuzz
/// harness feeds it directly, so that its inputs reach past the decompressor).
pub fn import_tar(
    store: &JobStore,
    input: impl Read,
    workdir: Option<&Path>,
    now_ms: u64,
) -> Result<Imported, ArchiveError> {
    let mut archive = tar::Archive::new(input);
    let mut entries = archive
        .entries()
        .map_err(|e| refuse(format!("it is not a tar archive: {e}")))?;

    let manifest = {
        let mut first = next(&mut entries, MANIFEST_NAME.as_bytes())?;
        check_type(&first, tar::EntryType::Regular, MANIFEST_NAME.as_bytes())?;
        if first.size() > MAX_MANIFEST {
            return Err(refuse(format!(
                "its manifest is {} bytes, over the limit of {MAX_MANIFEST}",
                first.size()
            )));
        }
        let mut text = Vec::new();
        (&mut first)
            .take(MAX_MANIFEST)
            .read_to_end(&mut text)
            .map_err(|e| damaged(MANIFEST_NAME.as_bytes(), &e))?;
        let m: Manifest = serde_json::from_slice(&text)
            .map_err(|e| refuse(format!("its manifest is not valid: {e}")))?;
        m
    };
    check_manifest(&manifest)?;
    let workdir = target(workdir, &manifest)?;
    let origin = manifest.origin.clone();
    let (job, lock) = store.create_locked_with(&workdir, None, |st| {
        st.command.clone_from(&origin.command);
    })?;
    let filled = fill(&job, &mut entries, &manifest, now_ms).and_then(|()| {
        job.update(|st| {
            st.state = StageState::Staged;
            st.run_state = origin.run_state;
            st.exit_code = origin.exit_code;
            st.started_at_unix_ms = origin.started_at_unix_ms;
            st.finished_at_unix_ms = origin.finished_at_unix_ms;
            st.changed_files = origin.changed_files;
        })
        .map_err(ArchiveError::from)
    });
    if let Err(e) = filled {
        drop(lock);
        let _ = crate::copystage::remove_tree(job.dir());
        return Err(e);
    }
    drop(lock);
    Ok(Imported { job, manifest })
}

type Entries<'a, R> = tar::Entries<'a, R>;

/// The next tar entry, which must be named `want`.
fn next<'a, R: Read>(
    entries: &mut Entries<'a, R>,
    want: &[u8],
) -> Result<tar::Entry<'a, R>, ArchiveError> {
    let entry = match entries.next() {
        None => {
            return Err(refuse(format!(
                "it ends before `{}` (truncated)",
                shown(want)
            )));
        }
        Some(Err(e)) => return Err(damaged(want, &e)),
        Some(Ok(e)) => e,
    };
    let name = entry.path_bytes();
    let name = name.strip_suffix(b"/").unwrap_or(&name);
    if name != want {
        return Err(refuse(format!(
            "its next entry is `{}` where the manifest lists `{}` (entries added, removed, \
             duplicated or reordered)",
            shown(name),
            shown(want)
        )));
    }
    Ok(entry)
}

fn damaged(at: &[u8], e: &io::Error) -> ArchiveError {
    refuse(format!(
        "it is damaged or truncated at `{}`: {e}",
        shown(at)
    ))
}

/// The tar entry must be of type `want` (the manifest's type for it).
fn check_type<R: Read>(
    entry: &tar::Entry<'_, R>,
    want: tar::EntryType,
    name: &[u8],
) -> Result<(), ArchiveError> {
    let t = entry.header().entry_type();
    let what = match t {
        tar::EntryType::Regular | tar::EntryType::Continuous => "a regular file",
        tar::EntryType::Directory => "a directory",
        tar::EntryType::Symlink => "a symlink",
        tar::EntryType::Link => "a hard link",
        tar::EntryType::Char | tar::EntryType::Block => "a device node",
        tar::EntryType::Fifo => "a fifo",
        tar::EntryType::GNUSparse => "a GNU sparse entry",
        _ => "an entry of an unknown type",
    };
    let same = match want {
        tar::EntryType::Regular => matches!(t, tar::EntryType::Regular),
        other => t == other,
    };
    if !same {
        return Err(refuse(format!(
            "entry `{}` is {what}, which the manifest does not list there (an archive carries \
             no hard links, devices or fifos)",
            shown(name)
        )));
    }
    Ok(())
}

fn io_at(action: &'static str, path: PathBuf) -> impl FnOnce(io::Error) -> ArchiveError {
    move |source| ArchiveError::Io {
        action,
        path,
        source,
    }
}

fn errno_at(action: &'static str, path: PathBuf) -> impl FnOnce(rustix::io::Errno) -> ArchiveError {
    move |e| io_at(action, path)(fsops::io_err(e))
}

/// Create `name` in `dir` as a new regular file for writing, never through a symlink.
fn create_file(dir: BorrowedFd<'_>, name: &[u8], mode: u32) -> Result<OwnedFd, rustix::io::Errno> {
    rustix::fs::openat(
        dir,
        fsops::os(name),
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
}

/// Copy exactly the entry's data into `file` at the ranges `data` (`[(0, len)]` for a
/// plain file), checking its BLAKE3 against `blake3`.
fn write_data<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    file: &File,
    data: &[(u64, u64)],
    blake3: &str,
    name: &[u8],
    path: &Path,
) -> Result<(), ArchiveError> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    for &(start, end) in data {
        let mut at = start;
        while at < end {
            let want = usize::try_from(end - at)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let slot = buf.get_mut(..want).unwrap_or_default();
            let n = entry.read(slot).map_err(|e| damaged(name, &e))?;
            if n == 0 {
                return Err(refuse(format!(
                    "entry `{}` ends before the length its manifest gives (truncated)",
                    shown(name)
                )));
            }
            let got = slot.get(..n).unwrap_or_default();
            hasher.update(got);
            file.write_all_at(got, at)
                .map_err(io_at("write", path.to_path_buf()))?;
            at += n as u64;
        }
    }
    if hasher.finalize().to_hex().as_str() != blake3 {
        return Err(refuse(format!(
            "entry `{}` does not have the digest its manifest gives (tampered or damaged)",
            shown(name)
        )));
    }
    Ok(())
}

/// Write every entry of the archive into the new job's directory.
fn fill<R: Read>(
    job: &Job,
    entries: &mut Entries<'_, R>,
    m: &Manifest,
    now_ms: u64,
) -> Result<(), ArchiveError> {
    let dir = job.dir();
    let dir_fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_at("open", dir.to_path_buf()))?;
    for r in &m.records {
        let name = format!("{RECORDS_DIR}{}", r.name);
        let mut entry = next(entries, name.as_bytes())?;
        check_type(&entry, tar::EntryType::Regular, name.as_bytes())?;
        if entry.size() != r.size {
            return Err(refuse(format!(
                "entry `{name}` is {} bytes where the manifest gives {}",
                entry.size(),
                r.size
            )));
        }
        let path = dir.join(&r.name);
        let fd = create_file(dir_fd.as_fd(), r.name.as_bytes(), 0o600)
            .map_err(errno_at("create", path.clone()))?;
        let file = File::from(fd);
        write_data(
            &mut entry,
            &file,
            &[(0, r.size)],
            &r.blake3,
            name.as_bytes(),
            &path,
        )?;
    }

    let upper = job.upper();
    // The store made `upper/` empty with the job; the overlay's `work/` is no use here.
    job.remove_overlay_work()?;
    job.release_reserve();
    let upper_fd =
        fsops::open_dir(dir_fd.as_fd(), b"upper").map_err(errno_at("open", upper.clone()))?;
    // Directories get their modes last, deepest first, so a 0500 one can be filled.
    let mut modes: Vec<(&[u8], u32)> = Vec::new();
    for e in &m.stage {
        let p = e.path_bytes.as_slice();
        let mut name = STAGE_DIR.as_bytes().to_vec();
        name.extend_from_slice(p);
        let mut entry = next(entries, &name)?;
        let want = match &e.kind {
            EntryKind::Dir { .. } => tar::EntryType::Directory,
            EntryKind::Symlink { .. } => tar::EntryType::Symlink,
            EntryKind::File { .. } | EntryKind::Whiteout => tar::EntryType::Regular,
        };
        check_type(&entry, want, &name)?;
        if entry.size() != e.kind.data_len() {
            return Err(refuse(format!(
                "entry `{}` is {} bytes where the manifest gives {}",
                shown(&name),
                entry.size(),
                e.kind.data_len()
            )));
        }
        let path = upper.join(fsops::os(p));
        let (parent, leaf) = fsops::split(p);
        let parent_fd = fsops::open_dir(upper_fd.as_fd(), parent)
            .map_err(errno_at("open", upper.join(fsops::os(parent))))?;
        match &e.kind {
            EntryKind::Dir { mode, opaque } => {
                rustix::fs::mkdirat(&parent_fd, fsops::os(leaf), Mode::from_raw_mode(0o700))
                    .map_err(errno_at("create", path.clone()))?;
                if *opaque {
                    let d = rustix::fs::openat(
                        &parent_fd,
                        fsops::os(leaf),
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(errno_at("open", path.clone()))?;
                    rustix::fs::fsetxattr(
                        &d,
                        crate::seal::OPAQUE_XATTRS[0],
                        b"y",
                        XattrFlags::CREATE,
                    )
                    .map_err(errno_at(
                        "mark opaque (user extended attributes needed)",
                        path,
                    ))?;
                }
                modes.push((p, *mode));
            }
            EntryKind::File {
                mode,
                size,
                data,
                blake3,
            } => {
                let fd = create_file(parent_fd.as_fd(), leaf, 0o600)
                    .map_err(errno_at("create", path.clone()))?;
                let file = File::from(fd);
                write_data(&mut entry, &file, data, blake3, &name, &path)?;
                file.set_len(*size).map_err(io_at("write", path.clone()))?;
                fsops::chmod_fd(file.as_fd(), *mode).map_err(errno_at("chmod", path))?;
            }
            EntryKind::Symlink { target_bytes } => {
                let link = entry.link_name_bytes();
                if link.as_deref() != Some(target_bytes.as_slice()) {
                    return Err(refuse(format!(
                        "symlink `{}` has a target other than its manifest's (tampered)",
                        shown(&name)
                    )));
                }
                rustix::fs::symlinkat(fsops::os(target_bytes), &parent_fd, fsops::os(leaf))
                    .map_err(errno_at("create", path))?;
            }
            EntryKind::Whiteout => whiteout(parent_fd.as_fd(), leaf, &path)?,
        }
    }
    match entries.next() {
        None => {}
        Some(Err(e)) => return Err(damaged(b"the end", &e)),
        Some(Ok(extra)) => {
            return Err(refuse(format!(
                "it has an entry `{}` after the manifest's last one",
                shown(&extra.path_bytes())
            )));
        }
    }
    for (p, mode) in modes.iter().rev() {
        let path = upper.join(fsops::os(p));
        let fd = fsops::open_dir(upper_fd.as_fd(), p).map_err(errno_at("open", path.clone()))?;
        fsops::chmod_fd(fd.as_fd(), *mode).map_err(errno_at("chmod", path))?;
    }
    check_records(job, now_ms)
}

/// A whiteout in `dir`: an empty file with the whiteout xattr (as the copy stage makes
/// them), else overlayfs's 0:0 character device where that can be made.
fn whiteout(dir: BorrowedFd<'_>, name: &[u8], path: &Path) -> Result<(), ArchiveError> {
    let fd = create_file(dir, name, 0).map_err(errno_at("create", path.to_path_buf()))?;
    let marked = rustix::fs::fsetxattr(
        &fd,
        crate::copystage::WHITEOUT_XATTR,
        b"y",
        XattrFlags::CREATE,
    );
    drop(fd);
    let Err(xattr) = marked else {
        return Ok(());
    };
    rustix::fs::unlinkat(dir, fsops::os(name), rustix::fs::AtFlags::empty())
        .map_err(errno_at("remove", path.to_path_buf()))?;
    rustix::fs::mknodat(
        dir,
        fsops::os(name),
        FileType::CharacterDevice,
        Mode::empty(),
        0,
    )
    .map_err(|m| ArchiveError::Io {
        action: "make a whiteout (neither a user xattr nor a device node can be made) at",
        path: path.to_path_buf(),
        source: io::Error::other(format!("xattr: {xattr}; mknod: {m}")),
    })
}

/// The strict reader over the bundle, the fingerprints against the bundle's changes, and
/// the conflict-check start moved to the import.
fn check_records(job: &Job, now_ms: u64) -> Result<(), ArchiveError> {
    let bundle = job.bundle_path();
    let bytes = std::fs::read(&bundle).map_err(io_at("read", bundle.clone()))?;
    cofferdam_record::read_bundle(&bytes)
        .map_err(|e| refuse(format!("its bundle is not a valid Run Bundle: {e}")))?;
    let fp_path = job.fingerprints_path();
    let mut fps = crate::fingerprint::read_fingerprints(&fp_path)
        .map_err(|e| refuse(format!("its fingerprints are not valid: {e}")))?;
    fps.run_started_at_unix_ms = Some(now_ms);
    crate::fingerprint::write_fingerprints(&fp_path, &fps)
        .map_err(|e| io_at("write", fp_path.clone())(io::Error::other(e.to_string())))?;
    crate::review::Stage::load(job)
        .map_err(|e| refuse(format!("its records do not agree: {e}")))?;
    Ok(())
}
