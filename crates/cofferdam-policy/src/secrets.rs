//! The host paths that are never visible to a contained command (DESIGN.md §3 step 2):
//! the user's credentials and the host's own. One list, used by the scope report and by the
//! sandbox's composition, so the report cannot name a different set from the one hidden.

use std::path::{Path, PathBuf};

/// Credential locations under the invoking user's home.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".cargo/credentials.toml",
    ".config/hub",
];

/// The host's own secrets.
pub const HOST_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    // Readable inside when cofferdam runs as root (the sandbox's uid 0 is the host's), found
    // by the escape suite (fr.root-private-files): TLS private keys and old password hashes.
    "/etc/ssl/private",
    "/etc/security/opasswd",
];

/// Every secret path for a user whose home is `home`.
pub fn secret_paths(home: &Path) -> Vec<PathBuf> {
    HOME_SECRETS
        .iter()
        .map(|p| home.join(p))
        .chain(HOST_SECRETS.iter().map(PathBuf::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_host_secrets_are_listed() {
        let s = secret_paths(Path::new("/home/u"));
        assert!(s.contains(&PathBuf::from("/home/u/.ssh")));
        assert!(s.contains(&PathBuf::from("/home/u/.aws")));
        assert!(s.contains(&PathBuf::from("/etc/shadow")));
        assert!(s.contains(&PathBuf::from("/etc/ssl/private")));
        assert!(s.contains(&PathBuf::from("/etc/security/opasswd")));
    }
}
