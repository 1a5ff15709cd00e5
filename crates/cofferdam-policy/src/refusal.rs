//! Whether a run can be carried: the one decision `run` refuses by (exit 125, before a job
//! exists) and `scope` reports by (`floor_met`, `shortfall_reason`), so the report never
//! promises what the run refuses.
//!
//! Owns every refusal of a resolved policy on a decided tier: the floor shortfall, what the
//! copy tiers (scoped, advisory) cannot honour (read-only paths, network `allow`, lent host
//! paths) and the mount mode `stage`, which no tier carries yet. Pure: it reads the policy
//! and the tier decision, never the host; it may not decide the tier (`crate::tier`) or
//! render anything but the refusal's own cause and fix.

use crate::allow::NetworkMode;
use crate::manifest::MountMode;
use crate::policy::Policy;
use crate::tier::ContainmentDecision;
use cofferdam_record::EnforcementTier;
use serde::Serialize;
use std::fmt;

/// What a refusal is about, for a caller that branches on it (the text is in [`Refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// The achieved class is below the declared floor (host or `--tier`).
    FloorShortfall,
    /// Read-only paths on a copy tier.
    ReadOnlyOnCopyTier,
    /// Network mode `allow` on a copy tier.
    NetworkAllowOnCopyTier,
    /// A lent host path on a copy tier.
    MountOnCopyTier,
    /// A mount with mode `stage`.
    StageMount,
    /// `--publish` where the workload has no network namespace of its own.
    PublishWithoutNetns,
}

/// Why `run` will not carry this policy on this tier, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct Refusal {
    /// What the refusal is about.
    pub kind: RefusalKind,
    /// What cannot be carried and why.
    pub cause: String,
    /// What to change; empty when the cause already names the fix (the floor shortfall).
    pub fix: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.fix.is_empty() {
            f.write_str(&self.cause)
        } else {
            write!(f, "{}; {}", self.cause, self.fix)
        }
    }
}

fn refusal(kind: RefusalKind, cause: String, fix: String) -> Refusal {
    Refusal { kind, cause, fix }
}

/// Decide whether `policy` can run with `decision` (the floor decided on the host's facts and
/// the `--tier` cap). The first refusal wins, in the order the user would fix them: the
/// floor, then what the copy tier cannot honour, then what no tier carries.
pub fn check_run(policy: &Policy, decision: &ContainmentDecision) -> Result<(), Refusal> {
    if let Some(reason) = &decision.shortfall_reason {
        return Err(refusal(
            RefusalKind::FloorShortfall,
            reason.clone(),
            String::new(),
        ));
    }
    let tier = decision.tier;
    if tier != EnforcementTier::MountnsPivotRootLandlockSeccomp {
        copy_tier(policy, tier)?;
    }
    publish(policy, tier)?;
    if let Some(m) = policy.mounts.iter().find(|m| m.mode == MountMode::Stage) {
        return Err(refusal(
            RefusalKind::StageMount,
            format!(
                "{} ({}) asks for mode `stage`, which this build does not support yet",
                m.written, m.origin
            ),
            "use `read`, `write` or `hide`".to_owned(),
        ));
    }
    Ok(())
}

/// `--publish` relays into the sealed tier's network namespace. Without one the workload
/// shares the host's network: on the scoped tier its socket filter refuses TCP servers
/// (`listen(2)`), on the advisory tier and in network mode `host` its ports are the host's
/// already, so a relay would only contend with it for the port.
fn publish(policy: &Policy, tier: EnforcementTier) -> Result<(), Refusal> {
    let Some(first) = policy.network.publish.first() else {
        return Ok(());
    };
    let (why, fix) = if tier == EnforcementTier::LandlockSeccomp {
        (
            format!(
                "this run is on the {tier} tier, which has no network namespace to publish                  from, and its socket filter refuses TCP servers (listen(2))"
            ),
            "drop --publish, or run on a host with user namespaces (`cofferdam doctor` shows              how)",
        )
    } else if tier == EnforcementTier::None {
        (
            format!(
                "this run is on the {tier} tier, where the command shares the host's network:                  its ports are the host's already"
            ),
            "drop --publish: the command's server is reachable at 127.0.0.1:PORT directly",
        )
    } else if policy.network.mode == NetworkMode::Host {
        (
            "network mode `host` makes no network namespace: the command's ports are the              host's already"
                .to_owned(),
            "drop --publish (the server is reachable at 127.0.0.1:PORT directly), or drop              --network host",
        )
    } else {
        return Ok(());
    };
    Err(refusal(
        RefusalKind::PublishWithoutNetns,
        format!("--publish {first} relays into the sandbox's network namespace; {why}"),
        fix.to_owned(),
    ))
}

/// What the tiers without namespaces cannot honour.
fn copy_tier(policy: &Policy, tier: EnforcementTier) -> Result<(), Refusal> {
    const USERNS: &str = "run on a host with user namespaces (`cofferdam doctor` shows how)";
    if let Some(p) = policy.read_only.first() {
        return Err(refusal(
            RefusalKind::ReadOnlyOnCopyTier,
            format!(
                "read-only paths (here `{p}`) need the sealed tier's read-only mounts, and this \
                 run is on the {tier} tier, where Landlock cannot take writes away beneath the \
                 writable copy"
            ),
            format!("drop --read-only and [filesystem] read_only, or {USERNS}"),
        ));
    }
    if policy.network.mode == NetworkMode::Allow {
        let from = match policy
            .grant_sources
            .iter()
            .find(|g| g.grant == "network.mode")
        {
            Some(g) if g.profile.is_some() => {
                format!("{}, which --no-agent-defaults turns off", g.shown_source())
            }
            _ => "--allow-net, [network] allow".to_owned(),
        };
        return Err(refusal(
            RefusalKind::NetworkAllowOnCopyTier,
            format!(
                "network mode `allow` ({from}) is enforced from a network namespace, and this \
                 run is on the {tier} tier, which has none"
            ),
            format!(
                "use `--network none` (no network, Landlock refuses TCP), or `--network host` \
                 to accept an unfiltered network, or {USERNS}"
            ),
        ));
    }
    if let Some(m) = policy.mounts.first() {
        let profile = if m.origin.starts_with("profile:") {
            "; --no-agent-defaults drops the agent profile's paths"
        } else {
            ""
        };
        return Err(refusal(
            RefusalKind::MountOnCopyTier,
            format!(
                "{} ({}) lends a host path, which needs the sealed tier's mount namespace; this \
                 run is on the {tier} tier",
                m.written, m.origin
            ),
            format!("drop --mount and [filesystem] mounts, or {USERNS}{profile}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Mount, Places, RunFlags, resolve_policy};
    use cofferdam_record::ContainmentClass;
    use std::path::PathBuf;

    fn base() -> Policy {
        let places = Places {
            cwd: "/work/proj".into(),
            home: "/home/u".into(),
        };
        resolve_policy(None, &RunFlags::default(), &places).unwrap()
    }

    fn decision(tier: EnforcementTier, shortfall: Option<&str>) -> ContainmentDecision {
        let class = match tier {
            EnforcementTier::MountnsPivotRootLandlockSeccomp => ContainmentClass::Sealed,
            EnforcementTier::LandlockSeccomp => ContainmentClass::Scoped,
            _ => ContainmentClass::Advisory,
        };
        ContainmentDecision {
            declared: ContainmentClass::Advisory,
            achieved: class,
            host: ContainmentClass::Sealed,
            tier,
            floor_met: shortfall.is_none(),
            shortfall_reason: shortfall.map(str::to_owned),
        }
    }

    fn mount(mode: MountMode, origin: &str) -> Mount {
        Mount {
            source: PathBuf::from("/src"),
            target: PathBuf::from("/lend"),
            mode,
            origin: origin.to_owned(),
            written: "/src:/lend".to_owned(),
            optional: false,
        }
    }

    const SEALED: EnforcementTier = EnforcementTier::MountnsPivotRootLandlockSeccomp;
    const SCOPED: EnforcementTier = EnforcementTier::LandlockSeccomp;
    const NONE: EnforcementTier = EnforcementTier::None;

    fn kind(p: &Policy, tier: EnforcementTier) -> Option<RefusalKind> {
        check_run(p, &decision(tier, None)).err().map(|r| r.kind)
    }

    #[test]
    fn publish_needs_the_sealed_tiers_network_namespace() {
        let mut p = base();
        p.network.publish.push("8080:8000".parse().unwrap());
        assert_eq!(kind(&p, SEALED), None);
        assert_eq!(kind(&p, SCOPED), Some(RefusalKind::PublishWithoutNetns));
        assert_eq!(kind(&p, NONE), Some(RefusalKind::PublishWithoutNetns));
        p.network.mode = NetworkMode::Host;
        let r = check_run(&p, &decision(SEALED, None)).unwrap_err();
        assert_eq!(r.kind, RefusalKind::PublishWithoutNetns);
        assert!(r.to_string().contains("127.0.0.1:8080:8000"), "{r}");
        p.network.mode = NetworkMode::Allow;
        assert_eq!(kind(&p, SEALED), None);
    }

    #[test]
    fn the_refusals_as_a_table_of_policy_and_tier() {
        let plain = base();
        let mut ro = base();
        ro.read_only.push("/work/etc".to_owned());
        let mut allow = base();
        allow.network.mode = NetworkMode::Allow;
        let mut host = base();
        host.network.mode = NetworkMode::Host;
        let with = |mode| {
            let mut p = base();
            p.mounts.push(mount(mode, "--mount"));
            p
        };
        use RefusalKind::*;
        let rows: [(&Policy, [Option<RefusalKind>; 3]); 8] = [
            (&plain, [None, None, None]),
            (&host, [None, None, None]),
            (
                &ro,
                [None, Some(ReadOnlyOnCopyTier), Some(ReadOnlyOnCopyTier)],
            ),
            (
                &allow,
                [
                    None,
                    Some(NetworkAllowOnCopyTier),
                    Some(NetworkAllowOnCopyTier),
                ],
            ),
            (
                &with(MountMode::Read),
                [None, Some(MountOnCopyTier), Some(MountOnCopyTier)],
            ),
            (
                &with(MountMode::Write),
                [None, Some(MountOnCopyTier), Some(MountOnCopyTier)],
            ),
            (
                &with(MountMode::Hide),
                [None, Some(MountOnCopyTier), Some(MountOnCopyTier)],
            ),
            (
                &with(MountMode::Stage),
                [
                    Some(StageMount),
                    Some(MountOnCopyTier),
                    Some(MountOnCopyTier),
                ],
            ),
        ];
        for (i, (p, want)) in rows.iter().enumerate() {
            let got = [SEALED, SCOPED, NONE].map(|t| kind(p, t));
            assert_eq!(&got, want, "row {i}");
        }
    }

    #[test]
    fn the_floor_shortfall_comes_first_and_keeps_its_reason() {
        let mut p = base();
        p.read_only.push("/x".to_owned());
        let r = check_run(&p, &decision(SCOPED, Some("the declared floor is sealed"))).unwrap_err();
        assert_eq!(r.kind, RefusalKind::FloorShortfall);
        assert_eq!(r.to_string(), "the declared floor is sealed");
    }

    #[test]
    fn each_refusal_names_its_cause_and_a_fix() {
        let mut p = base();
        p.mounts.push(mount(MountMode::Read, "profile:claude"));
        let r = check_run(&p, &decision(SCOPED, None)).unwrap_err();
        assert!(
            r.cause
                .contains("/src:/lend (profile:claude) lends a host path")
        );
        assert!(r.cause.contains("landlock+seccomp"), "{}", r.cause);
        assert!(r.fix.contains("--no-agent-defaults"));
        assert_eq!(r.to_string(), format!("{}; {}", r.cause, r.fix));

        let mut s = base();
        s.mounts.push(mount(MountMode::Stage, "--mount"));
        let r = check_run(&s, &decision(SEALED, None)).unwrap_err();
        assert_eq!(
            r.to_string(),
            "/src:/lend (--mount) asks for mode `stage`, which this build does not support \
             yet; use `read`, `write` or `hide`"
        );
    }
}
