//! The containment vocabulary: classes a run can declare and achieve, and the enforcement
//! tiers that back them (DESIGN.md §2). Wire names are stable: they appear in bundles, trace
//! events and scope reports.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How strongly a run is contained, weakest first. `Ord` follows that order, so
/// `achieved >= declared` is the floor check.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ContainmentClass {
    /// A host process with a projected environment and rlimits: nothing is enforced.
    Advisory,
    /// Landlock + seccomp + no_new_privs on a copy of the workdir, without namespaces.
    Scoped,
    /// Namespaces, a composed root, an overlay stage, Landlock and seccomp.
    Sealed,
}

impl ContainmentClass {
    /// Every class, weakest first.
    pub const ALL: [ContainmentClass; 3] = [Self::Advisory, Self::Scoped, Self::Sealed];

    /// The stable wire name (`advisory`, `scoped`, `sealed`).
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::Advisory => "advisory",
            Self::Scoped => "scoped",
            Self::Sealed => "sealed",
        }
    }
}

impl fmt::Display for ContainmentClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

/// A word that is not a containment class.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown containment class `{0}`: expected one of advisory, scoped, sealed")]
pub struct UnknownClass(pub String);

impl FromStr for ContainmentClass {
    type Err = UnknownClass;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.wire_name() == s)
            .ok_or_else(|| UnknownClass(s.to_owned()))
    }
}

/// The set of kernel mechanisms a run is contained by. Each tier backs exactly one class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum EnforcementTier {
    /// User, mount, pid, net, ipc, uts and cgroup namespaces; composed root; overlay stage;
    /// Landlock; seccomp; capabilities dropped; no_new_privs.
    #[serde(rename = "mountns+pivot_root+landlock+seccomp")]
    MountnsPivotRootLandlockSeccomp,
    /// No user namespaces: Landlock + seccomp + no_new_privs on a copy of the workdir.
    #[serde(rename = "landlock+seccomp")]
    LandlockSeccomp,
    /// Neither: environment projection and rlimits only.
    #[serde(rename = "none")]
    None,
}

impl EnforcementTier {
    /// Every tier, strongest first.
    pub const ALL: [EnforcementTier; 3] = [
        Self::MountnsPivotRootLandlockSeccomp,
        Self::LandlockSeccomp,
        Self::None,
    ];

    /// The stable wire name.
    pub fn wire_name(self) -> &'static str {
        match self {
            Self::MountnsPivotRootLandlockSeccomp => "mountns+pivot_root+landlock+seccomp",
            Self::LandlockSeccomp => "landlock+seccomp",
            Self::None => "none",
        }
    }

    /// The class this tier backs.
    pub fn class(self) -> ContainmentClass {
        match self {
            Self::MountnsPivotRootLandlockSeccomp => ContainmentClass::Sealed,
            Self::LandlockSeccomp => ContainmentClass::Scoped,
            Self::None => ContainmentClass::Advisory,
        }
    }

    /// The tier that backs `class`.
    pub fn for_class(class: ContainmentClass) -> Self {
        match class {
            ContainmentClass::Sealed => Self::MountnsPivotRootLandlockSeccomp,
            ContainmentClass::Scoped => Self::LandlockSeccomp,
            ContainmentClass::Advisory => Self::None,
        }
    }
}

impl fmt::Display for EnforcementTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_order_weakest_first() {
        assert!(ContainmentClass::Advisory < ContainmentClass::Scoped);
        assert!(ContainmentClass::Scoped < ContainmentClass::Sealed);
    }

    #[test]
    fn class_words_round_trip_and_bad_words_are_named() {
        for c in ContainmentClass::ALL {
            assert_eq!(c.wire_name().parse::<ContainmentClass>(), Ok(c));
            assert_eq!(
                serde_json::to_string(&c).unwrap(),
                format!("\"{}\"", c.wire_name())
            );
        }
        let err = "strong".parse::<ContainmentClass>().unwrap_err();
        assert!(err.to_string().contains("`strong`"));
    }

    #[test]
    fn tiers_back_one_class_each() {
        for t in EnforcementTier::ALL {
            assert_eq!(EnforcementTier::for_class(t.class()), t);
            assert_eq!(
                serde_json::to_string(&t).unwrap(),
                format!("\"{}\"", t.wire_name())
            );
        }
    }
}
