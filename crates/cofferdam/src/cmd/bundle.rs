//! `cofferdam bundle verify FILE` and `cofferdam bundle schema`.

use crate::exit::{Failure, INVALID, OK};
use cofferdam_record::{read_bundle, run_bundle_schema_json};
use serde_json::json;
use std::path::Path;

/// Check a bundle with the strict reader: exit 0 valid, 1 invalid (naming the field), 2 when
/// the file cannot be read. `arg` is the file, or a job (`last`, an id, a job directory)
/// whose bundle is checked.
pub fn verify(arg: &Path, json: bool) -> Result<u8, Failure> {
    let file = &if arg.is_file() {
        arg.to_path_buf()
    } else {
        let env = crate::context::env()?;
        let store = cofferdam_stage::job::JobStore::open(&env.storage_root).ok();
        crate::cmd::jobref::bundle_file(arg, store.as_ref(), &env.places.cwd)?
    };
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
