#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The committed JSON Schema (`docs/schema/run-bundle.v4.json`) must match the types.
//! Regenerate it with `COFFERDAM_BLESS=1 cargo test -p cofferdam-record --test schema_drift`.

use std::path::PathBuf;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema/run-bundle.v4.json")
}

#[test]
fn committed_schema_matches_the_types() {
    let generated = cofferdam_record::run_bundle_schema_json();
    let path = committed_path();
    if std::env::var_os("COFFERDAM_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        eprintln!("COFFERDAM_BLESS=1: rewrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date with the Run Bundle types (or missing).\n\
         Regenerate it with: COFFERDAM_BLESS=1 cargo test -p cofferdam-record --test schema_drift\n\
         and commit the result.",
        path.display()
    );
}
