//! Writing an archive of a sealed job (see [`super`] for the format).
//!
//! Owns [`export`]: it reads the job's records and walks its upper directory (never
//! following a symlink), then writes the manifest and every entry to the writer it is given.
//! It may not change the job: the caller holds the job's lock.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::OFlags;
use walkdir::WalkDir;

use super::{
    ArchiveError, EntryKind, FORMAT, MANIFEST_NAME, Manifest, RECORDS, RECORDS_DIR, Record,
    STAGE_DIR, StageEntry, VERSION, shown,
};
use crate::job::Job;

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The manifest written.
    pub manifest: Manifest,
    /// Bytes of file data carried (holes excluded).
    pub data_bytes: u64,
}

fn io_at<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ArchiveError + 'a {
    move |source| ArchiveError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn open_nofollow(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(path)
}

/// Write the archive of `job` (sealed; its lock held by the caller) to `out`, zstd level
/// `level`.
pub fn export(job: &Job, out: impl Write, level: i32) -> Result<Exported, ArchiveError> {
    let origin = job.state()?;
    let mut records = Vec::new();
    for (name, needed) in RECORDS {
        let path = job.dir().join(name);
        match fs::read(&path) {
            Ok(bytes) => records.push((
                Record {
                    name: name.to_owned(),
                    size: bytes.len() as u64,
                    blake3: blake3::hash(&bytes).to_hex().to_string(),
                },
                bytes,
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !needed => {}
            Err(e) => return Err(io_at("read", &path)(e)),
        }
    }
    let upper = job.upper();
    let stage = scan(&upper)?;
    let manifest = Manifest {
        format: FORMAT.to_owned(),
        version: VERSION,
        origin,
        records: records.iter().map(|(r, _)| r.clone()).collect(),
        stage,
    };
    let text =
        serde_json::to_vec_pretty(&manifest).map_err(|e| io_at("encode", &upper)(e.into()))?;

    let out_path = Path::new("the archive");
    let enc = zstd::stream::Encoder::new(out, level).map_err(io_at("compress", out_path))?;
    let mut tar = tar::Builder::new(enc);
    append(&mut tar, MANIFEST_NAME.as_bytes(), &text).map_err(io_at("write", out_path))?;
    for (r, bytes) in &records {
        let name = format!("{RECORDS_DIR}{}", r.name);
        append(&mut tar, name.as_bytes(), bytes).map_err(io_at("write", out_path))?;
    }
    let mut data_bytes = 0;
    for e in &manifest.stage {
        let mut name = STAGE_DIR.as_bytes().to_vec();
        name.extend_from_slice(&e.path_bytes);
        let path = upper.join(std::ffi::OsStr::from_bytes(&e.path_bytes));
        let mut h = tar::Header::new_gnu();
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        match &e.kind {
            EntryKind::Dir { mode, .. } => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                h.set_size(0);
                tar.append_data(&mut h, std::ffi::OsStr::from_bytes(&name), io::empty())
                    .map_err(io_at("write", out_path))?;
            }
            EntryKind::Whiteout => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0);
                h.set_size(0);
                tar.append_data(&mut h, std::ffi::OsStr::from_bytes(&name), io::empty())
                    .map_err(io_at("write", out_path))?;
            }
            EntryKind::Symlink { target_bytes } => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(
                    &mut h,
                    std::ffi::OsStr::from_bytes(&name),
                    std::ffi::OsStr::from_bytes(target_bytes),
                )
                .map_err(io_at("write", out_path))?;
            }
            EntryKind::File {
                mode, data, blake3, ..
            } => {
                let file = open_nofollow(&path).map_err(io_at("read", &path))?;
                let len = e.kind.data_len();
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(len);
                let mut reader = Ranges::new(&file, data);
                tar.append_data(&mut h, std::ffi::OsStr::from_bytes(&name), &mut reader)
                    .map_err(|_| ArchiveError::Changed {
                        path: shown(&e.path_bytes),
                    })?;
                if reader.done != len || reader.hasher.finalize().to_hex().as_str() != blake3 {
                    return Err(ArchiveError::Changed {
                        path: shown(&e.path_bytes),
                    });
                }
                data_bytes += len;
            }
        }
    }
    let enc = tar.into_inner().map_err(io_at("write", out_path))?;
    let mut out = enc.finish().map_err(io_at("write", out_path))?;
    out.flush().map_err(io_at("write", out_path))?;
    Ok(Exported {
        manifest,
        data_bytes,
    })
}

fn append<W: Write>(tar: &mut tar::Builder<W>, name: &[u8], bytes: &[u8]) -> io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o600);
    h.set_mtime(0);
    h.set_size(bytes.len() as u64);
    tar.append_data(&mut h, std::ffi::OsStr::from_bytes(name), bytes)
}

/// The entries of `upper`, parents first, sorted by name bytes.
fn scan(upper: &Path) -> Result<Vec<StageEntry>, ArchiveError> {
    let mut out = Vec::new();
    for entry in WalkDir::new(upper)
        .follow_links(false)
        .min_depth(1)
        .sort_by(|a, b| a.file_name().as_bytes().cmp(b.file_name().as_bytes()))
    {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(upper).to_path_buf();
            ArchiveError::Io {
                action: "read",
                path,
                source: e.into(),
            }
        })?;
        let path = entry.path();
        let rel = path
            .strip_prefix(upper)
            .map_err(|_| io_at("read", path)(io::ErrorKind::InvalidData.into()))?
            .as_os_str()
            .as_bytes()
            .to_vec();
        let meta = fs::symlink_metadata(path).map_err(io_at("inspect", path))?;
        let ft = meta.file_type();
        let mode = meta.mode() & 0o7777;
        let kind = if (ft.is_char_device() && meta.rdev() == 0)
            || crate::copystage::is_xattr_whiteout(path, &meta)
        {
            EntryKind::Whiteout
        } else if ft.is_dir() {
            EntryKind::Dir {
                mode,
                opaque: crate::seal::is_opaque(path),
            }
        } else if ft.is_symlink() {
            EntryKind::Symlink {
                target_bytes: fs::read_link(path)
                    .map_err(io_at("read", path))?
                    .into_os_string()
                    .into_encoded_bytes(),
            }
        } else if ft.is_file() {
            let file = open_nofollow(path).map_err(io_at("read", path))?;
            let size = meta.size();
            let data = crate::sparse::data_ranges(&file, size)
                .collect::<io::Result<Vec<_>>>()
                .map_err(io_at("read", path))?;
            let mut r = Ranges::new(&file, &data);
            io::copy(&mut r, &mut io::sink()).map_err(io_at("read", path))?;
            EntryKind::File {
                mode,
                size,
                blake3: r.hasher.finalize().to_hex().to_string(),
                data,
            }
        } else {
            return Err(ArchiveError::Unsupported {
                path: shown(&rel),
                what: if ft.is_fifo() {
                    "a fifo"
                } else if ft.is_socket() {
                    "a socket"
                } else {
                    "a device node"
                },
            });
        };
        out.push(StageEntry {
            path_bytes: rel,
            kind,
        });
    }
    Ok(out)
}

/// A reader of a file's data ranges in turn, hashing what it reads; a file that ends early
/// is an error (it changed since it was scanned).
struct Ranges<'a> {
    file: &'a File,
    ranges: &'a [(u64, u64)],
    /// Index of the current range, and the offset in the file.
    at: usize,
    pos: u64,
    done: u64,
    hasher: blake3::Hasher,
}

impl<'a> Ranges<'a> {
    fn new(file: &'a File, ranges: &'a [(u64, u64)]) -> Self {
        Ranges {
            file,
            ranges,
            at: 0,
            pos: ranges.first().map_or(0, |r| r.0),
            done: 0,
            hasher: blake3::Hasher::new(),
        }
    }
}

impl Read for Ranges<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let Some(&(_, end)) = self.ranges.get(self.at) else {
                return Ok(0);
            };
            if self.pos >= end {
                self.at += 1;
                self.pos = self.ranges.get(self.at).map_or(0, |r| r.0);
                continue;
            }
            let want = usize::try_from(end - self.pos)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let slot = buf.get_mut(..want).unwrap_or_default();
            let n = self.file.read_at(slot, self.pos)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank while it was exported",
                ));
            }
            self.hasher.update(slot.get(..n).unwrap_or_default());
            self.pos += n as u64;
            self.done += n as u64;
            return Ok(n);
        }
    }
}
