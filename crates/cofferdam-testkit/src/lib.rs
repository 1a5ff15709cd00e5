//! Test support shared by every crate's tests (a dev-dependency only, never shipped).
//!
//! Owns the one rule for a test that needs a kernel or host feature the machine lacks: it
//! prints `SKIP-HOST <why>` and passes, except under `COFFERDAM_TEST_REQUIRE=sealed` (set by
//! CI, whose hosts have every feature) where the absence is a failure. It may not probe the
//! host itself: each test decides what it needs and says why.

/// The variable that turns host-feature skips into failures.
pub const REQUIRE_VAR: &str = "COFFERDAM_TEST_REQUIRE";

/// Whether this run requires every host feature (`COFFERDAM_TEST_REQUIRE=sealed`).
pub fn require_sealed() -> bool {
    std::env::var(REQUIRE_VAR).is_ok_and(|v| v == "sealed")
}

/// Report a missing host feature: print `SKIP-HOST <why>` (the caller then returns), or
/// panic when [`require_sealed`] says the feature must be there.
pub fn skip_host(why: &str) {
    assert!(
        !require_sealed(),
        "{REQUIRE_VAR}=sealed but this host lacks what the test needs: {why}"
    );
    println!("SKIP-HOST {why}");
}

/// `present`, or else [`skip_host`] for `feature` and `false`.
pub fn require(feature: &str, present: bool) -> bool {
    if !present {
        skip_host(&format!("{feature} is not available on this host"));
    }
    present
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test owns the variable (tests of this crate run in threads of one process).
    #[test]
    fn skips_pass_unless_the_host_must_have_the_feature() {
        // SAFETY: no other test of this crate reads or writes the environment.
        unsafe { std::env::remove_var(REQUIRE_VAR) };
        assert!(!require_sealed());
        assert!(require("a feature", true));
        assert!(!require("a feature", false));
        // SAFETY: as above.
        unsafe { std::env::set_var(REQUIRE_VAR, "other") };
        assert!(!require_sealed());
        // SAFETY: as above.
        unsafe { std::env::set_var(REQUIRE_VAR, "sealed") };
        assert!(require_sealed());
        assert!(require("a feature", true));
        let failed = std::panic::catch_unwind(|| skip_host("no such feature"));
        // SAFETY: as above.
        unsafe { std::env::remove_var(REQUIRE_VAR) };
        assert!(
            failed.is_err(),
            "a required feature's absence must fail the test"
        );
    }
}
