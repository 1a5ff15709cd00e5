//! User-namespace permission facts: the sysctls and AppArmor label that decide whether an
//! unprivileged user namespace may be created, and [`userns_grant`], the pure mapping from
//! those facts (plus the forked child's result) to a [`UsernsGrant`].
//!
//! Owns reading `/proc/sys/user/max_user_namespaces`,
//! `/proc/sys/kernel/unprivileged_userns_clone`,
//! `/proc/sys/kernel/apparmor_restrict_unprivileged_userns`,
//! `/sys/module/apparmor/parameters/enabled` and the prober's AppArmor label. Read-only: it
//! never writes a sysctl and never creates a namespace (that is `child`'s job).

use std::path::Path;

use cofferdam_record::UsernsGrant;

/// The exact label of a task no AppArmor profile confines.
pub const UNCONFINED_LABEL: &str = "unconfined";

/// Where the permission to create a user namespace comes from, given what was measured.
///
/// The mapping, in order:
///
/// 1. `can_create == false` → [`UsernsGrant::Withheld`], whatever the reason: the AppArmor
///    restriction (on Ubuntu the `unshare` succeeds but the id-map write fails with `EPERM`
///    because the task is moved to the `unprivileged_userns` profile), `max_user_namespaces
///    = 0` (`ENOSPC`), `unprivileged_userns_clone = 0` (`EPERM`), a container's seccomp
///    filter or LSM. `UsernsFacts::error` and the sysctls say which; the grant only says the
///    permission is not there.
/// 2. the restriction sysctl is absent (`apparmor_restrict == None`: no AppArmor, or an
///    AppArmor without the restriction) → [`UsernsGrant::AppArmorAbsent`].
/// 3. the restriction is present and `0` → [`UsernsGrant::RestrictionDisabled`].
/// 4. the restriction is on and the prober runs under an AppArmor profile (a label other
///    than exactly `unconfined`, e.g. `cofferdam (unconfined)` or `/usr/bin/x (enforce)`)
///    → [`UsernsGrant::Profile`]: with the restriction on, a confined task gets a user
///    namespace only through its profile's `userns` rule.
/// 5. the restriction is on, creation worked, but the label is exactly `unconfined` (or
///    unknown) → `None`. The restriction only applies to tasks without `CAP_SYS_ADMIN`:
///    root (and a task with `CAP_SYS_ADMIN` from file capabilities or an enclosing user
///    namespace) is exempt. That is neither a profile nor a host-wide switch, and
///    `UsernsGrant` has no variant for it, so the grant is left undetermined rather than
///    guessed; `HostFacts::is_root` tells the reader the likely reason. Being root is
///    therefore not an input either. (A `Privileged` variant would make this explicit.)
///
/// `unprivileged_userns_clone` and `max_user_namespaces` are not inputs: they can only
/// withhold, and a withheld namespace is already visible as `can_create == false`.
pub fn userns_grant(
    can_create: bool,
    apparmor_restrict: Option<bool>,
    apparmor_label: Option<&str>,
) -> Option<UsernsGrant> {
    if !can_create {
        return Some(UsernsGrant::Withheld);
    }
    match apparmor_restrict {
        None => Some(UsernsGrant::AppArmorAbsent),
        Some(false) => Some(UsernsGrant::RestrictionDisabled),
        Some(true) => match apparmor_label {
            Some(label) if label != UNCONFINED_LABEL && !label.is_empty() => {
                Some(UsernsGrant::Profile)
            }
            // Unconfined (or unreadable) and still allowed: most likely the privileged
            // exemption (root, CAP_SYS_ADMIN), which no variant names; see rule 5 above.
            _ => None,
        },
    }
}

/// Parse an integer sysctl (`"63000\n"`); `None` when it is not a plain unsigned number.
pub fn parse_sysctl_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Parse a boolean sysctl (`"0\n"` / `"1\n"`); any non-zero number is `true`, anything else
/// is `None`.
pub fn parse_sysctl_bool(text: &str) -> Option<bool> {
    parse_sysctl_u64(text).map(|v| v != 0)
}

/// Parse an AppArmor label as read from `/proc/self/attr/.../current`: trailing newline and
/// NUL padding removed; `None` when empty.
pub fn parse_apparmor_label(text: &str) -> Option<String> {
    let label = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    (!label.is_empty()).then(|| label.to_owned())
}

/// Whether `/sys/module/apparmor/parameters/enabled` says AppArmor is enabled (`Y`).
pub fn parse_apparmor_enabled(text: &str) -> bool {
    text.trim() == "Y"
}

/// The sysctls and label as read from this host (each `None` when absent or unreadable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsernsSettings {
    /// `/proc/sys/user/max_user_namespaces`.
    pub max_user_namespaces: Option<u64>,
    /// `/proc/sys/kernel/unprivileged_userns_clone`.
    pub unprivileged_userns_clone: Option<bool>,
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns`.
    pub apparmor_restrict: Option<bool>,
    /// The prober's AppArmor label, when AppArmor is enabled.
    pub apparmor_label: Option<String>,
}

/// Read the user-namespace sysctls and the AppArmor label of this process.
pub fn read_settings() -> UsernsSettings {
    let read = |p: &str| std::fs::read_to_string(Path::new(p)).ok();
    let apparmor_enabled = read("/sys/module/apparmor/parameters/enabled")
        .as_deref()
        .is_some_and(parse_apparmor_enabled);
    let apparmor_label = if apparmor_enabled {
        // The LSM-stacking interface first; the legacy one is shared by every LSM.
        read("/proc/self/attr/apparmor/current")
            .or_else(|| read("/proc/self/attr/current"))
            .as_deref()
            .and_then(parse_apparmor_label)
    } else {
        None
    };
    UsernsSettings {
        max_user_namespaces: read("/proc/sys/user/max_user_namespaces")
            .as_deref()
            .and_then(parse_sysctl_u64),
        unprivileged_userns_clone: read("/proc/sys/kernel/unprivileged_userns_clone")
            .as_deref()
            .and_then(parse_sysctl_bool),
        apparmor_restrict: read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
            .as_deref()
            .and_then(parse_sysctl_bool),
        apparmor_label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_mapping() {
        use UsernsGrant::*;
        // Withheld wins whatever else is true.
        assert_eq!(userns_grant(false, None, None), Some(Withheld));
        assert_eq!(userns_grant(false, Some(false), None), Some(Withheld));
        assert_eq!(
            userns_grant(false, Some(true), Some("unconfined")),
            Some(Withheld)
        );
        assert_eq!(userns_grant(true, None, None), Some(AppArmorAbsent));
        assert_eq!(
            userns_grant(true, None, Some("unconfined")),
            Some(AppArmorAbsent)
        );
        assert_eq!(
            userns_grant(true, Some(false), Some("unconfined")),
            Some(RestrictionDisabled)
        );
        assert_eq!(
            userns_grant(true, Some(true), Some("cofferdam (unconfined)")),
            Some(Profile)
        );
        assert_eq!(
            userns_grant(true, Some(true), Some("/usr/bin/cofferdam (enforce)")),
            Some(Profile)
        );
        // Root (or CAP_SYS_ADMIN) exemption: not a profile, not a host switch.
        assert_eq!(userns_grant(true, Some(true), Some("unconfined")), None);
        assert_eq!(userns_grant(true, Some(true), Some("")), None);
        assert_eq!(userns_grant(true, Some(true), None), None);
    }

    #[test]
    fn sysctl_parsing() {
        assert_eq!(parse_sysctl_u64("63000\n"), Some(63000));
        assert_eq!(parse_sysctl_u64("x\n"), None);
        assert_eq!(parse_sysctl_bool("0\n"), Some(false));
        assert_eq!(parse_sysctl_bool("1\n"), Some(true));
        assert_eq!(parse_sysctl_bool("2"), Some(true));
        assert_eq!(parse_sysctl_bool(""), None);
        assert!(parse_apparmor_enabled("Y\n"));
        assert!(!parse_apparmor_enabled("N\n"));
        assert_eq!(
            parse_apparmor_label("unconfined\n"),
            Some("unconfined".to_owned())
        );
        assert_eq!(
            parse_apparmor_label("cofferdam (unconfined)\n\0"),
            Some("cofferdam (unconfined)".to_owned())
        );
        assert_eq!(parse_apparmor_label("\n"), None);
    }
}
