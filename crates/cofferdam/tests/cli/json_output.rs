//! `--json` (issue 20): every command's output and every error is one JSON document on
//! stdout, the exit code unchanged; `run --json` relays the command's stdout to stderr.

use crate::common::*;
use serde_json::Value;

/// stdout as exactly one JSON document (trailing whitespace allowed).
fn one_document(out: &std::process::Output, what: &str) -> Value {
    let mut docs = serde_json::Deserializer::from_slice(&out.stdout).into_iter::<Value>();
    let first = docs.next().unwrap_or_else(|| {
        panic!(
            "{what}: no JSON on stdout; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let first = first.unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert!(docs.next().is_none(), "{what}: more than one document");
    first
}

fn error_of(v: &Value, what: &str) -> (String, i64) {
    let e = &v["error"];
    let code = e["code"].as_str().unwrap_or_else(|| panic!("{what}: {v}"));
    assert!(
        !e["message"].as_str().unwrap_or("").is_empty(),
        "{what}: {v}"
    );
    assert!(!e["hint"].as_str().unwrap_or("").is_empty(), "{what}: {v}");
    (code.to_owned(), e["exit_code"].as_i64().unwrap())
}

#[test]
fn every_subcommand_error_is_one_json_document() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["run", "-q", "--", "sh", "-c", "echo a > a"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let bad_facts = s.write("facts.json", "{");
    let bad_facts = bad_facts.to_str().unwrap();
    let cases: &[(&[&str], &str, i32)] = &[
        (&["run", "--no-such-flag"], "usage", 2),
        (&["run"], "usage", 2),
        (&["run", "--memory", "4", "--", "true"], "usage", 2),
        (
            &["run", "--workdir", "facts.json", "--", "true"],
            "usage",
            2,
        ),
        (&["status", "nope"], "not_found", 4),
        (&["jobs", "extra"], "usage", 2),
        (&["jobs", "--state", "done"], "usage", 2),
        (&["logs", "nope"], "not_found", 4),
        (&["gc", "--older-than", "soon"], "usage", 2),
        (&["logs", "last"], "usage", 2),
        (&["diff", "nope"], "not_found", 4),
        (&["apply", "nope"], "not_found", 4),
        (&["drop", "nope"], "not_found", 4),
        (&["kill", "nope"], "not_found", 4),
        (&["kill", "last"], "not_running", 1),
        (&["demo", "extra"], "usage", 2),
        (&["scope", "--workdir", "/no/such/dir"], "usage", 2),
        (&["doctor", "--host-facts", bad_facts], "usage", 2),
        (&["bundle", "verify", "/no/such/file"], "usage", 2),
        (&["bundle", "nope"], "usage", 2),
        (&["completions", "nosh"], "usage", 2),
        (&["man", "extra"], "usage", 2),
        (&["no-such-command"], "usage", 2),
    ];
    for &(args, code, exit) in cases {
        for json_first in [true, false] {
            let mut c = s.cmd();
            if json_first {
                c.arg("--json").args(args);
            } else {
                let (sub, rest) = args.split_at(1);
                c.args(sub).arg("--json").args(rest);
            }
            let out = c.output().unwrap();
            let what = format!("{args:?} (--json first: {json_first})");
            assert_eq!(out.status.code(), Some(exit), "{what}");
            let v = one_document(&out, &what);
            assert_eq!(error_of(&v, &what), (code.to_owned(), i64::from(exit)));
            // The text stays on stderr for a person.
            assert!(!out.stderr.is_empty(), "{what}");
        }
    }
}

#[test]
fn run_json_keeps_the_commands_stdout_out_of_it() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["--json", "run", "--", "sh", "-c"])
        .arg("echo '{\"not\": \"the summary\"}'; echo to-err >&2; echo a > a; exit 3")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v = one_document(&out, "run --json");
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(v["changes"], 1, "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("{\"not\": \"the summary\"}"), "{err}");
    assert!(err.contains("to-err"), "{err}");
    // The other commands' success output too.
    for args in [
        &["jobs"][..],
        &["status"],
        &["status", "--review"],
        &["diff"],
        &["apply", "last", "--dry-run"],
        &["scope"],
        &["bundle", "schema"],
    ] {
        let out = s.cmd().arg("--json").args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        one_document(&out, &format!("{args:?}"));
    }
    let bundle = v["bundle"].as_str().unwrap();
    let out = s
        .cmd()
        .args(["--json", "bundle", "verify", bundle])
        .output()
        .unwrap();
    assert_eq!(one_document(&out, "verify")["valid"], true);
}

#[test]
fn demo_json_is_one_document() {
    let s = Sandbox::new();
    let scratch = tempfile::tempdir().unwrap();
    let out = s
        .cmd()
        .env("TMPDIR", scratch.path())
        .args(["--json", "demo"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = one_document(&out, "demo");
    assert_eq!(v["project_untouched"], true, "{v}");
    assert!(v["run"]["job"].as_str().unwrap().starts_with("run-"), "{v}");
    assert!(v["review"]["run"].is_object(), "{v}");
    assert!(v["diff"]["changes"].is_array(), "{v}");
    assert!(v["next"].as_array().is_some_and(|n| n.len() == 3), "{v}");
    // The agent's own output went to stderr.
    assert!(String::from_utf8_lossy(&out.stderr).contains("agent: editing README.md"));
}
