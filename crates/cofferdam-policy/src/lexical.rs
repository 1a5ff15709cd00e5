//! Paths folded lexically, without touching the filesystem: shared by the policy's
//! resolution and the secret list, so neither imports the other for it.

use std::path::{Component, Path, PathBuf};

/// Fold `.` and `..` without touching the filesystem. `..` above the root stays at the root.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}
