#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The committed JSON Schema (`docs/schema/run-bundle.v4.json`) and the strict reader agree
//! on the corpus: both accept every good bundle, both reject every bundle that breaks a rule
//! the schema can express (shape: types, required fields, vocabularies, constants, integer
//! widths), and for the rules only the reader checks (across fields) the schema accepts the
//! file, so the list of reader-only rules in `docs/run-bundle.md` stays true.

mod corpus;
use cofferdam_record::read_bundle;
use corpus::{FORGED, GOOD, Rule, fixture};
use serde_json::Value;
use std::path::PathBuf;

fn committed_schema() -> jsonschema::Validator {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema/run-bundle.v4.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn doc(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

#[test]
fn schema_and_reader_accept_every_good_bundle() {
    let schema = committed_schema();
    for name in GOOD {
        let d = doc(name);
        let errors: Vec<String> = schema.iter_errors(&d).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "the schema rejects {name}: {errors:?}");
        read_bundle(&fixture(name)).unwrap_or_else(|e| panic!("the reader rejects {name}: {e}"));
    }
}

#[test]
fn schema_and_reader_agree_on_every_bad_bundle() {
    let schema = committed_schema();
    for (name, _, _, rule) in FORGED {
        assert!(
            read_bundle(&fixture(name)).is_err(),
            "the reader accepts {name}"
        );
        let schema_rejects = !schema.is_valid(&doc(name));
        match rule {
            Rule::Shape => assert!(schema_rejects, "the schema accepts {name}"),
            Rule::ReaderOnly => assert!(
                !schema_rejects,
                "the schema rejects {name}: move it to Rule::Shape and the docs' list"
            ),
        }
    }
}

#[test]
fn the_schema_pins_the_version_the_contract_and_the_widths() {
    let schema = committed_schema();
    let mut d = doc("minimal.json");
    assert!(schema.is_valid(&d));
    d["schema_version"] = 5.into();
    assert!(!schema.is_valid(&d));
    let mut d = doc("minimal.json");
    d["executor_observations"]["contract"] = "anything".into();
    assert!(!schema.is_valid(&d));
    let mut d = doc("minimal.json");
    d["run"]["exit_code"] = 2_147_483_648_u64.into();
    assert!(!schema.is_valid(&d));
    assert!(read_bundle(serde_json::to_string(&d).unwrap().as_bytes()).is_err());
    let mut d = doc("minimal.json");
    d["executor_observations"]["tier"] = "sealed".into();
    assert!(!schema.is_valid(&d));
}
