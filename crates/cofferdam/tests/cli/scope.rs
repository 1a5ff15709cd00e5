//! `scope`, `run --explain-scope`, `doctor`, `bundle`, manifests and flags.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The fields the scope report always carries (a removal is a breaking change).
const SCOPE_FIELDS: &[&str] = &[
    "declared_containment",
    "achieved_containment",
    "host_containment",
    "floor_met",
    "shortfall_reason",
    "enforcement_tier",
    "routes",
    "userns_grant",
    "landlock_abi",
    "filesystem_scope",
    "workdir_exec",
    "read_only_paths",
    "read_only_advisory_for",
    "hidden_paths",
    "network_mode",
    "network_allow",
    "network_publish",
    "unix_sockets",
    "shell_allow",
    "env_allow",
    "env_projected",
    "env_injected",
    "trust_store",
    "name_resolution",
    "host_paths",
    "state_stores",
    "runtime_writes",
    "manifest_files",
    "grant_sources",
    "resources",
    "io_max",
    "cgroup_scope",
    "filesystem_boundary",
    "runtime_dir",
    "records_dir",
    "temp_dir",
    "process_view",
    "unconfined",
];

fn assert_all_fields(v: &Value) {
    let obj = v.as_object().unwrap();
    for f in SCOPE_FIELDS {
        assert!(obj.contains_key(*f), "scope report lacks `{f}`");
    }
    assert_eq!(
        obj.len(),
        SCOPE_FIELDS.len(),
        "unexpected extra fields: {obj:?}"
    );
}

#[test]
fn scope_on_this_host_reports_sealed_with_the_kernels_landlock_abi() {
    let abi = landlock_abi_independently();
    if !require("Landlock", abi > 0)
        || !require("unprivileged user namespaces", userns_independently())
    {
        return;
    }
    let s = Sandbox::new();
    let out = s.cmd().args(["scope", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v = json_of(&out);
    assert_all_fields(&v);
    assert_eq!(v["achieved_containment"], "sealed");
    assert_eq!(v["declared_containment"], "scoped");
    assert_eq!(v["floor_met"], true);
    assert_eq!(v["shortfall_reason"], Value::Null);
    assert_eq!(v["landlock_abi"], abi.min(7));
    assert_eq!(v["enforcement_tier"], "mountns+pivot_root+landlock+seccomp");
    let workdir = std::fs::canonicalize(s.work.path()).unwrap();
    assert_eq!(v["filesystem_scope"], workdir.to_str().unwrap());
}

#[test]
fn run_explain_scope_is_the_same_report() {
    let s = Sandbox::new();
    let a = json_of(
        &s.cmd()
            .args(["scope", "--json", "--containment", "sealed"])
            .output()
            .unwrap(),
    );
    let b = json_of(
        &s.cmd()
            .args([
                "run",
                "--explain-scope",
                "--json",
                "--containment",
                "sealed",
                "--",
                "true",
            ])
            .output()
            .unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(a["declared_containment"], "sealed");
}

#[test]
fn scope_tier_reports_the_lowered_tier_like_run_tier() {
    if !require("Landlock", landlock_abi_independently() > 0) {
        return;
    }
    let s = Sandbox::new();
    let scope = |args: &[&str]| {
        let out = s.cmd().args(args).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        json_of(&out)
    };
    let v = scope(&["scope", "--json", "--tier", "scoped"]);
    assert_all_fields(&v);
    assert_eq!(v["achieved_containment"], "scoped");
    assert_eq!(v["enforcement_tier"], "landlock+seccomp");
    assert_eq!(v["process_view"]["host_processes_visible"], true);
    let lines = v["filesystem_boundary"]["not_protected"].to_string();
    assert!(lines.contains("no pid, ipc or uts namespace"), "{lines}");
    let explained = scope(&[
        "run",
        "--explain-scope",
        "--json",
        "--tier",
        "scoped",
        "--",
        "true",
    ]);
    assert_eq!(
        v, explained,
        "run --explain-scope --tier is the same report"
    );
    let a = scope(&["scope", "--json", "--tier", "advisory"]);
    assert_eq!(a["achieved_containment"], "advisory");
    assert_eq!(a["enforcement_tier"], "none");
    assert_ne!(a["unconfined"], Value::Null);
    // Only lowers: a cap above the host's tier is the host's report.
    assert_eq!(
        scope(&["scope", "--json", "--tier", "sealed"]),
        scope(&["scope", "--json"])
    );
    let out = s
        .cmd()
        .args(["scope", "--tier", "sideways"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

fn facts_without_userns(s: &Sandbox) -> PathBuf {
    let out = s.cmd().args(["doctor", "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut v = json_of(&out);
    let f = &mut v["facts"];
    f["userns"]["can_create"] = false.into();
    f["userns"]["error"] = "EPERM".into();
    f["userns"]["grant"] = "withheld".into();
    f["userns"]["apparmor_restrict"] = true.into();
    f["overlay_in_userns"] = Value::Null;
    f["netns"] = Value::Null;
    f["pidns"] = Value::Null;
    f["landlock_abi"] = 7.into();
    f["seccomp_filter"] = true.into();
    s.write("facts.json", &serde_json::to_string(&v).unwrap())
}

#[test]
fn sealed_floor_on_a_host_without_userns_is_reported_not_met_with_the_fix() {
    let s = Sandbox::new();
    let facts = facts_without_userns(&s);
    let out = s
        .cmd()
        .args(["scope", "--json", "--containment", "sealed", "--host-facts"])
        .arg(&facts)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "a report exits 0 either way");
    let v = json_of(&out);
    assert_all_fields(&v);
    assert_eq!(v["floor_met"], false);
    assert_eq!(v["achieved_containment"], "scoped");
    assert_eq!(v["enforcement_tier"], "landlock+seccomp");
    assert_eq!(v["userns_grant"], "withheld");
    let reason = v["shortfall_reason"].as_str().unwrap();
    assert!(reason.contains("unprivileged user namespaces"), "{reason}");
    assert!(reason.contains("apparmor"), "{reason}");

    let human = s
        .cmd()
        .args(["scope", "--containment", "sealed", "--host-facts"])
        .arg(&facts)
        .output()
        .unwrap();
    let text = String::from_utf8(human.stdout).unwrap();
    for group in [
        "Containment",
        "Not protected here",
        "Effective grants",
        "Resource plane",
    ] {
        assert!(text.contains(group), "{group} missing:\n{text}");
    }
    assert!(text.contains("FLOOR NOT MET"), "{text}");
}

fn assert_usage_error(out: &std::process::Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
}

#[test]
fn malformed_manifests_give_one_clear_error_with_file_line_and_key() {
    let s = Sandbox::new();
    let cases: &[(&str, &[&str])] = &[
        (
            "[resources]\npids = \"many\"\n",
            &["cofferdam.toml:2:", "resources.pids", "fix:"],
        ),
        (
            "[network]\nmode = \"allow\"\nallwo = []\n",
            &["cofferdam.toml:3:", "network.allwo", "allow"],
        ),
        (
            "containment = \"strong\"\n",
            &["cofferdam.toml:1:", "containment", "sealed"],
        ),
        (
            "\n\n[resources]\nmemory = \"lots\"\n",
            &["cofferdam.toml:4:", "resources.memory", "`lots`"],
        ),
        ("[filesystem\n", &["cofferdam.toml:1:"]),
        ("\u{0}\u{1}binary", &["cofferdam.toml:"]),
    ];
    for (text, needles) in cases {
        s.write("cofferdam.toml", text);
        let out = s.cmd().args(["scope"]).output().unwrap();
        assert_usage_error(&out, needles);
        let out = s
            .cmd()
            .args(["run", "--explain-scope", "--", "true"])
            .output()
            .unwrap();
        assert_usage_error(&out, needles);
    }
    std::fs::remove_file(s.work.path().join("cofferdam.toml")).unwrap();
    let m = s.write("other.toml", "[exec]\nallow = 3\n");
    let out = s
        .cmd()
        .args(["scope", "--manifest"])
        .arg(&m)
        .output()
        .unwrap();
    assert_usage_error(&out, &["other.toml:2:", "exec.allow"]);
    let out = s
        .cmd()
        .args(["scope", "--manifest", "missing.toml"])
        .output()
        .unwrap();
    assert_usage_error(&out, &["missing.toml", "cannot read"]);
}

#[test]
fn manifest_in_the_workdir_is_used_and_flags_override_it() {
    let s = Sandbox::new();
    s.write(
        "cofferdam.toml",
        "containment = \"sealed\"\n[filesystem]\nread_only = [\".git\"]\n[resources]\nmemory = \"1GiB\"\n[network]\nallow = [\"api.example.com\"]\n",
    );
    // Its network allowlist widens the default `none`: the user trusts it first.
    let t = s.cmd().args(["trust"]).output().unwrap();
    assert!(t.status.success(), "{t:?}");
    let v = json_of(
        &s.cmd()
            .args([
                "scope",
                "--json",
                "--memory",
                "2GiB",
                "--containment",
                "advisory",
            ])
            .output()
            .unwrap(),
    );
    assert_eq!(
        v["declared_containment"], "sealed",
        "the strongest floor wins"
    );
    assert_eq!(v["read_only_paths"][0], ".git");
    assert_eq!(v["network_mode"], "allow");
    assert_eq!(v["network_allow"][0], "api.example.com:80,443");
    let mem = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "memory")
        .unwrap();
    assert_eq!(mem["requested"], (2u64 << 30) as f64);
}

#[test]
fn bad_flag_values_name_the_flag_and_exit_2() {
    let s = Sandbox::new();
    for (args, needle) in [
        (&["--memory", "lots"][..], "--memory lots"),
        (&["--timeout", "30"][..], "--timeout 30"),
        (&["--allow-net", "https://x.com/"][..], "--allow-net"),
        (
            &["--network", "none", "--allow-net", "x.com"][..],
            "--network",
        ),
        (&["--mount", "a:b:c:d"][..], "--mount"),
        (
            &["--workdir", "/nonexistent-cofferdam-dir"][..],
            "--workdir",
        ),
    ] {
        let out = s.cmd().arg("scope").args(args).output().unwrap();
        assert_usage_error(&out, &[needle]);
    }
    let out = s
        .cmd()
        .args(["scope", "--containment", "strong"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn doctor_lists_each_mechanism() {
    let s = Sandbox::new();
    let v = json_of(&s.cmd().args(["doctor", "--json"]).output().unwrap());
    let ids: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for id in [
        "kernel",
        "seccomp",
        "landlock",
        "userns",
        "apparmor",
        "overlay",
        "netns",
        "pidns",
        "cgroup_v2",
        "cgroup_v1",
        "user",
    ] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    let facts = facts_without_userns(&s);
    let out = s
        .cmd()
        .args(["doctor", "--host-facts"])
        .arg(&facts)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("missing"), "{text}");
    assert!(
        text.contains("fix: install cofferdam's AppArmor profile"),
        "{text}"
    );
    let out = s
        .cmd()
        .args(["doctor", "--host-facts", "nope.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let bad = s.write("bad.json", "{\"kernel_release\": 3}");
    let out = s
        .cmd()
        .args(["doctor", "--host-facts"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_usage_error(&out, &["kernel_release"]);
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cofferdam-record/tests/fixtures")
}

#[test]
fn bundle_verify_accepts_valid_and_names_the_field_of_invalid() {
    let s = Sandbox::new();
    let ok = s
        .cmd()
        .args(["bundle", "verify"])
        .arg(fixtures().join("full.json"))
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    for (file, field) in [
        ("schema_v3.json", "schema_version"),
        ("schema_v5.json", "schema_version"),
        ("missing_run_id.json", "run.run_id"),
        (
            "missing_executor_observations.json",
            "executor_observations",
        ),
    ] {
        let out = s
            .cmd()
            .args(["bundle", "verify"])
            .arg(fixtures().join(file))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{file}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(field),
            "{file}: {out:?}"
        );
        let v = json_of(
            &s.cmd()
                .args(["bundle", "verify", "--json"])
                .arg(fixtures().join(file))
                .output()
                .unwrap(),
        );
        assert_eq!(v["valid"], false);
        assert!(
            v["path"].as_str().unwrap().starts_with(field),
            "{file}: {v}"
        );
    }
    let garbage = s.write("garbage.json", "{not json");
    let out = s
        .cmd()
        .args(["bundle", "verify"])
        .arg(&garbage)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = s
        .cmd()
        .args(["bundle", "verify", "absent.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bundle_schema_is_the_committed_one() {
    let s = Sandbox::new();
    let out = s.cmd().args(["bundle", "schema"]).output().unwrap();
    assert!(out.status.success());
    let committed = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema/run-bundle.v4.json"),
    )
    .unwrap();
    assert_eq!(out.stdout, committed);
}

#[test]
fn completions_man_page_and_color() {
    let s = Sandbox::new();
    let out = s.cmd().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("cofferdam"));
    let out = s.cmd().arg("man").output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with(".ie"),
        "roff"
    );
    let plain = s.cmd().arg("doctor").output().unwrap();
    assert!(
        !plain.stdout.contains(&0x1b),
        "no colour when not a terminal"
    );
    let forced = s
        .cmd()
        .args(["doctor", "--color", "always"])
        .output()
        .unwrap();
    assert!(forced.stdout.contains(&0x1b));
}
