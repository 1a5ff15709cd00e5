//! `HostFacts`: what the host probe found, as one plain value. The probe
//! (`cofferdam-sandbox::probe`) fills it once per command; every decision (tier, class, scope
//! report, doctor checklist) is a pure function of it, so tests inject facts instead of
//! needing a particular kernel.
//!
//! A fact the probe could not establish is `None` (serialized `null`), never a guessed
//! `false` or `0`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Everything cofferdam needs to know about the host to choose a tier and explain it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HostFacts {
    /// `uname -r`, e.g. `6.18.44`.
    pub kernel_release: String,
    /// `uname -m`, e.g. `x86_64`.
    pub arch: String,
    /// The Landlock ABI the kernel reports; 0 when Landlock is absent or disabled.
    pub landlock_abi: u32,
    /// Whether a seccomp BPF filter could be installed (tried in a forked child).
    pub seccomp_filter: bool,
    /// User namespace creation and where the permission comes from.
    pub userns: UsernsFacts,
    /// Whether overlayfs mounts inside a fresh user + mount namespace (with `userxattr`);
    /// `None` when that could not be tried (no user namespace).
    pub overlay_in_userns: Option<bool>,
    /// Whether a network namespace can be created inside the user namespace; `None` when
    /// that could not be tried.
    pub netns: Option<bool>,
    /// Whether a pid namespace can be created inside the user namespace; `None` when that
    /// could not be tried.
    pub pidns: Option<bool>,
    /// cgroup v1 and v2 layout and delegation.
    pub cgroup: CgroupFacts,
    /// The effective uid is 0.
    pub is_root: bool,
    /// The effective uid and gid of the prober.
    pub uid: u32,
    /// See [`HostFacts::uid`].
    pub gid: u32,
    /// Host CA trust-store locations that exist (files or directories), e.g.
    /// `/etc/ssl/certs`. Readable to the workload on every tier that shows `/etc`.
    #[serde(default)]
    pub trust_store: Vec<String>,
}

/// Unprivileged user namespace creation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UsernsFacts {
    /// A user namespace was created (with a single-id map) in a forked child.
    pub can_create: bool,
    /// The error the attempt failed with, when it failed (e.g. `EPERM`, `ENOSPC`).
    pub error: Option<String>,
    /// Where the permission to create one comes from; `None` when undeterminable.
    pub grant: Option<UsernsGrant>,
    /// `/proc/sys/user/max_user_namespaces`; `None` when unreadable.
    pub max_user_namespaces: Option<u64>,
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian/Ubuntu patch); `None` when the
    /// sysctl does not exist.
    pub unprivileged_userns_clone: Option<bool>,
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns`; `None` when the sysctl does
    /// not exist (no AppArmor, or an AppArmor without the restriction).
    pub apparmor_restrict: Option<bool>,
    /// The AppArmor label the prober runs under (`/proc/self/attr/current`), e.g.
    /// `unconfined` or `cofferdam (unconfined)`; `None` without AppArmor.
    pub apparmor_label: Option<String>,
}

/// Where the permission to create an unprivileged user namespace comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UsernsGrant {
    /// AppArmor is not restricting user namespaces on this host (absent, or without the
    /// restriction sysctl).
    #[serde(rename = "apparmor-absent")]
    AppArmorAbsent,
    /// AppArmor has the restriction, switched off host-wide
    /// (`kernel.apparmor_restrict_unprivileged_userns = 0`).
    RestrictionDisabled,
    /// The restriction is on and an AppArmor profile grants this program `userns`.
    Profile,
    /// The restriction (or another host setting) withholds user namespaces from this program.
    Withheld,
}

impl UsernsGrant {
    /// The stable wire name.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::AppArmorAbsent => "apparmor-absent",
            Self::RestrictionDisabled => "restriction-disabled",
            Self::Profile => "profile",
            Self::Withheld => "withheld",
        }
    }
}

/// cgroup layout as seen from the prober.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CgroupFacts {
    /// Where the unified (v2) hierarchy is mounted, if it is.
    pub v2_mount: Option<String>,
    /// The prober's own cgroup in the v2 hierarchy (from `/proc/self/cgroup`, `0::` line).
    pub v2_own_cgroup: Option<String>,
    /// Controllers available in the prober's own v2 cgroup (`cgroup.controllers`).
    #[serde(default)]
    pub v2_controllers: Vec<String>,
    /// Whether the prober may create child cgroups under its own v2 cgroup and move
    /// processes into them (writable directory and `cgroup.procs`): a delegated subtree.
    pub v2_delegated: bool,
    /// Controllers the prober could enable for a child it creates: the intersection of the
    /// v2 controllers with what delegation allows. Empty when not delegated.
    #[serde(default)]
    pub v2_delegated_controllers: Vec<String>,
    /// cgroup v1 hierarchies mounted, by controller name (e.g. `memory`, `pids`, `cpu`).
    #[serde(default)]
    pub v1_controllers: Vec<String>,
}

impl HostFacts {
    /// A fully capable host as of this writing (kernel 6.18, Landlock ABI 7, userns and
    /// overlay allowed, v1 hybrid cgroups): the starting point tests take away from.
    pub fn capable_example() -> Self {
        HostFacts {
            kernel_release: "6.18.0".into(),
            arch: "x86_64".into(),
            landlock_abi: 7,
            seccomp_filter: true,
            userns: UsernsFacts {
                can_create: true,
                error: None,
                grant: Some(UsernsGrant::AppArmorAbsent),
                max_user_namespaces: Some(63_000),
                unprivileged_userns_clone: None,
                apparmor_restrict: None,
                apparmor_label: None,
            },
            overlay_in_userns: Some(true),
            netns: Some(true),
            pidns: Some(true),
            cgroup: CgroupFacts {
                v2_mount: Some("/sys/fs/cgroup/unified".into()),
                v2_own_cgroup: Some("/".into()),
                v2_controllers: vec!["hugetlb".into()],
                v2_delegated: false,
                v2_delegated_controllers: vec![],
                v1_controllers: vec!["cpu".into(), "memory".into(), "pids".into()],
            },
            is_root: false,
            uid: 1000,
            gid: 1000,
            trust_store: vec!["/etc/ssl/certs".into()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_round_trip_through_json() {
        let f = HostFacts::capable_example();
        let json = serde_json::to_string(&f).unwrap();
        let back: HostFacts = serde_json::from_str(&json).unwrap();
        assert_eq!(f, back);
    }

    #[test]
    fn grant_wire_names_match_serde() {
        for g in [
            UsernsGrant::AppArmorAbsent,
            UsernsGrant::RestrictionDisabled,
            UsernsGrant::Profile,
            UsernsGrant::Withheld,
        ] {
            assert_eq!(serde_json::to_value(g).unwrap(), g.wire_name());
        }
    }

    #[test]
    fn unknown_facts_serialize_as_null() {
        let mut f = HostFacts::capable_example();
        f.overlay_in_userns = None;
        let v = serde_json::to_value(&f).unwrap();
        assert!(v["overlay_in_userns"].is_null());
        assert_eq!(
            serde_json::to_value(UsernsGrant::RestrictionDisabled).unwrap(),
            "restriction-disabled"
        );
    }
}
