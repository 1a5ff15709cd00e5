#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Forged and good bundles against the strict reader: every real bundle the binary writes is
//! accepted, and every forgery of issue 17 is rejected at the JSON path of the false claim.
//! `tests/fixtures/good_*.json` are bundles written by `cofferdam run -- true` on each tier;
//! the `forged_*.json` are edits of them (what each edit is: `corpus::FORGED`).

use cofferdam_record::EnforcementTier;
use cofferdam_record::bundle::{ControlDimension, ControlStatus};
use cofferdam_record::{BundleError, read_bundle, write_bundle_json};

mod corpus;
use corpus::{FORGED, GOOD, fixture};

#[test]
fn every_good_bundle_is_accepted_and_round_trips() {
    for name in GOOD {
        let bundle = read_bundle(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = write_bundle_json(&bundle).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(read_bundle(text.as_bytes()).unwrap(), bundle, "{name}");
    }
}

#[test]
fn every_forged_bundle_is_rejected_at_the_path_of_its_claim() {
    for (name, path, word, _) in FORGED {
        let e = match read_bundle(&fixture(name)) {
            Ok(_) => panic!("{name} was accepted"),
            Err(e) => e,
        };
        assert_eq!(e.path(), Some(path), "{name}: {e}");
        assert!(e.to_string().contains(word), "{name}: {e}");
    }
}

#[test]
fn the_real_bundles_are_what_each_tier_installs() {
    let tier = |name: &str| read_bundle(&fixture(name)).unwrap().executor_observations;
    let sealed = tier("good_sealed.json");
    assert_eq!(
        sealed.tier,
        EnforcementTier::MountnsPivotRootLandlockSeccomp
    );
    assert!(ControlDimension::ALL.iter().all(|&d| sealed.is_enforced(d)));
    let scoped = tier("good_scoped.json");
    assert_eq!(
        scoped.status_of(ControlDimension::Process),
        Some(ControlStatus::Partial)
    );
    let advisory = tier("good_advisory.json");
    assert!(!advisory.is_enforced(ControlDimension::FilesystemWrite));
}

#[test]
fn a_forged_bundle_is_not_written_either() {
    // The writer runs the same checks: a bundle whose rows were deleted after the summary
    // was derived is refused at write time too (the summary still matches, as every dimension
    // that lost a row was already partial; the missing rows do not).
    let mut bundle = read_bundle(&fixture("good_scoped.json")).unwrap();
    bundle
        .executor_observations
        .controls
        .retain(|c| c.status == ControlStatus::Enforced);
    let e: BundleError = write_bundle_json(&bundle).unwrap_err();
    assert_eq!(e.path(), Some("executor_observations.controls"), "{e}");
}

#[test]
fn a_completed_run_with_a_partial_strict_control_is_rejected() {
    // The init refuses a `partial` reading of a strict row (seccomp here); a completed bundle
    // carrying one, with its summary and safety re-derived so only the row itself is false,
    // is refused at that row.
    let mut bundle = read_bundle(&fixture("good_sealed.json")).unwrap();
    let o = &mut bundle.executor_observations;
    let i = o
        .controls
        .iter()
        .position(|c| c.mechanism == cofferdam_record::bundle::ControlMechanism::Seccomp)
        .expect("the sealed fixture has a seccomp row");
    o.controls[i].status = ControlStatus::Partial;
    o.summary = cofferdam_record::bundle::summarize_for_tier(o.tier, &o.controls);
    bundle.safety = bundle.derived_safety();
    let text = serde_json::to_string(&bundle).unwrap();
    let e = read_bundle(text.as_bytes()).unwrap_err();
    let path = format!("executor_observations.controls[{i}].status");
    assert_eq!(e.path(), Some(path.as_str()), "{e}");
    assert!(e.to_string().contains("partial"), "{e}");
}
