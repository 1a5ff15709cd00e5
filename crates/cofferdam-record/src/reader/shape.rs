//! The shape pass of the strict reader: the document against the generated JSON Schema,
//! before the typed pass.
//!
//! Owns `check_shape`. serde reads a struct from a JSON array as readily as from an object,
//! and a map with enum keys loses the key from the path of an error inside it; this pass
//! closes both: every position the schema types as an object must hold an object, and every
//! closed vocabulary (enum values and enum map keys) is checked here, with the full JSON
//! path, map keys included; an object the schema closes (`additionalProperties: false`, only
//! `lineage`) holds nothing but its declared keys. It only reads the schema's `$ref`, `anyOf`/`oneOf`, `enum`,
//! `const`, `type`, `properties`, `additionalProperties`, `propertyNames` and `items`; the
//! rest (required fields, numbers, strings) is the typed pass's.

use super::{BundleError, json_type};
use serde_json::{Map, Value};

/// Checks `doc` against `schema` (the Run Bundle schema as JSON). The first problem is
/// returned, named by its JSON path.
pub(super) fn check_shape(schema: &Value, doc: &Value) -> Result<(), BundleError> {
    let defs = schema.get("$defs").and_then(Value::as_object);
    Walker { defs }.walk(schema, doc, &Path::Root)
}

/// A JSON path under construction, rendered like `serde_path_to_error` does
/// (`run.run_id`, `controls[3]`, `.` for the document).
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        match self {
            Path::Root => ".".to_owned(),
            Path::Key(Path::Root, k) => (*k).to_owned(),
            Path::Key(parent, k) => format!("{}.{k}", parent.render()),
            Path::Index(parent, i) => format!("{}[{i}]", parent.render()),
        }
    }
}

struct Walker<'s> {
    defs: Option<&'s Map<String, Value>>,
}

impl<'s> Walker<'s> {
    /// Follows `$ref`s into `$defs` (only local ones; anything else is left unchecked).
    fn resolve(&self, mut schema: &'s Value) -> &'s Value {
        for _ in 0..16 {
            let Some(target) = schema.get("$ref").and_then(Value::as_str) else {
                return schema;
            };
            let Some(next) = target
                .strip_prefix("#/$defs/")
                .and_then(|name| self.defs?.get(name))
            else {
                return &Value::Bool(true);
            };
            schema = next;
        }
        schema
    }

    fn walk(&self, schema: &'s Value, value: &Value, path: &Path<'_>) -> Result<(), BundleError> {
        let schema = self.resolve(schema);
        let Value::Object(s) = schema else {
            return Ok(());
        };
        if let Some(words) = vocabulary(self, s) {
            return check_word(&words, value, path);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = s.get(key).and_then(Value::as_array) {
                if value.is_null() && branches.iter().any(|b| self.admits_null(b)) {
                    return Ok(());
                }
                let rest: Vec<&Value> = branches.iter().filter(|b| !self.is_null(b)).collect();
                if let [only] = rest.as_slice() {
                    return self.walk(only, value, path);
                }
                return Ok(());
            }
        }
        if types(s).contains(&"object") && !value.is_object() {
            if value.is_null() && types(s).contains(&"null") {
                return Ok(());
            }
            return Err(BundleError::Invalid {
                path: path.render(),
                message: format!("expected a JSON object, found {}", json_type(value)),
            });
        }
        match value {
            Value::Object(members) => self.walk_members(s, members, path),
            Value::Array(items) => match s.get("items") {
                Some(item) => items
                    .iter()
                    .enumerate()
                    .try_for_each(|(i, v)| self.walk(item, v, &Path::Index(path, i))),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn walk_members(
        &self,
        s: &'s Map<String, Value>,
        members: &Map<String, Value>,
        path: &Path<'_>,
    ) -> Result<(), BundleError> {
        let properties = s.get("properties").and_then(Value::as_object);
        let names = s
            .get("propertyNames")
            .map(|n| self.resolve(n))
            .and_then(Value::as_object)
            .and_then(|n| vocabulary(self, n));
        for (key, member) in members {
            let here = Path::Key(path, key);
            if let Some(words) = &names
                && !words.iter().any(|w| w == key)
            {
                return Err(BundleError::Invalid {
                    path: here.render(),
                    message: format!("unknown key `{key}`: expected one of {}", words.join(", ")),
                });
            }
            let declared = properties.and_then(|p| p.get(key));
            if declared.is_none() && s.get("additionalProperties") == Some(&Value::Bool(false)) {
                let known: Vec<&str> = properties
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(BundleError::Invalid {
                    path: here.render(),
                    message: format!(
                        "unknown key `{key}`: this object is closed, expected only {}",
                        known.join(", ")
                    ),
                });
            }
            let member_schema = declared.or_else(|| s.get("additionalProperties"));
            if let Some(member_schema) = member_schema {
                self.walk(member_schema, member, &here)?;
            }
        }
        Ok(())
    }

    fn is_null(&self, schema: &'s Value) -> bool {
        let s = self.resolve(schema);
        s.get("type").and_then(Value::as_str) == Some("null")
    }

    fn admits_null(&self, schema: &'s Value) -> bool {
        let s = self.resolve(schema);
        s.as_object().is_some_and(|o| types(o).contains(&"null"))
    }
}

/// The schema's `type`, as a list.
fn types(s: &Map<String, Value>) -> Vec<&str> {
    match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The words of a closed string vocabulary: an `enum` of strings, a `const` string, or a
/// `oneOf`/`anyOf` whose every branch is one of those.
fn vocabulary(walker: &Walker<'_>, s: &Map<String, Value>) -> Option<Vec<String>> {
    if let Some(Value::String(word)) = s.get("const") {
        return Some(vec![word.clone()]);
    }
    if let Some(words) = s.get("enum").and_then(Value::as_array) {
        return words
            .iter()
            .map(|w| w.as_str().map(str::to_owned))
            .collect();
    }
    let branches = s
        .get("oneOf")
        .or_else(|| s.get("anyOf"))
        .and_then(Value::as_array)?;
    let mut words = Vec::new();
    for branch in branches {
        let b = walker.resolve(branch).as_object()?;
        words.extend(vocabulary(walker, b)?);
    }
    Some(words)
}

fn check_word(words: &[String], value: &Value, path: &Path<'_>) -> Result<(), BundleError> {
    match value {
        Value::String(w) if words.contains(w) => Ok(()),
        Value::String(w) => Err(BundleError::Invalid {
            path: path.render(),
            message: format!("unknown value `{w}`: expected one of {}", words.join(", ")),
        }),
        // Not a string at all: the typed pass names the type.
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "inner": {"$ref": "#/$defs/Inner"},
                "maybe": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]},
                "list": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
                "keyed": {
                    "type": "object",
                    "propertyNames": {"$ref": "#/$defs/Word"},
                    "additionalProperties": {"$ref": "#/$defs/Word"}
                }
            },
            "$defs": {
                "Inner": {"type": "object", "properties": {"w": {"$ref": "#/$defs/Word"}}},
                "Word": {"oneOf": [{"const": "a", "type": "string"}, {"const": "b", "type": "string"}]}
            }
        })
    }

    fn path_of(doc: Value) -> Option<String> {
        check_shape(&schema(), &doc)
            .err()
            .map(|e| e.path().unwrap_or("").to_owned())
    }

    #[test]
    fn structs_must_be_objects() {
        assert_eq!(path_of(json!({"inner": [1]})), Some("inner".into()));
        assert_eq!(path_of(json!({"maybe": []})), Some("maybe".into()));
        assert_eq!(path_of(json!({"maybe": null})), None);
        assert_eq!(path_of(json!({"list": [{}, []]})), Some("list[1]".into()));
        assert_eq!(path_of(json!([])), Some(".".into()));
    }

    #[test]
    fn words_and_map_keys_are_named() {
        assert_eq!(
            path_of(json!({"inner": {"w": "c"}})),
            Some("inner.w".into())
        );
        assert_eq!(path_of(json!({"keyed": {"a": "b"}})), None);
        assert_eq!(
            path_of(json!({"keyed": {"z": "b"}})),
            Some("keyed.z".into())
        );
        assert_eq!(
            path_of(json!({"keyed": {"a": "z"}})),
            Some("keyed.a".into())
        );
        assert_eq!(
            path_of(json!({"list": [{"w": "x"}]})),
            Some("list[0].w".into())
        );
    }
}
