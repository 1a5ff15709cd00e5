//! Files with holes: reading, hashing and copying a regular file by its data ranges
//! (`lseek` `SEEK_DATA` / `SEEK_HOLE`), so a sparse file — a staged 1 TiB `truncate` — is
//! neither read through its holes nor allocated by a copy.
//!
//! Owns [`data_ranges`], [`hash_file`] (the content hash the seal and the fingerprints
//! record), [`copy_file`] (the apply engine's file copy) and [`clone_or_copy`] (the copy
//! stage's and the checkpoints'). It only reads its source and writes the destination it is
//! given (already created, empty); it
//! opens and resolves nothing itself.
//!
//! # The hash
//!
//! A file without holes hashes to the BLAKE3 of its bytes, as it always has. A file with
//! holes hashes, in BLAKE3's key-derivation mode under [`SPARSE_CONTEXT`], its length and
//! then each data range as `(offset, length, bytes)`, little-endian: the encoding gives the
//! content back (holes read as zeros), so two files with different content never share a
//! hash. The same content laid out differently (zeros written where the other has a hole)
//! can hash differently: the seal then lists an unchanged file as modified, or a recheck
//! finds a conflict — always the cautious side, never a missed change.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use rustix::fs::SeekFrom;
use rustix::io::Errno;

/// The BLAKE3 key-derivation context of the hash of a file with holes.
pub const SPARSE_CONTEXT: &str = "cofferdam 2026-12 sparse file content v1";

/// Bytes read (or copied) at a time.
const CHUNK: usize = 1 << 20;

/// The data ranges `[start, end)` of `file`, whose length is `len`, in order, found one at
/// a time (a file may have millions). A filesystem that cannot tell holes (`EINVAL` from
/// `SEEK_DATA`) reports one range over everything.
pub fn data_ranges(file: &File, len: u64) -> DataRanges<'_> {
    DataRanges { file, len, at: 0 }
}

/// The iterator of [`data_ranges`].
#[derive(Debug)]
pub struct DataRanges<'a> {
    file: &'a File,
    len: u64,
    /// Where the next search starts; `len` when done.
    at: u64,
}

impl Iterator for DataRanges<'_> {
    type Item = io::Result<(u64, u64)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.len {
            return None;
        }
        let start = match rustix::fs::seek(self.file, SeekFrom::Data(self.at)) {
            Ok(s) => s,
            // No data after `at`: a trailing hole.
            Err(Errno::NXIO) => self.len,
            Err(Errno::INVAL) if self.at == 0 => {
                self.at = self.len;
                return Some(Ok((0, self.len)));
            }
            Err(e) => {
                self.at = self.len;
                return Some(Err(e.into()));
            }
        };
        if start >= self.len {
            self.at = self.len;
            return None;
        }
        let end = match rustix::fs::seek(self.file, SeekFrom::Hole(start)) {
            Ok(h) => h.min(self.len),
            Err(Errno::NXIO) => self.len,
            Err(e) => {
                self.at = self.len;
                return Some(Err(e.into()));
            }
        };
        if end <= start {
            self.at = self.len;
            return None;
        }
        self.at = end;
        Some(Ok((start, end)))
    }
}

/// Feed `[start, end)` of `file` to `hasher`.
fn hash_range(
    file: &File,
    start: u64,
    end: u64,
    buf: &mut [u8],
    hasher: &mut blake3::Hasher,
) -> io::Result<()> {
    let mut at = start;
    while at < end {
        let want = usize::try_from(end - at)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let slot = buf.get_mut(..want).unwrap_or_default();
        let n = file.read_at(slot, at)?;
        if n == 0 {
            break; // shrank meanwhile: what is there is what is hashed
        }
        hasher.update(slot.get(..n).unwrap_or_default());
        at += n as u64;
    }
    Ok(())
}

/// The content hash of a regular file, lowercase hex (see the module docs). Reads only the
/// data ranges.
pub fn hash_file(file: &File) -> io::Result<String> {
    let len = file.metadata()?.len();
    let mut ranges = data_ranges(file, len);
    let first = ranges.next().transpose()?;
    // No bigger than the file: a 1 MiB buffer per small file is an mmap and munmap each.
    let mut buf = vec![0u8; usize::try_from(len).unwrap_or(CHUNK).clamp(1, CHUNK)];
    // No hole: one range over everything (or nothing at all).
    let hasher = if len == 0 || first == Some((0, len)) {
        let mut h = blake3::Hasher::new();
        hash_range(file, 0, len, &mut buf, &mut h)?;
        h
    } else {
        let mut h = blake3::Hasher::new_derive_key(SPARSE_CONTEXT);
        h.update(&len.to_le_bytes());
        for range in first.map(Ok).into_iter().chain(ranges) {
            let (start, end) = range?;
            h.update(&start.to_le_bytes());
            h.update(&(end - start).to_le_bytes());
            hash_range(file, start, end, &mut buf, &mut h)?;
        }
        h
    };
    Ok(hasher.finalize().to_hex().to_string())
}

/// Copy `src` into `dst` (created, empty): a clone of its extents (`FICLONE`) where the
/// filesystem shares them, else [`copy_file`]. Returns whether it was cloned.
pub fn clone_or_copy(src: &File, dst: &File) -> io::Result<bool> {
    if rustix::fs::ioctl_ficlone(dst, src).is_ok() {
        return Ok(true);
    }
    copy_file(src, dst)?;
    Ok(false)
}

/// Copy `src` into `dst` (a new, empty regular file), keeping holes: each data range is
/// copied at its offset (`copy_file_range`, or `pread`/`pwrite` where that is refused), and
/// the length is set last, so a trailing hole stays a hole. Returns the bytes of data
/// copied.
pub fn copy_file(src: &File, dst: &File) -> io::Result<u64> {
    let len = src.metadata()?.len();
    let mut copied = 0u64;
    let mut fallback = false;
    let mut buf: Vec<u8> = Vec::new();
    for range in data_ranges(src, len) {
        let (start, end) = range?;
        let mut at = start;
        while at < end {
            let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(CHUNK);
            let n = if fallback {
                0
            } else {
                let (mut off_in, mut off_out) = (at, at);
                match rustix::fs::copy_file_range(
                    src,
                    Some(&mut off_in),
                    dst,
                    Some(&mut off_out),
                    want,
                ) {
                    Ok(n) => n,
                    Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                        fallback = true;
                        0
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            let n = if fallback {
                buf.resize(CHUNK, 0);
                let slot = buf.get_mut(..want).unwrap_or_default();
                let got = src.read_at(slot, at)?;
                dst.write_all_at(slot.get(..got).unwrap_or_default(), at)?;
                got
            } else {
                n
            };
            if n == 0 {
                break; // the source shrank meanwhile
            }
            at += n as u64;
            copied += n as u64;
        }
    }
    dst.set_len(len)?;
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn new_file(dir: impl AsRef<std::path::Path>, name: &str) -> File {
        File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.as_ref().join(name))
            .unwrap()
    }

    fn sparse(dir: &std::path::Path, name: &str) -> File {
        let f = new_file(dir, name);
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"middle", 64 << 20).unwrap();
        f.set_len(1 << 40).unwrap();
        f
    }

    #[test]
    fn a_tebibyte_with_holes_hashes_and_copies_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let src = sparse(dir.path(), "src");
        let ranges: Vec<(u64, u64)> = data_ranges(&src, 1 << 40).map(Result::unwrap).collect();
        assert!(!ranges.is_empty() && ranges.len() <= 2, "{ranges:?}");
        assert_eq!(ranges[0].0, 0);
        let h1 = hash_file(&src).unwrap();
        let dst = new_file(dir.path(), "dst");
        let copied = copy_file(&src, &dst).unwrap();
        assert!(copied < 64 << 20, "{copied} bytes of data copied");
        let meta = dst.metadata().unwrap();
        assert_eq!(meta.len(), 1 << 40);
        assert!(meta.blocks() * 512 < 64 << 20, "{} blocks", meta.blocks());
        let mut b = [0u8; 6];
        dst.read_exact_at(&mut b, 64 << 20).unwrap();
        assert_eq!(&b, b"middle");
        assert_eq!(hash_file(&dst).unwrap(), h1);
    }

    #[test]
    fn leading_and_inner_holes_copy_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let src = new_file(dir.path(), "s");
        for (i, at) in [1u64 << 20, 3 << 20, (5 << 20) + 7].iter().enumerate() {
            src.write_all_at(&vec![b'a' + i as u8; 10_000], *at)
                .unwrap();
        }
        src.set_len(6 << 20).unwrap();
        let dst = new_file(dir.path(), "d");
        copy_file(&src, &dst).unwrap();
        let (a, b) = (
            std::fs::read(dir.path().join("s")).unwrap(),
            std::fs::read(dir.path().join("d")).unwrap(),
        );
        assert!(a == b, "the copy differs");
        assert_eq!(hash_file(&src).unwrap(), hash_file(&dst).unwrap());
        let first = data_ranges(&src, 6 << 20).next().unwrap().unwrap();
        assert!(first.0 > 0, "a leading hole: {first:?}");
    }

    #[test]
    fn dense_files_hash_as_plain_blake3_and_content_decides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("d"), b"hello").unwrap();
        let d = File::open(dir.path().join("d")).unwrap();
        assert_eq!(
            hash_file(&d).unwrap(),
            blake3::hash(b"hello").to_hex().to_string()
        );
        std::fs::write(dir.path().join("e"), b"").unwrap();
        let e = File::open(dir.path().join("e")).unwrap();
        assert_eq!(
            hash_file(&e).unwrap(),
            blake3::hash(b"").to_hex().to_string()
        );
        // Same holes, one byte differs: different hashes.
        let a = sparse(dir.path(), "a");
        let b = sparse(dir.path(), "b");
        assert_eq!(hash_file(&a).unwrap(), hash_file(&b).unwrap());
        b.write_all_at(b"M", 64 << 20).unwrap();
        assert_ne!(hash_file(&a).unwrap(), hash_file(&b).unwrap());
    }
}
