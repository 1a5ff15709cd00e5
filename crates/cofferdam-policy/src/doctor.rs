//! The doctor checklist: the host facts as one line per mechanism, each missing one with how
//! to get it. Pure: built from `HostFacts` and the tier decision, so the fixes it prints are
//! the same words the scope report's `shortfall_reason` uses.

use crate::tier::{Missing, decide_tier};
use cofferdam_record::{ContainmentClass, EnforcementTier, HostFacts};
use serde::Serialize;

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Present and usable.
    Ok,
    /// Present with a limitation worth knowing.
    Warn,
    /// Absent: a tier needs it.
    Missing,
    /// A fact, neither good nor bad.
    Info,
}

/// One line of the checklist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Stable identifier, e.g. `landlock`.
    pub id: &'static str,
    /// What was checked.
    pub name: &'static str,
    /// The outcome.
    pub status: CheckStatus,
    /// What the probe saw.
    pub detail: String,
    /// How to get it, when it is missing or limited.
    pub fix: Option<String>,
}

/// The whole checklist.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DoctorReport {
    /// The strongest tier this host offers.
    pub enforcement_tier: EnforcementTier,
    /// The class it backs.
    pub host_containment: ContainmentClass,
    /// One line per mechanism.
    pub checks: Vec<Check>,
    /// The raw facts the checks were made from.
    pub facts: HostFacts,
}

fn find<'a>(missing: &'a [Missing], mechanism: &str) -> Option<&'a Missing> {
    missing.iter().find(|m| m.mechanism == mechanism)
}

fn from_missing(id: &'static str, name: &'static str, m: Option<&Missing>, ok: String) -> Check {
    match m {
        Some(m) => Check {
            id,
            name,
            status: CheckStatus::Missing,
            detail: m.detail.clone(),
            fix: Some(m.fix.clone()),
        },
        None => Check {
            id,
            name,
            status: CheckStatus::Ok,
            detail: ok,
            fix: None,
        },
    }
}

/// Build the checklist for `facts`.
pub fn doctor(facts: &HostFacts) -> DoctorReport {
    let t = decide_tier(facts);
    let mut checks = vec![Check {
        id: "kernel",
        name: "kernel",
        status: CheckStatus::Info,
        detail: format!("Linux {} ({})", facts.kernel_release, facts.arch),
        fix: None,
    }];
    checks.push(from_missing(
        "seccomp",
        "seccomp filters",
        find(&t.missing_for_scoped, "seccomp filters"),
        "a filter installs".into(),
    ));
    let mut landlock = from_missing(
        "landlock",
        "Landlock",
        find(&t.missing_for_scoped, "Landlock"),
        format!("ABI {}", facts.landlock_abi),
    );
    if landlock.status == CheckStatus::Ok && facts.landlock_abi < 6 {
        landlock.status = CheckStatus::Warn;
        landlock
            .detail
            .push_str(": signals and abstract unix sockets are not scoped (ABI 6)");
        landlock.fix = Some("use Linux 6.12 or newer for Landlock ABI 6".into());
    }
    checks.push(landlock);
    let grant = facts.userns.grant.map_or("unknown", |g| g.wire_name());
    checks.push(from_missing(
        "userns",
        "unprivileged user namespaces",
        find(&t.missing_for_sealed, "unprivileged user namespaces"),
        format!("created (permission: {grant})"),
    ));
    checks.push(Check {
        id: "apparmor",
        name: "AppArmor user-namespace restriction",
        status: CheckStatus::Info,
        detail: match facts.userns.apparmor_restrict {
            None => "not present on this host".into(),
            Some(on) => format!(
                "kernel.apparmor_restrict_unprivileged_userns = {}; cofferdam's label: {}",
                u8::from(on),
                facts.userns.apparmor_label.as_deref().unwrap_or("unknown")
            ),
        },
        fix: None,
    });
    for (id, name, mech) in [
        (
            "overlay",
            "overlayfs in a user namespace",
            "overlayfs in a user namespace",
        ),
        ("netns", "network namespaces", "network namespaces"),
        ("pidns", "pid namespaces", "pid namespaces"),
    ] {
        let mut c = from_missing(id, name, find(&t.missing_for_sealed, mech), "works".into());
        if !facts.userns.can_create {
            c.status = CheckStatus::Info;
            c.detail = "not tried: needs a user namespace".into();
            c.fix = None;
        }
        checks.push(c);
    }
    let cg = &facts.cgroup;
    let useful: Vec<&str> = ["memory", "pids", "cpu", "io"]
        .into_iter()
        .filter(|c| cg.v2_delegated_controllers.iter().any(|x| x == c))
        .collect();
    checks.push(if cg.v2_delegated && useful.len() == 4 {
        Check {
            id: "cgroup_v2",
            name: "delegated cgroup v2",
            status: CheckStatus::Ok,
            detail: format!(
                "{}{} with controllers: {}",
                cg.v2_mount.as_deref().unwrap_or(""),
                cg.v2_own_cgroup.as_deref().unwrap_or("?"),
                cg.v2_delegated_controllers.join(" ")
            ),
            fix: None,
        }
    } else {
        Check {
            id: "cgroup_v2",
            name: "delegated cgroup v2",
            status: CheckStatus::Warn,
            detail: match &cg.v2_mount {
                None => "no cgroup v2 hierarchy mounted".into(),
                Some(m) if cg.v2_delegated => format!(
                    "{m}{} is writable but has only these controllers: {}",
                    cg.v2_own_cgroup.as_deref().unwrap_or(""),
                    if cg.v2_delegated_controllers.is_empty() {
                        "none".to_owned()
                    } else {
                        cg.v2_delegated_controllers.join(" ")
                    }
                ),
                Some(m) => format!(
                    "{m} is mounted but cgroup {} is not delegated to this user",
                    cg.v2_own_cgroup.as_deref().unwrap_or("unknown")
                ),
            },
            fix: Some(
                "run under a delegated scope, e.g. `systemd-run --user --scope -p Delegate=yes \
                 cofferdam run …`; without one, memory and pids fall back to rlimits and cpus \
                 and io_bps are not enforced"
                    .into(),
            ),
        }
    });
    checks.push(Check {
        id: "cgroup_v1",
        name: "cgroup v1 controllers",
        status: CheckStatus::Info,
        detail: if cg.v1_controllers.is_empty() {
            "none mounted".into()
        } else if facts.is_root {
            format!("{} (usable: running as root)", cg.v1_controllers.join(" "))
        } else {
            format!("{} (usable only as root)", cg.v1_controllers.join(" "))
        },
        fix: None,
    });
    checks.push(Check {
        id: "user",
        name: "running as",
        status: CheckStatus::Info,
        detail: format!(
            "uid {} gid {}{}",
            facts.uid,
            facts.gid,
            if facts.is_root { " (root)" } else { "" }
        ),
        fix: None,
    });
    DoctorReport {
        enforcement_tier: t.tier,
        host_containment: t.class(),
        checks,
        facts: facts.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(r: &DoctorReport, id: &str) -> CheckStatus {
        r.checks.iter().find(|c| c.id == id).unwrap().status
    }

    #[test]
    fn capable_host_is_all_ok_but_cgroup_delegation() {
        let r = doctor(&HostFacts::capable_example());
        assert_eq!(r.host_containment, ContainmentClass::Sealed);
        for id in ["seccomp", "landlock", "userns", "overlay", "netns", "pidns"] {
            assert_eq!(status(&r, id), CheckStatus::Ok, "{id}");
        }
        assert_eq!(status(&r, "cgroup_v2"), CheckStatus::Warn);
    }

    #[test]
    fn missing_mechanisms_carry_fixes() {
        let mut f = HostFacts::capable_example();
        f.landlock_abi = 0;
        f.userns.can_create = false;
        f.userns.apparmor_restrict = Some(true);
        f.overlay_in_userns = None;
        let r = doctor(&f);
        assert_eq!(r.host_containment, ContainmentClass::Advisory);
        for id in ["landlock", "userns"] {
            let c = r.checks.iter().find(|c| c.id == id).unwrap();
            assert_eq!(c.status, CheckStatus::Missing, "{id}");
            assert!(c.fix.is_some(), "{id}");
        }
        assert_eq!(status(&r, "overlay"), CheckStatus::Info);
        let userns = r.checks.iter().find(|c| c.id == "userns").unwrap();
        assert!(userns.fix.as_ref().unwrap().contains("apparmor"));
    }

    #[test]
    fn old_landlock_is_a_warning() {
        let mut f = HostFacts::capable_example();
        f.landlock_abi = 3;
        assert_eq!(status(&doctor(&f), "landlock"), CheckStatus::Warn);
    }
}
