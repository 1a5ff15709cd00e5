//! The strict Run Bundle reader and the canonical writer.
//!
//! Owns `read_bundle` (bytes → `RunBundle`, accepting exactly schema 4 and the current
//! observation contract, naming the JSON path of every problem), `check_bundle` (the
//! semantic checks both directions share) and `write_bundle_json` (pretty JSON in field
//! order with a trailing newline). It takes and returns bytes and strings only: opening
//! files, choosing modes (0600) and writing atomically belong to the caller.
//!
//! Order of checks: JSON syntax; top-level object; `schema_version` (before anything else,
//! so a bundle from another version is reported as such, not as a list of field errors);
//! `executor_observations` and its `contract`; the shape against the generated JSON Schema
//! (structs are objects, closed vocabularies and enum map keys, with full paths); then every
//! typed field, reporting the full path (`run.run_id`) of the first problem; last the
//! semantic checks of [`check_bundle`]: the rows against the tier's table, the summary and
//! the safety booleans against what the rows derive, and internal consistency. Unknown extra
//! fields are ignored. `docs/run-bundle.md` ("What the reader checks") lists every rule.

mod consistency;
mod shape;

use crate::bundle::{OBSERVATION_CONTRACT, RunBundle, SCHEMA_VERSION};
use serde_json::Value;

/// Why a bundle was rejected, or could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The bytes are not JSON.
    #[error("not valid JSON: {message}")]
    Syntax {
        /// The parser's message, with line and column.
        message: String,
    },
    /// The document is JSON but not an object.
    #[error("a run bundle is a JSON object, found {found}")]
    NotAnObject {
        /// The JSON type found instead.
        found: &'static str,
    },
    /// A required field is absent.
    #[error("missing required field `{path}`")]
    MissingField {
        /// Its JSON path, e.g. `run.run_id`.
        path: String,
    },
    /// `schema_version` is not 4.
    #[error("unsupported schema_version {found}: this reader accepts exactly 4")]
    UnsupportedVersion {
        /// The value found, as JSON text.
        found: String,
    },
    /// `executor_observations.contract` is not the contract this reader knows.
    #[error(
        "unsupported executor_observations.contract {found}: this reader accepts \"{OBSERVATION_CONTRACT}\""
    )]
    UnsupportedContract {
        /// The value found, as JSON text.
        found: String,
    },
    /// A field is present but has the wrong type or an unknown value.
    #[error("invalid `{path}`: {message}")]
    Invalid {
        /// Its JSON path (`.` for the document itself).
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A field claims more than the evidence in the same bundle supports.
    #[error("inconsistent `{path}`: {message}")]
    Inconsistent {
        /// The JSON path of the claim.
        path: String,
        /// The claim and the evidence.
        message: String,
    },
    /// A float is NaN or infinite, which JSON cannot carry.
    #[error("`{path}` is not a finite number: JSON cannot carry NaN or infinity")]
    NonFinite {
        /// The JSON path of the number.
        path: String,
    },
    /// Serialization failed (not expected for these types).
    #[error("could not serialize the bundle: {message}")]
    Serialize {
        /// The serializer's message.
        message: String,
    },
}

impl BundleError {
    /// The JSON path the error is about, when it is about one field.
    pub fn path(&self) -> Option<&str> {
        match self {
            Self::MissingField { path }
            | Self::Invalid { path, .. }
            | Self::Inconsistent { path, .. }
            | Self::NonFinite { path } => Some(path),
            Self::UnsupportedVersion { .. } => Some("schema_version"),
            Self::UnsupportedContract { .. } => Some("executor_observations.contract"),
            Self::Syntax { .. } | Self::NotAnObject { .. } | Self::Serialize { .. } => None,
        }
    }
}

/// Reads a `run-bundle.json`: exactly schema 4, the current observation contract, every
/// required field, and no claim beyond the observations. Unknown extra fields are ignored.
pub fn read_bundle(bytes: &[u8]) -> Result<RunBundle, BundleError> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| BundleError::Syntax {
        message: e.to_string(),
    })?;
    let Value::Object(top) = &doc else {
        return Err(BundleError::NotAnObject {
            found: json_type(&doc),
        });
    };
    match top.get("schema_version") {
        None => return Err(missing("schema_version")),
        Some(v) if v.as_u64() == Some(u64::from(SCHEMA_VERSION)) => {}
        Some(v) => {
            return Err(BundleError::UnsupportedVersion {
                found: v.to_string(),
            });
        }
    }
    let observations = match top.get("executor_observations") {
        None => return Err(missing("executor_observations")),
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(BundleError::Invalid {
                path: "executor_observations".into(),
                message: format!(
                    "expected an object holding the executor's observations, found {}",
                    json_type(other)
                ),
            });
        }
    };
    match observations.get("contract") {
        None => return Err(missing("executor_observations.contract")),
        Some(Value::String(c)) if c == OBSERVATION_CONTRACT => {}
        Some(other) => {
            return Err(BundleError::UnsupportedContract {
                found: other.to_string(),
            });
        }
    }

    let schema = crate::schema::run_bundle_schema();
    shape::check_shape(schema, &doc)?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut bundle: RunBundle = serde_path_to_error::deserialize(&mut de).map_err(typed_error)?;
    // A defaulted safety boolean that is absent states nothing: it takes the value the rows
    // derive, so the bundle read is one the writer writes back unchanged.
    let unstated = |key: &str| top.get("safety").is_some_and(|s| s.get(key).is_none());
    let read_unstated = unstated("filesystem_read_non_bypassable");
    let write_unstated = unstated("filesystem_write_non_bypassable");
    if read_unstated || write_unstated {
        let derived = bundle.derived_safety();
        if read_unstated {
            bundle.safety.filesystem_read_non_bypassable = derived.filesystem_read_non_bypassable;
        }
        if write_unstated {
            bundle.safety.filesystem_write_non_bypassable = derived.filesystem_write_non_bypassable;
        }
    }
    check_bundle(&bundle)?;
    Ok(bundle)
}

/// The checks a bundle must pass beyond its shape, shared by the reader and the writer:
/// schema 4 and the current contract; the rows against the tier's table (see
/// [`crate::bundle::tier_controls`]); the summary and every safety boolean equal to what the
/// writer's own functions derive from the rows; and internal consistency (run state and
/// failure, times, executor and tier, plan, change count, details against status). The
/// first problem is returned, named by the JSON path of the claim.
pub fn check_bundle(bundle: &RunBundle) -> Result<(), BundleError> {
    if bundle.schema_version != SCHEMA_VERSION {
        return Err(BundleError::UnsupportedVersion {
            found: bundle.schema_version.to_string(),
        });
    }
    let observations = &bundle.executor_observations;
    if observations.contract != OBSERVATION_CONTRACT {
        return Err(BundleError::UnsupportedContract {
            found: Value::String(observations.contract.clone()).to_string(),
        });
    }
    consistency::check_internal(bundle)?;
    consistency::check_rows(bundle)?;
    consistency::check_derived(bundle)?;
    consistency::check_complete(bundle)
}

/// Whether one `run_observation` dimension (`filesystem` or `network`) holds what the
/// reader asks of it, so a writer can leave out (with a warning) a dimension that would
/// make its whole bundle unreadable.
pub fn check_observation(
    name: &str,
    d: &crate::bundle::AccessObservation,
) -> Result<(), BundleError> {
    consistency::check_dimension(name, d)
}

/// The canonical `run-bundle.json` text: [`check_bundle`] passed, pretty-printed with two
/// spaces, fields in declaration (spec) order, ending in a newline. Whatever this returns,
/// [`read_bundle`] accepts.
pub fn write_bundle_json(bundle: &RunBundle) -> Result<String, BundleError> {
    check_bundle(bundle)?;
    check_finite(bundle)?;
    let mut text = serde_json::to_string_pretty(bundle).map_err(|e| BundleError::Serialize {
        message: e.to_string(),
    })?;
    text.push('\n');
    Ok(text)
}

fn check_finite(bundle: &RunBundle) -> Result<(), BundleError> {
    let metrics = bundle
        .run
        .metrics
        .iter()
        .map(|(k, v)| (format!("run.metrics.{k}"), Some(*v)));
    let cpus = [
        ("resources.requested.cpus", bundle.resources.requested.cpus),
        ("resources.effective.cpus", bundle.resources.effective.cpus),
    ]
    .map(|(p, v)| (p.to_owned(), v));
    for (path, value) in metrics.chain(cpus) {
        if value.is_some_and(|v| !v.is_finite()) {
            return Err(BundleError::NonFinite { path });
        }
    }
    Ok(())
}

fn missing(path: &str) -> BundleError {
    BundleError::MissingField {
        path: path.to_owned(),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Turns a typed-pass error into a `BundleError` naming the full path. serde reports a
/// missing (or duplicate) field at its parent's path, so the field name is appended.
fn typed_error(err: serde_path_to_error::Error<serde_json::Error>) -> BundleError {
    let parent = err.path().to_string();
    let inner = err.inner();
    let full = inner.to_string();
    let location = format!(" at line {} column {}", inner.line(), inner.column());
    let bare = full.strip_suffix(&location).unwrap_or(&full);
    let join = |field: &str| {
        if parent == "." {
            field.to_owned()
        } else {
            format!("{parent}.{field}")
        }
    };
    if let Some(field) = quoted_after(bare, "missing field `") {
        return BundleError::MissingField { path: join(field) };
    }
    if let Some(field) = quoted_after(bare, "duplicate field `") {
        return BundleError::Invalid {
            path: join(field),
            message: format!("the field appears more than once{location}"),
        };
    }
    BundleError::Invalid {
        path: parent,
        message: full,
    }
}

/// The text between `prefix` and the next backtick, when `message` starts with `prefix`.
fn quoted_after<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split_once('`').map(|(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_paths_are_reported() {
        let e = BundleError::UnsupportedVersion { found: "3".into() };
        assert_eq!(e.path(), Some("schema_version"));
        assert_eq!(
            e.to_string(),
            "unsupported schema_version 3: this reader accepts exactly 4"
        );
        assert_eq!(
            BundleError::Syntax {
                message: "x".into()
            }
            .path(),
            None
        );
    }

    #[test]
    fn non_objects_and_garbage_are_named() {
        assert!(matches!(
            read_bundle(b"[1, 2]"),
            Err(BundleError::NotAnObject { found: "an array" })
        ));
        assert!(matches!(
            read_bundle(b"{\"schema_version\": 4,"),
            Err(BundleError::Syntax { .. })
        ));
        let e = read_bundle(b"{}").unwrap_err();
        assert_eq!(e.to_string(), "missing required field `schema_version`");
    }

    #[test]
    fn versions_are_checked_before_anything_else() {
        let e = read_bundle(br#"{"schema_version": "4"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported schema_version \"4\": this reader accepts exactly 4"
        );
        let e = read_bundle(br#"{"schema_version": 4, "executor_observations": []}"#).unwrap_err();
        assert_eq!(e.path(), Some("executor_observations"));
        assert!(e.to_string().contains("found an array"), "{e}");
        let e = read_bundle(
            br#"{"schema_version": 4, "executor_observations": {"contract": "other.v9"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.path(), Some("executor_observations.contract"));
        assert!(e.to_string().contains("\"other.v9\""), "{e}");
    }

    #[test]
    fn quoted_names_are_extracted() {
        assert_eq!(
            quoted_after("missing field `run_id`", "missing field `"),
            Some("run_id")
        );
        assert_eq!(quoted_after("invalid type", "missing field `"), None);
    }
}
