//! The storage root: where cofferdam keeps jobs (DESIGN.md §4). Resolution is a pure function
//! of the environment values the caller read, so it is tested without touching the process
//! environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The storage root cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Neither `COFFERDAM_HOME`, `XDG_DATA_HOME` nor `HOME` gives an absolute path.
    #[error("no storage root: set COFFERDAM_HOME (or HOME) to an absolute path")]
    NoRoot,
    /// The root is inside the workdir the command would write.
    #[error(
        "the storage root {root} is inside the workdir {workdir}: the command could reach its \
         own records; set COFFERDAM_HOME to a folder outside the workdir"
    )]
    InsideWorkdir {
        /// The storage root.
        root: PathBuf,
        /// The workdir.
        workdir: PathBuf,
    },
}

/// `$COFFERDAM_HOME`, else `$XDG_DATA_HOME/cofferdam`, else `~/.local/share/cofferdam`.
/// Relative or empty values are ignored, as the XDG specification asks.
pub fn storage_root(
    cofferdam_home: Option<OsString>,
    xdg_data_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, StoreError> {
    let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(p) = absolute(cofferdam_home) {
        return Ok(p);
    }
    if let Some(p) = absolute(xdg_data_home) {
        return Ok(p.join("cofferdam"));
    }
    absolute(home)
        .map(|h| h.join(".local/share/cofferdam"))
        .ok_or(StoreError::NoRoot)
}

/// Refuse a storage root inside (or equal to) the workdir. Both paths must already be
/// absolute and normalized.
pub fn check_outside_workdir(root: &Path, workdir: &Path) -> Result<(), StoreError> {
    if root.starts_with(workdir) {
        return Err(StoreError::InsideWorkdir {
            root: root.to_path_buf(),
            workdir: workdir.to_path_buf(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(s.into())
    }

    #[test]
    fn precedence_and_relative_values() {
        assert_eq!(
            storage_root(os("/c"), os("/x"), os("/h")),
            Ok(PathBuf::from("/c"))
        );
        assert_eq!(
            storage_root(os("rel"), os("/x"), os("/h")),
            Ok(PathBuf::from("/x/cofferdam"))
        );
        assert_eq!(
            storage_root(None, os(""), os("/h")),
            Ok(PathBuf::from("/h/.local/share/cofferdam"))
        );
        assert_eq!(storage_root(None, None, None), Err(StoreError::NoRoot));
    }

    #[test]
    fn root_inside_workdir_is_refused() {
        assert!(check_outside_workdir(Path::new("/w/.c"), Path::new("/w")).is_err());
        assert!(check_outside_workdir(Path::new("/w"), Path::new("/w")).is_err());
        assert!(check_outside_workdir(Path::new("/wx"), Path::new("/w")).is_ok());
    }
}
