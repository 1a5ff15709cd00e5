//! The trusted-manifest list (`$XDG_STATE_HOME/cofferdam/trusted.toml`): its format and the
//! lookup of one manifest in it.
//!
//! Owns the file's shape and the answer to "may this manifest widen?": a manifest is trusted
//! when its canonical path is listed with the BLAKE3 hash of exactly its current content.
//! It hashes nothing and touches no file (the CLI reads, hashes and writes atomically).

use serde::{Deserialize, Serialize};

/// The whole trust file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustStore {
    /// One entry per trusted manifest, in the order they were trusted.
    #[serde(default, rename = "manifest")]
    pub manifests: Vec<TrustEntry>,
}

/// One trusted manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustEntry {
    /// The manifest's canonical path.
    pub path: String,
    /// BLAKE3 of its content when it was trusted, lowercase hex.
    pub blake3: String,
}

/// What the trust file says about one manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustState {
    /// Listed with this exact content.
    Trusted,
    /// Listed, but its content changed since: untrusted again.
    Changed,
    /// Not listed.
    Unknown,
}

/// The trust file cannot be read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: not a trust file ({message}); fix: remove it and run `cofferdam trust` again")]
pub struct TrustFileError {
    /// The file.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

impl TrustStore {
    /// Parse the trust file's text.
    pub fn parse(file: &str, text: &str) -> Result<Self, TrustFileError> {
        toml::from_str(text).map_err(|e| TrustFileError {
            file: file.to_owned(),
            message: e.message().trim().to_owned(),
        })
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# Manifests trusted to widen the policy (`cofferdam trust`); edit with \
             `cofferdam trust --remove`.\n",
        );
        out.push_str(&toml::to_string(self).unwrap_or_default());
        out
    }

    /// Whether the manifest at `path` with content hash `hash` is trusted.
    pub fn state(&self, path: &str, hash: &str) -> TrustState {
        match self.manifests.iter().find(|e| e.path == path) {
            Some(e) if e.blake3 == hash => TrustState::Trusted,
            Some(_) => TrustState::Changed,
            None => TrustState::Unknown,
        }
    }

    /// Pin `path` at `hash`, replacing an older pin of the same path.
    pub fn pin(&mut self, path: &str, hash: &str) {
        self.manifests.retain(|e| e.path != path);
        self.manifests.push(TrustEntry {
            path: path.to_owned(),
            blake3: hash.to_owned(),
        });
    }

    /// Forget `path`; whether it was listed.
    pub fn remove(&mut self, path: &str) -> bool {
        let before = self.manifests.len();
        self.manifests.retain(|e| e.path != path);
        self.manifests.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_lookup_change_and_remove() {
        let mut s = TrustStore::default();
        assert_eq!(s.state("/p/cofferdam.toml", "aa"), TrustState::Unknown);
        s.pin("/p/cofferdam.toml", "aa");
        assert_eq!(s.state("/p/cofferdam.toml", "aa"), TrustState::Trusted);
        assert_eq!(s.state("/p/cofferdam.toml", "bb"), TrustState::Changed);
        assert_eq!(s.state("/q/cofferdam.toml", "aa"), TrustState::Unknown);
        s.pin("/p/cofferdam.toml", "bb");
        assert_eq!(s.manifests.len(), 1);
        assert_eq!(s.state("/p/cofferdam.toml", "bb"), TrustState::Trusted);
        let back = TrustStore::parse("t", &s.render()).unwrap();
        assert_eq!(back, s);
        assert!(s.remove("/p/cofferdam.toml"));
        assert!(!s.remove("/p/cofferdam.toml"));
        assert!(TrustStore::parse("t", "x = 1").is_err());
        assert_eq!(TrustStore::parse("t", "").unwrap(), TrustStore::default());
    }
}
