//! Files with holes: reading, hashing and copying a regular file by its data ranges
//! (`lseek` `SEEK_DATA` / `SEEK_HOLE`), so a sparse file — a staged 1 TiB `truncate` — is
//! neither read through its holes nor allocated by a copy.
//!
//! Owns [`data_ranges`], [`hash_file`] (the content hash the seal and the fingerprints
//! record) and [`copy_file`] (the apply engine's and the copy stage's file copy). It only
//! reads its source and writes the destination it is given (already created, empty); it
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

/// The data ranges `[start, end)` of `file`, whose length is `len`, in order. A filesystem
/// that cannot tell holes (`EINVAL` from `SEEK_DATA`) reports one range over everything.
pub fn data_ranges(file: &File, len: u64) -> io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < len {
        let start = match rustix::fs::seek(file, SeekFrom::Data(at)) {
            Ok(s) => s,
            // No data after `at`: a trailing hole.
            Err(Errno::NXIO) => break,
            Err(Errno::INVAL) if at == 0 => return Ok(vec![(0, len)]),
            Err(e) => return Err(e.into()),
        };
        if start >= len {
            break;
        }
        let end = match rustix::fs::seek(file, SeekFrom::Hole(start)) {
            Ok(h) => h.min(len),
            Err(Errno::NXIO) => len,
            Err(e) => return Err(e.into()),
        };
        if end <= start {
            break;
        }
        out.push((start, end));
        at = end;
    }
    Ok(out)
}

/// Whether `ranges` cover the whole of a file of length `len` (no hole).
fn dense(ranges: &[(u64, u64)], len: u64) -> bool {
    len == 0 || ranges == [(0, len)]
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
    let ranges = data_ranges(file, len)?;
    let mut buf = vec![0u8; CHUNK];
    let hasher = if dense(&ranges, len) {
        let mut h = blake3::Hasher::new();
        hash_range(file, 0, u64::MAX, &mut buf, &mut h)?;
        h
    } else {
        let mut h = blake3::Hasher::new_derive_key(SPARSE_CONTEXT);
        h.update(&len.to_le_bytes());
        for (start, end) in ranges {
            h.update(&start.to_le_bytes());
            h.update(&(end - start).to_le_bytes());
            hash_range(file, start, end, &mut buf, &mut h)?;
        }
        h
    };
    Ok(hasher.finalize().to_hex().to_string())
}

/// Copy `src` into `dst` (a new, empty regular file), keeping holes: each data range is
/// copied at its offset (`copy_file_range`, or `pread`/`pwrite` where that is refused), and
/// the length is set last, so a trailing hole stays a hole. Returns the bytes of data
/// copied.
pub fn copy_file(src: &File, dst: &File) -> io::Result<u64> {
    let len = src.metadata()?.len();
    let ranges = data_ranges(src, len)?;
    let mut copied = 0u64;
    let mut fallback = false;
    let mut buf: Vec<u8> = Vec::new();
    for (start, end) in ranges {
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

    fn sparse(dir: &std::path::Path, name: &str) -> File {
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join(name))
            .unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"middle", 64 << 20).unwrap();
        f.set_len(1 << 40).unwrap();
        f
    }

    #[test]
    fn a_tebibyte_with_holes_hashes_and_copies_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let src = sparse(dir.path(), "src");
        let t = std::time::Instant::now();
        let ranges = data_ranges(&src, 1 << 40).unwrap();
        assert!(!ranges.is_empty() && ranges.len() <= 2, "{ranges:?}");
        let h1 = hash_file(&src).unwrap();
        let dst = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("dst"))
            .unwrap();
        let copied = copy_file(&src, &dst).unwrap();
        assert!(copied < 64 << 20, "{copied} bytes of data copied");
        let meta = dst.metadata().unwrap();
        assert_eq!(meta.len(), 1 << 40);
        assert!(meta.blocks() * 512 < 64 << 20, "{} blocks", meta.blocks());
        let mut b = [0u8; 6];
        dst.read_exact_at(&mut b, 64 << 20).unwrap();
        assert_eq!(&b, b"middle");
        assert_eq!(hash_file(&dst).unwrap(), h1);
        assert!(t.elapsed() < std::time::Duration::from_secs(20));
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
