//! `scope` and `run` agree (issue 18): for a matrix of tier cap × network mode × mount mode ×
//! floor, `scope --json` says `floor_met: false` exactly when `run` refuses (exit 125, before
//! a job exists), and for a run that goes ahead every grant the report lists (lent mounts,
//! read-only paths, hidden paths, network mode) is what the bundle's observations show
//! installed. On the advisory tier the report lists no hidden path and no network filter.

use crate::common::{Sandbox, json_of, landlock_abi_independently, require, userns_independently};
use serde_json::Value;
use std::path::Path;

fn last_bundle(store: &Path) -> Value {
    let dir = std::fs::read_dir(store.join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("run-bundle.json").exists())
        .expect("a job with a bundle");
    serde_json::from_str(&std::fs::read_to_string(dir.join("run-bundle.json")).unwrap()).unwrap()
}

/// The enforced control of `mechanism` on `dimension`, if the bundle has one.
fn control<'a>(b: &'a Value, mechanism: &str, dimension: &str) -> Option<&'a Value> {
    b["executor_observations"]["controls"]
        .as_array()?
        .iter()
        .find(|c| {
            c["mechanism"] == mechanism && c["dimension"] == dimension && c["status"] == "enforced"
        })
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The bundle shows every grant of `r` installed.
fn grants_hold(r: &Value, b: &Value, what: &str) {
    let tier = r["enforcement_tier"].as_str().unwrap();
    let hidden = r["hidden_paths"].as_array().unwrap().len();
    let mode = r["network_mode"].as_str().unwrap();
    if tier == "none" {
        assert_eq!(hidden, 0, "{what}: advisory lists hidden paths: {r}");
        assert_eq!(mode, "host", "{what}: advisory lists a network filter: {r}");
        assert!(control(b, "netns", "network").is_none(), "{what}");
        assert!(
            control(b, "secrets_hidden", "filesystem_read").is_none(),
            "{what}"
        );
        return;
    }
    if tier == "mountns+pivot_root+landlock+seccomp" {
        let root = control(b, "pivot_root", "filesystem_write").expect("pivot_root");
        let mounts = strings(&root["details"]["mounts"]);
        for p in r["host_paths"].as_array().unwrap() {
            if p["mode"] != "hide" {
                let t = p["target"].as_str().unwrap().to_owned();
                assert!(mounts.contains(&t), "{what}: {t} not mounted: {root}");
            }
        }
        let ro = strings(&root["details"]["read_only"]);
        for p in strings(&r["read_only_paths"]) {
            assert!(
                ro.iter().any(|x| x.ends_with(&p)),
                "{what}: read-only {p} not installed: {root}"
            );
        }
        let net = control(b, "netns", "network");
        match mode {
            "host" => assert!(net.is_none(), "{what}: {net:?}"),
            _ => assert_eq!(
                net.map(|n| n["details"]["mode"].clone()),
                Some(Value::from(mode)),
                "{what}"
            ),
        }
        let secrets = control(b, "secrets_hidden", "filesystem_read").expect("secrets_hidden");
        assert_eq!(
            secrets["details"]["hidden"].as_u64(),
            Some(hidden as u64),
            "{what}: {secrets}"
        );
    } else {
        // Landlock hides the listed paths; system files it cannot take away (/etc/shadow
        // beneath a granted /etc) are `partial` and named there, and are not in the list.
        let secrets = b["executor_observations"]["controls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["mechanism"] == "secrets_hidden")
            .expect("secrets_hidden");
        assert!(
            secrets["details"]["checked"].as_u64() >= Some(hidden as u64),
            "{what}: {secrets}"
        );
        let exposed = strings(&secrets["details"]["exposed"]);
        for p in strings(&r["hidden_paths"]) {
            assert!(
                !exposed.contains(&p),
                "{what}: {p} listed hidden, exposed: {secrets}"
            );
        }
        let filter = control(b, "seccomp", "network");
        assert_eq!(filter.is_some(), mode == "none", "{what}: {filter:?}");
        assert!(r["host_paths"].as_array().unwrap().is_empty(), "{what}");
        assert!(strings(&r["read_only_paths"]).is_empty(), "{what}");
        assert_ne!(mode, "allow", "{what}");
    }
}

#[test]
fn scope_says_floor_not_met_exactly_when_run_refuses_and_its_grants_hold() {
    if !require("user namespaces", userns_independently())
        || !require("Landlock", landlock_abi_independently() > 0)
    {
        return;
    }
    let src = tempfile::tempdir().unwrap();
    let lend = |mode: &str| format!("--mount={}:/lend:{mode}", src.path().display());
    let mounts: Vec<Vec<String>> = vec![
        vec![],
        vec![lend("read")],
        vec![lend("write")],
        vec![lend("stage")],
        vec!["--read-only=sub".to_owned()],
    ];
    let nets: [&[&str]; 3] = [
        &["--network", "none"],
        &["--network", "allow", "--allow-net", "example.com"],
        &["--network", "host"],
    ];
    // Floors: met on every tier (advisory), and the default (scoped) which `--tier advisory`
    // falls below; the sealed floor only on the cheap row.
    let mut cases: Vec<Vec<String>> = Vec::new();
    for tier in ["sealed", "scoped", "advisory"] {
        for floor in ["advisory", "scoped"] {
            for net in nets {
                for m in &mounts {
                    let mut a = vec![format!("--tier={tier}"), format!("--containment={floor}")];
                    a.extend(net.iter().map(|s| s.to_string()));
                    a.extend(m.iter().cloned());
                    cases.push(a);
                }
            }
        }
        cases.push(vec![
            format!("--tier={tier}"),
            "--containment=sealed".to_owned(),
        ]);
    }
    let (mut refused, mut ran) = (0, 0);
    for args in &cases {
        let what = args.join(" ");
        let s = Sandbox::new();
        std::fs::create_dir(s.work.path().join("sub")).unwrap();
        let out = s
            .cmd()
            .arg("scope")
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{what}: {out:?}");
        let r = json_of(&out);
        let run = s
            .cmd()
            .arg("run")
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        let met = r["floor_met"].as_bool().unwrap();
        if met {
            assert_eq!(
                run.status.code(),
                Some(0),
                "{what}: scope promised, run: {stderr}"
            );
            grants_hold(&r, &last_bundle(s.store.path()), &what);
            ran += 1;
        } else {
            assert_eq!(run.status.code(), Some(125), "{what}: {stderr}");
            let reason = r["shortfall_reason"].as_str().unwrap();
            assert!(
                stderr.contains(&format!("refusing to run: {reason}")),
                "{what}: scope says {reason:?}, run says {stderr}"
            );
            assert!(
                std::fs::read_dir(s.store.path().join("jobs"))
                    .map_or(true, |mut d| d.next().is_none()),
                "{what}: a refused run made a job"
            );
            refused += 1;
        }
    }
    // The matrix has both sides, so the agreement is tested on each.
    assert!(refused > 10 && ran > 10, "refused {refused}, ran {ran}");
}

/// A profile's optional credential file that does not exist on this host (here a user
/// profile's `~/.mine/.credentials.json`, beside a present `settings.json`, in its state
/// dir): `scope` does not list it as an effective grant (text: a `skipped` row and no
/// `granted by`; `--json`: its `filesystem.mounts` row is `absent`), and the run agrees:
/// the bundle lends every mount row that is not absent and none that is, records the
/// absent one as skipped in `run.warnings`, and its trace's effective grants mark it too.
#[test]
fn a_profile_credential_absent_here_is_no_grant_in_scope_nor_in_the_run() {
    if !require("user namespaces", userns_independently()) {
        return;
    }
    let s = Sandbox::new();
    let home = s.home.path();
    let cfg = home.join(".config/cofferdam/config.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(
        &cfg,
        "[profiles.mine]\nprograms = [\"mine\"]\nstate_dirs = [\"~/.mine\"]\n\
         read_paths = [\"~/.mine/.credentials.json\", \"~/.mine/settings.json\"]\n",
    )
    .unwrap();
    std::fs::create_dir(home.join(".mine")).unwrap();
    std::fs::write(home.join(".mine/settings.json"), "{}").unwrap();
    let creds = home.join(".mine/.credentials.json").display().to_string();
    let settings = home.join(".mine/settings.json").display().to_string();
    let flags = ["--agent", "mine", "--network", "none"];

    let r = json_of(
        &s.cmd()
            .args(["scope", "--json"])
            .args(flags)
            .output()
            .unwrap(),
    );
    let mounts: Vec<&Value> = r["grant_sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["grant"] == "filesystem.mounts")
        .collect();
    let row = |p: &str| {
        mounts
            .iter()
            .find(|g| g["value"] == format!("{p} -> {p} (read)"))
            .unwrap_or_else(|| panic!("no row for {p}: {mounts:?}"))
    };
    assert_eq!(row(&creds)["absent"], true, "{mounts:?}");
    assert!(row(&settings).get("absent").is_none(), "{mounts:?}");
    let text = s.cmd().arg("scope").args(flags).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let granted: Vec<&str> = text.lines().filter(|l| l.contains("granted by")).collect();
    // (Its `filesystem.creatable` row stays: the run can create it, and that is set aside.)
    assert!(
        !granted
            .iter()
            .any(|l| l.contains("filesystem.mounts") && l.contains(".credentials.json")),
        "{text}"
    );
    assert!(granted.iter().any(|l| l.contains(&settings)), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("skipped read") && l.contains(&creds)),
        "{text}"
    );

    let run = s
        .cmd()
        .arg("run")
        .args(flags)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let b = last_bundle(s.store.path());
    let lent: Vec<String> = b["filesystem"]["access_policy"]["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["source"].as_str().unwrap().to_owned())
        .collect();
    for g in &mounts {
        let source = g["value"].as_str().unwrap().split(" -> ").next().unwrap();
        assert_eq!(
            lent.iter().any(|l| l == source),
            g.get("absent").is_none(),
            "scope row {g} vs the bundle's mounts {lent:?}"
        );
    }
    let warnings = b["run"]["warnings"].to_string();
    assert!(
        warnings.contains("optional mount ~/.mine/.credentials.json (profile:mine) skipped"),
        "{warnings}"
    );
    let trace = std::fs::read_dir(s.store.path().join("jobs"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("trace.jsonl"))
        .find(|p| p.exists())
        .expect("a trace");
    let trace = std::fs::read_to_string(trace).unwrap();
    let start = trace
        .lines()
        .find(|l| l.contains("effective_grants"))
        .expect("the session start");
    assert!(start.contains("\"absent\":true"), "{start}");
}
