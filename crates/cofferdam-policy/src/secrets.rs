//! The host paths that are never visible to a contained command (DESIGN.md §3 step 2):
//! the user's credentials and the host's own. One list, used by the scope report and by the
//! sandbox's composition, so the report cannot name a different set from the one hidden.
//!
//! Pure. The SSH host keys are the one part that depends on the host: which
//! `/etc/ssh/ssh_host_*_key` files exist and which `HostKey` files `sshd_config` names. The
//! probe reads the directory and the config text (`cofferdam_sandbox::probe::ssh`); the
//! parser and the choice of paths are here ([`parse_sshd_config`], [`ssh_host_keys`]).

use std::path::{Path, PathBuf};

/// Credential locations under the invoking user's home. Hidden wherever home shows inside:
/// the sealed tier's private HOME never holds them, but a home lent with `--mount` or a
/// workdir that is (or contains) home does; the copy tiers leave them out of the copy.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".vault-token",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".kube",
    ".docker",
];

/// The host's own secrets. Most are readable only by root; they are hidden for every run
/// (a mask costs a few microseconds, and one list is easier to reason about than one per
/// uid), which matters when cofferdam runs as root: the sandbox's uid 0 is the host's.
pub const HOST_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    // Found by the escape suite (fr.root-private-files): TLS private keys and old password
    // hashes.
    "/etc/ssl/private",
    "/etc/security/opasswd",
    // WireGuard private keys and the certificates' private keys of Let's Encrypt.
    "/etc/wireguard",
    "/etc/letsencrypt/archive",
    "/etc/letsencrypt/live",
];

/// The directory of the SSH server's configuration and host keys.
pub const ETC_SSH: &str = "/etc/ssh";

/// Host key names hidden whether or not `/etc/ssh` could be listed (absent ones cost
/// nothing): the key types OpenSSH generates.
const KNOWN_HOST_KEY_TYPES: &[&str] = &["rsa", "ecdsa", "ed25519", "dsa"];

/// What an `sshd_config` file says that matters here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshdConfig {
    /// `HostKey` arguments, as written.
    pub host_keys: Vec<String>,
    /// `Include` arguments (files or glob patterns), as written.
    pub includes: Vec<String>,
}

/// Parse the `HostKey` and `Include` lines of an `sshd_config` text (sshd_config(5)):
/// keywords are case-insensitive, separated from their argument by whitespace or `=`,
/// `#` starts a comment line, and an argument may be double-quoted. `Include` takes
/// several arguments. Everything else is ignored (HostKey is not allowed in a `Match`
/// block, so blocks need no tracking).
pub fn parse_sshd_config(text: &str) -> SshdConfig {
    let mut out = SshdConfig::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let split = line
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(line.len());
        let (keyword, rest) = line.split_at(split);
        let rest = rest.trim_start();
        let rest = rest.strip_prefix('=').unwrap_or(rest).trim_start();
        let args = arguments(rest);
        if keyword.eq_ignore_ascii_case("hostkey") {
            out.host_keys.extend(args.into_iter().take(1));
        } else if keyword.eq_ignore_ascii_case("include") {
            out.includes.extend(args);
        }
    }
    out
}

/// The whitespace-separated arguments of a line, a double-quoted one kept whole.
fn arguments(rest: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            break;
        };
        let mut arg = String::new();
        if first == '"' {
            chars.next();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                arg.push(c);
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                arg.push(c);
            }
        }
        if !arg.is_empty() {
            args.push(arg);
        }
    }
    args
}

/// Where an `Include` argument points: relative ones are relative to `/etc/ssh`.
pub fn include_path(arg: &str) -> PathBuf {
    Path::new(ETC_SSH).join(arg)
}

/// Whether a name in `/etc/ssh` is a host private key (`ssh_host_<type>_key`).
fn is_host_key_name(name: &str) -> bool {
    name.strip_prefix("ssh_host_")
        .and_then(|rest| rest.strip_suffix("_key"))
        .is_some_and(|kind| !kind.is_empty())
}

/// The SSH host private keys to hide: every `ssh_host_*_key` among `etc_ssh_names` (the
/// entries of `/etc/ssh`), the usual names in any case, and each `HostKey` the server's
/// configuration names (`host_keys`; a relative one is relative to `/`, sshd's working
/// directory). Sorted, without duplicates.
pub fn ssh_host_keys(etc_ssh_names: &[String], host_keys: &[String]) -> Vec<PathBuf> {
    let etc = Path::new(ETC_SSH);
    let mut keys: Vec<PathBuf> = KNOWN_HOST_KEY_TYPES
        .iter()
        .map(|t| etc.join(format!("ssh_host_{t}_key")))
        .chain(
            etc_ssh_names
                .iter()
                .filter(|n| is_host_key_name(n))
                .map(|n| etc.join(n)),
        )
        .chain(
            host_keys
                .iter()
                .map(|k| crate::lexical::normalize(&Path::new("/").join(k))),
        )
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Every secret path for a user whose home is `home` on a host whose SSH host keys are
/// `host_keys` ([`ssh_host_keys`]).
pub fn secret_paths(home: &Path, host_keys: &[PathBuf]) -> Vec<PathBuf> {
    HOME_SECRETS
        .iter()
        .map(|p| home.join(p))
        .chain(HOST_SECRETS.iter().map(PathBuf::from))
        .chain(host_keys.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_host_secrets_are_listed() {
        let s = secret_paths(Path::new("/home/u"), &ssh_host_keys(&[], &[]));
        for p in [
            "/home/u/.ssh",
            "/home/u/.aws",
            "/home/u/.config/git/credentials",
            "/home/u/.npmrc",
            "/home/u/.pypirc",
            "/home/u/.vault-token",
            "/home/u/.cargo/credentials.toml",
            "/home/u/.kube",
            "/home/u/.docker",
            "/etc/shadow",
            "/etc/ssl/private",
            "/etc/security/opasswd",
            "/etc/wireguard",
            "/etc/letsencrypt/archive",
            "/etc/letsencrypt/live",
            "/etc/ssh/ssh_host_ed25519_key",
            "/etc/ssh/ssh_host_dsa_key",
        ] {
            assert!(s.contains(&PathBuf::from(p)), "{p} not in {s:?}");
        }
    }

    #[test]
    fn every_host_private_key_in_etc_ssh_is_hidden_and_no_public_one() {
        let names: Vec<String> = [
            "ssh_host_ed25519_key",
            "ssh_host_ed25519_key.pub",
            "ssh_host_xmss_key",
            "ssh_host_key",
            "ssh_host__key",
            "sshd_config",
            "moduli",
            "ssh_host_ecdsa_key-cert.pub",
        ]
        .map(String::from)
        .to_vec();
        let keys = ssh_host_keys(&names, &[]);
        assert!(keys.contains(&PathBuf::from("/etc/ssh/ssh_host_xmss_key")));
        assert!(keys.contains(&PathBuf::from("/etc/ssh/ssh_host_ed25519_key")));
        assert!(
            keys.iter().all(|k| k.to_string_lossy().ends_with("_key")
                && !k.ends_with("ssh_host__key")
                && !k.ends_with("ssh_host_key")),
            "{keys:?}"
        );
        let n = keys.len();
        let mut sorted = keys.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), n);
    }

    #[test]
    fn host_keys_and_includes_are_read_from_sshd_config() {
        let text = "\
# HostKey /etc/ssh/commented_out
Port 22
HostKey /etc/ssh/custom_key
  hostkey=/srv/keys/other
HOSTKEY = \"/srv/keys/with space\"
HostKeyAlgorithms ssh-ed25519
HostKeyAgent /run/agent.sock
Include /etc/ssh/sshd_config.d/*.conf extra.conf
Match User git
    PasswordAuthentication no
";
        let c = parse_sshd_config(text);
        assert_eq!(
            c.host_keys,
            [
                "/etc/ssh/custom_key",
                "/srv/keys/other",
                "/srv/keys/with space"
            ]
        );
        assert_eq!(c.includes, ["/etc/ssh/sshd_config.d/*.conf", "extra.conf"]);
        assert_eq!(
            include_path("extra.conf"),
            PathBuf::from("/etc/ssh/extra.conf")
        );
        assert_eq!(
            include_path("/etc/ssh/sshd_config.d/a.conf"),
            PathBuf::from("/etc/ssh/sshd_config.d/a.conf")
        );
        let keys = ssh_host_keys(&[], &c.host_keys);
        assert!(keys.contains(&PathBuf::from("/srv/keys/with space")));
        assert!(keys.contains(&PathBuf::from("/etc/ssh/custom_key")));
        assert!(!keys.iter().any(|k| k.ends_with("commented_out")));
    }

    #[test]
    fn a_relative_or_dotted_host_key_is_made_absolute() {
        let keys = ssh_host_keys(&[], &["keys/k".into(), "/etc/ssh/../k2".into()]);
        assert!(keys.contains(&PathBuf::from("/keys/k")));
        assert!(keys.contains(&PathBuf::from("/etc/k2")));
        assert!(keys.iter().all(|k| k.is_absolute()));
    }
}
