//! The SSH server's private keys on this host: the names in `/etc/ssh` and the `HostKey`
//! files of `/etc/ssh/sshd_config` and the files it includes. Reads only; which paths to
//! hide is `cofferdam_policy::secrets`'s decision.
//!
//! `Include` is followed (relative paths from `/etc/ssh`, a `*` or `?` glob in the last
//! component only, as Debian's `sshd_config.d/*.conf`), to a depth of [`MAX_DEPTH`] and at
//! most [`MAX_FILES`] files; a file that cannot be read adds nothing (the usual key names
//! are hidden in any case). A pattern with a glob in a directory component is not expanded.

use cofferdam_policy::secrets::{ETC_SSH, include_path, parse_sshd_config, ssh_host_keys};
use std::path::{Path, PathBuf};

/// How deep `Include` is followed.
const MAX_DEPTH: usize = 4;
/// How many config files are read at most.
const MAX_FILES: usize = 64;

/// The host's SSH private keys to hide.
pub fn host_keys() -> Vec<PathBuf> {
    host_keys_under(Path::new(ETC_SSH))
}

/// [`host_keys`] with `/etc/ssh`'s listing and config read from `etc_ssh` (tests).
fn host_keys_under(etc_ssh: &Path) -> Vec<PathBuf> {
    let names = names_in(etc_ssh);
    let mut configured = Vec::new();
    let mut read = 0;
    collect(
        &[etc_ssh.join("sshd_config")],
        etc_ssh,
        0,
        &mut read,
        &mut configured,
    );
    ssh_host_keys(&names, &configured)
}

fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Read each file, add its `HostKey`s, follow its `Include`s.
fn collect(
    files: &[PathBuf],
    etc_ssh: &Path,
    depth: usize,
    read: &mut usize,
    out: &mut Vec<String>,
) {
    for file in files {
        if *read >= MAX_FILES {
            return;
        }
        *read += 1;
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let config = parse_sshd_config(&text);
        out.extend(config.host_keys);
        if depth + 1 >= MAX_DEPTH {
            continue;
        }
        let included: Vec<PathBuf> = config
            .includes
            .iter()
            .flat_map(|arg| expand(&rebase(&include_path(arg), etc_ssh)))
            .collect();
        collect(&included, etc_ssh, depth + 1, read, out);
    }
}

/// `path` with its `/etc/ssh` prefix replaced by `etc_ssh` (the same path outside tests).
fn rebase(path: &Path, etc_ssh: &Path) -> PathBuf {
    match path.strip_prefix(ETC_SSH) {
        Ok(rest) => etc_ssh.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

/// The files a pattern names: itself when its last component has no glob, else the
/// matching entries of its directory, sorted (sshd reads them in lexical order).
fn expand(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let name = name.to_string_lossy();
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    if dir.to_string_lossy().contains(['*', '?']) {
        return Vec::new();
    }
    let mut found: Vec<PathBuf> = names_in(dir)
        .into_iter()
        .filter(|n| glob_match(name.as_bytes(), n.as_bytes()))
        .map(|n| dir.join(n))
        .collect();
    found.sort();
    found
}

/// `*` (any run) and `?` (any one byte) matching of a whole name.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| glob_match(rest, &name[i..])),
        Some((b'?', rest)) => !name.is_empty() && glob_match(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && glob_match(rest, &name[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_match(b"*.conf", b"a.conf"));
        assert!(glob_match(b"*.conf", b".conf"));
        assert!(!glob_match(b"*.conf", b"a.conf.bak"));
        assert!(glob_match(b"a?c", b"abc"));
        assert!(!glob_match(b"a?c", b"ac"));
    }

    #[test]
    fn keys_are_found_in_the_directory_and_through_includes() {
        let t = tempfile::tempdir().unwrap();
        let etc = t.path();
        std::fs::create_dir(etc.join("sshd_config.d")).unwrap();
        std::fs::write(etc.join("ssh_host_ed25519_key"), "").unwrap();
        std::fs::write(etc.join("ssh_host_ed25519_key.pub"), "").unwrap();
        std::fs::write(
            etc.join("sshd_config"),
            "HostKey /srv/a_key\nInclude /etc/ssh/sshd_config.d/*.conf\nInclude loop.conf\n",
        )
        .unwrap();
        std::fs::write(etc.join("sshd_config.d/10.conf"), "HostKey /srv/b_key\n").unwrap();
        std::fs::write(etc.join("sshd_config.d/10.conf.off"), "HostKey /srv/off\n").unwrap();
        // An include loop ends at the depth limit.
        std::fs::write(
            etc.join("loop.conf"),
            "HostKey /srv/c_key\nInclude loop.conf\n",
        )
        .unwrap();
        let keys = host_keys_under(etc);
        for k in [
            "/srv/a_key",
            "/srv/b_key",
            "/srv/c_key",
            "/etc/ssh/ssh_host_rsa_key",
        ] {
            assert!(keys.contains(&PathBuf::from(k)), "{k} not in {keys:?}");
        }
        assert!(!keys.contains(&PathBuf::from("/srv/off")));
        assert!(!keys.iter().any(|k| k.to_string_lossy().ends_with(".pub")));
    }
}
