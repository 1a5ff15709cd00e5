//! A cache of the forked probe child's namespace facts, so `cofferdam run` does not pay for
//! creating a user, mount, network and pid namespace twice (once to probe, once to run).
//!
//! The facts are reused only under the same key: this boot (`boot_id`), kernel release,
//! effective uid and gid, user-namespace sysctls and AppArmor label, and cofferdam version.
//! Anything else that changes them (a new kernel, a sysctl flipped, AppArmor reloaded) changes
//! the key. Only a fully capable answer is cached, so a stale or forged cache can claim only
//! capability, never its absence, and cannot weaken a run: the sandbox init attempts every
//! mechanism itself, the bundle records only what it observed, and a mechanism that is not
//! there fails the setup (exit 125) instead of being skipped.

use super::child::NamespaceFacts;
use super::userns::UsernsSettings;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What the cached facts depend on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    boot_id: String,
    kernel_release: String,
    uid: u32,
    gid: u32,
    max_user_namespaces: Option<u64>,
    unprivileged_userns_clone: Option<bool>,
    apparmor_restrict: Option<bool>,
    apparmor_label: Option<String>,
    version: String,
}

impl CacheKey {
    /// The key for this process now; `None` when the boot id cannot be read (then nothing is
    /// cached).
    pub fn current(kernel_release: &str, uid: u32, gid: u32, s: &UsernsSettings) -> Option<Self> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(CacheKey {
            boot_id: boot_id.trim().to_owned(),
            kernel_release: kernel_release.to_owned(),
            uid,
            gid,
            max_user_namespaces: s.max_user_namespaces,
            unprivileged_userns_clone: s.unprivileged_userns_clone,
            apparmor_restrict: s.apparmor_restrict,
            apparmor_label: s.apparmor_label.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        })
    }
}

#[derive(Serialize, Deserialize)]
struct Entry {
    key: CacheKey,
    facts: NamespaceFacts,
}

/// Whether `facts` show every namespace mechanism working (the only answer worth caching).
pub fn worth_caching(facts: &NamespaceFacts) -> bool {
    facts.userns_can_create
        && facts.overlay_in_userns == Some(true)
        && facts.netns == Some(true)
        && facts.pidns == Some(true)
        && facts.seccomp_filter
}

/// The cached facts, when the file exists and its key is `key`.
pub fn load(path: &Path, key: &CacheKey) -> Option<NamespaceFacts> {
    let bytes = std::fs::read(path).ok()?;
    let entry: Entry = serde_json::from_slice(&bytes).ok()?;
    (entry.key == *key).then_some(entry.facts)
}

/// Record `facts` under `key`, best effort: a cache that cannot be written costs only time.
/// Written to a private temp file and renamed into place, so readers see whole files.
pub fn store(path: &Path, key: &CacheKey, facts: &NamespaceFacts) {
    let Ok(bytes) = serde_json::to_vec(&Entry {
        key: key.clone(),
        facts: facts.clone(),
    }) else {
        return;
    };
    let Some(dir) = path.parent() else {
        return;
    };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!(".host-facts.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes));
    if written.is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> UsernsSettings {
        UsernsSettings {
            max_user_namespaces: Some(100),
            unprivileged_userns_clone: None,
            apparmor_restrict: None,
            apparmor_label: None,
        }
    }

    fn facts() -> NamespaceFacts {
        NamespaceFacts {
            userns_can_create: true,
            userns_error: None,
            overlay_in_userns: Some(true),
            netns: Some(true),
            pidns: Some(true),
            seccomp_filter: true,
        }
    }

    #[test]
    fn facts_are_reused_only_under_the_same_key() {
        let Some(key) = CacheKey::current("6.18", 1000, 1000, &settings()) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cache/host-facts.json");
        assert_eq!(load(&p, &key), None);
        store(&p, &key, &facts());
        assert_eq!(load(&p, &key), Some(facts()));
        let mut other = settings();
        other.apparmor_restrict = Some(true);
        let changed = CacheKey::current("6.18", 1000, 1000, &other).unwrap();
        assert_eq!(
            load(&p, &changed),
            None,
            "a sysctl change invalidates the cache"
        );
        let other_user = CacheKey::current("6.18", 1001, 1000, &settings()).unwrap();
        assert_eq!(load(&p, &other_user), None);
        std::fs::write(&p, "garbage").unwrap();
        assert_eq!(load(&p, &key), None);
        let mut weak = facts();
        weak.netns = Some(false);
        assert!(!worth_caching(&weak));
        assert!(worth_caching(&facts()));
    }
}
