//! overlayfs's own extended attributes on a staged path (`user.overlay.*`,
//! `trusted.overlay.*`): which names are there. The copy stage strips them from a command's
//! copy and checkpoints copy them; the seal reads what they mean. Owns the listing (of any
//! name, for `fsops` too, and of overlayfs's own);
//! reads nothing else and changes nothing.

use rustix::io::Errno;
use std::path::Path;

/// Whether `name` is one of overlayfs's own extended attributes, which the seal reads as
/// stage markers (whiteouts, opaque directories).
pub(crate) fn is_overlay(name: &[u8]) -> bool {
    name.starts_with(b"user.overlay.") || name.starts_with(b"trusted.overlay.")
}

/// The overlayfs attribute names on `path` (not following a symlink), in the order the
/// kernel lists them; none on a filesystem without extended attributes.
pub(crate) fn overlay_names(path: &Path) -> Result<Vec<Vec<u8>>, Errno> {
    let mut names = list_names(
        |buf| rustix::fs::llistxattr(path, buf),
        || rustix::fs::llistxattr_query(path),
    )?;
    names.retain(|name| is_overlay(name));
    Ok(names)
}

/// The non-empty names a `listxattr(2)` call (`list`, with `query` for the size it needs)
/// returns, growing the buffer on `ERANGE`; none where the filesystem has no extended
/// attributes. One listing for the path and descriptor forms.
pub(crate) fn list_names(
    mut list: impl FnMut(&mut [u8]) -> Result<usize, Errno>,
    mut query: impl FnMut() -> Result<usize, Errno>,
) -> Result<Vec<Vec<u8>>, Errno> {
    let mut buf = vec![0u8; 1024];
    let n = loop {
        match list(&mut buf[..]) {
            Ok(n) => break n,
            Err(Errno::RANGE) => {
                let want = query()?;
                buf.resize(want.max(buf.len() * 2), 0);
            }
            Err(Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
    };
    Ok(buf
        .get(..n)
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}
