//! From host facts to enforcement tier and containment class (DESIGN.md §2), and the floor
//! check. Pure: the facts come in as a value.
//!
//! The sealed tier needs seccomp, an unprivileged user namespace, and, inside it, mount,
//! pid and network namespaces and overlayfs. Landlock is a second filesystem layer there,
//! installed at the host's ABI when the kernel has it and recorded as unavailable when it
//! does not: the composed root is the sealed tier's filesystem boundary, so a kernel without
//! Landlock still gets namespaces rather than falling to advisory. The scoped tier needs
//! Landlock and seccomp. Anything less is advisory.

use cofferdam_record::{ContainmentClass, EnforcementTier, HostFacts};

/// A mechanism a class needs that the host lacks, with how to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Short mechanism name, e.g. `user namespaces`.
    pub mechanism: &'static str,
    /// What the probe saw.
    pub detail: String,
    /// How to get it.
    pub fix: String,
}

impl Missing {
    /// One sentence: mechanism, what was seen, and the fix.
    pub fn sentence(&self) -> String {
        format!("{} ({}); fix: {}", self.mechanism, self.detail, self.fix)
    }
}

/// What the host can enforce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierDecision {
    /// The strongest tier the host offers.
    pub tier: EnforcementTier,
    /// What the sealed tier lacks here (empty when the host is sealed-capable).
    pub missing_for_sealed: Vec<Missing>,
    /// What the scoped tier lacks here (empty when the host is scoped-capable).
    pub missing_for_scoped: Vec<Missing>,
}

impl TierDecision {
    /// The class the host's tier backs.
    pub fn class(&self) -> ContainmentClass {
        self.tier.class()
    }

    /// What `class` lacks here (empty when the host backs it).
    pub fn missing_for(&self, class: ContainmentClass) -> &[Missing] {
        match class {
            ContainmentClass::Sealed => &self.missing_for_sealed,
            ContainmentClass::Scoped => &self.missing_for_scoped,
            ContainmentClass::Advisory => &[],
        }
    }
}

/// The strongest tier `facts` can back, and what each stronger tier lacks.
pub fn decide_tier(facts: &HostFacts) -> TierDecision {
    let mut sealed = Vec::new();
    if !facts.seccomp_filter {
        sealed.push(missing_seccomp(facts));
    }
    if !facts.userns.can_create {
        sealed.push(missing_userns(facts));
    } else {
        for (fact, mechanism, min) in [
            (
                facts.overlay_in_userns,
                "overlayfs in a user namespace",
                "5.11",
            ),
            (facts.netns, "network namespaces", "3.8"),
            (facts.pidns, "pid namespaces", "3.8"),
        ] {
            if fact != Some(true) {
                sealed.push(Missing {
                    mechanism,
                    detail: match fact {
                        Some(false) => format!("refused inside a user namespace on kernel {}", facts.kernel_release),
                        _ => "could not be tried".to_owned(),
                    },
                    fix: format!("use Linux {min} or newer built with that feature; inside a container, allow nested namespaces and mounts"),
                });
            }
        }
    }
    let mut scoped = Vec::new();
    if facts.landlock_abi == 0 {
        scoped.push(Missing {
            mechanism: "Landlock",
            detail: format!("kernel {} reports no Landlock ABI", facts.kernel_release),
            fix: "use Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK=y and `landlock` in the \
                  lsm= boot parameter (e.g. lsm=landlock,lockdown,yama,integrity,apparmor); \
                  or, knowing nothing will be enforced, run as a plain host process with \
                  --containment advisory"
                .to_owned(),
        });
    }
    if !facts.seccomp_filter {
        scoped.push(missing_seccomp(facts));
    }
    let tier = if sealed.is_empty() {
        EnforcementTier::MountnsPivotRootLandlockSeccomp
    } else if scoped.is_empty() {
        EnforcementTier::LandlockSeccomp
    } else {
        EnforcementTier::None
    };
    TierDecision {
        tier,
        missing_for_sealed: sealed,
        missing_for_scoped: scoped,
    }
}

fn missing_seccomp(facts: &HostFacts) -> Missing {
    Missing {
        mechanism: "seccomp filters",
        detail: format!(
            "a filter could not be installed on kernel {}",
            facts.kernel_release
        ),
        fix: "use a kernel built with CONFIG_SECCOMP_FILTER=y; inside a container, do not \
              run with a seccomp profile that forbids seccomp(2)"
            .to_owned(),
    }
}

fn missing_userns(facts: &HostFacts) -> Missing {
    let u = &facts.userns;
    let error = u.error.as_deref().unwrap_or("refused");
    let (detail, fix) = if u.max_user_namespaces == Some(0) {
        (
            format!("user.max_user_namespaces is 0 ({error})"),
            format!(
                "sudo sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/){}",
                apparmor_hint(u.apparmor_restrict)
            ),
        )
    } else if u.unprivileged_userns_clone == Some(false) && !facts.is_root {
        (
            format!("kernel.unprivileged_userns_clone is 0 ({error})"),
            "sudo sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)"
                .to_owned(),
        )
    } else if u.apparmor_restrict == Some(true) {
        (
            format!("AppArmor restricts unprivileged user namespaces ({error})"),
            "install cofferdam's AppArmor profile: sudo install -m 644 \
             packaging/apparmor/cofferdam /etc/apparmor.d/cofferdam && sudo apparmor_parser -r \
             /etc/apparmor.d/cofferdam (or, host-wide, sudo sysctl -w \
             kernel.apparmor_restrict_unprivileged_userns=0)"
                .to_owned(),
        )
    } else {
        (
            format!("unshare(CLONE_NEWUSER) failed: {error}"),
            format!(
                "this environment forbids user namespaces (a container's seccomp profile, a \
             hardened kernel or WSL1): run on a host or container that permits them, or use \
             --containment scoped{}",
                apparmor_hint(u.apparmor_restrict)
            ),
        )
    };
    Missing {
        mechanism: "unprivileged user namespaces",
        detail,
        fix,
    }
}

/// The AppArmor way to user namespaces, added to a fix unless the probe saw AppArmor's
/// restriction switched off (then it cannot be the cause).
fn apparmor_hint(restrict: Option<bool>) -> &'static str {
    if restrict == Some(false) {
        ""
    } else {
        "; where AppArmor restricts user namespaces (Ubuntu 23.10+, \
         kernel.apparmor_restrict_unprivileged_userns=1), install cofferdam's AppArmor \
         profile instead: sudo install -m 644 packaging/apparmor/cofferdam \
         /etc/apparmor.d/cofferdam && sudo apparmor_parser -r /etc/apparmor.d/cofferdam"
    }
}

/// The floor decision for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainmentDecision {
    /// The floor asked for.
    pub declared: ContainmentClass,
    /// The class the run gets: the host's.
    pub achieved: ContainmentClass,
    /// The strongest class the host backs.
    pub host: ContainmentClass,
    /// The tier the run installs.
    pub tier: EnforcementTier,
    /// `achieved >= declared`.
    pub floor_met: bool,
    /// Why the floor is not met, naming each missing mechanism and its fix.
    pub shortfall_reason: Option<String>,
}

/// Decide the run's containment: always the strongest tier the host offers; the floor only
/// decides whether `run` refuses.
pub fn decide_containment(facts: &HostFacts, declared: ContainmentClass) -> ContainmentDecision {
    decide_containment_capped(facts, declared, None)
}

/// [`decide_containment`] with the run's tier capped at `cap` (`run --tier`): the cap can only
/// lower the tier the host offers, never raise it, and a cap below the floor is a shortfall
/// like any other (the run refuses).
pub fn decide_containment_capped(
    facts: &HostFacts,
    declared: ContainmentClass,
    cap: Option<ContainmentClass>,
) -> ContainmentDecision {
    let tiers = decide_tier(facts);
    let host = tiers.class();
    let achieved = cap.map_or(host, |c| c.min(host));
    let floor_met = achieved >= declared;
    let shortfall_reason = (!floor_met).then(|| {
        if host >= declared {
            format!(
                "the declared floor is {declared} but --tier {achieved} caps this run below it; \
                 fix: drop --tier, or lower the floor with --containment {achieved}"
            )
        } else {
            let missing: Vec<String> =
                tiers.missing_for(declared).iter().map(Missing::sentence).collect();
            format!(
                "the declared floor is {declared} but this host backs only {host}: {declared} needs {}",
                missing.join("; ")
            )
        }
    });
    ContainmentDecision {
        declared,
        achieved,
        host,
        tier: if achieved == host {
            tiers.tier
        } else {
            EnforcementTier::for_class(achieved)
        },
        floor_met,
        shortfall_reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofferdam_record::UsernsGrant;

    /// Every combination of the facts that decide the tier.
    fn all_combinations() -> Vec<(HostFacts, [bool; 6])> {
        let mut out = Vec::new();
        for bits in 0u8..64 {
            let b = |i: u8| bits & (1 << i) != 0;
            let mut f = HostFacts::capable_example();
            f.seccomp_filter = b(0);
            f.landlock_abi = if b(1) { 7 } else { 0 };
            f.userns.can_create = b(2);
            let inner = |x: bool| if f.userns.can_create { Some(x) } else { None };
            f.overlay_in_userns = inner(b(3));
            f.netns = inner(b(4));
            f.pidns = inner(b(5));
            out.push((f, [b(0), b(1), b(2), b(3), b(4), b(5)]));
        }
        out
    }

    /// A run decides before it reads its cgroup layout
    /// (`cofferdam_sandbox::probe::FactsBeforeCgroups`): no cgroup fact may change the
    /// decision.
    #[test]
    fn the_decision_reads_no_cgroup_fact() {
        use cofferdam_record::CgroupFacts;
        let layouts = [
            CgroupFacts::default(),
            CgroupFacts {
                v2_mount: Some("/sys/fs/cgroup".into()),
                v2_own_cgroup: Some("/user.slice".into()),
                v2_controllers: vec!["memory".into(), "pids".into()],
                v2_delegated: true,
                v2_delegated_controllers: vec!["memory".into(), "pids".into()],
                v1_controllers: vec!["cpu".into()],
            },
        ];
        for (facts, _) in all_combinations() {
            for floor in ContainmentClass::ALL {
                let decisions: Vec<_> = layouts
                    .iter()
                    .map(|c| {
                        let f = HostFacts {
                            cgroup: c.clone(),
                            ..facts.clone()
                        };
                        decide_containment_capped(&f, floor, None)
                    })
                    .collect();
                assert_eq!(decisions[0], decisions[1]);
            }
        }
    }

    #[test]
    fn a_tier_cap_only_lowers_and_a_cap_below_the_floor_refuses() {
        use ContainmentClass as C;
        let sealed = HostFacts::capable_example();
        let d = decide_containment_capped(&sealed, C::Scoped, Some(C::Scoped));
        assert_eq!(d.tier, EnforcementTier::LandlockSeccomp);
        assert_eq!(
            (d.achieved, d.host, d.floor_met),
            (C::Scoped, C::Sealed, true)
        );
        let d = decide_containment_capped(&sealed, C::Advisory, Some(C::Advisory));
        assert_eq!(d.tier, EnforcementTier::None);
        let d = decide_containment_capped(&sealed, C::Scoped, Some(C::Advisory));
        assert!(!d.floor_met);
        let reason = d.shortfall_reason.unwrap_or_default();
        assert!(reason.contains("--tier advisory"), "{reason}");
        let mut scoped = HostFacts::capable_example();
        scoped.userns.can_create = false;
        let d = decide_containment_capped(&scoped, C::Scoped, Some(C::Sealed));
        assert_eq!(
            d.tier,
            EnforcementTier::LandlockSeccomp,
            "a cap never raises"
        );
        assert_eq!(
            decide_containment_capped(&sealed, C::Scoped, None),
            decide_containment(&sealed, C::Scoped)
        );
    }

    #[test]
    fn the_userns_shortfall_names_the_apparmor_profile_unless_apparmor_is_off() {
        let mut f = HostFacts::capable_example();
        f.userns.can_create = false;
        f.userns.max_user_namespaces = Some(0);
        f.userns.apparmor_restrict = None;
        let reason = decide_containment(&f, ContainmentClass::Sealed)
            .shortfall_reason
            .unwrap_or_default();
        assert!(
            reason.contains("user namespaces") && reason.contains("packaging/apparmor/cofferdam"),
            "{reason}"
        );
        f.userns.apparmor_restrict = Some(false);
        let reason = decide_containment(&f, ContainmentClass::Sealed)
            .shortfall_reason
            .unwrap_or_default();
        assert!(!reason.contains("AppArmor"), "{reason}");
    }

    #[test]
    fn every_combination_maps_to_the_expected_tier() {
        for (facts, [seccomp, landlock, userns, overlay, netns, pidns]) in all_combinations() {
            let expected = if seccomp && userns && overlay && netns && pidns {
                EnforcementTier::MountnsPivotRootLandlockSeccomp
            } else if seccomp && landlock {
                EnforcementTier::LandlockSeccomp
            } else {
                EnforcementTier::None
            };
            let d = decide_tier(&facts);
            assert_eq!(
                d.tier,
                expected,
                "{:?}",
                [seccomp, landlock, userns, overlay, netns, pidns]
            );
            assert_eq!(
                d.missing_for_sealed.is_empty(),
                expected == EnforcementTier::MountnsPivotRootLandlockSeccomp
            );
            assert_eq!(d.missing_for_scoped.is_empty(), seccomp && landlock);
            for declared in ContainmentClass::ALL {
                let c = decide_containment(&facts, declared);
                assert_eq!(c.tier, expected);
                assert_eq!(c.achieved, expected.class());
                assert_eq!(c.host, c.achieved);
                assert_eq!(c.floor_met, c.achieved >= declared);
                assert_eq!(c.shortfall_reason.is_some(), !c.floor_met);
            }
        }
    }

    #[test]
    fn capable_host_is_sealed_and_meets_every_floor() {
        let f = HostFacts::capable_example();
        for declared in ContainmentClass::ALL {
            let c = decide_containment(&f, declared);
            assert_eq!(c.achieved, ContainmentClass::Sealed);
            assert!(c.floor_met);
        }
    }

    #[test]
    fn sealed_floor_without_userns_names_the_mechanism_and_fix() {
        let mut f = HostFacts::capable_example();
        f.userns.can_create = false;
        f.userns.error = Some("EACCES".into());
        f.userns.apparmor_restrict = Some(true);
        f.userns.grant = Some(UsernsGrant::Withheld);
        f.overlay_in_userns = None;
        f.netns = None;
        f.pidns = None;
        let c = decide_containment(&f, ContainmentClass::Sealed);
        assert_eq!(c.achieved, ContainmentClass::Scoped);
        assert!(!c.floor_met);
        let reason = c.shortfall_reason.unwrap();
        assert!(reason.contains("unprivileged user namespaces"), "{reason}");
        assert!(reason.contains("AppArmor"), "{reason}");
        assert!(reason.contains("packaging/apparmor/cofferdam"), "{reason}");
    }

    #[test]
    fn userns_fixes_follow_the_cause() {
        let mut f = HostFacts::capable_example();
        f.userns.can_create = false;
        f.userns.max_user_namespaces = Some(0);
        assert!(
            decide_tier(&f).missing_for_sealed[0]
                .fix
                .contains("max_user_namespaces")
        );
        f.userns.max_user_namespaces = Some(100);
        f.userns.unprivileged_userns_clone = Some(false);
        assert!(
            decide_tier(&f).missing_for_sealed[0]
                .fix
                .contains("unprivileged_userns_clone")
        );
        f.userns.unprivileged_userns_clone = None;
        assert!(
            decide_tier(&f).missing_for_sealed[0]
                .fix
                .contains("container")
        );
    }

    #[test]
    fn no_landlock_keeps_sealed_but_scoped_floor_on_a_bare_host_refuses() {
        let mut f = HostFacts::capable_example();
        f.landlock_abi = 0;
        assert_eq!(
            decide_tier(&f).tier,
            EnforcementTier::MountnsPivotRootLandlockSeccomp
        );
        f.userns.can_create = false;
        let c = decide_containment(&f, ContainmentClass::Scoped);
        assert_eq!(c.achieved, ContainmentClass::Advisory);
        let reason = c.shortfall_reason.unwrap();
        assert!(reason.contains("Landlock"), "{reason}");
        assert!(reason.contains("--containment advisory"), "{reason}");
    }
}
