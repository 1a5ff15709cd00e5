//! `cofferdam bundle verify FILE` and `cofferdam bundle schema`.

use crate::exit::{Failure, INVALID, OK};
use cofferdam_record::{read_bundle, run_bundle_schema_json};
use serde_json::json;
use std::path::Path;

/// Check `file` with the strict reader: exit 0 valid, 1 invalid (naming the field), 2 when
/// the file cannot be read.
pub fn verify(file: &Path, json: bool) -> Result<u8, Failure> {
    let bytes = std::fs::read(file)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", file.display())))?;
    let result = read_bundle(&bytes);
    if json {
        let v = match &result {
            Ok(b) => json!({
                "file": file, "valid": true, "schema_version": b.schema_version,
                "run_id": b.run.run_id,
            }),
            Err(e) => json!({
                "file": file, "valid": false, "path": e.path(), "error": e.to_string(),
            }),
        };
        crate::print_json(&v)?;
    }
    match result {
        Ok(b) => {
            if !json {
                let line = format!(
                    "{}: valid Run Bundle (schema {}, run {})\n",
                    file.display(),
                    b.schema_version,
                    b.run.run_id
                );
                crate::write_stdout(line.as_bytes())?;
            }
            Ok(OK)
        }
        Err(e) => {
            if !json {
                eprintln!("cofferdam: {}: invalid Run Bundle: {e}", file.display());
            }
            Ok(INVALID)
        }
    }
}

/// Print the JSON Schema of the Run Bundle.
pub fn schema() -> Result<u8, Failure> {
    crate::write_stdout(run_bundle_schema_json().as_bytes())?;
    Ok(OK)
}
