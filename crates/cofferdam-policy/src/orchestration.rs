//! Orchestration metadata: what `run --label KEY=VALUE` and `run --task-id ID` attach to a
//! run, for the tools that start many runs (issue 21).
//!
//! Owns the syntax of label keys, label values and task ids, and the `jobs --label` /
//! `--task-id` filter. The labels become the bundle's `orchestration` map (one string value
//! per key) and the job's `labels`; the task id becomes `run.task_id`. Nothing here is
//! evidence of anything, and it decides nothing about containment. Pure: callers pass the
//! flags' text in.

use crate::flag::FlagError;
use std::collections::BTreeMap;

/// Keys of the bundle's `orchestration` map that cofferdam writes itself (an agent
/// profile's argument patch, `crate::outcome`): a label may not take them, so a label can
/// never pass for cofferdam's record.
pub const RESERVED: [&str; 1] = ["argument_patches"];

/// The longest label key.
pub const KEY_MAX: usize = 128;
/// The longest label value or task id, in bytes.
pub const VALUE_MAX: usize = 1024;

/// A run's labels and task id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Orchestration {
    /// `--label KEY=VALUE`, by key.
    pub labels: BTreeMap<String, String>,
    /// `--task-id ID`.
    pub task_id: Option<String>,
    /// For a fork: the parent run and checkpoint (the bundle's `lineage`).
    pub lineage: Option<cofferdam_record::bundle::RunLineage>,
}

/// Parse `--label` and `--task-id` values. A key is 1 to [`KEY_MAX`] ASCII letters, digits,
/// `.`, `_`, `-` or `/`, starting and ending with a letter or digit; a value is at most
/// [`VALUE_MAX`] bytes of text without control characters (empty is allowed); a task id
/// the same, but not empty. A key given twice is refused.
pub fn parse(labels: &[String], task_id: Option<&str>) -> Result<Orchestration, FlagError> {
    let mut out = Orchestration::default();
    for text in labels {
        let (key, value) = parse_label(text)?;
        if out.labels.contains_key(&key) {
            return Err(label_error(
                text,
                format!("the key `{key}` is given twice; give each key once"),
            ));
        }
        out.labels.insert(key, value);
    }
    if let Some(id) = task_id {
        if id.is_empty() {
            return Err(FlagError {
                flag: "--task-id",
                value: String::new(),
                message: "give a task id (an orchestrator's name for the task)".into(),
            });
        }
        check_text(id).map_err(|why| FlagError {
            flag: "--task-id",
            value: shown(id),
            message: why,
        })?;
        out.task_id = Some(id.to_owned());
    }
    Ok(out)
}

/// One `KEY=VALUE`.
pub fn parse_label(text: &str) -> Result<(String, String), FlagError> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(label_error(
            text,
            "give KEY=VALUE, e.g. --label team=infra".into(),
        ));
    };
    check_key(key).map_err(|why| label_error(text, why))?;
    check_text(value).map_err(|why| label_error(text, format!("the value {why}")))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// Whether a job with `labels` and `task_id` passes the `jobs` filters (every `--label`
/// given must be there with that value; `--task-id` must be equal).
pub fn matches(
    labels: &BTreeMap<String, String>,
    task_id: Option<&str>,
    want_labels: &[(String, String)],
    want_task: Option<&str>,
) -> bool {
    want_labels
        .iter()
        .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
        && want_task.is_none_or(|t| task_id == Some(t))
}

fn label_error(text: &str, message: String) -> FlagError {
    FlagError {
        flag: "--label",
        value: shown(text),
        message,
    }
}

fn shown(text: &str) -> String {
    cofferdam_record::shown::escape(text)
}

fn check_key(key: &str) -> Result<(), String> {
    let rule = format!(
        "use 1 to {KEY_MAX} letters, digits, `.`, `_`, `-` or `/`, starting and ending with a \
         letter or digit, e.g. `team` or `ci/pipeline`"
    );
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if RESERVED.contains(&key) {
        return Err(format!(
            "the key `{key}` is cofferdam's own record in the bundle's orchestration; \
             pick another key"
        ));
    }
    if key.is_empty() || key.len() > KEY_MAX {
        return Err(format!("the key has the wrong length; {rule}"));
    }
    if !edge_ok(key.chars().next()) || !edge_ok(key.chars().last()) {
        return Err(format!(
            "the key must start and end with a letter or digit; {rule}"
        ));
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
    {
        return Err(format!(
            "the key holds a character that is not allowed; {rule}"
        ));
    }
    Ok(())
}

fn check_text(text: &str) -> Result<(), String> {
    if text.len() > VALUE_MAX {
        return Err(format!("is longer than {VALUE_MAX} bytes"));
    }
    if text
        .chars()
        .any(|c| c.is_control() || cofferdam_record::shown::is_bidi_control(c))
    {
        return Err("holds a control character (newline, tab, escape, a bidi override…)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn labels_and_task_ids_parse() {
        let o = parse(&s(&["team=infra", "ci/pipe-1=a=b", "empty="]), Some("T-42")).unwrap();
        assert_eq!(o.labels["team"], "infra");
        assert_eq!(o.labels["ci/pipe-1"], "a=b");
        assert_eq!(o.labels["empty"], "");
        assert_eq!(o.task_id.as_deref(), Some("T-42"));
        assert_eq!(parse(&[], None).unwrap(), Orchestration::default());
    }

    #[test]
    fn a_label_cannot_take_a_key_cofferdam_writes_itself() {
        for key in RESERVED {
            let e = parse(&s(&[&format!("{key}=forged")]), None).unwrap_err();
            assert!(
                e.message.contains("cofferdam's own record"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn bad_input_is_refused_with_the_flag() {
        for bad in [
            "noequals",
            "=v",
            "-k=v",
            "k-=v",
            "k y=v",
            "k=\u{1b}[2J",
            "é=v",
        ] {
            let e = parse(&s(&[bad]), None).unwrap_err();
            assert_eq!(e.flag, "--label", "{bad}");
            assert!(!e.to_string().contains('\u{1b}'), "escaped: {e}");
        }
        let long = format!("{}=v", "k".repeat(KEY_MAX + 1));
        assert!(parse(&s(&[&long]), None).is_err());
        let e = parse(&s(&["a=1", "a=2"]), None).unwrap_err();
        assert!(e.message.contains("twice"), "{e}");
        assert_eq!(parse(&[], Some("")).unwrap_err().flag, "--task-id");
        assert_eq!(parse(&[], Some("a\nb")).unwrap_err().flag, "--task-id");
    }

    #[test]
    fn filters_need_every_label_and_the_task() {
        let o = parse(&s(&["a=1", "b=2"]), Some("t")).unwrap();
        let want = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter().map(|(k, x)| ((*k).into(), (*x).into())).collect()
        };
        let m = |l: &[(&str, &str)], t| matches(&o.labels, o.task_id.as_deref(), &want(l), t);
        assert!(m(&[], None));
        assert!(m(&[("a", "1")], Some("t")));
        assert!(m(&[("a", "1"), ("b", "2")], None));
        assert!(!m(&[("a", "2")], None));
        assert!(!m(&[("c", "1")], None));
        assert!(!m(&[], Some("u")));
    }
}
