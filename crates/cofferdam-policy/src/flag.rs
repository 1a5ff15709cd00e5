//! The error of a flag whose value cannot be used, shared by the modules that parse flags
//! (`policy`, `orchestration`). Text only.

/// A flag whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {value}: {message}")]
pub struct FlagError {
    /// The flag, e.g. `--memory`.
    pub flag: &'static str,
    /// Its value as given.
    pub value: String,
    /// What is wrong and how to fix it.
    pub message: String,
}
