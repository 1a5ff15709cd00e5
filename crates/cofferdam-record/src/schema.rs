//! The JSON Schema of the Run Bundle, generated from the Rust types.
//!
//! Owns `run_bundle_schema_json`, the text `cofferdam bundle schema` prints and that is
//! committed as `docs/schema/run-bundle.v4.json` (a test fails when the two drift). It may
//! not write the file: the test does that only when asked (`COFFERDAM_BLESS=1`).

use crate::bundle::RunBundle;

/// The JSON Schema (draft 2020-12) of `run-bundle.json`, pretty-printed, ending in a newline.
pub fn run_bundle_schema_json() -> String {
    format!("{:#}\n", run_bundle_schema())
}

/// The JSON Schema of `run-bundle.json` as a value: generated from the types, every integer
/// bounded by its Rust width (`minimum`/`maximum` from `format`).
pub fn run_bundle_schema() -> &'static serde_json::Value {
    static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut schema = schemars::schema_for!(RunBundle).to_value();
        bound_integers(&mut schema);
        schema
    })
}

/// Adds `minimum` and `maximum` to every schema whose `format` names a Rust integer width
/// (`usize` is `uint`, 64 bits on every target cofferdam runs on).
fn bound_integers(node: &mut serde_json::Value) {
    match node {
        serde_json::Value::Object(o) => {
            let bounds: Option<(serde_json::Value, serde_json::Value)> =
                match o.get("format").and_then(serde_json::Value::as_str) {
                    Some("uint8") => Some((0.into(), u8::MAX.into())),
                    Some("uint16") => Some((0.into(), u16::MAX.into())),
                    Some("uint32") => Some((0.into(), u32::MAX.into())),
                    Some("uint64" | "uint") => Some((0.into(), u64::MAX.into())),
                    Some("int8") => Some((i8::MIN.into(), i8::MAX.into())),
                    Some("int16") => Some((i16::MIN.into(), i16::MAX.into())),
                    Some("int32") => Some((i32::MIN.into(), i32::MAX.into())),
                    Some("int64" | "int") => Some((i64::MIN.into(), i64::MAX.into())),
                    _ => None,
                };
            if let Some((min, max)) = bounds {
                o.insert("minimum".into(), min);
                o.insert("maximum".into(), max);
            }
            o.values_mut().for_each(bound_integers);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
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
