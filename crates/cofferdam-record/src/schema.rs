//! The JSON Schema of the Run Bundle, generated from the Rust types.
//!
//! Owns `run_bundle_schema_json`, the text `cofferdam bundle schema` prints and that is
//! committed as `docs/schema/run-bundle.v4.json` (a test fails when the two drift). It may
//! not write the file: the test does that only when asked (`COFFERDAM_BLESS=1`).

use crate::bundle::RunBundle;

/// The JSON Schema (draft 2020-12) of `run-bundle.json`, pretty-printed, ending in a newline.
pub fn run_bundle_schema_json() -> String {
    let schema = schemars::schema_for!(RunBundle);
    format!("{:#}\n", schema.as_value())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_names_the_required_fields() {
        let schema: serde_json::Value = serde_json::from_str(&run_bundle_schema_json()).unwrap();
        let required = schema["required"].as_array().unwrap();
        for field in ["schema_version", "run", "executor_observations", "agentctl"] {
            assert!(required.iter().any(|r| r == field), "{field} not required");
        }
        assert!(!required.iter().any(|r| r == "environment"));
    }
}
